"""keras_capsules.callbacks.TimeBudget."""

import keras
import numpy as np
import pytest

from keras_capsules.callbacks import TimeBudget


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


@pytest.mark.parametrize("seconds", [0, -1, "10", True])
def test_bad_budget(seconds):
    with pytest.raises(ValueError, match="Received: seconds="):
        TimeBudget(seconds)
