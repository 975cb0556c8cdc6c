"""Capsule text classification (CCCapsNet): text pipeline, datasets, model, recipe."""

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from applications.text_classification import data, recipe
from applications.text_classification import model as model_lib
from keras_capsules.losses import CapsuleLoss
from tests.applications.short_data import check_the_recorded_sst_folder, write_sst_prefix
from tests.applications.verbose_checks import VERBOSE_VALUES, Unread, assert_verbose_checked_first, reached
from tests.conftest import shared_path

SST_DIR = shared_path("data", "sst")
TINY = dict(embedding_dim=8, gru_units=8, capsule_dim=4, class_capsule_dim=4, n_iters=2)


def _tokens(ragged_or_dense):
    values = ragged_or_dense.to_list() if isinstance(ragged_or_dense, tf.RaggedTensor) else ragged_or_dense.numpy().tolist()
    if values and isinstance(values[0], list):
        return [[t.decode() for t in row] for row in values]
    return [t.decode() for t in values]


# ---------------------------------------------------------------------- text


def test_preprocess_hand_written_strings():
    assert _tokens(data.preprocess("Hello, World! It's 2019.")) == [
        "hello", ",", "world", "!", "it", "'", "s", "2", "0", "1", "9", ".",
    ]
    batch = data.preprocess(["abc123def  x--y", "ÉCOLE été\t3.5%", ""])
    assert _tokens(batch) == [
        ["abc", "1", "2", "3", "def", "x", "-", "-", "y"],
        ["école", "été", "3", ".", "5", "%"],
        [],
    ]
    assert _tokens(data.preprocess("a b c d e", max_length=3)) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="max_length"):
        data.preprocess("a", max_length=0)


def test_preprocess_keeps_combining_marks_inside_their_words():
    # A combining mark (\\pM) was taken for punctuation: "naïve" written decomposed
    # (NFD) became "nai", a lone diaeresis and "ve", and every Devanagari word fell
    # apart at its vowel signs. Marks stay in their word, and NFD and NFC spellings
    # give the same tokens (the same vocabulary ids).
    import unicodedata

    text = "Naïve café, नमस्ते दुनिया!"
    expected = ["naïve", "café", ",", "नमस्ते", "दुनिया", "!"]
    assert _tokens(data.preprocess(unicodedata.normalize("NFC", text))) == expected
    assert _tokens(data.preprocess(unicodedata.normalize("NFD", text))) == expected
    # The zero-width (non-)joiner is part of Persian and Indic spellings, not punctuation.
    assert _tokens(data.preprocess("می\u200cخواهم क्\u200dष")) == ["می\u200cخواهم", "क्\u200dष"]


def test_preprocess_keeps_the_text_after_a_nul():
    # Audit (2026-12-01): tf.strings.lower(encoding="utf-8") stops at a NUL, so a stray
    # NUL (scraped corpora have them) silently cut the rest of the text away.
    assert _tokens(data.preprocess("Good\x00 but the REST is bad")) == ["good", "but", "the", "rest", "is", "bad"]
    assert _tokens(data.preprocess("a\x00b")) == ["a", "b"]


def test_preprocess_runs_inside_tf_data():
    ds = tf.data.Dataset.from_tensor_slices(["Hi there!", "42"]).map(lambda t: data.preprocess(t))
    assert [[t.decode() for t in x] for x in ds.as_numpy_iterator()] == [["hi", "there", "!"], ["4", "2"]]


def test_vocabulary_is_most_frequent_first_with_reserved_ids():
    texts = ["b a a", "c b a", "d"]
    vocab = data.build_vocabulary(texts)
    assert vocab == ["a", "b", "c", "d"]  # counts 3, 2, 1, 1 (ties alphabetical)
    assert data.build_vocabulary(texts, max_size=4) == ["a", "b"]
    assert data.build_vocabulary(tf.data.Dataset.from_tensor_slices((texts, [0, 1, 0])), min_count=2) == ["a", "b"]
    lookup = data.make_lookup(vocab)
    assert lookup.vocabulary_size() == 6
    ids = data.encode(["A b zzz", "d"], lookup)
    assert ids.to_list() == [[2, 3, data.OOV_ID], [5]]
    assert ids.dtype == tf.int32


def test_vocabulary_refuses_one_string_for_a_list_of_texts():
    # One string was read as a list of its characters: a vocabulary of letters, silently.
    with pytest.raises(ValueError, match=r"a list of strings.*Received: texts='good film'"):
        data.build_vocabulary("good film")
    with pytest.raises(ValueError, match=r"Received: texts=b'good'"):
        data.build_vocabulary(b"good")
    assert data.build_vocabulary(("good film", "film")) == ["film", "good"]


@pytest.mark.parametrize("options, message", [
    (dict(min_count=float("nan")), "`min_count` must be an integer >= 0. Received: min_count=nan"),
    (dict(min_count=None), "`min_count` must be an integer >= 0. Received: min_count=None"),
    (dict(min_count="2"), "`min_count` must be an integer >= 0. Received: min_count='2'"),
    (dict(batch_size=0), "`batch_size` must be an integer >= 1. Received: batch_size=0"),
    (dict(batch_size=1.5), "`batch_size` must be an integer >= 1. Received: batch_size=1.5"),
    (dict(max_size=3.7), "`max_size` must be an integer >= 3 .*Received: max_size=3.7"),
    (dict(max_size="10"), "`max_size` must be an integer >= 3 .*Received: max_size='10'"),
])
def test_vocabulary_refuses_bad_numbers_before_reading_the_texts(options, message):
    # audit s69: min_count=NaN gave an empty vocabulary silently, None or "2" a TypeError after
    # the pass over every text, batch_size=0 a TensorFlow InvalidArgumentError
    from applications.errors import InputError

    with pytest.raises(InputError, match=message):
        data.build_vocabulary(["a good film"], **options)
    assert data.build_vocabulary(["a a b"], min_count=0, max_size=np.int64(3)) == ["a"]


def test_bucketing_batches_similar_lengths_padded_with_zeros():
    lengths = [1, 2, 3, 9, 10, 11, 30, 31, 2, 10]
    ds = tf.data.Dataset.from_generator(
        lambda: ((np.arange(1, n + 1, dtype="int32"), np.int32(n)) for n in lengths),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)),
    )
    batches = list(data.bucket_batches(ds, batch_size=3, boundaries=(8, 16)).as_numpy_iterator())
    seen = []
    for ids, labels in batches:
        assert ids.ndim == 2 and ids.shape[0] == len(labels) <= 3
        assert ids.shape[1] == labels.max()  # padded to the longest of its batch only
        buckets = {0 if n < 8 else 1 if n < 16 else 2 for n in labels}
        assert len(buckets) == 1, labels
        for row, n in zip(ids, labels):
            assert (row[:n] > 0).all() and (row[n:] == data.PAD_ID).all()
        seen += labels.tolist()
    assert sorted(seen) == sorted(lengths)
    batched = data.bucket_batches(ds, batch_size=3, boundaries=(8, 16))
    assert batched.cardinality() == tf.data.UNKNOWN_CARDINALITY
    assert data.with_cardinality(batched).cardinality() == len(batches)
    with pytest.raises(ValueError, match="increasing"):
        data.bucket_batches(ds, 3, boundaries=(16, 8))


def test_evaluation_batches_count_empty_texts():
    # make_dataset dropped every text without a token, also from validation and test
    # data: accuracy was computed over the remaining examples only (here 2 of 4).
    texts = ["good film", "", " \t ", "bad"]
    raw = tf.data.Dataset.from_tensor_slices((tf.constant(texts), tf.constant([1, 0, 1, 0], tf.int32)))
    lookup = data.make_lookup(["good", "film", "bad"])
    batches = list(data.make_dataset(raw, lookup, batch_size=8, boundaries=(8,)).as_numpy_iterator())
    [(ids, labels)] = batches
    assert labels.tolist() == [1, 0, 1, 0]
    assert ids.tolist() == [[2, 3], [data.OOV_ID, 0], [data.OOV_ID, 0], [4, 0]]
    model = model_lib.build_model(lookup.vocabulary_size(), 2, routing="linear", **TINY)
    model_lib.compile_model(model)
    loss, accuracy = model.evaluate(data.make_dataset(raw, lookup, batch_size=1), verbose=0)
    assert np.isfinite(loss) and np.isfinite(accuracy)
    # Training data still drops them (no evidence), unless asked to keep them.
    train = data.make_dataset(raw, lookup, batch_size=8, shuffle=True, seed=0)
    assert sum(len(y) for _, y in train.as_numpy_iterator()) == 2
    kept = data.make_dataset(raw, lookup, batch_size=8, shuffle=True, drop_empty=False)
    assert sum(len(y) for _, y in kept.as_numpy_iterator()) == 4


@pytest.mark.parametrize("name", ["ag_news", "yelp_polarity"])
def test_tfds_pipelines_offline_with_mock_data(name, tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        raw = data.load_split(name, "train", data_dir=str(tmp_path))
        texts, labels = zip(*raw.as_numpy_iterator())
        assert len(texts) == 12 and all(isinstance(t, bytes) for t in texts)
        assert all(0 <= y < data.num_classes(name) for y in labels)
        lookup = data.make_lookup(data.build_vocabulary(raw, max_size=50))
        dataset = data.make_dataset(data.load_split(name, "test", str(tmp_path), limit=7), lookup, 4)
        assert dataset.options().autotune.enabled is False  # distribute.pipeline_options
        batches = list(dataset)
    assert sum(int(ids.shape[0]) for ids, _ in batches) == 7  # every test example counts
    for ids, y in batches:
        assert ids.dtype == tf.int32 and y.dtype == tf.int32 and ids.shape[0] == y.shape[0]
    assert data.num_classes("ag_news") == 4 and data.num_classes("yelp_polarity") == 2
    assert data.splits(name) == ("train", "test", "test")


def test_yelp_texts_are_read_without_the_escapes_of_their_csv_file(tmp_path):
    # audit (2026-11-28): TFDS's yelp_polarity_reviews keeps the escapes of Zhang et al.'s CSV
    # (a line break written as a backslash and an "n", a quote doubled); the word after every
    # line break became "n" + word ("nthe") and each quote two tokens.
    import tensorflow_datasets as tfds

    # a line of yelp_review_polarity_csv/train.csv, cut as TFDS's builder cuts it (line[5:-2])
    line = '"2","Great food.\\n\\nThe staff said ""hi"" \\\\o/"\n'
    written = line[5:-2]
    assert written == 'Great food.\\n\\nThe staff said ""hi"" \\\\o/'

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices({"text": [written, "fine"], "label": [1, 0]})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        raw = list(data.load_split("yelp_polarity", "train", data_dir=str(tmp_path)).as_numpy_iterator())
    assert raw[0] == (b'Great food.  The staff said "hi" \\\\o/', 1) and raw[1] == (b"fine", 0)
    assert _tokens(data.preprocess(raw[0][0].decode())) == [
        "great", "food", ".", "the", "staff", "said", '"', "hi", '"', "\\", "\\", "o", "/"]
    # (the unescaping itself, on any string tensor)
    assert data.unescape_csv_text(tf.constant(['a\\nb ""c""'])).numpy().tolist() == [b'a b "c"']


def test_sst_splits_from_tree_files():
    raw = data.load_split("sst2", "test", SST_DIR)
    labels = [y for _, y in raw.as_numpy_iterator()]
    assert len(labels) == 1821 and set(labels) == {0, 1}
    five = data.load_split("sst5", "dev", SST_DIR, limit=20)
    assert {int(y) for _, y in five.as_numpy_iterator()} <= set(range(5))
    phrases = data.load_split("sst2", "dev", SST_DIR, phrases=True)
    assert phrases.cardinality() > 872
    assert data.num_classes("sst5") == 5 and data.splits("sst2") == ("train", "dev", "test")
    with pytest.raises(ValueError, match="dataset"):
        data.load_split("imdb", "train", SST_DIR)
    with pytest.raises(ValueError, match="data_dir"):
        data.load_split("sst2", "train")


# ---------------------------------------------------------------------- model


def _ids(lengths, vocab=50, pad_to=None, seed=0):
    rng = np.random.default_rng(seed)
    width = pad_to or max(lengths)
    ids = np.zeros((len(lengths), width), "int32")
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, vocab, n)
    return ids


@pytest.mark.parametrize("routing", model_lib.ROUTINGS)
@pytest.mark.parametrize("embedding", model_lib.EMBEDDINGS)
def test_every_option_builds_runs_and_has_finite_gradients(routing, embedding):
    model = model_lib.build_model(50, 3, routing=routing, embedding=embedding, **TINY)
    ids = _ids([5, 3, 7])
    with tf.GradientTape() as tape:
        scores = model(ids, training=True)
        loss = CapsuleLoss()(np.array([0, 1, 2]), scores)
    scores = scores.numpy()
    assert scores.shape == (3, 3) and np.all((scores >= 0) & (scores <= 1))
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)
    assert all(np.isfinite(keras.ops.convert_to_numpy(tf.convert_to_tensor(g))).all() for g in grads)


@pytest.mark.parametrize("routing", model_lib.ROUTINGS)
def test_an_all_padding_row_gives_finite_scores_and_gradients(routing):
    # The masked mean over tokens divided by the number of real tokens: a row with none
    # (an empty text in the user's own batches) was 0 / 0, NaN scores with the linear
    # head, and NaN gradients for every weight with each head (one such training step
    # made the whole model NaN). The row's sentence vector is now zero.
    model = model_lib.build_model(50, 3, routing=routing, **TINY)
    ids = np.concatenate([_ids([4]), np.zeros((1, 4), "int32")])
    with tf.GradientTape() as tape:
        scores = model(ids, training=True)
        loss = CapsuleLoss()(np.array([0, 1]), scores)
    assert np.isfinite(scores.numpy()).all()
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads)
    np.testing.assert_allclose(model(ids[:1]).numpy(), model(ids).numpy()[:1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("routing", model_lib.ROUTINGS)
def test_padding_never_changes_predictions(routing):
    model = model_lib.build_model(50, 4, routing=routing, **TINY)
    lengths = [6, 2, 4]
    short = _ids(lengths, pad_to=6)
    long = _ids(lengths, pad_to=17)
    np.testing.assert_allclose(model(short), model(long), atol=1e-5)
    alone = np.concatenate([model(short[i : i + 1, :n]) for i, n in enumerate(lengths)])
    np.testing.assert_allclose(model(long), alone, atol=1e-5)


def test_sentence_vector_is_cut_into_capsules_routed_with_one_weight_set_each():
    model = model_lib.build_model(50, 3, routing="kmeans", **TINY)
    caps = model.get_layer("sentence_capsules")
    assert tuple(caps.output.shape) == (None, 2, 4)  # gru_units 8 / capsule_dim 4
    assert tuple(model.get_layer("routing").kernel.shape) == (2, 3, 4, 4)  # per input
    assert tuple(model.get_layer("bigru2").output.shape) == (None, None, 8)  # directions summed
    # The routed capsules are the masked mean of the GRU outputs, cut in pieces.
    ids = _ids([4, 2], pad_to=6)
    trunk = keras.Model(model.input, [model.get_layer("bigru2").output, caps.output])
    states, pieces = (t.numpy() for t in trunk(ids))
    for row, n in enumerate([4, 2]):
        np.testing.assert_allclose(pieces[row].reshape(-1), states[row, :n].mean(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="divide"):
        model_lib.build_model(50, 2, gru_units=8, capsule_dim=3)
    with pytest.raises(ValueError, match="capsule_dim"):
        model_lib.build_model(50, 2, capsule_dim=0)
    with pytest.raises(ValueError, match="routing"):
        model_lib.build_model(50, 2, routing="em")
    with pytest.raises(ValueError, match="embedding"):
        model_lib.build_model(50, 2, embedding="glove")


def test_full_model_keras_round_trip(tmp_path):
    model = model_lib.build_model(50, 4, **TINY)
    ids = _ids([5, 2, 8])
    path = tmp_path / "cccapsnet.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded(ids), model(ids), atol=1e-6)
    assert type(loaded.get_layer("routing")).__name__ == "KMeansRouting"


def test_compositional_embedding_halves_the_parameters():
    report = model_lib.parameter_report(60000, 4, embedding_dim=64, num_codebooks=8, gru_units=8)
    comp, std = report["compositional"]["embedding"], report["standard"]["embedding"]
    assert std == 60000 * 64 == 3_840_000
    assert comp == 60000 * 8 * 4 + 8 * 4 * 64  # the paper's 1.92M (K = 4 codewords)
    assert comp <= 0.55 * std
    assert report["standard"]["total"] - report["compositional"]["total"] == std - comp


# ---------------------------------------------------------------------- recipe


def test_the_parameter_report_counts_both_embeddings_as_built_models_have_them():
    # one model is built (train's, when it passes it) and the other embedding alone: the
    # recorded numbers are those of the two really built models, whichever is given
    # (options off their defaults; 3,000 ids take more codewords than the default 4)
    options = dict(TINY, embedding_dim=5, num_codebooks=3, routing="dynamic")
    models = {embedding: model_lib.build_model(3000, 3, embedding=embedding, **options)
              for embedding in model_lib.EMBEDDINGS}
    built = {embedding: {"embedding": model_lib.embedding_parameters(model), "total": int(model.count_params())}
             for embedding, model in models.items()}
    assert built["standard"]["embedding"] == 3000 * 5 != built["compositional"]["embedding"]
    for embedding, model in models.items():
        assert model_lib.parameter_report(3000, 3, model=model, embedding=embedding, **options) == built, embedding
        assert model_lib.parameter_report(3000, 3, embedding=embedding, **options) == built, embedding
        other = next(kind for kind in model_lib.EMBEDDINGS if kind != embedding)
        for wrong in (dict(embedding=other), dict(embedding=embedding, vocab_size=2999)):
            arguments = {"vocab_size": 3000, **options, **wrong}
            with pytest.raises(ValueError, match="must be the model of these arguments"):
                model_lib.parameter_report(arguments.pop("vocab_size"), 3, model=model, **arguments)
        with pytest.raises(ValueError, match="`embedding` must be one of"):
            model_lib.parameter_report(3000, 3, model=model, **dict(options, embedding="glove"))


def loaded_params(run_dir):
    return keras.saving.load_model(run_dir / "model.keras").count_params()


@pytest.fixture(scope="module")
def short_sst(tmp_path_factory):
    """The first 200 trees of every SST file (read-only). A run with ``limit`` N reads the
    same first sentences from it as from the full files, which it would parse entirely
    (seconds a run); with no limit evaluate scores its 177 SST-2 test sentences, not
    the 1,821 of the full test split."""
    return str(write_sst_prefix(tmp_path_factory.mktemp("sst"), lines=200))


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, short_sst):
    """One trained run read by the evaluate tests and test_tiny_training_on_real_sst_sentences
    (sst2, limit 16, max_length 20, verbose):
    ``(run_dir, result, stdout of train)``. No test writes in ``run_dir``."""
    import contextlib
    import io

    run_dir = tmp_path_factory.mktemp("sst2_run") / "run"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = recipe.train(dataset="sst2", data_dir=short_sst, run_dir=str(run_dir), epochs=1, batch_size=8,
                              limit=16, max_length=20, jit_compile=False, verbose=1, **TINY)
    return run_dir, result, out.getvalue()


@pytest.fixture(scope="module")
def sst2_run_scores(sst2_run, short_sst):
    """``evaluate`` of the shared run on the 16 test sentences train scored, read by two
    tests: ``{"recorded": (result, stdout, stderr), "max_length_100": (...)}``, the first
    with the max_length train recorded and verbose=1, the other with max_length=100 and
    verbose=0. No test writes in the run."""
    import contextlib
    import io

    model = str(sst2_run[0] / "model.keras")
    scores = {}
    for key, options in (("recorded", dict(verbose=1)), ("max_length_100", dict(max_length=100))):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            result = recipe.evaluate(model, "sst2", short_sst, limit=16, **options)
        scores[key] = result, out.getvalue(), err.getvalue()
    return scores


def test_evaluate_refuses_another_sst_test_file_where_the_runs_was(sst2_run, short_sst, tmp_path, capsys):
    # evaluate scored whatever test.txt --data-dir held: another one in the run's folder was
    # reported as the run's test accuracy. metrics.json records the SST tree files'
    # fingerprint now (here of a copy of the shared run, its record pointed at a copy of
    # its files): the same files elsewhere are the run's, another test.txt elsewhere is
    # scored with a note.
    import shutil

    from applications import checks
    from tests.applications.short_data import check_another_sst_test_file

    run_dir, result, _ = sst2_run
    run, first = tmp_path / "run", tmp_path / "first"
    shutil.copytree(run_dir, run)
    metrics_path, model = run / "metrics.json", str(run / "model.keras")
    metrics = json.loads(metrics_path.read_text())
    assert metrics["data_fingerprint"] == checks.data_fingerprint("text_classification", data_dir=short_sst,
                                                                  dataset="sst2")
    shutil.copytree(short_sst, first)
    metrics_path.write_text(json.dumps({**metrics, "data_fingerprint": {**metrics["data_fingerprint"],
                                                                        "source": str(first)}}))
    for folder in (first, short_sst):  # the run's folder, and the same files elsewhere
        assert recipe.evaluate(model, data_dir=str(folder), limit=16)["test_accuracy"] == pytest.approx(
            result["test_accuracy"], abs=1e-6)
    assert capsys.readouterr().err == ""
    # another test.txt there is refused, elsewhere scored with a note
    check_another_sst_test_file(lambda folder: recipe.evaluate(model, data_dir=str(folder), limit=16)["test_accuracy"],
                                run, first, tmp_path / "else", capsys)
    os.rename(tmp_path / "else", first)
    del metrics["data_fingerprint"]  # no fingerprint (older runs): as before
    metrics_path.write_text(json.dumps(metrics))
    assert recipe.evaluate(model, data_dir=str(first), limit=16)["test_accuracy"] >= 0


def test_evaluate_reads_the_tree_files_in_the_folder_train_recorded(sst2_run, tmp_path, capsys, monkeypatch):
    # (2026-12-06) `evaluate text_classification` of an SST run needed --data-dir ("sst2 needs
    # --data-dir"), though train records the tree files' folder (the source of its
    # data_fingerprint): music and occluded_mnist read the recorded one
    import shutil

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    run_dir, result, _ = sst2_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    model = str(run / "model.keras")
    check_the_recorded_sst_folder(
        run, ["evaluate", "text_classification", "--model", str(run), "--limit", "16", "--quiet"],
        lambda data_dir: recipe.evaluate(model, data_dir=data_dir, limit=16), "test_accuracy",
        result["test_accuracy"], tmp_path, capsys, "sst2 needs --data-dir")
    # a TFDS set's folder is a location, which no record gives: TFDS's default, as before
    recorded = str(run_dir / "model.keras")
    assert recipe.recorded_data_dir(recorded, "sst5") == json.loads((run_dir / "metrics.json").read_text())[
        "data_fingerprint"]["source"]
    assert recipe.recorded_data_dir(recorded, "ag_news") is None


def test_tiny_training_on_real_sst_sentences(sst2_run):
    # (the shared run: sst2, routing kmeans, 1 epoch of batches of 8, limit 16; read only)
    run_dir, result, _ = sst2_run
    assert result["routing"] == "kmeans"
    assert 0.0 <= result["test_accuracy"] <= 1.0
    params = result["parameters"]  # (tiny D = 8: codes cost more than vectors here)
    assert params["standard"]["embedding"] == result["vocab_size"] * 8
    assert params["compositional"]["total"] == loaded_params(run_dir)
    for name in ("model.keras", "vocab.txt", "history.png", "metrics.json"):
        assert (run_dir / name).stat().st_size > 0, name
    assert os.path.isdir(run_dir / "logs")
    assert not [p for p in os.listdir(run_dir) if ".tmp-" in p]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(result["test_accuracy"])
    loaded = keras.saving.load_model(run_dir / "model.keras")
    vocab = data.load_vocabulary(run_dir / "vocab.txt")
    assert loaded.get_layer("embedding").input_dim == len(vocab) + 2 == result["vocab_size"]
    ids = data.encode(["a gripping , funny film ."], data.make_lookup(vocab)).to_tensor()
    assert loaded(ids).shape == (1, 2)


@pytest.mark.parametrize("text, message", [
    ("good\n\nfilm\n", "line 2 is blank"),
    ("good\nfilm\n\n", "line 3 is blank"),  # a blank line at the end too: it would be a word
    ("good\n \t\nfilm\n", "line 2 is blank"),
    ("good\nfilm\ngood\n", "line 3 repeats 'good' of line 1"),
    (b"good\nfilm\n\xffbad\n", "line 3 is not UTF-8"),
])
def test_a_hand_edited_vocabulary_is_refused_naming_the_line(text, message, tmp_path, capsys, monkeypatch):
    # A vocab.txt edited by hand with a blank or a repeated line failed in Keras'
    # StringLookup ("Found reserved mask token at unexpected location", "at least one
    # repeated term"), with a traceback naming neither the file nor the line.
    from applications import __main__ as cli
    from applications.errors import InputError

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    path = tmp_path / "vocab.txt"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=f"^the vocabulary {re.escape(repr(str(path)))}: {message}") as info:
        data.load_vocabulary(path)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    (tmp_path / "model.keras").write_bytes(b"not read: the vocabulary comes first")
    assert cli.main(["evaluate", "text_classification", "--model", str(tmp_path / "model.keras"),
                     "--data-dir", str(SST_DIR), "--vocabulary", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-capsules: error: the vocabulary {str(path)!r}:") and err.count("\n") == 1, err


def test_every_vocabulary_the_writer_writes_reads_back_unchanged(tmp_path):
    # The checks of load_vocabulary refuse nothing that build_vocabulary + save_vocabulary
    # make: tokens hold no white space (blank lines), are counted once (repeats), and
    # "[UNK]" is split into "[", "unk", "]". Odd characters are tokens of their own.
    texts = ["[UNK] a\x1c b \u00a0 \u2028 c\u200dd , 12 naïve", "e\x85f \ufeff g\u0301 ."]
    vocabulary = data.build_vocabulary(texts)
    assert "[UNK]" not in vocabulary and "[" in vocabulary and "\x1c" in vocabulary
    data.save_vocabulary(vocabulary, tmp_path / "vocab.txt")
    assert data.load_vocabulary(tmp_path / "vocab.txt") == vocabulary
    assert data.make_lookup(vocabulary).vocabulary_size() == len(vocabulary) + 2
    # Lines no token can be ("[UNK]": "[", "unk", "]") are words no text gets, kept as such.
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\ngood\n")
    assert data.load_vocabulary(tmp_path / "vocab.txt") == ["[PAD]", "[UNK]", "good"]


def test_evaluate_refuses_a_vocabulary_of_another_size_and_compiles_an_uncompiled_model(tmp_path, short_sst):
    # A vocab.txt that does not belong to the model (--vocabulary of another run) gave
    # ids past the embedding: a "Graph execution error" traceback from inside the
    # model, or, with a smaller vocabulary, every word read as another one, silently.
    # Merged with test_evaluate_scores_a_model_saved_without_compiling (one model saved and
    # scored, not two): the model is saved uncompiled, which evaluate compiles.
    from applications.errors import CommandLineError, InputError

    model_lib.build_model(12, 2, **TINY).save(tmp_path / "model.keras")
    for words in (30, 4):
        data.save_vocabulary([f"w{i}" for i in range(words)], tmp_path / "vocab.txt")
        with pytest.raises(InputError, match=rf"model embeds 12 ids.*Received: vocab_size={words + 2} "):
            recipe.evaluate(str(tmp_path / "model.keras"), "sst2", short_sst, limit=4)
    data.save_vocabulary([f"w{i}" for i in range(10)], tmp_path / "vocab.txt")
    # audit (2026-11-27): a model saved without compiling got Keras' "You must call `compile()`
    # before using the model"
    result = recipe.evaluate(str(tmp_path / "model.keras"), "sst2", short_sst, limit=4)
    assert 0 <= result["test_accuracy"] <= 1
    # A model of another application is named as such (it has no word embedding).
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    other.save(tmp_path / "other.keras")
    with pytest.raises(CommandLineError, match="not a text classifier"):
        recipe.evaluate(str(tmp_path / "other.keras"), "sst2", short_sst, vocabulary_path=str(tmp_path / "vocab.txt"))


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(dropout=1.5), "Received: dropout=1.5"),
        (dict(gru_units=100, capsule_dim=8), "Received: gru_units=100, capsule_dim=8"),
        (dict(similarity="cos"), "Received: similarity='cos'"),
        (dict(n_iters=0), "Received: n_iters=0"),
        (dict(class_capsule_dim=2.5), "Received: class_capsule_dim=2.5"),
        (dict(routing="em"), "Received: routing='em'"),
        (dict(codebook_stddev=float("nan")), "Received: codebook_stddev=nan"),
        (dict(codes_stddev=-1.0), "Received: codes_stddev=-1.0"),
        (dict(codes_stddev=None), "Received: codes_stddev=None"),
    ],
)
def test_bad_model_options_are_refused_before_the_data_is_prepared(options, message, tmp_path, monkeypatch):
    """They used to fail in build_model, after the vocabulary and every split were made."""

    def prepare_data(*args, **kwargs):
        raise AssertionError("data prepared before the options were checked")

    monkeypatch.setattr(recipe, "prepare_data", prepare_data)
    with pytest.raises(ValueError, match=message):
        recipe.train(dataset="sst2", data_dir=SST_DIR, run_dir=str(tmp_path / "run"), verbose=0, **options)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=message):
        model_lib.build_model(50, 2, **options)


@pytest.mark.parametrize("vocab_size,num_classes,message", [
    (0, 4, "Received: vocab_size=0"), (2.5, 4, "Received: vocab_size=2.5"), (1, 4, "Received: vocab_size=1"),
    (100, 0, "Received: num_classes=0"), (100, True, "Received: num_classes=True"),
    (100, 1, "`num_classes` must be an integer >= 2. Received: num_classes=1"),
])
def test_build_model_names_a_bad_vocab_size_or_num_classes(vocab_size, num_classes, message):
    # Audit (2026-11-30): the layers refused them under their own names (input_dim, n_out).
    # Audit apps2: num_classes=1 built a classifier whose arg-max is always right
    from applications.errors import InputError

    with pytest.raises(InputError, match=message):
        model_lib.build_model(vocab_size, num_classes)


def test_command_line_refuses_bad_numbers(capsys):
    import argparse

    from applications.text_classification import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser, "train")
    assert parser.parse_args(["--dropout", "0.25"]).dropout == 0.25
    for bad in ("1.5", "-0.1", "nan", "half"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--dropout", bad])
        assert f"expected a number in [0, 1), got '{bad}'" in capsys.readouterr().err
    for option in ("--epochs", "--batch-size", "--learning-rate", "--vocab-size", "--limit"):
        with pytest.raises(SystemExit):
            recipe.main([option, "0"])
        assert f"argument {option}" in capsys.readouterr().err


def test_command_line_train_refuses_bad_model_options_first(tmp_path, capsys):
    """One error line, exit code 2, and no run directory left behind."""
    from applications.__main__ import main

    run_dir = tmp_path / "run"
    code = main(["train", "text_classification", "--data-dir", str(SST_DIR), "--run-dir", str(run_dir),
                 "--gru-units", "100", "--capsule-dim", "8", "--quiet"])
    assert code == 2
    assert "must divide `--gru-units` (the sentence vector is cut into capsules). Received: --gru-units 100, --capsule-dim 8" in capsys.readouterr().err
    assert not run_dir.exists()


@pytest.mark.parametrize("max_length", [2.5, 0, True])
def test_preprocess_refuses_a_max_length_that_is_not_a_positive_integer(max_length):
    # 2.5 was silently cut to 2
    with pytest.raises(ValueError, match="Received: max_length="):
        data.preprocess(["a b c"], max_length=max_length)


@pytest.mark.parametrize("batch_size", [0, 2.0])
def test_bucket_batches_refuses_a_bad_batch_size_at_once(batch_size):
    # 0 failed only when the dataset was iterated, inside tf.data
    ds = tf.data.Dataset.from_tensor_slices(([[2, 3], [4, 0]], [0, 1]))
    with pytest.raises(ValueError, match="Received: batch_size="):
        data.bucket_batches(ds, batch_size)


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_a_resumed_run_ends_with_the_weights_and_epochs_run_of_the_uninterrupted_run(tmp_path, monkeypatch, short_sst):
    # A crash in epoch 2 and a rerun: the resumed process reshuffled its first epoch as
    # the uninterrupted run's epoch 0 (tf.data counts the iterators of a process; max
    # weight difference 1.2e-3 here). Now epoch e is shuffled by (seed, e)
    # (data.make_dataset's first_epoch). Dropout 0.5: its masks' SeedGenerator state, which
    # Keras' save_weights leaves out, is in the backup (without it 5.3e-3).
    # Merged with test_epochs_run_counts_the_epochs_before_a_resume (one run, not two more):
    # epochs_run counted the epochs of the last process only: 0 for a run finished from
    # its backup after a crash between fit and the model save.
    from applications import fault_tolerance, sst_trees
    from tests.applications import cli_helpers

    parsed, parse = {}, sst_trees.load_split

    def load_split(data_dir, split, granularity="5", **options):  # the tree files parsed once, not in each run
        key = (data_dir, split, granularity, tuple(sorted(options.items())))
        if key not in parsed:
            parsed[key] = parse(data_dir, split, granularity, **options)
        texts, labels = parsed[key]
        return list(texts), labels.copy()

    monkeypatch.setattr(sst_trees, "load_split", load_split)
    backups = []

    def train(run_dir, callbacks=(), **kwargs):
        resumable = fault_tolerance.resumable_callbacks(run_dir)
        backups.append(resumable[0])
        return recipe.train(run_dir=run_dir, callbacks=[*resumable, *callbacks], **kwargs)

    kwargs = dict(dataset="sst2", data_dir=short_sst, epochs=3, batch_size=4, limit=24, max_length=20, seed=3,
                  jit_compile=False, verbose=0, **{**TINY, "dropout": 0.5})
    train(str(tmp_path / "whole"), **kwargs)
    resumed = str(tmp_path / "resumed")
    with pytest.raises(RuntimeError, match="simulated"):
        train(resumed, [cli_helpers.CrashAt(2, 1)], **kwargs)
    # the resumed process crashes too, after its fit, before the model is saved: the last one
    # resumes at the end and trains no epoch (its epochs_run counts the epochs before)
    with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="simulated"):
        train(resumed, [cli_helpers.crash_when_saving_after_fit(patch)], **kwargs)
    result = train(resumed, **kwargs)
    assert backups[2].restored_epoch == 2 and backups[3].restored_epoch == 3
    assert result["epochs_run"] == 3  # was 0: the epochs of the last process only
    assert cli_helpers.max_weight_difference(tmp_path / "whole" / "model.keras",
                                             tmp_path / "resumed" / "model.keras") == 0.0


def test_the_module_entry_point_refuses_a_negative_seed(capsys):
    # audit (2026-11-27): --seed took any int, and -1 ended in numpy's ValueError traceback
    with pytest.raises(SystemExit) as exit_info:
        recipe.main(["--seed", "-1"])
    assert exit_info.value.code == 2
    assert "--seed" in capsys.readouterr().err


def test_evaluate_cuts_the_texts_at_the_max_length_train_recorded(sst2_run, sst2_run_scores):
    # audit (2026-11-28): evaluate cut every text at 5,000 tokens whatever train had used, so
    # `train --max-length 20` then `evaluate` (same model, same data) reported another loss
    # (some of the 16 test texts are longer than 20 tokens: test_train_and_evaluate_report_...)
    # (the evaluations: recipe.evaluate(model, "sst2", short_sst, limit=16, ...), sst2_run_scores)
    run_dir, result, _ = sst2_run
    assert json.loads((run_dir / "metrics.json").read_text())["max_length"] == 20
    again = sst2_run_scores["recorded"][0]
    assert again["test_loss"] == pytest.approx(result["test_loss"], rel=1e-5)
    assert again["test_accuracy"] == pytest.approx(result["test_accuracy"])
    # a max_length given is used as it is
    longer = sst2_run_scores["max_length_100"][0]
    assert longer["max_length"] == 100
    assert longer["test_loss"] != pytest.approx(result["test_loss"], rel=1e-5)


def test_evaluate_scores_the_dataset_train_recorded(tmp_path, capsys, monkeypatch, short_sst):
    # `evaluate text_classification` of a model trained (or tuned) on another dataset than
    # sst2 was refused in one line ("the model has 5 classes but sst2 has 2") unless told
    # its --dataset again, though train (and tune) recorded it beside the model
    import argparse

    from applications import __main__ as cli
    from applications.errors import InputError
    from applications.text_classification import cli as tc_cli

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    run_dir = tmp_path / "run"
    result = recipe.train(dataset="sst5", data_dir=short_sst, run_dir=str(run_dir), epochs=1, batch_size=8,
                          limit=16, max_length=20, jit_compile=False, verbose=0, **TINY)
    assert json.loads((run_dir / "metrics.json").read_text())["dataset"] == "sst5"
    # (TensorFlow runs already: its intra-op threads as they are, not the application's 1)
    threads = str(tf.config.threading.get_intra_op_parallelism_threads())
    argv = ["evaluate", "text_classification", "--model", str(run_dir), "--data-dir", short_sst,
            "--limit", "16", "--quiet", "--intra-op-threads", threads]
    capsys.readouterr()
    assert cli.main(argv) == 0, capsys.readouterr().err
    again = json.loads(capsys.readouterr().out)
    assert again["test_loss"] == pytest.approx(result["test_loss"], rel=1e-5)
    assert again["test_accuracy"] == pytest.approx(result["test_accuracy"])
    # a --dataset given wins (here: refused, the model has five classes)
    assert cli.main([*argv, "--dataset", "sst2"]) == 2
    err = capsys.readouterr().err
    assert "the model has 5 classes but sst2 has 2: pass the --dataset" in err and err.count("\n") == 1, err
    # nothing recorded (a model moved away from its run, a damaged record): sst2, as before
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for recorded in ("sst3", None):
        if recorded is None:
            del metrics["dataset"]
        else:
            metrics["dataset"] = recorded
        (run_dir / "metrics.json").write_text(json.dumps(metrics))
        with pytest.raises(InputError, match="the model has 5 classes but sst2 has 2"):
            recipe.evaluate(str(run_dir / "model.keras"), data_dir=short_sst, limit=16)
    parser = argparse.ArgumentParser()
    tc_cli.add_arguments(parser, "evaluate")
    assert parser.parse_args([]).dataset is None
    assert "(default: the one `train` recorded beside the model, else sst2)" in " ".join(parser.format_help().split())
    parser = argparse.ArgumentParser()
    tc_cli.add_arguments(parser, "train")
    assert parser.parse_args([]).dataset == "sst2"


@pytest.mark.graph_mode  # graph mode: eager took longer (each evaluate runs the GRU step by step)
def test_evaluate_scores_the_test_examples_train_scored_unless_told_otherwise(tmp_path, capsys, monkeypatch,
                                                                              sst2_run, short_sst):
    # `train --limit N` cut every split, the test split it scored included, but recorded no N,
    # and `evaluate` of its model then scored every test example: another loss and accuracy
    # than train reported. ("every": those of the short copy of SST, more than 40.)
    import argparse
    import shutil

    from applications import __main__ as cli
    from applications.text_classification import cli as tc_cli

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    run_dir, result, _ = sst2_run
    assert json.loads((run_dir / "metrics.json").read_text())["limit"] == 16
    assert len(list(data.load_split("sst2", "test", short_sst))) > 40
    # (TensorFlow runs already: its intra-op threads as they are, not the application's 1)
    threads = str(tf.config.threading.get_intra_op_parallelism_threads())
    argv = ["evaluate", "text_classification", "--model", str(run_dir), "--data-dir", short_sst,
            "--quiet", "--intra-op-threads", threads]
    capsys.readouterr()
    assert cli.main(argv) == 0, capsys.readouterr().err
    again = json.loads(capsys.readouterr().out)
    assert again["test_loss"] == pytest.approx(result["test_loss"], rel=1e-5)
    assert again["test_accuracy"] == pytest.approx(result["test_accuracy"])
    # a --limit given wins
    assert cli.main([*argv, "--limit", "40"]) == 0, capsys.readouterr().err
    forty = json.loads(capsys.readouterr().out)
    assert forty["test_loss"] != pytest.approx(result["test_loss"], rel=1e-5)
    assert forty["test_loss"] == pytest.approx(
        recipe.evaluate(str(run_dir / "model.keras"), data_dir=short_sst, limit=40)["test_loss"], rel=1e-6)
    # nothing recorded (a model moved away from its run, a run on every example): all, as before
    every = recipe.evaluate(str(run_dir / "model.keras"), data_dir=short_sst, limit=10**6)
    assert every["test_loss"] != pytest.approx(result["test_loss"], rel=1e-5)
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("model.keras", "vocab.txt"):
        shutil.copy(run_dir / name, moved / name)
    for recorded in (None, {"limit": None}, {"limit": 0}):
        if recorded is not None:
            (moved / "metrics.json").write_text(json.dumps(recorded))
        # (max_length as train's: a model moved away lost the one recorded too)
        scored = recipe.evaluate(str(moved / "model.keras"), data_dir=short_sst, max_length=20)
        assert scored["test_loss"] == pytest.approx(every["test_loss"], rel=1e-6), recorded
    parser = argparse.ArgumentParser()
    tc_cli.add_arguments(parser, "evaluate")
    assert parser.parse_args([]).limit is None
    assert ("score only the first N test examples (default: the --limit `train` recorded beside the model, "
            "else all; a larger N: all)") in " ".join(parser.format_help().split())
    parser = argparse.ArgumentParser()
    tc_cli.add_arguments(parser, "train")
    assert "use only the first N examples of every split" in " ".join(parser.format_help().split())


@pytest.mark.parametrize("options, message", [
    (dict(vocab_size=2), "Received: vocab_size=2"),  # was "`max_size` must be at least 3", a name not given
    (dict(max_length=0), "Received: max_length=0"),  # was a StagingError traceback from inside tf.data
])
def test_train_refuses_bad_data_options_by_their_names_before_the_run_directory(options, message, tmp_path):
    # audit (2026-11-28)
    with pytest.raises(ValueError, match=f"^`{next(iter(options))}` must be an integer >= .*{message}$"):
        recipe.train(dataset="sst2", data_dir=SST_DIR, run_dir=str(tmp_path / "run"), epochs=1, limit=8,
                     verbose=0, **options, **TINY)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="^`max_length` must be an integer >= 1. Received: max_length=0$"):
        data.build_vocabulary(["a good film"], max_length=0)


@pytest.mark.parametrize("options, message", [
    # epochs=0 trained nothing, then saved and scored the untrained model as a finished run
    (dict(epochs=0), "^`epochs` must be an integer >= 1. Received: epochs=0$"),
    # limit=-1 trained and tested on every SST example but the last of each split (texts[:-1])
    (dict(limit=-1), "^`limit` must be an integer >= 1. Received: limit=-1$"),
    (dict(limit=0), "^`limit` must be an integer >= 1. Received: limit=0$"),
    (dict(batch_size=0), "^`batch_size` must be an integer >= 1. Received: batch_size=0$"),
    (dict(learning_rate=-1.0), "^`learning_rate` must be a finite number > 0. Received: learning_rate=-1.0$"),
    (dict(dataset="sst3"), "^`dataset` must be one of .*Received: dataset='sst3'$"),
])
def test_train_refuses_bad_recipe_numbers_before_the_run_directory(options, message, tmp_path, monkeypatch):
    # audit (2026-11-28): refused in one line before any text is read
    def no_data(*args, **kwargs):
        raise AssertionError("data read before the options were checked")

    monkeypatch.setattr(recipe, "prepare_data", no_data)
    kwargs = dict(dataset="sst2", data_dir=SST_DIR, run_dir=str(tmp_path / "run"), epochs=1, limit=8, verbose=0)
    with pytest.raises(ValueError, match=message):
        recipe.train(**{**kwargs, **options}, **TINY)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("verbose", VERBOSE_VALUES)
def test_train_evaluate_and_the_data_passes_check_verbose_before_any_work(verbose, tmp_path, monkeypatch):
    # Audit (verbose): fit and evaluate took any verbose ("no" and -1 hid their progress
    # bars, True showed them), once the run directory was made or the model loaded; the
    # data passes' progress bars and lines were shown for "no" and -1. A numpy integer is taken.
    from applications import console

    prepare_data = recipe.prepare_data
    for module, name in ((recipe, "create_run_dir"), (recipe, "prepare_data"), (recipe.checks, "load_model"),
                         (data, "load_vocabulary"), (data, "load_split"), (console, "progress_bar")):
        monkeypatch.setattr(module, name, reached)
    model_path = tmp_path / "model.keras"
    model_path.write_bytes(b"")  # only its existence (and the vocabulary's) is checked before they are read
    (tmp_path / "vocab.txt").write_text("good\n")
    assert_verbose_checked_first([
        lambda: recipe.train(dataset="sst2", data_dir=SST_DIR, run_dir=str(tmp_path / "run"), epochs=1, limit=8,
                             verbose=verbose, **TINY),
        lambda: recipe.evaluate(str(model_path), "sst2", SST_DIR, verbose=verbose),
        lambda: prepare_data("sst2", SST_DIR, verbose=verbose),
        lambda: data.build_vocabulary(["a good film"], verbose=verbose),
        lambda: data.make_dataset(Unread(), None, verbose=verbose),
        lambda: data.count_batches(Unread(), verbose=verbose),
    ], verbose)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("limit", [-1, 0, True, 2.5])
def test_load_split_refuses_a_limit_that_is_not_a_positive_integer(limit):
    # limit=-1 gave every SST sentence but the last (texts[:-1]), and every TFDS example (take(-1))
    with pytest.raises(ValueError, match=f"^`limit` must be an integer >= 1. Received: limit={limit!r}$"):
        data.load_split("sst2", "test", SST_DIR, limit=limit)
    assert len(list(data.load_split("sst2", "test", SST_DIR, limit=3))) == 3


def test_prepare_data_shows_the_progress_of_its_passes_over_the_data(capsys, short_sst):
    # audit (2026-11-28): the vocabulary, then the encoding and the count of every split,
    # were passes over the data without a word (minutes for yelp_polarity before the first
    # epoch's bar); verbose shows a line and a progress bar for each, and changes no result.
    quiet = recipe.prepare_data("sst2", short_sst, batch_size=4, limit=12, seed=1)
    assert capsys.readouterr().out == ""
    shown = recipe.prepare_data("sst2", short_sst, batch_size=4, limit=12, seed=1, verbose=1)
    out = capsys.readouterr().out
    assert out.index("sst2: the vocabulary of the train split") < out.index("12/12")
    for split in ("validation", "train", "test"):
        assert out.count(f"sst2: encoding the {split} texts, then counting their batches") == 1
    batches = int(shown["train"].cardinality())
    assert re.search(rf"\b{batches}/Unknown", out), out  # the count of batches, ended at the last
    assert shown["vocabulary"] == quiet["vocabulary"] and shown["truncated"] == quiet["truncated"]
    for key in ("train", "validation", "test"):
        assert int(shown[key].cardinality()) == int(quiet[key].cardinality())
        for (ids, labels), (ids2, labels2) in zip(shown[key], quiet[key], strict=True):
            np.testing.assert_array_equal(ids, ids2)
            np.testing.assert_array_equal(labels, labels2)


# ---------------------------------------------------------------------- texts cut at max_length


def test_make_dataset_counts_the_texts_longer_than_max_length():
    # Nothing said how many texts --max-length cut: a user keeping the default 5,000 never
    # learnt that part of the data was thrown away. Tokens are counted, not words:
    # "x,y z" is 4 tokens (2 words) and "1234" is 4 (one per digit).
    texts = ["a b c d", "a b", "x,y z", "one two three", "", "1234"]
    cut = [True, False, True, False, False, True]  # 4, 2, 4, 3 (exactly the limit: kept), 0, 4 tokens
    raw = tf.data.Dataset.from_tensor_slices((tf.constant(texts), tf.constant(range(6), tf.int32)))
    lookup = data.make_lookup(data.build_vocabulary(texts))
    plain = data.make_dataset(raw, lookup, batch_size=8, max_length=3)
    counted, counts = data.make_dataset(raw, lookup, batch_size=8, max_length=3, count_truncated=True)
    assert counts == data.Truncation(truncated=sum(cut), texts=6)
    # the batches are those of make_dataset without the count
    for (ids, labels), (ids2, labels2) in zip(plain.as_numpy_iterator(), counted.as_numpy_iterator(), strict=True):
        np.testing.assert_array_equal(ids, ids2)
        np.testing.assert_array_equal(labels, labels2)
    assert max(ids.shape[1] for ids, _ in counted.as_numpy_iterator()) == 3
    # training data (empty texts dropped), without a cache, and with no limit
    _, counts = data.make_dataset(raw, lookup, 8, shuffle=True, max_length=3, count_truncated=True)
    assert counts == (3, 5)
    _, counts = data.make_dataset(raw, lookup, 8, max_length=3, cache=False, count_truncated=True)
    assert counts == (3, 6)
    _, counts = data.make_dataset(raw, lookup, 8, max_length=None, count_truncated=True)
    assert counts == (0, 6)
    _, counts = data.make_dataset(raw, lookup, 8, max_length=4, count_truncated=True)
    assert counts == (0, 6)


def _longer_than(split, max_length, limit, data_dir):
    raw = data.load_split("sst2", split, data_dir, limit=limit)
    return sum(int(tf.size(data.preprocess(text, None))) > max_length for text, _ in raw.as_numpy_iterator())


def test_train_and_evaluate_report_the_texts_cut_at_max_length(sst2_run, sst2_run_scores, short_sst):
    # (the run: train with verbose=1; out: what it printed)
    run_dir, result, out = sst2_run
    # (the first 16 sentences of each split: some are longer than 20 tokens, one test one is 20)
    expected = {"train": _longer_than("train", 20, 16, short_sst),
                "validation": _longer_than("dev", 20, 16, short_sst),
                "test": _longer_than("test", 20, 16, short_sst)}
    assert all(0 < n < 16 for n in expected.values()), expected
    assert result["truncated_texts"] == expected
    assert json.loads((run_dir / "metrics.json").read_text())["truncated_texts"] == expected
    line = (f"texts longer than --max-length 20 tokens (cut to their first 20): train {expected['train']} of 16, "
            f"validation {expected['validation']} of 16, test {expected['test']} of 16; "
            "a larger --max-length keeps them whole")
    assert out.count(line) == 1, out
    # evaluate (verbose): the count in its result, the line with its progress (stderr)
    again, out, err = sst2_run_scores["recorded"]
    assert again["truncated_texts"] == {"test": expected["test"]} and again["max_length"] == 20
    assert f"texts longer than --max-length 20 tokens (cut to their first 20): test {expected['test']} of 16" in err
    assert "texts longer" not in out
    longer, out, err = sst2_run_scores["max_length_100"]
    assert longer["truncated_texts"] == {"test": 0}
    assert "texts longer" not in out + err  # verbose=0: silent


@pytest.mark.parametrize("limit", [-1, 0, 2.5, True])
def test_evaluate_refuses_a_limit_that_is_not_a_positive_integer(limit, tmp_path):
    # limit=-1 cut the last SST sentence (texts[:-1]) and kept every example of a TFDS set
    from applications.errors import InputError
    from applications.text_classification import recipe

    with pytest.raises(InputError, match="limit"):
        recipe.evaluate(str(tmp_path / "model.keras"), limit=limit)


def test_train_from_python_stops_a_diverged_run_in_one_line(tmp_path, short_sst):
    # audit (2026-11-28): `train` called from Python (without the command line's resumable
    # callbacks) trained a NaN model to the end, then saved and scored it: no error
    from applications.fault_tolerance import TrainingDivergedError
    from tests.applications.cli_helpers import PoisonWeightsAt

    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match=r"^training diverged: the loss became nan in epoch 1, batch 2"):
        recipe.train(dataset="sst2", data_dir=short_sst, run_dir=str(run_dir), epochs=1, batch_size=4, limit=16,
                     max_length=3, jit_compile=False, verbose=0, callbacks=[PoisonWeightsAt(1)], **TINY)
    assert not (run_dir / "model.keras").exists() and not (run_dir / "metrics.json").exists()


def test_train_warns_once_of_a_routing_option_the_linear_head_never_reads(tmp_path, monkeypatch, short_sst):
    # train once built a second model (the other embedding) only to count its parameters,
    # and that build repeated the warning of the model that trains; the parameter report
    # must not build or check anything that warns again
    import warnings

    class Counted(Exception):
        pass

    def stop(model):  # the parameter count, after the model's build
        raise Counted

    monkeypatch.setattr(model_lib, "embedding_parameters", stop)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Counted):
        warnings.simplefilter("always")
        recipe.train(dataset="sst2", data_dir=short_sst, run_dir=str(tmp_path / "run"), routing="linear", epochs=1,
                     batch_size=8, limit=8, verbose=0, **{**TINY, "capsule_dim": 2})
    needs = "has no effect: it needs routing='kmeans' or 'dynamic'."
    assert [str(w.message) for w in caught if "has no effect" in str(w.message)] == [
        f"text_classification.build_model: {option} {needs}" for option in ("capsule_dim=2", "class_capsule_dim=4",
                                                                            "n_iters=2")]


def test_a_python_run_resumed_on_other_sst_files_is_refused_before_training(tmp_path):
    # (2026-12-06) Only the command line's backups recorded the SST tree files (through
    # run_options): a crashed recipe.train called from Python, resumed on other tree files,
    # went on training the restored weights on other sentences (epochs_run 2). Its backups
    # now record the files' fingerprint as the command line's do; the same files moved
    # still resume.
    import shutil

    from applications import checks, fault_tolerance
    from tests.applications.cli_helpers import CrashAt

    first, run_dir = write_sst_prefix(tmp_path / "first", lines=60), tmp_path / "run"

    def train(data_dir, extra=()):
        callbacks = [*fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0}), *extra]
        return recipe.train(run_dir=str(run_dir), dataset="sst2", data_dir=str(data_dir), epochs=2, batch_size=4,
                            limit=12, max_length=10, jit_compile=False, verbose=0, callbacks=callbacks, **TINY)

    with pytest.raises(RuntimeError, match="simulated"):
        train(first, [CrashAt(1)])
    backup = run_dir / fault_tolerance.BACKUP_DIR
    assert json.loads((backup / "training_metadata.json").read_text())["options"] == {
        "seed": 0, "data_fingerprint": checks.data_fingerprint("text_classification", data_dir=str(first),
                                                               dataset="sst2")}
    other = write_sst_prefix(tmp_path / "other", lines=50)
    before = sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file())
    with pytest.raises(fault_tolerance.BackupMismatchError, match="is of a run on other data: SST tree files"):
        train(other)
    assert sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file()) == before
    shutil.move(first, tmp_path / "moved")  # the run's files in another folder
    result = train(tmp_path / "moved")
    assert result["epochs_run"] == 2 and not backup.exists()
