"""CLEVR: positional encoding, tokenization, vocabularies, the cached-feature pipeline
on TFDS mock data with a random-weight ResNet-101, the model, the EMA recipe, plots."""

import contextlib
import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from applications import clevr, fault_tolerance
from tests.applications import cli_helpers
from tests.conftest import as_an_application_test

IMAGE_SIZE = 32  # conv4 of ResNet-101 has stride 16: a 2x2 grid


@pytest.mark.parametrize("mode", ["linear", "sincos"])
@pytest.mark.graph_mode  # graph mode: it checks traced code
def test_positional_encoding_of_features_of_unknown_height_and_width(mode):
    # audit (2026-11-27): "linear" used ops.linspace, whose TensorFlow form tests its
    # length as a Python bool: traced for unknown H and W (a model fed by tf.data with
    # such features) it failed with OperatorNotAllowedInGraphError
    layer = clevr.PositionalEncoding(mode, 8)
    traced = tf.function(layer, input_signature=[tf.TensorSpec((None, None, None, 3))])
    for h, w in [(2, 3), (1, 1), (4, 5)]:
        features = np.zeros((1, h, w, 3), "float32")
        np.testing.assert_allclose(np.asarray(traced(features)), np.asarray(layer(features)), atol=1e-6)
    if mode == "linear":
        np.testing.assert_allclose(np.asarray(traced(np.zeros((1, 1, 5, 3), "float32")))[0, 0, :, 3],
                                   np.linspace(-1, 1, 5), atol=1e-6)
        assert np.asarray(traced(np.zeros((1, 1, 1, 3), "float32")))[0, 0, 0, 3] == -1.0


def test_positional_encoding_values_and_saving(tmp_path):
    features = np.zeros((2, 3, 4, 5), "float32")
    linear = clevr.PositionalEncoding("linear")(features)
    assert linear.shape == (2, 3, 4, 7)
    np.testing.assert_allclose(linear[0, 0, :, 5], np.linspace(-1, 1, 4), atol=1e-6)  # columns
    np.testing.assert_allclose(linear[1, :, 2, 6], [-1, 0, 1], atol=1e-6)  # rows
    sincos = keras.ops.convert_to_numpy(clevr.PositionalEncoding("sincos", 8)(features))
    assert sincos.shape == (2, 3, 4, 13)
    # dim 8: x -> [sin(x), sin(x / 100), cos(x), cos(x / 100)], then the same for y.
    x, y = 3, 2
    expected = [np.sin(x), np.sin(x / 100), np.cos(x), np.cos(x / 100),
                np.sin(y), np.sin(y / 100), np.cos(y), np.cos(y / 100)]
    np.testing.assert_allclose(sincos[1, y, x, 5:], expected, atol=1e-5)
    inputs = keras.Input((None, None, 5))
    model = keras.Model(inputs, clevr.PositionalEncoding("sincos", 8)(inputs))
    assert model.output.shape == (None, None, None, 13)
    model.save(tmp_path / "pe.keras")
    loaded = keras.saving.load_model(tmp_path / "pe.keras")
    np.testing.assert_allclose(loaded(features), sincos, atol=1e-6)
    with pytest.raises(ValueError, match="Received: mode='fourier'"):
        clevr.PositionalEncoding("fourier")
    with pytest.raises(ValueError, match="Received: dim=6"):
        clevr.PositionalEncoding("sincos", 6)


@pytest.mark.parametrize("shape", [(5, 8), (3, 3, 4, 1)])
def test_positional_encoding_refuses_other_ranks(shape):
    # a [batch, cells, C] input built (output shape (None, 5, 10)) and failed in TensorFlow's concat
    with pytest.raises(ValueError, match=r"expects a feature map of shape \[batch, H, W, C\]"):
        clevr.PositionalEncoding("linear")(keras.Input(shape))
    with pytest.raises(ValueError, match=r"expects a feature map of shape \[batch, H, W, C\]"):
        clevr.PositionalEncoding("sincos", 8)(np.zeros((2,) + shape, "float32"))


def test_tokenize_vocabularies_and_encoding():
    tokens = clevr.tokenize(tf.constant(["What color is the cube?", "Are there 2 RED spheres, or not?"]))
    assert [[w.decode() for w in q] for q in tokens.to_list()] == [
        ["what", "color", "is", "the", "cube", "?"],
        ["are", "there", "2", "red", "spheres", ",", "or", "not", "?"],
    ]
    vocabulary, classes = clevr.build_vocabularies(["Is it red?", "Is it blue?"], ["yes", "no", "yes"])
    assert vocabulary == ("<pad>", "<unk>", "?", "blue", "is", "it", "red")
    assert classes == ("no", "yes")
    ids, labels = clevr.encode(["It is green?", "Is it red"], ["no", "maybe"], vocabulary, classes)
    np.testing.assert_array_equal(ids, [[5, 4, 1, 2], [4, 5, 6, 0]])
    np.testing.assert_array_equal(labels, [0, -1])


def test_tokenize_keeps_letters_of_any_script_in_their_words():
    # Audit (2026-11-30): TensorFlow's \w and lower() are ASCII only: "naïve café"
    # gave na | ï | ve | caf | é, and "Été" kept its capital É.
    tokens = clevr.tokenize(tf.constant(["Naïve CAFÉ, Été: größer-als 2½?", "ВСЕ кубы?"]))
    assert [[w.decode() for w in q] for q in tokens.to_list()] == [
        ["naïve", "café", ",", "été", ":", "größer", "-", "als", "2½", "?"],
        ["все", "кубы", "?"],
    ]


def test_tokenize_keeps_the_question_after_a_nul():
    # Audit (2026-12-01): tf.strings.lower(encoding="utf-8") stops at a NUL: "What\\x00 color
    # is it?" became "what".
    tokens = clevr.tokenize(tf.constant(["What\x00 COLOR is it?"]))
    assert [[w.decode() for w in q] for q in tokens.to_list()] == [["what", "color", "is", "it", "?"]]


def test_builders_give_the_paper_shapes():
    tokens = keras.Input((None,), dtype="int32")
    words, question = clevr.input_unit(tokens, 90, embedding_dim=300, units=512)
    assert words.shape == (None, None, 512) and question.shape == (None, 512)
    kb = clevr.image_knowledge_base(keras.Input((14, 14, 1024)), units=512)
    assert kb.shape == (None, 196, 512)
    with pytest.raises(ValueError, match="Received: units=7"):
        clevr.input_unit(tokens, 90, units=7)


@pytest.fixture(scope="module")
def mock_clevr(tmp_path_factory):
    root = tmp_path_factory.mktemp("clevr")
    extractor = clevr.feature_extractor(IMAGE_SIZE, weights=None)  # random weights: no download
    assert extractor.output.shape == (None, 2, 2, 1024)
    with tfds.testing.mock_data(num_examples=5):
        data = clevr.prepare(
            str(root / "cache"), str(root / "tfds"), ("train", "validation"), IMAGE_SIZE,
            weights=None, extractor=extractor, batch_size=2, verbose=0,
        )
    return root, data


def test_features_are_cached_once_with_their_questions(mock_clevr):
    root, data = mock_clevr
    cache = root / "cache"
    features = np.load(data["train"]["features_path"])
    assert features.shape == (5, 2, 2, 1024) and features.dtype == np.float16
    assert np.isfinite(features).all() and features.astype("float32").std() > 0
    assert sorted(os.listdir(cache)) == sorted(
        ["train_32_random.npy", "validation_32_random.npy", "train_questions.json", "validation_questions.json",
         "vocabulary.json"]
    )
    with open(cache / "vocabulary.json") as f:
        assert tuple(json.load(f)["vocabulary"]) == data["vocabulary"]
    train = data["train"]
    assert len(train["image_index"]) == len(train["tokens"]) == len(train["labels"]) > 5
    assert set(train["image_index"]) <= set(range(5)) and (train["labels"] >= 0).all()
    mtime = os.path.getmtime(data["train"]["features_path"])
    # A second pass reuses the cache: no TFDS, no extractor needed.
    paths = clevr.cache_split("train", str(cache), image_size=IMAGE_SIZE, weights=None, extractor=object())
    assert paths[0] == data["train"]["features_path"]
    assert os.path.getmtime(paths[0]) == mtime


def test_dataset_model_and_ema_recipe(mock_clevr, tmp_path):
    _, data = mock_clevr
    train_ds = clevr.make_dataset(**data["train"], batch_size=4, shuffle=True)
    val_ds = clevr.make_dataset(**data["validation"], batch_size=4)
    (x, y), = train_ds.take(1)
    assert x["features"].shape == (4, 2, 2, 1024) and x["question"].dtype == tf.int32
    features = np.load(data["train"]["features_path"])
    index = data["train"]["image_index"]
    first = {tuple(t): i for t, i in zip(data["train"]["tokens"], index)}
    np.testing.assert_allclose(x["features"][0], features[first[tuple(x["question"][0].numpy())]])

    model = clevr.build_model(len(data["vocabulary"]), len(data["classes"]), (2, 2, 1024),
                              units=16, embedding_dim=8, max_steps=2)
    clevr.compile_model(model)
    assert model.optimizer.use_ema and model.optimizer.clipnorm == 8.0
    model.fit(train_ds.take(2), validation_data=val_ds.take(1), epochs=1, verbose=0,
              callbacks=clevr.recipe_callbacks(str(tmp_path)))
    # After fit the model holds the EMA weights (finalize_variable_values).
    for var, ema in zip(model.trainable_weights, model.optimizer._model_variables_moving_average):
        np.testing.assert_allclose(var.numpy(), ema.numpy())
    assert os.listdir(tmp_path / "logs")

    out = clevr.attention_model(model)(x)
    assert out["control_attention"].shape == (4, 2, x["question"].shape[1])
    assert out["read_attention"].shape == (4, 2, 4)
    np.testing.assert_allclose(out["read_attention"].numpy().sum(-1), 1.0, atol=1e-5)
    words = [data["vocabulary"][i] for i in x["question"][0].numpy() if i]
    path = clevr.plot_attention(str(tmp_path / "att.png"), words, out["control_attention"][0],
                                out["read_attention"][0], grid=(2, 2),
                                image=np.random.default_rng(0).uniform(size=(32, 32, 3)))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="does not hold"):
        clevr.plot_attention(str(tmp_path / "bad.png"), words, out["control_attention"][0],
                             out["read_attention"][0], grid=(3, 2))


def test_plot_attention_rejects_bad_arguments(tmp_path):
    words = ["what", "color"]
    control, read = np.full((2, 2), 0.5), np.full((2, 4), 0.25)
    with pytest.raises(ValueError, match="does not hold 4 cells"):
        clevr.plot_attention(str(tmp_path / "bad.png"), words, control, read, grid=(3, 2))
    with pytest.raises(ValueError, match="at least one step"):
        clevr.plot_attention(str(tmp_path / "bad.png"), words, control, read[0])
    assert not (tmp_path / "bad.png").exists()
    clevr.plot_attention(str(tmp_path / "ok.png"), words, control, read, object_names=list("abcd"))
    assert (tmp_path / "ok.png").stat().st_size > 0


def test_train_writes_the_run_outputs(mock_clevr, tmp_path, monkeypatch):
    root, data = mock_clevr
    asked, real_question_image = [], clevr.question_image
    monkeypatch.setattr(clevr, "question_image", lambda *args: asked.append(args) or real_question_image(*args))
    result = clevr.train(
        str(root / "cache"), run_dir=str(tmp_path / "run"), epochs=1, batch_size=32, image_size=IMAGE_SIZE,
        weights=None, model_kwargs={"units": 8, "embedding_dim": 4, "max_steps": 1}, verbose=0,
    )
    assert 0.0 <= result["validation_accuracy"] <= 1.0
    for key in ("model", "plot", "metrics"):
        assert os.path.exists(result[key])
    # the README's attention maps: those of the first validation question (train wrote none)
    assert result["attention"] == str(tmp_path / "run" / "attention.png")
    assert os.path.getsize(result["attention"]) > 1000
    # over the first validation question's image (none here: no TFDS data in the default data_dir)
    assert asked == [("validation", int(data["validation"]["image_index"][0]), None)]
    model = keras.saving.load_model(result["model"])
    with pytest.raises(ValueError, match="`index` must be an integer in"):
        clevr.plot_question_attention(model, data["validation"], data["vocabulary"], data["classes"],
                                      str(tmp_path / "bad.png"), index=len(data["validation"]["tokens"]))
    with pytest.raises(ValueError, match=r"`image` must be an RGB image \[h, w, 3\]. Received shape: \(6, 9\)"):
        clevr.plot_question_attention(model, data["validation"], data["vocabulary"], data["classes"],
                                      str(tmp_path / "bad.png"), image=np.zeros((6, 9)))
    drawn, real_plot = [], clevr.plot_attention
    monkeypatch.setattr(clevr, "plot_attention", lambda *args, **kwargs: drawn.append(kwargs) or real_plot(*args, **kwargs))
    image = np.random.default_rng(0).integers(0, 256, (6, 9, 3), dtype="uint8")
    path = clevr.plot_question_attention(model, data["validation"], data["vocabulary"], data["classes"],
                                         str(tmp_path / "over_image.png"), image=image)
    assert drawn[0]["image"] is not None and np.array_equal(drawn[0]["image"], image) and drawn[0]["grid"] == (2, 2)
    assert os.path.getsize(path) > 1000


def test_question_image_reads_the_split_without_any_download(mock_clevr, tmp_path):
    root, _ = mock_clevr
    assert clevr.question_image("validation", 0, str(tmp_path / "no_tfds_data")) is None
    with tfds.testing.mock_data(num_examples=5):
        expected = [np.asarray(ex["image"])[..., :3] for ex in clevr.load_split("validation", str(root / "tfds"))]
        image = clevr.question_image("validation", 3, str(root / "tfds"))
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[-1] == 3
        np.testing.assert_array_equal(image, expected[3])
        assert not np.array_equal(image, expected[0])
        assert clevr.question_image("validation", 5, str(root / "tfds")) is None  # past the last image
    with pytest.raises(ValueError, match="`image_index` must be a non-negative integer. Received: image_index=-1"):
        clevr.question_image("validation", -1)


def test_plot_attention_rejects_mismatched_maps_words_names_and_grids(tmp_path):
    # Audit 6: these raised an IndexError, matplotlib's shape or FixedLocator errors or
    # a TypeError from inside the drawing.
    words = ["what", "color"]
    control, read = np.full((2, 2), 0.5), np.full((2, 4), 0.25)
    bad = str(tmp_path / "bad.png")
    with pytest.raises(ValueError, match="one row per step"):
        clevr.plot_attention(bad, words, control[:1], read)
    with pytest.raises(ValueError, match="Received: 3 words"):
        clevr.plot_attention(bad, words + ["is"], control, read)
    with pytest.raises(ValueError, match="Received: 1 names"):
        clevr.plot_attention(bad, words, control, read, object_names=["a"])
    with pytest.raises(ValueError, match="Received: grid=4"):
        clevr.plot_attention(bad, words, control, read, grid=4)
    assert not (tmp_path / "bad.png").exists()
    assert clevr.PositionalEncoding("sincos", np.int64(8)).get_config()["dim"] == 8


def test_first_questions_refuses_a_non_positive_limit():
    # Audit 6: limit=-1 silently dropped the last question of every split.
    data = {"vocabulary": ("<pad>",), "train": {"features_path": "f", "tokens": np.arange(4)},
            "validation": {"features_path": "g", "tokens": np.arange(3)}}
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=rf"Received: limit={bad}"):
            clevr.first_questions(data, bad)
    assert clevr.first_questions(data, 2)["train"]["tokens"].tolist() == [0, 1]
    assert clevr.first_questions(data, None) is data


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(model_kwargs={"units": 7}), ValueError, "`units` must be an even integer >= 2"),
    (dict(model_kwargs={"unit": 8}), ValueError, r"Unknown model option\(s\) \['unit'\]"),
    (dict(model_kwargs=[("units", 8)]), ValueError, "`model_kwargs` must be a dict or None"),
    (dict(limit=0), ValueError, "`limit` must be None or a positive integer"),
    (dict(batch_size=0), ValueError, "`batch_size` must be"),
    (dict(learning_rate=-1.0), ValueError, "learning_rate"),
    # audit (mac): any verbose was taken ("no" hid the progress bars, True showed them);
    # image_size=0 was refused as TFDS's clevr not prepared, True looked for train_True.npy
    (dict(verbose="no"), ValueError, re.escape("`verbose` must be 0, 1 or 2. Received: verbose='no'")),
    (dict(verbose=True), ValueError, re.escape("Received: verbose=True")),
    (dict(verbose=3), ValueError, re.escape("Received: verbose=3")),
    (dict(image_size=0), ValueError, re.escape("`image_size` must be an integer >= 1. Received: image_size=0")),
    (dict(image_size=True), ValueError, re.escape("Received: image_size=True")),
    (dict(image_size=224.0), ValueError, re.escape("Received: image_size=224.0")),
])
def test_train_checks_its_options_before_the_features_are_cached(kwargs, error, message, tmp_path, monkeypatch):
    # they were refused only after prepare had cached every image's features (hours for
    # CLEVR on a CPU): an odd --units, a model_kwargs typo, batch_size=0, ...
    monkeypatch.setattr(clevr, "prepare", lambda *a, **k: pytest.fail("the features were cached first"))
    with pytest.raises(error, match=message):
        clevr.train(str(tmp_path / "cache"), run_dir=str(tmp_path / "run"), **kwargs)
    assert not (tmp_path / "run").exists()


def test_prepare_looks_for_the_data_before_loading_resnet(tmp_path, monkeypatch):
    # a CLEVR not prepared in data_dir was reported only after ResNet-101's ImageNet weights
    # were loaded: a 171 MB download, or an offline fetch's retries
    from applications.errors import DataNotFoundError

    monkeypatch.setattr(clevr, "feature_extractor", lambda *a, **k: pytest.fail("ResNet-101 loaded first"))
    with pytest.raises(DataNotFoundError, match="does not exist"):
        clevr.prepare(str(tmp_path / "cache"), str(tmp_path / "missing"))


def test_make_dataset_checks_its_arguments_and_shuffles_an_empty_set(tmp_path):
    # Audit 8: an image index beyond the cache failed with an IndexError inside tf.data in the
    # middle of fit, batch_size=0 and arrays of different lengths with raw tf.data / numpy errors,
    # and shuffle=True with no question kept with "buffer_size must be greater than zero".
    path = str(tmp_path / "train_32.npy")
    np.save(path, np.zeros((3, 2, 2, 4), "float16"))
    index, tokens, labels = np.array([0, 2, 1]), np.ones((3, 5), "int32"), np.array([0, 1, 0], "int32")
    with pytest.raises(ValueError, match=r"index the 3 images .* Received: image indices in \[0, 3\]"):
        clevr.make_dataset(path, np.array([0, 3, 1]), tokens, labels)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        clevr.make_dataset(path, index, tokens, labels, batch_size=0)
    with pytest.raises(ValueError, match="Received: lengths 3, 2 and 3"):
        clevr.make_dataset(path, index, tokens[:2], labels)
    assert list(clevr.make_dataset(path, index, tokens, -np.ones(3, "int32"), shuffle=True)) == []
    (x, y), = clevr.make_dataset(path, index, tokens, labels, batch_size=8, shuffle=True)
    assert x["features"].shape == (3, 2, 2, 4) and sorted(y.numpy()) == [0, 0, 1]


def test_input_unit_takes_numpy_units_and_names_bad_ones():
    # Audit 8: units=np.int64(8) (e.g. from a search space) was refused with
    # "`units` must be even ... Received: units=8".
    model = clevr.build_model(10, 3, (2, 2, 8), units=np.int64(8), embedding_dim=4, max_steps=1)
    assert model.output_shape == (None, 3) and model.get_layer("question_vector").output.shape == (None, 8)
    for bad in (7, 8.0, True, 0):
        with pytest.raises(ValueError, match=rf"even integer >= 2 .*Received: units={bad!r}"):
            clevr.build_model(10, 3, (2, 2, 8), units=bad, embedding_dim=4, max_steps=1)


@pytest.mark.parametrize("verbose", ["no", True, -1, 3])
def test_evaluate_refuses_a_bad_verbose_before_any_work(verbose, tmp_path):
    # Audit (mac): Keras' evaluate and the feature extraction's progress bar took any verbose.
    with pytest.raises(ValueError, match=re.escape(f"`verbose` must be 0, 1 or 2. Received: verbose={verbose!r}")):
        clevr.evaluate(str(tmp_path / "missing.keras"), str(tmp_path / "cache"), verbose=verbose)


def test_build_model_takes_numpy_integer_sizes_and_refuses_a_dropout_of_1():
    # Audit (mac): numpy integers from the data (vocabulary, answers) or a search were refused
    # by Keras' layers as not positive integers ("Received: output_dim=4 (of type int64)",
    # "Received: units=3"), and input_dropout=1.0 built a model whose embeddings and
    # features were all zero in training (Keras' Dropout takes rate=1).
    model = clevr.build_model(np.int64(10), np.int64(3), (2, 2, 8), units=8, embedding_dim=np.int64(4),
                              max_steps=1)
    assert model.output_shape == (None, 3) and model.get_layer("input_embedding").output_dim == 4
    assert model.get_layer("input_embedding").input_dim == 10
    for options, message in ((dict(input_dropout=1.0), "`input_dropout` must be a number in [0, 1). Received: "
                              "input_dropout=1.0"),
                             (dict(input_dropout=-0.5), "Received: input_dropout=-0.5"),
                             (dict(embedding_dim=0), "Received: embedding_dim=0"),
                             (dict(vocabulary_size=0), "Received: vocabulary_size=0"),
                             (dict(num_answers=2.0), "Received: num_answers=2.0")):
        arguments = {"vocabulary_size": 10, "num_answers": 3, "embedding_dim": 4, **options}
        with pytest.raises(ValueError, match=re.escape(message)):
            clevr.build_model(feature_shape=(2, 2, 8), units=8, max_steps=1, **arguments)
    with pytest.raises(ValueError, match=re.escape("`dropout` must be a number in [0, 1). Received: dropout=1")):
        clevr.input_unit(keras.Input((None,), dtype="int32"), 10, 4, 8, dropout=1)


def test_prepare_refuses_no_splits_or_a_bare_split_name(tmp_path):
    # Audit 8: splits=() failed with an IndexError after the loop, and splits="train" was read as
    # the splits "t", "r", "a", ... (a TFDS unknown-split error for "t").
    for bad in ((), [], "train", ("train", 3)):
        with pytest.raises(ValueError, match=r"at least one split name.*Received: splits="):
            clevr.prepare(str(tmp_path), splits=bad, extractor=object())


def test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_run(tmp_path):
    # A crash in epoch 1 and a rerun: the resumed process reshuffled its first epoch as
    # the uninterrupted run's epoch 0 (tf.data counts the iterators of a process; max
    # weight difference 6.7e-5 here). Now epoch e is shuffled by (seed, e) (make_dataset's
    # first_epoch). The saved weights are the EMA (momentum 0.999): a large learning rate
    # keeps a difference visible. The default dropouts too: their masks' SeedGenerator
    # states, which Keras' save_weights leaves out, are in the backup (without them 4.4e-5).
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    cache = tiny_clevr_cache(tmp_path / "cache")  # 18 training questions: 3 batches of up to 8
    backups = []

    def train(run_dir, callbacks=(), **kwargs):
        resumable = fault_tolerance.resumable_callbacks(run_dir)
        backups.append(resumable[0])
        return clevr.train(cache, run_dir=run_dir, callbacks=[*resumable, *callbacks], **kwargs)

    kwargs = dict(epochs=2, batch_size=8, image_size=CLEVR_IMAGE_SIZE, seed=2, verbose=0, learning_rate=1e-2,
                  model_kwargs=dict(units=8, embedding_dim=4, max_steps=1))
    train(str(tmp_path / "whole"), **kwargs)
    cli_helpers.crash_and_resume(train, tmp_path / "resumed", (1, 1), **kwargs)
    assert backups[-1].restored_epoch == 1
    assert cli_helpers.max_weight_difference(tmp_path / "whole" / "model.keras",
                                             tmp_path / "resumed" / "model.keras") == 0.0


def test_features_of_other_resnet_weights_are_not_reused(tmp_path):
    # The cache was named by split and image size only: the features of a random-weight
    # ResNet (weights=None, e.g. a quick trial) were reused for weights="imagenet".
    def extractor(value):
        images = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3))
        out = keras.layers.Lambda(lambda x: 0.0 * x[:, :2, :2, :1] + value)(images)
        return keras.Model(images, keras.layers.Concatenate()([out] * 1024))

    cache = str(tmp_path / "cache")
    with tfds.testing.mock_data(num_examples=3):
        kwargs = dict(data_dir=str(tmp_path / "tfds"), image_size=IMAGE_SIZE, batch_size=2, verbose=0)
        random_path, _ = clevr.cache_split("train", cache, weights=None, extractor=extractor(1.0), **kwargs)
        imagenet_path, _ = clevr.cache_split("train", cache, weights="imagenet", extractor=extractor(2.0), **kwargs)
    assert np.all(np.load(random_path) == 1.0)
    assert np.all(np.load(imagenet_path) == 2.0)  # computed with its own weights
    assert not clevr.is_cached(cache, "validation", IMAGE_SIZE) and clevr.is_cached(cache, "train", IMAGE_SIZE)
    # each is reused for its own weights (no TFDS, no extractor)
    assert clevr.cache_split("train", cache, image_size=IMAGE_SIZE, weights=None, extractor=object())[0] == random_path
    assert clevr.cache_split("train", cache, image_size=IMAGE_SIZE, extractor=object())[0] == imagenet_path


# ---------------------------------------------------------------------- a cache shared by processes
# The workers of --strategy multiworker use one cache folder (RUN_DIR/cache), and so do
# commands run at once with one --cache-dir.

def _constant_extractor(value, on_call=None):
    """A stand-in for ResNet-101 at IMAGE_SIZE: features ``value`` on a 2x2 grid; calls
    ``on_call(number_of_the_call)`` first at each call."""
    images = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3))
    out = keras.layers.Lambda(lambda x: 0.0 * x[:, :2, :2, :1] + value)(images)
    model = keras.Model(images, keras.layers.Concatenate()([out] * 8))

    class Extractor:
        output = model.output
        calls = 0

        def __call__(self, batch, training=False):
            Extractor.calls += 1
            if on_call is not None:
                on_call(Extractor.calls)
            return model(batch, training=training)

    return Extractor()


def test_an_extraction_that_fails_half_way_leaves_no_temporary(tmp_path):
    # An error in the middle of the ResNet pass (a corrupt image, Ctrl-C) left the
    # temporary features file (tens of GB for the training split) in the cache for ever.
    def fail_at_the_second_batch(call):
        if call == 2:
            raise KeyboardInterrupt

    cache = tmp_path / "cache"
    with tfds.testing.mock_data(num_examples=3), pytest.raises(KeyboardInterrupt):
        clevr.cache_split("train", str(cache), str(tmp_path / "tfds"), image_size=IMAGE_SIZE, weights=None,
                          batch_size=2, extractor=_constant_extractor(1.0, fail_at_the_second_batch), verbose=0)
    assert os.listdir(cache) == []
    assert not clevr.is_cached(cache, "train", IMAGE_SIZE, weights=None)


def test_a_writer_with_the_same_pid_on_another_host_never_shares_the_temporary(tmp_path, monkeypatch):
    # Workers on two machines (or in two containers) sharing the cache on a network disk
    # may have the same process id: both wrote ".<name>.tmp-<pid>.npy", the second one
    # truncating the first one's half-written features, and the first one then failed
    # (or renamed the other's half-written features into place as a complete cache).
    monkeypatch.setattr(fault_tolerance, "build_lock", lambda path, verbose=0: contextlib.nullcontext(),
                        raising=False)  # a file system without locks
    cache, kwargs = str(tmp_path / "cache"), dict(image_size=IMAGE_SIZE, weights=None, batch_size=2, verbose=0)
    other = []

    def another_writer(call):
        if call == 1:  # while this writer extracts, the other one (same pid, another host) does it all
            with monkeypatch.context() as patch:
                patch.setattr(fault_tolerance, "_HOST", "another-host")
                other.append(clevr.cache_split("train", cache, str(tmp_path / "tfds"),
                                               extractor=_constant_extractor(1.0), **kwargs))

    with tfds.testing.mock_data(num_examples=3):
        features_path, questions_path = clevr.cache_split(
            "train", cache, str(tmp_path / "tfds"), extractor=_constant_extractor(1.0, another_writer), **kwargs)
    assert other == [(features_path, questions_path)]
    assert sorted(os.listdir(cache)) == ["train_32_random.npy", "train_questions.json"]
    features = np.load(features_path)
    assert features.shape == (3, 2, 2, 8) and np.all(features == 1.0)


def test_two_processes_extract_the_features_once_and_read_the_same_ones(tmp_path):
    # Both workers ran ResNet-101 over the whole split at the same time (hours, and a
    # temporary copy of tens of GB each), and the copy of the slower one replaced the other.
    cache = tmp_path / "cache"
    procs, marks = cli_helpers.start_cache_workers("clevr", cache, tmp_path / "tfds", tmp_path)
    for proc in procs:
        assert cli_helpers.wait(proc, timeout=300) == 0, cli_helpers.tail(proc)
    assert len(list(marks.glob("built-*"))) == 1
    first, second = (np.load(marks / f"read-{proc.pid}.npy") for proc in procs)
    assert first.shape == (3, 2, 2, 4)
    np.testing.assert_array_equal(first, second)
    assert sorted(os.listdir(cache)) == ["train_32_random.npy", "train_questions.json"]


def test_a_writer_killed_mid_extraction_leaves_nothing_that_loads_or_stays(tmp_path):
    # A worker killed during the ResNet pass (OOM killer, preemption) left its temporary
    # features file for ever: every killed run added one, tens of GB each.
    cache = tmp_path / "cache"
    [proc], marks = cli_helpers.start_cache_workers("clevr", cache, tmp_path / "tfds", tmp_path, processes=1,
                                                    hang=True)
    cli_helpers.wait_for_file(marks / f"hanging-{proc.pid}", proc, timeout=300)
    cli_helpers.kill(proc)
    assert os.listdir(cache)  # what the killed writer left ...
    assert not clevr.is_cached(cache, "train", IMAGE_SIZE, weights=None)  # ... is not taken for a cache
    with tfds.testing.mock_data(num_examples=3):
        clevr.cache_split("train", str(cache), str(tmp_path / "tfds"), image_size=IMAGE_SIZE, weights=None,
                          batch_size=2, extractor=_constant_extractor(1.0), verbose=0)
    assert sorted(os.listdir(cache)) == ["train_32_random.npy", "train_questions.json"]  # the next writer removed it


def test_a_cache_directory_that_cannot_be_written_is_a_path_error(tmp_path, monkeypatch):
    # An existing --cache-dir this user may not write: a PermissionError traceback from
    # inside the lock or the extraction; now one line, before any data is read.
    from applications.errors import PathPermissionError

    access = os.access
    # (as a folder without write permission: root writes anyway)
    monkeypatch.setattr(os, "access", lambda path, mode: os.fspath(path) != str(tmp_path) and access(path, mode))
    with pytest.raises(PathPermissionError, match=f"^cannot write into the cache directory {re.escape(repr(str(tmp_path)))}: "
                       "Permission denied"):
        clevr.cache_split("train", str(tmp_path), str(tmp_path / "no-tfds"), image_size=IMAGE_SIZE, weights=None,
                          extractor=object(), verbose=0)
    assert os.listdir(tmp_path) == []


def _cache_with_unseen_answers(folder):
    """The tiny CLEVR cache (``tiny_data``) with one more validation question, whose answer
    ("purple") no training question has; the cache's folder, a ``pathlib.Path``."""
    import pathlib

    from tests.applications.tiny_data import tiny_clevr_cache

    cache = pathlib.Path(tiny_clevr_cache(folder))
    table = json.loads((cache / "validation_questions.json").read_text())
    for key, value in (("image_index", 0), ("question", "What color is the cube?"), ("answer", "purple")):
        table[key].append(value)
    (cache / "validation_questions.json").write_text(json.dumps(table))
    return cache


def test_validation_counts_the_questions_whose_answer_no_training_question_has(tmp_path):
    # Validation (during fit and after it) and evaluate dropped the questions whose answer is
    # not among the training answers: the accuracy was over fewer questions than there are,
    # and overstated (the model cannot give such an answer: each one is an error).
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE

    cache = _cache_with_unseen_answers(tmp_path / "cache")
    result = clevr.train(str(cache), run_dir=str(tmp_path / "run"), epochs=1, batch_size=8,
                         image_size=CLEVR_IMAGE_SIZE, model_kwargs=dict(units=8, embedding_dim=4, max_steps=1),
                         verbose=0)
    data = clevr.prepare(str(cache), image_size=CLEVR_IMAGE_SIZE, extractor=object(), verbose=0)
    labels = data["validation"]["labels"]
    unseen = int((labels < 0).sum())  # "purple", and a count that no training question has
    assert "purple" not in data["classes"] and len(labels) == 19 and unseen == 2
    model = keras.saving.load_model(result["model"])
    ds = clevr.make_dataset(**data["validation"], batch_size=8, drop_unknown=False)
    right = np.argmax(model.predict(ds, verbose=0), -1) == labels
    assert right.any() and not right[labels < 0].any()
    assert result["validation_accuracy"] == pytest.approx(right.mean(), abs=1e-6)  # all 19 questions
    assert result["validation_questions"] == 19 and result["validation_unseen_answers"] == unseen
    assert np.isfinite(result["validation_loss"])
    evaluated = clevr.evaluate(result["model"], str(cache), image_size=CLEVR_IMAGE_SIZE, batch_size=8)
    assert evaluated["validation_accuracy"] == pytest.approx(right.mean(), abs=1e-6)
    assert evaluated["validation_questions"] == 19 and evaluated["validation_unseen_answers"] == unseen
    # a model saved with a loss that cannot score the unseen answers' label is evaluated too
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.save(tmp_path / "older.keras")
    older = clevr.evaluate(str(tmp_path / "older.keras"), str(cache), image_size=CLEVR_IMAGE_SIZE, batch_size=8)
    assert older["validation_accuracy"] == pytest.approx(right.mean(), abs=1e-6)
    assert older["validation_loss"] == pytest.approx(evaluated["validation_loss"], rel=1e-5)


def test_the_validation_loss_is_the_mean_over_the_known_answers_at_any_batch_size(tmp_path):
    # audit s65: the loss left out the questions of unseen answers batch by batch, and Keras
    # weighs a batch's mean by the batch's size: 1.4169 at batch 1, 1.5002 at 18 (of 18)
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE

    cache = _cache_with_unseen_answers(tmp_path / "cache")
    data = clevr.prepare(str(cache), image_size=CLEVR_IMAGE_SIZE, extractor=object(), verbose=0)
    labels = data["validation"]["labels"]
    known = labels != clevr.UNSEEN_ANSWER
    assert len(labels) == 19 and 0 < known.sum() < 19
    keras.utils.set_random_seed(0)
    model = clevr.build_model(len(data["vocabulary"]), len(data["classes"]), clevr.feature_shape(data),
                              units=8, embedding_dim=4, max_steps=1)
    clevr.compile_model(model)
    model.save(tmp_path / "model.keras")
    logits = model.predict(clevr.make_dataset(**data["validation"], batch_size=19, drop_unknown=False), verbose=0)
    logits = logits.astype("float64")
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_p[known, labels[known]].mean()  # by hand: the mean over the known answers
    right = (np.argmax(logits, -1) == labels).mean()
    for batch_size in (1, 4, 19):  # 4: four batches of 4 and one of 3, not all of known answers only
        result = clevr.evaluate(str(tmp_path / "model.keras"), str(cache), image_size=CLEVR_IMAGE_SIZE,
                                batch_size=batch_size)
        assert result["validation_loss"] == pytest.approx(expected, rel=1e-5), batch_size
        assert result["validation_accuracy"] == pytest.approx(right, abs=1e-6), batch_size
    # training batches hold no unseen answer: their loss is the plain mean cross-entropy
    train_labels = data["train"]["labels"][:5]
    logits = np.random.default_rng(0).normal(size=(5, len(data["classes"]))).astype("float32")
    plain = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(train_labels, logits)
    assert float(clevr.answer_loss()(train_labels, logits)) == pytest.approx(float(plain), rel=1e-6)
    (x, y), = clevr.make_dataset(**data["train"], batch_size=64).take(1).as_numpy_iterator()  # no weights
    assert len(y) == (data["train"]["labels"] != clevr.UNSEEN_ANSWER).sum()


@pytest.mark.parametrize("damage", ["questions", "features"])
def test_a_damaged_cache_file_is_one_line_naming_it(damage, tmp_path, capsys):
    # A truncated cache file ended `train clevr` with a traceback (JSONDecodeError;
    # "mmap length is greater than file size").
    import pathlib

    from applications import __main__ as cli
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    cache = pathlib.Path(tiny_clevr_cache(tmp_path / "cache"))
    name = "train_questions.json" if damage == "questions" else f"train_{CLEVR_IMAGE_SIZE}.npy"
    data = (cache / name).read_bytes()
    (cache / name).write_bytes(data[: len(data) // 2])
    code = cli.main(["train", "clevr", "--cache-dir", str(cache), "--data-dir", str(tmp_path / "missing"),
                     "--image-size", str(CLEVR_IMAGE_SIZE), "--epochs", "1", "--quiet",
                     "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and f"the cached file {cache / name} is damaged" in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``(cache, run directory, train's result)``: one epoch of the tiny CLEVR cache
    (``tiny_data``) by ``clevr.train``, the cache outside the run (absolute in
    metrics.json). Read by the two evaluate tests below; neither changes it (the second
    hides the cache only while it checks a recorded cache that is gone, and puts it back)."""
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    folder = tmp_path_factory.mktemp("clevr_run")
    cache = tiny_clevr_cache(folder / "cache")  # batches of 32: each split's 18 questions in one step
    with as_an_application_test():
        result = clevr.train(cache, run_dir=str(folder / "run"), epochs=1, batch_size=32,
                             image_size=CLEVR_IMAGE_SIZE, model_kwargs=dict(units=8, embedding_dim=4, max_steps=1),
                             verbose=0)
    return cache, folder / "run", result


def test_evaluate_reads_the_features_of_the_image_size_that_train_recorded(tmp_path, tiny_run):
    # audit 8: evaluate's --image-size defaulted to 224 whatever size train used: after
    # `train clevr --image-size 32` a plain `evaluate clevr` looked for the features of 224
    # (a one-line error that TFDS clevr is not prepared, though the run's cache was there;
    # with the data, hours of extraction before the model was refused)
    from applications import __main__ as cli
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE

    cache, run, result = tiny_run  # trained with image_size=CLEVR_IMAGE_SIZE
    evaluated = clevr.evaluate(result["model"], cache, data_dir=str(tmp_path / "no-tfds"), batch_size=32)
    assert evaluated["validation_accuracy"] == pytest.approx(result["validation_accuracy"], abs=1e-6)
    assert evaluated["validation_loss"] == pytest.approx(result["validation_loss"], rel=1e-5)
    assert json.loads((run / "metrics.json").read_text())["image_size"] == CLEVR_IMAGE_SIZE
    assert cli.build_parser("clevr").parse_args(["evaluate", "clevr"]).image_size is None
    assert cli.build_parser("clevr").parse_args(["train", "clevr"]).image_size == clevr.IMAGE_SIZE


def test_evaluate_reads_the_cache_that_train_used(tmp_path, capsys, monkeypatch, tiny_run):
    # audit s69: after `train clevr --cache-dir ELSEWHERE`, `evaluate clevr --model RUN` looked
    # only in RUN/cache and stopped at "TFDS clevr is not prepared", the features on disk
    import shutil

    from applications import __main__ as cli
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    options = dict(epochs=1, batch_size=32, image_size=CLEVR_IMAGE_SIZE,
                   model_kwargs=dict(units=8, embedding_dim=4, max_steps=1), verbose=0)
    cache, run, result = tiny_run  # clevr.train(cache, run_dir=run, **options)
    assert json.loads((run / "metrics.json").read_text())["cache_dir"] == str(cache)  # outside the run: absolute
    argv = ["evaluate", "clevr", "--data-dir", str(tmp_path / "no-tfds"), "--batch-size", "32", "--quiet"]
    capsys.readouterr()
    assert cli.main([*argv, "--model", str(run)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["validation_loss"] == pytest.approx(result["validation_loss"], rel=1e-5)
    assert not (run / "cache").exists()
    # a cache inside the run is recorded relative to it: a copy of the run reads its own
    inside = tmp_path / "inside"
    shutil.copytree(cache, inside / "cache")
    result = clevr.train(str(inside / "cache"), run_dir=str(inside), **options)
    assert json.loads((inside / "metrics.json").read_text())["cache_dir"] == "cache"
    shutil.copytree(inside, tmp_path / "copy")
    shutil.rmtree(inside)
    assert cli.main([*argv, "--model", str(tmp_path / "copy")]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["validation_loss"] == pytest.approx(result["validation_loss"], rel=1e-5)
    # a recorded cache that is gone: the model's folder/cache, as before (a copy of the
    # run with the cache in it; the recorded one moved away meanwhile, then back)
    shutil.copytree(run, tmp_path / "run")
    shutil.copytree(cache, tmp_path / "run" / "cache")
    os.rename(cache, tmp_path / "away")
    try:
        assert cli.main([*argv, "--model", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    finally:
        os.rename(tmp_path / "away", cache)
    assert json.loads(capsys.readouterr().out)["validation_loss"] == pytest.approx(
        json.loads((tmp_path / "run" / "metrics.json").read_text())["validation_loss"], rel=1e-5)


def test_evaluate_reads_the_features_of_the_resnet_weights_that_train_recorded(tmp_path):
    # evaluate always read the ImageNet features: a model trained (from Python) on the
    # features of random or file weights was scored on others than it was trained on
    import numpy as np

    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    cache = tiny_clevr_cache(tmp_path / "cache")  # batches of 32: each split's 18 questions in one step
    for split in clevr.SPLITS:  # the features of random weights, beside the ImageNet ones
        imagenet = np.load(f"{cache}/{clevr.features_file(split, CLEVR_IMAGE_SIZE)}")
        np.save(f"{cache}/{clevr.features_file(split, CLEVR_IMAGE_SIZE, None)}", (3 - 2 * imagenet).astype("float16"))
    result = clevr.train(cache, run_dir=str(tmp_path / "run"), epochs=1, batch_size=32, image_size=CLEVR_IMAGE_SIZE,
                         weights=None, model_kwargs=dict(units=8, embedding_dim=4, max_steps=1), verbose=0)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["weights"] is None
    evaluated = clevr.evaluate(result["model"], cache, data_dir=str(tmp_path / "no-tfds"), batch_size=32)
    assert evaluated["validation_loss"] == pytest.approx(result["validation_loss"], rel=1e-5)
    imagenet = clevr.evaluate(result["model"], cache, data_dir=str(tmp_path / "no-tfds"), batch_size=32,
                              weights="imagenet")  # given weights win
    assert imagenet["validation_loss"] != pytest.approx(result["validation_loss"], rel=1e-5)


def test_evaluate_scores_the_validation_questions_that_train_scored(tmp_path, capsys):
    # `train clevr --limit N` scored the first N validation questions but recorded no N, and
    # `evaluate` of its model then scored every validation question: another accuracy than
    # train's, unless told --limit N again
    import argparse
    import shutil

    from applications import __main__ as cli
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    cache = tiny_clevr_cache(tmp_path / "cache")  # 18 validation questions, in one batch of 32
    run = tmp_path / "run"
    result = clevr.train(cache, run_dir=str(run), epochs=1, batch_size=32, image_size=CLEVR_IMAGE_SIZE, limit=5,
                         model_kwargs=dict(units=8, embedding_dim=4, max_steps=1), verbose=0)
    assert result["validation_questions"] == 5
    assert json.loads((run / "metrics.json").read_text())["limit"] == 5
    argv = ["evaluate", "clevr", "--model", str(run), "--cache-dir", cache, "--data-dir", str(tmp_path / "no-tfds"),
            "--batch-size", "32", "--quiet"]
    capsys.readouterr()
    assert cli.main(argv) == 0, capsys.readouterr().err
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["validation_questions"] == 5
    assert evaluated["validation_accuracy"] == pytest.approx(result["validation_accuracy"], abs=1e-6)
    assert evaluated["validation_loss"] == pytest.approx(result["validation_loss"], rel=1e-5)
    # a --limit given wins; one past the questions: all of them
    assert cli.main([*argv, "--limit", "100"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["validation_questions"] == 18
    # nothing recorded (a model moved away from its run, a run on all questions): all
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(run / "model.keras", moved / "model.keras")
    model = str(moved / "model.keras")
    assert clevr.evaluate(model, cache, batch_size=32, image_size=CLEVR_IMAGE_SIZE)["validation_questions"] == 18
    (moved / "metrics.json").write_text(json.dumps({"image_size": CLEVR_IMAGE_SIZE, "limit": None}))
    assert clevr.evaluate(model, cache, batch_size=32)["validation_questions"] == 18
    parser = argparse.ArgumentParser()
    clevr.add_arguments(parser, "evaluate")
    assert parser.parse_args([]).limit is None
    assert "(default: the --limit `train` recorded beside the model, else all; a larger N: all)" in " ".join(
        parser.format_help().split())


def test_feature_extraction_reads_every_image_once_and_pairs_it_with_its_questions(tmp_path):
    # The question counts came from a second pipeline over the split, which read and
    # decoded every image a second time (hours of PNG decoding on CLEVR's 70,000 images).
    reads = []

    def read(image):
        reads.append(1)
        return image

    counts = (2, 0, 3)
    images = np.stack([np.full((8, 8, 3), 10 * (k + 1), "uint8") for k in range(len(counts))])
    questions = [[f"q{k} {j}?" for j in range(3)] for k in range(len(counts))]
    answers = [[f"a{k}{j}" for j in range(3)] for k in range(len(counts))]

    def element(k):
        image = tf.numpy_function(read, [tf.gather(images, k)], tf.uint8)
        image.set_shape((8, 8, 3))
        count = tf.gather(tf.constant(counts), k)
        qa = {"question": tf.gather(tf.constant(questions), k)[:count],
              "answer": tf.gather(tf.constant(answers), k)[:count]}
        return {"image": image, "question_answer": qa}

    ds = tf.data.Dataset.range(len(counts)).map(element)
    pixels = keras.Input((8, 8, 3))
    extractor = keras.Model(pixels, keras.layers.AveragePooling2D(4)(pixels))
    table = clevr._extract(ds, len(counts), str(tmp_path / "f.npy"), extractor, image_size=8, batch_size=2,
                           verbose=0, split="train")
    assert len(reads) == len(counts)
    assert table["image_index"] == [0, 0, 2, 2, 2]
    assert table["question"] == ["q0 0?", "q0 1?", "q2 0?", "q2 1?", "q2 2?"]
    assert table["answer"] == ["a00", "a01", "a20", "a21", "a22"]
    features = np.load(tmp_path / "f.npy")
    want = keras.applications.resnet.preprocess_input(images.astype("float32"))[:, :2, :2]
    np.testing.assert_allclose(features, want, rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_split_without_questions_is_one_line_before_any_training(split, tmp_path, monkeypatch):
    # An empty validation split trained the model, then failed with "ValueError: not
    # enough values to unpack (expected 2, got 0)" from the evaluation of no batches.
    import pathlib

    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    cache = pathlib.Path(tiny_clevr_cache(tmp_path / "cache"))
    (cache / f"{split}_questions.json").write_text(json.dumps({"image_index": [], "question": [], "answer": []}))
    monkeypatch.setattr(clevr, "compile_model", lambda *args, **kwargs: pytest.fail("trained on no questions"))
    message = f"the {split} split of the CLEVR cache {str(cache)!r} has no questions"
    with pytest.raises(ValueError, match=re.escape(message)):
        clevr.train(str(cache), run_dir=str(tmp_path / "run"), epochs=1, batch_size=8, image_size=CLEVR_IMAGE_SIZE,
                    verbose=0)
    if split == "validation":  # refused before the model is even read
        (tmp_path / "model.keras").write_bytes(b"")
        with pytest.raises(ValueError, match=re.escape(message)):
            clevr.evaluate(str(tmp_path / "model.keras"), str(cache), image_size=CLEVR_IMAGE_SIZE, batch_size=8)


@pytest.mark.parametrize("with_image", [False, True])
def test_attention_heat_maps_share_one_colour_scale_from_zero(with_image, tmp_path, monkeypatch):
    # Each step's heat map was scaled to its own range: a near-uniform attention was drawn
    # as full hot and cold spots, like a peaked one, and the steps could not be compared.
    from applications import plotting

    figures = []
    save = plotting.save_and_close
    monkeypatch.setattr(plotting, "save_and_close", lambda fig, path, **kw: figures.append(fig) or save(fig, path, **kw))
    read = np.array([[0.2501, 0.2499, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]])
    image = np.random.default_rng(0).uniform(size=(8, 8, 3)) if with_image else None
    clevr.plot_attention(str(tmp_path / "att.png"), ["what", "color"], np.full((2, 2), 0.5), read, grid=(2, 2),
                         image=image)
    heat_maps = [im for ax in figures[0].axes for im in ax.get_images() if im.get_array().shape == (2, 2)]
    assert len(heat_maps) == 2
    assert [im.get_clim() for im in heat_maps] == [pytest.approx((0.0, 0.7))] * 2


def test_evaluate_refuses_a_model_of_another_vocabulary(tmp_path, capsys):
    # evaluate checked the number of answers but not the words: a model trained on another
    # vocabulary read other words for the cache's token ids (silently), or failed inside
    # its embedding, mid-evaluation, for an id past its rows.
    from applications import __main__ as cli
    from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_clevr_cache

    cache = tiny_clevr_cache(tmp_path / "cache")
    data = clevr.prepare(cache, image_size=CLEVR_IMAGE_SIZE, extractor=object(), verbose=0)
    words, answers = len(data["vocabulary"]), len(data["classes"])
    for rows in (words - 2, words + 3):  # (one of `words` rows: the other evaluate tests)
        model = clevr.build_model(rows, answers, clevr.feature_shape(data), units=8, embedding_dim=4, max_steps=1)
        path = tmp_path / f"model_{rows}.keras"
        model.save(path)
        argv = ["evaluate", "clevr", "--model", str(path), "--cache-dir", cache, "--data-dir",
                str(tmp_path / "no-tfds"), "--image-size", str(CLEVR_IMAGE_SIZE), "--batch-size", "8", "--quiet"]
        code = cli.main(argv)
        err = capsys.readouterr().err
        assert code == 2 and f"an embedding of the cache's {words} words" in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_plot_attention_refuses_an_image_that_is_not_rgb(tmp_path):
    # plot_question_attention checked its image, plot_attention (which Sort-of-CLEVR's plots
    # call) did not: matplotlib's "Invalid shape ... for image data" TypeError, mid-figure.
    control, read = np.full((1, 2), 0.5), np.full((1, 4), 0.25)
    for image in (np.zeros((4, 4, 5)), np.zeros((4, 4)), np.zeros((0, 4, 3))):
        with pytest.raises(ValueError, match=re.escape(f"`image` must be an RGB image [h, w, 3]. Received shape: "
                                                       f"{image.shape}")):
            clevr.plot_attention(str(tmp_path / "att.png"), ["a", "b"], control, read, grid=(2, 2), image=image)
    assert not os.listdir(tmp_path)


def test_train_refuses_model_kwargs_that_the_data_set_before_the_features_are_cached(tmp_path, monkeypatch):
    # The shared check (applications.checks.model_options, as sort_of_clevr's train): build_model's
    # sizes that train takes from the data were called "unknown" options
    monkeypatch.setattr(clevr, "prepare", lambda *a, **k: pytest.fail("the features were cached first"))
    for name in ("vocabulary_size", "num_answers", "feature_shape"):
        with pytest.raises(ValueError, match=re.escape(
            f"Model option(s) [{name!r}] are set by train (from its own arguments or the data), not by model_kwargs; "
            "expected some of ['embedding_dim', 'input_dropout', 'max_steps', 'memory_dropout', 'memory_gate', "
            f"'name', 'output_dropout', 'positional_encoding', 'self_attention', 'units']. Received: model_kwargs="
            f"{{{name!r}: 3}}"
        )):
            clevr.train(str(tmp_path / "cache"), run_dir=str(tmp_path / "run"), model_kwargs={name: 3})
    assert not (tmp_path / "run").exists()
