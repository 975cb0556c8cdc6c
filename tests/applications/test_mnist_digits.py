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
    # a file given as the folder was said not to exist
    (tmp_path / "digits.gz").write_bytes(b"")
    with pytest.raises(DataNotFoundError, match="is a file, not a folder"):
        load_idx_digits(tmp_path / "digits.gz")


def _write_idx(folder, images, labels, compress=True):
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (("t10k-images-idx3-ubyte.gz", images), ("t10k-labels-idx1-ubyte.gz", labels)):
        if compress:
            with gzip.open(folder / name, "wb") as f:
                f.write(data)
        else:
            (folder / name).write_bytes(data)


def test_malformed_files_are_clear_errors(tmp_path):
    # Audit 6: the header was skipped unread, so a truncated or swapped file gave
    # numpy's "cannot reshape array of size ..." and a file that is not gzipped a
    # BadGzipFile error, neither naming the file.
    header = lambda *v: np.array(v, ">i4").tobytes()  # noqa: E731
    images = header(0x803, 3, 28, 28) + bytes(3 * 784)
    labels = header(0x801, 3) + bytes([1, 2, 3])
    _write_idx(tmp_path / "ok", images, labels)
    x, y = load_idx_digits(tmp_path / "ok")
    assert x.shape == (3, 28, 28, 1) and y.tolist() == [1, 2, 3]
    _write_idx(tmp_path / "truncated", images[:-100], labels)
    with pytest.raises(ValueError, match=r"images-idx3-ubyte.gz announces shape \(3, 28, 28\)"):
        load_idx_digits(tmp_path / "truncated")
    _write_idx(tmp_path / "swapped", labels, images)
    with pytest.raises(ValueError, match="images-idx3-ubyte.gz is not an IDX file"):
        load_idx_digits(tmp_path / "swapped")
    _write_idx(tmp_path / "plain", images, labels, compress=False)
    with pytest.raises(ValueError, match="images-idx3-ubyte.gz is not a readable gzipped IDX file"):
        load_idx_digits(tmp_path / "plain")
    _write_idx(tmp_path / "short", images, header(0x801, 2) + bytes([1, 2]))
    with pytest.raises(ValueError, match="3 images but .* 2 labels"):
        load_idx_digits(tmp_path / "short")


def test_check_digits_refuses_labels_that_are_not_one_integer_per_digit():
    # Audit 8: one-hot labels [n, 10] and fractional labels were accepted (the generators then
    # gave [m, 10] label targets that failed in fit, or truncated 0.5 to 0).
    from applications.mnist_digits import check_digits

    digits = np.zeros((3, 28, 28), "float32")
    assert check_digits(digits, np.array([1, 2, 3])).shape == (3, 28, 28)
    assert check_digits(digits, [1.0, 2.0, 3.0]).shape == (3, 28, 28)
    for labels in (np.eye(10)[[1, 2, 3]], np.array([0.5, 1.0, 2.0]), np.array(["1", "2", "3"])):
        with pytest.raises(ValueError, match=r"one integer class per digit.*Received: labels shape"):
            check_digits(digits, labels)
    # audit (2026-11-27): one label for all (a scalar) was len()'s TypeError
    with pytest.raises(ValueError, match=r"Received: digits shape=\(3, 28, 28\), labels shape=\(\)"):
        check_digits(digits, 3)


def test_a_corrupt_deflate_stream_is_an_input_error_naming_the_file(tmp_path, shared_dir):
    # A damaged gzip body (bytes flipped inside the deflate stream, header intact) raised
    # zlib.error, neither a ValueError nor naming the file: a traceback on the command line.
    from applications.errors import InputError

    source = shared_dir / "data" / "mnist"
    folder = tmp_path / "corrupt"
    folder.mkdir()
    damaged = bytearray((source / "t10k-images-idx3-ubyte.gz").read_bytes())
    for i in range(200, 260):
        damaged[i] ^= 0xFF
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(bytes(damaged))
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes((source / "t10k-labels-idx1-ubyte.gz").read_bytes())
    with pytest.raises(InputError, match=r"t10k-images-idx3-ubyte.gz is not a readable gzipped IDX file"):
        load_idx_digits(folder)


def test_a_label_beyond_nine_is_an_input_error_naming_the_file_and_item(tmp_path, capsys):
    # A label of 10 failed in the first training step with TensorFlow's
    # InvalidArgumentError ("Received a label value of 10 which is outside ...").
    from applications import __main__ as cli

    header = lambda *v: np.array(v, ">i4").tobytes()  # noqa: E731
    _write_idx(tmp_path / "bad", header(0x803, 3, 28, 28) + bytes(3 * 784), header(0x801, 3) + bytes([1, 2, 10]))
    with pytest.raises(ValueError, match="labels-idx1-ubyte.gz holds label 10 at item 2"):
        load_idx_digits(tmp_path / "bad")
    code = cli.main(["train", "occluded_mnist", "--data-dir", str(tmp_path / "bad"), "--num-train", "2",
                     "--num-test", "1", "--epochs", "1", "--quiet", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "label 10 at item 2" in err and len(err.strip().splitlines()) == 1, err
