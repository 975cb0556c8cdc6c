"""Test-session set-up shared by every test.

Two logical CPU devices are configured before TensorFlow initialises its runtime, so
that ``tf.distribute.MirroredStrategy`` can run a real two-replica step on a machine
with one physical CPU. The backend is TensorFlow unless ``KERAS_BACKEND`` says otherwise
(``KERAS_BACKEND=jax`` runs the library's tests on JAX; see ``tests/backends.py``).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib  # noqa: E402

# First, before TensorFlow loads: keras_capsules turns off TF 2.21's oneDNN kernels,
# which corrupt the heap in broadcast batch matmuls (see keras_capsules/__init__.py).
import keras_capsules  # noqa: E402,F401
import keras  # noqa: E402
import pytest  # noqa: E402

if keras.backend.backend() == "tensorflow":  # KERAS_BACKEND=jax runs the tests on JAX
    import tensorflow as tf

    _cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
        )
    except RuntimeError:  # the runtime was initialised already (e.g. by a plugin)
        pass

def _find_shared():
    """``shared/`` beside the checkout (or beside a parent, e.g. from a git worktree)."""
    repo = pathlib.Path(__file__).resolve().parents[1]
    for parent in repo.parents:
        candidate = parent / "shared"
        if (candidate / "refdata").is_dir():
            return candidate
    return repo.parent / "shared"


SHARED = _find_shared()


def shared_path(*parts):
    """Path below ``../shared`` (real data and golden references)."""
    return SHARED.joinpath(*parts)


@pytest.fixture
def shared_dir():
    if not SHARED.is_dir():
        pytest.fail(f"../shared not found at {SHARED}: tests need the project's shared data")
    return SHARED


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Every test starts with float32 policy and a fixed seed."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
