"""DynamicRouting: reference conformance, padding, the layer contract, errors, learning."""

import numpy as np
import keras
import pytest

from keras_capsules.layers import DynamicRouting
from tests.backends import precise
from tests.harness import run_layer_contract
from tests.layers import routing_common as rc


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_reference(dtype):
    rc.check_reference(DynamicRouting, rc.load_reference("dynamic_routing_shared"), dtype)


@pytest.mark.parametrize("shared_weights", [True, False])
@pytest.mark.parametrize("n_iters", [1, 2, 4])
def test_matches_numpy_with_padding(shared_weights, n_iters):
    u, valid = rc.padded_inputs(np.random.default_rng(1))
    dtype, tol = precise()
    layer = DynamicRouting(
        n_out=3, d_out=4, n_iters=n_iters, shared_weights=shared_weights,
        return_couplings=True, dtype=dtype,
    )
    out, c = layer(u.astype(dtype), mask=valid)
    want_out, want_c = rc.np_dynamic(u, np.asarray(layer.kernel), n_iters, valid)
    np.testing.assert_allclose(np.asarray(out), want_out, **tol)
    np.testing.assert_allclose(np.asarray(c), want_c, **tol)


@pytest.mark.parametrize("shared_weights", [True, False])
def test_padding_never_changes_results(shared_weights):
    layer = DynamicRouting(n_out=3, d_out=4, shared_weights=shared_weights, return_couplings=True)
    rc.check_padding_invariance(layer)


def test_mask_in_a_functional_model():
    rc.check_mask_in_functional_model(DynamicRouting)


def test_outputs_are_squashed_and_couplings_optional():
    u = np.random.default_rng(2).normal(size=(2, 5, 3)).astype("float32")
    layer = DynamicRouting(n_out=4, d_out=6)
    out = layer(u)
    assert out.shape == (2, 4, 6)
    assert np.all(np.linalg.norm(np.asarray(out), axis=-1) < 1.0)
    assert {w.name: tuple(w.shape) for w in layer.weights} == {"kernel": (4, 3, 6)}


@pytest.mark.parametrize("kwargs,message", rc.CONSTRUCTOR_ERRORS)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"Received: .*{message}"):
        DynamicRouting(**kwargs)


def test_bad_input_shapes():
    rc.check_bad_inputs(DynamicRouting)


@pytest.mark.parametrize(
    "init_kwargs",
    [
        dict(n_out=3, d_out=4),
        dict(n_out=2, d_out=3, n_iters=2, shared_weights=False, return_couplings=True,
             kernel_regularizer="l2"),
    ],
)
def test_layer_contract(init_kwargs, tmp_path):
    u = np.random.default_rng(7).normal(size=(4, 5, 6)).astype("float32")
    u[3] = 0.0  # zero capsules take part in every check (squash and norms at 0)
    run_layer_contract(DynamicRouting, init_kwargs, u, tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


def test_learns_a_small_task():
    keras.utils.set_random_seed(0)
    rc.check_learns(DynamicRouting)


@pytest.mark.parametrize("shared_weights", [True, False])
def test_jit_with_mask(shared_weights):
    rc.check_jit_with_mask(
        DynamicRouting(n_out=3, d_out=4, shared_weights=shared_weights, return_couplings=True)
    )


def test_huge_inputs_give_finite_outputs_and_gradients():
    """squash(s) of |s| above ~1.8e19 was NaN in float32 (|s|^2 overflowed)."""
    u = np.random.default_rng(5).normal(size=(2, 5, 4)).astype("float32") * 1e20
    out, c, grads = rc.outputs_and_gradients(DynamicRouting(n_out=3, d_out=4, return_couplings=True), u)
    assert np.all(np.isfinite(np.asarray(out))) and np.all(np.isfinite(np.asarray(c)))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
    assert np.all(np.linalg.norm(np.asarray(out), axis=-1) <= 1.0 + 1e-6)
    np.testing.assert_allclose(np.asarray(c).sum(-1), 1.0, rtol=1e-6)


def test_shapes_given_as_tensorshape_or_numpy_integers():
    rc.check_shapes_given_as_tensorshape_or_numpy_integers(DynamicRouting)


def test_mask_given_as_nested_python_lists():
    rc.check_mask_given_as_nested_python_lists(DynamicRouting)


def test_mask_with_another_batch_size_is_a_clear_error():
    rc.check_mask_with_another_batch_size_is_a_clear_error(DynamicRouting)


def test_single_output_capsule_gives_no_softmax_warning():
    rc.check_single_output_capsule_gives_no_softmax_warning(DynamicRouting)


def test_ragged_inputs_route_as_padded_and_masked():
    rc.check_ragged_inputs_route_as_padded_and_masked(DynamicRouting)


@pytest.mark.parametrize("mask_shape", [(2, 1), (1, 5), (1, 1)])
def test_a_mask_of_another_shape_fails_when_shapes_are_known_only_at_run_time(mask_shape):
    rc.check_mask_of_another_shape_fails_when_shapes_are_known_only_at_run_time(DynamicRouting, mask_shape)


def test_a_mask_of_another_shape_is_refused_when_the_model_is_built():
    rc.check_mask_of_another_shape_is_refused_when_the_model_is_built(DynamicRouting)


def test_mixed_float16_routes_in_float32():
    rc.check_mixed_float16_routes_in_float32(DynamicRouting)


def test_an_empty_batch_of_empty_sequences_keeps_batch_zero():
    rc.check_empty_batch_of_empty_sequences(DynamicRouting)
