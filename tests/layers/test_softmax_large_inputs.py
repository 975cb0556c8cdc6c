"""The library's written-out softmax (``keras_capsules.ops.shifted_softmax``: routing
couplings, RTagger's masks, ``masked_softmax`` with or without a mask) at logits of 1e6
to 1e12.

Two defects showed there, as in the routing couplings (see
``test_routing_large_inputs.py``), while ``masked_softmax`` called ``ops.softmax``
(without a mask, and with one before the saturated-row test of ``tests/test_ops.py``):

* Under XLA on CPUs with FMA (``jax.jit``, ``tf.function(jit_compile=True)``) the
  weights of a softmax of an elementwise product ``u * v`` were NaN where eager gave
  finite ones: XLA recomputed the product inside the softmax's maximum and again inside
  its exponential with other roundings, so the largest logit minus the maximum was up
  to half an ulp of the logits (32768 at 1e12), and ``exp`` of it overflowed or every
  term underflowed. RTagger's initial masks (``initial_mask_stddev`` times the initial
  logits) were NaN so under TensorFlow's XLA at 1e12.
* TensorFlow's fused softmax kernel's gradient was 1e2-1e8 off the float64 one for
  saturated rows (logits of 1e6 and more).

Also: a row whose (kept) logits are all -inf gave NaN weights in ``masked_softmax``;
it now gives zeros, as a fully masked row does.

The checks run on the test process's backend (TensorFlow by default); ``test_on_jax``
runs them on JAX in a subprocess (``python -m tests.layers.test_softmax_large_inputs``).
"""

import sys

import keras_capsules  # noqa: F401  (before keras: see keras_capsules/__init__.py)
import keras
import numpy as np
import pytest

from keras_capsules import layers
from keras_capsules.ops import masked_softmax, shifted_softmax
from tests.backends import (
    BACKEND, checks_on_jax, compiled, float64_enabled, has_float64, run_checks, tensor, value_and_grads,
)

SCALES = (1e6, 1e9, 1e12)


def _product_softmax(dtype, scale, masked, seed=0):
    """``(fn(u, v), u, v, mask)``: ``masked_softmax(u * v)`` (``shifted_softmax(u * v,
    mask=mask)`` with ``masked``) of ``u`` ``[16, 6, 4]``
    of magnitude ``scale`` and ``v`` in [-1, 1] (the agreement of one-dimensional
    capsules); the mask keeps about four entries in five."""
    rng = np.random.default_rng(seed)
    u = (rng.standard_normal((16, 6, 4)) * scale).astype(dtype)
    v = rng.uniform(-1, 1, (6, 4)).astype(dtype)
    mask = rng.random((16, 6, 4)) < 0.8 if masked else None
    if masked:
        return (lambda u, v: shifted_softmax(u * v, mask=mask)), u, v, mask
    return (lambda u, v: masked_softmax(u * v)), u, v, mask


def check_compiled_matches_eager(scale, masked):
    fn, u, v, mask = _product_softmax("float32", scale, masked)
    eager = np.asarray(fn(u, v))
    jitted = np.asarray(compiled(fn)(u, v))
    what = f"{'shifted' if masked else 'masked'}_softmax(u * v{', mask' if masked else ''}) at {scale:g}"
    assert np.all(np.isfinite(eager)), f"{what}: eager weights not finite"
    assert np.all(np.isfinite(jitted)), f"{what}: compiled weights not finite ({BACKEND})"
    np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-6, err_msg=what)
    rows = np.ones(eager.shape[:-1], bool) if mask is None else mask.any(-1)
    np.testing.assert_allclose(eager.sum(-1)[rows], 1.0, rtol=1e-6, err_msg=what)


def _gradients(fn, u, v, weights):
    _, got, _ = value_and_grads(lambda u, v: keras.ops.sum(fn(u, v) * weights), (u, v))
    return [np.asarray(g, np.float64) for g in got]


def check_gradients_match_float64(scale, masked):
    fn, u, v, _ = _product_softmax("float32", scale, masked)
    weights = np.random.default_rng(1).standard_normal(u.shape)
    got = _gradients(fn, u, v, weights.astype("float32"))
    with float64_enabled():
        if not has_float64():
            pytest.skip(f"no float64 on {BACKEND}")
        fn64, u64, v64, _ = _product_softmax("float64", scale, masked)
        want = _gradients(fn64, u64, v64, weights)
    for name, g, w in zip(("u", "v"), got, want):
        assert np.all(np.isfinite(g)), f"gradient for {name} not finite"
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(w).max()),
                                   err_msg=f"d/d{name} at {scale:g} vs float64 ({BACKEND})")


def check_rows_of_minus_inf():
    """Rows whose kept logits are all -inf give zero weights and zero gradients, with
    and without a mask, eagerly and compiled (they were NaN without a mask)."""
    inf = np.float32(np.inf)
    logits = np.array([[-inf, -inf, -inf], [1.0, -inf, 2.0], [-inf, -inf, 5.0]], "float32")
    mask = np.array([[True, True, True], [True, True, True], [True, True, False]])
    e = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum()
    want = np.array([[0.0, 0.0, 0.0], [e[0], 0.0, e[1]], [0.0, 0.0, 0.0]])
    weights = tensor([[1.0, 2.0, 3.0]], "float32")
    functions = (masked_softmax, lambda x, m: shifted_softmax(x, mask=m))
    for fn, m in [(f, m) for f in functions for m in (None, mask)]:
        for run in (fn, compiled(fn)):
            got = np.asarray(run(tensor(logits), None if m is None else tensor(m)))
            np.testing.assert_allclose(got[:2], want[:2], rtol=1e-6, atol=0)
            if m is not None:
                np.testing.assert_array_equal(got[2], 0.0)
        _, [g], _ = value_and_grads(
            lambda x: keras.ops.sum(fn(x, None if m is None else tensor(m)) * weights),
            (tensor(logits),))
        g = np.asarray(g)
        assert np.all(np.isfinite(g)), f"gradient not finite ({BACKEND}): {g}"
        np.testing.assert_array_equal(g[0], 0.0)


def check_rtagger_initial_masks_compiled(stddev=1e12):
    """RTagger's initial masks: the softmax over groups of the initial logits times
    ``initial_mask_stddev`` (a product), compiled as eager."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(2, 4, 4, 1)).astype("float32")
    layer = layers.RTagger(3, [layers.level_spec("convlstm", 2), layers.level_spec("gated", 3)], n_iters=2,
                           random_initial_masks=False, initial_mask_stddev=stddev)
    layer.build(x.shape)
    layer.set_weights([rng.uniform(-1, 1, w.shape) for w in layer.get_weights()])
    eager = [np.asarray(t) for t in layer(x)]
    jitted = [np.asarray(t) for t in compiled(lambda x: layer(x))(x)]
    for what, e, j in zip(("masks", "means"), eager, jitted):
        assert np.all(np.isfinite(e)), f"eager {what} not finite"
        assert np.all(np.isfinite(j)), f"compiled {what} not finite ({BACKEND})"
        np.testing.assert_allclose(j, e, rtol=1e-3, atol=1e-4, err_msg=what)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", SCALES)
def test_compiled_matches_eager(scale, masked):
    check_compiled_matches_eager(scale, masked)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", SCALES)
def test_gradients_match_float64(scale, masked):
    check_gradients_match_float64(scale, masked)


def test_rows_of_minus_inf():
    check_rows_of_minus_inf()


def test_rtagger_initial_masks_compiled():
    check_rtagger_initial_masks_compiled()


def test_on_jax():
    """The checks above on JAX (``jax.jit`` for the compiled ones), in a subprocess."""
    checks_on_jax("tests.layers.test_softmax_large_inputs")


def main():
    """Every check on this process's backend; prints the failures, returns 1 if any."""
    checks = [(f"compiled_matches_eager[{s:g}-{m}]", check_compiled_matches_eager, (s, m))
              for s in SCALES for m in (False, True)]
    checks += [(f"gradients_match_float64[{s:g}-{m}]", check_gradients_match_float64, (s, m))
               for s in SCALES for m in (False, True)]
    checks += [("rows_of_minus_inf", check_rows_of_minus_inf, ()),
               ("rtagger_initial_masks_compiled", check_rtagger_initial_masks_compiled, ())]
    return run_checks(checks)

if __name__ == "__main__":
    sys.exit(main())
