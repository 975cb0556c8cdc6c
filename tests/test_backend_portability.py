"""The library on the JAX (and torch) backend, checked from the normal (TensorFlow) test run.

DESIGN.md promises that ``keras_capsules`` runs on any Keras backend. When JAX is
installed (and torch, where a developer installed it: CI does not), ``tests/portability.py``
runs in a subprocess with ``KERAS_BACKEND=jax`` (``torch``):
the contract checks of every public layer (config, finite gradients,
``.keras`` round trip, XLA), the losses and a RAdam trajectory. This process then
loads the ``.keras`` files JAX saved and compares outputs, loss values, gradients
and RAdam steps with its own backend. The whole library suite also runs on JAX:
``KERAS_BACKEND=jax python -m pytest tests/layers tests/test_ops.py ...``.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import portability

REPO = pathlib.Path(__file__).resolve().parents[1]
#: the backends checked from this process, each where it is installed (CI installs JAX
#: only; torch, not in setup.py, is checked where a developer installed it)
OTHERS = ("jax", "torch")


@pytest.fixture(scope="module", params=OTHERS)
def other_backend(request, tmp_path_factory):
    """Runs ``tests/portability.py`` on the other backend once; its output folder and report."""
    OTHER = request.param
    if OTHER == keras.backend.backend():
        pytest.skip(f"the test process runs on {OTHER} itself")
    if importlib.util.find_spec(OTHER) is None:
        pytest.skip(f"{OTHER} is not installed (pip install {OTHER}): the {OTHER} backend is not checked")
    out = tmp_path_factory.mktemp(f"portability_{OTHER}")
    env = {**os.environ, "KERAS_BACKEND": OTHER, "TF_CPP_MIN_LOG_LEVEL": "2"}
    # JAX runs the eager checks op by op, compiling a small XLA program per op and shape:
    # tests/conftest.py's XLA_FLAGS (inherited here) compile them faster (113 s against
    # 148 s on one core without LLVM's optimizations, 2026-11-27; EMRouting's checks and
    # the losses 27 s against 58 s with the elemental emitter, 2026-12-02). The numbers
    # compared below are the same programs' results.
    run = subprocess.run(
        [sys.executable, "-m", "tests.portability", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    report_file = out / "report.json"
    if not report_file.exists():
        pytest.fail(f"tests.portability did not finish on {OTHER} (exit {run.returncode}):\n"
                    f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return out, json.loads(report_file.read_text()), run, OTHER


def test_the_check_covers_every_public_layer():
    assert sorted(portability.CASES) == portability.public_layers()


@pytest.mark.parametrize("name", portability.public_layers())
def test_layer_runs_on_the_other_backend_and_its_keras_file_loads_here(name, other_backend):
    out, report, _, OTHER = other_backend
    assert report.get(name) == "ok", f"{name} on {OTHER}: {report.get(name)}"
    loaded = keras.saving.load_model(out / f"{name}.keras")
    got = keras.tree.flatten(loaded(portability.case_inputs(name), training=False))
    want = np.load(out / f"{name}.npz")
    assert len(got) == len(want.files)
    for k, g in enumerate(got):  # the outputs computed on JAX, from the same weights
        np.testing.assert_allclose(keras.ops.convert_to_numpy(g), want[f"arr_{k}"], rtol=1e-4,
                                   atol=1e-5, err_msg=f"{name} output {k}: {keras.backend.backend()} vs {OTHER}")


def test_losses_agree_across_backends(other_backend):
    out, report, _, OTHER = other_backend
    assert report["losses"] == "ok", report["losses"]
    theirs = np.load(out / "losses.npz")
    for name, (value, grad) in portability.loss_values_and_gradients().items():
        np.testing.assert_allclose(value, theirs[f"{name}_value"], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(grad, theirs[f"{name}_grad"], rtol=1e-5, atol=1e-7, err_msg=name)


def test_radam_steps_agree_across_backends(other_backend):
    out, report, _, OTHER = other_backend
    assert report["RAdam"] == "ok", report["RAdam"]
    np.testing.assert_allclose(portability.radam_trajectory(), np.load(out / "radam.npy"), rtol=1e-5, atol=1e-7)


def test_every_check_passed_on_the_other_backend(other_backend):
    _, report, run, OTHER = other_backend
    failed = {k: v for k, v in report.items() if v != "ok"}
    assert not failed and run.returncode == 0, f"{failed}\n{run.stderr[-3000:]}"


def test_float64_layers_agree_across_backends(other_backend):
    """float64 layers compute in float64 on the other backend too. Keras' torch backend
    computes ``matmul``, ``maximum`` and ``minimum`` of float64 operands in float32: the
    routing layers, MAC units and Recurrent Ladder cells were off by ~1e-7 there, and
    ``keras_capsules.ops.mean(x, keepdims=True)`` lost the kept axes (a 0-d mean)."""
    out, report, _, OTHER = other_backend
    assert report["float64"] == "ok", report["float64"]
    theirs = np.load(out / "float64.npz")
    ours = portability.float64_outputs()  # (with jax_enable_x64 on JAX)
    assert sorted(f"{n}_{k}" for n, vs in ours.items() for k in range(len(vs))) == sorted(theirs.files)
    for name, values in ours.items():
        for k, want in enumerate(values):
            got = theirs[f"{name}_{k}"]
            assert got.shape == want.shape and got.dtype == want.dtype, (
                f"{name} output {k} on {OTHER}: {got.dtype}{got.shape}, here {want.dtype}{want.shape}")
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=f"{name} output {k}: {OTHER}")
