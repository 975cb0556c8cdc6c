"""Tiny stand-ins for heavy inputs of the command-line tests, made offline in a second.

* :func:`tiny_bert_preset`: a keras-hub preset folder holding a randomly initialised
  one-block BERT and a tokenizer whose words come from the SST training sentences,
  for ``--preset`` of the SST application (the real MiniLM checkpoint is an optional
  extra, never needed by the tests).
* :func:`real_sst_split`: ``sst_trees.load_split`` of the real SST files under
  ``../shared/data/sst``, read once per test process for each set of arguments (the
  training file alone is 2 MB of trees; several test files read the same splits).
* :func:`tiny_clevr_cache`: a CLEVR feature cache (the files ``applications.clevr``
  writes after its ResNet-101 pass: ``{split}_{size}.npy`` and
  ``{split}_questions.json``) with random features and generated questions, so that
  no TFDS data and no ResNet-101 are needed.
"""

import collections
import functools
import json

import numpy as np

from tests.conftest import shared_path

SST_DIR = shared_path("data", "sst")
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CLEVR_IMAGE_SIZE = 32


@functools.lru_cache(maxsize=None)
def _real_sst_split(split, granularity, options):
    from applications import sst_trees

    return sst_trees.load_split(SST_DIR, split, granularity, **dict(options))


def real_sst_split(split, granularity="5", **options):
    """``sst_trees.load_split(SST_DIR, split, granularity, **options)`` of the real SST.

    The files are parsed once per test process for each set of arguments; every call
    returns its own copies (a test may change what it gets without changing what the
    next test reads).
    """
    texts, labels = _real_sst_split(split, granularity, tuple(sorted(options.items())))
    return list(texts), labels.copy()


def tiny_bert_preset(folder, words=120, seed=0):
    """Saves a one-block, 8-wide BERT preset in ``folder``; returns the folder as a string."""
    import keras
    import keras_hub

    texts, _ = real_sst_split("train", "5")
    counts = collections.Counter(w.lower() for text in texts[:200] for w in text.split())
    vocabulary = list(BERT_SPECIALS) + [w for w, _ in counts.most_common(words) if w not in BERT_SPECIALS]
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary), num_layers=1, num_heads=1, hidden_dim=8, intermediate_dim=8,
        max_sequence_length=32,
    )
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    backbone.save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    return str(folder)


COLORS = ("red", "blue", "green")
SHAPES = ("cube", "sphere")


def tiny_clevr_cache(folder, images=6, channels=8, seed=0):
    """Writes a CLEVR cache for ``--image-size 32`` (2x2 feature grids) in ``folder``.

    Each image gets a random scene (a colour and a shape per object) and two
    questions about it, with the right answers; features are random float16.
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation"):
        features = rng.normal(size=(images, 2, 2, channels)).astype("float16")
        np.save(folder / f"{split}_{CLEVR_IMAGE_SIZE}.npy", features)
        table = {"image_index": [], "question": [], "answer": []}
        for image in range(images):
            scene = [(rng.choice(COLORS), rng.choice(SHAPES)) for _ in range(3)]
            for color, shape in ((rng.choice(COLORS), rng.choice(SHAPES)), scene[0]):
                table["image_index"].append(image)
                table["question"].append(f"Is there a {color} {shape}?")
                table["answer"].append("yes" if (color, shape) in scene else "no")
            table["image_index"].append(image)
            table["question"].append("How many spheres are there?")
            table["answer"].append(str(sum(s == "sphere" for _, s in scene)))
        (folder / f"{split}_questions.json").write_text(json.dumps(table))
    return str(folder)
