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


def assert_compiles_as_one_torch_graph(layer, x, whole=True):
    """On torch, ``torch.compile`` traces the symbolic loop of ``layer(x)`` without a
    graph break (``whole``: ``layer(x)`` is one graph) and gives the eager outputs.

    Keras' torch ``while_loop`` tests a tensor condition in a Python ``while``: dynamo
    broke the graph there at every step and compiled the loop's functions as frames of
    their own, shared by every layer of the process; its automatic dynamic shapes then
    made a later model's sizes symbolic and inductor failed on a convolution
    ("cannot determine truth value of Relational: 1 < s3").
    """
    if keras.backend.backend() != "torch":
        import pytest

        pytest.skip(f"torch.compile is torch's (backend is {keras.backend.backend()})")
    import torch

    x = keras.ops.convert_to_tensor(x)
    want = layer(x)
    explanation = torch._dynamo.explain(lambda v: layer(v))(x)
    reasons = [
        (str(r.reason).splitlines()[0], [f"{f.filename}:{f.lineno} {f.name}" for f in r.user_stack])
        for r in explanation.break_reasons
    ]
    in_loop = [r for r in reasons if r[1] and r[1][-1].endswith(("while_loop", "symbolic_loop", "python_loop"))]
    assert not in_loop, in_loop[:3]
    if whole:
        assert explanation.graph_break_count == 0 and explanation.graph_count == 1, reasons[:3]
    torch._dynamo.reset()
    assert_same(torch.compile(lambda v: layer(v))(x), want, atol=1e-5)
