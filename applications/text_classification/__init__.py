"""Capsule text classification (Ren & Lu, CCCapsNet): data, model and training recipe.

``data``: tensorflow-text preprocessing, vocabulary, length-bucketed ``tf.data``
pipelines, TFDS (AG News, Yelp polarity) and SST (tree files) loaders.
``model``: :func:`build_model` (compositional embedding, BiGRU, k-means / dynamic
routing or a linear head). ``recipe``: :func:`train`, the paper's recipe, and
:func:`evaluate`. ``cli``: the ``keras-capsules`` command-line protocol.
"""

from applications.text_classification.data import (
    DATASETS,
    build_vocabulary,
    bucket_batches,
    encode,
    load_split,
    make_dataset,
    make_lookup,
    preprocess,
)
from applications.text_classification.model import (
    build_model,
    compile_model,
    embedding_parameters,
    parameter_report,
)
from applications.text_classification.recipe import evaluate, main, train

# The command-line protocol (applications/registry.py).
from applications.text_classification.cli import (
    INTRA_OP_THREADS,
    add_arguments,
    run_evaluate,
    run_train,
)

__all__ = [
    "INTRA_OP_THREADS",
    "DATASETS",
    "add_arguments",
    "bucket_batches",
    "build_model",
    "build_vocabulary",
    "compile_model",
    "embedding_parameters",
    "encode",
    "evaluate",
    "load_split",
    "main",
    "make_dataset",
    "make_lookup",
    "parameter_report",
    "preprocess",
    "run_evaluate",
    "run_train",
    "train",
]
