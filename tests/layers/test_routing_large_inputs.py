"""DynamicRouting and KMeansRouting with input capsules of magnitude 1e9 to 1e12.

The routing logits then reach 1e9-1e12 in float32, where one rounding of a logit is
64 to 65536. Two defects showed only there:

* Under XLA on CPUs with FMA (``jax.jit``), the couplings of one-dimensional output
  capsules were NaN where eager gave finite results: XLA recomputed the logits
  ``u_hat * v`` inside the softmax's maximum and again inside its exponential, fusing
  the product into the subtraction of the maximum there (one FMA, one rounding), so
  the largest logit minus the maximum was up to half an ulp of the logits instead of
  0, and ``exp`` of it overflowed or every term underflowed.
* Gradients were wrong (finite, but TensorFlow, JAX and float64 disagreed): the
  gradient of ``squash`` divided by ``(1 + |s|^2)^2``, out of float32 range for
  ``|s|`` beyond ~1e9 (wrong on JAX from ~1e10, on TensorFlow near 1e14), and the
  gradient of TensorFlow's fused softmax (``ops.softmax``) was 1e5-1e6 where float64
  gives 1e-16 to 4, for saturated couplings.

Here the compiled layer must match the eager one (finite) and float32 gradients must
match the float64 layer's, on the test process's backend (TensorFlow by default:
eager and XLA); ``test_on_jax`` runs the same checks on JAX in a subprocess
(``python -m tests.layers.test_routing_large_inputs``), as
``tests/test_backend_portability.py`` does.
"""

import sys

import keras_capsules  # noqa: F401  (before keras: see keras_capsules/__init__.py)
import keras
import numpy as np
import pytest

from keras_capsules import layers
from keras_capsules.ops import squash
from tests.backends import (
    BACKEND, checks_on_jax, compiled, float64_enabled, has_float64, run_checks, value_and_grads,
)


#: (layer, constructor arguments): mostly one-dimensional output capsules, whose
#: agreement ``u_hat * v`` is one elementwise product that XLA recomputes inside the
#: softmax; the d_out=4 ones (a reduction, computed once) are controls
ROUTINGS = {
    "dynamic": ("DynamicRouting", dict(n_out=4, d_out=1)),
    "kmeans_dot": ("KMeansRouting", dict(n_out=4, d_out=1, similarity="dot")),
    "kmeans_cosine": ("KMeansRouting", dict(n_out=4, d_out=1, similarity="cosine")),
    "dynamic_d4": ("DynamicRouting", dict(n_out=3, d_out=4)),
    "kmeans_dot_d4": ("KMeansRouting", dict(n_out=3, d_out=4, similarity="dot")),
}
#: configurations whose gradients differed between TensorFlow, JAX and float64
GRADIENT_ROUTINGS = {
    "dynamic": ("DynamicRouting", dict(n_out=4, d_out=1, n_iters=4)),
    "dynamic_one_output": ("DynamicRouting", dict(n_out=1, d_out=2, n_iters=1)),
    "kmeans_dot": ("KMeansRouting", dict(n_out=2, d_out=4, n_iters=1, similarity="dot")),
    "kmeans_cosine": ("KMeansRouting", dict(n_out=3, d_out=2, similarity="cosine")),
}
SCALES = (1e9, 1e12)


def make(key, scale, table=ROUTINGS, dtype="float32", batch=16, seed=0):
    """A built layer of ``table[key]`` with random weights in [-1, 1], inputs ``[batch, 6,
    3]`` of magnitude ``scale`` and a mask that pads about one input in five."""
    name, kwargs = table[key]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 6, 3)) * scale
    mask = rng.random((batch, 6)) < 0.8
    layer = getattr(layers, name)(**{"n_iters": 3, **kwargs}, return_couplings=True, dtype=dtype)
    layer.build(x.shape)
    layer.set_weights([rng.uniform(-1, 1, w.shape) for w in layer.get_weights()])
    return layer, x.astype(dtype), mask


def check_compiled_matches_eager(key, scale):
    layer, x, mask = make(key, scale)
    eager = [np.asarray(t) for t in layer(x, mask=mask)]
    jitted = [np.asarray(t) for t in compiled(lambda x, m: layer(x, mask=m))(x, mask)]
    for what, e, j in zip(("outputs", "couplings"), eager, jitted):
        assert np.all(np.isfinite(e)), f"{key} at {scale:g}: eager {what} not finite"
        assert np.all(np.isfinite(j)), f"{key} at {scale:g}: compiled {what} not finite ({BACKEND})"
        np.testing.assert_allclose(j, e, rtol=1e-4, atol=1e-5, err_msg=f"{key} at {scale:g}: {what}")
    c = eager[1]
    np.testing.assert_allclose(c.sum(-1)[mask], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(c[~mask], 0.0)


def _kernel_gradient(layer, x, mask, weights):
    def loss():
        out, c = layer(x, mask=mask)
        return keras.ops.sum(out * weights[0]) + keras.ops.sum(c * weights[1])

    _, _, [g] = value_and_grads(loss, (), [layer.kernel])
    return np.asarray(g, np.float64)


def check_gradients_match_float64(key, scale):
    layer, x, mask = make(key, scale, GRADIENT_ROUTINGS)
    rng = np.random.default_rng(1)
    out, c = layer(x, mask=mask)
    weights = [rng.standard_normal(out.shape), rng.standard_normal(c.shape)]
    got = _kernel_gradient(layer, x, mask, [w.astype("float32") for w in weights])
    assert np.all(np.isfinite(got)), f"{key} at {scale:g}: gradient not finite"
    with float64_enabled():
        if not has_float64():
            pytest.skip(f"no float64 on {BACKEND}")
        layer64, _, _ = make(key, scale, GRADIENT_ROUTINGS, dtype="float64")
        layer64.set_weights([np.asarray(w, np.float64) for w in layer.get_weights()])
        want = _kernel_gradient(layer64, x.astype("float64"), mask, weights)
    # as large as float32 rounding of the 1e12 votes allows (the gradient is O(1))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(want).max()),
                               err_msg=f"{key} at {scale:g}: float32 gradient vs float64 ({BACKEND})")


def check_squash_gradient(scale):
    """The gradient of ``sum(w * squash(v))`` against its float64 formula, for norms
    from 1e4 to 1e16 (above 2**50 squash is the unit vector)."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal((8, 3)) * scale
    w = rng.standard_normal((8, 3))
    _, [got], _ = value_and_grads(lambda t: keras.ops.sum(squash(t) * w.astype("float32")),
                                  (v.astype("float32"),))
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    u = v / n
    wu = (w * u).sum(-1, keepdims=True)
    # squash(v) = k(|v|) u, k = |v|^2 / (1 + |v|^2), dk/d|v| = 2 |v| / (1 + |v|^2)^2
    want = 2 * n / (1 + n**2) ** 2 * wu * u + n / (1 + n**2) * (w - wu * u)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5,
                               atol=1e-6 * np.abs(want).max(), err_msg=f"|v| ~ {scale:g} ({BACKEND})")


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("key", sorted(ROUTINGS))
def test_compiled_matches_eager(key, scale):
    check_compiled_matches_eager(key, scale)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("key", sorted(GRADIENT_ROUTINGS))
def test_gradients_match_float64(key, scale):
    check_gradients_match_float64(key, scale)


@pytest.mark.parametrize("scale", [1e4, 1e8, 1e10, 1e12, 1e14, 1e16])
def test_squash_gradient_at_large_norms(scale):
    check_squash_gradient(scale)


def test_on_jax():
    """The checks above on JAX (``jax.jit`` for the compiled ones), in a subprocess."""
    checks_on_jax("tests.layers.test_routing_large_inputs")


def main():
    """Every check on this process's backend; prints the failures, returns 1 if any."""
    checks = [(f"compiled_matches_eager[{k}-{s:g}]", check_compiled_matches_eager, (k, s))
              for k in sorted(ROUTINGS) for s in SCALES]
    checks += [(f"gradients_match_float64[{k}-{s:g}]", check_gradients_match_float64, (k, s))
               for k in sorted(GRADIENT_ROUTINGS) for s in SCALES]
    checks += [(f"squash_gradient[{s:g}]", check_squash_gradient, (s,))
               for s in (1e4, 1e8, 1e10, 1e12, 1e14, 1e16)]
    return run_checks(checks)

if __name__ == "__main__":
    sys.exit(main())
