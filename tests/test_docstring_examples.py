"""Every runnable ```python example in the public docstrings runs as written.

The examples are collected from the public names of ``keras_capsules`` (its layers,
losses, metrics, ops, optimizers and callbacks), their public methods and the
modules themselves, and each is executed in a fresh namespace holding only
``keras``, ``np``, ``ops`` and ``keras_capsules`` (an example must import anything
else it uses). Usage sketches that compile or fit a ``model`` or read a
``dataset`` the example does not build are left out by name (``SKETCH_NAMES``);
the test below checks that this leaves most examples in.
"""

import ast
import inspect
import re
import sys

import numpy as np
import pytest

import keras_capsules  # before keras: see keras_capsules/__init__.py
import keras
from keras import ops

MODULES = (
    keras_capsules.layers,
    keras_capsules.losses,
    keras_capsules.metrics,
    keras_capsules.ops,
    keras_capsules.optimizers,
    keras_capsules.callbacks,
)
#: names an example may use without defining them only as a usage sketch
SKETCH_NAMES = {"model", "dataset"}
_FENCE = re.compile(r"```python\n(.*?)```", re.S)


def _own(obj):
    return getattr(obj, "__module__", "").split(".")[0] == "keras_capsules"


def _collect():
    examples, seen = {}, set()

    def add(obj, where):
        for i, block in enumerate(_FENCE.findall(inspect.getdoc(obj) or "")):
            examples.setdefault(f"{where}#{i}", block)

    for module in MODULES:
        names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if id(obj) in seen or not _own(obj):
                continue
            seen.add(id(obj))
            add(obj, f"{module.__name__}.{name}")
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if not attr.startswith("_") and callable(value):
                        add(value, f"{module.__name__}.{name}.{attr}")
    for name in sorted(sys.modules):
        if name.startswith("keras_capsules"):
            add(sys.modules[name], name)
    return examples


def _free_names(block):
    """Names an example reads without ever assigning or importing them."""
    tree = ast.parse(block)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return read - bound


ALL_EXAMPLES = _collect()
RUNNABLE = {k: v for k, v in ALL_EXAMPLES.items() if not _free_names(v) & SKETCH_NAMES}


def test_most_examples_are_runnable():
    assert len(ALL_EXAMPLES) >= 20  # the layers alone document one example each
    assert len(RUNNABLE) >= 0.75 * len(ALL_EXAMPLES), sorted(set(ALL_EXAMPLES) - set(RUNNABLE))


@pytest.mark.parametrize("where", sorted(RUNNABLE))
def test_docstring_example_runs(where):
    namespace = {"keras": keras, "np": np, "ops": ops, "keras_capsules": keras_capsules}
    exec(compile(RUNNABLE[where], f"<example {where}>", "exec"), namespace)


def _documented_objects():
    """The public names of :data:`MODULES` (and their public methods) with their docstrings."""
    for module in MODULES:
        for name in getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]:
            obj = getattr(module, name)
            if _own(obj):
                yield f"{module.__name__}.{name}", obj
                if inspect.isclass(obj):
                    for attr, value in vars(obj).items():
                        if not attr.startswith("_") and callable(value):
                            yield f"{module.__name__}.{name}.{attr}", value


def test_every_example_section_is_collected():
    # An example written another way (indented, or ``>>>`` lines) would be skipped
    # without a word: every "Example:" section holds a ```python block that runs here.
    missing = []
    for where, obj in _documented_objects():
        doc = inspect.getdoc(obj) or ""
        for section in re.split(r"^Examples?:\s*$", doc, flags=re.M)[1:]:
            if not section.lstrip().startswith("```python"):
                missing.append(where)
    assert not missing, missing


def test_every_public_layer_has_a_runnable_example():
    # The contract of DESIGN.md: one Example: section per public layer; a layer whose
    # example became a usage sketch (SKETCH_NAMES) would not be run any more.
    layers = [name for name in keras_capsules.layers.__all__ if inspect.isclass(getattr(keras_capsules.layers, name))]
    assert len(layers) >= 20
    assert [n for n in layers if f"keras_capsules.layers.{n}#0" not in RUNNABLE] == []
