"""MACCell: one step equals the three units' formulas composed; contract; errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import MACCell
from tests.backends import compiled
from tests.harness import run_layer_contract
from tests.layers.mac import reference as ref

B, S, N, D, DQ, DKB, T = 2, 4, 5, 4, 3, 6, 2


def _inputs(self_attention=False, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(B, S, D), (B, DQ), (B, N, DKB), (B, D), (B, D)]
    if self_attention:
        shapes += [(B, T, D), (B, T, D)]
    return [rng.standard_normal(s).astype("float32") for s in shapes]


@pytest.mark.parametrize("self_attention", [False, True])
def test_matches_numpy(self_attention):
    cell = MACCell(max_steps=3, self_attention=self_attention, memory_gate=True,
                   read_activation="elu")
    cell(_inputs(self_attention))
    ref.randomize(cell)
    x = _inputs(self_attention, seed=1)
    words_mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], bool)
    kb_mask = np.array([[1, 1, 1, 1, 1], [0, 1, 0, 1, 0]], bool)
    drop = np.array([[2.0, 0, 2.0, 0], [0, 2.0, 2.0, 2.0]], "float32")
    out = cell(x, step=2, words_mask=words_mask, kb_mask=kb_mask, memory_dropout_mask=drop)
    cw, q, kb, c, m = x[:5]
    c1, cv = ref.control_unit(ref.weights(cell.control_unit), q, c, cw, 2, words_mask)
    r, rv = ref.read_unit(ref.weights(cell.read_unit), m * drop, kb, c1, kb_mask, "elu")
    m1, sa = ref.write_unit(ref.weights(cell.write_unit), r, m, c1, *(x[5:] or [None, None]),
                            self_attention, True)
    want = [c1, m1, cv, rv] + ([sa] if self_attention else [])
    assert len(out) == len(want)
    for got, exp in zip(out, want):
        np.testing.assert_allclose(got, exp, atol=1e-5, rtol=1e-5)


def test_layer_contract(tmp_path):
    run_layer_contract(
        MACCell,
        {"max_steps": 2, "self_attention": True, "memory_gate": True},
        _inputs(True),
        tmp_path=tmp_path,
        call_kwargs={"step": 1},
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_steps": -1}, "Received: max_steps=-1"),
        ({"max_steps": 2, "read_activation": "tanh"}, "Received: read_activation='tanh'"),
        ({"max_steps": 2, "read_dropout": -0.1}, "Received: read_dropout=-0.1"),
        ({"max_steps": 2, "memory_gate": 0}, "Received: memory_gate=0"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MACCell(**kwargs)


def test_bad_inputs():
    x = _inputs()
    with pytest.raises(ValueError, match="a list of inputs"):
        MACCell(max_steps=2)(x[:4])
    with pytest.raises(ValueError, match=r"memory_prev of shape \[batch, d\] with d=4"):
        MACCell(max_steps=2)(x[:4] + [x[4][:, :3]])


def test_batch_size_mismatch_is_a_clear_error():
    # Audit 6: a knowledge base with another batch size raised a raw TensorFlow error.
    x = _inputs()
    x[2] = np.concatenate([x[2], x[2][:1]])
    with pytest.raises(ValueError, match=r"same batch size.*knowledge_base shape=\(3, 5, 6\)"):
        MACCell(max_steps=2)(x)


def test_history_mask_without_self_attention_is_refused():
    cell = MACCell(max_steps=2)
    with pytest.raises(ValueError, match="history_mask.*self_attention=True"):
        cell(_inputs(), history_mask=np.ones((B, T), bool))
    symbolic = [keras.Input(x.shape[1:]) for x in _inputs()]
    with pytest.raises(ValueError, match="history_mask.*self_attention=True"):
        cell(symbolic, history_mask=keras.Input((T,), dtype="bool"))


def test_numpy_booleans_are_booleans():
    # Switches read from numpy (np.True_, e.g. out of a config array) were refused.
    cell = MACCell(max_steps=2, self_attention=np.True_, memory_gate=np.False_)
    assert cell.self_attention is True and cell.memory_gate is False
    assert MACCell.from_config(cell.get_config()).get_config() == cell.get_config()
    with pytest.raises(ValueError, match="Received: memory_gate=1"):
        MACCell(max_steps=2, memory_gate=1)


def test_memory_dropout_mask_of_the_wrong_shape_is_a_clear_error():
    # Audit 11: a [batch] mask with batch == d was silently applied per memory dimension.
    rng = np.random.default_rng(0)
    shapes = [(D, S, D), (D, DQ), (D, N, DKB), (D, D), (D, D)]
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes]
    cell = MACCell(max_steps=2)
    with pytest.raises(ValueError, match=r"Received: memory_dropout_mask shape=\(4,\)"):
        cell(inputs, memory_dropout_mask=np.ones((D,), "float32"))
    assert cell(inputs, memory_dropout_mask=np.ones((D, 1), "float32"))[1].shape == (D, D)


def test_numpy_integer_steps_are_range_checked_also_when_traced():
    # audit 4: MACCell let Keras turn a numpy integer step into a tensor before the
    # control unit's range check, so a traced out-of-range step was clamped silently to
    # the last step's projection under XLA (a raw GatherV2 error without XLA).
    x = _inputs()
    cell = MACCell(max_steps=2)
    cell(x)
    for jit_compile in (True, False):
        with pytest.raises(ValueError, match=r"max_steps=2\). Received: step=5"):
            compiled(lambda: cell(x, step=np.int64(5))[0], jit_compile=jit_compile)()
        traced = compiled(lambda: cell(x, step=np.int64(1))[0], jit_compile=jit_compile)()
        np.testing.assert_allclose(traced, cell(x, step=1)[0], atol=1e-6)
    with pytest.raises(ValueError, match=r"max_steps=2\). Received: step=2"):
        cell(x, 2)
