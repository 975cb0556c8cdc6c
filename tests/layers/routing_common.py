"""Checks shared by the tests of the vote-routing layers (DynamicRouting, KMeansRouting).

Holds float64 numpy versions of both algorithms (hand-derived from the formulas in
the layers' docstrings, with padding) and the checks that are the same for both.
"""

import warnings

import keras
import numpy as np
import pytest

from tests.backends import BACKEND, compiled, grads, require_float64, tensor, tensorflow_only
from tests.refdata import load_cccaps


# ---------------------------------------------------------------- numpy versions
def np_squash(s):
    n = np.linalg.norm(s, axis=-1, keepdims=True)
    return n / (1.0 + n**2) * s


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_votes(u, kernel, valid=None):
    u = np.asarray(u, np.float64)
    if valid is not None:
        u = np.where(valid[:, :, None], u, 0.0)
    if kernel.ndim == 3:
        return np.einsum("bid,jdo->bijo", u, kernel)
    return np.einsum("bid,ijdo->bijo", u, kernel)


def np_dynamic(u, kernel, n_iters=3, valid=None):
    u_hat = np_votes(u, kernel, valid)
    b = np.zeros(u_hat.shape[:3])
    for t in range(n_iters):
        c = np_softmax(b)
        if valid is not None:
            c = c * valid[:, :, None]
        s = np.einsum("bij,bijo->bjo", c, u_hat)
        if t < n_iters - 1:
            b = b + np.einsum("bijo,bjo->bij", u_hat, np_squash(s))
    return np_squash(s), c


def np_kmeans(u, kernel, n_iters=3, similarity="cosine", valid=None, init="mean"):
    """k-means routing; ``init="mean"`` starts from the mean vote over real inputs."""
    u_hat = np_votes(u, kernel, valid)
    n_real = u_hat.shape[1] if valid is None else valid.sum(1)
    n_real = np.maximum(np.asarray(n_real, np.float64), 1.0).reshape(-1, 1, 1)
    v = u_hat.sum(1) / (n_real if init == "mean" else u_hat.shape[2])
    for _ in range(n_iters):
        v_dir = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
        b = np.einsum("bijo,bjo->bij", u_hat, v_dir)
        if similarity == "cosine":
            b = b / np.maximum(np.linalg.norm(u_hat, axis=-1), 1e-12)
        c = np_softmax(b)
        if valid is not None:
            c = c * valid[:, :, None]
        v = np.einsum("bij,bijo->bjo", c, u_hat)
    return np_squash(v), c


# ---------------------------------------------------------------- reference data
def load_reference(name):
    return load_cccaps(name)


def check_reference(layer_cls, ref, dtype, **kwargs):
    """Outputs, couplings, lengths and all stored gradients against the reference.

    The reference weight ``W[j, o, d]`` maps ``u`` by ``W[j] @ u``; the layer's kernel
    is ``[j, d, o]`` (``u @ kernel[j]``), its transpose.
    """
    if dtype == "float64":
        require_float64()
    n_out, d_out, d_in = ref["W"].shape
    layer = layer_cls(
        n_out=n_out, d_out=d_out, n_iters=int(ref["num_iterations"]),
        return_couplings=True, dtype=dtype, **kwargs,
    )
    u = tensor(ref["u"], dtype)
    layer(u)
    layer.kernel.assign(np.transpose(ref["W"], (0, 2, 1)).astype(dtype))
    cot = tensor(ref["cotangent"], dtype)
    out, c = layer(u)

    def norm(v):  # keras.ops.norm of float64 is float32 on JAX (x64), so not used
        return keras.ops.sqrt(keras.ops.sum(keras.ops.square(v), axis=-1))

    lengths = norm(out)
    losses = {"sum": lambda x: keras.ops.sum(layer(x)[0]),
              "cot": lambda x: keras.ops.sum(layer(x)[0] * cot),
              "len": lambda x: keras.ops.sum(norm(layer(x)[0]))}
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(out), ref["out"], err_msg="out", **tol)
    np.testing.assert_allclose(np.asarray(lengths), ref["lengths"], err_msg="lengths", **tol)
    # c_iter is stored [iteration, b, j, i]; the layer returns [b, i, j].
    np.testing.assert_allclose(
        np.asarray(c), np.transpose(ref["c_iter"][-1], (0, 2, 1)), err_msg="couplings", **tol
    )
    for key, loss in losses.items():
        g_u, g_kernel = grads(loss, [u], [layer.kernel])
        np.testing.assert_allclose(
            np.transpose(np.asarray(g_kernel), (0, 2, 1)), ref[f"grad_{key}_W"],
            err_msg=f"grad_{key}_W", **tol,
        )
        np.testing.assert_allclose(np.asarray(g_u), ref[f"grad_{key}_u"], err_msg=f"grad_{key}_u", **tol)


# ---------------------------------------------------------------- shared checks
def padded_inputs(rng, batch=4, n_in=7, d_in=5, pad_from=4):
    u = rng.normal(size=(batch, n_in, d_in)).astype("float32")
    valid = np.ones((batch, n_in), bool)
    valid[1, pad_from:] = False
    valid[2, 2:] = False
    valid[-1, :] = False  # a sample with every input padded
    return u, valid


def check_padding_invariance(layer):
    """Padded inputs never change outputs, couplings or gradients, whatever they hold."""
    rng = np.random.default_rng(0)
    u, valid = padded_inputs(rng)
    poisoned = u.copy()
    poisoned[~valid] = np.nan
    poisoned[1, 5, 0] = np.inf
    shifted = np.where(valid[:, :, None], u, 100.0 * rng.normal(size=u.shape)).astype("float32")
    mask = tensor(valid)

    def run(x):
        x = tensor(x)
        out, c = layer(x, mask=mask)
        weights = keras.ops.arange(1.0, 1.0 + out.shape[-1], dtype=out.dtype)
        gradients = grads(
            lambda t: keras.ops.sum(layer(t, mask=mask)[0] * weights), [x], layer.trainable_weights
        )
        return np.asarray(out), np.asarray(c), [np.asarray(g) for g in gradients]

    out, c, base_grads = run(u)
    for a in [out, c] + base_grads:
        assert np.all(np.isfinite(a))
    np.testing.assert_array_equal(c[~valid], 0.0)
    np.testing.assert_allclose(c[valid].sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out[-1], 0.0)  # all padded: zero capsules
    np.testing.assert_array_equal(base_grads[0][~valid], 0.0)
    for x in (poisoned, shifted):
        out2, c2, grads2 = run(x)
        np.testing.assert_array_equal(out2, out)
        np.testing.assert_array_equal(c2, c)
        for g2, g in zip(grads2, base_grads):
            np.testing.assert_allclose(g2, g, rtol=1e-6, atol=1e-7)
    if layer.shared_weights:
        # Dropping the padded positions altogether gives the same result.
        short, c_short = layer(tensor(u[1:2, :4]))
        np.testing.assert_allclose(np.asarray(short)[0], out[1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(c_short)[0], c[1, :4], rtol=1e-5, atol=1e-6)
    return u, valid, out, c


def check_mask_in_functional_model(layer_cls, **kwargs):
    tokens = keras.Input((None,), dtype="int32")
    emb = keras.layers.Embedding(20, 6, mask_zero=True)(tokens)  # the mask propagates
    caps = layer_cls(n_out=3, d_out=4, **kwargs)(emb)
    model = keras.Model(tokens, caps)
    ids = np.array([[3, 4, 5, 0, 0], [7, 2, 0, 0, 0]], "int32")
    ref = np.asarray(model(ids))
    np.testing.assert_allclose(np.asarray(model(ids[:, :3])), ref, rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(model(np.array([[3, 4, 6, 0, 0], [7, 2, 0, 0, 0]], "int32"))), ref)


CONSTRUCTOR_ERRORS = [
    (dict(n_out=0, d_out=2), "n_out"),
    (dict(n_out=3, d_out=-1), "d_out"),
    (dict(n_out=3, d_out=2, n_iters=0), "n_iters"),
    (dict(n_out=3.0, d_out=2), "n_out"),
    (dict(n_out=3, d_out=2, shared_weights="no"), "shared_weights"),
    (dict(n_out=3, d_out=2, return_couplings=1), "return_couplings"),
    # audit (2026-11-29): an integer kernel failed in its initializer ("Need minval < maxval")
    (dict(n_out=3, d_out=2, dtype="int32"), "dtype=int32"),
]


def check_bad_inputs(layer_cls, **kwargs):
    layer = layer_cls(n_out=3, d_out=2, **kwargs)
    with pytest.raises(ValueError, match=r"\[batch, n_in, d_in\] \(rank 3\)"):
        layer(np.zeros((2, 5), "float32"))
    with pytest.raises(ValueError, match="rank 3"):
        layer(np.zeros((2, 5, 4, 4), "float32"))
    layer(np.zeros((2, 5, 4), "float32"))
    with pytest.raises(ValueError, match="expects one input"):  # once built, an AttributeError before
        layer([np.zeros((2, 5, 4), "float32")] * 2)
    with pytest.raises(ValueError, match=r"built for inputs of shape \[batch, n_in, 4\]"):
        layer(np.zeros((2, 5, 3), "float32"))
    with pytest.raises(ValueError, match=r"mask of shape \[batch, n_in\]"):
        layer(np.zeros((2, 5, 4), "float32"), mask=np.ones((2, 5, 4), bool))
    with pytest.raises(ValueError, match=r"mask of shape \[batch, n_in\] = \[batch, 5\]"):
        layer(np.zeros((2, 5, 4), "float32"), mask=np.ones((2, 4), bool))
    unshared = layer_cls(n_out=3, d_out=2, shared_weights=False, **kwargs)
    with pytest.raises(ValueError, match="must be static"):
        unshared(keras.Input((None, 4)))
    unshared(np.zeros((2, 5, 4), "float32"))
    assert tuple(unshared.kernel.shape) == (5, 3, 4, 2)
    with pytest.raises(ValueError, match=r"\[batch, 5, 4\]"):
        unshared(np.zeros((2, 6, 4), "float32"))
    with pytest.raises(ValueError, match="d_in"):
        layer_cls(n_out=3, d_out=2, **kwargs)(keras.Input((5, None)))


def check_learns(layer_cls, **kwargs):
    """Embedding -> routing -> lengths learns which of 3 token sets a sequence uses."""
    from keras_capsules.layers import CapsuleLength
    from keras_capsules.losses import MarginLoss

    rng = np.random.default_rng(0)
    n, seq, classes = 384, 6, 3
    labels = rng.integers(0, classes, size=n)
    # Class k draws tokens from {1+5k, ..., 5+5k} and from 5 shared noise tokens.
    own = 1 + 5 * labels[:, None] + rng.integers(0, 5, size=(n, seq))
    noise = 16 + rng.integers(0, 5, size=(n, seq))
    ids = np.where(rng.random((n, seq)) < 0.5, own, noise)
    lengths = rng.integers(3, seq + 1, size=n)
    ids[np.arange(seq)[None, :] >= lengths[:, None]] = 0  # padding
    tokens = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(21, 8, mask_zero=True)(tokens)
    caps = layer_cls(n_out=classes, d_out=8, **kwargs)(x)
    model = keras.Model(tokens, CapsuleLength()(caps))
    model.compile(keras.optimizers.Adam(0.02), MarginLoss(), metrics=["accuracy"])
    before = model.evaluate(ids[300:], labels[300:], verbose=0)[1]
    history = model.fit(ids[:300], labels[:300], epochs=8, batch_size=32, verbose=0)
    after = model.evaluate(ids[300:], labels[300:], verbose=0)[1]
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0], history.history
    assert after >= 0.9 and after > before + 0.3, (before, after)


def check_jit_with_mask(layer):
    """XLA with a mask and an all-padded sample matches eager."""
    u, valid = padded_inputs(np.random.default_rng(4))
    u[~valid] = 1e6  # large padded values must not leak either
    eager = [np.asarray(o) for o in layer(u, mask=valid)]
    xla = compiled(lambda x, m: layer(x, mask=m))
    for got, want in zip(xla(tensor(u), tensor(valid)), eager):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def outputs_and_gradients(layer, inputs):
    """``layer(inputs)`` (built with ``return_couplings=True``) and the gradients of a
    fixed weighted sum of its outputs with respect to the inputs and the kernel."""
    inputs = tensor(inputs)
    out, c = layer(inputs)
    weights = tensor([1.0, -1.0, 0.5, 2.0], "float32")
    return out, c, grads(lambda x: keras.ops.sum(layer(x)[0] * weights), [inputs], [layer.kernel])


def check_shapes_given_as_tensorshape_or_numpy_integers(layer_cls):
    # A tf.TensorShape or numpy-integer dims were refused: "expects one input of shape ...".
    layer = layer_cls(n_out=3, d_out=2, shared_weights=False)
    if BACKEND == "tensorflow":  # a tf.TensorShape, as tf.keras code passes
        import tensorflow as tf

        assert layer.compute_output_shape(tf.TensorShape([None, 5, 4])) == (None, 3, 2)
    assert layer.compute_output_shape((None, np.int64(5), np.int64(4))) == (None, 3, 2)
    layer.build(keras.ops.zeros((2, 5, 4)).shape)
    assert tuple(layer.kernel.shape) == (5, 3, 4, 2)
    with pytest.raises(ValueError, match=r"\[batch, n_in, d_in\]"):
        layer.compute_output_shape((None, 5.0, 4))


def check_mask_given_as_nested_python_lists(layer_cls):
    # A nested-list mask was read as a list of masks: "Received: 2 masks" or an AttributeError.
    u = np.random.default_rng(3).normal(size=(2, 3, 4)).astype("float32")
    layer = layer_cls(n_out=2, d_out=2)
    mask = [[True, True, False], [True, True, True]]
    np.testing.assert_array_equal(
        np.asarray(layer(u, mask=mask)), np.asarray(layer(u, mask=np.array(mask)))
    )
    np.testing.assert_array_equal(
        np.asarray(layer(u[:1], mask=mask[:1])), np.asarray(layer(u[:1], mask=np.array(mask[:1])))
    )


def check_mask_with_another_batch_size_is_a_clear_error(layer_cls):
    # A [1, n_in] mask was broadcast over the batch silently; [3, n_in] gave a SelectV2 error.
    layer = layer_cls(n_out=3, d_out=2)
    u = np.zeros((2, 5, 4), "float32")
    for rows in (1, 3):
        with pytest.raises(ValueError, match=r"one row per sample.*\[2, 5\]"):
            layer(u, mask=np.ones((rows, 5), bool))


def check_single_output_capsule_gives_no_softmax_warning(layer_cls):
    # n_out=1 made Keras warn "softmax over axis -1 ... has size 1" on every call.
    u = np.random.default_rng(6).normal(size=(2, 3, 4)).astype("float32")
    layer = layer_cls(n_out=1, d_out=2, return_couplings=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, c = layer(u, mask=np.array([[True, True, False], [True, True, True]]))
    np.testing.assert_array_equal(np.asarray(c)[..., 0], [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert np.all(np.linalg.norm(np.asarray(out), axis=-1) < 1.0)


def check_ragged_inputs_route_as_padded_and_masked(layer_cls):
    # Ragged capsules failed with "TypeError: object of type 'RaggedTensor' has no len()".
    tensorflow_only("tf.RaggedTensor capsules")
    import tensorflow as tf

    u = np.random.default_rng(8).normal(size=(5, 4)).astype("float32")
    ragged = tf.RaggedTensor.from_row_lengths(u, [3, 2])
    layer = layer_cls(n_out=3, d_out=2, return_couplings=True)
    out, c = layer(ragged)
    want_out, want_c = layer(ragged.to_tensor(), mask=np.array([[1, 1, 1], [1, 1, 0]], bool))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want_out))
    np.testing.assert_array_equal(np.asarray(c), np.asarray(want_c))
    ragged_mask = tf.ragged.constant([[True, False, True], [True, True]])
    masked, _ = layer(ragged, mask=ragged_mask)
    want, _ = layer(ragged.to_tensor(), mask=np.array([[1, 0, 1], [1, 1, 0]], bool))
    np.testing.assert_array_equal(np.asarray(masked), np.asarray(want))
    # audit (2026-11-27): tf.ragged.constant's default for nested lists is ragged_rank 2;
    # the mask of its real positions had the full rank ([batch, n_in, d_in]), and a built
    # layer refused it as a mask it had not been given
    nested = tf.ragged.constant([u[:3].tolist(), u[3:].tolist()])
    assert nested.ragged_rank == 2
    got, got_c = layer(nested)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want_out))
    np.testing.assert_array_equal(np.asarray(got_c), np.asarray(want_c))


def check_mask_of_another_shape_fails_when_shapes_are_known_only_at_run_time(layer_cls, mask_shape):
    """A mask [batch, 1], [1, n_in] or [1, 1] was broadcast silently over the inputs in a
    tf.function traced for any batch and n_in (its shape was checked only where known
    when the layer was called); it must now fail when the layer runs, and a mask of the
    right shape must still route as before."""
    tensorflow_only("a tf.function traced with unknown shapes (JAX traces concrete shapes)")
    import tensorflow as tf

    rng = np.random.default_rng(3)
    u = rng.normal(size=(2, 5, 4)).astype("float32")
    valid = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    layer = layer_cls(n_out=3, d_out=2)
    want = np.asarray(layer(u, mask=valid))

    @tf.function(
        input_signature=[tf.TensorSpec((None, None, 4), "float32"), tf.TensorSpec((None, None), "bool")]
    )
    def route(u, mask):
        return layer(u, mask=mask)

    np.testing.assert_allclose(np.asarray(route(u, valid)), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):
        route(u, np.ones(mask_shape, bool))


def check_mask_of_another_shape_is_refused_when_the_model_is_built(layer_cls):
    """Audit s65: a functional model took a mask of another shape (the symbolic call did
    not look at it); only predict refused it, with the error the eager call gives."""
    u = keras.Input((5, 3))
    for mask_shape, message in [
        ((None, 4), r"mask of shape \[batch, n_in\] = \[batch, 5\]\. Received: mask shape=\(None, 4\)"),
        ((None, 5, 3), r"mask of shape \[batch, n_in\] = \[batch, 5\]\. Received: mask shape=\(None, 5, 3\)"),
        ((3, 5), r"one row per sample.*\[2, 5\]\. Received: mask shape=\(3, 5\)"),
    ]:
        inputs = u if mask_shape[0] is None else keras.Input(batch_shape=(2, 5, 3))
        with pytest.raises(ValueError, match=message):
            layer_cls(n_out=2, d_out=2)(inputs, mask=keras.Input(batch_shape=mask_shape, dtype="bool"))
    # unknown sizes, a mask in a list: fine, and the model runs on inputs of two lengths
    u, mask = keras.Input((None, 3)), keras.Input((None,), dtype="bool")
    layer = layer_cls(n_out=2, d_out=2)
    model = keras.Model([u, mask], layer(u, mask=[mask]))
    assert tuple(layer(keras.Input((5, 3)), mask=keras.Input((5,), dtype="bool")).shape) == (None, 2, 2)
    x = np.random.default_rng(0).normal(size=(2, 6, 3)).astype("float32")
    valid = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    short = model.predict([x[:, :4], valid[:, :4]], verbose=0)
    np.testing.assert_allclose(short[0], model.predict([x, valid], verbose=0)[0], rtol=1e-5, atol=1e-6)


def check_mixed_float16_routes_in_float32(layer_cls, **kwargs):
    """DESIGN.md: under mixed precision the routing math runs in float32 and only the
    result is cast back. Inputs near float16's maximum give votes and sums beyond it:
    a 16-bit routing overflows (inf, NaN); a float32 one matches the float32 layer on
    the inputs rounded to float16, up to the final cast."""
    u = np.random.default_rng(5).uniform(2e4, 6e4, size=(2, 5, 4)).astype("float32")
    u *= np.sign(np.random.default_rng(6).normal(size=u.shape)).astype("float32")
    full = layer_cls(n_out=3, d_out=4, return_couplings=True, **kwargs)
    half = layer_cls(n_out=3, d_out=4, return_couplings=True, dtype="mixed_float16", **kwargs)
    full(u)
    half(u)
    half.set_weights(full.get_weights())
    rounded = np.asarray(keras.ops.cast(keras.ops.cast(u, "float16"), "float32"))
    want = [np.asarray(o) for o in full(rounded)]
    got = [np.asarray(keras.ops.cast(o, "float32")) for o in half(u)]
    for g, w in zip(got, want):
        assert np.all(np.isfinite(g)), g
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-3)


def check_empty_batch_of_empty_sequences(layer_cls):
    """A batch of no samples with no input capsules (both known when called) gives
    outputs and couplings of batch 0, with and without a mask, eagerly and compiled.
    (Keras' TensorFlow einsum gave the shared-weight votes a batch of 1: outputs
    [1, n_out, d_out] for a batch of 0, and with a mask an einsum shape error.)"""
    u = tensor(np.zeros((0, 0, 4), "float32"))
    layers = [layer_cls(n_out=3, d_out=2, shared_weights=shared, return_couplings=True) for shared in (True, False)]

    def check(outputs, how):
        out, c = outputs
        assert (tuple(out.shape), tuple(c.shape)) == ((0, 3, 2), (0, 0, 3)), how

    for layer in layers:
        check(layer(u), (layer.shared_weights, "eager"))
        check(layer(u, mask=tensor(np.zeros((0, 0), bool))), (layer.shared_weights, "eager, masked"))
    for layer in layers:  # (compiled skips where the backend has no XLA compile here)
        check(compiled(lambda x: layer(x))(u), (layer.shared_weights, "compiled"))
