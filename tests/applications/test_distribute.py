"""Training the demo under tf.distribute: MirroredStrategy in-process (two workers: on the shared
cluster of tests/applications/test_multiworker_applications.py)."""

import contextlib
import io
import json
import os

import numpy as np
import pytest

from applications import __main__ as cli
from applications import distribute
from applications.errors import StrategyError
from tests.applications import cli_helpers
from tests.harness import two_cpu_strategy

# These tests check the strategies and the Keras fixes around fit's traced steps (how
# often a step is traced, the per-replica batches), so they run traced, not eagerly as
# the rest of tests/applications (conftest.py).
pytestmark = pytest.mark.graph_mode


@pytest.fixture
def mirrored(monkeypatch):
    """``make_strategy("mirrored")`` returns the session's two-CPU strategy (one per process)."""
    monkeypatch.setitem(distribute._CACHE, "mirrored", two_cpu_strategy())


def test_global_batch_is_per_replica_batch_times_replicas(mirrored):
    assert distribute.global_batch_size(8, distribute.make_strategy("mirrored")) == 16
    assert distribute.global_batch_size(8, distribute.make_strategy("default")) == 8


@pytest.fixture(scope="module")
def mirrored_demo(tmp_path_factory):
    """One ``train demo --strategy mirrored`` from the command line (two epochs of 46
    digits in global batches of 6), shared by the two tests below: ``{"code", "err",
    "run_dir", "result", "steps", "caught"}`` (the training steps of each epoch, counted
    by a callback given to ``demo.train``, and the warnings it raised). Read-only."""
    import warnings

    import keras
    from applications import demo

    class Steps(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.counts = [*getattr(self, "counts", []), 0]

        def on_train_batch_end(self, batch, logs=None):
            self.counts[-1] += 1

    steps, results, train = Steps(), [], demo.train

    def train_with_steps(*args, callbacks=(), **kwargs):
        results.append(train(*args, callbacks=[*callbacks, steps], **kwargs))
        return results[-1]

    run_dir = tmp_path_factory.mktemp("mirrored_demo") / "run"
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings(record=True) as caught:
        patch.setitem(distribute._CACHE, "mirrored", two_cpu_strategy())
        patch.setattr(demo, "train", train_with_steps)
        warnings.simplefilter("always")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = cli.main(["train", "demo", "--strategy", "mirrored", "--epochs", "2", "--limit", "46",
                             "--batch-size", "3", "--run-dir", str(run_dir), "--quiet", *cli_helpers.TINY_MODEL])
    return {"code": code, "err": err.getvalue(), "run_dir": run_dir, "result": results[0] if results else None,
            "steps": getattr(steps, "counts", None), "caught": caught}


def test_train_demo_under_mirrored_strategy(mirrored_demo):
    run_dir = mirrored_demo["run_dir"]
    assert mirrored_demo["code"] == 0, mirrored_demo["err"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["global_batch_size"] == 6
    assert np.isfinite(metrics["test_loss"])
    assert (run_dir / "model.keras").stat().st_size > 0


def test_unreachable_tpu_is_a_one_line_error(capsys):
    with pytest.raises(StrategyError, match="no TPU reachable"):
        distribute.make_strategy("tpu")
    assert cli.main(["train", "--strategy", "tpu", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: no TPU reachable") and err.count("\n") == 1


def test_output_dir_separates_non_chief_workers(monkeypatch):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    assert distribute.is_chief() and distribute.output_dir("r") == "r"
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert not distribute.is_chief()
    assert distribute.output_dir("r") == os.path.join("r", "workers", "worker-1")


@pytest.mark.parametrize("tf_config, fragment", [
    ("{bad", "TF_CONFIG is not valid JSON"),
    ("[1, 2]", "TF_CONFIG must be a JSON object"),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": "x"}}',
     "TF_CONFIG task index must be a non-negative integer"),
    # Audit 9: a cluster without the task's type made every process the chief (all wrote into --run-dir).
    ('{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"index": 1}}',
     "TF_CONFIG 'task' must name this process's type"),
])
def test_a_malformed_tf_config_is_a_clear_error_and_only_multiworker_reads_it(monkeypatch, tf_config, fragment):
    # Audit 5: a malformed TF_CONFIG failed `train --strategy default` (which has no use
    # for it) with json's "Expecting property name ... (char 1)", and `--strategy
    # multiworker` with that or "invalid literal for int()", never naming TF_CONFIG.
    import tensorflow as tf

    monkeypatch.setenv("TF_CONFIG", tf_config)
    default = distribute.make_strategy("default")
    assert distribute.is_chief(default) and distribute.output_dir("r", default) == "r"
    assert distribute.is_chief(tf.distribute.get_strategy())
    with pytest.raises(StrategyError, match=fragment):
        distribute.task()
    with pytest.raises(StrategyError, match=fragment):
        distribute.make_strategy("multiworker")  # before TensorFlow reads it
    assert "multiworker" not in distribute._CACHE


@pytest.mark.parametrize("value", [8.5, "8", 0, -2, None, True])
def test_global_batch_size_refuses_a_bad_per_replica_batch(value):
    # Audit 9: int() truncated 8.5 to 8 and let 0 or -2 through to fail inside tf.data.
    with pytest.raises(ValueError, match="Received: per_replica_batch_size="):
        distribute.global_batch_size(value, distribute.make_strategy("default"))
    assert distribute.global_batch_size(np.int64(4), distribute.make_strategy("default")) == 4


def test_a_batch_smaller_than_the_replicas_is_refused_quoting_both():
    # The error ended without the "Received: ..." of the project's other errors.
    from applications.errors import InputError

    with pytest.raises(InputError) as refused:
        distribute.check_replicas(4, batch_size=2)
    assert str(refused.value) == (
        "a batch of 2 cannot be split over 4 replicas: give every replica at least one example "
        "(a larger batch size). Received: batch_size=2, replicas=4"
    )
    with pytest.raises(InputError, match=r"Received: batch_size=1, replicas=2$"):
        distribute.even_batch_count(7, 1, 2)
    assert distribute.check_replicas(np.int64(2), batch_size=2) == 2


def test_multiworker_after_tensorflow_started_is_a_strategy_error(monkeypatch):
    # Audit 9: a raw RuntimeError "Collective ops must be configured at program startup".
    import tensorflow as tf

    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    monkeypatch.delitem(distribute._CACHE, "multiworker", raising=False)
    tf.constant(1.0) + 1.0  # TensorFlow has run an op (else the strategy would wait for worker 1)
    with pytest.raises(StrategyError, match="before TensorFlow runs its first op"):
        distribute.make_strategy("multiworker")
    assert "multiworker" not in distribute._CACHE


@pytest.mark.parametrize("seed", ["-1", str(2**32), "1.5"])
def test_a_bad_seed_is_refused_by_the_parser(capsys, seed):
    # Audit 9: a negative or too large --seed was accepted, and training failed after the
    # data was loaded with "Seed must be between 0 and 2**32 - 1", naming no option.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "demo", "--seed", seed, "--epochs", "1", "--quiet"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "expected an integer seed in [0, 2**32)" in err and err.count("\n") == 1


def test_set_intra_op_threads_errors_name_the_argument_and_take_numpy_integers():
    # Audit 9: the message lacked "threads=" and np.int64 (an equal setting) was refused.
    import tensorflow as tf

    with pytest.raises(ValueError, match="Received: threads=-1"):
        distribute.set_intra_op_threads(-1)
    current = tf.config.threading.get_intra_op_parallelism_threads()
    assert distribute.set_intra_op_threads(np.int64(current))  # unchanged: nothing to do


def test_default_strategy_asked_for_inside_another_scope_is_still_the_default(monkeypatch):
    # Audit 9: inside a MirroredStrategy scope, make_strategy("default") returned (and
    # cached for the rest of the process) the mirrored strategy.
    import tensorflow as tf

    monkeypatch.delitem(distribute._CACHE, "default", raising=False)
    with two_cpu_strategy().scope():
        inside = distribute.make_strategy("default")
    assert inside.num_replicas_in_sync == 1 and inside is tf.distribute.get_strategy()
    assert distribute.make_strategy("default") is inside


def test_a_tpu_name_without_the_tpu_strategy_is_a_one_line_error(capsys):
    # Audit 9: `train --tpu NAME` without `--strategy tpu` ignored the TPU and trained here.
    with pytest.raises(StrategyError, match="Received: tpu='my-tpu', strategy='default'"):
        distribute.make_strategy("default", tpu="my-tpu")
    assert cli.main(["train", "--tpu", "my-tpu", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: --tpu is used only with --strategy tpu") and err.count("\n") == 1


@pytest.mark.parametrize("tf_config", [None, "", '{"task": {"type": "worker", "index": 0}}'])
def test_multiworker_without_a_cluster_in_tf_config_is_a_strategy_error(monkeypatch, tf_config, capsys):
    # Without TF_CONFIG, MultiWorkerMirroredStrategy is a cluster of this process alone:
    # every machine of the intended cluster trained on its own, each as the chief.
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    monkeypatch.delitem(distribute._CACHE, "multiworker", raising=False)
    with pytest.raises(StrategyError, match="--strategy multiworker needs TF_CONFIG"):
        distribute.make_strategy("multiworker")
    assert "multiworker" not in distribute._CACHE
    assert cli.main(["train", "--strategy", "multiworker", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: --strategy multiworker needs TF_CONFIG") and err.count("\n") == 1


def test_the_multi_worker_fixes_leave_other_strategies_alone(monkeypatch):
    # make_strategy and resolve_strategy patch Keras for every model of the process (see
    # test_multiworker_applications.py): fit and evaluate under one device (where the patch
    # builds before the first trace) or two mirrored replicas must give what they gave
    # without the patch.
    import keras
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer as tf_trainer

    def run(strategy):
        keras.utils.set_random_seed(0)
        x = {"a": np.random.rand(32, 3).astype("float32"), "b": np.random.rand(32, 2).astype("float32")}
        y = np.random.randint(0, 2, 32)
        data = distribute.distribute_dataset_options(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
        with strategy.scope():
            inputs = {"a": keras.Input((3,), name="a"), "b": keras.Input((2,), name="b")}
            outputs = keras.layers.Dense(2)(keras.layers.Concatenate()([inputs["a"], inputs["b"]]))
            model = keras.Model(inputs, outputs)
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        history = model.fit(data, validation_data=data, epochs=2, verbose=0, shuffle=False).history
        return history, model.evaluate(data, verbose=0), [w.numpy() for w in model.weights]

    strategies = (distribute.make_strategy("default"), two_cpu_strategy())
    # Keras' own functions (another test of this process may have installed the fixes),
    # set by monkeypatch's hand, so that the patched ones are restored after the test
    monkeypatch.setattr(tf_trainer.TensorFlowTrainer, "_maybe_symbolic_build",
                        distribute._KERAS_ORIGINALS.get("build", tf_trainer.TensorFlowTrainer._maybe_symbolic_build))
    monkeypatch.setattr(tf_trainer, "reduce_per_replica",
                        distribute._KERAS_ORIGINALS.get("reduce_per_replica", tf_trainer.reduce_per_replica))
    assert tf_trainer.TensorFlowTrainer._maybe_symbolic_build.__name__ == "_maybe_symbolic_build"
    before = [run(strategy) for strategy in strategies]
    monkeypatch.setattr(distribute, "_FIXES_INSTALLED", False)
    assert distribute.install_keras_fixes() and distribute.install_keras_fixes()  # idempotent
    assert tf_trainer.TensorFlowTrainer._maybe_symbolic_build.__name__ == "maybe_symbolic_build"
    after = [run(strategy) for strategy in strategies]
    for (history, evaluation, weights), (history_after, evaluation_after, weights_after) in zip(before, after):
        assert history == history_after and evaluation == evaluation_after
        for w, w_after in zip(weights, weights_after):
            np.testing.assert_array_equal(w, w_after)


def test_without_a_strategy_fit_and_evaluate_trace_their_step_once(monkeypatch):
    # Keras built the optimizer's and metrics' variables inside the first trace of the
    # train (test) function when no strategy was set, and TensorFlow traced a function
    # that created variables twice: every fit traced the whole train step twice.
    import keras
    import tensorflow as tf

    traces = {"train": 0, "test": 0}

    class Counted(keras.Model):
        def train_step(self, data):
            traces["train"] += 1
            return super().train_step(data)

        def test_step(self, data):
            traces["test"] += 1
            return super().test_step(data)

    distribute.resolve_strategy(None)
    x = np.random.default_rng(0).random((12, 3)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1] > 0.5)).batch(4)
    inputs = keras.Input((3,))
    model = Counted(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs))
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    history = model.fit(data, validation_data=data, epochs=2, verbose=0).history
    assert traces == {"train": 1, "test": 1}
    assert np.isfinite(history["loss"]).all() and len(history["val_accuracy"]) == 2
    # a loaded model's evaluate: its compiled metrics are built before the trace as well
    loaded = Counted.from_config(model.get_config())
    loaded.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    loaded.set_weights(model.get_weights())
    assert loaded.evaluate(data, verbose=0) == pytest.approx(model.evaluate(data, verbose=0))
    assert traces == {"train": 1, "test": 2}  # the model's own evaluate reuses its test function


def test_a_built_models_metrics_and_loss_are_built_without_running_it_once_more(monkeypatch, tmp_path):
    # The build before the first trace ran the whole model on the data's specs only to
    # learn its predictions' spec: a quarter of a loaded text classifier's evaluate (its
    # GRUs traced once more), the same in every fit of a new model. A built functional
    # model (loaded, or just made) has that spec in its outputs: its compiled metrics and
    # loss are built from them, the model runs only in the step's one trace, and the
    # figures are those of Keras' own build (its deferred build, through the original
    # function). The compiled state is built before that trace, not inside it.
    import keras
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer as tf_trainer

    runs, watched = [], {}

    class Counting(keras.layers.Layer):  # each run of the watched model: traced, or an eager step
        def call(self, x):
            if "model" in watched:  # whether its compiled state was built by then
                model = watched["model"]
                runs.append(bool(model._compile_metrics.built and model._compile_loss.built))
            return x

    rng = np.random.default_rng(0)
    x, y = rng.random((10, 3)).astype("float32"), rng.integers(0, 3, 10)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    inputs = keras.Input((3,))
    made = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(Counting()(inputs)))
    made.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], jit_compile=False)
    made.save(tmp_path / "model.keras")

    def load():  # (the load runs the layers symbolically: not counted)
        watched.clear()
        watched["model"] = keras.saving.load_model(tmp_path / "model.keras", custom_objects={"Counting": Counting})
        return watched["model"]

    distribute.resolve_strategy(None)
    model = load()
    assert not model._compile_metrics.built and not model._compile_loss.built  # what a load leaves
    scores = model.evaluate(data, verbose=0, return_dict=True)
    assert runs == [True]  # one trace, the compiled state built before it
    assert model.evaluate(data, verbose=0, return_dict=True) == scores and runs == [True]  # built: nothing again
    with monkeypatch.context() as keras_own:  # Keras' own build (deferred to the trace): the same figures
        keras_own.setattr(tf_trainer.TensorFlowTrainer, "_maybe_symbolic_build", distribute._KERAS_ORIGINALS["build"])
        model = load()
        assert model.evaluate(data, verbose=0, return_dict=True) == scores
        keras_own_metrics = [(type(m).__name__, m.name) for m in model.metrics]
    model = load()
    model.evaluate(data, verbose=0)
    assert [(type(m).__name__, m.name) for m in model.metrics] == keras_own_metrics
    assert [type(m).__name__ for m in model._compile_metrics.metrics] == ["SparseCategoricalAccuracy"]
    # fit of a model just made: its optimizer too is built before the train step's one trace
    runs.clear()
    watched.clear()
    model = keras.Model.from_config(made.get_config(), custom_objects={"Counting": Counting})
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], jit_compile=False)
    watched["model"] = model
    assert not model.optimizer.built
    model.fit(data, epochs=1, verbose=0)
    assert runs == [True] and model.optimizer.built
    # not a functional model (no outputs to read): Keras' own build, from the data
    assert not distribute._build_compiled_from_outputs(keras.Sequential([keras.layers.Dense(2)]), data.element_spec)


def test_a_multi_worker_strategy_passed_to_train_gets_the_fixes(monkeypatch, tmp_path):
    # Only make_strategy("multiworker") installed the fixes: a MultiWorkerMirroredStrategy
    # that a user made and passed to an application's train or evaluate (train(strategy=...))
    # met Keras' multi-worker bugs at fit. The applications resolve their strategy through
    # resolve_strategy, which installs them for a multi-worker strategy.
    import tensorflow as tf

    from applications import demo

    installed = []
    monkeypatch.setattr(distribute, "install_keras_fixes", lambda: installed.append(True) or True)
    # every strategy gets them (the default one for the build before the first trace)
    assert distribute.resolve_strategy(None) is tf.distribute.get_strategy() and installed == [True]
    installed.clear()
    mirrored = two_cpu_strategy()  # two replicas: the fix of a first batch that splits unevenly
    assert distribute.resolve_strategy(mirrored) is mirrored and installed == [True]
    installed.clear()

    class MultiWorker:  # what _is_multi_worker reads of a MultiWorkerMirroredStrategy
        class extended:
            @staticmethod
            def _in_multi_worker_mode():
                return True

    strategy = MultiWorker()
    assert distribute.resolve_strategy(strategy) is strategy and installed == [True]
    # and an application's train passes its strategy through it (stopped right after)
    seen = []

    def stop(strategy=None):
        seen.append(strategy)
        raise KeyboardInterrupt

    monkeypatch.setattr(distribute, "resolve_strategy", stop)
    with pytest.raises(KeyboardInterrupt):
        demo.train(run_dir=str(tmp_path / "run"), epochs=1, strategy=strategy)
    assert seen == [strategy]


def test_every_application_resolves_the_strategy_it_is_given():
    # Each application's train and evaluate take a `strategy`; they must pass it through
    # resolve_strategy (the multi-worker fixes) rather than fall back to TensorFlow's own.
    import ast
    import importlib.util

    from applications import registry

    modules = dict(registry.APPLICATIONS, text_classification="applications.text_classification.recipe")
    checked = []
    for name, module_name in modules.items():
        path = importlib.util.find_spec(module_name).origin
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or "strategy" not in [a.arg for a in node.args.args]:
                continue
            source = ast.unparse(node)
            if "strategy.scope()" in source or "fit(" in source:  # it trains or loads under it
                assert "distribute.resolve_strategy(strategy)" in source, f"{name}: {node.name}"
                checked.append(f"{name}.{node.name}")
    assert {f"{name}.{function}" for name in modules for function in ("train", "evaluate")} <= set(checked)


@pytest.mark.parametrize("n", [19, 1])
def test_mirrored_fit_and_evaluate_on_a_first_batch_that_splits_unevenly(n):
    # Keras 3.15 builds the model from the first batch averaged over the replicas, which
    # failed ("Inputs to operation AddN ... must have the same size and shape") when
    # the replicas got batches of different sizes: `tune demo --strategy mirrored`
    # validated on 19 examples with a global batch of 32 (10 + 9). With the strategy
    # resolved by the applications (install_keras_fixes), fit and evaluate run, and
    # evaluate gives the one-device figures. (A training step on such a batch is not
    # the one-device step: Keras averages the replicas' mean losses, whatever their
    # batch sizes.)
    import keras
    import tensorflow as tf

    strategy = distribute.resolve_strategy(two_cpu_strategy())
    keras.utils.set_random_seed(0)
    x, y = np.random.rand(n, 3).astype("float32"), np.random.randint(0, 2, n)
    data = distribute.distribute_dataset_options(tf.data.Dataset.from_tensor_slices((x, y)).batch(32))

    def model_in(scope):
        with scope.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        return model

    mirrored, single = model_in(strategy), model_in(distribute.make_strategy("default"))
    single.set_weights(mirrored.get_weights())
    np.testing.assert_allclose(mirrored.evaluate(data, verbose=0), single.evaluate(data, verbose=0), rtol=1e-5)
    history = mirrored.fit(data, validation_data=data, epochs=2, verbose=0).history
    assert np.all(np.isfinite(history["loss"] + history["val_loss"]))
    single.set_weights(mirrored.get_weights())
    np.testing.assert_allclose(history["val_loss"][-1], single.evaluate(data, verbose=0)[0], rtol=1e-5)


@pytest.mark.parametrize("cluster, spec, detail", [
    ({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, {"type": "worker", "index": 2}, "exceeds the maximum id of worker"),
    ({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, {"type": "chief", "index": 0}, "'chief' not found in cluster_spec"),
    ({"worker": "127.0.0.1:1"}, {"type": "worker", "index": 0}, "must be a list or a dictionary"),
])
def test_a_task_outside_its_tf_config_cluster_is_a_one_line_error(monkeypatch, capsys, cluster, spec, detail):
    # A task index past the cluster's addresses, a task type the cluster lacks, or
    # addresses not in a list failed `train --strategy multiworker` with TensorFlow's
    # traceback (ValueError / TypeError from MultiWorkerMirroredStrategy()).
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": spec}))
    monkeypatch.delitem(distribute._CACHE, "multiworker", raising=False)
    with pytest.raises(StrategyError, match=f"TF_CONFIG's cluster and task do not fit together .*{detail}"):
        distribute.make_strategy("multiworker")
    assert "multiworker" not in distribute._CACHE
    assert cli.main(["train", "--strategy", "multiworker", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: TF_CONFIG's cluster and task") and err.count("\n") == 1


def test_steps_per_execution_above_one_is_refused_under_mirrored_replicas():
    # Keras 3.15 runs steps_per_execution > 1 steps in a tf.while_loop, where the
    # collective all-reduce of the gradients gets no instance key: fit failed at its first
    # step with "You must feed a value for placeholder tensor 'while/body/.../Placeholder_1'
    # with dtype int32". It is refused up front; evaluate (no all-reduce) still runs, and
    # one device still trains several steps per execution.
    import keras
    import tensorflow as tf

    x, y = np.random.rand(20, 3).astype("float32"), np.random.randint(0, 2, 20)
    data = distribute.distribute_dataset_options(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))

    def model_in(strategy, steps_per_execution):
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                          steps_per_execution=steps_per_execution)
        return model

    mirrored = model_in(distribute.resolve_strategy(two_cpu_strategy()), 2)
    with pytest.raises(ValueError, match=r"steps_per_execution=2 cannot train under a MirroredStrategy of 2 "
                                         r"replicas .* compile with steps_per_execution=1"):
        mirrored.fit(data, epochs=1, verbose=0)
    single = model_in(distribute.make_strategy("default"), 2)
    single.set_weights(mirrored.get_weights())
    np.testing.assert_allclose(mirrored.evaluate(data, verbose=0), single.evaluate(data, verbose=0), rtol=1e-5)
    assert np.isfinite(single.fit(data, epochs=1, verbose=0).history["loss"][0])


def test_a_batch_that_splits_unevenly_trains_as_one_device_on_the_examples_kept():
    # Keras 3.15 averages the replicas' mean losses whatever their numbers of examples:
    # a batch of 3 on two replicas (2 + 1) made 0.55-0.64 of the one-device SGD step, a
    # batch of 1 half of it (the last batch of an epoch, in six applications). Cut to a
    # multiple of the replicas (3 -> 2, 1 -> none), the step is the one-device step on
    # the examples kept.
    import keras
    import tensorflow as tf

    strategy = distribute.resolve_strategy(two_cpu_strategy())
    keras.utils.set_random_seed(1)
    x, y = np.random.rand(4, 3).astype("float32"), np.random.randint(0, 2, 4)

    def model_in(scope):
        with scope.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile(keras.optimizers.SGD(1.0), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    mirrored, single = model_in(strategy), model_in(distribute.make_strategy("default"))
    single.set_weights(mirrored.get_weights())
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(3)  # 3, then 1
    even = distribute.even_batches(batches, 2, distribute.even_batch_count(4, 3, 2))
    assert int(even.cardinality()) == 1
    mirrored.fit(distribute.distribute_dataset_options(even), epochs=1, verbose=0)
    single.fit(tf.data.Dataset.from_tensor_slices((x[:2], y[:2])).batch(2), epochs=1, verbose=0)
    assert int(mirrored.optimizer.iterations.numpy()) == 1
    assert not np.allclose(mirrored.get_weights()[0], model_in(distribute.make_strategy("default")).get_weights()[0])
    for trained, expected in zip(mirrored.get_weights(), single.get_weights()):
        np.testing.assert_allclose(trained, expected, rtol=1e-5, atol=1e-6)



def test_even_batches_cut_every_structure_and_keep_single_replica_data_as_it_is():
    import tensorflow as tf

    ids = tf.ragged.constant([[1], [2, 3], [4], [5, 6, 7], [8], [9, 9], [7]])
    data = tf.data.Dataset.from_tensor_slices(({"ids": ids, "weight": np.arange(7.0)}, np.arange(7))).batch(3)
    assert distribute.even_batches(data, 1) is data  # one replica: the very dataset
    even = distribute.even_batches(data, 2, distribute.even_batch_count(7, 3, 2))  # 3, 3, 1 -> 2, 2
    assert int(even.cardinality()) == 2
    (x0, y0), (x1, y1) = even
    assert x0["ids"].to_list() == [[1], [2, 3]] and x1["ids"].to_list() == [[5, 6, 7], [8]]
    assert x0["weight"].numpy().tolist() == [0, 1] and y1.numpy().tolist() == [3, 4]
    alone = tf.data.Dataset.from_tensor_slices((np.arange(5.0),)).batch(3)  # a tuple of one tensor
    assert [batch for batch, in distribute.even_batches(alone, 2).as_numpy_iterator()][1].tolist() == [3, 4]
    sparse = tf.data.Dataset.from_tensor_slices(tf.sparse.from_dense(np.eye(5))).batch(3)
    assert [tf.sparse.to_dense(b).shape for b in distribute.even_batches(sparse, 2)] == [(2, 5), (2, 5)]
    whole = tf.data.Dataset.range(10).repeat().batch(4, drop_remainder=True)
    assert distribute.even_batches(whole, 2) is whole  # static batches the replicas divide
    odd = tf.data.Dataset.range(10).repeat().batch(5, drop_remainder=True)
    assert next(iter(distribute.even_batches(odd, 2))).numpy().tolist() == [0, 1, 2, 3]
    endless = distribute.even_batches(tf.data.Dataset.range(5).repeat().batch(3), 2)
    assert int(endless.cardinality()) == tf.data.INFINITE_CARDINALITY
    assert [distribute.even_batch_count(n, 3, 2) for n in (6, 7, 8)] == [2, 2, 3]
    assert [distribute.even_batch_count(n, 3, 1) for n in (6, 7)] == [2, 3]
    with pytest.raises(ValueError, match="a batch of 1 cannot be split over 2 replicas"):
        distribute.even_batch_count(7, 1, 2)
    with pytest.raises(ValueError, match="a batch of 2 cannot be split over 4 replicas"):
        distribute.even_batches(tf.data.Dataset.range(4).batch(2, drop_remainder=True), 4)


def test_demo_epochs_with_an_uneven_last_batch_train_under_mirrored_in_whole_replica_batches(mirrored_demo):
    # 46 digits: 37 train in global batches of 6 (3 per replica), the last of 1 example.
    # It made a seventh step of half the one-device step; it is left out (6 steps an
    # epoch), counted in advance (no "ran out of data" at the end of the first epoch).
    # (The run is the command line's of test_train_demo_under_mirrored_strategy.)
    from applications import demo

    assert mirrored_demo["code"] == 0, mirrored_demo["err"]
    assert mirrored_demo["steps"] == [6, 6]
    assert not [w for w in mirrored_demo["caught"] if "ran out of data" in str(w.message)]
    result = mirrored_demo["result"]
    assert result["replicas"] == 2 and result["global_batch_size"] == 6 and np.isfinite(result["test_loss"])
    images, labels = demo.load_arrays(None, 46)
    sizes = {replicas: [len(y) for _, y in demo.make_datasets(images, labels, 6, replicas=replicas)[0]]
             for replicas in (1, 2)}
    assert sizes == {1: [6] * 6 + [1], 2: [6] * 6}


def test_a_text_batch_smaller_than_the_replicas_is_refused_before_any_data_is_read(monkeypatch):
    # text_classification's batches are bucketed (no static size), so even_batches could not
    # refuse them: with a global batch of 2 on 3 replicas every training batch was left
    # out and `recipe.train` trained nothing, without an error.
    from applications.errors import InputError
    from applications.text_classification import data as data_lib
    from applications.text_classification import recipe

    def unread(*args, **kwargs):
        raise AssertionError("data read before the batch size was checked")

    monkeypatch.setattr(data_lib, "load_split", unread)
    with pytest.raises(InputError, match="a batch of 2 cannot be split over 3 replicas"):
        recipe.prepare_data("sst2", "unused", batch_size=2, replicas=3)


def test_prefetched_keeps_the_elements_and_turns_the_autotuner_off():
    # tf.data's autotuner made fit wait idle at random on a shared CPU (103 ms per update
    # for 58-72 ms of CPU on one pinned core; see distribute.pipeline_options)
    import tensorflow as tf

    data = tf.data.Dataset.range(7).batch(3)
    assert data.options().autotune.enabled is not False  # (tf.data's default: on)
    ready = distribute.prefetched(data)
    assert ready.options().autotune.enabled is False
    assert [b.tolist() for b in ready.as_numpy_iterator()] == [[0, 1, 2], [3, 4, 5], [6]]
    # options set before (the auto-shard policy) are kept
    both = distribute.prefetched(distribute.distribute_dataset_options(data))
    assert both.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
    assert both.options().autotune.enabled is False


def test_every_applications_pipeline_ends_in_prefetched():
    # A pipeline that prefetched with tf.data's autotuner on trained with idle waits; each
    # application's pipelines end in distribute.prefetched instead (scanned in the sources:
    # several need data this test does not have).
    import pathlib
    import re

    root = pathlib.Path(distribute.__file__).resolve().parents[1]
    sources = sorted((root / "applications").rglob("*.py")) + sorted((root / "benchmarks").glob("*.py"))
    direct = [str(p.relative_to(root)) for p in sources
              if p.name != "distribute.py" and re.search(r"\.prefetch\(", p.read_text(encoding="utf-8"))]
    assert direct == []


@pytest.mark.parametrize("make", ["demo", "occluded", "occluded_training", "music", "textured", "sort_of_clevr"])
def test_an_applications_datasets_have_the_autotuner_off(make):
    from applications import demo, music, occluded_mnist, sort_of_clevr, textured_mnist

    rng = np.random.default_rng(0)
    images, labels = rng.random((12, 28, 28)).astype("float32"), np.arange(12) % 10
    if make == "demo":
        datasets = demo.make_datasets(rng.random((12, 8, 8, 1)).astype("float32"), labels, 4)
    elif make.startswith("occluded"):
        data = occluded_mnist.generate(images, labels, 4, seed=0, frame_size=16)
        datasets = [occluded_mnist.make_dataset(data, batch_size=2) if make == "occluded" else
                    occluded_mnist.make_training_dataset(images, labels, 4, batch_size=2, frame_size=16)]
    elif make == "music":
        datasets = [music.make_dataset([rng.random((6, 88)) > 0.9 for _ in range(3)], batch_size=2)]
    elif make == "textured":
        datasets = [textured_mnist.make_dataset(textured_mnist.generate(images, labels, 4, seed=0), 2, batch_size=2)]
    else:
        datasets = [sort_of_clevr.make_dataset(batch_size=2)]
    for dataset in datasets:
        assert dataset.options().autotune.enabled is False
        next(iter(dataset))  # (still yields)


def test_resolve_strategy_takes_the_name_of_a_strategy_and_refuses_another_string(mirrored, monkeypatch):
    # Audit (apps 1): a name (train(strategy="mirrored")) was an AttributeError deep in the
    # application ('str' object has no attribute 'scope'). The names of STRATEGIES give the
    # strategies make_strategy gives (the command line's --strategy), resolved.
    from applications.errors import InputError

    installed = []
    monkeypatch.setattr(distribute, "install_keras_fixes", lambda: installed.append(True) or True)
    assert distribute.resolve_strategy("mirrored") is distribute._CACHE["mirrored"] and installed == [True]
    assert distribute.resolve_strategy("mirrored").num_replicas_in_sync == 2
    assert distribute.resolve_strategy("default") is distribute.make_strategy("default")
    for bad in ("mirorred", "", "MIRRORED"):
        with pytest.raises(InputError, match=rf"one of \('default', 'mirrored', 'multiworker', 'tpu'\). "
                                             rf"Received: strategy='{bad}'"):
            distribute.resolve_strategy(bad)
    assert distribute.global_batch_size(8, "mirrored") == 16
