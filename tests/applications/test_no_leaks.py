"""The applications' models cannot cheat: no look at the future, at the target, at the
padding, at the rest of the batch or at the test split.

A leak would make the published figures wrong (a next-step model that reads step
``t + 1``, a test digit among the training sequences), so each property is checked
directly, on tiny models with weights moved off their initial values (so that no
output is trivially constant), and each check can fail: the outputs that may depend
on the changed inputs are checked to change.
"""

import hashlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from applications import music, sst, sst_trees, smallnorb
from applications import occluded_mnist as om
from applications import textured_mnist as tm
from applications.text_classification import data as tc_data
from applications.text_classification import model as tc_model
from applications.text_classification import recipe as tc_recipe
from tests.conftest import shared_path

MNIST = shared_path("data", "mnist")
CHORALES = shared_path("data", "jsb_chorales", "jsb_chorales.json")


def _jittered(model, seed=0, scale=0.3):
    """``model`` with every weight moved by normal noise (zeros-initialised kernels too)."""
    rng = np.random.default_rng(seed)
    model.set_weights([w + rng.normal(scale=scale, size=w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def _numpy(outputs):
    if isinstance(outputs, dict):
        return {k: np.asarray(v) for k, v in outputs.items()}
    return np.asarray(outputs)


# ------------------------------------------------------------------------- music
def _music_models():
    keras.utils.set_random_seed(3)
    return {
        "gated": _jittered(music.build_model(6, units=(8, 4)), 1),
        "lstm": _jittered(music.build_model(6, units=(6,), encoder="lstm"), 2),
        "hierarchical": _jittered(music.build_model(6, units=(6, 4), use_decoder=False), 3),
        "nade": _jittered(music.build_model(6, units=(6,), readout="nade", nade_units=5), 4),
    }


@pytest.fixture(scope="module")
def music_models():
    return _music_models()


def _music_call(model, rolls, targets):
    return np.asarray(model({"rolls": rolls, "targets": targets} if music.is_autoregressive(model) else rolls))


@pytest.mark.parametrize("kind", ["gated", "lstm", "hierarchical", "nade"])
def test_music_output_t_reads_the_rolls_up_to_t_only_and_not_the_rest_of_the_batch(music_models, kind):
    # output t predicts the roll of step t + 1 (target t) from inputs 0..t, that is from
    # the rolls of steps < t + 1; a NADE also reads target t's lower keys (teacher forcing)
    model = music_models[kind]
    rng = np.random.default_rng(5)
    inputs = (rng.random((3, 6, music.NUM_KEYS)) < 0.15).astype("float32")
    targets = (rng.random((3, 6, music.NUM_KEYS)) < 0.15).astype("float32")
    base = _music_call(model, inputs, targets)
    for t in range(5):
        later_inputs, later_targets = inputs.copy(), targets.copy()
        later_inputs[:, t + 1 :] = 1 - later_inputs[:, t + 1 :]
        later_targets[:, t + 1 :] = 1 - later_targets[:, t + 1 :]
        out = _music_call(model, later_inputs, later_targets)
        np.testing.assert_array_equal(out[:, : t + 1], base[:, : t + 1])
        assert np.abs(out[:, t + 1 :] - base[:, t + 1 :]).max() > 1e-3  # the later outputs do read them
    # a roll scored alone or beside others: the same logits (up to the matmuls' rounding)
    for i in range(3):
        np.testing.assert_allclose(_music_call(model, inputs[i : i + 1], targets[i : i + 1]), base[i : i + 1],
                                   rtol=1e-5, atol=1e-5)


def test_key_nade_logit_of_key_j_reads_neither_key_j_nor_the_keys_above():
    # the inclusive cumsum minus key j's own term left its rounding in logit j: flipping
    # key j moved logit j by an ulp (6e-8 here), so the keys' product was not exactly a
    # distribution over the rolls of the step
    keras.utils.set_random_seed(0)
    layer = music.KeyNADE(5, output_initializer="glorot_uniform")
    rng = np.random.default_rng(1)
    keys = music.NUM_KEYS
    z = rng.normal(size=(4, keys)).astype("float32")
    y = (rng.random((4, keys)) < 0.3).astype("float32")
    base = np.asarray(layer([z, y]))
    for j in range(keys):
        flipped = y.copy()
        flipped[:, j:] = 1 - flipped[:, j:]
        out = np.asarray(layer([z, flipped]))
        np.testing.assert_array_equal(out[:, : j + 1], base[:, : j + 1], err_msg=f"key {j}")
        if j + 1 < keys:
            assert np.abs(out[:, j + 1 :] - base[:, j + 1 :]).max() > 1e-4  # the keys above do read key j
    targets = tf.constant(y)
    weights = rng.normal(size=(4, keys)).astype("float32")
    for j in (0, 1, 40, keys - 1):
        with tf.GradientTape() as tape:
            tape.watch(targets)
            chosen = tf.reduce_sum(layer([z, targets])[:, : j + 1] * weights[:, : j + 1])
        gradient = tape.gradient(chosen, targets).numpy()
        assert np.all(gradient[:, j:] == 0), j  # exactly zero, not small
        if j:
            assert np.abs(gradient[:, :j]).max() > 0


def test_music_windows_pair_every_input_with_the_roll_before_its_target():
    chorales = music.load_chorales(CHORALES)
    rolls = [music.piano_roll(c[:n]) for c, n in zip(chorales["train"], (9, 5, 7), strict=False)]
    ds = music.make_dataset(rolls, batch_size=2, window=3, targets_as_input=True)
    windows = list(ds.as_numpy_iterator())
    inputs = np.concatenate([w[0]["rolls"] for w in windows])
    fed = np.concatenate([w[0]["targets"] for w in windows])
    targets = np.concatenate([w[1] for w in windows])
    mask = np.concatenate([w[2] for w in windows])
    np.testing.assert_array_equal(fed, targets)  # the NADE's teacher forcing: the rolls it predicts
    # the windows of each roll, in order: 3 + 2 + 3 of them
    expected_inputs, expected_targets, expected_mask = [], [], []
    for roll in rolls:
        steps = -(-len(roll) // 3) * 3
        padded = np.zeros((steps, music.NUM_KEYS), "float32")
        padded[: len(roll)] = roll
        previous = np.concatenate([np.zeros((1, music.NUM_KEYS), "float32"), padded[:-1]])
        real = (np.arange(steps) < len(roll)).astype("float32")
        for k in range(0, steps, 3):
            expected_inputs.append(previous[k : k + 3])
            expected_targets.append(padded[k : k + 3])
            expected_mask.append(real[k : k + 3])
    np.testing.assert_array_equal(inputs, expected_inputs)
    np.testing.assert_array_equal(targets, expected_targets)
    np.testing.assert_array_equal(mask, expected_mask)


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -np.asarray(x, "float64"))


def test_music_scores_are_the_exact_nll_of_the_real_steps_whatever_the_padding(music_models):
    chorales = music.load_chorales(CHORALES)
    rolls = [music.piano_roll(c[:n]) for c, n in zip(chorales["test"], (7, 3, 5), strict=False)]
    for kind in ("gated", "nade"):
        model = music_models[kind]
        # numpy: each roll alone, its own length, no padding
        total, steps = 0.0, 0
        for roll in rolls:
            previous = np.concatenate([np.zeros((1, music.NUM_KEYS), "float32"), roll[:-1]])[None]
            logits = music._with_steps(model, len(roll))
            z = _music_call(logits, previous, roll[None]).astype("float64")[0]
            total -= (roll * _log_sigmoid(z) + (1 - roll) * _log_sigmoid(-z)).sum()
            steps += len(roll)
        expected = total / steps
        assert music.nll_per_step(model, rolls, batch_size=2) == pytest.approx(expected, rel=1e-5)
        # the metric of evaluate on the padded whole chorales, and the loss of the one batch
        compiled = music.compile_model(music._with_steps(model, 7))
        scores = compiled.evaluate(music.make_dataset(rolls, batch_size=3, targets_as_input=kind == "nade"),
                                   verbose=0, return_dict=True)
        assert scores["nll_per_step"] == pytest.approx(expected, rel=1e-5)
        assert scores["loss"] == pytest.approx(expected, rel=1e-5)


def test_piano_roll_nll_ignores_whatever_padded_steps_hold():
    rng = np.random.default_rng(2)
    rolls = (rng.random((2, 4, 5)) < 0.4).astype("float32")
    logits = rng.normal(size=(2, 4, 5)).astype("float32")
    weights = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], "float32")
    real = weights > 0
    per_step = -(rolls * _log_sigmoid(logits) + (1 - rolls) * _log_sigmoid(-logits)).sum(-1)
    expected = per_step[real].mean()
    garbage_rolls, garbage_logits = rolls.copy(), logits.copy()
    garbage_rolls[~real] = 7.0  # no roll value: counted, it would be refused or NaN
    garbage_logits[~real] = np.array([np.nan, np.inf, -np.inf, 1e30, 3.0], "float32")
    # (a NaN or infinite logit at a padded step made the loss NaN: 0 * NaN)
    gradients = []
    for y, z in ((rolls, logits), (garbage_rolls, garbage_logits)):
        z = tf.Variable(z)
        with tf.GradientTape() as tape:
            loss = music.PianoRollNLL()(y, z, sample_weight=weights)
        assert float(loss) == pytest.approx(expected, rel=1e-6)
        gradients.append(tape.gradient(loss, z).numpy())
        traced = tf.function(lambda y, z: music.PianoRollNLL()(y, z, sample_weight=weights))
        assert float(traced(tf.constant(y), z)) == pytest.approx(expected, rel=1e-6)
        z = z.numpy()
        metric = music.PianoRollNLLPerStep()
        metric.update_state(y, z, sample_weight=weights)
        assert float(metric.result()) == pytest.approx(expected, rel=1e-6)
    np.testing.assert_array_equal(gradients[1], gradients[0])
    assert np.all(gradients[0][~real] == 0) and np.abs(gradients[0][real]).min() > 0


def _windows(rolls, first_epoch, transpose):
    ds = music.make_dataset(rolls, batch_size=3, window=4, shuffle=True, seed=4, transpose=transpose,
                            first_epoch=first_epoch)
    if first_epoch is not None:
        ds = ds.take(2 * music.training_batches(rolls, 3, window=4))
    return np.concatenate([np.concatenate([b[0], b[1], b[2][..., None]], -1) for b in ds.as_numpy_iterator()])


def test_music_transpositions_run_in_parallel_and_stay_those_of_the_seed():
    chorales = music.load_chorales(CHORALES)
    rolls = [music.piano_roll(c[:n]) for c, n in zip(chorales["train"], (13, 9, 17, 6, 11), strict=False)]
    keys = music.NUM_KEYS
    for first_epoch in (None, 0, 3):
        drawn = _windows(rolls, first_epoch, 5)
        np.testing.assert_array_equal(drawn, _windows(rolls, first_epoch, 5))  # the seed's draws, every time
        # every window is the window the same shuffle put there, moved along the keys
        untransposed = _windows(rolls, first_epoch, 0)
        assert drawn.shape == untransposed.shape
        moved = 0
        for window, original in zip(drawn, untransposed, strict=True):
            np.testing.assert_array_equal(window[..., -1], original[..., -1])  # the mask
            pair, plain = (w[..., : 2 * keys].reshape(4, 2, keys) for w in (window, original))
            shifts = [s for s in range(-5, 6) if np.array_equal(np.roll(plain, s, axis=-1), pair)]
            assert shifts, "a window is not a transposition of the window the shuffle put there"
            moved += 0 not in shifts
        assert moved > len(drawn) // 2
    graph = music.make_dataset(rolls, batch_size=3, window=4, shuffle=True, seed=4, transpose=5)
    assert b"ParallelMapDataset" in graph._as_serialized_graph().numpy()  # (note 90: a serial map)


# ------------------------------------------------------------------------- occluded moving MNIST
def _occluded_model(variant, conv_encoder="gatedconv"):
    keras.utils.set_random_seed(5)
    model = om.build_model(variant, num_frames=4, frame_size=8, conv_units=(2, 3), dense_units=4,
                           conv_encoder=conv_encoder)
    return _jittered(model, 6)


@pytest.mark.parametrize("variant,encoder", [("rladder", "gatedconv"), ("rladder", "convlstm"),
                                             ("no_feedback", "conv"), ("hierarchical", "gatedconv"),
                                             ("temporal", "gatedconv")])
def test_occluded_step_t_reads_frames_up_to_t_only_and_not_the_rest_of_the_batch(variant, encoder):
    model = _occluded_model(variant, encoder)
    rng = np.random.default_rng(7)
    frames = rng.random((3, 4, 8, 8, 1)).astype("float32")
    base = _numpy(model(frames))
    for t in range(4):
        changed = frames.copy()
        changed[:, t:] = rng.random((3, 4 - t, 8, 8, 1))
        out = _numpy(model(changed))
        # frames t.. changed: digit_steps before t, and the predictions made before t (of
        # frames 1..t), unchanged; those made at t (of frame t + 1) read frame t
        np.testing.assert_array_equal(out["digit_steps"][:, :t], base["digit_steps"][:, :t])
        assert np.abs(out["digit_steps"][:, t:] - base["digit_steps"][:, t:]).max() > 1e-6
        if "next_frames" in out:
            np.testing.assert_array_equal(out["next_frames"][:, :t], base["next_frames"][:, :t])
            if t < 3:
                assert np.abs(out["next_frames"][:, t] - base["next_frames"][:, t]).max() > 1e-6
    np.testing.assert_array_equal(base["digit"], base["digit_steps"][:, -1])
    for i in range(3):
        alone = _numpy(model(frames[i : i + 1]))
        for key in base:
            np.testing.assert_allclose(alone[key], base[key][i : i + 1], rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def idx_digits():
    return om._train_test_digits("idx", str(MNIST), 0)


def test_occluded_targets_pair_the_prediction_at_t_with_frame_t_plus_one(idx_digits):
    (images, labels), _ = idx_digits
    data = om.generate(images[:20], labels[:20], 6, seed=3, frame_size=16)
    batches = list(om.make_dataset(data, "rladder", batch_size=4).as_numpy_iterator())
    frames = np.concatenate([b[0] for b in batches])
    targets = {k: np.concatenate([b[1][k] for b in batches]) for k in batches[0][1]}
    np.testing.assert_array_equal(frames, data["frames"])
    np.testing.assert_array_equal(targets["next_frames"], data["frames"][:, 1:])  # target t: frame t + 1
    np.testing.assert_array_equal(targets["digit"], data["labels"])
    np.testing.assert_array_equal(targets["digit_steps"], np.repeat(data["labels"][:, None], 5, axis=1))
    # the clean frames move as the positions say, and the bars cover the same columns in every frame
    for n in range(6):
        for t in range(5):
            row, col = data["positions"][n, t]
            assert data["clean"][n, t, ..., 0].sum() == pytest.approx(
                data["clean"][n, t, row : row + om.DIGIT_SIZE, col : col + om.DIGIT_SIZE, 0].sum())
    np.testing.assert_array_equal(data["frames"][..., 0][:, :, data["bars"][0]][:1], 1.0)
    # the augmented stream pairs them the same way, batch by batch
    stream = om.make_training_dataset(images[:20], labels[:20], 6, batch_size=4, seed=1, augment="fresh")
    for frames, targets in stream.as_numpy_iterator():
        np.testing.assert_array_equal(targets["next_frames"], frames[:, 1:])
    assert "next_frames" not in om.targets_for("temporal", data["frames"], data["labels"])


def _digit_hashes(images):
    return {hashlib.sha1(np.ascontiguousarray(image, "float32").tobytes()).hexdigest() for image in images}


def _sequence_digit_hashes(data, size=om.DIGIT_SIZE):
    """The downscaled digit of every sequence, cut from its first clean frame."""
    crops = [data["clean"][n, 0, r : r + size, c : c + size, 0] for n, (r, c) in enumerate(data["positions"][:, 0])]
    return _digit_hashes(crops)


@pytest.mark.parametrize("seed", [0, 3])
def test_occluded_test_and_validation_digits_never_appear_in_training_sequences(seed):
    train_digits, test_digits = om._train_test_digits("idx", str(MNIST), seed)
    assert not _digit_hashes(train_digits[0]) & _digit_hashes(test_digits[0])  # (the shared t10k: no duplicates)
    kept, held_out = om._hold_out(train_digits, seed)
    assert len(kept[0]) + len(held_out[0]) == len(train_digits[0])
    assert not _digit_hashes(kept[0]) & _digit_hashes(held_out[0])
    assert _digit_hashes(held_out[0]) <= _digit_hashes(train_digits[0])
    small = {name: _digit_hashes(om.downscale(digits[0])) for name, digits in
             (("train", train_digits), ("test", test_digits), ("kept", kept), ("held_out", held_out))}
    for hold_out, train_set, other_set in ((False, "train", "test"), (True, "kept", "held_out")):
        train, other = om.make_sequences("idx", str(MNIST), num_train=60, num_test=30, seed=seed, frame_size=16,
                                         hold_out=hold_out)
        seen_in_training = _sequence_digit_hashes(train)
        assert seen_in_training <= small[train_set]
        assert not seen_in_training & small[other_set] and not seen_in_training & small["test"]
        assert _sequence_digit_hashes(other) <= small[other_set]


# ------------------------------------------------------------------------- textured MNIST
def test_textured_segmentation_is_the_digit_under_the_digits_texture(idx_digits):
    (images, labels), _ = idx_digits
    # one digit of each class, so that an image's label names its digit
    firsts = [int(np.flatnonzero(labels == c)[0]) for c in range(10)]
    digits, classes = images[firsts], labels[firsts]
    data = tm.generate(digits, classes, 12, seed=2, texture_set="fixed", bank_size=4, style="smooth")
    angles, periods = tm.texture_bank(4)
    for i in range(12):
        np.testing.assert_array_equal(data["segmentation"][i], (digits[data["labels"][i]] > 0.5).astype("int32"))
        fg, bg = (tm.bank_texture(angles[k], periods[k], 0.0, 28, "smooth") for k in data["kinds"][i])
        expected = np.where(data["segmentation"][i] == 1, fg, bg)
        np.testing.assert_allclose(data["images"][i, ..., 0], expected, atol=1e-6)


def test_textured_test_and_validation_digits_never_make_training_images(monkeypatch):
    drawn = []
    original = tm.generate

    def recording(digits, labels, num_images, **kwargs):
        drawn.append(_digit_hashes(digits))
        return original(digits, labels, num_images, **kwargs)

    monkeypatch.setattr(tm, "generate", recording)
    tm.make_images(str(MNIST), num_train=4, num_test=4, seed=2)
    train, test = drawn
    assert train and test and not train & test
    drawn.clear()
    tm.make_images(str(MNIST), num_train=4, num_test=4, seed=2, hold_out=True)
    tm.validation_images(str(MNIST), num_valid=4, seed=2)
    kept, test_again, valid = drawn
    assert test_again == test and kept < train and valid < train
    assert not kept & valid and not valid & test and len(kept) + len(valid) == len(train)


def _sklearn_ami(segmentation, pi):
    from sklearn.metrics import adjusted_mutual_info_score

    groups = np.argmax(pi[..., 0], axis=1)  # [b, H, W]
    return float(np.mean([adjusted_mutual_info_score(s.ravel(), g.ravel()) for s, g in zip(segmentation, groups)]))


def test_textured_ami_is_the_mean_over_images_of_the_ami_of_argmax_pi(idx_digits):
    (images, labels), _ = idx_digits
    data = tm.generate(images[:30], labels[:30], 5, seed=1)
    keras.utils.set_random_seed(2)
    model = _jittered(tm.build_model(n_groups=2, n_iters=2, conv_units=2, dense_units=4), 3, 0.5)
    out = _numpy(model.predict(data["images"], batch_size=2, verbose=0))
    pi = tm.assignments(out)
    np.testing.assert_allclose(pi.sum(axis=2), 1.0, atol=1e-5)  # the masks, not the means
    scores = tm.evaluate_iterations(model, data, batch_size=2)
    assert scores["ami"] == pytest.approx([_sklearn_ami(data["segmentation"], pi[:, t]) for t in range(2)], abs=1e-9)
    # the true masks score 1; the same masks transposed (pixels out of line) do not
    truth = np.stack([data["segmentation"], 1 - data["segmentation"]], axis=1)[:, None, ..., None]
    mixture = np.concatenate([np.zeros_like(truth), truth], -1).astype("float32")
    assert tm._score_iterations({"mixture": mixture}, data)["ami"] == [pytest.approx(1.0)]
    crossed = {"mixture": np.swapaxes(mixture, 3, 4)}
    assert tm._score_iterations(crossed, data)["ami"][0] < 0.9
    for i in range(2):  # an image scored alone or beside others: the same masks
        alone = tm.assignments(_numpy(model(data["images"][i : i + 1])))
        np.testing.assert_allclose(alone, pi[i : i + 1], atol=1e-5)


# ------------------------------------------------------------------------- text classification and SST
def _padded(rows, length):
    out = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@pytest.mark.parametrize("routing,embedding,gru", [("kmeans", "compositional", "projected"),
                                                   ("dynamic", "standard", "keras"),
                                                   ("linear", "compositional", "projected")])
def test_text_scores_do_not_depend_on_padding_or_batch(routing, embedding, gru):
    keras.utils.set_random_seed(4)
    extra = {} if routing == "linear" else dict(capsule_dim=4, class_capsule_dim=4)
    model = tc_model.build_model(40, 3, routing=routing, embedding=embedding, embedding_dim=6, num_codebooks=2,
                                 gru_units=8, gru=gru, **extra)
    rng = np.random.default_rng(0)
    texts = [rng.integers(2, 40, n) for n in (5, 12, 2, 9)]
    batch = np.asarray(model(_padded(texts, 12)))
    assert np.abs(batch - batch[:1]).max() > 1e-6  # the texts are told apart
    for i, text in enumerate(texts):
        for length in (len(text), 30):
            np.testing.assert_allclose(np.asarray(model(_padded([text], length))), batch[i : i + 1],
                                       rtol=1e-5, atol=1e-6)


def _tree(label, words):
    return f"({label} " + " ".join(f"({label} {w})" for w in words) + ")"


def test_text_classification_reads_its_vocabulary_from_the_training_trees_only(tmp_path):
    splits = {"train": [["alpha", "good"], ["beta", "fine"], ["alpha", "bad"]],
              "dev": [["gamma", "good"]], "test": [["omega", "bad"], ["omega", "sigma"]]}
    for split, sentences in splits.items():
        (tmp_path / f"{split}.txt").write_text("".join(_tree(i % 5, s) + "\n" for i, s in enumerate(sentences)))
    data = tc_recipe.prepare_data("sst5", str(tmp_path), batch_size=2, vocab_size=50, phrases=True)
    assert set(data["vocabulary"]) <= {w for s in splits["train"] for w in s}
    texts = [t.decode() for t, _ in data["train_texts"].as_numpy_iterator()]
    assert texts and not any(w in t for t in texts for w in ("gamma", "omega", "sigma"))
    test_ids = np.concatenate([x.ravel() for x, _ in data["test"].as_numpy_iterator()])
    assert set(test_ids) <= {tc_data.PAD_ID, tc_data.OOV_ID} | {data["lookup"](["bad"]).numpy()[0]}
    assert [len(sst_trees.load_split(str(tmp_path), s)[0]) for s in ("train", "dev", "test")] == [3, 1, 2]


def test_sst_scores_do_not_depend_on_padding_or_batch():
    keras.utils.set_random_seed(6)
    model = _jittered(sst.build_model(3, 6, num_classes=5, hidden_dim=4, hidden_capsules=4, capsule_dim=2), 1, 0.5)
    rng = np.random.default_rng(3)
    lengths = (4, 9, 2)
    states = rng.normal(size=(3, 9, 3, 6)).astype("float32")
    mask = (np.arange(9)[None] < np.array(lengths)[:, None]).astype("float32")
    states[mask == 0] = 100 * rng.normal(size=(int((mask == 0).sum()), 3, 6))  # whatever padding holds
    batch = np.asarray(model({"embeddings": states, "mask": mask}))
    assert np.abs(batch - batch[:1]).max() > 1e-4
    for i, n in enumerate(lengths):
        alone = np.asarray(model({"embeddings": states[i : i + 1, :n], "mask": mask[i : i + 1, :n]}))
        np.testing.assert_allclose(alone, batch[i : i + 1], rtol=1e-4, atol=1e-5)
    # the cache's padded batches hold each text's own states, the mask its tokens
    embedded = sst.EmbeddedTexts.from_offsets(np.concatenate([states[i, :n] for i, n in enumerate(lengths)]),
                                              np.concatenate([[0], np.cumsum(lengths)]))
    x, m = embedded.padded_batch([2, 0])
    np.testing.assert_array_equal(m, mask[[2, 0], :4])
    np.testing.assert_array_equal(x[1], states[0, :4])
    np.testing.assert_array_equal(x[0, :2], states[2, :2])


def test_sst_encoder_states_of_a_text_do_not_depend_on_the_batch(tmp_path):
    from tests.applications.tiny_data import tiny_bert_preset

    encoder = sst.Encoder.from_preset(tiny_bert_preset(tmp_path / "bert"), max_length=32)
    texts = ["a good film .", "the movie is not bad at all , it is really quite fun to watch", "dull"]
    ids = encoder.tokenize(texts)
    length = max(len(row) for row in ids)
    mask = np.array([[k < len(row) for k in range(length)] for row in ids])
    batch = encoder(_padded(ids, length), mask)
    for i, row in enumerate(ids):
        alone = encoder(np.asarray([row], "int32"), np.ones((1, len(row)), bool))
        np.testing.assert_allclose(alone[0], batch[i, : len(row)], rtol=1e-5, atol=1e-5)


def test_smallnorb_predictions_do_not_depend_on_the_batch():
    keras.utils.set_random_seed(7)
    model = smallnorb.build_model(n_parts=4, d_chns=4, image_size=16, strides=(1, 2), pose_size=2)
    model = _jittered(model, 2, 0.1)
    images = np.random.default_rng(1).random((4, 16, 16, 2)).astype("float32")
    batch = np.asarray(model(images, training=False))
    assert np.all(np.isfinite(batch)) and np.abs(batch - batch[:1]).max() > 1e-6
    for i in range(4):
        np.testing.assert_allclose(np.asarray(model(images[i : i + 1], training=False)), batch[i : i + 1],
                                   rtol=1e-5, atol=1e-5)
