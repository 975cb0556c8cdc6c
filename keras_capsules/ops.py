"""Small shared math for the layers, written with ``keras.ops`` only.

Everything here is differentiable with finite gradients at the edge cases that capsule
networks hit in practice (zero vectors, fully masked rows), and runs on any Keras
backend.
"""

from keras import ops

#: The large finite negative used for masked logits (never -inf or -1e30, which
#: overflow in float16 and turn softmax gradients into NaN).
MASK_VALUE = -1e9


def routing_dtype(compute_dtype):
    """The dtype routing and attention math runs in for a layer's compute dtype.

    float64 layers stay in float64; float16/bfloat16/float32 layers route in float32
    (mixed precision keeps softmax, log-sum-exp and variance math in float32).
    """
    return "float64" if str(compute_dtype) == "float64" else "float32"


def safe_norm(x, axis=-1, keepdims=False, epsilon=1e-12):
    """Euclidean norm with a finite (zero) gradient at ``x = 0``.

    ``sqrt(sum(x^2))`` has an infinite derivative at 0, which turns into NaN through
    the chain rule. Here the square root is taken of ``max(sum(x^2), epsilon^2)`` where
    the sum is positive enough, and 0 is returned (with a zero gradient) elsewhere.

    Args:
        x: tensor.
        axis: axis (or axes) to reduce.
        keepdims: keep reduced axes with length 1.
        epsilon: norms below this are treated as exactly zero.

    Returns:
        The norm of ``x`` along ``axis``.
    """
    squared = ops.sum(ops.square(x), axis=axis, keepdims=keepdims)
    tiny = ops.cast(epsilon * epsilon, squared.dtype)
    positive = squared > tiny
    safe = ops.where(positive, squared, ops.ones_like(squared))
    return ops.where(positive, ops.sqrt(safe), ops.zeros_like(squared))


def squash(x, axis=-1, epsilon=1e-12):
    """The capsule non-linearity of Sabour et al. 2017.

    ``squash(v) = |v|^2 / (1 + |v|^2) * v / |v|``, which equals ``|v| / (1 + |v|^2) * v``:
    the second form has no division by ``|v|``, so values and gradients are finite at
    ``v = 0`` (where the result is 0).

    Args:
        x: tensor of capsule vectors.
        axis: the capsule-vector axis.
        epsilon: passed to :func:`safe_norm`.

    Returns:
        Tensor of the same shape, every vector scaled to a length in ``[0, 1)``.
    """
    norm = safe_norm(x, axis=axis, keepdims=True, epsilon=epsilon)
    return x * (norm / (1.0 + ops.square(norm)))


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
