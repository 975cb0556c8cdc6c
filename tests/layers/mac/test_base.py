"""The MAC layers' shared attention (``_base.attend``): an exact masked softmax."""

import keras
import numpy as np
import pytest

from keras_capsules.layers.mac import _base
from tests.backends import grads, tensor, tensorflow_only
from tests.layers.mac import reference as ref

MASK = np.array([[True, True, False, True], [False, False, False, False], [True, False, False, False]])
VALUES = np.arange(3 * 4 * 2, dtype="float32").reshape(3, 4, 2) + 1.0


@pytest.mark.parametrize("scale", [1.0, 1e9, 3e9, 1e30])
def test_masked_softmax_is_exact_for_logits_below_the_old_fill(scale):
    # review: masked logits were filled with -1e9, so when every real logit of a row lay
    # below -1e9 (here -1 * scale, -2 * scale, ...) the masked positions took all the
    # weight, which was then zeroed: a real row got weights 0 and a zero sum.
    logits = -scale * np.array([[2.0, 1.0, 0.0, 3.0], [1.0, 2.0, 3.0, 4.0], [5.0, 0.0, 9.0, 9.0]], "float32")
    summed, weights = _base.attend(tensor(logits), tensor(VALUES), tensor(MASK))
    want_w = ref.softmax(logits, MASK)
    want_s = np.einsum("bn,bnd->bd", want_w, np.where(MASK[..., None], VALUES, 0.0))
    np.testing.assert_allclose(np.asarray(weights), want_w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(summed), want_s, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(weights).sum(-1), [1.0, 0.0, 1.0], atol=1e-6)


def test_a_fully_masked_row_gives_zeros_and_finite_gradients():
    # masked logits hold anything, also NaN and +-inf; row 1 is fully masked
    logits = tensor(np.array([[-3e9, 5.0, np.inf, 1.0], [np.nan, np.inf, -np.inf, 2.0], [0.0, np.nan, np.inf, 3.0]], "float32"))
    values = tensor(np.where(MASK[..., None], VALUES, np.nan).astype("float32"))
    summed, weights = _base.attend(logits, values, tensor(MASK))
    np.testing.assert_array_equal(np.asarray(summed)[1], 0.0)
    np.testing.assert_array_equal(np.asarray(weights)[1], 0.0)
    assert np.all(np.isfinite(np.asarray(summed))) and np.all(np.isfinite(np.asarray(weights)))

    def loss(logits, values):
        summed, weights = _base.attend(logits, values, tensor(MASK))
        return keras.ops.sum(summed) + keras.ops.sum(weights * keras.ops.arange(4, dtype="float32"))

    g_logits, g_values = grads(loss, [logits, values])
    for g in (g_logits, g_values):
        g = np.asarray(g)
        assert np.all(np.isfinite(g))
        assert np.all(g[~MASK] == 0)  # masked positions (and the fully masked row): zero


def test_no_mask_and_no_positions():
    logits = np.array([[0.5, -1.0, 2.0]], "float32")
    values = np.ones((1, 3, 2), "float32")
    summed, weights = _base.attend(tensor(logits), tensor(values), None)
    np.testing.assert_allclose(np.asarray(weights), ref.softmax(logits), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(summed), [[1.0, 1.0]], rtol=1e-6)
    summed, weights = _base.attend(tensor(np.zeros((2, 0), "float32")), tensor(np.zeros((2, 0, 3), "float32")), tensor(np.zeros((2, 0), bool)))
    assert tuple(weights.shape) == (2, 0) and np.all(np.asarray(summed) == 0.0)


def _normal(*shape, scale=1.0):
    return (np.random.default_rng(0).standard_normal(shape) * scale).astype("float32")


def _rebuilt_cases():
    from keras_capsules.layers import ControlUnit, MACNetwork, ReadUnit, WriteUnit

    f = _normal
    return {  # layer, the inputs it is built on, inputs whose named input's last axis changes
        "ControlUnit question": (lambda: ControlUnit(2), [f(2, 4), f(2, 8), f(2, 3, 8)],
                                 [f(2, 5), f(2, 8), f(2, 3, 8)], "question"),
        "ControlUnit words": (lambda: ControlUnit(2), [f(2, 4), f(2, 8), f(2, 3, 8)],
                              [f(2, 4), f(2, 6), f(2, 3, 6)], "context_words"),
        "ReadUnit": (lambda: ReadUnit(), [f(2, 8), f(2, 5, 6), f(2, 8)], [f(2, 8), f(2, 5, 7), f(2, 8)],
                     "knowledge_base"),
        "WriteUnit": (lambda: WriteUnit(), [f(2, 6), f(2, 8), f(2, 8)], [f(2, 5), f(2, 8), f(2, 8)],
                      "retrieved"),
        "MACNetwork": (lambda: MACNetwork(2), [f(2, 3, 8), f(2, 4), f(2, 5, 6)],
                       [f(2, 3, 8), f(2, 5), f(2, 5, 6)], "question"),
    }


@pytest.mark.parametrize("case", ["ControlUnit question", "ControlUnit words", "ReadUnit", "WriteUnit", "MACNetwork"])
def test_inputs_unlike_those_built_for_are_a_clear_error(case):
    # audit (2026-11-27): a built MAC layer called with other feature sizes failed in a
    # matmul with the backend's InvalidArgumentError
    make, built, called, what = _rebuilt_cases()[case]
    layer = make()
    layer(built)
    with pytest.raises(ValueError, match=rf"was built for {what} with a last axis of \d+\. Received: {what} shape="):
        layer(called)
    layer(built)  # still fine


def test_attention_logits_stay_finite_under_mixed_float16_for_large_inputs():
    # audit (2026-11-27): the products feeding the control and read attention logits ran
    # in float16 and overflowed to inf (then NaN) for inputs of a few hundred, where
    # float32 stays finite; DESIGN.md: attention math runs in float32
    from keras_capsules.layers import ControlUnit, ReadUnit

    q, c, w = _normal(2, 16, scale=100.0), _normal(2, 16, scale=100.0), _normal(2, 5, 16, scale=100.0)
    init = keras.initializers.GlorotUniform(seed=1)
    for policy in ("float32", "mixed_float16"):
        control, attention = ControlUnit(max_steps=2, dtype=policy, kernel_initializer=init)([q, c, w], step=0)
        read, read_attention = ReadUnit(dtype=policy, kernel_initializer=init)([c, w, q])
        for out in (control, attention, read, read_attention):
            assert np.all(np.isfinite(np.asarray(out, "float32"))), policy


@pytest.mark.parametrize("mask_shape", [(2, 1), (1, 6), (1, 1)])
@pytest.mark.parametrize("case", ["ControlUnit", "ReadUnit", "WriteUnit", "MACNetwork"])
def test_a_mask_of_another_shape_fails_when_sizes_are_known_only_at_run_time(case, mask_shape):
    # audit (2026-11-29): masks were checked only on the sizes known when the layer was
    # called; in a tf.function traced for any batch and length a [batch, 1] mask was
    # broadcast silently over the positions (all masked or none), as the routing layers'
    # masks once were
    tensorflow_only("a tf.function traced with unknown shapes (JAX traces concrete shapes)")
    import tensorflow as tf

    from keras_capsules.layers import ControlUnit, MACNetwork, ReadUnit, WriteUnit

    seq, flat = _normal(2, 6, 4), _normal(2, 4)
    layer, inputs, mask_argument = {
        "ControlUnit": (ControlUnit(max_steps=2), [flat, flat, seq], "words_mask"),
        "ReadUnit": (ReadUnit(), [flat, seq, flat], "kb_mask"),
        "WriteUnit": (WriteUnit(self_attention=True), [flat, flat, flat, seq, seq], "history_mask"),
        "MACNetwork": (MACNetwork(max_steps=2), [seq, flat, seq], "kb_mask"),
    }[case]
    valid = np.array([[True] * 4 + [False] * 2, [True] * 6])
    want = keras.tree.flatten(layer(inputs, **{mask_argument: valid}))

    @tf.function(
        input_signature=[[tf.TensorSpec((None,) * (x.ndim - 1) + x.shape[-1:]) for x in inputs],
                         tf.TensorSpec((None, None), "bool")]
    )
    def run(inputs, mask):
        return layer(inputs, **{mask_argument: mask})

    for got, expected in zip(keras.tree.flatten(run(inputs, valid)), want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):
        run(inputs, np.ones(mask_shape, bool))


def _reused_symbolically_cases():
    from keras_capsules.layers import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit

    words, kb = (None, 8), (None, 6)  # any number of words and cells
    return {  # layer, the shapes (without the batch) it is built on, a reuse, the input it changes
        "ControlUnit question": (lambda: ControlUnit(2), [(4,), (8,), words], [(5,), (8,), words], "question"),
        "ControlUnit words": (lambda: ControlUnit(2), [(4,), (8,), words], [(4,), (6,), (None, 6)], "context_words"),
        "ReadUnit": (ReadUnit, [(8,), kb, (8,)], [(8,), (None, 7), (8,)], "knowledge_base"),
        "WriteUnit": (WriteUnit, [(6,), (8,), (8,)], [(5,), (8,), (8,)], "retrieved"),
        "MACCell": (lambda: MACCell(2), [words, (4,), kb, (8,), (8,)], [words, (4,), (None, 7), (8,), (8,)],
                    "knowledge_base"),
        "MACNetwork question": (lambda: MACNetwork(2), [words, (4,), kb], [words, (5,), kb], "question"),
        "MACNetwork kb": (lambda: MACNetwork(2), [words, (4,), kb], [words, (4,), (None, 7)], "knowledge_base"),
    }


@pytest.mark.parametrize("case", sorted(_reused_symbolically_cases()))
def test_a_reuse_on_inputs_unlike_those_built_for_is_refused_when_the_model_is_built(case):
    # Audit s65: a built MAC layer reused in a functional model on other feature sizes
    # was accepted, with outputs of a shape it never produces; predict then failed
    make, built, reused, what = _reused_symbolically_cases()[case]
    layer = make()
    layer([keras.Input(s) for s in built])
    with pytest.raises(ValueError, match=rf"This {case.split()[0]} layer was built for {what} with a last axis "
                                         rf"of \d+\. Received: {what} shape=\(None, "):
        layer([keras.Input(s) for s in reused])
    again = [keras.Input(s) for s in built]  # the same sizes: fine, for any number of words and cells
    model = keras.Model(again, layer(again))
    for n in (3, 5):
        out = model.predict([_normal(2, *(n if d is None else d for d in s)) for s in built], verbose=0)
        assert np.all(np.isfinite(keras.tree.flatten(out)[0]))


def _masked_cases():
    from keras_capsules.layers import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit

    return {  # layer, its inputs' shapes (without the batch), the mask argument, its values' length
        "ControlUnit words_mask": (lambda: ControlUnit(2), [(4,), (8,), (3, 8)], "words_mask", 3),
        "ReadUnit kb_mask": (ReadUnit, [(8,), (3, 6), (8,)], "kb_mask", 3),
        "WriteUnit history_mask": (lambda: WriteUnit(self_attention=True), [(6,), (8,), (8,), (3, 8), (3, 8)],
                                   "history_mask", 3),
        "MACCell words_mask": (lambda: MACCell(2), [(3, 8), (4,), (5, 6), (8,), (8,)], "words_mask", 3),
        "MACCell kb_mask": (lambda: MACCell(2), [(3, 8), (4,), (5, 6), (8,), (8,)], "kb_mask", 5),
        "MACCell history_mask": (lambda: MACCell(2, self_attention=True),
                                 [(3, 8), (4,), (5, 6), (8,), (8,), (2, 8), (2, 8)], "history_mask", 2),
        "MACNetwork words_mask": (lambda: MACNetwork(2), [(3, 8), (4,), (5, 6)], "words_mask", 3),
        "MACNetwork kb_mask": (lambda: MACNetwork(2), [(3, 8), (4,), (5, 6)], "kb_mask", 5),
    }


@pytest.mark.parametrize("case", sorted(_masked_cases()))
def test_a_mask_of_another_shape_is_refused_when_the_model_is_built(case):
    # Audit s65: a functional model took it; predict then refused it (with this error)
    make, shapes, argument, n = _masked_cases()[case]
    layer_name = case.split()[0]
    message = rf"{layer_name}: {argument} must have shape \((None|2), {n}\) to match its values\. " \
              rf"Received: {argument} shape=\((None|2), {n + 1}\)"
    with pytest.raises(ValueError, match=message):  # eager
        make()([_normal(2, *s) for s in shapes], **{argument: np.ones((2, n + 1), bool)})
    inputs = [keras.Input(s) for s in shapes]
    with pytest.raises(ValueError, match=message):
        make()(inputs, **{argument: keras.Input((n + 1,), dtype="bool")})
    mask = keras.Input((n,), dtype="bool")  # the right shape: the model builds and runs
    model = keras.Model(inputs + [mask], make()(inputs, **{argument: mask}))
    out = model.predict([_normal(2, *s) for s in shapes] + [np.ones((2, n), bool)], verbose=0)
    assert np.all(np.isfinite(keras.tree.flatten(out)[0]))


def test_a_keras_mask_of_another_shape_is_refused_when_the_model_is_built():
    from keras_capsules.layers import ControlUnit, MACNetwork

    question, words = keras.Input((4,)), keras.Input((3, 8))
    other = keras.layers.Masking()(keras.Input((5, 8)))  # Keras propagates its mask [batch, 5]
    with pytest.raises(ValueError, match=r"words_mask must have shape \(None, 3\) to match its values"):
        ControlUnit(2)([question, keras.Input((8,)), words], mask=[None, None, other._keras_mask])
    with pytest.raises(ValueError, match=r"words_mask must have shape \(None, 3\) to match its values"):
        MACNetwork(2)([words, question, keras.Input((5, 6))], mask=[other._keras_mask, None, None])
    masked = keras.layers.Masking()(words)  # its own mask, as Keras propagates it (a list): fine
    memory = MACNetwork(2)([masked, question, keras.Input((5, 6))])
    assert tuple(memory.shape) == (None, 8)


def _orthogonal_cases():
    from keras_capsules.layers import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit

    f = _normal
    full = dict(self_attention=True, memory_gate=True, gate_per_dimension=True)
    return {  # layer (given its constructor's keyword arguments), its inputs
        "ControlUnit": (lambda **k: ControlUnit(2, **k), [f(2, 4), f(2, 8), f(2, 3, 8)]),
        "ReadUnit": (ReadUnit, [f(2, 8), f(2, 5, 6), f(2, 8)]),
        "WriteUnit": (lambda **k: WriteUnit(**full, **k), [f(2, 6), f(2, 8), f(2, 8), f(2, 2, 8), f(2, 2, 8)]),
        "MACCell": (lambda **k: MACCell(2, **k), [f(2, 3, 8), f(2, 4), f(2, 5, 6), f(2, 8), f(2, 8)]),
        "MACNetwork": (lambda **k: MACNetwork(2, **full, **k), [f(2, 3, 8), f(2, 4), f(2, 5, 6)]),
    }


@pytest.mark.parametrize("case", sorted(_orthogonal_cases()))
def test_an_orthogonal_kernel_initializer_draws_bfloat16_kernels(case):
    # fuzz (2026-12-06): with dtype="bfloat16" and kernel_initializer="orthogonal" every MAC
    # layer failed at its first call with TensorFlow's "Value for attr 'T' of bfloat16 is
    # not in the list of allowed values" (Orthogonal's QR has no bfloat16 kernel), as the
    # Recurrent Ladder layers once did; their kernels are now drawn in float32 and cast
    make, inputs = _orthogonal_cases()[case]
    layers = {}
    for dtype in ("float32", "bfloat16"):
        layers[dtype] = make(kernel_initializer=keras.initializers.Orthogonal(seed=4), dtype=dtype)
        out = layers[dtype](inputs)
        for o in keras.tree.flatten(out):
            assert np.all(np.isfinite(np.asarray(keras.ops.convert_to_numpy(o), "float32")))
    for a, b in zip(layers["float32"].weights, layers["bfloat16"].weights):
        if "kernel" not in a.path:  # (MACNetwork's initial states: an unseeded initializer)
            continue
        want = np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.cast(a, "bfloat16"), "float32")))
        np.testing.assert_array_equal(np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(b, "float32"))), want,
                                      err_msg=a.path)
    assert layers["bfloat16"].get_config()["kernel_initializer"]["class_name"] == "Orthogonal"
