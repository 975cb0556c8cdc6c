"""keras_capsules.callbacks: TimeBudget and BudgetLinearDecay."""

import math
import re

import keras
import numpy as np
import pytest

from keras_capsules.callbacks import BudgetLinearDecay, TimeBudget
from tests.backends import BACKEND

#: Keras' torch trainer refuses steps_per_execution > 1 ("`steps_per_execution` must be 1
#: with the PyTorch backend", keras/src/backend/torch/trainer.py)
_ONE_STEP_PER_EXECUTION = pytest.mark.skipif(
    BACKEND == "torch", reason="Keras' torch trainer supports only steps_per_execution=1")


def _model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_stops_training_when_the_budget_is_spent():
    x, y = np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32")
    budget = TimeBudget(1e-9)
    history = _model().fit(x, y, batch_size=8, epochs=50, callbacks=[budget], verbose=0)
    assert budget.exceeded and budget.steps == 1 and len(history.history["loss"]) == 1


def test_runs_to_the_end_within_the_budget():
    x, y = np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32")
    budget = TimeBudget(3600)
    _model().fit(x, y, batch_size=8, epochs=2, callbacks=[budget], verbose=0)
    assert not budget.exceeded and budget.steps == 16 and budget.elapsed > 0


@_ONE_STEP_PER_EXECUTION
def test_steps_count_batches_with_steps_per_execution():
    # Audit 9: with steps_per_execution=4 Keras reports every 4 batches, and `steps`
    # counted reports: 6 instead of 20 batches.
    x, y = np.zeros((80, 3), "float32"), np.zeros((80, 1), "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=4)
    budget = TimeBudget(3600)
    model.fit(x, y, batch_size=8, epochs=2, callbacks=[budget], verbose=0)
    assert budget.steps == 20 == int(model.optimizer.iterations)


@pytest.mark.parametrize("seconds", [0, -1, "10", True])
def test_bad_budget(seconds):
    with pytest.raises(ValueError, match="Received: seconds="):
        TimeBudget(seconds)


def test_numpy_scalars_are_numbers():
    # Audit 9: np.int64 / np.float32 budgets and fractions were refused as "must be a positive number".
    budget = TimeBudget(np.int64(600))
    assert budget.seconds == 600.0 and TimeBudget(np.float32(1.5)).seconds == 1.5
    assert BudgetLinearDecay(budget, final_fraction=np.float32(0.5)).final_fraction == 0.5


class _FakeClockBudget(TimeBudget):
    """A budget whose clock advances by one second per training batch."""

    @property
    def elapsed(self):
        return float(self.steps)


class _RecordLearningRate(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


def test_budget_linear_decay_follows_the_clock_to_the_floor():
    x, y = np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.02), "mse")
    budget = _FakeClockBudget(4.0)
    record = _RecordLearningRate()
    model.fit(x, y, batch_size=8, epochs=1, callbacks=[budget, BudgetLinearDecay(budget, 0.1), record], verbose=0)
    # batch k starts after k seconds: 0.02 * (1 - 0.9 * min(1, k / 4)); the budget stops after batch 5
    expected = [0.02 * (1 - 0.9 * min(1.0, k / 4)) for k in range(5)]
    np.testing.assert_allclose(record.rates, expected, rtol=1e-6)
    assert budget.exceeded


def test_budget_linear_decay_reaches_the_floor_where_the_epochs_end_before_the_budget():
    # note 100: with 8 epochs under a 60-minute budget the rate ended at ~73% of its start;
    # with `decay_steps` it follows the larger of the budget's share and the updates' share
    x, y = np.zeros((32, 3), "float32"), np.zeros((32, 1), "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.02), "mse")
    budget = _FakeClockBudget(100.0)  # one second a batch: 8 of 100 seconds spent by the end
    record = _RecordLearningRate()
    model.fit(x, y, batch_size=8, epochs=2, callbacks=[budget, BudgetLinearDecay(budget, 0.1, decay_steps=7), record],
              verbose=0)
    # batch k begins after k updates: 0.02 * (1 - 0.9 * min(1, max(k / 100, k / 7)))
    expected = [0.02 * (1 - 0.9 * min(1.0, k / 7)) for k in range(8)]
    np.testing.assert_allclose(record.rates, expected, rtol=1e-6)
    assert record.rates[-1] == pytest.approx(0.002) and not budget.exceeded
    # where the budget is the further spent, it leads: 4 of 5 seconds against 4 of 100 updates
    model.compile(keras.optimizers.Adam(0.02), "mse")
    budget, record = _FakeClockBudget(5.0), _RecordLearningRate()
    model.fit(x, y, batch_size=8, epochs=1, callbacks=[budget, BudgetLinearDecay(budget, 0.1, decay_steps=100), record],
              verbose=0)
    np.testing.assert_allclose(record.rates, [0.02 * (1 - 0.9 * k / 5) for k in range(4)], rtol=1e-6)


def test_budget_linear_decay_steps_of_a_resumed_run_count_the_restored_updates(tmp_path):
    # the updates are the optimizer's iterations, which BackupAndRestore restores: a run
    # resumed after its first epoch goes on decaying from the fifth update, not from the start
    rates = _rates_resumed_after_a_crash(tmp_path, 32, 100.0, decay_steps=7)
    np.testing.assert_allclose(rates, [0.02 * (1 - 0.9 * k / 7) for k in range(4, 8)], rtol=1e-6)


@pytest.mark.parametrize("steps", [0, -3, 2.5, True, "8"])
def test_budget_linear_decay_steps_must_be_a_positive_integer(steps):
    message = f"`decay_steps` must be a positive integer. Received: decay_steps={steps!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        BudgetLinearDecay(TimeBudget(60.0), decay_steps=steps)
    assert BudgetLinearDecay(TimeBudget(60.0), decay_steps=np.int64(8)).decay_steps == 8


def test_budget_linear_decay_bad_arguments():
    with pytest.raises(ValueError, match="Received: budget="):
        BudgetLinearDecay(10.0)
    with pytest.raises(ValueError, match="Received: final_fraction="):
        BudgetLinearDecay(TimeBudget(1.0), final_fraction=1.5)
    model = _model()
    model.compile(keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)), "mse")
    x, y = np.zeros((8, 3), "float32"), np.zeros((8, 1), "float32")
    budget = TimeBudget(60.0)
    with pytest.raises(ValueError, match="constant learning rate"):
        model.fit(x, y, epochs=1, callbacks=[budget, BudgetLinearDecay(budget)], verbose=0)


def test_budget_linear_decay_resumed_run_starts_from_the_given_initial_rate():
    # Audit 9: a run resumed from a backup read its initial rate from the restored
    # optimizer, already decayed, and decayed again from there; it can now be given.
    x, y = np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.02), "mse")
    model.optimizer.learning_rate = 0.005  # as restored from a backup made late in the budget
    budget = _FakeClockBudget(4.0)
    record = _RecordLearningRate()
    decay = BudgetLinearDecay(budget, 0.1, initial_learning_rate=0.02)
    model.fit(x, y, batch_size=8, epochs=1, callbacks=[budget, decay, record], verbose=0)
    expected = [0.02 * (1 - 0.9 * min(1.0, k / 4)) for k in range(5)]
    np.testing.assert_allclose(record.rates, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="Received: initial_learning_rate=0"):
        BudgetLinearDecay(budget, initial_learning_rate=0)


def test_budget_linear_decay_refuses_a_schedule_inside_a_loss_scale_optimizer():
    # Audit 9: under mixed_float16 (compile wraps the optimizer in a LossScaleOptimizer)
    # a schedule was not detected and fit failed with Keras' TypeError on the first batch.
    model = _model()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(schedule)), "mse")
    x, y = np.zeros((8, 3), "float32"), np.zeros((8, 1), "float32")
    budget = TimeBudget(60.0)
    with pytest.raises(ValueError, match="constant learning rate"):
        model.fit(x, y, epochs=1, callbacks=[budget, BudgetLinearDecay(budget)], verbose=0)


def test_budget_linear_decay_without_its_budget_in_fit_is_an_error():
    # Audit 9: a budget left out of `callbacks` never started its clock, so the rate
    # silently stayed at its initial value.
    model = _model()
    x, y = np.zeros((8, 3), "float32"), np.zeros((8, 1), "float32")
    with pytest.raises(ValueError, match="TimeBudget is not running"):
        model.fit(x, y, epochs=1, callbacks=[BudgetLinearDecay(TimeBudget(60.0))], verbose=0)


def test_budget_linear_decay_refuses_a_callable_learning_rate():
    # Audit 9: a callable rate was accepted and fit failed on the first batch with
    # "'function' object has no attribute 'assign'".
    model = _model()
    model.compile(keras.optimizers.SGD(lambda: 0.01), "mse")
    x, y = np.zeros((8, 3), "float32"), np.zeros((8, 1), "float32")
    budget = TimeBudget(60.0)
    with pytest.raises(ValueError, match="constant learning rate"):
        model.fit(x, y, epochs=1, callbacks=[budget, BudgetLinearDecay(budget)], verbose=0)


class _Crash(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise RuntimeError("crash (simulated)")


def _rates_resumed_after_a_crash(tmp_path, num_samples, seconds, **decay):
    """The learning rates of a 2-epoch fit (batches of 8, Adam at 0.02, a decay to 0.1
    with ``decay``, a one-second-a-batch budget of ``seconds`` new each run) resumed by ``BackupAndRestore`` after
    a crash at the end of its first epoch."""
    x, y = np.zeros((num_samples, 3), "float32"), np.zeros((num_samples, 1), "float32")

    def run(*extra):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.02), "mse")
        budget, record = _FakeClockBudget(seconds), _RecordLearningRate()
        callbacks = [keras.callbacks.BackupAndRestore(str(tmp_path / "backup")), budget,
                     BudgetLinearDecay(budget, 0.1, **decay), record, *extra]
        model.fit(x, y, batch_size=8, epochs=2, callbacks=callbacks, verbose=0)
        return record.rates

    with pytest.raises(RuntimeError, match="simulated"):
        run(_Crash())  # the backup of epoch 0 holds the decayed rate
    return run()  # a new process: a new budget


def test_budget_linear_decay_of_a_run_resumed_by_backup_and_restore_starts_from_the_compiled_rate(tmp_path):
    # Audit 9: a run resumed by BackupAndRestore read its initial rate after the restore,
    # i.e. the already decayed rate of the backup, and decayed it again from there.
    rates = _rates_resumed_after_a_crash(tmp_path, 64, 4.0)  # the floor by epoch 0's end
    expected = [0.02 * (1 - 0.9 * min(1.0, k / 4)) for k in range(5)]  # from the compiled rate again
    np.testing.assert_allclose(rates, expected, rtol=1e-6)


class _ManualClockBudget(TimeBudget):
    """A budget whose clock the test advances."""

    clock = 0.0

    @property
    def elapsed(self):
        return self.clock


def test_a_budget_spent_in_validation_stops_before_the_next_epoch():
    # audit: the budget was checked only after training batches, so a budget spent by an
    # epoch's validation started one more epoch: one more optimizer step and one more
    # whole validation pass past the budget. (Spent by the last epoch, training ended
    # on its own: not `exceeded`.)
    x, y = np.zeros((32, 3), "float32"), np.zeros((32, 1), "float32")

    def run(epochs):
        budget = _ManualClockBudget(5.0)
        validations = []

        class Clock(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                budget.clock += 1.0  # four batches an epoch: 4 s

            def on_test_begin(self, logs=None):
                validations.append(epochs)

            def on_test_end(self, logs=None):
                budget.clock += 10.0  # the validation: 10 s

        model = _model()
        model.fit(x, y, batch_size=8, epochs=epochs, validation_data=(x, y),
                  callbacks=[Clock(), budget], verbose=0)
        assert budget.steps == 4 == int(model.optimizer.iterations) and len(validations) == 1
        return budget.exceeded

    assert run(epochs=5)
    assert not run(epochs=1)


@_ONE_STEP_PER_EXECUTION
def test_steps_count_the_short_last_execution_of_an_epoch_of_unknown_length():
    # Audit 10: with steps_per_execution=4 and an epoch of unknown length (a filtered
    # dataset) Keras reports the last execution (2 batches of 10) as 4: steps was 24, not 20.
    import tensorflow as tf

    x, y = np.zeros((10, 3), "float32"), np.zeros((10, 1), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(1).filter(lambda a, b: True)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=4)
    budget = TimeBudget(3600)
    model.fit(dataset, epochs=2, callbacks=[budget], verbose=0)
    assert budget.steps == 20 == int(model.optimizer.iterations)


@pytest.mark.parametrize("seconds", [math.inf, -math.inf, math.nan, np.float32("inf"), 0, -1.0, True, "600"])
def test_a_budget_must_be_a_positive_finite_number_of_seconds(seconds):
    # audit (callbacks): an infinite budget was taken: it never stopped training and held
    # BudgetLinearDecay at its initial rate (leave the callback out to train without one)
    with pytest.raises(ValueError, match=re.escape(f"`seconds` must be a positive, finite number. "
                                                   f"Received: seconds={seconds!r}")):
        TimeBudget(seconds)


# Audit (BudgetLinearDecay): its arguments were checked inline, repeating
# _validation.positive_float, and an infinite initial_learning_rate was refused as not
# "a positive number or None"; they now share the house messages.


@pytest.mark.parametrize("rate", [math.inf, -math.inf, math.nan, np.float32("inf"), 0, -0.1, True, "0.01"])
def test_budget_linear_decay_initial_learning_rate_must_be_a_positive_finite_number(rate):
    with pytest.raises(ValueError, match=re.escape(f"`initial_learning_rate` must be a positive, finite number. "
                                                   f"Received: initial_learning_rate={rate!r}")):
        BudgetLinearDecay(TimeBudget(60.0), initial_learning_rate=rate)
    # numpy scalars are numbers; None (the default) is the optimizer's rate when fit begins
    assert BudgetLinearDecay(TimeBudget(60.0), initial_learning_rate=np.float32(0.5)).initial_learning_rate == 0.5
    assert BudgetLinearDecay(TimeBudget(60.0)).initial_learning_rate is None


@pytest.mark.parametrize("fraction", [1.5, -0.1, math.nan, math.inf, True, "0.5", None])
def test_budget_linear_decay_final_fraction_must_be_a_number_in_0_1(fraction):
    with pytest.raises(ValueError, match=re.escape(f"`final_fraction` must be a number in [0, 1]. "
                                                   f"Received: final_fraction={fraction!r}")):
        BudgetLinearDecay(TimeBudget(60.0), final_fraction=fraction)
    # both ends are fractions: 1 keeps the rate constant
    assert [BudgetLinearDecay(TimeBudget(60.0), f).final_fraction for f in (0, 1)] == [0.0, 1.0]


@pytest.mark.parametrize("budget", [60.0, TimeBudget, None, keras.callbacks.EarlyStopping()])
def test_budget_linear_decay_budget_must_be_a_time_budget(budget):
    with pytest.raises(ValueError, match=re.escape(
            "`budget` must be the TimeBudget callback whose clock drives the decay (an instance, in the same "
            f"`callbacks` list). Received: budget={budget!r}")):
        BudgetLinearDecay(budget)
