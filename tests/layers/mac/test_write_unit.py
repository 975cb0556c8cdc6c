"""WriteUnit: the paper's formulas with and without self-attention and gate."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import WriteUnit
from tests.harness import run_layer_contract
from tests.layers.mac import reference as ref

B, D, DR, T = 2, 4, 3, 3


def _inputs(self_attention, seed=0):
    rng = np.random.default_rng(seed)
    x = [
        rng.standard_normal((B, DR)).astype("float32"),
        rng.standard_normal((B, D)).astype("float32"),
        rng.standard_normal((B, D)).astype("float32"),
    ]
    if self_attention:
        x += [rng.standard_normal((B, T, D)).astype("float32") for _ in range(2)]
    return x


def _layer(self_attention, **kwargs):
    layer = WriteUnit(self_attention=self_attention, **kwargs)
    layer(_inputs(self_attention))
    return ref.randomize(layer)


@pytest.mark.parametrize("self_attention", [False, True])
@pytest.mark.parametrize("memory_gate", [False, True])
def test_matches_numpy(self_attention, memory_gate):
    layer = _layer(self_attention, memory_gate=memory_gate)
    x = _inputs(self_attention, seed=1)
    out = layer(x)
    want_m, want_sa = ref.write_unit(
        ref.weights(layer), *x[:3], *(x[3:] or [None, None]), self_attention, memory_gate
    )
    memory = out[0] if self_attention else out
    np.testing.assert_allclose(memory, want_m, atol=1e-5, rtol=1e-5)
    if self_attention:
        np.testing.assert_allclose(out[1], want_sa, atol=1e-6, rtol=1e-5)
        np.testing.assert_allclose(np.sum(keras.ops.convert_to_numpy(out[1]), -1), 1.0, atol=1e-6)


def test_gate_by_hand():
    # Zero gate kernel: the gate is sigmoid(bias) for every sample; with the default
    # bias initialiser (1.0) m = s m_prev + (1 - s) m' with s = sigmoid(1).
    layer = WriteUnit(memory_gate=True, gate_per_dimension=True)
    x = _inputs(False, seed=2)
    layer(x)
    np.testing.assert_array_equal(np.asarray(layer.gate_bias), np.ones(D))
    layer.gate_kernel.assign(np.zeros((D, D), "float32"))
    r, m, _ = x
    plain = np.concatenate([r, m], -1) @ np.asarray(layer.kernel) + np.asarray(layer.bias)
    s = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(layer(x), s * m + (1 - s) * plain, atol=1e-5)
    wide = WriteUnit(memory_gate=True, gate_bias_initializer=keras.initializers.Constant(-2.0))
    wide(x)
    assert wide.gate_bias.shape == (1,) and np.asarray(wide.gate_bias)[0] == -2.0


def test_history_mask():
    layer = _layer(True)
    x = _inputs(True, seed=3)
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    dirty = [v.copy() for v in x]
    dirty[3][~mask] = np.nan
    dirty[4][~mask] = 1e9
    m1, sa1 = layer(x, history_mask=mask)
    m2, sa2 = layer(dirty, history_mask=mask)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(sa2, sa1)
    np.testing.assert_array_equal(np.asarray(sa1)[~mask], 0.0)
    # Sample 1 keeps only the first history entry: as if the history had length 1.
    m3, _ = layer(x[:3] + [x[3][:, :1], x[4][:, :1]])
    np.testing.assert_allclose(np.asarray(m1)[1], np.asarray(m3)[1], atol=1e-6)


def test_layer_contract(tmp_path):
    run_layer_contract(
        WriteUnit,
        {"self_attention": True, "memory_gate": True},
        _inputs(True),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"self_attention": 1}, "Received: self_attention=1"),
        ({"memory_gate": None}, "Received: memory_gate=None"),
        ({"gate_per_dimension": "no"}, "Received: gate_per_dimension='no'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WriteUnit(**kwargs)


def test_bad_inputs():
    x = _inputs(True)
    with pytest.raises(ValueError, match="a list of inputs"):
        WriteUnit()(x)
    with pytest.raises(ValueError, match="a list of inputs"):
        WriteUnit(self_attention=True)(x[:3])
    with pytest.raises(ValueError, match=r"previous_memories of shape \[batch, steps, 4\]"):
        WriteUnit(self_attention=True)(x[:4] + [x[4][..., :2]])
    with pytest.raises(ValueError, match="same shape"):
        WriteUnit()([x[0], x[1], x[2][:, :2]])
    with pytest.raises(ValueError, match="history_mask"):
        WriteUnit(self_attention=True)(x, history_mask=keras.ops.ones((B,), "bool"))


def test_batch_size_and_steps_mismatch_are_clear_errors():
    # Audit 6: mismatched batch sizes (or history lengths) raised raw TensorFlow errors.
    x = _inputs(True)
    with pytest.raises(ValueError, match=r"same batch size.*memory_prev shape=\(1, 4\)"):
        WriteUnit()([x[0], x[1][:1], x[2]])
    with pytest.raises(ValueError, match=r"same batch size.*previous_memories shape=\(1, 3, 4\)"):
        WriteUnit(self_attention=True)(x[:4] + [x[4][:1]])
    with pytest.raises(ValueError, match=r"same number of steps.*previous_memories shape=\(2, 2, 4\)"):
        WriteUnit(self_attention=True)(x[:4] + [x[4][:, :2]])


def test_history_mask_without_self_attention_is_refused():
    # Audit 6: the mask was silently ignored when self_attention=False (there is no
    # history to mask); it is now a clear error.
    x = _inputs(False)
    layer = WriteUnit()
    layer(x)
    with pytest.raises(ValueError, match="history_mask.*self_attention=True"):
        layer(x, history_mask=np.ones((B, T), bool))
    symbolic = [keras.Input((DR,)), keras.Input((D,)), keras.Input((D,))]
    with pytest.raises(ValueError, match="history_mask.*self_attention=True"):
        layer(symbolic, history_mask=keras.Input((T,), dtype="bool"))


def test_history_mask_as_nested_lists_or_integers():
    # A history_mask given as nested Python lists (as words_mask and kb_mask may be)
    # failed with "AttributeError: 'list' object has no attribute 'shape'".
    layer = _layer(True)
    x = _inputs(True, seed=3)
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    want_m, want_sa = (np.asarray(v) for v in layer(x, history_mask=mask))
    for given in (mask.tolist(), mask.astype("int32")):
        m, sa = layer(x, history_mask=given)
        np.testing.assert_array_equal(np.asarray(m), want_m)
        np.testing.assert_array_equal(np.asarray(sa), want_sa)
    with pytest.raises(ValueError, match=r"history_mask .*\(2, 3\).*Received: history_mask shape=\(2, 2\)"):
        layer(x, history_mask=[[True, False], [True, True]])


def test_gate_per_dimension_without_the_gate_is_refused():
    # gate_per_dimension=True without memory_gate=True built no gate at all and said
    # nothing: a per-dimension gate asked for, and silently none.
    from keras_capsules.layers import MACCell, MACNetwork

    for make in (WriteUnit, lambda **kw: MACCell(2, **kw), lambda **kw: MACNetwork(2, **kw)):
        with pytest.raises(ValueError, match=r"memory_gate=True.*Received: gate_per_dimension=True, memory_gate=False"):
            make(gate_per_dimension=True)
        layer = make(gate_per_dimension=True, memory_gate=True)
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    config = WriteUnit().get_config()  # the defaults still round-trip
    assert WriteUnit.from_config(config).get_config() == config


def test_a_gate_bias_initializer_without_the_gate_is_refused():
    # Audit s64: gate_bias_initializer="ones" without memory_gate=True was accepted,
    # recorded in the config, and initialized nothing.
    from keras_capsules.layers import MACCell, MACNetwork

    for make in (WriteUnit, lambda **kw: MACCell(2, **kw), lambda **kw: MACNetwork(2, **kw)):
        with pytest.raises(ValueError, match=r"memory_gate=True.*Received: gate_bias_initializer='ones', memory_gate=False"):
            make(gate_bias_initializer="ones")
        layer = make(gate_bias_initializer="ones", memory_gate=True)
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
        # a gateless layer's config (which records the default initializer) still loads
        gateless = make()
        assert type(gateless).from_config(gateless.get_config()).get_config() == gateless.get_config()


def test_a_saved_gateless_config_with_a_gate_bias_initializer_still_loads():
    # Backward compatibility (audit s64): files saved before the refusal above recorded the
    # ignored initializer; they load, with the default in its place (it initializes nothing).
    from keras_capsules.layers import MACCell, MACNetwork

    for make in (WriteUnit, lambda **kw: MACCell(2, **kw), lambda **kw: MACNetwork(2, **kw)):
        config = make().get_config()
        config["gate_bias_initializer"] = keras.initializers.serialize(keras.initializers.Zeros())
        layer = type(make()).from_config(config)
        assert not layer.get_config()["memory_gate"]
        assert layer.get_config()["gate_bias_initializer"] == make().get_config()["gate_bias_initializer"]
