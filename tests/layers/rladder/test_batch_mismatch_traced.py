"""The combinators and encoder cells refuse inputs of different batch sizes when the
sizes are only known as the layer runs (a ``tf.function`` traced for any batch).

Audit: eagerly such inputs were a ``ValueError``, but traced with an unknown batch an
input of one sample was broadcast silently against one of eight (G1 given one sample's
x_top, a cell given one sample's feedback or state), or failed in a concatenation with
a backend error naming neither input.
"""

import keras
import numpy as np
import pytest

from keras_capsules.layers import (
    G1,
    ConvEncoderCell,
    ConvG1,
    ConvG2,
    ConvG3,
    ConvLSTMEncoderCell,
    GatedConvEncoderCell,
    GatedEncoderCell,
    LSTMEncoderCell,
)
from tests.backends import tensorflow_only

BATCH = 8
COMBINATOR = ("x_top", "x_lat")

#: id -> (layer factory, per-input shapes with the batch first, input names, unknown
#: axes of the traced signature)
CASES = {
    "G1": (G1, [(BATCH, 6), (BATCH, 5)], COMBINATOR, (0,)),
    "G1_sequence": (G1, [(BATCH, 3, 6), (BATCH, 3, 5)], COMBINATOR, (0, 1)),
    "ConvG1": (lambda: ConvG1(upsample=2), [(BATCH, 2, 2, 3), (BATCH, 4, 4, 2)], COMBINATOR, (0,)),
    "ConvG1_vector_top": (lambda: ConvG1(vector_top="dense"), [(BATCH, 3), (BATCH, 4, 4, 2)], COMBINATOR, (0,)),
    "ConvG2": (lambda: ConvG2(filters=4), [(BATCH, 4, 4, 3), (BATCH, 4, 4, 2)], COMBINATOR, (0,)),
    "ConvG3": (
        lambda: ConvG3(upsample=2, upsample_mode="transpose"),
        [(BATCH, 2, 2, 3), (BATCH, 4, 4, 2)], COMBINATOR, (0,),
    ),
    "GatedEncoderCell": (lambda: GatedEncoderCell(5), [(BATCH, 3), (BATCH, 5), (BATCH, 5)], ("x", "feedback", "h"), (0,)),
    "GatedEncoderCell_no_feedback": (
        lambda: GatedEncoderCell(5, use_feedback=False), [(BATCH, 3), (BATCH, 5)], ("x", "h"), (0,),
    ),
    "LSTMEncoderCell": (
        lambda: LSTMEncoderCell(5), [(BATCH, 3), (BATCH, 5), (BATCH, 5), (BATCH, 5)], ("x", "feedback", "h", "c"), (0,),
    ),
    "ConvEncoderCell": (lambda: ConvEncoderCell(2), [(BATCH, 4, 4, 3), (BATCH, 4, 4, 2)], ("x", "feedback"), (0,)),
    "GatedConvEncoderCell": (
        lambda: GatedConvEncoderCell(2, normalization="instance"),
        [(BATCH, 4, 4, 3), (BATCH, 4, 4, 2)], ("x", "feedback"), (0,),
    ),
    "ConvLSTMEncoderCell": (
        lambda: ConvLSTMEncoderCell(2),
        [(BATCH, 4, 4, 3)] + [(BATCH, 4, 4, 2)] * 3, ("x", "feedback", "h", "c"), (0,),
    ),
}
CELLS = [name for name, case in CASES.items() if case[2][0] == "x"]


def _built(name):
    """The layer of case ``name``, built eagerly, its inputs and its signature (the
    batch, and the case's other unknown axes, None)."""
    import tensorflow as tf

    make, shapes, names, unknown = CASES[name]
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=shape).astype("float32") for shape in shapes]
    layer = make()
    layer(inputs)
    spec = [
        tf.TensorSpec([None if axis in unknown else size for axis, size in enumerate(shape)], tf.float32)
        for shape in shapes
    ]
    return layer, inputs, names, spec


def _traced(layer, names, spec, method, jit_compile=False):
    """``layer`` called on its inputs (``method="call"``) or through ``step`` (output
    only), as a ``tf.function`` of the signature ``spec``."""
    import tensorflow as tf

    if method == "call":
        fn = lambda *inputs: layer(list(inputs))  # noqa: E731
    else:
        feedback = "feedback" in names

        def fn(*inputs):
            return layer.step(inputs[0], inputs[1] if feedback else None, list(inputs[1 + int(feedback):]))[0]

    return tf.function(fn, input_signature=spec, jit_compile=jit_compile)


def _one_sample(inputs, i, axis=0):
    """``inputs`` with the ``i``-th one cut to size 1 along ``axis``."""
    return [np.take(x, [0], axis=axis) if j == i else x for j, x in enumerate(inputs)]


def _check(name, method, jit_compile):
    import tensorflow as tf

    layer, inputs, names, spec = _built(name)
    traced = _traced(layer, names, spec, method, jit_compile)
    want = layer(inputs) if method == "call" else layer.step(
        inputs[0], inputs[1] if "feedback" in names else None, inputs[1 + int("feedback" in names):]
    )[0]
    for got, expected in zip(keras.tree.flatten(traced(*inputs)), keras.tree.flatten(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)
    what = "batch size" if len(CASES[name][3]) == 1 else "leading axes"
    for axis in CASES[name][3]:
        for i, bad in enumerate(names):
            # the first input is the one checked against: naming it and the first other one
            other = names[1] if i == 0 else bad
            message = (
                f"{type(layer).__name__} expects its inputs to have the same {what}. Received: "
                + r".*\(" + f"{what} of {other}, then of {names[0]}"
            )
            if jit_compile:  # XLA drops assertions: the stack's error, in a scope named after the check
                message = f"{what.replace(' ', '_')}_of_{other}_and_{names[0]}/stack"
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                traced(*_one_sample(inputs, i, axis))
    return traced


@pytest.mark.parametrize(
    "name,method", [(name, "call") for name in CASES] + [(name, "step") for name in CELLS]
)
def test_traced_inputs_of_other_batch_sizes_are_refused_at_run_time(name, method):
    tensorflow_only("a tf.function input_signature with an unknown batch (JAX and torch trace static shapes)")
    _check(name, method, jit_compile=False)


@pytest.mark.parametrize("name", ["G1", "ConvG1_vector_top", "ConvG3", "LSTMEncoderCell", "ConvLSTMEncoderCell"])
def test_traced_inputs_of_other_batch_sizes_are_refused_under_xla_too(name):
    tensorflow_only("a tf.function input_signature with an unknown batch (JAX and torch trace static shapes)")
    traced = _check(name, "call", jit_compile=True)
    # XLA would drop an assertion, logging "Ignoring Assert operator" at every compilation
    ops = traced.get_concrete_function().graph.get_operations()
    assert not [op.name for op in ops if op.type == "Assert"]


@pytest.mark.parametrize("name", ["G1", "ConvG2", "GatedEncoderCell", "ConvLSTMEncoderCell"])
def test_the_run_time_check_is_added_only_where_a_batch_is_unknown(name):
    tensorflow_only("tf.function graphs")
    import tensorflow as tf

    layer, inputs, names, spec = _built(name)
    unknown = _traced(layer, names, spec, "call").get_concrete_function().graph.get_operations()
    assert [op for op in unknown if op.type == "Assert"]
    known_spec = [tf.TensorSpec(x.shape, tf.float32) for x in inputs]
    known = _traced(layer, names, known_spec, "call").get_concrete_function().graph.get_operations()
    assert not [op.name for op in known if op.type == "Assert" or "batch_size_of" in op.name]


def test_one_known_batch_against_an_unknown_one_is_checked_at_run_time():
    # a batch-1 x_top of known shape (a constant) against x_lat of unknown batch
    tensorflow_only("a tf.function input_signature with an unknown batch")
    import tensorflow as tf

    layer, (x_top, x_lat), _, _ = _built("G1")
    traced = tf.function(
        lambda top, lat: layer([top, lat]),
        input_signature=[tf.TensorSpec((1, 6), tf.float32), tf.TensorSpec((None, 5), tf.float32)],
    )
    np.testing.assert_allclose(np.asarray(traced(x_top[:1], x_lat[:1])), np.asarray(layer([x_top[:1], x_lat[:1]])),
                               rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"G1 expects .*x_top shape=\(1, 6\), x_lat shape=\(None, 5\)"):
        traced(x_top[:1], x_lat)


def test_a_step_mask_of_known_batch_1_is_refused_for_inputs_of_unknown_batch():
    # exactly_shaped_like took the mask back as stack[1], which TensorFlow's graph
    # optimizer rewrote as the mask itself where its shape was known: a [1, T] mask
    # was broadcast silently over a batch of 4 (RLadder's and RTagger's step masks;
    # under XLA, which has no such rewrite, the stack failed as it should)
    tensorflow_only("a tf.function input_signature with an unknown batch")
    import tensorflow as tf

    from keras_capsules.layers.rladder._utils import exact_step_mask

    traced = tf.function(
        lambda m, x: keras.ops.cast(exact_step_mask(m, x), "float32")[:, :, None] * x,
        input_signature=[tf.TensorSpec((1, 3), tf.bool), tf.TensorSpec((None, 3, 2), tf.float32)],
    )
    mask = np.array([[True, True, False]])
    np.testing.assert_array_equal(np.asarray(traced(mask, np.ones((1, 3, 2), "float32")))[0, :, 0], [1, 1, 0])
    with pytest.raises(tf.errors.InvalidArgumentError):
        traced(mask, np.ones((4, 3, 2), "float32"))


def test_the_ladders_own_loops_add_no_run_time_checks_but_their_step_does():
    # RLadder and RTagger make every input of their cells and combinators from the one
    # batch of their input: the checks could not fail there, and cost ~10% of a small
    # convolutional ladder's training step (batches_made_alike). A carry given to
    # RLadder.step by its caller is checked.
    tensorflow_only("tf.function graphs with an unknown batch")
    import tensorflow as tf

    from keras_capsules.layers import RLadder, RTagger, level_spec

    levels = [level_spec("gatedconv", 2), level_spec("gatedconv", 3, pool=2), level_spec("gated", 4)]
    frames = np.random.default_rng(0).normal(size=(2, 3, 4, 4, 1)).astype("float32")
    for layer in (RLadder(levels), RTagger(2, levels, n_iters=2)):
        x = frames if isinstance(layer, RLadder) else frames[:, 0]
        layer(x)
        spec = tf.TensorSpec((None,) + x.shape[1:], tf.float32)
        graph = tf.function(lambda v: layer(v)).get_concrete_function(spec).graph  # noqa: B023
        assert not [op.name for op in graph.get_operations() if op.type == "Assert" or "batch_size_of" in op.name]
    ladder = RLadder(levels)
    ladder(frames)
    states, feedback = ladder.initial_carry(2, "float32")
    one = [f[:1] for f in feedback]
    step = tf.function(lambda x, fb: ladder.step(x, (states, fb))[1],
                       input_signature=[tf.TensorSpec((None, 4, 4, 1), tf.float32),
                                        [tf.TensorSpec((None,) + tuple(f.shape[1:]), tf.float32) for f in one]])
    np.testing.assert_allclose(np.asarray(step(frames[:, 0], list(feedback))), np.asarray(ladder.step(frames[:, 0], (states, feedback))[1]), rtol=1e-5, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="expects its inputs to have the same batch size"):
        step(frames[:, 0], one)
