"""Shared training helpers: mixup, padding + random crop, coordinate grids, run callbacks, spread steps."""

import re

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from applications.training import coordinate_grid, mixup, pad_and_random_crop, run_callbacks


def _identity_batches(batch, n_batches, n_classes=4, seed=0):
    """x["ids"] is the identity (row k marks example k), so a mixed row holds the mixing weights."""
    rng = np.random.default_rng(seed)
    ids = np.tile(np.eye(batch, dtype="float32"), (n_batches, 1))
    other = rng.normal(size=(batch * n_batches, 3, 2)).astype("float32")
    labels = rng.integers(0, n_classes, size=batch * n_batches)
    onehot = np.eye(n_classes, dtype="float32")[labels]
    ds = tf.data.Dataset.from_tensor_slices(({"ids": ids, "other": other}, onehot)).batch(batch)
    return ds, ids, other, onehot


def test_mixup_is_a_convex_combination_of_a_permuted_batch():
    batch = 16
    ds, ids, other, onehot = _identity_batches(batch, 3)
    for k, (x, y) in enumerate(mixup(ds, alpha=0.2, seed=3).as_numpy_iterator()):
        rows = slice(k * batch, (k + 1) * batch)
        weights = x["ids"]  # [batch, batch]: row i = lam e_i + (1 - lam) e_perm(i)
        assert np.all(weights >= 0) and np.all(weights <= 1)
        np.testing.assert_allclose(weights.sum(1), 1.0, rtol=1e-6)
        assert np.all((weights > 0).sum(1) <= 2)
        # Each column is used as a partner exactly once: a permutation of the batch.
        partner = np.where(weights.sum(0) > 0)[0]
        assert len(partner) >= batch // 2
        # Every input and the targets are mixed with the same weights.
        np.testing.assert_allclose(x["other"], np.einsum("ij,jcd->icd", weights, other[rows]), atol=1e-6)
        np.testing.assert_allclose(y, weights @ onehot[rows], atol=1e-6)
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)  # still distributions


def test_mixing_weights_follow_beta_alpha_alpha():
    batch, n_batches, alpha = 128, 24, 0.2
    ds, *_ = _identity_batches(batch, n_batches)
    lams = []
    for x, _ in mixup(ds.map(lambda x, y: (x["ids"], y)), alpha=alpha, seed=11).as_numpy_iterator():
        diag = np.diag(x)
        partnered = (x > 0).sum(1) == 2  # perm(i) != i and lam strictly inside (0, 1)
        lams.append(diag[partnered])
    lams = np.concatenate(lams)
    assert len(lams) > 0.9 * batch * n_batches
    assert abs(lams.mean() - 0.5) < 0.03
    assert abs(lams.var() - alpha**2 / (4 * alpha**2 * (2 * alpha + 1))) < 0.02
    assert scipy.stats.kstest(lams, scipy.stats.beta(alpha, alpha).cdf).pvalue > 1e-3
    # U-shaped: most weights near 0 or 1.
    assert np.mean((lams < 0.1) | (lams > 0.9)) > 0.5


def test_mixup_tuple_inputs_integer_labels_sample_weights_and_seed():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(8, 5)).astype("float32")
    b = rng.normal(size=(8, 2, 2)).astype("float32")
    labels = rng.integers(0, 3, size=8)
    weights = rng.uniform(size=8).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices(((a, b), labels, weights)).batch(4)
    first = list(mixup(ds, seed=5, num_classes=3).as_numpy_iterator())
    again = list(mixup(ds, seed=5, num_classes=3).as_numpy_iterator())
    for ((xa, xb), y, w), ((ya, yb), y2, _) in zip(first, again):
        assert xa.shape == (4, 5) and xb.shape == (4, 2, 2) and y.shape == (4, 3)
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
        np.testing.assert_array_equal(xa, ya)  # reproducible with a seed
        np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(np.concatenate([e[2] for e in first]), weights)  # unmixed
    per_batch = next(mixup(ds, seed=5, num_classes=3, per_example=False).as_numpy_iterator())
    assert per_batch[1].shape == (4, 3)


def test_mixup_errors():
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2), "float32"), np.zeros(4, "int64"))).batch(2)
    with pytest.raises(ValueError, match="Received: alpha=0"):
        mixup(ds, alpha=0)
    # Audit 5: alpha=inf was accepted and mixed every batch into NaN.
    with pytest.raises(ValueError, match="Received: alpha=inf"):
        mixup(ds, alpha=float("inf"))
    with pytest.raises(ValueError, match="num_classes"):
        mixup(ds)  # integer labels without num_classes
    # Audit 9: an np.float32 alpha was refused as "must be a finite positive number".
    x, y = next(mixup(ds, alpha=np.float32(0.4), seed=0, num_classes=3).as_numpy_iterator())
    assert x.shape == (2, 2) and y.shape == (2, 3)
    # Audit s80: num_classes=0 gave targets [batch, 0] without a word.
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match=f"Received: num_classes={bad!r}"):
            mixup(ds, num_classes=bad)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "a", np.float64(2.0)])
def test_mixup_refuses_a_seed_that_is_not_an_integer_of_at_least_0(seed):
    # Audit apps2: seed=True and -1 were taken, 1.5 and "a" raw TensorFlow errors
    from applications.errors import InputError

    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2), "float32"), np.eye(2, dtype="float32")[[0, 1, 0, 1]]))
    with pytest.raises(InputError, match=re.escape(f"Received: seed={seed!r}")):
        mixup(ds.batch(2), seed=seed)


@pytest.mark.parametrize("per_example", ["no", 0, None])
def test_mixup_refuses_a_per_example_that_is_not_true_or_false(per_example):
    # "no" was taken as True: one weight per example
    from applications.errors import InputError

    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2), "float32"), np.eye(2, dtype="float32")[[0, 1, 0, 1]]))
    with pytest.raises(InputError, match=re.escape(f"Received: per_example={per_example!r}")):
        mixup(ds.batch(2), seed=0, per_example=per_example)
    mixup(ds.batch(2), seed=0, per_example=np.bool_(False))  # numpy's bools are bools


def test_mixup_takes_an_epochs_seed_tensor_of_any_value():
    # the epoch streams pass distribute.epoch_seed(seed, epoch): an int64 drawn from the
    # run's seed, negative as often as not, also inside a graph (Dataset.flat_map)
    ds = tf.data.Dataset.from_tensor_slices((np.ones((4, 2), "float32"), np.eye(2, dtype="float32")[[0, 1, 0, 1]]))
    x, y = next(mixup(ds.batch(2), seed=tf.constant(-5, tf.int64)).as_numpy_iterator())
    assert x.shape == (2, 2) and np.allclose(y.sum(-1), 1)
    streamed = tf.data.Dataset.range(2).flat_map(lambda epoch: mixup(ds.batch(2), seed=-epoch - 1))
    assert len(list(streamed)) == 4
    assert len(list(mixup(ds.batch(2), seed=np.int64(3)))) == 2


def test_coordinate_grid_and_pad_and_crop(tmp_path):
    grid = coordinate_grid(3, 5).numpy()
    np.testing.assert_allclose(grid[0, :, 0], np.linspace(-1, 1, 5), atol=1e-7)
    np.testing.assert_allclose(grid[:, 0, 1], np.linspace(-1, 1, 3), atol=1e-7)
    image = tf.ones((8, 8, 2))
    crop = pad_and_random_crop(image, 2, 8, seed=tf.constant([1, 2])).numpy()
    assert crop.shape == (8, 8, 2)
    assert set(np.unique(crop)) <= {0.0, 1.0}
    np.testing.assert_array_equal(crop[..., 0], crop[..., 1])  # same crop for both channels
    callbacks = run_callbacks(tmp_path / "run")
    assert (tmp_path / "run").is_dir() and len(callbacks) == 3


def test_mixup_draws_new_weights_every_epoch_and_stays_reproducible():
    # Audit 9: every pass over the dataset repeated the first one's weights and
    # permutations (with or without a seed), so unshuffled data was mixed the same way each epoch.
    ds, *_ = _identity_batches(8, 2)
    ds = ds.map(lambda x, y: (x["ids"], y))

    def epochs(dataset, n=2):
        return [np.concatenate([x for x, _ in dataset.as_numpy_iterator()]) for _ in range(n)]

    for seed in (4, None):
        first, second = epochs(mixup(ds, seed=seed))
        assert not np.array_equal(first, second), f"seed={seed}"
    again = epochs(mixup(ds, seed=4))
    np.testing.assert_array_equal(np.stack(epochs(mixup(ds, seed=4))), np.stack(again))


def test_mixup_one_hot_encodes_labels_of_shape_batch_by_1():
    # Audit 9: integer labels [batch, 1] (Keras' sparse labels) became targets [batch, 1, classes].
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    labels = np.arange(8).reshape(8, 1) % 4
    ds = tf.data.Dataset.from_tensor_slices((x, labels)).batch(4)
    for _, y in mixup(ds, seed=1, num_classes=4).as_numpy_iterator():
        assert y.shape == (4, 4)
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)


def test_pad_and_random_crop_bad_arguments_are_value_errors():
    # Audit 9: a crop larger than the padded image failed inside tf.image with
    # "Need value.shape >= size, got", a [height, width] image with a Pad error.
    image = tf.ones((8, 8, 1))
    with pytest.raises(ValueError, match="Received: size=13, padding=2"):
        pad_and_random_crop(image, 2, 13)
    with pytest.raises(ValueError, match="Received: padding=-1"):
        pad_and_random_crop(image, -1, 8)
    with pytest.raises(ValueError, match="Received: image shape"):
        pad_and_random_crop(tf.ones((8, 8)), 2, 8)
    assert pad_and_random_crop(image, 2, 12).shape == (12, 12, 1)


def test_steps_before_an_epoch_are_the_steps_of_the_epochs_before_it():
    from applications.training import spread_steps

    for steps, epochs in ((7, 3), (20, 10), (3, 3), (20000, 15)):
        _, callback = spread_steps(steps, epochs)
        counts = [callback.per_epoch + (e < callback.longer) for e in range(epochs)]
        assert [callback.steps_before(e) for e in range(epochs + 1)] == [sum(counts[:e]) for e in range(epochs + 1)]
        assert callback.steps_before(epochs) == steps


@pytest.mark.parametrize("per_execution", [1, 4])
def test_spread_steps_trains_the_steps_asked_or_refuses_several_steps_per_execution(per_execution):
    # Audit (2026-12-01): at steps_per_execution=4 the callback saw a batch's end once per
    # 4 steps, and 10 steps over 3 epochs trained 12 ([4, 4, 4], not [4, 3, 3]).
    import keras
    from applications.training import spread_steps

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=per_execution)
    steps_per_epoch, callback = spread_steps(10, 3)
    x = np.zeros((64, 2), "float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2).repeat()
    if per_execution > 1:
        with pytest.raises(ValueError, match="steps_per_execution=1. Received: steps_per_execution=4"):
            model.fit(ds, steps_per_epoch=steps_per_epoch, epochs=3, callbacks=[callback], verbose=0)
        return
    model.fit(ds, steps_per_epoch=steps_per_epoch, epochs=3, callbacks=[callback], verbose=0)
    assert int(model.optimizer.iterations) == 10


@pytest.mark.parametrize("steps, epochs", [(3, 5), (5, 0), (0, 0), (2.0, 1), (True, 1), (4, -1)])
def test_spread_steps_refuses_fewer_steps_than_epochs_and_non_integers(steps, epochs):
    # spread_steps(3, 5) gave 1 step to every epoch (5 steps trained, not 3, and
    # steps_before wrong for a resumed stream); epochs=0 was a ZeroDivisionError.
    from applications.training import spread_steps

    with pytest.raises(ValueError, match=r"Received: steps=.*, epochs="):
        spread_steps(steps, epochs)


def test_run_callbacks_stop_a_diverged_fit_with_a_one_line_error(tmp_path):
    # Audit 10: smallnorb's and sst's `train` called from Python (without the command
    # line's resumable callbacks) trained a diverged model to the end, then saved and
    # scored it: NaN metrics and no error.
    import keras

    from applications.fault_tolerance import TrainingDivergedError

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.ones((16, 3), "float32")
    y = np.full((16, 1), np.nan, "float32")  # every loss is NaN
    epochs = []
    seen = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epochs.append(epoch))
    with pytest.raises(TrainingDivergedError, match=r"^training diverged: the loss became nan in epoch 1, batch 1"):
        model.fit(x, y, batch_size=4, epochs=3, verbose=0,
                  callbacks=[*run_callbacks(tmp_path / "run", checkpoint=False), seen])
    assert epochs == []



@pytest.mark.parametrize("stop_after", [3, 5])
def test_a_stop_asked_for_in_the_last_batch_of_an_epoch_of_spread_steps_is_kept(stop_after):
    # Audit 10: spread_steps' callback ends each epoch by setting stop_training and clears
    # it at the epoch's end, so a stop that another callback asked for in the same batch
    # (a TimeBudget spent, a rule of the user's) was cleared too and fit trained on.
    import keras

    from applications.training import spread_steps

    steps_per_epoch, epoch_steps = spread_steps(7, 3)  # epochs of 3, 2 and 2 steps
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")

    class StopAfter(keras.callbacks.Callback):
        done = 0

        def on_train_batch_end(self, batch, logs=None):
            self.done += 1
            if self.done == stop_after:
                self.model.stop_training = True

    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((8, 3), "float32"), np.zeros((8, 1), "float32")))
    history = model.fit(dataset.batch(1).repeat(), steps_per_epoch=steps_per_epoch, epochs=3, verbose=0,
                        callbacks=[epoch_steps, StopAfter()])
    assert int(model.optimizer.iterations) == stop_after
    assert history.epoch == list(range(1 if stop_after == 3 else 2))
