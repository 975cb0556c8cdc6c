"""Occluded Moving MNIST: the sequences' data options (``motion``, ``bars``, ``bar_spacing``)
through ``train``, ``evaluate``, the command line, the search and the benchmark.

``generate``'s defaults became the paper's data (a grid of bars 12 px apart, the velocities
(+-1, +-2), (+-2, +-1)); everything around it made the sequences with those defaults, so the
data of before (compass motion, vertical bars 8 px apart) could not be chosen, and
``evaluate`` of a run trained before scored it on other data than its ``train`` scored.
"""

import argparse
import json
import shutil

import numpy as np
import pytest

from applications import __main__ as cli
from applications import occluded_mnist as om
from applications.errors import InputError
from tests.applications.test_occluded_mnist import _fake_train, _rladder_benchmark
from tests.conftest import functions_eager, keras_test_state, shared_path

MNIST_DIR = str(shared_path("data", "mnist"))
# the tiny temporal baseline on 16x16 frames of the other CLI tests
TINY_CLI = ["--data-dir", MNIST_DIR, "--num-train", "8", "--num-test", "8", "--conv-units", "4", "--dense-units", "8",
            "--batch-size", "8", "--frame-size", "16", "--variant", "temporal", "--quiet"]
OLD = {"motion": "compass", "bars": "vertical", "bar_spacing": 8}
OLD_CLI = ["--motion", "compass", "--bars", "vertical", "--bar-spacing", "8"]
PAPER = {"motion": "paper", "bars": "grid", "bar_spacing": 12}


def _options(kwargs):
    """The data options among a ``generate`` call's keyword arguments (None where not passed)."""
    return {name: kwargs.get(name) for name in ("motion", "bars", "bar_spacing")}


def _record_generate(monkeypatch):
    """``[(data options, returned dict), ...]`` of every ``om.generate`` call from now on."""
    calls, generate = [], om.generate

    def recording(*args, **kwargs):
        data = generate(*args, **kwargs)
        calls.append((_options(kwargs), data))
        return data

    monkeypatch.setattr(om, "generate", recording)
    return calls


@pytest.fixture(scope="module")
def compass_run(tmp_path_factory):
    """A tiny run of ``keras-capsules train occluded_mnist`` on the data of before, and the
    data options of every ``generate`` call it made."""
    run_dir = tmp_path_factory.mktemp("compass") / "run"
    calls, generate = [], om.generate

    def recording(*args, **kwargs):
        calls.append(_options(kwargs))
        return generate(*args, **kwargs)

    om.generate = recording
    try:
        with keras_test_state(), functions_eager(True):
            assert cli.main(["train", "occluded_mnist", *TINY_CLI, *OLD_CLI, "--epochs", "1",
                             "--run-dir", str(run_dir)]) == 0
    finally:
        om.generate = generate
    return run_dir, calls


def test_cli_train_records_the_data_options_and_evaluate_scores_the_sequences_train_scored(
        compass_run, capsys, monkeypatch):
    run_dir, trained_on = compass_run
    # every sequence of the run (training and test) was made with the options given
    assert len(trained_on) == 2 and all(options == OLD for options in trained_on), trained_on
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["sequences"] == OLD
    calls = _record_generate(monkeypatch)
    capsys.readouterr()
    assert cli.main(["evaluate", "occluded_mnist", "--model", str(run_dir / "model.keras"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert err == "", err  # (no note: the options are recorded)
    assert [options for options, _ in calls] == [OLD]
    assert result["sequences"] == OLD
    assert result["test_error"] == pytest.approx(metrics["test_error"])
    scored, trained = result["test_error_per_step"], metrics["test_error_per_step"]
    assert scored["counts"] == trained["counts"] and scored["all"] == pytest.approx(trained["all"])
    # given options make other test sequences: the paper's motion has none moving only vertically
    calls.clear()
    assert cli.main(["evaluate", "occluded_mnist", "--model", str(run_dir / "model.keras"), "--quiet",
                     "--motion", "paper"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [options for options, _ in calls] == [{**OLD, "motion": "paper"}]
    assert result["sequences"] == {**OLD, "motion": "paper"}
    assert result["test_error_per_step"]["counts"]["vertical_only"] == 0
    # the help says what the defaults are
    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "train")
    assert {k: v for k, v in vars(parser.parse_args([])).items() if k in PAPER} == PAPER
    text = " ".join(parser.format_help().split())
    assert "the paper's grid of vertical and horizontal bars (grid)" in text and "(default: grid)" in text
    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "evaluate")
    assert {k: v for k, v in vars(parser.parse_args([])).items() if k in PAPER} == dict.fromkeys(PAPER)
    assert "(default: the one `train` recorded beside the model, else vertical" in " ".join(
        parser.format_help().split())


def test_evaluate_of_a_run_that_records_no_data_options_scores_the_data_of_before(
        compass_run, tmp_path, capsys, monkeypatch):
    # a run trained before the paper's data were the default records none: its sequences
    # were the compass ones, not generate's new defaults
    run_dir, _ = compass_run
    old_run = tmp_path / "old"
    shutil.copytree(run_dir, old_run)
    metrics = json.loads((old_run / "metrics.json").read_text())
    del metrics["sequences"]
    (old_run / "metrics.json").write_text(json.dumps(metrics))
    calls = _record_generate(monkeypatch)
    capsys.readouterr()
    result = om.evaluate(str(old_run / "model.keras"))
    assert "records no sequence options" in capsys.readouterr().err
    [(options, scored)] = calls
    assert options == OLD and result["sequences"] == OLD
    # the very sequences of before: generate's draws with the old options spelled out (and
    # its speed then, 3)
    _, test_digits = om._train_test_digits("idx", MNIST_DIR, 0, test_only=True)
    before = om.generate(*test_digits, 8, seed=1, frame_size=16, motion="compass", bars="vertical", bar_spacing=8,
                         speed=3)
    np.testing.assert_array_equal(scored["frames"], before["frames"])
    assert result["test_error_per_step"]["counts"] == metrics["test_error_per_step"]["counts"]
    assert result["test_error"] == pytest.approx(metrics["test_error"])


@pytest.mark.parametrize("option, value, message", [
    ("--motion", "diagonal", "argument --motion: invalid choice: 'diagonal'"),
    ("--bars", "horizontal", "argument --bars: invalid choice: 'horizontal'"),
    ("--bar-spacing", "4", "argument --bar-spacing: expected an integer >= 5, got '4'"),
])
def test_bad_data_options_are_refused_in_one_line_before_the_run_dir_is_made(option, value, message, tmp_path, capsys,
                                                                           monkeypatch):
    for command in ("train", "evaluate"):
        where = ["--run-dir", str(tmp_path / "new" / "run")] if command == "train" else ["--model", str(tmp_path)]
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "occluded_mnist", option, value, *where])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "new").exists()
    # from Python: refused before any digit is read or folder made
    monkeypatch.setattr(om, "_train_test_digits", lambda *a, **kw: pytest.fail("read the digits before checking"))
    name = option[2:].replace("-", "_")
    bad = {name: int(value) if name == "bar_spacing" else value}
    received = "bar_width=4, bar_spacing=4" if name == "bar_spacing" else f"{name}={value!r}"
    (tmp_path / "model.keras").write_bytes(b"")  # evaluate checks the options before loading it
    for call in (lambda: om.train("temporal", run_dir=str(tmp_path / "new" / "run"), **bad),
                 lambda: om.make_sequences("idx", MNIST_DIR, **bad),
                 lambda: om.make_training_dataset(np.zeros((2, 28, 28)), np.zeros(2, "int32"), 2, **bad),
                 lambda: om.evaluate(str(tmp_path / "model.keras"), **bad)):
        with pytest.raises(InputError, match=f"Received: {received}"):
            call()
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("augment, endless", [(None, False), (None, True), ("fresh", False), ("affine", True)])
def test_every_training_sequence_is_made_with_the_data_options(augment, endless, monkeypatch):
    images, labels = om.load_digits("idx", MNIST_DIR, "test")
    calls = _record_generate(monkeypatch)
    ds = om.make_training_dataset(images[:40], labels[:40], 4, "temporal", batch_size=4, augment=augment,
                                  frame_size=16, endless=endless, **OLD)
    frames, _ = next(iter(ds))
    assert frames.shape == (4, om.NUM_FRAMES, 16, 16, 1)
    assert calls and all(options == OLD for options, _ in calls), calls
    if augment is None and not endless:  # and the defaults are the paper's data (the sequences made at once:
        # an augmented stream may still draw epochs of the first dataset into its prefetch buffer)
        calls.clear()
        om.make_training_dataset(images[:40], labels[:40], 4, "temporal", batch_size=4, frame_size=16)
        assert [options for options, _ in calls] == [PAPER]


def test_a_resumed_run_refuses_another_bar_layout(tmp_path, capsys, monkeypatch):
    # the backup records every option of the command line: a rerun after a crash with
    # other bars would go on training on other data
    import keras

    from applications import fault_tolerance

    class CrashAfterEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("crash (simulated)")

    run_dir = tmp_path / "run"
    argv = ["train", "occluded_mnist", *TINY_CLI, *OLD_CLI, "--epochs", "2", "--run-dir", str(run_dir)]
    make = fault_tolerance.resumable_callbacks
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks", lambda *a, **kw: [*make(*a, **kw), CrashAfterEpoch()])
    with pytest.raises(RuntimeError, match="simulated"):
        cli.main(argv)
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks", make)
    assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1
    capsys.readouterr()
    assert cli.main([*argv, "--bars", "grid"]) == 2
    err = capsys.readouterr().err
    assert "other options: --bars vertical (now grid)" in err and err.count("\n") == 1, err
    assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1  # kept
    assert not (run_dir / "model.keras").exists()


def test_every_default_of_the_data_options_is_the_papers():
    # note 100: generate, bar_mask, check_sequence_options, make_training_dataset,
    # make_sequences and train write the defaults as literals; they must stay SEQUENCE_OPTIONS'
    import inspect

    expected = {**om.SEQUENCE_OPTIONS, "bar_width": om.BAR_WIDTH}
    found = {}
    for name, function in inspect.getmembers(om, inspect.isfunction):
        if function.__module__ != om.__name__:
            continue
        for parameter in inspect.signature(function).parameters.values():
            # (None: evaluate's "the options train recorded")
            if parameter.name in expected and parameter.default not in (inspect.Parameter.empty, None):
                found[(name, parameter.name)] = parameter.default
    assert {"generate", "bar_mask", "check_sequence_options", "make_training_dataset", "make_sequences",
            "train"} <= {name for name, _ in found}
    wrong = {key: value for key, value in found.items() if value != expected[key[1]]}
    assert not wrong, f"defaults that are not SEQUENCE_OPTIONS' / BAR_WIDTH: {wrong}"


class _Stop(Exception):
    pass


# (TensorFlow runs already in this process: the benchmarks' thread setting cannot take effect)
@pytest.mark.filterwarnings("ignore:could not set TensorFlow's intra-op threads:RuntimeWarning")
def test_the_benchmarks_pass_the_data_options_to_train_the_ablation_and_fusion(monkeypatch, capsys):
    import keras

    bench = _rladder_benchmark("rladder_benchmark_data_options")
    copies = ("MOTIONS", "BAR_LAYOUTS", "BAR_WIDTH", "SEQUENCE_OPTIONS", "OLD_SEQUENCE_OPTIONS")
    assert [getattr(bench, name) for name in copies] == [getattr(om, name) for name in copies]  # the script's
    trained, drawn = [], []

    def make_sequences(*args, **kwargs):
        drawn.append({**_options(kwargs), "hold_out": kwargs.get("hold_out")})
        return None, "the sequences train scored"

    monkeypatch.setattr(om, "train", _fake_train(lambda kwargs: trained.append(_options(kwargs))))
    monkeypatch.setattr(om, "make_sequences", make_sequences)
    monkeypatch.setattr(keras.saving, "load_model", lambda path: "the trained model")
    monkeypatch.setattr(bench, "feedback_ablation", lambda model, data: {"trained": [0.5]})
    capsys.readouterr()
    bench.main(["occluded", "--no-parallel", "--variants", "rladder", "--ablate-feedback", *OLD_CLI])
    assert trained == [OLD] and drawn == [{**OLD, "hold_out": False}]
    out = capsys.readouterr().out
    assert ("data: vertical bars (4 px wide, 8 px apart) and the eight compass directions at 3 px per frame "
            "(the data of rounds 1-26)\n") in out
    trained.clear(), drawn.clear()
    bench.main(["occluded", "--no-parallel", "--variants", "rladder", "--ablate-feedback"])
    assert trained == [PAPER] and drawn == [{**PAPER, "hold_out": False}]
    assert "data: the paper's grid of bars (4 px wide, 12 px apart) and velocities\n" in capsys.readouterr().out

    def stop(*args, **kwargs):  # fusion's sequences: recorded, then no classifier trained
        drawn.append(_options(kwargs))
        raise _Stop

    monkeypatch.setattr(om, "make_sequences", stop)
    drawn.clear()
    for argv, options in ((OLD_CLI, OLD), (["--bar-spacing", "10"], {**PAPER, "bar_spacing": 10})):
        with pytest.raises(_Stop):
            bench.main(["fusion", "--data-dir", MNIST_DIR, "--intra-op-threads", "1", *argv])
        assert drawn.pop() == options
    out = capsys.readouterr().out
    assert "data: a grid of bars (4 px wide, 10 px apart) and the paper's velocities (+-1, +-2), (+-2, +-1) px per " \
           "frame\n" in out
    for name in ("occluded", "fusion"):
        with pytest.raises(SystemExit) as exit_info:
            bench.main([name, "--bar-spacing", "4"])
        assert exit_info.value.code == 2 and "expected an integer >= 5" in capsys.readouterr().err


def test_the_search_makes_its_sequences_with_the_data_options_and_records_them(tmp_path, monkeypatch):
    from applications import occluded_mnist
    from tuning import search
    from tuning.occluded_mnist import OccludedMNISTHyperModel

    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "tune")
    options = OccludedMNISTHyperModel.options_from_args(parser.parse_args(OLD_CLI))
    assert _options(options) == OLD
    assert _options(OccludedMNISTHyperModel.options_from_args(parser.parse_args([]))) == PAPER
    hypermodel = OccludedMNISTHyperModel(**{**options, "data_dir": MNIST_DIR, "num_train": 4, "num_test": 4}, seed=0)
    drawn, make_sequences = [], occluded_mnist.make_sequences
    monkeypatch.setattr(occluded_mnist, "make_sequences",
                        lambda *a, **kw: (drawn.append({**_options(kw), "hold_out": kw.get("hold_out")}),
                                          make_sequences(*a, **kw))[1])
    _, valid = hypermodel.load_data()
    assert drawn == [{**OLD, "hold_out": True}] and len(valid["labels"]) == 4
    assert OccludedMNISTHyperModel().sequences == PAPER
    with pytest.raises(InputError, match="Received: bars='horizontal'"):
        OccludedMNISTHyperModel(bars="horizontal")
    # recorded beside the best model as train records them: evaluate makes its test sequences so
    paths = {key: str(tmp_path / file) for key, file in search.BEST_FILES.items()}
    om.build_model("temporal", frame_size=16, conv_units=(4,), dense_units=8).save(paths["model"])
    summary = {"trial_id": "0", "objective": "val_digit_accuracy", "best_score": 0.5}
    metrics = search.best_metrics(hypermodel, summary, paths)
    assert metrics["sequences"] == OLD
    with open(paths["metrics"], "w") as f:
        json.dump(metrics, f)
    calls = _record_generate(monkeypatch)
    assert om.evaluate(paths["model"], num_test=4)["sequences"] == OLD
    assert [options for options, _ in calls] == [OLD]


@pytest.mark.parametrize("name, value, received", [
    ("bars", "horizontal", "bars='horizontal'"),
    ("motion", None, "motion=None"),
    ("bar_spacing", 4, "bar_width=4, bar_spacing=4"),
])
def test_evaluate_names_metrics_json_when_its_recorded_sequences_were_edited(name, value, received, tmp_path):
    # a hand-edited record was refused as if the user had given the bad option
    model = tmp_path / "model.keras"
    model.write_bytes(b"")
    (tmp_path / "metrics.json").write_text(json.dumps({"sequences": {**PAPER, name: value}}))
    given = dict.fromkeys(PAPER)
    with pytest.raises(InputError) as error:
        om._recorded_sequences(str(model), given)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'metrics.json'} records test sequences that train does not make")
    assert f"Received: {received}" in message and f"Give --{name.replace('_', '-')} (`{name}`)" in message
    assert "\n" not in message
    # the option given on the command line replaces the bad record
    good = {"bars": "vertical", "motion": "compass", "bar_spacing": 8}[name]
    assert om._recorded_sequences(str(model), {**given, name: good}) == ({**PAPER, name: good}, None)
    # and a good record is taken as it is
    (tmp_path / "metrics.json").write_text(json.dumps({"sequences": OLD}))
    assert om._recorded_sequences(str(model), given) == (OLD, None)
