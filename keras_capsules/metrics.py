"""Evaluation metrics computed on numpy arrays (outside the training graph)."""

import numbers

import numpy as np


def adjusted_mutual_info(true_groups, pi, group_axis=1, ignore_label=None, per_sample=False):
    """Adjusted mutual information between true and predicted segmentations.

    The predicted group of each pixel is the ``argmax`` of the group assignment
    probabilities ``pi`` (as returned by RTagger for one iteration). The AMI of
    every sample is computed by ``sklearn.metrics.adjusted_mutual_info_score``
    (1 for a perfect segmentation up to a permutation of the labels, about 0 for a
    random one) and averaged over the batch.

    Args:
        true_groups: integer labels ``[batch, *pixels]``.
        pi: assignments ``[batch, K, *pixels]`` (groups at ``group_axis``), optionally
            with a trailing channel axis of size 1 (``[batch, K, *pixels, 1]``).
        group_axis: the axis of ``pi`` holding the groups. Default 1.
        ignore_label: pixels whose true label equals this value (e.g. the
            background) are left out. Default None (every pixel counts).
        per_sample: return the AMI of every sample instead of the mean.

    Returns:
        The mean AMI (a float), or a ``[batch]`` array with ``per_sample=True``.
        Samples with no pixel left are NaN (and skipped by the mean); an empty
        batch gives NaN (an empty array with ``per_sample=True``).

    Raises:
        ValueError: shapes that do not fit, a ``group_axis`` that is not an integer
            naming an axis of ``pi`` after the batch axis, or a ``pi`` holding NaN or
            inf (``argmax`` would read a NaN as the largest value).
    """
    from sklearn.metrics import adjusted_mutual_info_score

    true_groups = np.asarray(true_groups)
    pi = np.asarray(pi)
    if pi.dtype.kind not in "biuf":
        # bfloat16 (a mixed_bfloat16 model's predictions) is a numpy dtype of kind "V", not
        # a floating one: the finiteness check below skipped it, and a NaN pi scored as
        # a segmentation. float32 keeps its values and their order.
        pi = pi.astype(np.float32)
    if isinstance(group_axis, bool) or not isinstance(group_axis, numbers.Integral):
        raise ValueError(f"`group_axis` must be an integer. Received: group_axis={group_axis!r}")
    if not isinstance(per_sample, (bool, np.bool_)):
        # per_sample="no" was true
        raise ValueError(f"`per_sample` must be True or False. Received: per_sample={per_sample!r}")
    if ignore_label is not None and not (
        isinstance(ignore_label, numbers.Number) and not isinstance(ignore_label, bool) and np.isfinite(ignore_label)
    ):
        # NaN equals no label, so ignore_label=nan silently ignored nothing
        raise ValueError(f"`ignore_label` must be None or a finite number (a label). Received: ignore_label={ignore_label!r}")
    if np.issubdtype(pi.dtype, np.floating) and not np.isfinite(pi).all():
        # argmax takes a NaN as the largest value, so a diverged model looked segmented
        raise ValueError("`pi` must be finite: it holds NaN or inf (a diverged model?). "
                         f"Received: pi with {int(np.sum(~np.isfinite(pi)))} non-finite values")
    # a negative group_axis counts from the end of pi as given, channel axis included
    axis = group_axis + pi.ndim if group_axis < 0 else group_axis
    if not 0 < axis < pi.ndim:
        raise ValueError(
            "`group_axis` must name an axis of pi after the batch axis. Received: "
            f"group_axis={group_axis} for pi of shape {pi.shape}"
        )
    if pi.ndim == true_groups.ndim + 2 and pi.shape[-1] == 1 and axis != pi.ndim - 1:
        pi = pi[..., 0]
    if pi.ndim != true_groups.ndim + 1:
        raise ValueError(
            "adjusted_mutual_info expects pi with one axis (the groups) more than "
            f"true_groups. Received: true_groups shape={true_groups.shape}, pi shape={pi.shape}"
        )
    predicted = np.argmax(pi, axis=axis)
    if predicted.shape != true_groups.shape:
        raise ValueError(
            "pi without its group axis must have the shape of true_groups. Received: "
            f"true_groups shape={true_groups.shape}, pi shape={pi.shape}, group_axis={group_axis}"
        )
    scores = []
    # Explicit sizes: reshape(n, -1) fails for an empty batch (n = 0).
    pixels = int(np.prod(true_groups.shape[1:]))
    flat_true = true_groups.reshape(len(true_groups), pixels)
    flat_pred = predicted.reshape(len(predicted), pixels)
    for truth, guess in zip(flat_true, flat_pred):
        keep = np.ones_like(truth, dtype=bool) if ignore_label is None else truth != ignore_label
        if not keep.any():
            scores.append(np.nan)
            continue
        scores.append(adjusted_mutual_info_score(truth[keep], guess[keep]))
    scores = np.asarray(scores, dtype=np.float64)
    if per_sample:
        return scores
    return float(np.nanmean(scores)) if np.isfinite(scores).any() else float("nan")
