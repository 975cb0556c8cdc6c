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
    load = "import keras_capsules, keras{}; keras.saving.load_model({!r}); print('loaded')"
    runs = [subprocess.run([sys.executable, "-c", load.format(extra, str(path))], capture_output=True, text=True,
                           cwd=root, timeout=300) for extra in ("", "; import applications.music")]
    assert runs[0].returncode != 0 and "Could not locate" in runs[0].stderr
    assert runs[1].returncode == 0 and runs[1].stdout.strip().endswith("loaded"), runs[1].stderr
