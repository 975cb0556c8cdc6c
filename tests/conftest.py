"""Test-session set-up shared by every test.

Two logical CPU devices are configured before TensorFlow initialises its runtime, so
that ``tf.distribute.MirroredStrategy`` can run a real two-replica step on a machine
with one physical CPU. The backend is TensorFlow unless ``KERAS_BACKEND`` says otherwise
(``KERAS_BACKEND=jax`` runs the library's tests on JAX; see ``tests/backends.py``).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# XLA compiles the tests' tiny programs without LLVM's optimizations and with its CPU
# elemental emitter instead of the MLIR fusion emitters: the same programs, compiled
# faster (test_rladder.py on one core: 364 s against 432 s, its XLA fit tests 15 s
# against 34 s, 2026-12-02). Only the test processes and the subprocesses they start
# get it: a user's command line and benchmarks keep XLA's defaults. An XLA_FLAGS of
# your own replaces this one.
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false",
)

import contextlib  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

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

    # Every process of the suite runs with the applications' Keras fixes from its start.
    # Before, a worker got them at its first application test (resolve_strategy installs
    # them), so whether a layer test's `fit` ran patched depended on the files pytest-xdist
    # had given that worker first; and an unpatched `fit` without a strategy traces its
    # train step twice (Keras 3.15 builds the optimizer inside the first trace): 35 s
    # instead of 21 s for one `fit` of test_rladder's unknown-length model.
    # test_distribute.py's patched/unpatched comparison restores Keras' own functions itself.
    from applications import distribute as _distribute

    _distribute.install_keras_fixes()

#: A worker's memory grows to about this over its share of the suite (TensorFlow keeps
#: what every test traced; 5.5 GB after half of it in one process, measured).
_WORKER_MEMORY = 6 * 2**30


def pytest_xdist_auto_num_workers(config):
    """The number of worker processes of ``-n auto`` (set in ``pytest.ini``).

    One per CPU this process may use, at most one per 6 GB of memory, and none (the
    tests run in this process) for one CPU, or when only test files or single tests
    are named (``pytest tests/test_ops.py``, ``pytest tests/x.py::test_y``): starting
    workers (each imports TensorFlow) costs more than it saves there. A folder, or
    the whole suite, runs in parallel: one process slows down over the whole suite
    (every model traced stays alive inside TensorFlow), two halve that and use both
    cores of a CI machine. ``KERAS_CAPSULES_TEST_WORKERS=N`` sets the number (0: no
    workers); ``-n N`` on the command line also overrides ``auto``.
    """
    configured = os.environ.get("KERAS_CAPSULES_TEST_WORKERS")
    if configured is not None:
        try:
            workers = int(configured)
        except ValueError:
            raise pytest.UsageError(
                f"KERAS_CAPSULES_TEST_WORKERS must be a whole number. Received: {configured!r}"
            ) from None
        if workers < 0:
            raise pytest.UsageError(
                f"KERAS_CAPSULES_TEST_WORKERS must be 0 or more. Received: {configured!r}"
            )
        return workers
    named = [str(arg).split("::")[0] for arg in config.args]
    if named and all(path.endswith(".py") for path in named):
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = _WORKER_MEMORY * cpus
    workers = min(cpus, max(1, memory // _WORKER_MEMORY))
    return workers if workers > 1 else 0


_STARTED = pytest.StashKey[float]()
#: a test that took this many seconds (with its set-up) is followed by a full collection
_LONG_TEST = 1.0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_STARTED] = time.perf_counter()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test of a second or more, and after its fixtures are torn down: a full
    garbage collection; after a test file's last test also ``gc.freeze()``.

    The models and traced functions a test leaves behind hold one another in reference
    cycles that only Python's rare full collections free, and until then TensorFlow
    keeps what they traced alive: each later trace and first call of a function in the
    process took longer the more of it there was. ``tests/layers/rladder/test_rladder.py``
    on one core (2026-12-06): 291 s, its two-replica fit over unknown lengths 70 s (21 s
    alone); collecting after every test of 1 s or more 185-205 s and 6 s; after every
    test 206 s (a collection scans every object not frozen, tenths of a second late in a
    file, so quick tests, which leave little behind, skip it). The application and
    tuning tests, which run their steps eagerly, neither gain nor lose measurably.

    At the end of a file (this hook runs last, after its module fixtures are torn down)
    what is left after a collection is frozen: a process keeps what every earlier test
    built alive inside TensorFlow and Keras, several million objects late in a worker's
    share of the suite, and collections skip frozen objects (measured in one process
    over ``test_rtagger.py``, ``test_em_routing.py`` and ``tuning/test_hypermodels.py``:
    the collector took 40 s of the last file's 136 s without freezing, 7 s of 108 s
    with it). A frozen cycle that dies later is not freed.
    """
    import gc

    last_of_file = nextitem is None or nextitem.module is not item.module
    if last_of_file or time.perf_counter() - item.stash.get(_STARTED, 0.0) >= _LONG_TEST:
        gc.collect()
    if last_of_file:
        gc.freeze()


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


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_below_basetemp(tmp_path_factory):
    """The session's temporary files (and its subprocesses') go below pytest's basetemp.

    TensorFlow's autograph writes the source of every function it converts to a file in
    the temporary directory and removes it only at a normal interpreter exit, and TFDS
    leaves empty ``tmp*tfds`` folders there; the processes that tests kill (resumed
    training, crashed searches) never remove theirs. In ``/tmp`` they piled up run
    after run (about 500 files and 1,200 folders over a few days of runs). Below
    pytest's basetemp they go with it: pytest keeps the last three.
    """
    import tempfile

    directory = str(tmp_path_factory.mktemp("tempfiles", numbered=False))
    saved_env, saved_default = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = directory
    yield directory
    tempfile.tempdir = saved_default
    if saved_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved_env


@pytest.fixture(autouse=True)
def _sigint_handler_kept():
    """A test that changes SIGINT's handler must restore the one it found.

    The handler a test finds is not always Python's ``default_int_handler``: a test
    process started without job control (``pytest ... &`` in a script, ``nohup``, some
    CI runners) inherits SIGINT ignored, and pytest-xdist's workers (plain subprocesses
    of that process) inherit it too, so ``SIG_IGN`` there is the starting state, not a
    leak. A handler left changed by a test would change what every later test in the
    same process sees (and depend on the order pytest-xdist gives the files): it fails
    the test that left it, and is put back.
    """
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before and after != before:
        signal.signal(signal.SIGINT, signal.default_int_handler if before is None else before)
        pytest.fail(f"the test left SIGINT's handler {after!r} (it found {before!r}): restore it", pytrace=False)


@contextlib.contextmanager
def functions_eager(eager=True):
    """Inside the block, TensorFlow functions run eagerly (``eager=False``: traced); the
    mode found is restored after. Nothing on other backends."""
    if keras.backend.backend() != "tensorflow":
        yield
        return
    import tensorflow as tf

    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(eager)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(before)


@contextlib.contextmanager
def keras_test_state():
    """Inside the block, the float32 policy and the fixed seed every test starts with;
    the policy found is restored after."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


@contextlib.contextmanager
def as_an_application_test():
    """The state an application test runs in (float32, the fixed seed, eager functions),
    for a module-scoped fixture's shared run: pytest sets such a fixture up before the
    autouse fixtures that give each test that state."""
    with keras_test_state(), functions_eager(True):
        yield


def functions_run_eagerly(request):
    """The body of an autouse fixture: the test's TensorFlow functions run eagerly, unless
    it is marked ``graph_mode`` (or the backend is not TensorFlow).

    ``tests/applications`` and ``tests/tuning`` use it (their ``conftest.py``): their
    tests train tiny models for a step or an epoch, where tracing the train, test and
    predict steps is most of the time. Those that check traced code are marked
    ``graph_mode``; each of those folders' ``conftest.py`` says which stay traced.
    """
    if request.node.get_closest_marker("graph_mode"):
        yield
        return
    with functions_eager(True):
        yield


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Every test starts with float32 policy and a fixed seed."""
    with keras_test_state():
        yield
