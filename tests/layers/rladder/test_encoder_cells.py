"""GatedEncoderCell, LSTMEncoderCell, ConvLSTMEncoderCell, ConvEncoderCell,
GatedConvEncoderCell: numpy cases, contract, errors."""

import re
import warnings

import keras
import numpy as np
import pytest

from keras_capsules.layers import (
    ConvEncoderCell,
    ConvLSTMEncoderCell,
    GatedConvEncoderCell,
    GatedEncoderCell,
    LSTMEncoderCell,
)
from tests.backends import float64_enabled
from tests.harness import run_layer_contract


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _randomize(layer, rng):
    layer.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in layer.get_weights()])


def test_gated_cell_zero_weights_by_hand():
    """All weights zero: z = r = g = 1/2 and c = 0, so h_new = h / 2."""
    cell = GatedEncoderCell(3, kernel_initializer="zeros", feedback_initializer="zeros",
                            recurrent_initializer="zeros")
    h = np.array([[1.0, -2.0, 4.0]], "float32")
    out = keras.ops.convert_to_numpy(cell([np.ones((1, 2), "float32"), np.ones((1, 3), "float32"), h]))
    np.testing.assert_allclose(out, h / 2, rtol=1e-6)


@pytest.mark.parametrize("use_feedback", [True, False])
def test_gated_cell_matches_numpy(use_feedback):
    rng = np.random.default_rng(0)
    u = 3
    x = rng.normal(size=(2, 4)).astype("float32")
    d = rng.normal(size=(2, u)).astype("float32")
    h = rng.normal(size=(2, u)).astype("float32")
    cell = GatedEncoderCell(u, use_feedback=use_feedback)
    inputs = [x, d, h] if use_feedback else [x, h]
    cell(inputs)
    _randomize(cell, rng)
    W = np.asarray(cell.kernel)
    V = np.asarray(cell.recurrent_kernel)
    b = np.asarray(cell.bias)
    blocks = lambda m: [m[:, i * u:(i + 1) * u] for i in range(m.shape[1] // u)]  # noqa: E731
    bb = [b[i * u:(i + 1) * u] for i in range(len(b) // u)]
    Wb, Vb = blocks(W), blocks(V)
    if use_feedback:
        Ub = blocks(np.asarray(cell.feedback_kernel))
        z = _sigmoid(x @ Wb[0] + d @ Ub[0] + h @ Vb[0] + bb[0])
        r = _sigmoid(x @ Wb[1] + d @ Ub[1] + h @ Vb[1] + bb[1])
        g = _sigmoid(x @ Wb[2] + d @ Ub[2] + h @ Vb[2] + bb[2])
        c = np.tanh(x @ Wb[3] + (g * d) @ Ub[3] + (r * h) @ Vb[3] + bb[3])
    else:
        z = _sigmoid(x @ Wb[0] + h @ Vb[0] + bb[0])
        r = _sigmoid(x @ Wb[1] + h @ Vb[1] + bb[1])
        c = np.tanh(x @ Wb[2] + (r * h) @ Vb[2] + bb[2])
    want = (1 - z) * h + z * c
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cell(inputs)), want, rtol=1e-5, atol=1e-6)


def _lstm_numpy(pre, c):
    i, f, g, o = np.split(pre, 4, axis=-1)
    c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c_new), c_new


def test_lstm_cells_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 3, 2)).astype("float32")
    d, h, c = (rng.normal(size=(2, 3, 3, 4)).astype("float32") for _ in range(3))
    conv = ConvLSTMEncoderCell(4, kernel_size=1)
    conv([x, d, h, c])
    _randomize(conv, rng)
    k = lambda w: np.asarray(w)[0, 0]  # noqa: E731  1x1 kernels
    pre = x @ k(conv.kernel) + d @ k(conv.feedback_kernel) + h @ k(conv.recurrent_kernel) + np.asarray(conv.bias)
    for got, want in zip(conv([x, d, h, c]), _lstm_numpy(pre, c)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, rtol=1e-5, atol=1e-5)

    dense = LSTMEncoderCell(4, use_feedback=False)
    flat = [a[:, 0, 0] for a in (x, h, c)]
    dense(flat)
    _randomize(dense, rng)
    pre = flat[0] @ np.asarray(dense.kernel) + flat[1] @ np.asarray(dense.recurrent_kernel) + np.asarray(dense.bias)
    for got, want in zip(dense(flat), _lstm_numpy(pre, flat[2])):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, rtol=1e-5, atol=1e-5)


def test_unit_forget_bias():
    cell = LSTMEncoderCell(2)
    cell.build([(None, 3), (None, 2), (None, 2), (None, 2)])
    np.testing.assert_array_equal(np.asarray(cell.bias), [0, 0, 1, 1, 0, 0, 0, 0])


CONTRACT_CASES = [
    (GatedEncoderCell, dict(units=3), [(4, 5), (4, 3), (4, 3)]),
    (GatedEncoderCell, dict(units=3, use_feedback=False, kernel_regularizer="l2"), [(4, 5), (4, 3)]),
    (LSTMEncoderCell, dict(units=3), [(4, 5), (4, 3), (4, 3), (4, 3)]),
    (ConvLSTMEncoderCell, dict(filters=2), [(4, 3, 3, 1), (4, 3, 3, 2), (4, 3, 3, 2), (4, 3, 3, 2)]),
    (ConvEncoderCell, dict(filters=2), [(4, 3, 3, 1), (4, 3, 3, 2)]),
    (ConvEncoderCell, dict(filters=2, normalization="instance", activation="tanh"), [(4, 3, 3, 1), (4, 3, 3, 2)]),
    (ConvEncoderCell, dict(filters=2, use_feedback=False, normalization="layer"), [(4, 3, 3, 1)]),
    (GatedConvEncoderCell, dict(filters=2), [(4, 3, 3, 1), (4, 3, 3, 2)]),
    (GatedConvEncoderCell, dict(filters=2, normalization="instance"), [(4, 3, 3, 1), (4, 3, 3, 2)]),
    (GatedConvEncoderCell, dict(filters=2, use_feedback=False, normalization="layer"), [(4, 3, 3, 1)]),
]


@pytest.mark.parametrize("cls,kwargs,shapes", CONTRACT_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_layer_contract(cls, kwargs, shapes, tmp_path):
    rng = np.random.default_rng(2)
    inputs = [rng.normal(size=s).astype("float32") for s in shapes]
    run_layer_contract(cls, kwargs, inputs, tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "cls,kwargs,name",
    [
        (GatedEncoderCell, dict(units=0), "units"),
        (GatedEncoderCell, dict(units=2, use_feedback="yes"), "use_feedback"),
        (LSTMEncoderCell, dict(units=2, unit_forget_bias=1), "unit_forget_bias"),
        (ConvLSTMEncoderCell, dict(filters=2, kernel_size=0), "kernel_size"),
        (ConvLSTMEncoderCell, dict(filters=None), "filters"),
        (ConvEncoderCell, dict(filters=0), "filters"),
        (ConvEncoderCell, dict(filters=2, activation="softmax"), "activation"),
        (ConvEncoderCell, dict(filters=2, normalization="batch"), "normalization"),
        (GatedConvEncoderCell, dict(filters=0), "filters"),
        (GatedConvEncoderCell, dict(filters=2, normalization="batch"), "normalization"),
        (GatedConvEncoderCell, dict(filters=2, activation="relu"), "activation"),
    ],
)
def test_bad_constructor_arguments(cls, kwargs, name):
    with pytest.raises(ValueError, match=f"Received: {name}="):
        cls(**kwargs)


CELLS = [
    (GatedEncoderCell, dict(units=3)),
    (LSTMEncoderCell, dict(units=3)),
    (ConvLSTMEncoderCell, dict(filters=2)),
    (ConvEncoderCell, dict(filters=2)),
    (GatedConvEncoderCell, dict(filters=2)),
]


@pytest.mark.parametrize("cls,kwargs", CELLS, ids=lambda v: getattr(v, "__name__", ""))
def test_feedback_options_without_feedback_are_a_clear_error_and_old_configs_load(cls, kwargs):
    # fix22: a cell with use_feedback=False took the feedback options and ignored them
    for option, value in [("feedback_initializer", "zeros"), ("feedback_regularizer", "l2"),
                          ("feedback_constraint", "non_neg")]:
        with pytest.raises(ValueError, match=rf"builds none\. Received: {option}='{value}', use_feedback=False"):
            cls(use_feedback=False, **kwargs, **{option: value})
    config = cls(use_feedback=False, **kwargs).get_config()
    assert config["feedback_initializer"] is None
    # with feedback the default is glorot uniform, as before
    assert cls(**kwargs).get_config()["feedback_initializer"]["class_name"] == "GlorotUniform"
    # configs saved before: the old default initializer is dropped silently, a chosen option
    # with a warning
    serialize = keras.initializers.serialize
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old = dict(config, feedback_initializer=serialize(keras.initializers.GlorotUniform()))
        assert cls.from_config(old).feedback_initializer is None
    old = dict(config, feedback_initializer=serialize(keras.initializers.Zeros()),
               feedback_regularizer=keras.regularizers.serialize(keras.regularizers.L2()))
    with pytest.warns(UserWarning) as record:
        loaded = cls.from_config(old)
    assert sorted(str(w.message).split(" has no effect with use_feedback=False")[0] for w in record) == [
        f"{cls.__name__}: feedback_initializer='Zeros'", f"{cls.__name__}: feedback_regularizer='L2'"]
    assert loaded.feedback_initializer is None and loaded.feedback_regularizer is None


def test_bad_inputs():
    z = lambda *s: np.zeros(s, "float32")  # noqa: E731
    with pytest.raises(ValueError, match=r"3 inputs \[x, feedback, h\]"):
        GatedEncoderCell(3)([z(2, 4), z(2, 3)])
    with pytest.raises(ValueError, match=r"feedback to have the shape of its state, \[batch, 3\]"):
        GatedEncoderCell(3)([z(2, 4), z(2, 5), z(2, 3)])
    with pytest.raises(ValueError, match=r"state c of shape \[batch, 3\]"):
        LSTMEncoderCell(3, use_feedback=False)([z(2, 4), z(2, 3), z(2, 2)])
    with pytest.raises(ValueError, match=r"\[batch, height, width, channels\]"):
        ConvLSTMEncoderCell(2)([z(2, 4), z(2, 2), z(2, 2), z(2, 2)])


def _conv1x1(x, kernel):
    return np.einsum("bhwc,cf->bhwf", x, kernel[0, 0])


def _conv_cell_pre_activations(cell, x, d, normalization):
    """A 1x1 feed-forward conv cell's ``gamma * normalize(x W + d U)`` (no bias), in numpy."""
    pre = _conv1x1(x, np.asarray(cell.kernel)) + _conv1x1(d, np.asarray(cell.feedback_kernel))
    if normalization is None:
        return pre
    axes = (1, 2) if normalization == "instance" else (1, 2, 3)
    mean = pre.mean(axis=axes, keepdims=True)
    return (pre - mean) / np.sqrt(pre.var(axis=axes, keepdims=True) + 1e-5) * np.asarray(cell.gamma)


@pytest.mark.parametrize("normalization", [None, "instance", "layer"])
def test_conv_cell_matches_numpy(normalization):
    """1x1 kernels: h = relu(gamma * normalize(x W + d U) + b), per pixel."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 2)).astype("float32")
    d = rng.normal(size=(2, 3, 4, 3)).astype("float32")
    cell = ConvEncoderCell(3, kernel_size=1, normalization=normalization)
    cell([x, d])
    _randomize(cell, rng)
    pre = _conv_cell_pre_activations(cell, x, d, normalization)
    want = np.maximum(pre + np.asarray(cell.bias), 0.0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cell([x, d])), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("normalization", [None, "instance", "layer"])
def test_gated_conv_cell_matches_numpy(normalization):
    """1x1 kernels: [i, g, o] = gamma * normalize(x W + d U) + b, per pixel;
    h = sigmoid(o) * tanh(sigmoid(i) * tanh(g)), as a ConvLSTM step from h = c = 0."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 4, 2)).astype("float32")
    d = rng.normal(size=(2, 3, 4, 3)).astype("float32")
    cell = GatedConvEncoderCell(3, kernel_size=1, normalization=normalization)
    cell([x, d])
    assert cell.kernel.shape == (1, 1, 2, 9) and cell.feedback_kernel.shape == (1, 1, 3, 9)
    assert cell.NUM_STATES == 0 and not hasattr(cell, "recurrent_kernel")
    _randomize(cell, rng)
    pre = _conv_cell_pre_activations(cell, x, d, normalization)
    i, g, o = np.split(pre + np.asarray(cell.bias), 3, axis=-1)
    want = _sigmoid(o) * np.tanh(_sigmoid(i) * np.tanh(g))
    got = keras.ops.convert_to_numpy(cell([x, d]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if normalization is None:
        # the ConvLSTM cell's step with no previous output or cell state, its forget gate unused
        lstm = ConvLSTMEncoderCell(3, kernel_size=1)
        zeros = np.zeros((2, 3, 4, 3), "float32")
        lstm([x, d, zeros, zeros])
        split = lambda w: np.split(np.asarray(w), 3, axis=-1)  # noqa: E731 (i, g, o)
        forget = lambda w: np.zeros_like(split(w)[0])  # noqa: E731
        kernels = [np.concatenate([split(w)[0], forget(w), split(w)[1], split(w)[2]], axis=-1)
                   for w in (cell.kernel, cell.feedback_kernel)]
        lstm.set_weights(kernels + [np.asarray(lstm.recurrent_kernel),
                                    np.concatenate([split(cell.bias)[0], forget(cell.bias),
                                                    split(cell.bias)[1], split(cell.bias)[2]])])
        h, _ = lstm([x, d, zeros, zeros])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(h), got, rtol=1e-4, atol=1e-5)


def test_gated_conv_cell_config_round_trips_without_an_activation():
    cell = GatedConvEncoderCell(4, kernel_size=5, normalization="instance", use_feedback=False)
    config = cell.get_config()
    assert "activation" not in config
    again = GatedConvEncoderCell.from_config(config)
    assert (again.filters, again.kernel_size, again.normalization, again.use_feedback) == (4, 5, "instance", False)


def test_conv_cell_without_feedback_is_a_convolution_and_has_no_state():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 5, 1)).astype("float32")
    cell = ConvEncoderCell(4, use_feedback=False, activation="linear")
    out = cell(x)
    assert out.shape == (2, 5, 5, 4) and cell.NUM_STATES == 0
    assert not hasattr(cell, "feedback_kernel") and not hasattr(cell, "recurrent_kernel")
    h, states = cell.step(x, None, [])
    assert states == []
    np.testing.assert_allclose(h, out, rtol=1e-6)
    assert cell.compute_output_shape((None, 5, 5, 1)) == (None, 5, 5, 4)


@pytest.mark.parametrize("make,x,h", [
    (lambda: GatedEncoderCell(6, use_feedback=False), (2, 3), [(2, 6)]),
    (lambda: ConvEncoderCell(4, use_feedback=False), (2, 5, 5, 1), []),
])
def test_step_refuses_feedback_for_a_cell_without_feedback(make, x, h):
    # helper-179: the feedback was dropped silently (the output was that of no feedback)
    cell = make()
    z = lambda shape: np.ones(shape, "float32")  # noqa: E731
    feedback = z(h[0] if h else (2, 5, 5, 4))
    with pytest.raises(ValueError, match=re.escape(
            f"{type(cell).__name__} was made with use_feedback=False: its step takes feedback=None. "
            f"Received: feedback of shape {feedback.shape}")):
        cell.step(z(x), feedback, [z(s) for s in h])
    out, _ = cell.step(z(x), None, [z(s) for s in h])
    assert out.shape == (h[0] if h else (2, 5, 5, 4))


def test_conv_lstm_cell_refuses_units_by_name():
    # helper-179: Python's "got multiple values for keyword argument 'units'"
    with pytest.raises(ValueError, match=r"takes its state size from `filters`, not `units`\. Received: units=8"):
        ConvLSTMEncoderCell(8, units=8)


def test_instance_normalized_conv_cell_keeps_every_channel_alive():
    """Whatever the bias, instance normalization leaves every channel active on
    some pixels of every sample (mean zero over the pixels before the shift)."""
    rng = np.random.default_rng(2)
    x = rng.random((3, 6, 6, 1)).astype("float32")
    cell = ConvEncoderCell(4, use_feedback=False, normalization="instance")
    cell(x)
    cell.bias.assign(np.full((4,), -0.5, "float32"))
    out = keras.ops.convert_to_numpy(cell(x))
    assert np.all(out.max(axis=(1, 2)) > 0)


def test_conv_cell_bad_inputs():
    z = lambda *s: np.zeros(s, "float32")  # noqa: E731
    with pytest.raises(ValueError, match=r"2 inputs \[x, feedback\]"):
        ConvEncoderCell(2)([z(2, 4, 4, 1)])
    with pytest.raises(ValueError, match=r"feedback to have the shape of its state"):
        ConvEncoderCell(2)([z(2, 4, 4, 1), z(2, 4, 4, 3)])
    with pytest.raises(ValueError, match=r"\[batch, height, width, channels\]"):
        ConvEncoderCell(2)([z(2, 4), z(2, 2)])
    with pytest.raises(ValueError, match="no state"):
        ConvEncoderCell(2).step(z(2, 4, 4, 1), z(2, 4, 4, 2), [z(2, 4, 4, 2)])


@pytest.mark.parametrize("normalization", ["instance", "layer"])
def test_float64_conv_cell_normalizes_in_float64(normalization):
    # Audit 11: the normalization ran in float32 for float64 cells (errors of ~1e-3 here).
    # port15: on JAX it still averaged in float32 (keras.ops.mean does there, whatever the
    # dtype), even with jax_enable_x64.
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        rng = np.random.default_rng(2)
        x = 1e4 + rng.normal(size=(1, 3, 3, 1))
        cell = ConvEncoderCell(
            2, kernel_size=1, use_feedback=False, activation="linear",
            normalization=normalization, kernel_initializer="ones", dtype="float64",
        )
        pre = np.repeat(x, 2, axis=-1)
        axes = (1, 2) if normalization == "instance" else (1, 2, 3)
        mean = pre.mean(axis=axes, keepdims=True)
        want = (pre - mean) / np.sqrt(pre.var(axis=axes, keepdims=True) + 1e-5)
        out = cell(x)
        assert keras.backend.standardize_dtype(out.dtype) == "float64"  # (torch dtypes never equal names)
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-9, atol=1e-9)


def test_numpy_booleans_are_switches():
    # Audit 11: use_feedback=np.False_ and unit_forget_bias=np.False_ were refused.
    assert GatedEncoderCell(3, use_feedback=np.False_).get_config()["use_feedback"] is False
    assert LSTMEncoderCell(3, unit_forget_bias=np.False_).get_config()["unit_forget_bias"] is False


@pytest.mark.parametrize("cls", [ConvEncoderCell, GatedConvEncoderCell])
def test_a_normalization_over_one_value_is_a_clear_error(cls):
    # Audit 2026-11-30: instance normalization on a 1x1 map (or 'layer' over one value)
    # is 0 for every input, so the level put out its bias alone, silently.
    x = np.random.default_rng(0).normal(size=(2, 1, 1, 4)).astype("float32")
    with pytest.raises(ValueError, match=r"1x1 map.*normalizes to 0.*input shape=\(2, 1, 1, 4\)"):
        cls(3, normalization="instance", use_feedback=False)(x)
    if cls is ConvEncoderCell:
        with pytest.raises(ValueError, match="1x1 map"):
            cls(1, normalization="layer", use_feedback=False)(x)
        assert cls(1, use_feedback=False)(x).shape == (2, 1, 1, 1)  # unnormalized: fine
    assert cls(3, normalization="layer", use_feedback=False)(x).shape == (2, 1, 1, 3)  # several values
    assert cls(3, normalization="instance", use_feedback=False)(np.ones((2, 2, 1, 4), "float32")).shape == (2, 2, 1, 3)
    # Audit s65: a cell built on a larger map took a 1x1 one later without a word
    built = cls(3, normalization="instance", use_feedback=False)
    built(np.ones((2, 4, 4, 4), "float32"))
    with pytest.raises(ValueError, match="1x1 map"):
        built(x)
    with pytest.raises(ValueError, match="1x1 map"):
        built(keras.Input((1, 1, 4)))


INTEGER_INPUT_CASES = [
    (GatedEncoderCell, dict(units=3), [(2, 5), (2, 3), (2, 3)]),
    (LSTMEncoderCell, dict(units=3), [(2, 5), (2, 3), (2, 3), (2, 3)]),
    (ConvLSTMEncoderCell, dict(filters=2), [(2, 4, 4, 1), (2, 4, 4, 2), (2, 4, 4, 2), (2, 4, 4, 2)]),
    (ConvEncoderCell, dict(filters=2), [(2, 4, 4, 1), (2, 4, 4, 2)]),
    (GatedConvEncoderCell, dict(filters=2, normalization="instance"), [(2, 4, 4, 1), (2, 4, 4, 2)]),
]


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("cls,kwargs,shapes", INTEGER_INPUT_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_integer_and_boolean_inputs_are_cast_as_the_combinators_cast_them(cls, kwargs, shapes, dtype):
    # Audit s65: a model on integer or boolean inputs (0/1 frames) built, then failed in
    # predict with a backend error from the first matmul or convolution.
    rng = np.random.default_rng(0)
    values = [(rng.random(s) < 0.5) for s in shapes]
    cell = cls(**kwargs)
    floats = cell([v.astype("float32") for v in values])
    cast = cell([v.astype(dtype) for v in values])
    for a, b in zip(keras.tree.flatten(cast), keras.tree.flatten(floats)):
        assert keras.backend.standardize_dtype(a.dtype) == "float32"
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-6)
    inputs = [keras.Input(s[1:], dtype=dtype) for s in shapes]
    model = keras.Model(inputs, cls.from_config(cell.get_config())(inputs))
    model.set_weights(cell.get_weights())
    predicted = model.predict([v.astype(dtype) for v in values], verbose=0)
    for a, b in zip(keras.tree.flatten(predicted), keras.tree.flatten(floats)):
        np.testing.assert_allclose(a, keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)


def test_batch_size_mismatch_is_a_clear_error():
    # Audit 11: x, feedback and states of different batch sizes failed with a raw TF error.
    with pytest.raises(ValueError, match=r"same batch size.*x shape=\(3, 5\), feedback shape=\(2, 3\)"):
        GatedEncoderCell(3)([np.zeros((3, 5), "float32"), np.zeros((2, 3), "float32"),
                             np.zeros((2, 3), "float32")])
    with pytest.raises(ValueError, match=r"same batch size.*c shape=\(1, 4, 4, 2\)"):
        ConvLSTMEncoderCell(2)([np.zeros((2, 4, 4, 1), "float32")] + [np.zeros((2, 4, 4, 2), "float32")] * 2
                               + [np.zeros((1, 4, 4, 2), "float32")])


def _tanh_cell_case(name, rng):
    """A float64 cell with random weights, its inputs and the numpy float64 outputs."""
    x2, x4 = rng.normal(size=(2, 3)), rng.normal(size=(2, 2, 2, 2))
    s2, s4 = (lambda: rng.normal(size=(2, 4))), (lambda: rng.normal(size=(2, 2, 2, 4)))
    if name == "GatedEncoderCell":
        cell, inputs = GatedEncoderCell(4, use_feedback=False, dtype="float64"), [x2, s2()]
    elif name == "LSTMEncoderCell":
        cell, inputs = LSTMEncoderCell(4, use_feedback=False, dtype="float64"), [x2, s2(), s2()]
    elif name == "ConvLSTMEncoderCell":
        cell = ConvLSTMEncoderCell(4, kernel_size=1, use_feedback=False, dtype="float64")
        inputs = [x4, s4(), s4()]
    elif name == "GatedConvEncoderCell":
        cell, inputs = GatedConvEncoderCell(4, kernel_size=1, use_feedback=False, dtype="float64"), [x4]
    else:
        cell = ConvEncoderCell(4, kernel_size=1, use_feedback=False, activation="tanh", dtype="float64")
        inputs = [x4]
    cell(inputs)
    cell.set_weights([rng.normal(size=w.shape) for w in cell.get_weights()])
    k = lambda w: np.asarray(w)[0, 0] if np.asarray(w).ndim == 4 else np.asarray(w)  # noqa: E731 (1x1)
    if name == "GatedEncoderCell":  # blocks z, r, candidate
        x, h = inputs
        pre = x @ k(cell.kernel) + np.asarray(cell.bias)
        z, r, _ = np.split(pre, 3, axis=-1)
        W_h = np.split(k(cell.recurrent_kernel), 3, axis=-1)
        z, r = _sigmoid(z + h @ W_h[0]), _sigmoid(r + h @ W_h[1])
        c = np.tanh(np.split(pre, 3, axis=-1)[2] + (r * h) @ W_h[2])
        return cell, inputs, [(1 - z) * h + z * c]
    if name == "ConvEncoderCell":
        return cell, inputs, [np.tanh(inputs[0] @ k(cell.kernel) + np.asarray(cell.bias))]
    if name == "GatedConvEncoderCell":
        i, g, o = np.split(inputs[0] @ k(cell.kernel) + np.asarray(cell.bias), 3, axis=-1)
        return cell, inputs, [_sigmoid(o) * np.tanh(_sigmoid(i) * np.tanh(g))]
    x, h, c = inputs
    pre = x @ k(cell.kernel) + h @ k(cell.recurrent_kernel) + np.asarray(cell.bias)
    return cell, inputs, list(_lstm_numpy(pre, c))


@pytest.mark.parametrize(
    "name", ["GatedEncoderCell", "LSTMEncoderCell", "ConvLSTMEncoderCell", "ConvEncoderCell", "GatedConvEncoderCell"]
)
def test_float64_cells_compute_tanh_in_float64(name):
    # fix22: keras.ops.tanh computes float64 in float32 on JAX (Keras' type promotion maps
    # float64 to float32 there, even with jax_enable_x64): these cells were off by ~1e-7.
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        cell, inputs, want = _tanh_cell_case(name, np.random.default_rng(5))
        got = keras.tree.flatten(cell(inputs))
        for g, w in zip(got, want):
            assert keras.backend.standardize_dtype(g.dtype) == "float64"
            np.testing.assert_allclose(keras.ops.convert_to_numpy(g), w, rtol=1e-12, atol=1e-14)


def _normal(*shape):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


BUILT_AND_CALLED = {  # cell, the inputs [x, feedback, states...] it is built on; x's last axis then changes
    # a multiple of the built channels ran silently as a grouped convolution on TensorFlow
    "ConvLSTMEncoderCell": (lambda: ConvLSTMEncoderCell(3), [(2, 4, 4, 1)] + [(2, 4, 4, 3)] * 3, 2),
    "ConvEncoderCell": (lambda: ConvEncoderCell(4), [(2, 4, 4, 1), (2, 4, 4, 4)], 2),
    "GatedConvEncoderCell": (lambda: GatedConvEncoderCell(4), [(2, 4, 4, 1), (2, 4, 4, 4)], 2),
    # the others failed deep in the backend ("Matrix size-incompatible")
    "GatedEncoderCell": (lambda: GatedEncoderCell(3), [(2, 4), (2, 3), (2, 3)], 6),
    "LSTMEncoderCell": (lambda: LSTMEncoderCell(3), [(2, 4)] + [(2, 3)] * 3, 6),
}


@pytest.mark.parametrize("case", sorted(BUILT_AND_CALLED))
def test_an_x_unlike_the_one_built_for_is_a_clear_error(case):
    # audit (2026-11-27): a built cell did not check x again
    make, shapes, other = BUILT_AND_CALLED[case]
    cell = make()
    cell([_normal(*s) for s in shapes])
    changed = [shapes[0][:-1] + (other,)] + shapes[1:]
    with pytest.raises(ValueError, match=r"was built for x with a last axis of \d+\. Received: x shape="):
        cell([_normal(*s) for s in changed])
    cell([_normal(*s) for s in shapes])  # still fine
    # Audit s65: reused on such an input in a functional model, it built the model
    with pytest.raises(ValueError, match=r"was built for x with a last axis of \d+\. Received: x shape="):
        cell([keras.Input(s[1:]) for s in changed])
    assert cell([keras.Input(s[1:]) for s in shapes]) is not None
