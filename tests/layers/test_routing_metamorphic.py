"""Metamorphic tests of the capsule-routing family: symmetries the algorithms imply.

Each check transforms the inputs (or the weights) in a way whose effect on the outputs
the algorithm fixes, and compares the layer's outputs, and their gradients with respect
to the inputs, before and after:

* batch independence: a sample's outputs and input gradients are those of the sample
  alone, whatever the other samples of the batch hold (random, huge, tiny, masked with
  NaN poses, -inf or NaN scores);
* input-capsule permutation: with weights shared over inputs, permuting the inputs
  (and their mask) changes nothing; with one weight set per input, permuting the inputs
  together with the weights' input axis changes nothing;
* output-capsule permutation: permuting the outputs' weights permutes the outputs;
* masked == removed: masked input capsules give the outputs of the sample without them
  (all but one masked too, compiled too);
* others: EMRouting's invariance to a scale and a translation of the poses, KMeansRouting
  of duplicated or scaled inputs, DynamicRouting's first iteration, the training flag,
  CapsuleLength of scaled capsules, CompositionalEmbedding's codeword and codebook
  permutations, and the masked softmaxes of ``keras_capsules.ops`` against the softmax
  of the kept entries.

Every check runs eagerly, and a few compiled (``tf.function(jit_compile=True)`` here, on
the test process's backend); ``test_on_jax`` runs those in a JAX subprocess under
``jax.jit`` (``python -m tests.layers.test_routing_metamorphic``; ``--all`` runs every
check compiled, which takes minutes: on 2026-12-06 all passed on TensorFlow XLA and on
JAX).
"""

import sys

import keras_capsules  # noqa: F401  (before keras: see keras_capsules/__init__.py)
import numpy as np
import pytest
from keras import ops

from keras_capsules import layers
from keras_capsules.ops import masked_softmax, shifted_softmax
from tests.backends import checks_on_jax, compiled, run_checks, value_and_grads

TOL = dict(rtol=2e-5, atol=2e-5)
EM_TOL = dict(rtol=2e-4, atol=2e-4)  # EM's float32 iterations amplify rounding more
B, N_IN, D_IN, N_OUT, D_OUT = 4, 5, 3, 3, 4
EM_POSE = (2, 3)  # d_cov x d_inp


def _mask():
    mask = np.ones((B, N_IN), bool)
    mask[0, 3:] = False
    mask[2, 1:] = False  # all but one masked
    mask[3, :] = False  # all masked
    return mask


# ---------------------------------------------------------------- vote routing
VOTE = {
    "dynamic": ("DynamicRouting", dict()),
    "kmeans_cosine": ("KMeansRouting", dict(similarity="cosine")),
    "kmeans_dot": ("KMeansRouting", dict(similarity="dot")),
}


def vote_layer(key, shared, n_iters=3):
    name, kwargs = VOTE[key]
    layer = getattr(layers, name)(n_out=N_OUT, d_out=D_OUT, n_iters=n_iters, shared_weights=shared,
                                  return_couplings=True, **kwargs)
    layer.build((None, N_IN, D_IN))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    return layer


def _apply(fn, inputs, mask, cotangents):
    """The outputs of ``fn(inputs, mask)`` (a list) and the gradients of
    ``sum(outputs * cotangents)`` with respect to the float inputs."""

    def loss(*xs):
        outs = fn(list(xs) if len(xs) > 1 else xs[0], mask)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        return sum(ops.sum(o * c) for o, c in zip(outs, cotangents)), outs

    (_, outs), tensor_grads, _ = value_and_grads(loss, inputs, (), has_aux=True)
    return [np.asarray(o) for o in outs], [np.asarray(g) for g in tensor_grads]


def _vote_call(layer, jit):
    call = lambda x, m: layer(x, mask=m)  # noqa: E731
    return compiled(call) if jit else call


def _vote_data(seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, N_IN, D_IN)).astype("float32")
    cots = [rng.normal(size=(B, N_OUT, D_OUT)).astype("float32"),
            rng.normal(size=(B, N_IN, N_OUT)).astype("float32")]
    return x, cots


def _close(got, want, tol, what):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, err_msg=f"{what} [{k}]", **tol)


def check_vote_batch_independence(key, shared, masked, jit):
    layer = vote_layer(key, shared)
    x, cots = _vote_data()
    mask = _mask() if masked else None
    call = _vote_call(layer, jit)
    outs, grads = _apply(call, [x], mask, cots)
    for b in (0, 2):
        alone, alone_grads = _apply(call, [x[b:b + 1]], None if mask is None else mask[b:b + 1],
                                    [c[b:b + 1] for c in cots])
        _close([o[0] for o in alone] + [alone_grads[0][0]], [o[b] for o in outs] + [grads[0][b]], TOL,
               f"{key} sample {b} alone vs in the batch")
    rng = np.random.default_rng(2)
    for other in ("huge", "tiny", "masked_nan"):
        x2, mask2 = x.copy(), (np.ones((B, N_IN), bool) if mask is None else mask.copy())
        if other == "random":
            x2[1:] = 3.0 * rng.normal(size=x2[1:].shape)
        elif other == "huge":
            x2[1:] = 1e18 * rng.normal(size=x2[1:].shape)
        elif other == "tiny":
            x2[1:] = 1e-30 * rng.normal(size=x2[1:].shape)
        else:
            x2[1:], mask2[1:] = np.nan, False
        use_mask = masked or other == "masked_nan"
        outs2, grads2 = _apply(call, [x2], mask2 if use_mask else None, cots)
        _close([o[0] for o in outs2] + [grads2[0][0]], [o[0] for o in outs] + [grads[0][0]], TOL,
               f"{key}: sample 0 beside {other} samples")


def check_vote_input_permutation(key, shared, masked, jit):
    layer = vote_layer(key, shared)
    x, cots = _vote_data()
    mask = _mask() if masked else None
    perm = np.random.default_rng(3).permutation(N_IN)
    outs, grads = _apply(_vote_call(layer, jit), [x], mask, cots)
    if not shared:  # one weight set per input: [n_in, n_out, d_in, d_out]
        layer.set_weights([layer.get_weights()[0][perm]])
    outs2, grads2 = _apply(_vote_call(layer, jit), [x[:, perm]], None if mask is None else mask[:, perm],
                           [cots[0], cots[1][:, perm]])
    _close(outs2 + grads2, [outs[0], outs[1][:, perm], grads[0][:, perm]], TOL,
           f"{key}: inputs permuted")


def check_vote_output_permutation(key, shared, masked, jit):
    layer = vote_layer(key, shared)
    x, cots = _vote_data()
    mask = _mask() if masked else None
    perm = np.random.default_rng(4).permutation(N_OUT)
    outs, grads = _apply(_vote_call(layer, jit), [x], mask, cots)
    kernel = layer.get_weights()[0]  # [(n_in,) n_out, d_in, d_out]
    layer.set_weights([kernel[perm] if shared else kernel[:, perm]])
    outs2, grads2 = _apply(_vote_call(layer, jit), [x], mask, [cots[0][:, perm], cots[1][:, :, perm]])
    _close(outs2 + grads2, [outs[0][:, perm], outs[1][:, :, perm], grads[0]], TOL,
           f"{key}: outputs' weights permuted")


def check_vote_masked_is_removed(key, n_iters, jit):
    layer = vote_layer(key, True, n_iters)
    x, cots = _vote_data()
    mask = _mask()
    outs, grads = _apply(_vote_call(layer, jit), [x], mask, cots)
    for b in (0, 2):  # 3 real inputs, and 1
        n = int(mask[b].sum())
        short, short_grads = _apply(_vote_call(layer, jit), [x[b:b + 1, :n]], None,
                                    [cots[0][b:b + 1], cots[1][b:b + 1, :n]])
        _close([short[0][0], short[1][0], short_grads[0][0]],
               [outs[0][b], outs[1][b, :n], grads[0][b, :n]], TOL, f"{key}: sample {b} without its padding")
    np.testing.assert_array_equal(outs[0][3], 0.0)
    np.testing.assert_array_equal(grads[0][~mask], 0.0)


def _unsquash_length(out):
    """The pre-squash length ``n`` of squashed capsules (``|squash(v)| = n**2 / (1 + n**2)``)."""
    length = np.linalg.norm(out.astype("float64"), axis=-1, keepdims=True)
    return out / length, np.sqrt(length / (1.0 - length))


def check_kmeans_duplicated_and_scaled_inputs(similarity, jit):
    """k-means scores depend on the centres' directions only: every input twice gives
    the same couplings (twice) and centres twice as long; with cosine similarity, inputs
    scaled by ``s`` give the same couplings and centres ``s`` times as long."""
    layer = vote_layer(f"kmeans_{similarity}", True)
    x, _ = _vote_data()
    call = compiled(lambda t: layer(t)) if jit else (lambda t: layer(t))
    out, c = (np.asarray(t) for t in call(x))
    direction, n = _unsquash_length(out)
    twice, c2 = (np.asarray(t) for t in call(np.concatenate([x, x], axis=1)))
    np.testing.assert_allclose(c2, np.concatenate([c, c], axis=1), **TOL)
    np.testing.assert_allclose(twice, direction * 4 * n**2 / (1 + 4 * n**2), **TOL)
    if similarity == "cosine":
        for s in (1e-3, 7.0):
            scaled, c3 = (np.asarray(t) for t in call((x * s).astype("float32")))
            np.testing.assert_allclose(c3, c, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(scaled, direction * (s * n) ** 2 / (1 + (s * n) ** 2), rtol=1e-4, atol=1e-5)


def check_dynamic_one_iteration_is_the_squashed_mean_vote(jit):
    """With one iteration the couplings are uniform: ``squash(sum_i u_hat / n_out)``."""
    layer = vote_layer("dynamic", True, n_iters=1)
    x, _ = _vote_data()
    mask = _mask()
    call = _vote_call(layer, jit)
    out, c = (np.asarray(t) for t in call(x, mask))
    s = np.einsum("bid,jdo->bjo", np.where(mask[..., None], x, 0.0), np.asarray(layer.kernel, np.float64)) / N_OUT
    n = np.linalg.norm(s, axis=-1, keepdims=True)
    np.testing.assert_allclose(out, n / (1 + n**2) * s, **TOL)
    np.testing.assert_allclose(c, np.where(mask[..., None], 1.0 / N_OUT, 0.0) * np.ones(c.shape), **TOL)


# ---------------------------------------------------------------- EMRouting
def em_layer(algorithm, n_inp, n_out, n_iters=3, eps=1e-9):
    layer = layers.EMRouting(n_out=n_out, d_out=2, n_iters=n_iters, n_inp=n_inp, algorithm=algorithm, eps=eps)
    layer.build([(None, N_IN), (None, N_IN) + EM_POSE])
    rng = np.random.default_rng(0)
    layer.set_weights([(0.5 * rng.normal(size=w.shape)).astype("float32") for w in layer.get_weights()])
    return layer


EM_CONFIGS = {  # (algorithm, n_inp, n_out)
    "votes": ("votes", None, N_OUT),
    "moments": ("moments", None, N_OUT),
    "per_input": ("votes", N_IN, N_OUT),
    "votes_variable_out": ("votes", None, None),
    "moments_variable_out": ("moments", None, None),
}


def _em_call(layer, jit):
    call = lambda inputs, m: layer(inputs, mask=m)  # noqa: E731
    return compiled(call) if jit else call


def _em_data(n_out, seed=1):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(B, N_IN)).astype("float32")
    mu = rng.normal(size=(B, N_IN) + EM_POSE).astype("float32")
    n = n_out or N_IN
    cots = [rng.normal(size=(B, n)).astype("float32")] + [
        rng.normal(size=(B, n, EM_POSE[0], 2)).astype("float32") for _ in range(2)]
    return a, mu, cots


def check_em_batch_independence(key, masked, jit):
    layer = em_layer(*EM_CONFIGS[key])
    a, mu, cots = _em_data(layer.n_out)
    mask = _mask() if masked else None
    call = _em_call(layer, jit)
    outs, grads = _apply(call, [a, mu], mask, cots)
    for b in (0, 2):
        alone, alone_grads = _apply(call, [a[b:b + 1], mu[b:b + 1]], None if mask is None else mask[b:b + 1],
                                    [c[b:b + 1] for c in cots])
        _close([o[0] for o in alone + alone_grads], [o[b] for o in outs + grads], EM_TOL,
               f"EMRouting {key}: sample {b} alone vs in the batch")
    rng = np.random.default_rng(2)
    others = ["huge", "minus_inf", "nan_score", "inf_pose"]
    if masked or layer.n_out is not None:  # (n_out=None: a mask makes padded outputs)
        others.append("masked_nan")
    for other in others:
        a2, mu2 = a.copy(), mu.copy()
        mask2 = np.ones((B, N_IN), bool) if mask is None else mask.copy()
        if other == "random":
            a2[1:], mu2[1:] = 5 * rng.normal(size=a2[1:].shape), 3 * rng.normal(size=mu2[1:].shape)
        elif other == "huge":
            mu2[1:] = 1e12 * rng.normal(size=mu2[1:].shape)
        elif other == "tiny":
            mu2[1:] = 1e-20 * rng.normal(size=mu2[1:].shape)
        elif other == "minus_inf":
            a2[1:], mu2[1:] = -np.inf, np.nan
        elif other == "nan_score":  # NaN outputs there (as documented), not here
            a2[1:, 0] = np.nan
        elif other == "inf_pose":
            mu2[1:, 0] = np.inf
        else:
            mu2[1:], mask2[1:] = np.nan, False
        use_mask = masked or other == "masked_nan"
        outs2, grads2 = _apply(call, [a2, mu2], mask2 if use_mask else None, cots)
        _close([o[0] for o in outs2 + grads2], [o[0] for o in outs + grads], EM_TOL,
               f"EMRouting {key}: sample 0 beside {other} samples")


def check_em_input_permutation(key, masked, jit):
    layer = em_layer(*EM_CONFIGS[key])
    a, mu, cots = _em_data(layer.n_out)
    mask = _mask() if masked else None
    perm = np.random.default_rng(3).permutation(N_IN)
    outs, grads = _apply(_em_call(layer, jit), [a, mu], mask, cots)
    if layer.n_inp is not None:  # kernel, bias, beta_use, beta_ign: [n_inp, n_out, ...]
        layer.set_weights([w[perm] for w in layer.get_weights()])
    permuted = None if mask is None else mask[:, perm]
    outs2, grads2 = _apply(_em_call(layer, jit), [a[:, perm], mu[:, perm]], permuted, cots)
    what = f"EMRouting {key}: inputs permuted"
    if layer.n_out is None and masked:
        # outputs are padded where inputs are: the real ones, in order, are the same
        for b in range(B):
            _close([o[b][permuted[b]] for o in outs2], [o[b][mask[b]] for o in outs], EM_TOL, what)
    elif layer.n_out is None:
        _close(outs2, outs, EM_TOL, what)  # (the cotangents follow the outputs' positions)
    else:
        _close(outs2 + grads2, outs + [g[:, perm] for g in grads], EM_TOL, what)


def check_em_output_permutation(key, masked, jit):
    layer = em_layer(*EM_CONFIGS[key])
    a, mu, cots = _em_data(layer.n_out)
    mask = _mask() if masked else None
    perm = np.random.default_rng(4).permutation(N_OUT)
    outs, grads = _apply(_em_call(layer, jit), [a, mu], mask, cots)
    layer.set_weights([w[:, perm] for w in layer.get_weights()])  # [n_inp or 1, n_out, ...]
    outs2, grads2 = _apply(_em_call(layer, jit), [a, mu], mask, [c[:, perm] for c in cots])
    _close(outs2 + grads2, [o[:, perm] for o in outs] + grads, EM_TOL,
           f"EMRouting {key}: outputs' weights permuted")


def check_em_masked_is_removed(key, jit):
    layer = em_layer(*EM_CONFIGS[key])
    a, mu, cots = _em_data(layer.n_out)
    mask = _mask()
    outs, grads = _apply(_em_call(layer, jit), [a, mu], mask, cots)
    for b in (0, 2):  # 3 real inputs, and 1
        n = int(mask[b].sum())
        keep = (lambda t: t[b:b + 1]) if layer.n_out else (lambda t: t[b:b + 1, :n])
        short, short_grads = _apply(_em_call(layer, jit), [a[b:b + 1, :n], mu[b:b + 1, :n]], None,
                                    [keep(c) for c in cots])
        _close([o[0] for o in short + short_grads], [keep(o)[0] for o in outs] + [g[b, :n] for g in grads],
               EM_TOL, f"EMRouting {key}: sample {b} without its padding")
    for o in outs + grads:
        assert np.all(np.isfinite(o))


def check_em_pose_scale_and_translation(key, jit):
    """Poses and biases times ``s`` give the same scores, means times ``s`` and variances
    times ``s**2`` (with a variance floor far below the variances), across the ``2**16``
    above which the layer routes rescaled poses; poses shifted by ``t`` with biases
    shifted by ``-t @ kernel`` give the same outputs (weights shared over inputs)."""
    layer = em_layer(*EM_CONFIGS[key])
    a, mu, _ = _em_data(layer.n_out)
    # (every sample with 3 real inputs or more: a sample of one, whose variances are the
    # floor itself, routes by float32 noise at any scale beyond 2**16, see the report)
    mask = np.ones((B, N_IN), bool)
    mask[0, 3:] = False
        # (a new compiled function for every weight set: jax.jit takes the weights as constants)
    outs = [np.asarray(o, np.float64) for o in _em_call(layer, jit)([a, mu], mask)]
    weights = layer.get_weights()  # kernel, bias, beta_use, beta_ign (, bias_break)
    for s in (0.25, 4.0, 2.0**20, 2.0**40):
        layer.set_weights([weights[0], weights[1] * s] + weights[2:4] + [w * s for w in weights[4:]])
        got = [np.asarray(o, np.float64) for o in _em_call(layer, jit)([a, (mu * s).astype("float32")], mask)]
        _close([got[0], got[1] / s, got[2] / s**2], outs, EM_TOL, f"EMRouting {key}: poses times {s:g}")
    t = (5 * np.random.default_rng(5).normal(size=EM_POSE)).astype("float32")
    layer.set_weights([weights[0], weights[1] - np.einsum("cd,ijdh->ijch", t, weights[0])] + weights[2:])
    got = [np.asarray(o) for o in _em_call(layer, jit)([a, mu + t], mask)]
    _close(got, outs, EM_TOL, f"EMRouting {key}: poses shifted")
    layer.set_weights(weights)


# ---------------------------------------------------------------- CapsuleLength, embedding, ops
def check_capsule_length(jit):
    layer = layers.CapsuleLength()
    call = compiled(lambda t: layer(t)) if jit else layer
    x = np.random.default_rng(0).normal(size=(3, 4, 5)).astype("float32")
    want = np.linalg.norm(x.astype("float64"), axis=-1)
    np.testing.assert_allclose(np.asarray(call(x)), want, rtol=1e-6)
    for s in (-3.0, 1e-10, 1e25):
        np.testing.assert_allclose(np.asarray(call((x * s).astype("float32"))), abs(s) * want, rtol=1e-5)
    # lengths below safe_norm's epsilon (1e-12) are zero, as documented
    np.testing.assert_array_equal(np.asarray(call((x * 1e-25).astype("float32"))), 0.0)
    perm = np.random.default_rng(1).permutation(5)
    np.testing.assert_allclose(np.asarray(call(x[..., perm])), want, rtol=1e-6)


def check_compositional_embedding(jit):
    """Learned codes: the lookup equals numpy's, and relabelling the codewords of a
    codebook, reordering the codebooks or adding a constant to a code changes no
    embedding; fixed codes: the sum of the coded codewords, also reordered."""
    rng = np.random.default_rng(0)
    emb = layers.CompositionalEmbedding(30, 4, num_codebooks=3)
    emb.build()
    call = compiled(lambda t: emb(t)) if jit else emb
    codes, book = np.asarray(emb.codes), np.asarray(emb.codebook)
    m, k = emb.num_codebooks, emb.num_codewords
    ids = rng.integers(0, 30, size=(3, 5)).astype("int32")
    soft = np.exp(codes - codes.max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    want = np.einsum("...mk,mkd->...d", soft[ids], book)
    np.testing.assert_allclose(np.asarray(call(ids)), want, **TOL)
    perms = [rng.permutation(k) for _ in range(m)]
    order = rng.permutation(m)
    for new_codes, new_book in (
        (np.stack([codes[:, j, perms[j]] for j in range(m)], 1), np.stack([book[j, perms[j]] for j in range(m)])),
        (codes[:, order], book[order]),
        (codes + 100.0, book),
    ):
        emb.codes.assign(new_codes)
        emb.codebook.assign(new_book)
        call = compiled(lambda t: emb(t)) if jit else emb
        np.testing.assert_allclose(np.asarray(call(ids)), want, rtol=1e-5, atol=1e-5)
    fixed_codes = rng.integers(0, 4, size=(30, m))
    fixed = layers.CompositionalEmbedding(30, 4, num_codebooks=m, num_codewords=4, codes=fixed_codes)
    fixed.build()
    call = compiled(lambda t: fixed(t)) if jit else fixed
    book = np.asarray(fixed.codebook)
    want = book[np.arange(m), fixed_codes[ids]].sum(-2)
    np.testing.assert_allclose(np.asarray(call(ids)), want, **TOL)
    fixed.codes.assign(fixed_codes[:, order].astype("int32"))
    fixed.codebook.assign(book[order])
    call = compiled(lambda t: fixed(t)) if jit else fixed
    np.testing.assert_allclose(np.asarray(call(ids)), want, **TOL)


def check_masked_softmaxes_equal_the_softmax_of_the_kept_entries(jit):
    rng = np.random.default_rng(0)
    logits = (10 * rng.normal(size=(4, 6))).astype("float32")
    mask = rng.random((4, 6)) < 0.6
    mask[:, 0] = True
    want = np.zeros(logits.shape)
    for r in range(4):
        e = np.exp(logits[r, mask[r]] - logits[r, mask[r]].max())
        want[r, mask[r]] = e / e.sum()
    for name, fn in (("masked_softmax", lambda t, m: masked_softmax(t, m)),
                     ("shifted_softmax", lambda t, m: shifted_softmax(t, mask=m))):
        call = compiled(fn) if jit else fn
        for fill in (0.0, 1e30, np.nan):  # whatever the masked entries hold
            got = np.asarray(call(np.where(mask, logits, np.float32(fill)), mask))
            np.testing.assert_allclose(got, want, **TOL, err_msg=f"{name}, masked entries {fill}")
        perm = rng.permutation(6)
        got = np.asarray(call(logits[:, perm] + np.float32(37.0), mask[:, perm]))
        np.testing.assert_allclose(got, want[:, perm], **TOL, err_msg=f"{name}, permuted and shifted")


def check_training_flag_changes_nothing():
    """The routing layers have no training-only behaviour: ``training=True`` and
    ``training=False`` give the same outputs (Keras passes the flag on in ``fit``)."""
    x, _ = _vote_data()
    mask = _mask()
    for key in sorted(VOTE):
        layer = vote_layer(key, True)
        _close(layer(x, mask=mask, training=True), layer(x, mask=mask, training=False), TOL, key)
    em = em_layer(*EM_CONFIGS["moments_variable_out"])
    a, mu, _ = _em_data(None)
    _close(em([a, mu], mask=mask, training=True), em([a, mu], mask=mask, training=False), EM_TOL, "EMRouting")


# ---------------------------------------------------------------- the checks
#: which configurations each check runs on: eagerly, and (a smaller set) compiled
VOTE_CASES = {  # (key, shared weights, masked)
    "batch_independence": {False: [(k, True, True) for k in VOTE] + [(k, False, False) for k in VOTE],
                           True: [("dynamic", True, True), ("kmeans_dot", False, True)]},
    "input_permutation": {False: [(k, True, True) for k in VOTE] + [(k, False, True) for k in VOTE],
                          True: [("kmeans_dot", False, True), ("dynamic", True, True)]},
    "output_permutation": {False: [(k, True, False) for k in VOTE] + [(k, False, True) for k in VOTE],
                           True: [("dynamic", False, True)]},
}
EM_CASES = {  # (key, masked)
    "batch_independence": {False: [("votes", False), ("moments", True), ("per_input", True),
                                   ("votes_variable_out", True), ("moments_variable_out", False)],
                           True: [("moments", True), ("per_input", True)]},
    "input_permutation": {False: [(k, True) for k in EM_CONFIGS] + [("votes_variable_out", False)],
                          True: [("moments_variable_out", True)]},
    "output_permutation": {False: [("votes", True), ("moments", False), ("per_input", True)],
                           True: [("votes", True)]},
}


def _checks(jits=(False, True)):
    """``(name, check, args)`` for every check; the pytest tests below are these."""
    vote_checks = {"batch_independence": check_vote_batch_independence,
                   "input_permutation": check_vote_input_permutation,
                   "output_permutation": check_vote_output_permutation}
    em_checks = {"batch_independence": check_em_batch_independence,
                 "input_permutation": check_em_input_permutation,
                 "output_permutation": check_em_output_permutation}
    checks = []
    for jit in jits:
        mode = "compiled" if jit else "eager"
        for what, check in vote_checks.items():
            for key, shared, masked in VOTE_CASES[what][jit]:
                tag = f"{key}-{'shared' if shared else 'per_input'}-{'masked' if masked else 'dense'}-{mode}"
                checks.append((f"vote_{what}[{tag}]", check, (key, shared, masked, jit)))
        for key, n_iters in ([("dynamic", 1), ("dynamic", 3), ("kmeans_cosine", 3), ("kmeans_dot", 3)]
                             if not jit else [("dynamic", 3), ("kmeans_dot", 1)]):
            checks.append((f"vote_masked_is_removed[{key}-{n_iters}-{mode}]", check_vote_masked_is_removed,
                           (key, n_iters, jit)))
        for similarity in ("cosine", "dot"):
            checks.append((f"kmeans_duplicated_and_scaled[{similarity}-{mode}]",
                           check_kmeans_duplicated_and_scaled_inputs, (similarity, jit)))
        checks.append((f"dynamic_one_iteration[{mode}]", check_dynamic_one_iteration_is_the_squashed_mean_vote,
                       (jit,)))
        for what, check in em_checks.items():
            for key, masked in EM_CASES[what][jit]:
                tag = f"{key}-{'masked' if masked else 'dense'}-{mode}"
                checks.append((f"em_{what}[{tag}]", check, (key, masked, jit)))
        for key in (["votes", "moments", "votes_variable_out", "moments_variable_out"] if not jit
                    else ["moments", "votes_variable_out"]):
            checks.append((f"em_masked_is_removed[{key}-{mode}]", check_em_masked_is_removed, (key, jit)))
        for key in (["votes", "moments", "moments_variable_out"] if not jit else ["moments"]):
            checks.append((f"em_pose_scale_and_translation[{key}-{mode}]", check_em_pose_scale_and_translation,
                           (key, jit)))
        if not jit:
            checks.append(("training_flag", check_training_flag_changes_nothing, ()))
        checks += [(f"capsule_length[{mode}]", check_capsule_length, (jit,)),
                   (f"compositional_embedding[{mode}]", check_compositional_embedding, (jit,)),
                   (f"masked_softmaxes[{mode}]", check_masked_softmaxes_equal_the_softmax_of_the_kept_entries, (jit,))]
    return checks


#: the compiled checks the tests run (XLA compiles forward and backward passes for every
#: shape: the full set, ``python -m tests.layers.test_routing_metamorphic --all``, takes
#: minutes)
QUICK_COMPILED = {
    "vote_batch_independence[dynamic-shared-masked-compiled]",
    "vote_masked_is_removed[kmeans_dot-1-compiled]",
    "em_masked_is_removed[votes_variable_out-compiled]",
    "capsule_length[compiled]",
    "compositional_embedding[compiled]",
    "masked_softmaxes[compiled]",
}
CHECKS = [c for c in _checks() if not c[0].endswith("-compiled]") or c[0] in QUICK_COMPILED]


@pytest.mark.parametrize("name,check,args", CHECKS, ids=[c[0] for c in CHECKS])
def test_metamorphic(name, check, args):
    check(*args)


def test_on_jax():
    """The compiled checks above on JAX (``jax.jit``), in a subprocess."""
    checks_on_jax("tests.layers.test_routing_metamorphic")


def main():
    """The compiled checks on this process's backend (``--all``: every compiled check,
    not just the quick ones the tests run); prints the failures, returns 1 if any."""
    checks = _checks(jits=(True,))
    if "--all" not in sys.argv:
        checks = [c for c in checks if c[0] in QUICK_COMPILED]
    return run_checks(checks)


if __name__ == "__main__":
    sys.exit(main())
