"""ops: squash, safe_norm and masked_softmax values and gradients at the edge cases; tanh and
mean in float64 on every backend."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import keras

from keras_capsules import ops
from tests.backends import compiled, float64_enabled, grads, has_float64, require_float64, tensor


def _np_squash(v):
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    # |v|^2 / (1 + |v|^2) * v / |v| (the paper's form), 0 at v = 0
    return np.where(norm > 0, norm**2 / (1 + norm**2) * v / np.where(norm > 0, norm, 1), 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_squash_matches_numpy(dtype):
    if dtype == "float64":
        require_float64()
    v = np.random.default_rng(0).normal(size=(3, 4, 5)) * np.array([1e-3, 0.5, 2.0, 30.0])[:, None]
    got = np.asarray(ops.squash(tensor(v, dtype)))
    np.testing.assert_allclose(got, _np_squash(v), rtol=1e-6 if dtype == "float32" else 1e-12)
    lengths = np.linalg.norm(got, axis=-1)
    assert np.all(lengths < 1.0)
    # Other axes.
    got0 = np.asarray(ops.squash(tensor(v, dtype), axis=0))
    np.testing.assert_allclose(got0, np.moveaxis(_np_squash(np.moveaxis(v, 0, -1)), -1, 0),
                               rtol=1e-6 if dtype == "float32" else 1e-12)


def test_squash_and_safe_norm_finite_at_zero():
    v = tensor(np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], "float32"))
    squashed, norm = ops.squash(v), ops.safe_norm(v)
    [g_squash] = grads(lambda x: keras.ops.sum(ops.squash(x)), [v])
    [g_norm] = grads(lambda x: keras.ops.sum(ops.safe_norm(x)), [v])
    [g_plain] = grads(lambda x: keras.ops.sum(keras.ops.norm(x, axis=-1)), [v])
    np.testing.assert_array_equal(np.asarray(squashed)[0], 0.0)
    np.testing.assert_allclose(np.asarray(norm), [0.0, 5.0])
    g_squash, g_norm = np.asarray(g_squash), np.asarray(g_norm)
    assert np.all(np.isfinite(g_squash)) and np.all(np.isfinite(g_norm))
    np.testing.assert_array_equal(g_norm[0], 0.0)
    np.testing.assert_allclose(g_norm[1], [0.6, 0.8, 0.0], rtol=1e-6)
    # The backend's own norm gives NaN there: the reason safe_norm exists. (torch's
    # norm has the subgradient 0 at zero instead, by its own convention.)
    if keras.backend.backend() == "torch":
        np.testing.assert_array_equal(np.asarray(g_plain)[0], 0.0)
    else:
        assert np.isnan(np.asarray(g_plain)[0]).all()


def test_squash_gradient_matches_finite_differences():
    require_float64()
    v = np.random.default_rng(1).normal(size=(4,))
    weights = tensor([1.0, -2.0, 0.5, 3.0], "float64")
    [grad] = grads(lambda x: keras.ops.sum(ops.squash(x) * weights), [tensor(v, "float64")])
    grad = np.asarray(grad)
    w = np.array([1.0, -2.0, 0.5, 3.0])
    numeric = [
        ((_np_squash(v + h) - _np_squash(v - h)) @ w) / 2e-6 for h in np.eye(4) * 1e-6
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6)


def test_masked_softmax():
    logits = tensor([[1.0, 2.0, 3.0], [1.0, 1e4, -1e4], [5.0, 6.0, 7.0]], "float32")
    mask = tensor([[True, False, True], [True, True, True], [False, False, False]])
    weights = tensor([1.0, 2.0, 3.0], "float32")
    w = np.asarray(ops.masked_softmax(logits, mask))
    [grad] = grads(lambda x: keras.ops.sum(ops.masked_softmax(x, mask) * weights), [logits])
    e = np.exp([1.0, 3.0])
    np.testing.assert_allclose(w[0], [e[0] / e.sum(), 0.0, e[1] / e.sum()], rtol=1e-6)
    np.testing.assert_allclose(w[1], [0.0, 1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(w[2], 0.0)  # a fully masked row gives zeros, not NaN
    grad = np.asarray(grad)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[2], 0.0)
    np.testing.assert_array_equal(grad[0, 1], 0.0)
    # Without a mask it is the plain softmax; float16 logits come back as float16.
    np.testing.assert_allclose(np.asarray(ops.masked_softmax(logits)), np.asarray(keras.ops.softmax(logits)))
    half = ops.masked_softmax(keras.ops.cast(logits, "float16"), mask)
    assert keras.backend.standardize_dtype(half.dtype) == "float16" and np.all(np.isfinite(np.asarray(half)))
    np.testing.assert_array_equal(np.asarray(half)[2], 0.0)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_masked_softmax_of_an_empty_batch_or_axis(jit_compile):
    # Eagerly, an empty batch raised "Cannot compute the max of an empty tensor" (so did
    # EMRouting(n_out=None) with a mask on an empty batch); ops.softmax gives an empty result.
    fn = compiled(ops.masked_softmax) if jit_compile else ops.masked_softmax
    for shape in ((0, 3), (2, 0)):
        out = fn(keras.ops.zeros(shape), keras.ops.ones(shape, "bool"))
        assert tuple(out.shape) == shape
    from keras_capsules.layers import EMRouting

    layer = EMRouting(n_out=None, d_out=2, n_iters=2)
    a, mu = np.zeros((0, 3), "float32"), np.zeros((0, 3, 2, 2), "float32")
    a_out, mu_out, *_ = layer([a, mu], mask=np.ones((0, 3), bool))
    assert a_out.shape[0] == 0 and mu_out.shape[0] == 0


def test_routing_dtype():
    assert ops.routing_dtype("float16") == "float32"
    assert ops.routing_dtype("bfloat16") == "float32"
    assert ops.routing_dtype("float64") == "float64"



def test_masked_softmax_with_real_logits_below_the_mask_value():
    """Real logits far below MASK_VALUE still share the weight; padding gets none."""
    logits = tensor([[-2e9, -3e9, 0.0], [-3e9, -3e9, 7.0]], "float32")
    mask = tensor([[True, True, False], [True, True, False]])
    weights = tensor([1.0, 2.0, 3.0], "float32")
    w = np.asarray(ops.masked_softmax(logits, mask))
    [grad] = grads(lambda x: keras.ops.sum(ops.masked_softmax(x, mask) * weights), [logits])
    np.testing.assert_allclose(w[0], [1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(w[1], [0.5, 0.5, 0.0], atol=1e-6)
    grad = np.asarray(grad)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[:, 2], 0.0)
    np.testing.assert_allclose(grad[1], [-0.25, 0.25, 0.0], atol=1e-6)


def _saturated_product_gradients(dtype, scale):
    """Gradients of ``sum(masked_softmax(u * v, mask) * w)`` for ``u`` of magnitude
    ``scale`` (its rows saturate: one weight ~1, the others ~0), in ``dtype``."""
    rng = np.random.default_rng(7)
    u = (rng.standard_normal((8, 6, 5)) * scale).astype(dtype)
    v = rng.uniform(-1, 1, (6, 5)).astype(dtype)
    mask = tensor(rng.random((8, 6, 5)) < 0.8)
    w = tensor(rng.standard_normal((8, 6, 5)), dtype)
    got = grads(lambda u, v: keras.ops.sum(ops.masked_softmax(u * v, mask) * w), [tensor(u), tensor(v)])
    return [np.asarray(g, "float64") for g in got]


@pytest.mark.parametrize("scale", [1e4, 1e6, 1e9])
def test_masked_softmax_gradients_at_saturated_rows_match_float64(scale):
    """With a mask, masked_softmax kept the fused ``ops.softmax``, whose TensorFlow
    weights at a saturated row came out 1 - 6e-8 (float64: 1 - 1e-20), and its gradient
    (g - sum(g * y)) * y was off by that times the upstream gradient: 2e-7 for the
    logits, times the logits' size through a product (here dv off by 3e-3 at 1e4 where
    float64 gives 2e-11, by 332 at 1e9 where it gives 0)."""
    got = _saturated_product_gradients("float32", scale)
    with float64_enabled():
        require_float64()
        want = _saturated_product_gradients("float64", scale)
    for name, g, w in zip(("u", "v"), got, want):
        assert np.all(np.isfinite(g)), f"d/d{name} not finite"
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(w).max()),
                                   err_msg=f"d/d{name} at {scale:g} vs float64")


HUGE_AND_TINY = np.array(
    [[3e19, 4e19, 0.0], [1e30, 0.0, 0.0], [3e38, 3e38, 0.0], [-2e25, 1e25, 2e25],
     [3e-30, 4e-30, 0.0], [0.0, 0.0, 0.0], [3.0, 4.0, 0.0]],
    "float32",
)


def _np_norm64(v):
    return np.linalg.norm(v.astype("float64"), axis=-1)


@pytest.mark.parametrize("jit", [False, True])
def test_safe_norm_and_squash_do_not_overflow(jit):
    """|v| above ~1.8e19 used to overflow |v|^2 in float32: inf norms, NaN or zero squash."""
    def all_three(v):
        return ops.safe_norm(v), ops.safe_norm(v, epsilon=0.0), ops.squash(v)

    fn = compiled(all_three) if jit else all_three
    v = tensor(HUGE_AND_TINY)
    weights = tensor([1.0, -2.0, 0.5], "float32")
    norm, norm_no_eps, squashed = fn(v)
    # row 2's norm is above float32's max: left out of the norm's loss
    [g_norm] = grads(lambda x: keras.ops.sum(keras.ops.take(fn(x)[0], [0, 1, 3, 4, 5, 6])), [v])
    [g_squash] = grads(lambda x: keras.ops.sum(fn(x)[2] * weights), [v])
    want = _np_norm64(HUGE_AND_TINY)
    norm, norm_no_eps, squashed = np.asarray(norm), np.asarray(norm_no_eps), np.asarray(squashed)
    np.testing.assert_allclose(norm[[0, 1, 3, 6]], want[[0, 1, 3, 6]], rtol=1e-6)
    assert np.isinf(norm[2])  # 4.2e38 is not a float32
    np.testing.assert_array_equal(norm[[4, 5]], 0.0)  # below epsilon
    np.testing.assert_allclose(norm_no_eps[4], 5e-30, rtol=1e-6)  # no underflow to 0
    # Huge vectors squash to their unit vectors (|v|^2 / (1 + |v|^2) is 1 in float32).
    unit = HUGE_AND_TINY[:4] / want[:4, None]
    np.testing.assert_allclose(squashed[:4], unit, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(squashed[4:6], 0.0)
    np.testing.assert_allclose(squashed[6], _np_squash(HUGE_AND_TINY[6].astype("float64")), rtol=1e-6)
    # Gradients: d|v|/dv = v / |v|; the squash's is finite and tiny for huge vectors.
    g_norm = np.asarray(g_norm)
    rows = [0, 1, 3, 6]
    np.testing.assert_allclose(g_norm[rows], HUGE_AND_TINY[rows] / want[rows, None], rtol=1e-6, atol=1e-7)
    g_squash = np.asarray(g_squash)
    assert np.all(np.isfinite(g_squash))
    # d/dv <w, v/|v|> = (w - <w, u> u) / |v| for u = v / |v|
    w = np.array([1.0, -2.0, 0.5])
    u = unit.astype("float64")
    want_g = (w - (u @ w)[:, None] * u) / want[:4, None]
    np.testing.assert_allclose(g_squash[:4], want_g, rtol=1e-4, atol=1e-37)  # row 2: subnormal


def test_safe_norm_and_squash_unchanged_for_ordinary_inputs():
    """No rescaling for ordinary vectors: bit for bit the plain formulas."""
    rng = np.random.default_rng(3)
    v = tensor(rng.normal(size=(40, 6)) * 10.0 ** rng.uniform(-10, 12, size=(40, 1)), "float32")
    squared = keras.ops.sum(keras.ops.square(v), axis=-1, keepdims=True)
    plain_norm = keras.ops.sqrt(squared)
    np.testing.assert_array_equal(np.asarray(ops.safe_norm(v, keepdims=True)), np.asarray(plain_norm))
    np.testing.assert_array_equal(
        np.asarray(ops.squash(v)), np.asarray((v * (plain_norm / (1.0 + keras.ops.square(plain_norm)))))
    )


def test_safe_norm_and_squash_float16_inputs():
    """float16 squares overflow above 256: the math runs in float32 and is cast back."""
    v = tensor([[300.0, 400.0], [0.0, 0.0]], "float16")
    norm, squashed = ops.safe_norm(v), ops.squash(v)
    assert keras.backend.standardize_dtype(norm.dtype) == "float16" and keras.backend.standardize_dtype(squashed.dtype) == "float16"
    np.testing.assert_allclose(np.asarray(norm), [500.0, 0.0])
    np.testing.assert_allclose(np.asarray(squashed), [[0.6, 0.8], [0.0, 0.0]], rtol=1e-3)


def test_routing_dtype_of_tensor_dtypes_and_float64_masked_softmax():
    """A float64 tensor's dtype object routes in float64 (it used to fall to float32)."""
    require_float64()
    assert ops.routing_dtype(tensor(1.0, "float64").dtype) == "float64"
    assert ops.routing_dtype(np.dtype("float64")) == "float64"
    assert ops.routing_dtype(tensor(1.0, "float16").dtype) == "float32"
    logits = tensor([[0.0, 1e-9, 2e-9]], "float64")
    w = np.asarray(ops.masked_softmax(logits, tensor([[True, True, False]])))
    e = np.exp(1e-9)
    np.testing.assert_allclose(w[0], [1 / (1 + e), e / (1 + e), 0.0], rtol=1e-14)


def test_tanh_and_mean_keep_float64():
    # fix22: keras.ops.tanh returns float32 and keras.ops.mean averages in float32 for
    # float64 inputs on JAX (Keras' type promotion maps float64 to float32 there, even with
    # jax_enable_x64); these helpers keep float64 on every backend
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        rng = np.random.default_rng(0)
        x = np.concatenate([3 * rng.normal(size=200), [0.0, 1e-300, -1e-20, 1e-8, 20.0, -20.0, 400.0, -1e308]])
        t = tensor(x, "float64")
        for got in (ops.tanh(t), compiled(ops.tanh)(t)):
            assert keras.backend.standardize_dtype(got.dtype) == "float64"
            np.testing.assert_allclose(np.asarray(got), np.tanh(x), rtol=2e-15, atol=0)
        [g] = grads(lambda u: keras.ops.sum(ops.tanh(u)), [t])
        np.testing.assert_allclose(np.asarray(g), 1 - np.tanh(x) ** 2, rtol=1e-12, atol=1e-15)
        assert np.asarray(g)[200] == 1.0  # at 0
        m = 1e3 + rng.normal(size=(3, 4, 50))
        for axis, keepdims in [((1, 2), False), (-1, True), (None, False)]:
            got = ops.mean(tensor(m, "float64"), axis=axis, keepdims=keepdims)
            assert keras.backend.standardize_dtype(got.dtype) == "float64"
            np.testing.assert_allclose(np.asarray(got), m.mean(axis=axis, keepdims=keepdims), rtol=1e-15)
    assert keras.backend.standardize_dtype(ops.tanh(tensor([0.5], "float32")).dtype) == "float32"
    assert keras.backend.standardize_dtype(ops.mean(tensor([[1.0, 2.0]], "float16"), axis=-1).dtype) == "float16"


def test_mean_over_an_axis_of_unknown_size():
    # review: ops.mean divided by the product of ops.shape(x)[axis]; over an axis of
    # unknown size that is None on a KerasTensor (TypeError: int *= NoneType, in any
    # functional model) and an int32 tensor in a TensorFlow trace (TypeError: a float32
    # sum divided by an int32 count), where keras.ops.mean works.
    inputs = keras.Input((None, 4))
    model = keras.Model(inputs, [ops.mean(inputs, axis=1), ops.mean(inputs, keepdims=True), ops.mean(inputs, axis=(0, 1), keepdims=True)])
    for steps in (3, 5):
        x = np.random.default_rng(steps).normal(size=(2, steps, 4)).astype("float32")
        for got, want in zip(model.predict(x, verbose=0), [x.mean(1), x.mean(keepdims=True), x.mean((0, 1), keepdims=True)]):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    empty = np.asarray(model.predict(np.zeros((2, 0, 4), "float32"), verbose=0)[0])
    assert empty.shape == (2, 4) and np.all(np.isnan(empty))  # as numpy's mean of nothing


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
def test_mean_of_integers_is_a_float_mean(dtype):
    # review: ops.mean cast the float mean back to the input's dtype, so an integer mean
    # was truncated (mean([1, 2]) == 1); it is now a float32 mean, as keras.ops.mean's.
    x = np.array([[1, 2, 2], [0, 1, 1]]).astype(dtype)
    for axis, keepdims in [(None, False), (1, False), (0, True), ((0, 1), True)]:
        got = ops.mean(tensor(x), axis=axis, keepdims=keepdims)
        assert keras.backend.standardize_dtype(got.dtype) == "float32"
        np.testing.assert_allclose(np.asarray(got), x.astype("float64").mean(axis=axis, keepdims=keepdims), rtol=1e-6)
    inputs = keras.Input((None,), dtype=dtype)  # an axis of unknown size too
    got = keras.Model(inputs, ops.mean(inputs, axis=1)).predict(x, verbose=0)
    np.testing.assert_allclose(got, x.astype("float64").mean(1), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_integer_inputs_give_float_results(dtype):
    # audit (2026-11-27): squash, safe_norm and masked_softmax cast their float32 results
    # back to the input's dtype: squash and masked_softmax of integers were all zeros,
    # safe_norm([1, 1]) was 1
    x = np.array([[3, 4], [1, 1]]).astype(dtype)
    xf = x.astype("float32")
    for fn in (ops.squash, ops.safe_norm):
        got = fn(tensor(x))
        assert keras.backend.standardize_dtype(got.dtype) == "float32"
        np.testing.assert_allclose(np.asarray(got), np.asarray(fn(tensor(xf))), rtol=1e-6)
    logits, mask = np.array([[1, 2, 3]]).astype(dtype), np.array([[True, True, False]])
    got = ops.masked_softmax(tensor(logits), tensor(mask))
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(ops.masked_softmax(tensor(logits.astype("float32")), tensor(mask))), rtol=1e-6
    )
    for floating in ("float16", "float64"):  # float dtypes are kept
        if floating == "float64" and not has_float64():  # (float64_enabled() is a context, always true)
            continue
        assert keras.backend.standardize_dtype(ops.squash(tensor(x.astype(floating))).dtype) == floating


@pytest.mark.parametrize("epsilon", [float("nan"), float("inf"), -1e-12, "1e-12", None])
def test_bad_epsilon(epsilon):
    # audit: a NaN or infinite epsilon made every norm and squash 0 without an error, a
    # negative one acted as its absolute value, and a string or None failed deep inside
    # with "'<' not supported between ..."
    for fn in (ops.safe_norm, ops.squash):
        with pytest.raises(ValueError, match="Received: epsilon="):
            fn(tensor([[3.0, 4.0]], "float32"), epsilon=epsilon)


def test_masked_softmax_refuses_a_mask_that_does_not_fit_the_logits():
    # audit: a mask of more dimensions (here a (batch, n, 1) mask for (batch, n) logits)
    # broadcast the logits up and silently returned (batch, n, n) weights; a mask that
    # does not broadcast failed inside the backend with a message naming neither.
    logits = tensor(np.zeros((3, 3), "float32"))
    for shape in ((3, 3, 1), (1, 3, 3), (3, 4), (2, 3)):
        with pytest.raises(ValueError, match=re.escape(f"Received: mask.shape={shape}, logits.shape=(3, 3)")):
            ops.masked_softmax(logits, tensor(np.ones(shape, bool)))
    for shape in ((3, 3), (3,), (3, 1), (1, 3), ()):  # broadcastable to the logits: fine
        assert tuple(ops.masked_softmax(logits, tensor(np.ones(shape, bool))).shape) == (3, 3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_a_vector_with_a_nan_has_a_nan_norm_and_squash(dtype):
    # safe_norm gave such a vector the norm 0 (and squash zeros where it was finite): NaN
    # weights then gave capsule lengths of 0 and a finite margin loss, so a diverged
    # model trained on without any stop
    # (also traced: TensorFlow's graph optimizer rewrites "not (a <= b)" into "a > b")
    x = np.array([[np.nan, 1.0], [1.0, np.nan], [3.0, 4.0], [0.0, 0.0]], dtype)
    for run in (lambda f: f, lambda f: compiled(f, jit_compile=False), compiled):
        norm = keras.ops.convert_to_numpy(run(ops.safe_norm)(tensor(x)))
        assert np.isnan(norm[:2]).all() and norm[2] == 5.0 and norm[3] == 0.0
        squashed = keras.ops.convert_to_numpy(run(ops.squash)(tensor(x)))
        assert np.isnan(squashed[:2]).all() and np.isfinite(squashed[2:]).all()


def test_mean_over_every_axis_keeps_them_with_keepdims():
    # torch audit 2026-11-29: Keras' torch sum(axis=None, keepdims=True) drops the kept
    # axes, so ops.mean(x, keepdims=True) was 0-d there (numpy, TensorFlow, JAX: [1, 1, 1]).
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    got = ops.mean(tensor(x), keepdims=True)
    assert tuple(got.shape) == (1, 1, 1)
    np.testing.assert_array_equal(np.asarray(got), x.mean(keepdims=True))


@pytest.mark.parametrize("name", ["matmul", "maximum", "minimum"])
def test_matmul_maximum_minimum_keep_float64(name):
    # torch audit 2026-11-29: Keras' torch matmul, maximum and minimum return float32 for
    # float64 operands (its type promotion maps float64 to float32 off TensorFlow): the
    # float64 routing layers, MAC units and ladder cells lost precision (~1e-7) there.
    rng = np.random.default_rng(3)
    x1, x2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5) if name == "matmul" else (2, 3, 4))
    x1[0, 0, 0] = np.nan
    want = {"matmul": np.matmul, "maximum": np.maximum, "minimum": np.minimum}[name](x1, x2)
    with float64_enabled():
        fn = getattr(ops, name)
        got = fn(tensor(x1), tensor(x2))
        assert keras.backend.standardize_dtype(got.dtype) == "float64"
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-15, atol=1e-15)
        if name != "matmul":  # with a Python number, as the layers call them
            got = fn(tensor(x1), 0.25)
            assert keras.backend.standardize_dtype(got.dtype) == "float64"
            np.testing.assert_array_equal(np.asarray(got), getattr(np, name)(x1, 0.25))  # NaN stays NaN
        got32 = fn(tensor(x1.astype("float32")), tensor(x2.astype("float32")))
        assert keras.backend.standardize_dtype(got32.dtype) == "float32"


def _check_conv(out_channels, dtype):
    """``ops.conv`` gives ``keras.ops.conv``'s values and the right gradients."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 5, 3)).astype(dtype)
    k = rng.standard_normal((3, 3, 3, out_channels)).astype(dtype)
    got = ops.conv(tensor(x), tensor(k), padding="same")
    want = keras.ops.conv(tensor(x), tensor(k), padding="same")
    assert keras.backend.standardize_dtype(got.dtype) == dtype
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want))
    g_x, g_k = grads(lambda a, b: keras.ops.sum(keras.ops.cast(ops.conv(a, b, padding="same"), "float32")),
                     [tensor(x), tensor(k)])
    # d sum / d k[i, j, c, o]: the sum of the zero-padded input under tap (i, j);
    # d sum / d x[b, h, w, c]: the sum of the taps that reach (h, w) from an output pixel
    xpad = np.pad(x.astype("float64"), ((0, 0), (1, 1), (1, 1), (0, 0)))
    taps = np.array([[xpad[:, i:i + 5, j:j + 5].sum((0, 1, 2)) for j in range(3)] for i in range(3)])
    want_k = np.repeat(taps[..., None], out_channels, axis=-1)
    reach = np.pad(np.ones((5, 5)), 1)
    k_sum = k.astype("float64").sum(-1)
    want_x = np.zeros(x.shape)
    for h in range(5):
        for w in range(5):
            # output pixel (h + 1 - i, w + 1 - j) uses x[h, w] through tap (i, j)
            want_x[:, h, w] = np.einsum("ij,ijc->c", reach[h:h + 3, w:w + 3][::-1, ::-1], k_sum)
    tol = {"float16": dict(rtol=1e-2, atol=5e-2), "float32": dict(rtol=1e-5, atol=1e-5),
           "float64": dict(rtol=1e-12, atol=1e-12)}[dtype]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(g_k).astype("float64"), want_k, **tol)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(g_x).astype("float64"), want_x, **tol)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("out_channels", [1, 2])
def test_conv_matches_keras_and_has_gradients(out_channels, dtype):
    # torch audit 2026-11-29: Keras' torch conv passes a one-output-channel kernel as a
    # permuted view whose size-1 axis has stride 1; torch's CPU slow_conv2d (float16 and
    # float64) then fails in the backward pass ("grad_weight must be contiguous"): the
    # convolutional ladder levels under mixed_float16 had no gradients there.
    if dtype == "float64":
        require_float64()
    with float64_enabled():
        _check_conv(out_channels, dtype)


def test_conv_gradients_on_torch():
    """The check above, on torch when this process runs another backend."""
    if keras.backend.backend() == "torch":
        pytest.skip("the test process runs on torch itself (see the test above)")
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the torch backend is not checked")
    code = ("from tests.test_ops import _check_conv\n"
            "for out in (1, 2):\n"
            "    for dtype in ('float16', 'float32', 'float64'):\n"
            "        _check_conv(out, dtype)\n"
            "print('ok')")
    env = {**os.environ, "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, "-c", code], cwd=pathlib.Path(__file__).resolve().parents[1],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("channels", [(3,), (3, 2), (1, 4, 2)])
def test_conv_sum_is_the_sum_of_the_convolutions_with_their_gradients(channels, padding):
    # one convolution of the concatenated inputs and kernels (the ladder's encoder levels)
    rng = np.random.default_rng(0)
    xs = [tensor(rng.normal(size=(2, 6, 5, c)), "float32") for c in channels]
    ks = [tensor(rng.normal(size=(3, 3, c, 4)), "float32") for c in channels]

    def separate(*args):
        return sum(ops.conv(x, k, padding=padding) for x, k in zip(args[: len(xs)], args[len(xs):]))

    def fused(*args):
        return ops.conv_sum(args[: len(xs)], args[len(xs):], padding=padding)

    want, got = separate(*xs, *ks), fused(*xs, *ks)
    assert tuple(got.shape) == tuple(want.shape) == ((2, 6, 5, 4) if padding == "same" else (2, 4, 3, 4))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want), rtol=1e-5,
                               atol=1e-5)
    weights = tensor(rng.normal(size=tuple(want.shape)), "float32")
    for g_want, g_got in zip(grads(lambda *a: keras.ops.sum(separate(*a) * weights), xs + ks),
                             grads(lambda *a: keras.ops.sum(fused(*a) * weights), xs + ks)):
        assert tuple(g_got.shape) == tuple(g_want.shape)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(g_got), keras.ops.convert_to_numpy(g_want),
                                   rtol=1e-4, atol=1e-4)
    for bad in (([], []), (xs, ks[:-1] + ks) if len(xs) > 1 else (xs, ks + ks)):
        with pytest.raises(ValueError, match="as many kernels as inputs"):
            ops.conv_sum(*bad)


_EXTREMA = {"max": (np.max, "max_with_initial"), "min": (np.min, "min_with_initial")}


@pytest.mark.parametrize("extremum", sorted(_EXTREMA))
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (2, 1), (0, 1, 2), ()])
def test_max_and_min_with_initial_match_numpy(extremum, axis, keepdims):
    # ops.max / ops.min with an initial value, without Keras' torch ops.max / ops.min
    # (whose isinstance test broke torch.compile's graph at every call)
    reduce, name = _EXTREMA[extremum]
    x = np.random.default_rng(4).standard_normal((3, 4, 5)).astype("float32")
    fn = getattr(ops, name)
    for initial in (0.25, -0.25, float("inf"), float("-inf"), np.float32(0.5), tensor(np.float32(0.5))):
        got = fn(tensor(x), axis=axis, keepdims=keepdims, initial=initial)
        want = reduce(x, axis=axis, keepdims=keepdims, initial=float(np.asarray(initial)))
        assert keras.backend.standardize_dtype(got.dtype) == "float32"
        assert tuple(got.shape) == want.shape
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), want)
    # traced (TensorFlow's graph and XLA, JAX's jit; skipped on torch)
    if keras.backend.backend() != "torch":
        got = compiled(lambda v: fn(v, axis=axis, keepdims=keepdims, initial=0.25))(tensor(x))
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), reduce(x, axis=axis, keepdims=keepdims, initial=0.25))


@pytest.mark.parametrize("extremum", sorted(_EXTREMA))
@pytest.mark.parametrize("shape,axis", [
    ((0, 3), 1), ((0, 3), 0), ((3, 0), 1), ((3, 0), 0), ((3, 0), -1), ((0, 0), None),
    ((2, 0, 3), (0, 2)), ((2, 0, 3), (1,)), ((2, 0, 3), (1, 2)), ((2, 0, 3), None),
])
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_and_min_with_initial_of_empty_inputs(extremum, shape, axis, keepdims):
    # an empty batch (or an empty reduced axis) is no error: numpy's shape, and the
    # initial value wherever the reduced axes are empty (Keras' torch ops.max gave
    # [1, ..., 1] for any empty tensor; TensorFlow's eager amax refuses it)
    reduce, name = _EXTREMA[extremum]
    fn = getattr(ops, name)
    x = np.zeros(shape, "float32")
    for initial in (-np.inf, 1.5):
        want = reduce(x, axis=axis, keepdims=keepdims, initial=initial)
        got = fn(tensor(x), axis=axis, keepdims=keepdims, initial=initial)
        assert tuple(got.shape) == want.shape
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), want)
    # the gradient (of a sum) reaches x: zeros of its shape
    (g,) = grads(lambda v: keras.ops.sum(fn(v, axis=axis, keepdims=keepdims, initial=1.5)), [tensor(x)])
    assert g is not None and tuple(g.shape) == shape


@pytest.mark.parametrize("extremum", sorted(_EXTREMA))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_max_and_min_with_initial_keep_the_dtype(extremum, dtype):
    # float64 on every backend (JAX with x64; Keras' torch maximum / minimum return
    # float32 for float64), and float16 / bfloat16 are not promoted by the initial value
    reduce, name = _EXTREMA[extremum]
    fn = getattr(ops, name)
    x = np.random.default_rng(5).standard_normal((4, 6))
    with float64_enabled():
        if dtype == "float64":
            initial = 0.1  # not a float32 value: must be taken in float64
            xs = x
        else:
            initial = 0.125
            xs = keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.cast(tensor(x), dtype), "float64"))
        for axis, keepdims in ((1, True), (0, False), ((0, 1), False), (None, True)):
            got = fn(keras.ops.cast(tensor(x), dtype), axis=axis, keepdims=keepdims, initial=initial)
            assert keras.backend.standardize_dtype(got.dtype) == dtype
            want = reduce(xs, axis=axis, keepdims=keepdims, initial=initial)
            if dtype != "float64":  # the initial value rounded to the dtype (0.125 is exact)
                want = want.astype("float32")
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.ops.cast(got, "float64")), want)


def test_max_with_initial_and_masked_softmax_compile_as_one_torch_graph():
    # torch audit: Keras' torch ops.max / ops.min test isinstance(result.values,
    # torch.Tensor), which dynamo cannot trace for a plain tensor ("builtin isinstance()
    # cannot determine type of argument"): masked_softmax broke the graph at every call.
    from tests.layers.rladder.loops import assert_compiles_as_one_torch_graph

    rng = np.random.default_rng(6)
    logits = rng.standard_normal((3, 4, 5)).astype("float32")
    mask = tensor(rng.uniform(size=(3, 4, 5)) > 0.3)
    for axis in (-1, 1):
        assert_compiles_as_one_torch_graph(lambda v, axis=axis: ops.masked_softmax(v, mask, axis=axis), logits)
    assert_compiles_as_one_torch_graph(
        lambda v: [ops.max_with_initial(v, axis=(0, 2), initial=0.0),
                   ops.min_with_initial(v, axis=1, keepdims=True, initial=float("inf"))],
        logits,
    )


def test_mean_takes_a_python_list_as_the_other_functions_do():
    # Audit s64: AttributeError: 'list' object has no attribute 'dtype'.
    np.testing.assert_allclose(np.asarray(ops.mean([1.0, 2.0])), 1.5)
    np.testing.assert_allclose(np.asarray(ops.mean([[1, 2], [3, 5]], axis=1)), [1.5, 4.0])


def test_mean_and_safe_norm_take_numpy_integer_axes_as_keras_ops_do():
    # Audit: mean raised "'numpy.int64' object is not iterable" and safe_norm "`value`
    # must be an integer, tuple or list" for an axis that keras.ops.mean/sum take.
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    for axis, want in [(np.int64(1), 1), (np.int32(-1), -1), ((np.int64(0), np.int64(2)), (0, 2)),
                       ([np.int64(1), 2], (1, 2))]:
        np.testing.assert_allclose(np.asarray(ops.mean(tensor(x), axis=axis)), x.mean(axis=want), rtol=1e-6)
        np.testing.assert_allclose(
            np.asarray(ops.safe_norm(tensor(x), axis=axis)), np.sqrt((x.astype("float64") ** 2).sum(axis=want)),
            rtol=1e-6,
        )
        assert tuple(ops.mean(tensor(x), axis=axis, keepdims=True).shape) == x.mean(axis=want, keepdims=True).shape


@pytest.mark.parametrize("dtype,threshold", [("float32", 2.0**-50), ("float64", 2.0**-500)])
def test_gradients_of_tiny_vectors_with_a_zero_epsilon_are_exact(dtype, threshold):
    # Audit s64: below the threshold where such vectors are scaled up, the gradient through
    # the norm was multiplied by 1 / scale on its way and flushed to zero: squash lost its
    # (u.c) u term, a jump at the threshold, and safe_norm's gradient was 0.
    u = np.array([3.0, -4.0, 1.0]) / np.sqrt(26.0)
    c = np.array([0.3, 0.5, -0.2])
    with float64_enabled():
        for factor in (1.05, 0.95):  # either side of the threshold
            n = threshold * factor
            x = tensor((u * n)[None], dtype)
            (g,) = grads(lambda v: keras.ops.sum(ops.squash(v, epsilon=0.0) * tensor(c, dtype)), [x])
            # squash(v) = |v| v / (1 + |v|^2): for |v| << 1 the gradient is |v| c + (v.c) v / |v|
            np.testing.assert_allclose(np.asarray(g).ravel() / n, c + (u @ c) * u, rtol=1e-5, err_msg=str(factor))
            (g,) = grads(lambda v: ops.safe_norm(v, epsilon=0.0)[0] * 1e-13, [x])
            np.testing.assert_allclose(np.asarray(g).ravel(), 1e-13 * u, rtol=1e-5, err_msg=str(factor))


@pytest.mark.parametrize("taken", [True, False])
def test_recomputed_where_runs_and_differentiates_fn_only_where_pred_holds(taken):
    # keras_capsules.ops.recomputed_where: fn(*args) where pred holds (else zeros shaped
    # as `like`), its gradients those of fn there and zeros elsewhere; eagerly, fn runs
    # only where pred holds (and once more for the gradient: it is recomputed).
    rng = np.random.default_rng(0)
    x, w = tensor(rng.normal(size=(3, 4)), "float32"), tensor(rng.normal(size=(4,)), "float32")
    calls = []

    def fn(x, w):
        calls.append(1)
        return keras.ops.tanh(x * w), keras.ops.sum(keras.ops.square(x), axis=1)

    like = (x, x[:, 0])
    pred = tensor(taken)
    outputs = ops.recomputed_where(pred, fn, (x, w), like)
    want = fn(x, w) if taken else tuple(np.zeros(np.shape(t)) for t in like)
    calls.clear()
    outputs = ops.recomputed_where(pred, fn, (x, w), like)
    if keras.backend.backend() != "jax":  # JAX's lax.cond traces both branches
        assert len(calls) == int(taken)
    for got, expected in zip(outputs, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6)

    def beside(x, w):  # what a caller computes beside it (torch differentiates no constant)
        return keras.ops.sum(x * w)

    def loss(x, w):
        first, second = ops.recomputed_where(pred, fn, (x, w), like)
        return keras.ops.sum(first * 2.0) + keras.ops.sum(second) + beside(x, w)

    def direct(x, w):
        first, second = fn(x, w)
        return keras.ops.sum(first * 2.0) + keras.ops.sum(second) + beside(x, w)

    got = grads(loss, [x, w])
    expected = grads(direct if taken else beside, [x, w])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-6)
    if keras.backend.backend() == "torch":  # the tests' compile tool is TensorFlow's and JAX's
        return
    traced = compiled(lambda x, w: grads(loss, [x, w]))
    for g, e in zip(traced(x, w), expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-6)
