"""fresh_initializer: the per-weight initializer copies of the layers with weights of one shape."""

import keras
import numpy as np

from keras_capsules.layers import EMRouting
from keras_capsules.layers._initializers import fresh_initializer
from tests.backends import tensor


class _Filled(keras.initializers.Initializer):
    """A custom deterministic initializer that defines no get_config (Keras asks for it
    only to save the initializer)."""

    def __init__(self, value=1.0):
        self.value = value

    def __call__(self, shape, dtype=None):
        return keras.ops.full(shape, self.value, dtype=dtype)


def test_an_initializer_without_a_seed_is_used_as_given():
    # audit (2026-12): the copy was made from get_config(), which a custom initializer
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
