"""RTagger, MixtureNLL and adjusted_mutual_info."""

import functools

import keras
import numpy as np
import pytest

from keras_capsules.layers import RTagger, level_spec
from keras_capsules.losses import MixtureNLL, mixture_nll
from keras_capsules.metrics import adjusted_mutual_info
from tests.backends import BACKEND, float64_enabled, grads, value_and_grads
from tests.layers.rladder.shared import BlankFramesMasked, check_constraints_reach_every_kernel_and_bias
from tests.layers.rladder.loops import assert_compiles_as_one_torch_graph, assert_same as _assert_same, loop_twins
from tests.harness import run_layer_contract, two_cpu_strategy

CONV_LEVELS = [level_spec("convlstm", 2), level_spec("gated", 3)]


def _images(*shape, seed=0):
    return np.random.default_rng(seed).uniform(size=shape).astype("float32")


def test_outputs_are_distributions_and_means():
    layer = RTagger(3, CONV_LEVELS, n_iters=2, sigma=0.3)
    pi, m = layer(_images(2, 4, 4, 1))
    assert pi.shape == (2, 2, 3, 4, 4, 1) and m.shape == (2, 2, 3, 4, 4, 1)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pi).sum(axis=2), 1.0, rtol=1e-5)
    assert np.all(keras.ops.convert_to_numpy(pi) > 0)
    assert layer.compute_output_shape((None, 4, 4, 1)) == [(None, 2, 3, 4, 4, 1)] * 2

    seq = RTagger(2, [level_spec("gated", 4)])
    pi, m = seq(_images(2, 3, 5))  # sequence of vectors: 5 pixels of one channel
    assert pi.shape == (2, 3, 2, 5, 1) and m.shape == (2, 3, 2, 5, 1)


def test_groups_share_one_ladder():
    """The weights do not grow with the number of groups (only the fixed initial masks do)."""
    small, large = RTagger(2, CONV_LEVELS, n_iters=1), RTagger(5, CONV_LEVELS, n_iters=1)
    small(_images(2, 4, 4, 1))
    large(_images(2, 4, 4, 1))
    shapes = lambda layer: {w.path.split("/", 1)[1]: tuple(w.shape) for w in layer.weights}  # noqa: E731
    a, b = shapes(small), shapes(large)
    assert a.pop("initial_logits") == (2, 4, 4, 1) and b.pop("initial_logits") == (5, 4, 4, 1)
    assert a == b


@pytest.mark.parametrize(
    "kwargs,shape",
    [
        (dict(n_groups=2, levels=CONV_LEVELS, n_iters=2), (4, 4, 4, 1)),
        (dict(n_groups=3, levels=[level_spec("gated", 3)], sigma=0.2), (4, 1, 4)),  # sequence
        # the posterior's options with a numeric mask_damping, and group codes with a
        # learned one: each was a case of its own (a contract run compiles the tagger
        # several times, ~10 s a case); the options are independent of each other
        (dict(n_groups=2, levels=CONV_LEVELS, n_iters=2, mask_update="posterior", initial_mask_scale=3,
              posterior_sigma=0.7, initial_mask_stddev=3.0, mask_damping=0.5), (4, 4, 4, 1)),
        (dict(n_groups=3, levels=CONV_LEVELS, n_iters=2, group_codes=True, mask_damping="learned"), (4, 4, 4, 1)),
    ],
)
def test_layer_contract(kwargs, shape, tmp_path):
    run_layer_contract(RTagger, kwargs, _images(*shape), tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(n_groups=1, levels=CONV_LEVELS), "Received: n_groups=1"),
        (dict(n_groups=2, levels=CONV_LEVELS, sigma=0.0), "Received: sigma=0.0"),
        (dict(n_groups=2, levels=CONV_LEVELS, n_iters=-1), "Received: n_iters=-1"),
        (dict(n_groups=2, levels="gated"), "Received: levels="),
        (dict(n_groups=2, levels=CONV_LEVELS, mask_update="em"), "Received: mask_update='em'"),
        (dict(n_groups=2, levels=CONV_LEVELS, initial_mask_scale=0), "Received: initial_mask_scale=0"),
        (dict(n_groups=2, levels=CONV_LEVELS, posterior_sigma=0), "Received: posterior_sigma=0"),
        (dict(n_groups=2, levels=CONV_LEVELS, sigma=float("nan")), "Received: sigma=nan"),
        # audit (2026-11-27): 1 / (2 sigma^2) overflowed float32, and every pi was NaN
        (dict(n_groups=2, levels=CONV_LEVELS, sigma=1e-20), "sigma` is too small.*Received: sigma=1e-20"),
        (dict(n_groups=2, levels=CONV_LEVELS, posterior_sigma=1e-200), "Received: posterior_sigma=1e-200"),
        (dict(n_groups=2, levels=CONV_LEVELS, initial_mask_stddev=float("inf")), "initial_mask_stddev=inf"),
        (dict(n_groups=2, levels=CONV_LEVELS, initial_mask_stddev=-1.0), "Received: initial_mask_stddev=-1.0"),
        # helper-179: finite, but the initial logits overflowed float32: every pi and m NaN
        (dict(n_groups=2, levels=CONV_LEVELS, initial_mask_stddev=1e39),
         "initial_mask_stddev` is too large.*Received: initial_mask_stddev=1e\\+39"),
        (dict(n_groups=2, levels=CONV_LEVELS, random_initial_masks="no"), "Received: random_initial_masks='no'"),
        (dict(n_groups=2, levels=CONV_LEVELS, group_codes="yes"), "Received: group_codes='yes'"),
        (dict(n_groups=2, levels=CONV_LEVELS, mask_damping=1.0), r"in \[0, 1\). Received: mask_damping=1.0"),
        (dict(n_groups=2, levels=CONV_LEVELS, mask_damping=-0.1), "Received: mask_damping=-0.1"),
        (dict(n_groups=2, levels=CONV_LEVELS, mask_damping="learnt"), r"\[0, 1\) or 'learned'. Received: mask_damping='learnt'"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RTagger(**kwargs)


def test_bad_input_shapes():
    with pytest.raises(ValueError, match=r"\[batch, H, W, C\] or \[batch, D\]"):
        RTagger(2, CONV_LEVELS, n_iters=2)(_images(2, 3, 4, 4, 1))
    layer = RTagger(2, CONV_LEVELS, n_iters=1)
    layer(_images(2, 4, 4, 1))
    with pytest.raises(ValueError, match="built for inputs with pixels"):
        layer(_images(2, 4, 4, 2))


def test_posterior_masks_are_the_e_step_of_the_learned_ones():
    """mask_update="posterior": pi ∝ (the read-out's pi) * N(x; m_k, sigma^2), same means."""
    x = _images(2, 5, 5, 1)
    kwargs = dict(n_groups=3, levels=CONV_LEVELS, n_iters=2, sigma=0.3)
    learned, posterior = RTagger(**kwargs), RTagger(mask_update="posterior", **kwargs)
    learned(x)
    posterior(x)
    posterior.set_weights(learned.get_weights())
    pi_l, m_l = (keras.ops.convert_to_numpy(t) for t in learned(x))
    pi_p, m_p = (keras.ops.convert_to_numpy(t) for t in posterior(x))
    # the first iteration's read-out is the same in both; its means too
    np.testing.assert_allclose(m_p[:, 0], m_l[:, 0], atol=1e-5)
    want = pi_l[:, 0] * np.exp(-((x[:, None] - m_l[:, 0]) ** 2) / (2 * 0.3**2))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(pi_p[:, 0], want, atol=1e-5)
    assert posterior.get_config()["mask_update"] == "posterior"


def test_posterior_sigma_and_initial_mask_stddev():
    """posterior_sigma: the E-step's sigma only; initial_mask_stddev: scales the initial logits."""
    x = _images(2, 5, 5, 1)
    kwargs = dict(n_groups=3, levels=CONV_LEVELS, n_iters=2, sigma=0.3, mask_update="posterior")
    plain, soft = RTagger(**kwargs), RTagger(posterior_sigma=0.6, **kwargs)
    plain(x)
    soft(x)
    soft.set_weights(plain.get_weights())
    # the first iteration's read-out is the same: recover its prior from the plain layer's E-step
    pi_p, m_p = (keras.ops.convert_to_numpy(t)[:, 0] for t in plain(x))
    pi_s, m_s = (keras.ops.convert_to_numpy(t)[:, 0] for t in soft(x))
    np.testing.assert_allclose(m_s, m_p, atol=1e-5)
    sq = (x[:, None] - m_p) ** 2
    want = pi_p * np.exp(sq / (2 * 0.3**2) - sq / (2 * 0.6**2))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(pi_s, want, rtol=1e-4, atol=1e-5)
    assert soft.get_config()["posterior_sigma"] == 0.6 and plain.get_config()["posterior_sigma"] is None

    sharp = RTagger(initial_mask_stddev=2.5, **kwargs)
    sharp(x)
    assert sharp.get_config()["initial_mask_stddev"] == 2.5
    # the same as a layer of stddev 1 whose fixed initial logits are 2.5 times as large
    weights = [w * 2.5 if v.path.endswith("initial_logits") else w
               for v, w in zip(plain.weights, plain.get_weights())]
    sharp.set_weights(plain.get_weights())
    plain.set_weights(weights)
    for a, b in zip(sharp(x), plain(x)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-5)


@pytest.mark.parametrize("mask_update", ["learned", "posterior"])
def test_mask_damping_keeps_a_share_of_the_previous_masks(mask_update):
    """pi_t = d * pi_(t-1) + (1 - d) * (the undamped update); at t = 1 pi_0 is the initial masks."""
    x = _images(2, 5, 5, 1)
    kwargs = dict(n_groups=3, levels=CONV_LEVELS, n_iters=3, sigma=0.3, mask_update=mask_update)
    plain, damped = RTagger(**kwargs), RTagger(mask_damping=0.25, **kwargs)
    plain(x)
    damped(x)
    damped.set_weights(plain.get_weights())
    pi_p, m_p = (keras.ops.convert_to_numpy(t) for t in plain(x))
    pi_d, m_d = (keras.ops.convert_to_numpy(t) for t in damped(x))
    logits = keras.ops.convert_to_numpy(damped.initial_logits)[None]
    initial = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(m_d[:, 0], m_p[:, 0], atol=1e-5)  # same first read-out
    np.testing.assert_allclose(pi_d[:, 0], 0.25 * initial + 0.75 * pi_p[:, 0], atol=1e-5)
    np.testing.assert_allclose(pi_d.sum(axis=2), 1.0, rtol=1e-5)
    # later iterations see other masks, so they differ from the undamped layer's
    assert np.abs(m_d[:, 1] - m_p[:, 1]).max() > 1e-5
    assert damped.get_config()["mask_damping"] == 0.25 and plain.get_config()["mask_damping"] == 0.0


@pytest.mark.parametrize("x", [_images(2, 5, 5, 1), _images(2, 6)])
def test_learned_mask_damping_starts_at_a_tenth_and_the_cost_reaches_its_gate(x):
    """mask_damping='learned': d = sigmoid(mean over groups of o_k w + b), 0.1 before training."""
    levels = CONV_LEVELS if len(x.shape) == 4 else [level_spec("gated", 3)]
    kwargs = dict(n_groups=3, levels=levels, n_iters=3, sigma=0.3)
    fixed, learned = RTagger(mask_damping=0.1, **kwargs), RTagger(mask_damping="learned", **kwargs)
    fixed(x)
    learned(x)
    shared = [v for v in learned.weights if "damping" not in v.path]
    assert len(shared) == len(fixed.weights)
    assert [v.path.split("/")[-1] for v in learned.weights if "damping" in v.path] == [
        "damping_kernel", "damping_bias"]
    for v, w in zip(shared, fixed.weights):
        v.assign(w)
    for a, b in zip(learned(x), fixed(x)):  # w = 0: the same as a fixed share of 0.1
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-5)
    # with w != 0 the share varies from pixel to pixel, and the masks still sum to 1
    learned.damping_kernel.assign(np.linspace(-2.0, 2.0, learned.damping_kernel.shape[0])[:, None])
    pi, _ = (keras.ops.convert_to_numpy(t) for t in learned(x))
    pi_f, _ = (keras.ops.convert_to_numpy(t) for t in fixed(x))
    np.testing.assert_allclose(pi.sum(axis=2), 1.0, rtol=1e-5)
    assert np.abs(pi - pi_f).max() > 1e-4
    # the cost reaches the gate
    def cost(images):
        pi, m = learned(images)
        return keras.ops.sum(pi * keras.ops.square(m - 0.5))

    gate_grads = grads(cost, [x], [learned.damping_kernel, learned.damping_bias])[1:]
    assert all(g is not None and np.abs(keras.ops.convert_to_numpy(g)).max() > 0 for g in gate_grads)
    config = learned.get_config()
    assert config["mask_damping"] == "learned"
    assert RTagger.from_config(config).mask_damping == "learned"


@pytest.mark.parametrize("levels,x", [(CONV_LEVELS, _images(2, 4, 4, 1)), ([level_spec("gated", 3)], _images(2, 6))])
def test_group_codes_let_groups_with_equal_inputs_differ(levels, x):
    """Equal masks and means give every group the same input: only the codes tell them apart."""
    kwargs = dict(n_groups=3, levels=levels, n_iters=2, initial_mask_stddev=1e-9,
                  bias_initializer="glorot_uniform")  # nonzero biases: a zero input gives no zero output
    plain, coded = RTagger(**kwargs), RTagger(group_codes=True, **kwargs)
    outputs = {}
    for name, layer in (("plain", plain), ("coded", coded)):
        outputs[name] = [keras.ops.convert_to_numpy(t) for t in layer(x)]
    for t in outputs["plain"]:  # exchangeable groups: identical
        np.testing.assert_allclose(t, t[:, :, :1].repeat(3, axis=2), atol=1e-6)
    for t in outputs["coded"]:  # every pair of groups differs somewhere
        for a, b in ((0, 1), (0, 2), (1, 2)):
            assert np.abs(t[:, :, a] - t[:, :, b]).max() > 1e-4
    # the ladder reads K more channels (and the read-out as many more), nothing else changes
    n_in = lambda layer: layer.readout_kernel.shape[0]  # noqa: E731
    assert n_in(coded) == n_in(plain) + 3 and coded.readout_kernel.shape[1] == plain.readout_kernel.shape[1]
    assert coded.get_config()["group_codes"] is True and plain.get_config()["group_codes"] is False


def test_smooth_initial_masks():
    """initial_mask_scale: one random logit per scale x scale pixels, upsampled."""
    layer = RTagger(2, CONV_LEVELS, n_iters=1, initial_mask_scale=3)
    x = _images(2, 7, 7, 1)
    pi, _ = layer(x)
    assert tuple(layer.initial_logits.shape) == (2, 3, 3, 1) and pi.shape == (2, 1, 2, 7, 7, 1)
    up = layer._upsample_logits(keras.ops.convert_to_tensor(layer.initial_logits)[None], (7, 7))
    up = keras.ops.convert_to_numpy(up)[0, ..., 0]
    assert up.shape == (2, 7, 7)
    # smooth: neighbouring pixels differ far less than independent draws would
    assert np.abs(np.diff(up, axis=-1)).mean() < 0.5 * np.abs(np.diff(keras.ops.convert_to_numpy(layer.initial_logits)[..., 0])).mean()
    pi_train, _ = layer(x, training=True)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(pi_train)))
    assert layer.get_config()["initial_mask_scale"] == 3
    with pytest.raises(ValueError, match="needs image inputs"):
        RTagger(2, [level_spec("gated", 3)], n_iters=1, initial_mask_scale=2)(_images(2, 6))
    # helper-179: a scale covering the whole image gave one logit per group (constant masks)
    for scale in (7, 50):
        with pytest.raises(ValueError, match=f"a scale of {scale} gives one initial mask logit per group for all of "
                                             "an image of 7x7 pixels"):
            RTagger(2, CONV_LEVELS, n_iters=1, initial_mask_scale=scale)(x)
    assert RTagger(2, CONV_LEVELS, n_iters=1, initial_mask_scale=6)(x)[0].shape == (2, 1, 2, 7, 7, 1)


def test_a_list_of_inputs_to_a_built_tagger_is_refused():
    # helper-179: "'list' object has no attribute 'shape'" once built
    layer = RTagger(2, CONV_LEVELS, n_iters=1)
    layer(_images(2, 4, 4, 1))
    with pytest.raises(ValueError, match=r"RTagger expects one tensor .*Received: a list of 1 inputs"):
        layer([_images(2, 4, 4, 1)])


def _numpy_nll(x, m, pi, sigma):
    dens = np.exp(-((x[:, None] - m) ** 2).sum(-1) / (2 * sigma**2)) / (
        (2 * np.pi * sigma**2) ** (m.shape[-1] / 2)
    )
    return -np.log((pi[..., 0] * dens).sum(axis=1))


def test_mixture_nll_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 2)).astype("float32")  # [b, pixels, C]
    m = rng.normal(size=(3, 5, 4, 2)).astype("float32")  # [b, K, pixels, C]
    logits = rng.normal(size=(3, 5, 4, 1)).astype("float32")
    pi = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    want = _numpy_nll(x.astype("float64"), m.astype("float64"), pi.astype("float64"), 0.7)
    per_pixel = keras.ops.convert_to_numpy(mixture_nll(x, m, pi, 0.7))
    np.testing.assert_allclose(per_pixel, want, rtol=1e-5)
    packed = np.concatenate([m, pi], axis=-1)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(MixtureNLL(sigma=0.7)(x, packed)), want.mean(), rtol=1e-5)
    summed = keras.ops.convert_to_numpy(MixtureNLL(sigma=0.7, reduction="sum")(x, packed))
    np.testing.assert_allclose(summed, want.sum(), rtol=1e-5)
    from_logits = MixtureNLL(sigma=0.7, from_logits=True)(x, np.concatenate([m, logits], -1))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(from_logits), want.mean(), rtol=1e-5)
    # Far-away data: every density underflows in float32, the log-sum-exp does not.
    far = keras.ops.convert_to_numpy(MixtureNLL(sigma=0.1)(x + 100.0, packed))
    assert np.isfinite(far) and far > 1e5
    config = MixtureNLL(sigma=0.7, group_axis=2).get_config()
    assert MixtureNLL.from_config(config).get_config() == config


def test_mixture_nll_weighs_pixels_by_leading_weights_and_masks():
    # Audit 2026-11-30: [batch] weights on images were laid along the last pixel axis (as
    # Keras broadcasts), and a mask on y_pred over the groups, or over [batch, T] only,
    # failed with a shape error.
    from keras.src.backend import set_keras_mask

    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 2, 4, 3, 1)).astype("float32")  # [b, T, H, W, C]
    m = rng.normal(size=(3, 2, 5, 4, 3, 1)).astype("float32")  # [b, T, K, H, W, C]
    pi = rng.uniform(0.1, 1.0, size=(3, 2, 5, 4, 3, 1)).astype("float32")
    pi /= pi.sum(axis=2, keepdims=True)
    per_pixel = np.stack([_numpy_nll(x[:, t], m[:, t], pi[:, t], 0.7) for t in range(2)], 1)  # [b, T, H, W]
    packed = np.concatenate([m, pi], axis=-1)
    loss = MixtureNLL(sigma=0.7, group_axis=2)
    weights = np.array([1.0, 3.0, 0.0], "float32")
    got = keras.ops.convert_to_numpy(loss(x, packed, sample_weight=weights))
    np.testing.assert_allclose(got, np.mean(per_pixel * weights[:, None, None, None]), rtol=1e-5)
    keep = np.array([[True, False], [True, True], [False, True]])
    for mask in (keep, np.broadcast_to(keep[:, :, None, None, None], (3, 2, 5, 4, 3))):
        masked = keras.ops.convert_to_tensor(packed)
        set_keras_mask(masked, keras.ops.convert_to_tensor(mask))
        got = keras.ops.convert_to_numpy(loss(x, masked))
        np.testing.assert_allclose(got, per_pixel[keep].mean(), rtol=1e-5)
        summed = keras.ops.convert_to_numpy(MixtureNLL(sigma=0.7, group_axis=2, reduction="sum")(x, masked))
        np.testing.assert_allclose(summed, per_pixel[keep].sum(), rtol=1e-5)
    with pytest.raises(ValueError, match=r"leading axes of y_true.*Received: sample_weight shape"):
        loss(x, packed, sample_weight=np.ones((3, 2, 4, 3, 1, 1), "float32"))


def test_masked_tagger_trains_on_concatenated_outputs_without_its_padded_steps():
    # Audit 2026-11-30: Concatenate failed on RTagger's [batch, T] masks ("Cannot
    # broadcast"); the loss now sees the mask and leaves the padded steps out, where
    # pi = 0 for every group scored each pixel at -log(epsilon).
    x = _images(2, 3, 4, 4, 1, seed=3)
    x[0, 2] = 0.0
    inputs = keras.Input((3, 4, 4, 1))
    pi, m = RTagger(2, CONV_LEVELS, seed=0)(BlankFramesMasked()(inputs))
    assert tuple(pi._keras_mask.shape) == (None, 3, 2, 4, 4)
    model = keras.Model(inputs, keras.layers.Concatenate()([m, pi]))
    model.compile(loss=MixtureNLL(group_axis=2))
    out = keras.ops.convert_to_numpy(model(x))
    per_pixel = np.stack([_numpy_nll(x[:, t], out[:, t, ..., :-1], out[:, t, ..., -1:], 0.5) for t in range(3)], 1)
    keep = np.array([[True, True, False], [True, True, True]])
    assert per_pixel[0, 2].mean() > 10 * per_pixel[keep].mean()  # what the padded step would add
    np.testing.assert_allclose(model.evaluate(x, x, verbose=0), per_pixel[keep].mean(), rtol=1e-4)
    model.fit(x, x, epochs=1, verbose=0)


def test_constraints_reach_every_kernel_and_bias():
    # Audit 2026-11-30: RTagger took no constraints either (an unknown keyword)
    non_neg = {f"{kind}_constraint": "non_neg" for kind in ("kernel", "recurrent", "bias")}
    check_constraints_reach_every_kernel_and_bias(
        RTagger(2, CONV_LEVELS, mask_damping="learned", **non_neg), _images(4, 3, 4, 4, 1),
        {"initial_mean", "damping_bias", "initial_logits", "mu_weights", "s_weights"},
    )


def test_mixture_nll_errors():
    with pytest.raises(ValueError, match="Received: sigma=-1"):
        MixtureNLL(sigma=-1)
    with pytest.raises(ValueError, match="Received: group_axis=0"):
        MixtureNLL(group_axis=0)
    with pytest.raises(ValueError, match="one channel less"):
        MixtureNLL()(np.zeros((2, 4, 2), "float32"), np.zeros((2, 3, 4, 2), "float32"))


def test_seed_is_checked_and_numpy_integers_are_seeds():
    # Audit 11: an np.int64 seed failed inside Keras ("must be an integer. Received: seed=3").
    import json

    layer = RTagger(2, CONV_LEVELS, n_iters=1, seed=np.int64(3))
    assert layer.get_config()["seed"] == 3
    json.dumps(layer.get_config())
    with pytest.raises(ValueError, match="Received: seed=1.5"):
        RTagger(2, CONV_LEVELS, seed=1.5)


def test_symbolic_call_with_training_argument():
    # Audit 11: RTagger(...)(keras.Input(...), training=True) raised "compute_output_spec()
    # got an unexpected keyword argument 'training'".
    pi, m = RTagger(2, CONV_LEVELS, n_iters=2)(keras.Input((4, 4, 1)), training=True)
    assert pi.shape == (None, 2, 2, 4, 4, 1) and m.shape == (None, 2, 2, 4, 4, 1)


def test_mixture_nll_refuses_targets_that_only_broadcast():
    # Audit 11: y_true whose axes did not match y_pred's (the groups at the wrong axis,
    # or size-1 pixel axes) was broadcast into a wrong loss or failed with a raw TF error.
    packed = np.zeros((2, 3, 4, 5, 5, 2), "float32")  # [b, T, K, H, W, C + 1]
    with pytest.raises(ValueError, match=r"y_true shape=\(2, 3, 5, 5, 1\)"):
        MixtureNLL()(np.zeros((2, 3, 5, 5, 1), "float32"), packed)  # group_axis=1 is T
    with pytest.raises(ValueError, match="without the group axis"):
        MixtureNLL(group_axis=2)(np.zeros((2, 3, 1, 1, 1), "float32"), packed)
    loss = MixtureNLL(group_axis=-4)(np.zeros((2, 3, 5, 5, 1), "float32"), packed)
    assert np.isfinite(float(loss))


def test_float64_mixture_nll_is_computed_in_float64():
    # Audit 11: the loss was computed in float32 whatever its dtype (off by ~2e-4 here).
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        x = np.full((1, 2, 1), 10000.001)
        packed = np.concatenate([np.full((1, 2, 2, 1), 10000.0), np.full((1, 2, 2, 1), 0.5)], -1)
        sigma = 0.01
        want = 0.5 * ((10000.001 - 10000.0) / sigma) ** 2 + 0.5 * np.log(2 * np.pi * sigma**2)
        loss = MixtureNLL(sigma=sigma, dtype="float64")(x, packed)
        assert keras.backend.standardize_dtype(loss.dtype) == "float64"
        np.testing.assert_allclose(float(loss), want, rtol=1e-9)


@pytest.mark.parametrize(
    "kwargs,shape",
    [
        (dict(n_iters=None), (2, 3, 4, 4, 1)),
        (dict(n_iters=2), (2, 4, 4, 1)),
        # the posterior E-step takes the groups' nearest mean a second time an iteration
        (dict(n_iters=2, mask_update="posterior", mask_damping="learned", group_codes=True), (2, 4, 4, 1)),
        # pixels of one channel, with a padded step (the held states of the loop)
        (dict(n_iters=None, levels=[level_spec("gated", 4)], mask_update="posterior", mask=((1, 0, 1), (1, 1, 1))),
         (2, 3, 5)),
    ],
    ids=["sequence", "static", "static_posterior", "masked_vector_sequence"],
)
def test_the_symbolic_loop_compiles_as_one_torch_graph(kwargs, shape):
    # RTagger's loop is RLadder's (symbolic_loop): the same torch.compile failure. Its
    # iterations broke the graph too, at every nearest group (the smallest squared
    # distance) and every softmax over the groups (the largest logit): Keras' torch
    # ops.min / ops.max test isinstance(result.values, torch.Tensor), which dynamo
    # cannot trace for a plain tensor; ops.amin / ops.amax do not.
    kwargs = dict(kwargs)
    mask = kwargs.pop("mask", None)
    layer = RTagger(2, kwargs.pop("levels", CONV_LEVELS), unroll=False, seed=1, **kwargs)
    if mask is not None:
        mask = keras.ops.convert_to_tensor(np.array(mask, bool))
        layer = functools.partial(layer, mask=mask)
    assert_compiles_as_one_torch_graph(layer, _images(*shape))


def test_the_unrolled_iterations_compile_as_one_torch_graph():
    # (the iterations' graph breaks above were the same unrolled)
    layer = RTagger(2, [level_spec("gated", 4)], n_iters=2, unroll=True, mask_update="posterior", seed=1)
    assert_compiles_as_one_torch_graph(layer, _images(2, 5))


def test_mixture_nll_takes_numpy_scalars():
    # Audit 11: numpy integer group_axis and numpy boolean from_logits were refused.
    loss = MixtureNLL(group_axis=np.int64(2), from_logits=np.True_)
    assert loss.get_config()["group_axis"] == 2 and type(loss.get_config()["group_axis"]) is int
    assert loss.get_config()["from_logits"] is True


def _train_tagger_on_two_object_images(seed, epochs):
    """A small RTagger trained with the mixture NLL on 4x4 images of one 2x2 square,
    every source of randomness seeded by ``seed`` (data, weights, the random initial
    masks, the order of the batches), none by the global random state:
    ``(losses, mse of the last reconstruction, floor)``."""
    rng = np.random.default_rng(seed)
    n = 32
    images = np.zeros((n, 4, 4, 1), "float32")
    for i in range(n):
        r, c = rng.integers(0, 2, size=2)
        images[i, r:r + 2, c:c + 2] = 1.0
    inputs = keras.Input((4, 4, 1))
    tagger = RTagger(
        2, [level_spec("convlstm", 4)], n_iters=2, sigma=0.5, seed=seed,
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        recurrent_initializer=keras.initializers.Orthogonal(seed=seed),
        mask_initializer=keras.initializers.RandomNormal(seed=seed),
    )
    pi, m = tagger(inputs)
    model = keras.Model(inputs, keras.layers.Concatenate()([m, pi]))
    model.compile(keras.optimizers.Adam(0.02), MixtureNLL(sigma=0.5, group_axis=2), jit_compile=False)
    targets = np.repeat(images[:, None], 2, axis=1)  # the same image at every iteration
    history = model.fit(images, targets, epochs=epochs, batch_size=16, shuffle=False, verbose=0)
    # The reconstruction sum_k pi_k m_k follows each image: a tagger that did not read its
    # input could at best predict every pixel's mean (MSE = the pixels' variance).
    packed = model.predict(images, verbose=0)[:, -1]  # last iteration: [b, K, H, W, C + 1]
    recon = np.sum(packed[..., 1:] * packed[..., :1], axis=1)
    return history.history["loss"], np.mean((recon - images) ** 2), np.mean(images.var(axis=0))


def test_rtagger_trains_with_mixture_nll():
    """Two-object toy images: the mixture NLL falls clearly in a few steps."""
    # audit (2026-12): the weights, initial masks and batch order came from the global
    # random state, and the mse check failed for 1-2 of 10 global seeds. Every draw is
    # now seeded here (the global seed changes nothing), and 16 epochs instead of 8
    # pass for each of the seeds 0-9 (mse / floor 0.03-0.15; with 8 epochs 4 of 10
    # failed, up to 1.05)
    losses, mse, floor = _train_tagger_on_two_object_images(seed=0, epochs=16)
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.1, losses
    assert mse < 0.5 * floor, (mse, floor)


def test_adjusted_mutual_info():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, size=(4, 6, 6))
    perfect = np.eye(3)[(truth + 1) % 3]  # permuted labels, one-hot: [b, H, W, K]
    perfect = np.moveaxis(perfect, -1, 1)[..., None]  # [b, K, H, W, 1] as RTagger gives
    assert adjusted_mutual_info(truth, perfect) == pytest.approx(1.0)
    random = rng.uniform(size=(4, 3, 6, 6))
    assert abs(adjusted_mutual_info(truth, random)) < 0.1
    per_sample = adjusted_mutual_info(truth, perfect, per_sample=True)
    assert per_sample.shape == (4,)
    # Background pixels (label 0) ignored: a prediction wrong only there is perfect.
    wrong_bg = perfect.copy()
    wrong_bg[:, :, :, :, 0] = np.where(truth[:, None] == 0, np.roll(perfect[..., 0], 1, axis=1), perfect[..., 0])
    assert adjusted_mutual_info(truth, wrong_bg, ignore_label=0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="one axis"):
        adjusted_mutual_info(truth, random[:, 0])


def test_adjusted_mutual_info_refuses_non_finite_pi_and_a_non_integer_axis():
    # NaN masks (a diverged model) were scored as if segmented (argmax takes NaN as the
    # largest value), and group_axis=1.0 gave numpy's TypeError.
    truth = np.tile([[0, 0, 1, 1]], (2, 1))
    pi = np.stack([truth == 0, truth == 1], axis=1).astype("float32")
    assert adjusted_mutual_info(truth, pi) == pytest.approx(1.0)
    pi[0, :, 0] = np.nan
    with pytest.raises(ValueError, match="`pi` must be finite.*2 non-finite values"):
        adjusted_mutual_info(truth, pi)
    with pytest.raises(ValueError, match="Received: group_axis=1.0"):
        adjusted_mutual_info(truth, np.nan_to_num(pi), group_axis=1.0)


def test_many_iterations_with_a_small_sigma_stay_bounded():
    pi, m = RTagger(2, CONV_LEVELS, n_iters=6, sigma=0.05)(_images(2, 4, 4, 1))
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(m))) and np.abs(keras.ops.convert_to_numpy(m)).max() < 50
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(pi)))


def test_a_group_sees_the_input_only_through_its_mask_and_the_likelihoods():
    """Tagger's inputs: a group owning no pixel learns nothing about the image.

    With equal initial means the normalized likelihoods are uniform, so group 1,
    whose initial mask is ~0 everywhere, gets the same ladder input for any image:
    its first means must not depend on the image (they did when the raw image was
    an input of every group, which let one group copy the whole image).
    """
    logits = np.zeros((2, 4, 4, 1), "float32")
    logits[0], logits[1] = 30.0, -30.0
    layer = RTagger(
        2, CONV_LEVELS, n_iters=1, mask_initializer=keras.initializers.Constant(logits),
    )
    _, m_a = layer(_images(1, 4, 4, 1, seed=1))
    _, m_b = layer(_images(1, 4, 4, 1, seed=2))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(m_a)[:, :, 1], keras.ops.convert_to_numpy(m_b)[:, :, 1], atol=1e-6)
    assert np.abs(keras.ops.convert_to_numpy(m_a)[:, :, 0] - keras.ops.convert_to_numpy(m_b)[:, :, 0]).max() > 1e-4  # the owner sees it


def test_the_likelihood_input_is_the_softmax_over_the_groups():
    """Audit s64 (mutation): the likelihood channel given to the ladder as exp(log_lik),
    not normalized over the groups, survived every test (with equal means, as above,
    both are uniform over the groups). Group k's ladder input is [z_k, dz_k, pi_k, L_k]
    (then the group codes), L_k = softmax_k(-(x - z_k)^2 / (2 sigma^2)): checked here
    against the means the ladder is given, at the second iteration too, where the
    groups' means differ."""
    k, sigma = 3, 0.5
    layer = RTagger(k, [level_spec("gated", 4)], n_iters=2, sigma=sigma)
    x = _images(2, 6)  # one vector: 6 pixels of one channel (C = 1)
    layer(x)
    seen = []
    step = layer.ladder.step

    def spy(z, carry):
        seen.append(keras.ops.convert_to_numpy(z))
        return step(z, carry)

    layer.ladder.step = spy
    try:
        layer(x)
    finally:
        del layer.ladder.step
    assert len(seen) == 2
    for it, z in enumerate(seen):
        z = z.reshape(2, k, 6, -1)  # [b, K, pixels, 2C + 2 + codes]: [z, dz, pi, L, ...]
        means, likelihood = z[..., 0], z[..., 3]
        if it == 1:  # the case the mutant fails besides the uniform one
            assert np.ptp(means, axis=1).min() > 1e-3, np.ptp(means, axis=1)
        logits = -np.square(x[:, None] - means) / (2 * sigma**2)
        want = np.exp(logits - logits.max(1, keepdims=True))
        want /= want.sum(1, keepdims=True)
        # float32 exponentials of O(1) logits: 1e-5
        np.testing.assert_allclose(likelihood, want, rtol=1e-5, atol=1e-6, err_msg=f"iteration {it}")
        np.testing.assert_allclose(likelihood.sum(1), 1.0, rtol=1e-5)


def test_groups_start_different_even_with_equal_initial_means():
    """Random initial masks break the symmetry of the shared weights (groups share the mean)."""
    layer = RTagger(3, CONV_LEVELS, n_iters=2)
    pi, m = layer(_images(2, 4, 4, 1))
    pi, m = keras.ops.convert_to_numpy(pi), keras.ops.convert_to_numpy(m)
    for t in range(2):
        assert np.abs(pi[:, t, 0] - pi[:, t, 1]).max() > 1e-3
        assert np.abs(m[:, t, 0] - m[:, t, 1]).max() > 1e-4
    assert not layer.initial_logits.trainable
    again = RTagger(3, CONV_LEVELS, n_iters=2)
    again.build((None, 4, 4, 1))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again.initial_logits), keras.ops.convert_to_numpy(layer.initial_logits))  # seeded
    assert tuple(layer.initial_mean.shape) == (1,)  # one initial mean shared by the groups


def test_initial_masks_are_random_per_sample_in_training_and_fixed_at_inference():
    layer = RTagger(2, CONV_LEVELS, n_iters=1, seed=3)
    x = np.repeat(_images(1, 4, 4, 1), 2, axis=0)  # the same image twice
    pi_train, _ = layer(x, training=True)
    assert np.abs(keras.ops.convert_to_numpy(pi_train)[0] - keras.ops.convert_to_numpy(pi_train)[1]).max() > 1e-3  # two different draws
    pi_a, _ = layer(x)
    pi_b, _ = layer(x, training=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pi_a)[0], keras.ops.convert_to_numpy(pi_a)[1], atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pi_a), keras.ops.convert_to_numpy(pi_b), atol=1e-6)
    fixed = RTagger(2, CONV_LEVELS, n_iters=1, random_initial_masks=False)
    pi_f, _ = fixed(x, training=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pi_f)[0], keras.ops.convert_to_numpy(pi_f)[1], atol=1e-6)
    config = layer.get_config()
    assert config["random_initial_masks"] is True and config["seed"] == 3


def test_adjusted_mutual_info_is_sklearns_on_the_argmax_per_sample():
    from sklearn.metrics import adjusted_mutual_info_score

    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, size=(5, 6, 6))
    pi = rng.uniform(size=(5, 3, 6, 6, 1))
    pi[:, 1] += 0.8 * truth[..., None]  # partly right
    guess = pi[..., 0].argmax(axis=1)
    want = [adjusted_mutual_info_score(t.ravel(), g.ravel()) for t, g in zip(truth, guess)]
    np.testing.assert_allclose(adjusted_mutual_info(truth, pi, per_sample=True), want, rtol=1e-12)
    assert adjusted_mutual_info(truth, pi) == pytest.approx(np.mean(want))
    assert 0.05 < np.mean(want) < 0.95
    # one group owning every pixel is worth nothing
    collapsed = np.zeros((5, 3, 6, 6, 1))
    collapsed[:, 0] = 1.0
    assert adjusted_mutual_info(truth, collapsed) == pytest.approx(0.0, abs=1e-12)


def test_adjusted_mutual_info_counts_a_negative_group_axis_on_pi_as_given():
    """group_axis=-4 of a [b, K, H, W, 1] pi is the group axis, not the batch axis."""
    truth = np.random.default_rng(0).integers(0, 3, size=(3, 6, 6))
    perfect = np.moveaxis(np.eye(3)[truth], -1, 1)[..., None]  # [b=3, K=3, H, W, 1]
    assert adjusted_mutual_info(truth, perfect, group_axis=-4) == pytest.approx(1.0)
    assert adjusted_mutual_info(truth, perfect[..., 0], group_axis=-3) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="Received: group_axis=0"):
        adjusted_mutual_info(truth, perfect, group_axis=0)
    with pytest.raises(ValueError, match="Received: group_axis=-5"):
        adjusted_mutual_info(truth, perfect, group_axis=-5)


def test_mixture_nll_from_logits_must_be_a_bool():
    with pytest.raises(ValueError, match="Received: from_logits='no'"):
        MixtureNLL(from_logits="no")


def test_mixture_nll_docstring_example_runs():
    import re
    import textwrap

    (block,) = re.findall(r"```python\n(.*?)```", MixtureNLL.__doc__, re.S)
    scope = {"keras": keras, "np": np, "MixtureNLL": MixtureNLL}
    exec(textwrap.dedent(block), scope)
    assert np.isfinite(float(scope["loss"]))


@pytest.mark.parametrize("levels, features, pixels", [
    ([level_spec("gated", 6)], (5,), (5, 1)),  # a vector: every feature a one-channel pixel
    ([level_spec("conv", 3), level_spec("gated", 4)], (4, 4, 1), (4, 4, 1)),
])
def test_an_empty_sequence_gives_empty_outputs_and_zero_gradients(levels, features, pixels):
    # T = 0 (n_iters=None: one iteration per step) stacked no iteration: IndexError
    tagger = RTagger(2, levels, n_iters=None, seed=0)
    x = np.zeros((2, 0, *features), "float32")
    tagger.build(x.shape)

    def loss():
        pi, m = tagger(x, training=True)
        assert tuple(pi.shape) == (2, 0, 2, *pixels[:-1], 1) and tuple(m.shape) == (2, 0, 2, *pixels)
        return keras.ops.sum(pi) + keras.ops.sum(m)

    weight_grads = grads(loss, variables=tagger.trainable_weights)
    assert len(weight_grads) == len(tagger.trainable_weights) > 0
    for g, w in zip(weight_grads, tagger.trainable_weights):
        assert g is not None and not np.any(keras.ops.convert_to_numpy(g)), w.path


@pytest.mark.parametrize("mask_update", ["learned", "posterior"])
def test_the_smallest_sigma_allowed_gives_finite_outputs_far_from_the_means(mask_update):
    # Audit (2026-11-28): with sigma = 1e-19 (allowed) every group's -distance / (2 sigma^2)
    # overflowed to -inf at pixels ~3 away from all means, and the softmaxes over the groups
    # (the likelihood input, the posterior masks) were NaN, and with them pi and m.
    x = _images(2, 4, 4, 1) * 3.0 + 2.0
    layer = RTagger(2, CONV_LEVELS, n_iters=2, sigma=1e-19, mask_update=mask_update)
    pi, m = (keras.ops.convert_to_numpy(t) for t in layer(x))
    assert np.all(np.isfinite(pi)) and np.all(np.isfinite(m))
    np.testing.assert_allclose(pi.sum(axis=2), 1.0, rtol=1e-5)
    pi, _ = layer(x[:0])  # (the nearest group of no pixel: an empty batch still runs)
    assert pi.shape == (0, 2, 2, 4, 4, 1)


@pytest.mark.parametrize("mask_update", ["learned", "posterior"])
def test_the_smallest_sigma_allowed_gives_finite_outputs_under_xla(mask_update):
    # Found 2026-11-29: the test above passed eagerly, but compiled with XLA
    # (tf.function(jit_compile=True), jax.jit) pi and m were NaN. XLA fused the square
    # into ``sq - min(sq)`` as one FMA, so the nearest group's relative distance was the
    # square's rounding error (~1e-7) instead of 0; times 1 / (2 sigma^2) ~ 5e37 that is
    # a logit of +-1e31 that the softmax's max and its exponentials took differently.
    from tests.backends import compiled

    x = _images(2, 4, 4, 1) * 3.0 + 2.0
    layer = RTagger(2, CONV_LEVELS, n_iters=2, sigma=1e-19, mask_update=mask_update)
    eager_pi, eager_m = (keras.ops.convert_to_numpy(t) for t in layer(x))
    pi, m = (keras.ops.convert_to_numpy(t) for t in compiled(lambda v: layer(v))(keras.ops.convert_to_tensor(x)))
    assert np.all(np.isfinite(pi)) and np.all(np.isfinite(m))
    np.testing.assert_allclose(pi.sum(axis=2), 1.0, rtol=1e-5)
    # each pixel goes to its nearest group, as eagerly (the masks are 0 or 1 at this sigma)
    np.testing.assert_allclose(pi, eager_pi, atol=1e-5)
    np.testing.assert_allclose(m, eager_m, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("levels,shape", [([level_spec("gated", 4), level_spec("lstm", 3)], (2, 4, 6)),
                                          (CONV_LEVELS, (2, 4, 4, 4, 1))])
def test_padded_steps_never_change_the_other_outputs(levels, shape):
    # Audit (2026-11-28): RTagger took sequences but no mask (Keras dropped it with a
    # warning), so a padded step moved the groups' states, means and masks like a frame.
    layer = RTagger(2, levels, seed=1, mask_damping="learned")
    x = _images(*shape)
    mask = np.array([[True, False, True, True], [False, True, False, True]])
    junk = x.copy()
    junk[0, 1], junk[1, 0], junk[1, 2] = np.nan, np.inf, 1e3
    pi, m = (keras.ops.convert_to_numpy(t) for t in layer(x, mask=mask))
    pi_j, m_j = (keras.ops.convert_to_numpy(t) for t in layer(junk, mask=mask))
    np.testing.assert_array_equal(pi, pi_j)
    np.testing.assert_array_equal(m, m_j)
    assert not pi[0, 1].any() and not m[1, 0].any()  # zeros at padded steps
    for sample, steps in ((0, [0, 2, 3]), (1, [1, 3])):  # as the sequence without its padding
        pi_u, m_u = (keras.ops.convert_to_numpy(t) for t in layer(x[sample:sample + 1, steps]))
        np.testing.assert_allclose(pi[sample, steps], pi_u[0], atol=1e-6)
        np.testing.assert_allclose(m[sample, steps], m_u[0], atol=1e-6)
    weight_grads = grads(lambda: keras.ops.sum(layer(junk, mask=mask, training=True)[1]), (), layer.trainable_weights)
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(g))) for g in weight_grads)
    if len(shape) == 3:  # (Masking masks every pixel of an image sequence, not its steps)
        masked = keras.layers.Masking(0.0)(keras.Input(shape[1:]))
        assert all(t._keras_mask is not None for t in RTagger(2, levels)(masked))  # passed on
    with pytest.raises(ValueError, match=r"mask of shape \[batch, T\] = \(2, 4\).*Received: mask shape=\(2, 3\)"):
        layer(x, mask=mask[:, :3])
    with pytest.raises(ValueError, match="n_iters=2 iterates on one static input.*takes no mask"):
        RTagger(2, levels, n_iters=2)(x[:, 0], mask=mask[:, 0])


# ------------------------------------------------------------- the symbolic loop
VECTOR_LEVELS = [level_spec("gated", 4), level_spec("lstm", 3)]
LOOP_CASES = [  # (case, levels, input shape, constructor arguments)
    ("image_sequence", CONV_LEVELS, (2, 4, 4, 4, 1), {}),
    ("vector_sequence", VECTOR_LEVELS, (2, 4, 6), {}),
    ("static_image", CONV_LEVELS, (2, 4, 4, 1), dict(n_iters=3)),
    ("static_vector", VECTOR_LEVELS, (2, 6), dict(n_iters=3)),
    ("group_codes_posterior", CONV_LEVELS, (2, 3, 4, 4, 1),
     dict(group_codes=True, mask_update="posterior", posterior_sigma=0.7)),
    ("damping_number", VECTOR_LEVELS, (2, 4, 6), dict(mask_damping=0.3, mask_update="posterior")),
    ("damping_learned_smooth_masks", CONV_LEVELS, (2, 3, 4, 4, 1),
     dict(mask_damping="learned", initial_mask_scale=2)),
    ("static_damping_learned", VECTOR_LEVELS, (2, 6), dict(n_iters=2, mask_damping="learned", group_codes=True)),
]


def _twins(levels, kwargs, x, n_groups=2):
    """An unrolled tagger and a looping one with the same weights and the same seed."""
    return loop_twins(lambda unroll: RTagger(n_groups, levels, unroll=unroll, seed=5, **kwargs), x)


@pytest.mark.parametrize("case,levels,shape,kwargs", LOOP_CASES, ids=[c[0] for c in LOOP_CASES])
def test_the_symbolic_loop_gives_the_unrolled_outputs(case, levels, shape, kwargs):
    x = _images(*shape)
    unrolled, looped = _twins(levels, kwargs, x)
    _assert_same(unrolled(x), looped(x))
    # training: random initial masks, drawn before either loop, so the same draws
    # with the same seed (and other ones than at inference)
    trained = unrolled(x, training=True)
    _assert_same(trained, looped(x, training=True))
    assert np.abs(keras.ops.convert_to_numpy(trained[0]) - keras.ops.convert_to_numpy(unrolled(x)[0])).max() > 1e-4
    if "n_iters" not in kwargs:  # with padded steps (leading, inner, trailing) too
        mask = np.ones(shape[:2], bool)
        mask[0, 1] = mask[1, -1] = mask[1, 0] = False
        _assert_same(unrolled(x, mask=mask), looped(x, mask=mask))
        _assert_same(unrolled(x, mask=mask, training=True), looped(x, mask=mask, training=True))


def test_the_symbolic_loop_gives_the_unrolled_gradients():
    x = _images(2, 4, 6)
    mask = np.array([[1, 1, 1, 0], [1, 0, 1, 1]], bool)
    kwargs = dict(mask_damping="learned", mask_update="posterior", group_codes=True)
    results = []
    twins = _twins(VECTOR_LEVELS, kwargs, x, n_groups=3)
    for tagger in twins:

        def loss(images, tagger=tagger):
            pi, m = tagger(images, mask=mask, training=True)
            return keras.ops.sum(pi * keras.ops.square(m - 0.5)) + keras.ops.sum(m)

        value, input_grads, weight_grads = value_and_grads(loss, [x], tagger.trainable_weights)
        results.append([value] + input_grads + weight_grads)
    assert len(results[0]) == len(results[1]) == 2 + len(twins[0].trainable_weights)
    for a, b in zip(*results):
        assert a is not None and b is not None
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)


def test_sequences_of_unknown_length_run_through_one_model(tmp_path):
    # RTagger refused sequences of unknown length ("expects inputs ... with known sizes")
    for unroll, features, levels in ((False, (4, 4, 1), CONV_LEVELS), (None, (6,), VECTOR_LEVELS)):
        inputs = keras.Input((None, *features))
        pi, m = RTagger(2, levels, unroll=unroll, seed=0, mask_damping="learned", name="tagger")(inputs)
        pixels = features if len(features) == 3 else (features[0], 1)
        assert tuple(pi.shape) == (None, None, 2, *pixels[:-1], 1) and tuple(m.shape) == (None, None, 2, *pixels)
        model = keras.Model(inputs, [pi, m])
        path = str(tmp_path / f"model_{unroll}.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        assert loaded.get_layer("tagger").get_config()["unroll"] is unroll
        for steps in (2, 5):
            x = _images(3, steps, *features, seed=steps)
            fixed = RTagger(2, levels, unroll=True, mask_damping="learned")
            fixed(x)
            fixed.set_weights(model.get_layer("tagger").get_weights())
            got = model.predict(x, verbose=0)
            assert got[0].shape == (3, steps, 2, *pixels[:-1], 1) and got[1].shape == (3, steps, 2, *pixels)
            _assert_same(got, fixed(x))
            _assert_same(loaded.predict(x, verbose=0), got)


def test_unroll_is_checked():
    with pytest.raises(ValueError, match="Received: unroll='yes'"):
        RTagger(2, CONV_LEVELS, unroll="yes")
    with pytest.raises(ValueError, match="unroll=True unrolls a known number of steps"):
        RTagger(2, CONV_LEVELS, unroll=True)(keras.Input((None, 4, 4, 1)))
    assert RTagger(2, CONV_LEVELS, unroll=np.False_).get_config()["unroll"] is False
    config = RTagger(2, CONV_LEVELS).get_config()
    assert config["unroll"] is None
    del config["unroll"]  # a tagger saved before the option existed
    assert RTagger.from_config(config).unroll is None


LOOP_CONTRACT_CASES = [
    ("image_sequence_loop", dict(n_groups=2, levels=CONV_LEVELS, unroll=False), (4, 2, 4, 4, 1)),
    ("vector_sequence_loop", dict(n_groups=3, levels=[level_spec("gated", 3)], unroll=False, mask_damping="learned"),
     (4, 2, 4)),
    ("static_loop", dict(n_groups=2, levels=CONV_LEVELS, n_iters=2, unroll=False, mask_update="posterior",
                         group_codes=True), (4, 4, 4, 1)),
]


@pytest.mark.parametrize("case,kwargs,shape", LOOP_CONTRACT_CASES, ids=[c[0] for c in LOOP_CONTRACT_CASES])
def test_layer_contract_of_the_symbolic_loop(case, kwargs, shape, tmp_path):
    run_layer_contract(RTagger, kwargs, _images(*shape), tmp_path=tmp_path, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("unroll", [None, False])
def test_an_empty_sequence_or_batch_through_the_symbolic_loop(unroll):
    # T = 0 and an empty batch, known when the tagger is called, through unroll=False
    # (T = 0 gives empty outputs and zero gradients, as unrolled)
    tagger = RTagger(2, VECTOR_LEVELS, unroll=unroll, seed=0, mask_damping="learned")
    tagger.build((None, None, 5))
    x = _images(2, 0, 5)

    def loss():
        pi, m = tagger(x, training=True)
        assert tuple(pi.shape) == (2, 0, 2, 5, 1) and tuple(m.shape) == (2, 0, 2, 5, 1)
        return keras.ops.sum(pi) + keras.ops.sum(m)

    weight_grads = grads(loss, variables=tagger.trainable_weights)
    assert len(weight_grads) == len(tagger.trainable_weights) > 0
    for g, w in zip(weight_grads, tagger.trainable_weights):
        assert g is not None and not np.any(keras.ops.convert_to_numpy(g)), w.path
    mask = np.ones((0, 3), bool)
    pi, m = tagger(_images(0, 3, 5), mask=mask, training=True)
    assert tuple(pi.shape) == (0, 3, 2, 5, 1) and tuple(m.shape) == (0, 3, 2, 5, 1)
    pi, m = tagger(_images(0, 3, 5))
    assert tuple(pi.shape) == (0, 3, 2, 5, 1) and tuple(m.shape) == (0, 3, 2, 5, 1)


def test_a_loop_traced_for_any_length_and_batch_under_xla():
    """T and the batch known only when the loop runs (a TensorFlow trace of T = None),
    compiled with XLA: several lengths, T = 0 (zero gradients) and an empty batch, with
    a mask; the same outputs and gradients as the unrolled tagger."""
    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: a tf.function trace with T = None (JAX traces every T)")
    import tensorflow as tf

    tagger = RTagger(2, VECTOR_LEVELS, seed=0, mask_damping="learned", mask_update="posterior", name="tagger")
    tagger.build((None, None, 5))

    def loss_and_grads(layer, x, keep):
        with tf.GradientTape() as tape:
            pi, m = layer(x, mask=keep)
            loss = tf.reduce_sum(pi * tf.square(m - 0.5)) + tf.reduce_sum(m)
        return pi, m, tape.gradient(loss, layer.trainable_weights)

    traced = tf.function(
        lambda x, keep: loss_and_grads(tagger, x, keep), jit_compile=True,
        input_signature=[tf.TensorSpec((None, None, 5), "float32"), tf.TensorSpec((None, None), "bool")],
    )
    for batch, steps in ((2, 3), (2, 0), (0, 2), (3, 4)):
        x = _images(batch, steps, 5, seed=steps)
        keep = np.ones((batch, steps), bool)
        if batch and steps > 1:
            keep[0, 1] = keep[-1, 0] = False
        pi, m, got = traced(x, keep)
        assert tuple(pi.shape) == (batch, steps, 2, 5, 1) and tuple(m.shape) == (batch, steps, 2, 5, 1)
        assert len(got) == len(tagger.trainable_weights)
        assert all(g is not None and np.all(np.isfinite(g)) for g in got)
        if not steps or not batch:
            assert not any(np.any(g) for g in got)
            continue
        fixed = RTagger(2, VECTOR_LEVELS, unroll=True, seed=0, mask_damping="learned", mask_update="posterior")
        fixed(x)
        fixed.set_weights(tagger.get_weights())
        want = loss_and_grads(fixed, x, keep)
        _assert_same([pi, m], want[:2], atol=1e-5)
        _assert_same(got, want[2], atol=1e-5)


class _CountsSymbolicLoops(RTagger):
    """An RTagger that counts the traces of its symbolic loop (``_loop``)."""

    symbolic_traces = 0

    def _loop(self, *args, **kwargs):
        type(self).symbolic_traces += 1
        return super()._loop(*args, **kwargs)


def _batches_of_several_lengths():
    """A tf.data pipeline of vector sequences [4, T, 5] (T = 3, 5; None in its
    signature), each with a zero (masked) last step in one sample, and their targets
    [4, T, 5, 1] (the pixels again, as MixtureNLL takes them). (Two lengths: under XLA
    every length is a program compiled of its own.)"""
    import tensorflow as tf

    def batches():
        for n in (3, 5):
            x = _images(4, n, 5, seed=n) + 0.1
            x[1, -1:] = 0.0
            yield x, x[..., None]

    return tf.data.Dataset.from_generator(batches, output_signature=(
        tf.TensorSpec((4, None, 5), "float32"), tf.TensorSpec((4, None, 5, 1), "float32"),
    )).apply(tf.data.experimental.assert_cardinality(2))


class _Packed(keras.layers.Layer):
    """``[m, pi]`` -> ``concatenate([m, pi], -1)``, MixtureNLL's input; the step mask
    stops here (keras.layers.Concatenate fails on [batch, T] masks of these outputs)."""

    def call(self, inputs):
        return keras.ops.concatenate(inputs, axis=-1)

    def compute_mask(self, inputs, mask=None):
        return None


@pytest.mark.parametrize("distributed", [False, True], ids=["xla", "mirrored"])
def test_a_model_on_sequences_of_unknown_length_trains(distributed):
    """model.fit on batches traced as T = None (the symbolic loop, counted), with a
    Keras mask and random initial masks: compiled with XLA, and on two replicas (both
    at once fail in TensorFlow for any model, see RLadder's test)."""
    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow-only: a tf.data pipeline of unknown length and tf.distribute")
    import contextlib

    scope = two_cpu_strategy().scope() if distributed else contextlib.nullcontext()
    with scope:
        inputs = keras.Input((None, 5))
        pi, m = _CountsSymbolicLoops(2, [level_spec("gated", 4)], seed=0, mask_damping="learned")(
            keras.layers.Masking(0.0)(inputs)
        )
        model = keras.Model(inputs, _Packed()([m, pi]))
        model.compile(keras.optimizers.Adam(1e-2), MixtureNLL(sigma=0.5, group_axis=2), jit_compile=not distributed)
    assert model.jit_compile is (not distributed)
    before = [w.copy() for w in model.get_weights()]
    _CountsSymbolicLoops.symbolic_traces = 0
    history = model.fit(_batches_of_several_lengths(), epochs=1, verbose=0).history["loss"]
    assert _CountsSymbolicLoops.symbolic_traces > 0  # fit traced the loop for T = None
    assert np.all(np.isfinite(history))
    after = model.get_weights()
    assert all(np.all(np.isfinite(w)) for w in after)
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))


def test_on_jax_a_tagger_built_for_any_length_loops_symbolically():
    """As RLadder: jax.jit traces every batch with its T, so a tagger built on
    keras.Input((None, ...)) with unroll=None runs the symbolic loop (ops.scan) for
    every T, with the unrolled outputs; one built on a known T still unrolls."""
    if BACKEND != "jax":
        pytest.skip(f"JAX-only: jax.jit traces every T (backend is {BACKEND})")
    inputs = keras.Input((None, 5))
    model = keras.Model(inputs, _CountsSymbolicLoops(2, VECTOR_LEVELS, name="tagger")(inputs))
    _CountsSymbolicLoops.symbolic_traces = 0
    x = _images(3, 4, 5)
    got = model.predict(x, verbose=0)
    assert _CountsSymbolicLoops.symbolic_traces > 0
    fixed = _CountsSymbolicLoops(2, VECTOR_LEVELS)  # built on T = 4: unrolls
    fixed(x)
    fixed.set_weights(model.get_layer("tagger").get_weights())
    _CountsSymbolicLoops.symbolic_traces = 0
    _assert_same(got, fixed(x))
    assert _CountsSymbolicLoops.symbolic_traces == 0


@pytest.mark.parametrize(
    "kwargs, option, needs",
    [
        (dict(posterior_sigma=0.3), "posterior_sigma=0.3", "mask_update='posterior'"),
        (dict(seed=4, random_initial_masks=False), "seed=4", "random_initial_masks=True"),
    ],
)
def test_an_option_set_where_it_has_no_effect_warns_and_saved_configs_load(kwargs, option, needs):
    # audit (2026-12): posterior_sigma with mask_update="learned", and a seed without
    # random initial masks, were accepted silently and did nothing. Not refused (configs
    # saved with them must load): one warning at construction, as at loading
    with pytest.warns(UserWarning) as record:
        layer = RTagger(2, CONV_LEVELS, n_iters=1, **kwargs)
    ours = [str(w.message) for w in record if "has no effect" in str(w.message)]
    assert ours == [f"RTagger: {option} has no effect: it needs {needs}" + ours[0].split(needs, 1)[1]], ours
    config = layer.get_config()
    with pytest.warns(UserWarning, match=f"{option} has no effect"):
        loaded = RTagger.from_config(config)
    assert loaded.get_config() == config
    x = _images(2, 4, 4, 1)
    want = layer(x)
    loaded(x)
    loaded.set_weights(layer.get_weights())
    for a, b in zip(want, loaded(x)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [{}, dict(posterior_sigma=0.3, mask_update="posterior"), dict(seed=4), dict(random_initial_masks=False)],
)
def test_options_that_take_effect_and_defaults_do_not_warn(kwargs, recwarn):
    layer = RTagger(2, CONV_LEVELS, n_iters=1, **kwargs)
    RTagger.from_config(layer.get_config())
    assert not [str(w.message) for w in recwarn if "has no effect" in str(w.message)]


def test_a_built_tagger_reused_on_other_pixels_is_refused_when_the_model_is_built():
    # Audit s65: the symbolic call accepted it; predict then failed.
    tagger = RTagger(2, [level_spec("gated", 4)], n_iters=1)
    tagger(_images(2, 6))
    with pytest.raises(ValueError, match=r"This RTagger was built for inputs with pixels"):
        tagger(keras.Input((7,)))
    assert tagger(keras.Input((6,))) is not None
