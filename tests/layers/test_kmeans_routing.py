"""KMeansRouting: reference conformance, padding, the layer contract, errors, learning."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import KMeansRouting
from tests.backends import grads, precise
from tests.harness import run_layer_contract
from tests.layers import routing_common as rc


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_reference_dot(dtype):
    ref = rc.load_reference("kmeans_routing_shared_dot")
    assert str(ref["similarity"]) == "dot"
    rc.check_reference(KMeansRouting, ref, dtype, similarity="dot")


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("shared_weights", [True, False])
@pytest.mark.parametrize("n_iters", [1, 3])
def test_matches_numpy_with_padding(similarity, shared_weights, n_iters):
    u, valid = rc.padded_inputs(np.random.default_rng(1))
    dtype, tol = precise()
    layer = KMeansRouting(
        n_out=3, d_out=4, n_iters=n_iters, similarity=similarity,
        shared_weights=shared_weights, return_couplings=True, dtype=dtype,
    )
    out, c = layer(u.astype(dtype), mask=valid)
    # The initial centre's scale is irrelevant: starting from the mean over the real
    # inputs (numpy here) and from their sum / n_out (the layer) routes identically.
    for init in ("mean", "sum_over_n_out"):
        want_out, want_c = rc.np_kmeans(u, np.asarray(layer.kernel), n_iters, similarity, valid, init)
        np.testing.assert_allclose(np.asarray(out), want_out, **tol)
        np.testing.assert_allclose(np.asarray(c), want_c, **tol)


def test_cosine_differs_from_dot():
    u = np.random.default_rng(3).normal(size=(2, 6, 4)).astype("float32")
    cos = KMeansRouting(n_out=3, d_out=5, return_couplings=True)
    dot = KMeansRouting(n_out=3, d_out=5, similarity="dot", return_couplings=True)
    cos(u)
    dot(u)
    dot.set_weights(cos.get_weights())
    c_cos, c_dot = np.asarray(cos(u)[1]), np.asarray(dot(u)[1])
    assert not np.allclose(c_cos, c_dot, atol=1e-3)


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("shared_weights", [True, False])
def test_padding_never_changes_results(similarity, shared_weights):
    layer = KMeansRouting(
        n_out=3, d_out=4, similarity=similarity, shared_weights=shared_weights,
        return_couplings=True,
    )
    rc.check_padding_invariance(layer)


def test_mask_in_a_functional_model():
    rc.check_mask_in_functional_model(KMeansRouting)


def test_zero_votes_give_zero_scores_not_nan():
    layer = KMeansRouting(n_out=2, d_out=3, return_couplings=True)
    u = keras.ops.zeros((2, 4, 5))
    out, c = layer(u)
    np.testing.assert_array_equal(np.asarray(out), 0.0)
    np.testing.assert_allclose(np.asarray(c), 0.5)
    for g in grads(lambda x: keras.ops.sum(layer(x)[0]), [u], [layer.kernel]):
        assert np.all(np.isfinite(np.asarray(g)))


@pytest.mark.parametrize(
    "kwargs,message",
    rc.CONSTRUCTOR_ERRORS + [(dict(n_out=3, d_out=2, similarity="euclid"), "similarity")],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"Received: .*{message}"):
        KMeansRouting(**kwargs)


def test_bad_input_shapes():
    rc.check_bad_inputs(KMeansRouting)


@pytest.mark.parametrize(
    "init_kwargs",
    [
        dict(n_out=3, d_out=4),
        dict(n_out=2, d_out=3, n_iters=2, similarity="dot", shared_weights=False, return_couplings=True,
             kernel_regularizer="l2"),
    ],
)
def test_layer_contract(init_kwargs, tmp_path):
    u = np.random.default_rng(7).normal(size=(4, 5, 6)).astype("float32")
    u[3] = 0.0  # zero capsules take part in every check (norms at 0)
    run_layer_contract(KMeansRouting, init_kwargs, u, tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


def test_learns_a_small_task():
    keras.utils.set_random_seed(0)
    rc.check_learns(KMeansRouting)  # the paper's cosine similarity


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_jit_with_mask(similarity):
    rc.check_jit_with_mask(
        KMeansRouting(n_out=3, d_out=4, similarity=similarity, return_couplings=True)
    )


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_huge_inputs_give_finite_outputs_and_gradients(similarity):
    """<u_hat, v> overflowed float32 for inputs near 1e19-1e20 (inf / inf = NaN outputs)."""
    u = np.random.default_rng(5).normal(size=(2, 5, 4)).astype("float32")
    layer = KMeansRouting(n_out=3, d_out=4, similarity=similarity, return_couplings=True)
    out_1, c_1 = layer(u)
    out, c, grads = rc.outputs_and_gradients(layer, u * 1e20)
    assert np.all(np.isfinite(np.asarray(out))) and np.all(np.isfinite(np.asarray(c)))
    if similarity == "cosine":
        # (The dot similarity is not scale-free: its scores, and so the couplings'
        # sensitivity, grow with the inputs, and at 1e20 true gradients pass float32's range.)
        assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
    lengths = np.linalg.norm(np.asarray(out), axis=-1)
    assert np.all(lengths <= 1.0 + 1e-6)
    if similarity == "cosine":
        # Cosine routing does not depend on the inputs' scale: the same couplings, and
        # outputs of length 1 pointing the way of the unscaled ones.
        np.testing.assert_allclose(np.asarray(c), np.asarray(c_1), rtol=1e-4, atol=1e-6)
        unscaled = np.asarray(out_1)
        directions = unscaled / np.linalg.norm(unscaled, axis=-1, keepdims=True)
        np.testing.assert_allclose(np.asarray(out), directions, rtol=1e-4, atol=1e-5)


def test_shapes_given_as_tensorshape_or_numpy_integers():
    rc.check_shapes_given_as_tensorshape_or_numpy_integers(KMeansRouting)


def test_mask_given_as_nested_python_lists():
    rc.check_mask_given_as_nested_python_lists(KMeansRouting)


def test_mask_with_another_batch_size_is_a_clear_error():
    rc.check_mask_with_another_batch_size_is_a_clear_error(KMeansRouting)


def test_single_output_capsule_gives_no_softmax_warning():
    rc.check_single_output_capsule_gives_no_softmax_warning(KMeansRouting)


def test_ragged_inputs_route_as_padded_and_masked():
    rc.check_ragged_inputs_route_as_padded_and_masked(KMeansRouting)


@pytest.mark.parametrize("mask_shape", [(2, 1), (1, 5), (1, 1)])
def test_a_mask_of_another_shape_fails_when_shapes_are_known_only_at_run_time(mask_shape):
    rc.check_mask_of_another_shape_fails_when_shapes_are_known_only_at_run_time(KMeansRouting, mask_shape)


def test_a_mask_of_another_shape_is_refused_when_the_model_is_built():
    rc.check_mask_of_another_shape_is_refused_when_the_model_is_built(KMeansRouting)


def test_mixed_float16_routes_in_float32():
    rc.check_mixed_float16_routes_in_float32(KMeansRouting)


def test_an_empty_batch_of_empty_sequences_keeps_batch_zero():
    rc.check_empty_batch_of_empty_sequences(KMeansRouting)
