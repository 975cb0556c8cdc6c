"""What the tests of RLadder and RTagger share: a layer that gives image sequences a step
mask, and the check of their constraints."""

import keras
import numpy as np


class BlankFramesMasked(keras.layers.Layer):
    """Passes ``[batch, T, H, W, C]`` on, masking its all-zero frames with a ``[batch, T]`` mask.

    (``keras.layers.Masking`` masks every pixel of an image sequence, not its steps.)
    """

    def call(self, x):
        return x

    def compute_mask(self, x, mask=None):
        return keras.ops.any(keras.ops.not_equal(x, 0), axis=(2, 3, 4))



def check_constraints_reach_every_kernel_and_bias(layer, x, unconstrained):
    """``layer`` (made with non_neg kernel, recurrent and bias constraints): every weight
    but those named in ``unconstrained`` has one, and after a large step it holds; the
    constraints survive the config."""
    inputs = keras.Input(x.shape[1:])
    model = keras.Model(inputs, layer(inputs)[0])
    model.compile(keras.optimizers.SGD(10.0), "mse")
    model.fit(x, np.ones_like(keras.ops.convert_to_numpy(model(x))), epochs=1, verbose=0)
    for weight in layer.weights:
        name = weight.path.split("/")[-1]
        assert (weight.constraint is None) == (name in unconstrained), weight.path
        if weight.constraint is not None:
            assert keras.ops.convert_to_numpy(weight).min() >= 0, weight.path
    config = layer.get_config()
    assert all(config[f"{kind}_constraint"]["class_name"] == "NonNeg" for kind in ("kernel", "recurrent", "bias"))
    assert type(layer).from_config(config).get_config() == config
