"""Evaluation metrics for segmentations: the adjusted mutual information (AMI).

* :class:`AdjustedMutualInformation`, a stateful Keras metric computed in the graph
  with ``keras.ops`` (``model.compile(metrics=[...])``, ``model.fit`` / ``evaluate``,
  ``jit_compile=True``, ``tf.distribute``), the weighted mean AMI over the samples seen;
* :func:`adjusted_mutual_info`, computed on numpy arrays outside the training graph by
  scikit-learn, sample by sample (``per_sample=True`` gives every sample's value).

Both give each sample the AMI of ``sklearn.metrics.adjusted_mutual_info_score`` (its
default, arithmetic normalization) and average over the samples that have pixels left.
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_capsules._validation import concrete_values, positive_int
from keras_capsules.ops import divide_no_nan, routing_dtype

__all__ = ["AdjustedMutualInformation", "adjusted_mutual_info"]

#: sklearn's floor for the AMI's numerator and denominator (``np.finfo("float64").eps``)
_EPS64 = float(np.finfo(np.float64).eps)


def adjusted_mutual_info(true_groups, pi, group_axis=1, ignore_label=None, per_sample=False):
    """Adjusted mutual information between true and predicted segmentations.

    The predicted group of each pixel is the ``argmax`` of the group assignment
    probabilities ``pi`` (as returned by RTagger for one iteration). The AMI of
    every sample is computed by ``sklearn.metrics.adjusted_mutual_info_score``
    (1 for a perfect segmentation up to a permutation of the labels, about 0 for a
    random one) and averaged over the batch.

    This runs outside the graph, on numpy arrays, one sample at a time. For a metric
    of ``model.compile(metrics=[...])`` (in the graph, ``jit_compile=True`` and
    ``tf.distribute`` included) use :class:`AdjustedMutualInformation`, which gives the
    same mean; this function gives every sample's value (``per_sample=True``) and
    refuses a non-finite ``pi``.

    Args:
        true_groups: integer labels ``[batch, *pixels]``, or ``[batch, *pixels, 1]``.
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
        isinstance(ignore_label, numbers.Real) and not isinstance(ignore_label, bool) and np.isfinite(ignore_label)
        and float(ignore_label).is_integer()
    ):
        # NaN equals no label, so ignore_label=nan silently ignored nothing, and so did 2.5
        # (helper-180; AdjustedMutualInformation refused it)
        raise ValueError(
            "`ignore_label` must be None or an integer label (a finite whole number). "
            f"Received: ignore_label={ignore_label!r}"
        )
    if true_groups.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(true_groups) & (np.mod(true_groups, 1) == 0)
        if not whole.all():
            # labels of 0.5 or NaN were scored as categories (AdjustedMutualInformation refuses them)
            raise ValueError("`true_groups` must hold integer labels (whole numbers). Received: labels such as "
                             f"{float(true_groups[~whole].flat[0])!r}")
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
    elif pi.ndim == true_groups.ndim and true_groups.ndim > 1 and true_groups.shape[-1] == 1:
        # labels [batch, *pixels, 1], as AdjustedMutualInformation takes them
        true_groups = true_groups[..., 0]
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


def _log_factorials(n_pixels, dtype):
    """``log(m!)`` for ``m = 0 .. n_pixels`` (a constant ``[n_pixels + 1]``): a cumulative
    sum of ``log(1) .. log(n_pixels)``, taken in float64 numpy once per trace (the number
    of pixels is static) and rounded to ``dtype`` only then."""
    table = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n_pixels + 1, dtype=np.float64)))])
    return ops.convert_to_tensor(table.astype(dtype))


def _away_from_zero(x):
    """sklearn's guard for the AMI's numerator and denominator: ``x`` pushed at least
    ``eps`` (float64's) away from zero, keeping its sign (``ops.where`` only: torch's
    ``maximum`` and ``minimum`` return float32 for float64 operands)."""
    return ops.where(x < 0, ops.where(x > -_EPS64, -_EPS64, x), ops.where(x < _EPS64, _EPS64, x))


def _ami_per_sample(labels, groups, num_labels, num_groups, n_pixels, dtype):
    """The AMI of every sample, as ``sklearn.metrics.adjusted_mutual_info_score``.

    Args:
        labels: int32 ``[batch, n_pixels]``: true labels, -1 (or anything outside
            ``[0, num_labels)``) for pixels left out.
        groups: int32 ``[batch, n_pixels]``: predicted groups in ``[0, num_groups)``.
        dtype: "float64" or "float32", the precision of everything after the counts.

    Returns:
        ``(ami, n)``, both ``[batch]`` in ``dtype``: the AMI (meaningless where
        ``n == 0``) and the number of pixels counted.
    """
    # Contingency table [batch, L, K]. Counts of 0/1 products are exact in float32 up to
    # 2**24 pixels; one-hot rows of the left-out pixels are zeros.
    count_dtype = "float32" if n_pixels < 2**24 else dtype
    true_onehot = ops.one_hot(ops.where((labels >= 0) & (labels < num_labels), labels, -1), num_labels, dtype=count_dtype)
    group_onehot = ops.one_hot(groups, num_groups, dtype=count_dtype)
    table = ops.cast(ops.einsum("bnl,bnk->blk", true_onehot, group_onehot), dtype)
    a = ops.sum(table, axis=2)  # [batch, L] sizes of the true classes
    b = ops.sum(table, axis=1)  # [batch, K] sizes of the predicted groups
    n = ops.sum(a, axis=1)  # [batch]

    def safe(x):  # logs of empty cells are masked out; this keeps them finite
        return ops.where(x > 0, x, ops.ones_like(x))

    log_n = ops.log(safe(n))

    # Mutual information (sklearn's mutual_info_score, term by term).
    share = table / safe(n)[:, None, None]
    log_outer = 2.0 * log_n[:, None, None] - ops.log(safe(a[:, :, None] * b[:, None, :]))
    terms = share * (ops.log(safe(table)) - log_n[:, None, None]) + share * log_outer
    terms = ops.where((table > 0) & (ops.abs(terms) >= _EPS64), terms, ops.zeros_like(terms))
    mi = ops.sum(terms, axis=(1, 2))
    mi = ops.where(mi > 0, mi, ops.zeros_like(mi))

    def entropy(sizes):
        p = sizes / safe(n)[:, None]
        logs = ops.log(safe(sizes)) - log_n[:, None]
        return -ops.sum(ops.where(sizes > 0, p * logs, ops.zeros_like(p)), axis=1)

    # Expected MI under the hypergeometric model (Vinh et al. 2010, eq. 24a), summed over
    # every cell (i, j) and every count m = n_ij in 1..n_pixels at once: [batch, L, K, N].
    lf = _log_factorials(n_pixels, dtype)

    def log_factorial(m):
        return ops.take(lf, ops.clip(m, 0, n_pixels))

    ai, bi, ni = (ops.cast(x, "int32") for x in (a, b, n))
    m = ops.arange(1, n_pixels + 1, dtype="int32")
    A, B, Nn = ai[:, :, None, None], bi[:, None, :, None], ni[:, None, None, None]
    valid = (m <= A) & (m <= B) & (m >= A + B - Nn)
    # log of the hypergeometric probability of n_ij = m
    log_p = (
        (log_factorial(ai) + log_factorial(ni[:, None] - ai))[:, :, None, None]
        + (log_factorial(bi) + log_factorial(ni[:, None] - bi))[:, None, :, None]
        - log_factorial(ni)[:, None, None, None]
        - log_factorial(m)
        - log_factorial(A - m)
        - log_factorial(B - m)
        - log_factorial(Nn - A - B + m)
    )
    p = ops.where(valid, ops.exp(ops.where(valid, log_p, ops.zeros_like(log_p))), ops.zeros_like(log_p))
    m_float = ops.cast(m, dtype)
    term1 = m_float / safe(n)[:, None, None, None]
    term2 = (log_n[:, None, None, None] + ops.log(m_float)
             - ops.log(safe(a))[:, :, None, None] - ops.log(safe(b))[:, None, :, None])
    emi = ops.sum(ops.where(valid, term1 * term2 * p, ops.zeros_like(p)), axis=(1, 2, 3))

    numerator = _away_from_zero(mi - emi)
    denominator = _away_from_zero((entropy(a) + entropy(b)) / 2.0 - emi)
    ami = numerator / denominator
    # sklearn's special cases: both labelings one cluster is a perfect match (1), one of
    # them a single cluster scores 0. Both all-distinct (every pixel its own class and
    # group) is 1 in sklearn through its guard of a zero numerator and denominator; made
    # explicit here, where rounding leaves the ratio of two ~1e-15 to chance (0.5 for 20
    # pixels in float64).
    classes = ops.sum(ops.cast(a > 0, dtype), axis=1)
    clusters = ops.sum(ops.cast(b > 0, dtype), axis=1)
    ones, zeros = ops.ones_like(ami), ops.zeros_like(ami)
    ami = ops.where((classes == 1) | (clusters == 1), zeros, ami)
    ami = ops.where(((classes == 1) & (clusters == 1)) | ((classes == n) & (clusters == n)), ones, ami)
    return ami, n


@keras.saving.register_keras_serializable(package="keras_capsules")
class AdjustedMutualInformation(keras.metrics.Metric):
    """The adjusted mutual information (AMI) of predicted segmentations, a Keras metric.

    Scores how well the groups a model assigns to the pixels (e.g. RTagger's masks
    ``pi``) recover the true objects, whatever the groups are called: the predicted
    group of a pixel is the ``argmax`` of ``y_pred`` over the group axis, and each
    sample's AMI is computed exactly as ``sklearn.metrics.adjusted_mutual_info_score
    (truth, guess)`` with its default arithmetic normalization: the contingency table
    of true labels and groups, the mutual information ``MI``, the entropies ``H_true``,
    ``H_pred`` and the expected mutual information ``EMI`` of two random labelings with
    the same cluster sizes (hypergeometric model),
    ``AMI = (MI - EMI) / ((H_true + H_pred) / 2 - EMI)``. 1 is a perfect segmentation
    up to a permutation of the labels, about 0 a random one. sklearn's special cases
    hold: both labelings a single cluster (or both all-distinct) give 1, one of them a
    single cluster 0, and a numerator or denominator within float64's ``eps`` of zero
    is pushed to ``+-eps`` (keeping its sign).

    The result is the mean AMI over the samples seen since the last reset, weighted by
    ``sample_weight``; samples with no pixel left (all ``ignore_label``) do not count,
    and before any sample counts the result is 0 (not NaN). Everything runs in the graph
    with ``keras.ops`` (``model.fit`` / ``evaluate``, ``jit_compile=True``; under
    ``tf.distribute`` the state, a weighted sum and a count, adds up over the replicas).
    For the AMI of every sample, use :func:`adjusted_mutual_info` (numpy and sklearn,
    ``per_sample=True``).

    Precision: the per-sample math runs in float32 (float64 for ``dtype="float64"``,
    which on JAX needs ``jax_enable_x64``), also under mixed precision; the
    log-factorials of the EMI come from a table summed in float64 and rounded once.
    Measured against sklearn on random segmentations with 2-10 labels and 2-8 groups:
    float32 within 5e-6 of it on 28x28 images (1.2e-5 on 64x64 and 128x128), float64
    within 1e-13. Very unbalanced labelings lose more in float32: an object of 1-5
    pixels in a 64x64 image, segmented nearly right, came out up to 3.7e-4 from sklearn
    (float64 within 1e-12 there); use ``dtype="float64"`` to score tiny objects.
    Memory: the EMI holds ``batch * num_labels * K * pixels`` values at once (about
    8 MB of float32 for 32 images of 28x28 with 10 labels and 8 groups).

    Non-finite ``y_pred`` is not checked (that would cost a pass over it in the graph):
    the group of a pixel whose probabilities hold a NaN is the backend's ``argmax`` of
    them (TensorFlow skips NaN, JAX and numpy take it as the largest value), so a
    diverged model gets a meaningless score rather than an error; the numpy function
    raises for it.

    Args:
        num_labels: the number of true labels: ``y_true`` holds integers in
            ``[0, num_labels)`` (and ``ignore_label``).
        group_axis: the axis of ``y_pred`` holding the ``K`` groups (counted as in
            ``y_pred``'s shape, a trailing channel axis included when negative).
            Default 1.
        ignore_label: pixels whose true label equals this integer (e.g. the
            background) are left out; it may lie outside ``[0, num_labels)``.
            Default None (every pixel counts).
        name: the metric's name. Default ``"adjusted_mutual_information"``.
        dtype: the dtype of the state and result. Default None (``floatx``).

    Call arguments:
        y_true: integer labels ``[batch, *pixels]``, or ``[batch, *pixels, 1]``. A
            label outside ``[0, num_labels)`` (other than ``ignore_label``), or a float
            label that is not whole, raises a ``ValueError`` in eager calls; in a traced
            one (``model.fit``, ``jit_compile=True``) it makes its sample's AMI, and so
            the result, NaN.
        y_pred: group probabilities ``[batch, K, *pixels]`` with the groups at
            ``group_axis``, optionally with a trailing channel axis of size 1
            (RTagger's ``pi[:, t]``, ``[batch, K, H, W, 1]``, for iteration ``t``).
            Without its group axis it must have the shape of ``y_true``, else a
            ``ValueError`` (raised when the call is traced). The number of pixels and
            ``K`` must be static.
        sample_weight: optional weights of the samples, ``[batch]`` (or ``[batch, 1]``),
            or one for every sample: ``[1]`` or a scalar.

    Returns:
        ``result()``: the weighted mean AMI of the samples seen, a scalar (0 before
        any sample counted).

    Example:

    ```python
    truth = np.array([[0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1]])  # [batch, pixels]
    groups = np.array([[2, 2, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]])
    pi = np.moveaxis(np.eye(3)[groups], -1, 1)  # [batch, K=3, pixels]
    metric = keras_capsules.metrics.AdjustedMutualInformation(num_labels=3)
    metric.update_state(truth, pi)
    per_sample = keras_capsules.metrics.adjusted_mutual_info(truth, pi, per_sample=True)
    print(float(metric.result()), per_sample.mean())  # the same value
    ```

    In a model: ``model.compile(optimizer, loss, metrics=[AdjustedMutualInformation(
    num_labels)])``, for a model whose output is ``pi`` of one iteration.

    Reference:
        N. X. Vinh, J. Epps, J. Bailey, "Information Theoretic Measures for
        Clusterings Comparison: Variants, Properties, Normalization and Correction
        for Chance", JMLR 11, 2010 (the AMI and its expected MI, eq. 24a);
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (RTagger's
        segmentations scored by AMI).
    """

    def __init__(self, num_labels, group_axis=1, ignore_label=None, name="adjusted_mutual_information", dtype=None):
        num_labels = positive_int("num_labels", num_labels)
        if isinstance(group_axis, bool) or not isinstance(group_axis, numbers.Integral) or group_axis == 0:
            raise ValueError(
                "`group_axis` must be a non-zero integer (an axis of y_pred after the batch "
                f"axis; negative counts from the end). Received: group_axis={group_axis!r}"
            )
        if ignore_label is not None and (
            isinstance(ignore_label, bool)
            or not isinstance(ignore_label, numbers.Integral)
            or not -(2**31) <= ignore_label < 2**31
        ):
            raise ValueError(
                "`ignore_label` must be None or an integer label (int32). "
                f"Received: ignore_label={ignore_label!r}"
            )
        super().__init__(name=name, dtype=dtype)
        if not keras.backend.standardize_dtype(self.dtype).startswith(("float", "bfloat")):
            raise ValueError(f"`dtype` must be a floating dtype. Received: dtype={dtype!r}")
        self.num_labels = num_labels
        self.group_axis = int(group_axis)
        self.ignore_label = None if ignore_label is None else int(ignore_label)
        # the sums in float32 at least: in float16 the count overflowed after 65,504 samples
        # (inf / inf: a NaN result, silently; helper-180), in bfloat16 it stopped growing at 256
        self._state_dtype = routing_dtype(self.dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype=self._state_dtype, name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype=self._state_dtype, name="count")

    def _aligned(self, y_true, y_pred):
        """``(labels, groups)``, int32 ``[batch, n_pixels]`` each, and ``n_pixels``; K."""
        rank_true, rank_pred = len(y_true.shape), len(y_pred.shape)
        axis = self.group_axis + rank_pred if self.group_axis < 0 else self.group_axis
        received = (f"Received: y_true shape={tuple(y_true.shape)}, y_pred shape={tuple(y_pred.shape)}, "
                    f"group_axis={self.group_axis}")
        if not 0 < axis < rank_pred:
            raise ValueError(f"`group_axis` must name an axis of y_pred after the batch axis. {received}")
        if rank_pred == rank_true + 2 and y_pred.shape[-1] == 1 and axis != rank_pred - 1:
            y_pred = y_pred[..., 0]  # the trailing channel axis of RTagger's pi
        elif rank_true == rank_pred and rank_true > 1 and y_true.shape[-1] == 1:
            y_true = y_true[..., 0]  # labels [batch, *pixels, 1]
        pred_shape = tuple(y_pred.shape)
        pixels = pred_shape[1:axis] + pred_shape[axis + 1:]
        if len(y_pred.shape) != len(y_true.shape) + 1 or any(
            t is not None and p is not None and t != p
            for t, p in zip(tuple(y_true.shape), pred_shape[:1] + pixels)
        ):
            raise ValueError(
                "AdjustedMutualInformation expects y_pred (the group probabilities, "
                "[batch, K, *pixels] with the groups at group_axis, optionally [..., 1]) "
                "to have the shape of y_true ([batch, *pixels] or [batch, *pixels, 1]) "
                f"without its group axis. {received}"
            )
        num_groups = pred_shape[axis]
        if num_groups is None or any(p is None for p in pixels):
            raise ValueError(
                "AdjustedMutualInformation needs a static number of groups and of pixels "
                f"(the shape of y_pred after the batch axis). {received}"
            )
        n_pixels = math.prod(pixels)
        groups = ops.reshape(ops.cast(ops.argmax(y_pred, axis=axis), "int32"), (-1, n_pixels))
        return ops.reshape(y_true, (-1, n_pixels)), groups, n_pixels, num_groups

    def _check_labels(self, y_true):
        """Eager calls only: labels outside ``[0, num_labels)`` are a ValueError."""
        values = concrete_values(y_true)
        if values is None or not values.size:
            return
        values = np.asarray(values)
        with np.errstate(invalid="ignore"):
            bad = ~((values >= 0) & (values < self.num_labels) & (values == np.floor(values)))
            if self.ignore_label is not None:
                bad &= values != self.ignore_label
        if bad.any():
            shown = np.unique(values[bad])[:10]
            if np.all(np.isfinite(shown)) and np.all(shown == np.floor(shown)):
                shown = shown.astype("int64")
            raise ValueError(
                f"Labels must be integers in [0, num_labels) = [0, {self.num_labels})"
                + ("" if self.ignore_label is None else f" or ignore_label={self.ignore_label}")
                + f". Received: y_true with invalid values {shown.tolist()}"
            )

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Adds the AMI of every sample of the batch (see the class docstring)."""
        y_true = ops.convert_to_tensor(y_true)
        y_pred = ops.convert_to_tensor(y_pred)
        true, groups, n_pixels, num_groups = self._aligned(y_true, y_pred)
        weight = self._sample_weight(sample_weight, y_true)
        self._check_labels(true)
        labels = ops.cast(true, "int32")
        true_dtype = keras.backend.standardize_dtype(true.dtype)
        if true_dtype in ("int64", "uint32", "uint64"):
            # labels beyond int32 wrapped around in the cast (2**32 + 1 became label 1) and
            # were scored as valid ones in traced calls: they are invalid labels (NaN)
            whole = true < 2**31 if true_dtype.startswith("u") else (true >= -(2**31)) & (true < 2**31)
        elif keras.backend.is_int_dtype(true_dtype) or true_dtype == "bool":
            whole = ops.ones_like(labels, dtype="bool")
        else:  # float labels (as Keras may hand them over) must be whole numbers
            whole = ops.cast(labels, true.dtype) == true
        kept = whole if self.ignore_label is None else whole & (labels != self.ignore_label)
        invalid = (kept & ((labels < 0) | (labels >= self.num_labels))) | ops.logical_not(whole)
        ami, n = _ami_per_sample(
            ops.where(kept, labels, -1), groups, self.num_labels, num_groups, n_pixels, routing_dtype(self.dtype)
        )
        ami = ops.cast(ami, self._state_dtype)
        # A label out of range, only possible in traced calls (eager ones raised): the
        # sample's AMI is NaN, so the result shows it instead of scoring part of the pixels.
        broken = ops.any(invalid, axis=1)
        ami = ops.where(broken, ops.full_like(ami, float("nan")), ami)
        weight = ops.ones_like(ami) if weight is None else ops.cast(weight, self._state_dtype) * ops.ones_like(ami)
        # samples with no pixel left, and samples of weight 0, do not count
        counted = (broken | (n > 0)) & (weight != 0)
        zeros = ops.zeros_like(ami)
        self.total.assign_add(ops.sum(ops.where(counted, ami * weight, zeros)))
        self.count.assign_add(ops.sum(ops.where(counted, weight, zeros)))

    def _sample_weight(self, sample_weight, y_true):
        """``sample_weight`` as ``[batch]``, ``[1]`` (or a scalar) of the state's dtype, or None.

        As Keras' reduction metrics (``keras.metrics.Mean``) take weights broadcastable to
        the per-sample values ``[batch]``: ``[batch]``, ``[batch, 1]``, ``[1]`` (and
        ``[1, 1]``), or a scalar. A ``[1]`` weight (one weight for the batch) was refused.
        """
        if sample_weight is None:
            return None
        weight = ops.cast(ops.convert_to_tensor(sample_weight), self._state_dtype)
        given = tuple(weight.shape)
        if len(weight.shape) > 1 and all(d == 1 for d in weight.shape[1:]):
            weight = ops.reshape(weight, (-1,))
        batch = y_true.shape[0]
        if len(weight.shape) > 1 or (
            len(weight.shape) == 1 and None not in (weight.shape[0], batch) and weight.shape[0] not in (1, batch)
        ):
            raise ValueError(
                "`sample_weight` of AdjustedMutualInformation weighs samples: it must be "
                f"[batch] (or [batch, 1]), [1] or a scalar. Received: sample_weight shape={given} "
                f"for y_true shape={tuple(y_true.shape)}"
            )
        return weight

    def result(self):
        # (not keras.ops.divide_no_nan: on torch it rounded a float64 AMI to float32)
        return ops.cast(divide_no_nan(self.total, self.count), self.dtype)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"num_labels": self.num_labels, "group_axis": self.group_axis, "ignore_label": self.ignore_label}
        )
        return config
