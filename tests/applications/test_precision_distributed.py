"""``--precision`` under ``--strategy mirrored`` (two logical CPU replicas, in-process):
mixed precision was tested under the default strategy only (test_precision.py).

Under ``mixed_float16`` Keras wraps the optimizer in a ``LossScaleOptimizer``, whose
dynamic loss scale is a replicated variable updated in cross-replica context. Keras
(3.15) decided whether a step's gradients were finite from the first replica's alone
(they are not all-reduced yet where it looks): a float16 overflow on another replica
went into the all-reduce and turned every weight NaN, the scale not halved. The fix is
``applications.distribute.install_keras_fixes``; the first test fails without it.

The others train the demo from the command line under each mixed policy on two replicas
and check: finite losses, the loss scale restored with the optimizer by a resume after a
crash (mixed_float16), the saved model's layers keep the policy, ``evaluate`` on two
replicas gives the figures of ``evaluate`` on one device and of the run itself, and the
global policy is float32 again after the command (after the crash too).
"""

import contextlib
import io
import json
import math

import keras
import numpy as np
import pytest

from applications import __main__ as cli
from applications import distribute, fault_tolerance
from tests.applications import cli_helpers
from tests.harness import two_cpu_strategy

# as a user's run: traced (the replicated loss-scale update is graph code)
pytestmark = pytest.mark.graph_mode

COMPUTE = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


def _scaled_model(strategy, run_eagerly=False):
    """A ``Dense(1)`` regression built and compiled under ``mixed_float16`` in ``strategy``
    (its optimizer a ``LossScaleOptimizer``), seeded: the same weights in every strategy."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        with strategy.scope():
            keras.utils.set_random_seed(0)
            inputs = keras.Input((4,))
            model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
            model.compile(keras.optimizers.SGD(0.01), "mse", run_eagerly=run_eagerly)
    finally:
        keras.config.set_dtype_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    return model


def _state(model):
    optimizer = model.optimizer
    return (float(optimizer.dynamic_scale.numpy()), int(optimizer.step_counter.numpy()),
            int(optimizer.iterations.numpy()))


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["traced", "eager"])
def test_a_step_whose_gradients_overflow_on_one_replica_is_skipped_as_on_one_device(run_eagerly):
    # rows 2-3 (the second replica's half of the batch of 4) overflow float16 once the
    # loss is scaled by 2**15: inputs of 1000 make kernel gradients far beyond 65504
    x = np.ones((4, 4), "float32")
    x[2:] = 1000.0
    y = np.zeros((4, 1), "float32")
    mirrored = distribute.resolve_strategy(two_cpu_strategy())  # (with the Keras fixes, as every run has them)
    models = {"one device": _scaled_model(distribute.make_strategy("default"), run_eagerly),
              "mirrored": _scaled_model(mirrored, run_eagerly)}
    initial = models["one device"].get_weights()
    for name, model in models.items():
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        # skipped: the scale halved, no step counted, the weights left as they were
        assert _state(model) == (2.0 ** 14, 0, 0), name
        for w, w0 in zip(model.get_weights(), initial):
            np.testing.assert_array_equal(w, w0, err_msg=name)
    # a batch that overflows nowhere (at the halved scale) is applied on both, alike
    x[2:] = 0.5
    for model in models.values():
        model.fit(x, y + 1.0, batch_size=4, epochs=1, verbose=0, shuffle=False)
        assert _state(model) == (2.0 ** 14, 1, 1)
    one, two = (models[name].get_weights() for name in ("one device", "mirrored"))
    assert any(not np.array_equal(w, w0) for w, w0 in zip(one, initial))
    for w, w2 in zip(one, two):
        np.testing.assert_allclose(w, w2, rtol=1e-3, atol=1e-5)


class _Seen(keras.callbacks.Callback):
    """Records, for each ``fit`` of the runs: the model, the global policy, the
    optimizer's loss-scale state ``(scale, step counter, iterations)`` when it begins and
    at each epoch's end (None without loss scaling), and the epochs' losses."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def _scale(self):
        optimizer = self.model.optimizer
        return _state(self.model) if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) else None

    def on_train_begin(self, logs=None):
        self.seen.setdefault("fits", []).append({"model": self.model, "policy": keras.config.dtype_policy().name,
                                                 "begin": self._scale(), "epochs": [], "losses": []})

    def on_epoch_end(self, epoch, logs=None):
        self.seen["fits"][-1]["epochs"].append(self._scale())
        self.seen["fits"][-1]["losses"].append(float(logs["loss"]))


def _evaluate(model_path, strategy, capsys):
    capsys.readouterr()
    code = cli.main(["evaluate", "demo", "--strategy", strategy, "--model", str(model_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_train_demo_on_two_replicas_under_a_mixed_policy(precision, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(distribute._CACHE, "mirrored", two_cpu_strategy())
    seen, crash = {}, [cli_helpers.CrashAt(1, 1)] if precision == "mixed_float16" else []
    make = fault_tolerance.resumable_callbacks
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks",
                        lambda *a, **kw: [*make(*a, **kw), _Seen(seen), *crash])
    run_dir = tmp_path / "run"
    argv = ["train", "demo", "--strategy", "mirrored", "--precision", precision, "--epochs", "2", "--limit", "46",
            "--batch-size", "3", "--run-dir", str(run_dir), "--quiet", *cli_helpers.TINY_MODEL]
    assert keras.config.dtype_policy().name == "float32"
    if crash:  # a crash in the second epoch, then the same command: resumed from the first one's backup
        with pytest.raises(RuntimeError, match="simulated"), contextlib.redirect_stdout(io.StringIO()):
            cli.main(argv)
        assert keras.config.dtype_policy().name == "float32"  # put back on the error too
        assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1
        crash.clear()
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert keras.config.dtype_policy().name == "float32"
    fits = seen["fits"]
    assert len(fits) == (2 if precision == "mixed_float16" else 1)
    model = fits[-1]["model"]
    assert {fit["policy"] for fit in fits} == {precision}
    assert model.distribute_strategy.num_replicas_in_sync == 2
    hidden = [layer for layer in model._flatten_layers(include_self=False) if layer.weights]
    assert any(layer.compute_dtype == COMPUTE[precision] for layer in hidden)  # (the outputs may be float32)
    assert all(w.dtype == "float32" for w in model.trainable_weights)
    losses = [loss for fit in fits for loss in fit["losses"]]
    assert losses and all(math.isfinite(loss) for loss in losses), losses
    if precision == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        crashed, resumed = fits
        # the resumed fit began with the loss-scale state (and step) of the backup: the first epoch's end
        assert resumed["begin"] == crashed["epochs"][0] and resumed["begin"][2] > 0, (crashed, resumed)
        for scale, counter, iterations in [resumed["begin"], *resumed["epochs"]]:
            # a power of two, at most 2**15 (12 steps cannot reach Keras' growth interval of 2000), and
            # one count per step of the two replicas (a count per replica would run ahead of the steps)
            assert 1 <= scale <= 2.0 ** 15 and math.log2(scale).is_integer() and counter <= iterations, (
                scale, counter, iterations)
    else:
        assert not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    # the saved model: its layers keep the policy, and two replicas evaluate it as one device does
    # (and as the run itself did, on two replicas, at its end)
    loaded = keras.saving.load_model(run_dir / "model.keras")
    assert precision in {layer.dtype_policy.name for layer in loaded._flatten_layers(include_self=False)
                         if layer.weights}
    two, one = _evaluate(run_dir / "model.keras", "mirrored", capsys), _evaluate(run_dir / "model.keras", "default",
                                                                                 capsys)
    recorded = json.loads((run_dir / "metrics.json").read_text())
    assert recorded["replicas"] == 2 and two["test_accuracy"] == one["test_accuracy"] == recorded["test_accuracy"]
    assert math.isfinite(two["test_loss"])
    assert two["test_loss"] == pytest.approx(one["test_loss"], rel=1e-5)
    assert two["test_loss"] == pytest.approx(recorded["test_loss"], rel=1e-5)
    assert keras.config.dtype_policy().name == "float32"
