"""Callbacks for long training runs."""

import math
import numbers
import time

import keras


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
        seconds: the budget, a positive number of seconds.

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
        # numbers.Real: np.int64 / np.float32 seconds (from numpy arithmetic) were refused.
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not seconds > 0:
            raise ValueError(f"`seconds` must be a positive number. Received: seconds={seconds!r}")
        self.seconds = float(seconds)
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
    from ``budget``. Ending training with a small learning rate
    usually gives a clearly better final model than a constant one ("budgeted
    training", Li et al. 2020).

    Args:
        budget: the :class:`TimeBudget` whose clock drives the decay (put it in the
            same ``callbacks`` list, before this one).
        final_fraction: the learning rate at the end of the budget, as a fraction of
            the initial one, in ``[0, 1]``. Default 0.05.
        initial_learning_rate: the rate the decay starts from. Default None: the
            optimizer's rate at the start of the first ``fit``.

    Example:

    ```python
    budget = keras_capsules.callbacks.TimeBudget(10 * 60)
    decay = keras_capsules.callbacks.BudgetLinearDecay(budget)
    model.compile(keras.optimizers.Adam(3e-3), "mse")
    model.fit(dataset, epochs=10_000, callbacks=[budget, decay])
    ```
    """

    def __init__(self, budget, final_fraction=0.05, initial_learning_rate=None):
        super().__init__()
        if not isinstance(budget, TimeBudget):
            raise ValueError(f"`budget` must be a TimeBudget. Received: budget={budget!r}")
        if isinstance(final_fraction, bool) or not isinstance(final_fraction, numbers.Real) \
                or not 0.0 <= final_fraction <= 1.0:
            raise ValueError(f"`final_fraction` must be in [0, 1]. Received: final_fraction={final_fraction!r}")
        if initial_learning_rate is not None and (
            isinstance(initial_learning_rate, bool)
            or not isinstance(initial_learning_rate, numbers.Real)
            or not 0 < initial_learning_rate < math.inf
        ):
            raise ValueError(
                "`initial_learning_rate` must be a positive number or None. "
                f"Received: initial_learning_rate={initial_learning_rate!r}"
            )
        self.budget = budget
        self.final_fraction = float(final_fraction)
        self.initial_learning_rate = None if initial_learning_rate is None else float(initial_learning_rate)
        self.initial = self.initial_learning_rate

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
        spent = min(1.0, self.budget.elapsed / self.budget.seconds)
        return 1.0 - (1.0 - self.final_fraction) * spent

    def on_train_batch_begin(self, batch, logs=None):
        if self.budget._start is None:
            raise ValueError(
                "BudgetLinearDecay: its TimeBudget is not running; put the budget in the "
                "same `callbacks` list of `fit`."
            )
        self.model.optimizer.learning_rate = self.initial * self.factor()
