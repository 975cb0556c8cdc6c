"""Reproducibility of the applications' training: the same seed trains the same weights
(in one process and in two), another seed other weights, whatever data preparation
(a cache filled or not) came before the model was built."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from applications import clevr, demo, sort_of_clevr, sst  # noqa: F401 (sort_of_clevr: its layers, to load its model)
from tests.applications import cli_helpers
from tests.applications.short_data import write_sst_prefix
from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, tiny_bert_preset, tiny_clevr_cache

EPOCHS, LIMIT = 2, 40  # the demo: 2 epochs of 2 batches, 8 test digits
DEMO_TINY = {"filters": 4, "primary_capsules": 2, "hidden_capsules": 2, "pose_size": 2, "n_iters": 1}
CLEVR_TINY = {"units": 8, "embedding_dim": 4, "max_steps": 1}
SST_TINY = {"hidden_dim": 8, "hidden_capsules": 4, "capsule_dim": 2, "n_iters": 1}


def weights_of(path):
    """The weights of the model saved at ``path``, as numpy arrays."""
    return [np.asarray(w) for w in keras.saving.load_model(str(path), compile=False).weights]


def same_weights(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))


def _demo(run_dir, seed):
    result = demo.train(str(run_dir), epochs=EPOCHS, batch_size=16, seed=seed, limit=LIMIT, verbose=0,
                        model_options=DEMO_TINY)
    return weights_of(run_dir / "model.keras"), (run_dir / "history.csv").read_text(), result["test_accuracy"]


def test_demo_same_seed_same_run_other_seed_other_weights(tmp_path):
    first, second, other = (_demo(tmp_path / name, seed) for name, seed in (("a", 4), ("b", 4), ("c", 5)))
    assert same_weights(first[0], second[0])
    assert first[1:] == second[1:]  # the history and the test accuracy reported
    assert not same_weights(first[0], other[0])


# A tiny sort_of_clevr run (the cheapest application to start), through the command line.
SORT_OF_CLEVR_TINY = ["--steps", "1", "--epochs", "2", "--validation-examples", "8", "--units", "8", "--mac-steps", "1",
                      "--embedding-dim", "4", "--batch-size", "4", "--coordinate-frequencies", "2", "--quiet"]


def test_sort_of_clevr_in_two_processes_trains_the_same_weights(tmp_path):
    # Each run in a process of its own, with another hash seed: what a set's or a dict's
    # order, or any state a process starts with, would change. Both at once (2 cores).
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "applications", "train", "sort_of_clevr", *SORT_OF_CLEVR_TINY, "--seed", "3",
             "--run-dir", str(tmp_path / name)],
            cwd=str(cli_helpers.REPO), env=cli_helpers.env(PYTHONHASHSEED=hash_seed, OMP_NUM_THREADS="1"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for name, hash_seed in (("a", "1"), ("b", "2"))
    ]
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-2000:]
    finally:
        for proc in procs:
            if proc.poll() is None:  # (timed out, or the other one failed)
                proc.kill()
                proc.wait()
    # (not compared with a run in the test's process: the application tests run Keras'
    # steps eagerly, whose float sums differ from the traced ones by ~1e-8)
    first, second = (weights_of(tmp_path / name / "model.keras") for name in ("a", "b"))
    assert same_weights(first, second)
    assert (tmp_path / "a" / "history.csv").read_text() == (tmp_path / "b" / "history.csv").read_text()
    # the figures reported (the paths aside)
    first, second = ({k: v for k, v in json.loads((tmp_path / name / "metrics.json").read_text()).items()
                      if not isinstance(v, str)} for name in ("a", "b"))
    assert first == second and "relational_accuracy" in first


def test_sst_weights_do_not_depend_on_a_filled_embedding_cache(tmp_path):
    # (2026-12-06) train seeded Keras before embedding the texts: loading the transformer
    # (a split not cached yet) drew from the global generators, so the run that filled the
    # cache and a rerun that read it (same seed, same options) built other initial weights
    # (max weight difference ~2 after one epoch). Now seeded after the embedding.
    preset = tiny_bert_preset(tmp_path / "preset")
    data = write_sst_prefix(tmp_path / "sst", lines=40)

    def run(name):
        result = sst.train(str(data), granularity="2", run_dir=tmp_path / name, cache_dir=tmp_path / "cache",
                           preset=preset, train_on="sentences", epochs=1, batch_size=8, max_train=8, max_eval=8,
                           max_length=12, seed=3, verbose=0, model_kwargs=SST_TINY)
        return weights_of(result["model"])

    filled = run("fills_the_cache")
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert cached  # the second run reads them, and loads no transformer
    assert same_weights(filled, run("reads_the_cache"))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == cached


def _small_extractor(image_size, weights=None):
    """A stand-in for ResNet-101 (2x2 grids of 8 features): built as it is, with
    initializers that draw from Keras' global seed."""
    images = keras.Input((image_size, image_size, 3))
    pooled = keras.layers.AveragePooling2D(image_size // 2)(images)
    return keras.Model(images, keras.layers.Conv2D(8, 1)(pooled))


def test_clevr_weights_do_not_depend_on_a_filled_feature_cache_and_follow_the_seed(tmp_path, monkeypatch):
    # (2026-12-06) As sst: train seeded Keras before `prepare`, which builds ResNet-101
    # when a split is not cached yet (no `extractor` given): the run that filled the cache
    # and a rerun that read it trained other weights from the same seed. Here the cache is
    # filled; the run that "fills" it builds a small model where prepare builds ResNet-101.
    cache = tiny_clevr_cache(tmp_path / "cache")
    real_prepare = clevr.prepare

    def run(name, seed):
        result = clevr.train(cache, run_dir=str(tmp_path / name), epochs=1, batch_size=8, image_size=CLEVR_IMAGE_SIZE,
                             seed=seed, verbose=0, learning_rate=1e-2, model_kwargs=CLEVR_TINY)
        return weights_of(tmp_path / name / "model.keras"), result["validation_accuracy"], result["validation_loss"]

    reads, other = run("reads", 2), run("other_seed", 3)
    assert not same_weights(reads[0], other[0])

    def prepare_that_builds_an_extractor(*args, **kwargs):
        _small_extractor(CLEVR_IMAGE_SIZE)
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(clevr, "prepare", prepare_that_builds_an_extractor)
    fills = run("fills", 2)
    assert same_weights(fills[0], reads[0]) and fills[1:] == reads[1:]


def test_music_refuses_an_ensemble_whose_last_seed_keras_cannot_take_before_training(tmp_path):
    # (2026-12-06) Member i is seeded with seed + i, and Keras takes seeds in [0, 2**32):
    # seed=2**32 - 1 with ensemble=2 trained the first member, then failed with a raw
    # "Seed must be between 0 and 2**32 - 1" when it seeded the second.
    from applications import music
    from applications.errors import InputError
    from tests.conftest import shared_path

    run_dir = tmp_path / "run"
    with pytest.raises(InputError, match=r"Received: seed=4294967295, ensemble=2"):
        music.train(str(shared_path("data", "jsb_chorales")), run_dir=str(run_dir), epochs=1, limit=1, ensemble=2,
                    seed=2**32 - 1, units=(4,), window=4, sample_steps=0, verbose=0)
    assert not run_dir.exists()  # nothing trained, nothing written
    with pytest.raises(InputError, match=r"Received: seed=4294967294, ensemble=3"):
        music.train(str(shared_path("data", "jsb_chorales")), run_dir=str(run_dir), ensemble=3, seed=2**32 - 2)
