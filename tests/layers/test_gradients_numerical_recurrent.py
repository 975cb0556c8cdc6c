"""Gradients checked against central finite differences, in float64: the Recurrent
Ladder family (combinators, encoder cells, RLadder, RTagger, MixtureNLL through
RTagger), the MAC units, cell and network, and the applications' own recurrent layers
(ProjectedGRU's written-out backward pass, music's KeyNADE).

The layer harness (``tests/harness.py``) checks that gradients exist and are finite;
these tests check that they are the derivatives of what the layers compute. For every
input and every trainable weight ``w`` the derivative of a random-cotangent loss
``L = sum(c * outputs)`` along a random direction ``v`` is compared with
``(L(w + eps v) - L(w - eps v)) / (2 eps)``. The layers are float64 (routing and
softmax math runs in float64 then too), so with ``eps = 1e-6`` rounding leaves an error
near 1e-10 of the loss's scale and the tolerance, ``1e-6`` of ``|g| |v|``, is 1e4 times
that (plus 1e-8 absolute, for weights whose gradient is exactly 0: the MAC
units' attention biases, which shift every logit of a softmax); a wrong gradient term
is off by the term itself.

The points checked are random, so none is at a kink (ReLU, max pooling, the maxima
whose stop_gradient shifts make softmaxes stable: those shifts change no value and,
since the softmaxes do not change with them, no derivative either; RTagger's groups
start tied at one shared mean, where the nearest-group shift is the same for all
groups). Training-mode calls (dropout, zoneout, RTagger's random initial masks) are
checked with the layer's random state put back before every evaluation, so that every
evaluation draws the same masks.

TensorFlow only: the checks trace the losses with ``tf.function`` (fast enough for
the per-weight differences), and ProjectedGRU is TensorFlow code.
"""

import keras
import numpy as np
import pytest

from tests.backends import BACKEND

if BACKEND != "tensorflow":
    pytest.skip("finite-difference checks trace with tf.function (TensorFlow backend)", allow_module_level=True)

import tensorflow as tf  # noqa: E402

from keras_capsules.layers import (  # noqa: E402
    G1,
    ConvEncoderCell,
    ConvG1,
    ConvG2,
    ConvG3,
    ConvLSTMEncoderCell,
    ControlUnit,
    GatedConvEncoderCell,
    GatedEncoderCell,
    LSTMEncoderCell,
    MACCell,
    MACNetwork,
    ReadUnit,
    RLadder,
    RTagger,
    WriteUnit,
    level_spec,
)
from keras_capsules.losses import MixtureNLL  # noqa: E402
from applications.music import KeyNADE  # noqa: E402
from applications.text_classification.projected_gru import ProjectedGRU, _forward, gru_states  # noqa: E402

EPS = 1e-6
RTOL = 1e-6


def _init(seed=1, recurrent=True):
    """Random-normal weights (biases too): zero biases would hide a wrong bias gradient
    behind symmetric activations."""
    init = {
        "kernel_initializer": keras.initializers.RandomNormal(stddev=0.5, seed=seed),
        "bias_initializer": keras.initializers.RandomNormal(stddev=0.5, seed=seed + 1),
    }
    if recurrent:
        init["recurrent_initializer"] = keras.initializers.RandomNormal(stddev=0.5, seed=seed + 2)
    return init


def directional_errors(fn, inputs, variables, state=(), seed=0, eps=EPS, dtype=tf.float64, traced=True):
    """``[(name, analytic, numeric, scale)]``: the derivative of ``sum(c * fn(*inputs))``
    along one random direction per input and per variable, from the tape and from
    central differences; ``scale`` is ``|gradient| |direction|``.

    ``state``: variables (random generators' states) put back before every evaluation.
    ``traced``: evaluate through ``tf.function`` (a fixed cost to trace, then fast: for
    the ladders and networks) or eagerly (for the small layers).
    """
    rng = np.random.default_rng(seed)
    saved = [v.numpy() for v in state]

    def restore():
        for v, s in zip(state, saved):
            v.assign(s)

    xs = [tf.constant(x, dtype) for x in inputs]
    restore()
    outputs = keras.tree.flatten(fn(*xs))
    cotangents = [tf.constant(rng.normal(size=tuple(o.shape)), o.dtype) for o in outputs]

    def loss(*xs):
        outputs = keras.tree.flatten(fn(*xs))
        return tf.add_n([tf.reduce_sum(tf.cast(c * o, tf.float64)) for c, o in zip(cotangents, outputs)])

    def gradients(*xs):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            value = loss(*xs)
        return tape.gradient(value, list(xs) + list(variables))

    if traced:
        loss, gradients = tf.function(loss), tf.function(gradients)
    restore()
    grads = gradients(*xs)
    rows = []
    names = [f"input {i}" for i in range(len(xs))] + [v.path for v in variables]
    for i, (name, g) in enumerate(zip(names, grads)):
        target = xs[i] if i < len(xs) else variables[i - len(xs)]
        g = np.zeros(tuple(target.shape)) if g is None else np.asarray(tf.convert_to_tensor(g), np.float64)
        v = rng.normal(size=g.shape)
        if i < len(xs):
            plus, minus = list(xs), list(xs)
            plus[i] = xs[i] + tf.constant(eps * v, dtype)
            minus[i] = xs[i] - tf.constant(eps * v, dtype)
            restore()
            high = float(loss(*plus))
            restore()
            low = float(loss(*minus))
        else:
            w = target.numpy()
            target.assign(w + eps * v)
            restore()
            high = float(loss(*xs))
            target.assign(w - eps * v)
            restore()
            low = float(loss(*xs))
            target.assign(w)
        rows.append((name, float(np.sum(g * v)), (high - low) / (2 * eps), float(np.linalg.norm(g) * np.linalg.norm(v))))
    return rows


def assert_gradients_match(fn, inputs, variables, state=(), rtol=RTOL, atol=1e-8, **kwargs):
    rows = directional_errors(fn, inputs, variables, state=state, **kwargs)
    assert len(rows) == len(inputs) + len(variables)
    bad = [
        f"{name}: analytic {a:.10g}, numeric {n:.10g}"
        for name, a, n, scale in rows
        if not abs(a - n) <= atol + rtol * (scale + abs(n))
    ]
    assert not bad, "gradients off their finite differences:\n" + "\n".join(bad)
    return rows


def _built(layer, fn, inputs):
    fn(*[tf.constant(x, layer.dtype) for x in inputs])
    assert layer.trainable_weights and all(w.dtype == layer.dtype for w in layer.weights if w.trainable)
    return layer


def _normal(rng, *shape):
    return rng.normal(size=shape)


# ------------------------------------------------------------------ combinators and cells
def _combinator_cases():
    def g1(**kw):
        extra = {
            "mu_initializer": keras.initializers.RandomNormal(seed=5),
            "s_initializer": keras.initializers.RandomNormal(seed=6),
        }
        return G1(dtype="float64", **_init(recurrent=False), **extra, **kw)

    def conv(cls, **kw):
        if cls is not ConvG1:
            kw.setdefault("filters", 3)
        return cls(dtype="float64", **_init(recurrent=False), **kw)

    pair = lambda layer: lambda top, lat: layer([top, lat])  # noqa: E731
    alone = lambda layer: lambda lat: layer(lat)  # noqa: E731
    return {
        "G1": (lambda: g1(), pair, [(3, 4), (3, 5)]),
        "G1_top_level": (lambda: g1(), alone, [(3, 5)]),
        "ConvG1": (lambda: conv(ConvG1), pair, [(2, 4, 4, 3), (2, 4, 4, 2)]),
        "ConvG1_upsample_nearest": (lambda: conv(ConvG1, upsample=2), pair, [(2, 2, 2, 3), (2, 4, 4, 2)]),
        "ConvG1_vector_top": (lambda: conv(ConvG1), pair, [(2, 5), (2, 4, 4, 2)]),
        "ConvG1_vector_top_dense": (lambda: conv(ConvG1, vector_top="dense"), pair, [(2, 5), (2, 4, 4, 2)]),
        "ConvG2_vector_top_dense": (lambda: conv(ConvG2, vector_top="dense"), pair, [(2, 5), (2, 4, 4, 2)]),
        "ConvG2_upsample_transpose": (
            lambda: conv(ConvG2, upsample=2, upsample_mode="transpose"),
            pair,
            [(2, 2, 2, 3), (2, 4, 4, 2)],
        ),
        "ConvG2_top_level": (lambda: conv(ConvG2), alone, [(2, 4, 4, 2)]),
        "ConvG3_upsample_nearest": (lambda: conv(ConvG3, upsample=2), pair, [(2, 2, 2, 3), (2, 4, 4, 2)]),
        "ConvG3_upsample_transpose": (
            lambda: conv(ConvG3, upsample=2, upsample_mode="transpose"),
            pair,
            [(2, 2, 2, 3), (2, 4, 4, 2)],
        ),
        "ConvG3_vector_top": (lambda: conv(ConvG3), pair, [(2, 5), (2, 4, 4, 2)]),
    }


@pytest.mark.parametrize("case", sorted(_combinator_cases()))
def test_combinator_gradients(case):
    make, call, shapes = _combinator_cases()[case]
    rng = np.random.default_rng(0)
    inputs = [_normal(rng, *s) for s in shapes]
    layer = make()
    fn = call(layer)
    _built(layer, fn, inputs)
    assert_gradients_match(fn, inputs, layer.trainable_weights, traced=False)


def _cell_cases():
    listed = lambda layer: lambda *xs: layer(list(xs))  # noqa: E731
    return {
        "GatedEncoderCell": (lambda: GatedEncoderCell(4, dtype="float64", **_init()), [(3, 5), (3, 4), (3, 4)]),
        "GatedEncoderCell_no_feedback": (
            lambda: GatedEncoderCell(4, use_feedback=False, dtype="float64", **_init()),
            [(3, 5), (3, 4)],
        ),
        "LSTMEncoderCell": (lambda: LSTMEncoderCell(4, dtype="float64", **_init()), [(3, 5), (3, 4), (3, 4), (3, 4)]),
        "ConvLSTMEncoderCell": (
            lambda: ConvLSTMEncoderCell(3, dtype="float64", **_init()),
            [(2, 4, 4, 2), (2, 4, 4, 3), (2, 4, 4, 3), (2, 4, 4, 3)],
        ),
        "ConvEncoderCell_layer_norm": (
            lambda: ConvEncoderCell(3, normalization="layer", dtype="float64", **_init()),
            [(2, 4, 4, 2), (2, 4, 4, 3)],
        ),
        "GatedConvEncoderCell_instance_norm": (
            lambda: GatedConvEncoderCell(3, normalization="instance", dtype="float64", **_init()),
            [(2, 4, 4, 2), (2, 4, 4, 3)],
        ),
    }, listed


@pytest.mark.parametrize("case", sorted(_cell_cases()[0]))
def test_encoder_cell_gradients(case):
    cases, listed = _cell_cases()
    make, shapes = cases[case]
    rng = np.random.default_rng(1)
    inputs = [_normal(rng, *s) for s in shapes]
    layer = make()
    fn = listed(layer)
    _built(layer, fn, inputs)
    assert_gradients_match(fn, inputs, layer.trainable_weights, traced=False)


# ------------------------------------------------------------------ RLadder
_STEP_MASK = np.array([[True, False, True], [False, True, True]])  # an inner and a leading padded step
_DENSE = [level_spec("gated", 3), level_spec("lstm", 2)]


def _ladder_gradients(kwargs, x, mask=None, training=False, signature=None, traced=True):
    layer = RLadder(dtype="float64", **_init(), **kwargs)

    def call(a):
        return layer(a, mask=None if mask is None else tf.constant(mask), training=training)

    fn = call if signature is None else tf.function(call, input_signature=[signature])
    _built(layer, fn, [x])
    return assert_gradients_match(fn, [x], layer.trainable_weights, state=layer.non_trainable_variables, traced=traced)


def test_rladder_dense_feedback_masked_training():
    """Gated and LSTM levels with feedback, learned initial feedback, an output map,
    layer normalization, a feedback initializer; unrolled, masked, in training with
    dropout (one mask per sequence) and zoneout."""
    x = np.random.default_rng(2).normal(size=(2, 3, 4))
    kwargs = dict(
        levels=_DENSE,
        unroll=True,
        learn_initial_feedback=True,
        output_units=2,
        dropout=0.2,
        dropout_noise="sequence",
        zoneout=0.3,
        seed=4,
        normalization="layer",
        feedback_initializer=keras.initializers.RandomNormal(seed=9),
    )
    rows = _ladder_gradients(kwargs, x, mask=_STEP_MASK, training=True)
    assert all(abs(n) > 0 for name, _, n, _ in rows if "kernel" in name)


def test_rladder_conv_levels_symbolic_loop_masked():
    """Every convolutional level kind (ConvLSTM, conv, gated conv), ConvG2 and ConvG3
    combinators with transposed-convolution and nearest upsampling, a dense top level,
    ConvG3 input combinator; the symbolic loop (its buffers' written-out gradient)."""
    levels = [
        level_spec("convlstm", 2),
        level_spec("conv", 2, pool=2, combinator="ConvG2", upsample_mode="transpose"),
        level_spec("gatedconv", 2, combinator="ConvG3"),
        level_spec("gated", 3),
    ]
    x = np.random.default_rng(3).normal(size=(2, 3, 4, 4, 1))
    kwargs = dict(levels=levels, unroll=False, input_combinator="ConvG3", input_combinator_filters=2)
    _ladder_gradients(kwargs, x, mask=_STEP_MASK)


@pytest.mark.parametrize(
    "ablation",
    [dict(use_decoder=False), dict(decoder_to_encoder=False, n_iters=3, zoneout=0.3)],
    ids=["no_decoder", "no_feedback_static_iterations_zoneout_inference"],
)
def test_rladder_ablations(ablation):
    static = "n_iters" in ablation
    x = np.random.default_rng(4).normal(size=(2, 4) if static else (2, 3, 4))
    _ladder_gradients(dict(levels=_DENSE, **ablation), x, mask=None if static else _STEP_MASK, traced=False)


def test_rladder_training_any_length_loop():
    """Dropout (new masks every step) and zoneout in training (the same masks at every
    evaluation), masked, through the symbolic loop traced for ``T = None`` (the
    buffers' spare row)."""
    x = np.random.default_rng(5).normal(size=(2, 3, 4))
    # (seed 2: levels this small, two real steps per sample, lose every signal of some
    # kernel to dropout and zoneout with some seeds, which the last check rules out)
    kwargs = dict(levels=_DENSE, dropout=0.3, zoneout=0.4, seed=2)
    rows = _ladder_gradients(
        kwargs, x, mask=_STEP_MASK, training=True, signature=tf.TensorSpec((None, None, 4), tf.float64)
    )
    assert all(abs(n) > 0 for name, _, n, _ in rows if "kernel" in name)


def test_rladder_loop_second_derivatives_match_unrolled():
    """Hessian-vector products through the symbolic loop (the buffers' custom gradient
    is differentiated again) equal the unrolled ladder's."""
    rng = np.random.default_rng(6)
    x, v = tf.constant(rng.normal(size=(2, 3, 4))), tf.constant(rng.normal(size=(2, 3, 4)))
    cotangents = [tf.constant(rng.normal(size=(2, 3, 4))), tf.constant(rng.normal(size=(2, 3, 3)))]
    results = []
    for unroll in (True, False):
        layer = RLadder([level_spec("gated", 3)], dtype="float64", unroll=unroll, **_init())
        layer(x)
        results.append(_hessian_vector(layer, lambda a, l=layer: l(a), cotangents, x, v))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def _hessian_vector(layer, call, cotangents, x, v):
    """``d/dx [v . dL/dx]`` and its weight gradients, eagerly (tracing a second-order
    tape took longer than these tiny layers run), ``L = sum(c * sin(outputs))``."""

    def hvp(x, v):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                outputs = keras.tree.flatten(call(x))
                loss = tf.add_n([tf.reduce_sum(c * tf.sin(o)) for c, o in zip(cotangents, outputs)])
            along = tf.reduce_sum(inner.gradient(loss, x) * v)
        return outer.gradient(along, [x] + layer.trainable_weights)

    return [np.asarray(g) for g in hvp(x, v)]


# ------------------------------------------------------------------ RTagger
def _tagger_target(x, means_shape):
    """``x`` (an input of the tagger) as MixtureNLL's ``y_true`` for means
    ``[batch, T, K, *pixels, C]``: ``[batch, T, *pixels, C]``."""
    y_shape = tuple(means_shape[:2]) + tuple(means_shape[3:])
    t = tf.constant(x)
    if len(means_shape) == 5:  # vectors: pixels of one channel
        t = t[..., None]
    if len(t.shape) == len(y_shape) - 1:  # a static input: the same at every iteration
        t = t[:, None]
    return tf.broadcast_to(t, y_shape)


def _tagger_gradients(kwargs, x, mask=None, training=False, traced=True):
    layer = RTagger(n_groups=2, dtype="float64", means_initializer=keras.initializers.RandomNormal(seed=4), **_init(), **kwargs)
    keep = None if mask is None else tf.constant(mask)
    call = lambda a: layer(a, mask=keep, training=training)  # noqa: E731
    _built(layer, call, [x])
    if kwargs.get("mask_damping") == "learned":  # it starts at w = 0: its gradient hides
        layer.damping_kernel.assign(np.random.default_rng(8).normal(size=layer.damping_kernel.shape))
    state = layer.non_trainable_variables
    assert_gradients_match(call, [x], layer.trainable_weights, state=state, traced=traced)
    # the cost through the tagger: MixtureNLL of [m, pi] against data that is not x
    target = np.random.default_rng(9).normal(size=x.shape)
    nll = MixtureNLL(sigma=0.8, group_axis=2, reduction="sum", dtype="float64")

    def cost(a):
        pi, means = call(a)
        y = _tagger_target(target, tuple(means.shape))
        # the Concatenate layer passes the tagger's mask on to the loss
        return nll(y, keras.layers.Concatenate(dtype="float64")([means, pi]))

    assert_gradients_match(cost, [x], layer.trainable_weights, state=state, traced=traced)


def test_rtagger_vectors_posterior_learned_damping_codes():
    x = np.random.default_rng(10).normal(size=(2, 4))
    kwargs = dict(
        levels=[level_spec("gated", 3)],
        n_iters=2,
        sigma=0.7,
        mask_update="posterior",
        posterior_sigma=1.3,
        mask_damping="learned",
        group_codes=True,
        random_initial_masks=False,
    )
    _tagger_gradients(kwargs, x, traced=False)


def test_rtagger_image_sequence_masked_loop_training():
    """Images, a masked sequence through the symbolic loop, fixed damping, coarse random
    initial masks drawn in training."""
    x = np.random.default_rng(11).normal(size=(2, 2, 4, 4, 1))
    kwargs = dict(
        levels=[level_spec("convlstm", 2)],
        sigma=1.0,
        mask_damping=0.3,
        initial_mask_scale=2,
        unroll=False,
        seed=5,
    )
    _tagger_gradients(kwargs, x, mask=np.array([[False, True], [True, True]]), training=True, traced=False)


# ------------------------------------------------------------------ MAC
B, WORDS, CELLS, D, DQ, DKB = 3, 4, 5, 3, 2, 4
# a padded word or cell, a single kept one, all padded (zero attention, zero gradients)
_WORDS_MASK = np.array([[1, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]], bool)
_KB_MASK = np.array([[1, 1, 1, 0, 1], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
_HISTORY_MASK = np.array([[1, 0], [0, 1], [0, 0]], bool)


def _mac_cases():
    mac = dict(dtype="float64", **_init(recurrent=False))
    words, kb = tf.constant(_WORDS_MASK), tf.constant(_KB_MASK)
    history = tf.constant(_HISTORY_MASK)
    network_inputs = [(B, WORDS, D), (B, DQ), (B, CELLS, DKB)]
    return {
        "ControlUnit": (
            lambda: ControlUnit(max_steps=2, **mac),
            lambda l: lambda q, c, w: l([q, c, w], step=1, words_mask=words),
            [(B, DQ), (B, D), (B, WORDS, D)],
        ),
        "ControlUnit_no_previous_control": (
            lambda: ControlUnit(max_steps=2, use_previous_control=False, **mac),
            lambda l: lambda q, c, w: l([q, c, w], step=0, words_mask=words),
            [(B, DQ), (B, D), (B, WORDS, D)],
        ),
        "ReadUnit_elu": (
            lambda: ReadUnit(activation="elu", **mac),
            lambda l: lambda m, k, c: l([m, k, c], kb_mask=kb),
            [(B, D), (B, CELLS, DKB), (B, D)],
        ),
        "ReadUnit_unmasked": (
            lambda: ReadUnit(**mac),
            lambda l: lambda m, k, c: l([m, k, c]),
            [(B, D), (B, CELLS, DKB), (B, D)],
        ),
        "WriteUnit_gate_per_dimension": (
            lambda: WriteUnit(memory_gate=True, gate_per_dimension=True, **mac),
            lambda l: lambda r, m, c: l([r, m, c]),
            [(B, DKB), (B, D), (B, D)],
        ),
        "WriteUnit_self_attention_gate": (
            lambda: WriteUnit(self_attention=True, memory_gate=True, **mac),
            lambda l: lambda r, m, c, pc, pm: l([r, m, c, pc, pm], history_mask=history),
            [(B, DKB), (B, D), (B, D), (B, 2, D), (B, 2, D)],
        ),
        "MACCell": (
            lambda: MACCell(max_steps=2, read_activation="elu", memory_gate=True, **mac),
            lambda l: lambda w, q, k, c, m: l(
                [w, q, k, c, m],
                step=1,
                words_mask=words,
                kb_mask=kb,
                memory_dropout_mask=tf.constant([[2.0], [0.0], [1.0]], tf.float64),
            ),
            [(B, WORDS, D), (B, DQ), (B, CELLS, DKB), (B, D), (B, D)],
        ),
        "MACCell_self_attention": (
            lambda: MACCell(max_steps=2, self_attention=True, **mac),
            lambda l: lambda w, q, k, c, m, pc, pm: l(
                [w, q, k, c, m, pc, pm], step=1, words_mask=words, kb_mask=kb, history_mask=history
            ),
            [(B, WORDS, D), (B, DQ), (B, CELLS, DKB), (B, D), (B, D), (B, 2, D), (B, 2, D)],
        ),
        "MACNetwork": (
            lambda: MACNetwork(max_steps=3, **mac),
            lambda l: lambda w, q, k: l([w, q, k], words_mask=words, kb_mask=kb),
            network_inputs,
        ),
        "MACNetwork_no_previous_control_dict_masks": (
            lambda: MACNetwork(max_steps=2, use_previous_control=False, **mac),
            lambda l: lambda w, q, k: l({"words": w, "question": q, "kb": k, "words_mask": words, "kb_mask": kb}),
            network_inputs,
        ),
        "MACNetwork_self_attention_gate_attentions": (
            lambda: MACNetwork(
                max_steps=3,
                self_attention=True,
                memory_gate=True,
                gate_per_dimension=True,
                return_attention=True,
                read_activation="elu",
                state_initializer=keras.initializers.RandomNormal(seed=7),
                **mac,
            ),
            lambda l: lambda w, q, k: l([w, q, k], words_mask=words, kb_mask=kb),
            network_inputs,
        ),
        "MACNetwork_training_dropout": (
            lambda: MACNetwork(max_steps=2, memory_dropout=0.3, read_dropout=0.2, seed=3, **mac),
            lambda l: lambda w, q, k: l([w, q, k], words_mask=words, kb_mask=kb, training=True),
            network_inputs,
        ),
    }


@pytest.mark.parametrize("case", sorted(_mac_cases()))
def test_mac_gradients(case):
    make, call, shapes = _mac_cases()[case]
    rng = np.random.default_rng(12)
    inputs = [_normal(rng, *s) for s in shapes]
    layer = make()
    fn = call(layer)
    _built(layer, fn, inputs)
    traced = case.startswith("MACNetwork")
    assert_gradients_match(fn, inputs, layer.trainable_weights, state=layer.non_trainable_variables, traced=traced)


# ------------------------------------------------------------------ ProjectedGRU
def _gru_mask():
    """A hole, right padding, all padding, left padding."""
    mask = np.ones((4, 5), bool)
    mask[0, 2] = False
    mask[1, 3:] = False
    mask[2, :] = False
    mask[3, :2] = False
    return mask


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_projected_gru_layer_gradients(go_backwards, with_state):
    """The written-out path (checked to run) in float64 with every masking case, both
    directions, an initial state, every output (sequences, zeroed masked outputs, state)."""
    rng = np.random.default_rng(13)
    layer = ProjectedGRU(
        3,
        return_sequences=True,
        return_state=True,
        go_backwards=go_backwards,
        zero_output_for_mask=True,
        dtype="float64",
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.7, seed=1),
        recurrent_initializer=keras.initializers.RandomNormal(stddev=0.7, seed=2),
        bias_initializer=keras.initializers.RandomNormal(stddev=0.7, seed=3),
    )
    mask = tf.constant(_gru_mask())
    inputs = [rng.normal(size=(4, 5, 2))] + ([rng.normal(size=(4, 3))] if with_state else [])

    def fn(x, *state):
        return layer(x, mask=mask, initial_state=list(state) if state else None)

    _built(layer, fn, inputs)
    assert layer._written_out(training=False)
    assert_gradients_match(fn, inputs, layer.trainable_weights, traced=False)


@pytest.mark.graph_mode
def test_gru_states_backward_equals_autodiff_of_forward():
    """The written-out backward pass against TensorFlow's own gradient of the same
    forward loop (``_forward``, without the custom gradient), to rounding."""
    rng = np.random.default_rng(14)
    steps, batch, units = 5, 4, 3
    projected = tf.constant(rng.normal(size=(steps, batch, 3 * units)))
    h0 = tf.constant(rng.normal(size=(batch, units)))
    kernel = tf.constant(rng.normal(scale=0.7, size=(units, 3 * units)))
    bias = tf.constant(rng.normal(size=(units,)))
    mask = tf.constant(_gru_mask().T[:, :, None])
    cotangent = tf.constant(rng.normal(size=(steps, batch, units)))

    def both(*args):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(args)
            written = tf.reduce_sum(cotangent * gru_states(args[0], mask, *args[1:]))
            derived = tf.reduce_sum(cotangent * _forward(args[0], mask, args[1], args[2], args[3], units)[0])
        return tape.gradient(written, args), tape.gradient(derived, args)

    written, derived = both(projected, h0, kernel, bias)
    for a, b in zip(written, derived):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)


def test_projected_gru_second_derivatives_match_keras_gru():
    """Hessian-vector products through the written-out backward pass equal Keras' GRU's."""
    rng = np.random.default_rng(15)
    reference = keras.layers.GRU(3, return_sequences=True, dtype="float64")
    fast = ProjectedGRU(3, return_sequences=True, dtype="float64")
    x, v = tf.constant(rng.normal(size=(2, 4, 2))), tf.constant(rng.normal(size=(2, 4, 2)))
    reference(x)
    fast(x)
    fast.set_weights([rng.normal(scale=0.7, size=w.shape) for w in reference.get_weights()])
    reference.set_weights(fast.get_weights())
    mask = tf.constant(_gru_mask()[:2, 1:])
    cotangents = [tf.constant(rng.normal(size=(2, 4, 3)))]
    got = _hessian_vector(fast, lambda a: fast(a, mask=mask), cotangents, x, v)
    want = _hessian_vector(reference, lambda a: reference(a, mask=mask), cotangents, x, v)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ KeyNADE (applications/music.py)
def _key_nade(dtype):
    return KeyNADE(hidden_units=3, output_initializer=keras.initializers.RandomNormal(seed=4), dtype=dtype)


def _key_nade_inputs():
    rng = np.random.default_rng(16)
    return [rng.normal(size=(2, 3, 5)), (rng.random((2, 3, 5)) < 0.5).astype("float64")]


def test_key_nade_gradients_float32():
    """KeyNADE computes in float32 whatever its dtype, so the differences are float32's:
    ``eps = 1e-2`` (truncation ~1e-4 of these smooth sigmoids' scale, rounding ~1e-5),
    tolerance 2e-3 of ``|g| |v|``. A dropped or misplaced term (key ``j`` in its own
    logit, a missing ``U z``) is off by O(1) of it."""
    layer = _key_nade("float32")
    inputs = _key_nade_inputs()
    fn = lambda z, y: layer([z, y])  # noqa: E731
    fn(*[tf.constant(x, tf.float32) for x in inputs])
    assert_gradients_match(
        fn, inputs, layer.trainable_weights, rtol=2e-3, atol=1e-6, eps=1e-2, dtype=tf.float32, traced=False
    )


def test_key_nade_gradients_float64():
    """A float64 KeyNADE computes in float64 (it cast its inputs to float32 whatever its dtype, and
    multiplying them by its float64 weights was an error)."""
    layer = _key_nade("float64")
    inputs = _key_nade_inputs()
    fn = lambda z, y: layer([z, y])  # noqa: E731
    fn(*[tf.constant(x, tf.float64) for x in inputs])
    assert_gradients_match(fn, inputs, layer.trainable_weights)
