"""Training helpers shared by the applications: tf.data transforms, callbacks, run dirs."""

import math
import numbers
import pathlib

import keras
import tensorflow as tf

from applications import checks, fault_tolerance
from applications.errors import InputError, create_run_dir


def _sample_beta(seed, shape, alpha):
    """Stateless Beta(alpha, alpha) samples as X / (X + Y) with X, Y ~ Gamma(alpha)."""
    seeds = tf.random.experimental.stateless_split(seed, 2)
    x = tf.random.stateless_gamma(shape, seeds[0], alpha=alpha)
    y = tf.random.stateless_gamma(shape, seeds[1], alpha=alpha)
    # Both Gamma(0.2) draws can underflow to 0 in float32; fall back to an even mix.
    total = x + y
    return tf.where(total > 0, x / tf.maximum(total, 1e-30), 0.5)


def _mix(value, other, lam):
    value = tf.convert_to_tensor(value)
    if not value.dtype.is_floating:
        raise ValueError(
            "mixup mixes floating-point inputs and targets only (one-hot targets; pass "
            "`num_classes` to one-hot integer labels). "
            f"Received: a tensor of dtype {value.dtype.name}"
        )
    lam = tf.reshape(tf.cast(lam, value.dtype), [-1] + [1] * (value.shape.rank - 1))
    return lam * value + (1 - lam) * other


def mixup(dataset, alpha=0.2, seed=None, num_classes=None, per_example=True):
    """Mixup (Zhang et al. 2018) on a batched ``tf.data`` dataset of ``(x, y)`` pairs.

    Each batch is mixed with a random permutation of itself:
    ``x' = lam * x + (1 - lam) * x[perm]`` and ``y' = lam * y + (1 - lam) * y[perm]``,
    with ``lam ~ Beta(alpha, alpha)``. ``x`` may be a tensor or a tuple/list/dict of
    floating tensors (every one mixed with the same ``lam`` and permutation); ``y``
    must be one-hot (or any distribution over classes), so mixed targets still sum
    to 1. Elements ``(x, y, sample_weight)`` keep their weights unmixed. Every pass over
    the dataset (every epoch) draws new weights and permutations.

    Args:
        dataset: a batched ``tf.data.Dataset`` of ``(x, y)`` or ``(x, y, w)``.
        alpha: the Beta distribution's parameter (> 0). Default 0.2 (Heinsen 2019).
        seed: integer seed (>= 0) for reproducible mixing, or None for a random one;
            also an integer scalar tensor (an epoch's seed, ``distribute.epoch_seed``).
        num_classes: if given, integer labels ``y`` (``[batch]`` or ``[batch, 1]``) are
            one-hot encoded first.
        per_example: True: draw one ``lam`` per example (default); False: one per batch.

    Returns:
        The mixed dataset.

    Raises:
        InputError (a ValueError): ``alpha`` is not a finite number > 0, ``num_classes``
            neither None nor an integer >= 1, or ``seed`` neither None, an integer >= 0
            nor an integer scalar tensor, or ``per_example`` not True or False.
    """
    # numbers.Real: an np.float32 alpha was refused as not a number.
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < math.inf:
        # alpha=inf would mix every pair into NaN.
        raise InputError(f"`alpha` must be a finite positive number. Received: alpha={alpha!r}")
    if num_classes is not None:
        # num_classes=0 gave targets [batch, ..., 0]; it is checked here, not in the graph
        num_classes = checks.integer_at_least("num_classes", num_classes, 1)
    per_example = checks.true_or_false("per_example", per_example)  # ("no" was taken as True)
    # seed=True and -1 were taken, 1.5 and "a" raw TensorFlow errors; a tensor is an epoch's
    # seed (an int64 drawn from the run's seed: any value), as the streams pass it
    if not (tf.is_tensor(seed) and seed.dtype.is_integer and seed.shape.rank == 0):
        seed = checks.stream_seed(seed)
    # Without rerandomize_each_iteration every epoch repeated the first one's weights and
    # permutations (seed or not); with it, a seeded run is still reproducible.
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2, drop_remainder=True)

    def transform(element, seed_pair):
        if not isinstance(element, tuple) or len(element) not in (2, 3):
            raise ValueError(
                "mixup expects dataset elements (x, y) or (x, y, sample_weight). "
                f"Received: {element}"
            )
        x, y = element[0], element[1]
        if num_classes is not None:
            if y.shape.rank == 2 and y.shape[-1] == 1:  # Keras' sparse labels [batch, 1]
                y = y[:, 0]
            y = tf.one_hot(tf.cast(y, tf.int32), num_classes)
        batch = tf.shape(y)[0]
        seed_a, seed_b = tf.unstack(tf.random.experimental.stateless_split(seed_pair, 2))
        perm = tf.argsort(tf.random.stateless_uniform([batch], seed_a))
        lam = _sample_beta(seed_b, [batch] if per_example else [1], float(alpha))
        lam = tf.broadcast_to(lam, [batch])
        x = tf.nest.map_structure(lambda t: _mix(t, tf.gather(t, perm), lam), x)
        y = _mix(y, tf.gather(y, perm), lam)
        return (x, y) + tuple(element[2:])

    # Elements of the zipped dataset are (element, seed pair): map passes them as two args.
    return tf.data.Dataset.zip((dataset, seeds)).map(transform, num_parallel_calls=tf.data.AUTOTUNE)


def coordinate_grid(height, width, dtype="float32"):
    """Two channels of coordinates from -1 to 1: ``[..., 0]`` horizontal, ``[..., 1]`` vertical."""
    xs = tf.linspace(-1.0, 1.0, width)
    ys = tf.linspace(-1.0, 1.0, height)
    gx, gy = tf.meshgrid(xs, ys)
    return tf.cast(tf.stack([gx, gy], axis=-1), dtype)


def pad_and_random_crop(image, padding, size, seed=None):
    """Zero-pads ``padding`` pixels on every side, then crops ``size x size`` at random.

    ``image`` is ``[height, width, channels]``. ``seed`` (a shape-``[2]`` integer seed,
    e.g. one element of ``tf.data.Dataset.random(...).batch(2)``) makes the crop
    stateless: the same seed gives the same crop.
    """
    # A too large size failed inside tf.image with "Need value.shape >= size, got ...".
    for arg, value, least in (("padding", padding, 0), ("size", size, 1)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise InputError(f"`{arg}` must be an integer >= {least}. Received: {arg}={value!r}")
    image = tf.convert_to_tensor(image)
    if image.shape.rank is not None and image.shape.rank != 3:
        raise ValueError(f"`image` must be [height, width, channels]. Received: image shape={image.shape}")
    if any(dim is not None and size > dim + 2 * padding for dim in image.shape[:2]):
        raise InputError(
            f"`size` must be at most the padded image's height and width. Received: size={size}, "
            f"padding={padding}, image shape={image.shape}"
        )
    image = tf.pad(image, [[padding, padding], [padding, padding], [0, 0]])
    channels = tf.shape(image)[-1]
    if seed is None:
        return tf.image.random_crop(image, tf.stack([size, size, channels]))
    return tf.image.stateless_random_crop(image, tf.stack([size, size, channels]), seed)


def pad_to_lengths(dataset, lengths, axis=1, value=0):
    """Pads every batch's inputs along ``axis`` to the smallest of ``lengths`` that holds them.

    For a model compiled with XLA (``jit_compile=True``, Keras' ``"auto"`` on a GPU or
    TPU): XLA compiles the train, test and predict steps once per distinct input shape,
    even where their ``tf.function`` was traced once for any length. Batches padded to
    their longest text (text classification, SST) came in as many lengths as the texts
    have, and the steps were compiled again at each new one, in the first epoch and
    in later ones whose shuffled batches made new lengths (a tiny text classifier's
    train steps: 12 compilations in its first epoch, then 5, 1 and 1; epochs of 82,
    30, 7 and 7 s, against 0.2 s for an epoch that compiles nothing). Padded here,
    the batches take at most ``len(lengths)`` lengths, and their own where longer
    than all of ``lengths``.

    Args:
        dataset: a batched ``tf.data.Dataset`` whose elements are ``x`` (any structure of
            tensors) or tuples ``(x, ...)``; every tensor of ``x`` is padded along ``axis``
            (the other members of the tuple, targets and weights, are left as they are).
        lengths: the lengths to pad to, positive integers (in any order). A batch longer
            than all of them keeps its length.
        axis: the padded axis, an integer >= 1 (0 is the batch).
        value: the padding value (a padding id or a zero mask).

    Returns:
        The padded dataset (the same number of batches).

    Raises:
        InputError (a ValueError): ``lengths`` is not a non-empty sequence of integers
            >= 1, or ``axis`` not an integer >= 1.
    """
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise InputError(f"`lengths` must be a sequence of integers >= 1. Received: lengths={lengths!r}")
    lengths = sorted({checks.integer_at_least("lengths", n, 1) for n in lengths})
    if not lengths:
        raise InputError("`lengths` must hold at least one length. Received: lengths=[]")
    axis = checks.integer_at_least("axis", axis, 1)
    table = tf.constant(lengths, tf.int32)

    def pad(tensor):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.shape.rank is not None and tensor.shape.rank <= axis:
            raise ValueError(f"pad_to_lengths pads axis {axis}: every input needs rank > {axis}. "
                             f"Received: a tensor of shape {tensor.shape}")
        length = tf.shape(tensor)[axis]
        index = tf.searchsorted(table, tf.reshape(length, [1]), side="left")[0]
        target = tf.where(index < len(lengths), tf.gather(table, tf.minimum(index, len(lengths) - 1)), length)
        paddings = tf.one_hot(axis, tf.rank(tensor), dtype=tf.int32)[:, None] * tf.constant([[0, 1]], tf.int32)
        return tf.pad(tensor, paddings * (target - length), constant_values=tf.cast(value, tensor.dtype))

    def transform(*element):
        if len(element) == 1:  # a bare x
            return tf.nest.map_structure(pad, element[0])
        return (tf.nest.map_structure(pad, element[0]),) + tuple(element[1:])

    return dataset.map(transform, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def run_callbacks(run_dir, checkpoint=True):
    """Callbacks for a run: a stop on divergence
    (``applications.fault_tolerance.StopOnDivergence``: the first batch whose loss is
    not finite ends ``fit`` with ``TrainingDivergedError``), TensorBoard logs under
    ``run_dir`` and, with ``checkpoint``, the model saved to ``run_dir/model.keras``
    after every epoch, replaced atomically (see
    ``applications.fault_tolerance.AtomicModelCheckpoint``)."""
    run_dir = pathlib.Path(run_dir)
    create_run_dir(run_dir)
    # Without it a `train` called from Python without fault_tolerance.resumable_callbacks
    # trained a diverged model to the end and saved and scored it: NaN metrics, no error.
    callbacks = [
        fault_tolerance.StopOnDivergence(str(run_dir)),
        keras.callbacks.TensorBoard(log_dir=str(run_dir / "logs"), update_freq="epoch"),
    ]
    if checkpoint:
        callbacks.append(fault_tolerance.AtomicModelCheckpoint(str(run_dir / "model.keras"), save_best_only=False))
    return callbacks


def spread_steps(steps, epochs):
    """``(steps_per_epoch, callback)`` for a ``fit`` of ``epochs`` epochs that trains
    ``steps`` steps in all (``steps >= epochs >= 1``).

    The first ``steps % epochs`` epochs run ``steps // epochs + 1`` steps, the others
    ``steps // epochs``: ``fit`` gets the larger count as ``steps_per_epoch`` and the
    callback (put it first) ends each shorter epoch one step early. Its step counts
    depend only on the epoch's number, so a resumed run trains the same counts (an
    epoch resumed from a mid-epoch backup, its remaining ones:
    ``applications.fault_tolerance.skip_trained_steps``); its
    ``steps_before(epoch)`` is the number of steps of the epochs before ``epoch``
    (where a stream of batches stands when a run resumed at ``epoch`` begins). The
    model must run one step per execution (``steps_per_execution=1``, Keras' default;
    another is a ``ValueError`` when ``fit`` begins).
    """
    # steps < epochs gave every epoch one step (more steps than asked); epochs=0 divided by zero
    if (
        any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in (steps, epochs))
        or not steps >= epochs >= 1
    ):
        raise InputError(
            f"`steps` and `epochs` must be integers with steps >= epochs >= 1. Received: steps={steps!r}, "
            f"epochs={epochs!r}"
        )
    per_epoch, longer = divmod(int(steps), int(epochs))
    return per_epoch + (longer > 0), _EpochSteps(per_epoch, longer)


class _EndOfEpoch:
    """The ``model.stop_training`` with which :class:`_EpochSteps` ends an epoch: true
    (``fit`` leaves the epoch's loop) but not ``True``, so that a stop of training that
    another callback asks for in the same batch (it sets ``True``) is told apart from
    it at the epoch's end, and kept."""

    def __bool__(self):
        return True

    def __repr__(self):
        return "<end of the epoch>"


class _EpochSteps(keras.callbacks.Callback):
    """Ends epoch ``e`` after ``per_epoch + (e < longer)`` steps (see :func:`spread_steps`)."""

    def __init__(self, per_epoch, longer):
        super().__init__()
        self.per_epoch, self.longer = per_epoch, longer
        self._steps, self._ended = None, False

    def steps_before(self, epoch):
        """Steps of the epochs before ``epoch``."""
        return epoch * self.per_epoch + min(epoch, self.longer)

    def on_train_begin(self, logs=None):
        # A callback sees a batch's end only once per execution of steps_per_execution
        # steps: the epochs ran whole executions (12 steps for 10 asked over 3 epochs at
        # 4 per execution) and steps_before no longer matched a resumed stream.
        per_execution = getattr(self.model, "steps_per_execution", 1) or 1
        if int(per_execution) > 1:
            raise ValueError(
                "spread_steps ends each epoch after a batch, which a callback sees only once per "
                "execution: compile the model with steps_per_execution=1. "
                f"Received: steps_per_execution={per_execution}"
            )

    def on_epoch_begin(self, epoch, logs=None):
        self._steps, self._ended = self.per_epoch + (epoch < self.longer), False
        # an epoch resumed from a mid-epoch backup runs only the steps its backup had not trained
        # (fault_tolerance.skip_trained_steps: its stream skipped them)
        resumed = getattr(self.model, "_resumed_epoch_steps", None)
        if resumed is not None and resumed[0] == epoch:
            self._steps -= resumed[1]

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 >= self._steps and not self.model.stop_training:
            self._ended = _EndOfEpoch()
            self.model.stop_training = self._ended  # fit's loop leaves this epoch

    def on_epoch_end(self, epoch, logs=None):
        # Only the epoch ended: training goes on, unless another callback asked for a stop
        # meanwhile (it replaced our value; clearing it trained on past that stop).
        if self._ended and self.model.stop_training is self._ended:
            self.model.stop_training = False
        self._ended = False


__all__ = ["mixup", "coordinate_grid", "pad_and_random_crop", "pad_to_lengths", "run_callbacks", "spread_steps"]
