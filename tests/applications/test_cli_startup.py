"""Start-up of the command line: ``--help``, ``--version`` and a mistyped command or
application name are answered without importing an application, Keras or TensorFlow
(that took 7 s on a 2-core machine and wrote TensorFlow's start-up lines on stderr),
and answer what the default application's parser answers. What they read instead (the
registry's descriptions, the version in ``keras_capsules/__init__.py``, the oneDNN
default of ``applications/__init__.py``) agrees with its other copy."""

import ast
import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from applications import __main__ as cli
from applications import registry
from tests.applications.cli_helpers import REPO

ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
#: modules that a command line answered without an application must not import
HEAVY = ("tensorflow", "keras", "jax", "keras_capsules")

# Runs main(argv) and prints what it wrote, its exit code and which heavy modules it loaded.
_MAIN = f"""
import contextlib, io, json, sys
from applications.__main__ import main
out, err, code = io.StringIO(), io.StringIO(), None
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exit:
        code = exit.code
loaded = [name for name in {HEAVY!r} if name in sys.modules]
print(json.dumps({{"code": code, "out": out.getvalue(), "err": err.getvalue(), "loaded": loaded}}))
"""


def _python(code, *args, **extra_env):
    """Runs ``python -c code args`` on the sources under test, as a user's shell would:
    no TensorFlow log level, no oneDNN choice, 100 columns for argparse."""
    environment = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", ONEDNN)}
    path = str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    environment.update(COLUMNS="100", CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow", PYTHONPATH=path,
                       **extra_env)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=str(REPO), env=environment,
                          capture_output=True, text=True, timeout=300)


def _run_main(argv):
    proc = _python(_MAIN, json.dumps(argv))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


ANSWERED_WITHOUT_APPLICATION = [
    (["--help"], 0),
    (["-h"], 0),
    (["--version"], 0),
    (["--help", "train"], 0),
    (["frobnicate"], 2),
    ([], 2),
    (["train", "nosuchapp"], 2),
    (["tune", "nosuchapp"], 2),
    (["evaluate", "nosuchapp", "--model", "m.keras"], 2),
    (["train", "nosuchapp", "--epochs", "3", "--help"], 2),
]


@pytest.mark.parametrize("argv, code", ANSWERED_WITHOUT_APPLICATION)
def test_answered_without_tensorflow(argv, code):
    # `keras-capsules --help` imported every application (for its description), hence
    # Keras and TensorFlow: 7 s, and TensorFlow's start-up lines on stderr.
    result, stderr = _run_main(argv)
    assert result["code"] == code
    assert result["loaded"] == []
    assert stderr == ""  # (no start-up lines of TensorFlow's)
    assert "keras-capsules" in (result["out"] if code == 0 else result["err"])


@pytest.mark.parametrize("argv, code", ANSWERED_WITHOUT_APPLICATION)
def test_answered_as_the_default_applications_parser_answers(argv, code, monkeypatch, capsys):
    result, _ = _run_main(argv)
    # main's way with the default application's parser (it loads the application)
    monkeypatch.setattr(cli, "_answer_without_application", lambda argv: None)
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(argv))
    captured = capsys.readouterr()
    assert (result["code"], result["out"], result["err"]) == (exit_info.value.code, captured.out, captured.err)


@pytest.mark.parametrize("argv", [
    ["train"],
    ["train", "demo", "--help"],
    ["evaluate", "--help"],
    ["bench", "--help"],
    ["--quiet", "train", "nosuchapp"],  # (not right after the command)
    ["train", "nosuchapp", "--epochz", "1"],  # refused as unknown first
    ["train", "nosuchapp", "--ep", "1"],  # an abbreviation: ambiguous with an application's option?
    ["train", "nosuchapp", "--filters", "8"],  # the demo's option
    ["train", "nosuchapp", "--epochs", "-1"],
    ["tune", "nosuchapp", "--", "x"],
])
def test_the_others_are_left_to_the_application(argv):
    cli._answer_without_application(argv)  # returns: does not exit


def test_the_help_lists_the_registrys_descriptions(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in registry.names():
        assert f"  {name:<{max(map(len, registry.names()))}}  {registry.DESCRIPTIONS[name]}\n" in out


@pytest.mark.parametrize("name", registry.names())
def test_an_application_has_one_line_in_the_registry_and_no_copy_of_its_own(name):
    # The registry holds the descriptions (the help imports no application); a copy in
    # the module (the protocol's DESCRIPTION before 2026-11-29) would drift from it.
    description = registry.DESCRIPTIONS[name]
    assert description.strip() and "\n" not in description
    assert not hasattr(registry.load(name), "DESCRIPTION")


@pytest.mark.parametrize("name", registry.names())
def test_an_applications_benchmark_is_in_the_registry_only_and_names_a_script(name):
    # `bench NAME` read the module's BENCHMARK (importing the application, so TensorFlow,
    # in the parent process of the benchmark's own); the registry holds it now.
    assert not hasattr(registry.load(name), "BENCHMARK")
    benchmark = registry.BENCHMARKS.get(name)
    if benchmark is not None:
        assert (cli.BENCHMARKS_DIR / f"{benchmark.split()[0]}.py").is_file()


# main(argv) with benchmarks/ replaced by a folder holding the demo's benchmark as a script
# that prints its arguments, and which heavy modules the parent process loaded.
_BENCH = f"""
import contextlib, io, json, pathlib, sys, tempfile
from applications import __main__ as cli
folder = pathlib.Path(tempfile.mkdtemp()) / "benchmarks"
folder.mkdir()
(folder / "em_routing_mnist.py").write_text("import sys\\nprint('script', sys.argv[1:])\\n")
cli.BENCHMARKS_DIR = folder
sys.stdout.flush()
code = cli.main(json.loads(sys.argv[1]))
sys.stdout.flush()
print(json.dumps({{"code": code, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


@pytest.mark.parametrize("argv, code, printed", [
    (["bench", "demo", "--epochs", "1"], 0, "script ['--epochs', '1']"),
    (["bench", "em_routing_mnist"], 0, "script []"),
    (["bench", "nosuch"], 2, "no benchmark 'nosuch'; choose from em_routing_mnist"),
    (["bench"], 2, "name a benchmark"),
    (["bench", "--help"], 0, "Runs benchmarks/NAME.py"),
])
def test_bench_loads_no_tensorflow_in_its_own_process(argv, code, printed):
    # The script runs in a process of its own (which loads what it needs); the parent
    # loaded the demo application, hence TensorFlow: 5 s and its start-up lines, twice.
    proc = _python(_BENCH, json.dumps(argv))
    lines = proc.stdout.splitlines()
    if argv[-1] == "--help":  # argparse exits before the last line
        assert proc.returncode == 0 and printed in proc.stdout and proc.stderr == ""
        return
    result = json.loads(lines[-1])
    assert (result["code"], result["loaded"]) == (code, [])
    assert printed in (proc.stdout if code == 0 else proc.stderr)
    assert proc.stderr == ("" if code == 0 else proc.stderr.splitlines()[0] + "\n")


def test_bench_help_is_the_full_parsers(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    lean = capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.build_parser(registry.DEFAULT_APPLICATION).parse_args(["bench", "--help"])
    assert lean == capsys.readouterr().out


def test_the_version_is_keras_capsules_version():
    import keras_capsules

    assert cli._version() == keras_capsules.__version__
    # the distribution's version (setup.py), and the installed one when installed
    setup = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(setup) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "setup")
    version = next(ast.literal_eval(k.value) for k in call.keywords if k.arg == "version")
    assert version == keras_capsules.__version__
    try:
        installed = metadata.version("keras-capsules")
    except metadata.PackageNotFoundError:
        return
    assert installed == keras_capsules.__version__, "reinstall: pip install -e ."


def test_tuning_imports_no_tensorflow_and_sets_the_onednn_default():
    # The help's `tune` choices are tuning.HYPERMODELS' names; tuning imported keras_capsules.
    proc = _python("import json, os, sys, tuning; print(json.dumps([os.environ.get(sys.argv[1]), "
                   f"[m for m in {HEAVY!r} if m in sys.modules]]))", ONEDNN)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["0", []]


def test_the_applications_modules_of_choices_and_data_files_import_no_tensorflow():
    # Command lines offer these choices and find a missing file before they load
    # TensorFlow (benchmarks/text_classification.py, benchmarks/rladder.py jsb,
    # benchmarks/demo_seeds.py, which reads the demo's digits first); the text
    # classification package loads its TensorFlow parts only when one is used.
    proc = _python("import json, sys, applications.text_classification, applications.text_classification.options, "
                   "applications.jsb_chorales, applications.mnist_digits as m; m.load_arrays(None, 3); "
                   f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_the_text_classification_package_names_its_parts_when_used():
    import applications.text_classification as package
    from applications.text_classification import cli as protocol
    from applications.text_classification import data, model, options, recipe

    for name in package.__all__:  # each is the object of the part that defines it
        value = getattr(package, name)
        assert any(getattr(part, name, None) is value for part in (protocol, data, model, options, recipe)), name
    assert package.train is recipe.train and package.build_model is model.build_model
    assert package.INTRA_OP_THREADS == protocol.INTRA_OP_THREADS == options.INTRA_OP_THREADS
    assert model.ROUTINGS is options.ROUTINGS and model.EMBEDDINGS is options.EMBEDDINGS
    assert {"train", "recipe", "options"} <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        package.trian  # noqa: B018
    from applications.text_classification import projected_gru  # noqa: F401  (a submodule is still importable)


# keras_capsules/__init__.py and applications/__init__.py (which cannot import it: that
# loads TensorFlow) each decide TF_ENABLE_ONEDNN_OPTS: re-run both (importlib.reload) for
# every choice of the user, TensorFlow loaded or not (taken out of sys.modules).
_DECISIONS = f"""
import importlib, json, os, sys, warnings
import applications
import keras_capsules  # (loads TensorFlow)
tensorflow = sys.modules["tensorflow"]
decisions = []
for tensorflow_loaded in (False, True):
    for value in (None, "0", "1", ""):
        for module in (applications, keras_capsules):
            os.environ.pop("{ONEDNN}", None)
            if value is not None:
                os.environ["{ONEDNN}"] = value
            if not tensorflow_loaded:
                del sys.modules["tensorflow"]
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    importlib.reload(module)
            finally:
                sys.modules["tensorflow"] = tensorflow
            warned = any("{ONEDNN}" in str(w.message) for w in caught)
            decisions.append([module.__name__, tensorflow_loaded, value, os.environ.get("{ONEDNN}"), warned])
print(json.dumps(decisions))
"""


def test_applications_and_keras_capsules_set_the_same_onednn_default():
    proc = _python(_DECISIONS, TF_CPP_MIN_LOG_LEVEL="3")
    assert proc.returncode == 0, proc.stderr
    decisions = json.loads(proc.stdout.splitlines()[-1])
    expected = []
    for tensorflow_loaded in (False, True):
        for value in (None, "0", "1", ""):
            # "0" unless the user chose or TensorFlow is loaded; keras_capsules warns then
            result = value if value is not None or tensorflow_loaded else "0"
            expected.append(["applications", tensorflow_loaded, value, result, False])
            expected.append(["keras_capsules", tensorflow_loaded, value, result, tensorflow_loaded and value is None])
    assert decisions == expected


def test_a_saved_capsule_model_loads_through_applications_alone(tmp_path):
    # `import applications` registered the capsule layers when it imported keras_capsules;
    # since it no longer does, checks.load_model imports keras_capsules itself (else a
    # model with a capsule layer was Keras' "Could not locate class" in a script that
    # imported only applications.checks).
    path = tmp_path / "model.keras"
    save = f"""
import keras_capsules, keras
inputs = keras.Input((3, 4))
keras.Model(inputs, keras_capsules.layers.CapsuleLength()(inputs)).save({str(path)!r})
"""
    saved = _python(save)
    assert saved.returncode == 0, saved.stderr[-2000:]
    load = f"""
from applications import checks
model = checks.load_model({str(path)!r})
print(type(model.layers[-1]).__name__)
"""
    result = _python(load)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "CapsuleLength"
