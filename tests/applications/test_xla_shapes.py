"""How many input shapes each application's ``train`` feeds its compiled steps under XLA.

XLA (``jit_compile=True``, Keras' ``"auto"`` on a GPU or TPU without a strategy) compiles
the train, test and predict steps once per distinct input shape. Text classification and
SST fed batches of every text length (``test_tracing.py``: a compilation at each new one,
fixed by ``training.pad_to_lengths``). Checked here for every other application, over
two or three epochs with validation, the final evaluation and the predictions of the
scores: each feeds its steps inputs of one shape per split, with at most one other batch
size (a partial last batch), so XLA compiles each step a bounded number of times
whatever the data:

- demo, textured and occluded MNIST (``--jit-compile``), smallNORB: images or frame
  sequences of one size (smallNORB's training crops and its test pairs alike);
- music: windows of ``window`` steps, or whole chorales padded to the longest chorale
  read, the same length for the training and validation splits (the NLL per step of
  whole chorales runs through a ``tf.function`` of its own, not an XLA step);
- CLEVR: every question of a split padded to the split's longest question, whatever
  the lengths of a batch's questions;
- Sort-of-CLEVR: questions of ``MAX_QUESTION_LENGTH`` tokens; its final scores of each
  half of the validation questions (batches of 256) give the test step up to five batch
  sizes (32 and the remainder for validation in ``fit``, 256 and each half's remainder:
  4 compilations for the default 2,000 questions), a number fixed by the options, not
  by the data or the epochs.

(Recorded as ``XlaShapes`` records them, without compiling: the steps run without XLA.)
"""

import contextlib
import json

import numpy as np
import pytest
import tensorflow as tf

from tests.applications.test_tracing import XlaShapes
from tests.conftest import shared_path


class AllShapes(XlaShapes):
    """:class:`XlaShapes`, and also the batches that arrays make (``fit``'s
    ``validation_data``, ``evaluate``, ``predict``: cut at their batch size, Keras'
    32 by default) and ``predict``'s datasets, under ``"predict"`` for ``predict``."""

    def __init__(self):
        super().__init__()
        self.shapes["predict"] = set()

    def _arrays(self, x, batch_size, key):
        arrays = [np.asarray(a) for a in tf.nest.flatten(x)]
        batch_size = batch_size or 32
        for start in range(0, len(arrays[0]), batch_size):
            self.shapes[key].add(tuple((len(a[start:start + batch_size]),) + a.shape[1:] for a in arrays))

    @contextlib.contextmanager
    def recording(self):
        from keras.src.backend.tensorflow import trainer as tf_trainer

        recorder, cls = self, tf_trainer.TensorFlowTrainer
        with super().recording():  # (its fit and evaluate then run inside these)
            fit, evaluate, predict = cls.fit, cls.evaluate, cls.predict

            def with_xla(model):  # (XlaShapes' own fit and evaluate turn jit_compile off)
                if model.jit_compile:
                    model._recorded_under_xla = True
                return getattr(model, "_recorded_under_xla", False)

            def recorded_fit(model, x=None, y=None, batch_size=None, *args, validation_data=None,
                             validation_batch_size=None, **kwargs):
                if with_xla(model) and isinstance(validation_data, tuple):
                    recorder._arrays(validation_data[0], validation_batch_size or batch_size, "test")
                return fit(model, x, y, batch_size, *args, validation_data=validation_data,
                           validation_batch_size=validation_batch_size, **kwargs)

            def recorded_evaluate(model, x=None, y=None, batch_size=None, *args, **kwargs):
                cached = kwargs.get("_use_cached_eval_dataset")  # (fit's validation: recorded above)
                if with_xla(model) and not isinstance(x, tf.data.Dataset) and not cached:
                    recorder._arrays(x, batch_size, "test")
                return evaluate(model, x, y, batch_size, *args, **kwargs)

            def recorded_predict(model, x, batch_size=None, *args, **kwargs):
                if with_xla(model):
                    if isinstance(x, tf.data.Dataset):
                        x = recorder._recorded(x, "predict")
                    else:
                        recorder._arrays(x, batch_size, "predict")
                    model.jit_compile = False
                return predict(model, x, batch_size, *args, **kwargs)

            cls.fit, cls.evaluate, cls.predict = recorded_fit, recorded_evaluate, recorded_predict
            try:
                yield self
            finally:
                cls.fit, cls.evaluate, cls.predict = fit, evaluate, predict


def batch_sizes_and_shapes(shapes):
    """``(batch sizes, shapes without the batch dimension)`` of recorded batches."""
    sizes = {batch[0][0] for batch in shapes}
    rest = {tuple(s[1:] for s in batch) for batch in shapes}
    assert all(len({s[0] for s in batch}) == 1 for batch in shapes), shapes  # one batch size per batch
    return sizes, rest


def assert_bounded(xla, key, shape, batch_sizes):
    """Every batch of ``key`` has the inputs' shapes ``shape`` (batch aside), in batches of ``batch_sizes``."""
    sizes, rest = batch_sizes_and_shapes(xla.shapes[key])
    assert rest == {shape}, (key, sorted(xla.shapes[key]))
    assert sizes <= set(batch_sizes), (key, sorted(xla.shapes[key]))


# ------------------------------------------------------------------ images and frames


def test_demo_feeds_one_image_shape_in_three_epochs(tmp_path):
    from applications import demo

    tiny = {"filters": 4, "primary_capsules": 2, "hidden_capsules": 2, "pose_size": 2, "n_iters": 1}
    with AllShapes().recording() as xla:
        demo.train(str(tmp_path / "run"), epochs=3, batch_size=16, limit=60, verbose=0, model_options=tiny)
    assert_bounded(xla, "train", ((8, 8, 1),), {16})  # 48 training digits: 3 whole batches
    assert_bounded(xla, "test", ((8, 8, 1),), {12})  # 12 validation (and test) digits


def test_textured_mnist_feeds_one_image_shape(tmp_path):
    from applications import textured_mnist as tm

    with AllShapes().recording() as xla:
        tm.train(shared_path("data", "mnist"), run_dir=str(tmp_path / "run"), num_train=8, num_test=4, n_groups=2,
                 n_iters=1, epochs=2, batch_size=4, conv_units=4, dense_units=8, pool=2, verbose=0, seed=1)
    for key in ("train", "test", "predict"):
        assert_bounded(xla, key, ((28, 28, 1),), {4})


def test_occluded_mnist_with_xla_feeds_one_sequence_shape(tmp_path):
    from applications import occluded_mnist as om

    with AllShapes().recording() as xla:
        om.train(run_dir=str(tmp_path / "run"), data_dir=str(shared_path("data", "mnist")), epochs=2, num_train=12,
                 num_test=8, variant="temporal", jit_compile=True, conv_units=(4,), dense_units=8, batch_size=8,
                 frame_size=16, verbose=0)
    frames = xla.shapes["train"] and next(iter(xla.shapes["train"]))[0][1:]
    assert frames and frames[1:] == (16, 16, 1)
    assert_bounded(xla, "train", (frames,), {8, 4})  # 12 sequences: a batch of 8 and a partial one of 4
    assert_bounded(xla, "test", (frames,), {8})
    assert_bounded(xla, "predict", (frames,), {8})


def test_smallnorb_feeds_training_crops_and_test_pairs_of_one_size(tmp_path):
    import tensorflow_datasets as tfds

    from applications import smallnorb

    with tfds.testing.mock_data(num_examples=8), AllShapes().recording() as xla:
        smallnorb.train(data_dir=str(tmp_path / "tfds"), run_dir=str(tmp_path / "run"), epochs=2, batch_size=4,
                        image_size=24, steps_per_epoch=2, validation_steps=5, seed=7, verbose=0,
                        model_kwargs=dict(d_chns=8, n_parts=8))
    assert_bounded(xla, "train", ((24, 24, 2),), {4})
    assert_bounded(xla, "test", ((24, 24, 2),), {4})


# ------------------------------------------------------------------------- music


@pytest.fixture(scope="module")
def short_chorales(tmp_path_factory):
    from tests.applications.short_data import write_short_chorales

    return write_short_chorales(tmp_path_factory.mktemp("short_chorales"))


def test_music_feeds_windows_of_one_length(tmp_path, short_chorales):
    from applications import music

    with AllShapes().recording() as xla:
        music.train(short_chorales, run_dir=str(tmp_path / "run"), epochs=2, batch_size=4, window=3, limit=5,
                    units=(4, 4), verbose=0, sample_steps=2)
    sizes, rest = batch_sizes_and_shapes(xla.shapes["train"])
    assert rest == {((3, 88),)} and len(sizes) <= 2, sorted(xla.shapes["train"])  # a partial last batch at most
    sizes, rest = batch_sizes_and_shapes(xla.shapes["test"])
    assert rest == {((3, 88),)} and len(sizes) <= 2, sorted(xla.shapes["test"])


def test_music_whole_chorales_of_every_split_are_padded_to_one_length(short_chorales):
    # (train(window=None) builds its datasets as here: every split padded to the longest
    # chorale read, so the training and validation batches have one length)
    from applications import music

    rolls, longest = music.load_rolls(short_chorales, 5)
    assert len({len(roll) for roll in rolls["train"] + rolls["valid"]}) > 2  # chorales of many lengths
    lengths = set()
    for split, shuffle in (("train", True), ("valid", False)):
        for nade in (False, True):
            data = music.make_dataset(rolls[split], 2, longest, shuffle, window=None, targets_as_input=nade)
            for x, targets, mask in data:
                x = x["rolls"] if nade else x
                lengths |= {x.shape[1], targets.shape[1], mask.shape[1]}
    assert lengths == {longest}


# ------------------------------------------------------------------ questions


def _clevr_cache_of_questions_of_many_lengths(folder):
    """The tiny CLEVR cache, its questions made 6 to 10 tokens long (a word repeated)."""
    from tests.applications.tiny_data import tiny_clevr_cache

    cache = tiny_clevr_cache(folder)
    for split in ("train", "validation"):
        path = folder / f"{split}_questions.json"
        table = json.loads(path.read_text())
        table["question"] = ["really " * (i % 5) + q for i, q in enumerate(table["question"])]
        path.write_text(json.dumps(table))
    return cache


def test_clevr_feeds_one_question_length_per_split(tmp_path):
    from applications import clevr
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE

    cache = _clevr_cache_of_questions_of_many_lengths(tmp_path / "cache")
    with AllShapes().recording() as xla:
        clevr.train(cache, run_dir=str(tmp_path / "run"), epochs=2, batch_size=4, image_size=CLEVR_IMAGE_SIZE,
                    seed=2, verbose=0, model_kwargs={"units": 8, "embedding_dim": 4, "max_steps": 1})
    for key in ("train", "test"):
        # inputs sorted by name: features [2, 2, 8], question [length]
        sizes, rest = batch_sizes_and_shapes(xla.shapes[key])
        assert rest == {((2, 2, 8), (10,))}, (key, sorted(xla.shapes[key]))  # "really " * 4 + 6 tokens
        assert len(sizes) <= 2, (key, sorted(xla.shapes[key]))


def test_sort_of_clevr_feeds_questions_of_one_length(tmp_path):
    from applications import sort_of_clevr as soc

    with AllShapes().recording() as xla:
        soc.train(str(tmp_path / "run"), steps=3, epochs=2, batch_size=8, validation_examples=41,
                  model_kwargs={"units": 8, "embedding_dim": 4, "max_steps": 1}, verbose=0)
    sizes, rest = batch_sizes_and_shapes(xla.shapes["train"])
    assert sizes == {8} and len(rest) == 1, sorted(xla.shapes["train"])
    (shapes,) = rest
    assert sorted(shapes) == sorted([(soc.MAX_QUESTION_LENGTH,), (soc.NUM_OBJECTS, soc.KB_DIM)]), shapes
    sizes, test_rest = batch_sizes_and_shapes(xla.shapes["test"])
    assert test_rest == rest, sorted(xla.shapes["test"])
    # validation in fit: 41 questions in 32 + 9; the final scores: 20 and 21
    assert sizes == {32, 9, 20, 21}, sorted(xla.shapes["test"])
