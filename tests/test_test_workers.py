"""How many worker processes the test suite starts (``-n auto`` in ``pytest.ini``), and
where its temporary files go."""

import os
import types

import pytest

from tests import conftest

GIB = 2**30


def _config(*args):
    return types.SimpleNamespace(args=list(args))


@pytest.fixture
def machine(monkeypatch):
    """Fakes the CPUs this process may use and the memory of the machine."""
    monkeypatch.delenv("KERAS_CAPSULES_TEST_WORKERS", raising=False)

    def set_machine(cpus, memory_gib):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
        sizes = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": int(memory_gib * GIB) // 4096}
        monkeypatch.setattr(os, "sysconf", lambda name: sizes[name])

    return set_machine


@pytest.mark.parametrize("cpus, memory_gib, expected", [
    (2, 24, 2),    # this project's CI machine: both cores
    (8, 24, 4),    # memory bounds the workers (6 GB each)
    (16, 128, 16),
    (1, 24, 0),    # one CPU: no workers, the tests run in the main process
    (4, 8, 0),     # memory for one worker only: none
])
def test_a_folder_runs_on_one_worker_per_cpu_within_memory(machine, cpus, memory_gib, expected):
    machine(cpus, memory_gib)
    assert conftest.pytest_xdist_auto_num_workers(_config("tests")) == expected
    assert conftest.pytest_xdist_auto_num_workers(_config()) == expected  # testpaths


@pytest.mark.parametrize("args", [
    ["tests/test_ops.py"],
    ["tests/test_ops.py::test_mean_of_integers_is_a_float_mean"],
    ["tests/test_ops.py", "tests/layers/test_em_routing.py::test_x[votes]"],
])
def test_named_files_or_tests_run_without_workers(machine, args):
    machine(2, 24)
    assert conftest.pytest_xdist_auto_num_workers(_config(*args)) == 0


def test_a_folder_beside_a_file_still_gets_workers(machine):
    machine(2, 24)
    assert conftest.pytest_xdist_auto_num_workers(_config("tests/layers", "tests/test_ops.py")) == 2


@pytest.mark.parametrize("value, expected", [("0", 0), ("3", 3)])
def test_the_environment_variable_sets_the_number(machine, monkeypatch, value, expected):
    machine(2, 24)
    monkeypatch.setenv("KERAS_CAPSULES_TEST_WORKERS", value)
    assert conftest.pytest_xdist_auto_num_workers(_config("tests/test_ops.py")) == expected


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_a_bad_environment_variable_is_a_usage_error(machine, monkeypatch, value):
    machine(2, 24)
    monkeypatch.setenv("KERAS_CAPSULES_TEST_WORKERS", value)
    with pytest.raises(pytest.UsageError, match="KERAS_CAPSULES_TEST_WORKERS"):
        conftest.pytest_xdist_auto_num_workers(_config("tests"))


def test_temporary_files_of_the_session_and_its_subprocesses_go_below_basetemp(tmp_path_factory):
    import pathlib
    import subprocess
    import sys
    import tempfile

    import tensorflow as tf

    basetemp = tmp_path_factory.getbasetemp().resolve()
    directory = pathlib.Path(tempfile.gettempdir()).resolve()
    assert directory.is_relative_to(basetemp) and directory.is_dir()
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True)
    assert pathlib.Path(child.stdout.strip()).resolve() == directory

    def generated():
        return set(directory.glob("__autograph_generated_file*.py"))

    before = generated()

    @tf.function
    def halve_if_large(x):
        if tf.reduce_sum(x) > 1.0:  # autograph converts the function (and writes its source)
            x = x / 2.0
        return x

    assert float(halve_if_large(tf.constant([3.0]))[0]) == 1.5
    assert generated() - before, "autograph wrote its converted source elsewhere"
