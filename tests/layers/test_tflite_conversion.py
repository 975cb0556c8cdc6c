"""The routing layers convert to TensorFlow Lite with its builtin ops, and the converted
model computes what the Keras model computes.

Audit s64: EMRouting's E-step was an einsum whose BatchMatMul TensorFlow Lite's converter
refused (even with the Flex ops), and the masked routing layers sliced boolean masks,
which only the Flex ops (not in the pip interpreter) run.
"""

import os

import keras
import numpy as np
import pytest

from keras_capsules import layers
from tests.backends import tensorflow_only


def _em_model():
    a, mu = keras.Input((6,), name="a"), keras.Input((6, 4, 4), name="mu")
    outputs = layers.EMRouting(n_out=3, d_out=4, n_inp=6, n_iters=3, algorithm="votes",
                               beta_initializer="random_normal", bias_initializer="random_normal")([a, mu])
    rng = np.random.default_rng(0)
    return keras.Model([a, mu], list(outputs)), [rng.normal(size=(2, 6)).astype("float32"),
                                                 rng.normal(size=(2, 6, 4, 4)).astype("float32")]


def _masked_model(routing):
    tokens = keras.Input((None,), dtype="int32", name="tokens")  # any length
    h = keras.layers.Dense(8)(keras.layers.Embedding(20, 8, mask_zero=True)(tokens))
    capsules = routing(n_out=3, d_out=4)(h)
    ids = np.array([[3, 7, 1, 0, 0], [5, 2, 9, 4, 8]], "int32")  # the first one padded
    return keras.Model(tokens, layers.CapsuleLength()(capsules)), [ids]


@pytest.mark.parametrize("make", [_em_model, lambda: _masked_model(layers.DynamicRouting),
                                  lambda: _masked_model(layers.KMeansRouting)],
                         ids=["em_votes", "dynamic_masked", "kmeans_masked"])
def test_converts_with_builtin_ops_and_computes_the_same(make, tmp_path):
    tensorflow_only("TensorFlow Lite")
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model, inputs = make()
    want = [np.asarray(w) for w in keras.tree.flatten(model.predict(inputs, verbose=0))]
    path = os.path.join(tmp_path, "exported")
    model.export(path, verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(path)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no Flex ops
    interpreter = tf.lite.Interpreter(model_content=converter.convert())
    runner = interpreter.get_signature_runner()
    names = sorted(runner.get_input_details())  # the Keras inputs' names
    by_name = dict(zip([i.name for i in model.inputs], inputs))
    got = runner(**{name: by_name[name] for name in names})
    got = [got[k] for k in sorted(got)]  # output_0, output_1, ...: the Keras outputs' order
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
