"""MixtureNLL with a Keras mask over the groups: a group the mask leaves out at a pixel
is not in that pixel's mixture (helper-206).

Before, a mask over ``[batch, ..., K, ...]`` only decided which pixels counted (any group
kept): every group, the masked ones included, entered the mixture, so a sample padded to
``K`` groups had its padded groups' means and ``pi`` in its loss (a NaN there made the
loss NaN, and finite padding changed it).
"""

import keras
import numpy as np
import pytest
from keras.src.backend import set_keras_mask

from keras_capsules.losses import MixtureNLL
from tests.backends import compiled, require_float64, value_and_grads

SIGMA = 0.7


def _numpy_nll(x, m, pi, from_logits):
    """Per-pixel loss of groups on axis 1: x [b, P, C], m [b, K, P, C], pi [b, K, P, 1]."""
    log_n = -0.5 * np.sum(((x[:, None] - m) / SIGMA) ** 2, -1) - x.shape[-1] * (0.5 * np.log(2 * np.pi) + np.log(SIGMA))
    p = pi[..., 0]
    if from_logits:
        log_pi = p - np.log(np.sum(np.exp(p - p.max(1, keepdims=True)), 1, keepdims=True)) - p.max(1, keepdims=True)
    else:
        log_pi = np.log(np.maximum(p, 1e-7))
    return -np.log(np.sum(np.exp(log_pi + log_n), axis=1))


def _case(seed=0):
    """Two samples of 5 pixels and 2 channels, 3 groups; sample 1 has only groups 0 and 1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 5, 2)).astype("float32")
    m = rng.normal(size=(2, 3, 5, 2)).astype("float32")
    pi = rng.uniform(0.1, 1.0, size=(2, 3, 5, 1)).astype("float32")
    pi[0] /= pi[0].sum(0, keepdims=True)
    pi[1, :2] /= pi[1, :2].sum(0, keepdims=True)
    mask = np.ones((2, 3, 5), bool)
    mask[1, 2] = False
    return x, m, pi, mask


def _expected(x, m, pi, from_logits):
    kept = np.concatenate([_numpy_nll(x[:1], m[:1], pi[:1], from_logits),
                           _numpy_nll(x[1:], m[1:, :2], pi[1:, :2], from_logits)])
    return kept.mean()


def _masked(packed, mask):
    packed = keras.ops.convert_to_tensor(packed)
    set_keras_mask(packed, keras.ops.convert_to_tensor(mask))
    return packed


@pytest.mark.parametrize("from_logits", [False, True], ids=["probabilities", "logits"])
@pytest.mark.parametrize("fill", [0.0, 1e3, np.nan, np.inf], ids=["zero", "large", "nan", "inf"])
def test_a_group_the_mask_leaves_out_is_not_in_the_mixture(from_logits, fill):
    x, m, pi, mask = _case()
    want = _expected(x, m, pi, from_logits)
    packed = np.concatenate([m, pi], -1)
    packed[1, 2] = fill  # the padded group of sample 1, means and pi
    loss = MixtureNLL(sigma=SIGMA, from_logits=from_logits)
    np.testing.assert_allclose(float(loss(x, _masked(packed, mask))), want, rtol=1e-5)

    def total(p):
        return loss(x, _masked(p, mask))

    value, (grad,), _ = value_and_grads(total, [packed])
    grad = keras.ops.convert_to_numpy(grad)
    np.testing.assert_allclose(float(value), want, rtol=1e-5)
    assert np.all(np.isfinite(grad))
    assert np.all(grad[1, 2] == 0)  # the padded group gets no gradient
    assert np.any(grad[1, :2] != 0) and np.any(grad[0, 2] != 0)


def test_partial_group_masks_per_pixel():
    # group 2 of sample 0 left out at pixels 1 and 3 only; pixel 4 of sample 1 has no group
    x, m, pi, mask = _case(1)
    mask[0, 2, [1, 3]] = False
    mask[1, :, 4] = False
    packed = np.concatenate([m, pi], -1)
    packed[0, 2, [1, 3]] = np.nan
    packed[1, :, 4] = np.nan
    got = float(MixtureNLL(sigma=SIGMA)(x, _masked(packed, mask)))
    kept_pixels = []
    for b in range(2):
        for p in range(5):
            groups = np.flatnonzero(mask[b, :, p])
            if groups.size:
                kept_pixels.append(_numpy_nll(x[b:b + 1, p:p + 1], m[b:b + 1, groups, p:p + 1], pi[b:b + 1, groups, p:p + 1], False))
    np.testing.assert_allclose(got, np.mean(kept_pixels), rtol=1e-5)


def test_a_mask_the_same_over_the_groups_is_the_mask_of_the_pixels():
    # RTagger's masks are its step mask spread over the groups: every group enters
    x, m, pi, _ = _case(2)
    pixels = np.array([[True, False, True, True, True], [False, True, True, True, False]])
    packed = np.concatenate([m, pi], -1)
    over_groups = np.broadcast_to(pixels[:, None], (2, 3, 5))
    loss = MixtureNLL(sigma=SIGMA)
    a = float(loss(x, _masked(packed, over_groups)))
    b = float(loss(x, _masked(packed, pixels)))
    per_pixel = _numpy_nll(x, m, pi, False)
    np.testing.assert_allclose([a, b], per_pixel[pixels].mean(), rtol=1e-5)


@pytest.mark.parametrize("from_logits", [False, True], ids=["probabilities", "logits"])
def test_the_loss_does_not_change_when_the_groups_are_permuted(from_logits):
    x, m, pi, mask = _case(3)
    packed = np.concatenate([m, pi], -1)
    loss = MixtureNLL(sigma=SIGMA, from_logits=from_logits)
    order = [2, 0, 1]
    for mk in (None, mask):
        a = loss(x, packed if mk is None else _masked(packed, mk))
        b = loss(x, packed[:, order] if mk is None else _masked(packed[:, order], mk[:, order]))
        np.testing.assert_allclose(float(a), float(b), rtol=1e-6)


@pytest.mark.parametrize("from_logits", [False, True], ids=["probabilities", "logits"])
def test_a_group_mask_under_xla(from_logits):
    x, m, pi, mask = _case(4)
    packed = np.concatenate([m, pi], -1)
    packed[1, 2] = np.nan
    loss = MixtureNLL(sigma=SIGMA, from_logits=from_logits)

    def run(p, k):
        def total(q):
            return loss(x, _masked(q, k))

        return value_and_grads(total, [p])[:2]

    value, (grad,) = compiled(run)(keras.ops.convert_to_tensor(packed), keras.ops.convert_to_tensor(mask))
    np.testing.assert_allclose(float(value), _expected(x, m, pi, from_logits), rtol=1e-5)
    grad = keras.ops.convert_to_numpy(grad)
    assert np.all(np.isfinite(grad)) and np.all(grad[1, 2] == 0)


def _masked_and_reference(from_logits, sigma, dtype, policy_dtype=None):
    """The summed loss of a masked batch and of the same pixels and groups unmasked, with
    their gradients with respect to the packed ``y_pred`` (those of the reference put at
    the positions they came from): sample 0 keeps every group but has a pixel with no
    group (4), sample 1 only groups 0 and 1. The padding holds NaN and +-inf."""
    x, m, pi, mask = _case(5)
    if from_logits:
        pi = np.log(pi)
    mask[0, :, 4] = False
    packed = np.concatenate([m, pi], -1)
    padded = packed.copy()
    padded[1, 2] = np.nan
    padded[1, 2, ::2] = -np.inf
    padded[0, :, 4] = np.inf
    cast = (lambda a: keras.ops.cast(keras.ops.convert_to_tensor(a.astype("float64")), dtype))
    loss = MixtureNLL(sigma=sigma, from_logits=from_logits, reduction="sum", dtype=policy_dtype)

    def masked(p):
        return loss(cast(x), _masked(p, mask))

    def reference(p0, p1):  # sample 0 without pixel 4, sample 1 without group 2
        return loss(cast(x[:1, :4]), p0) + loss(cast(x[1:]), p1)

    return masked, reference, cast(padded), (cast(packed[:1, :, :4]), cast(packed[1:, :2]))


def _check_against_reference(masked, reference, padded, pieces, run=lambda f: f(), rtol=1e-6):
    (value, (grad,)), (want, (g0, g1)) = run(
        lambda: (value_and_grads(masked, [padded])[:2], value_and_grads(reference, list(pieces))[:2]))
    grad, g0, g1 = (keras.ops.convert_to_numpy(keras.ops.cast(g, "float64")) for g in (grad, g0, g1))
    assert np.isfinite(float(value)) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(float(value), float(want), rtol=rtol)
    expected = np.zeros(grad.shape)
    expected[:1, :, :4] = g0
    expected[1:, :2] = g1
    np.testing.assert_allclose(grad, expected, rtol=10 * rtol, atol=10 * rtol * np.abs(expected).max())
    assert np.all(grad[1, 2] == 0) and np.all(grad[0, :, 4] == 0)


@pytest.mark.parametrize("sigma", [0.7, 1e-5], ids=["sigma0.7", "sigma1e-5"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("from_logits", [False, True], ids=["probabilities", "logits"])
def test_masked_groups_change_neither_value_nor_gradient(from_logits, dtype, sigma):
    """The masked log-sum-exp over the groups (finite masking, no -inf): the loss and its
    gradients are those of the kept pixels and groups alone, eagerly and under XLA, also
    where every kept term lies far below MASK_VALUE (sigma=1e-5: terms of -1e10, where a
    plain -1e9 fill took the mixture) and at a pixel with no group kept."""
    if dtype == "float64":
        require_float64()
    masked, reference, padded, pieces = _masked_and_reference(from_logits, sigma, dtype, policy_dtype=dtype)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    _check_against_reference(masked, reference, padded, pieces, rtol=rtol)
    _check_against_reference(masked, reference, padded, pieces, run=lambda f: compiled(f)(), rtol=rtol)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_masked_groups_under_mixed_precision(policy):
    """A mixed policy's float16 / bfloat16 outputs: the loss computes in float32, finite,
    with the masked groups left out, as in float32 from the same (rounded) inputs. (At
    sigma=1e-5 the gradients, ~1e10, are beyond float16's range: sigma=0.7 here.)"""
    half = policy.replace("mixed_", "")
    masked, reference, padded, pieces = _masked_and_reference(True, SIGMA, half, policy_dtype=policy)
    value, (grad,) = value_and_grads(masked, [padded])[:2]
    assert keras.backend.standardize_dtype(value.dtype) == half
    grad = keras.ops.convert_to_numpy(keras.ops.cast(grad, "float32"))
    assert np.all(np.isfinite(grad)) and np.all(grad[1, 2] == 0) and np.all(grad[0, :, 4] == 0)
    masked32, *_ = _masked_and_reference(True, SIGMA, "float32")
    want, (want_grad,) = value_and_grads(masked32, [keras.ops.cast(padded, "float32")])[:2]
    want_grad = keras.ops.convert_to_numpy(want_grad)
    # (the value is rounded to the half dtype on return; the gradients come back in it too)
    np.testing.assert_allclose(float(keras.ops.cast(value, "float32")), float(want), rtol=1e-2)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-2, atol=1e-2 * np.abs(want_grad).max())
