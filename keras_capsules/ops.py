"""Small shared math for the layers, written with ``keras.ops`` only.

Everything here is differentiable with finite gradients at the edge cases that capsule
networks hit in practice (zero vectors, fully masked rows), and runs on any Keras
backend.
"""

import math
import numbers

import keras
from keras import ops

__all__ = [
    "MASK_VALUE", "routing_dtype", "safe_norm", "squash", "matmul", "conv", "conv_sum", "maximum",
    "minimum", "divide_no_nan", "max_with_initial", "min_with_initial", "mean", "tanh", "masked_softmax",
    "shifted_softmax", "cond", "recomputed_where",
]

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


# Squared norms that leave a dtype's safe range are recomputed from the vectors
# multiplied by a fixed power of two (exact, so the result is the plain formula's
# up to the rounding of subnormals), which brings them back into range:
# (squared norm at or above which the vector is scaled down, that scale, squared
# norm below which it is scaled up, that scale). float32 squares overflow for
# components above about 1.8e19 and leave the normal range below about 1e-19.
_RANGES = {
    "float32": (2.0**100, 2.0**-70, 2.0**-100, 2.0**86),
    "float64": (2.0**1000, 2.0**-600, 2.0**-1000, 2.0**600),
}


# Above this norm squash returns the unit vector: |v|^2 / (1 + |v|^2) is 1 in
# float32 and float64 alike, and |v|^2 may overflow.
_UNIT_NORM = 2.0**50
# Above this norm squash takes the gradient of |v| / (1 + |v|^2) from 1 / (|v| + 1 / |v|),
# which stays in range (the value is the plain formula's at every norm).
_LONG_NORM = 2.0**20


def _float_dtype(dtype):
    """``dtype`` if it is a floating dtype, else float32 (integer and boolean inputs
    give float results, as in ``keras.ops.norm`` / ``keras.ops.softmax``, instead of
    results truncated back to integers)."""
    dtype = keras.backend.standardize_dtype(dtype)
    return dtype if dtype.startswith(("float", "bfloat")) else "float32"


def _norm_parts(x, axis, epsilon, with_direction=False):
    """The norm of the vectors of ``x`` (float32 or float64) along ``axis`` (kept,
    length 1), and with ``with_direction`` the pair ``(direction, norm)``.

    ``norm`` is ``|x|`` (0 for norms below ``epsilon``) and ``direction`` is
    ``x / |x|`` (0 for zero vectors; unspecified for other norms below ``epsilon``),
    both without overflow or underflow:

    * Vectors whose squared norm lies in the dtype's safe range (every ordinary
      input; for float32 ``[2**-100, 2**100)``) use the plain formula
      ``sqrt(sum(x * x))``, bit for bit as before.
    * Longer vectors are multiplied by a fixed small power of two ``s``
      (``2**-70`` for float32), shorter ones by a large one (``2**86``; only when
      ``epsilon`` is below ``2**-50``, as such vectors are zero otherwise): their
      norm is ``|x s| / s`` and their direction ``x s / |x s|``. No branch and no
      extra reduction for the largest component, so ordinary inputs run as fast.
      (For the longer vectors the norm's gradient multiplies incoming gradients by
      ``1 / s`` on the way: for norms above about 1.8e19 an incoming gradient beyond
      about 2**58 can overflow. The direction's gradient has no such factor; use it
      where a direction is what is needed. For the shorter ones the norm's gradient
      is taken as ``x / |x|`` directly: through ``1 / s`` it was flushed to zero.)

    Squares are formed as ``x * x`` (not ``square``, whose gradient doubles ``x``
    and overflows above half the dtype's maximum). Gradients are finite at zero
    vectors (zero) and wherever the norm is finite.
    """
    big_at, big_scale, small_at, small_scale = _RANGES[keras.backend.standardize_dtype(x.dtype)]
    squared = ops.sum(x * x, axis=axis, keepdims=True)
    big = ~(squared < big_at)  # inf and NaN too (NaN stays NaN)
    use_small = epsilon < small_at**0.5
    small = (squared < small_at) if use_small else None
    plain = ~big if small is None else ~big & ~small
    tiny = ops.cast(epsilon * epsilon, x.dtype)

    def scaled_parts(scale, where):
        """``(direction, norm)`` of the vectors selected by ``where`` (x * scale)."""
        # Only the vectors that need it are scaled: others would overflow (or
        # underflow), and inf * 0 in the gradient is NaN.
        y = ops.where(where, x * scale, ops.zeros_like(x))
        sq = ops.sum(y * y, axis=axis, keepdims=True)
        # A NaN vector (which `big` selects) stays NaN: with "> 0" alone its norm was 0,
        # which hid NaN weights from the losses built on norms. (isnan, not "~(sq <= 0)":
        # TensorFlow's graph optimizer rewrites the latter into "sq > 0".)
        nan = ops.isnan(sq)
        positive = where & ((sq > 0) | nan)
        y_root = ops.sqrt(ops.where(positive, sq, ops.ones_like(sq)))
        # y / root, not y * (1 / root): XLA folds the latter with the constant
        # scale into x * (scale / root), which underflows to 0.
        direction = y / y_root
        norm = y_root / scale
        if scale > 1:
            # Tiny vectors: the gradient of y_root / scale carried incoming gradients
            # through 1 / scale (2**-86 in float32), where they were flushed to zero. The
            # same value, with the norm's gradient taken as the direction's, |x|' = x / |x|.
            along = ops.sum(x * ops.stop_gradient(direction), axis=axis, keepdims=True)
            norm = ops.stop_gradient(norm - along) + along
        return direction, ops.where(positive & ((norm > epsilon) | nan), norm, ops.zeros_like(norm))

    safe = ops.where(plain & (squared > tiny), squared, ops.ones_like(squared))
    root = ops.sqrt(safe)
    norm = ops.where(squared > tiny, root, ops.zeros_like(root))
    direction = x * (1.0 / root) if with_direction else None
    for flag, scale in ((big, big_scale), (small, small_scale)):
        if flag is None:
            continue
        flag_direction, flag_norm = scaled_parts(scale, flag)
        norm = ops.where(flag, flag_norm, norm)
        if with_direction:
            direction = ops.where(flag, flag_direction, direction)
    return (direction, norm) if with_direction else norm


def _standard_axis(axis):
    """``axis`` with numpy integers (an axis, or in a tuple or list of axes) as Python
    ints, as ``keras.ops.sum`` takes them; other values are returned as they are.

    ``mean`` iterated a numpy integer axis ("'numpy.int64' object is not iterable") and
    ``safe_norm``'s squeeze refused one ("`value` must be an integer, tuple or list").
    """
    if isinstance(axis, numbers.Integral) and not isinstance(axis, bool):
        return int(axis)
    if isinstance(axis, (list, tuple)):
        return tuple(_standard_axis(a) for a in axis)
    return axis


def _check_epsilon(epsilon):
    # A NaN or infinite epsilon made every norm 0 (no norm is above it), a negative
    # one acted as its absolute value.
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0 <= epsilon < math.inf:
        raise ValueError(f"`epsilon` must be a finite number >= 0. Received: epsilon={epsilon!r}")
    return float(epsilon)


def safe_norm(x, axis=-1, keepdims=False, epsilon=1e-12):
    """Euclidean norm with a finite (zero) gradient at ``x = 0``.

    ``sqrt(sum(x^2))`` has an infinite derivative at 0, which turns into NaN through
    the chain rule. Here the square root is taken of ``max(sum(x^2), epsilon^2)`` where
    the sum is positive enough, and 0 is returned (with a zero gradient) elsewhere.

    Vectors whose squared norm leaves the dtype's range (float32 norms above
    ``2**50``, about 1.1e15, or, with ``epsilon`` below ``2**-50``, under ``2**-50``)
    are multiplied by a fixed power of two before squaring, so their norm is finite
    and accurate where ``sum(x^2)`` would overflow to inf (float32 norms above about
    1.8e19) or underflow to 0; results for all other inputs are unchanged. float16
    and bfloat16 inputs are computed in float32 (their squares overflow above 256)
    and cast back; integer and boolean inputs give a float32 norm.

    Args:
        x: tensor.
        axis: axis (or axes) to reduce.
        keepdims: keep reduced axes with length 1.
        epsilon: norms below this are treated as exactly zero (a finite number >= 0).

    Returns:
        The norm of ``x`` along ``axis``.
    """
    epsilon = _check_epsilon(epsilon)
    axis = _standard_axis(axis)
    x = ops.convert_to_tensor(x)
    dtype = _float_dtype(x.dtype)
    norm = _norm_parts(ops.cast(x, routing_dtype(dtype)), axis, epsilon)
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
    in float32 and cast back; integer and boolean inputs give float32 results.

    Gradients are the true derivatives at every norm, except below ``epsilon``: there the
    norm is taken as 0 (as in :func:`safe_norm`), so the result is 0 with a zero gradient
    (the true value is about ``|v| v``, of length below ``epsilon**2``, and its derivative
    is of the order of ``|v|``, below ``2 * epsilon``).

    Args:
        x: tensor of capsule vectors.
        axis: the capsule-vector axis.
        epsilon: passed to :func:`safe_norm`.

    Returns:
        Tensor of the same shape, every vector scaled to a length in ``[0, 1)``
        (1 up to rounding for vectors longer than ``2**50``).
    """
    epsilon = _check_epsilon(epsilon)
    x = ops.convert_to_tensor(x)
    dtype = _float_dtype(x.dtype)
    x = ops.cast(x, routing_dtype(dtype))
    direction, norm = _norm_parts(x, axis, epsilon, with_direction=True)
    huge = norm > _UNIT_NORM
    # Each branch sees safe inputs, so neither feeds inf or NaN into the gradient.
    small = ops.where(huge, ops.zeros_like(norm), norm)
    factor = small / (1.0 + ops.square(small))
    # The gradient of |v| / (1 + |v|^2) divides by (1 + |v|^2)^2, which leaves the
    # float32 range for |v| beyond about 1e9: JAX squares the denominator (0 above ~4e9,
    # gradients off by 100% for norms from ~1e10), TensorFlow divides twice (subnormal
    # near 1e14). For long vectors the gradient is taken from the same quantity written
    # 1 / (|v| + 1 / |v|); the value stays the plain formula's, bit for bit (the two
    # differ by a few ulp, so their difference and its sum with the second are exact).
    long = (norm > _LONG_NORM) & ~huge
    medium = ops.where(long, norm, ops.ones_like(norm))
    stable = 1.0 / (medium + 1.0 / medium)
    factor = ops.where(long, ops.stop_gradient(factor - stable) + stable, factor)
    squashed = ops.where(huge, direction, x * factor)
    return ops.cast(squashed, dtype)


# ------------------------------------------------------------------ float64 on JAX and torch
# Keras' type promotion maps float64 to float32 on JAX (keras.backend.result_type, to
# match JAX without x64, whatever ``jax_enable_x64`` says), and some ``keras.ops`` compute
# in ``result_type(x.dtype, float)``: on JAX ``ops.tanh`` of float64 returns float32
# (trigonometric and hyperbolic ops alike) and ``ops.mean`` / ``ops.var`` accumulate
# float64 in float32 (relative errors ~1e-7 with float64 inputs and ``jax_enable_x64``).
# On torch the same promotion goes further: ``ops.matmul``, ``ops.maximum`` and
# ``ops.minimum`` (also of two float64 tensors), ``ops.tensordot``, ``ops.cumsum`` and
# ``ops.var`` return float32 for float64 inputs. The helpers below give the op in the
# input's precision on every backend.


def _float64_lost(result, *operands):
    """Whether a float64 tensor among ``operands`` gave a ``result`` of another dtype."""
    standardize = keras.backend.standardize_dtype
    return standardize(result.dtype) != "float64" and any(
        hasattr(x, "dtype") and standardize(x.dtype) == "float64" for x in operands
    )


def matmul(x1, x2):
    """``keras.ops.matmul(x1, x2)``, in float64 for float64 operands on every backend.

    Where the backend's ``matmul`` returns float32 for float64 operands (torch, see
    above), the product is taken with ``ops.einsum``, which keeps float64 (``x2`` of
    rank 2 contracts the last axis of ``x1``; otherwise batch axes broadcast as in
    ``matmul``). Elsewhere, and for other dtypes, this is ``keras.ops.matmul`` itself.
    """
    result = ops.matmul(x1, x2)
    if not _float64_lost(result, x1, x2):
        return result
    x1, x2 = ops.cast(x1, "float64"), ops.cast(x2, "float64")
    return ops.einsum("...j,jk->...k" if len(x2.shape) == 2 else "...ij,...jk->...ik", x1, x2)


def conv(inputs, kernel, padding="valid"):
    """``keras.ops.conv(inputs, kernel, padding=padding)`` (channels last, stride 1),
    also differentiable on torch's CPU convolution for a one-output-channel kernel.

    Keras' torch backend permutes the kernel ``[*spatial, in, out]`` to
    ``[out, in, *spatial]`` and keeps the view (it is channels-last contiguous). With
    ``out == 1`` that view gives the size-1 output axis a stride of 1, and torch's
    ``slow_conv2d`` (its CPU convolution for float16 and float64) fails in the backward
    pass: "slow_conv2d: grad_weight must be contiguous" (torch 2.14.1, also a plain
    ``keras.layers.Conv2D(1, 3)`` under ``mixed_float16``). The kernel is therefore
    passed as a transpose of a ``[1, *spatial, in]`` reshape, the same values, whose
    size-1 axis has the largest stride. The values, and so the results on TensorFlow
    and JAX, are those of ``keras.ops.conv`` itself.
    """
    if kernel.shape[-1] == 1:
        rank = len(kernel.shape)
        kernel = ops.reshape(kernel, (1,) + tuple(kernel.shape[:-1]))
        kernel = ops.transpose(kernel, tuple(range(1, rank)) + (0,))
    return ops.conv(inputs, kernel, padding=padding)


def conv_sum(inputs, kernels, padding="valid"):
    """``sum_i conv(inputs[i], kernels[i])`` as one convolution (channels last, stride 1).

    The inputs are concatenated along their channels and the kernels along their
    input channels, so the result is the same sum of products (up to the order of
    floating-point additions) computed by one convolution instead of ``len(inputs)``
    convolutions and their sum. A Recurrent Ladder's convolutional encoder adds a
    convolution of its bottom-up input to one of the decoder feedback (and, in a
    ConvLSTM level, one of its state) at every level and step; on a CPU a training step
    of the Occluded Moving MNIST ladder was about 4% faster with one convolution per
    level (``benchmarks/rladder_measurements.md``, seventeenth round).

    Args:
        inputs: tensors ``[batch, *spatial, c_i]`` of the same batch and spatial shape
            and dtype.
        kernels: as many kernels ``[*spatial_k, c_i, out]``, of the same spatial size
            and ``out``.
        padding: ``"valid"`` (default) or ``"same"``.
    """
    inputs, kernels = list(inputs), list(kernels)
    if not inputs or len(inputs) != len(kernels):
        raise ValueError(
            f"`conv_sum` needs as many kernels as inputs, at least one. Received: {len(inputs)} inputs, "
            f"{len(kernels)} kernels"
        )
    if len(inputs) == 1:
        return conv(inputs[0], kernels[0], padding=padding)
    return conv(ops.concatenate(inputs, axis=-1), ops.concatenate(kernels, axis=-2), padding=padding)


def _extremum(op, x1, x2, keep_first):
    result = op(x1, x2)
    if not _float64_lost(result, x1, x2):
        return result
    x1, x2 = ops.cast(x1, "float64"), ops.cast(x2, "float64")
    # NaN propagates from either side, as in keras.ops.maximum / minimum
    return ops.where(keep_first(x1, x2) | ops.isnan(x1), x1, x2)


def maximum(x1, x2):
    """``keras.ops.maximum(x1, x2)``, float64 for float64 operands on every backend
    (torch's returns float32 for them, see above)."""
    return _extremum(ops.maximum, x1, x2, lambda a, b: a >= b)


def minimum(x1, x2):
    """``keras.ops.minimum(x1, x2)``, float64 for float64 operands on every backend
    (torch's returns float32 for them, see above)."""
    return _extremum(ops.minimum, x1, x2, lambda a, b: a <= b)


def divide_no_nan(x1, x2):
    """``x1 / x2``, 0 where ``x2`` is 0 (with a zero gradient there), in the operands'
    dtype on every backend (``keras.ops.divide_no_nan`` on torch divides in
    ``keras.backend.result_type`` of the operands, float32 for float64 ones)."""
    zero = x2 == 0
    return ops.where(zero, ops.zeros_like(x1), x1 / ops.where(zero, ops.ones_like(x2), x2))


def _reduce_with_initial(reduce, combine, x, axis, keepdims, initial):
    """``reduce`` (``ops.amax`` / ``ops.amin``) of ``x`` over ``axis``, combined with
    ``initial`` by ``combine`` (``maximum`` / ``minimum``); see :func:`max_with_initial`."""
    if not isinstance(x, keras.KerasTensor):  # (a symbolic input stays symbolic)
        x = ops.convert_to_tensor(x)
    if axis is None:
        # every axis, listed: Keras' torch ``amax`` / ``sum`` with ``axis=None`` drop
        # the kept axes (a 0-d result, not [1, ..., 1])
        axis = tuple(range(len(x.shape)))
    if hasattr(initial, "dtype"):  # a tensor (or a NumPy scalar)
        initial = ops.cast(initial, x.dtype)
    else:
        initial = ops.convert_to_tensor(initial, dtype=x.dtype)
    if any(d == 0 for d in x.shape):
        # Where a reduced axis is empty the sum over it is 0 everywhere, and otherwise
        # the result is empty too: its shape, filled with ``initial`` (``where``, which
        # keeps a signed zero), still connected to ``x`` for gradients.
        total = ops.sum(x, axis=axis, keepdims=keepdims)
        return ops.where(ops.ones_like(total, dtype="bool"), initial, total)
    return combine(reduce(x, axis=axis, keepdims=keepdims), initial)


def max_with_initial(x, axis=None, keepdims=False, *, initial):
    """``keras.ops.max(x, axis, keepdims, initial=initial)`` on every backend, also
    inside ``torch.compile`` and for empty tensors.

    Why it exists: Keras' torch ``ops.max`` / ``ops.min`` (3.15) test
    ``isinstance(result.values, torch.Tensor)`` on every result (for torch's
    ``(values, indices)`` pairs). ``torch.compile`` cannot trace that test for a plain
    tensor, whose ``values`` is a method ("builtin isinstance() cannot determine type
    of argument"), so every call broke the compiled graph. This reduces with
    ``ops.amax``, which has no such test, and then takes the initial value with
    :func:`maximum`, as TensorFlow's ``ops.max`` does (``reduce_max``, then
    ``maximum``) and as ``jnp.max`` does: TensorFlow's graph, and so what XLA
    compiles, is the one ``ops.max`` gave, and TensorFlow and JAX outputs and
    gradients are bit for bit those of ``ops.max(..., initial=initial)`` (with the
    ``amax`` alone, XLA fused RTagger's iterations otherwise and rounded some outputs
    and gradients ~2e-6 differently).

    The initial value is what ``ops.max`` needed it for: an empty tensor is no error.
    Where ``x`` has an axis of length 0 (known when traced) the result is returned at
    once, ``initial`` wherever the reduced axes are empty (an empty result where
    another axis is empty), as in numpy; TensorFlow's eager ``amax`` refuses empty
    tensors ("Cannot compute the max of an empty tensor"), and Keras' torch
    ``ops.max`` returned a result of the wrong shape for them.

    Args:
        x: tensor.
        axis: an axis, a tuple of axes, or None (all axes).
        keepdims: keep the reduced axes (length 1).
        initial: the lower bound of the result, a Python number or a 0-d tensor,
            taken in the dtype of ``x``.

    Returns:
        A tensor of the dtype of ``x`` (float16 and float64 included, on every backend).
    """
    return _reduce_with_initial(ops.amax, maximum, x, axis, keepdims, initial)


def min_with_initial(x, axis=None, keepdims=False, *, initial):
    """``keras.ops.min(x, axis, keepdims, initial=initial)`` on every backend, also
    inside ``torch.compile`` and for empty tensors: :func:`max_with_initial` with
    ``ops.amin`` and :func:`minimum` (``initial`` is the upper bound of the result).
    """
    return _reduce_with_initial(ops.amin, minimum, x, axis, keepdims, initial)


def _promotion_keeps_float64():
    """True where Keras' type promotion keeps float64 (TensorFlow), False on JAX."""
    return keras.backend.result_type("float64", float) == "float64"


def mean(x, axis=None, keepdims=False):
    """The mean of ``x`` over ``axis`` in float32, or in float64 for float64 inputs,
    cast back to the dtype of ``x``: a sum divided by the count.

    ``keras.ops.mean`` averages float64 in float32 on JAX (see above); this computes
    the mean in the input's precision on every backend (float16 and bfloat16 inputs
    are summed in float32, so they do not overflow either).

    Integer and boolean inputs give a float32 mean (as ``keras.ops.mean`` does), not
    one truncated to an integer: ``mean([1, 2])`` is 1.5. (Integers above 2**24 are
    rounded to float32 first.)
    """
    x = ops.convert_to_tensor(x)  # a list has no dtype (the other functions here take lists)
    axis = _standard_axis(axis)
    dtype = keras.backend.standardize_dtype(x.dtype)
    if not dtype.startswith(("float", "bfloat")):
        dtype = "float32"  # an integer (or boolean) mean is not an integer
    x = ops.cast(x, routing_dtype(dtype))
    if axis is None and keepdims and len(x.shape):
        # every axis named: Keras' torch ``sum(axis=None, keepdims=True)`` drops the
        # kept axes (a 0-d total, not [1, ..., 1])
        axis = tuple(range(len(x.shape)))
    total = ops.sum(x, axis=axis, keepdims=keepdims)
    axes = range(len(x.shape)) if axis is None else (axis,) if isinstance(axis, int) else axis
    sizes = [x.shape[a] for a in axes]
    if all(isinstance(d, int) for d in sizes):
        count = math.prod(sizes)
    else:  # an axis of unknown size (a KerasTensor, a trace): the count when it runs
        count = ops.cast(ops.size(x) // ops.maximum(ops.size(total), 1), x.dtype)
    return ops.cast(total / count, dtype)


def tanh(x):
    """``keras.ops.tanh(x)``, in float64 for float64 inputs on every backend.

    On JAX ``keras.ops.tanh`` of float64 computes (and returns) float32 (see above);
    there float64 inputs take ``tanh(x) = -expm1(-2x) / (2 + expm1(-2x))`` for
    ``x >= 0`` (and the odd reflection below 0), accurate to a few ulps for all
    ``x`` (no cancellation near 0, ``+-1`` for large ``|x|``) with the right gradient
    everywhere (1 at 0). Other dtypes and backends use ``keras.ops.tanh``.
    """
    if keras.backend.standardize_dtype(x.dtype) != "float64" or _promotion_keeps_float64():
        return ops.tanh(x)
    positive = x >= 0
    t = ops.expm1(ops.where(positive, -2.0 * x, 2.0 * x))  # expm1(-2|x|), in (-1, 0]
    return ops.where(positive, -t, t) / (2.0 + t)


def masked_softmax(logits, mask=None, axis=-1):
    """Softmax over ``axis`` where positions with ``mask == False`` get zero weight.

    Masked positions get exactly zero weight and no gradient, whatever values their
    logits hold (NaN and +-inf included); a fully masked row gives zeros (not NaN), and
    so does a row whose kept logits are all -inf. Real logits far below
    :data:`MASK_VALUE` still share their row's weight. It is :func:`shifted_softmax`
    (finite, with float64-true gradients, also for saturated rows and for logits of
    1e9-1e12 under XLA), with or without a mask.

    Args:
        logits: tensor of scores.
        mask: boolean tensor broadcastable to the shape of ``logits`` (no more
            dimensions, each of the same length or 1), or None.
        axis: the axis to normalise over.

    The softmax runs in float32 (float64 for float64 logits) and is cast back to the
    dtype of ``logits``; integer and boolean logits give float32 probabilities.

    A mask does not switch to TensorFlow's fused softmax kernel: that kernel gives a
    saturated row (one logit far above the others) the weight 1 - 6e-8 where float64
    gives 1 - 1e-20, an error its gradient carries, multiplied by the logits' size
    through a product (458 where float64 gives 0, at logits of 1e9). The written-out
    softmax costs ~1.5x the fused one's time in a TensorFlow graph and ~1.2x under XLA
    (forward + backward of [32, 8, 280, 64] on 2 CPU cores); a masked EMRouting(None, 2)
    step at the SST shape ~1.03x and ~1.1x.
    """
    return shifted_softmax(logits, axis=axis, mask=mask)


def shifted_softmax(logits, axis=-1, mask=None):
    """Softmax over ``axis``, written out, finite for any finite logits; positions with
    ``mask == False`` (a boolean tensor broadcastable to ``logits``, or None) get
    exactly zero weight and no gradient.

    ``exp(x - max(x)) / sum(exp(x - max(x)))`` with the largest kept logit as the
    (gradient-free) shift, in float32 (float64 for float64 logits), cast back to the
    dtype of ``logits``. A fully masked row, and a row whose kept logits are all -inf,
    gives zeros; a NaN logit gives its row NaN weights, as in ``keras.ops.softmax``.
    The routing couplings and RTagger's masks use it. Not ``keras.ops.softmax``, for two
    defects at logits of ~1e6 and more (all of a row's weight on one entry):

    * TensorFlow's fused softmax kernel's gradient was off by up to 1e6 for such
      saturated rows (float64 gives 1e-16 to 4 there); this formula's gradient
      matches float64 on every backend.
    * XLA (``jax.jit``, ``tf.function(jit_compile=True)``) may compute an elementwise
      ``x`` (a product such as ``u * v``) anew inside the maximum and inside the
      exponential, and on CPUs with FMA round the copies differently
      (``fma(u, v, -max)``: one rounding instead of two): at logits of 1e9 and more,
      ``x - max(x)`` at the largest logit was then up to half a float32 ulp of the
      logits (32 at 1e9, 32768 at 1e12) instead of 0, and ``exp`` of it overflowed or
      underflowed in every term: NaN weights. Here ``x`` is clipped at the row's
      maximum (no term exceeds 1), and a row whose every term underflowed takes all
      of its weight on its largest kept logit (what the softmax of such a row is, up
      to the rounding of its logits).

    It costs more than the fused ``keras.ops.softmax`` (about twice the kernels in a
    TensorFlow graph without XLA; ~10% of EMRouting's step without a mask of its
    outputs, which keeps the fused one).
    """
    logits = ops.convert_to_tensor(logits)
    dtype = _float_dtype(logits.dtype)
    logits = ops.cast(logits, routing_dtype(dtype))
    if mask is not None:
        mask = ops.cast(mask, "bool")
        _check_mask_shape(mask.shape, logits.shape)
    lowest = ops.cast(float("-inf"), logits.dtype)
    # (masked positions: exp(-inf - top) = 0, whose gradient is 0 too)
    kept = logits if mask is None else ops.where(mask, logits, lowest)
    # (``initial``: an empty batch or axis is no error, as in ops.softmax)
    top = max_with_initial(kept, axis=axis, keepdims=True, initial=lowest)
    # A row with no finite maximum (fully masked, or every kept logit -inf) is shifted
    # by 0: its exponentials are all 0 and so are its weights.
    empty = top == lowest
    top = ops.stop_gradient(ops.where(empty, ops.zeros_like(top), top))
    # where, not ops.minimum: minimum's gradient at a tie is halved on JAX and torch
    e = ops.exp(ops.where(kept > top, top, kept) - top)
    total = ops.sum(e, axis=axis, keepdims=True)
    some = (total > 0) | ops.isnan(total)  # (a NaN logit: NaN weights)
    weights = e / ops.where(some, total, ops.ones_like(total))
    # (weights <= 1 also where the sum was taken of another rounding of x than e)
    weights = ops.where(weights > 1, ops.ones_like(weights), weights)
    shape = tuple(logits.shape)
    if 0 not in shape:  # (no row or no entries: nothing can underflow, nor be argmax-ed)
        # A row whose every term underflowed (x - max below ~-87 even at its largest
        # logit, computed there with another rounding) takes its weight on that logit.
        axis = axis % len(shape)
        n = shape[axis] if shape[axis] is not None else ops.shape(logits)[axis]
        # (top_k, not argmax: Keras' TensorFlow argmax of floats bitcasts for -0.0, an op
        # TFLite's builtin ops cannot run; the routing layers convert with builtins only)
        index = ops.top_k(ops.moveaxis(kept, axis, -1), 1)[1][..., 0]
        largest = ops.one_hot(index, n, axis=axis, dtype=weights.dtype)
        weights = ops.where((total == 0) & ~empty, largest, weights)
    return ops.cast(weights, dtype)


def _check_mask_shape(mask_shape, logits_shape):
    """Refuses a mask that does not broadcast to the logits' shape (lengths not known
    before the call are not checked): one that broadcast them up gave weights of
    another shape, without an error."""
    try:
        mask_shape, logits_shape = tuple(mask_shape), tuple(logits_shape)
    except (TypeError, ValueError):  # a shape of unknown rank (in a trace): not checked
        return
    fits = len(mask_shape) <= len(logits_shape) and all(
        m is None or n is None or m in (1, n)
        for m, n in zip(reversed(mask_shape), reversed(logits_shape))
    )
    if not fits:
        raise ValueError(
            "`mask` must be broadcastable to the shape of `logits` (no more dimensions, "
            f"each of the same length or 1). Received: mask.shape={mask_shape}, "
            f"logits.shape={logits_shape}"
        )


def cond(pred, true_fn, false_fn):
    """``keras.ops.cond(pred, true_fn, false_fn)`` for branches that return a sequence
    of tensors (given as a tuple), also inside ``torch.compile``.

    Why it exists: Keras' torch ``ops.cond`` (3.15) is a Python ``if`` on ``pred``,
    which ``torch.compile`` cannot trace when ``pred`` is a tensor ("data-dependent
    branching"): the compiled graph broke at every call. ``torch.cond`` (torch 2.13)
    compiles only when both branches' outputs have the same memory layout, which
    inductor does not keep for einsum results. So while ``torch.compile`` traces, both
    branches run and ``pred`` selects between their outputs (gradients reach the
    selected branch only); everywhere else it is ``ops.cond``, which runs the one
    branch ``pred`` picks (eager torch included).
    """
    from keras_capsules._validation import _traced_by_torch_compile

    if _traced_by_torch_compile():
        return tuple(ops.where(pred, t, f) for t, f in zip(true_fn(), false_fn()))
    return tuple(ops.cond(pred, lambda: tuple(true_fn()), lambda: tuple(false_fn())))


def recomputed_where(pred, fn, args, like):
    """``fn(*args)`` where ``pred`` (a boolean scalar tensor) holds, else zeros shaped
    as ``like``: ``fn`` runs only then, and a backward pass recomputes it rather than
    keeping its intermediates.

    ``fn`` returns a sequence of tensors shaped as the tuple ``like``; ``args`` are
    floating-point tensors (``fn`` reads no variable, and tensors it captures get no
    gradient through it), and gradients reach ``args`` through ``fn``'s
    outputs where ``pred`` holds (zeros elsewhere). Combine the result with what the
    other case computes by ``keras.ops.where(pred, ...)``.

    Why it exists: a conditional that is differentiated keeps, for its gradient, the
    intermediates of the branch it took, and XLA allocates them for both branches
    (zeros for the one not taken): a conditional routing by votes took 10x the time
    of the routing beside it, never taken. So the branch recomputes in the backward
    pass (``keras.remat``). On TensorFlow, a ``tf.recompute_grad`` inside ``tf.cond``
    fails ``cond_v2``'s gradient ("AssertionError" in ``_resolve_grad_inputs``)
    wherever the gradient is taken in another graph than the forward pass: a
    persistent ``tf.GradientTape`` inside a ``tf.function``, or a tape around a call of
    one. There the conditional runs inside a ``tf.custom_gradient`` whose gradient is
    a second conditional that recomputes ``fn`` under a tape where ``pred`` holds;
    traced, its entry in TensorFlow's process-wide gradient registry (which otherwise
    kept the graph, and through it the layer and model, for good) is tied to the graph
    at once, and so are the entries registered before it
    (``keras_capsules._graph_release``). Elsewhere it is :func:`cond` of
    ``keras.remat(fn)``.
    """
    args = tuple(args)

    def zeros_like(tensors):
        return tuple(ops.zeros_like(t) for t in tensors)

    if keras.backend.backend() != "tensorflow":
        return cond(pred, lambda: tuple(keras.remat(fn)(*args)), lambda: zeros_like(like))
    import tensorflow as tf

    @tf.custom_gradient
    def recomputed(*args):
        outputs = tf.cond(pred, lambda: tuple(fn(*args)), lambda: zeros_like(like))

        def gradient(*upstream):
            upstream = [tf.zeros_like(o) if u is None else u for u, o in zip(upstream, outputs)]

            def taken():
                with tf.GradientTape() as tape:
                    tape.watch(args)
                    again = tuple(fn(*args))
                found = tape.gradient(again, args, output_gradients=upstream)
                return tuple(tf.zeros_like(a) if g is None else g for a, g in zip(args, found))

            return tf.cond(pred, taken, lambda: zeros_like(args))

        return outputs, gradient

    outputs = tuple(recomputed(*args))
    if not tf.executing_eagerly():  # traced: the registry entry goes with this graph
        from keras_capsules._graph_release import release_gradients_of

        # (plain Python: AutoGraph, converting the caller, need not convert it)
        tf.autograph.experimental.do_not_convert(release_gradients_of)(outputs)
    return outputs
