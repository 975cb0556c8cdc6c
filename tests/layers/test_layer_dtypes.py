"""Every public layer refuses a non-floating dtype and accepts the floating ones."""

import keras
import numpy as np
import pytest

from keras_capsules import layers
from tests.backends import tensor
from tests.portability import CASES, case_inputs, public_layers


@pytest.mark.parametrize("name", public_layers())
def test_every_public_layer_refuses_a_non_floating_dtype(name):
    # audit (2026-11-29): only KMeansRouting, DynamicRouting and CapsuleLength checked.
    # With dtype="int32" the others failed at their first call with a backend error
    # that did not name the dtype (an int initializer's "Need minval < maxval",
    # "Cannot convert 0.0 to EagerTensor of dtype int32", Sigmoid's allowed types), and
    # a layer whose weights all start at zero would have run and truncated its results.
    init_kwargs = CASES[name][0]
    for dtype in ("int32", "bool"):
        with pytest.raises(ValueError, match=f"`dtype` of {name} must be a floating.*Received: dtype={dtype}"):
            getattr(layers, name)(**init_kwargs, dtype=dtype)


@pytest.mark.parametrize("name", public_layers())
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16"])
def test_every_public_layer_accepts_a_floating_dtype(name, dtype):
    layer = getattr(layers, name)(**CASES[name][0], dtype=dtype)
    assert layer.dtype_policy.name == dtype
    assert layer.compute_dtype == keras.DTypePolicy(dtype).compute_dtype


@pytest.mark.parametrize("name", public_layers())
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_public_layer_runs_in_a_plain_16_bit_dtype(name, dtype):
    # audit (2026-11-29): with dtype="bfloat16" the Recurrent Ladder encoder cells, RLadder
    # and RTagger failed at their first call: their default orthogonal recurrent
    # initializer runs a QR decomposition, which TensorFlow has no bfloat16 kernel for
    # (JAX has none for float16 either). Its weights are now drawn in float32 and cast.
    init_kwargs, _, call_kwargs, _ = CASES[name]
    layer = getattr(layers, name)(**init_kwargs, dtype=dtype)
    outputs = keras.tree.flatten(layer(keras.tree.map_structure(tensor, case_inputs(name)), **call_kwargs))
    for k, output in enumerate(outputs):
        assert keras.backend.standardize_dtype(output.dtype) == dtype, f"output #{k} is {output.dtype}"
        assert np.all(np.isfinite(np.asarray(keras.ops.convert_to_numpy(output), "float64"))), f"output #{k}"
    for w in layer.weights:
        if "float" in str(w.dtype):  # integer tables (e.g. fixed codes) stay integer
            assert keras.backend.standardize_dtype(w.dtype) == dtype, f"weight {w.path} is {w.dtype}"


def _casting_for_themselves():
    """The public layers with weights and Keras' autocast off (they cast for themselves)."""
    names = []
    for name in public_layers():
        layer = getattr(layers, name)(**CASES[name][0])
        if not layer.autocast:
            layer(keras.tree.map_structure(tensor, case_inputs(name)), **CASES[name][2])
            if layer.weights:
                names.append(name)
    return names


@pytest.mark.parametrize("name", _casting_for_themselves())
@pytest.mark.parametrize("dtype", ["mixed_float16", "mixed_bfloat16"])
def test_layers_that_cast_for_themselves_read_their_weights_unrounded(name, dtype):
    # audit (2026-12-01): the layers with autocast off (routing, CompositionalEmbedding,
    # MAC) cast inputs and weights themselves, the routing and attention math in
    # float32. Keras still entered an autocast scope for such a layer called outside
    # another one (directly, or with a per-layer mixed dtype in a float32 model), and
    # their variables were read rounded to 16 bits: the layer's error against float64
    # routing was 12 times the output's own rounding (EMRouting, mixed_bfloat16), and
    # one fit step made an EMRouting kernel NaN. Called or not through Keras'
    # __call__, such a layer now gives the same outputs.
    init_kwargs, _, call_kwargs, _ = CASES[name]
    layer = getattr(layers, name)(**init_kwargs, dtype=dtype)
    inputs = keras.tree.map_structure(tensor, case_inputs(name))
    through_keras = keras.tree.flatten(layer(inputs, **call_kwargs))
    assert layer.weights and all(not w._autocast for w in layer.weights), name
    direct = keras.tree.flatten(layer.call(inputs, **call_kwargs))
    for k, (a, b) in enumerate(zip(through_keras, direct)):
        np.testing.assert_array_equal(
            np.asarray(keras.ops.convert_to_numpy(a), "float64"),
            np.asarray(keras.ops.convert_to_numpy(b), "float64"), err_msg=f"output #{k}",
        )
