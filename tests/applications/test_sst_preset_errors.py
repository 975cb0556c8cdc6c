"""A ``--preset`` that keras-hub cannot read is one line, not keras-hub's traceback.

helper-196 (CLI fuzzing): ``train sst --preset bert_tiny_en_uncased`` on a machine
without network access ended in requests' ``ConnectionError`` to api.kaggle.com, and
``--preset FOLDER`` of a folder that is no preset (no config.json) in keras-hub's
``ValueError`` "Preset ... has no config.json", both with a traceback and exit code 1.
"""

import pytest

from applications import __main__ as cli
from tests.applications.short_data import write_sst_prefix

TINY = ["--train-on", "sentences", "--max-train", "8", "--max-eval", "8", "--max-length", "8", "--hidden-dim", "8",
        "--hidden-capsules", "4", "--capsule-dim", "1", "--n-iters", "2", "--batch-size", "8", "--epochs", "1",
        "--quiet"]


@pytest.fixture
def sst_data(tmp_path):
    return str(write_sst_prefix(tmp_path / "sst", lines=20))


def _train(sst_data, preset, run_dir):
    return cli.main(["train", "sst", "--data-dir", sst_data, "--preset", preset, *TINY, "--run-dir", str(run_dir)])


def _one_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-capsules: error: "), err
    return err[0]


def test_a_folder_that_is_no_preset_is_one_line(sst_data, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    folder = tmp_path / "not_a_preset"
    folder.mkdir()
    (folder / "jsb_chorales.json").write_text("{}")
    assert _train(sst_data, str(folder), tmp_path / "new" / "run") == 2
    line = _one_line(capsys)
    assert f"{str(folder)!r} is not a keras-hub preset folder: it has no config.json; `--preset` takes" in line, line
    assert not (tmp_path / "new").exists()


def test_a_preset_name_that_cannot_be_fetched_is_one_line(sst_data, tmp_path, capsys, monkeypatch):
    import keras_hub
    import requests

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)

    def offline(preset, **kwargs):  # what keras-hub raises without network access
        raise requests.exceptions.ConnectionError(
            "HTTPSConnectionPool(host='api.kaggle.com', port=443): Max retries exceeded")

    monkeypatch.setattr(keras_hub.models.Backbone, "from_preset", offline)
    assert _train(sst_data, "bert_tiny_en_uncased", tmp_path / "run") == 2
    line = _one_line(capsys)
    assert "cannot load the keras-hub preset 'bert_tiny_en_uncased' (ConnectionError: " in line, line
    assert "needs network access" in line and "`--preset`" in line, line


def test_an_unknown_preset_name_is_one_line(sst_data, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    assert _train(sst_data, "no_such_preset_name", tmp_path / "run") == 2  # (keras-hub refuses it offline)
    line = _one_line(capsys)
    assert "keras-hub found no preset 'no_such_preset_name' (an unknown name, " in line, line
    assert "`--preset` takes a preset folder (with its config.json)" in line, line


def test_other_errors_of_keras_hub_keep_their_traceback(sst_data, tmp_path, monkeypatch):
    import keras_hub

    def bug(preset, **kwargs):
        raise ValueError("a bug in a layer's config")

    monkeypatch.setattr(keras_hub.models.Backbone, "from_preset", bug)
    with pytest.raises(ValueError, match="a bug in a layer's config"):
        _train(sst_data, "bert_tiny_en_uncased", tmp_path / "run")
