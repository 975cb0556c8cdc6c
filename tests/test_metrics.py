"""keras_capsules.metrics beyond the RTagger tests (tests/layers/rladder/test_rtagger.py)."""

import re

import keras
import numpy as np
import pytest
from sklearn.metrics import adjusted_mutual_info_score

from keras_capsules.metrics import AdjustedMutualInformation, adjusted_mutual_info
from tests.backends import BACKEND, float64_enabled, tensor, tensorflow_only
from tests.harness import two_cpu_strategy


def test_adjusted_mutual_info_of_an_empty_batch_is_nan_not_a_reshape_error():
    # An empty batch (e.g. the tail of an evaluation split) failed with numpy's
    # "ValueError: cannot reshape array of size 0 into shape (0,newaxis)".
    truth = np.zeros((0, 4, 4), "int32")
    pi = np.zeros((0, 3, 4, 4), "float32")
    assert np.isnan(adjusted_mutual_info(truth, pi))
    per_sample = adjusted_mutual_info(truth, pi, per_sample=True)
    assert per_sample.shape == (0,) and per_sample.dtype == np.float64
    # Samples whose pixels are all cut out by ignore_label stay NaN, as documented.
    truth = np.array([[[0, 1], [1, 0]], [[2, 2], [2, 2]]])
    pi = np.stack([truth == 0, truth == 1], axis=1).astype("float32")
    scores = adjusted_mutual_info(truth, pi, ignore_label=2, per_sample=True)
    assert scores[0] == 1.0 and np.isnan(scores[1])


def test_adjusted_mutual_info_checks_a_bfloat16_pi_for_nan():
    # Audit (2026-11-28): numpy does not see bfloat16 (a mixed_bfloat16 model's predictions)
    # as a floating dtype, so the finiteness check was skipped and a NaN pi scored 0.0.
    import keras
    import pytest

    truth = np.array([[[0, 1], [1, 0]]])
    pi = np.stack([truth == 0, truth == 1], axis=1).astype("float32")
    as_bfloat16 = lambda a: keras.ops.convert_to_numpy(keras.ops.cast(a, "bfloat16"))  # noqa: E731
    assert adjusted_mutual_info(truth, as_bfloat16(pi)) == 1.0
    with pytest.raises(ValueError, match="`pi` must be finite"):
        adjusted_mutual_info(truth, as_bfloat16(pi * np.nan))


@pytest.mark.parametrize("bad, match", [
    (dict(per_sample="no"), r"`per_sample` must be True or False. Received: per_sample='no'"),
    (dict(per_sample=1), r"`per_sample` must be True or False. Received: per_sample=1"),
    (dict(ignore_label=float("nan")), r"`ignore_label` must be None or an integer label \(a finite whole number\)\. "
                                      r"Received: ignore_label=nan"),
    (dict(ignore_label="0"), r"`ignore_label` must be None or an integer label"),
    (dict(ignore_label=True), r"`ignore_label` must be None or an integer label"),
    # helper-180: 2.5 matched no integer label and ignored nothing, silently
    (dict(ignore_label=2.5), r"`ignore_label` must be None or an integer label .*Received: ignore_label=2\.5"),
])
def test_adjusted_mutual_info_refuses_a_per_sample_or_ignore_label_that_would_be_misread(bad, match):
    # per_sample="no" returned every sample's score; ignore_label=nan ignored no pixel
    truth = np.array([[0, 0, 1, 1]])
    pi = np.eye(2)[[0, 0, 1, 1]].T[None]
    assert adjusted_mutual_info(truth, pi, ignore_label=np.int64(0), per_sample=np.bool_(False)) == pytest.approx(1.0)
    assert adjusted_mutual_info(truth, pi, ignore_label=0.0) == pytest.approx(1.0)  # a whole float is a label
    with pytest.raises(ValueError, match=match):
        adjusted_mutual_info(truth, pi, **bad)


def test_adjusted_mutual_info_refuses_labels_that_are_not_whole_numbers():
    # helper-180: labels of 0.5 were scored as categories (the metric refuses them)
    pi = np.eye(2)[[0, 0, 1, 1]].T[None]
    with pytest.raises(ValueError, match=r"`true_groups` must hold integer labels \(whole numbers\)\. "
                                         r"Received: labels such as 0\.5"):
        adjusted_mutual_info(np.array([[0.5, 0.5, 1.5, 1.5]]), pi)
    with pytest.raises(ValueError, match="Received: labels such as nan"):
        adjusted_mutual_info(np.array([[0.0, np.nan, 1.0, 1.0]]), pi)
    assert adjusted_mutual_info(np.array([[0.0, 0.0, 1.0, 1.0]], "float32"), pi) == pytest.approx(1.0)


def test_adjusted_mutual_info_takes_labels_with_a_channel_axis_as_the_metric_does():
    # Audit s83: labels [batch, *pixels, 1] with pi [batch, K, *pixels] were refused
    # ("expects pi with one axis (the groups) more than true_groups") while
    # AdjustedMutualInformation takes them.
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 3, size=(4, 5, 6))
    guess = np.where(rng.uniform(size=truth.shape) < 0.8, truth, rng.integers(0, 3, size=truth.shape))
    pi = np.moveaxis(np.eye(3)[guess], -1, 1).astype("float32")  # [batch, K, 5, 6]
    want = adjusted_mutual_info(truth, pi, per_sample=True)
    assert np.all(want > 0.1) and np.all(want < 1)  # neither a perfect nor a random case
    np.testing.assert_array_equal(adjusted_mutual_info(truth[..., None], pi, per_sample=True), want)
    metric = AdjustedMutualInformation(3)
    metric.update_state(truth[..., None], pi)
    assert abs(_result(metric) - want.mean()) < 1e-5
    # labels [batch, *pixels, 1] beside pi [batch, K, *pixels, 1] (RTagger's) as before
    np.testing.assert_array_equal(adjusted_mutual_info(truth[..., None], pi[..., None], per_sample=True), want)
    # a labels channel that is not 1 is still a shape error
    with pytest.raises(ValueError, match="one axis \\(the groups\\) more than true_groups"):
        adjusted_mutual_info(np.repeat(truth[..., None], 2, axis=-1), pi)


# ------------------------------------------------------------ AdjustedMutualInformation
#: |AMI - sklearn| allowed for the default (float32) metric: 5e-6 measured on 28x28 images
#: with 2-10 labels and 2-8 groups, 1.2e-5 on 64x64 and 128x128
FLOAT32_ATOL = 1e-4


def _segmentations(rng, batch, pixels, num_labels, num_groups, kind):
    """Random true labels ``[batch, *pixels]`` and predicted groups of the same shape:
    independent, correlated (so that AMI spans 0..1), sorted into a few large regions,
    or with skewed (geometric) class sizes, some labels and groups unused."""
    shape = (batch, *pixels)
    truth = rng.integers(0, num_labels, size=shape)
    guess = rng.integers(0, num_groups, size=shape)
    if kind == "correlated":
        guess = np.where(rng.uniform(size=shape) < rng.uniform(0.2, 1.0, size=(batch,) + (1,) * len(pixels)),
                         (truth + 1) % num_groups, guess)
    elif kind == "regions":
        truth = np.sort(truth.reshape(batch, -1), axis=1).reshape(shape)
        guess = np.sort(guess.reshape(batch, -1), axis=1).reshape(shape)
    elif kind == "skewed":
        truth = np.minimum(rng.geometric(0.5, size=shape) - 1, num_labels - 1)
        guess = np.minimum(rng.geometric(0.4, size=shape) - 1, num_groups - 1)
    elif kind == "dominant":  # a class and a group of 60-90% of the pixels: a + b > n
        truth = np.where(rng.uniform(size=shape) < rng.uniform(0.6, 0.9), 0, truth)
        guess = np.where(rng.uniform(size=shape) < rng.uniform(0.6, 0.9), 0, guess)
    return truth, guess


def _pi(rng, guess, num_groups, group_axis=1, channel=False):
    """Group probabilities whose argmax over ``group_axis`` is ``guess``."""
    scores = np.eye(num_groups)[guess] + 0.5 * rng.uniform(size=guess.shape + (num_groups,))
    pi = np.moveaxis(scores / scores.sum(-1, keepdims=True), -1, group_axis).astype("float32")
    return pi[..., None] if channel else pi


def _sklearn_scores(truth, guess, ignore_label=None):
    """sklearn's AMI of every sample, NaN for a sample with no pixel left."""
    scores = []
    for t, g in zip(truth.reshape(len(truth), -1), guess.reshape(len(guess), -1)):
        keep = np.ones(t.shape, bool) if ignore_label is None else t != ignore_label
        scores.append(adjusted_mutual_info_score(t[keep], g[keep]) if keep.any() else np.nan)
    return np.array(scores)


def _result(metric):
    return float(keras.ops.convert_to_numpy(metric.result()))


@pytest.mark.parametrize("pixels, group_axis, channel, ignore_label", [
    ((28, 28), 1, False, None),
    ((28, 28), 1, True, 0),  # RTagger's pi[:, t]: [batch, K, H, W, 1], background ignored
    ((28, 28), -1, False, None),  # groups last: [batch, H, W, K]
    ((50,), 1, False, None),  # 1-D pixels
    ((6,), 1, False, None),  # a few pixels: the bounds of the EMI's sum matter
    ((7, 3, 4), 2, True, -1),  # groups in the middle, an ignore_label outside the labels
])
def test_ami_metric_equals_sklearn_sample_by_sample(pixels, group_axis, channel, ignore_label):
    rng = np.random.default_rng(len(pixels) * 10 + group_axis)
    for trial, kind in enumerate(["independent", "correlated", "regions", "skewed", "dominant"]):
        num_labels, num_groups = int(rng.integers(2, 11)), int(rng.integers(2, 9))
        truth, guess = _segmentations(rng, 4, pixels, num_labels, num_groups, kind)
        if ignore_label == -1:
            truth = np.where(rng.uniform(size=truth.shape) < 0.3, -1, truth)
        axis = group_axis if group_axis > 0 else len(pixels) + 2 + group_axis
        pi = _pi(rng, guess, num_groups, axis, channel)
        metric = AdjustedMutualInformation(num_labels, group_axis=group_axis, ignore_label=ignore_label)
        metric.update_state(truth, pi)
        want = _sklearn_scores(truth, guess, ignore_label)
        assert abs(_result(metric) - np.nanmean(want)) < FLOAT32_ATOL, (trial, kind, want)
        # one sample at a time: each sample's own AMI
        for k in range(len(truth)):
            metric.reset_state()
            metric.update_state(truth[k:k + 1], pi[k:k + 1])
            assert abs(_result(metric) - np.nan_to_num(want[k])) < FLOAT32_ATOL, (trial, kind, k, want[k])


def test_ami_metric_in_float64_equals_sklearn_to_rounding():
    rng = np.random.default_rng(5)
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        for kind in ["independent", "correlated", "regions", "skewed", "dominant"]:
            num_labels, num_groups = int(rng.integers(2, 11)), int(rng.integers(2, 9))
            truth, guess = _segmentations(rng, 6, (28, 28), num_labels, num_groups, kind)
            pi = _pi(rng, guess, num_groups)
            want = _sklearn_scores(truth, guess)
            for k in range(len(truth)):
                metric = AdjustedMutualInformation(num_labels, dtype="float64")
                metric.update_state(truth[k:k + 1], pi[k:k + 1])
                np.testing.assert_allclose(_result(metric), want[k], rtol=0, atol=1e-11, err_msg=kind)


def test_ami_metric_accumulates_the_weighted_mean_over_batches_and_resets():
    rng = np.random.default_rng(1)
    metric = AdjustedMutualInformation(5, ignore_label=0)
    scores, weights = [], []
    for batch, weighted in ((3, False), (5, True), (1, True), (4, False)):
        truth, guess = _segmentations(rng, batch, (6, 7), 5, 4, "correlated")
        truth[0] = 0  # a sample with every pixel ignored does not count
        weight = rng.uniform(0.5, 2.0, size=batch).astype("float32") if weighted else np.ones(batch, "float32")
        pi = _pi(rng, guess, 4, channel=True)
        if weighted:
            metric.update_state(truth[..., None], pi, sample_weight=weight)
        else:
            metric.update_state(truth, pi)
        scores.append(_sklearn_scores(truth, guess, ignore_label=0))
        weights.append(weight)
    scores, weights = np.concatenate(scores), np.concatenate(weights)
    counted = ~np.isnan(scores)
    assert counted.sum() == len(scores) - 4
    want = np.sum(scores[counted] * weights[counted]) / np.sum(weights[counted])
    assert abs(_result(metric) - want) < FLOAT32_ATOL
    assert abs(float(keras.ops.convert_to_numpy(metric.count)) - weights[counted].sum()) < 1e-4
    # the mean of the numpy function's per-sample values, without weights
    metric.reset_state()
    assert _result(metric) == 0.0 and float(keras.ops.convert_to_numpy(metric.count)) == 0.0
    truth, guess = _segmentations(rng, 6, (6, 7), 5, 4, "skewed")
    pi = _pi(rng, guess, 4)
    metric.update_state(truth[:2], pi[:2])
    metric.update_state(truth[2:], pi[2:], sample_weight=np.array([1, 1, 0, 1], "float32"))
    per_sample = adjusted_mutual_info(truth, pi, ignore_label=0, per_sample=True)
    assert abs(_result(metric) - np.nanmean(np.delete(per_sample, 4))) < FLOAT32_ATOL


@pytest.mark.parametrize("shape", [(1,), (1, 1), ()])
def test_ami_metric_takes_one_weight_for_every_sample_as_keras_metrics_do(shape):
    # helper-201: a weight of shape (1,) was refused ("it must be [batch] or a scalar"), though
    # it broadcasts to every sample and keras.metrics.Mean takes it (as it takes [batch, 1])
    rng = np.random.default_rng(3)
    truth, guess = _segmentations(rng, 4, (6, 7), 5, 4, "correlated")
    pi = _pi(rng, guess, 4)
    weighted, spread = AdjustedMutualInformation(5), AdjustedMutualInformation(5)
    weighted.update_state(truth, pi, sample_weight=np.full(shape, 2.5, "float32"))
    spread.update_state(truth, pi, sample_weight=np.full(4, 2.5, "float32"))
    assert abs(_result(weighted) - _result(spread)) < 1e-7
    assert float(keras.ops.convert_to_numpy(weighted.count)) == pytest.approx(4 * 2.5)
    if shape:  # what Keras makes of the same weight over per-sample values (a scalar weighs its batch's mean)
        mean = keras.metrics.Mean()
        mean.update_state(np.arange(4, dtype="float32"), sample_weight=np.full(shape, 2.5, "float32"))
        assert float(keras.ops.convert_to_numpy(mean.count)) == pytest.approx(4 * 2.5)


def test_ami_metric_refuses_weights_that_do_not_broadcast_to_the_samples():
    rng = np.random.default_rng(4)
    truth, guess = _segmentations(rng, 4, (6, 7), 5, 4, "correlated")
    pi = _pi(rng, guess, 4)
    metric = AdjustedMutualInformation(5)
    for shape in ((2,), (4, 2), (3, 1)):
        with pytest.raises(ValueError, match=r"it must be \[batch\] \(or \[batch, 1\]\), \[1\] or a scalar. "
                           + re.escape(f"Received: sample_weight shape={shape} for y_true shape=(4, 6, 7)")):
            metric.update_state(truth, pi, sample_weight=np.ones(shape, "float32"))
        with pytest.raises(Exception):  # Keras' own metrics refuse them too (with the backend's error)
            keras.metrics.Mean().update_state(np.arange(4, dtype="float32"), sample_weight=np.ones(shape, "float32"))


def test_ami_metric_special_cases_as_sklearn():
    def ami(truth, guess, num_labels=4, num_groups=4, **kwargs):
        metric = AdjustedMutualInformation(num_labels, **kwargs)
        metric.update_state(np.array([truth]), _pi(np.random.default_rng(0), np.array([guess]), num_groups))
        return _result(metric)

    cases = [
        ([2, 2, 2, 2], [1, 1, 1, 1]),  # both a single cluster: 1
        ([0, 0, 1, 1], [3, 3, 3, 3]),  # one of them a single cluster: 0
        ([2, 2, 2, 2], [0, 1, 0, 1]),
        ([0, 1, 2, 3], [3, 1, 0, 2]),  # both all-distinct: 1 (sklearn's eps guard)
        ([0, 1, 2], [2, 0, 1]),
        ([0, 1, 2, 2], [0, 1, 2, 3]),  # MI = EMI: sklearn gives 1e-15
        ([0, 1, 2, 3], [0, 0, 1, 1]),  # truth all-distinct: 0
        ([0, 0, 1, 1, 2], [1, 1, 2, 2, 0]),  # perfect up to a permutation: 1
        ([0, 0, 0, 1], [0, 0, 0, 1]),  # a + b > n: the EMI's sum starts at a + b - n
        ([0, 0, 0, 1, 2], [1, 1, 0, 1, 0]),
        ([1, 1, 0, 0, 3, 3], [0, 1, 0, 1, 0, 1]),  # independent: negative
        ([0], [2]),  # one pixel
    ]
    for truth, guess in cases:
        want = adjusted_mutual_info_score(truth, guess)
        assert abs(ami(truth, guess) - want) < 1e-5, (truth, guess, want)
    assert ami([2, 2, 2, 2], [1, 1, 1, 1]) == 1.0 and ami([0, 0, 1, 1], [3, 3, 3, 3]) == 0.0
    # both all-distinct, where MI = EMI = the entropies: 1, also where float64 rounding
    # alone would give 0.5 for 20 pixels (numerator and denominator ~1e-15)
    with float64_enabled():
        for n in (4, 20, 30, 50):
            order = np.random.default_rng(n).permutation(n)
            for dtype in ("float32", "float64"):
                assert ami(np.arange(n), order, num_labels=n, num_groups=n, dtype=dtype) == 1.0, (n, dtype)
    # nothing seen, or only samples with no pixel left: 0, not NaN
    assert _result(AdjustedMutualInformation(4)) == 0.0
    assert ami([3, 3, 3], [0, 1, 2], ignore_label=3) == 0.0
    # all but one pixel ignored: a single cluster each, a perfect match
    assert ami([3, 0, 3], [0, 1, 2], ignore_label=3) == 1.0


def test_ami_metric_config_round_trip():
    metric = AdjustedMutualInformation(7, group_axis=-2, ignore_label=255, name="ami_t3", dtype="float64")
    config = metric.get_config()
    assert config == {"name": "ami_t3", "dtype": "float64", "num_labels": 7, "group_axis": -2, "ignore_label": 255}
    clone = AdjustedMutualInformation.from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
    assert isinstance(restored, AdjustedMutualInformation) and restored.get_config() == config
    assert AdjustedMutualInformation(3).get_config()["ignore_label"] is None


def _pi_model(pi):
    """A functional model that outputs its input (the group probabilities); the
    regularizer only gives ``compile`` a loss."""
    inputs = keras.Input(pi.shape[1:])
    return keras.Model(inputs, keras.layers.ActivityRegularization(l1=1e-6)(inputs))


def _evaluation_data(seed=2):
    rng = np.random.default_rng(seed)
    truth, guess = _segmentations(rng, 10, (6, 6), 4, 3, "correlated")
    truth[3] = 0  # all ignored with ignore_label=0
    return truth, _pi(rng, guess, 3, channel=True)  # pi [10, 3, 6, 6, 1], as RTagger's pi[:, t]


@pytest.mark.parametrize("jit_compile", [False, True])
def test_ami_metric_in_model_evaluate_equals_the_numpy_function(jit_compile, tmp_path):
    truth, pi = _evaluation_data()
    model = _pi_model(pi)
    model.compile(
        metrics=[AdjustedMutualInformation(4, ignore_label=0)],
        weighted_metrics=[AdjustedMutualInformation(4, ignore_label=0, name="weighted_ami")],
        jit_compile=jit_compile,
    )
    # batches of 4, 4 and 2: the mean over samples, not over batches
    weight = np.linspace(0.5, 2.0, len(truth)).astype("float32")
    got = model.evaluate(pi, truth, sample_weight=weight, batch_size=4, verbose=0, return_dict=True)
    want = adjusted_mutual_info(truth, pi, ignore_label=0)
    assert abs(got["adjusted_mutual_information"] - want) < FLOAT32_ATOL
    scores = adjusted_mutual_info(truth, pi, ignore_label=0, per_sample=True)
    counted = ~np.isnan(scores)
    want = np.sum(scores[counted] * weight[counted]) / np.sum(weight[counted])
    assert abs(got["weighted_ami"] - want) < FLOAT32_ATOL
    if jit_compile:
        return
    # a compiled model saves to .keras and loads back with its metric
    path = str(tmp_path / "ami.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    [metric] = loaded.get_compile_config()["metrics"]
    assert metric["registered_name"] == "keras_capsules>AdjustedMutualInformation"
    assert metric["config"]["ignore_label"] == 0 and metric["config"]["num_labels"] == 4
    again = loaded.evaluate(pi, truth, sample_weight=weight, batch_size=4, verbose=0, return_dict=True)
    for name in ("adjusted_mutual_information", "weighted_ami"):
        assert again[name] == pytest.approx(got[name], abs=1e-6)


def test_ami_metric_under_a_mirrored_strategy():
    strategy = two_cpu_strategy()  # (skips on another backend)
    truth, pi = _evaluation_data(seed=3)
    with strategy.scope():
        model = _pi_model(pi)
        model.compile(metrics=[AdjustedMutualInformation(4, ignore_label=0)])
    # each batch of 4 (and the last of 2) is split over the two replicas
    got = model.evaluate(pi, truth, batch_size=4, verbose=0, return_dict=True)["adjusted_mutual_information"]
    assert abs(got - adjusted_mutual_info(truth, pi, ignore_label=0)) < FLOAT32_ATOL


def test_ami_metric_labels_out_of_range_raise_eagerly_and_give_nan_when_traced():
    truth, pi = _evaluation_data()
    truth[5, 0, 0] = 4  # num_labels=4: labels are 0..3
    metric = AdjustedMutualInformation(4, ignore_label=0)
    with pytest.raises(ValueError, match=r"Labels must be integers in \[0, num_labels\) = \[0, 4\) or "
                       r"ignore_label=0. Received: y_true with invalid values \[4\]"):
        metric.update_state(truth, pi)
    with pytest.raises(ValueError, match=r"invalid values \[2.5\]"):
        metric.update_state(np.where(truth == 4, 2.5, truth).astype("float32"), pi)
    # whole float labels are labels, and ignore_label may lie outside [0, num_labels)
    metric.update_state(np.where(truth == 4, 3, truth).astype("float32"), pi)
    AdjustedMutualInformation(4, ignore_label=9).update_state(np.where(truth == 4, 9, truth), pi)
    model = _pi_model(pi)
    # traced: by tf.function on TensorFlow; JAX and torch trace only when they compile
    model.compile(metrics=[AdjustedMutualInformation(4, ignore_label=0)], jit_compile=BACKEND != "tensorflow")
    got = model.evaluate(pi, truth, batch_size=5, verbose=0, return_dict=True)
    assert np.isnan(got["adjusted_mutual_information"])


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_labels=0), r"`num_labels` must be a positive integer. Received: num_labels=0"),
    (dict(num_labels=3.0), r"Received: num_labels=3.0"),
    (dict(num_labels=True), r"Received: num_labels=True"),
    (dict(num_labels=None), r"Received: num_labels=None"),
    (dict(num_labels=3, group_axis=0), r"`group_axis` must be a non-zero integer .* Received: group_axis=0"),
    (dict(num_labels=3, group_axis=1.0), r"Received: group_axis=1.0"),
    (dict(num_labels=3, group_axis=True), r"Received: group_axis=True"),
    (dict(num_labels=3, ignore_label=0.5), r"`ignore_label` must be None or an integer label \(int32\). Received: ignore_label=0.5"),
    (dict(num_labels=3, ignore_label=float("nan")), r"Received: ignore_label=nan"),
    (dict(num_labels=3, ignore_label="0"), r"Received: ignore_label='0'"),
    (dict(num_labels=3, ignore_label=False), r"Received: ignore_label=False"),
    (dict(num_labels=3, ignore_label=2**40), r"Received: ignore_label=1099511627776"),
    (dict(num_labels=3, dtype="int32"), r"`dtype` must be a floating dtype. Received: dtype='int32'"),
])
def test_ami_metric_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdjustedMutualInformation(**kwargs)
    assert AdjustedMutualInformation(np.int64(3), group_axis=np.int32(-1), ignore_label=np.uint8(255)).get_config()[
        "ignore_label"] == 255


def test_ami_metric_refuses_shapes_that_do_not_fit():
    truth = np.zeros((2, 5, 4), "int32")
    pi = np.ones((2, 3, 5, 4), "float32")
    metric = AdjustedMutualInformation(3)
    metric.update_state(truth, pi)  # fits, and so do the trailing axes of size 1:
    metric.update_state(truth[..., None], pi)
    metric.update_state(truth, pi[..., None])
    metric.update_state(truth[..., None], pi[..., None])
    AdjustedMutualInformation(3, group_axis=-1).update_state(truth, np.ones((2, 5, 4, 3), "float32"))
    bad = [
        (truth, pi[:, :, :4], r"to have the shape of y_true .* without its group axis. Received: "
         r"y_true shape=\(2, 5, 4\), y_pred shape=\(2, 3, 4, 4\), group_axis=1"),
        (truth, pi[:, 0], r"without its group axis"),  # no group axis
        (truth[:1], pi, r"without its group axis"),  # batch sizes differ
        (truth, np.ones((2, 5, 4, 3), "float32"), r"without its group axis"),  # groups last, group_axis=1
    ]
    for y_true, y_pred, match in bad:
        with pytest.raises(ValueError, match=match):
            metric.update_state(y_true, y_pred)
    with pytest.raises(ValueError, match=r"`group_axis` must name an axis of y_pred after the batch axis. "
                       r"Received: .* group_axis=4"):
        AdjustedMutualInformation(3, group_axis=4).update_state(truth, pi)
    with pytest.raises(ValueError, match=r"`group_axis` must name an axis of y_pred after the batch axis"):
        AdjustedMutualInformation(3, group_axis=-4).update_state(truth, pi)
    with pytest.raises(ValueError, match=r"`sample_weight` of AdjustedMutualInformation weighs samples: it must "
                       r"be \[batch\] \(or \[batch, 1\]\), \[1\] or a scalar. Received: sample_weight shape=\(2, 5, 4\)"):
        metric.update_state(truth, pi, sample_weight=np.ones((2, 5, 4), "float32"))
    with pytest.raises(ValueError, match=r"sample_weight shape=\(3,\)"):
        metric.update_state(truth, pi, sample_weight=np.ones(3, "float32"))


def test_ami_metric_refuses_a_traced_shape_without_a_static_number_of_pixels():
    tensorflow_only("tf.function with an input signature of unknown sizes")
    import tensorflow as tf

    metric = AdjustedMutualInformation(3)
    update = tf.function(metric.update_state, input_signature=[
        tf.TensorSpec([None, None, 4], "int32"), tf.TensorSpec([None, 3, None, 4], "float32")])
    with pytest.raises(ValueError, match=r"needs a static number of groups and of pixels.*"
                       r"y_pred shape=\(None, 3, None, 4\)"):
        update.get_concrete_function()
    # a batch of unknown size, and labels whose sizes are unknown, trace
    update = tf.function(metric.update_state, input_signature=[
        tf.TensorSpec([None, None, None], "int32"), tf.TensorSpec([None, 3, 5, 4], "float32")])
    update(tensor(np.zeros((2, 5, 4)), "int32"), tensor(np.ones((2, 3, 5, 4)), "float32"))


@pytest.mark.parametrize("dtype", ["float16", "mixed_float16", "bfloat16"])
def test_the_metric_sums_in_float32_under_a_half_dtype(dtype):
    # helper-180: its float16 count overflowed after 65,504 samples (inf / inf: a NaN
    # result, silently); a bfloat16 one stopped growing at 256
    truth = np.tile(np.array([[0, 0, 1, 1]]), (1000, 1))
    pi = np.moveaxis(np.eye(2)[truth], -1, 1)
    metric = AdjustedMutualInformation(2, dtype=dtype)
    for _ in range(70):
        metric.update_state(truth, pi)
    assert float(metric.count) == 70_000 and float(metric.result()) == 1.0
    assert keras.backend.standardize_dtype(metric.result().dtype) == keras.backend.standardize_dtype(metric.dtype)


@pytest.mark.parametrize("dtype,offset", [("int64", 2**32), ("int64", -(2**32)), ("uint64", 2**32)])
def test_traced_labels_beyond_int32_give_nan_not_wrapped_labels(dtype, offset):
    # (helper-197) int64 labels were cast to int32 before the range check: in a traced call a
    # label of 2**32 + 1 wrapped around to label 1 and the sample was scored as valid,
    # where the docstring promises a NaN result for labels out of range (eager calls raise).
    tensorflow_only("a traced call with int64 labels")
    import tensorflow as tf

    truth, pi = _evaluation_data()
    metric = AdjustedMutualInformation(4)
    tf.function(metric.update_state)(tf.constant(truth.astype(dtype) + np.array(offset, dtype)), tf.constant(pi))
    assert np.isnan(float(metric.result()))
    metric.reset_state()
    tf.function(metric.update_state)(tf.constant(truth.astype(dtype)), tf.constant(pi))  # in range: as before
    assert float(metric.result()) == pytest.approx(adjusted_mutual_info(truth, pi), abs=FLOAT32_ATOL)
