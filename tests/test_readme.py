"""The README's example runs as written."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_readme_states_the_two_commands():
    text = README.read_text()
    assert 'pip install -e ".[dev]" && keras-capsules train' in text
    assert "python -m pytest tests" in text


def test_a_saved_application_model_loads_after_importing_its_module(tmp_path):
    # What the README says of loading an application's model in Python: its module's
    # import registers the layers and losses (`train music` saves PianoRollNLL in
    # model.keras; `import keras_capsules` alone does not know it).
    import subprocess
    import sys

    assert "import applications.smallnorb" in README.read_text()
    from applications import music

    path = tmp_path / "music.keras"
    music.compile_model(music.build_model(4, units=(8, 4))).save(path)
    root = str(README.parent)
    # one fresh process (a TensorFlow start-up, not two): the load without the module's
    # import fails (its traceback on stderr), then the same load after the import works
    load = ("import traceback, keras_capsules, keras\n"
            "try:\n    keras.saving.load_model({0!r})\n"
            "except Exception:\n    traceback.print_exc()\nelse:\n    print('loaded before the import')\n"
            "import applications.music\nkeras.saving.load_model({0!r}); print('loaded')\n")
    run = subprocess.run([sys.executable, "-c", load.format(str(path))], capture_output=True, text=True,
                         cwd=root, timeout=300)
    assert "loaded before the import" not in run.stdout and "Could not locate" in run.stderr, run.stdout + run.stderr
    assert run.returncode == 0 and run.stdout.strip().endswith("loaded"), run.stderr


def _readme_commands():
    """Every `keras-capsules ...` command of the README: the lines of its ```bash blocks
    (comments cut) and its inline code spans that start with the program's name."""
    text = README.read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        commands += [line.split("#")[0] for line in block.splitlines() if line.startswith("keras-capsules ")]
    commands += re.findall(r"(?<!`)`(keras-capsules(?= |`)[^`]*)`", text)
    commands = [" ".join(command.split()) for command in commands if " && " not in command]
    # (templates such as `keras-capsules bench NAME [ARGS]` left out)
    return [command for command in commands if not re.search(r" (\[|[A-Z]{2,}\b)", command)]


def test_every_readme_command_line_parses(tmp_path, monkeypatch, capsys):
    # A command the README shows must exist as written: `keras-capsules --version` (which
    # the parser did not have), `keras-capsules train / evaluate` (no such command line).
    # Each is parsed as `keras-capsules` does, without running it.
    import shlex

    from applications import __main__ as cli

    commands = _readme_commands()
    assert "keras-capsules --version" in commands and "keras-capsules train" in commands
    monkeypatch.chdir(tmp_path)
    parsed = []
    monkeypatch.setattr(cli, "_run", lambda args: parsed.append(args) or 0)
    for command in commands:
        argv = shlex.split(command)[1:]
        try:
            code = cli.main(argv)
        except SystemExit as exit_info:  # --help, --version; 2: a usage error
            code = exit_info.code
        assert code == 0, (command, capsys.readouterr().err)
    assert parsed, "no README command was run"
