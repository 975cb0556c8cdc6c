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
