"""MNIST IDX folders for tests: the shared ``t10k`` digits, with or without ``train`` files."""

import gzip
import shutil

import numpy as np

from applications.mnist_digits import MNIST_FILES
from tests.conftest import shared_path


def write_idx(folder, prefix, images, labels):
    """Writes ``{prefix}-images/labels`` IDX files (gzipped) of uint8 ``images [n, 28, 28]``
    and ``labels [n]`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    images, labels = np.asarray(images, np.uint8), np.asarray(labels, np.uint8)
    images_name, labels_name = (name.format(prefix=prefix) for name in MNIST_FILES)
    with gzip.open(folder / images_name, "wb") as f:
        f.write(np.array([0x803, *images.shape], ">i4").tobytes() + images.tobytes())
    with gzip.open(folder / labels_name, "wb") as f:
        f.write(np.array([0x801, len(labels)], ">i4").tobytes() + labels.tobytes())


def _other_digits(num):
    """The first ``num`` shared ``t10k`` digits transposed (uint8 ``[num, 28, 28]``: real
    strokes, yet none of them is a ``t10k`` digit) and their labels."""
    source = shared_path("data", "mnist")
    with gzip.open(source / MNIST_FILES[0].format(prefix="t10k")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:num]
    with gzip.open(source / MNIST_FILES[1].format(prefix="t10k")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:num]
    return images.transpose(0, 2, 1), labels


def mnist_folder(folder, num_train=None):
    """``folder`` with a copy of the shared ``t10k`` files and, with ``num_train``, ``train``
    files of that many digits (:func:`_other_digits`). Returns ``folder``."""
    source = shared_path("data", "mnist")
    folder.mkdir(parents=True, exist_ok=True)
    for name in MNIST_FILES:
        shutil.copyfile(source / name.format(prefix="t10k"), folder / name.format(prefix="t10k"))
    if num_train:
        write_idx(folder, "train", *_other_digits(num_train))
    return folder


def other_t10k_folder(folder, num=200):
    """``folder`` with ``t10k`` files of ``num`` other digits than the shared ones
    (:func:`_other_digits`): a folder of the same form that holds other data. Returns
    ``folder``."""
    write_idx(folder, "t10k", *_other_digits(num))
    return folder
