"""keras_capsules' TensorFlow runtime default: oneDNN kernels off unless the user chose."""

import os
import subprocess
import sys

import pytest

CHECK = (
    "import os, warnings\n"
    "warnings.simplefilter('error')\n"
    "{first}\n"
    "import keras_capsules\n"
    "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n"
)


def _run(first, env_value):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if env_value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = env_value
    return subprocess.run(
        [sys.executable, "-c", CHECK.format(first=first)],
        capture_output=True, text=True, env=env, timeout=300,
    )


@pytest.mark.parametrize("env_value, expected", [(None, "0"), ("1", "1")])
def test_onednn_is_off_by_default_and_the_user_can_opt_in(env_value, expected):
    proc = _run("", env_value)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == expected


def test_importing_after_tensorflow_warns_when_onednn_may_be_on():
    proc = _run("import tensorflow", None)
    assert proc.returncode != 0 and "RuntimeWarning" in proc.stderr
    assert "import keras_capsules before keras/tensorflow" in proc.stderr.lower()


def test_this_test_session_runs_with_onednn_off():
    assert os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0"
