"""Each public module of keras_capsules names its public API in ``__all__``."""

import inspect

import pytest

import keras_capsules  # before keras: see keras_capsules/__init__.py

MODULES = ("layers", "losses", "metrics", "ops", "optimizers", "callbacks")


@pytest.mark.parametrize("name", MODULES)
def test_a_star_import_brings_the_public_api_only(name):
    # Audit (2026-12-01): losses, ops and callbacks had no __all__, and
    # `from keras_capsules.losses import *` brought keras, np, math, ops and the
    # private helpers they import (routing_dtype, exactly_shaped_like, ...).
    module = getattr(keras_capsules, name)
    assert isinstance(getattr(module, "__all__", None), list), f"keras_capsules.{name} has no __all__"
    namespace = {}
    exec(f"from keras_capsules.{name} import *", namespace)
    imported = sorted(n for n in namespace if n != "__builtins__")
    assert imported == sorted(module.__all__)
    for public in module.__all__:
        obj = getattr(module, public)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith("keras_capsules."), (public, obj.__module__)
            assert inspect.getdoc(obj), f"keras_capsules.{name}.{public} has no docstring"
    # and every public class or function the module defines itself is in it
    defined = [
        n for n, obj in vars(module).items()
        if not n.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module.__name__
    ]
    assert not set(defined) - set(module.__all__), sorted(set(defined) - set(module.__all__))
