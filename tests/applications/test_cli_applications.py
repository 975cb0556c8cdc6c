"""The applications registered in the command line: help, one-line data errors, tiny runs."""

import json
import os

import pytest

from applications import __main__ as cli
from tests.conftest import shared_path

# name -> options of a tiny model for `train` (1 epoch, small sizes).
TINY = {
    "sort_of_clevr": ["--steps", "2", "--validation-examples", "8", "--units", "8", "--mac-steps", "1",
                      "--embedding-dim", "4", "--batch-size", "4"],
    "music": ["--data-dir", str(shared_path("data", "jsb_chorales")), "--limit", "4", "--units", "8", "4",
              "--window", "8", "--batch-size", "4"],
    "occluded_mnist": ["--data-dir", str(shared_path("data", "mnist")), "--num-train", "8", "--num-test", "8",
                       "--conv-units", "4", "--dense-units", "8", "--batch-size", "8"],
}
# name -> the options of `evaluate` that select the same data as TINY's `train`.
TINY_EVALUATE = {
    "sort_of_clevr": ["--validation-examples", "8"],
    "music": ["--data-dir", str(shared_path("data", "jsb_chorales")), "--limit", "4"],
    "occluded_mnist": ["--data-dir", str(shared_path("data", "mnist")), "--num-test", "8"],
}
# name -> options naming data that is not there (``{missing}``: a missing directory).
MISSING_DATA = {
    "music": ["--data-dir", "{missing}"],
    "occluded_mnist": ["--data-dir", "{missing}"],
    "occluded_mnist/tfds": ["--source", "tfds", "--data-dir", "{missing}", "--num-test", "4"],
    "smallnorb": ["--data-dir", "{missing}"],
}
APPLICATIONS = ["sort_of_clevr", "music", "occluded_mnist", "smallnorb"]
# Applications with a tiny train/evaluate run on shared or generated data.
RUNNABLE = ["sort_of_clevr", "music", "occluded_mnist"]


@pytest.mark.parametrize("command", ["train", "evaluate"])
@pytest.mark.parametrize("name", APPLICATIONS)
def test_help(name, command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: keras-capsules") and "--batch-size" in out and "--strategy" in out


def test_applications_are_listed(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in APPLICATIONS)


@pytest.mark.parametrize("key", sorted(MISSING_DATA))
def test_missing_data_is_one_line_and_exit_code_2(key, tmp_path, capsys):
    name = key.split("/")[0]
    options = [o.format(missing=tmp_path / "missing") for o in MISSING_DATA[key]]
    for argv in (["train", name, *options, "--quiet", "--epochs", "1", "--run-dir", str(tmp_path / "run")],
                 ["evaluate", name, *options, "--model", str(tmp_path / "model.keras")]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("keras-capsules: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err


@pytest.mark.parametrize("name", RUNNABLE)
def test_evaluate_without_a_model_is_one_line(name, tmp_path, capsys):
    assert cli.main(["evaluate", name, *TINY_EVALUATE[name], "--model", str(tmp_path / "none.keras")]) == 2
    err = capsys.readouterr().err
    assert "no model at" in err and err.count("\n") == 1


@pytest.mark.parametrize("name", RUNNABLE)
def test_tiny_train_then_evaluate(name, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = cli.main(["train", name, *TINY[name], "--epochs", "1", "--quiet", "--run-dir", str(run_dir)])
    assert code == 0, capsys.readouterr().err
    assert (run_dir / "model.keras").is_file() and (run_dir / "history.csv").is_file()
    assert not (run_dir / "backup").exists()
    capsys.readouterr()
    code = cli.main(["evaluate", name, *TINY_EVALUATE[name], "--model", str(run_dir / "model.keras")])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["model"] == str(run_dir / "model.keras")
    assert os.path.isfile(metrics["model"])


def test_smallnorb_unprepared_is_the_friendly_tfds_error(tmp_path, capsys):
    assert cli.main(["train", "smallnorb", "--data-dir", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "TFDS dataset 'smallnorb' is not prepared" in err and "--data-dir" in err
    assert err.count("\n") == 1


def test_smallnorb_tiny_train_then_evaluate_on_mock_data(tmp_path, capsys, monkeypatch):
    import tensorflow_datasets as tfds

    from applications import tfds_data

    monkeypatch.setattr(tfds_data, "require_prepared", lambda name, data_dir=None: None)
    run_dir = tmp_path / "run"
    sizes = ["--data-dir", str(tmp_path / "tfds"), "--image-size", "24", "--validation-steps", "1",
             "--batch-size", "4"]
    with tfds.testing.mock_data(num_examples=8):
        code = cli.main(["train", "smallnorb", *sizes, "--steps-per-epoch", "1", "--channels", "8",
                         "--parts", "8", "--epochs", "1", "--quiet", "--run-dir", str(run_dir)])
        assert code == 0, capsys.readouterr().err
        assert (run_dir / "model.keras").is_file() and (run_dir / "metrics.json").is_file()
        capsys.readouterr()
        assert cli.main(["evaluate", "smallnorb", *sizes, "--model", str(run_dir / "model.keras")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
