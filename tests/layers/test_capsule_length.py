"""CapsuleLength: values, safe gradient at zero, masks, the layer contract, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import CapsuleLength
from tests.backends import BACKEND, grads, tensor
from tests.harness import run_layer_contract, two_cpu_strategy


def test_lengths_and_gradient_at_zero():
    x = np.random.default_rng(0).normal(size=(3, 4, 5)).astype("float32")
    x[1, 2] = 0.0
    x = tensor(x)
    lengths = CapsuleLength()(x)
    [grad] = grads(lambda t: keras.ops.sum(CapsuleLength()(t)), [x])
    grad = np.asarray(grad)
    np.testing.assert_allclose(np.asarray(lengths), np.linalg.norm(np.asarray(x), axis=-1), rtol=1e-6)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[1, 2], 0.0)
    expected = np.asarray(x) / np.maximum(np.linalg.norm(np.asarray(x), axis=-1, keepdims=True), 1e-30)
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


def test_mask_passes_through_and_shapes():
    layer = CapsuleLength()
    assert layer.compute_output_shape((None, 10, 16)) == (None, 10)
    mask = tensor([[True, False]])
    assert layer.compute_mask(keras.ops.zeros((1, 2, 3)), mask) is mask
    with pytest.raises(ValueError, match=r"\[batch, \.\.\., d\]"):
        layer(keras.ops.zeros((4,)))
    with pytest.raises(ValueError, match="known capsule dimension"):
        CapsuleLength()(keras.Input((3, None)))


def test_layer_contract(tmp_path):
    # CapsuleLength has no weights: the harness's weight-gradient and distributed
    # checks need trainable weights, so they are done below with a Dense in front.
    x = np.random.default_rng(7).normal(size=(4, 3, 5)).astype("float32")
    x[2, 1] = 0.0
    run_layer_contract(
        CapsuleLength, {}, x, tmp_path=tmp_path, checks=("config", "saving", "jit", "mixed_precision")
    )


def test_trains_under_mirrored_strategy_with_finite_gradients():
    x = np.random.default_rng(1).normal(size=(4, 6)).astype("float32")
    x[3] = 0.0  # zero capsules: gradient through the norm at 0
    y = np.random.default_rng(2).normal(size=(4, 2)).astype("float32")
    with two_cpu_strategy().scope():
        inputs = keras.Input((6,))
        caps = keras.layers.Reshape((2, 3))(keras.layers.Dense(6, use_bias=False)(inputs))
        model = keras.Model(inputs, CapsuleLength()(caps))
        model.compile(keras.optimizers.SGD(0.01), "mse")
    before = [np.asarray(w) for w in model.trainable_weights]
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    after = [np.asarray(w) for w in model.trainable_weights]
    assert np.isfinite(history.history["loss"][0])
    assert all(np.all(np.isfinite(w)) for w in after)
    assert any(not np.array_equal(a, b) for a, b in zip(after, before))


def test_a_list_of_inputs_is_a_clear_error():
    # A list of inputs gave a bogus symbolic output, then an AttributeError at run time.
    with pytest.raises(ValueError, match=r"\[batch, \.\.\., d\]"):
        CapsuleLength()([keras.Input((3, 4)), keras.Input((3, 4))])
    x = np.ones((2, 3, 4), "float32")
    with pytest.raises(ValueError, match=r"\[batch, \.\.\., d\]"):
        CapsuleLength()([x, x])
    built = CapsuleLength()
    built(x)
    with pytest.raises(ValueError, match=r"\[batch, \.\.\., d\]"):  # an AttributeError before
        built([x, x])
    if BACKEND == "tensorflow":  # a tf.TensorShape, as tf.keras code passes
        import tensorflow as tf

        assert CapsuleLength().compute_output_shape(tf.TensorShape([None, 3, 4])) == (None, 3)


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_a_non_floating_dtype_is_a_clear_error(dtype):
    # audit (2026-11-29): lengths were cast to the compute dtype silently: int32 truncated
    # them (squashed capsules gave all-zero scores), bool gave True for any non-zero one
    with pytest.raises(ValueError, match=f"floating.*Received: dtype={dtype}"):
        CapsuleLength(dtype=dtype)
