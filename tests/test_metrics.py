"""keras_capsules.metrics beyond the RTagger tests (tests/layers/rladder/test_rtagger.py)."""

import numpy as np
import pytest

from keras_capsules.metrics import adjusted_mutual_info


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
    (dict(ignore_label=float("nan")), r"`ignore_label` must be None or a finite number \(a label\). Received: ignore_label=nan"),
    (dict(ignore_label="0"), r"`ignore_label` must be None or a finite number"),
    (dict(ignore_label=True), r"`ignore_label` must be None or a finite number"),
])
def test_adjusted_mutual_info_refuses_a_per_sample_or_ignore_label_that_would_be_misread(bad, match):
    # per_sample="no" returned every sample's score; ignore_label=nan ignored no pixel
    truth = np.array([[0, 0, 1, 1]])
    pi = np.eye(2)[[0, 0, 1, 1]].T[None]
    assert adjusted_mutual_info(truth, pi, ignore_label=np.int64(0), per_sample=np.bool_(False)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=match):
        adjusted_mutual_info(truth, pi, **bad)
