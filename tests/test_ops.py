"""ops: squash, safe_norm and masked_softmax values and gradients at the edge cases."""

import numpy as np
import pytest
import tensorflow as tf

from keras_capsules import ops


def _np_squash(v):
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    # |v|^2 / (1 + |v|^2) * v / |v| (the paper's form), 0 at v = 0
    return np.where(norm > 0, norm**2 / (1 + norm**2) * v / np.where(norm > 0, norm, 1), 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_squash_matches_numpy(dtype):
    v = np.random.default_rng(0).normal(size=(3, 4, 5)) * np.array([1e-3, 0.5, 2.0, 30.0])[:, None]
    got = ops.squash(tf.constant(v, dtype)).numpy()
    np.testing.assert_allclose(got, _np_squash(v), rtol=1e-6 if dtype == "float32" else 1e-12)
    lengths = np.linalg.norm(got, axis=-1)
    assert np.all(lengths < 1.0)
    # Other axes.
    got0 = ops.squash(tf.constant(v, dtype), axis=0).numpy()
    np.testing.assert_allclose(got0, np.moveaxis(_np_squash(np.moveaxis(v, 0, -1)), -1, 0),
                               rtol=1e-6 if dtype == "float32" else 1e-12)


def test_squash_and_safe_norm_finite_at_zero():
    v = tf.constant(np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], "float32"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(v)
        squashed = ops.squash(v)
        norm = ops.safe_norm(v)
        sums = [tf.reduce_sum(squashed), tf.reduce_sum(norm), tf.reduce_sum(tf.norm(v, axis=-1))]
    np.testing.assert_array_equal(squashed.numpy()[0], 0.0)
    np.testing.assert_allclose(norm.numpy(), [0.0, 5.0])
    g_squash = tape.gradient(sums[0], v).numpy()
    g_norm = tape.gradient(sums[1], v).numpy()
    assert np.all(np.isfinite(g_squash)) and np.all(np.isfinite(g_norm))
    np.testing.assert_array_equal(g_norm[0], 0.0)
    np.testing.assert_allclose(g_norm[1], [0.6, 0.8, 0.0], rtol=1e-6)
    # TensorFlow's own norm gives NaN there: the reason safe_norm exists.
    assert np.isnan(tape.gradient(sums[2], v).numpy()[0]).all()


def test_squash_gradient_matches_finite_differences():
    v = np.random.default_rng(1).normal(size=(4,))
    x = tf.constant(v, "float64")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(ops.squash(x) * tf.constant([1.0, -2.0, 0.5, 3.0], "float64"))
    grad = tape.gradient(y, x).numpy()
    w = np.array([1.0, -2.0, 0.5, 3.0])
    numeric = [
        ((_np_squash(v + h) - _np_squash(v - h)) @ w) / 2e-6 for h in np.eye(4) * 1e-6
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6)


def test_masked_softmax():
    logits = tf.constant([[1.0, 2.0, 3.0], [1.0, 1e4, -1e4], [5.0, 6.0, 7.0]])
    mask = tf.constant([[True, False, True], [True, True, True], [False, False, False]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        w = ops.masked_softmax(logits, mask)
        loss = tf.reduce_sum(w * tf.constant([1.0, 2.0, 3.0]))
    w = w.numpy()
    e = np.exp([1.0, 3.0])
    np.testing.assert_allclose(w[0], [e[0] / e.sum(), 0.0, e[1] / e.sum()], rtol=1e-6)
    np.testing.assert_allclose(w[1], [0.0, 1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(w[2], 0.0)  # a fully masked row gives zeros, not NaN
    grad = tape.gradient(loss, logits).numpy()
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[2], 0.0)
    np.testing.assert_array_equal(grad[0, 1], 0.0)
    # Without a mask it is the plain softmax; float16 logits come back as float16.
    np.testing.assert_allclose(ops.masked_softmax(logits).numpy(), tf.nn.softmax(logits).numpy())
    half = ops.masked_softmax(tf.cast(logits, "float16"), mask)
    assert half.dtype == "float16" and np.all(np.isfinite(half.numpy()))
    np.testing.assert_array_equal(half.numpy()[2], 0.0)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_masked_softmax_of_an_empty_batch_or_axis(jit_compile):
    # Eagerly, an empty batch raised "Cannot compute the max of an empty tensor" (so did
    # EMRouting(n_out=None) with a mask on an empty batch); ops.softmax gives an empty result.
    fn = tf.function(ops.masked_softmax, jit_compile=True) if jit_compile else ops.masked_softmax
    for shape in ((0, 3), (2, 0)):
        out = fn(tf.zeros(shape), tf.ones(shape, bool))
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
    logits = tf.constant([[-2e9, -3e9, 0.0], [-3e9, -3e9, 7.0]], "float32")
    mask = tf.constant([[True, True, False], [True, True, False]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        w = ops.masked_softmax(logits, mask)
        loss = tf.reduce_sum(w * tf.constant([1.0, 2.0, 3.0]))
    w = w.numpy()
    np.testing.assert_allclose(w[0], [1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(w[1], [0.5, 0.5, 0.0], atol=1e-6)
    grad = tape.gradient(loss, logits).numpy()
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[:, 2], 0.0)
    np.testing.assert_allclose(grad[1], [-0.25, 0.25, 0.0], atol=1e-6)


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
    fn = tf.function(
        lambda v: (ops.safe_norm(v), ops.safe_norm(v, epsilon=0.0), ops.squash(v)),
        jit_compile=True,
    ) if jit else (lambda v: (ops.safe_norm(v), ops.safe_norm(v, epsilon=0.0), ops.squash(v)))
    v = tf.constant(HUGE_AND_TINY)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(v)
        norm, norm_no_eps, squashed = fn(v)
        weights = tf.constant([1.0, -2.0, 0.5])
        loss_norm = tf.reduce_sum(tf.gather(norm, [0, 1, 3, 4, 5, 6]))  # row 2's is above float32's max
        loss_squash = tf.reduce_sum(squashed * weights)
    want = _np_norm64(HUGE_AND_TINY)
    norm, norm_no_eps, squashed = norm.numpy(), norm_no_eps.numpy(), squashed.numpy()
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
    g_norm = tape.gradient(loss_norm, v).numpy()
    rows = [0, 1, 3, 6]
    np.testing.assert_allclose(g_norm[rows], HUGE_AND_TINY[rows] / want[rows, None], rtol=1e-6, atol=1e-7)
    g_squash = tape.gradient(loss_squash, v).numpy()
    assert np.all(np.isfinite(g_squash))
    # d/dv <w, v/|v|> = (w - <w, u> u) / |v| for u = v / |v|
    w = np.array([1.0, -2.0, 0.5])
    u = unit.astype("float64")
    want_g = (w - (u @ w)[:, None] * u) / want[:4, None]
    np.testing.assert_allclose(g_squash[:4], want_g, rtol=1e-4, atol=1e-37)  # row 2: subnormal


def test_safe_norm_and_squash_unchanged_for_ordinary_inputs():
    """No rescaling for ordinary vectors: bit for bit the plain formulas."""
    rng = np.random.default_rng(3)
    v = tf.constant(rng.normal(size=(40, 6)) * 10.0 ** rng.uniform(-10, 12, size=(40, 1)), "float32")
    squared = tf.reduce_sum(tf.square(v), axis=-1, keepdims=True)
    plain_norm = tf.sqrt(squared)
    np.testing.assert_array_equal(ops.safe_norm(v, keepdims=True).numpy(), plain_norm.numpy())
    np.testing.assert_array_equal(
        ops.squash(v).numpy(), (v * (plain_norm / (1.0 + tf.square(plain_norm)))).numpy()
    )


def test_safe_norm_and_squash_float16_inputs():
    """float16 squares overflow above 256: the math runs in float32 and is cast back."""
    v = tf.constant([[300.0, 400.0], [0.0, 0.0]], "float16")
    norm, squashed = ops.safe_norm(v), ops.squash(v)
    assert norm.dtype == "float16" and squashed.dtype == "float16"
    np.testing.assert_allclose(norm.numpy(), [500.0, 0.0])
    np.testing.assert_allclose(squashed.numpy(), [[0.6, 0.8], [0.0, 0.0]], rtol=1e-3)


def test_routing_dtype_of_tensor_dtypes_and_float64_masked_softmax():
    """A float64 tensor's dtype object routes in float64 (it used to fall to float32)."""
    assert ops.routing_dtype(tf.constant(1.0, "float64").dtype) == "float64"
    assert ops.routing_dtype(np.dtype("float64")) == "float64"
    assert ops.routing_dtype(tf.float16) == "float32"
    logits = tf.constant([[0.0, 1e-9, 2e-9]], "float64")
    w = ops.masked_softmax(logits, tf.constant([[True, True, False]])).numpy()
    e = np.exp(1e-9)
    np.testing.assert_allclose(w[0], [1 / (1 + e), e / (1 + e), 0.0], rtol=1e-14)
