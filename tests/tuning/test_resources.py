"""What a process keeps of finished trials and runs: a keras-tuner search runs many trials
in one process, a notebook calls an application's ``train`` several times.

A traced ``tf.custom_gradient`` (EM routing's recomputed branch, TensorFlow's swish, ...)
registers its gradient in TensorFlow's process-wide gradient registry, which never let go:
every trial kept its model's layers and traced steps (a demo search grew by ~60 MB a
trial). ``applications.fault_tolerance.release_traced_graphs`` ties each entry to its
graph; the searches' trials and the applications' runs call it as they begin. The other
checks guard what held: a second ``train`` with the same seed gives the same figures and
leaves no file descriptor, thread, logging handler, pyplot figure or temporary file more.
"""

import gc
import logging
import os
import threading
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

from applications import demo, fault_tolerance
from keras_capsules import callbacks as capsule_callbacks
from keras_capsules.layers import EMRouting
from tuning import search
from tuning.demo import DemoHyperModel

TINY = {"filters": 8, "primary_capsules": 2, "hidden_capsules": 4, "pose_size": 2, "n_iters": 2}


def _registry():
    from tensorflow.python.framework import ops as tf_ops

    return tf_ops._gradient_registry._registry


def _alive(references):
    gc.collect()
    return [ref for ref in references if ref() is not None]


class _WatchModel(keras.callbacks.Callback):
    """Records weak references to the model of every ``fit`` it is used in and to its
    ``EMRouting`` layers (which the registry kept, while the model object itself went),
    and keeps neither."""

    def __init__(self, found):
        super().__init__()
        self.found = found

    def set_model(self, model):
        self.found.append(weakref.ref(model))
        self.found.extend(weakref.ref(layer) for layer in model._flatten_layers() if isinstance(layer, EMRouting))


@pytest.mark.graph_mode
def test_a_search_keeps_no_earlier_trials_model(tmp_path):
    # graph mode: the registry holds traced gradients only (as `keras-capsules tune` runs)
    built = []

    class Watched(DemoHyperModel):
        def build(self, hp):
            model = super().build(hp)
            built.append(weakref.ref(next(layer for layer in model.layers if isinstance(layer, EMRouting))))
            return model

    hypermodel = Watched(limit=120, batch_size=80, epochs=1, verbose=0)
    tuner = search.make_tuner("random", hypermodel, str(tmp_path), "demo", 2, epochs=1, seed=0)
    tuner.search(epochs=1, verbose=0)
    assert len(built) >= 3  # (keras-tuner builds once for the search space, then once a trial)
    # each trial lets the ones before it go (the last one goes when the next run begins)
    assert _alive(built[:-1]) == [], f"{len(_alive(built[:-1]))} earlier trials' layers are still alive"
    del tuner


def _resources():
    gc.collect()
    handlers = {name: len(logger.handlers) for name, logger in logging.root.manager.loggerDict.items()
                if isinstance(logger, logging.Logger)}
    handlers[""] = len(logging.getLogger().handlers)
    pyplot = __import__("sys").modules.get("matplotlib.pyplot")
    return {
        "fds": len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None,
        "threads": sorted(t.name for t in threading.enumerate()),
        "handlers": handlers,
        "figures": [] if pyplot is None else pyplot.get_fignums(),
    }


@pytest.mark.graph_mode
def test_a_second_train_is_the_first_again_and_keeps_nothing_of_it(tmp_path):
    models, models_by_run = [], []
    results = []
    seen = []
    for i in range(2):
        run_dir = tmp_path / f"run{i}"
        results.append(demo.train(str(run_dir), epochs=1, batch_size=16, seed=3, limit=60, verbose=0,
                                  model_options=TINY, callbacks=[_WatchModel(models)]))
        seen.append(_resources())
        models_by_run.append(models[sum(map(len, models_by_run)):])
        assert not [name for name in os.listdir(run_dir) if name.startswith(".tmp-")]
        assert not os.path.exists(run_dir / fault_tolerance.BACKUP_DIR)
    # the same seed: the same run (no state of the first leaks into the next)
    for key in ("test_accuracy", "test_loss"):
        assert results[1][key] == results[0][key], key
    # nothing more open after the second than after the first
    assert seen[1] == seen[0]
    # the first run's model went when the second began
    earlier = models_by_run[0]
    assert len(earlier) > 1 and _alive(earlier) == [], f"{len(_alive(earlier))} layers or models of earlier runs are alive"


@pytest.mark.graph_mode
def test_released_gradients_still_differentiate_live_graphs_and_dead_ones_leave_the_registry():
    @tf.custom_gradient
    def doubled(x):
        def gradient(upstream):
            return upstream * 3.0  # (not 2: the registered gradient, not TensorFlow's own, is used)

        return x * 2.0, gradient

    @tf.function
    def forward(x):
        return doubled(x)

    x = tf.constant([1.0, 2.0])
    forward(x)  # traced: its gradient registered
    names = [name for name in _registry() if name.startswith("CustomGradient-")]
    fault_tolerance.release_traced_graphs()
    gc.collect()
    # the backward pass of a tape around a call is built after the release, from the registry
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = forward(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 3.0])

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = doubled(x)
        return tape.gradient(y, x)

    np.testing.assert_allclose(step(x).numpy(), [3.0, 3.0])
    fault_tolerance.release_traced_graphs()  # twice: nothing changes for released entries
    np.testing.assert_allclose(step(tf.constant([4.0])).numpy(), [3.0])
    new = [name for name in _registry() if name.startswith("CustomGradient-") and name not in names]
    assert new, "the traced step registered no custom gradient"
    del step, forward, tape, y
    fault_tolerance.release_traced_graphs()  # (as the next run or trial begins)
    gc.collect()
    assert not [name for name in new if name in _registry()], "dead graphs' gradients stayed registered"


def test_an_ema_swap_stopped_between_epochs_does_not_keep_its_model():
    # A fit stopped by an error after an epoch's end set the trained weights aside (the
    # average in the model): the swap stayed registered for backups, and the module's
    # registry (weak keys, but the swap as value holds the model) kept the model for good.
    class Stop(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("stopped")

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1, use_ema=True), "mse")
    swap = capsule_callbacks.swap_ema_weights(swap_on_epoch=True)
    x = np.ones((8, 3), "float32")
    with pytest.raises(RuntimeError, match="stopped"):
        model.fit(x, x[:, :2], epochs=2, verbose=0, callbacks=[swap, Stop()])
    # while the swap lives, a backup still finds the trained weights aside
    aside = capsule_callbacks._ASIDE.get(model)
    assert aside is not None
    with capsule_callbacks.trained_weights_in(model):
        pass
    reference = weakref.ref(model)
    del model, swap, aside
    assert _alive([reference]) == [], "the stopped fit's model is still alive"
