"""A frozen public layer stays frozen through its config and a ``.keras`` file."""

import keras
import pytest

from keras_capsules import layers
from tests.portability import CASES, case_inputs, public_layers


@pytest.mark.parametrize("name", public_layers())
def test_a_frozen_layer_stays_frozen_when_loaded(name, tmp_path):
    # audit (2026-12-01): Keras applies a layer's trainable=False only to the weights it
    # makes itself. MACCell, MACNetwork, RLadder and RTagger made their sublayers without
    # it, so a frozen one came back from from_config or a .keras file with trainable
    # sublayers (MACNetwork 16 weights, RLadder 19), and fit on the loaded "frozen"
    # model moved them.
    init_kwargs, _, call_kwargs, _ = CASES[name]
    inputs = case_inputs(name)
    symbolic = keras.tree.map_structure(lambda x: keras.Input(x.shape[1:], dtype=str(x.dtype)), inputs)
    cls = getattr(layers, name)
    layer = cls(**init_kwargs)
    model = keras.Model(symbolic, layer(symbolic, **call_kwargs))
    layer.trainable = False
    assert not model.trainable_weights
    model.save(tmp_path / "frozen.keras")
    loaded = keras.saving.load_model(tmp_path / "frozen.keras")
    assert not loaded.trainable_weights, [w.path for w in loaded.trainable_weights]
    assert len(loaded.non_trainable_weights) == len(model.weights)
    tensors = keras.tree.map_structure(keras.ops.convert_to_tensor, inputs)
    rebuilt = cls.from_config(layer.get_config())
    rebuilt(tensors, **call_kwargs)
    assert not rebuilt.trainable_weights, [w.path for w in rebuilt.trainable_weights]
    # unfrozen, it trains what a new layer trains
    fresh = cls(**init_kwargs)
    fresh(tensors, **call_kwargs)
    rebuilt.trainable = True
    assert len(rebuilt.trainable_weights) == len(fresh.trainable_weights)
