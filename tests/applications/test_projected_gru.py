"""ProjectedGRU: Keras' GRU with a written-out TensorFlow loop (the text classifier's GRU)."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from applications.text_classification import model as model_lib
from applications.text_classification.projected_gru import ProjectedGRU, gru_states
from tests.harness import run_layer_contract

UNITS = 6


def _edge_mask(batch=5, steps=7):
    """Every masking case: a hole, right padding, all padding, left padding, none."""
    mask = np.ones((batch, steps), bool)
    mask[0, 2] = False
    mask[1, 4:] = False
    mask[2, :] = False
    mask[3, :3] = False
    return mask


def _pair(rng, features, **kwargs):
    """A Keras GRU and a ProjectedGRU with the same (non-trivial) weights."""
    reference = keras.layers.GRU(UNITS, **kwargs)
    fast = ProjectedGRU(UNITS, **kwargs)
    reference.build((None, None, features))
    fast.build((None, None, features))
    weights = [rng.normal(scale=0.5, size=w.shape).astype("float32") for w in reference.get_weights()]
    reference.set_weights(weights)
    fast.set_weights(weights)
    return reference, fast


def _outputs_and_grads(layer, x, mask, initial_state):
    with tf.GradientTape() as tape:
        tape.watch(x)
        if initial_state is not None:
            tape.watch(initial_state)
        kwargs = {} if initial_state is None else {"initial_state": [initial_state]}
        outputs = keras.tree.flatten(layer(x, mask=mask, **kwargs))
        # A loss that weighs every output element differently.
        loss = sum(tf.reduce_sum(tf.sin(3.0 * o + 0.1 * i)) for i, o in enumerate(outputs))
    sources = [x] + ([] if initial_state is None else [initial_state]) + layer.trainable_weights
    return [o.numpy() for o in outputs], [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, sources)]


@pytest.mark.parametrize(
    "go_backwards,return_sequences,zero_output_for_mask,with_state",
    list(itertools.product([False, True], [False, True], [False, True], [False, True])),
)
def test_matches_keras_gru_outputs_and_gradients(go_backwards, return_sequences, zero_output_for_mask, with_state):
    rng = np.random.default_rng(7)
    reference, fast = _pair(
        rng, 4, go_backwards=go_backwards, return_sequences=return_sequences, return_state=True
    )
    reference.zero_output_for_mask = fast.zero_output_for_mask = zero_output_for_mask
    x = tf.constant(rng.normal(size=(5, 7, 4)).astype("float32"))
    h0 = tf.constant(rng.normal(size=(5, UNITS)).astype("float32")) if with_state else None
    mask = tf.constant(_edge_mask())
    ref_out, ref_grads = _outputs_and_grads(reference, x, mask, h0)
    out, grads = _outputs_and_grads(fast, x, mask, h0)
    assert len(out) == len(ref_out) and len(grads) == len(ref_grads)
    for a, b in zip(out, ref_out):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, ref_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_padding_values_do_not_matter_and_get_no_gradient():
    rng = np.random.default_rng(1)
    _, layer = _pair(rng, 3, return_sequences=True)
    mask = _edge_mask()
    x = rng.normal(size=(5, 7, 3)).astype("float32")
    noisy = np.where(mask[..., None], x, 1e3 * rng.normal(size=x.shape)).astype("float32")
    clean, grads = _outputs_and_grads(layer, tf.constant(x), tf.constant(mask), None)
    noisy_out, _ = _outputs_and_grads(layer, tf.constant(noisy), tf.constant(mask), None)
    np.testing.assert_allclose(clean[0][mask], noisy_out[0][mask], rtol=1e-5, atol=1e-6)
    assert np.all(grads[0][~mask] == 0.0)


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_gru_states_gradient_against_finite_differences():
    rng = np.random.default_rng(3)
    steps, batch, units = 4, 2, 3
    args = [
        rng.normal(size=(steps, batch, 3 * units)),
        rng.normal(size=(batch, units)),
        rng.normal(scale=0.5, size=(units, 3 * units)),
        rng.normal(size=(units,)),
    ]
    args = [tf.constant(a, tf.float64) for a in args]
    mask = tf.constant(np.array([[1, 1], [0, 1], [1, 0], [1, 1]], bool)[..., None])
    theoretical, numerical = tf.test.compute_gradient(
        lambda p, h, k, b: gru_states(p, mask, h, k, b), args
    )
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)


def test_settings_outside_the_written_out_path_use_keras_loop():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(5, 7, 4)).astype("float32"))
    mask = tf.constant(_edge_mask())
    for kwargs in ({"reset_after": False}, {"activation": "relu"}, {"unroll": True}):
        reference, fast = _pair(rng, 4, return_sequences=True, **kwargs)
        assert not fast._written_out(training=False)
        np.testing.assert_allclose(fast(x, mask=mask), reference(x, mask=mask), rtol=1e-5, atol=1e-6)
    reference, fast = _pair(rng, 4, recurrent_dropout=0.5)
    assert not fast._written_out(training=True)
    np.testing.assert_allclose(fast(x, mask=mask), reference(x, mask=mask), rtol=1e-5, atol=1e-6)


def test_input_dropout_in_training_only():
    rng = np.random.default_rng(4)
    reference, fast = _pair(rng, 4, return_sequences=True, dropout=0.5, seed=3)
    x = tf.constant(rng.normal(size=(5, 7, 4)).astype("float32"))
    np.testing.assert_allclose(fast(x, training=False), reference(x, training=False), rtol=1e-5, atol=1e-6)
    trained = fast(x, training=True).numpy()
    assert np.all(np.isfinite(trained))
    assert not np.allclose(trained, fast(x, training=False).numpy(), atol=1e-3)


def test_layer_contract(tmp_path):
    x = np.random.default_rng(5).normal(size=(4, 6, 3)).astype("float32")
    run_layer_contract(ProjectedGRU, {"units": 5, "return_sequences": True}, x, tmp_path=tmp_path)


def test_weights_move_between_keras_and_projected_models():
    keras.utils.set_random_seed(0)
    tiny = dict(embedding_dim=8, gru_units=8, capsule_dim=4, class_capsule_dim=4, n_iters=2)
    fast = model_lib.build_model(50, 3, gru="projected", **tiny)
    reference = model_lib.build_model(50, 3, gru="keras", **tiny)
    assert [type(l.forward_layer).__name__ for l in fast.layers if hasattr(l, "forward_layer")] == ["ProjectedGRU"] * 2
    reference.set_weights(fast.get_weights())
    ids = np.array([[3, 4, 5, 0, 0], [7, 8, 9, 10, 11]], "int32")
    np.testing.assert_allclose(fast(ids), reference(ids), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="gru"):
        model_lib.build_model(50, 3, gru="cudnn", **tiny)
