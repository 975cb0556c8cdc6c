"""RLadder: shapes, ablation switches, weight sharing, contract, errors, learning."""

import re

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import RLadder, level_spec
from tests.backends import float64_enabled, tensorflow_only, value_and_grads
from tests.layers.rladder.shared import BlankFramesMasked, check_constraints_reach_every_kernel_and_bias
from tests.layers.rladder.loops import assert_compiles_as_one_torch_graph, assert_same as _assert_same, loop_twins
from tests.harness import edit_saved_layer_config, run_layer_contract, two_cpu_strategy

CONV_LEVELS = [
    level_spec("convlstm", 2, pool=1),
    level_spec("convlstm", 3, pool=2, combinator="ConvG3", upsample_mode="transpose"),
    level_spec("gated", 4),
]
DENSE_LEVELS = [level_spec("gated", 4), level_spec("lstm", 3)]
FF_CONV_LEVELS = [
    level_spec("conv", 2, normalization="instance"),
    level_spec("conv", 3, pool=2),
    level_spec("gated", 4),
]


def _seq(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def test_output_shapes_and_ablations():
    x = _seq(2, 3, 4, 4, 1)
    pred, top = RLadder(CONV_LEVELS)(x)
    assert pred.shape == (2, 3, 4, 4, 1) and top.shape == (2, 3, 4)

    no_fb = RLadder(CONV_LEVELS, decoder_to_encoder=False)
    pred, top = no_fb(x)
    assert pred.shape == (2, 3, 4, 4, 1) and top.shape == (2, 3, 4)
    assert not any("feedback" in w.path for w in no_fb.weights)

    with pytest.warns(UserWarning, match="upsample_mode='transpose' has no effect"):  # (no decoder)
        encoder_only = RLadder(CONV_LEVELS, use_decoder=False)
    top = encoder_only(x)
    assert top.shape == (2, 3, 4)
    assert not any("decoder" in w.path or "feedback" in w.path for w in encoder_only.weights)
    assert encoder_only.compute_output_shape((None, 3, 4, 4, 1)) == (None, 3, 4)

    static = RLadder(DENSE_LEVELS, n_iters=5, output_units=2)
    pred, top = static(_seq(2, 6))
    assert pred.shape == (2, 5, 2) and top.shape == (2, 5, 3)


def test_weights_are_shared_over_steps_and_time_is_causal():
    short, long = RLadder(DENSE_LEVELS), RLadder(DENSE_LEVELS)
    x = _seq(2, 6, 5)
    short(x[:, :3])
    long(x)
    assert len(short.weights) == len(long.weights)
    long.set_weights(short.get_weights())
    for a, b in zip(short(x[:, :3]), long(x)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b)[:, :3], rtol=1e-5, atol=1e-6)


def test_static_input_equals_repeated_sequence():
    x = _seq(2, 4, 4, 1)
    static = RLadder(CONV_LEVELS, n_iters=3)
    seq = RLadder(CONV_LEVELS)
    static(x)
    seq(np.repeat(x[:, None], 3, axis=1))
    seq.set_weights(static.get_weights())
    for a, b in zip(static(x), seq(np.repeat(x[:, None], 3, axis=1))):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decoder_to_encoder", [True, False])
def test_decoder_feedback_reaches_the_encoder(decoder_to_encoder):
    x = _seq(2, 3, 5)
    layer = RLadder(DENSE_LEVELS, decoder_to_encoder=decoder_to_encoder)
    _, top = layer(x)
    for w in layer.weights:  # change only the decoder
        if w.path.split("/")[1].startswith("decoder"):
            w.assign(w + 0.5)
    _, top2 = layer(x)
    np.testing.assert_allclose(top2[:, 0], top[:, 0], rtol=1e-6)  # no feedback at t = 0
    changed = not np.allclose(top2[:, 1:], top[:, 1:])
    assert changed == decoder_to_encoder


CONTRACT_CASES = [
    ("dense", dict(levels=DENSE_LEVELS), (4, 2, 5)),
    ("dense_static_ablated", dict(levels=DENSE_LEVELS[1:], n_iters=2, decoder_to_encoder=False, output_units=2), (4, 5)),
    ("conv", dict(levels=CONV_LEVELS[1:]), (4, 2, 4, 4, 1)),
    ("encoder_only", dict(levels=DENSE_LEVELS[:1], use_decoder=False), (4, 2, 5)),
    ("conv_layer_norm", dict(levels=CONV_LEVELS, normalization="layer"), (4, 2, 4, 4, 1)),
    # (with the top's decoder output reaching every pixel with weights of its own)
    ("feed_forward_conv", dict(levels=FF_CONV_LEVELS[:2] + [level_spec("gated", 4, unflatten="dense")],
                               feedback_initializer="zeros"), (4, 2, 4, 4, 1)),
    ("gated_conv", dict(levels=[level_spec("gatedconv", 2, normalization="instance"),
                                level_spec("gatedconv", 3, pool=2), level_spec("gated", 4)]), (4, 2, 4, 4, 1)),
    ("learned_initial_feedback", dict(levels=FF_CONV_LEVELS, learn_initial_feedback=True), (4, 2, 4, 4, 1)),
]


@pytest.mark.parametrize("case,kwargs,shape", CONTRACT_CASES, ids=[c[0] for c in CONTRACT_CASES])
def test_layer_contract(case, kwargs, shape, tmp_path):
    run_layer_contract(RLadder, kwargs, _seq(*shape), tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(levels=[]), "Received: levels="),
        (dict(levels=[{"encoder": "gru", "units": 2}]), "Received: encoder="),
        (dict(levels=[{"encoder": "gated", "units": 2, "size": 3}]), "unknown level keys"),
        (dict(levels=[level_spec("gated", 2), level_spec("convlstm", 2)]), "before dense"),
        (dict(levels=[level_spec("gated", 2), level_spec("gated", 2, pool=2)]), "Received: pool=2"),
        (dict(levels=[{"encoder": "gated", "units": 2, "combinator": "ConvG1"}]), "Received: combinator="),
        (dict(levels=DENSE_LEVELS, n_iters=0), "Received: n_iters=0"),
        (dict(levels=DENSE_LEVELS, use_decoder=1), "Received: use_decoder=1"),
        (dict(levels=DENSE_LEVELS, input_combinator="G2"), "Received: input_combinator="),
        (dict(levels=DENSE_LEVELS, output_units=0), "Received: output_units=0"),
        (dict(levels=DENSE_LEVELS, normalization="batch"), "Received: normalization='batch'"),
        (dict(levels=[{"encoder": "convlstm", "units": 2, "normalization": "instance"}]),
         "Received: normalization='instance'"),
        (dict(levels=[{"encoder": "conv", "units": 2, "normalization": "batch"}]),
         "Received: normalization='batch'"),
        (dict(levels=DENSE_LEVELS, feedback_initializer="nope"), "nope"),
        # Audit 11: these were silently ignored (no ConvG2/ConvG3 to use them, no decoder)
        (dict(levels=[{"encoder": "convlstm", "units": 2, "combinator_filters": 4}]),
         "Received: combinator_filters=4, combinator='ConvG1'"),
        (dict(levels=CONV_LEVELS, input_combinator_filters=3), "Received: input_combinator_filters=3"),
        (dict(levels=DENSE_LEVELS, output_units=3, use_decoder=False),
         "Received: output_units=3, use_decoder=False"),
        # unflatten="dense" needs a convolutional decoder below the dense level
        (dict(levels=[level_spec("gated", 2), level_spec("gated", 2, unflatten="dense")]),
         r"levels\[1\].*a dense level there. Received: unflatten='dense'"),
        (dict(levels=[level_spec("gated", 2, unflatten="dense")]), "the G1 input combinator"),
        (dict(levels=[level_spec("conv", 2), level_spec("gated", 2, unflatten="dense")], use_decoder=False),
         r"no decoder \(use_decoder=False\)"),
        (dict(levels=[{"encoder": "conv", "units": 2, "unflatten": "dense"}]),
         "a conv level's already has them. Received: unflatten='dense'"),
        (dict(levels=[{"encoder": "gated", "units": 2, "unflatten": "tiled"}]), "Received: unflatten='tiled'"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RLadder(**kwargs)


DEEP_CONV_LEVELS = [
    level_spec("convlstm", 8),
    level_spec("convlstm", 16, pool=2),
    level_spec("convlstm", 16, pool=2),
    level_spec("gated", 64),
]


@pytest.mark.parametrize("normalization", [None, "layer"])
def test_top_of_a_deep_ladder_depends_on_its_input_at_initialization(normalization):
    """The Occluded Moving MNIST ladder (three ConvLSTM levels and a gated top) on
    binary frames: with Glorot kernels every recurrent level shrinks its input several
    times, so without normalization the top output at the first step hardly differs
    between inputs (a std of ~1e-4 across the batch); layer normalization of every
    level's input keeps it of order one."""
    keras.utils.set_random_seed(0)
    x = (np.random.default_rng(0).random((16, 2, 32, 32, 1)) < 0.5).astype("float32")
    _, top = RLadder(DEEP_CONV_LEVELS, normalization=normalization)(x)
    spread = float(np.mean(np.std(np.asarray(top[:, 0]), axis=0)))
    if normalization is None:
        assert spread < 0.01  # documents what the option changes
    else:
        assert spread > 0.1


def _inputs_of_the_first_encoder(layer, x):
    """Calls ``layer`` on ``x`` (built already) and returns what its first encoder got."""
    seen = []
    cell = layer.encoders[0]
    original = cell.step

    def spy(inp, feedback, states):
        seen.append(np.asarray(inp))
        return original(inp, feedback, states)

    cell.step = spy
    try:
        layer(x)
    finally:
        del cell.step
    assert seen, "the first encoder was never called"
    return seen


def test_layer_normalization_normalizes_each_levels_input():
    layer = RLadder(DENSE_LEVELS, normalization="layer")
    x = _seq(3, 2, 5)
    layer(x)
    for inp in _inputs_of_the_first_encoder(layer, 3.0 * x + 7.0):
        np.testing.assert_allclose(inp.mean(axis=-1), 0.0, atol=1e-5)
        np.testing.assert_allclose(inp.std(axis=-1), 1.0, atol=1e-3)
    # invariant to the scale and shift of the input: the same top output
    np.testing.assert_allclose(layer(3.0 * x + 7.0)[1], layer(x)[1], atol=1e-4)


def test_float64_layer_normalization_runs_in_float64():
    # Audit 11: normalization="layer" cast float64 inputs to float32 (errors of ~1e-3 here).
    # port15: on JAX it still averaged in float32 (keras.ops.mean does there, whatever the
    # dtype), even with jax_enable_x64.
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        layer = RLadder(DENSE_LEVELS, normalization="layer", dtype="float64")
        x = 1e4 + np.random.default_rng(3).normal(size=(2, 1, 5))
        layer(x)
        seen = _inputs_of_the_first_encoder(layer, x)
        want = (x[:, 0] - x[:, 0].mean(-1, keepdims=True)) / np.sqrt(x[:, 0].var(-1, keepdims=True) + 1e-5)
        assert seen[0].dtype == np.float64
        np.testing.assert_allclose(seen[0], want, rtol=1e-9, atol=1e-9)


def test_numpy_scalars_as_switches_rates_and_seeds():
    # Audit 11: np.True_ switches and np.float32 rates were refused; an np.int64 seed was
    # stored as is, so get_config was no longer JSON (model.save failed); seed="a" passed.
    import json

    layer = RLadder(DENSE_LEVELS, decoder_to_encoder=np.True_, use_decoder=np.True_,
                    dropout=np.float32(0.25), zoneout=np.float32(0.5), seed=np.int64(3))
    config = layer.get_config()
    json.dumps(config)
    assert config["decoder_to_encoder"] is True and config["seed"] == 3
    assert config["dropout"] == 0.25 and config["zoneout"] == 0.5
    with pytest.raises(ValueError, match="Received: seed='a'"):
        RLadder(DENSE_LEVELS, seed="a")


def test_seeds_up_to_2_to_the_63_work_and_others_are_refused():
    # review: a seed is an integer in [0, 2**63 - 1]; the masks' generator is seeded with
    # seed % 2**31 (JAX's uint32 generator state held no seed of 2**32 or more), and
    # negative or larger integers are refused at once (TensorFlow took a negative seed,
    # JAX failed on it, an int64 overflow failed late).
    x = _seq(2, 3, 5)
    for seed in (5, 2**63 - 1):
        layer = RLadder(DENSE_LEVELS, dropout=0.2, zoneout=0.1, seed=seed)
        predictions, _ = layer(x, training=True)
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(predictions)))
        assert layer.get_config()["seed"] == seed
    for seed in (-1, 2**63):
        with pytest.raises(ValueError, match=r"in \[0, 2\*\*63 - 1\] or None. Received: seed=" + str(seed)):
            RLadder(DENSE_LEVELS, dropout=0.2, seed=seed)


def test_a_mask_that_does_not_fit_the_steps_is_a_clear_error():
    # Audit 11: a [batch, T + 1] mask was silently cut to T steps, a [batch, T - 1] or
    # rank-3 one failed with a raw TensorFlow error.
    x = _seq(2, 4, 5)
    for mask in (np.ones((2, 5), bool), np.ones((2, 3), bool), np.ones((2, 4, 5), bool)):
        with pytest.raises(ValueError, match=r"mask of shape \[batch, T\].*Received: mask shape="):
            RLadder(DENSE_LEVELS)(x, mask=mask)


@pytest.mark.parametrize("tagger", [False, True], ids=["RLadder", "RTagger"])
@pytest.mark.parametrize("jit_compile", [False, True], ids=["", "xla"])
def test_a_mask_of_other_sizes_fails_when_they_are_known_only_at_run_time(tagger, jit_compile):
    """Audit (2026-12-01): traced with an unknown batch or T (``predict`` after a retrace
    for another length, a tf.function with a None signature), a [1, T] mask was broadcast
    over the batch (one sample's padding masked another's real steps), and a mask one
    step short read as padding at the last step: silently wrong outputs, where an eager
    call refused both."""
    from tests.backends import tensorflow_only
    from keras_capsules.layers import RTagger

    tensorflow_only("a tf.function traced with unknown shapes (JAX traces concrete shapes)")
    import tensorflow as tf

    x = _seq(2, 4, 5)
    layer = RTagger(2, DENSE_LEVELS) if tagger else RLadder(DENSE_LEVELS)
    expected = keras.ops.convert_to_numpy(layer(x)[1])
    run = tf.function(
        lambda v, m: layer(v, mask=m)[1], jit_compile=jit_compile,
        input_signature=[tf.TensorSpec((None, None, 5)), tf.TensorSpec((None, None), tf.bool)],
    )
    np.testing.assert_allclose(run(x, np.ones((2, 4), bool)), expected, rtol=1e-5, atol=1e-6)
    for mask in (np.ones((2, 3), bool), np.ones((1, 4), bool), np.ones((2, 1), bool), np.ones((1, 1), bool)):
        with pytest.raises(tf.errors.InvalidArgumentError):
            run(x, mask)


def test_bad_input_shapes():
    with pytest.raises(ValueError, match=r"\[batch, T, features\]"):
        RLadder(DENSE_LEVELS)(_seq(2, 5))
    with pytest.raises(ValueError, match=r"static input of shape \[batch, features\]"):
        RLadder(DENSE_LEVELS, n_iters=2)(_seq(2, 3, 5))
    with pytest.raises(ValueError, match="divisible by 2"):
        RLadder(CONV_LEVELS)(_seq(2, 2, 3, 3, 1))
    with pytest.raises(ValueError, match="image input needs a convolutional input_combinator"):
        RLadder(DENSE_LEVELS)(_seq(2, 2, 3, 3, 1))
    with pytest.raises(ValueError, match="vector input needs input_combinator='G1'"):
        RLadder(DENSE_LEVELS, input_combinator="ConvG1")(_seq(2, 2, 5))
    # Audit (2026-11-30): convolutional levels on a vector input named the input
    # combinator (which the user had not set), and only after it the levels.
    with pytest.raises(ValueError, match=r"levels\[0\] is convolutional and expects an image"):
        RLadder(CONV_LEVELS)(_seq(2, 2, 5))
    layer = RLadder(DENSE_LEVELS)
    layer(_seq(2, 3, 5))
    with pytest.raises(ValueError, match=r"features of shape \(5,\)"):
        layer(_seq(2, 3, 6))


def test_learns_next_step_prediction_of_a_periodic_sequence():
    """A 1-D sine of random phase: predict x_{t+1} from x_1..x_t. x_t alone does not say
    whether the sine rises or falls, so a ladder that keeps nothing from step to step
    cannot go below sin(0.8)^2 / 2 = 0.257 (E[x_{t+1} | x_t] = cos(0.8) x_t); after two
    steps a recurrent one can. (A 2-D (sin, cos) pair was a rotation of x_t: a ladder
    with no memory at all passed.)"""
    rng = np.random.default_rng(0)
    n, steps = 128, 8
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
    t = np.arange(steps + 1)[None, :]
    seq = np.sin(0.8 * t + phase)[..., None].astype("float32")
    x, y = seq[:, :-1], seq[:, 1:]

    inputs = keras.Input((steps, 1))
    prediction, _ = RLadder([level_spec("gated", 12)])(inputs)
    model = keras.Model(inputs, prediction)
    model.compile(keras.optimizers.Adam(0.02), "mse", jit_compile=False)  # fast to trace
    model.fit(x, y, epochs=30, batch_size=32, verbose=0)
    late = np.mean((model.predict(x, verbose=0)[:, 2:] - y[:, 2:]) ** 2)
    assert late < 0.1, late  # without memory: >= 0.257


def test_symbolic_output_spec_follows_the_policy():
    inputs = keras.Input((3, 5))
    prediction, top = RLadder(DENSE_LEVELS, dtype="mixed_bfloat16")(inputs)
    assert prediction.shape == (None, 3, 5) and top.shape == (None, 3, 3)
    assert prediction.dtype == "bfloat16" and top.dtype == "bfloat16"


def test_gated_conv_levels_have_no_state_and_take_the_feedback():
    levels = [level_spec("gatedconv", 2, normalization="instance"), level_spec("gatedconv", 3, pool=2),
              level_spec("gated", 4)]
    layer = RLadder(levels)
    x = _seq(2, 3, 4, 4, 1)
    pred, top = layer(x)
    assert pred.shape == (2, 3, 4, 4, 1) and top.shape == (2, 3, 4)
    assert [type(cell).__name__ for cell in layer.encoders] == ["GatedConvEncoderCell"] * 2 + ["GatedEncoderCell"]
    assert [cell.NUM_STATES for cell in layer.encoders] == [0, 0, 1]
    assert layer.encoders[0].normalization == "instance" and layer.encoders[1].normalization is None
    assert tuple(layer.encoders[0].feedback_kernel.shape) == (3, 3, 2, 6)  # three gates
    with pytest.warns(UserWarning, match="zoneout=0.3"):  # (no state to zone out)
        RLadder(levels[:2], zoneout=0.3)


def test_feed_forward_conv_levels_have_no_state_and_take_the_feedback():
    layer = RLadder(FF_CONV_LEVELS)
    x = _seq(2, 3, 4, 4, 1)
    pred, top = layer(x)
    assert pred.shape == (2, 3, 4, 4, 1) and top.shape == (2, 3, 4)
    assert [cell.NUM_STATES for cell in layer.encoders] == [0, 0, 1]
    assert layer.encoders[0].normalization == "instance" and layer.encoders[1].normalization is None
    assert any("encoder_1/feedback_kernel" in w.path for w in layer.weights)
    # zoneout leaves the stateless levels alone
    RLadder(FF_CONV_LEVELS, zoneout=0.5, seed=1)(x, training=True)


def _assert_same_with_shared_weights(ladder, other, x, own, rtol):
    """``ladder`` given ``other``'s weights (all but those whose path holds ``own``, which
    ``other`` lacks) gives ``other``'s outputs on ``x``."""
    others = {w.path.split("/", 1)[1]: w for w in other.weights}
    for w in ladder.weights:
        if own not in w.path:
            w.assign(others[w.path.split("/", 1)[1]])
    for a, b in zip(ladder(x), other(x)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6)


def test_zero_feedback_initializer_starts_as_the_ladder_without_feedback():
    x = _seq(2, 3, 4, 4, 1)
    levels = FF_CONV_LEVELS[:2]  # (a gated level has an extra gate block with feedback)
    full = RLadder(levels, feedback_initializer="zeros")
    ablated = RLadder(levels, decoder_to_encoder=False)
    full(x)
    ablated(x)
    feedback = [w for w in full.weights if "feedback_kernel" in w.path]
    assert len(feedback) == 2 and all(not np.any(np.asarray(w)) for w in feedback)
    _assert_same_with_shared_weights(full, ablated, x, "feedback_kernel", rtol=1e-5)
    config = full.get_config()
    assert config["feedback_initializer"]["class_name"] == "Zeros"
    assert RLadder.from_config(config).feedback_initializer is not None
    assert RLadder(DENSE_LEVELS).get_config()["feedback_initializer"] is None


def test_a_seeded_initializer_starts_every_level_different_and_reproducibly():
    # Audit (2026-11-28): every sublayer got a copy of a seeded initializer with its seed,
    # so same-shaped weights started identical: the kernels of equal levels, and a
    # level's input and feedback kernels (a symmetry training had to break first).
    def weights():
        ladder = RLadder(
            [level_spec("gated", 4), level_spec("gated", 4)],
            kernel_initializer=keras.initializers.GlorotUniform(seed=7),
            recurrent_initializer=keras.initializers.Orthogonal(seed=7),
        )
        ladder(_seq(1, 2, 4))
        return {w.path.split("/", 1)[1]: np.asarray(w) for w in ladder.weights if w.path.endswith("kernel")}

    first = weights()
    assert len(first) == 8  # input, feedback, recurrent kernels of 2 levels; decoders 0 and 1
    by_shape = {}
    for name, value in first.items():
        by_shape.setdefault(value.shape, []).append((name, value))
    for same_shape in by_shape.values():
        for i, (name_a, a) in enumerate(same_shape):
            for name_b, b in same_shape[:i]:
                assert not np.array_equal(a, b), (name_a, name_b)
    for name, value in weights().items():  # the same seed gives the same ladder
        np.testing.assert_array_equal(value, first[name])


@pytest.mark.parametrize("kwargs", [{}, {"decoder_to_encoder": False}, {"use_decoder": False}])
def test_padded_steps_never_change_the_other_outputs(kwargs):
    """A Keras mask: padded steps (leading, inner, trailing) hold the carry, output zeros."""
    rng = np.random.default_rng(0)
    ladder = RLadder([level_spec("convlstm", 2), level_spec("conv", 3, pool=2), level_spec("gated", 4)], **kwargs)
    x = rng.normal(size=(2, 3, 4, 4, 1)).astype("float32")
    want = ladder(x)
    want = want if isinstance(want, list) else [want]
    padded = 5 * rng.normal(size=(2, 6, 4, 4, 1)).astype("float32")
    padded[:, [1, 3, 4]] = x
    mask = np.zeros((2, 6), bool)
    mask[:, [1, 3, 4]] = True
    got = ladder(padded, mask=mask)
    got = got if isinstance(got, list) else [got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g)[:, [1, 3, 4]], np.asarray(w), atol=1e-6)
        assert np.all(np.asarray(g)[:, [0, 2, 5]] == 0)
    inputs = keras.Input((3, 5))
    outputs = RLadder([level_spec("gated", 4)], **kwargs)(keras.layers.Masking()(inputs))
    outputs = outputs if isinstance(outputs, list) else [outputs]
    assert all(getattr(o, "_keras_mask", None) is not None for o in outputs)


def test_a_masked_image_ladder_trains_with_a_keras_loss_on_its_predictions():
    # Audit 2026-11-30: the [batch, T] mask on [batch, T, H, W, C] predictions failed in
    # fit ("Dimensions must be equal") with any Keras loss; the top keeps [batch, T] for
    # the layers above it (TimeDistributed, RNNs).
    x = _seq(4, 3, 4, 4, 1, seed=2)
    x[0, 2] = 0.0
    inputs = keras.Input((3, 4, 4, 1))
    predictions, top = RLadder([level_spec("convlstm", 2), level_spec("convlstm", 3, pool=2)], seed=0)(
        BlankFramesMasked()(inputs)
    )
    assert tuple(predictions._keras_mask.shape) == (None, 3, 4, 4)
    assert tuple(top._keras_mask.shape) == (None, 3)
    summary = keras.layers.LSTM(2)(keras.layers.TimeDistributed(keras.layers.Flatten())(top))
    assert keras.ops.convert_to_numpy(keras.Model(inputs, summary)(x)).shape == (4, 2)
    model = keras.Model(inputs, predictions)
    model.compile("adam", "mse")
    errors = ((keras.ops.convert_to_numpy(model(x)) - x) ** 2).mean(-1)
    keep = np.ones((4, 3), bool)
    keep[0, 2] = False
    np.testing.assert_allclose(model.evaluate(x, x, verbose=0), errors[keep].mean(), rtol=1e-5)
    model.fit(x, x, epochs=1, verbose=0)


@pytest.mark.parametrize("fill", [np.inf, np.nan])
def test_non_finite_padded_steps_give_finite_gradients(fill):
    # Audit 11: an inf or NaN at a padded step left the outputs right but made every
    # weight's gradient NaN (the padded step still ran on it).
    x = _seq(2, 4, 5)
    mask = np.array([[1, 1, 1, 0], [1, 0, 1, 1]], bool)
    x[~mask] = fill
    ladder = RLadder(DENSE_LEVELS)
    ladder(x, mask=mask)  # the weights must exist before a JAX gradient is taken

    def loss():
        predictions, top = ladder(x, mask=mask)
        return keras.ops.sum(predictions) + keras.ops.sum(top), (predictions, top)

    (_, (predictions, top)), _, grads = value_and_grads(loss, variables=ladder.trainable_weights, has_aux=True)
    assert grads and all(g is not None and np.all(np.isfinite(keras.ops.convert_to_numpy(g))) for g in grads)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(predictions))) and np.all(np.isfinite(keras.ops.convert_to_numpy(top)))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("levels", ["dense", "conv"])
def test_step_with_output_units_follows_the_policy_like_call(policy, levels):
    # Audit 6: outside ``call`` (no Keras autocast) the float32 output map promoted
    # step's prediction to float32 while call returned the compute dtype.
    levels, x = {
        "dense": (DENSE_LEVELS, _seq(2, 3, 5)),
        "conv": (CONV_LEVELS, _seq(2, 3, 4, 4, 1)),
    }[levels]
    layer = RLadder(levels, output_units=2, dtype=policy)
    prediction, top = layer(x)
    assert keras.backend.standardize_dtype(prediction.dtype) == keras.backend.standardize_dtype(top.dtype) == policy.split("_")[1]
    carry = layer.initial_carry(2, prediction.dtype)
    step_prediction, step_top, _ = layer.step(keras.ops.cast(x[:, 0], prediction.dtype), carry)
    assert (keras.backend.standardize_dtype(step_prediction.dtype) == keras.backend.standardize_dtype(step_top.dtype)
            == keras.backend.standardize_dtype(prediction.dtype))
    np.testing.assert_array_equal(
        np.asarray(keras.ops.cast(step_prediction, "float32")),
        np.asarray(keras.ops.cast(prediction[:, 0], "float32")),
    )


def test_constraints_reach_every_kernel_and_bias():
    # Audit 2026-11-30: RLadder took no constraints (DESIGN: initializers, regularizers and
    # constraints are constructor arguments): kernel_constraint= was an unknown keyword.
    levels = [level_spec("convlstm", 2), level_spec("conv", 2, pool=2, normalization="instance"), level_spec("gated", 3)]
    non_neg = {f"{kind}_constraint": "non_neg" for kind in ("kernel", "recurrent", "bias")}
    check_constraints_reach_every_kernel_and_bias(
        RLadder(levels, output_units=1, **non_neg), _seq(4, 3, 4, 4, 1), {"gamma", "mu_weights", "s_weights"}
    )


def test_stepping_an_unbuilt_ladder_is_a_clear_error():
    # Audit 2026-11-30: initial_carry and step before build raised AttributeError '_enc_outputs'
    ladder = RLadder(DENSE_LEVELS)
    with pytest.raises(ValueError, match=r"RLadder.initial_carry needs a built ladder"):
        ladder.initial_carry(2, "float32")
    with pytest.raises(ValueError, match=r"RLadder.step needs a built ladder"):
        ladder.step(_seq(2, 3), None)
    ladder.build((None, 4, 3))
    _, top, _ = ladder.step(_seq(2, 3), ladder.initial_carry(2, "float32"))
    assert top.shape == (2, 3)


def test_layer_normalization_of_a_single_feature_is_a_clear_error():
    # Audit 2026-11-30: normalization="layer" on a level whose input has one feature made
    # that input 0 for every sequence, so the top did not depend on the data.
    with pytest.raises(ValueError, match=r"level 0's input has one \(\(1,\)\).*input shape=\(2, 5, 1\)"):
        RLadder([level_spec("gated", 4), level_spec("gated", 3)], normalization="layer")(_seq(2, 5, 1))
    with pytest.raises(ValueError, match=r"level 1's input has one \(\(1, 1, 1\)\)"):
        levels = [level_spec("conv", 1), level_spec("conv", 2, pool=4), level_spec("gated", 3)]
        RLadder(levels, normalization="layer")(_seq(2, 3, 4, 4, 1))
    assert RLadder([level_spec("gated", 4)], normalization="layer")(_seq(2, 5, 2))[1].shape == (2, 5, 4)


def test_a_mask_with_n_iters_is_a_clear_error():
    # fix13: with n_iters set a mask (given or propagated by Keras) was silently dropped.
    with pytest.raises(ValueError, match=r"n_iters=2 .*takes no mask.*Received: mask shape=\(2,\)"):
        RLadder(DENSE_LEVELS, n_iters=2)(_seq(2, 5), mask=np.ones((2,), bool))
    inputs = keras.Input((5,))
    with pytest.raises(ValueError, match="takes no mask"):
        RLadder(DENSE_LEVELS, n_iters=2)(keras.layers.Masking()(inputs))


def test_a_dense_unflatten_lets_the_top_say_where():
    """unflatten="dense": the top's decoder output reaches every pixel with its own weights."""
    levels = [level_spec("conv", 2, normalization="instance"), level_spec("conv", 3, pool=2),
              level_spec("gated", 4, unflatten="dense")]
    ladder = RLadder(levels, output_units=1)
    x = _seq(2, 3, 8, 8, 1)
    pred, top = ladder(x)
    assert pred.shape == (2, 3, 8, 8, 1) and top.shape == (2, 3, 4)
    kernel = next(w for w in ladder.weights if w.path.endswith("decoder_2/top_kernel"))
    assert tuple(kernel.shape) == (4, 4 * 4 * 3)  # 4 top units -> 4x4 pixels x 3 channels
    assert all(spec["unflatten"] == "broadcast" for spec in ladder.get_config()["levels"][:2])
    # a config saved before the key existed loads as "broadcast"
    old = ladder.get_config()
    old["levels"] = [{k: v for k, v in spec.items() if k != "unflatten"} for spec in old["levels"]]
    assert RLadder.from_config(old).levels[-1]["unflatten"] == "broadcast"


@pytest.mark.parametrize(
    "levels",
    [
        [dict(encoder="convlstm", units=2, upsample_mode="transpose")],
        [level_spec("convlstm", 2), dict(encoder="gated", units=2, pool=2, upsample_mode="transpose")],
    ],
    ids=["conv_pool_1", "dense_pool_2"],
)
def test_transpose_upsampling_where_nothing_is_upsampled_is_a_clear_error(levels):
    # fix13: upsample_mode="transpose" on a level that does not pool (or a dense one) was
    # accepted and had no effect.
    with pytest.raises(ValueError, match=r"Received: upsample_mode='transpose', pool="):
        RLadder(levels)
    with pytest.raises(ValueError, match="nothing to upsample"):
        level_spec(**levels[-1])


def test_a_saved_model_with_a_no_op_transpose_upsample_mode_still_loads(tmp_path):
    inputs = keras.Input((2, 4, 4, 1))
    model = keras.Model(inputs, RLadder(CONV_LEVELS, name="ladder")(inputs))
    path = tmp_path / "old.keras"
    model.save(path)
    # what an older version saved: "transpose" on the first level, which does not pool
    edit_saved_layer_config(path, "ladder", lambda c: c["levels"][0].update(upsample_mode="transpose"))
    with pytest.warns(UserWarning, match="upsample_mode='transpose' has no effect"):
        loaded = keras.saving.load_model(path)
    assert loaded.get_layer("ladder").levels[0]["upsample_mode"] == "nearest"
    x = _seq(2, 2, 4, 4, 1)
    for a, b in zip(model(x), loaded(x)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


NO_FEEDBACK = [dict(decoder_to_encoder=False), dict(use_decoder=False)]


@pytest.mark.parametrize("levels", [DENSE_LEVELS, FF_CONV_LEVELS], ids=["dense", "conv"])
def test_learned_initial_feedback_is_the_feedback_of_the_first_step(levels):
    x = _seq(2, 3, *((5,) if levels is DENSE_LEVELS else (4, 4, 1)))
    learned, plain = RLadder(levels, learn_initial_feedback=True), RLadder(levels)
    learned(x)
    plain(x)
    initial = [w for w in learned.weights if "initial_feedback" in w.path]
    assert [tuple(w.shape) for w in initial] == [tuple(h) for h in learned._enc_outputs]
    assert all(not np.any(np.asarray(w)) for w in initial)  # starts as zeros: the plain ladder
    _assert_same_with_shared_weights(learned, plain, x, "initial_feedback", rtol=1e-6)
    rng = np.random.default_rng(1)
    for w in initial:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    prediction, top = learned(x)
    assert not np.allclose(top[:, 0], plain(x)[1][:, 0])  # the first step sees it
    # ... as the feedback of the carry the step method starts from
    states, _ = plain.initial_carry(2, "float32")
    carry = (states, [ops.broadcast_to(w, (2,) + tuple(w.shape)) for w in initial])
    step_prediction, step_top, _ = plain.step(x[:, 0], carry)
    np.testing.assert_allclose(top[:, 0], step_top, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(prediction[:, 0], step_prediction, rtol=1e-5, atol=1e-6)
    # one value for every sample, trained by the loss
    _, _, grads = value_and_grads(lambda: ops.sum(learned(x)[0]) + ops.sum(learned(x)[1]), (), initial)
    assert all(np.any(np.asarray(g)) for g in grads)
    restored = RLadder.from_config(learned.get_config())
    assert restored.learn_initial_feedback is True
    assert RLadder(levels).get_config()["learn_initial_feedback"] is False


@pytest.mark.parametrize("kwargs", NO_FEEDBACK, ids=["decoder_to_encoder", "use_decoder"])
def test_learned_initial_feedback_without_feedback_is_a_clear_error(kwargs):
    (switch,) = kwargs
    with pytest.raises(ValueError, match=rf"{switch}=False builds no feedback\. Received: learn_initial_feedback=True"):
        RLadder(DENSE_LEVELS, learn_initial_feedback=True, **kwargs)
    with pytest.raises(ValueError, match="Received: learn_initial_feedback='yes'"):
        RLadder(DENSE_LEVELS, learn_initial_feedback="yes")


@pytest.mark.parametrize("kwargs", NO_FEEDBACK, ids=["decoder_to_encoder", "use_decoder"])
def test_feedback_initializer_without_feedback_is_a_clear_error(kwargs):
    # fix22: feedback_initializer was silently ignored by a ladder without feedback kernels
    (switch,) = kwargs
    with pytest.raises(ValueError, match=rf"{switch}=False builds none\. Received: feedback_initializer='zeros'"):
        RLadder(DENSE_LEVELS, feedback_initializer="zeros", **kwargs)
    layer = RLadder(DENSE_LEVELS, **kwargs)  # the default (None) is fine
    assert layer.get_config()["feedback_initializer"] is None
    assert all(not cell.use_feedback and cell.feedback_initializer is None for cell in layer.encoders)


@pytest.mark.parametrize("kwargs", NO_FEEDBACK, ids=["decoder_to_encoder", "use_decoder"])
def test_a_saved_ladder_without_feedback_holding_a_feedback_initializer_still_loads(kwargs, tmp_path):
    inputs = keras.Input((2, 5))
    model = keras.Model(inputs, RLadder(DENSE_LEVELS, name="ladder", **kwargs)(inputs))
    path = tmp_path / "old.keras"
    model.save(path)
    # what an older version saved (the Occluded MNIST no_feedback model did)
    zeros = keras.initializers.serialize(keras.initializers.Zeros())
    edit_saved_layer_config(path, "ladder", lambda c: c.update(feedback_initializer=zeros))
    with pytest.warns(UserWarning, match="feedback_initializer='Zeros' has no effect without"):
        loaded = keras.saving.load_model(path)
    assert loaded.get_layer("ladder").feedback_initializer is None
    x = _seq(2, 2, 5)
    for a, b in zip(keras.tree.flatten(model(x)), keras.tree.flatten(loaded(x))):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("unroll", [None, False])
@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_integer_and_boolean_inputs_run_as_floats(dtype, unroll):
    # audit (2026-11-27): Keras casts only floating inputs to the compute dtype, and the
    # ladder made its states and loop buffers in the input's dtype: 0/1 piano rolls as
    # int32 or bool failed ("expected a float tensor"), while compute_output_spec said float32
    x = np.random.default_rng(0).random((2, 3, 5)) > 0.5
    ladder = RLadder(DENSE_LEVELS, output_units=3, unroll=unroll)
    want = ladder(x.astype("float32"))
    got = ladder(x.astype(dtype))
    for a, b in zip(got, want):
        assert keras.backend.standardize_dtype(a.dtype) == "float32"
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    inputs = keras.Input((None, 5), dtype=dtype)
    model = keras.Model(inputs, RLadder(DENSE_LEVELS, unroll=unroll)(inputs))
    assert all(np.all(np.isfinite(o)) for o in model.predict(x.astype(dtype), verbose=0))


@pytest.mark.parametrize("use_decoder", [True, False])
def test_an_empty_batch_through_the_symbolic_loop(use_decoder):
    # audit (2026-11-27): on TensorFlow the loop's scatter into [T, 0, ...] buffers failed
    # ("Indices and updates specified for empty output shape"); a replica of a
    # MirroredStrategy gets an empty batch when the last batch is smaller than the replicas
    kwargs = dict(output_units=3) if use_decoder else dict(use_decoder=False)
    ladder = RLadder(DENSE_LEVELS, unroll=False, **kwargs)
    want = [(0, 4, 3), (0, 4, 3)] if use_decoder else [(0, 4, 3)]
    got = keras.tree.flatten(ladder(_seq(0, 4, 5)))
    assert [tuple(o.shape) for o in got] == want
    inputs = keras.Input((None, 5))
    model = keras.Model(inputs, RLadder(DENSE_LEVELS, **kwargs)(inputs))
    if keras.backend.backend() == "tensorflow":  # traced for any batch and T: the loop
        import tensorflow as tf

        traced = tf.function(model, input_signature=[tf.TensorSpec((None, None, 5))])
        got = keras.tree.flatten(traced(_seq(0, 4, 5)))
        assert [tuple(o.shape) for o in got] == want
    full = keras.tree.flatten(model.predict(_seq(3, 4, 5), verbose=0))
    alone = keras.tree.flatten(model.predict(_seq(3, 4, 5)[:1], verbose=0))
    for a, b in zip(full, alone):  # the spare sample of the buffers is cut off
        assert a.shape[0] == 3 and b.shape[0] == 1
        np.testing.assert_allclose(a[:1], b, rtol=1e-5, atol=1e-6)


def test_a_last_batch_smaller_than_the_replicas_through_the_symbolic_loop():
    # the case of the test above in a user's run: padded batches of any length under a
    # MirroredStrategy of two replicas, the last batch of one sequence (one replica's empty)
    import tensorflow as tf

    with two_cpu_strategy().scope():
        inputs = keras.Input((None, 5))
        model = keras.Model(inputs, RLadder(DENSE_LEVELS, output_units=3)(inputs))
    sequences = [_seq(4, 5, seed=0), _seq(4, 5, seed=1), _seq(3, 5, seed=2)]
    ds = tf.data.Dataset.from_generator(  # batches of [None, None, 5]: the loop
        lambda: iter(sequences), output_signature=tf.TensorSpec((None, 5), tf.float32)
    ).padded_batch(2)
    got = model.predict(ds, verbose=0)  # ragged [3, (4, 4, 3), 3]: the batches' lengths differ
    alone = model.predict(sequences[2][None], verbose=0)
    for output, want in zip(got, alone):
        assert output.shape[0] == 3
        np.testing.assert_allclose(np.asarray(output[2]), want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [{"decoder_to_encoder": False}, {"use_decoder": False}])
def test_dropout_leaves_the_returned_top_output_clean(kwargs):
    # fix13: the top encoder output was returned after the dropout meant for its way
    # to the decoder, so a classifier reading it saw dropped-out (and rescaled) units.
    if kwargs.get("use_decoder", True):
        layer = RLadder(DENSE_LEVELS[:1], dropout=0.5, seed=1, **kwargs)
    else:  # one level without decoder: nothing to drop (the top output never is)
        with pytest.warns(UserWarning, match="dropout=0.5 has no effect"):
            layer = RLadder(DENSE_LEVELS[:1], dropout=0.5, seed=1, **kwargs)
    x = _seq(3, 4, 5)
    clean, dropped = layer(x), layer(x, training=True)
    if kwargs.get("use_decoder", True):
        (clean_prediction, clean), (dropped_prediction, dropped) = clean, dropped
        assert not np.allclose(clean_prediction, dropped_prediction)  # the decoder still is
    np.testing.assert_allclose(dropped, clean, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------- the symbolic loop
LOOP_CASES = [
    ("dense", DENSE_LEVELS, (2, 5, 6), {}),
    ("conv", CONV_LEVELS, (2, 3, 4, 4, 1), {}),
    ("feed_forward_conv_output_units", FF_CONV_LEVELS, (2, 3, 4, 4, 1), dict(output_units=2)),
    ("static", DENSE_LEVELS, (2, 6), dict(n_iters=3)),
    ("encoder_only", DENSE_LEVELS, (2, 5, 6), dict(use_decoder=False)),
    ("no_feedback_layer_norm", CONV_LEVELS, (2, 3, 4, 4, 1), dict(decoder_to_encoder=False, normalization="layer")),
    ("zoneout_dropout", DENSE_LEVELS, (2, 5, 6), dict(zoneout=0.3, dropout=0.2)),
]


def _twins(levels, kwargs, x):
    """An unrolled ladder and a looping one with the same weights."""
    return loop_twins(lambda unroll: RLadder(levels, unroll=unroll, **kwargs), x)


@pytest.mark.parametrize("case,levels,shape,kwargs", LOOP_CASES, ids=[c[0] for c in LOOP_CASES])
def test_the_symbolic_loop_gives_the_unrolled_outputs(case, levels, shape, kwargs):
    x = _seq(*shape)
    unrolled, looped = _twins(levels, kwargs, x)
    _assert_same(unrolled(x), looped(x))
    if "n_iters" not in kwargs:  # with padded steps too
        mask = np.ones(shape[:2], bool)
        mask[0, 1] = mask[1, -1] = mask[1, 0] = False
        _assert_same(unrolled(x, mask=mask), looped(x, mask=mask))


def test_the_symbolic_loop_gives_the_unrolled_gradients():
    x = _seq(2, 4, 5)
    mask = np.array([[1, 1, 1, 0], [1, 0, 1, 1]], bool)
    grads = []
    for ladder in _twins(DENSE_LEVELS, dict(output_units=3), x):

        def loss(ladder=ladder):
            predictions, top = ladder(x, mask=mask)
            return keras.ops.sum(predictions**2) + keras.ops.sum(top)

        _, _, g = value_and_grads(loss, variables=ladder.trainable_weights)
        grads.append(g)
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sequences_of_unknown_length_run_through_one_model(tmp_path):
    inputs = keras.Input((None, 6))
    predictions, top = RLadder(DENSE_LEVELS, output_units=6, name="ladder")(inputs)
    assert tuple(predictions.shape) == (None, None, 6) and tuple(top.shape) == (None, None, 3)
    model = keras.Model(inputs, [predictions, top])
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    for steps in (1, 3, 7):
        x = _seq(2, steps, 6, seed=steps)
        fixed = RLadder(DENSE_LEVELS, output_units=6, unroll=True)
        fixed(x)
        fixed.set_weights(model.get_layer("ladder").get_weights())
        got = model.predict(x, verbose=0)
        assert got[0].shape == (2, steps, 6) and got[1].shape == (2, steps, 3)
        _assert_same(got, fixed(x))
        _assert_same(loaded.predict(x, verbose=0), got)


@pytest.mark.parametrize("unroll,jit_compile", [(None, False), (False, False), (False, True)])
def test_a_model_on_sequences_of_unknown_length_trains(unroll, jit_compile):
    # (fit traces with the steps of its data: unroll=None unrolls them there)
    inputs = keras.Input((None, 4))
    predictions, _ = RLadder(
        DENSE_LEVELS, output_units=4, dropout=0.2, zoneout=0.1, seed=3, unroll=unroll
    )(inputs)
    model = keras.Model(inputs, predictions)
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=jit_compile)
    t = np.linspace(0, 2 * np.pi, 7, dtype="float32")  # (T = 6: unroll=None unrolls it in fit's trace)
    waves = np.stack([np.sin(t + phase) for phase in np.linspace(0, 1, 4)], -1)  # [7, 4]
    x, y = np.repeat(waves[None, :-1], 16, 0), np.repeat(waves[None, 1:], 16, 0)
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=15, batch_size=8, verbose=0)
    model.fit(x[:, :5], y[:, :5], epochs=1, batch_size=8, verbose=0)  # another length, same model
    after = model.evaluate(x, y, verbose=0)
    assert np.isfinite(after) and after < 0.5 * before


def test_the_loop_draws_a_zoneout_mask_for_every_step():
    # With zoneout 0.999 in training nearly every unit keeps its zero initial state,
    # at every step; a mask drawn once, or not applied inside the loop, would not.
    x = _seq(4, 6, 5) + 3.0
    for ladder in _twins(DENSE_LEVELS, dict(zoneout=0.999, seed=0), x):
        _, top = ladder(x, training=True)
        top = keras.ops.convert_to_numpy(top)
        assert np.mean(top == 0) > 0.97, np.mean(top == 0)
        assert np.all(np.isfinite(top))
        _, inference = ladder(x)
        assert np.mean(keras.ops.convert_to_numpy(inference) == 0) < 0.5  # the expectation


def test_zoneout_at_inference_is_the_documented_expectation():
    """Audit s64 (mutation): zoneout at inference returning h_new alone, or with the two
    weights swapped, survived every test (the loop tests above compare the unrolled and
    symbolic loops with each other, and zoneout=0.5 is symmetric). The docstring says
    the state is zoneout * h_prev + (1 - zoneout) * h_new: hand-rolled here from the
    cells' own steps (both states of the lstm level), through both loops."""
    zoneout = 0.3  # not 0.5, where swapping the weights changes nothing
    x = _seq(2, 4, 5)
    for ladder in _twins(DENSE_LEVELS, dict(zoneout=zoneout, use_decoder=False), x):
        states = [[np.zeros((2, cell.units), "float32")] * cell.NUM_STATES for cell in ladder.encoders]
        want = []
        for t in range(x.shape[1]):
            below = x[:, t]
            for i, cell in enumerate(ladder.encoders):
                _, new = cell.step(below, None, states[i])
                new = [keras.ops.convert_to_numpy(n) for n in new]
                states[i] = [zoneout * o + (1 - zoneout) * n for o, n in zip(states[i], new)]
                below = states[i][0]
            want.append(below)
        # float32 steps that the ladder and the hand-rolled loop compute alike: 1e-5
        got = keras.ops.convert_to_numpy(ladder(x))
        np.testing.assert_allclose(got, np.stack(want, 1), rtol=1e-5, atol=1e-6, err_msg=f"unroll={ladder.unroll}")


@pytest.mark.parametrize("noise", ["step", "sequence"])
def test_the_loop_drops_out_in_training_only(noise):
    x = _seq(3, 4, 5)
    ladder = RLadder(DENSE_LEVELS, dropout=0.5, dropout_noise=noise, unroll=False, seed=2)
    clean = ladder(x)
    again = ladder(x)
    _assert_same(clean, again)
    dropped = ladder(x, training=True)
    assert not np.allclose(keras.ops.convert_to_numpy(dropped[0]), keras.ops.convert_to_numpy(clean[0]))
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(t))) for t in dropped)


LOOP_CONTRACT_CASES = [
    ("dense_loop", dict(levels=DENSE_LEVELS, unroll=False), (4, 2, 5)),
    ("conv_loop", dict(levels=CONV_LEVELS[1:], unroll=False, output_units=2), (4, 2, 4, 4, 1)),
    ("static_loop", dict(levels=DENSE_LEVELS[1:], n_iters=2, unroll=False), (4, 5)),
]


@pytest.mark.parametrize("case,kwargs,shape", LOOP_CONTRACT_CASES, ids=[c[0] for c in LOOP_CONTRACT_CASES])
def test_layer_contract_of_the_symbolic_loop(case, kwargs, shape, tmp_path):
    run_layer_contract(RLadder, kwargs, _seq(*shape), tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


def test_unroll_is_checked():
    with pytest.raises(ValueError, match="Received: unroll='yes'"):
        RLadder(DENSE_LEVELS, unroll="yes")
    with pytest.raises(ValueError, match="unroll=True unrolls a known number of steps"):
        RLadder(DENSE_LEVELS, unroll=True)(keras.Input((None, 5)))
    config = RLadder(DENSE_LEVELS).get_config()
    assert config["unroll"] is None
    del config["unroll"]  # a ladder saved before the option existed
    assert RLadder.from_config(config).unroll is None


def test_a_convolutional_ladder_loop_trains_under_xla():
    # The combinators' nearest upsampling used ops.repeat, whose TensorFlow gradient
    # reshapes by a shape computed in the forward pass: XLA refused to compile it
    # inside the loop ("must be a compile-time constant").
    inputs = keras.Input((None, 8, 8, 1))
    predictions, _ = RLadder(FF_CONV_LEVELS, output_units=1, unroll=False)(inputs)
    model = keras.Model(inputs, predictions)
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    assert model.jit_compile
    x = _seq(8, 3, 8, 8, 1)
    losses = model.fit(x, x, batch_size=4, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_the_output_map_of_an_image_ladder_loop_trains_under_xla():
    # (2026-12-06, found by a random-configuration fuzzer) The 1x1 output map was a matmul
    # of the [b, H, W, C] prediction, a tensordot on TensorFlow, whose gradient transposes
    # by a permutation XLA could not take as a constant in the symbolic loop: fit with
    # jit_compile=True failed ("Transpose must be a compile-time constant") for this
    # ladder on a batch of 4 sequences of known length. It is a matmul of [pixels, C] now.
    inputs = keras.Input((3, 8, 8, 1))
    predictions, _ = RLadder([level_spec("conv", 2), level_spec("gated", 3)], output_units=2,
                             unroll=False)(inputs)
    model = keras.Model(inputs, predictions)
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    x = _seq(4, 3, 8, 8, 1)
    losses = model.fit(x, np.concatenate([x, 1 - x], axis=-1), epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    eager = RLadder.from_config(model.layers[1].get_config())
    eager.build(inputs.shape)
    eager.set_weights(model.layers[1].get_weights())
    np.testing.assert_allclose(eager(x)[0], model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "levels,shape,kwargs",
    [(DENSE_LEVELS, (2, 3, 5), {}), (FF_CONV_LEVELS, (2, 3, 8, 8, 1), dict(output_units=1)),
     (DENSE_LEVELS[1:], (2, 5), dict(n_iters=3))],
    ids=["dense", "conv", "static"],
)
def test_the_symbolic_loop_compiles_as_one_torch_graph(levels, shape, kwargs):
    # torch.compile (jit_compile=True on torch) of the loop failed in inductor after other
    # loops of the process had compiled ("cannot determine truth value of Relational:
    # 1 < s3"): see assert_compiles_as_one_torch_graph.
    assert_compiles_as_one_torch_graph(RLadder(levels, unroll=False, **kwargs), _seq(*shape))


def test_fit_on_a_padded_batch_pipeline_of_sequences_of_many_lengths():
    """tf.data's padded_batch gives batches of unknown length T: the ladder loops
    symbolically and its mask keeps the padding out."""
    from tests.backends import BACKEND

    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: a tf.data pipeline")
    import tensorflow as tf

    rng = np.random.default_rng(0)
    lengths = [3, 7, 5, 9, 4, 6, 8, 2]
    waves = [np.sin(np.arange(n + 1, dtype="float32")[:, None] * 0.7 + rng.uniform(size=3)) for n in lengths]
    data = tf.data.Dataset.from_generator(
        lambda: ((w[:-1], w[1:]) for w in waves),
        output_signature=(tf.TensorSpec((None, 3), "float32"), tf.TensorSpec((None, 3), "float32")),
    ).padded_batch(4)
    inputs = keras.Input((None, 3))
    masked = keras.layers.Masking(0.0)(inputs)
    ladder = RLadder(DENSE_LEVELS, output_units=3, name="ladder")
    predictions, _ = ladder(masked)
    model = keras.Model(inputs, predictions)
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    history = model.fit(data, epochs=8, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0]
    # the trained ladder gives every sequence, padded or not, its own outputs
    for w in waves[:3]:
        alone = model.predict(w[None, :-1], verbose=0)
        padded = np.zeros((1, 9, 3), "float32")
        padded[0, : len(w) - 1] = w[:-1]
        np.testing.assert_allclose(model.predict(padded, verbose=0)[0, : len(w) - 1], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("unroll", [None, False])
def test_an_empty_sequence_gives_empty_outputs(unroll):
    # T = 0: the unrolled loop stacked an empty list (IndexError), and the loop traced
    # by predict wrote a step into TensorFlow buffers of length 0 (ValueError).
    x = _seq(2, 0, 5)
    ladder = RLadder(DENSE_LEVELS, output_units=3, unroll=unroll, dropout=0.2, zoneout=0.1)
    for training in (False, True):
        predictions, top = ladder(x, training=training)
        assert tuple(predictions.shape) == (2, 0, 3) and tuple(top.shape) == (2, 0, 3)
    assert tuple(RLadder(DENSE_LEVELS, use_decoder=False, unroll=unroll)(x).shape) == (2, 0, 3)
    inputs = keras.Input((None, 5))
    model = keras.Model(inputs, RLadder(DENSE_LEVELS, unroll=unroll)(inputs))
    got = model.predict(x, verbose=0)
    assert got[0].shape == (2, 0, 5) and got[1].shape == (2, 0, 3)
    got = model.predict(_seq(2, 3, 5), verbose=0)  # the same model, then on steps
    assert got[0].shape == (2, 3, 5) and np.all(np.isfinite(got[0]))


@pytest.mark.parametrize("unroll", [None, False])
@pytest.mark.parametrize("use_decoder", [True, False])
def test_an_empty_sequence_gives_zero_gradients_for_every_weight(unroll, use_decoder):
    """review: with a static T = 0 the outputs were made without the weights, so on
    TensorFlow every weight's gradient was None (the symbolic loop, with T known only
    when it runs, gives zeros; JAX gives zeros either way). Zeros now, finite also when
    a weight holds inf or NaN."""
    kwargs = dict(output_units=3) if use_decoder else dict(use_decoder=False)
    ladder = RLadder(DENSE_LEVELS, unroll=unroll, dropout=0.2, zoneout=0.1, seed=0, **kwargs)
    ladder.build((None, None, 5))
    x = _seq(2, 0, 5)

    def loss():
        outputs = ladder(x, training=True)
        outputs = outputs if use_decoder else [outputs]
        return sum(keras.ops.sum(o) for o in outputs)

    for poison in (None, np.inf, np.nan):
        if poison is not None:
            weight = ladder.trainable_weights[0]
            weight.assign(np.full(weight.shape, poison, "float32"))
        value, _, weight_grads = value_and_grads(loss, variables=ladder.trainable_weights)
        assert float(value) == 0.0
        assert len(weight_grads) == len(ladder.trainable_weights) > 0
        for g, w in zip(weight_grads, ladder.trainable_weights):
            assert g is not None, w.path
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(g), 0.0)


class _ShowsTheDropoutMask(RLadder):
    """Returns, as ``top``, the dropout mask of the bottom encoder output at each step."""

    def _step(self, x, carry, drop, training, zone_keep=None):
        prediction, top, carry = super()._step(x, carry, drop, training, zone_keep)
        if drop is not None:
            top = drop(("e", 0), keras.ops.ones_like(top))
        return prediction, top, carry


@pytest.mark.parametrize("unroll", [True, False])
@pytest.mark.parametrize("noise", ["step", "sequence"])
def test_sequence_noise_keeps_one_dropout_mask_for_all_steps(noise, unroll):
    ladder = _ShowsTheDropoutMask([level_spec("gated", 8)], dropout=0.5, dropout_noise=noise, unroll=unroll, seed=3)
    _, masks = ladder(_seq(3, 5, 4), training=True)
    masks = keras.ops.convert_to_numpy(masks)  # [batch, T, units]
    assert set(np.unique(masks)) == {0.0, 2.0}
    same = [np.array_equal(masks[:, 0], masks[:, t]) for t in range(1, 5)]
    assert all(same) if noise == "sequence" else not any(same)
    assert not np.array_equal(masks[0], masks[1])  # a mask per sample


def test_a_model_on_sequences_of_unknown_length_trains_under_a_mirrored_strategy():
    """Batches of several lengths T (None in the traced step) through the symbolic loop,
    with masks and training noise, on two replicas."""
    from tests.backends import BACKEND

    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: tf.distribute.MirroredStrategy")
    import tensorflow as tf

    from tests.harness import two_cpu_strategy

    strategy = two_cpu_strategy()
    with strategy.scope():
        inputs = keras.Input((None, 5))
        ladder = RLadder(DENSE_LEVELS, output_units=5, dropout=0.2, dropout_noise="sequence", zoneout=0.2, seed=0)
        predictions, _ = ladder(keras.layers.Masking(0.0)(inputs))
        model = keras.Model(inputs, predictions)
        model.compile(keras.optimizers.Adam(1e-2), "mse")
    data = tf.data.Dataset.from_generator(
        lambda: ((x, x) for x in (_seq(4, n, 5, seed=n) for n in (3, 5, 2, 6))),
        output_signature=(tf.TensorSpec((4, None, 5), "float32"),) * 2,
    )
    history = model.fit(data, epochs=1, verbose=0).history["loss"]  # every length once
    assert np.all(np.isfinite(history))
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_the_tensorflow_loop_gradient_does_not_copy_its_output_buffers():
    """review: the gradient of the loop's buffer writes (scatters) zeroed the written row of
    the [T, ...] output gradient at every step of the backward loop, a copy of the whole
    buffer per step, so training under XLA took time growing as T**2 (batch 64, 64
    features, two gated levels: 8.7 s per step at T = 800, 1.1 s now). The writes' own
    gradient only reads the row, and the gradients still equal the unrolled ones (see
    test_the_symbolic_loop_gives_the_unrolled_gradients)."""
    from tests.backends import BACKEND

    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: the TensorFlow loop's graph")
    import tensorflow as tf

    ladder = RLadder(DENSE_LEVELS, output_units=2, unroll=False)
    ladder.build((None, None, 5))

    @tf.function
    def loss_and_grads(x):
        with tf.GradientTape() as tape:
            predictions, top = ladder(x, mask=tf.reduce_all(x > -9, axis=-1), training=True)
            loss = tf.reduce_sum(predictions**2) + tf.reduce_sum(top)
        return tape.gradient(loss, ladder.trainable_weights)

    graph = loss_and_grads.get_concrete_function(tf.TensorSpec((2, None, 5), "float32")).graph.as_graph_def()
    scatters = {  # per loop body function: the forward body, and its gradient (name ..._grad_...)
        f.signature.name: sum(n.op == "TensorScatterUpdate" for n in f.node_def)
        for f in graph.library.function
        if "while_body" in f.signature.name
    }
    forward = [n for n in scatters if "_grad_" not in n]
    backward = [n for n in scatters if "_grad_" in n]
    assert forward and backward, scatters
    assert all(scatters[n] == 2 for n in forward), scatters  # writes of predictions and top
    assert all(scatters[n] == 0 for n in backward), scatters
    got = loss_and_grads(tf.constant(_seq(2, 4, 5)))
    assert all(g is not None and np.all(np.isfinite(g)) for g in got)


def test_an_empty_sequence_through_a_loop_traced_for_any_length_under_xla():
    """review: a model compiled with XLA whose step was traced for sequences of any
    length (T = None: after batches of several lengths) failed on an empty batch: XLA
    refused the loop's write into its [0, ...] output buffers, though the loop never
    runs ("Indices and updates specified for empty output"). 85ab5a9 covered T = 0
    only where it is known when the ladder is called."""
    from tests.backends import BACKEND

    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: a tf.function trace with T = None (JAX traces every T)")
    import tensorflow as tf

    inputs = keras.Input((None, 5))
    outputs = RLadder(DENSE_LEVELS, output_units=2, dropout=0.2, zoneout=0.1, seed=0)(
        keras.layers.Masking()(inputs)
    )
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(1e-3), ["mse", "mse"], jit_compile=True)

    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec((2, None, 5), "float32")])
    def train_step(x):
        with tf.GradientTape() as tape:
            predictions, top = model(x, training=True)
            loss = tf.reduce_sum(predictions) + tf.reduce_sum(top)
        return predictions, top, tape.gradient(loss, model.trainable_weights)

    for steps in (3, 0, 2):
        x = _seq(2, steps, 5)
        predictions, top, grads = train_step(x)
        assert tuple(predictions.shape) == (2, steps, 2) and tuple(top.shape) == (2, steps, 3)
        assert all(np.all(np.isfinite(g)) for g in grads)
    for steps in (3, 0):  # predict traces T = None from its second length on: T = 0 there
        got = model.predict(_seq(2, steps, 5), verbose=0)
        assert got[0].shape == (2, steps, 2) and got[1].shape == (2, steps, 3)


class _CountsSymbolicLoops(RLadder):
    """An RLadder that counts the traces of its symbolic loop (``_scan``)."""

    symbolic_traces = 0

    def _scan(self, *args, **kwargs):
        type(self).symbolic_traces += 1
        return super()._scan(*args, **kwargs)


def _batches_of_several_lengths():
    """A tf.data pipeline of batches [4, T, 5] (T = 3, 5; None in its signature),
    each with a padded last step in one sample. (Two lengths: under XLA every length
    is a program compiled of its own.)"""
    import tensorflow as tf

    def batches():
        for n in (3, 5):
            x = _seq(4, n, 5, seed=n)
            x[1, -1:] = 0.0
            yield x, x

    return tf.data.Dataset.from_generator(batches, output_signature=(tf.TensorSpec((4, None, 5), "float32"),) * 2)


@pytest.mark.parametrize("distributed", [False, True], ids=["xla", "mirrored"])
def test_the_loop_over_unknown_lengths_compiles_with_xla_and_trains_under_a_mirrored_strategy(distributed):
    """DESIGN.md asks for static iteration counts so that layers compile with XLA and
    run under any tf.distribute strategy; the loop for T = None is a while loop whose
    trip count is known only when it runs. It keeps that intent: its bound
    (maximum_iterations = T + 1) comes from the input's shape, which XLA knows when it
    compiles (one program per batch shape), and each replica runs the same loop on its
    own shard, with no cross-replica step inside it. Checked through model.fit on
    batches traced as T = None (the symbolic loop, counted), with masks and noise:
    compiled with XLA, and on two replicas. (Both at once cannot be checked here:
    with XLA on two logical CPUs of one process, model.fit fails for any Keras model,
    a plain Dense one included: "Trying to access resource .../replica_1 ... located
    in device CPU:1 from device CPU:0", TensorFlow's known XLA issue.)"""
    from tests.backends import BACKEND

    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: a tf.data pipeline of unknown length and tf.distribute")
    import contextlib

    from tests.harness import two_cpu_strategy

    scope = two_cpu_strategy().scope() if distributed else contextlib.nullcontext()
    _CountsSymbolicLoops.symbolic_traces = 0
    with scope:
        inputs = keras.Input((None, 5))
        ladder = _CountsSymbolicLoops(DENSE_LEVELS, output_units=5, dropout=0.2, zoneout=0.2, seed=0)
        predictions, _ = ladder(keras.layers.Masking(0.0)(inputs))
        model = keras.Model(inputs, predictions)
        model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=not distributed)
    assert model.jit_compile is (not distributed)
    before = [w.copy() for w in model.get_weights()]
    traced = _CountsSymbolicLoops.symbolic_traces
    # one epoch: both lengths through the step traced for T = None (a second epoch
    # only ran the same programs again)
    history = model.fit(_batches_of_several_lengths(), epochs=1, verbose=0).history["loss"]
    assert _CountsSymbolicLoops.symbolic_traces > traced  # fit traced the loop for T = None
    assert np.all(np.isfinite(history))
    after = model.get_weights()
    assert all(np.all(np.isfinite(w)) for w in after)
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))


def test_on_jax_a_ladder_built_for_any_length_loops_symbolically():
    """review: jax.jit traces every batch with its T, so with unroll=None a ladder built
    on keras.Input((None, ...)) unrolled every new length of model.fit's batches and
    compiled it again, in time growing with T (gated 32/16, batch 8, XLA, on a loaded
    2-core CPU: 29 s at T = 20, 71 s at 40, 199 s at 60, 381 s at 80, against 6-7 s
    each for the loop). Such a ladder now runs the symbolic loop (ops.scan) on JAX, with
    the same outputs; one built or called with a known T still unrolls. (TensorFlow's
    trainer traces T = None itself from a batch's second length on.)"""
    from tests.backends import BACKEND

    if BACKEND != "jax":
        pytest.skip(f"JAX-only: jax.jit traces every T (backend is {BACKEND})")
    inputs = keras.Input((None, 5))
    ladder = _CountsSymbolicLoops(DENSE_LEVELS, output_units=5, name="ladder")
    model = keras.Model(inputs, ladder(inputs))
    model.compile(keras.optimizers.SGD(1e-2), ["mse", "mse"])
    _CountsSymbolicLoops.symbolic_traces = 0
    x = _seq(4, 3, 5)
    model.predict(x, verbose=0)
    assert _CountsSymbolicLoops.symbolic_traces > 0
    model.fit(_seq(4, 4, 5), [_seq(4, 4, 5), _seq(4, 4, 3)], verbose=0)
    x = _seq(4, 6, 5, seed=1)  # a new length (a new trace)
    fixed = RLadder(DENSE_LEVELS, output_units=5)  # built on T = 6: unrolls
    fixed(x)
    fixed.set_weights(model.get_layer("ladder").get_weights())
    _CountsSymbolicLoops.symbolic_traces = 0
    _assert_same(model.predict(x, verbose=0), fixed(x))
    assert _CountsSymbolicLoops.symbolic_traces > 0
    direct = _CountsSymbolicLoops(DENSE_LEVELS)
    _CountsSymbolicLoops.symbolic_traces = 0
    direct(x)  # built on a known T: unrolled
    assert _CountsSymbolicLoops.symbolic_traces == 0


def test_the_symbolic_loop_takes_a_variable_input():
    # Keras' moveaxis reads x.ndim, which a tf.Variable lacks: the symbolic loop failed
    # ("'ResourceVariable' object has no attribute 'ndim'"), the unrolled one did not
    tensorflow_only("tf.Variable inputs")
    import tensorflow as tf
    x = _seq(2, 3, 5)
    looped = RLadder(DENSE_LEVELS, output_units=3, unroll=False)
    unrolled = RLadder(DENSE_LEVELS, output_units=3, unroll=True)
    looped.build((None, None, 5))
    unrolled.build((None, 3, 5))
    unrolled.set_weights(looped.get_weights())
    variable = tf.Variable(x)
    with tf.GradientTape() as tape:
        got = looped(variable)
        loss = sum(tf.reduce_sum(o) for o in got)
    for g, e in zip(got, unrolled(x)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(e), atol=1e-5)
    grad = tape.gradient(loss, variable)
    assert grad is not None and np.all(np.isfinite(grad.numpy()))


# ------------------------------------------------------- options without effect
NO_EFFECT_CASES = {  # kwargs of RLadder (levels DENSE_LEVELS unless given), the option warned about
    "dropout_noise without dropout": (dict(dropout_noise="sequence"), "dropout_noise='sequence'"),
    "seed without dropout or zoneout": (dict(seed=3), "seed=3"),
    "dropout of one level without decoder": (
        dict(levels=DENSE_LEVELS[:1], use_decoder=False, dropout=0.2), "dropout=0.2"
    ),
    "zoneout of stateless levels": (dict(levels=[level_spec("conv", 2)], zoneout=0.3), "zoneout=0.3"),
    "decoder_to_encoder without decoder": (dict(use_decoder=False, decoder_to_encoder=False), "decoder_to_encoder=False"),
    "input_combinator without decoder": (
        dict(levels=CONV_LEVELS, use_decoder=False, input_combinator="ConvG2", input_combinator_filters=None),
        "input_combinator='ConvG2'",
    ),
    "input_combinator_filters without decoder": (
        dict(levels=CONV_LEVELS[:1], use_decoder=False, input_combinator="ConvG3", input_combinator_filters=4),
        "input_combinator_filters=4",
    ),
    "a level's combinator options without decoder": (
        dict(levels=[level_spec("convlstm", 2, combinator="ConvG2", combinator_filters=3)], use_decoder=False),
        r"levels\[0\]: combinator_filters=3",
    ),
    "upsample_mode without decoder": (dict(levels=CONV_LEVELS, use_decoder=False), r"levels\[1\]: upsample_mode='transpose'"),
    # helper-179: the recurrent options of a ladder whose levels have no recurrent kernel
    "recurrent_regularizer of stateless levels": (
        dict(levels=[level_spec("conv", 2), level_spec("gatedconv", 2, pool=2)], recurrent_regularizer="l2"),
        "recurrent_regularizer='L2'",
    ),
    "recurrent_initializer of stateless levels": (
        dict(levels=[level_spec("conv", 2)], recurrent_initializer="zeros"), "recurrent_initializer='Zeros'",
    ),
    "recurrent_constraint of stateless levels": (
        dict(levels=[level_spec("conv", 2)], recurrent_constraint="non_neg"), "recurrent_constraint='NonNeg'",
    ),
    "kernel_size of a dense level": (
        dict(levels=[level_spec("convlstm", 2), level_spec("gated", 3, kernel_size=5)]), r"levels\[1\]: kernel_size=5"
    ),
}


@pytest.mark.parametrize("case", sorted(NO_EFFECT_CASES))
def test_an_option_set_where_it_has_no_effect_warns_and_saved_configs_load(case):
    # audit (2026-12): options that matter only together with another were accepted
    # silently where they do nothing (dropout_noise="sequence" with dropout=0, a seed
    # without dropout or zoneout, ...): the user believed they changed the ladder.
    # They are not refused (configs saved with them must load): one warning each
    kwargs, option = NO_EFFECT_CASES[case]
    kwargs = dict(kwargs)
    levels = kwargs.pop("levels", DENSE_LEVELS)
    with pytest.warns(UserWarning) as record:
        layer = RLadder(levels, **kwargs)
    ours = [str(w.message) for w in record if "has no effect" in str(w.message)]
    matching = [m for m in ours if re.search(rf"^RLadder: {option} has no effect: it needs ", m)]
    assert len(matching) == 1, ours
    # a config saved with it loads (warning again) as the same ladder
    config = layer.get_config()
    with pytest.warns(UserWarning, match=option + " has no effect"):
        loaded = RLadder.from_config(config)
    assert loaded.get_config() == config


@pytest.mark.parametrize(
    "levels, kwargs",
    [
        (DENSE_LEVELS, {}),
        (DENSE_LEVELS, dict(dropout=0.2, dropout_noise="sequence", seed=3)),
        (DENSE_LEVELS, dict(zoneout=0.2, seed=3, use_decoder=False, dropout=0.1)),
        (FF_CONV_LEVELS, dict(zoneout=0.2)),  # its gated level has a state
        (FF_CONV_LEVELS, dict(recurrent_regularizer="l2", recurrent_initializer="zeros")),  # and a recurrent kernel
        ([level_spec("conv", 2)], dict(recurrent_initializer="orthogonal")),  # the default, given
        (CONV_LEVELS, dict(input_combinator="ConvG3", input_combinator_filters=2, decoder_to_encoder=False)),
        (CONV_LEVELS, dict(use_decoder=False)),  # the defaults picked for the decoder
        ([level_spec("gated", 3, kernel_size=5)], dict(input_combinator="ConvG1")),  # sets the input's
    ],
)
def test_options_that_take_effect_and_defaults_do_not_warn(levels, kwargs, recwarn):
    # (and a config saved with every default written out rebuilds without a warning)
    if levels is CONV_LEVELS and kwargs.get("use_decoder") is False:
        levels = [dict(spec, upsample_mode="nearest", combinator="ConvG1") for spec in levels[:2]] + levels[2:]
    layer = RLadder(levels, **kwargs)
    RLadder.from_config(layer.get_config())
    assert not [str(w.message) for w in recwarn if "has no effect" in str(w.message)]


def test_a_list_of_inputs_is_refused_before_and_after_the_build():
    # helper-179: once built, the ladder failed with "'list' object has no attribute 'dtype'"
    ladder = RLadder([level_spec("gated", 4)])
    with pytest.raises(ValueError):
        ladder([_seq(2, 3, 5)])
    ladder(_seq(2, 3, 5))
    with pytest.raises(ValueError, match=r"RLadder expects one tensor .*Received: a list of 1 inputs"):
        ladder([_seq(2, 3, 5)])


def test_a_built_ladder_reused_on_other_features_is_refused_when_the_model_is_built():
    # Audit s65: the symbolic call accepted it, with an output shape the ladder never
    # produces ((None, None, 6) for a ladder built on 5 features); predict then failed.
    ladder = RLadder([level_spec("gated", 4)])
    ladder(np.zeros((2, 3, 5), "float32"))
    with pytest.raises(ValueError, match=r"built for inputs with features of shape \(5,\)\. Received: input shape=\(None, None, 6\)"):
        ladder(keras.Input((None, 6)))
    prediction, top = ladder(keras.Input((None, 5)))
    assert tuple(prediction.shape) == (None, None, 5) and tuple(top.shape) == (None, None, 4)


# ------------------------------------------------------------------ step's carry and initial_carry
# Audit (RLadder.step): a carry of too few levels failed with a bare IndexError, extra
# levels were ignored, a None feedback where a level takes one was an AttributeError, and
# a wrong number of states or a wrong per-level shape failed inside an encoder cell with a
# message that named the cell, not the carry; initial_carry took a bool batch size and
# integer dtypes, and failed in the backend on a negative or float one.

_DENSE_CARRY = (
    "RLadder.step expects carry = (states, feedback) as initial_carry(batch_size, dtype) makes it, one "
    "entry per level: states = [[(batch, 4)], [(batch, 3), (batch, 3)]], feedback = [(batch, 4), (batch, 3)]. "
)


def _stepping_ladder(levels=DENSE_LEVELS, shape=(2, 3, 5), **kwargs):
    ladder = RLadder(levels, **kwargs)
    ladder.build((None,) + shape[1:])
    return ladder


def _zeros(*shape):
    return np.zeros(shape, "float32")


STEP_CARRY_CASES = {  # case: (carry made from initial_carry's (states, feedback), the end of the error)
    "too few levels": (lambda s, f: (s[:1], f[:1]), "The ladder has 2 levels. Received: states=[[Tensor(2, 4)]]"),
    "an extra level": (
        lambda s, f: (s + [s[0]], f + [f[0]]),
        "The ladder has 2 levels. Received: states=[[Tensor(2, 4)], [Tensor(2, 3), Tensor(2, 3)], [Tensor(2, 4)]]",
    ),
    "an extra feedback": (
        lambda s, f: (s, f + [f[0]]),
        "The ladder has 2 levels. Received: feedback=[Tensor(2, 4), Tensor(2, 3), Tensor(2, 4)]",
    ),
    "one state of two": (
        lambda s, f: ([s[0], s[1][:1]], f),
        "Level 2 (lstm) has 2 states. Received: states[1]=[Tensor(2, 3)]",
    ),
    "a state for a list of one": (
        lambda s, f: ([s[0][0], s[1]], f),
        "Level 1 (gated) has 1 state. Received: states[0]=Tensor(2, 4)",
    ),
    "states and feedback swapped": (
        lambda s, f: (f, s),
        "Level 1 (gated) has 1 state. Received: states[0]=Tensor(2, 4)",
    ),
    "a None feedback": (
        lambda s, f: (s, [None, f[1]]),
        "Level 1 (gated) takes the decoder feedback (batch, 4). Received: feedback[0]=None",
    ),
    "a state of other features": (
        lambda s, f: ([s[0], [s[1][0], _zeros(2, 4)]], f),
        "Level 2 (lstm)'s states are (batch, 3). Received: states[1][1]=Tensor(2, 4)",
    ),
    "a state of another rank": (
        lambda s, f: ([[_zeros(2, 4, 1)], s[1]], f),
        "Level 1 (gated)'s states are (batch, 4). Received: states[0][0]=Tensor(2, 4, 1)",
    ),
    "a feedback of other features": (
        lambda s, f: (s, [f[0], _zeros(2, 4)]),
        "Level 2 (lstm) takes the decoder feedback (batch, 3). Received: feedback[1]=Tensor(2, 4)",
    ),
    "a list for a state": (
        lambda s, f: ([[[0.0] * 4], s[1]], f),
        "Level 1 (gated)'s states are (batch, 4). Received: states[0][0]=[<float>, <float>, <float>, <float>]",
    ),
    "three parts": (
        lambda s, f: (s, f, f),
        "Received: carry=([[Tensor(2, 4)], [Tensor(2, 3), Tensor(2, 3)]], [Tensor(2, 4), Tensor(2, 3)], ",
    ),
    "no carry": (lambda s, f: None, "Received: carry=None"),
}


@pytest.mark.parametrize("case", sorted(STEP_CARRY_CASES))
def test_step_refuses_a_carry_of_another_structure_describing_the_expected_one(case):
    ladder = _stepping_ladder()
    states, feedback = ladder.initial_carry(2, "float32")
    change, received = STEP_CARRY_CASES[case]
    with pytest.raises(ValueError, match="^" + re.escape(_DENSE_CARRY + received)):
        ladder.step(_seq(2, 5), change(states, feedback))
    # lists or tuples alike, as initial_carry and step make them: the same step
    tuples = (tuple(tuple(s) for s in states), tuple(feedback))
    _, top, carry = ladder.step(_seq(2, 5), tuples)
    np.testing.assert_array_equal(np.asarray(top), np.asarray(ladder.step(_seq(2, 5), (states, feedback))[1]))
    ladder.step(_seq(2, 5), list(carry))


def test_step_refuses_a_feedback_for_a_level_without_one_and_states_for_a_stateless_level():
    ladder = _stepping_ladder(FF_CONV_LEVELS, (2, 3, 4, 4, 1), decoder_to_encoder=False)
    states, feedback = ladder.initial_carry(2, "float32")
    expected = (
        "RLadder.step expects carry = (states, feedback) as initial_carry(batch_size, dtype) makes it, one entry "
        "per level: states = [[], [], [(batch, 4)]], feedback = [None, None, None]. "
    )
    x = _seq(2, 4, 4, 1)
    with pytest.raises(ValueError, match="^" + re.escape(
            expected + "Level 1 (conv) has no feedback (decoder_to_encoder=False): its feedback is None. "
            "Received: feedback[0]=Tensor(2, 4, 4, 2)")):
        ladder.step(x, (states, [_zeros(2, 4, 4, 2), None, None]))
    with pytest.raises(ValueError, match="^" + re.escape(
            expected + "Level 2 (conv) has 0 states. Received: states[1]=[Tensor(2, 2, 2, 3)]")):
        ladder.step(x, ([[], [_zeros(2, 2, 2, 3)], states[2]], feedback))
    assert ladder.step(x, (states, feedback))[1].shape == (2, 4)


def test_step_refuses_image_states_and_feedback_of_other_pixels():
    ladder = _stepping_ladder(CONV_LEVELS, (2, 3, 4, 4, 1))
    states, feedback = ladder.initial_carry(2, "float32")
    x = _seq(2, 4, 4, 1)
    with pytest.raises(ValueError, match=re.escape("Level 2 (convlstm)'s states are (batch, 2, 2, 3). "
                                                   "Received: states[1][0]=Tensor(2, 4, 4, 3)")):
        ladder.step(x, ([states[0], [_zeros(2, 4, 4, 3), states[1][1]], states[2]], feedback))
    with pytest.raises(ValueError, match=re.escape("Level 1 (convlstm) takes the decoder feedback (batch, 4, 4, 2). "
                                                   "Received: feedback[0]=Tensor(2, 4, 4, 3)")):
        ladder.step(x, (states, [_zeros(2, 4, 4, 3)] + feedback[1:]))
    with pytest.raises(ValueError, match=re.escape("RLadder.step expects x, the input of one step, of shape "
                                                   "(batch, 4, 4, 1). Received: x=Tensor(2, 3, 4, 4, 1)")):
        ladder.step(_seq(2, 3, 4, 4, 1), (states, feedback))
    prediction, top, _ = ladder.step(x, (states, feedback))
    assert prediction.shape == (2, 4, 4, 1) and top.shape == (2, 4)


@pytest.mark.parametrize("batch_size", [-1, 2.0, None, True, "2", np.zeros((1,), "int32"), np.float32(2)])
def test_initial_carry_refuses_a_batch_size_that_is_not_an_integer_of_at_least_0(batch_size):
    ladder = _stepping_ladder()
    with pytest.raises(ValueError, match=re.escape(
            "`batch_size` of RLadder.initial_carry must be an integer >= 0 (or a scalar integer tensor, such as "
            f"ops.shape(x)[0]). Received: batch_size={batch_size!r}")):
        ladder.initial_carry(batch_size, "float32")
    # an empty batch, numpy integers and a scalar integer tensor are sizes
    for size, rows in ((0, 0), (np.int64(3), 3), (ops.shape(ops.zeros((2, 5)))[0], 2), (ops.convert_to_tensor(2), 2)):
        states, feedback = ladder.initial_carry(size, "float32")
        assert states[1][1].shape == (rows, 3) and feedback[0].shape == (rows, 4)


@pytest.mark.parametrize("dtype", ["int32", "bool", "uint8", "nope"])
def test_initial_carry_refuses_a_dtype_that_is_not_floating(dtype):
    ladder = _stepping_ladder(learn_initial_feedback=True)
    with pytest.raises(ValueError, match=re.escape(
            "`dtype` of RLadder.initial_carry must be a floating dtype (that of the inputs step will take, e.g. "
            f"\"float32\"). Received: dtype={dtype!r}")):
        ladder.initial_carry(2, dtype)
    states, feedback = ladder.initial_carry(2, "float16")
    standard = keras.backend.standardize_dtype
    assert standard(states[0][0].dtype) == standard(feedback[1].dtype) == "float16"
    assert standard(ladder.initial_carry(2, None)[0][0][0].dtype) == keras.config.floatx()
