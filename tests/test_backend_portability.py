"""The library on the JAX backend, checked from the normal (TensorFlow) test run.

DESIGN.md promises that ``keras_capsules`` runs on any Keras backend. When JAX is
installed, ``tests/portability.py`` runs in a subprocess with ``KERAS_BACKEND=jax``:
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
OTHER = "jax"


@pytest.fixture(scope="module")
def other_backend(tmp_path_factory):
    """Runs ``tests/portability.py`` on the other backend once; its output folder and report."""
    if importlib.util.find_spec(OTHER) is None:
        pytest.skip(f"{OTHER} is not installed (pip install jax jaxlib): the {OTHER} backend is not checked")
    out = tmp_path_factory.mktemp(f"portability_{OTHER}")
    env = {**os.environ, "KERAS_BACKEND": OTHER, "TF_CPP_MIN_LOG_LEVEL": "2"}
    # JAX runs the eager checks op by op, compiling a small XLA program per op and shape:
    # without LLVM's optimizations those compile faster (113 s against 148 s on one core,
    # 2026-11-27); the numbers compared below are the same programs' results.
    env.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
    run = subprocess.run(
        [sys.executable, "-m", "tests.portability", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    report_file = out / "report.json"
    if not report_file.exists():
        pytest.fail(f"tests.portability did not finish on {OTHER} (exit {run.returncode}):\n"
                    f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return out, json.loads(report_file.read_text()), run


def test_the_check_covers_every_public_layer():
    assert sorted(portability.CASES) == portability.public_layers()


@pytest.mark.parametrize("name", portability.public_layers())
def test_layer_runs_on_the_other_backend_and_its_keras_file_loads_here(name, other_backend):
    out, report, _ = other_backend
    assert report.get(name) == "ok", f"{name} on {OTHER}: {report.get(name)}"
    loaded = keras.saving.load_model(out / f"{name}.keras")
    got = keras.tree.flatten(loaded(portability.case_inputs(name), training=False))
    want = np.load(out / f"{name}.npz")
    assert len(got) == len(want.files)
    for k, g in enumerate(got):  # the outputs computed on JAX, from the same weights
        np.testing.assert_allclose(keras.ops.convert_to_numpy(g), want[f"arr_{k}"], rtol=1e-4,
                                   atol=1e-5, err_msg=f"{name} output {k}: {keras.backend.backend()} vs {OTHER}")


def test_losses_agree_across_backends(other_backend):
    out, report, _ = other_backend
    assert report["losses"] == "ok", report["losses"]
    theirs = np.load(out / "losses.npz")
    for name, (value, grad) in portability.loss_values_and_gradients().items():
        np.testing.assert_allclose(value, theirs[f"{name}_value"], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(grad, theirs[f"{name}_grad"], rtol=1e-5, atol=1e-7, err_msg=name)


def test_radam_steps_agree_across_backends(other_backend):
    out, report, _ = other_backend
    assert report["RAdam"] == "ok", report["RAdam"]
    np.testing.assert_allclose(portability.radam_trajectory(), np.load(out / "radam.npy"), rtol=1e-5, atol=1e-7)


def test_every_check_passed_on_the_other_backend(other_backend):
    _, report, run = other_backend
    failed = {k: v for k, v in report.items() if v != "ok"}
    assert not failed and run.returncode == 0, f"{failed}\n{run.stderr[-3000:]}"
