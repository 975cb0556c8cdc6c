"""Helpers of the tests that compare RLadder's and RTagger's two loops over the steps."""

import keras
import numpy as np


def loop_twins(make, x):
    """``make(unroll)`` built unrolled and looping, on ``x``, with the same weights."""
    unrolled, looped = make(True), make(False)
    unrolled(x)
    looped(x)
    looped.set_weights(unrolled.get_weights())
    return unrolled, looped


def assert_same(a, b, atol=1e-6):
    """The same structure of tensors, of the same shapes and (nearly) the same values."""
    a, b = keras.tree.flatten(a), keras.tree.flatten(b)
    assert len(a) == len(b)
    for p, q in zip(a, b):
        assert tuple(p.shape) == tuple(q.shape)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(p), keras.ops.convert_to_numpy(q), rtol=1e-5, atol=atol)
