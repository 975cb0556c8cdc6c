"""TensorFlow's start-up on the command line: the lines its C++ writes straight to the
file descriptor 2 while it loads on a machine without a GPU (no CUDA driver, absl not
initialized, CPU instructions unused, a failed ``cuInit``) ask nothing of the user and
are not shown (``applications.console.load_tensorflow_quietly``); every other line
written meanwhile is, in its order, and a failed import still shows its cause."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from applications import console
from tests.applications.cli_helpers import REPO

# The lines TensorFlow 2.21 wrote on this project's 2-CPU machines (no GPU) when
# `keras-capsules train` loaded it, the oneDNN one with TF_ENABLE_ONEDNN_OPTS=1.
ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
STUB = ("I0000 00:00:1795987338.551898   31608 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
        "GPU will not be used.\n")
FEATURES = ("I0000 00:00:1795987338.661529   31608 cpu_feature_guard.cc:227] This TensorFlow binary is optimized "
            "to use available CPU instructions in performance-critical operations.\n"
            "To enable the following instructions: AVX2 AVX512F AVX512_VNNI FMA, in other operations, rebuild "
            "TensorFlow with the appropriate compiler flags.\n")
ONEDNN = ("I0000 00:00:1795987354.580414   31652 port.cc:153] oneDNN custom operations are on. You may see slightly "
          "different numerical results due to floating-point round-off errors from different computation orders. "
          "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n")
CUINIT = ("E0000 00:00:1795987342.725691   31608 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
          "Failed call to cuInit: UNKNOWN ERROR (303)\n")
NOISE = ABSL + ONEDNN + STUB + FEATURES + ABSL + STUB
# lines that are not noise, TensorFlow's and others'
OTHER_WARNING = "W0000 00:00:1795987464.287203   31875 some_op.cc:39] A warning of TensorFlow's\n"
PYTHON_WARNING = "/x/y.py:3: DeprecationWarning: something\n  import z\n"


def test_only_the_startup_noise_goes():
    text = ABSL + OTHER_WARNING + STUB + FEATURES + PYTHON_WARNING + ABSL + ONEDNN + STUB + CUINIT + "last"
    assert console.without_startup_noise(text) == OTHER_WARNING + PYTHON_WARNING + "last"
    assert console.without_startup_noise(NOISE + CUINIT) == ""
    assert console.without_startup_noise("") == ""


def test_a_failed_cuinit_stays_where_a_driver_was_found():
    # with a CUDA driver (no stub line) the failed cuInit is why the GPU is not used
    assert console.without_startup_noise(ABSL + CUINIT) == CUINIT
    assert console.without_startup_noise(ABSL + FEATURES + CUINIT + OTHER_WARNING) == CUINIT + OTHER_WARNING


def test_a_line_that_only_contains_a_noisy_phrase_stays():
    quoted = "error: the log said 'Could not find cuda drivers on your machine'\n"
    stub_like = "I0000 00:00:1.2   3 other.cc:31] Could not find cuda drivers on your machine\n"
    assert console.without_startup_noise(quoted + stub_like) == quoted + stub_like


def _python(code, fake_tensorflow=None, **extra_env):
    """Runs ``python -c code`` in a fresh process on the sources under test, as a user's
    shell would (no TensorFlow log level set), with a stand-in ``tensorflow`` package
    whose ``__init__`` is ``fake_tensorflow`` when given."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_CAPSULES_DEBUG", "PYTHONWARNINGS")}
    path = [str(REPO)]
    if fake_tensorflow is not None:
        package = fake_tensorflow["dir"] / "tensorflow"
        package.mkdir()
        (package / "__init__.py").write_text(textwrap.dedent(fake_tensorflow["source"]))
        path.insert(0, str(fake_tensorflow["dir"]))
    environment.update(CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow", PYTHONPATH=os.pathsep.join(path),
                       **extra_env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=str(REPO), env=environment,
                          capture_output=True, text=True, timeout=300)


# A stand-in TensorFlow: writes the real start-up lines to the descriptor 2 as the C++
# does (unbuffered), and a line of its own, a Python warning, and cuInit's error when its
# devices are listed.
FAKE = """
import os, warnings
os.write(2, {noise!r}.encode())
os.write(2, b"a line to keep\\n")
warnings.warn("a warning to keep", UserWarning)
class config:
    @staticmethod
    def list_physical_devices():
        os.write(2, {cuinit!r}.encode())
        return []
""".format(noise=NOISE, cuinit=CUINIT)

LOAD = """
import os, sys
from applications import console
print("before", file=sys.stderr, flush=True)
console.load_tensorflow_quietly()
print("after", os.environ.get("TF_CPP_MIN_LOG_LEVEL"), file=sys.stderr)
console.load_tensorflow_quietly()  # loaded: writes nothing more
"""


def test_loads_tensorflow_without_its_noise_and_keeps_the_rest(tmp_path):
    proc = _python(LOAD, {"dir": tmp_path, "source": FAKE})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "before"
    assert lines[1] == "a line to keep"
    assert lines[2].endswith("UserWarning: a warning to keep")
    assert lines[-1] == "after 1"  # INFO lines of TensorFlow's C++ hidden from here on
    assert "cudart_stub" not in proc.stderr and "absl" not in proc.stderr and "cuInit" not in proc.stderr
    assert len(lines) == 5  # (the warning's source line)


def test_the_users_log_level_and_debug_mode_are_kept(tmp_path):
    proc = _python(LOAD, {"dir": tmp_path, "source": FAKE}, TF_CPP_MIN_LOG_LEVEL="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "after 0"
    assert "cudart_stub" not in proc.stderr
    # KERAS_CAPSULES_DEBUG: nothing held back, the log level left alone; the fake is not
    # loaded by load_tensorflow_quietly then, so the code imports it itself
    debug = LOAD.replace('print("after"', 'import tensorflow; tensorflow.config.list_physical_devices()\nprint("after"')
    (tmp_path / "debug").mkdir()
    proc = _python(debug, {"dir": tmp_path / "debug", "source": FAKE}, KERAS_CAPSULES_DEBUG="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cudart_stub") == 2 and CUINIT in proc.stderr
    assert proc.stderr.splitlines()[-1] == "after None"


def test_a_failed_import_shows_its_cause(tmp_path):
    broken = 'import os\nos.write(2, {!r}.encode() + b"the cause, from the C++\\n")\nraise ImportError("broken")\n'
    proc = _python(LOAD, {"dir": tmp_path, "source": broken.format(NOISE)})
    assert proc.returncode == 1
    assert "the cause, from the C++\n" in proc.stderr
    assert proc.stderr.rstrip().endswith("ImportError: broken")
    assert "cudart_stub" not in proc.stderr
    assert "after" not in proc.stderr


@pytest.mark.parametrize("argv", [["train", "demo", "--help"], ["evaluate", "demo", "--help"]])
def test_the_command_line_shows_no_startup_noise(argv):
    # the real TensorFlow: before, a command that loaded an application wrote the absl
    # notice and the stub's line twice, the CPU instructions and the failed cuInit
    code = """
    import json, sys
    from applications.__main__ import main
    try:
        main(json.loads(sys.argv[1]))
    except SystemExit as exit:
        assert exit.code == 0, exit.code
    print("loaded" if "tensorflow" in sys.modules else "not loaded", file=sys.stderr)
    """
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_CAPSULES_DEBUG", "PYTHONWARNINGS")}
    environment.update(CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow", PYTHONPATH=str(REPO), COLUMNS="100")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), json.dumps(argv)], cwd=str(REPO),
                          env=environment, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "loaded\n"
    assert "usage: keras-capsules" in proc.stdout
