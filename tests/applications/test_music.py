"""JSB Chorales application: piano rolls, padding masks, the RLadder model, learning."""

import keras
import numpy as np
import pytest

from applications import music
from tests.conftest import shared_path

DATA = shared_path("data", "jsb_chorales", "jsb_chorales.json")
TINY = dict(units=(8, 4))


@pytest.fixture(scope="module")
def chorales():
    return music.load_chorales(DATA)


def test_split_counts_and_piano_rolls(chorales):
    assert {s: len(chorales[s]) for s in music.SPLITS} == {"train": 229, "valid": 76, "test": 77}
    assert sum(len(c) for c in chorales["train"]) == 13_807
    chorale = chorales["train"][0]
    roll = music.piano_roll(chorale)
    assert roll.shape == (len(chorale), 88) and roll.dtype == np.float32
    assert set(np.unique(roll)) <= {0.0, 1.0}
    for t, pitches in enumerate(chorale):
        assert sorted(np.flatnonzero(roll[t]) + 21) == sorted(pitches)
    assert music.piano_roll([[21, 108], []]).sum(axis=1).tolist() == [2.0, 0.0]
    with pytest.raises(ValueError, match="outside the piano"):
        music.piano_roll([[20]])
    with pytest.raises(FileNotFoundError, match="JSB"):
        music.load_chorales(DATA.parent / "missing.json")


def test_next_step_arrays_shift_and_mask():
    rolls = [np.eye(88, dtype="float32")[:3], np.eye(88, dtype="float32")[5:6]]
    inputs, targets, mask = music.next_step_arrays(rolls)
    assert inputs.shape == targets.shape == (2, 3, 88) and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert np.all(inputs[:, 0] == 0) and np.array_equal(inputs[0, 1:], targets[0, :2])
    assert targets[1, 1:].sum() == 0
    w_in, w_t, w_m = music.windows(inputs, targets, mask, 2)
    assert w_in.shape == (3, 2, 88)  # the second chorale's empty window is dropped
    assert w_m.tolist() == [[1, 1], [1, 0], [1, 0]]


def test_masked_nll_ignores_padding():
    rng = np.random.default_rng(0)
    y = (rng.uniform(size=(2, 4, 88)) < 0.1).astype("float32")
    logits = rng.normal(size=(2, 4, 88)).astype("float32")
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], "float32")
    loss = music.PianoRollNLL()
    base = float(loss(y, logits, sample_weight=mask))
    garbage_y, garbage_logits = y.copy(), logits.copy()
    garbage_y[mask == 0] = 1.0
    garbage_logits[mask == 0] = -50.0
    assert float(loss(garbage_y, garbage_logits, sample_weight=mask)) == pytest.approx(base, rel=1e-5)
    per_key = np.logaddexp(0, -logits) * y + np.logaddexp(0, logits) * (1 - y)
    expected = (per_key.sum(-1) * mask).sum() / mask.sum()
    assert base == pytest.approx(expected, rel=1e-4)


def test_nll_per_step_matches_the_loss_and_any_length(tmp_path):
    rolls = [music.piano_roll([[60], [62, 64], [], [67]]), music.piano_roll([[48, 55]])]
    model = music.build_model(steps=2, **TINY)  # shorter than the rolls: layers reused
    value = music.nll_per_step(model, rolls)
    inputs, targets, mask = music.next_step_arrays(rolls)
    big = music.build_model(steps=4, **TINY)
    big.set_weights(model.get_weights())
    expected = float(music.PianoRollNLL()(targets, big(inputs), sample_weight=mask))
    assert value == pytest.approx(expected, rel=1e-4)
    assert value == pytest.approx(88 * np.log(2), rel=0.2)  # near chance at initialization


@pytest.mark.parametrize("use_decoder", [True, False])
def test_model_trains_a_step_and_round_trips(tmp_path, chorales, use_decoder):
    rolls = [music.piano_roll(c) for c in chorales["valid"][:4]]
    model = music.compile_model(music.build_model(8, use_decoder=use_decoder, input_dropout=0.1, **TINY))
    ds = music.make_dataset(rolls, batch_size=4, window=8)
    model.fit(ds.take(1), epochs=1, verbose=0)
    path = tmp_path / "music.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    x = next(iter(ds))[0]
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-5)
    assert music.nll_per_step(loaded, rolls) == pytest.approx(music.nll_per_step(model, rolls), rel=1e-5)


def test_learns_something(chorales):
    rolls = [music.piano_roll(c) for c in chorales["train"][:16]]
    model = music.compile_model(music.build_model(8, units=(16, 8)), learning_rate=2e-2)
    ds = music.make_dataset(rolls, 64, window=8)
    before = model.evaluate(ds, verbose=0)
    model.fit(ds, epochs=8, verbose=0)
    after = model.evaluate(ds, verbose=0)
    # chance is 88 log 2 = 61 nats per step; the key frequencies alone bring it far below
    assert after < 0.5 * before, (before, after)
