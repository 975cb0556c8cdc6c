"""Properties of a search and of saved models: the same seed gives the same trials and
scores, a stopped search resumes into the trials of an unstopped one, the best model
predicts as its trial's model, and a trained model reloaded scores as ``train`` reported."""

import json
import os

import keras
import keras_tuner
import numpy as np
import pytest

from applications import __main__ as cli
from applications import demo
from tests.applications.test_cli_applications import TINY_EVALUATE, small_data, tiny  # noqa: F401 (a fixture)
from tuning.demo import DemoHyperModel

TINY = ["--limit", "120", "--epochs", "1", "--batch-size", "32", "--quiet"]


def _trials(project):
    """trial_id -> (hyperparameter values, score, status) of the trials in ``project``."""
    found = {}
    for name in sorted(os.listdir(project)):
        if name.startswith("trial_"):
            with open(os.path.join(project, name, "trial.json")) as f:
                trial = json.load(f)
            found[trial["trial_id"]] = (trial["hyperparameters"]["values"], trial["score"], trial["status"])
    return found


def _search(directory, max_trials, kind="random"):
    code = cli.main(["tune", "demo", "--tuner", kind, "--directory", str(directory), "--max-trials",
                     str(max_trials), *TINY])
    assert code == 0


def test_a_stopped_and_resumed_search_runs_the_trials_of_an_unstopped_one_and_its_best_model_predicts_as_its_trial(
        tmp_path, capsys):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    _search(whole, 2)
    _search(stopped, 1)
    assert len(_trials(stopped / "demo")) == 1
    _search(stopped, 2)
    capsys.readouterr()
    trials = _trials(whole / "demo")
    assert len(trials) == 2 and all(status == "COMPLETED" for _, _, status in trials.values())
    # the same seed: the same hyperparameters, in the same order, with the same scores
    assert _trials(stopped / "demo") == trials
    assert trials["0"][0] != trials["1"][0]  # (two distinct trials: the check can tell them apart)

    # the best model: its trial's trained model, rebuilt from the recorded hyperparameters
    best = json.loads((whole / "best_hyperparameters.json").read_text())
    hp = keras_tuner.HyperParameters()
    for name, value in best["hyperparameters"].items():
        hp.Fixed(name, value)
    trained = DemoHyperModel(limit=120, batch_size=32).build(hp)
    loaded = keras.saving.load_model(whole / "best_model.keras")
    assert [tuple(w.shape) for w in trained.weights] == [tuple(w.shape) for w in loaded.weights]
    trained.optimizer.build(trained.trainable_variables)  # (its state loads too: no warning)
    trained.load_weights(whole / "demo" / f"trial_{best['trial_id']}" / "checkpoint.weights.h5")
    images, _ = demo.load_arrays(None, 120)
    batch = images[:16].astype("float32")
    np.testing.assert_allclose(loaded.predict(batch, verbose=0), trained.predict(batch, verbose=0),
                               rtol=1e-6, atol=1e-6)
    assert best["best_score"] == trials[best["trial_id"]][1]



class _TwoHyperModel(keras_tuner.HyperModel):
    def build(self, hp):
        hp.Int("layers", 1, 3)
        hp.Float("rate", 0.0, 0.5)
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def _scored_trials(kind, directory, max_trials):
    """Runs the oracle of a ``kind`` search in ``directory`` (resumed if it is there) up to
    ``max_trials`` trials, each scored by a fixed function of its values; returns the
    values of the trials it ran, in order, and the oracle's trial ids after the reload."""
    from tuning import search

    tuner = search.make_tuner(kind, _TwoHyperModel(), str(directory), "p", max_trials=max_trials, seed=0,
                              objective=keras_tuner.Objective("score", "max"))
    reloaded = list(tuner.oracle.trials)
    values = []
    while True:
        trial = tuner.oracle.create_trial("tuner0")
        if trial.status != "RUNNING":
            return values, reloaded, tuner
        drawn = trial.hyperparameters.values
        tuner.oracle.update_trial(trial.trial_id, {"score": 0.1 * drawn["layers"] - (drawn["rate"] - 0.3) ** 2})
        trial.status = "COMPLETED"
        tuner.oracle.end_trial(trial)
        tuner.save()  # as a search does after every trial
        values.append({name: v for name, v in drawn.items() if not name.startswith("tuner/")})


@pytest.mark.parametrize("kind", ["bayesian", "random", "hyperband"])
def test_a_resumed_search_proposes_what_the_unstopped_search_proposes(kind, tmp_path):
    # keras-tuner reloads a stopped search's trials in the order its file search lists
    # them; the Bayesian oracle fitted its Gaussian process to them in that order, and
    # the resumed search proposed other values (apart in the 8th digit, drifting) than
    # the unstopped one, and another resume of the same search others again.
    # Its random state (the start points of the acquisition's optimisation) was not
    # restored: the resume drew its first proposal's points again.
    whole, _, unstopped = _scored_trials(kind, tmp_path / "whole", 12)  # (6 random first points, then the GP's)
    first, _, _ = _scored_trials(kind, tmp_path / "stopped", 7)
    rest, reloaded, resumed = _scored_trials(kind, tmp_path / "stopped", 12)
    assert first + rest == whole and len(whole) == 12
    assert reloaded == resumed.oracle.start_order[:7]  # the trials of a resume in the order they started
    if kind == "bayesian":  # the next proposal's start points too
        np.testing.assert_array_equal(resumed.oracle._random_state.uniform(size=8),
                                      unstopped.oracle._random_state.uniform(size=8))


# --- a trained model reloaded: the same predictions, and `evaluate` the figures `train` reported


DEMO_TRAIN = ["--limit", "120", "--batch-size", "32"]
# the figures of metrics.json that `evaluate` scores again (on the same data, by default)
SCORED = {"demo": ("test_accuracy", "test_loss"),
          "sort_of_clevr": ("non_relational_accuracy", "relational_accuracy"),
          "text_classification": ("test_accuracy", "test_loss"),
          "music": ("test_nll_per_step",),
          "occluded_mnist": ("test_error",),
          "textured_mnist": ("ami",)}


def _inputs_like(model, seed=0):
    """A batch of 3 random inputs for ``model`` (token ids 1-3 for integer inputs)."""
    rng = np.random.default_rng(seed)

    def one(tensor):
        shape = [3 if i == 0 else (dim or 4) for i, dim in enumerate(tensor.shape)]
        if "int" in str(tensor.dtype):
            return rng.integers(1, 4, size=shape).astype(str(tensor.dtype))
        return rng.normal(size=shape).astype("float32")

    return keras.tree.map_structure(one, model.input)


@pytest.mark.parametrize("name", list(SCORED))
def test_the_saved_model_predicts_as_the_trained_one_and_evaluate_scores_what_train_reported(
        name, small_data, tmp_path, capsys, monkeypatch):  # noqa: F811
    from applications import demo as demo_module
    from applications.text_classification import recipe

    saved = {}
    original = demo_module.save_atomically

    def recording(model, path):
        saved["model"], saved["path"] = model, path
        return original(model, path)

    monkeypatch.setattr(demo_module, "save_atomically", recording)
    monkeypatch.setattr(recipe, "save_atomically", recording)
    run_dir = tmp_path / "run"
    options = DEMO_TRAIN if name == "demo" else tiny(name, small_data)
    code = cli.main(["train", name, *options, "--epochs", "1", "--quiet", "--run-dir", str(run_dir)])
    assert code == 0, capsys.readouterr().err
    assert saved["path"] == str(run_dir / "model.keras")
    trained = json.loads((run_dir / "metrics.json").read_text())
    inputs = _inputs_like(saved["model"])
    loaded = keras.saving.load_model(run_dir / "model.keras")
    got, want = loaded(inputs, training=False), saved["model"](inputs, training=False)
    assert keras.tree.flatten(keras.tree.map_structure(lambda x: None, got)) == keras.tree.flatten(
        keras.tree.map_structure(lambda x: None, want))
    for a, b in zip(keras.tree.flatten(got), keras.tree.flatten(want), strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b),
                                   rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    evaluate = [] if name == "demo" else tiny(name, small_data, TINY_EVALUATE)
    assert cli.main(["evaluate", name, *evaluate, "--model", str(run_dir / "model.keras"), "--quiet"]) == 0
    scored = json.loads(capsys.readouterr().out)
    for key in SCORED[name]:
        assert scored[key] == pytest.approx(trained[key], rel=1e-5, abs=1e-6), (key, scored, trained)
