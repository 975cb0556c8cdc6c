"""The best model a search writes: its trial's weights and optimizer state, and a search
that warns about nothing it does itself."""

import os
import warnings

import keras
import numpy as np

from applications import __main__ as cli

TINY = ["--limit", "120", "--epochs", "1", "--batch-size", "32", "--quiet"]


def test_the_best_model_keeps_its_trials_optimizer_state_and_the_search_warns_of_nothing(tmp_path, capsys):
    # The best model was loaded from its trial's checkpoint into a model whose optimizer
    # had no variables: Keras skipped the saved optimizer state ("Skipping variable
    # loading for optimizer 'adam' ...") and best_model.keras held a fresh optimizer.
    # Every trial's fit also warned "`shuffle=True` was passed, but will be ignored".
    directory = tmp_path / "search"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli.main(["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1",
                         *TINY])
    assert code == 0, capsys.readouterr().err
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "Skipping variable loading" in m or "shuffle=True" in m], messages
    model = keras.saving.load_model(directory / "best_model.keras")
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    assert steps > 0  # the trial's updates (120 digits less the validation ones, batch 32)
    (trial,) = [p for p in os.listdir(directory / "demo") if p.startswith("trial_")]
    checkpoint = keras.saving.load_model(directory / "best_model.keras")
    checkpoint.load_weights(directory / "demo" / trial / "checkpoint.weights.h5")
    for got, want in zip(model.optimizer.variables, checkpoint.optimizer.variables, strict=True):
        np.testing.assert_array_equal(got, want, err_msg=got.path)
