"""Capsule text classification (Ren & Lu, CCCapsNet): data, model and training recipe.

``data``: tensorflow-text preprocessing, vocabulary, length-bucketed ``tf.data``
pipelines, TFDS (AG News, Yelp polarity) and SST (tree files) loaders.
``model``: :func:`build_model` (compositional embedding, BiGRU, k-means / dynamic
routing or a linear head). ``recipe``: :func:`train`, the paper's recipe.
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
    TokenCapsules,
    build_model,
    compile_model,
    embedding_parameters,
    parameter_report,
)
from applications.text_classification.recipe import main, train

__all__ = [
    "DATASETS",
    "TokenCapsules",
    "bucket_batches",
    "build_model",
    "build_vocabulary",
    "compile_model",
    "embedding_parameters",
    "encode",
    "load_split",
    "main",
    "make_dataset",
    "make_lookup",
    "parameter_report",
    "preprocess",
    "train",
]
