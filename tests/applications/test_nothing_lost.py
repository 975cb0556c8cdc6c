"""Nothing lost: every application's training epoch holds each training example once (less
what the code documents that it leaves out), splits are disjoint and cover what they claim,
and the scoring passes see every test example once.

Examples are tagged (a value that names them: an index written into the image, a key of a
piano roll) and counted from what the pipelines yield, not from their cardinality.
"""

import collections

import numpy as np
import pytest

from applications import clevr, demo, distribute, music, occluded_mnist, smallnorb, sort_of_clevr, textured_mnist


def _epoch_tags(dataset, tag, batches=None):
    """The tags of the examples of ``dataset`` (its first ``batches`` batches), batch by batch."""
    it = dataset if batches is None else dataset.take(batches)
    return [[int(round(float(t))) for t in np.ravel(tag(batch))] for batch in it]


def _flat(batches):
    return [t for batch in batches for t in batch]


def _once_each(tags, expected):
    counts = collections.Counter(tags)
    assert not [t for t, c in counts.items() if c > 1], f"seen more than once: {counts}"
    assert sorted(tags) == sorted(expected)


# ----------------------------------------------------------------------------- demo


def _demo_data(n=23):
    images = np.broadcast_to(np.arange(n, dtype="float32")[:, None, None, None], (n, 2, 2, 1)).copy()
    return images, np.arange(n) % 10


@pytest.mark.parametrize("hold_out", [False, True])
def test_demo_split_is_disjoint_and_covers_everything(hold_out):
    n = 23
    train, held = demo.split_indices(n, seed=3, hold_out=hold_out)
    assert not set(train) & set(held)
    if hold_out:  # validation comes out of the training part; the test part is untouched
        _, test = demo.split_indices(n, seed=3)
        assert not (set(train) | set(held)) & set(test)
        _once_each([*train, *held, *test], range(n))
    else:
        _once_each([*train, *held], range(n))


def test_demo_epoch_shows_every_training_digit_once_and_reshuffles():
    images, labels = _demo_data()
    train, test = demo.split_indices(len(images), seed=1)
    train_ds, test_ds = demo.make_datasets(images, labels, 4, seed=1)
    first = _flat(_epoch_tags(train_ds, lambda b: b[0][:, 0, 0, 0]))
    second = _flat(_epoch_tags(train_ds, lambda b: b[0][:, 0, 0, 0]))
    _once_each(first, train)
    _once_each(second, train)
    assert first != second  # reshuffled every epoch
    again, _ = demo.make_datasets(images, labels, 4, seed=1)
    assert _flat(_epoch_tags(again, lambda b: b[0][:, 0, 0, 0])) == first  # same seed, same order
    _once_each(_flat(_epoch_tags(test_ds, lambda b: b[0][:, 0, 0, 0])), test)


def test_demo_stream_epochs_each_show_every_digit_once():
    images, labels = _demo_data()
    train, _ = demo.split_indices(len(images), seed=1)
    steps = demo.training_batches(len(images), 4, seed=1)
    stream, _ = demo.make_datasets(images, labels, 4, seed=1, first_epoch=0)
    batches = _epoch_tags(stream, lambda b: b[0][:, 0, 0, 0], 2 * steps)
    epochs = [_flat(batches[:steps]), _flat(batches[steps:])]
    for epoch in epochs:
        _once_each(epoch, train)
    assert epochs[0] != epochs[1]
    resumed, _ = demo.make_datasets(images, labels, 4, seed=1, first_epoch=1)
    assert _flat(_epoch_tags(resumed, lambda b: b[0][:, 0, 0, 0], steps)) == epochs[1]


def test_demo_even_batches_leave_out_at_most_replicas_minus_one():
    images, labels = _demo_data(24)  # 19 training digits: batches 4, 4, 4, 4, 3 -> the 3 cut to 2
    train, _ = demo.split_indices(len(images), seed=0)
    assert len(train) % 4 == 3
    train_ds, _ = demo.make_datasets(images, labels, 4, seed=0, replicas=2)
    batches = _epoch_tags(train_ds, lambda b: b[0][:, 0, 0, 0])
    assert all(len(b) % 2 == 0 for b in batches)
    assert len(batches) == demo.training_batches(len(images), 4, seed=0, replicas=2)
    seen = _flat(batches)
    assert len(set(seen)) == len(seen) and set(seen) <= set(train)
    assert len(train) - len(seen) == 1


# ----------------------------------------------------------------------------- music


def _tagged_rolls(lengths):
    """Roll ``i`` holds key ``i`` at every step and key ``40 + t`` at its step ``t``."""
    rolls = []
    for i, length in enumerate(lengths):
        roll = np.zeros((length, 88), "float32")
        roll[:, i] = 1
        roll[np.arange(length), 40 + np.arange(length)] = 1
        rolls.append(roll)
    return rolls


def _music_tag(batch):
    targets = np.asarray(batch[1])
    roll = np.argmax(targets[:, :, :40].max(axis=1), axis=-1)
    first = np.argmax(targets[:, 0, 40:], axis=-1)  # the window's first step, in its roll
    return roll * 100 + first


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("replicas", [1, 2])
def test_music_epoch_shows_every_window_once(window, replicas):
    lengths = [5, 2, 7, 4, 6, 3, 1]
    rolls = _tagged_rolls(lengths)
    if window is None:
        expected = [i * 100 for i in range(len(lengths))]
    else:
        expected = [i * 100 + s for i, length in enumerate(lengths) for s in range(0, length, window)]
    batch = 2 * replicas + 1 if replicas == 1 else 2 * replicas  # a global batch: per replica x replicas
    ds = music.make_dataset(rolls, batch_size=batch, shuffle=True, seed=2, window=window, replicas=replicas)
    batches = _epoch_tags(ds, _music_tag)
    seen = _flat(batches)
    assert len(batches) == music.training_batches(rolls, batch, window=window, replicas=replicas)
    if replicas == 1:
        _once_each(seen, expected)
        assert _flat(_epoch_tags(ds, _music_tag)) != seen  # reshuffled
    else:
        assert all(len(b) % replicas == 0 for b in batches)
        assert len(set(seen)) == len(seen) and set(seen) <= set(expected)
        assert len(expected) - len(seen) == (len(expected) % batch) % replicas


# ----------------------------------------------------------------------------- textured MNIST


def test_textured_mnist_epoch_shows_every_image_once():
    n = 11
    images = np.broadcast_to(np.arange(n, dtype="float32")[:, None, None, None], (n, 3, 3, 1)).copy()
    data = {"images": images, "labels": np.arange(n) % 3}
    ds = textured_mnist.make_dataset(data, 2, batch_size=4, num_classes=3, shuffle=True, seed=5)
    first = _flat(_epoch_tags(ds, lambda b: b[0][:, 0, 0, 0]))
    _once_each(first, range(n))
    assert _flat(_epoch_tags(ds, lambda b: b[0][:, 0, 0, 0])) != first
    stream = textured_mnist.make_dataset(data, 2, batch_size=4, shuffle=True, seed=5, first_epoch=0)
    steps = distribute.even_batch_count(n, 4)
    both = _epoch_tags(stream, lambda b: b[0][:, 0, 0, 0], 2 * steps)
    _once_each(_flat(both[:steps]), range(n))
    _once_each(_flat(both[steps:]), range(n))


# ----------------------------------------------------------------------------- occluded MNIST


def _sequence_keys(frames):
    return [np.asarray(f).tobytes() for f in frames]


def test_occluded_mnist_epoch_shows_every_sequence_once():
    rng = np.random.default_rng(0)
    digits, labels = rng.random((12, 28, 28)).astype("float32"), np.arange(12) % 10
    data = occluded_mnist.generate(digits, labels, 9, seed=4)
    expected = _sequence_keys(data["frames"])
    assert len(set(expected)) == 9
    ds = occluded_mnist.make_training_dataset(digits, labels, 9, variant="rladder", batch_size=4, seed=4)
    epochs = [[k for b in ds for k in _sequence_keys(b[0])] for _ in range(2)]
    for epoch in epochs:
        assert collections.Counter(epoch) == collections.Counter(expected)
    assert epochs[0] != epochs[1]
    stream = occluded_mnist.make_training_dataset(digits, labels, 9, variant="rladder", batch_size=4, seed=4,
                                                  endless=True)
    steps = occluded_mnist.training_batches(9, 4)
    keys = [_sequence_keys(b[0]) for b in stream.take(2 * steps)]
    for epoch in (keys[:steps], keys[steps:]):
        assert collections.Counter(_flat(epoch)) == collections.Counter(expected)


# ----------------------------------------------------------------------------- smallNORB


def _norb_examples(n, side=8):
    import tensorflow as tf

    values = np.arange(n, dtype="uint8")
    images = np.broadcast_to(values[:, None, None, None], (n, side, side, 1)).copy()
    return tf.data.Dataset.from_tensor_slices(
        {"image": images, "image2": images, "label_category": (np.arange(n) % 5).astype("int64")}
    )


def _norb_tag(batch):
    return np.asarray(batch[0])[:, 0, 0, 0] * 255.0


def test_smallnorb_training_passes_leave_out_only_the_partial_batch():
    n, batch = 23, 5  # 4 whole batches a pass; 3 examples left out (documented)
    examples = _norb_examples(n)
    stream = smallnorb.make_dataset(examples, True, batch_size=batch, image_size=8, padding=2, mixup_alpha=None,
                                    shuffle_buffer=4, seed=7, first_epoch=0)
    per_pass = n // batch
    batches = _epoch_tags(stream, _norb_tag, 2 * per_pass)
    assert all(len(b) == batch for b in batches)
    for one in (_flat(batches[:per_pass]), _flat(batches[per_pass:])):
        assert len(set(one)) == len(one) == per_pass * batch and set(one) <= set(range(n))
    # a resumed stream (epoch 1 of steps_per_epoch 3) starts at batch 3 of the uninterrupted one
    resumed = smallnorb.make_dataset(examples, True, batch_size=batch, image_size=8, padding=2, mixup_alpha=None,
                                     shuffle_buffer=4, seed=7, first_epoch=1, steps_per_epoch=3)
    assert _epoch_tags(resumed, _norb_tag, 4) == batches[3:7]


def test_smallnorb_test_batches_hold_every_example_once():
    examples = _norb_examples(13)
    ds = smallnorb.make_dataset(examples, False, batch_size=4, image_size=8)
    batches = _epoch_tags(ds, _norb_tag)
    assert [len(b) for b in batches] == [4, 4, 4, 1]
    assert _flat(batches) == list(range(13))


# ----------------------------------------------------------------------------- sort-of-CLEVR


def _question_keys(inputs, answers):
    return {np.asarray(inputs["kb"][i]).tobytes() + np.asarray(inputs["question"][i]).tobytes()
            for i in range(len(answers))}


def test_sort_of_clevr_validation_questions_are_not_trained_on():
    inputs, answers = sort_of_clevr.validation_data(40, seed=0)
    validation = _question_keys(inputs, answers)
    trained = set()
    for x, y in sort_of_clevr.make_dataset(batch_size=20, seed=0).take(10):
        trained |= _question_keys(x, y)
    assert len(trained) == 200 and len(validation) == 40
    assert not trained & validation


# ----------------------------------------------------------------------------- text classification


def _tagged_texts(n):
    """Text ``i`` is ``i + 1`` words (several length buckets), its label ``i``."""
    import tensorflow as tf

    texts = [" ".join(["good"] * (i + 1)) for i in range(n)]
    return tf.data.Dataset.from_tensor_slices((tf.constant(texts), tf.constant(np.arange(n, dtype="int32"))))


def test_text_classification_epochs_show_every_text_once():
    from applications.text_classification import data

    n, lookup = 21, data.make_lookup(["good"])
    raw = _tagged_texts(n)
    train = data.make_dataset(raw, lookup, batch_size=4, shuffle=True, seed=3, boundaries=(8, 16))
    first = _flat(_epoch_tags(train, lambda b: b[1]))
    _once_each(first, range(n))
    assert _flat(_epoch_tags(train, lambda b: b[1])) != first
    stream, steps = data.make_dataset(raw, lookup, batch_size=4, shuffle=True, seed=3, boundaries=(8, 16),
                                      first_epoch=0)
    batches = _epoch_tags(stream, lambda b: b[1], 2 * steps)
    _once_each(_flat(batches[:steps]), range(n))
    _once_each(_flat(batches[steps:]), range(n))
    assert _flat(batches[:steps]) != _flat(batches[steps:])
    # scoring: every text once, in order within its bucket, partial batches too
    _once_each(_flat(_epoch_tags(data.make_dataset(raw, lookup, batch_size=4, boundaries=(8, 16)),
                                 lambda b: b[1])), range(n))


def test_text_classification_replicas_lose_at_most_one_partial_batch_per_bucket():
    from applications.text_classification import data

    n, lookup = 21, data.make_lookup(["good"])  # buckets of 7, 8 and 6 texts (lengths 1-7, 8-15, 16-21)
    stream, steps = data.make_dataset(_tagged_texts(n), lookup, batch_size=4, shuffle=True, seed=3,
                                      boundaries=(8, 16), first_epoch=0, replicas=2)
    batches = _epoch_tags(stream, lambda b: b[1], steps)
    assert all(len(b) % 2 == 0 and b for b in batches)
    seen = _flat(batches)
    assert len(set(seen)) == len(seen)
    assert set(range(n)) - set(seen) <= set(range(7)) and len(seen) == n - 1  # the first bucket's odd one


# ----------------------------------------------------------------------------- CLEVR


def _clevr_questions(tmp_path, n_images=5, n_questions=13):
    features = np.broadcast_to(np.arange(n_images, dtype="float16")[:, None, None, None], (n_images, 2, 2, 3))
    path = tmp_path / "features.npy"
    np.save(path, np.ascontiguousarray(features))
    rng = np.random.default_rng(0)
    image_index = rng.integers(0, n_images, n_questions)
    tokens = np.stack([np.arange(n_questions), np.ones(n_questions, int)], axis=1).astype("int32")
    labels = (np.arange(n_questions) % 3).astype("int32")
    labels[[2, 7]] = clevr.UNSEEN_ANSWER
    return str(path), image_index, tokens, labels


def _clevr_tags(ds):
    out = []
    for batch in ds:
        q, f = np.asarray(batch[0]["question"]), np.asarray(batch[0]["features"])
        out.append([(int(t), int(v)) for t, v in zip(q[:, 0], f[:, 0, 0, 0])])
    return out


def test_clevr_training_drops_only_unknown_answers_and_scoring_keeps_all(tmp_path):
    path, image_index, tokens, labels = _clevr_questions(tmp_path)
    pairs = {(i, int(image_index[i])) for i in range(len(labels))}
    known = {p for p in pairs if labels[p[0]] != clevr.UNSEEN_ANSWER}
    train = clevr.make_dataset(path, image_index, tokens, labels, batch_size=4, shuffle=True, seed=1)
    first = _flat(_clevr_tags(train))
    assert len(first) == len(set(first)) and set(first) == known  # each with its own image's features
    assert _flat(_clevr_tags(train)) != first
    scored = _flat(_clevr_tags(clevr.make_dataset(path, image_index, tokens, labels, batch_size=4,
                                                  drop_unknown=False)))
    assert scored == sorted(pairs)


def test_clevr_held_out_images_are_disjoint_and_cover_the_split():
    rng = np.random.default_rng(1)
    split = {"image_index": rng.integers(0, 6, 30), "tokens": np.arange(30)[:, None], "labels": np.arange(30),
             "features_path": "x"}
    kept, held = clevr.split_by_image(split, 0.3, seed=2)
    assert not set(kept["image_index"]) & set(held["image_index"])
    _once_each([*kept["tokens"][:, 0], *held["tokens"][:, 0]], range(30))


@pytest.mark.graph_mode  # (the strategy's replicas run traced, as in test_distribute.py)
def test_clevr_scores_every_question_once_and_the_same_on_two_replicas(tmp_path):
    import keras

    from tests.harness import two_cpu_strategy

    path, image_index, tokens, labels = _clevr_questions(tmp_path)  # 13 questions: batches 4, 4, 4, 1
    strategy = distribute.resolve_strategy(two_cpu_strategy())

    def model_in(scope):
        with scope.scope():
            question = keras.Input((2,), name="question", dtype="int32")
            features = keras.Input((2, 2, 3), name="features")
            joined = keras.layers.Concatenate()([keras.layers.Flatten()(features),
                                                 keras.ops.cast(question, "float32")])
            model = keras.Model({"question": question, "features": features}, keras.layers.Dense(3)(joined))
            return clevr.compile_model(model)

    keras.utils.set_random_seed(0)
    mirrored, single = model_in(strategy), model_in(distribute.make_strategy("default"))
    single.set_weights(mirrored.get_weights())
    data = clevr.make_dataset(path, image_index, tokens, labels, batch_size=4, drop_unknown=False)
    figures = single.evaluate(data, verbose=0)
    # by hand: the mean cross-entropy over the questions of known answer, the accuracy over all
    features = np.broadcast_to(image_index[:, None, None, None].astype("float32"), (len(labels), 2, 2, 3))
    logits = np.asarray(single.predict({"question": tokens, "features": features}, verbose=0), "float64")
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    known = labels != clevr.UNSEEN_ANSWER
    expected_loss = -np.mean(log_p[known, labels[known]])
    expected_accuracy = np.mean(np.argmax(logits, -1) == labels)
    np.testing.assert_allclose(figures, [expected_loss, expected_accuracy], rtol=1e-5)
    np.testing.assert_allclose(mirrored.evaluate(distribute.distribute_dataset_options(data), verbose=0), figures,
                               rtol=1e-5)


# ----------------------------------------------------------------------------- MNIST digit splits


def _digit_tags(digits):
    images = np.asarray(digits[0], "float64")
    scale = 255.0 if images.max() <= 1.0 else 1.0
    return [int(round(v)) for v in images.reshape(len(images), -1)[:, 0] * scale]


def test_mnist_training_validation_and_test_digits_are_disjoint(tmp_path):
    from tests.applications.mnist_folders import write_idx

    n = 30
    write_idx(tmp_path, "t10k", np.broadcast_to(np.arange(n, dtype="uint8")[:, None, None], (n, 28, 28)),
              np.arange(n) % 10)
    # textured MNIST: the t10k digits cut 80/20, the training part 4:1 into training and validation
    train, test = textured_mnist._train_test_digits(str(tmp_path), seed=3)
    kept, valid = textured_mnist._held_out_digits(train)
    _once_each(_digit_tags(kept) + _digit_tags(valid) + _digit_tags(test), range(n))
    assert len(_digit_tags(test)) == 6 and len(_digit_tags(valid)) == 5
    # occluded MNIST: the same cut, and a fifth of the training digits held out
    train, test = occluded_mnist._train_test_digits("idx", str(tmp_path), seed=3)
    kept, valid = occluded_mnist._hold_out(train, seed=3)
    _once_each(_digit_tags(kept) + _digit_tags(valid) + _digit_tags(test), range(n))


# ----------------------------------------------------------------------------- SST


def _embedded_texts(n):
    from applications import sst

    lengths = 1 + np.arange(n) % 4
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    states = np.repeat(np.arange(n, dtype="float32"), lengths)[:, None, None]  # every token of text i holds i
    return sst.EmbeddedTexts(states, starts, lengths), lengths


def _sst_tag(batch):
    x = np.asarray(batch[0]["embeddings"])[:, :, 0, 0]
    mask = np.asarray(batch[0]["mask"])
    assert np.all(x[mask == 0] == 0) and np.all(x == x[:, :1] * mask)  # each row is one text, padded
    return x[:, 0]


@pytest.mark.parametrize("replicas", [1, 2])
def test_sst_epochs_show_every_text_once(replicas):
    from applications import sst

    n = 13
    embedded, lengths = _embedded_texts(n)
    labels = np.arange(n) % 3
    stream = sst.training_dataset(embedded, labels, 3, batch_size=4, mixup_alpha=None, seed=2, replicas=replicas,
                                  first_epoch=0)
    steps = distribute.even_batch_count(n, 4, replicas)
    batches = _epoch_tags(stream, _sst_tag, 2 * steps)
    epochs = [_flat(batches[:steps]), _flat(batches[steps:])]
    if replicas == 1:
        for epoch in epochs:
            _once_each(epoch, range(n))
    else:
        for epoch in epochs:  # 13 = 4 + 4 + 4 + 1: the lone one is left out
            assert len(epoch) == len(set(epoch)) == n - 1
    assert epochs[0] != epochs[1]
    scored = _flat(_epoch_tags(sst.make_dataset(embedded, labels, 3, batch_size=4), _sst_tag))
    assert scored == list(range(n))


@pytest.mark.graph_mode  # (the strategy's replicas run traced, as in test_distribute.py)
def test_sst_accuracy_scores_every_text_once_and_the_same_on_two_replicas():
    import keras

    from applications import sst
    from tests.harness import two_cpu_strategy

    n = 13  # batches of 4: the last holds one text, which one replica alone scores
    embedded, _ = _embedded_texts(n)
    labels = np.array([0, 1, 2] * 4 + [1])
    strategy = distribute.resolve_strategy(two_cpu_strategy())

    def model_in(scope):
        with scope.scope():
            x = keras.Input((None, 1, 1), name="embeddings")
            mask = keras.Input((None,), name="mask")
            first = keras.layers.Flatten()(keras.layers.Lambda(lambda t: t[:, 0])(x))  # the text's index
            # class (index % 3) scores highest: index 0..12 -> a one-hot of index mod 3, as logits
            logits = keras.layers.Lambda(
                lambda i: keras.ops.one_hot(keras.ops.cast(keras.ops.mod(i[:, 0], 3.0), "int32"), 3))(first)
            return keras.Model({"embeddings": x, "mask": mask}, logits)

    single = sst.accuracy(model_in(distribute.make_strategy("default")), embedded, labels, batch_size=4)
    mirrored = sst.accuracy(model_in(strategy), embedded, labels, batch_size=4)
    expected = np.mean(np.arange(n) % 3 == labels)  # 12 of 13 right
    assert single == pytest.approx(expected) and mirrored == pytest.approx(expected)


@pytest.mark.graph_mode  # (the strategy's replicas run traced, as in test_distribute.py)
@pytest.mark.parametrize("n", [5, 1])
def test_occluded_mnist_error_counts_every_sequence_once_on_two_replicas(n):
    import keras

    from tests.harness import two_cpu_strategy

    # sequence i's frames all hold i; the model guesses digit (i mod 10); labels: the first right, others not
    frames = np.broadcast_to(np.arange(n, dtype="float32")[:, None, None, None, None],
                             (n, occluded_mnist.NUM_FRAMES, 4, 4, 1)).copy()
    labels = np.arange(n) % 10
    labels[1:] = (labels[1:] + 1) % 10
    data = {"frames": frames, "labels": labels}
    strategy = distribute.resolve_strategy(two_cpu_strategy())

    def model_in(scope):
        with scope.scope():
            x = keras.Input(frames.shape[1:])
            index = keras.layers.Lambda(lambda t: t[:, 0, 0, 0, 0])(x)
            digit = keras.layers.Lambda(
                lambda i: keras.ops.one_hot(keras.ops.cast(keras.ops.mod(i, 10.0), "int32"), 10))(index)
            return keras.Model(x, {"digit": digit})

    expected = (n - 1) / n
    for scope in (distribute.make_strategy("default"), strategy):
        assert occluded_mnist.classification_error(model_in(scope), data, batch_size=4) == pytest.approx(expected)


@pytest.mark.graph_mode  # (the strategy's replicas run traced, as in test_distribute.py)
def test_music_nll_per_step_counts_every_real_step_once_on_two_replicas():
    import keras

    from tests.harness import two_cpu_strategy

    rolls = _tagged_rolls([5, 2, 7, 4, 6])  # batches of 4: the last holds one chorale
    inputs, targets, mask = music.next_step_arrays(rolls)
    strategy = distribute.resolve_strategy(two_cpu_strategy())

    def model_in(scope):
        with scope.scope():
            x = keras.Input((None, 88))
            return music.compile_model(keras.Model(x, keras.layers.Dense(88)(x)))

    keras.utils.set_random_seed(0)
    mirrored, single = model_in(strategy), model_in(distribute.make_strategy("default"))
    single.set_weights(mirrored.get_weights())
    logits = np.asarray(single.predict(inputs, verbose=0), "float64")
    nll = (np.logaddexp(0, -logits) * targets + np.logaddexp(0, logits) * (1 - targets)).sum(-1)
    expected = (nll * mask).sum() / mask.sum()
    data = music.make_dataset(rolls, batch_size=4)
    for model in (single, mirrored):
        scores = model.evaluate(distribute.distribute_dataset_options(data), verbose=0, return_dict=True)
        assert scores["nll_per_step"] == pytest.approx(expected, rel=1e-5)


def test_clevr_cache_holds_every_image_and_question_once(tmp_path):
    import keras
    import tensorflow_datasets as tfds

    size = 32
    x = keras.Input((size, size, 3))
    extractor = keras.Model(x, keras.layers.Reshape((1, 1, 3))(keras.layers.GlobalAveragePooling2D()(x)))
    with tfds.testing.mock_data(num_examples=5):  # batches of 2: the last holds one image
        features_path, questions_path = clevr.cache_split("train", str(tmp_path / "cache"), str(tmp_path / "tfds"),
                                                          image_size=size, weights=None, extractor=extractor,
                                                          batch_size=2, verbose=0)
        expected_features, expected_questions = [], []
        for i, example in enumerate(clevr.load_split("train", str(tmp_path / "tfds"))):
            image = clevr._preprocess(example["image"], size)
            expected_features.append(np.asarray(extractor(image[None]))[0])
            qa = example["question_answer"]
            count = min(len(qa["question"]), len(qa["answer"]))
            expected_questions += [(i, q.decode()) for q in qa["question"][:count].numpy()]
    assert len(expected_questions) > 5 and len({f.tobytes() for f in expected_features}) == 5
    features = np.load(features_path)
    np.testing.assert_allclose(features.astype("float32"), np.stack(expected_features), rtol=1e-2, atol=1e-2)
    image_index, questions, _ = clevr.question_table(questions_path)
    assert list(zip(image_index.tolist(), questions.tolist())) == expected_questions
