"""Losses: the margin loss on capsule lengths and its combinations with focal and
cross-entropy terms; the Gaussian-mixture negative log-likelihood of RTagger.

Both losses take class scores that are capsule lengths in ``[0, 1)`` (see
:class:`keras_capsules.layers.CapsuleLength`) and labels in either form:

* integer class ids, shape ``[batch]`` or ``[batch, 1]`` (sparse labels), or
* one-hot (or, for the margin term, multi-hot) targets ``[batch, n_classes]``.

The form is told from the shapes: labels with one axis fewer than the scores, or a
last axis of 1 while there are several classes, are class ids; labels of the same
shape as the scores are one-hot targets. Traced labels whose last axis is unknown
(a ``tf.data`` pipeline that lost the static shape) are told apart when the graph
runs: a last axis of 1 holds class ids, one of ``n_classes`` one-hot targets. Labels
(or scores) whose rank is unknown (traced for ``tf.TensorSpec(shape=None)``, e.g. from
a ``tf.numpy_function``) cannot be told apart and raise a ``ValueError`` naming them:
give them a static shape (``tf.ensure_shape``).

Class ids must be integers in ``[0, n_classes)``. Called eagerly (the loss object on
concrete tensors or arrays, ``model.fit(..., run_eagerly=True)``, or ``model.fit``
without ``jit_compile`` on JAX and torch, whose steps then run eagerly), any other id
raises a ``ValueError`` that names the bad values. Inside a traced function
(``model.fit`` and ``model.evaluate`` on TensorFlow, ``jit_compile=True`` on any
backend, ``torch.compile`` included) values cannot be checked without
backend-specific assertions, so a sample with such a label gets a NaN loss and no
gradient: the reported loss turns NaN (stop with
``keras.callbacks.TerminateOnNaN``) while the weights stay finite, instead of the
sample training silently as "no class present".

Scores that carry a Keras mask over the label positions (e.g. per-token capsule
lengths ``[batch, seq, n_classes]`` with the mask ``[batch, seq]`` of their padding)
give a loss over the unmasked positions only, as for any Keras loss; the labels at
padded positions are ignored whatever they hold (a padding label such as -1 is no
error and no NaN), and so are the scores there: NaN, inf or -inf scores at padding
change neither the loss nor its gradients, which are 0 there (the inputs at masked
positions are replaced by zeros before the math, see :class:`GlobalBatchLoss`). A mask
over the classes (of the scores' own shape) is refused with a ``ValueError``.

A sample weight of 0 is a weight, not padding, as in Keras' own losses: the value it
weighs still enters the sum (0 * NaN is NaN) and its labels are checked. Pad with a
mask (a ``Masking`` layer, ``mask_zero=True``, or the mask set on the scores).

Under a ``tf.distribute`` strategy of several replicas, every loss here averages over
the global batch, as on one device (Keras' own losses average each replica's share
separately): see :class:`GlobalBatchLoss`, the base class to build such a loss.
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_capsules._validation import (boolean, concrete_values, exactly_shaped_like, like_values, positive_float,
                                        require_aligned_sizes, require_known_ranks, require_known_weight_rank,
                                        several_replicas)
from keras_capsules.ops import divide_no_nan, max_with_initial, maximum, routing_dtype

__all__ = ["GlobalBatchLoss", "CapsuleLoss", "MarginLoss", "MixtureNLL", "mixture_nll", "margin_term", "focal_term", "cross_term"]

try:  # the getter keras.losses.Loss uses (masks of JAX arrays are not attributes)
    from keras.src.backend import get_keras_mask as _get_keras_mask
except ImportError:  # pragma: no cover - another Keras layout: read the attribute
    _get_keras_mask = None

_TERMS = ("margin", "focal", "cross")

#: bfloat16's largest number (float32's exponents, 8 significant bits): numpy's finfo knows no bfloat16
_BFLOAT16_MAX = (2 - 2.0**-7) * 2.0**127


def _number(name, value, minimum=None, dtype=None, squared=False):
    """``value`` as a float: a finite real number (not a bool), ``>= minimum`` if given.

    With ``dtype`` (the dtype the loss returns: its own, or that of the scores for the
    terms) it must also be finite in that dtype, and with ``squared`` its square too (the
    margins, which the margin term squares): a Python float of 1e39 is inf in float32, 1e5
    in float16, and a margin of 1e20 is finite in float32 but its square is not, so the
    loss was inf or NaN whatever the scores. (The loss computes in float32 for a float16 or
    bfloat16 ``dtype``, see :func:`_work_dtype`, but returns ``dtype``: a margin whose
    square is beyond float16's range gave an inf float16 loss for every capsule length.)
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)  # NaN or inf give NaN losses (or drop a term)
        or (minimum is not None and value < minimum)
    ):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"`{name}` must be a finite number{bound}. Received: {name}={value!r}")
    if dtype is not None:
        dtype = keras.backend.standardize_dtype(dtype)
        largest = _BFLOAT16_MAX if dtype == "bfloat16" else float(np.finfo(dtype).max)
        if squared:
            largest = math.sqrt(largest)
        if abs(value) > largest:
            what = "whose square is finite" if squared else "that is finite"
            raise ValueError(
                f"`{name}` must be a number {what} in {dtype}, the dtype the loss returns: "
                f"at most {largest:.4g} in magnitude. Received: {name}={value!r}"
            )
    return float(value)


def _work_dtype(dtype):
    """The dtype the losses compute in for the dtype they return: float32 for float16,
    bfloat16 and float32, float64 for float64.

    Keras' own losses compute in their dtype, floatx (float32) unless given one, so under
    a ``mixed_float16`` policy they compute in float32; so do these, and also for a loss
    (or scores, for the terms) of float16 or bfloat16 dtype: in float16 a batch's sum
    overflowed to inf (a per-sample margin+focal loss of 3.7 summed over 20,000 samples),
    a count of 65,536 pixels too (MixtureNLL's mean was inf / inf = NaN), and a margin
    term's square (a score of 300) before ``lambda_`` brought it back into range. The
    result is cast back to the loss's (the scores') dtype.
    """
    return routing_dtype(dtype)


def _floating_dtype(x):
    """The dtype a loss term computes in for the scores ``x``: theirs if floating, else
    Keras' float type (integer scores are promoted to it)."""
    dtype = getattr(x, "dtype", None)
    dtype = keras.backend.floatx() if dtype is None else keras.backend.standardize_dtype(dtype)
    return dtype if dtype.startswith(("float", "bfloat")) else keras.backend.floatx()


def _smallest_normal(name, value, work):
    """Refuses a positive ``value`` (``sigma``, ``epsilon``) below the smallest normal
    number of ``work``, the dtype the loss computes in: it becomes 0 there (subnormals are
    flushed to 0 by CPU kernels), and the loss NaN or inf (0 / 0, log(0))."""
    with np.errstate(over="ignore", under="ignore"):  # a huge value is inf: refused elsewhere if it must be
        in_work = np.asarray(value).astype(work)
    if not in_work >= np.finfo(work).tiny:
        raise ValueError(
            f"`{name}` is too small for a loss computed in {work}: it is below its smallest "
            f"normal number, {np.finfo(work).tiny:.4g}. Received: {name}={value!r}"
        )
    return in_work


def _check_ids(y_true, n_classes):
    """Raises a ValueError for class ids that are not integers in ``[0, n_classes)``.

    Only concrete (eager) values can be checked; traced ones are left to
    :func:`_invalid_ids`.
    """
    values = concrete_values(y_true)
    if values is None or not values.size:
        return
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.integer):
        bad = values[(values < 0) | (values >= n_classes)]
    else:
        with np.errstate(invalid="ignore"):
            bad = values[~((values >= 0) & (values < n_classes) & (values == np.floor(values)))]
    if bad.size:
        bad = np.unique(bad)[:10]
        if np.all(np.isfinite(bad)) and np.all(bad == np.floor(bad)):
            bad = bad.astype("int64")  # Keras hands the loss float labels
        raise ValueError(
            f"Class ids (sparse labels) must be integers in [0, n_classes) = [0, {n_classes}) "
            f"for scores with {n_classes} classes. Received: y_true with invalid values "
            f"{bad.tolist()}"
        )


def _invalid_ids(y_true, ids, n_classes):
    """Boolean ``[...]``: True where a (traced) class id is out of range or not whole."""
    invalid = (ids < 0) | (ids >= n_classes)
    if not keras.backend.is_int_dtype(keras.backend.standardize_dtype(y_true.dtype)):
        whole = ops.cast(y_true, "float32") == ops.cast(ids, "float32")
        invalid = invalid | ops.logical_not(whole)
    return invalid


def _one_hot(ids, n_classes, dtype):
    """``ops.one_hot`` of int32 class ids, whose rows are zeros for ids outside
    ``[0, n_classes)``.

    TensorFlow's and JAX's one-hot give those zeros; torch's raises for an id
    ``>= n_classes`` ("Class values must be smaller than num_classes"), also inside a
    ``torch.compile`` graph, where the ids are not checked beforehand. Every such id is
    made -1, whose row is zeros on every backend.
    """
    outside = (ids < 0) | (ids >= n_classes)
    return ops.one_hot(ops.where(outside, -1, ids), n_classes, dtype=dtype)


def _targets(y_true, y_pred):
    """Float targets ``[..., n_classes]`` from sparse ids or one-hot labels.

    Returns ``(targets, invalid)``: ``invalid`` is None for one-hot labels, else a
    boolean ``[...]`` marking class ids outside ``[0, n_classes)`` (possible only in
    traced calls: eager calls raise a ``ValueError`` for them).
    """
    n_classes = y_pred.shape[-1]
    if n_classes is None:
        raise ValueError(
            "Capsule losses need a known number of classes (last axis of the scores). "
            f"Received: y_pred shape={tuple(y_pred.shape)}"
        )
    rank_true, rank_pred = len(y_true.shape), len(y_pred.shape)
    _check_leading_axes(y_true, y_pred, rank_pred - 1)
    if rank_true == rank_pred and y_true.shape[-1] is None and n_classes > 1:
        return _targets_of_unknown_kind(y_true, y_pred)
    sparse = rank_true == rank_pred - 1 or (
        rank_true == rank_pred and y_true.shape[-1] == 1 and n_classes > 1
    )
    if sparse:
        _check_ids(y_true, n_classes)
        if rank_true == rank_pred:
            y_true = ops.squeeze(y_true, axis=-1)
        ids = ops.cast(y_true, "int32")
        invalid = _invalid_ids(y_true, ids, n_classes)
        return _one_hot(ids, n_classes, y_pred.dtype), invalid
    if rank_true != rank_pred or (y_true.shape[-1] is not None and y_true.shape[-1] != n_classes):
        raise ValueError(
            "Labels must be class ids [batch] / [batch, 1] or one-hot targets with the "
            f"scores' shape [batch, {n_classes}]. Received: y_true shape="
            f"{tuple(y_true.shape)}, y_pred shape={tuple(y_pred.shape)}"
        )
    return ops.cast(y_true, y_pred.dtype), None


def _check_leading_axes(y_true, y_pred, n_axes):
    """The first ``n_axes`` (batch) axes of labels and scores agree where both are known.

    Else a clear ``ValueError`` (a batch of labels for another batch size failed deep in
    the math with a backend "Incompatible shapes" error).
    """
    if len(y_true.shape) < n_axes:
        return  # refused below with the expected label shapes
    for a, b in zip(y_true.shape[:n_axes], y_pred.shape[:n_axes]):
        if a is not None and b is not None and a != b:
            raise ValueError(
                "Labels must give one label per sample of the scores: class ids "
                f"{list(y_pred.shape[:n_axes])} / {list(y_pred.shape[:n_axes]) + [1]} or one-hot "
                f"targets {list(y_pred.shape)}. Received: y_true shape={tuple(y_true.shape)}, "
                f"y_pred shape={tuple(y_pred.shape)}"
            )


def _targets_of_unknown_kind(y_true, y_pred):
    """:func:`_targets` for traced labels ``[..., None]``: ids ``[..., 1]`` or one-hot.

    Which one they are is known only when the graph runs (a ``tf.data`` pipeline
    whose labels lost their static shape), so both readings are built and the
    label's run-time last dimension picks one.
    """
    n_classes = y_pred.shape[-1]
    as_ids = ops.shape(y_true)[-1] == 1
    column = y_true[..., 0]
    ids = ops.cast(column, "int32")
    from_ids = _one_hot(ids, n_classes, y_pred.dtype)
    # labels' own leading axes: the loss checks them against the scores' (a batch of 1
    # broadcast to the scores' batch here went unnoticed)
    one_hot = ops.broadcast_to(ops.cast(y_true, y_pred.dtype), tuple(ops.shape(y_true)[:-1]) + (n_classes,))
    invalid = ops.logical_and(as_ids, _invalid_ids(column, ids, n_classes))
    return ops.where(as_ids, from_ids, one_hot), invalid


def _labels_without_padding(y_true, y_pred):
    """``y_true`` with zeros where the Keras mask of ``y_pred`` marks padding.

    Only a mask over the label positions (``y_pred``'s shape without the class axis,
    the shape of the per-sample loss, which Keras weights by it) is applied; labels are
    returned unchanged for other masks, except that a mask of the scores' own shape
    (over classes) raises a ``ValueError``.
    """
    mask = _keras_mask(y_pred)
    if mask is None or y_true is None or not hasattr(y_pred, "shape"):
        return y_true
    try:
        rank_mask, rank_pred = len(mask.shape), len(y_pred.shape)
    except (TypeError, ValueError):  # a shape of unknown rank (in a trace): as Keras does
        return y_true
    if rank_mask == rank_pred and rank_pred > 1:
        # Keras weights the per-sample loss (no class axis) by the mask: a mask over the
        # classes failed there with a backend "Incompatible shapes" error.
        raise ValueError(
            "Capsule losses take the Keras mask of the scores over label positions "
            "(the scores' shape without the class axis), not over classes. Received: "
            f"y_pred shape={tuple(y_pred.shape)} with a mask of shape {tuple(mask.shape)}"
        )
    mask = ops.cast(mask, "bool")
    y_true = ops.convert_to_tensor(y_true)
    rank_true = len(y_true.shape)
    if rank_mask != rank_pred - 1 or rank_true not in (rank_mask, rank_mask + 1):
        return y_true
    if rank_true == rank_mask + 1:
        mask = ops.expand_dims(mask, -1)
    return ops.where(mask, y_true, ops.zeros_like(y_true))


def _keras_mask(x):
    """The Keras mask a tensor carries (as ``keras.losses.Loss.__call__`` reads it), or None."""
    return _get_keras_mask(x) if _get_keras_mask is not None else getattr(x, "_keras_mask", None)


def _mask_over(mask, x):
    """The boolean ``mask`` spread over ``x`` from the left (trailing axes added, then
    broadcast to ``x``'s shape, as the losses spread a mask over the values), or None
    where it cannot be: ``x`` of fewer axes, of unknown rank, or of
    another size than the mask on an axis where both are known (a mask that does not
    describe ``x``'s leading axes, e.g. MixtureNLL's over the groups for its ``y_true``).
    """
    try:
        rank_mask, rank_x = len(mask.shape), len(x.shape)
    except (TypeError, ValueError):  # a shape of unknown rank (traced)
        return None
    if rank_mask > rank_x or any(
        a is not None and b is not None and a not in (1, b) for a, b in zip(mask.shape, x.shape)
    ):
        return None
    mask = ops.cast(mask, "bool")
    for _ in range(rank_x - rank_mask):
        mask = ops.expand_dims(mask, -1)
    # in x's shape: a mask broadcast over an x of size 1 (sizes unknown when traced) would
    # change x's shape silently; this fails when the graph runs instead
    return ops.broadcast_to(mask, ops.shape(x))


def _without_padding(x, mask):
    """``x`` with zeros where the boolean ``mask`` (of ``x``'s shape) is False.

    The inputs of a loss at masked (padded) positions are replaced *before* the math, not
    only weighted by 0 after it: a NaN or inf there (a padded token's scores, a padded
    pixel's logits all -inf) made the loss 0 * NaN = NaN, and even where the reduction
    selects the value away, the gradient through the math of a NaN (or of an inf: inf - inf,
    0 * inf) is NaN. Computed from zeros, the padded values and their gradients are finite;
    the reduction leaves them out and the ``where`` gives the padded inputs a zero gradient.
    """
    return ops.where(mask, x, ops.zeros_like(x))


def _inputs_without_padding(x, mask):
    """Every tensor of the structure ``x`` that the Keras ``mask`` aligns with (from the
    left, :func:`_mask_over`) with zeros at its masked positions; the others unchanged."""

    def clean(t):
        over = _mask_over(mask, t) if hasattr(t, "shape") else None
        return t if over is None else _without_padding(t, over)

    return keras.tree.map_structure(clean, x)


def _in_work_dtype(term, targets, lengths, *args):
    """``term(targets, lengths, *args)`` computed in :func:`_work_dtype` of the scores'
    dtype (float32 for float16 and bfloat16 scores) and cast back to that dtype, as
    Keras' functional losses return the dtype of ``y_pred``."""
    dtype = _floating_dtype(lengths)
    work = _work_dtype(dtype)
    return ops.cast(term(ops.cast(targets, work), ops.cast(lengths, work), *args), dtype)


def margin_term(targets, lengths, m_plus=0.9, m_minus=0.1, lambda_=0.5):
    """Per-sample margin loss ``sum_c [T relu(m+ - x)^2 + lambda (1-T) relu(x - m-)^2]``
    (margins whose squares are finite, and a finite ``lambda_ >= 0``, in the dtype of
    ``lengths``). Computed in float32 for float16 and bfloat16 ``lengths`` (float64 for
    float64 ones) and returned in the dtype of ``lengths``."""
    # Checked as MarginLoss checks them: a NaN margin gave NaN losses, a negative lambda_
    # rewarded scores of absent classes, and m_plus=1e39 (inf in float32) inf losses.
    dtype = _floating_dtype(lengths)
    m_plus = _number("m_plus", m_plus, dtype=dtype, squared=True)
    m_minus = _number("m_minus", m_minus, dtype=dtype, squared=True)
    lambda_ = _number("lambda_", lambda_, minimum=0, dtype=dtype)
    return _in_work_dtype(_margin, targets, lengths, m_plus, m_minus, lambda_)


def _margin(targets, lengths, m_plus, m_minus, lambda_):
    """:func:`margin_term` of checked constants, in the dtype of ``lengths``."""
    # A term whose weight is 0 is 0: 0 * inf was NaN for a score beyond ~1e19 (float32).
    present = ops.where(targets > 0, targets * ops.square(ops.relu(m_plus - lengths)), 0.0)
    absent = ops.where(targets < 1, lambda_ * (1.0 - targets) * ops.square(ops.relu(lengths - m_minus)), 0.0)
    return ops.sum(present + absent, axis=-1)


def focal_term(targets, lengths, alpha=0.25, gamma=2.0):
    """Per-sample focal loss ``-alpha (1 - p_t)^gamma log p_t`` with ``p = softmax(x)``
    (``alpha >= 0``, ``gamma >= 0``, both finite in the dtype of ``lengths``). Computed
    in float32 for float16 and bfloat16 ``lengths`` (float64 for float64 ones) and
    returned in the dtype of ``lengths``."""
    # A negative gamma was a ZeroDivisionError from 0.0 ** gamma below; a negative or NaN
    # alpha turned the loss around or into NaN, one beyond the dtype's range (inf) too.
    dtype = _floating_dtype(lengths)
    alpha = _number("alpha", alpha, minimum=0, dtype=dtype)
    gamma = _number("gamma", gamma, minimum=0, dtype=dtype)
    return _in_work_dtype(_focal, targets, lengths, alpha, gamma)


def _focal(targets, lengths, alpha, gamma):
    """:func:`focal_term` of checked constants, in the dtype of ``lengths``."""
    log_p = ops.log_softmax(lengths, axis=-1)
    # (1 - p)^gamma has an infinite derivative at p = 1 for gamma < 1 (0 * inf = NaN
    # through the chain rule; e.g. a single class, where p = 1): take it as the
    # constant 0^gamma there.
    base = 1.0 - ops.exp(log_p)
    positive = base > 0
    safe = ops.where(positive, base, ops.ones_like(base))
    weight = ops.where(positive, ops.power(safe, gamma), 0.0 ** float(gamma))
    return -alpha * ops.sum(targets * weight * log_p, axis=-1)


def cross_term(targets, lengths):
    """Per-sample cross-entropy ``-log softmax(x)[label]`` of the lengths as logits.
    Computed in float32 for float16 and bfloat16 ``lengths`` (float64 for float64 ones)
    and returned in the dtype of ``lengths``."""
    return _in_work_dtype(_cross, targets, lengths)


def _cross(targets, lengths):
    """:func:`cross_term` in the dtype of ``lengths``."""
    return -ops.sum(targets * ops.log_softmax(lengths, axis=-1), axis=-1)


class GlobalBatchLoss(keras.losses.Loss):
    """A Keras loss whose mean is the global batch's mean under ``tf.distribute``.

    On one device it is ``keras.losses.Loss``, but for the weights' alignment (below).
    Under a strategy of several replicas in sync, Keras divides each replica's weighted sum by that replica's own count (its
    unmasked values, or the sum of its weights), then by the number of replicas:
    where the replicas' shares of the batch hold different numbers of real values
    (padded sequences, masked tokens) or different weights, a replica's values weigh
    more than the same values on one device, and the summed gradients are not the
    one-device gradient. For the reductions that divide (``"sum_over_batch_size"``,
    ``"mean"``, ``"mean_with_sample_weight"``) this class divides each replica's sum
    by the count of *all* replicas instead, so training under a strategy optimizes the
    one-device objective. ``"sum"`` and ``"none"`` need no count.

    The weighted mean is a mean over the values: ``sum(w * loss) / sum(w)`` with the
    weights spread over every value they cover. Weights of fewer axes than the values
    are aligned from the left (``[batch]`` or ``[batch, 1]`` weighs every value of a
    sample; Keras lays ``[batch]`` along the last axis, and its
    ``"mean_with_sample_weight"`` divided by the sum of the unspread weights, so
    weights of ones changed a per-token loss by the number of tokens). A mask on
    ``y_pred`` (of the values' shape or their leading axes) leaves the masked values
    out. The same holds for ``"sum"`` and ``"none"`` (the weighted values, summed or
    not). On one device and under a strategy the same weights give the same loss.

    The loss Keras *logs* under several replicas (``fit``'s ``loss``, ``evaluate``'s,
    a multi-output model's ``<output>_loss``) is the one-device figure too, also where a
    batch splits unevenly over the replicas (before, an evaluation batch of 1 example on
    2 replicas logged twice its loss): each replica's loss *value* is the global loss
    divided by the number of replicas, its *gradient* that of its own share. This
    relies on how Keras 3.15 tracks losses under a strategy; see
    ``_logged_as_one_device`` in this module. (Summed over the replicas, the values are
    the one-device loss; a replica's value alone says nothing of its share.)

    Masked positions never change the loss, whatever they hold: where the mask of
    ``y_pred`` aligns with the leading axes of ``y_pred`` (or of ``y_true``), their values
    are replaced by zeros before ``call`` (so a NaN, inf or -inf score or label of a padded
    position enters neither the loss nor its gradient, which is 0 there), and the masked
    per-value losses are left out of the reduction by selection, not multiplication
    (0 * NaN is NaN), also those of a mask that ``call`` sets on its result. A sample
    weight of 0 is a weight, as in Keras: a NaN it weighs makes the loss NaN.

    Subclass it as ``keras.losses.Loss``: implement ``call(y_true, y_pred)``
    returning the per-value losses. :class:`CapsuleLoss`, :class:`MarginLoss`,
    :class:`MixtureNLL` and the music application's ``PianoRollNLL`` are such losses.

    Example:

    ```python
    class SquaredError(keras_capsules.losses.GlobalBatchLoss):
        def call(self, y_true, y_pred):
            return keras.ops.sum(keras.ops.square(y_true - y_pred), axis=-1)

    loss = SquaredError()(np.zeros((2, 3)), np.ones((2, 3)))  # 3.0 on one device
    ```

    Its ``dtype`` must be floating (a dtype or policy name): an integer or boolean one
    is refused when the loss is made (it failed at the first training step, with
    "Expected int32, but got 0.9 of type 'float'").

    Mixed precision: as Keras' own losses, it computes in float32 by default (its dtype
    is ``floatx``, not the global policy's compute dtype). Unlike them, a float16 or
    bfloat16 ``dtype`` (``"mixed_float16"``) is also computed in float32: ``call``
    receives ``y_true`` and ``y_pred`` in float32 (float64 for a float64 loss), the
    weighted sum and the count are taken in it, and only the result is cast to the
    loss's ``dtype`` (in float16 the sum over a large batch, or the count of 65,536
    values, overflowed to inf: an inf or NaN loss where every value was small).
    """

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if not keras.backend.standardize_dtype(self.dtype).startswith(("float", "bfloat")):
            raise ValueError(
                f"`dtype` of {type(self).__name__} must be a floating dtype or policy (e.g. \"float32\", "
                f"\"mixed_float16\"). Received: dtype={dtype!r}"
            )

    def __call__(self, y_true, y_pred, sample_weight=None):
        in_mask = _keras_mask(y_pred)
        work = _work_dtype(self.dtype)
        with keras.name_scope(self.name):
            y_pred = keras.tree.map_structure(lambda x: ops.convert_to_tensor(x, dtype=work), y_pred)
            y_true = keras.tree.map_structure(lambda x: ops.convert_to_tensor(x, dtype=work), y_true)
            if in_mask is not None:
                # Padded positions never change the loss, whatever they hold: zeros replace
                # the scores and labels there before the math (a NaN or inf score of a
                # padded token made the loss and its gradients NaN).
                y_pred = _inputs_without_padding(y_pred, in_mask)
                y_true = _inputs_without_padding(y_true, in_mask)
            values = self.call(y_true, y_pred)
            out_mask = _keras_mask(values)
            if in_mask is not None and out_mask is not None:
                mask = ops.logical_and(ops.cast(in_mask, "bool"), ops.cast(out_mask, "bool"))
            else:
                mask = in_mask if in_mask is not None else out_mask
            return _reduce(values, sample_weight, mask, self.reduction, self.dtype)


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleLoss(GlobalBatchLoss):
    """A sum of margin, focal and cross-entropy terms on capsule lengths.

    For capsule lengths ``x`` ``[batch, n_classes]`` and targets ``T`` (one-hot of the
    labels) the available per-sample terms are

    * ``"margin"`` (Sabour 2017):
      ``sum_c [T_c relu(m_plus - x_c)^2 + lambda_ (1 - T_c) relu(x_c - m_minus)^2]``;
    * ``"focal"`` (Lin et al. 2017, on the softmax of the lengths):
      ``-focal_alpha (1 - p_t)^focal_gamma log p_t`` with ``log p = log_softmax(x)``
      and ``t`` the label;
    * ``"cross"``: the cross-entropy ``-log p_t`` of the same softmax.

    The loss is the sum of the chosen terms per sample, reduced over the batch (by
    default the mean), so it equals the sum of the terms' batch means. Ren & Lu's
    capsule text classifier uses ``terms=("margin", "focal")`` (the default); any
    non-empty combination is allowed. The math runs in float32 (float64 for a float64
    loss), also when the scores or the loss dtype are float16 or bfloat16 (mixed
    precision), and the result is cast to the loss dtype (float32 by default, see
    :class:`GlobalBatchLoss`); the constants below must be finite in the loss dtype,
    and so must the squares of the margins (``m_plus=1e39`` was inf in float32 and
    ``m_plus=300`` squared in float16, the losses inf or NaN): others raise a
    ``ValueError`` when the loss is made.

    Args:
        terms: names of the terms to add, from ``"margin"``, ``"focal"``, ``"cross"``.
        m_plus: margin for present classes. Default 0.9.
        m_minus: margin for absent classes. Default 0.1.
        lambda_: down-weighting of absent classes. Default 0.5.
        focal_alpha: focal loss weight. Default 0.25.
        focal_gamma: focal loss focusing exponent. Default 2.0.
        reduction: Keras loss reduction. Default ``"sum_over_batch_size"``.
        name: loss name.
        dtype: dtype of the loss computation.

    Call arguments:
        y_true: class ids ``[batch]`` / ``[batch, 1]`` in ``[0, n_classes)`` or
            one-hot targets ``[batch, n_classes]`` (see the module docstring: an
            out-of-range id raises a ``ValueError`` in eager calls and gives that
            sample a NaN loss in traced ones).
        y_pred: capsule lengths ``[batch, n_classes]``.
        sample_weight: optional per-sample weights.

    Returns:
        The reduced loss (a scalar with the default reduction).

    Example:

    ```python
    model.compile("adam", keras_capsules.losses.CapsuleLoss(terms=("margin", "focal")))
    ```

    Reference:
        H. Ren, H. Lu, "Compositional Coding Capsule Network with K-Means Routing for
        Text Classification", 2018 (margin + focal loss); S. Sabour, N. Frosst,
        G. E. Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017 (eq. 4).
    """

    def __init__(
        self,
        terms=("margin", "focal"),
        m_plus=0.9,
        m_minus=0.1,
        lambda_=0.5,
        focal_alpha=0.25,
        focal_gamma=2.0,
        reduction="sum_over_batch_size",
        name=None,
        dtype=None,
    ):
        given = terms  # quoted as given in the error (not as the normalised tuple)
        if isinstance(terms, str):
            terms = (terms,)
        terms = tuple(terms) if isinstance(terms, (list, tuple)) else None
        if not terms or any(t not in _TERMS for t in terms) or len(set(terms)) != len(terms):
            raise ValueError(
                f"`terms` must be a non-empty sequence of distinct names from {_TERMS}. "
                f"Received: terms={given!r}"
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self._dtype_arg = None if dtype is None else self.dtype  # for get_config
        self.terms = terms
        # In the dtype the loss returns (its own: float16 for "mixed_float16"), as the terms
        # check them in the dtype of the scores: a constant beyond its range gave inf there.
        self.m_plus = _number("m_plus", m_plus, dtype=self.dtype, squared=True)
        self.m_minus = _number("m_minus", m_minus, dtype=self.dtype, squared=True)
        self.lambda_ = _number("lambda_", lambda_, minimum=0, dtype=self.dtype)
        self.focal_alpha = _number("focal_alpha", focal_alpha, minimum=0, dtype=self.dtype)
        self.focal_gamma = _number("focal_gamma", focal_gamma, minimum=0, dtype=self.dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras leaves positions that y_pred's mask marks as padding out of the reduction
        # (weight 0), but a class id there that is not a valid one (padding labels such
        # as -1) was still refused (eager) or turned into a NaN loss, and 0 * NaN made
        # the whole batch's loss NaN. Such labels are read as class 0 (one-hot targets
        # as "no class") before the check; the mask then drops those positions.
        self._require_known_ranks(y_true, y_pred)
        self._check_sample_weight(sample_weight, y_pred)
        y_true = _labels_without_padding(y_true, y_pred)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def _check_sample_weight(self, sample_weight, y_pred):
        # Weights of another batch size than the scores failed in the reduction with the
        # backend's "Incompatible shapes: [3] vs. [4]" (TensorFlow's BroadcastTo), which
        # named neither argument. Weights are aligned with the scores' leading axes (one
        # per sample, [batch] or [batch, 1], or per label position); a size of 1 is
        # spread. Sizes unknown here (traced) are left to the reduction.
        if sample_weight is None:
            return
        try:
            given = w_shape = tuple(getattr(sample_weight, "shape", np.shape(sample_weight)))
        except (TypeError, ValueError):  # traced of unknown rank: refused by the reduction (like_values)
            return
        leading = tuple(getattr(y_pred, "shape", np.shape(y_pred)))[:-1]
        if len(w_shape) == len(leading) + 1 and w_shape[-1] == 1:
            w_shape = w_shape[:-1]
        if len(w_shape) > len(leading):
            return  # refused by the reduction, with the ranks in its message
        for a, b in zip(w_shape, leading):
            if a is not None and b is not None and a not in (1, b):
                raise ValueError(
                    f"{type(self).__name__} takes one weight per sample (or per label position) of "
                    f"the scores, aligned with their leading axes {list(leading)}. Received: "
                    f"sample_weight shape={given}, y_pred shape={tuple(getattr(y_pred, 'shape', np.shape(y_pred)))}"
                )

    def call(self, y_true, y_pred):
        self._require_known_ranks(y_true, y_pred)
        targets, invalid = _targets(y_true, y_pred)
        # Sizes unknown when traced: one label per sample must still hold when the loss
        # runs (a batch of 1 label was broadcast silently over the scores).
        targets = exactly_shaped_like(targets, y_pred)
        # (in float32 for float16 or bfloat16 scores, called directly; __call__ hands them over
        # in float32 already: the reduction casts the result to the loss dtype)
        work = _work_dtype(_floating_dtype(y_pred))
        targets, y_pred = ops.cast(targets, work), ops.cast(y_pred, work)
        total = 0.0
        for term in self.terms:
            if term == "margin":
                value = _margin(targets, y_pred, self.m_plus, self.m_minus, self.lambda_)
            elif term == "focal":
                value = _focal(targets, y_pred, self.focal_alpha, self.focal_gamma)
            else:
                value = _cross(targets, y_pred)
            total = total + value
        if invalid is not None:
            # Traced calls only (eager ones raised): a NaN loss, with no gradient, for
            # samples whose class id is out of range.
            total = ops.where(invalid, ops.cast(float("nan"), total.dtype), total)
        return total

    def _require_known_ranks(self, y_true, y_pred):
        # Labels of unknown rank cannot be read: class ids and one-hot targets are told apart
        # by their rank (run-time shapes could tell them apart only by reshaping the labels
        # to the scores' leading axes, which would take labels of another layout silently).
        require_known_ranks(type(self).__name__, "it tells class ids from one-hot targets by their rank",
                            y_true=y_true, y_pred=y_pred)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "terms": list(self.terms),
                "m_plus": self.m_plus,
                "m_minus": self.m_minus,
                "lambda_": self.lambda_,
                "focal_alpha": self.focal_alpha,
                "focal_gamma": self.focal_gamma,
                "dtype": self._dtype_arg,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_capsules")
class MarginLoss(CapsuleLoss):
    """The margin loss on capsule lengths (Sabour 2017).

    Per sample ``sum_c [T_c relu(m_plus - x_c)^2 + lambda_ (1 - T_c) relu(x_c - m_minus)^2]``
    for capsule lengths ``x`` and targets ``T``, reduced over the batch (by default
    the mean). ``T`` comes from class ids or from one-hot targets; multi-hot targets
    (several classes present) are accepted too. The math runs in float32 (float64 for a
    float64 loss) and the result is cast to the loss dtype, where the margins' squares
    and ``lambda_`` must be finite (as for :class:`CapsuleLoss`).

    Args:
        m_plus: margin for present classes. Default 0.9.
        m_minus: margin for absent classes. Default 0.1.
        lambda_: down-weighting of absent classes. Default 0.5.
        reduction: Keras loss reduction. Default ``"sum_over_batch_size"``.
        name: loss name.
        dtype: dtype of the loss computation.

    Call arguments:
        y_true: class ids ``[batch]`` / ``[batch, 1]`` in ``[0, n_classes)`` (see
            the module docstring for out-of-range ids) or one-hot / multi-hot
            targets ``[batch, n_classes]``.
        y_pred: capsule lengths ``[batch, n_classes]``.
        sample_weight: optional per-sample weights.

    Returns:
        The reduced loss (a scalar with the default reduction).

    Example:

    ```python
    model.compile("adam", keras_capsules.losses.MarginLoss(), metrics=["accuracy"])
    ```

    Reference:
        S. Sabour, N. Frosst, G. E. Hinton, "Dynamic Routing Between Capsules",
        NeurIPS 2017 (eq. 4).
    """

    def __init__(
        self,
        m_plus=0.9,
        m_minus=0.1,
        lambda_=0.5,
        reduction="sum_over_batch_size",
        name=None,
        dtype=None,
    ):
        super().__init__(
            terms=("margin",),
            m_plus=m_plus,
            m_minus=m_minus,
            lambda_=lambda_,
            reduction=reduction,
            name=name,
            dtype=dtype,
        )

    def get_config(self):
        config = super().get_config()
        for key in ("terms", "focal_alpha", "focal_gamma"):
            config.pop(key)
        return config


# --- RTagger (Ilin et al. 2017) ------------------------------------------------


def _check_axis(group_axis, rank):
    axis = group_axis + rank if group_axis < 0 else group_axis
    if not 0 < axis < rank - 1:
        raise ValueError(
            "`group_axis` must name an axis of y_pred between the batch axis and the "
            f"channel axis. Received: group_axis={group_axis} for y_pred of rank {rank}"
        )
    return axis


def _mixture_sigma(sigma):
    """``sigma`` as a float: a positive, finite number (the check of MixtureNLL and mixture_nll)."""
    return positive_float("sigma", sigma)


def _mixture_group_axis(group_axis):
    """``group_axis`` as an int: a non-zero integer (the check of MixtureNLL and mixture_nll)."""
    if isinstance(group_axis, bool) or not isinstance(group_axis, numbers.Integral) or group_axis == 0:
        raise ValueError(
            "`group_axis` must be a non-zero integer (the batch axis cannot hold "
            f"groups). Received: group_axis={group_axis!r}"
        )
    return int(group_axis)


def _mixture_from_logits(from_logits):
    """``from_logits`` as a bool: True or False only (a string "False" is truthy)."""
    return boolean("from_logits", from_logits)


def _probability_floor(epsilon):
    """``epsilon`` as a float: a probability floor in (0, 1)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0 < epsilon < 1:
        raise ValueError(
            f"`epsilon` must be a positive number below 1 (a probability floor). "
            f"Received: epsilon={epsilon!r}"
        )
    return float(epsilon)


def _check_mixture_shapes(x, m, pi, axis, group_axis):
    """``x`` has the shape of ``m`` without the group axis, ``pi`` that of ``m`` with one
    channel, where the sizes are known; else a ``ValueError``. (They were broadcast: ``x``
    of one row scored every row against it, a ``pi`` of one group weighted every group
    by it, and a ``pi`` of several channels was read from its first channel.)"""
    m_shape = tuple(m.shape)

    def fits(shape, expected):
        shape = tuple(shape)
        return len(shape) == len(expected) and all(
            a is None or b is None or a == b for a, b in zip(shape, expected)
        )

    if not fits(x.shape, m_shape[:axis] + m_shape[axis + 1 :]) or not fits(pi.shape, m_shape[:-1] + (1,)):
        raise ValueError(
            "mixture_nll expects x of the shape of m without the group axis "
            f"(group_axis={group_axis}) and pi of the shape of m with one channel. Received: "
            f"x shape={tuple(x.shape)}, m shape={m_shape}, pi shape={tuple(pi.shape)}"
        )


def mixture_nll(x, m, pi, sigma, group_axis=1, from_logits=False, epsilon=1e-7):
    """Per-pixel ``-log sum_k pi_k N(x; m_k, sigma^2 I)``.

    Args:
        x: targets ``[batch, ..., C]`` (the shape of ``m`` without the group axis).
        m: group means ``[batch, ..., K, ..., C]`` with the groups at ``group_axis``.
        pi: group probabilities (or logits with ``from_logits=True``) of the shape of
            ``m`` with one channel. Probabilities are used as given, not normalized
            over the groups (see :class:`MixtureNLL`).
        sigma: the fixed standard deviation.
        group_axis: the axis of ``m`` and ``pi`` that holds the groups.
        from_logits: ``pi`` holds logits (normalized by a log-softmax over groups).
        epsilon: lower bound on probabilities before their logarithm.

    Shapes of ``x`` or ``pi`` that do not fit ``m`` (where the sizes are known) raise a
    ``ValueError``; they are not broadcast. So do a ``sigma`` or an ``epsilon`` below the
    smallest normal number of the dtype the loss computes in (0 there), and tensors of
    unknown rank.

    Returns:
        The negative log-likelihood per pixel, of shape ``x.shape[:-1]``, in the dtype of
        ``m`` (float32 for integer means), as Keras' functional losses return the dtype
        of ``y_pred``; computed in float32 (float64 for float64 means) with a log-sum-exp
        over groups.
    """
    return _checked_mixture_nll(x, m, pi, sigma, group_axis, from_logits, epsilon)


def _checked_mixture_nll(x, m, pi, sigma, group_axis, from_logits, epsilon, groups=None):
    """:func:`mixture_nll` (its checks, then the math), with MixtureNLL's mask over the
    groups (``groups``, see :func:`_mixture_nll`)."""
    # The class's checks: a negative or NaN sigma was "too small", a string was taken,
    # a negative epsilon gave inf where pi = 0, from_logits="False" was read as logits
    # and group_axis=True as axis 1.
    sigma = _mixture_sigma(sigma)
    epsilon = _probability_floor(epsilon)
    group_axis = _mixture_group_axis(group_axis)
    from_logits = _mixture_from_logits(from_logits)
    require_known_ranks("mixture_nll", "it finds the groups and channels by their axes", x=x, m=m, pi=pi)
    # converted first: nested lists (no ``shape``) failed with "'list' object has no attribute 'shape'"
    m = ops.convert_to_tensor(m)
    x, pi = ops.convert_to_tensor(x), ops.convert_to_tensor(pi)
    rank = len(m.shape)
    axis = _check_axis(group_axis, rank)
    _check_mixture_shapes(x, m, pi, axis, group_axis)
    return ops.cast(_mixture_nll(x, m, pi, sigma, axis, from_logits, epsilon, groups), _floating_dtype(m))


def _mixture_nll(x, m, pi, sigma, axis, from_logits, epsilon, groups=None):
    """:func:`mixture_nll` of checked arguments (``axis`` the group axis, non-negative),
    in float32 (float64 for float64 means).

    ``groups`` (None: every group) is a boolean of ``pi``'s shape without its channel:
    the groups that enter each pixel's mixture (MixtureNLL's mask over the groups). The
    others are left out of the sum over the groups (and of the log-softmax of logits),
    whatever they hold (they are zeros, see ``MixtureNLL._without_padding``). A pixel
    with no group left keeps all of them: its value is left out by the reduction, and
    a mixture of no group (-log 0) would make its gradient NaN.
    """
    work = routing_dtype(m.dtype)
    x = ops.expand_dims(ops.cast(x, work), axis)
    m = ops.cast(m, work)
    pi = ops.cast(pi, work)
    channels = m.shape[-1]
    if channels is None:
        # A channel count unknown until the graph runs (a trace for any shape): a
        # Python None here was a TypeError.
        channels = ops.cast(ops.shape(m)[-1], work)
    sigma = float(sigma)
    # A huge sigma is inf in float32: the residuals scale to 0. One below the smallest normal
    # number is 0 there: (x - m) / sigma would be 0 / 0 = NaN where a mean is exact.
    work_sigma = _smallest_normal("sigma", sigma, work)
    # An epsilon that is 0 in `work` floors nothing: log(0) = -inf, and an inf loss for a
    # pixel whose pi is 0 in every group.
    _smallest_normal("epsilon", epsilon, work)
    # The residual is scaled by sigma before squaring, and log(sigma) is taken rather than
    # log(sigma^2): 1 / (2 sigma^2) overflowed float32 for sigma below ~1e-19 (NaN where a
    # mean is exact: 0 * inf) and sigma^2 left Python's floats for tiny or huge sigma
    # ("math domain error", OverflowError).
    scaled = (x - m) / ops.convert_to_tensor(work_sigma, dtype=work)
    log_norm = -0.5 * ops.sum(ops.square(scaled), axis=-1) - channels * (
        0.5 * math.log(2.0 * math.pi) + math.log(sigma)
    )
    pi = pi[..., 0]
    if groups is not None:
        groups = ops.cast(groups, "bool")
        groups = ops.logical_or(groups, ops.logical_not(ops.any(groups, axis=axis, keepdims=True)))
    if from_logits and groups is not None:
        # the log-softmax over the groups left in: its shift is their largest logit, and
        # the exponentials of the others (which may be far above it) are never taken
        largest = max_with_initial(
            ops.where(groups, pi, ops.full_like(pi, -math.inf)), axis=axis, keepdims=True, initial=-math.inf
        )
        shifted = ops.where(groups, pi - ops.stop_gradient(largest), ops.zeros_like(pi))
        total = ops.sum(ops.where(groups, ops.exp(shifted), ops.zeros_like(pi)), axis=axis, keepdims=True)
        log_pi = shifted - ops.log(total)
    elif from_logits:
        log_pi = ops.log_softmax(pi, axis=axis)
    else:
        log_pi = ops.log(maximum(pi, epsilon))
    terms = log_pi + log_norm
    if groups is not None:
        terms = ops.where(groups, terms, ops.full_like(terms, -math.inf))
    return -ops.logsumexp(terms, axis=axis)


#: Keras' reductions that divide the summed loss (by its size, or the sum of the weights)
_DIVIDING_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")


def _reduce(values, sample_weight, mask, reduction, dtype):
    """Keras' reductions of the per-value losses, with the weights and the mask spread
    over the values from the left (:func:`like_values`), and the means over the global
    batch under several replicas (:func:`_global_mean`): computed in
    :func:`_work_dtype` (float32 for a float16 or bfloat16 loss), returned in ``dtype``."""
    work = _work_dtype(dtype)
    context = several_replicas()
    if reduction in _DIVIDING_REDUCTIONS:
        return ops.cast(_global_mean(values, sample_weight, mask, reduction, work, context), dtype)
    values = ops.convert_to_tensor(values, dtype=work)
    kept = None if mask is None else like_values(values, mask, work, "mask")
    if sample_weight is not None:
        values = values * like_values(values, sample_weight, work, "sample_weight")
    if kept is not None:
        values = _masked_out(values * kept, kept)
    if reduction != "sum":  # "none" (None): the values themselves
        return ops.cast(values, dtype)
    total = ops.sum(values)
    if context is not None:  # the gradients need no count, but Keras' logs are off
        total = _logged_as_one_device(total, context)
    return ops.cast(total, dtype)


def _logged_as_one_device(share, context):
    """One replica's ``share`` of the loss (the replicas' shares add up to the one-device
    loss ``L``), with its gradient unchanged and the value ``L / R`` on every replica.

    Keras 3.15 logs a loss under a ``tf.distribute`` strategy of ``R`` replicas with
    ``Mean`` trackers whose totals and counts are summed over the replicas, each replica
    adding its loss times ``R`` (``unscale_loss_for_distribution``) with a weight ``w_r``:
    ``sum_r R * loss_r * w_r / sum_r w_r``. For the ``loss`` of the logs (and of
    ``evaluate``) ``w_r`` is the replica's number of examples, the leading size of its
    first input ``x`` (``backend/tensorflow/trainer.py``, ``train_step`` and
    ``test_step``); for a multi-output model's ``<output>_loss`` it is the *static*
    leading size of the output's first tensor, or 1 where that is unknown (a function
    traced for any batch size; ``trainers/compile_utils.py``, ``CompileLoss.call``).
    With the shares as values that is ``L`` only where the replicas hold as many
    examples: an evaluation batch of 1 example on 2 replicas logged ``2 L`` (the replica
    of no example had weight 0). With the value ``L / R`` on every replica it is ``L``
    whatever the weights, so every one of those trackers logs the one-device figure
    (also a replica of no example gives a finite value: ``L / R``).

    The value is ``stop_gradient(L / R) + (share - stop_gradient(share))``: the forward
    value is ``L / R`` (plus an exact 0), the gradient that of ``share``, bit for bit, so
    the replicas' summed gradients stay the one-device gradient. ``L`` costs one scalar
    all-reduce (``context``, the replica context).
    """
    import tensorflow as tf

    held = ops.stop_gradient(share)
    total = context.all_reduce(tf.distribute.ReduceOp.SUM, held)
    value = total / ops.cast(context.num_replicas_in_sync, total.dtype)
    return ops.stop_gradient(value) + (share - held)


def _masked_out(values, kept):
    """``values`` with zeros where the mask's weights ``kept`` (of their shape) are 0.

    Selected, not multiplied: 0 * NaN is NaN. The losses' own inputs are clean at masked
    positions (:func:`_without_padding`), but a mask the values carry (set by a subclass's
    ``call``) is known only after the math, and a weight given there may be anything.
    """
    return ops.where(kept != 0, values, ops.zeros_like(values))


def _global_mean(values, sample_weight, mask, reduction, dtype, context=None):
    """The mean of a reduction that divides, on one device or on one replica's share.

    The weights (and the mask) are spread over the values (:func:`like_values`), and
    the weighted sum is divided by the sum of the spread weights
    (``"mean_with_sample_weight"``) or by the number of kept values.

    Under several replicas (``context``, a replica context), Keras divides each
    replica's weighted sum by that replica's own count, then by the number of
    replicas, and sums the replicas' gradients: where the replicas hold different
    numbers of real values (padded sequences, masked tokens) or different weights, a
    replica's values weighed more than the same values on one device. Here each
    replica divides its sum by the count of all replicas (``all_reduce``), so the
    replicas' shares ``total_r / count`` add up to the one-device loss and their
    gradients to its gradient.

    That share is right for the gradient but not for what Keras *logs* under a strategy
    (its trackers multiply each replica's loss by the number of replicas and weigh it by
    the replica's batch size: the one-device figure only for equal shares). So the value
    returned under several replicas is the global mean divided by the number of replicas,
    with the share's gradient (:func:`_logged_as_one_device`, which states the Keras 3.15
    internals this relies on).
    """
    values = ops.convert_to_tensor(values, dtype=dtype)
    kept = ops.ones_like(values) if mask is None else like_values(values, mask, dtype, "mask")
    weights = kept if sample_weight is None else kept * like_values(values, sample_weight, dtype, "sample_weight")
    if mask is not None:  # masked values (and weights) left out, whatever they hold
        weights = _masked_out(weights, kept)
        values = _masked_out(values, kept)
    total = ops.sum(values * weights)
    if reduction == "mean_with_sample_weight":
        count = ops.sum(weights)
    else:  # "sum_over_batch_size" (alias "mean"): the number of kept values
        count = ops.sum(kept)
    if context is not None:
        import tensorflow as tf

        count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
        return _logged_as_one_device(divide_no_nan(total, count), context)
    return divide_no_nan(total, count)


@keras.saving.register_keras_serializable(package="keras_capsules")
class MixtureNLL(GlobalBatchLoss):
    """Negative log-likelihood of a per-pixel Gaussian mixture (RTagger's cost).

    For groups ``k`` with means ``m_k`` and per-pixel probabilities ``pi_k`` the loss
    per pixel is

    ```
    -log sum_k pi_k N(x; m_k, sigma^2 I)
    ```

    computed stably as a negative log-sum-exp of ``log pi_k + log N`` in float32
    (float64 for a float64 loss).
    ``N`` includes its normalizing constant, summed over the ``C`` channels. The
    per-pixel values are averaged (``reduction="sum_over_batch_size"``, default) or
    summed (``reduction="sum"``) by the usual Keras reduction.

    Probabilities ``pi`` (``from_logits=False``) are used as given, floored at
    ``epsilon``: the loss neither normalizes them over the groups nor checks that they
    sum to 1. Where a pixel's ``pi`` sums to ``s`` over the groups (none below
    ``epsilon``), its loss is that of the normalized ``pi / s`` minus ``log(s)``: a
    ``pi`` summing above 1 lowers the loss (a model free to scale its ``pi`` up lowers
    it without bound), one summing below 1 raises it. Pass probabilities that sum to 1
    over the groups (a softmax over them, as RTagger's ``pi``), or logits with
    ``from_logits=True``, which a log-softmax over the groups normalizes. (A check of
    the sums could only run in eager calls, never in a traced ``fit``, and the pixels a
    mask leaves out may hold anything.) A negative loss is no sign of an unnormalized
    ``pi``: ``N`` is a density, above 1 near its mean when ``sigma`` is small (at
    ``x = m_k`` its log is ``-C (log(sigma) + log(2 pi) / 2)``, positive for
    ``sigma`` below ``1 / sqrt(2 pi) = 0.399``).

    Args:
        sigma: the fixed standard deviation of the Gaussians. Default 0.5.
        group_axis: the axis of ``y_pred`` holding the groups. Default 1 (for
            ``[batch, K, ..., C + 1]``); 2 for RTagger's full output
            ``[batch, T, K, ...]``.
        from_logits: the last channel of ``y_pred`` holds logits, not probabilities.
        epsilon: lower bound on probabilities before their logarithm. Default 1e-7.
            ``sigma`` and ``epsilon`` must be at least the smallest normal number of
            the dtype the loss computes in (1.2e-38 for float32): smaller ones are 0
            there (NaN or inf losses) and raise a ``ValueError``.
        reduction, name, dtype: as for every Keras loss.

    Call arguments:
        y_true: the data ``x``, the shape of ``y_pred`` without the group axis and
            with ``C`` channels.
        y_pred: ``ops.concatenate([m, pi], axis=-1)``: the means in the first ``C``
            channels and ``pi`` in the last one, groups at ``group_axis``. A Keras
            mask on it (RTagger's, through ``keras.layers.Concatenate``: the op
            drops it) leaves the masked values out; it may cover the groups or only
            the leading axes. Over the groups, a pixel counts if any of its groups
            is kept, and its mixture sums over the kept groups only (logits are
            log-softmaxed over them; probabilities are used as given, not
            renormalized): a group the mask leaves out at a pixel (a padded group of
            a sample with fewer groups than ``K``) is not in that pixel's mixture.
            The pixels and groups it leaves out may hold anything (NaN data or
            means, logits all -inf): they change neither the loss nor its
            gradients, 0 there. (A sample
            weight of 0 is a weight, as in Keras: a NaN it weighs makes the loss NaN.)
        sample_weight: weights of the per-pixel values, of their shape or of
            their leading axes (``[batch]``: one weight per sample).

    Returns:
        The reduced loss (a scalar by default).

    Example:

    ```python
    from keras_capsules.layers import RTagger, level_spec
    from keras_capsules.losses import MixtureNLL
    images = np.random.uniform(size=(2, 8, 8, 1)).astype("float32")
    levels = [level_spec("convlstm", 8), level_spec("gated", 16)]
    pi, m = RTagger(3, levels, n_iters=4)(images)
    packed = keras.ops.concatenate([m, pi], axis=-1)          # [b, T, K, H, W, C + 1]
    targets = np.repeat(images[:, None], 4, axis=1)           # [b, T, H, W, C]
    loss = MixtureNLL(sigma=0.5, group_axis=2)(targets, packed)
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (equation (79)).
    """

    def __init__(
        self,
        sigma=0.5,
        group_axis=1,
        from_logits=False,
        epsilon=1e-7,
        reduction="sum_over_batch_size",
        name="mixture_nll",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self._dtype_arg = None if dtype is None else self.dtype  # for get_config
        self.sigma = _mixture_sigma(sigma)
        self.group_axis = _mixture_group_axis(group_axis)
        self.from_logits = _mixture_from_logits(from_logits)
        self.epsilon = _probability_floor(epsilon)
        # as mixture_nll checks them when called, in the dtype it computes in (float32, or
        # float64 for a float64 loss): 0 there, they gave NaN or inf losses
        for name in ("sigma", "epsilon"):
            _smallest_normal(name, getattr(self, name), routing_dtype(self.dtype))

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras' losses take a mask (or weights) of the per-pixel values' shape, or of
        # one axis less: RTagger's [batch, T, K, ...] mask (through Concatenate), or a
        # [batch, T] one, failed with a shape error or was dropped; [batch] weights
        # were laid along the last pixel axis. Both are put in the values' shape here.
        self._require_known_ranks(y_true, y_pred)
        mask = _keras_mask(y_pred)
        if mask is None and sample_weight is None:
            return super().__call__(y_true, y_pred)
        work = _work_dtype(self.dtype)  # as GlobalBatchLoss: float32 for a float16 loss
        with keras.name_scope(self.name):
            y_pred = ops.convert_to_tensor(y_pred, dtype=work)
            y_true = ops.convert_to_tensor(y_true, dtype=work)
            weights = self._pixel_weights(y_true, y_pred, None, sample_weight)
            kept = None if mask is None else self._pixel_weights(y_true, y_pred, mask, None)
            groups = None
            if kept is not None:
                groups = self._kept_groups(y_pred, mask)
                y_true, y_pred = self._without_padding(y_true, y_pred, kept != 0, groups)
            if groups is None:
                values = self.call(y_true, y_pred)
            else:
                values = self._nll(y_true, y_pred, groups)
            return _reduce(values, weights, kept, self.reduction, self.dtype)

    def _kept_groups(self, y_pred, mask):
        """A mask over the groups (``y_pred``'s shape without its channels) as a boolean
        of that shape, True where a group enters its pixel's mixture; None for a mask
        over the leading axes only (every group of a kept pixel enters)."""
        if len(mask.shape) != len(y_pred.shape) - 1:
            return None
        return ops.logical_and(ops.cast(mask, "bool"), ops.ones_like(y_pred[..., 0], dtype="bool"))

    def _without_padding(self, y_true, y_pred, pixels, groups=None):
        """``y_true`` and ``y_pred`` with zeros at the pixels that the mask leaves out
        (``pixels``, boolean of ``y_true``'s shape without its channels): in every group
        and channel of ``y_pred``, so that whatever they held (NaN means, logits all -inf)
        the loss and its gradients are those of the kept pixels (:func:`_without_padding`);
        and, for a mask over the groups (``groups``, boolean of ``y_pred``'s shape without
        its channels), in every channel of the groups it leaves out at a kept pixel.
        Shapes that do not fit are refused as :meth:`call` refuses them (sizes unknown
        until the graph runs fail there: the masks are put in the inputs' shapes)."""
        axis = self._check_shapes(y_true, y_pred)
        pixels = ops.cast(pixels, "bool")
        y_true = _without_padding(y_true, ops.broadcast_to(ops.expand_dims(pixels, -1), ops.shape(y_true)))
        over_groups = ops.expand_dims(pixels, axis)
        if groups is not None:
            over_groups = ops.logical_and(over_groups, groups)
        y_pred = _without_padding(y_pred, ops.broadcast_to(ops.expand_dims(over_groups, -1), ops.shape(y_pred)))
        return y_true, y_pred

    def _pixel_weights(self, y_true, y_pred, mask, sample_weight):
        """``sample_weight`` and the mask of ``y_pred`` (1 where kept, 0 elsewhere) as
        weights of the per-pixel values.

        Both describe the leading axes of the values ``[batch, ..., pixels]`` (the
        shape of ``y_true`` without its channels): a mask over ``y_pred``'s axes but
        its channels keeps a pixel where any group is kept; shorter ones are
        repeated over the axes they lack.
        """
        pixels = tuple(y_true.shape[:-1])

        def spread(x, what):
            if len(x.shape) > len(pixels):
                raise ValueError(
                    f"MixtureNLL takes a {what} over the leading axes of y_true without its channels, "
                    f"{pixels}. Received: {what} shape={tuple(x.shape)}"
                )
            given = tuple(x.shape)
            for _ in range(len(pixels) - len(x.shape)):
                x = ops.expand_dims(x, -1)
            # (a weight or mask of another batch size failed with TensorFlow's "Incompatible
            # shapes" in BroadcastTo or LogicalAnd, naming neither)
            require_aligned_sizes(x.shape, pixels, what, given)
            return x

        if sample_weight is not None:
            sample_weight = ops.convert_to_tensor(sample_weight)
            require_known_weight_rank(sample_weight, pixels)
            if len(sample_weight.shape) == len(pixels) + 1 and sample_weight.shape[-1] == 1:
                sample_weight = ops.squeeze(sample_weight, -1)  # [..., 1], as Keras takes it
            sample_weight = spread(sample_weight, "sample_weight")
        if mask is None:
            return sample_weight
        mask = ops.cast(mask, "bool")
        if len(mask.shape) == len(y_pred.shape) - 1:  # over the groups too
            mask = ops.any(mask, axis=_check_axis(self.group_axis, len(y_pred.shape)))
        mask = ops.logical_and(spread(mask, "mask"), ops.ones_like(y_true[..., 0], dtype="bool"))
        work = _work_dtype(self.dtype)
        weights = ops.cast(mask, work)
        return weights if sample_weight is None else weights * ops.cast(sample_weight, work)

    def _require_known_ranks(self, y_true, y_pred):
        require_known_ranks(type(self).__name__, "it finds the groups and channels by their axes",
                            y_true=y_true, y_pred=y_pred)

    def call(self, y_true, y_pred):
        return self._nll(y_true, y_pred)

    def _nll(self, y_true, y_pred, groups=None):
        """The per-pixel loss; ``groups`` (None: all), boolean of ``y_pred``'s shape
        without its channels, the groups that enter each pixel's mixture."""
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        axis = self._check_shapes(y_true, y_pred)
        if None in tuple(y_true.shape) or None in tuple(y_pred.shape):
            # Sizes unknown when traced: y_true must still have the shape of one group's
            # means when the loss runs (a size-1 axis of either was broadcast silently).
            like = ops.take(y_pred[..., :-1], 0, axis=axis)
            y_true = exactly_shaped_like(ops.cast(y_true, like.dtype), like)
        return _checked_mixture_nll(
            y_true, y_pred[..., :-1], y_pred[..., -1:], self.sigma, self.group_axis, self.from_logits,
            self.epsilon, groups,
        )

    def _check_shapes(self, y_true, y_pred):
        """Refuses ``y_true`` and ``y_pred`` whose ranks or known sizes do not fit each
        other; returns the group axis (non-negative)."""
        self._require_known_ranks(y_true, y_pred)
        if len(y_true.shape) != len(y_pred.shape) - 1 or (
            y_true.shape[-1] is not None
            and y_pred.shape[-1] is not None
            and y_true.shape[-1] + 1 != y_pred.shape[-1]
        ):
            raise ValueError(
                "MixtureNLL expects y_pred = concatenate([m, pi], -1) with the groups at "
                f"group_axis={self.group_axis}, and y_true of rank one less with one channel "
                f"less. Received: y_true shape={tuple(y_true.shape)}, "
                f"y_pred shape={tuple(y_pred.shape)}"
            )
        axis = _check_axis(self.group_axis, len(y_pred.shape))
        expected = y_pred.shape[:axis] + y_pred.shape[axis + 1 : -1]
        if any(
            a is not None and b is not None and a != b
            for a, b in zip(y_true.shape[:-1], expected)
        ):
            raise ValueError(
                "MixtureNLL expects y_true of the shape of y_pred without the group axis "
                f"(group_axis={self.group_axis}) and with one channel less. Received: "
                f"y_true shape={tuple(y_true.shape)}, y_pred shape={tuple(y_pred.shape)}"
            )
        return axis

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sigma": self.sigma,
                "group_axis": self.group_axis,
                "from_logits": self.from_logits,
                "epsilon": self.epsilon,
                "dtype": self._dtype_arg,
            }
        )
        return config
