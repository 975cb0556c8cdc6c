"""How often the train, test and predict steps are traced (and, under XLA, compiled).

Audit (helper-214, 2026-12-06). A step traced again every epoch, every batch shape or
every call is a silent loss of speed (with XLA, a compilation each time). Traces are
counted in Python: the model's ``train_step``, ``test_step`` and ``predict_step`` run
in Python only while Keras traces its step function, so a counter around them counts
the traces (:class:`Traces`). XLA compiles a traced step once per distinct input shape,
even for a function traced once with unknown dimensions: for it, the shapes that reach
``fit`` and ``evaluate`` are counted (:class:`XlaShapes`).

What held (and is guarded here for the demo): every application traces its train and
test steps once in a ``train`` of three epochs (smallnorb, SST, text classification,
CLEVR, Sort-of-CLEVR, occluded and textured MNIST, music, demo; and each trial of a
search), whatever its callbacks (validation each epoch, EMA
swaps, TimeBudget, checkpoints, mid-epoch backups); ``evaluate``, ``predict`` and a
second ``fit`` after a ``fit`` trace nothing again but ``predict``'s step; inputs of
variable length (capsule routing over any number of inputs, a ladder over any number
of steps) are traced once from a dataset. ``predict`` traces its step twice when its
last batch is partial: Keras feeds ``predict`` eager batches of known shape (``fit``
and ``evaluate`` read an iterator whose shapes are unknown), so the first batch's trace
has a static batch size and the partial one makes a second, which ``reduce_retracing``
makes for any batch size: two traces at most, whatever comes after.

What failed: with XLA (``jit_compile=True``, Keras' ``"auto"`` on a GPU or TPU), the
text classifier's and SST's batches, padded to their longest text, reached the steps in
every length up to ``max_length``: a compilation at each new one, in later epochs too.
"""

import contextlib
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from applications import distribute, training
from applications.errors import InputError

pytestmark = pytest.mark.graph_mode  # traces are what is counted: the steps run traced


class Traces:
    """Counts the traces of every model's steps inside the block.

    ``events``: ``("epoch", n)`` at each epoch's beginning (any ``fit``), ``(step, model
    id, input shapes)`` at each trace of ``train_step``, ``test_step`` or
    ``predict_step`` (shapes as the trace saw them: None where unknown), and any marker
    appended by the test."""

    def __init__(self):
        self.events = []

    def mark(self, label):
        self.events.append(("mark", label))

    def traces(self, step, after=None):
        """The traced input shapes of ``step`` (after the marker ``after``, if given)."""
        start = 0 if after is None else self.events.index(("mark", after)) + 1
        return [e[2] for e in self.events[start:] if e[0] == step]

    def epochs_of(self, step):
        """For each trace of ``step``: the number of the epoch it happened in (-1: before any)."""
        epoch, out = -1, []
        for event in self.events:
            if event[0] == "epoch":
                epoch = event[1]
            elif event[0] == step:
                out.append(epoch)
        return out

    @contextlib.contextmanager
    def counting(self):
        from keras.src.backend.tensorflow import trainer as tf_trainer

        # the applications' patches of Keras first: patched inside the block, they would
        # keep this counter as Keras' own function, and lose theirs when it is put back
        distribute.install_keras_fixes()
        events = self.events
        saved = {}

        def patch(maker, step):
            original = saved[maker] = getattr(tf_trainer.TensorFlowTrainer, maker)

            def make(model, force=False):
                if step not in vars(model):  # a counter around the model's own step, once
                    bound = getattr(model, step)

                    @functools.wraps(bound)
                    def counted(data):
                        shapes = tf.nest.map_structure(lambda t: tuple(getattr(t, "shape", ())), data)
                        events.append((step, id(model), shapes))
                        return bound(data)

                    vars(model)[step] = counted
                return original(model, force)

            setattr(tf_trainer.TensorFlowTrainer, maker, make)

        patch("make_train_function", "train_step")
        patch("make_test_function", "test_step")
        patch("make_predict_function", "predict_step")
        begin = keras.callbacks.CallbackList.on_epoch_begin

        def on_epoch_begin(callbacks, epoch, logs=None):
            events.append(("epoch", epoch))
            return begin(callbacks, epoch, logs)

        keras.callbacks.CallbackList.on_epoch_begin = on_epoch_begin
        try:
            yield self
        finally:
            for maker, original in saved.items():
                setattr(tf_trainer.TensorFlowTrainer, maker, original)
            keras.callbacks.CallbackList.on_epoch_begin = begin


class XlaShapes:
    """Inside the block Keras resolves ``jit_compile="auto"`` to True (as on a GPU), and
    every ``fit`` or ``evaluate`` of a model compiled with XLA records the input shapes
    of the batches it reads (``train`` and ``test``: sets of tuples of ``x``'s shapes),
    each of which XLA would compile a step for; the steps then run without XLA (the
    compilations are what is counted, not paid for)."""

    def __init__(self):
        self.shapes = {"train": set(), "test": set()}

    def _recorded(self, dataset, key):
        seen = self.shapes[key]

        def add(*shapes):
            seen.add(tuple(tuple(int(n) for n in s.numpy()) for s in shapes))
            return 0

        def record(*element):
            x = element[0] if len(element) > 1 else element
            done = tf.py_function(add, [tf.shape(t) for t in tf.nest.flatten(x)], tf.int32)
            with tf.control_dependencies([done]):
                return tf.nest.map_structure(tf.identity, element if len(element) > 1 else element[0])

        return dataset.map(record)

    @contextlib.contextmanager
    def recording(self):
        from keras.src.backend.tensorflow import trainer as tf_trainer
        from keras.src.trainers import trainer as base_trainer

        distribute.install_keras_fixes()  # (see Traces.counting)
        compiled = set()  # the models compiled with XLA (run without it once recorded)
        fit, evaluate = tf_trainer.TensorFlowTrainer.fit, tf_trainer.TensorFlowTrainer.evaluate
        auto = base_trainer.Trainer._resolve_auto_jit_compile
        recorder = self

        def with_xla(model):
            if model.jit_compile:
                compiled.add(id(model))
                model.jit_compile = False
            return id(model) in compiled

        def recorded_fit(model, x=None, *args, validation_data=None, **kwargs):
            if with_xla(model) and isinstance(x, tf.data.Dataset):
                x = recorder._recorded(x, "train")
                if isinstance(validation_data, tf.data.Dataset):
                    validation_data = recorder._recorded(validation_data, "test")
            return fit(model, x, *args, validation_data=validation_data, **kwargs)

        def recorded_evaluate(model, x=None, *args, **kwargs):
            # (fit's validation reads the dataset recorded above, cached)
            if with_xla(model) and isinstance(x, tf.data.Dataset) and not kwargs.get("_use_cached_eval_dataset"):
                x = recorder._recorded(x, "test")
            return evaluate(model, x, *args, **kwargs)

        tf_trainer.TensorFlowTrainer.fit = recorded_fit
        tf_trainer.TensorFlowTrainer.evaluate = recorded_evaluate
        base_trainer.Trainer._resolve_auto_jit_compile = lambda model: True
        try:
            yield self
        finally:
            tf_trainer.TensorFlowTrainer.fit, tf_trainer.TensorFlowTrainer.evaluate = fit, evaluate
            base_trainer.Trainer._resolve_auto_jit_compile = auto


# ------------------------------------------------------------------ the applications' train


def test_demo_train_traces_each_step_once_in_three_epochs_with_backups_and_a_budget(tmp_path):
    from applications import demo, fault_tolerance
    from keras_capsules.callbacks import TimeBudget

    run_dir = str(tmp_path / "run")
    tiny = {"filters": 8, "primary_capsules": 2, "hidden_capsules": 4, "pose_size": 2, "n_iters": 2}
    with Traces().counting() as traces:
        demo.train(run_dir, epochs=3, batch_size=16, limit=60, verbose=0, model_options=tiny,
                   callbacks=[TimeBudget(3600), *fault_tolerance.resumable_callbacks(run_dir, save_freq=2)])
    # one trace of each, in the first epoch (its validation), none in the two others or
    # in the final evaluation
    assert traces.epochs_of("train_step") == [0] and traces.epochs_of("test_step") == [0], traces.events
    assert [e[1] for e in traces.events if e[0] == "epoch"] == [0, 1, 2]


# ------------------------------------------------- fit, evaluate, predict and fit again


def _dense_model(ema=False):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(5, activation="relu")(inputs)))
    model.compile(keras.optimizers.Adam(1e-2, use_ema=ema, ema_momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def test_evaluate_predict_and_a_second_fit_after_fit_trace_only_predict(tmp_path):
    from applications import fault_tolerance
    from keras_capsules.callbacks import TimeBudget, swap_ema_weights

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(70, 4)).astype("float32"), rng.integers(0, 3, 70)  # 16-batches: a partial last
    model = _dense_model(ema=True)
    callbacks = [swap_ema_weights(), TimeBudget(3600),
                 fault_tolerance.AtomicModelCheckpoint(str(tmp_path / "model.keras"))]
    with Traces().counting() as traces:
        model.fit(x, y, batch_size=16, epochs=3, validation_data=(x[:20], y[:20]), verbose=0, callbacks=callbacks)
        traces.mark("evaluate")
        model.evaluate(x, y, batch_size=16, verbose=0)
        traces.mark("predict")
        model.predict(x, batch_size=16, verbose=0)
        traces.mark("predict again")
        model.predict(x[:5], verbose=0)
        model.predict(x[:33], batch_size=8, verbose=0)
        traces.mark("fit again")
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)
        model.evaluate(x, y, batch_size=16, verbose=0)
        model.predict(x, batch_size=16, verbose=0)
    # Keras' own fit traces a step that creates variables twice; applications'
    # distribute.install_keras_fixes builds them first (once): here a bare model, at most 2
    assert 1 <= len(traces.traces("train_step")) <= 2
    assert set(traces.epochs_of("train_step")) == {0} and traces.epochs_of("test_step") == [0], traces.events
    assert traces.traces("train_step", after="evaluate") == []
    assert traces.traces("test_step", after="evaluate") == []
    # predict: the first batch's static shape, then once for any batch size; never again
    assert traces.traces("predict_step", after="predict") == [(16, 4), (None, 4)]
    assert traces.traces("predict_step", after="predict again") == []


# ---------------------------------------------------------- inputs of variable length


def _padded_batches(sizes, make, spec):
    """A dataset of one batch per size (``make(size)`` gives it), of element spec ``spec``."""
    data = tf.data.Dataset.from_generator(lambda: (make(n) for n in sizes), output_signature=spec)
    return data.apply(tf.data.experimental.assert_cardinality(len(sizes)))


def test_em_routing_over_any_number_of_inputs_is_traced_once():
    from keras_capsules.layers import EMRouting

    a_in, mu_in = keras.Input((None,)), keras.Input((None, 2, 2))
    scores, _, _ = EMRouting(n_out=3, d_out=2, n_iters=2)([a_in, mu_in])
    model = keras.Model([a_in, mu_in], scores)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)

    def batch(n_inp):
        return ((rng.normal(size=(4, n_inp)).astype("float32"), rng.normal(size=(4, n_inp, 2, 2)).astype("float32")),
                rng.integers(0, 3, 4))

    spec = ((tf.TensorSpec((None, None), tf.float32), tf.TensorSpec((None, None, 2, 2), tf.float32)),
            tf.TensorSpec((None,), tf.int64))
    data = _padded_batches([3, 5, 2, 7, 4], batch, spec)
    with Traces().counting() as traces:
        model.fit(data, epochs=3, verbose=0)
        model.evaluate(data, verbose=0)
        traces.mark("predict")
        for n_inp in (3, 6, 9, 2):  # arrays of four sizes: reduce_retracing relaxes the second
            model.predict(batch(n_inp)[0], verbose=0)
    assert len(traces.traces("train_step")) <= 2 and set(traces.epochs_of("train_step")) == {0}
    assert len(traces.traces("test_step")) == 1
    assert len(traces.traces("predict_step", after="predict")) <= 2


def test_a_ladder_over_any_number_of_steps_is_traced_once():
    from keras_capsules.layers import RLadder, level_spec

    inputs = keras.Input((None, 5))
    outputs = RLadder([level_spec("gated", 4), level_spec("lstm", 3)], output_units=5)(inputs)
    model = keras.Model(inputs, outputs[0])
    model.compile("adam", "mse")
    rng = np.random.default_rng(2)

    def batch(steps):
        x = rng.normal(size=(3, steps, 5)).astype("float32")
        return x, x

    spec = (tf.TensorSpec((None, None, 5), tf.float32), tf.TensorSpec((None, None, 5), tf.float32))
    data = _padded_batches([4, 2, 6], batch, spec)
    with Traces().counting() as traces:
        model.fit(data, epochs=2, verbose=0)
        traces.mark("predict")
        for steps in (2, 5, 3):
            model.predict(batch(steps)[0], verbose=0)
    assert len(traces.traces("train_step")) <= 2 and set(traces.epochs_of("train_step")) == {0}
    assert len(traces.traces("predict_step", after="predict")) <= 2


# ----------------------------------------------------------- XLA: one shape per length


def test_pad_to_lengths_rounds_each_batch_up_to_the_next_length():
    ids = tf.data.Dataset.from_tensor_slices(np.arange(1, 8)).map(lambda n: (tf.range(1, n + 1), n))
    batches = ids.padded_batch(2)  # lengths 2, 4, 6, 7
    padded = list(training.pad_to_lengths(batches, [5, 3]).as_numpy_iterator())
    assert [x.shape for x, _ in padded] == [(2, 3), (2, 5), (2, 6), (1, 7)]  # longer than all: kept
    np.testing.assert_array_equal(padded[0][0], [[1, 0, 0], [1, 2, 0]])
    np.testing.assert_array_equal(padded[1][1], [3, 4])  # the targets as they were
    # any structure of inputs, a bare x, another axis and padding value
    x = tf.data.Dataset.from_tensors({"a": tf.ones((2, 1, 2)), "b": tf.ones((2, 3, 1))})
    (out,) = list(training.pad_to_lengths(x, [4], axis=2, value=-1.0).as_numpy_iterator())
    assert out["a"].shape == (2, 1, 4) and out["b"].shape == (2, 3, 4)
    np.testing.assert_array_equal(out["a"][0, 0], [1, 1, -1, -1])
    for bad in ([], [0], 5, "16", [2.5]):
        with pytest.raises(InputError, match="lengths"):
            training.pad_to_lengths(batches, bad)
    with pytest.raises(InputError, match="axis"):
        training.pad_to_lengths(batches, [4], axis=0)


def test_padding_to_lengths_leaves_the_models_outputs_unchanged():
    from applications import sst
    from applications.text_classification import data as text_data
    from applications.text_classification import model as text_model

    rng = np.random.default_rng(3)
    ids = rng.integers(2, 30, size=(3, 6)).astype("int32")
    ids[0, 4:], ids[1, 2:] = text_data.PAD_ID, text_data.PAD_ID
    classifier = text_model.build_model(30, 2, embedding_dim=8, gru_units=8, capsule_dim=4, class_capsule_dim=4,
                                        n_iters=2)
    (padded, _), = training.pad_to_lengths(tf.data.Dataset.from_tensors((ids, 0)), [16],
                                           value=text_data.PAD_ID).as_numpy_iterator()
    assert padded.shape == (3, 16)
    np.testing.assert_allclose(classifier(padded), classifier(ids), rtol=1e-5, atol=1e-6)
    model = sst.build_model(3, 16, 2)
    inputs = {"embeddings": rng.normal(size=(2, 5, 3, 16)).astype("float32"),
              "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "float32")}
    (padded,) = training.pad_to_lengths(tf.data.Dataset.from_tensors(inputs), [8]).as_numpy_iterator()
    assert padded["mask"].shape == (2, 8) and padded["embeddings"].shape == (2, 8, 3, 16)
    np.testing.assert_allclose(model(padded), model(inputs), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def short_sst(tmp_path_factory):
    from tests.applications.short_data import write_sst_prefix

    return str(write_sst_prefix(tmp_path_factory.mktemp("sst"), lines=200))


def test_text_classifier_under_xla_sees_one_shape_per_bucket_length(tmp_path, short_sst):
    # Before: 18 shapes in 3 epochs (its first epoch's 12 batches gave 12, and each epoch
    # after it new ones, each a compilation: epochs of 82, 30 and 7 s against 0.2 s)
    from applications.text_classification import recipe

    with XlaShapes().recording() as xla:
        recipe.train(dataset="sst2", data_dir=short_sst, run_dir=str(tmp_path / "run"), epochs=3, batch_size=8,
                     limit=96, max_length=40, seed=3, verbose=0, embedding_dim=8, gru_units=8, capsule_dim=4,
                     class_capsule_dim=4, n_iters=2)
    lengths = {8, 16, 24, 32, 40}  # the buckets' boundaries below max_length, and max_length
    assert {length for ((_, length),) in xla.shapes["train"]} <= lengths, sorted(xla.shapes["train"])
    assert {length for ((_, length),) in xla.shapes["test"]} <= lengths, sorted(xla.shapes["test"])


def test_sst_under_xla_sees_one_shape_per_sixteen_tokens(tmp_path):
    # Before: 9 shapes of training batches of 48 sentences of up to 32 tokens (a 4-epoch
    # run 59 s, 32 s after)
    from applications import sst
    from tests.applications.test_sst_trees import SST
    from tests.applications.tiny_data import tiny_bert_preset

    preset = tiny_bert_preset(tmp_path / "preset")
    with XlaShapes().recording() as xla:
        result = sst.train(SST, granularity="2", run_dir=tmp_path / "run", preset=preset, train_on="sentences",
                           epochs=2, batch_size=4, max_train=48, max_eval=12, max_length=32, verbose=0)
    assert np.isfinite(result["dev_accuracy"])
    for key in ("train", "test"):
        assert {shape[0][1] for shape in xla.shapes[key]} <= {16, 32}, sorted(xla.shapes[key])
        assert {shape[1][1] for shape in xla.shapes[key]} <= {16, 32}  # the mask
