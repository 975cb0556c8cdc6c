"""Callbacks for long training runs, and batch-normalization statistics for EMA weights."""

import contextlib
import math
import time
import weakref

import keras

from keras_capsules import _validation

__all__ = [
    "TimeBudget", "BudgetLinearDecay", "SwapEMAWeightsAndStatistics", "swap_ema_weights",
    "estimate_batch_norm_statistics", "trained_weights_in",
]


class TimeBudget(keras.callbacks.Callback):
    """Stops training once a wall-time budget is spent (checked after every batch and
    at the end of every epoch, after its validation).

    The clock starts at the first ``fit`` the callback is used in and keeps running
    across later ``fit`` calls, so one budget can cover several training phases. It
    is not saved: a run resumed in a new process (``BackupAndRestore``) gets a new
    budget.

    Keras checks for a stop only after a batch, so a ``fit`` started once the budget
    is spent still runs one batch (one more optimizer step) before it stops; test
    ``budget.elapsed > budget.seconds`` before calling ``fit`` to skip it.

    Args:
        seconds: the budget, a positive, finite number of seconds. An infinite one
            is refused: it is no budget (leave the callback out to train without
            one), and a :class:`BudgetLinearDecay` driven by it never decays.

    Attributes:
        steps: training batches run so far (also with ``steps_per_execution``, where
            the budget is checked after every execution of several batches). With
            ``steps_per_execution`` and an epoch of unknown length, Keras reports the
            epoch's last, shorter execution as a full one: mid-epoch the count may
            then run ahead by up to ``steps_per_execution - 1`` batches, and the end
            of the epoch sets it right from the optimizer's update count (not
            under a ``LossScaleOptimizer``, whose skipped updates are not counted).
        exceeded: True once the budget stopped training.
        elapsed: seconds since the clock started (0 before it did).

    Example:

    ```python
    budget = keras_capsules.callbacks.TimeBudget(15 * 60)
    model.fit(dataset, epochs=1000, callbacks=[budget])
    print(budget.steps, "steps;", "stopped by the budget" if budget.exceeded else "finished")
    ```
    """

    def __init__(self, seconds):
        super().__init__()
        # Any real number type (np.int64 / np.float32 seconds from numpy arithmetic were
        # refused once), but no bool or string, and a finite one: an infinite budget was
        # taken, never stopped training and kept BudgetLinearDecay at its initial rate.
        self.seconds = _validation.positive_float("seconds", seconds)
        self.steps = 0
        self.exceeded = False
        self._start = None
        self._batches_in_epoch = 0

    @property
    def elapsed(self):
        return 0.0 if self._start is None else time.perf_counter() - self._start

    def on_train_begin(self, logs=None):
        if self._start is None:
            self._start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._batches_in_epoch = 0
        # read only where a short execution can be miscounted (a read waits for the device)
        self._updates_at_epoch_begin = self._optimizer_updates() if self._steps_per_execution() > 1 else None

    def _steps_per_execution(self):
        return int(getattr(self.model, "steps_per_execution", 1) or 1)

    def _optimizer_updates(self):
        """The optimizer's count of updates (one per training batch), or None where it
        may differ from the batches: no optimizer, or a ``LossScaleOptimizer`` (an
        update skipped for non-finite gradients is not counted)."""
        optimizer = getattr(self.model, "optimizer", None)
        counter = getattr(optimizer, "_iterations", None)
        if counter is None or hasattr(optimizer, "inner_optimizer"):
            return None
        return int(keras.ops.convert_to_numpy(counter))

    def on_train_batch_end(self, batch, logs=None):
        # With compile(steps_per_execution=n) Keras calls this once per n batches, with
        # the index of the last one: counting calls undercounted the batches n times.
        # (Keras reports a short last execution as a full one; the epoch's length caps it,
        # or, when the length is unknown, on_epoch_end sets the count right.)
        end = batch + 1
        if (self.params or {}).get("steps"):
            end = min(end, self.params["steps"])
        self.steps += max(end - self._batches_in_epoch, 1)
        self._batches_in_epoch = end
        self._check()

    def on_epoch_end(self, epoch, logs=None):
        # With steps_per_execution=n and no known epoch length, the last execution of the
        # epoch ran fewer than n batches but was reported (and counted) as n: a 10-batch
        # epoch with n=4 counted 12. The optimizer's updates tell how many it ran.
        spe = self._steps_per_execution()
        begun = getattr(self, "_updates_at_epoch_begin", None)
        now = self._optimizer_updates() if spe > 1 and begun is not None else None
        if now is not None:
            done = now - begun
            # only the last execution can be short; anything else (a train_step that does
            # not update once per batch) leaves the count alone
            if self._batches_in_epoch - spe < done < self._batches_in_epoch:
                self.steps -= self._batches_in_epoch - done
                self._batches_in_epoch = done
        # Time spent after the last batch (validation, other callbacks' epoch ends) is
        # checked here: a budget spent there would otherwise start one more epoch (a
        # batch and a whole validation pass more). After the last epoch training ends
        # on its own, and the budget did not stop it.
        if epoch + 1 < (self.params or {}).get("epochs", math.inf):
            self._check()

    def _check(self):
        if self.elapsed > self.seconds:
            self.exceeded = True
            self.model.stop_training = True


class BudgetLinearDecay(keras.callbacks.Callback):
    """Decays the learning rate linearly to a floor as a wall-time budget is spent.

    Under a time budget the number of steps is not known in advance, so a step-based
    schedule cannot end where training ends. This callback sets the optimizer's
    learning rate before every batch to
    ``initial * (1 - (1 - final_fraction) * min(1, elapsed / seconds))``, where
    ``initial`` is ``initial_learning_rate`` or, if that is None, the learning rate the
    optimizer held when the first ``fit`` began (read before a ``BackupAndRestore``
    in the same ``fit`` restores an already decayed one), and ``elapsed`` is read
    from ``budget`` (with ``decay_steps`` given, ``elapsed / seconds`` gives way to
    ``updates / decay_steps`` where that is larger). Ending training with a small learning rate
    usually gives a clearly better final model than a constant one ("budgeted
    training", Li et al. 2020).

    Args:
        budget: the :class:`TimeBudget` whose clock drives the decay (put it in the
            same ``callbacks`` list, before this one; without it there the first
            batch is a ``ValueError``).
        final_fraction: the learning rate at the end of the budget, as a fraction of
            the initial one, in ``[0, 1]``. Default 0.05.
        initial_learning_rate: the rate the decay starts from, a positive, finite
            number. Default None: the optimizer's rate at the start of the first ``fit``.
        decay_steps: the optimizer updates after which training ends anyway
            (``epochs * steps_per_epoch``), a positive integer, or None (the default:
            the budget alone). The decay then follows whichever of the two is the
            further spent, ``max(elapsed / seconds, updates / decay_steps)``, so it
            reaches the floor where training ends when the epochs run out before the
            budget. ``updates`` is the optimizer's ``iterations``, which a
            ``BackupAndRestore`` resume restores.

    Example:

    ```python
    budget = keras_capsules.callbacks.TimeBudget(10 * 60)
    decay = keras_capsules.callbacks.BudgetLinearDecay(budget)
    model.compile(keras.optimizers.Adam(3e-3), "mse")
    model.fit(dataset, epochs=10_000, callbacks=[budget, decay])
    ```
    """

    def __init__(self, budget, final_fraction=0.05, initial_learning_rate=None, decay_steps=None):
        super().__init__()
        if not isinstance(budget, TimeBudget):
            raise ValueError(
                "`budget` must be the TimeBudget callback whose clock drives the decay (an instance, "
                f"in the same `callbacks` list). Received: budget={budget!r}"
            )
        self.budget = budget
        # ([0, 1], not the [0, 1) of _validation.rate: 1 keeps the rate constant)
        self.final_fraction = _validation.fraction("final_fraction", final_fraction)
        # None (the default) is the optimizer's rate, read when the first fit begins
        self.initial_learning_rate = (
            None
            if initial_learning_rate is None
            else _validation.positive_float("initial_learning_rate", initial_learning_rate)
        )
        self.initial = self.initial_learning_rate
        self.decay_steps = _validation.positive_int("decay_steps", decay_steps, allow_none=True)
        self._updates = 0  # the optimizer's updates when the current batch began

    def set_model(self, model):
        super().set_model(model)
        # fit sets the model before any on_train_begin, so before a BackupAndRestore
        # restores the optimizer: read at on_train_begin, a resumed run took the restored,
        # already decayed rate as its initial one and decayed it again.
        optimizer = getattr(model, "optimizer", None)
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        if self.initial is None and isinstance(getattr(inner, "_learning_rate", None), keras.Variable):
            self.initial = float(keras.ops.convert_to_numpy(optimizer.learning_rate))

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        # Under mixed_float16, compile wraps the optimizer in a LossScaleOptimizer.
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        # A callable rate is not settable either (it failed with "'function' object has no attribute 'assign'").
        if not isinstance(inner._learning_rate, keras.Variable):
            raise ValueError(
                "BudgetLinearDecay needs an optimizer with a constant learning rate, not a schedule "
                f"or a callable. Received: learning_rate={inner._learning_rate!r}"
            )
        if self.initial is None:
            self.initial = float(keras.ops.convert_to_numpy(optimizer.learning_rate))

    def factor(self):
        """The current learning rate as a fraction of the initial one."""
        spent = self.budget.elapsed / self.budget.seconds
        if self.decay_steps is not None:
            spent = max(spent, self._updates / self.decay_steps)
        spent = min(1.0, spent)
        return 1.0 - (1.0 - self.final_fraction) * spent

    def on_train_batch_begin(self, batch, logs=None):
        if self.budget._start is None:
            raise ValueError(
                "BudgetLinearDecay: its TimeBudget is not running; put the budget in the "
                "same `callbacks` list of `fit`."
            )
        if self.decay_steps is not None:
            self._updates = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        self.model.optimizer.learning_rate = self.initial * self.factor()


def _batch_norm_layers(model):
    """The ``BatchNormalization`` layers of ``model``, nested ones included (once each)."""
    found = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.BatchNormalization) and all(layer is not f for f in found):
            found.append(layer)
    return found


#: model -> a weak reference to the swap callback of this module that holds its trained
#: weights aside (from an epoch's end with ``swap_on_epoch`` to the next epoch's begin), for
#: backups. (Weak: the callback holds the model, so a strong value kept the key alive, and
#: a ``fit`` stopped by an error between those two points kept its model for good.)
_ASIDE = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def trained_weights_in(model):
    """A context in which ``model`` holds its trained weights, for a backup.

    With ``swap_on_epoch=True`` the EMA swaps of this module (:func:`swap_ema_weights`,
    :class:`SwapEMAWeightsAndStatistics`) put the average in the model from an epoch's
    end to the next epoch's begin and keep the trained weights aside. A backup callback
    after such a swap (``[swap, backup]``) saved the average as the trained weights, and
    a resumed run trained on from the average. Inside this context the trained weights
    (and their batch-normalization statistics) are in the model; the average comes back
    after it. Where no swap holds them aside (no such swap, or within an epoch) it
    changes nothing.
    ``applications.fault_tolerance.AtomicBackupAndRestore`` saves inside it.
    """
    swap = _ASIDE.get(model)
    swap = None if swap is None else swap()
    if swap is None or swap._trained is None:
        yield
        return
    with swap._trained_state():
        yield


class _SwapEMAWeights(keras.callbacks.SwapEMAWeights):
    """``keras.callbacks.SwapEMAWeights`` that keeps the average when ``fit`` stops early
    and swaps back after ``predict``.

    With ``swap_on_epoch=True`` Keras swaps the average into the model at every epoch's
    end (the trained weights into the optimizer's average slots) and makes the average
    final only at the last epoch. A ``fit`` stopped before it (``EarlyStopping``,
    ``TimeBudget``, any ``stop_training``) then ended with the optimizer copying its
    average slots, which held the trained weights, into the model: the averaged weights
    were lost. Here the average is copied into the model at an epoch's end and the
    trained weights are kept aside until the next epoch begins, so the average slots
    always hold the average, and the model ends with it however ``fit`` ends.
    Keras' ``on_predict_end`` also left the average in the model (it swapped back only
    when the average was *not* in): a later ``fit`` trained from it. And Keras swaps on
    TensorFlow by arithmetic (``w += a; a = w - a; w -= a``), which rounds: every
    evaluation moved the trained weights (by an ulp, or by far more where the average
    is much larger) and a run with validation trained other weights than one without.
    Here the values are copied, so a swap and its swap back leave both bit-identical.
    """

    def __init__(self, swap_on_epoch=False):
        # Keras takes any truthy value: "no" swapped at every epoch's end.
        super().__init__(swap_on_epoch=_validation.boolean("swap_on_epoch", swap_on_epoch))
        self._trained = None  # the trained weights, kept aside while the average is in

    def _ema_pairs(self):
        """(model variable, its average) of every EMA optimizer of the model."""
        pairs = []

        def collect(optimizer):
            pairs.extend(zip(optimizer._trainable_variables, optimizer._model_variables_moving_average))

        self._apply_to_ema_optimizers(collect, collect)
        return [(var, average) for var, average in pairs if average is not None]

    def _swap_variables(self):
        # Keras swaps on TensorFlow by arithmetic (a += b; b = a - b; a -= b), which rounds:
        # every evaluation inside fit moved the trained weights and the average by up to an
        # ulp (a run with validation trained other weights than one without; a weight and an
        # average far apart lost the smaller one's digits, or overflowed to inf). Copied here.
        for var, average in self._ema_pairs():
            trained = keras.ops.convert_to_numpy(var)
            var.assign(average)
            average.assign(trained)

    def on_epoch_begin(self, epoch, logs=None):
        if self._trained is not None:
            for (var, _), value in zip(self._ema_pairs(), self._trained):
                var.assign(value)
            self._set_aside(None)
            self._ema_weights_in_model = False
        else:
            super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.swap_on_epoch and not self._ema_weights_in_model:
            pairs = self._ema_pairs()
            self._set_aside([keras.ops.convert_to_numpy(var) for var, _ in pairs])
            for var, average in pairs:
                var.assign(average)
            self._ema_weights_in_model = True

    def _set_aside(self, trained):
        self._trained = trained
        if trained is None:
            _ASIDE.pop(self.model, None)
        else:
            _ASIDE[self.model] = weakref.ref(self)

    @contextlib.contextmanager
    def _trained_state(self):
        """The trained weights put back in for the block (see :func:`trained_weights_in`)."""
        pairs = self._ema_pairs()
        for (var, _), value in zip(pairs, self._trained):
            var.assign(value)
        try:
            yield
        finally:
            for var, average in pairs:  # (the average slots always hold the average)
                var.assign(average)

    def on_predict_end(self, logs=None):
        if self._ema_weights_in_model and self._trained is None:
            self._swap_variables()
            self._ema_weights_in_model = False

    def on_train_end(self, logs=None):
        # fit has copied the average into the model (the optimizer's finalize step)
        self._set_aside(None)
        self._ema_weights_in_model = False


class SwapEMAWeightsAndStatistics(_SwapEMAWeights):
    """``keras.callbacks.SwapEMAWeights`` that gives the EMA weights their own
    batch-normalization statistics.

    An optimizer with ``use_ema=True`` averages the *trainable* weights. A
    ``BatchNormalization`` layer's ``moving_mean`` and ``moving_variance`` are not
    trainable: they follow the batches that the raw weights see in training. With the
    averaged weights in the model (before an evaluation, at the end of every epoch with
    ``swap_on_epoch=True``, and for good once ``fit`` ends) the layers would normalize
    with the statistics of other weights. On a Sort-of-CLEVR MAC with a batch-normalized
    image stem after 3,000 steps (EMA momentum 0.999) that left 27.5% validation accuracy,
    where statistics re-estimated for the averaged weights gave 64.1%.

    So whenever this callback puts the averaged weights in the model, it re-estimates
    the statistics for them, as ``torch.optim.swa_utils.update_bn`` does for averaged
    weights: it runs the first ``statistics_steps`` batches of ``statistics_data``
    through the model in training mode (dropout and other training-mode layers
    included) and gives every batch-normalization layer the mean of those batches'
    means and variances. When the raw weights come back, their statistics do too, so
    the moving averages go on where training left them. At the end of ``fit`` the
    averaged weights stay in the model (Keras copies them there), and so do their
    statistics: the saved model is consistent. Statistics are re-estimated once per
    state of the weights: a second swap without a training step in between reuses them.

    Only the layers up to the last batch normalization run where the model is a
    functional one that can be cut there; otherwise the whole model runs. The
    batch-normalization layers are found among the model's layers and their
    sub-layers.

    Args:
        statistics_data: the batches to estimate the statistics from: a
            ``tf.data.Dataset`` or another iterable of batches ``x``, ``(x, y)`` or
            ``(x, y, sample_weight)``, usually the training data (an endless stream
            is fine: its first batches are used). Each swap starts it again, so a
            generator or another one-pass iterator is refused.
        statistics_steps: how many batches to use, a positive integer. Default 100.
        swap_on_epoch: as in ``keras.callbacks.SwapEMAWeights``: also put the averaged
            weights in at the end of each epoch (for callbacks after this one, such
            as ``ModelCheckpoint``) and the trained ones back at the start of the next;
            a ``fit`` stopped early (``EarlyStopping``, :class:`TimeBudget`) still
            ends with the average, unlike Keras' callback. A Keras
            ``BackupAndRestore`` must come *before* this callback: after it, it would
            back up the average as the trained weights, and a resumed run would train
            on from the average. (``applications.fault_tolerance.AtomicBackupAndRestore``
            backs up the trained weights and their statistics wherever it comes.)

    Example:

    ```python
    x = np.random.normal(size=(64, 4)).astype("float32")
    y = np.random.normal(size=(64, 1)).astype("float32")
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                            keras.layers.BatchNormalization(), keras.layers.Dense(1)])
    net.compile(optimizer=keras.optimizers.Adam(use_ema=True), loss="mse")
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]  # (a tf.data.Dataset works too)
    swap = keras_capsules.callbacks.SwapEMAWeightsAndStatistics(batches, statistics_steps=4)
    net.fit(x, y, batch_size=16, validation_split=0.25, epochs=2, callbacks=[swap], verbose=0)
    ```
    """

    def __init__(self, statistics_data, statistics_steps=100, swap_on_epoch=False):
        super().__init__(swap_on_epoch=swap_on_epoch)
        if statistics_data is None or not hasattr(statistics_data, "__iter__"):
            raise TypeError(
                "`statistics_data` must be an iterable of batches (a tf.data.Dataset, a list, ...). "
                f"Received: {type(statistics_data).__name__}"
            )
        _check_not_arrays(statistics_data, "statistics_data")
        if iter(statistics_data) is statistics_data:  # a generator or iterator: one pass only
            raise TypeError(
                "`statistics_data` must give its batches again at every swap (a tf.data.Dataset, a list, ...), "
                f"not a one-pass iterator. Received: {type(statistics_data).__name__}"
            )
        self.statistics_data = statistics_data
        self.statistics_steps = _validation.positive_int("statistics_steps", statistics_steps)
        self._raw_statistics = None  # the raw weights' statistics while the averaged weights are in
        self._averaged = None  # (a weak reference to the model, optimizer updates, statistics) last estimated for its average

    # Every hook of the base that may swap: what it did decides what the statistics do.
    def _follow(self, hook, *args):
        before = self._ema_weights_in_model
        getattr(super(), hook)(*args)
        after = self._ema_weights_in_model
        if after and not before:
            self._raw_statistics = self._read()
            self._write(self._averaged_statistics())
        elif before and not after and self._raw_statistics is not None:
            self._write(self._raw_statistics)
            self._raw_statistics = None

    def on_epoch_begin(self, epoch, logs=None):
        self._follow("on_epoch_begin", epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._follow("on_epoch_end", epoch, logs)

    def on_test_begin(self, logs=None):
        self._follow("on_test_begin", logs)

    def on_test_end(self, logs=None):
        self._follow("on_test_end", logs)

    def on_predict_begin(self, logs=None):
        self._follow("on_predict_begin", logs)

    def on_predict_end(self, logs=None):
        self._follow("on_predict_end", logs)

    def on_train_end(self, logs=None):
        # fit (of at least one epoch) has copied the averaged weights into the model:
        # their statistics stay (already in, when fit ended after an epoch's end)
        average_in = self._ema_weights_in_model
        super().on_train_end(logs)
        if not average_in and (self.params or {}).get("epochs", 0) > 0:
            self._write(self._averaged_statistics())
        self._raw_statistics = None

    @contextlib.contextmanager
    def _trained_state(self):
        averaged = self._read()
        with super()._trained_state():
            if self._raw_statistics is not None:
                self._write(self._raw_statistics)
            try:
                yield
            finally:
                self._write(averaged)

    def _layers(self):
        return _batch_norm_layers(self.model)

    def _read(self):
        return [(keras.ops.convert_to_numpy(bn.moving_mean), keras.ops.convert_to_numpy(bn.moving_variance))
                for bn in self._layers()]

    def _write(self, statistics):
        for bn, (mean, variance) in zip(self._layers(), statistics):
            bn.moving_mean.assign(mean)
            bn.moving_variance.assign(variance)

    def _updates(self):
        optimizer = getattr(self.model, "optimizer", None)
        return None if optimizer is None else int(keras.ops.convert_to_numpy(optimizer.iterations))

    def _averaged_statistics(self):
        # (keyed on the model too: one callback reused for the members of an ensemble
        # gave the second member the first one's statistics, at equal update counts; by a
        # weak reference, not ``id``: a new model at a freed one's address read its statistics)
        updates = self._updates()
        if self._averaged is not None and updates is not None:
            cached_model, cached_updates, statistics = self._averaged
            if cached_model() is self.model and cached_updates == updates:
                return statistics
        statistics = estimate_batch_norm_statistics(self.model, self.statistics_data, self.statistics_steps)
        self._averaged = (weakref.ref(self.model), updates, statistics)
        return statistics


def swap_ema_weights(statistics_data=None, swap_on_epoch=False, **kwargs):
    """The callback that puts an EMA optimizer's averaged weights in the model.

    A ``keras.callbacks.SwapEMAWeights`` when ``statistics_data`` is None (the model has
    no batch normalization, or its statistics may stay those of the raw weights),
    else :class:`SwapEMAWeightsAndStatistics` on those batches (``kwargs``: its
    ``statistics_steps``). ``swap_on_epoch`` as in both. Both keep the average in the
    model when ``fit`` stops before its last epoch, swap back after ``predict`` and
    swap by copying (the trained weights come back bit-identical), which Keras' own
    callback does not (see :class:`SwapEMAWeightsAndStatistics`).
    """
    if statistics_data is None:
        if kwargs:
            raise TypeError(f"without `statistics_data` there are no statistics to estimate: "
                            f"unexpected {sorted(kwargs)}")
        return _SwapEMAWeights(swap_on_epoch=swap_on_epoch)
    return SwapEMAWeightsAndStatistics(statistics_data, swap_on_epoch=swap_on_epoch, **kwargs)


def _is_array(value):
    """A NumPy array or a tensor (of any backend): something with a shape and a dtype."""
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _check_not_arrays(data, name):
    """Refuses, as batches to iterate, an ``(x, y)`` (or ``(x, y, sample_weight)``) tuple
    of arrays (``x`` may be a dict of them), a bare array and a dict: the tuple gave ``x``
    and then ``y`` as two batches (``y`` went through the model as an input: wrong
    statistics, silently, where ``y`` has ``x``'s shape), the array one sample per batch
    (or a shape error at the first swap, after a whole epoch, that did not name
    ``name``), the dict its keys."""
    if isinstance(data, dict):
        raise TypeError(
            f"`{name}` must be an iterable of batches (a tf.data.Dataset, a list of batches x or "
            f"(x, y), ...); a dict is iterated over its keys. Received: a dict with keys {sorted(data)}"
        )
    if _is_array(data):
        raise TypeError(
            f"`{name}` must be an iterable of batches (a tf.data.Dataset, a list of batches x or "
            f"(x, y), ...); an array is iterated sample by sample. Received: an array of shape "
            f"{tuple(data.shape)}; batch it, e.g. tf.data.Dataset.from_tensor_slices(x).batch(32)"
        )

    def arrays(item):  # x, y or sample_weight of a fit: an array, or a dict of arrays (named inputs)
        return _is_array(item) or (isinstance(item, dict) and item and all(map(_is_array, item.values())))

    if isinstance(data, tuple) and 2 <= len(data) <= 3 and all(map(arrays, data)) and any(map(_is_array, data)):
        raise TypeError(
            f"`{name}` must be an iterable of batches; a tuple of arrays is iterated as one batch "
            f"per array (x, then y). Received: a tuple of {len(data)} arrays; pass "
            "tf.data.Dataset.from_tensor_slices((x, y)).batch(32) or a list of (x, y) batches"
        )


def estimate_batch_norm_statistics(model, data, steps):
    """The statistics that the ``BatchNormalization`` layers of ``model`` see with its
    current weights: runs the first ``steps`` batches of ``data`` (batches ``x``,
    ``(x, y)`` or ``(x, y, sample_weight)``) through the model in training mode and
    returns, per layer (in the order of the model's layers), the mean over the batches
    of the batch mean and of the batch variance, as NumPy arrays. A layer that runs
    several times in one pass (shared by two branches, or inside
    ``keras.layers.TimeDistributed``, once per step) averages over all of its calls, as
    its moving averages do in training. The layers' moving statistics and momenta are
    left as they were. Used by :class:`SwapEMAWeightsAndStatistics`."""
    # A bad count (-1, 2.5, None) ran through all of ``data``: forever on a repeated dataset.
    steps = _validation.positive_int("steps", steps)
    _check_not_arrays(data, "data")
    layers = _batch_norm_layers(model)
    if not layers:
        return []
    saved = [(bn.momentum, keras.ops.convert_to_numpy(bn.moving_mean), keras.ops.convert_to_numpy(bn.moving_variance))
             for bn in layers]
    forward = _up_to(model, layers)
    # Every call's batch statistics, as the moving statistics hold them after a call with
    # momentum 0 (reading them once per batch kept only a layer's last call of the pass).
    sums = [[0.0, 0.0, 0] for _ in layers]
    count = 0
    try:
        for bn, totals in zip(layers, sums):
            bn.momentum = 0.0
            bn.call = _recording_call(bn, totals)
        for batch in data:
            if count == steps:
                break
            x, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
            forward(x, training=True)
            count += 1
    finally:
        for bn, (momentum, mean, variance) in zip(layers, saved):
            vars(bn).pop("call", None)  # the class's call again
            bn.momentum = momentum
            bn.moving_mean.assign(mean)
            bn.moving_variance.assign(variance)
    if count == 0:
        raise ValueError("`data` gave no batch to estimate the batch-normalization statistics from")
    return [(mean, variance) if calls == 0 else ((m / calls).astype(mean.dtype), (v / calls).astype(variance.dtype))
            for (m, v, calls), (_, mean, variance) in zip(sums, saved)]


def _recording_call(bn, totals):
    """``bn.call`` that adds the batch statistics of each training call (momentum 0: the
    moving statistics after it) to ``totals`` ``[mean sum, variance sum, calls]``."""
    call = bn.call

    def recording(*args, **kwargs):
        outputs = call(*args, **kwargs)
        if kwargs.get("training"):
            try:
                mean = keras.ops.convert_to_numpy(bn.moving_mean).astype("float64")
                variance = keras.ops.convert_to_numpy(bn.moving_variance).astype("float64")
            except Exception as error:  # a call inside a traced function: no values to read
                raise ValueError(
                    f"estimate_batch_norm_statistics runs the model eagerly and reads the statistics "
                    f"of each call of {bn.name}, which ran inside a traced function (e.g. "
                    "keras.layers.TimeDistributed over an unknown number of steps): give the "
                    "steps a fixed size"
                ) from error
            totals[0] += mean
            totals[1] += variance
            totals[2] += 1
        return outputs

    return recording


def _up_to(model, layers):
    """``model`` cut after its last batch normalization where it is a functional model
    whose batch-normalization layers each ran once in its graph, else ``model``."""
    if any(len(getattr(bn, "_inbound_nodes", ())) > 1 for bn in layers):
        return model  # a shared layer: the cut kept its first call only
    try:
        cut = keras.Model(model.input, [bn.output for bn in layers])
    except (AttributeError, ValueError, TypeError):
        return model
    return cut
