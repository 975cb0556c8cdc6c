"""``evaluate`` of a model whose weights are NaN (a damaged file): standard JSON with a note,
or one line, never ``NaN`` in the printed result nor a traceback.

helper-196 (CLI fuzzing): ``evaluate demo`` of such a model printed ``"test_loss": NaN``
(not JSON: ``jq`` refuses it) as a success that said nothing of it, and ``evaluate
textured_mnist`` ended in the traceback of ``adjusted_mutual_info``'s ValueError "`pi`
must be finite".
"""

import json

import keras
import numpy as np
import pytest

from applications import __main__ as cli
from tests.conftest import shared_path

MNIST = str(shared_path("data", "mnist"))
CHORALES = str(shared_path("data", "jsb_chorales"))
TINY = {
    "demo": ["--limit", "40", "--filters", "4", "--primary-capsules", "2", "--hidden-capsules", "2", "--pose-size", "2",
             "--n-iters", "2", "--batch-size", "16"],
    "occluded_mnist": ["--data-dir", MNIST, "--num-train", "8", "--num-test", "8", "--batch-size", "8",
                       "--conv-units", "2", "2", "2", "--dense-units", "4", "--frame-size", "16"],
    "textured_mnist": ["--data-dir", MNIST, "--num-train", "8", "--num-test", "8", "--n-groups", "2", "--n-iters", "1",
                       "--conv-units", "4", "--dense-units", "8", "--batch-size", "8"],
    "music": ["--data-dir", CHORALES, "--limit", "2", "--window", "4", "--units", "4", "--batch-size", "4",
              "--sample-steps", "0"],
}


def _train_then_poison(name, run_dir, capsys):
    assert cli.main(["train", name, *TINY[name], "--epochs", "1", "--quiet", "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    import applications.textured_mnist  # noqa: F401  (registers its layers)

    path = str(run_dir / "model.keras")
    model = keras.saving.load_model(path)
    model.set_weights([np.full_like(w, np.nan) if w.dtype.kind == "f" else w for w in model.get_weights()])
    model.save(path)
    return path


def test_a_score_that_is_not_finite_is_printed_as_null_with_a_note(tmp_path, capsys):
    path = _train_then_poison("demo", tmp_path / "run", capsys)
    assert cli.main(["evaluate", "demo", "--model", path, "--quiet"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the printed result: {out}"))
    assert result["test_loss"] is None, result
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"note: {path} holds ") and lines[0].endswith(
        " NaN or infinite weight values (a diverged or damaged model): its scores are not those of a trained model"), err
    assert lines[1].startswith("note: test_loss not finite (NaN or infinite, printed as null)"), err


def test_masks_that_are_not_finite_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    path = _train_then_poison("textured_mnist", tmp_path / "run", capsys)
    assert cli.main(["evaluate", "textured_mnist", "--model", path, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith(f"note: {path} holds "), err
    assert err[1].startswith("keras-capsules: error: the model's group masks hold "), err
    assert "NaN or infinite values: its weights are not finite" in err[1], err


def test_finite_results_print_as_before(capsys):
    cli._print_evaluation({"test_accuracy": 0.5, "ami": [0.1, np.float32(0.2)], "model": "m.keras"})
    out, err = capsys.readouterr()
    assert json.loads(out) == {"test_accuracy": 0.5, "ami": [0.1, pytest.approx(0.2)], "model": "m.keras"}
    assert err == ""
    cli._print_evaluation({"ami": [0.1, float("inf")], "per_step": {"all": [float("nan")]}})
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ami": [0.1, None], "per_step": {"all": [None]}}
    assert err.startswith("note: ami[1], per_step.all[0] not finite"), err


def test_a_model_of_nan_weights_is_scored_with_a_note(tmp_path, capsys):
    # (helper-196) an occluded_mnist model of NaN weights scored a test error of 1.0, which
    # is a number, without a word
    path = _train_then_poison("occluded_mnist", tmp_path / "run", capsys)
    assert cli.main(["evaluate", "occluded_mnist", "--model", path, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"note: {path} holds " in err and " NaN or infinite weight values (a diverged or damaged model)" in err, err


def test_a_music_model_of_nan_weights_is_scored_null_without_numpys_warnings(tmp_path, capsys):
    # (2026-12-06) besides the note on the weights and the null score, numpy's RuntimeWarnings
    # of the NLL's arithmetic on NaN logits ("invalid value encountered in logaddexp", with
    # the source lines of music.py) were printed on stderr
    import warnings

    from applications import music

    path = _train_then_poison("music", tmp_path / "run", capsys)
    with warnings.catch_warnings(record=True) as caught:  # (pytest's own capture keeps them from stderr)
        warnings.simplefilter("always")
        assert cli.main(["evaluate", "music", "--model", path, "--quiet"]) == 0
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    out, err = capsys.readouterr()
    assert json.loads(out, parse_constant=pytest.fail)["test_nll_per_step"] is None, out
    lines = err.splitlines()
    assert len(lines) == 2 and "RuntimeWarning" not in err, err
    assert lines[0].startswith(f"note: {path} holds ") and "NaN or infinite weight values" in lines[0], err
    assert lines[1].startswith("note: test_nll_per_step not finite (NaN or infinite, printed as null)"), err
    # a Python caller gets NaN, without a warning, also of an ensemble and of a NADE read-out
    model = keras.saving.load_model(path)
    rolls = [music.piano_roll(chorale) for chorale in music.load_chorales(CHORALES)["test"][:2]]
    nade = music.build_model(8, units=(4,), readout="nade", nade_units=4)
    nade.set_weights([np.full_like(w, np.nan) for w in nade.get_weights()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for scored in (model, [model, model], nade):
            assert np.isnan(music.nll_per_step(scored, rolls, batch_size=4))
