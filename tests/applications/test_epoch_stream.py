"""``distribute.epoch_stream``: epochs drawn from (seed, epoch), so a resumed run trains
on the orders and draws of the uninterrupted run."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from applications import demo, distribute
from applications.errors import InputError
from tests.applications import cli_helpers


def _shuffled_epochs(seed, batches=3):
    examples = tf.data.Dataset.range(12)

    def one_pass(epoch):
        # Dataset.random too: every tf.data draw of the pass is keyed on (seed, epoch)
        draws = tf.data.Dataset.random(seed=distribute.epoch_seed(seed, epoch), rerandomize_each_iteration=True)
        shuffled = examples.shuffle(12, seed=distribute.epoch_seed(seed, epoch))
        return tf.data.Dataset.zip(shuffled, draws).batch(12 // batches)

    return one_pass


def _take(stream, n):
    return [(a.tolist(), b.tolist()) for a, b in stream.take(n).as_numpy_iterator()]


def test_an_epoch_is_the_same_whichever_epoch_the_stream_starts_at():
    one_pass = _shuffled_epochs(seed=5)
    from_0 = _take(distribute.epoch_stream(one_pass, 3), 12)  # epochs 0-3
    from_2 = _take(distribute.epoch_stream(one_pass, 3, first_epoch=2), 6)  # epochs 2-3
    assert from_2 == from_0[6:]
    epochs = [sorted(sum((b[0] for b in from_0[3 * e: 3 * e + 3]), [])) for e in range(4)]
    assert all(e == list(range(12)) for e in epochs), "each epoch holds every example once"
    orders = {tuple(sum((b[0] for b in from_0[3 * e: 3 * e + 3]), [])) for e in range(4)}
    assert len(orders) == 4, "every epoch has its own order"


def test_the_orders_depend_on_the_seed_and_not_on_the_global_seed():
    one_pass = _shuffled_epochs(seed=5)
    runs = []
    for global_seed in (0, 1, 12345):  # 0: tf.data's own seed check once failed on it
        keras.utils.set_random_seed(global_seed)
        runs.append(_take(distribute.epoch_stream(one_pass, 3), 6))
    assert runs[0] == runs[1] == runs[2]
    assert _take(distribute.epoch_stream(_shuffled_epochs(seed=6), 3), 6) != runs[0]


class _Recorder(keras.Model):
    """Records the batches ``fit`` trains on (eagerly) and learns nothing."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def call(self, x):
        return x

    def train_step(self, data):
        self.seen.append(data[0].numpy()[:, 0].tolist())
        return {"examples": tf.shape(data[0])[0]}


@pytest.mark.parametrize("first_epoch", [0, 2])
def test_keras_fit_trains_epoch_e_on_pass_e_however_many_iterators_it_makes(first_epoch):
    # Keras 3.15's fit makes two iterators an epoch; tf.data's reshuffling counted both
    x = np.arange(12, dtype="float32")[:, None]

    def one_pass(epoch):
        shuffled = tf.data.Dataset.from_tensor_slices(x).shuffle(12, seed=distribute.epoch_seed(3, epoch))
        return shuffled.batch(4).map(lambda b: (b, b))

    model = _Recorder()
    model.compile("sgd", "mse", run_eagerly=True)
    model.fit(distribute.epoch_stream(one_pass, 3, first_epoch), steps_per_epoch=3, epochs=4,
              initial_epoch=first_epoch, verbose=0)
    whole = [b[:, 0].tolist() for b, _ in distribute.epoch_stream(one_pass, 3).take(12).as_numpy_iterator()]
    assert model.seen == whole[3 * first_epoch:]
    assert len({tuple(sum(whole[i:i + 3], [])) for i in range(0, 12, 3)}) == 4


def test_a_pass_of_another_length_is_an_error_not_a_shifted_epoch():
    stream = distribute.epoch_stream(lambda epoch: tf.data.Dataset.range(5).batch(2), 2)
    with pytest.raises(tf.errors.FailedPreconditionError, match="expected to contain 2"):
        list(stream.take(4).as_numpy_iterator())
    empty = distribute.epoch_stream(lambda epoch: tf.data.Dataset.range(0).batch(2), 1)
    with pytest.raises(tf.errors.FailedPreconditionError):  # not an endless spin
        list(empty.take(1).as_numpy_iterator())


@pytest.mark.parametrize("kwargs", [{"batches": 0}, {"batches": 1.5}, {"first_epoch": -1}, {"first_epoch": True}])
def test_epoch_stream_refuses_bad_counts(kwargs):
    args = {"batches": 1, **kwargs}
    with pytest.raises(InputError, match="batches|first_epoch"):
        distribute.epoch_stream(lambda epoch: tf.data.Dataset.range(1).batch(1), **args)


@pytest.mark.parametrize("one_pass,message", [
    (None, "`one_pass` must be a function epoch -> tf.data.Dataset. Received: one_pass=None"),
    (lambda epoch: [1, 2], "`one_pass` must return the epoch's tf.data.Dataset. Received: list"),
])
def test_epoch_stream_refuses_a_one_pass_that_gives_no_dataset(one_pass, message):
    # Audit (2026-11-30): a raw TypeError / AttributeError inside tf.data's trace.
    with pytest.raises(InputError) as info:
        distribute.epoch_stream(one_pass, 2)
    assert str(info.value) == message


def test_epoch_seed_is_stateless_and_distinct():
    seeds = [[int(distribute.epoch_seed(s, e)) for e in range(4)] for s in range(3)]
    assert len({v for row in seeds for v in row}) == 12
    assert int(distribute.epoch_seed(np.int64(1), tf.constant(2, tf.int64))) == seeds[1][2]


def test_a_resumed_demo_run_ends_with_the_weights_of_the_uninterrupted_run(tmp_path):
    # A crash in epoch 2 and a rerun: before the epoch stream, the resumed epochs were
    # shuffled as epochs 0 and 1 (max weight difference 0.36 with limit=160). 80 digits:
    # epochs of 4 batches (0.013 apart with that defect), half the eager steps of 160.
    kwargs = dict(epochs=3, limit=80, batch_size=16, verbose=0, seed=1,
                  model_options=dict(filters=4, primary_capsules=2, hidden_capsules=4, pose_size=2))
    demo.train(run_dir=str(tmp_path / "whole"), **kwargs)
    result = cli_helpers.crash_and_resume(demo.train, tmp_path / "resumed", (2, 1), **kwargs)
    assert result["resumed_from_epoch"] == 2
    assert cli_helpers.max_weight_difference(tmp_path / "whole" / "model.keras",
                                             tmp_path / "resumed" / "model.keras") == 0.0


def test_even_batches_without_a_count_works_inside_a_pass():
    # its Python test of the dataset's count failed in traced code ("'batches' is None at
    # the end of the else branch"): passes are traced by flat_map
    def one_pass(epoch):
        ds = tf.data.Dataset.range(7).shuffle(7, seed=distribute.epoch_seed(0, epoch)).batch(3)
        return distribute.even_batches(ds, replicas=2)  # the last batch of 1 goes

    batches = list(distribute.epoch_stream(one_pass, 2).take(4).as_numpy_iterator())
    assert [len(b) for b in batches] == [2, 2, 2, 2]


def test_training_epochs_is_one_redrawn_epoch_or_the_stream_of_seeded_ones():
    calls = []

    def one_pass(pass_seed, redraw):
        calls.append(redraw)
        return tf.data.Dataset.range(6).shuffle(6, seed=pass_seed, reshuffle_each_iteration=redraw).batch(3)

    one_epoch = distribute.training_epochs(one_pass, 7, 2)
    assert calls == [True] and int(one_epoch.cardinality()) == 2
    first, second = (sorted(np.concatenate(list(one_epoch.as_numpy_iterator()))) for _ in range(2))
    assert first == second == list(range(6))
    stream = distribute.training_epochs(one_pass, 7, 2, first_epoch=1)
    assert calls[1:] == [False]  # traced once for every epoch
    epoch_1 = [b.tolist() for b in stream.take(2).as_numpy_iterator()]
    later = distribute.epoch_stream(lambda e: one_pass(distribute.epoch_seed(7, e), False), 2)
    assert epoch_1 == [b.tolist() for b in later.skip(2).take(2).as_numpy_iterator()]


def test_epoch_seed_takes_seeds_of_64_bits_and_more():
    # Seeds of 2**63 and more failed eagerly inside TensorFlow ("out-of-range integer"),
    # of 2**64 and more in a graph too. They are folded into 64 bits, as a graph read
    # those below 2**64.
    wide = [2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 5, 2**64 * 3 + 5, 2**200 + 1]
    seeds = [int(distribute.epoch_seed(s, 1)) for s in wide]
    assert len(set(seeds)) == len(wide)
    assert int(distribute.epoch_seed(np.uint64(2**64 - 1), 1)) == seeds[2]
    # Folding xors the 64-bit words: 2**64 + 5 is seed 1 ^ 5 = 4.
    assert seeds[3] == int(distribute.epoch_seed(1, 1))
    assert seeds[4] == int(distribute.epoch_seed(4, 1))
    stream = distribute.training_epochs(
        lambda seed, first: tf.data.Dataset.range(5).shuffle(5, seed=seed), 2**70, 5, first_epoch=0)
    assert sorted(stream.take(5).as_numpy_iterator()) == [0, 1, 2, 3, 4]
    as_graph = tf.function(lambda: distribute.epoch_seed(2**63, tf.constant(1, tf.int64)))
    assert int(as_graph()) == seeds[1]
