"""ReadUnit: the paper's formulas (and the ELU variant), padding, contract, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import ReadUnit
from tests.backends import grads, tensor
from tests.harness import run_layer_contract
from tests.layers.mac import reference as ref

B, N, D, DKB = 2, 6, 4, 3
MASK = np.array([[1, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1]], bool)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((B, D)).astype("float32"),
        rng.standard_normal((B, N, DKB)).astype("float32"),
        rng.standard_normal((B, D)).astype("float32"),
    ]


def _layer(**kwargs):
    layer = ReadUnit(**kwargs)
    layer(_inputs())
    return ref.randomize(layer)


@pytest.mark.parametrize("activation", [None, "elu"])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_numpy(activation, masked):
    layer = _layer(activation=activation)
    m, kb, c = _inputs(1)
    mask = MASK if masked else None
    retrieved, attention = layer([m, kb, c], kb_mask=mask)
    want_r, want_a = ref.read_unit(ref.weights(layer), m, kb, c, mask, activation)
    np.testing.assert_allclose(retrieved, want_r, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(attention, want_a, atol=1e-6, rtol=1e-5)


def test_uniform_attention_by_hand():
    layer = _layer()
    layer.attention_kernel.assign(np.zeros((D, 1), "float32"))
    m, kb, c = _inputs(2)
    retrieved, attention = layer([m, kb, c], kb_mask=MASK)
    np.testing.assert_allclose(attention[0], MASK[0] / 4.0, atol=1e-6)
    np.testing.assert_allclose(retrieved[0], kb[0, MASK[0]].mean(0), atol=1e-6)
    np.testing.assert_allclose(retrieved[1], kb[1].mean(0), atol=1e-6)


@pytest.mark.parametrize("fill", [-1e6, np.nan, np.inf])
def test_masked_cells_never_change_the_result(fill):
    layer = _layer(activation="elu")
    m, kb, c = (tensor(x) for x in _inputs(3))
    dirty = np.asarray(kb).copy()
    dirty[~MASK] = fill
    dirty = tensor(dirty)
    clean = layer([m, kb, c], kb_mask=MASK)
    out = layer([m, dirty, c], kb_mask=MASK)

    def loss(dirty):
        retrieved, attention = layer([m, dirty, c], kb_mask=MASK)
        return keras.ops.sum(retrieved) + keras.ops.sum(attention * keras.ops.arange(N, dtype="float32"))

    g_dirty, *weight_grads = grads(loss, [dirty], layer.trainable_weights)
    for a, b in zip(clean, out):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.sum(keras.ops.convert_to_numpy(out[1]), -1), 1.0, atol=1e-6)
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(g))) for g in weight_grads + [g_dirty])
    assert np.all(np.asarray(g_dirty)[~MASK] == 0)


def test_all_masked_and_mixed_precision_attention():
    layer = ReadUnit(dtype="mixed_float16")
    x = _inputs(4)
    retrieved, attention = layer(x, kb_mask=np.zeros((B, N), bool))
    assert keras.backend.standardize_dtype(retrieved.dtype) == "float16"
    np.testing.assert_array_equal(retrieved, 0.0)
    _, attention = layer(x, kb_mask=MASK)
    np.testing.assert_allclose(np.sum(np.asarray(attention, "float32"), -1), 1.0, atol=2e-3)


def test_any_number_of_cells():
    layer = ReadUnit()
    kb_in = keras.Input((None, DKB))
    m_in, c_in = keras.Input((D,)), keras.Input((D,))
    model = keras.Model([m_in, kb_in, c_in], layer([m_in, kb_in, c_in]))
    m, _, c = _inputs()
    for cells in (1, 9):
        out = model([m, np.ones((B, cells, DKB), "float32"), c])
        assert out[1].shape == (B, cells)


def test_layer_contract(tmp_path):
    run_layer_contract(ReadUnit, {"activation": "elu"}, _inputs(), tmp_path=tmp_path)


def test_dropout_only_in_training():
    layer = _layer(dropout=0.5, seed=3)
    x = _inputs(5)
    a = layer(x, training=False)[1]
    b = layer(x, training=True)[1]
    np.testing.assert_allclose(a, layer(x)[1])
    assert not np.allclose(a, b)
    np.testing.assert_allclose(np.sum(keras.ops.convert_to_numpy(b), -1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"activation": "relu"}, "Received: activation='relu'"),
        ({"dropout": 1.0}, "Received: dropout=1.0"),
        ({"seed": "x"}, "Received: seed='x'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReadUnit(**kwargs)


def test_bad_inputs():
    m, kb, c = _inputs()
    with pytest.raises(ValueError, match=r"knowledge_base of shape \[batch, cells, d_kb\]"):
        ReadUnit()([m, kb.reshape(B, -1), c])
    with pytest.raises(ValueError, match="same shape"):
        ReadUnit()([m, kb, c[:, :2]])
    with pytest.raises(ValueError, match="kb_mask"):
        ReadUnit()([m, kb, c], kb_mask=np.ones((B, N, 1), bool))


def test_batch_size_mismatch_is_a_clear_error():
    # Audit 6: the knowledge base with another batch size than the question side
    # raised a raw TensorFlow error.
    m, kb, c = _inputs()
    with pytest.raises(ValueError, match=r"same batch size.*knowledge_base shape=\(3, 6, 3\)"):
        ReadUnit()([m, np.concatenate([kb, kb[:1]]), c])
    with pytest.raises(ValueError, match=r"same batch size.*control shape=\(1, 4\)"):
        ReadUnit()([m, kb, c[:1]])


def test_real_logits_below_the_old_mask_fill_keep_the_attention():
    # review: masked logits were -1e9, so with every real logit at -5e9 the masked cells
    # took all the weight (then zeroed): attention 0 and m_new 0 for a real sample.
    layer = _layer()
    layer.attention_kernel.assign(np.zeros((D, 1), "float32"))
    layer.attention_bias.assign(np.full((1,), -5e9, "float32"))
    m, kb, c = _inputs(6)
    retrieved, attention = layer([m, kb, c], kb_mask=MASK)
    np.testing.assert_allclose(attention, MASK / MASK.sum(-1, keepdims=True), atol=1e-6)
    want = np.stack([kb[b, MASK[b]].mean(0) for b in range(B)])
    np.testing.assert_allclose(retrieved, want, atol=1e-6)


@pytest.mark.parametrize("scale", [300.0, 3000.0])
def test_memory_knowledge_interaction_stays_finite_under_mixed_float16(scale):
    # audit 4: I = (m W_m) * (kb W_k) and I' = [I, kb] W_c ran in float16 under
    # mixed_float16; the product squares the magnitudes and overflowed to inf (then NaN
    # attention and retrieval) for inputs of a few hundred, where float32 is fine.
    # They only feed the attention logits, which run in float32 (DESIGN.md).
    rng = np.random.default_rng(0)
    m, c = (rng.standard_normal((B, 16)) * scale).astype("float32"), rng.standard_normal((B, 16)).astype("float32")
    kb = (rng.standard_normal((B, N, 16)) * scale).astype("float32")
    init = keras.initializers.GlorotUniform(seed=1)
    expected = ReadUnit(kernel_initializer=init)([m, kb, c])
    layer = ReadUnit(dtype="mixed_float16", kernel_initializer=init)
    retrieved, attention = layer([m, kb, c])
    assert keras.backend.standardize_dtype(retrieved.dtype) == "float16"
    np.testing.assert_allclose(np.asarray(attention, "float32"), expected[1], atol=2e-2)
    np.testing.assert_allclose(np.asarray(retrieved, "float32"), expected[0], rtol=2e-2, atol=scale * 2e-2)

    def loss():
        retrieved, attention = layer([m, kb, c])
        return keras.ops.sum(keras.ops.cast(retrieved, "float32")) + keras.ops.sum(
            keras.ops.cast(attention, "float32") * keras.ops.arange(N, dtype="float32")
        )

    weight_grads = grads(loss, variables=layer.trainable_weights)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in weight_grads)


def test_project_knowledge_base_checks_the_layer_and_its_inputs():
    # Audit: on an unbuilt layer the public method raised "AttributeError: 'ReadUnit'
    # object has no attribute 'kb_kernel'"; a knowledge base of another d_kb failed in
    # the matmul with the backend's "Matrix size-incompatible".
    m, kb, c = _inputs()
    with pytest.raises(ValueError, match="needs a built layer"):
        ReadUnit().project_knowledge_base(kb)
    layer = _layer()
    with pytest.raises(ValueError, match=r"last axis of 3\. Received: knowledge_base shape=\(2, 6, 5\)"):
        layer.project_knowledge_base(np.ones((B, N, 5), "float32"))
    with pytest.raises(ValueError, match="knowledge_base of shape"):
        layer.project_knowledge_base(np.ones((N, DKB), "float32"))
    with pytest.raises(ValueError, match="kb_mask"):
        layer.project_knowledge_base(kb, MASK[:, :3])
    # what it gives is still what a call computes for itself
    given = layer([m, kb, c], kb_mask=MASK, projected_kb=layer.project_knowledge_base(kb, MASK))
    for a, b in zip(given, layer([m, kb, c], kb_mask=MASK)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
