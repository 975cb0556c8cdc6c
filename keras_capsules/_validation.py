"""Checks and tensor helpers shared by the modules of the package (and by ``applications``).

The constructor-argument checks (:func:`positive_int`, :func:`rate`, :func:`fraction`,
...) return the (normalised) value or raise ``ValueError`` quoting
``Received: name=value``, the house format for bad arguments. The tensor helpers
(:func:`concrete_values`, :func:`require_known_ranks`, :func:`like_values`, ...) serve
the layers and the losses, and the applications' losses built on
:class:`keras_capsules.losses.GlobalBatchLoss`: the module is private to the project,
not to one file, so its names carry no underscore.
"""

import math
import numbers

import keras
import numpy as np
from keras import ops


def positive_int(name, value, allow_none=False):
    """An integer >= 1 (numpy integers accepted; bools refused), or None if allowed."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def positive_float(name, value):
    """A finite real number > 0, returned as float."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0 < value < math.inf
    ):
        raise ValueError(f"`{name}` must be a positive, finite number. Received: {name}={value!r}")
    return float(value)


#: Seeds are non-negative integers that fit in int64 (as TensorFlow's seeds do).
MAX_SEED = 2**63 - 1

#: The random generators of the layers are seeded modulo this: every backend holds it
#: (JAX keeps a generator's state in uint32, TensorFlow in int64), and a seed plus a
#: small offset (see :func:`generator_seed`) cannot overflow.
GENERATOR_SEED_MODULUS = 2**31


def seed_value(seed):
    """``seed`` as a Python int in ``[0, 2**63 - 1]`` (numpy integers accepted) or None;
    else a clear error (floats, bools, strings, negative or larger integers)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"`seed` must be an integer or None. Received: seed={seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(
            f"`seed` must be an integer in [0, 2**63 - 1] or None. Received: seed={seed!r}"
        )
    return int(seed)


def generator_seed(seed, offset=0):
    """The seed a layer gives its ``keras.random.SeedGenerator`` for the (validated)
    ``seed``: ``(seed + offset) % 2**31`` (None stays None, for a random seed).

    Any valid seed works on every backend (a seed of ``2**63 - 1`` overflowed int64
    once offset, and JAX's uint32 generator state holds no seed of ``2**32`` or more),
    seeds below ``2**31 - offset`` are used as they are, and ``offset`` (e.g. 1 for a
    second generator of the same layer) keeps two generators of one seed apart.
    """
    if seed is None:
        return None
    return (int(seed) + int(offset)) % GENERATOR_SEED_MODULUS


def rate(name, value):
    """A real number in [0, 1) (dropout rates and the like), returned as float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")
    return float(value)


def fraction(name, value):
    """A real number in [0, 1], both ends included (fractions, momenta), returned as float.

    :func:`rate` is the same check without 1; NaN, infinities, bools and strings are
    refused by both.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ValueError(f"`{name}` must be a number in [0, 1]. Received: {name}={value!r}")
    return float(value)


def boolean(name, value):
    """True or False (numpy booleans too), returned as a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return bool(value)


def choice(name, value, options):
    """One of ``options``."""
    if value not in options:
        raise ValueError(f"`{name}` must be one of {tuple(options)}. Received: {name}={value!r}")
    return value


#: what a Keras initializer, regularizer or constraint may be given as, for the errors below
_KERAS_OBJECT_EXAMPLES = {"initializer": "'glorot_uniform'", "regularizer": "'l2'", "constraint": "'non_neg'"}


def _keras_object(kind, name, value):
    """``keras.<kind>s.get(value)``; a value Keras cannot read is a ``ValueError`` that names
    the argument (Keras' own, "Could not interpret initializer identifier: nope", did not)."""
    try:
        return getattr(keras, f"{kind}s").get(value)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"`{name}` must be a Keras {kind}: an instance, a name such as "
            f"{_KERAS_OBJECT_EXAMPLES[kind]}, a serialized config or None. Received: {name}={value!r}"
        ) from err


def get_initializer(name, value):
    """``keras.initializers.get(value)`` for the argument ``name``, refused in the house format."""
    return _keras_object("initializer", name, value)


def get_regularizer(name, value):
    """``keras.regularizers.get(value)`` for the argument ``name``, refused in the house format."""
    return _keras_object("regularizer", name, value)


def get_constraint(name, value):
    """``keras.constraints.get(value)`` for the argument ``name``, refused in the house format."""
    return _keras_object("constraint", name, value)


def check_floating_dtype(layer, note=""):
    """Refuses a layer whose compute dtype is not floating (``dtype="int32"``, "bool", ...).

    Every layer of the library computes real values (capsule poses and lengths,
    attention, gates, embeddings): cast back to an integer dtype they were silently
    truncated (lengths in ``[0, 1)`` became zeros), and integer or boolean weights
    failed in their initializer with a backend error that did not name the dtype.
    Layers call it in their constructor, right after ``super().__init__``; ``note``
    (a sentence) says more where the dtype may be mistaken for another one.
    """
    dtype = keras.backend.standardize_dtype(layer.compute_dtype)
    if not dtype.startswith(("float", "bfloat")):
        raise ValueError(
            f"`dtype` of {type(layer).__name__} must be a floating dtype or policy (e.g. "
            f"\"float32\", \"mixed_float16\").{' ' + note if note else ''} "
            f"Received: dtype={layer.dtype_policy.name}"
        )


def _traced_by_torch_compile():
    """True while ``torch.compile`` traces the call (never on other backends)."""
    if keras.backend.backend() != "torch":
        return False
    import torch

    return torch.compiler.is_compiling()


def concrete_values(x):
    """The values of ``x`` as numpy when they are known (eager), else None.

    For checks that can only run on concrete values: a KerasTensor or a tensor
    traced by ``tf.function``/XLA (any backend's symbolic tensor) gives None, and so
    does any tensor while ``torch.compile`` traces (``jit_compile=True`` on torch).
    Dynamo traces the conversion to numpy instead of refusing it: the values were
    taken for concrete, reading them broke the compiled graph at every call (dynamo
    cannot trace ``ndarray.dtype``), and dynamo ran the rest eagerly on the real
    values, where a check meant for eager calls raised (``CapsuleLoss``' class ids).
    """
    if isinstance(x, keras.KerasTensor) or _traced_by_torch_compile():
        return None
    try:
        return ops.convert_to_numpy(x)
    except Exception:  # symbolic tensors of any backend refuse conversion
        return None


def tensorflow_outside_xla():
    """True on TensorFlow where the ops being traced are not compiled by XLA.

    XLA drops run-time assertions (``tf.debugging.Assert``) and logs "Ignoring Assert
    operator" for each one at every compilation (a ``jit_compile=True`` fit compiles
    once per batch shape). Where TensorFlow cannot tell (the private helper it uses
    itself is gone), False: no assertion.
    """
    if keras.backend.backend() != "tensorflow":
        return False
    try:
        import tensorflow as tf
        from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
    except ImportError:
        return False
    return tf.executing_eagerly() or not GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def several_replicas():
    """The replica context when called inside the replica function of a ``tf.distribute``
    strategy of several replicas in sync (TensorFlow only), else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return None
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return None
    return context


def exactly_shaped_like(mask, like):
    """``mask``, which must have the shape of ``like`` (``[batch, n_inp]``).

    Layers check the sizes known when they are called. Where one is
    None there (a ``tf.function`` traced for any batch or ``n_inp``), a mask of
    ``[batch, 1]``, ``[1, n_inp]`` or ``[1, 1]`` would be broadcast silently over the
    inputs: stacking it with ``like`` (which needs equal shapes, and copies only the
    small boolean mask) makes such a mask fail when the layer runs, with the backend's
    shape error (keras.ops has no run-time assertion with a message of its own).
    The mask is taken back by unstacking: TensorFlow's graph optimizer rewrote a slice
    of the stack, ``stack[1]``, as the mask itself, dropping the check, where one of
    the two shapes was known (a ``[1, n_inp]`` mask against inputs of any batch).
    """
    if None not in tuple(mask.shape) and tuple(mask.shape) == tuple(like.shape):
        return mask
    return ops.unstack(ops.stack([like, mask]), num=2, axis=0)[1]


def check_built(layer_name, named_shapes):
    """The last axes of a built layer's inputs are those it was built for.

    ``named_shapes``: ``(name, shape, built_size)`` triples. Without the check, other
    feature sizes failed in a matmul with the backend's own error, or, for a
    convolution over a multiple of the built channels, ran silently as a grouped
    convolution on TensorFlow.

    Raises:
        ValueError: ``"This <layer> layer was built for <name> with a last axis of N.
        Received: <name> shape=..."``.
    """
    for what, shape, built in named_shapes:
        if shape[-1] is not None and built is not None and int(shape[-1]) != int(built):
            raise ValueError(
                f"This {layer_name} layer was built for {what} with a last axis of {int(built)}. "
                f"Received: {what} shape={tuple(shape)}"
            )


def _rank(x):
    """The rank of ``x``, or None where it is unknown (a tensor traced for
    ``tf.TensorSpec(shape=None)``)."""
    try:
        return len(x.shape)
    except (TypeError, ValueError):  # TensorFlow: "Cannot take the length of shape with unknown rank"
        return None


def require_known_ranks(loss, why, **tensors):
    """Refuses tensors of unknown rank with a ``ValueError`` naming them; ``loss`` names the
    loss, ``why`` says what it needs the rank for.

    A tensor has no known rank only inside a trace for ``tf.TensorSpec(shape=None)``, e.g.
    labels from a ``tf.data`` pipeline that lost their static shape (``tf.numpy_function``,
    ``tf.py_function``); the loss then failed deep in the trace with TensorFlow's "Cannot
    take the length of shape with unknown rank". Values that are no tensors yet (lists)
    are let through: their rank is known once converted.

    Raises:
        ValueError: ``"<loss> needs y_true and y_pred of known rank: <why>. ...
        Received: y_true shape=<unknown rank>, y_pred shape=(2, 3)"``.
    """
    if all(not hasattr(x, "shape") or _rank(x) is not None for x in tensors.values()):
        return
    shapes = ", ".join(
        f"{name} shape={'<unknown rank>' if _rank(x) is None else tuple(x.shape)}"
        for name, x in tensors.items() if hasattr(x, "shape")
    )
    names = list(tensors)
    names = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
    raise ValueError(
        f"{loss} needs {names} of known rank: {why}. Give them a static shape (in a tf.data "
        f"pipeline, e.g. with `tf.ensure_shape` after a `tf.numpy_function`). Received: {shapes}"
    )


def require_known_weight_rank(x, over):
    """Refuses a sample weight or mask ``x`` of unknown rank (a tensor traced for
    ``tf.TensorSpec(shape=None)``, e.g. from a ``tf.data`` pipeline that lost its static
    shape) with a ``ValueError``: which axes it has decides how the losses spread it over
    the per-value losses of shape ``over``. TensorFlow's own error, "Cannot take the length
    of shape with unknown rank", named neither the weights nor a remedy."""
    if _rank(x) is None:
        raise ValueError(
            "A sample weight or mask needs a known rank to be spread over the per-value losses, "
            f"{tuple(over)} (from a tf.data pipeline that lost its static shape, give it one "
            "with tf.ensure_shape). Received: a tensor of unknown rank"
        )


def require_aligned_sizes(shape, over, what, given=None):
    """Refuses a sample weight or mask of ``shape`` (already aligned with ``over`` from the
    left, of the same rank) whose sizes cannot be spread over ``over``: every axis must be
    of the same length or 1 where both are known.

    A weight of another batch size than the losses failed in the reduction with the
    backend's "Incompatible shapes: [3] vs. [4] [Op:BroadcastTo]" (or, for MixtureNLL's
    mask, "[Op:LogicalAnd]"), which named neither the weights nor the losses' shape.
    Sizes unknown until the graph runs are left to the backend. ``what`` names the
    argument ("sample_weight", "mask"); ``given`` is its shape as received (default
    ``shape``).

    Raises:
        ValueError: ``"A <what> is spread over the per-value losses <over> from the left:
        each of its axes must be of their length or 1. Received: <what> shape=..."``.
    """
    shape, over = tuple(shape), tuple(over)
    if any(a is not None and b is not None and a not in (1, b) for a, b in zip(shape, over)):
        raise ValueError(
            f"A {what} is spread over the per-value losses {over} from the left: each of its axes "
            f"must be of their length or 1. Received: {what} shape={tuple(shape if given is None else given)}"
        )


def like_values(values, x, dtype, what="sample weight or mask"):
    """A mask or weights ``x`` spread over ``values``, as the losses read them: a trailing
    axis of 1 beyond the values' rank is dropped (as Keras drops it), missing trailing
    axes are added (so ``[batch]`` weighs every value of a sample), then broadcast to the
    values' shape, in ``dtype``. ``what`` names ``x`` in the errors.

    Raises:
        ValueError: ``x`` has more axes than ``values`` (beyond a trailing one of 1), an
            axis of another length than the values' one it is aligned with (other than 1,
            :func:`require_aligned_sizes`), or an unknown rank
            (:func:`require_known_weight_rank`).
    """
    x = ops.cast(ops.convert_to_tensor(x), dtype)
    require_known_weight_rank(x, tuple(values.shape))
    given = tuple(x.shape)
    if len(x.shape) == len(values.shape) + 1 and x.shape[-1] == 1:
        x = ops.squeeze(x, axis=-1)
    if len(x.shape) > len(values.shape):
        raise ValueError(
            f"A sample weight or mask must have at most the rank of the per-value losses, "
            f"{tuple(values.shape)}. Received: shape={tuple(x.shape)}"
        )
    while len(x.shape) < len(values.shape):
        x = ops.expand_dims(x, axis=-1)
    require_aligned_sizes(x.shape, values.shape, what, given)
    return ops.broadcast_to(x, ops.shape(values))
