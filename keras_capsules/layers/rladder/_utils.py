"""Private helpers shared by the Recurrent Ladder layers (validation, resampling)."""

import contextlib
import numbers
import threading
import warnings

import keras
from keras import ops

from keras_capsules.layers._initializers import fresh_initializer, narrow_float_safe
from keras_capsules._validation import choice, generator_seed, positive_float, positive_int, seed_value  # noqa: F401 (re-exported)
from keras_capsules._validation import tensorflow_outside_xla, exactly_shaped_like
from keras_capsules.ops import conv, mean, routing_dtype

UPSAMPLE_MODES = ("nearest", "transpose")
#: how a vector x_top reaches the pixels of x_lat: the conv combinators' ``vector_top``,
#: a dense level's ``unflatten``
VECTOR_TOPS = ("broadcast", "dense")


def check_step_mask(layer, mask, batch_and_steps, static_hint=""):
    """Refuses a Keras ``mask`` that is not ``[batch, T]`` (``batch_and_steps``) for the
    sequence input of ``layer`` (an RLadder or RTagger), and any mask when the layer
    iterates on one static input (``n_iters`` set: no time axis to pad)."""
    if mask is None:
        return
    name, mask_shape = type(layer).__name__, tuple(mask.shape)
    if layer.n_iters is not None:
        raise ValueError(
            f"{name} with n_iters={layer.n_iters} iterates on one static input; it has no time axis "
            f"for a mask to pad, so it takes no mask{static_hint}. Received: mask shape={mask_shape}"
        )
    lead = tuple(batch_and_steps)
    if len(mask_shape) != 2 or any(a is not None and b is not None and a != b for a, b in zip(mask_shape, lead)):
        raise ValueError(
            f"{name} expects a mask of shape [batch, T] = {lead}, one entry per step of the input. "
            f"Received: mask shape={mask_shape}"
        )


def exact_step_mask(mask, inputs):
    """``mask``, which must be ``[batch, T]`` of the sequence ``inputs``, when the layer runs.

    :func:`check_step_mask` compares the sizes known when the layer is called. Where
    the batch or ``T`` is None there (``predict`` after a retrace for another length, a
    ``tf.function`` with a None signature), a ``[1, T]`` mask was broadcast over the
    batch (one sample's padding masked the others' real steps) and a mask one step
    short read as padding at the last step; such masks now fail when the layer runs.
    """
    if mask is None or (None not in tuple(inputs.shape[:2]) and None not in tuple(mask.shape)):
        return mask
    return exactly_shaped_like(mask, ops.zeros(ops.shape(inputs)[:2], dtype=mask.dtype))


def spread_step_mask(mask, output_shape):
    """A step mask ``[batch, T]`` spread over an output's axes between the steps and
    the features (``output_shape[2:-1]``: pixels, groups).

    Keras' losses weigh each value of ``loss(y_true, y_pred)`` (the output's shape
    without its last axis) by the mask of ``y_pred``, and take a mask of that shape
    (or of one axis less) only: a ``[batch, T]`` mask on ``[batch, T, H, W, C]``
    frames failed in ``fit`` with a shape error. Sequence outputs ``[batch, T, F]``
    keep the step mask as it is; so does an output whose middle sizes are unknown.
    """
    middle = tuple(output_shape[2:-1])
    if mask is None or not middle or any(d is None for d in middle):
        return mask
    spread = ops.cast(mask, "bool")
    for _ in middle:
        spread = ops.expand_dims(spread, -1)
    return ops.logical_and(spread, ops.ones(middle, dtype="bool"))


def normalize(x, axis, epsilon=1e-5):
    """Zero mean, unit variance per sample over ``axis``, computed in float32 (float64
    for float64 inputs).

    The means are :func:`keras_capsules.ops.mean`: ``ops.mean`` on JAX averages in
    float32 whatever the input's dtype, which cost a float64 cell ~1e-3 of relative
    error even with ``jax_enable_x64``.
    """
    dtype = x.dtype
    x32 = ops.cast(x, routing_dtype(dtype))
    centered = x32 - mean(x32, axis=axis, keepdims=True)
    var = mean(ops.square(centered), axis=axis, keepdims=True)
    return ops.cast(centered * ops.rsqrt(var + epsilon), dtype)


def loaded_without_effect(where, name, value, replacement, why):
    """``replacement``, with a warning, for a saved option ``name=value`` that had no
    effect (``why`` says where it has none).

    Configs saved before such an option was refused still load: the option is read as
    ``replacement`` (the value that builds the same layer) and a ``UserWarning`` says
    so. A serialized Keras object (a dict) is shown by its class name.
    """
    shown = value.get("class_name", value) if isinstance(value, dict) else value
    warnings.warn(
        f"{where}{name}={shown!r} has no effect {why}; loading it as {replacement!r}, "
        "which gives the same layer.",
        stacklevel=3,
    )
    return replacement


def warn_without_effect(where, name, value, needs, stacklevel=3):
    """Warns (``UserWarning``) that the option ``name=value`` the user gave has no effect
    on this layer, and what it ``needs`` to have one.

    For an option that matters only together with another: refusing it would break
    loading configs already saved (``get_config`` writes every argument), so the layer
    is built as it would be without it, and the warning tells the user so. Callers warn
    only for a value other than the option's default, so a layer rebuilt from a config
    that holds the defaults warns about nothing. ``stacklevel`` is counted from the
    caller (3: the code that made a layer whose ``__init__`` calls this).
    """
    warnings.warn(
        f"{where}{name}={value!r} has no effect: it needs {needs}.",
        UserWarning,
        stacklevel=stacklevel,
    )


def check_one_tensor(layer, inputs):
    """Refuses a list or tuple of inputs to a layer that takes one tensor (RLadder,
    RTagger): once built, theirs failed with "'list' object has no attribute 'dtype'"."""
    if isinstance(inputs, (list, tuple)):
        raise ValueError(
            f"{type(layer).__name__} expects one tensor (the sequence, or the input to iterate "
            f"on). Received: a {type(inputs).__name__} of {len(inputs)} inputs"
        )


def float_inputs(layer, *tensors):
    """``tensors`` with every integer or boolean one cast to ``layer``'s compute dtype
    (None passed through).

    Keras casts only floating inputs to the compute dtype; an integer or boolean input
    (0/1 frames, binary piano rolls) met the float weights in a matmul or a convolution
    and failed with a backend error.
    """
    return tuple(
        t if t is None or keras.backend.is_float_dtype(t.dtype) else ops.cast(t, layer.compute_dtype)
        for t in tensors
    )


def loaded_upsample_mode(where):
    """``"nearest"``, with a warning, for a saved ``upsample_mode="transpose"`` that had no
    effect (nothing upsampled); configs saved before it was refused still load, unchanged."""
    return loaded_without_effect(where, "upsample_mode", "transpose", "nearest", "where nothing is upsampled")


def serialize_all(config, obj, names, kind):
    """Writes ``obj.<name>`` of every name, serialized with ``keras.<kind>``."""
    module = getattr(keras, kind)
    for name in names:
        config[name] = module.serialize(getattr(obj, name))
    return config


def split_top_lateral(layer_name, inputs):
    """``[x_top, x_lat]``, ``[None, x_lat]``, ``[x_lat]`` or ``x_lat`` -> (x_top, x_lat)."""
    if isinstance(inputs, (list, tuple)):
        if len(inputs) == 2:
            return inputs[0], inputs[1]
        if len(inputs) == 1:
            return None, inputs[0]
        raise ValueError(
            f"{layer_name} expects inputs [x_top, x_lat] (x_top may be None at the top "
            f"level) or a single tensor x_lat. Received: a list of length {len(inputs)}"
        )
    return None, inputs


def check_top_as_built(layer_name, built_with_top, top):
    """A built combinator gets an ``x_top`` if and only if it was built with one.

    ``top`` is the shape of the ``x_top`` received (None without one). Checked on
    every call, symbolic too: a layer built at the top level and reused below it (or
    the reverse) was accepted when the model was built, and failed in predict.
    """
    if (top is not None) != built_with_top:
        raise ValueError(
            f"This {layer_name} layer was built "
            + ("with" if built_with_top else "without")
            + " an x_top input. Received: "
            + ("x_top=None" if top is None else f"x_top shape={tuple(top)}")
        )


def check_same_batch(layer_name, named_shapes):
    """All known batch sizes of ``named_shapes`` (``(name, shape)`` pairs) agree."""
    known = {s[0] for _, s in named_shapes if s is not None and s[0] is not None}
    if len(known) > 1:
        received = ", ".join(f"{n} shape={tuple(s)}" for n, s in named_shapes if s is not None)
        raise ValueError(
            f"{layer_name} expects its inputs to have the same batch size. Received: {received}"
        )


def batch_checked_when_run(layer_name, named, axes=1, what="batch size"):
    """The first tensor of ``named`` (``(name, tensor)`` pairs), made to fail when the
    layer runs if the leading ``axes`` sizes of the tensors differ (``what`` names them).

    :func:`check_same_batch` compares the sizes known when the layer is called. Where
    one is None there (a ``tf.function`` traced for any batch, a functional model's
    batch), an input of batch 1 was broadcast silently against one of batch N: G1 given
    x_top of one sample put out all of x_lat's, a cell given one sample's state ran
    every sample from it. On TensorFlow outside XLA the first tensor is returned
    through assertions (control dependencies) whose messages name the inputs. Under
    XLA, which drops assertions, stand-ins of each tensor's leading sizes (zeros, no
    copy of the tensor) are compared with the first's by :func:`exactly_shaped_like`
    (a shape error in a scope named after the check), and the first tensor gets the
    last stand-in added (zeros: values and gradients unchanged), so that the comparison
    is part of what the outputs depend on (a graph drops what they do not). Nothing is
    added where the sizes known when called prove them equal: always in eager calls,
    and on JAX and torch, whose traces know every size; nor inside
    :func:`batches_made_alike` (a ladder's own loop).
    """
    first_name, first = named[0]

    def lead(t):
        return tuple(t.shape[:axes])

    unproven = [(name, t) for name, t in named[1:] if None in lead(first) + lead(t)]
    if not unproven or getattr(_MADE_ALIKE, "active", False):
        return first
    received = ", ".join(f"{name} shape={tuple(t.shape)}" for name, t in named)

    def message(name):
        return (f"{layer_name} expects its inputs to have the same {what}. Received: {received} "
                f"({what} of {name}, then of {first_name}, when the layer ran):")

    if tensorflow_outside_xla():
        import tensorflow as tf

        first_lead = tf.shape(first)[:axes]
        checks = []
        for name, t in unproven:
            t_lead = tf.shape(t)[:axes]
            checks.append(tf.debugging.Assert(tf.reduce_all(tf.equal(t_lead, first_lead)),
                                              [message(name), t_lead, first_lead]))
        with tf.control_dependencies(checks):
            return tf.identity(first)
    stand_in = ops.zeros(ops.shape(first)[:axes], dtype=first.dtype)
    for name, t in unproven:
        # (a scope named after the check: under XLA, where no assertion runs, the
        # stack's shape error names its node)
        with keras.name_scope(f"{what.replace(' ', '_')}_of_{name}_and_{first_name}"):
            stand_in = exactly_shaped_like(ops.zeros(ops.shape(t)[:axes], dtype=first.dtype), stand_in)
    return first + ops.reshape(stand_in, ops.shape(stand_in) + (1,) * (len(first.shape) - axes))


_MADE_ALIKE = threading.local()


@contextlib.contextmanager
def batches_made_alike():
    """While it is entered (in the thread tracing a layer), :func:`batch_checked_when_run`
    adds nothing: RLadder's and RTagger's own loops make every input of their cells and
    combinators from the one batch of their input (checked where it comes in), so the
    run-time comparisons could never fail there and cost ~10% of a small convolutional
    ladder's training step."""
    previous = getattr(_MADE_ALIKE, "active", False)
    _MADE_ALIKE.active = True
    try:
        yield
    finally:
        _MADE_ALIKE.active = previous


def is_shape(value):
    return isinstance(value, (list, tuple)) and all(d is None or isinstance(d, int) for d in value)


def upsample_nearest(x, factor):
    """Repeats every pixel of ``[batch, H, W, C]`` ``factor`` times along H and W."""
    if factor == 1:
        return x
    # Broadcasting against ones, not ``ops.repeat``: the gradient of TensorFlow's
    # repeat reshapes by a shape computed in the forward pass, which XLA cannot
    # compile inside a loop (RLadder's symbolic loop); a product's gradient needs
    # only static shapes. The values are the same.
    _, h, w, c = x.shape
    ones = ops.ones((1, 1, factor, 1, factor, 1), dtype=x.dtype)
    return ops.reshape(ops.reshape(x, (-1, h, 1, w, 1, c)) * ones, (-1, h * factor, w * factor, c))


def _folded_taps(kernel, axis, phase, factor, before):
    """The taps of ``kernel`` along ``axis`` (0: rows, 1: columns) that output phase
    ``phase`` of a nearest upsampling by ``factor`` reads, summed per source pixel:
    ``(first offset, folded kernel)``. A tap ``d`` of a "same" convolution (``before``
    padded pixels before) at upsampled pixel ``factor * i + phase`` reads source pixel
    ``i + (phase + d - before) // factor``."""
    offsets = [(phase + d - before) // factor for d in range(kernel.shape[axis])]
    first = offsets[0]
    folded = [None] * (offsets[-1] - first + 1)
    for d, o in enumerate(offsets):
        tap = kernel[d] if axis == 0 else kernel[:, d]
        folded[o - first] = tap if folded[o - first] is None else folded[o - first] + tap
    return first, ops.stack(folded, axis=axis)


def zero_pad(x, widths):
    """``ops.pad(x, widths)`` with zeros, made by concatenating zeros along every axis
    ``widths`` (one ``(before, after)`` pair per axis) pads; the batch may be unknown.

    Not ``ops.pad``: on torch it makes a Keras ``Operation``, whose automatic name
    mutates a Keras dict, and ``torch.compile`` then broke its graph at the next Keras
    layer call (at ``inspect.Signature.bind``: "mapping proxy affected by dictionary
    mutation"), every step of an RLadder loop whose convolutional combinators upsample.
    """
    for axis, (before, after) in enumerate(widths):
        if not (before or after):
            continue
        edge = ops.zeros_like(x[(slice(None),) * axis + (slice(0, 1),)])
        parts = [ops.repeat(edge, before, axis=axis)] if before else []
        parts.append(x)
        if after:
            parts.append(ops.repeat(edge, after, axis=axis))
        x = ops.concatenate(parts, axis=axis)
    return x


def upsampled_conv(x, kernel, factor):
    """``conv(upsample_nearest(x, factor), kernel, padding="same")`` for ``x`` of static
    height and width, computed at ``x``'s resolution: output phase ``(a, b)`` (the pixels
    ``factor * i + a``, ``factor * j + b``) reads ``x`` through the kernel's taps that fall
    on the same source pixel, summed (:func:`_folded_taps`: a 3x3 kernel after an
    upsampling by 2 becomes a 2x2 kernel per phase); the phases' kernels, placed in one
    kernel over all their offsets (zeros elsewhere), make one convolution of ``x`` with
    ``factor ** 2`` times the output channels, whose phases are then interleaved. The
    same sums of products as the convolution of the upsampled input up to the order of
    floating-point additions (taps are summed before they multiply). Zero padding of
    ``x`` is the zero padding of the upsampled input (a source pixel outside ``x`` is an
    upsampled pixel outside the upsampled input). On a CPU under XLA one convolution of
    ``x`` and its gradients cost less than those of the ``factor ** 2`` times larger
    upsampled input: a ``model.fit`` update of the Occluded Moving MNIST benchmark's
    ladder (its defaults, one core) took 6-8% less time (``"rladder"``, 95.5-99.0 ms
    before, 89.7-92.1 ms after) and 10-12% less without feedback (83.4-85.0 ms, 74.7-76.0
    ms); the first, compiling step took ~4.5 s longer."""
    _, h, w, _ = x.shape
    if factor == 1 or h is None or w is None:
        return conv(upsample_nearest(x, factor), kernel, padding="same")
    kh, kw = kernel.shape[0], kernel.shape[1]
    # "same" pads (k - 1) // 2 pixels before, the rest after (as Keras' and XLA's convolutions)
    rows = [_folded_taps(kernel, 0, a, factor, (kh - 1) // 2) for a in range(factor)]
    # (first row offset, first column offset, folded kernel) of every phase, row-major
    flat = [(fa,) + _folded_taps(k, 1, b, factor, (kw - 1) // 2) for fa, k in rows for b in range(factor)]
    lo_h, hi_h = min(p[0] for p in flat), max(p[0] + p[2].shape[0] - 1 for p in flat)
    lo_w, hi_w = min(p[1] for p in flat), max(p[1] + p[2].shape[1] - 1 for p in flat)
    cout = kernel.shape[3]
    kernels = []
    for first_h, first_w, k in flat:  # every phase's taps placed in one kernel over all offsets
        kernels.append(zero_pad(k, [(first_h - lo_h, hi_h - first_h - k.shape[0] + 1),
                                    (first_w - lo_w, hi_w - first_w - k.shape[1] + 1), (0, 0), (0, 0)]))
    merged = ops.concatenate(kernels, axis=-1)  # [.., .., in, (a, b, out)]
    if lo_h == -hi_h and lo_w == -hi_w:  # (a 3x3 kernel and a factor of 2: offsets -1, 0, 1)
        out = conv(x, merged, padding="same")  # (no padded copy of x, nor its gradient)
    else:
        padded = zero_pad(x, [(0, 0), (max(-lo_h, 0), max(hi_h, 0)), (max(-lo_w, 0), max(hi_w, 0)), (0, 0)])
        top, left = lo_h + max(-lo_h, 0), lo_w + max(-lo_w, 0)
        window = padded[:, top:top + h + hi_h - lo_h, left:left + w + hi_w - lo_w, :]
        out = conv(window, merged, padding="valid")
    out = ops.reshape(out, (-1, h, w, factor, factor, cout))
    out = ops.transpose(out, (0, 1, 3, 2, 4, 5))  # [batch, h, factor (a), w, factor (b), out]
    return ops.reshape(out, (-1, h * factor, w * factor, cout))


def max_pool(x, factor):
    """Max pooling of ``[batch, H, W, C]`` over ``factor x factor`` windows."""
    if factor == 1:
        return x
    return ops.max_pool(x, pool_size=factor, strides=factor, padding="valid")


class RowwiseConstant(keras.initializers.Initializer):
    """Fills row ``i`` of a ``[len(values), n]`` weight with ``values[i]``."""

    def __init__(self, values):
        self.values = [float(v) for v in values]

    def __call__(self, shape, dtype=None):
        if len(shape) != 2 or shape[0] != len(self.values):
            raise ValueError(
                f"RowwiseConstant({self.values}) fills weights of shape "
                f"[{len(self.values)}, n]. Received: shape={tuple(shape)}"
            )
        column = ops.convert_to_tensor(self.values, dtype=dtype or "float32")[:, None]
        return ops.tile(column, (1, shape[1]))

    def get_config(self):
        return {"values": list(self.values)}


keras.saving.register_keras_serializable(package="keras_capsules")(RowwiseConstant)


def elementwise_f(u, params):
    """The combinator's per-unit function ``w0 * sigmoid(w1 * u + w2) + w3 * u + w4``.

    ``params`` has shape ``[5, n]`` (one parameter vector per row) and ``u``
    ``[..., n]``; the result has the shape of ``u``.
    """
    # a Variable is made a tensor first: JAX's unstack refuses Keras Variables (JAX 0.10:
    # "Triggering __jax_array__() during abstractification is no longer supported")
    w0, w1, w2, w3, w4 = ops.unstack(ops.convert_to_tensor(params), num=5, axis=0)
    return w0 * ops.sigmoid(w1 * u + w2) + w3 * u + w4


def clone_initializer(initializer, salt=None):
    """A fresh copy of an initializer for one weight (:func:`fresh_initializer`), to
    give ``add_weight``: an orthogonal one draws a 16-bit weight in float32
    (:func:`narrow_float_safe`). A sublayer's constructor takes
    :func:`fresh_initializer`'s copy instead, which keeps its config.

    One Keras random initializer instance used for several weights of the same shape
    fills them with identical values: an unseeded one draws its seed once, a seeded
    one always uses its seed. A copy made from the config of an unseeded initializer
    draws a new seed; a seeded one's copy gets ``seed + crc32(salt)``, so weights
    with different ``salt`` (class and weight name; RLadder adds the sublayer's name)
    start different and the same seed reproduces them all. An initializer seeded
    with a ``keras.random.SeedGenerator`` is used as it is (it draws anew at every
    call).
    """
    return narrow_float_safe(fresh_initializer(initializer, salt))


def salted_initializer(initializer, salt):
    """``initializer`` itself, or, if it has an integer seed, a copy whose seed is
    derived from that seed and ``salt`` (:func:`fresh_initializer`).

    For a layer that hands one initializer to several sublayers (RLadder's levels):
    each copies it again for every weight, which gives an unseeded initializer new
    values anyway, while a seeded one needs a salt of its own per sublayer. An
    unseeded initializer is not copied here, so that it draws no extra seed from the
    global random state (``keras.utils.set_random_seed`` reproduces the same weights).
    """
    if isinstance(initializer, keras.initializers.Initializer):
        seed = initializer.get_config().get("seed")
        if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
            return fresh_initializer(initializer, salt)
    return initializer


def zero_of_the_weights(layer, dtype):
    """A scalar exact 0 of ``dtype`` with a zero gradient for every trainable weight of
    ``layer`` (its sublayers' included).

    Each weight enters through ``where(False, w, 0)``: the value is 0 and the gradient
    exactly zero whatever the weight holds (inf or NaN included, which a product
    ``0 * w`` would turn into NaN). Outputs that do not depend on the weights (an empty
    sequence's) get it added, so that their gradients are zeros, not None (TensorFlow's
    tape gives None for a weight the outputs do not touch).
    """
    never = ops.zeros((), dtype="bool")
    zero = ops.zeros((), dtype=dtype)
    for weight in layer.trainable_weights:
        w = ops.cast(weight, dtype)
        zero = zero + ops.sum(ops.where(never, w, ops.zeros_like(w)))
    return zero


def output_spec(layer, inputs):
    """KerasTensors (compute dtype) for every shape ``layer.compute_output_shape`` gives."""
    shapes = layer.compute_output_shape(keras.tree.map_structure(lambda t: tuple(t.shape), inputs))
    return keras.tree.map_shape_structure(
        lambda shape: keras.KerasTensor(shape, dtype=layer.compute_dtype), shapes
    )


def expand_to(keep, x):
    """A ``[batch]`` boolean reshaped to broadcast against ``x``."""
    return ops.reshape(keep, (-1,) + (1,) * (len(x.shape) - 1))


def write_row(buffer, at, value):
    """``buffer`` with row ``at`` (a ``[1, 1]`` index) set to ``value``.

    Its gradient passes the buffer's upstream gradient through unchanged instead of
    zeroing row ``at`` (a scatter, which copied the whole buffer at every step of the
    backward loop, so XLA's backward pass took time growing as ``T**2``). This is exact
    for RLadder's TensorFlow loop: its buffers start as constant zeros and every row is
    written once and never read, so the unzeroed row reaches only those zeros.

    Traced on TensorFlow, the custom gradient's entry in TensorFlow's process-wide
    gradient registry (which otherwise kept the loop's graph for good) is tied to that
    graph at once, and so are the entries registered before it
    (``keras_capsules._graph_release``).
    """
    written = _write_row(buffer, at, value)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        from keras_capsules._graph_release import release_gradients_of

        if not tf.executing_eagerly():  # (AutoGraph, converting the caller, need not convert it)
            tf.autograph.experimental.do_not_convert(release_gradients_of)(written)
    return written


@ops.custom_gradient
def _write_row(buffer, at, value):
    """:func:`write_row`'s custom gradient."""

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream, None, ops.take(upstream, ops.reshape(at, ()), axis=0)

    return ops.scatter_update(buffer, at, value[None]), grad


def symbolic_loop(step, init, steps, spare, batch_size, shapes, dtype):
    """Runs ``step(t, carry) -> (carry, outputs)`` for ``t`` in ``[0, steps)`` as one
    symbolic loop (RLadder's and RTagger's loop for ``unroll=False`` or ``T = None``).

    ``outputs`` is a dict of ``[batch, *shapes[name]]`` tensors (of ``dtype``); returns
    them stacked time-major, ``{name: [steps, batch, *shape]}``. On JAX, ``ops.scan``
    (reverse-mode differentiable, where a JAX while loop is not). On TensorFlow a while
    loop that writes every step's outputs into ``[steps + spare, batch + 1, ...]``
    buffers: unlike Keras' TensorFlow ``scan`` it takes a maximum number of iterations,
    which XLA needs to compile its gradient (``spare`` is 1 where ``steps`` is unknown
    when traced, else 0); the spare sample of every row is cut off at the end
    (TensorFlow's scatter refuses to write into an empty buffer, and a batch can be
    empty: a MirroredStrategy replica's share of a last batch smaller than the number
    of replicas).

    Elsewhere (torch), a Python loop over the steps whose outputs are stacked
    (:func:`python_loop`): the backend's ``ops.while_loop`` is a Python loop there
    anyway, with the same steps and values, but ``torch.compile`` breaks its graph at
    the loop's tensor condition and compiles every function the loop calls (``step``,
    the buffer writes) as a separate frame, shared by every RLadder and RTagger of the
    process (one code object). Torch's automatic dynamic shapes then turned the sizes
    that differ between layers, or between calls, into symbols (a second model's
    feature map height, ``s3``), which inductor failed to compile for a convolution
    ("cannot determine truth value of Relational: 1 < s3"); a frame also recompiled at
    every step (the step index is a tensor it specializes on) and at every call (the
    name of the Keras op ``ops.pad`` makes), until torch's recompile limit sent it back
    to eager. A Python loop is traced into the caller's graph as a whole.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        _, outputs = ops.scan(lambda c, t: step(t, c), init, xs=ops.arange(steps, dtype="int32"))
        return outputs
    if backend != "tensorflow":
        return python_loop(step, init, steps, batch_size, shapes, dtype)
    rows = steps + spare
    buffers = {name: ops.zeros((rows, batch_size + 1) + tuple(shape), dtype=dtype) for name, shape in shapes.items()}

    def with_spare_sample(v):
        return ops.pad(v, [[0, 1]] + [[0, 0]] * (len(v.shape) - 1))

    def body(t, c, buffers):
        c, out = step(t, c)
        at = ops.reshape(t, (1, 1))
        return t + 1, c, {name: write_row(buffers[name], at, with_spare_sample(out[name])) for name in buffers}

    _, _, outputs = ops.while_loop(
        lambda t, c, b: t < steps,
        body,
        (ops.convert_to_tensor(0, dtype="int32"), init, buffers),
        maximum_iterations=rows,  # (a bound: the gradient's [rows, ...] stacks too)
    )
    return {name: v[:steps, :batch_size] for name, v in outputs.items()}


def python_loop(step, init, steps, batch_size, shapes, dtype):
    """:func:`symbolic_loop`'s outputs from a Python loop: ``step(t, carry)`` for ``t``
    in ``range(steps)`` (``t`` a Python int), each output stacked time-major
    (``[0, batch, *shape]`` zeros for no step)."""
    carry, stacked = init, {name: [] for name in shapes}
    for t in range(steps):
        carry, out = step(t, carry)
        for name in shapes:
            stacked[name].append(ops.cast(out[name], dtype))
    return {
        name: ops.stack(values, axis=0) if values else ops.zeros((0, batch_size) + tuple(shapes[name]), dtype=dtype)
        for name, values in stacked.items()
    }


def loop_steps(inputs, n_iters):
    """``(steps, spare, time_major)`` of a symbolic loop over ``inputs``' steps (a
    sequence ``[batch, T, ...]`` when ``n_iters`` is None, else ``n_iters`` iterations).

    Where T is only known when the loop runs (None in a TensorFlow trace), every
    time-major tensor, and the loop's bound, get one spare row (``spare`` = 1; never
    read, cut off the outputs): XLA refuses to compile a read or write of a ``[0, ...]``
    tensor, the gradient's stacks included, even in a loop that never runs (T = 0).
    ``time_major(v)`` moves ``v``'s step axis (1) first and adds that row.
    """
    steps = ops.shape(inputs)[1] if n_iters is None else n_iters
    spare = 0 if isinstance(steps, int) else 1

    def time_major(v):
        # transpose, not moveaxis: Keras' moveaxis fails on a tf.Variable input
        # ("'ResourceVariable' object has no attribute 'ndim'")
        v = ops.transpose(v, (1, 0) + tuple(range(2, len(v.shape))))
        return ops.concatenate([v, ops.zeros_like(v[:1])], axis=0) if spare else v

    return steps, spare, time_major
