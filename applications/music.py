"""Polyphonic music: next-step prediction of JSB Chorales with a Recurrent Ladder.

Ilin et al. 2017 (section 3.2, Table 10) model polyphonic music as a sequence of
88-key piano rolls: at every step ``t`` a Recurrent Ladder with dense levels reads
the roll ``x_t`` and predicts which keys sound at step ``t + 1``, one independent
Bernoulli per key (a sigmoid on a linear read-out of the ladder's bottom decoder
output). The figure reported is the negative log-likelihood per time step, summed
over the 88 keys and averaged over all test steps (paper: RNN 8.76, RLadder 5.64).

Data: the Boulanger-Lewandowski et al. 2012 split of the JSB Chorales (229 / 76 / 77
chorales), a JSON file ``{"train", "valid", "test"}`` of chorales, each a list of
steps, each a sorted list of the MIDI pitches sounding (see ``load_chorales``).
Chorales differ in length, so they are zero-padded to a common length and a mask
(``sample_weight``) removes the padded steps from the loss and from the metric.

Every step is predicted, the first one included: the ladder's input at step ``t``
is the roll of step ``t - 1`` (zeros before the first step), its target the roll of
step ``t``.

``build_model(readout="nade")`` keeps the ladder and its per-key logits but passes
them through a :class:`KeyNADE`: each key's sigmoid is then conditioned on the
lower keys of the same step too (as RNN-NADE, Boulanger-Lewandowski et al. 2012),
so the model can put its probability on whole chords instead of on each note
alone. The metric is unchanged (the exact NLL of the step's roll, summed over the
keys' conditional cross-entropies); the model then takes the rolls being predicted
as a second input (teacher forcing, ``make_dataset(..., targets_as_input=True)``).
"""

import json
import numbers
import os

import keras
import numpy as np
from keras import ops

from applications import arguments, checks, console, distribute, plotting
from applications.checks import integer_at_least
from applications.errors import (InputError, PathNotFoundError, check_run_dir, create_run_dir,
                                 leaves_no_empty_run_dir, user_path)
# the data (NumPy only), here under the names it always had
from applications.jsb_chorales import (  # noqa: F401
    LOWEST_KEY,
    NUM_KEYS,
    SPLITS,
    data_file,
    default_data_path,
    load_chorales,
    load_rolls,
    piano_roll,
)
from keras_capsules.layers import RLadder, level_spec
from keras_capsules._validation import like_values, require_known_ranks
from keras_capsules.losses import GlobalBatchLoss

PAPER_NLL = {"RNN": 8.76, "RLadder": 5.64}


# ------------------------------------------------------------------------- data
def _roll_lengths(rolls, steps=None):
    """Checks ``rolls`` and ``steps`` as :func:`pad_rolls` needs them: ``(lengths, steps)``."""
    if len(rolls) == 0:
        raise InputError("`rolls` must hold at least one roll. Received: no rolls")
    bad = [np.shape(r) for r in rolls if np.ndim(r) != 2 or np.shape(r)[-1] != NUM_KEYS]
    if bad:
        raise InputError(f"every roll must have shape [steps, {NUM_KEYS}]. Received: a roll of shape {bad[0]}")
    if steps is not None:
        steps = integer_at_least("steps", steps, 1)
    lengths = [len(r) for r in rolls]
    steps = max(lengths) if steps is None else steps
    if max(lengths) > steps:
        raise InputError(f"a roll has {max(lengths)} steps, more than steps={steps}")
    return lengths, steps


def pad_rolls(rolls, steps=None):
    """Zero-pads rolls to ``steps`` (default: the longest): ``(rolls [n, steps, 88], mask [n, steps])``.

    Every value of a roll must be 0 or 1 (a key sounds or not; bools too): the
    Bernoulli likelihood of any other value (2.0, 0.5, NaN) is no probability, and
    was trained on and scored without a word.
    """
    _, steps = _roll_lengths(rolls, steps)
    out = np.zeros((len(rolls), steps, NUM_KEYS), "float32")
    mask = np.zeros((len(rolls), steps), "float32")
    for i, roll in enumerate(rolls):
        out[i, : len(roll)] = roll
        mask[i, : len(roll)] = 1.0
    binary = (out == 0) | (out == 1)
    if not binary.all():
        i = int(np.flatnonzero(~binary.all(axis=(1, 2)))[0])
        raise InputError(f"every roll must hold 0 or 1 (a key sounds or not) at every step and key. "
                         f"Received: rolls[{i}] holding {float(out[i][~binary[i]][0])}")
    return out, mask


def next_step_arrays(rolls, steps=None):
    """Inputs, targets and mask for next-step prediction of every step.

    ``inputs[:, t]`` is the roll of step ``t - 1`` (zeros at ``t = 0``), ``targets``
    the padded rolls and ``mask`` 1 on the real steps.
    """
    targets, mask = pad_rolls(rolls, steps)
    inputs = np.concatenate([np.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)
    return inputs, targets, mask


def windows(inputs, targets, mask, window):
    """Cuts padded sequences into consecutive windows of ``window`` steps.

    Windows holding no real step are dropped. Training on windows keeps the unrolled
    graph short; the ladder's state then starts from zeros at each window.
    """
    window = integer_at_least("window", window, 1)
    steps = inputs.shape[1]
    pad = (-steps) % window
    if pad:
        widths = ((0, 0), (0, pad), (0, 0))
        inputs, targets = np.pad(inputs, widths), np.pad(targets, widths)
        mask = np.pad(mask, ((0, 0), (0, pad)))
    n = inputs.shape[1] // window
    split = lambda a: a.reshape((a.shape[0] * n, window) + a.shape[2:])  # noqa: E731
    inputs, targets, mask = split(inputs), split(targets), split(mask)
    keep = mask.sum(axis=1) > 0
    return inputs[keep], targets[keep], mask[keep]


def _check_transpose(transpose):
    if isinstance(transpose, bool) or not isinstance(transpose, (int, np.integer)) or not 0 <= transpose < NUM_KEYS:
        raise InputError(
            f"`transpose` must be an integer number of semitones in [0, {NUM_KEYS - 1}] (0: no "
            f"transposition). Received: transpose={transpose!r}"
        )
    return int(transpose)


def transpose_roll(roll, semitones):
    """A ``[..., 88]`` roll moved ``semitones`` keys up (negative: down).

    Raises ValueError if a sounding note would leave the keyboard.
    """
    if isinstance(semitones, bool) or not isinstance(semitones, (int, np.integer)):
        raise InputError(f"`semitones` must be an integer. Received: semitones={semitones!r}")
    roll = np.asarray(roll)
    keys = np.flatnonzero(roll.reshape(-1, roll.shape[-1]).max(axis=0))
    if len(keys) and not (0 <= keys[0] + semitones and keys[-1] + semitones < NUM_KEYS):
        raise InputError(
            f"transposing by {semitones} semitones moves the keys {LOWEST_KEY + keys[0]}.."
            f"{LOWEST_KEY + keys[-1]} off the piano (21..108). Received: semitones={semitones}"
        )
    return np.roll(roll, semitones, axis=-1)


def random_transposition(transpose):
    """A ``tf.data`` map function that moves an example up or down the keyboard.

    It maps ``((inputs, targets, mask), r)``, ``r`` a random int64 (for instance
    from ``tf.data.Dataset.random``), to ``(inputs, targets, mask)`` with inputs
    and targets both moved by the same number of semitones, drawn uniformly from
    the shifts in ``[-transpose, transpose]`` that keep every note of the example
    on the 88 keys: a song in another key, a standard regulariser for polyphonic
    music models. The mask is unchanged; an example without notes is not moved.

    Args:
        transpose: the largest shift in semitones, an integer in ``[0, 87]``.
    """
    import tensorflow as tf

    transpose = _check_transpose(transpose)

    def apply(example, r):
        inputs, targets, mask = example
        sounding = tf.reduce_max(tf.maximum(inputs, targets), axis=0) > 0  # [88]
        keys = tf.cast(tf.where(sounding)[:, 0], tf.int64)
        any_note = tf.size(keys) > 0
        # the lowest and highest sounding keys; without notes, no room to move
        low = tf.where(any_note, tf.reduce_min(tf.concat([keys, tf.constant([NUM_KEYS], tf.int64)], 0)), 0)
        high = tf.where(any_note, tf.reduce_max(tf.concat([keys, tf.constant([-1], tf.int64)], 0)), NUM_KEYS - 1)
        down = tf.minimum(tf.constant(transpose, tf.int64), low)
        up = tf.minimum(tf.constant(transpose, tf.int64), NUM_KEYS - 1 - high)
        shift = tf.math.floormod(r, down + up + 1) - down
        shift = tf.cast(shift, tf.int32)
        return tf.roll(inputs, shift, axis=-1), tf.roll(targets, shift, axis=-1), mask

    return apply


def _examples(rolls, steps=None, window=None):
    """``(inputs, targets, mask)`` of :func:`make_dataset`: next-step arrays, cut into windows with ``window``."""
    inputs, targets, mask = next_step_arrays(rolls, steps)
    if window is not None:
        inputs, targets, mask = windows(inputs, targets, mask, window)
    return inputs, targets, mask


def training_batches(rolls, batch_size=16, steps=None, window=None, replicas=1):
    """The batches of an epoch of :func:`make_dataset`'s pipeline of ``rolls`` (the same
    arguments): the ``steps_per_epoch`` of its stream (``first_epoch``). Counted from the
    rolls' lengths, without building the examples."""
    batch_size = integer_at_least("batch_size", batch_size, 1)
    lengths, _ = _roll_lengths(rolls, steps)
    if window is None:
        examples = len(lengths)  # one per roll
    else:  # the windows holding a real step, which windows() keeps
        window = integer_at_least("window", window, 1)
        examples = sum(-(-length // window) for length in lengths)
    return distribute.even_batch_count(examples, batch_size, replicas)


def make_dataset(rolls, batch_size=16, steps=None, shuffle=False, seed=0, window=None, transpose=0,
                 targets_as_input=False, replicas=1, first_epoch=None):
    """A ``tf.data`` pipeline of ``(inputs, targets, mask)`` for ``model.fit``.

    Args:
        rolls: the piano rolls (``[steps, 88]`` each, of 0s and 1s: see ``pad_rolls``), padded to
            ``steps`` (None: the longest).
        batch_size: the (global) batch size.
        steps: the padded length (see ``next_step_arrays``).
        shuffle: shuffle the examples (windows) every epoch (seeded by ``seed``):
            training data only.
        seed: the seed of the shuffle and of the transpositions: an integer >= 0
            (None: other draws every run, without ``first_epoch`` only); refused
            with an ``InputError`` when the pipeline is made.
        window: cut the sequences into windows of that many steps (see ``windows``);
            the model must then be built with ``steps=window``.
        transpose: > 0: every example (window) is moved by a random number of
            semitones in ``[-transpose, transpose]`` that keeps its notes on the
            keyboard, drawn anew every epoch (``random_transposition``; seeded by
            ``seed``): training data only.
        targets_as_input: yield ``({"rolls": inputs, "targets": targets}, targets, mask)``
            for a model with ``readout="nade"``.
        replicas: training batches are cut for that many replicas in sync
            (``distribute.even_batches``; :class:`PianoRollNLL` is then the NLL per real
            step of the windows kept).
        first_epoch: None (default): the pipeline is one epoch, whose shuffle and
            transpositions ``tf.data`` draws anew each time it is iterated. An epoch
            ``k``: the endless stream of the epochs ``k, k + 1, ...``, the shuffle and
            the transpositions of epoch ``e`` drawn from ``(seed, e)`` alone
            (``distribute.epoch_stream``; train on it with
            ``steps_per_epoch=training_batches(...)``), so that a run resumed at epoch
            ``k`` trains on the orders and transpositions of the uninterrupted run
            (what :func:`train` does).
    """
    import tensorflow as tf

    transpose = _check_transpose(transpose)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    # ("False", a non-empty string, shuffled; targets_as_input="no" fed the targets)
    shuffle = checks.true_or_false("shuffle", shuffle)
    targets_as_input = checks.true_or_false("targets_as_input", targets_as_input)
    inputs, targets, mask = _examples(rolls, steps, window)
    examples = tf.data.Dataset.from_tensor_slices((inputs, targets, mask))
    batches = distribute.even_batch_count(len(inputs), batch_size, replicas)

    def one_pass(pass_seed, redraw):  # (see distribute.training_epochs)
        ds = examples
        if shuffle:
            # a buffer of at least 1: tf.data refuses 0 (rolls of no steps leave no window)
            ds = ds.shuffle(max(len(inputs), 1), seed=pass_seed, reshuffle_each_iteration=redraw)
        if transpose:
            draws = tf.data.Dataset.random(seed=pass_seed, rerandomize_each_iteration=redraw)
            # in parallel: the map draws nothing itself (its draw is zipped in with the
            # example), and a parallel map keeps the order, so the windows and their
            # shifts are those of the map run one example at a time
            ds = tf.data.Dataset.zip(ds, draws).map(random_transposition(transpose),
                                                    num_parallel_calls=tf.data.AUTOTUNE)
        if targets_as_input:
            ds = ds.map(lambda inputs, targets, mask: ({"rolls": inputs, "targets": targets}, targets, mask))
        return distribute.even_batches(ds.batch(batch_size), replicas, batches)

    return distribute.prefetched(distribute.training_epochs(one_pass, seed, batches, first_epoch))


# ------------------------------------------------------------------------- loss
@keras.saving.register_keras_serializable(package="applications")
class PianoRollNLL(GlobalBatchLoss):
    """Negative log-likelihood of a roll under independent Bernoullis, summed over keys.

    ``y_pred`` holds logits ``[batch, steps, keys]``; the per-step values
    ``[batch, steps]`` are averaged with the sample weights (the padding mask)
    as weights, so padded steps never count: the result is the NLL per real step
    *of the batch*. Under a ``tf.distribute`` strategy of several replicas it is the
    NLL per real step of the *global* batch, as on one device
    (:class:`keras_capsules.losses.GlobalBatchLoss`; Keras' own division by each
    replica's real steps made a replica whose windows hold fewer real steps weigh
    more: a gradient 13% off for whole chorales of 2, 3, 8 and 8 steps on two replicas).

    It is the training objective. The ``loss`` and ``val_loss`` that ``fit`` reports
    are not the NLL per real step of the epoch, though: Keras averages the batches'
    losses weighted by their numbers of sequences (windows), not by their numbers of
    real steps, and windows of padded chorales hold different numbers of real steps.
    :class:`PianoRollNLLPerStep` (``nll_per_step`` and ``val_nll_per_step`` in the
    logs, see ``compile_model``) is exact.

    ``y_true`` holds the rolls: values in [0, 1], the probability of each key sounding
    (0 or 1 in a piano roll, :func:`pad_rolls`). Any other value (2, -1, NaN) has no
    Bernoulli likelihood: its cross-entropy is unbounded below (a key labelled 2 and
    its logit 50 gave -50), so the model was rewarded for pushing the logit away
    without a word. Called eagerly (the loss on concrete tensors or arrays,
    ``fit(..., run_eagerly=True)``) such a value raises an ``InputError`` (a
    ``ValueError``) naming it; inside a traced function (``fit``, ``evaluate``) the
    step holding it gets a NaN loss and no gradient, so the reported loss turns NaN
    (``fit`` of :func:`train` stops at it) instead of training on it, as the losses
    of :mod:`keras_capsules.losses` do with class ids out of range. The steps that
    count for nothing (a sample weight of 0, the padding) may hold any value, in their
    rolls and in their logits (a NaN or infinite logit there changes neither the loss
    nor its gradient, as for :class:`PianoRollNLLPerStep`; a ``y_pred`` carrying a Keras
    mask keeps its logits at the steps its weights zero). Rolls and logits must be of
    known rank: traced for ``tf.TensorSpec(shape=None)`` (a ``tf.numpy_function`` in a
    pipeline) they raise a ``ValueError`` naming them, TensorFlow's "Cannot take the
    length of shape with unknown rank" before.
    """

    def __init__(self, reduction="mean_with_sample_weight", name="piano_roll_nll", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        self._require_known_ranks(y_true, y_pred)
        y_true, y_pred = _counted_steps(y_true, y_pred, sample_weight)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        self._require_known_ranks(y_true, y_pred)
        y_true, y_pred = ops.convert_to_tensor(y_true), ops.convert_to_tensor(y_pred)
        _check_rolls(y_true)
        # traced calls only (eager ones raised): a NaN loss, without gradient, for the steps
        # whose roll holds a value outside [0, 1] (NaN too); their NLL is taken of zeros, as
        # the NaN gradient of a NaN label went through the `where` (0 * NaN)
        labels = ops.cast(y_true, y_pred.dtype)
        outside = ops.logical_not((labels >= 0) & (labels <= 1))
        values = _step_nll(ops.where(outside, ops.zeros_like(labels), labels), y_pred)
        return ops.where(ops.any(outside, axis=-1), ops.cast(float("nan"), values.dtype), values)

    def _require_known_ranks(self, y_true, y_pred):
        require_known_ranks(type(self).__name__, "it reads the keys on the last axis and the steps on the others",
                            y_true=y_true, y_pred=y_pred)


def _counted_steps(y_true, y_pred, sample_weight):
    """``(y_true, y_pred)`` with zeros at the steps that count for nothing in
    :class:`PianoRollNLL` (a sample weight of 0, or masked by the Keras mask of ``y_pred``;
    the weights aligned as the loss aligns them), so that the padded steps may hold
    anything: their rolls are not checked (the NaN loss of such a step, even weighed by
    0, would make the batch's loss NaN), and their logits enter neither the loss nor its
    gradient (a NaN or infinite logit at a padded step made the loss NaN, 0 * NaN, while
    :class:`PianoRollNLLPerStep` left it out). A ``y_pred`` that carries a Keras mask keeps
    its logits: the loss zeroes its masked steps itself, and the mask must stay on it."""
    mask = getattr(y_pred, "_keras_mask", None)
    weights = [w for w in (sample_weight, mask) if w is not None]
    if not weights:
        return y_true, y_pred
    y_true = ops.convert_to_tensor(y_true)
    steps = ops.zeros_like(ops.sum(ops.cast(y_true, "float32"), axis=-1))  # the per-step values' shape
    counted = ops.ones_like(steps, dtype="bool")
    for w in weights:
        counted = ops.logical_and(counted, like_values(steps, w, "float32") != 0)
    counted = ops.expand_dims(counted, -1)
    y_true = ops.where(counted, y_true, ops.zeros_like(y_true))
    if mask is None:
        y_pred = ops.convert_to_tensor(y_pred)
        y_pred = ops.where(counted, y_pred, ops.zeros_like(y_pred))
    return y_true, y_pred


def _check_rolls(y_true, owner="PianoRollNLL"):
    """Raises an ``InputError`` for rolls with values outside [0, 1] (NaN too); only
    concrete (eager) values can be checked: traced ones are left to the NaN of
    :meth:`PianoRollNLL.call`."""
    import tensorflow as tf

    if isinstance(y_true, keras.KerasTensor) or not tf.executing_eagerly():
        return
    values = np.asarray(ops.convert_to_numpy(y_true), "float64")
    with np.errstate(invalid="ignore"):
        bad = values[~((values >= 0) & (values <= 1))]
    if bad.size:
        raise InputError(
            f"{owner} takes rolls y_true of values in [0, 1] (the probability of each key sounding, "
            "0 or 1 in a piano roll): any other value has no Bernoulli likelihood (a cross-entropy unbounded "
            "below, or NaN). "
            f"Received: y_true with values {np.unique(bad)[:10].tolist()} outside [0, 1]"
        )


def _step_nll(y_true, y_pred):
    """``[..., steps]`` NLL of every step's roll: the keys' cross-entropies of the logits, summed."""
    y_true = ops.cast(y_true, y_pred.dtype)
    per_key = ops.binary_crossentropy(y_true, y_pred, from_logits=True)
    return ops.sum(per_key, axis=-1)


MONITOR = "val_nll_per_step"  # what keeps the best epoch and drives the plateau schedule


@keras.saving.register_keras_serializable(package="applications")
class PianoRollNLLPerStep(keras.metrics.Metric):
    """The NLL per real step of everything seen since the last reset, summed over keys.

    It sums the NLL of the real steps (sample weight, the padding mask, 1) and counts
    them, over all the batches of an epoch (and all the replicas of a distribution
    strategy, whose metric variables are summed), and reports the ratio: the exact NLL
    per real step, which :class:`PianoRollNLL` as a reported loss is not (see there).
    On whole chorales (``window=None``) it equals ``nll_per_step`` of the same rolls;
    on windows, the same NLL with the ladder's state started from zeros at each window.

    Pass it in ``weighted_metrics`` (it needs the mask as ``sample_weight``); without a
    sample weight every step counts. A weight of every sequence (``[batch]``) weighs
    each of its steps, as in Keras' losses; ``[batch, steps, 1]`` is one per step.
    Padded steps never count, whatever their values. The rolls of the steps that count
    must be in [0, 1], as for :class:`PianoRollNLL`: eagerly other values raise an
    ``InputError``; traced, each such step adds NaN (the result is NaN).

    Args:
        name: the metric's name (``nll_per_step``: ``val_nll_per_step`` in the logs).
        dtype: the dtype of the sums, float32.
    """

    def __init__(self, name="nll_per_step", dtype="float32"):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype=self.dtype, name="total")
        self.steps = self.add_variable(shape=(), initializer="zeros", dtype=self.dtype, name="steps")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.convert_to_tensor(y_true)
        per_step = ops.sum(ops.zeros_like(y_pred, dtype="float32"), axis=-1)  # (the steps' shape)
        if sample_weight is None:
            weight = ops.ones_like(per_step)
        else:
            weight = ops.cast(sample_weight, "float32")
            # aligned from the left, as Keras' losses read weights: [batch] is a weight
            # per sequence, for each of its steps; [batch, steps, 1] one per step
            while len(weight.shape) > len(per_step.shape) and weight.shape[-1] == 1:
                weight = ops.squeeze(weight, axis=-1)
            while len(weight.shape) < len(per_step.shape):
                weight = ops.expand_dims(weight, axis=-1)
            weight = ops.broadcast_to(weight, ops.shape(per_step))
        # the rolls of the counted steps must be in [0, 1], as PianoRollNLL's (padded steps
        # may hold anything): eagerly an InputError, traced a NaN for each such step (a key
        # labelled 2 was scored -50 for a logit of 50, lowering the reported NLL)
        labels = ops.where(ops.expand_dims(weight > 0, -1), y_true, ops.zeros_like(y_true))
        _check_rolls(labels, type(self).__name__)
        labels = ops.cast(labels, "float32")
        outside = ops.logical_not((labels >= 0) & (labels <= 1))
        per_step = _step_nll(ops.where(outside, ops.zeros_like(labels), labels), ops.cast(y_pred, "float32"))
        per_step = ops.where(ops.any(outside, axis=-1), float("nan"), per_step)
        # where, not a product: a padded step's NLL (finite or not) never reaches the sum
        self.total.assign_add(ops.cast(ops.sum(ops.where(weight > 0, per_step * weight, 0.0)), self.dtype))
        self.steps.assign_add(ops.cast(ops.sum(weight), self.dtype))

    def result(self):
        return ops.divide_no_nan(self.total, self.steps)


# ------------------------------------------------------------------------- read-out
READOUTS = ("independent", "nade")
#: the encoder cells of the music model's dense ladder levels (``level_spec``'s dense kinds)
ENCODERS = ("gated", "lstm")


@keras.saving.register_keras_serializable(package="applications")
class KeyNADE(keras.layers.Layer):
    """Per-key logits of a step's roll given the past *and the lower keys of that step*.

    The independent read-out predicts every key of step ``t`` from the past alone,
    one Bernoulli per key, so it cannot say "if C sounds, E and G are likely too":
    the keys of a chord are predicted as if unrelated. ``KeyNADE`` keeps one
    sigmoid per key but conditions key ``j`` on the keys ``i < j`` of the same step
    (lowest key first), as the NADE read-out of RNN-NADE (Boulanger-Lewandowski et
    al. 2012), conditioned on the ladder's per-key logits ``z`` of that step:

    ```
    a_j     = c + U z + sum_{i<j} W_i y_i        [hidden_units]
    logit_j = z_j + V_j . sigmoid(a_j)
    ```

    The product over keys of ``sigmoid(+-logit_j)`` is a proper distribution over the
    2^88 rolls of the step, so the summed per-key cross-entropy of these logits is
    the exact negative log-likelihood of the roll (the same metric as the independent
    read-out's). ``V`` starts at zero: the model starts as the independent one.
    Training and scoring need the true roll ``y`` of the step (teacher forcing, as
    for any autoregressive model); sampling would draw the keys one by one.

    Args:
        hidden_units: the NADE's hidden units ``H``. Default 64.
        kernel_initializer: initializer of ``U`` and ``W``. Default glorot_uniform.
        output_initializer: initializer of ``V``. Default zeros.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: ``[z, y]``: logits ``[..., keys]`` of the independent read-out and
            the true 0/1 roll ``[..., keys]`` of the same step.

    Returns:
        The conditional logits ``[..., keys]``: entry ``j`` is the logit of key ``j``
        sounding given ``z`` and ``y_i`` for ``i < j``.

    Example:

    ```python
    z = keras.Input((32, 88)); y = keras.Input((32, 88))
    logits = KeyNADE(hidden_units=64)([z, y])
    ```

    Reference:
        N. Boulanger-Lewandowski, Y. Bengio, P. Vincent, "Modeling Temporal
        Dependencies in High-Dimensional Sequences", ICML 2012; H. Larochelle, I.
        Murray, "The Neural Autoregressive Distribution Estimator", AISTATS 2011.
    """

    def __init__(self, hidden_units=64, kernel_initializer="glorot_uniform", output_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if isinstance(hidden_units, bool) or not isinstance(hidden_units, (int, np.integer)) or hidden_units < 1:
            raise InputError(f"`hidden_units` must be a positive integer. Received: hidden_units={hidden_units!r}")
        self.hidden_units = int(hidden_units)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_initializer = keras.initializers.get(output_initializer)

    def build(self, input_shapes):
        if not isinstance(input_shapes, (list, tuple)) or len(input_shapes) != 2:
            raise ValueError(f"KeyNADE expects two inputs [z, y]. Received: input_shapes={input_shapes!r}")
        z_shape, y_shape = (tuple(s) for s in input_shapes)
        if z_shape[-1] is None or z_shape[-1] != y_shape[-1]:
            raise ValueError(
                "KeyNADE expects logits z and rolls y with the same known last axis (the keys). "
                f"Received: z shape={z_shape}, y shape={y_shape}"
            )
        keys, units = z_shape[-1], self.hidden_units
        # autocast=False: under mixed precision the weights are read as float32, all the
        # math below runs in float32 (the layer's sums over keys and sigmoids) and casts back;
        # a float64 layer (dtype="float64") computes in float64
        self.context_kernel = self.add_weight(name="context_kernel", autocast=False, shape=(keys, units),
                                              initializer=self.kernel_initializer)
        self.hidden_bias = self.add_weight(name="hidden_bias", autocast=False, shape=(units,), initializer="zeros")
        self.input_kernel = self.add_weight(name="input_kernel", autocast=False, shape=(keys, units),
                                            initializer=self.kernel_initializer)
        self.output_kernel = self.add_weight(name="output_kernel", autocast=False, shape=(keys, units),
                                             initializer=self.output_initializer)
        self.built = True

    def call(self, inputs):
        z, y = inputs
        dtype = self.compute_dtype
        # float32 at least (float16/bfloat16 compute under mixed precision), float64 for a
        # float64 layer (a float64 KeyNADE multiplied float32 inputs by its float64 weights: an error)
        work = "float64" if self.variable_dtype == "float64" else "float32"
        z32, y32 = ops.cast(z, work), ops.cast(y, work)
        context = ops.matmul(z32, self.context_kernel) + self.hidden_bias  # [..., H]
        # the sum over the keys i < j only, an exclusive cumulative sum: row j of `terms`
        # holds key j - 1's contribution (zeros at j = 0), so that key j's own value never
        # enters its logit. (The inclusive cumsum minus key j's term left its rounding
        # there: flipping key j moved logit j by up to an ulp.)
        lower = ops.concatenate([ops.zeros_like(y32[..., :1]), y32[..., :-1]], axis=-1)
        kernel = ops.concatenate([ops.zeros_like(self.input_kernel[:1]), self.input_kernel[:-1]], axis=0)
        terms = lower[..., :, None] * kernel  # [..., keys, H]
        below = ops.cumsum(terms, axis=-2)
        hidden = ops.sigmoid(context[..., None, :] + below)
        logits = z32 + ops.sum(hidden * self.output_kernel, axis=-1)
        return ops.cast(logits, dtype)

    def compute_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_units": self.hidden_units,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "output_initializer": keras.initializers.serialize(self.output_initializer),
        })
        return config


# ------------------------------------------------------------------------- model
def paper_levels(units=(128, 64), encoder="gated"):
    """Dense ladder levels in the spirit of the paper's Table 10 (narrower by default).

    ``units``: the levels' state sizes, bottom to top (a non-empty sequence of positive
    integers; one positive integer: one level).
    """
    return [level_spec(_check_encoder(encoder), u) for u in _check_units(units)]


def _check_encoder(encoder):
    """``encoder`` if it is one of ``ENCODERS`` (the levels are dense: ``"convlstm"`` and
    the other convolutional kinds failed inside the ladder with its own error), else an
    ``InputError``."""
    if not isinstance(encoder, str) or encoder not in ENCODERS:
        raise InputError(f"`encoder` must be one of {ENCODERS}. Received: encoder={encoder!r}")
    return encoder


def _check_units(units):
    """``units`` as a tuple of ints: one positive integer is one level (``units=8`` was a
    TypeError, "'int' object is not iterable"); anything but a non-empty sequence of
    positive integers is an ``InputError`` (``"64"`` built levels of 6 and 4 units)."""
    levels = (units,) if isinstance(units, numbers.Integral) else units
    if (
        not isinstance(levels, (list, tuple))
        or not levels
        or any(isinstance(u, bool) or not isinstance(u, numbers.Integral) or u < 1 for u in levels)
    ):
        raise InputError(
            "`units` must be a positive integer or a non-empty sequence of them (one per ladder level). "
            f"Received: units={units!r}"
        )
    return tuple(int(u) for u in levels)


def build_model(
    steps,
    units=(128, 64),
    encoder="gated",
    decoder_to_encoder=True,
    use_decoder=True,
    input_dropout=0.0,
    dropout=0.0,
    dropout_noise="step",
    zoneout=0.0,
    output_bias=None,
    readout="independent",
    nade_units=64,
    seed=None,
    name="rladder_music",
):
    """The music model: an RLadder of dense levels, per-key logits for the next step.

    Args:
        steps: the (padded) sequence length the model is built for; ``nll_per_step``
            reuses its layers for any other length.
        units: state sizes of the ladder levels, bottom to top (a positive integer:
            one level).
        encoder: ``"gated"`` or ``"lstm"`` encoder cells.
        decoder_to_encoder: RLadder's decoder-to-encoder connections.
        use_decoder: False gives the hierarchical-RNN baseline; the prediction is
            then a linear read-out of the top level.
        input_dropout: dropout on the input rolls during training.
        dropout: RLadder's dropout between levels during training (see ``RLadder``).
        dropout_noise: ``"step"`` or ``"sequence"`` (variational) dropout masks.
        zoneout: RLadder's zoneout rate of the encoder states (see ``RLadder``).
        output_bias: None (zeros), or 88 initial values of the output bias, e.g. the
            log-odds of every key's frequency in the training rolls (``key_log_odds``).
        readout: ``"independent"`` (default, the paper's): one Bernoulli per key given
            the past; ``"nade"``: the same logits corrected by a :class:`KeyNADE`,
            which also conditions every key on the lower keys of the same step.
        nade_units: the NADE's hidden units (``readout="nade"`` only).
        seed: seed of RLadder's dropout and zoneout masks (not used without them).
        name: model name.

    Returns:
        A ``keras.Model`` from ``[batch, steps, 88]`` rolls to logits ``[batch, steps, 88]``
        (output ``t`` predicts the roll at ``t + 1`` of the input). With
        ``readout="nade"`` its input is a dict: ``"rolls"`` as before and ``"targets"``,
        the rolls being predicted (output ``t``'s key ``j`` is then conditioned on
        ``targets[:, t, :j]``); ``make_dataset(..., targets_as_input=True)`` feeds it.
    """
    if readout not in READOUTS:
        raise InputError(f"`readout` must be one of {READOUTS}. Received: readout={readout!r}")
    if steps is not None:  # steps=0 built a model that failed only when called
        steps = integer_at_least("steps", steps, 1)
    units = _check_units(units)
    encoder = _check_encoder(encoder)
    # ("False" is a non-empty string: it built the ladder with the option on)
    decoder_to_encoder = checks.true_or_false("decoder_to_encoder", decoder_to_encoder)
    use_decoder = checks.true_or_false("use_decoder", use_decoder)
    if seed is not None:  # (Keras' own error came from inside the ladder's seed generator)
        seed = integer_at_least("seed", seed, 0)
    # (KeyNADE's own check named its argument, `hidden_units`)
    nade_units = integer_at_least("nade_units", nade_units, 1)
    if output_bias is not None:
        # a wrong length failed in numpy's reshape, a NaN gave NaN logits silently
        output_bias = np.asarray(output_bias, "float32")
        if output_bias.size != NUM_KEYS or not np.all(np.isfinite(output_bias)):
            raise InputError(
                f"`output_bias` must be {NUM_KEYS} finite numbers (e.g. key_log_odds(rolls)). "
                f"Received: output_bias of shape {output_bias.shape}"
                + ("" if np.all(np.isfinite(output_bias)) else " with non-finite values")
            )
    # Keras' Dropout takes rate=1 and zeroes the whole input: a model that never saw a roll
    if checks.finite_number("input_dropout", input_dropout, positive=False) >= 1:
        raise InputError(f"`input_dropout` must be a number in [0, 1). Received: input_dropout={input_dropout!r}")
    rolls = keras.Input((steps, NUM_KEYS), name="rolls")
    x = rolls
    if input_dropout:
        x = keras.layers.Dropout(input_dropout, name="input_dropout")(x)
    levels = paper_levels(units, encoder)
    # the ladder's seed seeds its dropout and zoneout masks only: given without them it
    # has no effect, and RLadder warns so (at every build and every load of the model)
    if not (dropout or zoneout):
        seed = None
    if use_decoder:
        ladder = RLadder(
            levels,
            decoder_to_encoder=decoder_to_encoder,
            output_units=NUM_KEYS,
            dropout=dropout,
            dropout_noise=dropout_noise,
            zoneout=zoneout,
            seed=seed,
            name="rladder",
        )
        logits, _ = ladder(x)
        bias = ladder.output_bias
        if readout != "nade":  # (float32 under a mixed policy: the logits the loss reads; nade's below)
            logits = arguments.float32_output(logits, "logits")
    else:
        top = RLadder(levels, use_decoder=False, dropout=dropout, dropout_noise=dropout_noise,
                      zoneout=zoneout, seed=seed, name="rladder")(x)
        # not `readout`: that name is the read-out argument checked below ("nade")
        top_readout = keras.layers.Dense(  # (float32 under a mixed policy unless nade reads it)
            NUM_KEYS, name="readout", dtype=None if readout == "nade" else arguments.output_dtype())
        logits = top_readout(top)
        bias = top_readout.bias
    if output_bias is not None:
        bias.assign(output_bias.reshape((NUM_KEYS,)))
    if readout == "nade":
        targets = keras.Input((steps, NUM_KEYS), name="targets")
        logits = KeyNADE(nade_units, name="nade", dtype=arguments.output_dtype())([logits, targets])
        return keras.Model({"rolls": rolls, "targets": targets}, logits, name=name)
    return keras.Model(rolls, logits, name=name)


def is_autoregressive(model):
    """True for a model whose keys depend on the lower keys of their step (``readout="nade"``)."""
    return isinstance(model.input, dict) or len(model.inputs) > 1


def key_log_odds(rolls, prior=1.0):
    """Log-odds of every key sounding at a step of ``rolls``, ``[88]`` (``prior``
    pseudo-steps with and without the key keep unseen keys finite)."""
    if isinstance(prior, bool) or not isinstance(prior, numbers.Real) or not 0 < prior < np.inf:
        raise InputError(f"`prior` must be a positive, finite number. Received: prior={prior!r}")
    on = np.zeros(NUM_KEYS) + sum(np.asarray(r).sum(axis=0) for r in rolls)
    steps = sum(len(r) for r in rolls)
    return np.log((on + prior) / (steps - on + prior)).astype("float32")


def compile_model(model, learning_rate=1e-3, clipnorm=1.0, weight_decay=0.0, ema_momentum=None):
    """Compiles ``model`` with Adam (AdamW with ``weight_decay``) and ``PianoRollNLL``.

    The loss, each batch's NLL per real step, is what is minimised; the weighted metric
    :class:`PianoRollNLLPerStep` (``nll_per_step``, ``val_nll_per_step``: ``MONITOR``)
    is the exact NLL per real step of an epoch, on which ``train`` keeps the best epoch.

    Args:
        model: a model from ``build_model``.
        learning_rate: Adam's step size (a finite number > 0 or a schedule).
        clipnorm: clips each gradient to this norm (a finite number > 0; None: no
            clipping).
        weight_decay: decoupled weight decay of AdamW (a finite number >= 0; 0: plain
            Adam).
        ema_momentum: if set (in ``[0, 1)``), the optimizer also keeps an exponential
            moving average of the weights with this momentum (Keras' ``use_ema``);
            ``train`` validates and keeps that average.
    """
    learning_rate = checks.learning_rate(learning_rate)
    if clipnorm is not None:
        clipnorm = checks.finite_number("clipnorm", clipnorm, positive=True)
    weight_decay = checks.finite_number("weight_decay", weight_decay, positive=False)
    # (numbers.Real: np.float32(0.99) was refused, which RAdam and Keras' optimizers take)
    if ema_momentum is not None:
        if isinstance(ema_momentum, bool) or not isinstance(ema_momentum, numbers.Real) or not 0 <= ema_momentum < 1:
            raise InputError(f"`ema_momentum` must be None or in [0, 1). Received: ema_momentum={ema_momentum!r}")
        ema_momentum = float(ema_momentum)
    ema = dict(use_ema=ema_momentum is not None, ema_momentum=0.99 if ema_momentum is None else ema_momentum)
    if weight_decay:
        optimizer = keras.optimizers.AdamW(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm, **ema)
    else:
        optimizer = keras.optimizers.Adam(learning_rate, clipnorm=clipnorm, **ema)
    model.compile(optimizer=optimizer, loss=PianoRollNLL(), weighted_metrics=[PianoRollNLLPerStep()])
    return model


def _with_steps(model, steps):
    """The same layers (shared weights) applied to sequences of ``steps`` steps (None: any number)."""
    if model.inputs[0].shape[1] == steps:
        return model
    rolls = keras.Input((steps, NUM_KEYS), name="rolls")
    targets = keras.Input((steps, NUM_KEYS), name="targets")
    x = rolls
    for layer in model.layers:
        if isinstance(layer, (keras.layers.InputLayer, keras.layers.Dropout)):
            continue
        x = layer([x, targets]) if isinstance(layer, KeyNADE) else layer(x)
        if isinstance(x, (list, tuple)):
            x = x[0]
    if is_autoregressive(model):
        return keras.Model({"rolls": rolls, "targets": targets}, x)
    return keras.Model(rolls, x)


def nll_per_step(model, rolls, batch_size=32, verbose=0):
    """The paper's metric: NLL per time step, summed over keys, mean over all steps.

    Args:
        model: a model from ``build_model`` (any ``steps``: its layers and weights
            score the rolls padded to the longest, the ladder's symbolic loop traced
            once for all batches, see ``_logit_function``), or a list of such models: an ensemble
            whose predictive probability of every key is the mean of the models'
            (still one independent Bernoulli per key given the past).
            An ensemble with a ``readout="nade"`` member is the mixture of the
            members' distributions of each whole step (``log mean_k p_k(x_t | x_<t)``).
        rolls: a list of ``[steps_i, 88]`` piano rolls of 0s and 1s (another value is
            refused with an ``InputError``: see ``pad_rolls``).
        batch_size: rolls per forward pass.
        verbose: 1 or 2 shows a progress bar over the batches, on stderr; 0 (default) is
            silent. Another value is refused with an ``InputError``
            (:func:`applications.checks.verbosity`).

    Returns:
        ``sum over rolls and steps of -log p(x_t | x_<t)`` divided by the number of steps.
    """
    batch_size = integer_at_least("batch_size", batch_size, 1)
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bar)
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    inputs, targets, mask = next_step_arrays(rolls)
    if not mask.any():  # was a ZeroDivisionError after running the model
        raise InputError(f"`rolls` must hold at least one step. Received: {len(rolls)} roll(s) of 0 steps")
    nets = [_logit_function(m, inputs.shape[1]) for m in models]
    joint = any(is_autoregressive(m) for m in models)
    total = 0.0
    # one context over the loop: Keras' Progbar asks sys.stdout whether it is a terminal, and writes to it
    with console.progress_on_stderr(verbose):
        progress = keras.utils.Progbar(len(inputs), unit_name="roll") if verbose else None
        for start in range(0, len(inputs), batch_size):
            x, y = inputs[start : start + batch_size], targets[start : start + batch_size]
            logits = np.stack([np.asarray(net(x, y), "float64") for net in nets])
            # NaN or infinite logits (a model of such weights) give a NaN score without numpy's
            # RuntimeWarnings ("invalid value encountered in logaddexp"): the command line
            # notes the weights and the score itself, as for the other applications
            with np.errstate(invalid="ignore"):
                # log sigmoid(z) = -logaddexp(0, -z), stably
                if joint:  # the mixture of the members' joint distributions of the step
                    log_step = -(np.logaddexp(0.0, -logits) * y + np.logaddexp(0.0, logits) * (1 - y)).sum(-1)
                    per_step = -_log_mean_exp(log_step)
                else:  # log p(key on) = log mean_k sigmoid(z_k), log p(key off) = log mean_k sigmoid(-z_k)
                    log_on = _log_mean_exp(-np.logaddexp(0.0, -logits))
                    log_off = _log_mean_exp(-np.logaddexp(0.0, logits))
                    per_step = -(log_on * y + log_off * (1 - y)).sum(-1)
                total += float((per_step * mask[start : start + batch_size]).sum())
            if progress is not None:
                progress.update(min(start + batch_size, len(inputs)))
    return total / float(mask.sum())


def _logit_function(model, steps):
    """``f(rolls, targets)``: the logits ``[n, steps, 88]`` of ``model`` (inference, no
    dropout) for ``[n, steps, 88]`` input rolls (``targets``: the rolls predicted, read by
    a NADE read-out only), through the same layers and weights.

    On TensorFlow it is one graph, traced here once for batches of any size and any
    number of steps, in which the ladder runs its symbolic loop (``RLadder``'s
    ``unroll``: T is unknown when traced). Its logits are those of the ladder unrolled
    over ``steps`` and run eagerly (``_with_steps(model, steps)``), which ``nll_per_step``
    ran before, paying Python's dispatch of every op of every step for every batch: the
    77 test chorales (up to 160 steps) through a small ladder took 14-21 s that way on a
    loaded 2-core CPU, 0.8-1.4 s through the graph, its trace included. On other
    backends, that eager model.
    """
    autoregressive = is_autoregressive(model)

    def logits(net, rolls, targets):
        return net({"rolls": rolls, "targets": targets} if autoregressive else rolls, training=False)

    if keras.backend.backend() != "tensorflow":
        net = _with_steps(model, steps)
        return lambda rolls, targets: logits(net, rolls, targets)
    import tensorflow as tf

    # a ladder made to unroll (unroll=True) needs the number of steps when traced
    net = _with_steps(model, steps if model.get_layer("rladder").unroll else None)
    spec = tf.TensorSpec((None, net.inputs[0].shape[1], NUM_KEYS), "float32")
    # The concrete function is called, not the tf.function: one made anew for every model
    # and call warned of "excessive retracing" from the fifth on (ensembles, tests).
    # autograph=False: no Python control flow of this function's own to convert.
    graph = tf.function(lambda rolls, targets: logits(net, rolls, targets), autograph=False)
    return graph.get_concrete_function(spec, spec)


def _log_mean_exp(a):
    """``log(mean(exp(a), axis=0))``, stably."""
    top = a.max(axis=0)
    return top + np.log(np.mean(np.exp(a - top), axis=0))


# ------------------------------------------------------------------------- sampling
def _check_temperature(temperature):
    # (numbers.Real: np.float32(0.5) was refused; inf drew every key at probability 0.5)
    return checks.finite_number("temperature", temperature, positive=True)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warnings for large |x|


def sample_keys(logits, rng, nade=None, temperature=1.0):
    """Draws one roll per row of ``logits`` (the ladder's per-key logits of a step).

    Without ``nade`` every key is an independent Bernoulli of probability
    ``sigmoid(logits / temperature)``. With a built :class:`KeyNADE` the keys are drawn
    in order, lowest first: key ``j``'s logit is the NADE's (its ``z_j`` corrected by
    the hidden units, which have seen the keys ``i < j`` already drawn), so each roll is
    an exact draw from the NADE's distribution over the ``2^keys`` rolls. One loop over
    the keys in numpy, vectorised over the rows.

    Args:
        logits: ``[n, keys]`` logits ``z`` of the step (any number of keys matching the
            NADE's weights).
        rng: a ``numpy.random.Generator``.
        nade: None, or the built ``KeyNADE`` layer of the model.
        temperature: divides every key's logit (1: the model's distribution; lower:
            more likely rolls; higher: more random ones).

    Returns:
        ``[n, keys]`` float32 0/1 rolls.
    """
    temperature = _check_temperature(temperature)
    z = np.asarray(logits, "float64")
    if z.ndim != 2:
        raise ValueError(f"`logits` must have shape [n, keys]. Received: logits shape={z.shape}")
    uniform = rng.uniform(size=z.shape)
    if nade is None:
        return (uniform < _sigmoid(z / temperature)).astype("float32")
    weights = {name: np.asarray(getattr(nade, name), "float64")
               for name in ("context_kernel", "hidden_bias", "input_kernel", "output_kernel")}
    if weights["input_kernel"].shape[0] != z.shape[1]:
        raise ValueError(f"the NADE has {weights['input_kernel'].shape[0]} keys, the logits {z.shape[1]}. "
                         f"Received: logits shape={z.shape}")
    pre = z @ weights["context_kernel"] + weights["hidden_bias"]  # [n, H]: c + U z
    roll = np.zeros(z.shape, "float32")
    for j in range(z.shape[1]):
        logit = z[:, j] + _sigmoid(pre) @ weights["output_kernel"][j]
        on = uniform[:, j] < _sigmoid(logit / temperature)
        roll[:, j] = on
        pre = pre + on[:, None] * weights["input_kernel"][j]  # key j joins the keys below
    return roll


def _logit_stepper(model):
    """``(carry, step)`` for ``model`` of ``build_model``: ``step(x_t, carry) -> (z_t, carry)``
    advances the ladder by one step (inference: no dropout) and gives the per-key logits
    ``z_t`` [n, 88] that predict the roll of step ``t + 1`` before any NADE."""
    ladder = model.get_layer("rladder")
    readout = None if ladder.use_decoder else model.get_layer("readout")

    def logit_step(x, carry):
        prediction, top, carry = ladder.step(x, carry)
        return (prediction if readout is None else readout(top)), carry

    run = logit_step
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # One graph, traced at the first step of a sample (the carry's shapes stay those
        # of initial_carry): run eagerly, every step paid Python's dispatch of every op
        # of the ladder, 64 steps of the paper's ladder 1.5-1.9 s on a loaded 2-core CPU,
        # 0.4-0.5 s this way, its trace included, with the same rolls drawn. The concrete
        # function is called (see _logit_function): a tf.function made anew for every
        # sample warned of "excessive retracing" from the fifth short sample on. With
        # tf.config.run_functions_eagerly(True) (debugging) the steps run eagerly.
        graph = tf.function(logit_step, autograph=False)
        compiled = []

        def traced(x, carry):
            if not compiled:
                spec = tf.nest.map_structure(lambda t: None if t is None else tf.TensorSpec.from_tensor(t), (x, carry))
                compiled.append(graph.get_concrete_function(*spec))
            return compiled[0](x, carry)

        if not tf.config.functions_run_eagerly():
            run = traced

    def step(x, carry):
        z, carry = run(ops.convert_to_tensor(x, ladder.compute_dtype), carry)
        return np.asarray(ops.convert_to_numpy(z), "float64"), carry

    return lambda n: ladder.initial_carry(n, ladder.compute_dtype), step


def sample(model, steps, num_samples=1, seed=0, temperature=1.0, primer=None, verbose=0):
    """Generates piano rolls with a trained music model, one step after the other.

    The ladder runs one step at a time (``RLadder.step``), so a sample of ``T`` steps
    costs ``T`` ladder steps: the roll drawn at step ``t`` is the input of step ``t + 1``.
    With ``readout="independent"`` the 88 keys of a step are independent Bernoullis
    given the past; with ``readout="nade"`` they are drawn lowest key first from the
    model's :class:`KeyNADE` (``sample_keys``), with the ladder's logits of the step
    computed once. Deterministic for a seed.

    Args:
        model: a model of ``build_model`` (either read-out, any ``steps``).
        steps: the number of steps to generate (a positive integer).
        num_samples: how many rolls to draw at once. Default 1.
        seed: seed of the draws. Default 0.
        temperature: divides every key's logit (see ``sample_keys``). Default 1.
        primer: None (start from silence, as the model's first training step), or a
            ``[primer_steps, 88]`` roll (shared by all samples) or ``[num_samples,
            primer_steps, 88]`` rolls that the samples continue.
        verbose: 1 or 2 shows a progress bar over the steps, on stderr; 0 (default) is
            silent. Another value is refused with an ``InputError``
            (:func:`applications.checks.verbosity`).

    Returns:
        ``[num_samples, steps, 88]`` float32 0/1 piano rolls (the primer not included).
    """
    for name, value in (("steps", steps), ("num_samples", num_samples)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    temperature = _check_temperature(temperature)
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bar)
    if primer is not None:
        primer = np.asarray(primer, "float32")
        if primer.ndim == 2:
            primer = np.broadcast_to(primer, (num_samples,) + primer.shape)
        if primer.ndim != 3 or primer.shape[0] != num_samples or primer.shape[2] != NUM_KEYS:
            raise InputError(
                f"`primer` must be a [primer_steps, {NUM_KEYS}] roll or [num_samples, primer_steps, "
                f"{NUM_KEYS}] rolls. Received: primer shape={primer.shape}"
            )
    nade = model.get_layer("nade") if is_autoregressive(model) else None
    rng = np.random.default_rng(checks.numpy_seed(seed))  # (-1 was numpy's traceback)
    initial_carry, step = _logit_stepper(model)
    carry = initial_carry(num_samples)
    x = np.zeros((num_samples, NUM_KEYS), "float32")
    for t in range(0 if primer is None else primer.shape[1]):  # read the primer
        _, carry = step(x, carry)
        x = primer[:, t]
    rolls = np.zeros((num_samples, steps, NUM_KEYS), "float32")
    with console.progress_on_stderr(verbose):  # the Progbar writes to sys.stdout
        progress = keras.utils.Progbar(steps, unit_name="step") if verbose else None
        for t in range(steps):
            z, carry = step(x, carry)
            x = rolls[:, t] = sample_keys(z, rng, nade, temperature)
            if progress is not None:
                progress.update(t + 1)
    return rolls


def plot_piano_roll(rolls, path, title=None):
    """Writes piano rolls as an image of keys (up) against time (right) to a PNG.

    Args:
        rolls: a ``[steps, 88]`` roll or ``[n, steps, 88]`` rolls (one panel each,
            stacked), values in [0, 1] (0/1 notes or probabilities).
        path: output file.
        title: optional figure title.

    Returns:
        ``path``.
    """
    rolls = np.asarray(rolls, "float32")
    if rolls.ndim == 2:
        rolls = rolls[None]
    if rolls.ndim != 3 or rolls.shape[-1] != NUM_KEYS or rolls.shape[1] < 1 or rolls.shape[0] < 1:
        raise InputError(f"`rolls` must have shape [steps, {NUM_KEYS}] or [n, steps, {NUM_KEYS}] with steps >= 1. "
                         f"Received: rolls shape={rolls.shape}")
    n, steps = rolls.shape[:2]
    fig, axes = plotting.subplots(n, 1, figsize=(min(2.0 + 0.12 * steps, 16.0), 2.6 * n + 0.4), squeeze=False)
    for i, ax in enumerate(axes[:, 0]):
        ax.imshow(rolls[i].T, origin="lower", aspect="auto", cmap="Greys", vmin=0.0, vmax=1.0,
                  interpolation="nearest", extent=(-0.5, steps - 0.5, LOWEST_KEY - 0.5, LOWEST_KEY + NUM_KEYS - 0.5))
        ax.set_ylabel("MIDI pitch")
        ax.set_yticks([24, 36, 48, 60, 72, 84, 96, 108])  # the Cs (60: middle C)
        ax.grid(axis="y", alpha=0.2)
        if n > 1:
            ax.set_title(f"sample {i + 1}", fontsize=8)
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize=9)
    # tight: a short roll's figure (2.5 inches at 4 steps) is narrower than its title, which was cut off
    return plotting.save_and_close(fig, path, dpi=100, format="png", bbox_inches="tight")


# ------------------------------------------------------------------------- recipe
@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    data_path=None,
    run_dir="runs/music",
    epochs=100,
    batch_size=16,
    learning_rate=1e-3,
    units=(128, 64),
    encoder="gated",
    input_dropout=0.1,
    decoder_to_encoder=True,
    use_decoder=True,
    window=32,
    transpose=0,
    weight_decay=0.0,
    ema_momentum=None,
    reduce_lr_patience=None,
    reduce_lr_factor=0.5,
    dropout=0.0,
    dropout_noise="step",
    zoneout=0.0,
    init_output_bias=False,
    ensemble=1,
    readout="independent",
    nade_units=64,
    seed=0,
    verbose=1,
    callbacks=(),
    strategy=None,
    limit=None,
    sample_steps=64,
    precision=None,
):
    """Trains on the training chorales, keeps the best model on the validation NLL.

    The epoch kept is the one with the lowest ``val_nll_per_step`` (``MONITOR``): the
    exact NLL per real step of the validation data (:class:`PianoRollNLLPerStep`), not
    ``val_loss``, which averages the batches' NLL per step weighted by their numbers of
    windows (see :class:`PianoRollNLL`). With ``window`` (default 32) training and
    validation run on windows of that many steps (short unrolled graphs; the ladder's
    state starts from zeros at each window, so the validation NLL is the windowed
    one); the reported figures are ``nll_per_step`` on whole chorales. ``window=None``
    trains on whole chorales padded to the longest (``val_nll_per_step`` is then
    ``nll_per_step`` of the validation chorales), and so does a ``window`` longer than
    the longest chorale read (the model is built for the longest).

    ``transpose`` > 0 moves every training window by a random number of semitones up
    to that many (see ``make_dataset``; off by default: nearly all of these chorales
    are written in C, 214 of the 229 training chorales end on a C in the bass, so the
    key is a regularity of every split and moving it costs more than the extra data
    gains, see ``benchmarks/rladder_measurements.md``); ``weight_decay`` and ``ema_momentum`` are
    passed to ``compile_model`` (with ``ema_momentum`` the validation NLL, the model
    kept and the figures are those of the moving average of the weights).
    ``reduce_lr_patience`` (a positive integer; None: off) multiplies the learning rate
    by ``reduce_lr_factor`` (in ``(0, 1)``) whenever ``val_nll_per_step`` has not improved
    for that many epochs.

    ``dropout`` and ``dropout_noise`` set the RLadder's dropout between levels and
    ``zoneout`` its zoneout of the encoder states (see ``build_model``); ``init_output_bias`` starts the output bias at the log-odds of
    every key's frequency in the training rolls (``key_log_odds``) instead of zeros.
    ``ensemble`` > 1 trains that many models one after the other (seeds ``seed``,
    ``seed + 1``, ..., all below ``2**32``: refused at once otherwise), each kept at its best validation epoch, and reports the NLL
    of their mean predictive probabilities (``nll_per_step`` of the list); each is
    saved (``model.keras``, ``model_1.keras``, ...) as soon as it is trained, and listed
    in ``members.json`` (removed when the run completes; ``metrics.json`` lists their files
    under ``"members"``, so that ``evaluate`` of ``model.keras`` scores the ensemble): calling ``train`` again with
    the same arguments after a crash loads the members already saved instead of
    training them again. ``encoder`` may be a list of
    encoder kinds: member ``i`` then uses ``encoder[i % len(encoder)]`` (an ensemble
    of gated and LSTM ladders). ``callbacks`` is a list of
    callbacks, or a function from the member's index to its list (e.g. a fresh
    time budget for each). ``readout`` and ``nade_units`` choose the read-out (see
    ``build_model``; ``readout`` may be a list, member ``i`` using
    ``readout[i % len(readout)]``).

    With the backup callbacks of ``fault_tolerance.resumable_callbacks`` among
    ``callbacks`` (as the command line passes them), the best epoch so far is kept
    beside each member's backup (``fault_tolerance.KeepBestWeights``), and so is the
    state of ``reduce_lr_patience``'s plateau detection (epochs waited, best loss,
    cooldown: ``fault_tolerance.ResumableReduceLROnPlateau``): a resumed member still
    keeps its best epoch from before the crash and lowers its learning rate at the
    epochs of an uninterrupted run; it trains its epochs on the shuffles and
    transpositions of the uninterrupted run too (``make_dataset(..., first_epoch=...)``:
    drawn from the member's seed and the epoch, not anew from epoch 0 in the new
    process); ``history.png`` shows every epoch of
    ``history.csv`` and ``epochs_run`` counts the epochs before the resume too.
    A member's backup is deleted (``fault_tolerance.finish_run``) once the member is
    saved and listed in ``members.json``; until then a rerun finishes it from there.

    Writes ``model.keras``, ``history.png``, ``metrics.json`` and TensorBoard logs
    under ``run_dir``, and ``sample.png``: the piano roll of one chorale of
    ``sample_steps`` steps (default 64; 0: none) drawn from the (first) model with
    ``sample`` (seed ``seed``). With ``strategy`` the model is built and compiled in its scope
    (``batch_size`` is then the global batch); ``limit`` keeps the first chorales of
    every split (quick runs), and ``metrics.json`` records it (``"limit"``, null for
    all): ``evaluate`` scores the same first chorales by default.

    ``verbose`` is ``fit``'s: 0 (silent), 1 (progress bars) or 2 (a line per epoch); 1
    or 2 also prints the learning rate's reductions and the members' lines. Another
    value is refused with an ``InputError`` before the chorales are read
    (:func:`applications.checks.verbosity`).

    ``precision`` (``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``) is the Keras
    dtype policy the run builds, trains and saves its model under (its outputs in
    float32); None (the default): the global one. See
    ``applications.arguments.trains_under_precision``.

    Returns:
        A dict with the validation and test NLL per step, the parameter count and the paths.
    """
    from applications import fault_tolerance
    from applications.demo import plot_history, save_atomically

    # epochs=0 wrote and scored an untrained model; -1 and 1.5 failed inside fit
    epochs = integer_at_least("epochs", epochs, 1)
    # (integer_at_least: numpy integers, such as a tuner's or an array's np.int64, were refused)
    if reduce_lr_patience is not None:
        reduce_lr_patience = integer_at_least("reduce_lr_patience", reduce_lr_patience, 1)
    sample_steps = integer_at_least("sample_steps", sample_steps, 0)
    ensemble = integer_at_least("ensemble", ensemble, 1)
    # ("no" and -1 were taken by fit, which hid its progress, True showed it)
    verbose = checks.verbosity(verbose)
    # (numbers.Real: np.float32(0.5) was refused)
    if isinstance(reduce_lr_factor, bool) or not isinstance(reduce_lr_factor, numbers.Real) \
            or not 0 < reduce_lr_factor < 1:
        raise InputError(f"`reduce_lr_factor` must be in (0, 1). Received: reduce_lr_factor={reduce_lr_factor!r}")
    reduce_lr_factor = float(reduce_lr_factor)
    # checked before anything is written (an empty list failed later with ZeroDivisionError)
    readouts = [readout] if isinstance(readout, str) else list(readout)
    if not readouts or any(kind not in READOUTS for kind in readouts):
        raise InputError(f"`readout` must be one of {READOUTS} or a list of them. Received: readout={readout!r}")
    encoders = [encoder] if isinstance(encoder, str) else list(encoder)
    if not encoders:
        raise InputError(f"`encoder` must be an encoder kind or a non-empty list of them. Received: encoder={encoder!r}")
    for kind in encoders:  # every member's (a bad later one failed after the members before had trained)
        _check_encoder(kind)
    seed = integer_at_least("seed", seed, 0)  # (member i's seed is seed + i)
    if seed + ensemble - 1 >= 2**32:
        # Keras seeds from [0, 2**32): seed=2**32 - 1 with ensemble=2 trained the first member,
        # then failed with "Seed must be between 0 and 2**32 - 1" when seeding the second
        raise InputError(f"`seed` + `ensemble` - 1 (the last member's seed) must be below 2**32. "
                         f"Received: seed={seed!r}, ensemble={ensemble!r}")
    # ("False" is a non-empty string: it was taken as on)
    init_output_bias = checks.true_or_false("init_output_bias", init_output_bias)
    # (None: none; [*None] was a TypeError after the run directory; a function of the
    # member is checked on what it returns)
    callbacks = callbacks if callable(callbacks) else checks.callback_list(callbacks)
    keras.utils.set_random_seed(seed)
    rolls, longest = load_rolls(data_path, limit)
    fingerprint = checks.data_fingerprint("music", data_dir=data_path)  # (recorded: evaluate compares it)
    if not callable(callbacks):
        # the backups of a Python call record the chorales file as the command line's do: a run
        # resumed on other chorales is refused before anything is trained (it resumed on them)
        fault_tolerance.record_data(callbacks, data_fingerprint=fingerprint)
    for split in SPLITS:
        if not any(len(roll) for roll in rolls[split]):
            # training chorales of no step trained nothing (exit 0, the metrics of an untrained
            # model); test chorales of no step failed only after the whole run
            chosen = f" (the first {limit})" if limit is not None else ""
            raise InputError(f"{data_path or default_data_path()}: the {split} chorales{chosen} hold no time step")
    check_run_dir(run_dir)  # (a file in the way, refused where create_run_dir was)
    strategy = distribute.resolve_strategy(strategy)
    if window is not None and integer_at_least("window", window, 1) > longest:
        # A window longer than the longest chorale read holds every chorale whole, as a window
        # of the longest one does: the same examples, masked steps and NLL, but a model unrolled
        # over `window` steps (--window 1000 --limit 2 traced 1,000 steps for minutes, silent).
        window = longest
    steps = window or longest

    def member_datasets(member, first_epoch=None):
        # A pipeline of its own for every member, seeded with seed + member: a shared one went on
        # reshuffling from the epochs of the members before, so member i's order (and transpositions)
        # changed with how many epochs they ran, or with a rerun that loaded them instead.
        # With first_epoch, the stream of the member's epochs from there, each shuffled and
        # transposed by (seed + member, epoch): a member resumed at epoch k trains on the
        # epochs of the uninterrupted run (tf.data's reshuffling started again at epoch 0).
        nade = readouts[member % len(readouts)] == "nade"
        return (make_dataset(rolls["train"], batch_size, longest, True, seed + member, window, transpose,
                             targets_as_input=nade, replicas=strategy.num_replicas_in_sync,
                             first_epoch=first_epoch),
                make_dataset(rolls["valid"], batch_size, longest, window=window, targets_as_input=nade))

    member_datasets(0)  # checks batch_size, window and transpose before anything is trained
    batches = training_batches(rolls["train"], batch_size, longest, window, strategy.num_replicas_in_sync)
    paths = {
        "model": os.path.join(run_dir, "model.keras"),
        "plot": os.path.join(run_dir, "history.png"),
        "metrics": os.path.join(run_dir, "metrics.json"),
        "logs": os.path.join(run_dir, "logs"),
    }
    bias = key_log_odds(rolls["train"]) if init_output_bias else None
    # Members saved by an earlier, interrupted call of the same configuration are loaded, not retrained.
    progress = {"path": os.path.join(run_dir, MEMBERS_FILE), "config": json.loads(json.dumps({
        "data_path": data_path, "epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
        "units": units, "encoder": encoders, "input_dropout": input_dropout, "decoder_to_encoder": decoder_to_encoder,
        "use_decoder": use_decoder, "window": window, "transpose": transpose, "weight_decay": weight_decay,
        "ema_momentum": ema_momentum, "reduce_lr_patience": reduce_lr_patience, "reduce_lr_factor": reduce_lr_factor,
        "dropout": dropout, "dropout_noise": dropout_noise, "zoneout": zoneout, "init_output_bias": init_output_bias,
        "ensemble": ensemble, "readout": readouts, "nade_units": nade_units, "seed": seed, "limit": limit,
    }, default=fault_tolerance.stable_json_value))}
    progress["finished"] = _finished_members(progress)
    member_paths = [paths["model"]] + [os.path.join(run_dir, f"model_{m}.keras") for m in range(1, ensemble)]

    def finished(member):
        return str(member) in progress["finished"] and os.path.exists(member_paths[member])

    def build_member(member):
        with strategy.scope():
            return compile_model(
                build_model(
                    steps,
                    units=units,
                    encoder=encoders[member % len(encoders)],
                    decoder_to_encoder=decoder_to_encoder,
                    use_decoder=use_decoder,
                    input_dropout=input_dropout,
                    dropout=dropout,
                    dropout_noise=dropout_noise,
                    zoneout=zoneout,
                    output_bias=bias,
                    readout=readouts[member % len(readouts)],
                    nade_units=nade_units,
                    seed=seed + member,
                ),
                learning_rate,
                weight_decay=weight_decay,
                ema_momentum=ema_momentum,
            )

    # The first member is built and compiled before the run directory is made: the model's and the
    # optimizer's options (units, dropout, zoneout, learning_rate, ...) were checked only there, after
    # it, and a refused one left an empty run directory. (Saved by an earlier call of the same options,
    # it is loaded instead: those options were checked then.)
    built = {} if finished(0) else {0: build_member(0)}
    # after the data's and the options' checks: a file or option refused left an empty run directory
    create_run_dir(run_dir)
    models, epochs_run = [], []
    for member in range(ensemble):
        member_path = member_paths[member]
        if finished(member):
            with strategy.scope():
                models.append(keras.saving.load_model(member_path))
            epochs_run.append(progress["finished"][str(member)])
            if verbose:
                print(f"member {member}: finished by an earlier run, loaded from {member_path}", flush=True)
            continue
        if member:
            keras.utils.set_random_seed(seed + member)
        model = built.pop(member) if member in built else build_member(member)
        # With EMA the average is swapped into the model for validation and at each epoch's
        # end (so the best weights kept are its), and swapped out again for training.
        extra = [keras.callbacks.SwapEMAWeights(swap_on_epoch=True)] if ema_momentum is not None else []
        user = checks.callback_list(callbacks(member)) if callable(callbacks) else callbacks
        if callable(callbacks):  # (a member's own backup: checked when the member begins)
            fault_tolerance.record_data(user, data_fingerprint=fingerprint)
        backup = next((c for c in user if isinstance(c, fault_tolerance.AtomicBackupAndRestore)), None)
        if reduce_lr_patience is not None:
            # its patience, best loss and cooldown are kept beside the backup: a resumed
            # run started them again
            extra.append(fault_tolerance.ResumableReduceLROnPlateau(
                MONITOR, reduce_lr_factor, reduce_lr_patience, verbose=verbose, mode="min",
                backup_dir=backup.backup_dir if backup else None,
            ))
        # Beside the member's backup, the best epoch survives a crash: a resumed run kept
        # the best epoch after the crash only.
        best = fault_tolerance.KeepBestWeights(MONITOR, backup.backup_dir if backup else None)
        logs = paths["logs"] if not member else f"{paths['logs']}_{member}"
        # (after the member's callbacks: its epochs from the one its backup resumes at, if any)
        train_ds, valid_ds = member_datasets(member, fault_tolerance.resume_epoch(user, epochs))
        # (and a mid-epoch backup's epoch goes on after the steps it had trained)
        train_ds = fault_tolerance.skip_trained_steps(train_ds, user, epochs)
        # (the stop on divergence first: `train` called from Python without the command
        # line's callbacks trained a NaN model to the end, then saved and scored it)
        fit_callbacks = [fault_tolerance.StopOnDivergence(str(run_dir)), keras.callbacks.TensorBoard(logs), *extra, best,
                         *user]
        if ema_momentum is not None and backup is not None:
            # the backup of an epoch's end gets the trained weights, not the average (see _BackUpTrainedWeights)
            at = fit_callbacks.index(backup)
            fit_callbacks[at : at + 1] = [_BackUpTrainedWeights(extra[0], True), backup,
                                          _BackUpTrainedWeights(extra[0], False)]
        history = model.fit(
            train_ds,
            steps_per_epoch=batches,
            validation_data=valid_ds,
            epochs=epochs,
            verbose=verbose,
            callbacks=fit_callbacks, shuffle=False,
        )
        if best.weights is not None:
            model.set_weights(best.weights)
        save_atomically(model, member_path)
        if not member:  # every epoch's curves, those before a resume too, when a CSV log spans them
            plot_history(fault_tolerance.logged_history(history, user)[0], paths["plot"], accuracy="nll_per_step")
        models.append(model)
        # epochs trained in all (those before a resume too)
        epochs_run.append(fault_tolerance.epochs_run(history, user))
        progress["finished"][str(member)] = epochs_run[-1]
        fault_tolerance.write_json_atomically(
            {"config": progress["config"], "finished": progress["finished"]}, progress["path"]
        )
        # members.json now loads the saved member on a rerun: its backup (and its best epochs) goes
        fault_tolerance.finish_run(user, complete=False)  # the run goes on: a rerun resumes it
        if ensemble > 1 and verbose:
            print(f"member {member}: valid NLL per step {nll_per_step(model, rolls['valid']):.3f}, "
                  f"ensemble of {member + 1}: {nll_per_step(models, rolls['valid']):.3f}", flush=True)
    if sample_steps:
        paths["sample_plot"] = plot_piano_roll(
            sample(models[0], sample_steps, seed=seed)[0], os.path.join(run_dir, "sample.png"),
            title=f"a sampled chorale ({sample_steps} steps, {readouts[0]} read-out)",
        )
    result = {
        "valid_nll_per_step": nll_per_step(models, rolls["valid"]),
        "test_nll_per_step": nll_per_step(models, rolls["test"]),
        "parameters": int(sum(m.count_params() for m in models)),
        "epochs_run": epochs_run[0] if ensemble == 1 else epochs_run,
        "limit": limit,  # evaluate scores the same first chorales by default (None: all)
        # and those of the same file (None: the shared copy)
        "data_path": None if data_path is None else os.path.abspath(data_path),
        # and what the file is: evaluate refuses another one there (checks.recorded_data)
        "data_fingerprint": fingerprint,
        # the ensemble's files beside model.keras, first member first: `evaluate` of model.keras
        # scores the ensemble whose NLL this reports (it scored member 0 alone)
        "members": [os.path.basename(path) for path in member_paths],
        **paths,
    }
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    os.remove(progress["path"])  # the run is complete: a new call trains again
    return result


MEMBERS_FILE = "members.json"


class _BackUpTrainedWeights(keras.callbacks.Callback):
    """Puts the trained weights in the model for the backup made at an epoch's end.

    ``SwapEMAWeights(swap_on_epoch=True)`` swaps the moving average into the model at
    an epoch's end (the best weights kept are the average's) and the trained weights
    into the optimizer's average, until the next epoch begins. A backup made then held
    them swapped, and a resumed run (whose ``SwapEMAWeights`` knows of no swap) went on
    training from the average, with the trained weights as its average. Put one with
    ``trained=True`` just before the backup (it swaps the trained weights back in) and
    one with ``trained=False`` just after it (it swaps the average in again, for the
    callbacks after). After the last epoch both hold the average (``SwapEMAWeights``
    finalizes it there), so the model ends with it as before.
    """

    def __init__(self, swap, trained):
        super().__init__()
        self.swap, self.trained = swap, trained

    def on_epoch_end(self, epoch, logs=None):
        # private state of SwapEMAWeights: whether the average is in the model
        if self.swap._ema_weights_in_model == self.trained:
            self.swap._swap_variables()
            self.swap._ema_weights_in_model = not self.trained


def _finished_members(progress):
    """``{member: epochs run}`` of the members saved by an earlier call of ``train`` that
    did not finish, if it had the same configuration (else none)."""
    try:
        with open(progress["path"]) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict) or saved.get("config") != progress["config"]:
        return {}
    return dict(saved.get("finished") or {})


def evaluate(model_path, data_path=None, split="test", limit=None, batch_size=32, strategy=None,
             sample_steps=0, num_samples=1, temperature=1.0, seed=0, samples_path=None, verbose=0):
    """NLL per step of a saved model on the chorales of ``split`` (``limit``: the first ones).

    When ``train`` recorded an ensemble in ``metrics.json`` beside the model (``ensemble`` >
    1) and ``model_path`` is its first member (``model.keras``), the whole ensemble is
    scored (``nll_per_step`` of the members' list, as ``train`` reported it; the result
    then lists the member files under ``"members"``); any other member file is scored
    alone. Samples are drawn from ``model_path``'s model, as ``train`` draws them from the
    first member.

    ``data_path`` (None) defaults to the chorales file (or folder) ``train`` recorded in
    ``metrics.json`` beside the model, else the project's shared copy. A file that
    changed since ``train`` recorded it there is refused (``InputError``,
    ``checks.recorded_data``); the same file elsewhere is the run's; another file given
    elsewhere is scored, with a note on stderr that this is not the run's test score. ``limit`` (None)
    defaults to the one ``train`` recorded there, else all chorales: a run trained with a
    limit is scored on the same first chorales as ``train`` scored it (not on all of them,
    which gave another figure than the one ``train`` reported). A ``limit`` given wins; one
    at least the split's size scores all of them.

    With ``sample_steps`` > 0 it also draws ``num_samples`` chorales of that many steps
    from the model (``sample``, with ``temperature`` and ``seed``) and writes them to
    ``samples_path`` (default: ``samples.npy`` beside the model; a folder: ``samples.npy``
    in it), a ``[num_samples, sample_steps, 88]`` float32 array, and their piano rolls to
    the same name with ``.png``; both paths are then in the result.

    ``verbose``: 1 or 2 shows the progress bars of the scoring and the sampling, on stderr
    (stdout keeps only the result); 0 (the default) is silent. Another value is refused
    with an ``InputError`` before the model is loaded (:func:`applications.checks.verbosity`).
    """

    sample_steps = integer_at_least("sample_steps", sample_steps, 0)
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bars, after the model was loaded)
    if split not in SPLITS:  # was a KeyError after the model was loaded
        raise InputError(f"`split` must be one of {SPLITS}. Received: split={split!r}")
    if limit is not None:  # limit=-1 silently left out the last chorale, as load_rolls' did
        limit = integer_at_least("limit", limit, 1)
    # the scoring's and the samples' options before the model is loaded and the split scored
    batch_size = integer_at_least("batch_size", batch_size, 1)
    if sample_steps:
        num_samples = integer_at_least("num_samples", num_samples, 1)
        temperature = _check_temperature(temperature)
        seed = checks.numpy_seed(seed)
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    if limit is None:
        limit = checks.recorded_integers(model_path, ("limit",), minimum=1).get("limit")
    explicit = data_path is not None
    if data_path is None:  # the chorales train scored (another --data-dir's were scored silently)
        recorded = checks.recorded_metrics(model_path).get("data_path")
        data_path = recorded if isinstance(recorded, str) else None
    strategy = distribute.resolve_strategy(strategy)
    data = load_chorales(data_path)
    # another chorales file where the run's was is refused; one given elsewhere is scored, with a note
    checks.recorded_data(model_path, checks.data_fingerprint("music", data_dir=data_path), explicit)
    member_paths = [model_path, *_recorded_members(model_path)]
    models = []
    with strategy.scope():
        for path in member_paths:
            models.append(checks.load_model(path))
            _check_music_model(models[-1], path)
    model = models[0]
    rolls = [piano_roll(c) for c in data[split][:limit]]
    scored = models if len(models) > 1 else model
    result = {f"{split}_nll_per_step": nll_per_step(scored, rolls, batch_size, verbose), "model": model_path}
    if len(models) > 1:
        result["members"] = member_paths
    if sample_steps:
        from applications.fault_tolerance import atomic_write

        samples = sample(model, sample_steps, num_samples=num_samples, seed=seed, temperature=temperature,
                         verbose=verbose)
        path = str(samples_path or os.path.join(os.path.dirname(os.path.abspath(model_path)), "samples.npy"))
        if os.path.isdir(path) or path.endswith((os.sep, "/")):  # a folder: samples.npy inside (was ".npy")
            path = os.path.join(path, "samples.npy")
        if not path.endswith(".npy"):
            path = f"{path}.npy"
        with user_path(f"cannot write the samples {path!r}"):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            atomic_write(path, lambda tmp: np.save(tmp, samples))
        result["samples"] = path
        result["samples_plot"] = plot_piano_roll(
            samples, path[: -len(".npy")] + ".png",
            title=f"{num_samples} sampled chorale(s), {sample_steps} steps, temperature {temperature}",
        )
    return result


def _recorded_members(model_path):
    """The files of the other members of the ensemble whose first member is ``model_path``, as
    ``train`` recorded them in ``metrics.json`` beside it (``"members"``); none for a single
    model, another file than the first member, or no record."""
    recorded = checks.recorded_metrics(model_path).get("members")
    if (not isinstance(recorded, list) or len(recorded) < 2 or not all(isinstance(name, str) for name in recorded)
            or recorded[0] != os.path.basename(os.path.abspath(model_path))):
        return []
    folder = os.path.dirname(os.path.abspath(model_path))
    paths = [os.path.join(folder, name) for name in recorded[1:]]
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise PathNotFoundError(
            f"{model_path!r} is the first of an ensemble of {len(recorded)} models (metrics.json beside it), "
            f"but member {missing[0]!r} is missing: put it back, or move model.keras away to score it alone"
        )
    return paths


def _check_music_model(model, model_path):
    """Refuses a model that ``build_model`` did not make (e.g. another application's)."""
    from applications.checks import require_model

    require_model(
        model, model_path,
        lambda shapes, model: "rladder" in {layer.name for layer in model.layers} and bool(shapes)
        and all(len(s) == 3 and s[-1] == NUM_KEYS for s in shapes),
        "a music model", "music", f"rolls [batch, steps, {NUM_KEYS}] in, a Recurrent Ladder inside",
    )


# The command-line protocol (applications/registry.py).


def add_arguments(parser, command):
    """The music application's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import _number_type, non_negative_float, non_negative_int, positive_float, positive_int
    if command == "train":
        parser.set_defaults(epochs=100, batch_size=16)  # the recipe of train()

    # Checked here, not after the data is read (a bad rate used to fail late, leaving an
    # empty run directory; --weight-decay inf was accepted and trained to NaN).
    rate = _number_type(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
    factor = _number_type(float, lambda v: 0 < v < 1, "a number in (0, 1)")

    parser.add_argument("--data-dir", default=None,
                        help="folder holding jsb_chorales.json (or the file itself); default: "
                        + ("the one `train` recorded beside the model, else " if command == "evaluate" else "")
                        + "the project's shared copy")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="score only the first N chorales of the split (default: the --limit "
                        "`train` recorded beside the model, else all; a larger N: all)" if command == "evaluate"
                        else "use only the first N chorales of every split (quick runs)")
    if command in ("train", "tune"):
        parser.add_argument("--window", type=positive_int, default=32,
                            help="train on windows of N steps (default: %(default)s)")
    if command == "train":
        parser.add_argument("--learning-rate", type=positive_float, default=1e-3,
                            help="Adam's step size (default: %(default)s)")
        parser.add_argument("--units", type=positive_int, nargs="+", default=[128, 64],
                            help="state sizes of the ladder levels, bottom to top (default: 128 64)")
        parser.add_argument("--encoder", choices=("gated", "lstm"), default="gated",
                            help="encoder cell of every level: the paper's gated cell or an LSTM "
                            "(default: %(default)s)")
        parser.add_argument("--transpose", type=non_negative_int, default=0, metavar="SEMITONES",
                            help="move every training window up or down the keyboard by a random "
                            "number of semitones up to this (0: off; default: %(default)s)")
        parser.add_argument("--weight-decay", type=non_negative_float, default=0.0,
                            help="AdamW's decoupled weight decay (default: %(default)s, plain Adam)")
        parser.add_argument("--ema-momentum", type=rate, default=None,
                            help="validate and keep an exponential moving average of the weights "
                            "with this momentum, e.g. 0.99 (default: off)")
        parser.add_argument("--reduce-lr-patience", type=positive_int, default=None, metavar="EPOCHS",
                            help="multiply the learning rate by --reduce-lr-factor after this many "
                            "epochs without a better validation NLL per step (default: off)")
        parser.add_argument("--reduce-lr-factor", type=factor, default=0.5,
                            help="see --reduce-lr-patience (default: %(default)s)")
        parser.add_argument("--dropout", type=rate, default=0.0,
                            help="RLadder's dropout on the signals between levels (default: %(default)s)")
        parser.add_argument("--dropout-noise", choices=("step", "sequence"), default="step",
                            help="new --dropout masks every step or one per sequence (needs --dropout; "
                            "default: %(default)s)")
        parser.add_argument("--zoneout", type=rate, default=0.0,
                            help="RLadder's zoneout rate of the encoder states (default: %(default)s)")
        parser.add_argument("--init-output-bias", action="store_true",
                            help="start the output bias at the log-odds of each key's training frequency")
        parser.add_argument("--ensemble", type=positive_int, default=1,
                            help="train N models and average their probabilities (default: %(default)s)")
        parser.add_argument("--readout", choices=READOUTS, default="independent",
                            help="independent: one Bernoulli per key given the past (the paper's); "
                            "nade: each key also given the lower keys of its step (default: %(default)s)")
        parser.add_argument("--nade-units", type=positive_int, default=64,
                            help="hidden units of the NADE read-out (default: %(default)s)")
        parser.add_argument("--sample-steps", type=non_negative_int, default=64,
                            help="plot one chorale of N steps sampled from the trained model to "
                            "RUN_DIR/sample.png (0: none; default: %(default)s)")
    elif command == "evaluate":
        parser.add_argument("--split", choices=SPLITS, default="test",
                            help="the chorales to score (default: %(default)s)")
        parser.add_argument("--sample-steps", type=non_negative_int, default=0,
                            help="also sample chorales of N steps from the model (0: none; "
                            "default: %(default)s); --seed seeds the draws")
        parser.add_argument("--num-samples", type=positive_int, default=1,
                            help="how many chorales to sample (default: %(default)s)")
        parser.add_argument("--temperature", type=positive_float, default=1.0,
                            help="divides every key's logit when sampling (default: %(default)s)")
        parser.add_argument("--samples-path", default=None,
                            help="the sampled rolls' .npy file (or a folder: samples.npy in it), "
                            "[N, steps, 88]; their plot goes beside it as .png (default: "
                            "samples.npy beside the model)")


def run_train(args, strategy):
    from applications import fault_tolerance
    from applications.arguments import run_options, train_options
    from applications.errors import CommandLineError

    # options that only act with another one were accepted and silently ignored
    if args.nade_units != 64 and args.readout != "nade":
        raise CommandLineError("--nade-units sizes the NADE read-out: pass --readout nade too")
    if args.reduce_lr_factor != 0.5 and args.reduce_lr_patience is None:
        raise CommandLineError("--reduce-lr-factor applies on a plateau: pass --reduce-lr-patience EPOCHS too")
    if args.dropout_noise != "step" and not args.dropout:  # it draws the masks of --dropout only
        raise CommandLineError("--dropout-noise chooses the masks of the dropout between levels: pass --dropout RATE too")
    options = train_options(args, strategy)
    if args.ensemble > 1:
        # Every member backs up to (and logs in) a folder of its own: with one backup for
        # all, a rerun after a crash in member i restored member i's state into member 0.
        first, run_dir = options["callbacks"], options["run_dir"]

        def member_callbacks(member):
            if not member:
                return first
            folder = os.path.join(run_dir, f"member_{member}")
            os.makedirs(folder, exist_ok=True)
            return fault_tolerance.resumable_callbacks(folder, save_freq=args.save_freq,
                                                       run_options=run_options(args))

        options["callbacks"] = member_callbacks
    return train(
        args.data_dir,
        learning_rate=args.learning_rate,
        units=tuple(args.units),
        encoder=args.encoder,
        window=args.window,
        transpose=args.transpose,
        weight_decay=args.weight_decay,
        ema_momentum=args.ema_momentum,
        reduce_lr_patience=args.reduce_lr_patience,
        reduce_lr_factor=args.reduce_lr_factor,
        dropout=args.dropout,
        dropout_noise=args.dropout_noise,
        zoneout=args.zoneout,
        init_output_bias=args.init_output_bias,
        ensemble=args.ensemble,
        readout=args.readout,
        nade_units=args.nade_units,
        limit=args.limit,
        sample_steps=args.sample_steps,
        **options,
    )


def run_evaluate(args, strategy):
    from applications.errors import CommandLineError

    given = [option for option, value, default in (("--num-samples", args.num_samples, 1),
                                                   ("--temperature", args.temperature, 1.0),
                                                   ("--samples-path", args.samples_path, None),
                                                   ("--seed", args.seed, 0))
             if value != default]
    if given and not args.sample_steps:  # they were ignored: nothing was sampled
        raise CommandLineError(f"{', '.join(given)} apply to sampling: pass --sample-steps N too")
    return evaluate(args.model, args.data_dir, split=args.split, limit=args.limit,
                    batch_size=distribute.global_batch_size(args.batch_size, strategy), strategy=strategy, sample_steps=args.sample_steps,
                    num_samples=args.num_samples, temperature=args.temperature, seed=args.seed,
                    samples_path=args.samples_path,
                    verbose=0 if args.quiet else 1)
