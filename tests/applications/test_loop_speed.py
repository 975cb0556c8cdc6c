"""Loops of the applications that ran a model eagerly, step after step or batch after
batch, where one traced graph gives the same results several times faster (the
performance audit of 2026-12-06): music's sampling (the ladder's step) and CLEVR's
ResNet-101 feature pass. Each is traced once per loop, and draws or writes what the
eager loop did; with ``tf.config.run_functions_eagerly(True)`` it runs eagerly."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from keras import ops

from applications import clevr, music
from tests.conftest import functions_eager

TINY = dict(units=(8, 4))
CLEVR_IMAGE_SIZE = 32


def _counting(monkeypatch, cls, name):
    """Patches ``cls.name`` to record, at every call, whether it runs eagerly."""
    calls = []
    method = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(tf.executing_eagerly())
        return method(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


@pytest.mark.graph_mode  # it counts how the ladder's step runs: traced code
@pytest.mark.parametrize("readout", ["independent", "nade"])
def test_sampling_traces_the_ladder_step_once_and_draws_the_eager_rolls(monkeypatch, readout):
    # Every step of a sample ran the ladder eagerly: 64 steps of the paper's ladder took
    # 1.5-1.9 s on a loaded 2-core CPU, 0.4-0.5 s traced.
    model = music.build_model(4, readout=readout, nade_units=3, **TINY)
    primer = music.piano_roll([[60, 64, 67], [62]])
    with functions_eager(True):  # the eager loop, as before
        eager = music.sample(model, 12, num_samples=3, seed=5, primer=primer)
    calls = _counting(monkeypatch, type(model.get_layer("rladder")), "step")
    rolls = music.sample(model, 12, num_samples=3, seed=5, primer=primer)
    assert calls == [False]  # 2 primer steps and 12 drawn ones: one trace, no eager step
    np.testing.assert_array_equal(rolls, eager)
    calls.clear()
    assert music.sample(model, 3, num_samples=2, seed=1).shape == (2, 3, 88)  # another sample: its own trace
    assert calls == [False]


def _counting_extractor(calls):
    """A keras.Model stand-in for ResNet-101 at CLEVR_IMAGE_SIZE (a 2x2 grid of 8 features
    that depend on the image); ``calls`` records whether each call of its layer is eager."""

    def features(x):
        calls.append(tf.executing_eagerly())
        pooled = ops.mean(ops.reshape(x, (-1, 2, CLEVR_IMAGE_SIZE // 2, 2, CLEVR_IMAGE_SIZE // 2, 3)), axis=(2, 4))
        return ops.concatenate([pooled, -pooled, pooled ** 2], axis=-1)[..., :8]

    images = keras.Input((CLEVR_IMAGE_SIZE, CLEVR_IMAGE_SIZE, 3))
    model = keras.Model(images, keras.layers.Lambda(features, output_shape=(2, 2, 8))(images))
    calls.clear()  # (Keras called it once to build the model)
    return model


@pytest.mark.graph_mode  # it counts how the extractor runs: traced code
def test_feature_pass_traces_a_keras_extractor_once_and_writes_the_eager_features(tmp_path):
    # Every batch ran ResNet-101 eagerly: 6.4-11.4 s per batch of 32 images at 224x224 on
    # a loaded 2-core CPU, 3.8-5.1 s traced (the same features, to the bit).
    calls = []
    extractor = _counting_extractor(calls)
    kwargs = dict(data_dir=str(tmp_path / "tfds"), image_size=CLEVR_IMAGE_SIZE, weights=None, batch_size=2,
                  extractor=extractor, verbose=0)
    with tfds.testing.mock_data(num_examples=5):
        with functions_eager(True):  # the eager loop, as before
            eager_path, _ = clevr.cache_split("train", str(tmp_path / "eager"), **kwargs)
        assert calls == [True] * 3
        calls.clear()
        path, questions = clevr.cache_split("train", str(tmp_path / "traced"), **kwargs)
    assert calls == [False]  # batches of 2, 2 and 1 image(s): one trace
    features = np.load(path)
    assert features.shape == (5, 2, 2, 8) and features.astype("float32").std() > 0
    np.testing.assert_array_equal(features, np.load(eager_path))
    with open(questions) as f, open(eager_path.replace("train_32_random.npy", "train_questions.json")) as g:
        assert f.read() == g.read()


class _CountingModel:
    """Calls ``model``, recording at every call whether it runs eagerly."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, *args, **kwargs):
        self.calls.append(tf.executing_eagerly())
        return self.model(*args, **kwargs)


@pytest.mark.graph_mode  # it counts how the transformer runs: traced code
def test_embedding_pass_traces_the_transformer_once_for_batches_of_every_length(tmp_path):
    # Every batch of texts (sorted by length: each has its own) ran the transformer
    # eagerly: a MiniLM-sized BERT took 15.0 s for 640 SST dev sentences on a loaded
    # 2-core CPU, 7.1 s traced (states equal to 2e-6).
    import keras_hub

    from applications import sst
    from tests.applications.test_sst import TEXTS, tiny_vocabulary

    keras.utils.set_random_seed(7)
    vocabulary = tiny_vocabulary()
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), num_layers=2, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32, max_sequence_length=32)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    encoder = sst.Encoder(backbone, tokenizer, name="tiny-bert", max_length=12)
    encoder.states_model = counted = _CountingModel(encoder.states_model)
    texts = TEXTS + ["good", "a dull film"]
    assert len({len(ids) for ids in encoder.tokenize(texts)}) >= 4  # batches of several lengths (batch_size=1)
    kwargs = dict(name="t", max_length=12, batch_size=1, dtype="float32", verbose=0)
    with functions_eager(True):  # the eager loop, as before
        eager = sst.embed_texts(texts, encoder, tmp_path / "eager", **kwargs)
    assert counted.calls == [True] * len(texts)
    counted.calls.clear()
    embedded = sst.embed_texts(texts, encoder, tmp_path / "traced", **kwargs)
    assert counted.calls == [False]  # one trace for the 6 batches
    np.testing.assert_array_equal(embedded.lengths, eager.lengths)
    np.testing.assert_allclose(np.asarray(embedded.states), np.asarray(eager.states), atol=1e-5)
    counted.calls.clear()
    sst.embed_texts(texts[:3], encoder, tmp_path / "again", **kwargs)
    assert counted.calls == []  # the encoder's graph serves its next passes too
