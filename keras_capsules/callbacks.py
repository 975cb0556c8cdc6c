"""Callbacks for long training runs."""

import time

import keras


class TimeBudget(keras.callbacks.Callback):
    """Stops training once a wall-time budget is spent (checked after every batch).

    The clock starts at the first ``fit`` the callback is used in and keeps running
    across later ``fit`` calls, so one budget can cover several training phases.

    Args:
        seconds: the budget, a positive number of seconds.

    Attributes:
        steps: training batches run so far.
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
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"`seconds` must be a positive number. Received: seconds={seconds!r}")
        self.seconds = float(seconds)
        self.steps = 0
        self.exceeded = False
        self._start = None

    @property
    def elapsed(self):
        return 0.0 if self._start is None else time.perf_counter() - self._start

    def on_train_begin(self, logs=None):
        if self._start is None:
            self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.elapsed > self.seconds:
            self.exceeded = True
            self.model.stop_training = True
