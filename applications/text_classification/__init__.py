"""Capsule text classification (Ren & Lu, CCCapsNet): data, model and training recipe.

``data``: tensorflow-text preprocessing, vocabulary, length-bucketed ``tf.data``
pipelines, TFDS (AG News, Yelp polarity) and SST (tree files) loaders.
``model``: :func:`build_model` (compositional embedding, BiGRU, k-means / dynamic
routing or a linear head). ``recipe``: :func:`train`, the paper's recipe, and
:func:`evaluate`. ``cli``: the ``keras-capsules`` command-line protocol.
``options``: the choices and defaults that need no TensorFlow.

The names below are loaded when first used (``text_classification.train``, ``from
applications.text_classification import build_model``): importing the package, or its
``options``, loads no TensorFlow, so a command line can offer the choices of
``options`` before it loads TensorFlow.
"""

import importlib

#: the package's names -> the submodule that defines them
_EXPORTS = {
    "DATASETS": "data",
    "build_vocabulary": "data",
    "bucket_batches": "data",
    "encode": "data",
    "load_split": "data",
    "make_dataset": "data",
    "make_lookup": "data",
    "preprocess": "data",
    "build_model": "model",
    "compile_model": "model",
    "embedding_parameters": "model",
    "parameter_report": "model",
    "evaluate": "recipe",
    "main": "recipe",
    "train": "recipe",
    # the command-line protocol (applications/registry.py)
    "add_arguments": "cli",
    "run_evaluate": "cli",
    "run_train": "cli",
    "INTRA_OP_THREADS": "options",
}
_SUBMODULES = ("cli", "data", "model", "options", "projected_gru", "recipe")


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once: later uses are plain attribute reads
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})


__all__ = sorted(_EXPORTS)
