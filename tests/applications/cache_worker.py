"""One process of the shared-cache tests: builds (or reads) an SST or CLEVR cache.

    python tests/applications/cache_worker.py sst   CACHE MARKS PROCESSES PRESET [--hang]
    python tests/applications/cache_worker.py clevr CACHE MARKS PROCESSES TFDS_DIR [--hang]

Every process first waits until ``PROCESSES`` processes have written their
``MARKS/ready-<pid>`` (so that they all look at the cache at the same moment). The
computation of the cached values (the transformer's or ResNet's forward pass) writes
``MARKS/built-<pid>`` on its first call and takes a second longer, so that the
processes' builds overlap; with ``--hang`` it writes ``MARKS/hanging-<pid>`` there and
waits to be killed. At the end the process writes what it read to ``MARKS/read-<pid>.npy``.
"""

import os
import pathlib
import sys
import time

import numpy as np

TEXTS = ["The film is good .", "It 's not funny ( or dull ) .", "bad", "a good , funny film"]
CLEVR_IMAGE_SIZE = 32


def mark(marks, name):
    (marks / f"{name}-{os.getpid()}").write_text("")


def wait_for_peers(marks, processes, timeout=120):
    mark(marks, "ready")
    deadline = time.monotonic() + timeout
    while len(list(marks.glob("ready-*"))) < processes:
        if time.monotonic() > deadline:
            raise SystemExit("the other processes never started")
        time.sleep(0.05)


def slow_first_call(marks, hang):
    """Marks the first call, then hangs (``hang``) or takes a second longer."""
    if not list(marks.glob(f"built-{os.getpid()}")):
        mark(marks, "built")
        if hang:
            mark(marks, "hanging")
            time.sleep(3600)
        time.sleep(1.0)


def sst(cache, marks, processes, preset, hang):
    from applications import sst

    call = sst.Encoder.__call__

    def marked_call(self, token_ids, mask):
        slow_first_call(marks, hang)
        return call(self, token_ids, mask)

    sst.Encoder.__call__ = marked_call
    wait_for_peers(marks, processes)
    embedded = sst.embed_texts(TEXTS, preset, cache, name="t", max_length=12, verbose=0)
    return np.asarray(embedded.states, "float32")


def clevr(cache, marks, processes, tfds_dir, hang):
    import keras
    import tensorflow_datasets as tfds

    from applications import clevr

    keras.utils.set_random_seed(0)  # the same features in every process
    images = keras.Input((CLEVR_IMAGE_SIZE, CLEVR_IMAGE_SIZE, 3))
    pooled = keras.layers.AveragePooling2D(16)(images)  # a 2x2 grid, as conv4 of ResNet-101 at 32
    model = keras.Model(images, keras.layers.Dense(4)(pooled))

    class MarkedExtractor:
        output = model.output

        def __call__(self, batch, training=False):
            slow_first_call(marks, hang)
            return model(batch, training=training)

    wait_for_peers(marks, processes)
    with tfds.testing.mock_data(num_examples=3):
        features_path, _ = clevr.cache_split("train", cache, tfds_dir, image_size=CLEVR_IMAGE_SIZE, weights=None,
                                             batch_size=2, extractor=MarkedExtractor(), verbose=0)
    return np.load(features_path).astype("float32")


def main():
    application, cache, marks, processes, source = sys.argv[1:6]
    hang = "--hang" in sys.argv[6:]
    build = {"sst": sst, "clevr": clevr}[application]
    marks = pathlib.Path(marks)
    values = build(cache, marks, int(processes), source, hang)
    np.save(marks / f"read-{os.getpid()}.npy", values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
