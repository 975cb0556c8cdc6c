"""Sizes beyond any machine's memory are one line, as sizes beyond this machine's are.

helper-196 (CLI fuzzing): numpy refuses an array of more bytes than an ``intp`` counts
("array is too big") and TensorFlow a shape of a dimension beyond int64 ("Can't convert
Python sequence with out-of-range integer to Tensor") with a ``ValueError`` before they
try to allocate; ``train occluded_mnist --frame-size 99999999999`` and ``train demo
--pose-size 99999999999`` ended with those tracebacks and exit code 1, where
``--frame-size 100000`` was "keras-capsules: error: out of memory (...)".
"""

import numpy as np
import pytest

from applications import __main__ as cli
from applications.errors import out_of_memory
from tests.conftest import shared_path

HUGE = "99999999999"


@pytest.mark.parametrize("name,options,detail", [
    # numpy: 1e22 pixels a frame
    ("occluded_mnist", ["--data-dir", str(shared_path("data", "mnist")), "--num-train", "8", "--num-test", "8",
                        "--conv-units", "4", "--dense-units", "8", "--batch-size", "8", "--frame-size", HUGE],
     "array is too big"),
    # TensorFlow: a 1x1 convolution of 2 * HUGE**2 (2e22) filters
    ("demo", ["--limit", "64", "--filters", "4", "--primary-capsules", "2", "--hidden-capsules", "2",
              "--n-iters", "2", "--pose-size", HUGE], "out-of-range integer"),
])
def test_a_size_beyond_any_machine_is_one_line_and_leaves_no_run_folder(name, options, detail, tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    run_dir = tmp_path / "new" / "run"
    argv = ["train", name, *options, "--epochs", "1", "--quiet", "--run-dir", str(run_dir)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("keras-capsules: error: out of memory (") and detail in err[0], err
    assert "ask for less" in err[0], err
    assert not (tmp_path / "new").exists()


def test_only_the_size_errors_of_numpy_and_tensorflow_count_as_out_of_memory():
    with pytest.raises(ValueError) as numpy_error:
        np.empty((10**10, 10**10, 10**10), "float32")
    assert out_of_memory(numpy_error.value), numpy_error.value
    import tensorflow as tf

    with pytest.raises(ValueError) as tf_error:
        tf.zeros((2 * 10**22,))
    assert out_of_memory(tf_error.value), tf_error.value
    try:  # wrapped by an error raised while handling it
        try:
            raise tf_error.value
        except ValueError as err:
            raise RuntimeError("while building") from err
    except RuntimeError as wrapped:
        assert out_of_memory(wrapped)
    assert not out_of_memory(ValueError("a bug: shapes (3,) and (4,) not aligned"))
    assert not out_of_memory(TypeError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the "
                                       "maximum possible size."))  # (another type: not numpy's refusal)
