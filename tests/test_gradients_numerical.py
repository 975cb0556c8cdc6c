"""Gradients checked against central finite differences in float64 (and float32 against
float64): ops, losses, routing, capsule and embedding layers.

The layer harness only checks that gradients exist and are finite. The code takes many
gradients through ``stop_gradient`` pairings (``stop_gradient(a - b) + b``: the value
of ``a``, the gradient of ``b``), gradient-free shifts and scales, and a custom gradient
(``ops.recomputed_where``); these tests check that the gradients they give are the true
derivatives, at generic points and at the special points (zero, tiny and huge vectors,
masked entries, ties, saturated logits, the switch points of the ``where`` branches,
EMRouting's rescaled poses and its "moments" fallback).

Small ops are differenced element by element; losses and layers along a few random
directions ``d`` (``(f(x + h d) - f(x - h d)) / 2h`` against ``<grad f(x), d>``, two
calls per direction, so the file stays fast), for every input and every weight.
``safe_norm`` and ``squash`` are compared with their closed-form Jacobians instead,
which stay exact where differences lose every digit (norms of 1e-300 or 1e300).
"""

import numpy as np
import pytest
import keras

from keras_capsules import losses as kl
from keras_capsules import ops as kops
from keras_capsules.layers import (
    CapsuleLength,
    CompositionalEmbedding,
    DynamicRouting,
    EMRouting,
    KMeansRouting,
)
from keras_capsules.layers import em_routing
from tests.backends import compiled, grads, require_float64, tensor, tensorflow_only

# Central differences in float64 with these steps are good to ~1e-9 relative here (the
# largest error seen over every case below was 1.1e-7, at poses of 1e40); a gradient
# that drops or doubles a term is off by O(1).
RTOL = 1e-6


@pytest.fixture(autouse=True)
def _float64():
    require_float64()


def _rounding(value, h):
    """What float64 rounding of a value of this size contributes to a difference over 2h."""
    return 100 * np.finfo(np.float64).eps * max(abs(float(value)), 1e-300) / h


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float64)


def _weighted_sum(outputs, weights):
    """``sum_k <w_k, out_k>`` in float64 (a scalar whose gradient is a vector-Jacobian product)."""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    total = 0.0
    for out, w in zip(outputs, weights):
        total = total + keras.ops.sum(keras.ops.cast(out, "float64") * tensor(w, "float64"))
    return total


def _output_weights(fn, args, rng, scales=None):
    outputs = fn(*[tensor(a) for a in args])
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [rng.normal(size=tuple(o.shape)) * (1.0 if scales is None else s) for o, s in
            zip(outputs, scales or [None] * len(outputs))]


def _assert_close(analytic, numeric, what, rtol=RTOL, atol=0.0):
    """Within ``rtol`` of the largest numeric derivative, plus ``atol``: the rounding of
    the differenced values (derivatives below it, e.g. 1e-22 of a saturated softmax,
    cannot be resolved by differences)."""
    analytic, numeric = np.asarray(analytic, np.float64), np.asarray(numeric, np.float64)
    assert np.all(np.isfinite(analytic)), f"{what}: non-finite analytic gradient {analytic}"
    scale = max(np.max(np.abs(numeric)) if numeric.size else 0.0, 1e-300)
    err = np.max(np.abs(analytic - numeric)) if numeric.size else 0.0
    assert err <= rtol * scale + atol, (
        f"{what}: analytic gradient off the central differences by {err:.3e} "
        f"(relative {err / scale:.3e})\nanalytic {analytic}\nnumeric  {numeric}"
    )


def check_elementwise(fn, x, h=1e-6, rtol=RTOL, seed=0):
    """Every partial derivative of ``<w, fn(x)>`` (random ``w``) against central differences."""
    x = np.asarray(x, np.float64)
    w = _output_weights(fn, [x], np.random.default_rng(seed))

    def scalar(z):
        return _weighted_sum(fn(z), w)

    (analytic,) = grads(scalar, [tensor(x)])
    atol = _rounding(_np(scalar(tensor(x))), h)
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = h * max(1.0, abs(x[i]))
        up, down = x.copy(), x.copy()
        up[i] += step
        down[i] -= step
        numeric[i] = (_np(scalar(tensor(up))) - _np(scalar(tensor(down)))) / (up[i] - down[i])
    _assert_close(_np(analytic), numeric, "d/dx", rtol, atol)


def check_directional(fn, args, wrt, variables=(), h=1e-6, rtol=RTOL, seed=0, n_dirs=2,
                      out_scales=None, joint=False):
    """Directional derivatives of ``<w, fn(*args)>`` along random directions, for each
    argument index in ``wrt`` and each variable, against central differences. Steps are
    relative to each entry's magnitude (at least 1e-3 of the largest), so tiny and huge
    entries alike move by a fraction ``h`` of themselves. ``joint``: one direction over all
    of them at once (a wrong gradient of any of them shows; fewer calls)."""
    rng = np.random.default_rng(seed)
    args = [np.asarray(a) for a in args]
    w = _output_weights(fn, args, rng, out_scales)
    variables = list(variables)

    def scalar(*tensors):
        return _weighted_sum(fn(*tensors), w)

    found = grads(scalar, [tensor(a) for a in args], variables)
    arg_grads, var_grads = found[: len(args)], found[len(args):]

    def typical_of(value):
        """Each entry's step scale: its magnitude, at least 1e-3 of the largest."""
        finite = np.abs(np.where(np.isfinite(value), value, 0.0))
        largest = np.max(finite) if finite.size and np.max(finite) > 0 else 1.0
        return np.maximum(finite, 1e-3 * largest)

    def derivative(value, set_value, gradient, what, typical=None):
        value = np.asarray(value, np.float64)
        gradient = np.zeros_like(value) if gradient is None else _np(gradient)
        assert np.all(np.isfinite(gradient)), f"{what}: non-finite gradient {gradient}"
        typical = typical_of(value) if typical is None else typical
        for _ in range(n_dirs):
            d = rng.normal(size=value.shape) * typical
            d = np.where(np.isfinite(value), d, 0.0)
            up, down = set_value(value + h * d), set_value(value - h * d)
            numeric = (up - down) / (2 * h)
            analytic = np.sum(gradient * d)
            _assert_close(analytic, numeric, what, rtol, _rounding(max(abs(up), abs(down)), h))

    if joint:
        # one direction over every input in `wrt` and every variable at once
        originals = [_np(v.value) for v in variables]
        values = [args[k].astype(np.float64) for k in wrt] + originals
        sizes = [v.size for v in values]
        flat = np.concatenate([v.ravel() for v in values])
        gradient = np.concatenate([
            (np.zeros(v.size) if g is None else _np(g).ravel())
            for v, g in zip(values, [arg_grads[k] for k in wrt] + list(var_grads))])

        def at(z):
            parts = np.split(z, np.cumsum(sizes)[:-1])
            zs = [tensor(a) for a in args]
            for k, part in zip(wrt, parts):
                zs[k] = tensor(part.reshape(args[k].shape), args[k].dtype)
            try:
                for v, part in zip(variables, parts[len(wrt):]):
                    v.assign(part.reshape(v.shape).astype(v.dtype))
                return _np(scalar(*zs))
            finally:
                for v, original in zip(variables, originals):
                    v.assign(original.astype(v.dtype))

        names = [f"input {k}" for k in wrt] + [v.path for v in variables]
        typical = np.concatenate([typical_of(v).ravel() for v in values])
        derivative(flat, at, gradient, "all of " + ", ".join(names), typical)
        return
    for k in wrt:
        def at(z, k=k):
            zs = [tensor(a) for a in args]
            zs[k] = tensor(z, args[k].dtype)
            return _np(scalar(*zs))

        derivative(args[k], at, arg_grads[k], f"input {k}")
    for v, g in zip(variables, var_grads):
        original = _np(v.value)

        def at(z, v=v):
            v.assign(z.astype(v.dtype))
            try:
                return _np(scalar(*[tensor(a) for a in args]))
            finally:
                v.assign(original.astype(v.dtype))

        derivative(original, at, g, v.path)


# ------------------------------------------------------------------ safe_norm, squash


def _unit_and_norm(x):
    largest = np.max(np.abs(x), axis=-1, keepdims=True)
    scaled = np.sqrt(np.sum((x / largest) ** 2, axis=-1, keepdims=True))
    return (x / largest) / scaled, scaled * largest


def _norm_vjp(x, w):
    """d <w, |x|> / dx = w x / |x|, in float64 without over- or underflow."""
    unit, _ = _unit_and_norm(x)
    return w[..., None] * unit


def _squash_vjp(x, w):
    """d <w, squash(x)> / dx for squash(x) = g(r) x, g(r) = r / (1 + r^2):
    w g(r) + u <w, u> g'(r) r, with u = x / r (forms that stay in range for any r)."""
    unit, r = _unit_and_norm(x)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        s = 1.0 / r
        big = r > 1
        g = np.where(big, 1.0 / (r + s), r / (1.0 + r * r))
        g_r = np.where(big, (s * s - 1.0) * s / (s * s + 1.0) ** 2, (1.0 - r * r) * r / (1.0 + r * r) ** 2)
    return w * g + unit * np.sum(w * unit, axis=-1, keepdims=True) * g_r


# Norms across every branch: subnormal-range vectors (scaled up by 2**600 / 2**86), the
# plain formula, squash's long-vector gradient (above 2**20), its unit-vector branch
# (above 2**50), and vectors scaled down (squared norms above 2**1000 / 2**100).
_SCALES = {
    "float64": [1e-300, 1e-160, 1e-40, 1e-10, 1.0, 1e5, 2.0**20 * 0.999, 2.0**20 * 1.001, 1e8, 1e14,
                2.0**50 * 0.999, 2.0**50 * 1.001, 1e30, 1e150, 1e160, 1e300],
    "float32": [1e-30, 1e-20, 1e-10, 1.0, 1e5, 2.0**20 * 0.999, 2.0**20 * 1.001, 1e8, 1e14,
                2.0**50 * 0.999, 2.0**50 * 1.001, 1e18, 1e20, 1e30, 1e35],
}


@pytest.mark.parametrize("dtype,scale", [(d, s) for d, ss in _SCALES.items() for s in ss])
def test_safe_norm_and_squash_gradients_are_the_derivatives(dtype, scale):
    # float32 against the float64 derivative at the float32 point: within float32 rounding.
    rtol = 1e-12 if dtype == "float64" else 2e-6
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(3, 4)) * scale).astype(dtype)
    x64 = x.astype(np.float64)
    w_norm, w_squash = rng.normal(size=(3,)), rng.normal(size=(3, 4))
    (g_norm,) = grads(lambda t: _weighted_sum(kops.safe_norm(t, epsilon=0.0), [w_norm]), [tensor(x)])
    (g_squash,) = grads(lambda t: _weighted_sum(kops.squash(t, epsilon=0.0), [w_squash]), [tensor(x)])
    _assert_close(_np(g_norm), _norm_vjp(x64, w_norm), "safe_norm", rtol)
    _assert_close(_np(g_squash), _squash_vjp(x64, w_squash), "squash", rtol)


def test_safe_norm_and_squash_at_zero_and_below_epsilon():
    # At 0 the norm has no derivative; its subgradient 0 is returned. Norms below epsilon
    # are 0 with a zero gradient (documented), and squash's true derivative there is
    # |v| I, at most epsilon.
    zero = np.zeros((2, 3))
    for fn in (kops.safe_norm, kops.squash):
        (g,) = grads(lambda t: keras.ops.sum(fn(t)), [tensor(zero)])
        np.testing.assert_array_equal(_np(g), 0.0)
    tiny = np.array([[1e-3, -2e-3, 0.0]])
    for fn in (kops.safe_norm, kops.squash):
        (g,) = grads(lambda t: keras.ops.sum(fn(t, epsilon=1e-2)), [tensor(tiny)])
        np.testing.assert_array_equal(_np(g), 0.0)
    # just above epsilon: the true derivative
    check_elementwise(lambda t: kops.safe_norm(t, epsilon=1e-2), np.array([[1e-2, 1e-3, 0.0]]) * 1.5, h=1e-8)


@pytest.mark.parametrize("axis", [-1, 0])
def test_squash_and_safe_norm_generic(axis):
    x = np.random.default_rng(1).normal(size=(3, 4))
    check_elementwise(lambda t: kops.squash(t, axis=axis), x)
    check_elementwise(lambda t: kops.safe_norm(t, axis=axis, keepdims=True), x)


# ------------------------------------------------------------------ softmaxes and the rest

_LOGITS = np.random.default_rng(2).normal(size=(3, 5))
_MASK = np.array([[1, 1, 0, 1, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]], bool)

_SOFTMAX_CASES = {
    "generic": (_LOGITS, None, -1),
    "axis0": (_LOGITS, None, 0),
    "all tied": (np.zeros((2, 4)), None, -1),
    "tied top": (np.array([[1.0, 1.0, 0.5, 1.0]]), None, -1),
    "masked, a row fully masked": (_LOGITS, _MASK, -1),
    "large logits": (_LOGITS * 30.0, None, -1),
    "masked, large logits": (_LOGITS * 30.0, _MASK, -1),
    "two near-tied logits 30 above the rest": (np.array([[0.0, 30.0, 30.001, -5.0]]), None, -1),
    "masked huge logit, kept ones 40 apart": (np.array([[0.0, -40.0, 2.0, 1e9]]), np.array([[1, 1, 1, 0]], bool), -1),
}


@pytest.mark.parametrize("softmax", ["shifted_softmax", "masked_softmax"])
@pytest.mark.parametrize("case", list(_SOFTMAX_CASES))
def test_softmaxes(softmax, case):
    logits, mask, axis = _SOFTMAX_CASES[case]
    fn = getattr(kops, softmax)
    check_elementwise(lambda t: fn(t, axis=axis, mask=None if mask is None else tensor(mask)), logits)


def test_saturated_softmax_gradients_vanish():
    # Rows whose weights are 0 and 1 to float64: the derivative is 0 (or below 1e-100).
    for fn in (kops.shifted_softmax, kops.masked_softmax):
        for s in (1e3, 1e6, 1e12):
            for mask in (None, tensor(_MASK)):
                (g,) = grads(lambda t: _weighted_sum(fn(t, mask=mask), [np.ones((3, 5)) + _LOGITS]),
                             [tensor(_LOGITS * s)])
                assert np.all(np.abs(_np(g)) < 1e-100)


def _unpack(flat, shape):
    return keras.ops.reshape(flat[: int(np.prod(shape))], shape)


_OTHER_OPS = {
    "tanh": (lambda t: kops.tanh(t), _LOGITS * 3),
    "mean": (lambda t: kops.mean(t, axis=1), _LOGITS),
    "maximum": (lambda t: kops.maximum(t[:, :2], t[:, 2:4]), _LOGITS),
    "max_with_initial": (lambda t: kops.max_with_initial(t, axis=1, initial=0.0), _LOGITS),
    "min_with_initial": (lambda t: kops.min_with_initial(t, axis=1, initial=0.0), _LOGITS),
    "matmul": (lambda t: kops.matmul(t[:, :2], keras.ops.reshape(t[0, :4], (2, 2))), _LOGITS),
    # (inputs [1, 3, 3, 2] and kernels [2, 2, 2, 1] packed in one flat vector of 36)
    "conv": (lambda t: kops.conv(_unpack(t, (1, 3, 3, 2)), _unpack(t[18:], (2, 2, 2, 1)), padding="same"),
             np.random.default_rng(3).normal(size=(26,))),
    "conv_sum": (lambda t: kops.conv_sum([_unpack(t, (1, 3, 3, 1)), _unpack(t[9:], (1, 3, 3, 1))],
                                         [_unpack(t[18:], (2, 2, 1, 1)), _unpack(t[22:], (2, 2, 1, 1))]),
                 np.random.default_rng(4).normal(size=(26,))),
}


@pytest.mark.parametrize("name", list(_OTHER_OPS))
def test_other_ops(name):
    fn, x = _OTHER_OPS[name]
    check_elementwise(fn, x)


# ------------------------------------------------------------------ losses


def _masked(x, mask):
    from keras.src.backend import set_keras_mask

    y = keras.ops.multiply(x, 1.0)  # a new tensor that carries the mask
    set_keras_mask(y, tensor(mask))
    return y


_IDS = np.array([0, 2, 4, 1])
_LENGTHS = np.random.default_rng(3).uniform(0.0, 1.0, size=(4, 5))
_SAMPLE_WEIGHT = np.array([1.0, 0.5, 0.0, 2.0])
_SAMPLE_MASK = np.array([1, 0, 1, 1], bool)


_ALL_TERMS = ("margin", "focal", "cross")


@pytest.mark.parametrize("terms,reduction,extra", [
    (terms, "sum_over_batch_size", extra)
    for terms in [("margin",), ("focal",), ("cross",), _ALL_TERMS]
    for extra in ["plain", "one-hot + sample weight", "mask"]
] + [(_ALL_TERMS, reduction, extra) for reduction in ["sum", "none"] for extra in ["one-hot + sample weight", "mask"]])
def test_capsule_loss(terms, reduction, extra):
    loss = kl.CapsuleLoss(terms=terms, reduction=reduction, dtype="float64")
    if extra == "plain":
        fn = lambda y: loss(_IDS, y)  # noqa: E731
    elif extra == "mask":
        fn = lambda y: loss(_IDS, _masked(y, _SAMPLE_MASK))  # noqa: E731
    else:
        fn = lambda y: loss(np.eye(5)[_IDS], y, sample_weight=_SAMPLE_WEIGHT)  # noqa: E731
    check_directional(fn, [_LENGTHS], [0], n_dirs=3)


def test_margin_loss_per_token_mask_and_focal_variants():
    lengths = np.random.default_rng(4).uniform(size=(2, 3, 4))
    loss = kl.MarginLoss(dtype="float64")
    check_elementwise(lambda y: loss(np.array([[0, 1, 2], [1, 1, 0]]),
                                     _masked(y, np.array([[1, 1, 0], [1, 0, 0]], bool))), lengths)
    check_elementwise(lambda y: kl.CapsuleLoss(terms=("focal",), focal_gamma=0.5, dtype="float64")(_IDS, y),
                      _LENGTHS)
    check_elementwise(lambda y: kl.CapsuleLoss(terms=("focal", "cross"), dtype="float64")(_IDS, y),
                      _LENGTHS * 100, h=1e-7)
    for term in (kl.margin_term, kl.focal_term, kl.cross_term):
        check_elementwise(lambda y: term(tensor(np.eye(5)[_IDS]), y), _LENGTHS)


def _mixture_case(from_logits, logit_scale=1.0):
    rng = np.random.default_rng(5)
    k, h, w, c = 3, 2, 2, 2
    x = rng.normal(size=(2, h, w, c))
    m = rng.normal(size=(2, k, h, w, c))
    pi = rng.normal(size=(2, k, h, w, 1)) * logit_scale
    if not from_logits:
        pi = np.exp(pi) / np.exp(pi).sum(axis=1, keepdims=True)
    pixels = rng.uniform(size=(2, h, w)) > 0.3
    groups = rng.uniform(size=(2, k, h, w)) > 0.4
    groups[0, :, 0, 0] = False  # a pixel with no group left
    return x, np.concatenate([m, pi], axis=-1), pixels, groups


@pytest.mark.parametrize("from_logits", [True, False])
@pytest.mark.parametrize("extra", ["plain", "sample weight", "pixel mask", "group mask",
                                   "group mask + sample weight", "function"])
def test_mixture_nll(from_logits, extra):
    x, packed, pixels, groups = _mixture_case(from_logits)
    loss = kl.MixtureNLL(from_logits=from_logits, dtype="float64")
    fn = {
        "plain": lambda y: loss(x, y),
        "sample weight": lambda y: loss(x, y, sample_weight=np.array([1.0, 3.0])),
        "pixel mask": lambda y: loss(x, _masked(y, pixels)),
        "group mask": lambda y: loss(x, _masked(y, groups)),
        "group mask + sample weight": lambda y: loss(x, _masked(y, groups), sample_weight=np.array([0.5, 2.0])),
        "function": lambda y: kl.mixture_nll(tensor(x), y[..., :2], y[..., 2:], 0.5, from_logits=from_logits),
    }[extra]
    check_directional(fn, [packed], [0], n_dirs=3)


@pytest.mark.parametrize("logits", ["large (x100)", "all tied"])
def test_mixture_nll_group_mask_shift(logits):
    # The masked log-softmax shifts by its largest kept logit without a gradient.
    x, packed, _, groups = _mixture_case(True, logit_scale=100.0 if logits.startswith("large") else 1.0)
    if logits == "all tied":
        packed[..., -1] = 0.0
    loss = kl.MixtureNLL(from_logits=True, dtype="float64")
    check_directional(lambda y: loss(x, _masked(y, groups)), [packed], [0], n_dirs=3)
    check_directional(lambda y: loss(x, y), [packed], [0], n_dirs=3)


@pytest.mark.parametrize("extra", ["plain", "sample weight", "mask"])
def test_piano_roll_nll(extra):
    from applications.music import PianoRollNLL

    rng = np.random.default_rng(6)
    rolls = (rng.uniform(size=(2, 3, 4)) > 0.5).astype("float64")
    logits = rng.normal(size=(2, 3, 4)) * 3
    weights = np.array([[1.0, 1.0, 0.0], [1.0, 0.5, 0.0]])
    loss = PianoRollNLL(dtype="float64")
    fn = {
        "plain": lambda y: loss(rolls, y),
        "sample weight": lambda y: loss(rolls, y, sample_weight=weights),
        "mask": lambda y: loss(rolls, _masked(y, weights > 0)),
    }[extra]
    check_directional(fn, [logits], [0], n_dirs=3)


# ------------------------------------------------------------------ layers

_U = np.random.default_rng(7).normal(size=(2, 4, 3))
_U_MASKS = {
    "no mask": None,
    "padded inputs": np.array([[1, 1, 0, 1], [1, 0, 0, 0]], bool),
    "a fully padded sample": np.array([[1, 1, 0, 1], [0, 0, 0, 0]], bool),
}


def _layer_fn(layer, mask=None):
    def fn(*tensors):
        inputs = list(tensors) if len(tensors) > 1 else tensors[0]
        return layer(inputs) if mask is None else layer(inputs, mask=tensor(mask))
    return fn


def _check_layer(layer, args, wrt, mask=None, **kwargs):
    layer(*[[tensor(a) for a in args] if len(args) > 1 else tensor(args[0])])  # build
    kwargs.setdefault("joint", True)
    kwargs.setdefault("n_dirs", 1)  # (one random direction: a wrong term shows all the same)
    check_directional(_layer_fn(layer, mask), args, wrt, layer.trainable_weights, **kwargs)


# (iterations, mask): one iteration, and several with each kind of padding
_ITERS_AND_MASKS = [(1, "no mask"), (3, "no mask"), (3, "padded inputs"), (2, "a fully padded sample")]


@pytest.mark.parametrize("cls", [DynamicRouting, KMeansRouting])
@pytest.mark.parametrize("shared_weights", [True, False])
@pytest.mark.parametrize("n_iters,mask", _ITERS_AND_MASKS)
def test_vote_routing(cls, n_iters, shared_weights, mask):
    layer = cls(n_out=3, d_out=2, n_iters=n_iters, shared_weights=shared_weights, return_couplings=True,
                dtype="float64")
    _check_layer(layer, [_U], [0], _U_MASKS[mask])


@pytest.mark.parametrize("cls", [DynamicRouting, KMeansRouting])
@pytest.mark.parametrize("inputs", ["identical inputs", "large (x1e3)", "tiny (x1e-4)", "dot similarity"])
def test_vote_routing_special_points(cls, inputs):
    u = {"identical inputs": np.repeat(_U[:, :1], 4, axis=1), "large (x1e3)": _U * 1e3,
         "tiny (x1e-4)": _U * 1e-4, "dot similarity": _U}[inputs]
    kwargs = {"similarity": "dot"} if inputs == "dot similarity" else {}
    if kwargs and cls is DynamicRouting:
        pytest.skip("dot similarity is KMeansRouting's")
    layer = cls(n_out=3, d_out=2, n_iters=3, dtype="float64", **kwargs)
    _check_layer(layer, [u], [0], h=1e-6)


def test_capsule_length():
    _check_layer(CapsuleLength(dtype="float64"), [_U], [0])


@pytest.mark.parametrize("codes", ["learned", "fixed"])
def test_compositional_embedding(codes):
    ids = np.array([[1, 2, 9], [0, 5, 5]])
    fixed = np.random.default_rng(8).integers(0, 4, size=(10, 2)) if codes == "fixed" else None
    layer = CompositionalEmbedding(10, 3, num_codebooks=2, num_codewords=4, codes=fixed, dtype="float64")
    layer(tensor(ids))
    # (the integer ids are no argument of the gradient: JAX refuses integer inputs there)
    check_directional(lambda: layer(tensor(ids)), [], [], layer.trainable_weights, n_dirs=3)


_A = np.random.default_rng(9).normal(size=(2, 4))
_MU = np.random.default_rng(10).normal(size=(2, 4, 2, 3))
_EM_MASKS = {
    "no mask": None,
    "mask": np.array([[1, 1, 0, 1], [1, 1, 1, 1]], bool),
    "a fully masked sample": np.array([[1, 1, 0, 1], [0, 0, 0, 0]], bool),
}
_EM_INIT = dict(bias_initializer="random_normal", beta_initializer="random_normal")


def _em_configs():
    for algorithm in ("votes", "moments"):
        for n_out in (3, None):
            for n_inp in (None, 4):
                if algorithm == "moments" and n_inp is not None:
                    continue  # "moments" needs shared weights
                yield algorithm, n_out, n_inp


@pytest.mark.parametrize("algorithm,n_out,n_inp", list(_em_configs()))
@pytest.mark.parametrize("n_iters,mask", [(1, "no mask"), (3, "mask"), (2, "a fully masked sample")])
def test_em_routing(algorithm, n_out, n_inp, n_iters, mask):
    layer = EMRouting(n_out=n_out, d_out=2, n_iters=n_iters, n_inp=n_inp, algorithm=algorithm, dtype="float64",
                      **_EM_INIT)
    _check_layer(layer, [_A, _MU], [0, 1], _EM_MASKS[mask])


@pytest.mark.parametrize("algorithm", ["votes", "moments"])
def test_em_routing_excluded_by_minus_inf(algorithm):
    a = _A.copy()
    a[0, 2] = -np.inf
    layer = EMRouting(n_out=3, d_out=2, n_iters=3, algorithm=algorithm, dtype="float64", **_EM_INIT)
    _check_layer(layer, [a, _MU], [0, 1])  # (no step along the -inf entry)


@pytest.mark.parametrize("fallback,residuals", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("n_out", [3, None])
def test_em_routing_moments_fallbacks(monkeypatch, fallback, residuals, n_out):
    # The batch handed to "votes" (its gradient through recomputed_where's custom
    # gradient) and the variances summed from the residuals, forced on.
    monkeypatch.setattr(em_routing, "_MOMENTS_TOLERANCE", -1.0 if fallback else np.inf)
    monkeypatch.setattr(em_routing, "_VARIANCE_TOLERANCE", -1.0 if residuals else np.inf)
    layer = EMRouting(n_out=n_out, d_out=2, n_iters=3, algorithm="moments", dtype="float64", **_EM_INIT)
    _check_layer(layer, [_A, _MU], [0, 1], _EM_MASKS["mask"])


@pytest.mark.parametrize("algorithm", ["votes", "moments"])
@pytest.mark.parametrize("scale", [1e5, 1e40])
def test_em_routing_at_large_poses(algorithm, scale):
    # Poses (and biases) of `scale`; float64 rescales above 2**128 with a gradient-free
    # scale. Outputs weighed by their scale (a_out 1, mu_out 1/s, sig2_out 1/s^2).
    layer = EMRouting(n_out=3, d_out=2, n_iters=3, algorithm=algorithm, dtype="float64",
                      bias_initializer=keras.initializers.RandomNormal(stddev=scale),
                      beta_initializer="random_normal")
    layer([tensor(_A), tensor(_MU * scale)])
    check_directional(_layer_fn(layer), [_A, _MU * scale], [0, 1], layer.trainable_weights,
                      out_scales=[1.0, 1.0 / scale, 1.0 / scale**2], joint=True, n_dirs=1)


@pytest.mark.parametrize("algorithm", ["votes", "moments"])
@pytest.mark.parametrize("scale", [1e5, 1e12])
def test_em_routing_float32_rescaled_matches_float64(algorithm, scale):
    # float32 routes poses above 2**16 rescaled (scale and unscale without gradient);
    # float64 does not: their gradients agree to float32 rounding.
    rng = np.random.default_rng(11)
    layers = {d: EMRouting(n_out=3, d_out=2, n_iters=3, algorithm=algorithm, dtype=d) for d in ("float64", "float32")}
    mu = (_MU * scale).astype(np.float32).astype(np.float64)
    for d, layer in layers.items():
        layer([tensor(_A, d), tensor(mu, d)])
    values = [rng.normal(size=tuple(v.shape)) for v in layers["float64"].weights]
    values[1] = values[1] * scale  # the bias, in pose units
    for layer in layers.values():
        layer.set_weights([v.astype(np.float32).astype(layer.compute_dtype) for v in values])
    weights = [rng.normal(size=(2, 3)), rng.normal(size=(2, 3, 2, 2)) / scale, rng.normal(size=(2, 3, 2, 2)) / scale**2]
    found = {}
    for d, layer in layers.items():
        found[d] = grads(lambda a, m, layer=layer: _weighted_sum(layer([a, m]), weights),
                         [tensor(_A, d), tensor(mu, d)], layer.trainable_weights)
    for g64, g32 in zip(found["float64"], found["float32"]):
        _assert_close(_np(g32), _np(g64), "float32 vs float64", rtol=2e-5)


def test_em_routing_traced_fallbacks(monkeypatch):
    # Traced: recomputed_where's custom gradient is a conditional in the graph there, not
    # the eager branch taken. (Compiled with XLA it passed too; left out for the time its
    # compilation takes, ~11 s.)
    tensorflow_only("the traced custom gradient of recomputed_where")
    monkeypatch.setattr(em_routing, "_MOMENTS_TOLERANCE", -1.0)
    monkeypatch.setattr(em_routing, "_VARIANCE_TOLERANCE", -1.0)
    layer = EMRouting(n_out=3, d_out=2, n_iters=2, algorithm="moments", dtype="float64", **_EM_INIT)
    mask = tensor(_EM_MASKS["mask"])
    layer([tensor(_A), tensor(_MU)], mask=mask)
    fn = compiled(lambda a, mu: layer([a, mu], mask=mask), jit_compile=False)
    check_directional(fn, [_A, _MU], [0, 1], layer.trainable_weights, joint=True, n_dirs=1)
