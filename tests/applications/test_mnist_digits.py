"""The MNIST IDX reader shared by the demo, the benchmarks and the ladder applications."""

import numpy as np
import pytest

from applications.errors import DataNotFoundError
from applications.mnist_digits import load_idx_digits


def test_reads_the_real_t10k_digits(shared_dir):
    images, labels = load_idx_digits(shared_dir / "data" / "mnist")
    assert images.shape == (10000, 28, 28, 1) and images.dtype == np.float32
    assert labels.shape == (10000,) and set(np.unique(labels)) == set(range(10))
    assert 0.0 == images.min() and images.max() == 1.0
    assert labels[:5].tolist() == [7, 2, 1, 0, 4]  # the canonical first test digits


def test_missing_folder_or_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataNotFoundError, match="does not exist"):
        load_idx_digits(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte.gz"):
        load_idx_digits(tmp_path)
