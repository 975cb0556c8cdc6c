"""Real MNIST digits from the canonical IDX files (no download).

The project's tests and benchmarks use the 10,000 ``t10k`` digits under
``../shared/data/mnist/``; users get the same files from the MNIST distribution (or
the full set through TFDS ``mnist``).
"""

import gzip
import pathlib

import numpy as np

from applications.errors import DataNotFoundError

MNIST_FILES = ("{prefix}-images-idx3-ubyte.gz", "{prefix}-labels-idx1-ubyte.gz")


def load_idx_digits(data_dir, prefix="t10k"):
    """Images ``[n, 28, 28, 1]`` as float32 in [0, 1] and int32 labels.

    Args:
        data_dir: folder holding ``{prefix}-images-idx3-ubyte.gz`` and
            ``{prefix}-labels-idx1-ubyte.gz``.
        prefix: ``"t10k"`` (test set) or ``"train"``.

    Raises:
        DataNotFoundError: (a ``FileNotFoundError``) the folder or a file is missing;
            the message names it.
    """
    data_dir = pathlib.Path(data_dir)
    if not data_dir.is_dir():
        raise DataNotFoundError(f"data directory {str(data_dir)!r} does not exist")
    names = [name.format(prefix=prefix) for name in MNIST_FILES]
    images_path, labels_path = (data_dir / name for name in names)
    for path in (images_path, labels_path):
        if not path.is_file():
            raise DataNotFoundError(
                f"{path} not found: the data directory must hold the MNIST files {' and '.join(names)}"
            )
    with gzip.open(images_path) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
    with gzip.open(labels_path) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    if len(images) != len(labels):
        raise ValueError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels")
    return images.astype("float32") / 255.0, labels.astype("int32")


def default_data_dir():
    """``shared/data/mnist`` beside this checkout (or beside a parent folder), if any."""
    repo = pathlib.Path(__file__).resolve().parents[1]
    for parent in repo.parents:
        candidate = parent / "shared" / "data" / "mnist"
        if candidate.is_dir():
            return candidate
    return repo.parent / "shared" / "data" / "mnist"
