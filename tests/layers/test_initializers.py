"""fresh_initializer: the per-weight initializer copies of the layers with weights of one shape;
narrow_float_safe: an orthogonal initializer for 16-bit weights."""

import keras
import numpy as np

from keras_capsules.layers import EMRouting, RLadder
from keras_capsules.layers._initializers import fresh_initializer, narrow_float_safe
from tests.backends import tensor
from tests.portability import CASES, case_inputs


class _Filled(keras.initializers.Initializer):
    """A custom deterministic initializer that defines no get_config (Keras asks for it
    only to save the initializer)."""

    def __init__(self, value=1.0):
        self.value = value

    def __call__(self, shape, dtype=None):
        return keras.ops.full(shape, self.value, dtype=dtype)


def test_an_initializer_without_a_seed_is_used_as_given():
    # audit (2026-11-29): the copy was made from get_config(), which a custom initializer
    # need not define: its arguments were lost (the copy of _Filled(3.0) filled 1.0,
    # one without a default failed with a TypeError when the layer was built)
    filled = _Filled(3.0)
    assert fresh_initializer(filled, "salt") is filled
    zeros = keras.initializers.Zeros()
    assert fresh_initializer(zeros, "salt") is zeros
    layer = EMRouting(n_out=3, d_out=2, beta_initializer=_Filled(3.0), bias_initializer=_Filled(-2.0))
    layer([tensor(np.zeros((2, 4), "float32")), tensor(np.ones((2, 4, 1, 5), "float32"))])
    np.testing.assert_array_equal(np.asarray(layer.beta_use), 3.0)
    np.testing.assert_array_equal(np.asarray(layer.beta_ign), 3.0)
    layer = EMRouting(n_out=None, d_out=2, bias_initializer=_Filled(-2.0))
    layer([tensor(np.zeros((2, 4), "float32")), tensor(np.ones((2, 4, 1, 5), "float32"))])
    np.testing.assert_array_equal(np.asarray(layer.bias_break), -2.0)


def test_random_initializers_are_still_copied_apart_and_reproducibly():
    seeded = keras.initializers.RandomNormal(seed=5)
    a, b = fresh_initializer(seeded, "a"), fresh_initializer(seeded, "b")
    assert a is not seeded and a.get_config()["seed"] != b.get_config()["seed"]
    np.testing.assert_array_equal(np.asarray(a((3,))), np.asarray(fresh_initializer(seeded, "a")((3,))))
    assert not np.array_equal(np.asarray(a((3,))), np.asarray(b((3,))))


def test_an_orthogonal_initializer_draws_16_bit_weights_in_float32():
    # audit (2026-11-29): Orthogonal's QR has no bfloat16 kernel in TensorFlow (no 16-bit one
    # in JAX), so the Recurrent Ladder layers failed with a plain dtype="bfloat16"
    orthogonal = keras.initializers.Orthogonal(seed=4)
    initialize = narrow_float_safe(orthogonal)
    drawn = keras.ops.convert_to_numpy(orthogonal((5, 3), dtype="float32"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(initialize((5, 3), dtype="float32")), drawn)
    for dtype in ("float16", "bfloat16"):
        weight = keras.ops.convert_to_numpy(initialize((5, 3), dtype=dtype))
        assert keras.backend.standardize_dtype(weight.dtype) == dtype
        np.testing.assert_array_equal(weight, drawn.astype(weight.dtype))
    glorot = keras.initializers.GlorotUniform(seed=4)  # draws in any floating dtype
    assert narrow_float_safe(glorot) is glorot


def test_a_bfloat16_ladder_keeps_its_initializers_and_casts_the_float32_draws():
    init_kwargs = dict(CASES["RLadder"][0], recurrent_initializer=keras.initializers.Orthogonal(seed=4))
    inputs = tensor(case_inputs("RLadder"))
    ladders = {}
    for dtype in ("float32", "bfloat16"):
        ladders[dtype] = RLadder(**init_kwargs, dtype=dtype)
        ladders[dtype](inputs)
    recurrent = [
        [keras.ops.convert_to_numpy(w) for w in ladder.weights if w.path.endswith("recurrent_kernel")]
        for ladder in ladders.values()
    ]
    assert len(recurrent[1]) == 2  # one per level
    for w32, w16 in zip(*recurrent):
        np.testing.assert_array_equal(w16, w32.astype(w16.dtype))
    config = ladders["bfloat16"].get_config()
    assert config["recurrent_initializer"] == keras.initializers.serialize(init_kwargs["recurrent_initializer"])
    for cell in ladders["bfloat16"].encoders:  # the sublayers got initializers, not wrappers
        if cell is not None and hasattr(cell, "recurrent_initializer"):
            assert cell.get_config()["recurrent_initializer"]["class_name"] == "Orthogonal"
    assert RLadder.from_config(config).get_config() == config


def test_the_routing_layers_and_the_embedding_draw_bfloat16_orthogonal_weights_in_float32():
    # (2026-12-06) KMeansRouting, DynamicRouting, EMRouting and CompositionalEmbedding (the
    # layers that cast their weights themselves, OwnCastingLayer) with dtype="bfloat16" and an
    # orthogonal kernel or codebook initializer failed at their first call in TensorFlow's QR
    # ("Value for attr 'T' of bfloat16 is not in the list of allowed values"); the MAC units
    # (the same base) did too. Now drawn in float32 and cast, the config keeps Orthogonal.
    from keras_capsules.layers import CompositionalEmbedding, DynamicRouting, KMeansRouting

    poses = np.random.default_rng(0).uniform(size=(2, 5, 6)).astype("float32")
    cases = [
        (lambda **kw: KMeansRouting(n_out=3, d_out=4, **kw), "kernel_initializer", "kernel", poses),
        (lambda **kw: DynamicRouting(n_out=3, d_out=4, **kw), "kernel_initializer", "kernel", poses),
        (lambda **kw: EMRouting(n_out=3, d_out=2, **kw), "kernel_initializer", "kernel",
         [np.zeros((2, 4), "float32"), np.ones((2, 4, 1, 5), "float32")]),
        (lambda **kw: CompositionalEmbedding(50, 8, **kw), "codebook_initializer", "codebook", np.array([[1, 2, 3]])),
    ]
    for make, option, weight, inputs in cases:
        layers = {}
        for dtype in ("float32", "bfloat16"):
            layers[dtype] = make(**{option: keras.initializers.Orthogonal(seed=3)}, dtype=dtype)
            inputs_of = [tensor(x) for x in inputs] if isinstance(inputs, list) else tensor(inputs)
            out = layers[dtype](inputs_of)
            for y in (out if isinstance(out, (list, tuple)) else [out]):
                assert np.all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(y, "float32"))))
        w32, w16 = (keras.ops.convert_to_numpy(getattr(layers[d], weight)) for d in ("float32", "bfloat16"))
        np.testing.assert_array_equal(w16, w32.astype(w16.dtype))
        assert layers["bfloat16"].get_config()[option]["class_name"] == "Orthogonal"


def test_own_casting_weights_named_by_a_string_draw_no_extra_seed():
    # (2026-12-06) OwnCastingLayer.add_weight made every initializer named by a string into an
    # object to see whether it was Orthogonal: a random one drew a default seed from Python's
    # random, moving every later unseeded draw. Only a name of Orthogonal is made now (which
    # add_weight makes anyway), and a bfloat16 weight of it is drawn in float32.
    import random

    from keras_capsules.layers._own_casting import OwnCastingLayer

    layer = OwnCastingLayer()
    random.seed(7)
    layer.add_weight(shape=(3, 2), initializer="glorot_uniform", name="a")
    after_add_weight = random.random()
    random.seed(7)
    keras.initializers.get("glorot_uniform")  # what Keras' add_weight makes of the name, once
    assert after_add_weight == random.random()
    narrow = OwnCastingLayer(dtype="bfloat16")
    for initializer in ("orthogonal", "Orthogonal", {"class_name": "Orthogonal", "config": {"seed": 1}}):
        weight = narrow.add_weight(shape=(3, 2), initializer=initializer)
        assert keras.backend.standardize_dtype(weight.dtype) == "bfloat16"
