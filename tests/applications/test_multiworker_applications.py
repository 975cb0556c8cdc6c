"""The applications train (and evaluate) under a real two-worker
``MultiWorkerMirroredStrategy`` cluster: two processes on local ports, one tiny epoch.

Keras 3 fails ``fit`` and ``evaluate`` under many workers (see
``applications.distribute.install_multi_worker_fixes``). Before the fix was installed
with the strategy, seven of the nine applications failed at ``fit`` (``train sst
--strategy multiworker``: "Attempt to convert a value ({'embeddings': PerReplica...");
all nine passed this test when it went in.

One cluster serves every case (``cluster_runs``): its two workers train then evaluate
the applications one after the other, each in a run directory of its own, so that
TensorFlow's start-up and the cluster's are paid once and not once per application.
The same cluster then trains the demo through ``multiworker_worker.py`` (its weights on
both workers: ``test_two_workers_end_with_identical_weights``).
"""

import json

import numpy as np
import pytest

from applications import checks
from tests.applications import cli_helpers
from tests.applications.short_data import write_short_chorales, write_sst_prefix
from tests.applications.test_cli_applications import TINY, TINY_EVALUATE
from tests.applications.tiny_data import tiny_bert_preset
from tests.conftest import shared_path

SMALLNORB_DATA = ["--image-size", "24", "--validation-steps", "1", "--batch-size", "4"]
SST_DATA = ["--granularity", "2", "--max-eval", "8", "--max-length", "12"]

# The fix is one shared mechanism, so these cases stand for the kinds of model and data
# the applications have (each case was a two-process cluster of its own, 20-40 s; all
# nine passed when it went in): a single image tensor (smallnorb), a dict of per-token
# embeddings (sst), a dict of question and scene (sort_of_clevr), an RLadder with two
# outputs (occluded_mnist) and one with a masked per-step metric (music). The demo trains
# on the cluster after them; text_classification, clevr and textured_mnist are left out
# for the CI's time. smallnorb runs last of the five: its worker turns
# the TFDS "prepared" check off for the rest of the process.
APPLICATIONS = ["sst", "sort_of_clevr", "occluded_mnist", "music", "smallnorb"]
# ... one of them under --precision mixed_float16: every step of its LossScaleOptimizer
# sums the workers' overflow verdicts across the cluster (applications.distribute's fix;
# Keras' own check took the first replica's, and a float16 overflow on one worker alone
# deadlocked the cluster), at no extra cost
MIXED_FLOAT16 = "sort_of_clevr"

# Each worker runs tests/applications/multiworker_app_worker.py's main on every spec in
# turn (argv[1]: the list of specs), then tests/applications/multiworker_worker.py's on
# the demo (argv[2]: its arguments; last, as it wraps keras.Model.fit for the rest of the
# process), on the one strategy that distribute caches, and exits with the first
# non-zero code.
_WORKER_LOOP = """
import json, sys
from tests.applications import multiworker_app_worker as worker
from tests.applications import multiworker_worker as demo_worker
specs, demo_args, codes = json.loads(sys.argv[1]), json.loads(sys.argv[2]), []
for spec in specs:
    sys.argv[1:] = [json.dumps(spec)]
    print(f"=== {spec['application']}", flush=True)
    codes.append(worker.main())
sys.argv[1:] = demo_args
print("=== demo", flush=True)
codes.append(demo_worker.main())
sys.exit(next((code for code in codes if code), 0))
"""

# The demo's train options (after RUN_DIR and the worker's weights file: multiworker_worker.py)
DEMO = ["--epochs", "1", "--limit", "96", "--batch-size", "8", "--seed", "3", "--quiet", *cli_helpers.TINY_MODEL]


def _spec(name, tmp_path):
    """``(train options, evaluate options, mock TFDS examples)`` of a tiny run of ``name``
    (music and sst read short copies of the shared data: see short_data.py)."""
    if name == "smallnorb":
        data = ["--data-dir", str(tmp_path / "tfds"), *SMALLNORB_DATA]
        return [*data, "--steps-per-epoch", "1", "--channels", "8", "--parts", "8"], data, 8
    if name == "sst":
        data = ["--data-dir", str(write_sst_prefix(tmp_path / "sst")), *SST_DATA,
                "--preset", tiny_bert_preset(tmp_path / "preset")]
        return [*data, "--train-on", "sentences", "--max-train", "16", "--hidden-dim", "8",
                "--hidden-capsules", "4", "--n-iters", "2", "--batch-size", "8"], data, None
    short = {str(shared_path("data", "jsb_chorales")): str(write_short_chorales(tmp_path / "jsb_chorales").parent)}
    return ([short.get(o, o) for o in TINY[name]], [short.get(o, o) for o in TINY_EVALUATE[name]], None)


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory):
    """``{application: run directory}`` of one two-worker cluster that trained then
    evaluated every application of APPLICATIONS, then trained the demo (its run directory
    under ``"demo"``, the workers' weights ``w<i>*.npz`` beside it; read-only for the tests)."""
    folder = tmp_path_factory.mktemp("multiworker")
    specs, run_dirs = [], {}
    for name in APPLICATIONS:
        train, evaluate, mock_tfds = _spec(name, folder / name)
        run_dirs[name] = folder / name / "run"  # one run directory, as on a shared file system
        precision = ["--precision", "mixed_float16"] if name == MIXED_FLOAT16 else []
        specs.append({"application": name, "run_dir": str(run_dirs[name]),
                      "train": [*train, "--epochs", "1", "--quiet", *precision], "evaluate": evaluate,
                      "mock_tfds": mock_tfds})
    run_dirs["demo"] = folder / "demo" / "run"  # one run directory, as on a shared file system
    run_dirs["demo"].parent.mkdir()
    demo_args = [[str(run_dirs["demo"]), str(folder / "demo" / f"w{index}.npz"), *DEMO] for index in range(2)]
    cli_helpers.run_workers(lambda index: ["-c", _WORKER_LOOP, json.dumps(specs), json.dumps(demo_args[index])],
                            folder, timeout=900)
    return run_dirs


@pytest.mark.parametrize("name", APPLICATIONS)
def test_train_then_evaluate_under_two_workers(name, cluster_runs):
    run_dir = cluster_runs[name]
    evaluations = []
    for out in (run_dir, run_dir / "workers" / "worker-1"):  # the chief's outputs, then the other worker's
        assert (out / "model.keras").is_file(), sorted(p.name for p in out.iterdir())
        assert (out / "metrics.json").is_file() and (out / "history.csv").is_file()
        evaluations.append(json.loads((out / "evaluate.json").read_text()))
        assert evaluations[-1].pop("model") == str(out / "model.keras")
        # trained with a LossScaleOptimizer under mixed_float16 only (its state in the weights file)
        assert checks._saved_with_loss_scaling(str(out / "model.keras")) == (name == MIXED_FLOAT16)
    # the workers evaluated the same weights on their shares of the data: the reduced metrics agree
    assert evaluations[0] == evaluations[1] and evaluations[0]


def test_two_workers_end_with_identical_weights(cluster_runs):
    run_dir = cluster_runs["demo"]
    weights = run_dir.parent  # w<i>.npz: worker i's weights after training; w<i>-initial/-trained.npz
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["global_batch_size"] == 16
    assert (run_dir / "workers" / "worker-1" / "model.keras").exists()
    chief, worker = np.load(weights / "w0.npz"), np.load(weights / "w1.npz")
    assert len(chief.files) == len(worker.files) > 0
    for key in chief.files:
        np.testing.assert_array_equal(chief[key], worker[key], err_msg=key)
    # ... and they trained: identical weights that no step changed prove nothing
    for index in range(2):
        initial, trained = np.load(weights / f"w{index}-initial.npz"), np.load(weights / f"w{index}-trained.npz")
        assert len(initial.files) == len(trained.files) > 0
        changed = [key for key in initial.files if not np.array_equal(initial[key], trained[key])]
        assert len(changed) == len(initial.files), f"worker {index}: weights the training left unchanged"
