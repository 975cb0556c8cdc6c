"""keras_capsules.callbacks.SwapEMAWeightsAndStatistics and estimate_batch_norm_statistics:
the EMA weights get batch-normalization statistics of their own."""

import re

import keras
import numpy as np
import pytest

from keras_capsules.callbacks import SwapEMAWeightsAndStatistics, estimate_batch_norm_statistics, swap_ema_weights
from tests.harness import two_cpu_strategy

BATCH, STEPS = 16, 4


def _data(seed=0, n=64):
    rng = np.random.default_rng(seed)
    x = {"a": (rng.normal(size=(n, 4)) * 3 + 2).astype("float32"), "b": rng.normal(size=(n, 3)).astype("float32")}
    y = rng.normal(size=(n, 1)).astype("float32")
    return x, y


def _batches(x, y, batch=BATCH):
    n = len(y)
    return [({k: v[i:i + batch] for k, v in x.items()}, y[i:i + batch]) for i in range(0, n, batch)]


def _model(seed=1, nested=False):
    keras.utils.set_random_seed(seed)
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    hidden = keras.layers.Dense(8, name="dense")(a)
    if nested:  # a batch normalization inside a sub-model: the whole model runs
        inner = keras.Sequential([keras.Input((8,)), keras.layers.BatchNormalization(name="bn")], name="inner")
        hidden = inner(hidden)
    else:
        hidden = keras.layers.BatchNormalization(name="bn")(hidden)
    hidden = keras.layers.Dropout(0.0)(hidden)
    out = keras.layers.Dense(1, name="out")(keras.layers.Concatenate()([hidden, b]))
    return keras.Model({"a": a, "b": b}, out)


def _bn(model):
    return model.get_layer("inner").get_layer("bn") if "inner" in [l.name for l in model.layers] else model.get_layer("bn")


def _batch_moments(model, batches):
    """What the BN layer sees, by hand: the mean over the batches of each batch's mean and
    (biased) variance of the Dense layer's output."""
    dense = model.get_layer("dense")
    outs = [keras.ops.convert_to_numpy(dense(x["a"])).astype("float64") for x, _ in batches]
    return np.mean([o.mean(0) for o in outs], 0), np.mean([o.var(0) for o in outs], 0)


@pytest.mark.parametrize("nested", [False, True])
def test_estimate_is_the_mean_of_the_batch_moments_and_changes_nothing(nested):
    model = _model(nested=nested)
    x, y = _data()
    batches = _batches(x, y)
    bn = _bn(model)
    bn.moving_mean.assign(np.full(8, 0.5, "float32"))
    momentum = bn.momentum
    (mean, variance), = estimate_batch_norm_statistics(model, batches * 3, STEPS)  # the first STEPS batches
    want_mean, want_variance = _batch_moments(model, batches)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(variance, want_variance, rtol=1e-5, atol=1e-5)
    assert mean.dtype == np.float32
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_mean), np.full(8, 0.5))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_variance), np.ones(8))
    assert bn.momentum == momentum
    # fewer batches than steps: those there are
    (mean2, _), = estimate_batch_norm_statistics(model, batches[:2], 10)
    np.testing.assert_allclose(mean2, _batch_moments(model, batches[:2])[0], rtol=1e-5, atol=1e-5)


def test_estimate_without_batch_normalization_reads_no_data():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])

    def never():
        raise AssertionError("read")
        yield

    assert estimate_batch_norm_statistics(model, never(), 5) == []


def test_estimate_of_no_batch_is_an_error():
    with pytest.raises(ValueError, match="no batch"):
        estimate_batch_norm_statistics(_model(), [], 5)


class _Record(keras.callbacks.Callback):
    """Records, where it runs (after the swap callback), the weights and the BN statistics."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def _record(self, where):
        bn = _bn(self.model)
        self.seen.append((where, [keras.ops.convert_to_numpy(w).copy() for w in self.model.trainable_weights],
                          keras.ops.convert_to_numpy(bn.moving_mean).copy(),
                          keras.ops.convert_to_numpy(bn.moving_variance).copy()))

    def on_epoch_begin(self, epoch, logs=None):
        self._record("epoch_begin")

    def on_epoch_end(self, epoch, logs=None):
        self._record("epoch_end")

    def on_test_begin(self, logs=None):
        self._record("test_begin")

    def on_test_end(self, logs=None):
        self._record("test_end")


def _fit(swap, epochs=3, nested=False):
    model = _model(nested=nested)
    model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
    x, y = _data()
    record = _Record()
    model.fit(x, y, batch_size=BATCH, validation_data=_data(seed=5, n=32), epochs=epochs,
              callbacks=[swap, record], verbose=0, shuffle=False)
    return model, record, _batches(x, y)


def _statistics_for(weights, model, batches):
    """The statistics ``estimate_batch_norm_statistics`` gives ``model`` with ``weights``."""
    saved = [keras.ops.convert_to_numpy(w).copy() for w in model.trainable_weights]
    for w, value in zip(model.trainable_weights, weights):
        w.assign(value)
    try:
        return estimate_batch_norm_statistics(model, batches, STEPS)[0]
    finally:
        for w, value in zip(model.trainable_weights, saved):
            w.assign(value)


@pytest.mark.parametrize("nested", [False, True])
def test_validation_and_the_trained_model_use_statistics_of_the_ema_weights(nested):
    x, y = _data()
    model, record, batches = _fit(SwapEMAWeightsAndStatistics(_batches(x, y), STEPS), nested=nested)
    seen = {}
    for where, weights, mean, variance in record.seen:
        seen.setdefault(where, []).append((weights, mean, variance))
    for (weights, mean, variance), (_, raw_mean, raw_variance) in zip(seen["test_begin"], seen["epoch_begin"][1:]):
        want_mean, want_variance = _statistics_for(weights, model, batches)  # EMA weights in the model
        np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(variance, want_variance, rtol=1e-5, atol=1e-6)
    # after validation the raw weights' statistics are back, the moving average goes on from them
    for (_, end_mean, _), (_, begin_mean, _) in zip(seen["test_end"][:-1], seen["epoch_begin"][1:]):
        np.testing.assert_array_equal(end_mean, begin_mean)
    raw_means = [m for _, m, _ in seen["test_end"]]
    ema_means = [m for _, m, _ in seen["test_begin"]]
    assert not any(np.allclose(r, e) for r, e in zip(raw_means, ema_means))
    # the trained model: EMA weights (Keras' finalize) and their statistics
    bn = _bn(model)
    final = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    want_mean, want_variance = _statistics_for(final, model, batches)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_mean), want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_variance), want_variance, rtol=1e-5, atol=1e-6)


def test_keras_swap_leaves_the_raw_statistics_with_the_ema_weights():
    # what the callback is for: with Keras' own swap the trained model's statistics are not
    # those of its weights
    x, y = _data()
    model, _, batches = _fit(keras.callbacks.SwapEMAWeights())
    bn = _bn(model)
    want_mean, _ = _statistics_for([keras.ops.convert_to_numpy(w) for w in model.trainable_weights], model, batches)
    assert not np.allclose(keras.ops.convert_to_numpy(bn.moving_mean), want_mean, rtol=1e-3, atol=1e-3)


def test_swap_on_epoch_holds_the_ema_statistics_between_epochs_and_estimates_once_per_state(monkeypatch):
    from keras_capsules import callbacks

    calls = []
    real = callbacks.estimate_batch_norm_statistics
    monkeypatch.setattr(callbacks, "estimate_batch_norm_statistics",
                        lambda *args: calls.append(1) or real(*args))
    x, y = _data()
    swap = SwapEMAWeightsAndStatistics(_batches(x, y), STEPS, swap_on_epoch=True)
    model, record, batches = _fit(swap, epochs=3)
    # per epoch: validation (EMA in, out) then the epoch's end (EMA in again, same weights:
    # no second estimate); the last epoch's end is also what fit leaves
    assert len(calls) == 3
    ends = [(w, m) for where, w, m, _ in record.seen if where == "epoch_end"]
    tests = [(w, m) for where, w, m, _ in record.seen if where == "test_begin"]
    for (end_weights, end_mean), (test_weights, test_mean) in zip(ends, tests):
        for a, b in zip(end_weights, test_weights):
            np.testing.assert_array_equal(a, b)  # the EMA weights, at both
        np.testing.assert_array_equal(end_mean, test_mean)
        np.testing.assert_allclose(end_mean, _statistics_for(end_weights, model, batches)[0], rtol=1e-5, atol=1e-6)
    bn = _bn(model)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_mean), ends[-1][1])


def test_without_use_ema_the_swap_refuses_as_keras_does():
    model = _model()
    model.compile(keras.optimizers.Adam(0.05), "mse")
    x, y = _data()
    with pytest.raises(ValueError, match="use_ema"):
        model.fit(x, y, batch_size=BATCH, validation_data=_data(seed=5, n=32), epochs=1, verbose=0,
                  callbacks=[SwapEMAWeightsAndStatistics(_batches(x, y), STEPS)])


@pytest.mark.parametrize("steps", [0, -1, 1.5, True, "3", None])
def test_bad_statistics_steps(steps):
    with pytest.raises(ValueError, match="statistics_steps"):
        SwapEMAWeightsAndStatistics([], steps)


@pytest.mark.parametrize("steps", [0, -1, 2.5, True, "3", None])
def test_estimate_refuses_a_bad_number_of_steps(steps):
    # Audit s64: -1, 2.5, None and "3" ran through the whole of the data (forever on a
    # repeated dataset), True ran one batch, 0 said the data gave no batch.
    def endless():
        x, y = _data()
        while True:
            yield from _batches(x, y)

    with pytest.raises(ValueError, match=r"`steps` must be a positive integer. Received: steps="):
        estimate_batch_norm_statistics(_model(), endless(), steps)


@pytest.mark.parametrize("swap_on_epoch", ["no", "False", 1, None])
def test_swap_on_epoch_must_be_a_boolean(swap_on_epoch):
    # Audit s64: "no" (any truthy value) swapped the average in at every epoch's end.
    x, y = _data()
    for make in (lambda: swap_ema_weights(swap_on_epoch=swap_on_epoch),
                 lambda: SwapEMAWeightsAndStatistics(_batches(x, y), swap_on_epoch=swap_on_epoch)):
        with pytest.raises(ValueError, match="`swap_on_epoch` must be True or False"):
            make()


@pytest.mark.parametrize("data", [None, 3, object()])
def test_statistics_data_must_be_iterable(data):
    with pytest.raises(TypeError, match="statistics_data"):
        SwapEMAWeightsAndStatistics(data)


def test_arrays_are_refused_as_batches():
    # helper-180: a tuple (x, y) gave x and then y as two batches (y went through the model
    # as an input: wrong statistics, silently), a bare x one sample per batch (a shape error
    # at the first swap, after an epoch)
    x, y = _data()
    for data, message in (((x, y), "a tuple of 2 arrays"), ((x, y, np.ones(len(y))), "a tuple of 3 arrays"),
                          ((x["a"], y), "a tuple of 2 arrays"), (y, f"an array of shape {y.shape}"),
                          (x, "a dict with keys ['a', 'b']")):
        with pytest.raises(TypeError, match=re.escape(message)):
            SwapEMAWeightsAndStatistics(data)
        with pytest.raises(TypeError, match="`data` must be an iterable of batches"):
            estimate_batch_norm_statistics(_model(), data, 2)
    SwapEMAWeightsAndStatistics(tuple(_batches(x, y)))  # a tuple of (x, y) batches is batches


def test_a_one_pass_iterator_is_refused():
    # the second swap would have found it empty
    x, y = _data()
    for one_pass in (iter(_batches(x, y)), (batch for batch in _batches(x, y))):
        with pytest.raises(TypeError, match="not a one-pass iterator"):
            SwapEMAWeightsAndStatistics(one_pass)


def test_a_fit_of_no_epoch_leaves_the_statistics_alone():
    # Keras copies the averaged weights into the model only after at least one epoch
    model = _model()
    model.compile(keras.optimizers.Adam(0.05, use_ema=True), "mse")
    x, y = _data()
    bn = _bn(model)
    bn.moving_mean.assign(np.full(8, 0.25, "float32"))
    model.fit(x, y, batch_size=BATCH, epochs=0, verbose=0, callbacks=[SwapEMAWeightsAndStatistics(_batches(x, y))])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_mean), np.full(8, 0.25))


@pytest.mark.parametrize("swap_on_epoch", [False, True])
def test_swap_ema_weights_chooses_the_statistics_swap_when_given_batches(swap_on_epoch):
    x, y = _data()
    plain = swap_ema_weights(swap_on_epoch=swap_on_epoch)
    assert isinstance(plain, keras.callbacks.SwapEMAWeights) and plain.swap_on_epoch is swap_on_epoch
    assert not isinstance(plain, SwapEMAWeightsAndStatistics)
    with_statistics = swap_ema_weights(_batches(x, y), swap_on_epoch=swap_on_epoch, statistics_steps=3)
    assert isinstance(with_statistics, SwapEMAWeightsAndStatistics)
    assert with_statistics.swap_on_epoch is swap_on_epoch and with_statistics.statistics_steps == 3
    with pytest.raises(TypeError, match="statistics_steps"):  # without batches it would be ignored
        swap_ema_weights(statistics_steps=3)


def test_under_a_mirrored_strategy():
    strategy = two_cpu_strategy()  # (skips on another backend)
    import tensorflow as tf

    x, y = _data()
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
    batches = _batches(x, y)
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), epochs=2, verbose=0,
              validation_data=tf.data.Dataset.from_tensor_slices(_data(seed=5, n=32)).batch(BATCH),
              callbacks=[SwapEMAWeightsAndStatistics(batches, STEPS)])
    bn = _bn(model)
    want_mean, want_variance = estimate_batch_norm_statistics(model, batches, STEPS)[0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_mean), want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_variance), want_variance, rtol=1e-5, atol=1e-6)
    copies = bn.moving_mean.value.values  # a MirroredVariable: every replica's copy holds them
    assert len(copies) == 2
    for copy in copies:
        np.testing.assert_allclose(copy.numpy(), want_mean, rtol=1e-5, atol=1e-6)


class _StopAfter(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            self.model.stop_training = True


def _weights(model):
    return [keras.ops.convert_to_numpy(w).copy() for w in model.trainable_weights]


@pytest.mark.parametrize("statistics", [False, True])
def test_a_fit_stopped_before_its_last_epoch_ends_with_the_average(statistics):
    # Audit (2026-12-01): with swap_on_epoch=True Keras makes the average final only at the
    # last epoch; a fit stopped before (EarlyStopping, TimeBudget) ended with the trained
    # weights, the average lost (and, with statistics, the average's statistics beside them).
    # The same training with swap_on_epoch=False (no swap at the epochs' ends) ends with
    # the average: the two must agree, and so must everything in between.
    x, y = _data()
    finals = []
    for swap_on_epoch in (True, False):
        data = _batches(x, y) if statistics else None
        model = _model()
        model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
        model.fit(x, y, batch_size=BATCH, validation_data=_data(seed=5, n=32), epochs=5, verbose=0, shuffle=False,
                  callbacks=[swap_ema_weights(data, swap_on_epoch=swap_on_epoch, **({"statistics_steps": STEPS} if statistics else {})),
                             _StopAfter(2)])
        finals.append(_weights(model))
        if statistics:
            want_mean, _ = _statistics_for(finals[-1], model, _batches(x, y))
            np.testing.assert_allclose(keras.ops.convert_to_numpy(_bn(model).moving_mean), want_mean, rtol=1e-5, atol=1e-6)
    for a, b in zip(*finals):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_predict_swaps_the_trained_weights_back():
    # Audit (2026-12-01): Keras' on_predict_end swapped back only when the average was not
    # in the model, so predict(callbacks=[swap]) left the average in and the trained
    # weights in the optimizer's average: a later fit trained on from the average.
    x, y = _data()
    model = _model()
    model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    for i in range(0, 64, BATCH):  # steps after fit's end: the trained weights leave the average
        model.train_on_batch({k: v[i:i + BATCH] for k, v in x.items()}, y[i:i + BATCH])
    for swap in (swap_ema_weights(), SwapEMAWeightsAndStatistics(_batches(x, y), STEPS)):
        trained, bn_mean = _weights(model), keras.ops.convert_to_numpy(_bn(model).moving_mean).copy()
        averaged = [keras.ops.convert_to_numpy(v).copy() for v in model.optimizer._model_variables_moving_average]
        predicted = model.predict(x, callbacks=[swap], verbose=0)
        # (Keras swaps by sums and differences on TensorFlow: equal up to rounding)
        for a, b in zip(_weights(model), trained):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        for v, a in zip(model.optimizer._model_variables_moving_average, averaged):
            np.testing.assert_allclose(keras.ops.convert_to_numpy(v), a, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(_bn(model).moving_mean), bn_mean, rtol=1e-6, atol=1e-6)
        assert not np.allclose(predicted, model.predict(x, verbose=0))  # (it predicted with the average)


def _train_two_models_with_one_callback():
    """Two models (seeds 1, 2) trained with one statistics callback: each ends with the
    statistics of its own averaged weights."""
    x, y = _data()
    swap = SwapEMAWeightsAndStatistics(_batches(x, y), STEPS)
    for seed in (1, 2):
        model = _model(seed=seed)
        model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
        model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[swap])
        want_mean, _ = _statistics_for(_weights(model), model, _batches(x, y))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(_bn(model).moving_mean), want_mean, rtol=1e-5, atol=1e-6)


def test_one_callback_gives_each_model_it_trains_its_own_statistics():
    # Audit (2026-12-01): the statistics estimated for the average were cached by the
    # optimizer's update count only: reused for the members of an ensemble, the second
    # member got the first one's statistics.
    _train_two_models_with_one_callback()


def test_a_new_model_at_a_dead_models_address_gets_its_own_statistics(monkeypatch):
    # The cache of the estimated statistics was keyed by ``id(model)``: a model freed and a
    # new one allocated at its address (CPython reuses addresses) at the same update count
    # read the freed model's statistics. Every model here is given one address (``id``
    # replaced in the callbacks module), as the reuse would; the cache must still tell them apart.
    from keras_capsules import callbacks as capsule_callbacks

    monkeypatch.setattr(capsule_callbacks, "id", lambda obj: 1, raising=False)
    _train_two_models_with_one_callback()


def test_a_fit_stopped_early_ends_with_the_average_under_a_mirrored_strategy():
    strategy = two_cpu_strategy()  # (skips on another backend)
    import tensorflow as tf

    x, y = _data()
    finals = []
    for swap_on_epoch in (True, False):
        with strategy.scope():
            model = _model()
            model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), epochs=4, verbose=0,
                  validation_data=tf.data.Dataset.from_tensor_slices(_data(seed=5, n=32)).batch(BATCH),
                  callbacks=[swap_ema_weights(_batches(x, y), swap_on_epoch=swap_on_epoch, statistics_steps=STEPS),
                             _StopAfter(1)])
        finals.append(_weights(model))
        for w in model.trainable_weights:  # every replica's copy holds the same
            a, b = (copy.numpy() for copy in w.value.values)
            np.testing.assert_array_equal(a, b)
    for a, b in zip(*finals):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_estimate_of_a_layer_called_several_times_per_pass_averages_all_its_calls():
    # Audit s65: the statistics were read once per batch, after the pass: inside
    # TimeDistributed (one call per step) only the last step's were kept, and a layer
    # shared by two branches kept one branch's (the model cut ran its first call only).
    rng = np.random.default_rng(0)
    steps, features = 4, 3
    x = rng.normal(size=(32, steps, features)).astype("float32") * np.arange(1, steps + 1)[None, :, None]
    batches = [x[:16], x[16:]]
    inputs = keras.Input((steps, features))
    timed = keras.Model(inputs, keras.layers.TimeDistributed(keras.layers.BatchNormalization())(inputs))
    (mean, variance), = estimate_batch_norm_statistics(timed, batches, 2)
    calls = [b[:, t].astype("float64") for b in batches for t in range(steps)]
    np.testing.assert_allclose(mean, np.mean([c.mean(0) for c in calls], 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(variance, np.mean([c.var(0) for c in calls], 0), rtol=1e-5, atol=1e-5)

    bn = keras.layers.BatchNormalization()
    a, b = keras.Input((features,)), keras.Input((features,))
    shared = keras.Model([a, b], keras.layers.Concatenate()([bn(a), bn(b)]))
    xa = rng.normal(size=(16, features)).astype("float32")
    xb = (5 + 3 * rng.normal(size=(16, features))).astype("float32")
    (mean, variance), = estimate_batch_norm_statistics(shared, [((xa, xb),)], 1)
    np.testing.assert_allclose(mean, (xa.mean(0) + xb.mean(0)) / 2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(variance, (xa.var(0) + xb.var(0)) / 2, rtol=1e-5, atol=1e-5)
    assert "call" not in vars(bn)  # the layer's own call again
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_mean), np.zeros(features))
