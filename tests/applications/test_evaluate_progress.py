"""`keras-capsules evaluate` shows progress (on stderr) unless --quiet; stdout holds only the JSON.

Every application's evaluate called Keras with verbose=0: evaluating smallNORB's 24,300
test pairs or occluded_mnist's 5,000 sequences was minutes of silence, and `evaluate
--quiet` ("no progress bars") changed nothing. The progress goes to stderr so that
`keras-capsules evaluate ... > result.json` stays one JSON document.
"""

import importlib
import inspect
import json

import pytest

from applications import __main__ as cli
from applications import registry
from tests.applications.cli_helpers import TINY_MODEL
from tests.applications.test_cli_applications import TINY, TINY_EVALUATE, TINY_TEXT_DATA
from tests.applications.tiny_data import SST_DIR

TINY_DEMO = ["--limit", "40", *TINY_MODEL, "--batch-size", "8"]
TRAIN = {**TINY, "demo": TINY_DEMO}
EVALUATE = {**TINY_EVALUATE, "demo": ["--limit", "40"]}
BAR = "\u2501"  # Keras' progress bar: "3/5 ━━━━━━━━━━━━ 0s 8ms/step"


def _evaluate_function(name):
    module = importlib.import_module(registry.APPLICATIONS[name])
    if name == "text_classification":  # its run_evaluate calls the recipe's
        from applications.text_classification import recipe

        return recipe, recipe.evaluate
    return module, module.evaluate


@pytest.mark.parametrize("name", registry.names())
def test_every_evaluate_takes_verbose_silent_by_default(name):
    _, evaluate = _evaluate_function(name)
    parameter = inspect.signature(evaluate).parameters.get("verbose")
    assert parameter is not None, f"{name}.evaluate has no verbose"
    assert parameter.default == 0, name  # the Python API stays silent
    assert "``verbose``" in evaluate.__doc__ or "verbose:" in evaluate.__doc__, name


@pytest.mark.parametrize("quiet", [False, True])
@pytest.mark.parametrize("name", registry.names())
def test_every_run_evaluate_passes_verbose_unless_quiet(name, quiet, monkeypatch):
    module, _ = _evaluate_function(name)
    app = importlib.import_module(registry.APPLICATIONS[name])
    seen = {}
    monkeypatch.setattr(module, "evaluate", lambda *args, **kwargs: seen.update(kwargs) or {})
    if name == "smallnorb":
        monkeypatch.setattr(app, "_require_data", lambda *args: None)
    data = {"sst": ["--data-dir", str(SST_DIR)], "text_classification": TINY_TEXT_DATA}.get(name, [])
    argv = ["evaluate", name, *data, "--model", "m.keras", *["--quiet"] * quiet]
    args = cli._defaults(cli.build_parser(name).parse_args(argv))
    import tensorflow as tf

    app.run_evaluate(args, tf.distribute.get_strategy())
    assert seen.get("verbose") == (0 if quiet else 1), (name, seen)


@pytest.mark.parametrize("name", ["demo", "occluded_mnist", "textured_mnist", "music"])
def test_evaluate_shows_progress_on_stderr_unless_quiet(name, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = cli.main(["train", name, *TRAIN[name], "--epochs", "1", "--quiet", "--run-dir", str(run_dir)])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    evaluate = ["evaluate", name, *EVALUATE[name], "--model", str(run_dir / "model.keras")]

    assert cli.main(evaluate) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)  # exactly one JSON document: no progress bar on stdout
    assert result["model"] == str(run_dir / "model.keras")
    assert BAR in err and BAR not in out, err

    assert cli.main([*evaluate, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == result
    assert BAR not in err and err == "", err


def test_music_sampling_shows_progress_unless_quiet(tmp_path, capsys):
    # evaluate --sample-steps N: N ladder steps, one at a time, were silent too
    from applications import music
    from tests.applications.test_music import TINY as TINY_MUSIC

    music.build_model(4, **TINY_MUSIC).save(tmp_path / "model.keras")
    argv = ["evaluate", "music", *EVALUATE["music"], "--model", str(tmp_path / "model.keras"),
            "--sample-steps", "3"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["samples"] == str(tmp_path / "samples.npy")
    assert "3/3" in err and "/step" in err, err
    assert cli.main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
