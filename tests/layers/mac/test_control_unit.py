"""ControlUnit: the paper's formulas, padding, the layer contract, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import ControlUnit
from tests.backends import compiled, grads, tensor
from tests.harness import run_layer_contract
from tests.layers.mac import reference as ref

B, S, D, DQ, STEPS = 2, 5, 4, 3, 3


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((B, DQ)).astype("float32"),
        rng.standard_normal((B, D)).astype("float32"),
        rng.standard_normal((B, S, D)).astype("float32"),
    ]


MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)


def _layer(**kwargs):
    layer = ControlUnit(max_steps=STEPS, **kwargs)
    layer(_inputs())
    return ref.randomize(layer)


@pytest.mark.parametrize("use_previous_control", [True, False])
@pytest.mark.parametrize("step", [0, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_numpy(use_previous_control, step, masked):
    layer = _layer(use_previous_control=use_previous_control)
    q, c, cw = _inputs(1)
    mask = MASK if masked else None
    control, attention = layer([q, c, cw], step=step, words_mask=mask)
    want_c, want_a = ref.control_unit(
        ref.weights(layer), q, c, cw, step, mask, use_previous_control
    )
    np.testing.assert_allclose(control, want_c, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(attention, want_a, atol=1e-6, rtol=1e-5)


def test_step_as_tensor_matches_int():
    layer = _layer()
    x = _inputs(2)
    for step in range(STEPS):
        a = layer(x, step=step)
        b = layer(x, step=tensor(step))
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, atol=1e-6)


def test_uniform_attention_by_hand():
    # Zero attention kernel: every logit equals the bias, so the attention is uniform
    # over the real words and the control is their mean.
    layer = _layer()
    layer.attention_kernel.assign(np.zeros((D, 1), "float32"))
    q, c, cw = _inputs(3)
    control, attention = layer([q, c, cw], step=1, words_mask=MASK)
    np.testing.assert_allclose(attention[0], [1 / 3] * 3 + [0, 0], atol=1e-6)
    np.testing.assert_allclose(attention[1], [0.2] * 5, atol=1e-6)
    np.testing.assert_allclose(control[0], cw[0, :3].mean(0), atol=1e-6)
    np.testing.assert_allclose(control[1], cw[1].mean(0), atol=1e-6)


@pytest.mark.parametrize("fill", [0.0, 1e6, np.nan, np.inf])
def test_padded_words_never_change_the_result(fill):
    layer = _layer()
    q, c, cw = _inputs(4)
    dirty = cw.copy()
    dirty[~MASK] = fill
    tensors = [tensor(x) for x in (q, c, cw)]
    dirty_t = tensor(dirty)
    clean = layer(tensors, step=1, words_mask=MASK)
    out = layer([tensors[0], tensors[1], dirty_t], step=1, words_mask=MASK)

    def loss(dirty_t):
        control, attention = layer([tensors[0], tensors[1], dirty_t], step=1, words_mask=MASK)
        return keras.ops.sum(control) + keras.ops.sum(attention * keras.ops.arange(S, dtype="float32"))

    input_grad, *weight_grads = grads(loss, [dirty_t], layer.trainable_weights)
    gradients = weight_grads + [input_grad]
    for a, b in zip(clean, out):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.sum(keras.ops.convert_to_numpy(out[1]), -1), 1.0, atol=1e-6)
    for g in gradients:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(g)))
    assert np.all(np.asarray(gradients[-1])[~MASK] == 0)


def test_all_padded_question_is_finite():
    layer = _layer()
    x = [tensor(v) for v in _inputs(5)]
    mask = np.zeros((B, S), bool)
    control, attention = layer(x, step=0, words_mask=mask)
    np.testing.assert_array_equal(control, 0.0)
    np.testing.assert_array_equal(attention, 0.0)
    weight_grads = grads(
        lambda: sum(keras.ops.sum(o) for o in layer(x, step=0, words_mask=mask)),
        variables=layer.trainable_weights,
    )
    for g in weight_grads:
        assert g is not None and np.all(np.isfinite(keras.ops.convert_to_numpy(g)))


def test_keras_mask_is_used():
    q_in, c_in = keras.Input((DQ,)), keras.Input((D,))
    w_in = keras.Input((S, D))
    masked = keras.layers.Masking(0.0)(w_in)
    layer = ControlUnit(max_steps=STEPS)
    model = keras.Model([q_in, c_in, w_in], layer([q_in, c_in, masked], step=0))
    q, c, cw = _inputs(6)
    cw[~MASK] = 0.0
    _, attention = model([q, c, cw])
    _, direct = layer([q, c, cw], step=0, words_mask=MASK)
    np.testing.assert_array_equal(np.asarray(attention)[~MASK], 0.0)
    np.testing.assert_allclose(attention, direct, atol=1e-7)


def test_layer_contract(tmp_path):
    run_layer_contract(
        ControlUnit,
        {"max_steps": STEPS},
        _inputs(),
        tmp_path=tmp_path,
        call_kwargs={"step": 1},
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_steps": 0}, "Received: max_steps=0"),
        ({"max_steps": 2.0}, "Received: max_steps=2.0"),
        ({"max_steps": 2, "use_previous_control": "yes"}, "Received: use_previous_control='yes'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ControlUnit(**kwargs)


def test_bad_inputs():
    q, c, cw = _inputs()
    layer = ControlUnit(max_steps=2)
    with pytest.raises(ValueError, match=r"context_words of shape \[batch, words, d\]"):
        layer([q, c, cw[:, 0]])
    with pytest.raises(ValueError, match="same d"):
        layer([q, c[:, :3], cw])
    with pytest.raises(ValueError, match="a list of inputs"):
        layer([q, cw])
    layer([q, c, cw])
    with pytest.raises(ValueError, match="Received: step=2"):
        layer([q, c, cw], step=2)
    with pytest.raises(ValueError, match="words_mask"):
        layer([q, c, cw], words_mask=np.ones((B, S + 1), bool))


def test_bad_steps_are_clear_errors_and_numpy_integers_work():
    # Audit 3: a numpy integer step skipped the range check (an out-of-range one gave
    # a raw GatherV2 error eagerly and silently used the last projection under XLA),
    # and a bool or float step gave obscure TypeErrors from ops.take.
    x = _inputs()
    layer = _layer()
    for step in range(STEPS):
        np.testing.assert_array_equal(layer(x, step=np.int64(step))[0], layer(x, step=step)[0])
    for step in (np.int64(STEPS), np.int32(-1)):
        with pytest.raises(ValueError, match=f"Received: step={int(step)}"):
            layer(x, step=step)
    for step in (True, 1.0, np.float32(1.0), tensor(1.0, "float32"), tensor([1])):
        with pytest.raises(ValueError, match="integer scalar tensor. Received: step="):
            layer(x, step=step)
    np.testing.assert_array_equal(layer(x, step=tensor(1, "int64"))[0], layer(x, step=1)[0])


def test_an_eager_tensor_step_out_of_range_is_a_clear_error():
    # A tensor step of -1 silently used the last step's projection (ops.take wraps
    # negative indices) and STEPS raised a raw GatherV2 error.
    x = _inputs()
    layer = _layer()
    for step in (tensor(STEPS), tensor(-1, "int64")):
        with pytest.raises(ValueError, match=rf"\[0, max_steps={STEPS}\). Received: step={int(step)}"):
            layer(x, step=step)
    traced = compiled(lambda s: layer(x, step=s)[0], jit_compile=False)  # a traced step is used as given
    np.testing.assert_allclose(traced(tensor(1)), layer(x, step=1)[0], atol=1e-6)


def test_batch_size_mismatch_is_a_clear_error():
    # Audit 6: inputs of different batch sizes raised a raw TensorFlow ConcatOp error.
    q, c, w = _inputs()
    for bad, name in ((0, "question"), (1, "control_prev"), (2, "context_words")):
        x = [q, c, w]
        x[bad] = np.concatenate([x[bad], x[bad][:1]])
        with pytest.raises(ValueError, match=rf"same batch size.*{name} shape=\(3,"):
            ControlUnit(max_steps=STEPS)(x)
    symbolic = [keras.Input((DQ,), batch_size=2), keras.Input((D,), batch_size=3),
                keras.Input((S, D), batch_size=2)]
    with pytest.raises(ValueError, match=r"control_prev shape=\(3, 4\)"):
        ControlUnit(max_steps=STEPS)(symbolic)
    # An unknown batch size is not an error.
    ControlUnit(max_steps=STEPS)([keras.Input((DQ,)), keras.Input((D,), batch_size=2),
                                  keras.Input((S, D))])


def test_seeded_initializer_gives_different_but_reproducible_steps():
    # Audit 11: a seeded kernel_initializer filled every step's question projection alike.
    def question_kernel():
        layer = ControlUnit(max_steps=STEPS, kernel_initializer=keras.initializers.GlorotUniform(seed=1))
        layer(_inputs())
        return np.asarray(layer.question_kernel)

    kernel = question_kernel()
    assert not np.allclose(kernel[0], kernel[1]) and not np.allclose(kernel[1], kernel[2])
    np.testing.assert_array_equal(kernel, question_kernel())


@pytest.mark.parametrize("seed", [2**63 - 1, 2**63 - 2, 2**40])
def test_a_seed_near_the_int64_limit_gives_steps_of_their_own(seed):
    """review: each step's copy of a seeded initializer got ``seed + step`` unreduced, so
    GlorotUniform(seed=2**63 - 1) overflowed int64 at step 1 (and JAX's uint32 seeds took
    no seed of 2**32 or more). Seeds of 2**31 or more now give ``(seed + step) % 2**31``,
    as the layers' generators do (``generator_seed``)."""

    def question_kernel():
        layer = ControlUnit(max_steps=STEPS, kernel_initializer=keras.initializers.GlorotUniform(seed=seed))
        layer(_inputs())
        return np.asarray(layer.question_kernel)

    kernel = question_kernel()
    assert np.all(np.isfinite(kernel))
    assert not np.allclose(kernel[0], kernel[1]) and not np.allclose(kernel[1], kernel[2])
    np.testing.assert_array_equal(kernel, question_kernel())
    for step in range(STEPS):
        want = keras.initializers.GlorotUniform(seed=(seed + step) % 2**31)((DQ, D))
        np.testing.assert_array_equal(kernel[step], np.asarray(want))


@pytest.mark.parametrize("seed", [0, 1, 2**31 - 2, 2**31 - 1])
def test_seeds_below_2_31_keep_their_per_step_streams(seed):
    # The fix of the int64 overflow must not change a model initialized with a seed
    # below 2**31: step ``s`` still draws with ``seed + s`` (even past 2**31 - 1).
    layer = ControlUnit(max_steps=STEPS, kernel_initializer=keras.initializers.GlorotUniform(seed=seed))
    layer(_inputs())
    kernel = np.asarray(layer.question_kernel)
    for step in range(STEPS):
        want = keras.initializers.GlorotUniform(seed=seed + step)((DQ, D))
        np.testing.assert_array_equal(kernel[step], np.asarray(want))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32", "int64"])
def test_any_integer_tensor_step_selects_its_projection(dtype):
    # audit 4: the documented "integer scalar tensor" step was gathered with its own
    # dtype; TensorFlow gathers with int16/int32/int64 indices only, so a uint8 step
    # (accepted by the step check) failed with a raw InvalidArgumentError.
    x = _inputs()
    layer = _layer()
    np.testing.assert_array_equal(layer(x, step=tensor(2, dtype))[0], layer(x, step=2)[0])
    traced = compiled(lambda s: layer(x, step=s)[0], jit_compile=False)
    np.testing.assert_allclose(traced(tensor(1, dtype)), layer(x, step=1)[0], atol=1e-6)


def test_an_initializer_seeded_with_a_seed_generator_starts_the_steps_different():
    # Audit (2026-11-30): each step's copy of the initializer restarted the generator
    # at the same state, so every step's question projection started equal.
    init = keras.initializers.GlorotUniform(seed=keras.random.SeedGenerator(3))
    layer = ControlUnit(max_steps=STEPS, kernel_initializer=init)
    layer(_inputs())
    kernel = np.asarray(layer.question_kernel)
    for step in range(1, STEPS):
        assert not np.allclose(kernel[0], kernel[step])
    x = _inputs()
    assert not np.allclose(layer(x, step=0)[0], layer(x, step=STEPS - 1)[0])


def test_the_kernel_and_bias_options_act_on_each_steps_matrix():
    # Audit (2026-11-30): the options acted on the [max_steps, d_q, d] stack. UnitNorm
    # normalized across the steps (with max_steps=1 every entry became +-1), and
    # OrthogonalRegularizer (rank 2 only) failed at build.
    layer = ControlUnit(max_steps=STEPS, kernel_constraint=keras.constraints.UnitNorm(),
                        bias_constraint=keras.constraints.UnitNorm(),
                        kernel_regularizer=keras.regularizers.OrthogonalRegularizer(0.01))
    layer(_inputs())
    kernel = layer.question_kernel
    constrained = np.asarray(kernel.constraint(kernel))
    for step in range(STEPS):
        np.testing.assert_allclose(np.linalg.norm(constrained[step], axis=0), 1.0, rtol=1e-5)
        np.testing.assert_allclose(constrained[step], np.asarray(keras.constraints.UnitNorm()(kernel[step])))
    bias = layer.question_bias
    bias.assign(np.random.default_rng(0).normal(size=bias.shape))
    np.testing.assert_allclose(np.linalg.norm(np.asarray(bias.constraint(bias)), axis=-1), 1.0, rtol=1e-5)
    want = sum(float(keras.regularizers.OrthogonalRegularizer(0.01)(kernel[step])) for step in range(STEPS))
    np.testing.assert_allclose(float(kernel.regularizer(kernel)), want, rtol=1e-5)
    l2 = ControlUnit(max_steps=STEPS, kernel_regularizer=keras.regularizers.L2(0.1))
    l2(_inputs())  # an elementwise penalty: the same value as on the stack
    np.testing.assert_allclose(float(l2.question_kernel.regularizer(l2.question_kernel)),
                               0.1 * float(np.sum(np.square(np.asarray(l2.question_kernel)))), rtol=1e-5)
