"""keras-capsules tune: every tuner runs a tiny search; a stopped search resumes."""

import contextlib
import io
import json
import os
import re
import shutil

import keras
import keras_tuner
import numpy as np
import pytest

import tuning
from applications import __main__ as cli
from applications import distribute
from tests.conftest import shared_path
from tests.harness import two_cpu_strategy
from tuning.demo import DemoHyperModel

TINY = ["--limit", "120", "--epochs", "1", "--batch-size", "32", "--quiet"]
# TINY's 77 training digits in one batch an epoch (in batches of 32 the last one is
# smaller: a traced trial traced its train step twice); still 19 validation digits, a
# batch that two replicas do not divide (keras-team/keras#19246, distribute.py)
ONE_BATCH = ["--limit", "120", "--epochs", "1", "--batch-size", "80", "--quiet"]


def test_registry_and_search_space():
    assert "demo" in tuning.HYPERMODELS and tuning.HYPERMODELS["demo"] is DemoHyperModel
    hp = keras_tuner.HyperParameters()
    model = DemoHyperModel(limit=40).build(hp)
    assert isinstance(model, keras.Model)
    assert {"n_iters", "hidden_capsules", "pose_size", "filters", "learning_rate"} <= set(hp.values)
    n_iters = hp.space[[p.name for p in hp.space].index("n_iters")]
    assert (hp.get("n_iters"), n_iters.min_value, n_iters.max_value) == (2, 2, 3)


def _trials(directory):
    project = os.path.join(directory, "demo")
    return sorted(p for p in os.listdir(project) if p.startswith("trial_"))


@pytest.fixture(scope="module")
def _one_demo_search(tmp_path_factory):
    """Holds the one-trial random demo search (TINY) of :func:`demo_search` once it has run."""
    return {"root": tmp_path_factory.mktemp("one_demo_search")}


@pytest.fixture
def demo_search(_one_demo_search, tmp_path):
    """``tmp_path / "search"``: a copy of one finished ``tune demo --tuner random --max-trials 1``
    search (TINY), run once per module (in the first test that asks, eagerly as the tests
    that read it). Each test changes its own copy only. Returns ``(exit code, stdout)`` of
    that first run."""
    if "out" not in _one_demo_search:
        directory = _one_demo_search["root"] / "search"
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = cli.main(["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1",
                             *TINY])
        _one_demo_search.update(code=code, out=out.getvalue())
    shutil.copytree(_one_demo_search["root"] / "search", tmp_path / "search")
    return _one_demo_search["code"], _one_demo_search["out"]


# bayesian: the sst and music searches of test_hypermodels. The random search runs traced
# under a MirroredStrategy (graph_mode); Hyperband's trials run eagerly, as the other
# tests' (conftest.py)
@pytest.mark.parametrize("tuner", ["hyperband", pytest.param("random", marks=pytest.mark.graph_mode)])
def test_tiny_search_writes_best_model_and_hyperparameters(tuner, tmp_path, capsys, monkeypatch):
    options = []
    if tuner == "random":  # one tuner under a tf.distribute strategy
        monkeypatch.setitem(distribute._CACHE, "mirrored", two_cpu_strategy())
        options = ["--strategy", "mirrored"]
    directory = str(tmp_path / "search")
    code = cli.main(["tune", "demo", "--tuner", tuner, "--directory", directory, "--max-trials", "2",
                     *ONE_BATCH, *options])
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "2 new trial(s), 2 in total" in out
    assert len(_trials(directory)) == 2
    best = json.loads((tmp_path / "search" / "best_hyperparameters.json").read_text())
    # the score in four significant digits (it was printed as float32's 0.2291666716337204)
    assert f"; best val_accuracy {best['best_score']:.4g}\n" in out, out
    assert best["objective"] == "val_accuracy" and 2 <= best["hyperparameters"]["n_iters"] <= 3
    # The model's hyperparameters only: Hyperband's "tuner/epochs", "tuner/bracket", ...
    # were among them (its bookkeeping goes under "tuner"), and they build the model.
    hp = keras_tuner.HyperParameters()
    DemoHyperModel(limit=40).build(hp)
    assert set(best["hyperparameters"]) == set(hp.values), best
    if tuner == "hyperband":
        assert {"epochs", "initial_epoch", "bracket", "round"} <= set(best["tuner"]) <= {
            "epochs", "initial_epoch", "bracket", "round", "trial_id"}, best
        assert 1 <= best["tuner"]["epochs"] <= 2
    else:
        assert "tuner" not in best
    rebuilt = keras_tuner.HyperParameters()
    for name, value in best["hyperparameters"].items():
        rebuilt.Fixed(name, value)
    model = keras.saving.load_model(tmp_path / "search" / "best_model.keras")
    assert model.output_shape == (None, 10)
    trained = DemoHyperModel(limit=40).build(rebuilt)
    assert trained.count_params() == model.count_params()
    # the best trial's trained weights, not a fresh model with its hyperparameters
    trained.load_weights(tmp_path / "search" / "demo" / f"trial_{best['trial_id']}" / "checkpoint.weights.h5")
    for got, want in zip(model.weights, trained.weights, strict=True):
        np.testing.assert_array_equal(got, want, err_msg=got.path)


def test_a_stopped_search_resumes(demo_search, tmp_path, capsys):
    directory = str(tmp_path / "search")
    base = ["tune", "demo", "--tuner", "random", "--directory", directory, *TINY]
    code, out = demo_search  # [*base, "--max-trials", "1"]
    assert code == 0
    assert "1 new trial(s), 1 in total" in out
    first = _trials(directory)
    assert cli.main([*base, "--max-trials", "2"]) == 0
    out = capsys.readouterr().out
    assert "1 new trial(s), 2 in total" in out
    assert "Reloading Tuner" not in out  # keras-tuner's line, not with --quiet (helper-182)
    assert len(_trials(directory)) == 2 and set(first) <= set(_trials(directory))


def test_too_few_demo_examples_fail_before_any_trial(tmp_path, capsys):
    # Audit 5: `tune demo --limit 2` ran trials on an empty validation split; each
    # failed in Keras ("not enough values to unpack") and keras-tuner gave up with tracebacks.
    argv = ["tune", "demo", "--limit", "2", "--tuner", "random", "--max-trials", "1", "--epochs", "1",
            "--directory", str(tmp_path / "t"), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: 2 example(s) are too few") and err.count("\n") == 1
    assert not (tmp_path / "t").exists()  # no trial ran


class _ScoredHyperModel(keras_tuner.HyperModel):
    """A one-weight model whose 'training' reports the next of ``scores`` as val_loss."""

    def __init__(self, scores):
        super().__init__()
        self.scores = list(scores)

    def build(self, hp):
        hp.Int("unit", 1, 100)
        return keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])

    def fit(self, hp, model, *args, callbacks=None, **kwargs):
        model.compile("sgd", "mse")  # one real epoch, so the tuner's callback saves the weights
        model.fit(np.zeros((2, 1)), np.zeros((2, 1)), epochs=1, verbose=0, callbacks=callbacks)
        return {"val_loss": self.scores.pop(0)}


def _scored_search(tmp_path, scores):
    from tuning import search

    tuner = search.make_tuner("random", _ScoredHyperModel(scores), str(tmp_path / "s"), "scored",
                              max_trials=len(scores), objective=keras_tuner.Objective("val_loss", "min"))
    tuner.search(verbose=0)
    return search, tuner


def test_hyperband_runs_max_trials_trials_also_on_a_resume(tmp_path):
    # Audit (2026-11-30): Hyperband ran keras-tuner's one iteration (one sweep of its
    # brackets: 2 trials at --epochs 1) and stopped, under --max-trials 3 and on a
    # resume with a larger one, saying nothing.
    from tuning import search

    def search_to(max_trials):
        tuner = search.make_tuner("hyperband", _ScoredHyperModel([0.5] * 20), str(tmp_path / "s"), "hb",
                                  max_trials=max_trials, epochs=1,
                                  objective=keras_tuner.Objective("val_loss", "min"))
        tuner.search(verbose=0)
        return len(search._finished(tuner))

    assert search_to(3) == 3
    assert search_to(5) == 5


def test_export_best_passes_over_a_diverged_trial(tmp_path):
    # keras-tuner ranks the scores as they are: a trial whose loss went to -inf was
    # exported as the best, and "best_score": -Infinity written into the JSON file.
    search, tuner = _scored_search(tmp_path, [float("-inf"), 0.5, 0.25])
    summary = search.export_best(tuner, str(tmp_path))
    assert summary["best_score"] == 0.25
    best = json.loads((tmp_path / "best_hyperparameters.json").read_text(), parse_constant=pytest.fail)
    assert best["best_score"] == 0.25 and best["trial_id"] == summary["trial_id"] == "2"
    assert keras.saving.load_model(tmp_path / "best_model.keras").output_shape == (None, 1)


def test_of_equal_scores_the_first_trial_is_the_best_in_any_order_of_the_trials(tmp_path):
    # audit 5: ties went to the first trial in oracle.trials, which a resumed tuner
    # fills in the file system's order (trial_1 before trial_0 here): a rerun that added
    # no trial rewrote best_model.keras with another trial than the search had exported.
    search, tuner = _scored_search(tmp_path, [0.5, 0.25, 0.25, 0.75])
    assert search.best_trial(tuner).trial_id == "1"
    tuner.oracle.trials = dict(reversed(tuner.oracle.trials.items()))
    assert search.best_trial(tuner).trial_id == "1"


@pytest.mark.parametrize("scores, reason", [
    ([float("nan"), float("nan")], "no trial finished"),  # keras-tuner marks NaN trials failed
    ([float("inf"), float("-inf")], "all 2 finished trial.*non-finite objective"),
])
def test_a_search_without_a_finite_score_has_no_best_trial(scores, reason, tmp_path):
    # Before: "the search finished no trial" as a RuntimeError traceback (all NaN), or a
    # diverged model exported as the best with an infinite score in the JSON file.
    from applications.errors import CommandLineError

    search, tuner = _scored_search(tmp_path, scores)
    with pytest.raises(CommandLineError, match=f"has no best trial: {reason}.*--overwrite"):
        search.export_best(tuner, str(tmp_path))
    assert not (tmp_path / "best_hyperparameters.json").exists()


class _SpaceHyperModel(keras_tuner.HyperModel):
    def build(self, hp):
        hp.Int("layers", 1, 3)
        hp.Float("rate", 0.0, 0.5)
        hp.Choice("cell", ["gated", "lstm"])
        hp.Choice("width", [32, 64])
        hp.Boolean("gate")
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def test_a_fixed_value_the_model_cannot_be_built_with_is_one_line(tmp_path, capsys):
    # audit (2026-11-27): checked for its type only, n_iters=0 reached keras-tuner's first
    # build, whose ValueError ended `tune` with a traceback (exit 1) and left the folder
    from applications import __main__ as cli

    directory = tmp_path / "t"
    argv = ["tune", "demo", "--fixed", "n_iters=0", "--limit", "120", "--epochs", "1", "--max-trials", "2",
            "--tuner", "random", "--directory", str(directory), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--fixed n_iters=0: the model cannot be built with these values" in err
    assert "Received: n_iters=0" in err and err.count("\n") == 1
    assert not directory.exists()


@pytest.mark.parametrize("text, expected", [
    ("layers=2.5", "an integer"), ("layers=two", "an integer"), ("rate=fast", "a finite number"),
    ("cell=gru", "one of gated, lstm"), ("width=48.5", "an integer"), ("gate=1", "true or false"),
])
def test_a_fixed_value_the_space_cannot_take_is_refused(text, expected):
    # a wrong-typed or unknown-word pin was accepted: every trial then failed (a traceback each)
    # or the value was used as it came (levels=2.5 sliced a list, encoder=gru built nothing)
    from applications.errors import CommandLineError
    from tuning import search

    with pytest.raises(CommandLineError, match=f"--fixed {text.split('=')[0]}: expected {expected}"):
        search.fixed_hyperparameters(_SpaceHyperModel(), [text])
    # numbers outside the searched range stay allowed (a smaller model for a quick search)
    fixed = search.fixed_hyperparameters(_SpaceHyperModel(), ["layers=8", "rate=0", "width=8", "gate=false",
                                                              "cell=lstm"])
    assert fixed.values == {"layers": 8, "rate": 0, "width": 8, "gate": False, "cell": "lstm"}


def test_a_hyperparameter_fixed_twice_to_other_values_is_refused():
    # audit s83: `--fixed layers=2 --fixed layers=3` searched with layers=3, without a word
    from applications.errors import CommandLineError
    from tuning import search

    with pytest.raises(CommandLineError, match="^--fixed layers given twice, with other values: layers=2 and layers=3$"):
        search.fixed_hyperparameters(_SpaceHyperModel(), ["layers=2", "rate=0", "layers=3"])
    # the same value twice is no contradiction
    fixed = search.fixed_hyperparameters(_SpaceHyperModel(), ["layers=2", "layers=2"])
    assert fixed.values["layers"] == 2


class _LevelsHyperModel(keras_tuner.HyperModel):
    """A space whose ``width_1`` only the models of ``levels`` 2 and 3 use (as music's ``units_1``)."""

    def build(self, hp):
        hp.Int("levels", 1, 3)
        hp.Float("rate", 0.0, 0.5)
        with hp.conditional_scope("levels", [2, 3]):
            hp.Choice("width_1", [32, 64])
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


@pytest.mark.parametrize("kind", ["random", "bayesian"])
def test_a_pinned_conditional_entry_keeps_its_value_in_the_trials_that_use_it(kind, tmp_path):
    # --fixed width_1=8 was an unconditional entry beside the HyperModel's conditional
    # one: the trials that used width_1 got the width drawn for that one (32 or 64)
    from tuning import search

    fixed = search.fixed_hyperparameters(_LevelsHyperModel(), ["width_1=8"])
    tuner = search.make_tuner(kind, _LevelsHyperModel(), str(tmp_path), "p", max_trials=8, seed=0,
                              hyperparameters=fixed)
    trials = []
    for _ in range(8):
        trial = tuner.oracle.create_trial("tuner0")
        trials.append(dict(trial.hyperparameters.values))
        tuner.oracle.end_trial(trial)
    assert {values["levels"] for values in trials} == {1, 2, 3}
    for values in trials:
        assert values.get("width_1") == (8 if values["levels"] >= 2 else None), values
    # what the search records as its --fixed (and checks a resume against): the pinned
    # entries only, not the parents that come before them in the space
    assert search.pinned_values(fixed) == {"width_1": 8}


def test_a_pinned_conditional_entry_that_its_pinned_parent_never_uses_is_refused():
    # --fixed levels=1 --fixed width_1=8: no trial builds a second level, and the pin
    # was accepted and then ignored in every trial
    from applications.errors import CommandLineError
    from tuning import search

    with pytest.raises(CommandLineError, match=r"--fixed width_1=8: never used with levels=1 "
                                               r"\(it is used where levels in \[2, 3\]\)"):
        search.fixed_hyperparameters(_LevelsHyperModel(), ["levels=1", "width_1=8"])
    fixed = search.fixed_hyperparameters(_LevelsHyperModel(), ["levels=2", "width_1=8"])
    assert search.pinned_values(fixed) == {"levels": 2, "width_1": 8}


def test_a_search_on_two_workers_finishes_and_each_writes_its_own_folder(tmp_path):
    # Before: both workers wrote their tuner state into one --directory (the second
    # resumed the first's search and ran another trial: the collectives failed on
    # mismatched shapes), with seed 0 keras-tuner drew a random seed per worker (the
    # same failure), and fit under MultiWorkerMirroredStrategy lacked Keras' fixes (now
    # distribute.install_multi_worker_fixes, installed with the strategy).
    from tests.applications import cli_helpers

    directory = tmp_path / "search"  # one folder, as on a shared file system
    options = ["demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1", *TINY]
    cli_helpers.run_workers(lambda index: ["tests/tuning/multiworker_tune_worker.py", *options], tmp_path)
    chief = json.loads((directory / "best_hyperparameters.json").read_text())
    worker = json.loads((directory / "workers" / "worker-1" / "best_hyperparameters.json").read_text())
    assert np.isfinite(chief["best_score"]) and chief == worker  # the same trials, in step
    assert keras.saving.load_model(directory / "best_model.keras").output_shape == (None, 10)
    assert (directory / "demo" / "oracle.json").exists()
    assert (directory / "workers" / "worker-1" / "demo" / "oracle.json").exists()
    assert not (directory / "workers" / "worker-1" / "best_model.keras").exists()  # weights: chief only


@pytest.mark.parametrize("kind", ["random", "bayesian", "hyperband"])
def test_seed_zero_draws_the_same_trials_every_time(kind, tmp_path):
    # keras-tuner reads seed=0 (--seed's default) as "no seed" and draws a random one:
    # two searches with the default seed drew different trials.
    from tuning import search

    def first_values(name):
        tuner = search.make_tuner(kind, _SpaceHyperModel(), str(tmp_path / name), "p", max_trials=3, seed=0)
        tuner.oracle.create_trial("tuner0")  # the first trial of a fresh search takes the defaults
        tuner.oracle.end_trial(tuner.oracle.ongoing_trials["tuner0"])
        return tuner.oracle.create_trial("tuner0").hyperparameters.values

    assert first_values("a") == first_values("b")


def test_a_search_resumes_only_with_the_options_it_was_started_with(tmp_path, capsys):
    # keras-tuner restores the saved oracle: another --tuner failed with a RuntimeError
    # traceback ("Error reloading `Oracle`", random -> bayesian) and a new --fixed value
    # was silently ignored (the trials kept the old one).
    directory = str(tmp_path / "search")
    base = ["tune", "demo", "--directory", directory, "--max-trials", "1", *TINY]
    assert cli.main([*base, "--tuner", "random", "--fixed", "n_iters=2"]) == 0
    capsys.readouterr()
    for changed, option in ((["--tuner", "bayesian", "--fixed", "n_iters=2"], "--tuner random"),
                            (["--tuner", "random", "--fixed", "n_iters=3"], "--fixed n_iters=2"),
                            (["--tuner", "random"], "--fixed n_iters=2")):
        assert cli.main([*base, *changed]) == 2
        err = capsys.readouterr().err
        assert err.startswith("keras-capsules: error: the search in") and err.count("\n") == 1, err
        assert f"was started with {option}:" in err and "--overwrite" in err
    assert cli.main([*base, "--tuner", "random", "--fixed", "n_iters=2"]) == 0  # the same options resume
    assert "0 new trial(s), 1 in total" in capsys.readouterr().out


def test_a_search_resumes_only_with_the_data_options_it_was_started_with(demo_search, tmp_path, capsys, monkeypatch):
    # audit 5: a resume with another --seed, --limit or --batch-size was accepted in
    # silence: the new trials trained and were scored on other examples (another split,
    # 60 validation digits against 19) and ranked against the old ones.
    directory = str(tmp_path / "search")
    base = ["tune", "demo", "--tuner", "random", "--directory", directory, "--epochs", "1", "--quiet"]
    assert demo_search[0] == 0  # [*base, "--max-trials", "1", "--limit", "120", "--batch-size", "32"]
    changed = ["--max-trials", "2", "--limit", "300", "--batch-size", "32", "--seed", "5"]
    assert cli.main([*base, *changed]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: the search in") and err.count("\n") == 1, err
    assert "was started with --limit 120, --seed 0:" in err and "--overwrite" in err, err
    assert "--batch-size" not in err  # unchanged
    assert len(_trials(directory)) == 1  # no trial ran
    # refused before the data are prepared (helper-182: after them, 25 s for a small SST
    # search, hours for CLEVR's features)
    import tuning

    monkeypatch.setattr(tuning.HYPERMODELS["demo"], "prepare", lambda self: pytest.fail("the data were prepared"))
    assert cli.main([*base, *changed]) == 2
    assert "was started with --limit 120, --seed 0:" in capsys.readouterr().err
    with open(os.path.join(directory, "demo", "keras_capsules_search.json")) as f:
        assert json.load(f)["options"] == {"batch_size": 32, "data_fingerprint": {"data": "scikit-learn's 8x8 digits"},
                                           "limit": 120, "seed": 0}  # kept


def test_a_search_resumes_only_on_the_data_it_was_started_on(demo_search, tmp_path, capsys):
    # Audit s69: a demo search on the 8x8 digits resumed with --data-dir MNIST was
    # accepted: the new trials were ranked against the old ones, and the metrics.json
    # beside the best model (trained on the 8x8 digits) named MNIST's split, which
    # `evaluate` then scored it on.
    directory = str(tmp_path / "search")
    base = ["tune", "demo", "--tuner", "random", "--directory", directory, *TINY]
    assert demo_search[0] == 0  # [*base, "--max-trials", "1"]
    assert cli.main([*base, "--max-trials", "2", "--data-dir", str(shared_path("data", "mnist"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: the search in") and err.count("\n") == 1, err
    assert (f"was started on scikit-learn's 8x8 digits; {shared_path('data', 'mnist')} holds other data "
            "(MNIST IDX files): resume it with the same data (in any folder)") in err, err
    assert len(_trials(directory)) == 1  # no trial ran


def test_a_search_resumes_on_its_data_in_another_folder_and_not_on_other_data(tmp_path, capsys):
    # A demo search recorded its --data-dir as a path: the same MNIST files in another
    # folder were refused, and occluded_mnist's and textured_mnist's other folders
    # (other digits) were not even compared (test_an_idx_search_...). Now the search
    # records the files' fingerprint (their names, sizes and SHA-256).
    from tests.applications.mnist_folders import mnist_folder, other_t10k_folder

    first, other = mnist_folder(tmp_path / "first"), other_t10k_folder(tmp_path / "other")
    directory = str(tmp_path / "search")
    base = ["tune", "demo", "--tuner", "random", "--directory", directory, *TINY]
    assert cli.main([*base, "--max-trials", "1", "--data-dir", str(first)]) == 0
    moved = tmp_path / "moved"
    os.rename(first, moved)
    capsys.readouterr()
    assert cli.main([*base, "--max-trials", "1", "--data-dir", str(moved)]) == 0
    assert "0 new trial(s), 1 in total" in capsys.readouterr().out
    assert cli.main([*base, "--max-trials", "2", "--data-dir", str(other)]) == 2
    err = _one_error_line(capsys)
    assert (f"was started on MNIST IDX files in {moved}; {other} holds other data (MNIST IDX files, "
            "where t10k-images-idx3-ubyte.gz differs, t10k-labels-idx1-ubyte.gz differs): resume it with the "
            "same data (in any folder), or start it afresh with --overwrite") in err, err
    assert len(_trials(directory)) == 1  # no trial ran


def test_a_search_on_a_data_dir_resumed_without_one_says_the_default_data_are_other_data(tmp_path, capsys):
    # The refusal named "--data-dir (default)" as the folder holding other data, an option
    # the user had not given, and demo's default data (scikit-learn's digits) have no folder.
    from tests.applications.mnist_folders import mnist_folder

    first, directory = mnist_folder(tmp_path / "first"), str(tmp_path / "search")
    base = ["tune", "demo", "--tuner", "random", "--directory", directory, *TINY]
    assert cli.main([*base, "--max-trials", "1", "--data-dir", str(first)]) == 0
    capsys.readouterr()
    assert cli.main([*base, "--max-trials", "2"]) == 2
    err = _one_error_line(capsys)
    assert (f"was started on MNIST IDX files in {first}; the data chosen now are other data (scikit-learn's 8x8 "
            "digits): resume it with the same data (in any folder)") in err, err
    assert "--data-dir" not in err.split(":", 2)[2], err
    assert len(_trials(directory)) == 1  # no trial ran


def test_evaluate_of_a_searchs_best_model_refuses_other_digits_in_its_folder(tmp_path, capsys):
    # The search's metrics.json recorded the split's folder, not what it held: evaluate of
    # the best model scored other digits put there since as its test split. It records
    # the data's fingerprint now, as train does (the same files moved are the same data).
    from applications.mnist_digits import arrays_fingerprint
    from tests.applications.mnist_folders import mnist_folder, other_t10k_folder

    first, directory = mnist_folder(tmp_path / "first"), tmp_path / "search"
    assert cli.main(["tune", "demo", "--tuner", "random", "--directory", str(directory), *TINY, "--max-trials", "1",
                     "--data-dir", str(first)]) == 0
    assert json.loads((directory / "metrics.json").read_text())["data_fingerprint"] == arrays_fingerprint(first)
    model = str(directory / "best_model.keras")
    os.rename(first, tmp_path / "moved")
    capsys.readouterr()
    assert cli.main(["evaluate", "demo", "--model", model, "--data-dir", str(tmp_path / "moved")]) == 0
    other_t10k_folder(first)
    capsys.readouterr()
    assert cli.main(["evaluate", "demo", "--model", model]) == 2
    err = _one_error_line(capsys)
    assert (f"the model in {directory} was trained and tested on MNIST IDX files in {first}; {first} now holds "
            "other data") in err, err


def _idx_search_settings(application, directory, data_dir, fingerprint=True):
    """Writes the record of a search of ``application`` on the IDX folder ``data_dir`` into
    ``directory`` as ``tune`` does (with the data's fingerprint, or as a search started
    before it was recorded: without, and with the folder, as demo's recorded it)."""
    from tuning import search

    args = cli.build_parser(application).parse_args(["tune", application, "--data-dir", str(data_dir)])
    options = search.search_options(args)
    if not fingerprint:
        del options["data_fingerprint"]
        options["data_dir"] = str(data_dir)
    settings = {"application": application, "tuner": "hyperband", "epochs": 3, "replicas": 1, "options": options}
    for folder in (directory, directory / application):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "keras_capsules_search.json").write_text(json.dumps(settings))


@pytest.mark.parametrize("application", ["occluded_mnist", "textured_mnist"])
def test_an_idx_search_resumes_only_on_its_digits(application, tmp_path, capsys, monkeypatch):
    # Their --data-dir was a location to the search: resumed on a folder of other digits,
    # it ranked trials trained on other digits against the first ones, silently.
    import tuning
    from applications.errors import InputError
    from tests.applications.mnist_folders import mnist_folder, other_t10k_folder

    def prepared(self):  # (the resume check comes before the data are prepared: no trial runs)
        raise InputError("the data were prepared")

    monkeypatch.setattr(tuning.HYPERMODELS[application], "prepare", prepared)
    first, other = mnist_folder(tmp_path / "first"), other_t10k_folder(tmp_path / "other")
    directory = tmp_path / "search"
    _idx_search_settings(application, directory, first)
    base = ["tune", application, "--directory", str(directory), "--data-dir"]
    assert cli.main([*base, str(other)]) == 2
    err = _one_error_line(capsys)
    assert f"was started on MNIST IDX files in {first}; {other} holds other data" in err, err
    shutil.copytree(first, tmp_path / "copy")
    assert cli.main([*base, str(tmp_path / "copy")]) == 2  # the same files elsewhere: resumed
    assert "the data were prepared" in _one_error_line(capsys)
    _idx_search_settings(application, directory, first, fingerprint=False)  # as an older version wrote it
    assert cli.main([*base, str(other)]) == 2
    assert "the data were prepared" in _one_error_line(capsys)


def test_the_same_seed_builds_the_same_initial_model():
    # audit 5: the trials' initial weights came from Keras' unseeded random state (every
    # `train` seeds it; the search did not): the same `tune` command scored other values
    # on every run, and the Bayesian tuner then went on to other trials.
    hp = keras_tuner.HyperParameters()
    hypermodel = DemoHyperModel(limit=40, seed=3)
    first = [np.asarray(w) for w in hypermodel.build(hp).weights]
    np.random.rand(), keras.random.normal((2,))  # other draws in between
    second = [np.asarray(w) for w in hypermodel.build(hp).weights]
    for got, want in zip(second, first, strict=True):
        np.testing.assert_array_equal(got, want)
    other = [np.asarray(w) for w in DemoHyperModel(limit=40, seed=4).build(hp).weights]
    assert any(not np.array_equal(a, b) for a, b in zip(other, first, strict=True))


def test_a_copy_of_a_hypermodel_builds_with_its_own_seed_and_it_pickles():
    # The seeding wrapper of `build` was a closure over the instance it was made for: a
    # deep copy built the original's model (its seed, `tunable` and data), and pickling
    # failed ("Can't pickle local object ... seeded_build").
    import copy
    import pickle

    def initial_weights(hypermodel, hp=None):
        return [np.asarray(w) for w in hypermodel.build(hp or keras_tuner.HyperParameters()).weights]

    original = DemoHyperModel(limit=40, seed=3)
    other = copy.deepcopy(original)
    other.seed = 4
    for got, want in zip(initial_weights(other), initial_weights(DemoHyperModel(limit=40, seed=4)), strict=True):
        np.testing.assert_array_equal(got, want)
    other.tunable = False  # keras-tuner's wrapper then builds on a copy of `hp`
    hp = keras_tuner.HyperParameters()
    initial_weights(other, hp)
    assert hp.values == {}
    restored = pickle.loads(pickle.dumps(original))
    assert restored.seed == 3
    for got, want in zip(initial_weights(restored), initial_weights(original), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_diverged_trial_fails_and_is_never_the_best_model(tmp_path, capsys):
    # audit 5: with NaN weights a model still has a finite val_accuracy (it always guesses
    # one class): a diverged trial completed with that score ("best val_accuracy 0.125")
    # and its NaN weights were written as best_model.keras, exit code 0.
    directory = tmp_path / "search"
    argv = ["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1",
            "--fixed", "learning_rate=1e30", *TINY]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("keras-capsules: error: the search in") and "has no best trial" in err[-1], err
    assert not (directory / "best_model.keras").exists()
    assert not (directory / "best_hyperparameters.json").exists()
    trial = json.loads((directory / "demo" / "trial_0" / "trial.json").read_text())
    assert trial["status"] == "FAILED" and "the training diverged (loss nan" in trial["message"], trial
    # weights that became NaN in an epoch's last step (its loss still finite) fail it too
    from tuning.base import FailDivergedTrial

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.layers[0].kernel.assign([[float("nan")]])
    callback = FailDivergedTrial()
    callback.set_model(model)
    with pytest.raises(keras_tuner.errors.FailedTrialError, match="weight .*kernel is NaN or infinite"):
        callback.on_epoch_end(0, {"loss": 0.5, "val_accuracy": 0.1})


def test_overwrite_never_leaves_the_old_searchs_best_model(demo_search, tmp_path, capsys):
    # audit 5: --overwrite deleted the old trials but kept best_model.keras and
    # best_hyperparameters.json; a new search that found no best trial (or was stopped)
    # left them, as if they were its own (a trial_id that no longer exists).
    directory = tmp_path / "search"
    base = ["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1", *TINY]
    assert demo_search[0] == 0  # base
    assert (directory / "best_model.keras").exists() and (directory / "best_hyperparameters.json").exists()
    assert (directory / "metrics.json").exists()
    capsys.readouterr()
    assert cli.main([*base, "--overwrite", "--fixed", "learning_rate=1e30"]) == 2  # its trial diverges
    assert "has no best trial" in capsys.readouterr().err
    assert not (directory / "best_model.keras").exists()
    assert not (directory / "best_hyperparameters.json").exists()
    assert not (directory / "metrics.json").exists()  # (the old best model's)


JSB_DIR = str(shared_path("data", "jsb_chorales"))
# a tiny music search (tests/tuning/test_hypermodels.py; 42 training windows: one batch)
MUSIC = ["--data-dir", JSB_DIR, "--limit", "4", "--window", "8", "--batch-size", "48", "--epochs", "1", "--quiet",
         "--fixed", "levels=1", "--fixed", "units_0=8"]


def _one_error_line(capsys):
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: ") and err.count("\n") == 1, err
    return err


def test_a_directory_that_holds_another_applications_search_is_refused(demo_search, tmp_path, capsys):
    # Two applications tuned into one --directory shared best_model.keras and
    # best_hyperparameters.json: the second search silently replaced the first's.
    directory = tmp_path / "search"
    demo = ["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1", *TINY]
    music = ["tune", "music", "--tuner", "random", "--directory", str(directory), "--max-trials", "1", *MUSIC]
    assert demo_search[0] == 0  # demo
    best = (directory / "best_hyperparameters.json").read_text()
    assert cli.main(music) == 2
    err = _one_error_line(capsys)
    assert f"{directory} holds the search of demo ({directory / 'demo'})" in err, err
    assert "tune music into another --directory, or replace them with --overwrite" in err, err
    assert not (directory / "music").exists()  # refused before anything ran
    assert (directory / "best_hyperparameters.json").read_text() == best
    assert keras.saving.load_model(directory / "best_model.keras").output_shape == (None, 10)
    # a search started before the directory recorded its application: its project folder tells
    (directory / "keras_capsules_search.json").unlink()
    (directory / "metrics.json").unlink()  # (that search wrote none)
    assert cli.main(music) == 2
    assert "holds the search of demo" in _one_error_line(capsys)
    # --overwrite replaces the demo's best files; the demo search then is the other one
    assert cli.main([*music, "--overwrite"]) == 0
    capsys.readouterr()
    assert keras.saving.load_model(directory / "best_model.keras").output_shape == (None, 8, 88)
    assert json.loads((directory / "metrics.json").read_text())["objective"] == "val_nll_per_step"
    assert cli.main(demo) == 2
    assert "holds the search of music" in _one_error_line(capsys)
    assert cli.main(music) == 0  # its own search resumes
    assert "0 new trial(s), 1 in total" in capsys.readouterr().out


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_directory_with_a_metrics_json_no_search_wrote_is_refused(overwrite, tmp_path, capsys):
    # the search now writes metrics.json beside its best model: into a `train` run's folder
    # it replaced the record that `evaluate` of the run's model.keras reads
    directory = tmp_path / "run"
    directory.mkdir()
    recorded = '{"test_accuracy": 0.5, "split": {"seed": 3, "data_dir": null, "limit": 120}}'
    (directory / "metrics.json").write_text(recorded)
    argv = ["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1", *TINY]
    assert cli.main([*argv, *overwrite]) == 2
    err = _one_error_line(capsys)
    assert f"{directory / 'metrics.json'} was not written by a search" in err, err
    assert (directory / "metrics.json").read_text() == recorded
    assert sorted(p.name for p in directory.iterdir()) == ["metrics.json"]


def test_hyperband_under_many_workers_is_refused_before_any_trial(tmp_path, capsys, monkeypatch):
    # Hyperband's second round loads an earlier trial's checkpoint, which keras-tuner
    # writes on the chief only: on two workers that trial failed on worker 1
    # (FileNotFoundError: .../workers/worker-1/demo/trial_0/checkpoint.weights.h5)
    # and, its collectives broken, on the chief too.
    class _Extended:
        def _in_multi_worker_mode(self):
            return True

    class _ManyWorkers:  # what make_strategy("multiworker") returns, as far as `tune` looks
        extended, num_replicas_in_sync = _Extended(), 2

    monkeypatch.setitem(distribute._CACHE, "multiworker", _ManyWorkers())
    directory = tmp_path / "search"
    code = cli.main(["tune", "demo", "--tuner", "hyperband", "--strategy", "multiworker", "--directory",
                     str(directory), "--max-trials", "4", *TINY])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("keras-capsules: error: --tuner hyperband cannot search under --strategy multiworker")
    assert not directory.exists()


class _DataHyperModel(_SpaceHyperModel):
    """A space whose ``alpha`` only the datasets read (as smallnorb's and sst's mixup_alpha)."""

    def prepare(self):
        return None

    def datasets(self, hp, data):
        alpha = hp.Float("alpha", 0.0, 0.4)
        if alpha < 0:
            raise ValueError(f"`alpha` must be >= 0. Received: alpha={alpha}")
        return None, None

    def build(self, hp):
        hp.Float("alpha", 0.0, 0.4)
        return super().build(hp)


def test_a_fixed_value_only_the_datasets_read_is_checked_before_the_search():
    # mixup_alpha=-0.5 passed the build check: every trial failed with a traceback, and
    # after three keras-tuner's RuntimeError escaped `tune`
    from applications.errors import CommandLineError
    from tuning import search

    with pytest.raises(CommandLineError, match=r"--fixed alpha=-0.5: .*Received: alpha=-0.5"):
        search.fixed_hyperparameters(_DataHyperModel(), ["alpha=-0.5"])
    assert search.fixed_hyperparameters(_DataHyperModel(), ["alpha=0.2"]).values == {"alpha": 0.2}


def test_trials_that_fail_in_a_row_end_the_search_in_one_line(tmp_path, capsys, monkeypatch):
    # keras-tuner stops after 3 trials in a row failed with its own RuntimeError, which
    # ended `tune` with a traceback and exit 1.
    def fit(self, hp, model, *args, **kwargs):
        raise ValueError("boom (simulated)")

    monkeypatch.setattr(DemoHyperModel, "fit", fit)
    directory = tmp_path / "search"
    code = cli.main(["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "5", *TINY])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.splitlines()[-1].startswith("keras-capsules: error: the search in"), err
    assert "3 trials in a row failed, the last with ValueError: boom (simulated)" in err.splitlines()[-1]
    assert "Traceback" not in err.splitlines()[-1]


def test_the_trials_of_these_tests_run_eagerly():  # tests/tuning/conftest.py
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        assert tf.config.functions_run_eagerly()


@pytest.mark.graph_mode
def test_a_graph_mode_test_traces():
    import tensorflow as tf

    assert not tf.config.functions_run_eagerly()


@pytest.mark.parametrize("damage", [b"{\"application\": \"demo\", \"tun", b"\xff\xfe not text", b"[1, 2]"])
def test_a_damaged_search_record_is_one_line_and_overwrite_starts_afresh(damage, demo_search, tmp_path, capsys):
    # A keras_capsules_search.json that is not the JSON object a search writes (a
    # crash of an older version, a full disk, a hand edit) ended `tune` in a traceback.
    directory = tmp_path / "search"
    argv = ["tune", "demo", "--tuner", "random", "--directory", str(directory), "--max-trials", "1", *TINY]
    assert demo_search[0] == 0  # argv
    for record in (directory / "demo" / "keras_capsules_search.json", directory / "keras_capsules_search.json"):
        kept = record.read_bytes()
        record.write_bytes(damage)
        assert cli.main(argv) == 2
        err = _one_error_line(capsys)
        assert f"{record} is damaged" in err and "--overwrite" in err, err
        assert record.read_bytes() == damage  # nothing was changed
        record.write_bytes(kept)
    (directory / "keras_capsules_search.json").write_bytes(damage)
    (directory / "demo" / "keras_capsules_search.json").write_bytes(damage)
    assert cli.main([*argv, "--overwrite"]) == 0
    capsys.readouterr()
    assert json.loads((directory / "keras_capsules_search.json").read_text())["application"] == "demo"
    assert cli.main(argv) == 0  # and the new search resumes
    assert "0 new trial(s), 1 in total" in capsys.readouterr().out


def test_hyperband_later_rounds_start_from_earlier_weights_without_a_warning(tmp_path, capsys):
    # Audit s65: every trial of a later round printed Keras' "Skipping variable loading
    # for optimizer 'adam', because it has 2 variables whereas the saved optimizer has
    # 54", which read as lost state; the fresh optimizer is the intent (trial_epochs).
    # (Its trials run eagerly: the warning comes from loading the checkpoint, traced or not;
    # one training batch of 26 digits an epoch.)
    import warnings

    directory = str(tmp_path / "search")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli.main(["tune", "demo", "--tuner", "hyperband", "--directory", directory, "--max-trials", "4",
                         "--limit", "40", "--epochs", "3", "--batch-size", "32", "--quiet"])
    assert code == 0, capsys.readouterr().err
    later = []
    for trial in _trials(directory):
        values = json.loads((tmp_path / "search" / "demo" / trial / "trial.json").read_text())["hyperparameters"]["values"]
        later += [values["tuner/trial_id"]] if values.get("tuner/trial_id") else []
    assert later, "no trial of a later round: the test checks nothing"
    assert not [w for w in caught if "Skipping variable loading" in str(w.message)]


def test_a_demo_trial_on_two_replicas_trains_the_one_device_model():
    # Audit s69: the demo's trials normalized each replica's half of the batch on its own
    # (demo.train synchronizes its batch normalization over the replicas): under --strategy
    # mirrored a trial trained another model than on one device (its weights differed by
    # 0.02-0.07 after one epoch), so the search ranked other models.
    import tensorflow as tf

    mirrored = two_cpu_strategy()
    hp = keras_tuner.HyperParameters()
    for name, value in dict(filters=8, primary_capsules=4, hidden_capsules=8, pose_size=2, n_iters=2,
                            learning_rate=3e-3).items():
        hp.Fixed(name, value)

    def trained(strategy, replicas):
        hypermodel = DemoHyperModel(limit=40, batch_size=16, replicas=replicas, verbose=0)  # (26 training digits: 16 + 10, the last batch splits evenly)
        with strategy.scope():
            model = hypermodel.build(hp)
        hypermodel.fit(hp, model, epochs=1, verbose=0)
        return {w.path: keras.ops.convert_to_numpy(w) for w in model.weights}

    one, two = trained(tf.distribute.get_strategy(), 1), trained(mirrored, 2)
    for path in one:
        np.testing.assert_allclose(two[path], one[path], atol=1e-4, err_msg=path)


@pytest.mark.parametrize("options, message", [
    ({"max_trials": 0}, "Received: max_trials=0"),  # keras-tuner: no limit, the search never ended
    ({"max_trials": -2}, "Received: max_trials=-2"),
    ({"max_trials": True}, "Received: max_trials=True"),
    ({"max_trials": 2.5}, "Received: max_trials=2.5"),
    ({"epochs": 0}, "Received: epochs=0"),
    ({"epochs": 2.5}, "Received: epochs=2.5"),  # Hyperband's max_epochs=2.5
    ({"seed": -1}, "Received: seed=-1"),  # keras-tuner's "no seed": a random one every run
    ({"seed": True}, "Received: seed=True"),
    ({"seed": 2.7}, "Received: seed=2.7"),
    ({"seed": 2**32}, f"Received: seed={2**32}"),
    ({"kind": "grid"}, "unknown tuner 'grid'"),
])
def test_make_tuner_refuses_bad_arguments_by_their_names(options, message, tmp_path):
    # Audit (tuning): make_tuner took them all (the command line's options are checked by
    # its parser only): max_trials=0 searched until stopped, seed=-1 drew other trials on
    # every run, 2.7 and True were taken as the seeds 2 and 1.
    from applications.errors import InputError
    from tuning import search

    arguments = {"kind": "random", "max_trials": 2, "epochs": 3, "seed": 0, **options}
    for kind in ("random", "bayesian", "hyperband") if "kind" not in options else (options["kind"],):
        arguments["kind"] = kind
        with pytest.raises(InputError, match=re.escape(message)):
            search.make_tuner(arguments["kind"], _SpaceHyperModel(), str(tmp_path / kind), "p",
                              arguments["max_trials"], epochs=arguments["epochs"], seed=arguments["seed"])
        assert not (tmp_path / kind).exists()  # refused before keras-tuner made its folder


def test_make_tuner_takes_numpy_integers(tmp_path):
    from tuning import search

    tuner = search.make_tuner("hyperband", _SpaceHyperModel(), str(tmp_path), "p", np.int64(4),
                              epochs=np.int32(3), seed=np.int64(5))
    assert (tuner.oracle.max_trials, tuner.oracle.max_epochs, tuner.oracle.seed) == (4, 3, 6)


def test_a_search_resumes_only_on_as_many_replicas_as_it_was_started_on(demo_search, tmp_path, capsys):
    # helper-182: a resume under --strategy mirrored (2 replicas: a global batch twice as
    # large, synchronized batch normalization) was accepted, its trials ranked against the
    # others. (A search of 2 replicas is written here as its settings file records it.)
    directory = tmp_path / "search"
    base = ["tune", "demo", "--tuner", "random", "--directory", str(directory), *TINY]
    assert demo_search[0] == 0  # [*base, "--max-trials", "1"]
    settings_path = directory / "demo" / "keras_capsules_search.json"
    settings = json.loads(settings_path.read_text())
    assert settings["replicas"] == 1
    settings_path.write_text(json.dumps({**settings, "replicas": 2}))
    assert cli.main([*base, "--max-trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "was started with --strategy of 2 replicas (a global batch of --batch-size times that):" in err, err
    assert len(_trials(str(directory))) == 1  # no trial ran
    # a search started before the replicas were recorded resumes as before
    settings_path.write_text(json.dumps({k: v for k, v in settings.items() if k != "replicas"}))
    assert cli.main([*base, "--max-trials", "2"]) == 0
