"""A plain training loop with the library's layers keeps nothing of earlier models.

In graph mode ``tf.custom_gradient`` registers each traced gradient in TensorFlow's
process-wide gradient registry for good (tensorflow/tensorflow#97697), and the entry holds
the forward graph, its closures, the layers and the model. The library's own custom
gradients (``ops.recomputed_where``, EM routing's recomputed branch; RLadder's row writes in
its symbolic loop) tie their entry to their graph as they are traced, so a user's loop
``for config in configs: model = build(config); model.fit(...)`` lets each earlier model
go without calling anything (``applications.fault_tolerance.release_traced_graphs`` is for
TensorFlow's own entries, and is not called here).
"""

import gc
import weakref

import keras
import numpy as np
import pytest

from keras_capsules import ops as capsule_ops
from keras_capsules.layers import EMRouting, RLadder, level_spec
from keras_capsules.layers.rladder import _utils as rladder_utils
from tests.backends import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's gradient registry")


def _registry():
    from tensorflow.python.framework import ops as tf_ops

    return tf_ops._gradient_registry._registry


def _custom_names():
    return {name for name in _registry() if name.startswith("CustomGradient-")}


def _alive(references):
    gc.collect()
    return [ref for ref in references if ref() is not None]


def _em_model(seed):
    a = keras.Input((4,))
    mu = keras.Input((4, 2, 3))
    routing = EMRouting(n_out=3, d_out=2, n_iters=2, algorithm="moments", name=f"routing_{seed}")
    a_out, mu_out, _ = routing([a, mu])
    outputs = keras.layers.Concatenate()([a_out, keras.layers.Flatten()(mu_out)])
    model = keras.Model([a, mu], outputs)
    return model, routing


def _rladder_model():
    inputs = keras.Input((None, 3))  # T = None: the symbolic loop
    ladder = RLadder([level_spec("gated", 3)], output_units=3)
    predictions, _ = ladder(inputs)
    return keras.Model(inputs, predictions), ladder


def _data(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype("float32") for shape in shapes]


def _sequences(x):
    """``(x, x)`` as a dataset whose traced steps see T = None (RLadder's symbolic loop)."""
    import tensorflow as tf

    spec = tf.TensorSpec((x.shape[0], None, x.shape[2]), x.dtype)
    return tf.data.Dataset.from_generator(lambda: iter([(x, x)]), output_signature=(spec, spec)).repeat()


def _fit(model, inputs, targets=None, jit_compile=False):
    model.compile(keras.optimizers.SGD(1e-3), "mse", jit_compile=jit_compile)
    if targets is None:  # (a dataset)
        history = model.fit(inputs, epochs=1, steps_per_epoch=1, verbose=0)
    else:
        history = model.fit(inputs, targets, batch_size=len(targets), epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_a_plain_loop_of_fits_keeps_no_earlier_model(monkeypatch):
    writes = []

    def counted(*args):
        writes.append(1)
        return write_row(*args)

    write_row = rladder_utils.write_row
    monkeypatch.setattr(rladder_utils, "write_row", counted)
    layers, models = [], []
    before = _custom_names()
    for i in range(3):
        model, routing = _em_model(i)
        a, mu = _data(i, (4, 4), (4, 4, 2, 3))
        _fit(model, [a, mu], _data(i + 10, (4, 3 + 3 * 4))[0])
        layers.append(weakref.ref(routing))
        models.append(weakref.ref(model))
        del model, routing
    earlier = _custom_names() - before
    assert earlier, "the traced steps registered no custom gradient"
    model, ladder = _rladder_model()
    x = _data(5, (2, 4, 3))[0]
    _fit(model, _sequences(x))
    layers.append(weakref.ref(ladder))
    models.append(weakref.ref(model))
    assert writes, "the symbolic loop wrote no row"
    del model, ladder
    alive = _alive(layers + models)
    assert alive == [], f"{len(alive)} layers or models of earlier fits are alive"
    # and the earlier fits' registry entries went with their graphs (the last fit's
    # all-reduce, TensorFlow's own, holds its step until the next trace of these layers)
    assert not (_custom_names() & earlier), "dead graphs' gradients stayed registered"


def test_released_gradients_stay_exact_under_a_tape_around_a_traced_call_and_xla():
    import tensorflow as tf

    from keras_capsules._graph_release import _GraphGradient

    x0 = tf.constant([0.5, -1.5, 2.0], "float64")

    def fn(x):
        return (tf.sin(x) * x,)

    def expected(x, taken):
        return (tf.cos(x) * x + tf.sin(x)) if taken else tf.zeros_like(x)

    @tf.function
    def forward(x, pred):
        return capsule_ops.recomputed_where(pred, fn, (x,), (x,))[0]

    @tf.function(jit_compile=True)
    def step(x, pred):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = capsule_ops.recomputed_where(pred, fn, (x,), (x,))[0]
        return tape.gradient(y, x)

    for taken in (True, False):
        pred = tf.constant(taken)
        before = _custom_names()
        forward(x0, pred)  # traced (and released) before the tape asks for the gradient
        new = _custom_names() - before
        assert len(new) == (1 if taken else 0)  # (traced once)
        assert all(isinstance(_registry()[name]["type"], _GraphGradient) for name in new)
        gc.collect()
        with tf.GradientTape() as tape:
            tape.watch(x0)
            y = forward(x0, pred)
        np.testing.assert_allclose(tape.gradient(y, x0).numpy(), expected(x0, taken).numpy(), rtol=1e-12)
        np.testing.assert_allclose(step(x0, pred).numpy(), expected(x0, taken).numpy(), rtol=1e-12)


def test_xla_training_of_em_routing_and_a_symbolic_loop_after_the_release():
    model, _ = _em_model(0)
    a, mu = _data(0, (4, 4), (4, 4, 2, 3))
    _fit(model, [a, mu], _data(10, (4, 3 + 3 * 4))[0], jit_compile=True)
    model, _ = _rladder_model()
    x = _data(5, (2, 4, 3))[0]
    _fit(model, _sequences(x), jit_compile=True)


def test_a_tape_around_a_traced_symbolic_loop_gives_the_eager_gradients():
    import tensorflow as tf

    ladder = RLadder([level_spec("gated", 3)], output_units=3)
    x = tf.constant(_data(7, (2, 4, 3))[0])
    ladder(x)

    @tf.function(input_signature=[tf.TensorSpec((2, None, 3), "float32")])  # T = None: the symbolic loop
    def forward(x):
        return ladder(x)[0]

    forward(x)  # traced (its row writes' entries released) before the tape asks for the gradient
    gc.collect()
    gradients = []
    for call in (forward, lambda x: ladder(x)[0]):  # traced, then eager
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(call(x)))
        gradients.append(tape.gradient(loss, ladder.trainable_weights))
    for traced, eager in zip(*gradients):
        assert traced is not None and eager is not None
        np.testing.assert_allclose(traced.numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)
