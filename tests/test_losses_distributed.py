"""The loss Keras logs under a two-replica MirroredStrategy is the one-device figure.

GlobalBatchLoss divides each replica's sum by the global count (so the gradients add
up to the one-device gradient); Keras' trackers multiply each replica's loss by the
number of replicas and weigh it by the replica's batch size, so without a correction
``evaluate`` and ``fit`` logged a wrong loss whenever a batch split unevenly over the
replicas (1 example on 2 replicas: twice the loss). See ``_logged_as_one_device``.
"""

import keras_capsules  # noqa: F401  (first: see conftest.py)
import keras
import numpy as np
import pytest

from keras_capsules import losses
from tests.harness import two_cpu_strategy

_FEATURES = 4
_CLASSES = 3
_GROUPS, _PIXELS = 2, 3  # MixtureNLL: y_pred [batch, K, P, C + 1], y_true [batch, P, C] with C = 1


def _capsule_model():
    inputs = keras.Input((_FEATURES,))
    outputs = keras.layers.Dense(_CLASSES, activation="sigmoid")(inputs)
    return keras.Model(inputs, outputs)


def _sequence_model():
    """Per-token capsule lengths [batch, 3, classes] with the mask of a Masking layer."""
    inputs = keras.Input((3, _FEATURES))
    hidden = keras.layers.Masking(0.0)(inputs)
    outputs = keras.layers.Dense(_CLASSES, activation="sigmoid")(hidden)
    return keras.Model(inputs, outputs)


def _mixture_model():
    inputs = keras.Input((_FEATURES,))
    hidden = keras.layers.Dense(_GROUPS * _PIXELS * 2)(inputs)
    outputs = keras.layers.Reshape((_GROUPS, _PIXELS, 2))(hidden)
    return keras.Model(inputs, outputs)


_CASES = {
    "capsule": (lambda: losses.CapsuleLoss(), _capsule_model),
    "margin_sum": (lambda: losses.MarginLoss(reduction="sum"), _capsule_model),
    "mixture": (lambda: losses.MixtureNLL(from_logits=True), _mixture_model),
    "capsule_masked": (lambda: losses.CapsuleLoss(), _sequence_model),
}


def _data(case, n, seed=0):
    rng = np.random.default_rng(seed)
    if case == "capsule_masked":
        x = rng.normal(size=(n, 3, _FEATURES)).astype("float32")
        x[:, 2] = 0.0  # the last token is padding in every sample ...
        x[::2, 1] = 0.0  # ... and the second one in every other sample
        y = rng.integers(0, _CLASSES, size=(n, 3))
    elif case == "mixture":
        x = rng.normal(size=(n, _FEATURES)).astype("float32")
        y = rng.normal(size=(n, _PIXELS, 1)).astype("float32")
    else:
        x = rng.normal(size=(n, _FEATURES)).astype("float32")
        y = rng.integers(0, _CLASSES, size=(n,))
    weights = rng.uniform(0.5, 2.0, size=(n,)).astype("float32")
    return x, y, weights


def _compiled(case, strategy, weights):
    make_loss, make_model = _CASES[case]
    with strategy.scope():
        model = make_model()
        model.set_weights(weights)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=make_loss())
    return model


def _pair(case):
    """The same model compiled on one device and under the two-replica strategy."""
    keras.utils.set_random_seed(1)
    weights = _CASES[case][1]().get_weights()
    import tensorflow as tf

    return _compiled(case, tf.distribute.get_strategy(), weights), _compiled(case, two_cpu_strategy(), weights)


@pytest.mark.parametrize("case", sorted(_CASES))
def test_evaluate_under_two_replicas_logs_the_one_device_loss(case):
    # 1, 3 and 5 examples in batches of 4: 1 example leaves a replica empty, 3 and the
    # last batch of 5 split 2 + 1 (the bug: 1 example logged twice its loss on 2 replicas).
    one, two = _pair(case)
    for n in (1, 3, 5):
        x, y, w = _data(case, n, seed=n)
        for sample_weight in (None, w):
            expected = one.evaluate(x, y, sample_weight=sample_weight, batch_size=4, verbose=0)
            got = two.evaluate(x, y, sample_weight=sample_weight, batch_size=4, verbose=0)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{case}: {n} examples, sample_weight={sample_weight is not None}")


@pytest.mark.parametrize("case", ["capsule", "mixture", "capsule_masked"])
def test_fit_under_two_replicas_logs_the_one_device_loss_and_steps_as_one_device(case):
    # fit's logged loss over 5 examples in batches of 2 (the last one of 1 example) is the
    # one-device figure, and the weights after the epoch are the one-device weights (the
    # gradients are those of the one-device loss, the correction changes only the value).
    one, two = _pair(case)
    x, y, w = _data(case, 5, seed=7)
    expected = one.fit(x, y, sample_weight=w, batch_size=2, epochs=1, shuffle=False, verbose=0)
    got = two.fit(x, y, sample_weight=w, batch_size=2, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(got.history["loss"], expected.history["loss"], rtol=1e-5, atol=1e-6)
    for a, b in zip(two.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_correction_changes_the_value_not_the_gradient():
    # Inside one replica of the strategy: the replica's gradient is bit for bit that of
    # its share of the global mean (sum / global count), whatever the value logged.
    import tensorflow as tf

    strategy = two_cpu_strategy()
    loss = losses.CapsuleLoss()
    scores = tf.constant([[0.9, 0.2, 0.4], [0.1, 0.8, 0.3], [0.6, 0.5, 0.7]])
    labels = tf.constant([0, 1, 2])
    dataset = tf.data.Dataset.from_tensor_slices((labels, scores)).batch(3)
    dist = strategy.experimental_distribute_dataset(dataset)

    def step(y, s):
        with tf.GradientTape() as tape:
            tape.watch(s)
            value = loss(y, s)
        with tf.GradientTape() as tape2:
            tape2.watch(s)
            plain = ops_sum_over_global_count(loss, y, s)
        return value, tape.gradient(value, s), plain, tape2.gradient(plain, s), tf.shape(s)[0]

    def ops_sum_over_global_count(loss, y, s):
        per_sample = loss.call(tf.one_hot(y, 3), s)
        count = tf.distribute.get_replica_context().all_reduce("SUM", tf.cast(tf.size(per_sample), tf.float32))
        return tf.reduce_sum(per_sample) / count

    y, s = next(iter(dist))  # 3 examples: 2 on one replica, 1 on the other
    results = strategy.run(tf.function(step), args=(y, s))
    values, grads, plains, plain_grads, sizes = (strategy.experimental_local_results(r) for r in results)
    sizes = [int(n) for n in sizes]
    assert sorted(sizes) == [1, 2]
    whole = sum(float(plain) for plain in plains)  # the one-device loss
    np.testing.assert_allclose(whole, float(loss(labels, scores)), rtol=1e-6)
    for value, grad, plain_grad in zip(values, grads, plain_grads):
        np.testing.assert_array_equal(grad.numpy(), plain_grad.numpy())  # the gradient: unchanged
        np.testing.assert_allclose(float(value), whole / 2, rtol=1e-6)  # the value: the same on each replica


def test_a_multi_output_model_logs_each_outputs_one_device_loss_under_two_replicas():
    # Keras weighs the total `loss` by each replica's batch size, but an output's
    # `<name>_loss` by its static batch size, 1 per replica where unknown: both are the
    # one-device figures (a value corrected for the first weighting only halved a_loss
    # for 1 example on 2 replicas).
    import tensorflow as tf

    def compiled(strategy, weights):
        with strategy.scope():
            inputs = keras.Input((_FEATURES,))
            outputs = {name: keras.layers.Dense(_CLASSES, activation="sigmoid", name=name)(inputs) for name in "ab"}
            model = keras.Model(inputs, outputs)
            if weights is not None:
                model.set_weights(weights)
            model.compile(loss={"a": losses.CapsuleLoss(), "b": losses.MarginLoss(reduction="sum")},
                          loss_weights={"a": 1.0, "b": 0.5})
        return model

    keras.utils.set_random_seed(2)
    one = compiled(tf.distribute.get_strategy(), None)
    two = compiled(two_cpu_strategy(), one.get_weights())
    rng = np.random.default_rng(3)
    for n in (1, 3, 5):
        x = rng.normal(size=(n, _FEATURES)).astype("float32")
        y = {name: rng.integers(0, _CLASSES, size=(n,)) for name in "ab"}
        expected = one.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
        got = two.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
        assert sorted(got) == ["a_loss", "b_loss", "loss"]
        for key in got:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-6, err_msg=f"{key}, {n} examples")
