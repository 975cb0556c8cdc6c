"""Shared plumbing of the MAC layers: argument checks, weight helpers, masks.

Private to ``keras_capsules.layers.mac``; the public layers are in the sibling modules.
"""

import numbers

import keras
from keras import ops

from keras_capsules.layers._own_casting import OwnCastingLayer
from keras_capsules._validation import (  # noqa: F401 (re-exported to the MAC layers)
    GENERATOR_SEED_MODULUS,
    boolean,
    check_floating_dtype,
    exactly_shaped_like,
    generator_seed,
    get_constraint,
    get_initializer,
    get_regularizer,
    positive_int,
    rate,
    seed_value,
)
from keras_capsules.layers._initializers import fresh_initializer, narrow_float_safe  # noqa: F401 (used by the MAC layers)
from keras_capsules.ops import matmul, max_with_initial, routing_dtype


def activation_name(name, value, allowed=(None, "elu")):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {allowed}. Received: {name}={value!r}")
    return value


def _is_input(x):
    """A tensor or a shape (an entry of a list of inputs or of input shapes)."""
    return hasattr(x, "shape") or hasattr(x, "as_list") or isinstance(x, (list, tuple))


def as_list(inputs, n_allowed, layer_name, description):
    """``inputs`` as a list whose length is one of ``n_allowed``; else a clear error.

    ``inputs`` is a list of tensors or of shapes. A single tensor, or the shape of one
    (a tuple of sizes, as Keras passes it to ``build``), is refused as such: it was
    read as a list of its sizes ("Received: 3" for a rank-3 tensor, or a TypeError).
    """
    is_list = isinstance(inputs, (list, tuple)) and not hasattr(inputs, "as_list")
    if is_list and len(inputs) in n_allowed and all(_is_input(x) for x in inputs):
        return list(inputs)
    if is_list and all(_is_input(x) for x in inputs):
        got = f"{len(inputs)} inputs"
    elif hasattr(inputs, "shape") or hasattr(inputs, "as_list") or is_list:
        shape = tuple(inputs.shape) if hasattr(inputs, "shape") else tuple(inputs)
        got = f"a single input of shape {shape}"
    else:
        got = type(inputs).__name__
    raise ValueError(f"{layer_name} expects a list of inputs {description}. Received: {got}")


def check_shape(shape, rank, what, expected, layer_name, known_last=True):
    """Validates rank (and a known last axis) of one input shape."""
    shape = tuple(shape)
    if len(shape) != rank or (known_last and shape[-1] is None):
        raise ValueError(
            f"{layer_name} expects {what} of shape {expected}"
            f"{' with a known last axis' if known_last else ''}. "
            f"Received: {what} shape={shape}"
        )
    return shape


def check_same_axis(named_shapes, layer_name, axis=0, what="batch size"):
    """All known sizes of ``axis`` agree across ``named_shapes`` (``(name, shape)`` pairs).

    Unknown sizes (``None``, e.g. a symbolic batch) are skipped; when two known sizes
    differ, a ``ValueError`` names every input and its shape (instead of a backend
    error from deep inside the layer).
    """
    known = {s[axis] for _, s in named_shapes if s[axis] is not None}
    if len(known) > 1:
        received = ", ".join(f"{name} shape={tuple(s)}" for name, s in named_shapes)
        raise ValueError(
            f"{layer_name} expects its inputs to have the same {what} (axis {axis}). "
            f"Received: {received}"
        )


def pick_mask(mask, index, key):
    """The mask of one input out of what Keras propagates (a list, dict or tensor)."""
    if mask is None:
        return None
    if isinstance(mask, dict):
        return mask.get(key)
    if isinstance(mask, (list, tuple)):
        return mask[index] if index < len(mask) else None
    return mask


def combine_masks(*masks):
    """Logical AND of the masks that are not None (None if all are None)."""
    out = None
    for m in masks:
        if m is None:
            continue
        m = ops.cast(m, "bool")
        out = m if out is None else ops.logical_and(out, m)
    return out


def check_mask_shape(mask, values_shape, what, layer_name):
    """The sizes of a ``[batch, n]`` mask against those of its values ``[batch, n, d]``,
    where both are known: another rank or size is a ``ValueError``.

    The layers run it on every call, symbolic too (``compute_output_spec``): a mask of
    the wrong shape was accepted when the model was built and refused only in predict.
    Returns ``mask`` (nested Python lists as a tensor), or None for None.
    """
    if mask is None:
        return None
    if not hasattr(mask, "shape"):  # nested Python lists, as the other masks accept
        mask = ops.convert_to_tensor(mask)
    if len(mask.shape) != 2:
        raise ValueError(
            f"{layer_name} expects {what} of shape [batch, n] (rank 2). "
            f"Received: {what} shape={tuple(mask.shape)}"
        )
    for a, b in zip(mask.shape, values_shape[:2]):
        if a is not None and b is not None and a != b:
            raise ValueError(
                f"{layer_name}: {what} must have shape {tuple(values_shape[:2])} to match "
                f"its values. Received: {what} shape={tuple(mask.shape)}"
            )
    return mask


def check_mask(mask, values, what, layer_name):
    """A ``[batch, n]`` mask for ``values`` ``[batch, n, d]``, as a boolean tensor.

    Sizes known at the call are checked here (:func:`check_mask_shape`); where one is
    unknown (a ``tf.function`` traced for any batch or ``n``), the mask must match when
    the layer runs (see :func:`exactly_shaped_like`): a ``[batch, 1]`` mask was
    broadcast silently over the positions, masking all of them or none.
    """
    mask = check_mask_shape(mask, tuple(values.shape), what, layer_name)
    if mask is None:
        return None
    mask = ops.cast(mask, "bool")
    if None in tuple(mask.shape) or None in tuple(values.shape[:2]):
        mask = exactly_shaped_like(mask, ops.ones(ops.shape(values)[:2], "bool"))
    return mask


def attend(logits, values, mask):
    """Masked softmax over axis 1 of ``logits`` ``[b, n]``, then ``sum_n w v``.

    Runs in float32 (float64 for float64 values) whatever the compute dtype. The
    softmax is mask-aware and exact for any finite logits: the largest *unmasked*
    logit of each row is subtracted, the exponentials of masked positions are set to
    exactly zero and the rest are normalised by their own sum. (A fill value such as
    -1e9 is not used: it would take all the weight of a row whose real logits all lie
    below it.) Masked values are zeroed too, so masked positions never change the
    result or a gradient, whatever their logits and values hold.

    A fully masked row (and a row with no positions) gives zero weights and a zero
    sum, with zero (finite) gradients. Returns ``(weighted_sum, weights)`` cast back
    to the dtype of ``values``.
    """
    dtype = values.dtype
    work = routing_dtype(dtype)
    logits = ops.cast(logits, work)
    values = ops.cast(values, work)
    lowest = ops.cast(float("-inf"), work)
    if mask is not None:
        values = ops.where(mask[:, :, None], values, ops.zeros_like(values))
        logits = ops.where(mask, logits, lowest)
    # ``initial``: an empty batch, or no positions, gives empty weights and a zero sum,
    # not "Cannot compute the max of an empty tensor". A fully masked row has no
    # finite maximum: it is shifted by 0 (all its exponentials are zeroed below).
    top = max_with_initial(logits, axis=1, keepdims=True, initial=lowest)
    top = ops.stop_gradient(ops.where(ops.isfinite(top), top, ops.zeros_like(top)))
    if mask is None:
        # Written out (not ops.softmax) so that a single position (the first step of
        # the write unit's self-attention) raises no warning.
        exp = ops.exp(logits - top)
        weights = exp / ops.sum(exp, axis=1, keepdims=True)
    else:
        # exp of 0 (not of -inf) at masked positions, then zeroed: no inf or NaN in
        # the discarded branch reaches a gradient.
        shifted = ops.where(mask, logits - top, ops.zeros_like(logits))
        exp = ops.where(mask, ops.exp(shifted), ops.zeros_like(shifted))
        total = ops.sum(exp, axis=1, keepdims=True)
        # >= 1 wherever a position is unmasked (the top one contributes exp(0));
        # 0 only for a fully masked row, whose weights are then 0 / 1 = 0.
        weights = exp / ops.where(total > 0, total, ops.ones_like(total))
    summed = ops.einsum("bn,bnd->bd", weights, values)
    return ops.cast(summed, dtype), ops.cast(weights, dtype)


class MACLayerBase(OwnCastingLayer):
    """Initializers, regularizers and constraints of kernels and biases.

    Weights stay in the variable dtype (float32); ``autocast`` is off and every layer
    casts its inputs and weights itself: projections run in the compute dtype,
    attention logits and softmaxes in float32.
    """

    def __init__(
        self,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.kernel_initializer = get_initializer("kernel_initializer", kernel_initializer)
        self.bias_initializer = get_initializer("bias_initializer", bias_initializer)
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.bias_regularizer = get_regularizer("bias_regularizer", bias_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.bias_constraint = get_constraint("bias_constraint", bias_constraint)

    def _salt(self, name):
        """What sets a seeded initializer's copy for weight ``name`` apart (see
        :func:`fresh_initializer`): the class and weight names, so that weights of
        one shape start different and the same seed gives the same weights."""
        return f"{type(self).__name__}/{name}"

    def add_kernel(self, name, shape, initializer=None, per_step=False):
        """A kernel weight with the layer's kernel options. ``per_step``: the weight
        stacks one matrix per step on its first axis; the regularizer and constraint
        then act on each step's matrix (as on any kernel), not on the stack. (An
        ``Orthogonal`` initializer of a 16-bit weight draws in float32: ``OwnCastingLayer``.)"""
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=fresh_initializer(initializer or self.kernel_initializer, self._salt(name)),
            regularizer=per_step_regularizer(self.kernel_regularizer) if per_step else self.kernel_regularizer,
            constraint=per_step_constraint(self.kernel_constraint) if per_step else self.kernel_constraint,
        )

    def add_bias(self, name, shape, initializer=None, per_step=False):
        """A bias weight with the layer's bias options (``per_step``: as ``add_kernel``)."""
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=fresh_initializer(initializer or self.bias_initializer, self._salt(name)),
            regularizer=per_step_regularizer(self.bias_regularizer) if per_step else self.bias_regularizer,
            constraint=per_step_constraint(self.bias_constraint) if per_step else self.bias_constraint,
        )

    def dense(self, x, kernel, bias):
        """``x @ kernel + bias`` in the dtype of ``x`` (weights cast to it)."""
        return matmul(x, ops.cast(kernel, x.dtype)) + ops.cast(bias, x.dtype)

    def logit(self, x, kernel, bias):
        """A scalar score per position, ``x @ kernel + bias`` in float32: ``[..., 1] -> [...]``."""
        work = routing_dtype(x.dtype)
        out = matmul(ops.cast(x, work), ops.cast(kernel, work)) + ops.cast(bias, work)
        return ops.squeeze(out, axis=-1)

    def to_compute(self, x):
        return ops.cast(x, self.compute_dtype)

    def weight_config(self):
        """Constructor arguments of sublayers: the serialized weight options."""
        return {
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        }

    @classmethod
    def from_config(cls, config):
        if "gate_bias_initializer" in config and not config.get("memory_gate", True):
            # Files saved before the constructor refused it without the gate, which it
            # never initialized: they load, with the default in its place (no effect).
            config = dict(config, gate_bias_initializer=None)
        return super().from_config(config)

    def get_config(self):
        config = super().get_config()
        config.update(self.weight_config())
        return config


def _step_seed(seed, step):
    """The seed of step ``step``'s copy of an initializer seeded with ``seed``.

    ``seed + step`` for a seed below ``2**31`` (the streams these layers always drew,
    even where ``seed + step`` passes ``2**31 - 1``), else ``(seed + step) % 2**31``
    as :func:`generator_seed` gives the layers' generators: ``seed + step`` of a seed
    near ``2**63 - 1`` overflowed int64, and JAX holds no seed of ``2**32`` or more.
    """
    seed = int(seed)
    return seed + step if seed < GENERATOR_SEED_MODULUS else generator_seed(seed, step)


def _step_copy(initializer, step):
    """A copy of ``initializer`` for step ``step``: a seeded one gets the seed
    ``_step_seed(seed, step)``, so the steps differ and stay reproducible.

    One seeded with a ``keras.random.SeedGenerator`` is used as it is: it draws new
    values at every call, whereas copies made from its config each restarted a generator
    at the same seed, and every step started with the same matrix. So is one without a
    ``seed`` (a deterministic initializer: its copy could lose arguments).
    """
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    if isinstance(getattr(initializer, "seed", None), keras.random.SeedGenerator):
        return initializer
    config = initializer.get_config()
    if "seed" not in config:
        return initializer
    seed = config.get("seed")
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        config["seed"] = _step_seed(seed, step)
    return initializer.__class__.from_config(config)


def per_step_constraint(constraint):
    """``constraint`` applied to each step's slice of a ``[steps, ...]`` weight.

    A Keras constraint acts on one kernel: on the stack, ``UnitNorm`` (axis 0)
    normalized across the steps, and ``MaxNorm`` or ``MinMaxNorm`` too. None stays None.
    """
    if constraint is None:
        return None

    def apply(w):
        return ops.stack([constraint(w[i]) for i in range(w.shape[0])])

    return apply


def per_step_regularizer(regularizer):
    """The sum of ``regularizer`` over each step's slice of a ``[steps, ...]`` weight.

    The same value for an elementwise penalty (L1, L2); a penalty of one matrix
    (``OrthogonalRegularizer``, rank 2 only) failed on the stack. None stays None.
    """
    if regularizer is None:
        return None

    def apply(w):
        return ops.sum(ops.stack([regularizer(w[i]) for i in range(w.shape[0])]))

    return apply


def per_step_initializer(initializer, steps):
    """An initializer of ``[steps, fan_in, fan_out]`` that initialises each step's
    ``[fan_in, fan_out]`` matrix on its own (so fans are those of one matrix, and the
    steps start different, also with a seeded initializer; an ``Orthogonal`` one draws
    16-bit matrices in float32, see :func:`narrow_float_safe`)."""

    def init(shape, dtype=None):
        return ops.stack(
            [
                narrow_float_safe(_step_copy(initializer, i))(tuple(shape[1:]), dtype=dtype)
                for i in range(steps)
            ]
        )

    return init
