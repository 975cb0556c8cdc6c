"""Small shared math for the layers, written with ``keras.ops`` only.

Everything here is differentiable with finite gradients at the edge cases that capsule
networks hit in practice (zero vectors, fully masked rows), and runs on any Keras
backend.
"""

import keras
from keras import ops

#: The large finite negative used for masked logits (never -inf or -1e30, which
#: overflow in float16 and turn softmax gradients into NaN).
MASK_VALUE = -1e9


def routing_dtype(compute_dtype):
    """The dtype routing and attention math runs in for a layer's compute dtype.

    float64 layers stay in float64; float16/bfloat16/float32 layers route in float32
    (mixed precision keeps softmax, log-sum-exp and variance math in float32).
    Accepts dtype names and backend dtype objects (such as a tensor's ``.dtype``).
    """
    return "float64" if keras.backend.standardize_dtype(compute_dtype) == "float64" else "float32"


# Vectors whose largest component lies outside [2**-60, 2**50] (about 8.7e-19 to
# 1.1e15) are rescaled before their components are squared: squares of float32
# values overflow to inf above about 1.8e19 and leave the normal range below about
# 1e-19. Inside the range (every ordinary input) no scaling happens, so results are
# bit-identical to the plain formula; 2**50 leaves room for sums of up to 2**28
# squared components.
_SCALE_FREE_MAX = 2.0**50
_SCALE_FREE_MIN = 2.0**-60


def _norm_parts(x, axis, epsilon):
    """``(direction, norm)`` of the vectors of ``x`` along ``axis`` (kept, length 1).

    ``direction`` is ``x / |x|`` (0 for zero vectors) and ``norm`` is ``|x|`` (0 for
    norms below ``epsilon``), both computed without overflow or underflow:

    * Vectors whose largest absolute component lies in ``[2**-60, 2**50]`` (every
      ordinary input), and zero, inf or NaN vectors, use the plain formula
      ``sqrt(sum(x^2))``, bit for bit as before.
    * Other vectors are divided by their largest absolute component ``s`` first, so
      ``sum((x / s)^2)`` lies in ``[1, n]``. Their norm is formed as
      ``sum(x * direction)`` with the direction held constant for the gradient: its
      value is ``|x|`` and its gradient exactly the direction, never an overflowing
      ``s * sqrt(...)`` chain.

    Gradients are finite at zero vectors (zero) and wherever the norm is finite.
    """
    largest = ops.stop_gradient(ops.max(ops.abs(x), axis=axis, keepdims=True))
    rescale = (
        ops.isfinite(largest)
        & (largest > 0)
        & ((largest > _SCALE_FREE_MAX) | (largest < _SCALE_FREE_MIN))
    )
    scaled = x / ops.where(rescale, largest, ops.ones_like(largest))
    squared = ops.sum(ops.square(scaled), axis=axis, keepdims=True)
    positive_sum = squared > 0
    root = ops.sqrt(ops.where(positive_sum, squared, ops.ones_like(squared)))
    # root >= 1 for rescaled vectors, 1 for zero vectors. (A product, not a second
    # division: XLA turns x / s / root into x / (s * root), which overflows.)
    direction = scaled * (1.0 / root)
    held = ops.stop_gradient(ops.where(rescale, direction, ops.zeros_like(direction)))
    rescaled_norm = ops.sum(x * held, axis=axis, keepdims=True)
    norm = ops.where(rescale, rescaled_norm, root)
    tiny = ops.cast(epsilon * epsilon, squared.dtype)
    positive = ops.where(rescale, positive_sum & (norm > epsilon), squared > tiny)
    return direction, ops.where(positive, norm, ops.zeros_like(norm))


def safe_norm(x, axis=-1, keepdims=False, epsilon=1e-12):
    """Euclidean norm with a finite (zero) gradient at ``x = 0``.

    ``sqrt(sum(x^2))`` has an infinite derivative at 0, which turns into NaN through
    the chain rule. Here the square root is taken of ``max(sum(x^2), epsilon^2)`` where
    the sum is positive enough, and 0 is returned (with a zero gradient) elsewhere.

    Vectors with very large or very small components (beyond ``2**50`` or below
    ``2**-60`` in absolute value) are divided by their largest absolute component
    before squaring, so their norm is finite and accurate where ``sum(x^2)`` would
    overflow to inf (float32 norms above about 1.8e19) or underflow to 0; results
    for all other inputs are unchanged. float16 and bfloat16 inputs are computed in
    float32 (their squares overflow above 256) and cast back.

    Args:
        x: tensor.
        axis: axis (or axes) to reduce.
        keepdims: keep reduced axes with length 1.
        epsilon: norms below this are treated as exactly zero.

    Returns:
        The norm of ``x`` along ``axis``.
    """
    x = ops.convert_to_tensor(x)
    dtype = x.dtype
    _, norm = _norm_parts(ops.cast(x, routing_dtype(dtype)), axis, epsilon)
    if not keepdims:
        norm = ops.squeeze(norm, axis=axis)
    return ops.cast(norm, dtype)


def squash(x, axis=-1, epsilon=1e-12):
    """The capsule non-linearity of Sabour et al. 2017.

    ``squash(v) = |v|^2 / (1 + |v|^2) * v / |v|``, which equals ``|v| / (1 + |v|^2) * v``:
    the second form has no division by ``|v|``, so values and gradients are finite at
    ``v = 0`` (where the result is 0). For ``|v|`` above ``2**50``, where
    ``|v|^2 / (1 + |v|^2)`` is 1 to the working precision and ``|v|^2`` may overflow,
    the result is the unit vector ``v / |v|`` (from the overflow-free norm of
    :func:`safe_norm`), never zeros or NaN. float16 and bfloat16 inputs are computed
    in float32 and cast back.

    Args:
        x: tensor of capsule vectors.
        axis: the capsule-vector axis.
        epsilon: passed to :func:`safe_norm`.

    Returns:
        Tensor of the same shape, every vector scaled to a length in ``[0, 1)``
        (1 up to rounding for vectors longer than ``2**50``).
    """
    x = ops.convert_to_tensor(x)
    dtype = x.dtype
    x = ops.cast(x, routing_dtype(dtype))
    direction, norm = _norm_parts(x, axis, epsilon)
    huge = norm > _SCALE_FREE_MAX
    # Each branch sees safe inputs, so neither feeds inf or NaN into the gradient.
    small = ops.where(huge, ops.zeros_like(norm), norm)
    squashed = ops.where(huge, direction, x * (small / (1.0 + ops.square(small))))
    return ops.cast(squashed, dtype)


def masked_softmax(logits, mask=None, axis=-1):
    """Softmax over ``axis`` where positions with ``mask == False`` get zero weight.

    Masked logits are replaced by :data:`MASK_VALUE` before the softmax and their
    weights set to exactly zero after it, so a fully masked row gives zeros (not NaN)
    whatever values the masked logits held.

    Args:
        logits: tensor of scores.
        mask: boolean tensor broadcastable to ``logits``, or None.
        axis: the axis to normalise over.

    The softmax runs in float32 (float64 for float64 logits) and is cast back.
    """
    dtype = logits.dtype
    logits = ops.cast(logits, routing_dtype(dtype))  # float16 cannot hold MASK_VALUE
    if mask is None:
        return ops.cast(ops.softmax(logits, axis=axis), dtype)
    mask = ops.cast(mask, "bool")
    # Shift the largest unmasked logit to 0 first (softmax is shift-invariant): the
    # fill then stays negligible even when real logits lie below MASK_VALUE, which
    # would otherwise take all the weight and leave a real row summing to 0.
    lowest = ops.cast(float("-inf"), logits.dtype)
    top = ops.max(ops.where(mask, logits, lowest), axis=axis, keepdims=True)
    top = ops.stop_gradient(ops.where(ops.isfinite(top), top, ops.zeros_like(top)))
    fill = ops.cast(MASK_VALUE, logits.dtype)
    weights = ops.softmax(ops.where(mask, logits - top, fill), axis=axis)
    return ops.cast(ops.where(mask, weights, ops.zeros_like(weights)), dtype)
