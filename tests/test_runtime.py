"""keras_capsules' TensorFlow runtime default: oneDNN kernels off unless the user chose."""

import os
import subprocess
import sys

import pytest

# Every import of the check runs with warnings as errors; the value it prints is the
# first line of its output (the default-environment run goes on with THREADS below).
CHECK = (
    "import os, warnings\n"
    "with warnings.catch_warnings():\n"
    "    warnings.simplefilter('error')\n"
    "    {first}\n"
    "    import keras_capsules\n"
    "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n"
)


def _run(first, env_value, then=""):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    # TensorFlow's runtime is what is checked; another backend's import warns on its own
    # (torch: "Found no NVIDIA driver"), which the check's warnings-as-errors reports first
    env["KERAS_BACKEND"] = "tensorflow"
    if env_value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = env_value
    return subprocess.run(
        [sys.executable, "-c", CHECK.format(first=first) + then],
        capture_output=True, text=True, env=env, timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


@pytest.fixture(scope="module")
def default_run():
    """One process (TensorFlow's start-up paid once) without TF_ENABLE_ONEDNN_OPTS: it
    imports keras_capsules first, then runs THREADS; each test reads its own line."""
    return _run("", None, then=THREADS)


@pytest.mark.parametrize("env_value, expected", [(None, "0"), ("1", "1")])
def test_onednn_is_off_by_default_and_the_user_can_opt_in(env_value, expected, request):
    proc = request.getfixturevalue("default_run") if env_value is None else _run("", env_value)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == expected


def test_importing_after_tensorflow_warns_when_onednn_may_be_on():
    proc = _run("import tensorflow", None)
    assert proc.returncode != 0 and "RuntimeWarning" in proc.stderr
    assert "import keras_capsules before keras/tensorflow" in proc.stderr.lower()


def test_this_test_session_runs_with_onednn_off():
    assert os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0"


THREADS = (
    "import warnings\n"
    "from applications import distribute\n"
    "import tensorflow as tf\n"
    "assert distribute.set_intra_op_threads(None)\n"
    "assert distribute.set_intra_op_threads(1)\n"
    "assert tf.config.threading.get_intra_op_parallelism_threads() == 1\n"
    "float(tf.reduce_sum(tf.ones((3, 3))))  # the runtime starts here\n"
    "assert distribute.set_intra_op_threads(1)  # unchanged: nothing to do\n"
    "with warnings.catch_warnings(record=True) as caught:\n"
    "    warnings.simplefilter('always')\n"
    "    assert not distribute.set_intra_op_threads(2)\n"
    "assert any('intra-op threads' in str(w.message) for w in caught)\n"
    "assert tf.config.threading.get_intra_op_parallelism_threads() == 1\n"
    "for bad in (-1, 1.5, True):\n"
    "    try:\n"
    "        distribute.set_intra_op_threads(bad)\n"
    "    except ValueError:\n"
    "        pass\n"
    "    else:\n"
    "        raise AssertionError(bad)\n"
    "print('ok')\n"
)


def test_intra_op_threads_are_set_before_the_first_op_and_later_changes_only_warn(default_run):
    # (in the process of the oneDNN default: keras_capsules, imported first, runs no op)
    proc = default_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "ok"
