"""Occluded Moving MNIST: the generator, the four models, saving and learning."""

import os
import re
import warnings

import keras
import numpy as np
import pytest

from applications import occluded_mnist as om
from applications.errors import InputError
from applications.mnist_digits import load_idx_digits
from keras_capsules.layers import GatedConvEncoderCell
from tests.conftest import shared_path
from tests.harness import edit_saved_layer_config

TINY = dict(conv_units=(4, 4, 4), dense_units=8)
DIGIT_FALL = 0.85


@pytest.fixture(scope="module")
def digits():
    images, labels = load_idx_digits(shared_path("data", "mnist"))
    return images[:400, ..., 0], labels[:400]


def test_generator_shapes_ranges_bars_and_bouncing(digits):
    data = om.generate(*digits, 64, seed=3)
    frames = data["frames"]
    assert frames.shape == (64, 5, 32, 32, 1) and frames.dtype == np.float32
    assert frames.min() >= 0.0 and frames.max() <= 1.0
    assert data["labels"].shape == (64,) and set(np.unique(data["labels"])) <= set(range(10))
    # the paper's bars: a grid of vertical and horizontal bars 4 pixels wide, 8 visible pixels between them
    column_offsets, row_offsets = set(), set()
    for bars, seq in zip(data["bars"], frames[..., 0]):
        columns, rows = bars.all(axis=0), bars.all(axis=1)  # the bars' columns and rows
        for line in (columns, rows):
            assert line[:12].sum() == 4 and np.array_equal(line[:-12], line[12:])
        assert np.array_equal(bars, columns[None, :] | rows[:, None])  # nothing else is covered
        assert np.all(seq[:, bars] == 1.0)
        column_offsets.add(int(np.argmax(columns[:12] & ~np.roll(columns[:12], 1))))
        row_offsets.add(int(np.argmax(rows[:12] & ~np.roll(rows[:12], 1))))
    assert len(column_offsets) > 4 and len(row_offsets) > 4  # random, drawn apart
    # the clean digit is hidden under the bars
    assert np.any(data["clean"][..., 0][:, :, data["bars"][0]] > 0)
    # bouncing keeps the whole 14x14 digit inside the 32x32 frame
    pos = data["positions"]
    assert pos.min() >= 0 and pos.max() <= 32 - 14
    # the paper's eight velocities: one pixel per frame along one axis, two along the other
    assert set(map(tuple, data["velocities"])) == set(om.PAPER_VELOCITIES)
    # (a bounce reverses the velocity: the steps keep their sizes)
    assert np.all(np.sort(np.abs(np.diff(pos, axis=1)), axis=-1) == [1, 2])
    # the digit's ink lies within its box
    for i in range(8):
        for t in range(5):
            r, c = pos[i, t]
            box = np.zeros((32, 32), bool)
            box[r : r + 14, c : c + 14] = True
            assert data["clean"][i, t, ~box, 0].sum() == 0


def test_trajectory_bounces_off_borders():
    path = om.trajectory((0, 17), (-3, 3), 5, limit=18)
    assert path.tolist() == [[0, 17], [3, 14], [6, 11], [9, 8], [12, 5]]
    assert om.trajectory((16, 0), (3, 0), 3, limit=18).tolist() == [[16, 0], [13, 0], [10, 0]]


def test_generator_keeps_the_vertical_bars_and_compass_motion_of_before(digits):
    # the data of the first 26 benchmark rounds: vertical bars 4 of every 8 columns, the compass directions at 3
    data = om.generate(*digits, 64, seed=3, motion="compass", bars="vertical", bar_spacing=8)
    for bars, seq in zip(data["bars"], data["frames"][..., 0]):
        on = bars[0]
        assert np.all(bars == on[None, :])  # columns only
        assert on.sum() == 16 and on[:8].sum() == 4 and np.array_equal(on[:-8], on[8:])
        assert np.all(seq[:, :, on] == 1.0)
    assert set(map(tuple, data["velocities"])) == {(3 * dy, 3 * dx) for dy, dx in om.DIRECTIONS}
    vertical = data["velocities"][:, 1] == 0
    assert 0 < vertical.sum() < 64  # some move only vertically: their columns behind bars never show
    first, every = om.seen_digits(data, 1)[vertical], om.seen_digits(data)[vertical]
    np.testing.assert_array_equal(every, first)  # the columns the first frame hid stay hidden
    assert np.all(every[..., 1].mean(axis=(1, 2)) <= 4 / 7)  # 6 or 8 of the digit's 14 columns at least
    # the speed scales either motion
    fast = om.generate(*digits, 64, seed=3, speed=2)
    assert set(map(tuple, fast["velocities"])) == {(2 * dy, 2 * dx) for dy, dx in om.PAPER_VELOCITIES}


def test_grid_bars_and_paper_motion_draw_what_vertical_bars_and_compass_motion_draw(digits):
    # the horizontal bars' offsets are an extra draw after the others, the velocity table has the same size:
    # digits, starts, motion (by the table's index) and the columns' bars are those of the old data
    new = om.generate(*digits, 32, seed=5)
    old = om.generate(*digits, 32, seed=5, motion="compass", bars="vertical", bar_spacing=12, speed=1)
    assert np.array_equal(new["labels"], old["labels"]) and np.array_equal(new["positions"][:, 0], old["positions"][:, 0])
    index = {v: i for i, v in enumerate(om.PAPER_VELOCITIES)}
    compass = {v: i for i, v in enumerate(om.DIRECTIONS)}
    assert [index[tuple(v)] for v in new["velocities"]] == [compass[tuple(v)] for v in old["velocities"]]
    assert np.array_equal(new["bars"].all(axis=1), old["bars"][:, 0])  # the same vertical bars
    assert np.array_equal(new["clean"][:, 0], old["clean"][:, 0])
    # and with an affine transform the bars are drawn before it, as the other draws
    affine = om.generate(*digits, 32, seed=5, affine={})
    assert np.array_equal(affine["bars"], new["bars"]) and np.array_equal(affine["positions"], new["positions"])


def test_the_paper_data_shows_nearly_every_digit_over_its_five_frames(digits):
    # the reason for the paper's data: the old data hid half of every vertically moving digit for good
    new, old = om.generate(*digits, 400, seed=0), om.generate(
        *digits, 400, seed=0, motion="compass", bars="vertical", bar_spacing=8)
    fractions = {}
    for name, data in (("new", new), ("old", old)):
        seen = om.seen_digits(data)
        ink = data["clean"][:, 0, ..., 0].sum(axis=(1, 2))
        fractions[name] = seen[..., 0].sum(axis=(1, 2)) / ink
    assert np.mean(fractions["new"] < 0.6) < 0.02 and np.mean(fractions["old"] < 0.6) > 0.15


def test_bar_mask_draws_a_grid_or_vertical_bars():
    grid = om.bar_mask(12, bar_width=2, bar_spacing=6, offset=1, row_offset=4)
    columns = np.array([0, 1, 1, 0, 0, 0] * 2, bool)
    rows = np.array([0, 0, 0, 0, 1, 1] * 2, bool)
    assert np.array_equal(grid, columns[None, :] | rows[:, None])
    vertical = om.bar_mask(12, bar_width=2, bar_spacing=6, offset=1, bars="vertical", row_offset=4)
    assert np.array_equal(vertical, np.broadcast_to(columns[None, :], (12, 12)))
    assert om.bar_mask().mean() == 1 - (20 / 32) ** 2  # the 32x32 grid at offset 0: bars on 12 of 32 lines each way
    for kwargs, message in ((dict(bars="horizontal"), "Received: bars='horizontal'"),
                            (dict(row_offset=1.5), "Received: row_offset=1.5")):
        with pytest.raises(ValueError, match=re.escape(message)):
            om.bar_mask(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(motion="random"), "Received: motion='random'"),
    (dict(motion=None), "Received: motion=None"),
    (dict(bars="none"), "Received: bars='none'"),
    (dict(speed=-1), "Received: speed=-1"),
])
def test_generator_rejects_unknown_motions_and_bar_layouts(digits, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        om.generate(*digits, 2, **kwargs)


def test_generator_is_deterministic_by_seed(digits):
    a, b = om.generate(*digits, 16, seed=1), om.generate(*digits, 16, seed=1)
    c = om.generate(*digits, 16, seed=2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["frames"], c["frames"])


def test_load_digits_rejects_unknown_source():
    with pytest.raises(ValueError, match="source"):
        om.load_digits("nope")


@pytest.mark.parametrize("variant", om.VARIANTS)
def test_variants_build_train_a_step_and_round_trip(tmp_path, digits, variant):
    data = om.generate(*digits, 8, seed=0)
    model = om.compile_model(om.build_model(variant, **TINY))
    out = model(data["frames"][:2])
    assert out["digit"].shape == (2, 10) and out["digit_steps"].shape == (2, 5, 10)
    np.testing.assert_allclose(out["digit"], out["digit_steps"][:, -1])
    if variant in ("rladder", "no_feedback"):
        assert out["next_frames"].shape == (2, 4, 32, 32, 1)
    else:
        assert "next_frames" not in out
    ladder = [lay for lay in model.layers if lay.name == "rladder"]
    if variant == "no_feedback":
        assert not ladder[0].decoder_to_encoder
    if variant == "hierarchical":
        assert not ladder[0].use_decoder
    _train_a_step_and_round_trip(model, data, variant, tmp_path)


def _train_a_step_and_round_trip(model, data, variant, tmp_path):
    """One epoch of ``fit``, then ``.keras`` save and load: the same outputs."""
    model.fit(om.make_dataset(data, variant, batch_size=8), epochs=1, verbose=0)
    path = tmp_path / f"{variant}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    for key, value in model(data["frames"][:2]).items():
        np.testing.assert_allclose(loaded(data["frames"][:2])[key], value, atol=1e-5)


def test_bad_variant():
    with pytest.raises(ValueError, match="variant"):
        om.build_model("ladder")
    with pytest.raises(ValueError, match="classify"):
        om.compile_model(om.build_model("temporal", **TINY), classify="first")


@pytest.mark.parametrize("classify,loss", [("every", "digit_steps"), ("last", "digit")])
def test_classification_cost_on_every_step_or_the_last(digits, classify, loss):
    data = om.generate(*digits, 8, seed=0)
    targets = om.targets_for("rladder", data["frames"], data["labels"])
    np.testing.assert_array_equal(targets["digit_steps"], np.repeat(data["labels"][:, None], 5, 1))
    model = om.compile_model(om.build_model("rladder", **TINY), classify=classify)
    result = model.evaluate(om.make_dataset(data, "rladder", 8), verbose=0, return_dict=True)
    assert f"{loss}_loss" in result
    other = {"digit_steps": "digit", "digit": "digit_steps"}[loss]
    assert f"{other}_loss" not in result


def test_normalization_reaches_the_ladder():
    assert om.build_model("rladder", **TINY).get_layer("rladder").normalization is None
    ladder = om.build_model("no_feedback", normalization="layer", **TINY).get_layer("rladder")
    assert ladder.normalization == "layer"


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_rladder_learns_something(digits):
    keras.utils.set_random_seed(0)
    data = om.generate(*digits, 64, seed=0)
    model = om.compile_model(om.build_model("rladder", **TINY), learning_rate=1e-2)
    ds = om.make_dataset(data, "rladder", batch_size=16)
    before = model.evaluate(ds, verbose=0, return_dict=True)
    # 10 epochs (was 16): after 10 the ratios were 0.66, 0.21 and 0.76 of the costs
    # before and the accuracy 0.38 (2026-12-02), each clear of its threshold below
    model.fit(ds, epochs=10, verbose=0)
    after = model.evaluate(ds, verbose=0, return_dict=True)
    # both costs fall: the frames (static bars, dark background) and the digit; the
    # digit cost on its own (the total was once dominated by the frames while the
    # digit stayed at chance)
    assert after["loss"] < 0.88 * before["loss"], (before, after)
    assert after["next_frames_loss"] < 0.95 * before["next_frames_loss"], (before, after)
    assert after["digit_steps_loss"] < DIGIT_FALL * before["digit_steps_loss"], (before, after)
    assert after["digit_accuracy"] > 0.25, (before, after)  # chance: 0.1


@pytest.mark.parametrize("variant", om.VARIANTS)
def test_feed_forward_normalized_levels_build_train_and_round_trip(tmp_path, digits, variant):
    data = om.generate(*digits, 8, seed=0, frame_size=16)
    model = om.compile_model(
        om.build_model(variant, frame_size=16, conv_encoder="conv", conv_normalization="instance",
                       feedback_initializer="zeros", **TINY)
    )
    if variant == "temporal":  # the same per-frame normalization as the ladder's levels
        assert any(isinstance(lay.layer, keras.layers.GroupNormalization)
                   for lay in model.layers if isinstance(lay, keras.layers.TimeDistributed))
    else:
        ladder = model.get_layer("rladder")
        assert [s["encoder"] for s in ladder.levels] == ["conv"] * 3 + ["gated"]
        assert all(s["normalization"] == "instance" for s in ladder.levels[:3])
    _train_a_step_and_round_trip(model, data, variant, tmp_path)


def test_gated_feed_forward_levels_are_instance_normalized_train_and_round_trip(tmp_path, digits):
    data = om.generate(*digits, 8, seed=0, frame_size=16)
    model = om.compile_model(om.build_model("rladder", frame_size=16, conv_encoder="gatedconv", **TINY))
    ladder = model.get_layer("rladder")
    assert [s["encoder"] for s in ladder.levels] == ["gatedconv"] * 3 + ["gated"]
    assert all(s["normalization"] == "instance" for s in ladder.levels[:3])  # ("auto")
    assert all(isinstance(cell, GatedConvEncoderCell) for cell in ladder.encoders[:3])
    _train_a_step_and_round_trip(model, data, "rladder", tmp_path)


def test_bad_conv_options():
    with pytest.raises(ValueError, match="Received: conv_encoder='lstm'"):
        om.build_model("rladder", conv_encoder="lstm", **TINY)
    with pytest.raises(ValueError, match="Received: conv_normalization='batch'"):
        om.build_model("rladder", conv_encoder="conv", conv_normalization="batch", **TINY)
    with pytest.raises(ValueError, match=r"needs conv_encoder in \('conv', 'gatedconv'\)"):
        om.build_model("rladder", conv_encoder="convlstm", conv_normalization="instance", **TINY)
    with pytest.raises(ValueError, match="Received: frame_size=10"):
        om.generate(np.zeros((2, 28, 28), "float32"), np.zeros(2, "int32"), 2, frame_size=10)


@pytest.mark.parametrize("variant", ["rladder", "temporal"])
def test_default_levels_are_feed_forward_and_normalized_convlstm_is_plain(variant):
    default = om.build_model(variant, **TINY)
    paper = om.build_model(variant, conv_encoder="convlstm", **TINY)
    if variant == "temporal":
        def norms(model):
            return sum(isinstance(lay, keras.layers.TimeDistributed)
                       and isinstance(lay.layer, keras.layers.GroupNormalization) for lay in model.layers)
        assert (norms(default), norms(paper)) == (3, 0)
    else:
        levels = default.get_layer("rladder").levels
        assert [s["encoder"] for s in levels] == ["gatedconv"] * 3 + ["gated"]
        assert [s["normalization"] for s in levels[:3]] == ["instance"] * 3
        assert isinstance(default.get_layer("rladder").feedback_initializer, keras.initializers.Zeros)
        levels = paper.get_layer("rladder").levels
        assert [s["encoder"] for s in levels] == ["convlstm"] * 3 + ["gated"]
        assert all(s["normalization"] is None for s in levels[:3])
    with pytest.raises(ValueError, match="Received: jit_compile=1"):
        om.compile_model(om.build_model("temporal", **TINY), jit_compile=1)
    assert om.compile_model(om.build_model("temporal", **TINY), jit_compile=True).jit_compile


def test_only_the_full_ladder_gets_the_feedback_initializer_and_old_ablations_load(tmp_path):
    # fix22: the no_feedback ladder was given feedback_initializer (which it ignored, and
    # RLadder now refuses without feedback)
    full = om.build_model("rladder", num_frames=2, frame_size=8, **TINY)
    assert isinstance(full.get_layer("rladder").feedback_initializer, keras.initializers.Zeros)
    ablated = om.build_model("no_feedback", num_frames=2, frame_size=8, **TINY)
    assert ablated.get_layer("rladder").feedback_initializer is None
    path = tmp_path / "no_feedback.keras"
    ablated.save(path)
    zeros = keras.initializers.serialize(keras.initializers.Zeros())
    edit_saved_layer_config(path, "rladder", lambda c: c.update(feedback_initializer=zeros))  # as saved before
    with pytest.warns(UserWarning, match="feedback_initializer='Zeros' has no effect"):
        loaded = keras.saving.load_model(path)
    frames = np.random.default_rng(0).uniform(size=(2, 2, 8, 8, 1)).astype("float32")
    for key, value in ablated(frames).items():
        np.testing.assert_allclose(loaded(frames)[key], value, atol=1e-6)


# ------------------------------------------------------------------ augmentation
def test_trajectories_are_the_single_trajectories_stacked():
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 11, (50, 2))
    velocities = np.asarray(om.DIRECTIONS)[rng.integers(0, 8, 50)] * 3
    paths = om.trajectories(starts, velocities, 7, limit=10)
    assert paths.shape == (50, 7, 2) and paths.min() >= 0 and paths.max() <= 10
    for start, velocity, path in zip(starts, velocities, paths):
        # a step by hand: reverse an axis whose next position leaves [0, 10]
        pos, vel = list(start), list(velocity)
        for t in range(7):
            assert path[t].tolist() == pos
            for axis in range(2):
                if not 0 <= pos[axis] + vel[axis] <= 10:
                    vel[axis] = -vel[axis]
                pos[axis] = min(max(pos[axis] + vel[axis], 0), 10)


def test_generator_places_the_same_downscaled_digit_in_every_frame(digits):
    data = om.generate(*digits, 12, seed=4, frame_size=24)
    small = om.downscale(digits[0])
    for clean, pos, label in zip(data["clean"][..., 0], data["positions"], data["labels"]):
        boxes = [clean[t, r : r + 14, c : c + 14] for t, (r, c) in enumerate(pos)]
        assert all(np.array_equal(box, boxes[0]) for box in boxes)
        matches = [i for i in range(len(small)) if np.array_equal(small[i], boxes[0])]
        assert matches and all(digits[1][i] == label for i in matches)


def test_augment_digits_is_deterministic_in_range_and_changes_the_digits(digits):
    images = digits[0][:32]
    a = om.augment_digits(images, seed=7)
    b = om.augment_digits(images, seed=7)
    c = om.augment_digits(images, seed=8)
    assert a.shape == images.shape and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, images)
    assert a.min() >= 0.0 and a.max() <= 1.0
    # small transforms: the ink's amount (scale 0.9-1.1: area 0.81-1.21) and centre stay close
    ink, ink_aug = images.sum((1, 2)), a.sum((1, 2))
    assert np.all(ink_aug > 0.75 * ink) and np.all(ink_aug < 1.3 * ink)
    grid = np.arange(28)

    def centre(x):
        return np.stack([(x.sum(2) * grid).sum(1), (x.sum(1) * grid).sum(1)], -1) / x.sum((1, 2))[:, None]

    assert np.abs(centre(a) - centre(images)).max() < 4.0
    # the identity with every amount at 0, and a pure shift moves the ink by at most the shift
    np.testing.assert_array_equal(om.augment_digits(images, 1, rotation=0, scale=0, shear=0, shift=0), images)
    shifted = om.augment_digits(images, 1, rotation=0, scale=0, shear=0, shift=1.5)
    moved = np.abs(centre(shifted) - centre(images))
    assert moved.max() <= 1.5 + 1e-3 and moved.max() > 0.1
    # a generator as the seed
    np.testing.assert_array_equal(om.augment_digits(images, np.random.default_rng(7)), a)


def test_affine_sequences_keep_labels_and_motion_and_are_deterministic(digits):
    plain = om.generate(*digits, 16, seed=3, frame_size=24)
    aug = om.generate(*digits, 16, seed=3, frame_size=24, affine={"rotation": 10.0})
    again = om.generate(*digits, 16, seed=3, frame_size=24, affine={"rotation": 10.0})
    assert all(np.array_equal(aug[k], again[k]) for k in aug)
    for key in ("labels", "positions", "velocities", "bars"):
        np.testing.assert_array_equal(aug[key], plain[key])
    assert aug["frames"].shape == plain["frames"].shape and aug["frames"].dtype == np.float32
    assert aug["frames"].min() >= 0.0 and aug["frames"].max() <= 1.0
    assert not np.array_equal(aug["clean"], plain["clean"])
    # the ink still lies within the digit's box in every frame
    for i in range(4):
        for t, (r, c) in enumerate(aug["positions"][i]):
            box = np.zeros((24, 24), bool)
            box[r : r + 14, c : c + 14] = True
            assert aug["clean"][i, t, ~box, 0].sum() == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(rotation=-1.0), "Received: rotation=-1.0"),
    (dict(scale=1.0), "Received: scale=1.0"),
    (dict(shear=75.0), "shear=75.0"),
    (dict(shift=float("nan")), "Received: shift=nan"),
    (dict(rotation="10"), "Received: rotation='10'"),
])
def test_augment_digits_rejects_bad_amounts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        om.augment_digits(np.zeros((2, 28, 28), "float32"), **kwargs)


def test_a_shift_of_half_the_digits_size_or_more_is_refused_wherever_the_digits_are_known(digits, tmp_path):
    # helper-177: --affine-shift 100 was taken (every 28x28 digit moved off its image:
    # blank training digits, no error), while rotation, scale and shear are bounded
    message = r"`shift` must be below half the digits' size \(14 px for digits of 28x28\)"
    with pytest.raises(ValueError, match=message + r".*Received: shift=14\.0"):
        om.augment_digits(np.zeros((2, 28, 28), "float32"), shift=14.0)
    with pytest.raises(ValueError, match=r"\(5 px for digits of 10x12\)"):
        om.augment_digits(np.zeros((2, 10, 12), "float32"), shift=5)
    assert om.augment_digits(np.zeros((2, 28, 28), "float32"), shift=13.9).shape == (2, 28, 28)
    with pytest.raises(ValueError, match=message):
        om.generate(*digits, 2, affine={"shift": 100})
    with pytest.raises(ValueError, match=message):  # when the dataset is made, not when read
        om.make_training_dataset(*digits, 4, augment="affine", affine={"shift": 20.0})


def test_bad_augmentation_arguments(digits):
    with pytest.raises(ValueError, match=r"shape \[n, height, width\]"):
        om.augment_digits(np.zeros((28, 28), "float32"))
    with pytest.raises(ValueError, match="Unknown affine augmentation option"):
        om.generate(*digits, 2, affine={"rotate": 5})
    with pytest.raises(ValueError, match="must be a dict"):
        om.generate(*digits, 2, affine="strong")
    with pytest.raises(ValueError, match="Received: augment='mixup'"):
        om.make_training_dataset(*digits, 4, augment="mixup")
    with pytest.raises(ValueError, match="need augment='affine'"):
        om.make_training_dataset(*digits, 4, augment="fresh", affine={"rotation": 5})
    with pytest.raises(ValueError, match="Received: augment='none'"):
        om.train(augment="none")  # checked before any data is read


def _passes(ds, count):
    """The frames and labels of ``count`` passes over a dataset."""
    out = []
    for _ in range(count):
        batches = list(ds)
        out.append((np.concatenate([f for f, _ in batches]), np.concatenate([t["digit"] for _, t in batches])))
    return out


@pytest.mark.parametrize("augment", ["fresh", "affine"])
def test_training_dataset_draws_new_sequences_every_pass(digits, augment):
    ds = om.make_training_dataset(*digits, 20, "rladder", batch_size=8, seed=2, augment=augment, frame_size=24)
    (frames0, labels0), (frames1, labels1) = _passes(ds, 2)
    assert frames0.shape == (20, 5, 24, 24, 1) and frames0.dtype == np.float32
    assert not np.array_equal(frames0, frames1)
    # deterministic for a seed: a new dataset repeats the same stream
    (again0, again_labels0), (again1, _) = _passes(
        om.make_training_dataset(*digits, 20, "rladder", batch_size=8, seed=2, augment=augment, frame_size=24), 2)
    np.testing.assert_array_equal(again0, frames0)
    np.testing.assert_array_equal(again1, frames1)
    # the first pass is generate's sequences for the seed (2, 0); targets as targets_for
    expected = om.generate(*digits, 20, seed=(2, 0), frame_size=24, affine={} if augment == "affine" else None)
    np.testing.assert_array_equal(frames0, expected["frames"])
    np.testing.assert_array_equal(labels0, expected["labels"])
    frames, targets = next(iter(ds))
    assert sorted(targets) == ["digit", "digit_steps", "next_frames"]
    np.testing.assert_array_equal(targets["next_frames"], frames[:, 1:])
    np.testing.assert_array_equal(targets["digit_steps"], np.repeat(targets["digit"][:, None], 5, 1))
    temporal = om.make_training_dataset(*digits, 8, "temporal", batch_size=8, augment=augment, frame_size=24)
    assert sorted(next(iter(temporal))[1]) == ["digit", "digit_steps"]
    # tf.data knows an epoch's batches (20 sequences in batches of 8: 3): fit warned at the end of
    # the first epoch that the input ran out of data, and its progress bar had no total
    assert int(ds.cardinality()) == 3 and len(list(ds)) == 3
    model = om.compile_model(om.build_model("temporal", frame_size=24, **TINY), 1e-3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Your input ran out of data")
        history = model.fit(om.make_training_dataset(*digits, 20, "temporal", batch_size=8, augment=augment,
                                                     frame_size=24), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


def test_training_dataset_without_augmentation_is_the_fixed_shuffled_set(digits):
    ds = om.make_training_dataset(*digits, 24, "temporal", batch_size=8, seed=1, frame_size=24)
    (frames0, labels0), (frames1, _) = _passes(ds, 2)
    fixed = om.generate(*digits, 24, seed=1, frame_size=24)
    key = lambda f: f.reshape(len(f), -1).sum(1)  # noqa: E731
    np.testing.assert_allclose(np.sort(key(frames0)), np.sort(key(fixed["frames"])))
    np.testing.assert_allclose(np.sort(key(frames1)), np.sort(key(frames0)))
    np.testing.assert_array_equal(np.sort(labels0), np.sort(fixed["labels"]))


def test_cli_trains_with_affine_augmentation(tmp_path, capsys):
    import json

    from applications import __main__ as cli
    from tests.conftest import shared_path

    data = ["--data-dir", str(shared_path("data", "mnist"))]
    tiny = ["--num-train", "8", "--num-test", "8", "--conv-units", "4", "--dense-units", "8", "--batch-size", "8",
            "--frame-size", "16", "--variant", "temporal", "--epochs", "2", "--quiet"]
    run_dir = tmp_path / "run"
    code = cli.main(["train", "occluded_mnist", *data, *tiny, "--run-dir", str(run_dir),
                     "--augment", "affine", "--affine-rotation", "5", "--affine-shift", "1"])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["augment"] == "affine" and metrics["epochs_run"] == 2
    assert metrics["updates"] == 2 * om.training_batches(8, 8) == 2  # the optimizer's, one a batch
    assert metrics["predictions_plot"] == str(run_dir / "predictions.png") and (run_dir / "predictions.png").is_file()
    # the error after every frame, split by motion, recorded and drawn
    errors = metrics["test_error_per_step"]
    assert len(errors["all"]) == 5 and errors["all"][-1] == pytest.approx(metrics["test_error"])
    assert errors["counts"]["all"] == 8 and errors["counts"]["sideways"] + errors["counts"]["vertical_only"] == 8
    assert metrics["error_plot"] == str(run_dir / "error_per_step.png") and (run_dir / "error_per_step.png").is_file()
    # affine amounts without --augment affine, and a negative amount: one-line errors, exit code 2
    capsys.readouterr()
    assert cli.main(["train", "occluded_mnist", *data, *tiny, "--run-dir", str(tmp_path / "r2"),
                     "--augment", "fresh", "--affine-shear", "5"]) == 2
    err = capsys.readouterr().err
    assert "need --augment affine. Received: --augment fresh, --affine-shear 5" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "occluded_mnist", "--affine-scale", "-0.1"])
    assert exit_info.value.code == 2 and "non-negative number" in capsys.readouterr().err
    import argparse

    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "train")
    assert om.affine_options(parser.parse_args(["--affine-rotation", "5"])) == {"rotation": 5.0}
    assert om.affine_options(parser.parse_args([])) is None


def test_cli_names_the_affine_options_given_without_augment_affine():
    # the message named train's Python arguments: "Received: --augment None, affine={'rotation': 5.0}"
    import argparse

    from applications.errors import InputError

    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "train")
    args = parser.parse_args(["--affine-rotation", "5", "--affine-shift", "1.5"])
    with pytest.raises(InputError) as info:
        om.run_train(args, strategy=None)
    assert str(info.value) == ("the --affine-* options need --augment affine. Received: --augment none, "
                               "--affine-rotation 5 --affine-shift 1.5")



@pytest.mark.parametrize("options,message", [
    (["--affine-rotation", "95"], "`--affine-rotation` must be below 90 degrees and `--affine-shear` below 60 "
                                  "degrees. Received: --affine-rotation 95.0, --affine-shear 10.0"),
    (["--affine-shift", "100"], "`--affine-shift` must be below half the digits' size (14 px for digits of 28x28): "
                                "a larger one moves the digits' centres off their images. Received: --affine-shift 100.0"),
])
def test_cli_names_the_affine_options_in_their_errors(options, message, tmp_path, capsys):
    # "`rotation` must be below 90 degrees ... Received: rotation=95.0" named train's parameters
    from applications import __main__ as cli
    from tests.conftest import shared_path

    run_dir = tmp_path / "new" / "run"
    assert cli.main(["train", "occluded_mnist", "--data-dir", str(shared_path("data", "mnist")), "--num-train", "8",
                     "--num-test", "8", "--epochs", "1", "--quiet", "--augment", "affine", *options,
                     "--run-dir", str(run_dir)]) == 2
    assert capsys.readouterr().err == f"keras-capsules: error: {message}\n"
    assert not (tmp_path / "new").exists()


# error_per_step's dicts of the benchmark's faked variants (no_feedback: no sequence moved only vertically)
FAKE_ERRORS = {
    "rladder": {"all": [0.5, 0.25], "sideways": [0.5, 0.125], "vertical_only": [0.5, 0.5],
                "counts": {"all": 12, "sideways": 8, "vertical_only": 4}},
    "temporal": {"all": [0.4, 0.3], "sideways": [0.4, 0.2], "vertical_only": [0.4, 0.5],
                 "counts": {"all": 12, "sideways": 8, "vertical_only": 4}},
    "no_feedback": {"all": [0.6, 0.55], "sideways": [0.6, 0.55], "vertical_only": None,
                    "counts": {"all": 12, "sideways": 12, "vertical_only": 0}},
}


def _rladder_benchmark(name):
    """``benchmarks/rladder.py`` loaded as a module of its own ``name``."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "rladder.py"
    spec = importlib.util.spec_from_file_location(name, path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


# what a faked ``om.train`` returns to the benchmark (one frame; no sequence moved only vertically)
FAKE_TRAINED = {"model": "model.keras", "test_error": 0.5, "parameters": 1, "epochs_run": 1, "updates": 3,
                "test_error_per_step": {"all": [0.5], "sideways": [0.5], "vertical_only": None,
                                        "counts": {"all": 2, "sideways": 2, "vertical_only": 0}}}


def _fake_train(record):
    """A stand-in for ``om.train``: calls ``record(kwargs)``, returns :data:`FAKE_TRAINED`."""

    def train(**kwargs):
        record(kwargs)
        return FAKE_TRAINED

    return train


def _fake_run(variant, learning_rate):
    """What a faked ``_occluded_variant`` of the benchmark returns for ``variant``."""
    return {"variant": variant, "learning_rate": learning_rate, "test_error": 0.5, "paper_error": 0.01,
            "parameters": 1, "epochs_run": 1, "updates": 1250, "wall": 0.0, "cpu": 0.0, "budget_hit": False,
            "error_per_step": FAKE_ERRORS[variant]}


def _occluded_benchmark_arguments(monkeypatch, argv, read):
    """``read(args)`` of every variant that ``benchmarks/rladder.py occluded ARGV`` trains
    (each variant's training faked)."""
    bench = _rladder_benchmark("rladder_benchmark_under_test")
    seen = []

    def fake_variant(args, variant, budget_seconds):
        seen.append((variant, read(args)))
        return _fake_run(variant, bench.occluded_learning_rate(args, variant))

    monkeypatch.setattr(bench, "_occluded_variant", fake_variant)
    bench.main(["occluded", "--no-parallel", *argv])
    return seen


def test_the_benchmark_says_which_digits_train_and_test(monkeypatch, capsys, tmp_path):
    # a folder with MNIST's train files trains on them: the figures are of another data scale
    from tests.applications.mnist_folders import mnist_folder

    for folder, said in ((shared_path("data", "mnist"), "the t10k files split 80/20 (no train files there)"),
                         (mnist_folder(tmp_path / "full", 10), "the train files train, the t10k files test")):
        seen = _occluded_benchmark_arguments(monkeypatch, ["--data-dir", str(folder), "--variants", "rladder"],
                                             lambda args: args.data_dir)
        assert seen == [("rladder", str(folder))]
        assert f"digits of {folder}: {said}\n" in capsys.readouterr().out


def test_benchmark_passes_the_augmentation_to_every_variant(monkeypatch, capsys):
    seen = _occluded_benchmark_arguments(
        monkeypatch, ["--augment", "affine", "--affine-rotation", "5"], lambda args: (args.augment, om.affine_options(args))
    )
    assert seen == [(v, ("affine", {"rotation": 5.0})) for v in ("rladder", "temporal", "no_feedback")]
    # below the variants' lines: each one's test error after every frame, by motion
    out = capsys.readouterr().out
    table = out[out.index("test error per frame (%), frames 1..2:"):].splitlines()[1:10]
    assert [line.split() for line in table] == [
        ["rladder", "all", "n=12", "50.00", "25.00"],
        ["sideways", "n=8", "50.00", "12.50"],
        ["vertical", "only", "n=4", "50.00", "50.00"],
        ["temporal", "all", "n=12", "40.00", "30.00"],
        ["sideways", "n=8", "40.00", "20.00"],
        ["vertical", "only", "n=4", "40.00", "50.00"],
        ["no_feedback", "all", "n=12", "60.00", "55.00"],
        ["sideways", "n=12", "60.00", "55.00"],
        ["vertical", "only", "n=0", "-"],
    ], out
    assert out.index("test error per frame") > out.index("no_feedback  test error")


# (TensorFlow runs already in this process: the benchmark's thread setting cannot take effect)
@pytest.mark.filterwarnings("ignore:could not set TensorFlow's intra-op threads:RuntimeWarning")
def test_benchmark_trains_each_variant_at_its_own_learning_rate_unless_one_is_given(monkeypatch, capsys):
    # twenty-eighth round: each variant's rate chosen on validation; --learning-rate sets one for all
    bench = _rladder_benchmark("rladder_benchmark_learning_rates")
    trained = []
    monkeypatch.setattr(om, "train", _fake_train(lambda kwargs: trained.append((kwargs["variant"],
                                                                               kwargs["learning_rate"]))))
    variants = ["rladder", "temporal", "no_feedback", "hierarchical"]
    bench.main(["occluded", "--no-parallel", "--variants", *variants])
    rates = bench.OCCLUDED_LEARNING_RATES
    assert set(rates) == {"rladder", "temporal", "no_feedback"} and set(rates) < set(om.VARIANTS)
    assert trained == [(v, rates.get(v, bench.DEFAULT_LEARNING_RATE)) for v in variants]
    out = capsys.readouterr().out
    for variant in variants:  # each variant's line says the rate it trained at
        line = next(line for line in out.splitlines() if line.startswith(f"{variant} "))
        assert f"learning rate {rates.get(variant, 1e-3):g}, " in line, line
        # and its epochs with the updates they made (a budget may stop the last one part-way)
        assert ", 1 epochs (3 updates), " in line, line
    trained.clear()
    bench.main(["occluded", "--no-parallel", "--variants", *variants, "--learning-rate", "3e-4"])
    assert trained == [(v, 3e-4) for v in variants]
    assert capsys.readouterr().out.count("learning rate 0.0003, ") == len(variants)


# (TensorFlow runs already in this process: the benchmark's thread setting cannot take effect)
@pytest.mark.filterwarnings("ignore:could not set TensorFlow's intra-op threads:RuntimeWarning")
def test_benchmark_decays_the_rate_over_the_budget_or_the_epochs_whichever_ends_first(monkeypatch):
    # note 100: the rate decayed over the wall-time budget alone, so a probe of 8 epochs
    # under a 60-minute budget ended at ~73% of its rate, not at --final-lr-fraction
    from keras_capsules.callbacks import BudgetLinearDecay, TimeBudget

    bench = _rladder_benchmark("rladder_benchmark_decay_horizon")
    given = []
    monkeypatch.setattr(om, "train", _fake_train(lambda kwargs: given.append(kwargs["callbacks"])))
    common = ["occluded", "--no-parallel", "--variants", "rladder", "--num-train", "40", "--batch-size", "16"]
    bench.main([*common, "--epochs", "3", "--budget-minutes", "60", "--final-lr-fraction", "0.1"])
    budget, decay = given[0]
    assert isinstance(budget, TimeBudget) and budget.seconds == 3600
    assert isinstance(decay, BudgetLinearDecay) and decay.budget is budget and decay.final_fraction == 0.1
    assert decay.decay_steps == 3 * om.training_batches(40, 16) == 9
    bench.main([*common, "--final-lr-fraction", "1"])  # a constant rate: no decay at all
    assert [type(c) for c in given[1]] == [TimeBudget]


def test_benchmark_hold_out_scores_validation_sequences_and_judges_no_target(monkeypatch, capsys):
    seen = _occluded_benchmark_arguments(monkeypatch, ["--hold-out"], lambda args: args.hold_out)
    assert seen == [(v, True) for v in ("rladder", "temporal", "no_feedback")]
    out = capsys.readouterr().out
    assert "rladder      validation error 50.00%" in out and "validation error per frame (%)" in out
    assert "test error" not in out and "target (" not in out and "judged on the test sequences" in out
    assert _occluded_benchmark_arguments(monkeypatch, [], lambda args: args.hold_out)[0] == ("rladder", False)
    out = capsys.readouterr().out
    assert "rladder      test error 50.00%" in out and "target (RLadder clearly below" in out
    # only `occluded` takes it: the other subcommands would have ignored it in silence
    bench = _rladder_benchmark("rladder_benchmark_hold_out")
    for name in ("fusion", "jsb", "tagger", "loop"):
        monkeypatch.setattr(bench, name, lambda args, name=name: pytest.fail(f"{name} ran, ignoring --hold-out"))
    for name in ("fusion", "jsb", "tagger", "loop"):
        with pytest.raises(SystemExit) as exit_info:
            bench.main([name, "--hold-out"])
        assert exit_info.value.code == 2
        assert "unrecognized arguments: --hold-out" in capsys.readouterr().err


def test_feedback_ablation_zeroes_each_levels_feedback_and_restores_it(digits, monkeypatch):
    # nineteenth round: does a trained full ladder use its decoder-to-encoder feedback?
    bench = _rladder_benchmark("rladder_benchmark_ablation")
    data = om.generate(*digits, 8, seed=0)
    model = om.build_model("rladder", feedback_initializer=None, **TINY)  # feedback kernels not zero
    cells = model.get_layer("rladder").encoders
    before = [keras.ops.convert_to_numpy(c.feedback_kernel) for c in cells]
    assert all(np.abs(kernel).max() > 0 for kernel in before)
    seen = []
    scored = om.error_per_step

    def watched(m, d, batch_size=64, verbose=0):  # which kernels were zero when the model was scored
        seen.append([not np.any(keras.ops.convert_to_numpy(c.feedback_kernel)) for c in cells])
        return scored(m, d, batch_size, verbose)

    monkeypatch.setattr(om, "error_per_step", watched)
    result = bench.feedback_ablation(model, data)
    names = [c.name for c in cells]
    assert list(result) == ["trained", "all zeroed", *names]
    assert all(len(errors) == 5 and all(0 <= e <= 1 for e in errors) for errors in result.values())
    n = len(cells)
    assert seen == [[False] * n, [True] * n] + [[i == j for j in range(n)] for i in range(n)]
    for cell, kernel in zip(cells, before):  # restored exactly
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(cell.feedback_kernel), kernel)
    # the predictions it scored: zeroing the feedback changes the ladder's outputs from the second frame
    monkeypatch.setattr(om, "error_per_step", scored)
    out = model.predict(data["frames"], verbose=0)["digit_steps"]
    for cell in cells:
        cell.feedback_kernel.assign(np.zeros_like(keras.ops.convert_to_numpy(cell.feedback_kernel)))
    zeroed = model.predict(data["frames"], verbose=0)["digit_steps"]
    np.testing.assert_allclose(out[:, 0], zeroed[:, 0], atol=1e-6)
    assert np.abs(out[:, 1:] - zeroed[:, 1:]).max() > 1e-4
    with pytest.raises(ValueError, match="no decoder-to-encoder feedback"):
        bench.feedback_ablation(om.build_model("no_feedback", **TINY), data)


def test_the_benchmarks_ablation_scores_the_sequences_train_scored():
    # the ablation draws its sequences again: its "trained" row is the variant's own error
    bench = _rladder_benchmark("rladder_benchmark_ablation_run")
    captured = {}
    real = bench._occluded_variant

    def keep(args, variant, budget_seconds):
        captured.update(real(args, variant, budget_seconds))
        return captured

    bench._occluded_variant = keep
    # 16 training sequences: one step (was 32: two); the check is on the sequences scored
    bench.main(["occluded", "--variants", "rladder", "--no-parallel", "--num-train", "16", "--num-test", "16",
                "--epochs", "1", "--conv-units", "4", "4", "4", "--dense-units", "8", "--ablate-feedback",
                "--hold-out", "--no-jit-compile", "--verbose", "0", "--feedback-initializer", "default",
                "--data-dir", str(shared_path("data", "mnist"))])
    ablation = captured["feedback_ablation"]
    assert ablation["trained"] == captured["error_per_step"]["all"]
    assert list(ablation)[2:] == ["encoder_1", "encoder_2", "encoder_3", "encoder_4"]


def test_benchmark_prints_the_feedback_ablation_and_needs_the_full_ladder(monkeypatch, capsys):
    seen = _occluded_benchmark_arguments(monkeypatch, ["--ablate-feedback", "--hold-out"],
                                         lambda args: args.ablate_feedback)
    assert seen == [(v, True) for v in ("rladder", "temporal", "no_feedback")]
    bench = _rladder_benchmark("rladder_benchmark_ablation_cli")

    def fake_variant(args, variant, budget_seconds):
        ablation = {"trained": [0.5, 0.25], "all zeroed": [0.5, 0.375], "encoder_1": [0.5, 0.3125]}
        return {"variant": variant, "learning_rate": 1e-3, "test_error": 0.25, "paper_error": 0.01,
                "parameters": 1, "epochs_run": 1, "updates": 1, "wall": 0.0, "cpu": 0.0, "budget_hit": False,
                "error_per_step": FAKE_ERRORS[variant],
                "feedback_ablation": ablation if variant == "rladder" else None}

    monkeypatch.setattr(bench, "_occluded_variant", fake_variant)
    capsys.readouterr()
    bench.main(["occluded", "--no-parallel", "--hold-out", "--ablate-feedback"])
    out = capsys.readouterr().out
    table = out[out.index("rladder: validation error per frame (%) with the decoder-to-encoder feedback"):]
    assert [line.split() for line in table.splitlines()[1:4]] == [
        ["trained", "50.00", "25.00"], ["all", "zeroed", "50.00", "37.50"],
        ["only", "encoder_1", "zeroed", "50.00", "31.25"],
    ], out
    # without the full ladder there is nothing to ablate: refused before any training
    monkeypatch.setattr(bench, "_occluded_variant", lambda *a: pytest.fail("trained"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["occluded", "--variants", "temporal", "no_feedback", "--ablate-feedback"])
    assert exit_info.value.code == 2 and "--ablate-feedback needs the full ladder" in capsys.readouterr().err


# train's options for a tiny temporal baseline on short sequences of 16x16 frames
TINY_TRAIN = dict(epochs=1, num_train=8, num_test=8, variant="temporal", conv_units=(4,), dense_units=8, batch_size=8,
                  frame_size=16, verbose=0)


def _record_generated_digits(monkeypatch):
    """The digits of every ``om.generate`` call from now on (a list that fills)."""
    drawn, generate = [], om.generate

    def recording(digits, labels, num, **kwargs):
        drawn.append(np.asarray(digits))
        return generate(digits, labels, num, **kwargs)

    monkeypatch.setattr(om, "generate", recording)
    return drawn


def test_train_with_hold_out_never_sees_a_test_digit(tmp_path, monkeypatch, capsys):
    # the benchmark's and the CLI's --hold-out: the model trains on four fifths of the
    # training digits and is watched and scored on sequences of the held-out fifth
    import json

    from applications import __main__ as cli
    from tests.conftest import shared_path

    data_dir = str(shared_path("data", "mnist"))
    train_digits, test_digits = om._train_test_digits("idx", data_dir, 0)
    kept, held_out = om._hold_out(train_digits, 0)
    drawn = _record_generated_digits(monkeypatch)
    tiny = dict(data_dir=data_dir, **TINY_TRAIN)
    result = om.train(run_dir=str(tmp_path / "val"), hold_out=True, **tiny)
    assert [len(d) for d in drawn] == [len(kept[0]), len(held_out[0])]
    np.testing.assert_array_equal(drawn[0], kept[0])
    np.testing.assert_array_equal(drawn[1], held_out[0])
    assert result["scored_on"] == "validation" and result["test_error_per_step"]["counts"]["all"] == 8
    assert json.loads((tmp_path / "val" / "metrics.json").read_text())["scored_on"] == "validation"
    drawn.clear()
    assert om.train(run_dir=str(tmp_path / "test"), **tiny)["scored_on"] == "test"
    np.testing.assert_array_equal(drawn[0], train_digits[0])
    np.testing.assert_array_equal(drawn[1], test_digits[0])
    # the command line names the figures after what they were scored on
    capsys.readouterr()
    argv = ["train", "occluded_mnist", "--data-dir", data_dir, "--num-train", "8", "--num-test", "8",
            "--conv-units", "4", "--dense-units", "8", "--batch-size", "8", "--frame-size", "16",
            "--variant", "temporal", "--epochs", "1", "--quiet", "--run-dir", str(tmp_path / "cli")]
    assert cli.main([*argv, "--hold-out"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert re.search(r"validation error [01]\.\d{4}, validation error per frame ", out) and "test error" not in out
    # evaluate scores test sequences, and of a --hold-out run says train's figure was another's
    scored = om.evaluate(str(tmp_path / "val" / "model.keras"))
    assert scored["scored_on"] == "test" and scored["train_scored_on"] == "validation"
    scored = om.evaluate(str(tmp_path / "test" / "model.keras"))
    assert scored["scored_on"] == "test" and "train_scored_on" not in scored


def test_plot_predictions_draws_next_frames_only_for_the_ladder_variants(tmp_path, digits):
    import matplotlib.image

    data = om.generate(*digits, 4, seed=1, frame_size=16)
    heights = {}
    for variant in ("rladder", "temporal"):
        model = om.build_model(variant, frame_size=16, **TINY)
        path = om.plot_predictions(model, data["frames"], str(tmp_path / f"{variant}.png"), data["labels"],
                                   num_sequences=2, title=variant)
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[1] > 300
        heights[variant] = image.shape[0]
    assert heights["rladder"] > 1.5 * heights["temporal"]  # a row of predicted frames under each sequence
    om.plot_predictions(model, data["frames"][..., 0], tmp_path / "no_labels.png", num_sequences=10)
    assert (tmp_path / "no_labels.png").stat().st_size > 1000
    for kwargs, name in ((dict(frames=np.zeros((2, 5, 16, 16, 3))), "frames"),
                         (dict(frames=np.zeros((0, 5, 16, 16))), "frames"), (dict(num_sequences=0), "num_sequences"),
                         (dict(num_sequences=1.5), "num_sequences"), (dict(labels=[3]), "labels")):
        arguments = {"frames": data["frames"], "path": tmp_path / "bad.png", "num_sequences": 2, **kwargs}
        with pytest.raises(ValueError, match=name):
            om.plot_predictions(model, **arguments)
    assert not (tmp_path / "bad.png").exists()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(num_sequences=-1), "Received: num_sequences=-1"),
        (dict(num_sequences=2.5), "Received: num_sequences=2.5"),
        (dict(num_frames=0), "Received: num_frames=0"),
        (dict(digit_size=0), "Received: digit_size=0"),
        (dict(speed=-3), "Received: speed=-3"),
        (dict(speed=2.5), "Received: speed=2.5"),
        (dict(bar_width=-1), "Received: bar_width=-1"),
        (dict(bar_spacing=0), "Received: bar_spacing=0"),
    ],
)
def test_generator_rejects_bad_sizes(digits, kwargs, message):
    # Audit 6: these gave numpy errors ("negative dimensions", "high <= 0",
    # ZeroDivisionError) or, for a float speed or a negative bar width, silently
    # truncated or dropped the value.
    kwargs = {"num_sequences": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        om.generate(*digits, **kwargs)


def test_generator_rejects_bad_digits(digits):
    images, labels = digits
    with pytest.raises(ValueError, match="with as many `labels`"):
        om.generate(images[:0], labels[:0], 2)
    with pytest.raises(ValueError, match="with as many `labels`"):
        om.generate(images, labels[:5], 2)
    # uint8 intensities made frames up to 255 instead of [0, 1]
    with pytest.raises(ValueError, match="divide uint8 images by 255"):
        om.generate((images * 255).astype("uint8"), labels, 2)
    assert om.generate(images[..., None], labels, 3, seed=1)["frames"].max() <= 1.0


def test_datasets_and_helpers_reject_bad_arguments(digits):
    data = om.generate(*digits, 4)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        om.make_dataset(data, batch_size=0)  # was a TF InvalidArgumentError
    with pytest.raises(ValueError, match="Received: variant='ladder'"):
        om.make_dataset(data, variant="ladder")  # silently gave no next-frame targets
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        om.make_training_dataset(*digits, 4, batch_size=0, augment="fresh")  # failed at iteration
    with pytest.raises(ValueError, match="Received: num_sequences=0"):
        om.make_training_dataset(*digits, 0, augment="fresh")
    with pytest.raises(ValueError, match="Received: bar_spacing=0"):
        om.bar_mask(bar_spacing=0)  # a divide-by-zero warning and a meaningless mask
    with pytest.raises(ValueError, match="Received: size=0"):
        om.downscale(digits[0], 0)


def test_an_empty_set_of_sequences_makes_an_empty_shuffled_dataset(digits):
    # Audit 8: shuffle=True on zero sequences failed inside tf.data ("buffer_size must be greater than zero").
    data = om.generate(*digits, 0)
    assert list(om.make_dataset(data, shuffle=True)) == []


def test_plot_predictions_of_a_ladder_on_one_frame_sequences(tmp_path, digits):
    # Audit 8: a ladder model of one-frame sequences (no next frame to predict) failed with
    # an IndexError (axes[:, 1] of a one-column grid) instead of drawing its frames.
    data = om.generate(*digits, 2, num_frames=1, frame_size=16)
    model = om.build_model("rladder", num_frames=1, frame_size=16, **TINY)
    path = om.plot_predictions(model, data["frames"], tmp_path / "one.png", data["labels"], num_sequences=2)
    assert (tmp_path / "one.png").stat().st_size > 1000 and path == tmp_path / "one.png"


def test_load_digits_refuses_an_idx_split_other_than_train_or_test():
    # Audit 8: split="validation" (or any typo) silently read the IDX training files.
    with pytest.raises(ValueError, match="Received: split='validation'"):
        om.load_digits("idx", shared_path("data", "mnist"), split="validation")
    assert om.load_digits("idx", shared_path("data", "mnist"), split="test")[0].shape == (10000, 28, 28)


def test_bar_value_and_downscaled_digits_are_checked(digits):
    # Audit 8: bar_value=255 (or NaN) gave frames outside [0, 1] silently, and downscale of
    # non-square digits failed in numpy's reshape.
    images, labels = digits
    for bad in (255, -0.5, float("nan"), True):
        with pytest.raises(ValueError, match="Received: bar_value="):
            om.generate(images, labels, 2, bar_value=bad)
    assert om.generate(images, labels, 2, bar_value=0)["frames"].min() == 0.0
    assert om.generate(images, labels, 2, bar_value=np.float32(0.5))["frames"].max() <= 1.0
    with pytest.raises(ValueError, match=r"square images .* Received: shape=\(3, 28, 20\)"):
        om.downscale(images[:3, :, :20])


def test_augmented_digits_stay_within_the_input_range(digits):
    # Audit 8: rounding in the bilinear sums gave values such as 1.0000001 for digits in [0, 1],
    # so digits already digit_size wide made frames above 1.
    images, labels = digits
    augmented = om.augment_digits(images, seed=0)
    assert augmented.max() <= 1.0 and augmented.min() >= 0.0
    shifted = om.augment_digits(images * 0.5 + 0.25, seed=0)  # in [0.25, 0.75], widened to 0
    assert shifted.max() <= 0.75 and shifted.min() == 0.0
    small = om.downscale(images)
    assert om.generate(small, labels, 200, affine={})["clean"].max() <= 1.0


def test_targets_for_refuses_an_unknown_variant(digits):
    # Audit 8: targets_for("ladder", ...) silently returned targets without "next_frames".
    data = om.generate(*digits, 3)
    assert set(om.targets_for("rladder", data["frames"], data["labels"])) == {"digit", "digit_steps", "next_frames"}
    with pytest.raises(ValueError, match="Received: variant='ladder'"):
        om.targets_for("ladder", data["frames"], data["labels"])


@pytest.mark.parametrize("variant", ["rladder", "temporal"])
def test_compile_model_refuses_an_unknown_frame_loss(variant):
    # Audit 8: a baseline (no next frames) accepted frame_loss="l2" silently, and the ladders'
    # message did not name the argument ("Received: 'l2'").
    model = om.build_model(variant, frame_size=16, **TINY)
    with pytest.raises(ValueError, match="Received: frame_loss='l2'"):
        om.compile_model(model, frame_loss="l2")
    assert om.compile_model(model, frame_loss="mse") is model


def test_bars_as_wide_as_their_spacing_are_refused(digits):
    # Audit 8: bar_width >= bar_spacing covered every column with bars: frames without any digit, silently.
    with pytest.raises(ValueError, match="Received: bar_width=8, bar_spacing=8"):
        om.generate(*digits, 2, bar_width=8, bar_spacing=8)
    with pytest.raises(ValueError, match="Received: bar_width=5, bar_spacing=3"):
        om.bar_mask(bar_width=5, bar_spacing=3)
    assert om.bar_mask(bar_width=7, bar_spacing=8, bars="vertical").mean() == 7 / 8
    assert om.bar_mask(bar_width=7, bar_spacing=8).mean() == 1 - 1 / 64
    assert not om.generate(*digits, 2, bar_width=0)["bars"].any()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(num_frames=0), "Received: num_frames=0"),  # "out-of-bounds index (slice, -1)"
        (dict(conv_units=()), r"Received: conv_units=\(\)"),  # a message about the input combinator
        (dict(conv_units=(4, 0)), "Received: conv_units=0"),
        (dict(num_classes=1), "Received: num_classes=1"),  # failed only in fit
        # audit (2026-11-27): frames the pooling does not divide failed in RLadder's build
        # with a plain ValueError (a traceback from `train occluded_mnist --frame-size 30`)
        (dict(frame_size=30), "divisible by 4 .*Received: frame_size=30"),
        (dict(frame_size=16, conv_units=(2,) * 7), "divisible by 64 .*Received: frame_size=16"),
        (dict(variant="temporal", frame_size=16, conv_units=(2,) * 7), "at least 64 .*Received: frame_size=16"),
    ],
)
def test_build_model_refuses_bad_sizes(kwargs, message):
    kwargs = {**TINY, "frame_size": 16, **kwargs}
    with pytest.raises(InputError, match=message):
        om.build_model(kwargs.pop("variant", "rladder"), **kwargs)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(frame_weight=float("nan")), "Received: frame_weight=nan"),  # a NaN loss
        (dict(frame_weight=-1.0), "Received: frame_weight=-1.0"),  # maximized the frame error
        (dict(learning_rate=-1e-3), "Received: learning_rate=-0.001"),  # trained uphill
        (dict(learning_rate=float("inf")), "Received: learning_rate=inf"),
    ],
)
def test_compile_model_refuses_non_finite_or_negative_weights_and_rates(kwargs, message):
    model = om.build_model("temporal", frame_size=16, **TINY)
    with pytest.raises(ValueError, match=message):
        om.compile_model(model, **kwargs)
    assert om.compile_model(model, frame_weight=0.0) is model  # no frame cost: allowed


def test_train_and_evaluate_check_their_numbers_and_the_model_first(tmp_path, monkeypatch):
    from applications.errors import CommandLineError

    # num_test=0 failed only after training; an SST model in evaluate raised an IndexError
    monkeypatch.setattr(om, "_train_test_digits", lambda *a, **kw: pytest.fail("read the digits before checking"))
    with pytest.raises(ValueError, match="Received: num_test=0"):
        om.train("temporal", run_dir=tmp_path / "run", num_test=0)
    with pytest.raises(ValueError, match="Received: epochs=0"):
        om.train("temporal", run_dir=tmp_path / "run", epochs=0)
    other = keras.Input((4, 3, 16))
    keras.Model(other, keras.layers.Dense(2)(other)).save(tmp_path / "other.keras")
    with pytest.raises(CommandLineError, match="is not an Occluded Moving MNIST model"):
        om.evaluate(str(tmp_path / "other.keras"))
    with pytest.raises(ValueError, match="Received: num_test=0"):
        om.evaluate(str(tmp_path / "other.keras"), num_test=0)


def test_evaluate_generates_sequences_as_long_as_the_models(tmp_path, digits, monkeypatch):
    # evaluate took the frame size from the model but always generated 5-frame sequences
    model = om.build_model("temporal", num_frames=3, frame_size=16, **TINY)
    model.save(tmp_path / "three.keras")
    monkeypatch.setattr(om, "_train_test_digits", lambda *a, **kw: (digits, digits))
    result = om.evaluate(str(tmp_path / "three.keras"), num_test=4)
    assert 0.0 <= result["test_error"] <= 1.0
    errors = result["test_error_per_step"]  # one error per frame of the model's sequences
    assert len(errors["all"]) == 3 and errors["all"][-1] == pytest.approx(result["test_error"])


@pytest.mark.parametrize("augment", ["fresh", "affine"])
def test_an_augmented_dataset_from_a_later_epoch_goes_on_with_its_sequences(digits, augment):
    # A run resumed at epoch k drew the sequences of epochs 0, 1, ... again.
    make = lambda **kw: om.make_training_dataset(  # noqa: E731
        *digits, 8, "temporal", batch_size=4, seed=2, augment=augment, frame_size=16, **kw)
    uninterrupted = _passes(make(), 3)
    resumed = _passes(make(first_epoch=1), 2)
    for (frames, labels), (want_frames, want_labels) in zip(resumed, uninterrupted[1:], strict=True):
        np.testing.assert_array_equal(frames, want_frames)
        np.testing.assert_array_equal(labels, want_labels)
    with pytest.raises(ValueError, match="Received: first_epoch=-1"):
        make(first_epoch=-1)


@pytest.mark.parametrize("augment", [None, "fresh"])
def test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_run(tmp_path, monkeypatch, augment):
    # Without augmentation the fixed sequences were reshuffled by tf.data, whose order a
    # resumed process started again: epoch 1 trained in the order of epoch 0. (Two epochs of
    # two batches, the crash after the second batch of the last: the resumed process trains
    # that epoch again, on the state the backup restored. Three epochs of three batches
    # before: the same checks, 10 training steps instead of 20.)
    #
    # The same crash-and-resume runs carry (each train traces its own functions: seconds
    # per run) the checks of test_a_resumed_augmented_run_draws_the_sequences_of_its_epoch
    # (augment="fresh": a resumed run drew the sequences of epochs 0, 1, ... again), and
    # the resume half of test_epochs_run_counts_the_epochs_before_a_resume (epochs_run
    # counted the epochs of the last process only).
    from applications import fault_tolerance
    from tests.applications import cli_helpers
    from tests.conftest import shared_path

    processes = []  # augment="fresh": the epochs drawn by the crashed, then by the resumed process

    if augment == "fresh":
        generate = om.generate

        def recording(*args, seed=0, **kwargs):
            if isinstance(seed, tuple) and processes:  # a training pass (test sequences have an int seed)
                processes[-1].append(seed[1])
            return generate(*args, seed=seed, **kwargs)

        monkeypatch.setattr(om, "generate", recording)

    def train(run_dir, callbacks=()):
        if run_dir == str(tmp_path / "resumed"):
            processes.append([])
        # 16 sequences: two batches an epoch, whose order the resumed epoch must repeat
        return om.train(data_dir=str(shared_path("data", "mnist")), run_dir=run_dir, epochs=2, num_train=16,
                        num_test=8, variant="rladder", conv_units=(4,), dense_units=8, batch_size=8, frame_size=16,
                        augment=augment, verbose=0, seed=3,
                        callbacks=[*fault_tolerance.resumable_callbacks(run_dir), *callbacks])

    train(str(tmp_path / "whole"))
    result = cli_helpers.crash_and_resume(train, tmp_path / "resumed", (1, 1))
    assert result["epochs_run"] == 2  # was 1: the epochs of the last process only
    # the updates of both processes: the backup restores the optimizer's count
    assert result["updates"] == 2 * om.training_batches(16, 8) == 4
    assert cli_helpers.max_weight_difference(tmp_path / "whole" / "model.keras",
                                             tmp_path / "resumed" / "model.keras") == 0.0
    if augment == "fresh":
        crashed, resumed = processes
        assert crashed[:2] == [0, 1]
        # was 0: the sequences of the first epoch again. (min: the crashed fit's stream may
        # still draw an epoch or two ahead into its prefetch buffer, 2 and 3, meanwhile.)
        assert min(resumed) == 1


def test_epochs_run_counts_the_epochs_before_a_resume(tmp_path, monkeypatch):
    # metrics.json's epochs_run counted the epochs of the last process only: a run
    # resumed at epoch 2 of 3 reported 1, one finished from its backup after a crash
    # between fit and the model save (all epochs trained) reported 0.
    # (A run resumed at epoch 1 of 2, reported 1 instead of 2 by that bug, is checked by
    # test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_run on its runs.)
    from applications import fault_tolerance
    from tests.applications import cli_helpers
    from tests.conftest import shared_path

    run_dir = tmp_path / "run"

    def train(*extra):
        return om.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(run_dir), epochs=3, num_train=8,
                        num_test=8, variant="temporal", conv_units=(4,), dense_units=8, batch_size=8, frame_size=16,
                        verbose=0, callbacks=[*fault_tolerance.resumable_callbacks(str(run_dir)), *extra])

    with pytest.raises(RuntimeError, match="simulated"):
        train(cli_helpers.crash_when_saving_after_fit(monkeypatch))
    monkeypatch.undo()
    assert train()["epochs_run"] == 3  # was 0


def test_unflatten_dense_gives_the_decoder_below_the_top_a_kernel_per_pixel(tmp_path):
    # the gated top's decoder output reached the conv decoder below it broadcast over all pixels
    # (no 'where'); unflatten="dense" gives that decoder a kernel to every pixel's channels
    small = dict(num_frames=2, frame_size=8, **TINY)  # the third conv level is 2x2 (pooled twice)

    def below_top(model):
        return model.get_layer("rladder").decoders[len(TINY["conv_units"])]  # decoder 0 is the pixels'

    for variant in ("rladder", "no_feedback"):
        broadcast, dense = om.build_model(variant, **small), om.build_model(variant, unflatten="dense", **small)
        assert below_top(broadcast).vector_top == "broadcast" and tuple(below_top(broadcast).top_kernel.shape) == (8, 4)
        assert below_top(dense).vector_top == "dense" and tuple(below_top(dense).top_kernel.shape) == (8, 2 * 2 * 4)
        assert dense.get_layer("rladder").levels[-1]["unflatten"] == "dense"
        assert dense.count_params() - broadcast.count_params() == 8 * (2 * 2 * 4 - 4)
    # the config round-trips, and the loaded model predicts the same
    frames = np.random.default_rng(0).random((2, 2, 8, 8, 1)).astype("float32")
    path = tmp_path / "dense.keras"
    dense.save(path)
    loaded = keras.saving.load_model(path)
    assert below_top(loaded).vector_top == "dense" and loaded.get_layer("rladder").levels[-1]["unflatten"] == "dense"
    np.testing.assert_allclose(loaded.predict(frames, verbose=0)["digit"], dense.predict(frames, verbose=0)["digit"],
                               atol=1e-6)
    # no decoder (hierarchical) or no ladder (temporal): the option changes nothing
    for variant in ("hierarchical", "temporal"):
        plain, asked = om.build_model(variant, **small), om.build_model(variant, unflatten="dense", **small)
        assert plain.count_params() == asked.count_params()
    assert om.build_model("hierarchical", unflatten="dense", **small).get_layer("rladder").levels[-1]["unflatten"] \
        == "broadcast"
    assert om.paper_levels((4, 4), 8, unflatten="dense")[-1]["unflatten"] == "dense"
    for call in (lambda: om.build_model("rladder", unflatten="conv", **small),
                 lambda: om.paper_levels(unflatten=None)):
        with pytest.raises(ValueError, match="Received: unflatten="):
            call()


def test_unflatten_reaches_train_from_the_cli_and_the_benchmark(monkeypatch, capsys):
    import argparse

    seen = []
    monkeypatch.setattr(om, "train", lambda **kwargs: seen.append(kwargs["unflatten"]))
    monkeypatch.setattr("applications.arguments.train_options", lambda args, strategy: {})
    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "train")
    om.run_train(parser.parse_args([]), None)
    om.run_train(parser.parse_args(["--unflatten", "dense"]), None)
    assert seen == ["broadcast", "dense"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--unflatten", "conv"])
    capsys.readouterr()

    passed = _occluded_benchmark_arguments(monkeypatch, ["--unflatten", "dense"], lambda args: args.unflatten)
    assert passed == [(v, "dense") for v in ("rladder", "temporal", "no_feedback")]
    capsys.readouterr()


class _FixedPredictions:
    """A model stand-in whose ``predict`` returns fixed ``digit_steps`` (and the last as ``digit``)."""

    def __init__(self, steps):
        self.steps = np.asarray(steps, "float32")
        self.calls = []

    def predict(self, frames, batch_size=None, verbose=0):
        self.calls.append((len(frames), batch_size, verbose))
        return {"digit_steps": self.steps, "digit": self.steps[:, -1]}


def _steps_guessing(guesses, num_classes=3):
    """``digit_steps`` probabilities [n, T, classes] whose argmax is ``guesses`` [n, T]."""
    guesses = np.asarray(guesses)
    return np.where(np.arange(num_classes) == guesses[..., None], 0.8, 0.2 / (num_classes - 1))


def test_error_per_step_counts_the_misclassified_after_every_frame_by_motion():
    labels = np.array([0, 1, 2, 1])
    # misclassified after frames 1..3:  seq 0: x . .   seq 1: x x .   seq 2: x x x   seq 3: . . .
    model = _FixedPredictions(_steps_guessing([[1, 0, 0], [0, 0, 1], [0, 1, 1], [1, 1, 1]]))
    # (dy, dx): sequences 0 and 2 move only vertically, 1 and 3 sideways (3 diagonally)
    data = {"frames": np.zeros((4, 3, 8, 8, 1), "float32"), "labels": labels,
            "velocities": np.array([[3, 0], [0, 3], [-3, 0], [3, 3]])}
    errors = om.error_per_step(model, data, batch_size=2)
    assert errors == {"all": [0.75, 0.5, 0.25], "sideways": [0.5, 0.5, 0.0], "vertical_only": [1.0, 0.5, 0.5],
                      "counts": {"all": 4, "sideways": 2, "vertical_only": 2}}
    assert model.calls == [(4, 2, 0)]
    assert errors["all"][-1] == om.classification_error(model, data)
    # an empty group is None; without velocities both groups are
    everyone_vertical = {**data, "velocities": np.array([[3, 0], [-3, 0], [0, 0], [3, 0]])}
    errors = om.error_per_step(model, everyone_vertical)
    assert errors["sideways"] is None and errors["vertical_only"] == [0.75, 0.5, 0.25]
    assert errors["counts"] == {"all": 4, "sideways": 0, "vertical_only": 4}
    without = {"frames": data["frames"], "labels": labels}
    assert om.error_per_step(model, without) == {
        "all": [0.75, 0.5, 0.25], "sideways": None, "vertical_only": None,
        "counts": {"all": 4, "sideways": None, "vertical_only": None}}


def test_error_per_step_of_a_model_ends_at_its_classification_error(digits):
    data = om.generate(*digits, 12, seed=2, frame_size=16)
    model = om.build_model("temporal", frame_size=16, **TINY)
    errors = om.error_per_step(model, data, batch_size=5)
    assert len(errors["all"]) == 5 and errors["all"][-1] == om.classification_error(model, data)
    vertical = data["velocities"][:, 1] == 0
    assert errors["counts"] == {"all": 12, "sideways": int((~vertical).sum()), "vertical_only": int(vertical.sum())}
    steps = model.predict(data["frames"], verbose=0)["digit_steps"].argmax(-1)
    for group, members in (("sideways", ~vertical), ("vertical_only", vertical)):
        if members.any():
            np.testing.assert_allclose(errors[group], np.mean(steps[members] != data["labels"][members, None], 0))
        else:
            assert errors[group] is None


def test_error_per_step_rejects_bad_data_and_models_without_steps():
    model = _FixedPredictions(_steps_guessing([[1, 0], [0, 0]]))
    frames = np.zeros((2, 2, 8, 8, 1), "float32")
    for data, message in (
        ({"labels": [0, 1]}, "must be a dict with 'frames' and 'labels'"),
        ([frames], "must be a dict with 'frames' and 'labels'"),
        ({"frames": frames[:0], "labels": np.zeros(0, "int32")}, "n >= 1 sequences"),
        ({"frames": frames, "labels": [0, 1, 2]}, "n >= 1 sequences"),
        ({"frames": frames, "labels": [0, 1], "velocities": [[3, 0]]}, r"velocities shape=\(1, 2\)"),
    ):
        with pytest.raises(InputError, match=message):
            om.error_per_step(model, data)
    data = {"frames": frames, "labels": [0, 1]}
    with pytest.raises(InputError, match="Received: batch_size=0"):
        om.error_per_step(model, data, batch_size=0)
    assert model.calls == []  # checked before predicting
    no_steps = _FixedPredictions(_steps_guessing([[1, 0], [0, 0]]))
    no_steps.predict = lambda frames, **kwargs: {"digit": np.eye(3)[:2]}
    with pytest.raises(InputError, match=r"must output 'digit_steps'.*Received: outputs \['digit'\]"):
        om.error_per_step(no_steps, data)
    assert om.error_per_step(model, data)["all"] == [1.0, 0.5]


def test_plot_error_per_step_draws_a_line_per_group(tmp_path):
    import matplotlib.image

    errors = {"all": [0.75, 0.5, 0.25], "sideways": [0.5, 0.5, 0.0], "vertical_only": [1.0, 0.5, 0.5],
              "counts": {"all": 4, "sideways": 2, "vertical_only": 2}}
    path = om.plot_error_per_step(errors, tmp_path / "errors.png", title="rladder")
    image = matplotlib.image.imread(path)
    assert path == tmp_path / "errors.png" and image.ndim == 3 and image.shape[1] >= 400
    colours = {tuple(np.round(p, 1)) for p in image[..., :3].reshape(-1, 3)}
    # without velocities: the "all" line alone (fewer coloured pixels)
    alone = om.plot_error_per_step({"all": [0.75, 0.5, 0.25], "sideways": None, "vertical_only": None,
                                    "counts": {"all": 4, "sideways": None, "vertical_only": None}},
                                   str(tmp_path / "alone.png"))
    alone_colours = {tuple(np.round(p, 1)) for p in matplotlib.image.imread(alone)[..., :3].reshape(-1, 3)}
    assert len(alone_colours) < len(colours)
    assert om.plot_error_per_step({"all": [0.1]}, tmp_path / "one.png").stat().st_size > 1000
    for bad, message in (({}, "at least one frame"), ({"all": []}, "at least one frame"), (None, "at least one frame"),
                         ({"all": [0.1, 0.2], "sideways": [0.1]}, r"errors\['sideways'\]"),
                         ({"all": [0.1, float("nan")]}, r"errors\['all'\]")):
        with pytest.raises(InputError, match=message):
            om.plot_error_per_step(bad, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_evaluate_scores_as_many_test_sequences_as_train_recorded(tmp_path, capsys, monkeypatch):
    # train did not record --num-test: evaluate scored 5000 test sequences (others than train
    # scored) unless given train's number again
    import json

    from applications import __main__ as cli
    from tests.conftest import shared_path

    run_dir = tmp_path / "run"
    metrics = om.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(run_dir), epochs=1, num_train=8,
                       num_test=12, variant="temporal", conv_units=(4,), dense_units=8, batch_size=8, frame_size=16,
                       verbose=1)
    # audit 2026-11-28: after the last epoch's bar, train scored its test sequences (5000 by
    # default: minutes on a CPU) without a word; while verbose they show a progress bar, on stderr
    assert "1/1" in capsys.readouterr().err
    assert json.loads((run_dir / "metrics.json").read_text())["num_test"] == 12
    model = str(run_dir / "model.keras")
    capsys.readouterr()
    assert cli.main(["evaluate", "occluded_mnist", "--model", model, "--quiet"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["test_error_per_step"]["counts"]["all"] == 12
    assert result["test_error"] == pytest.approx(metrics["test_error"])
    # a given number still wins; without a record, 5000 as before
    assert om.evaluate(model, num_test=4)["test_error_per_step"]["counts"]["all"] == 4
    recorded = json.loads((run_dir / "metrics.json").read_text())
    del recorded["num_test"]
    (run_dir / "metrics.json").write_text(json.dumps(recorded))
    asked = []

    def generate(digits, labels, num_sequences, **kwargs):
        asked.append(num_sequences)
        raise RuntimeError("stop (simulated)")

    monkeypatch.setattr(om, "generate", generate)
    with pytest.raises(RuntimeError, match="simulated"):
        om.evaluate(model)
    assert asked == [5000]
    import argparse

    parser = argparse.ArgumentParser()
    om.add_arguments(parser, "evaluate")
    assert parser.parse_args([]).num_test is None
    assert "(default: the number `train` recorded beside the model, else 5000)" in " ".join(parser.format_help().split())


def _seen_by_loops(data, num_frames, digit_size=om.DIGIT_SIZE):
    """``seen_digits`` pixel by pixel: a digit pixel is seen when some frame puts it off the bars."""
    out = np.zeros((len(data["labels"]), digit_size, digit_size, 2), "float32")
    for i, (positions, bars) in enumerate(zip(data["positions"], data["bars"])):
        top, left = positions[0]
        for r in range(digit_size):
            for c in range(digit_size):
                if any(not bars[y + r, x + c] for y, x in positions[:num_frames]):
                    out[i, r, c] = (data["clean"][i, 0, top + r, left + c, 0], 1.0)
    return out


def test_seen_digits_are_the_digit_pixels_that_some_frame_shows(digits):
    for data in (om.generate(*digits, 40, seed=5, frame_size=24),
                 om.generate(*digits, 40, seed=5, frame_size=24, motion="compass", bars="vertical", bar_spacing=8)):
        for frames in (1, 3, None):
            expected = _seen_by_loops(data, 5 if frames is None else frames)
            np.testing.assert_array_equal(om.seen_digits(data, frames), expected)
        assert np.all(om.seen_digits(data)[..., 1] >= om.seen_digits(data, 1)[..., 1])
    # the paper's grid and motion: every digit shows more as the frames come
    data = om.generate(*digits, 40, seed=5, frame_size=24)
    every = om.seen_digits(data)[..., 1].mean(axis=(1, 2))
    first = om.seen_digits(data, 1)[..., 1].mean(axis=(1, 2))
    assert np.all(every > first) and every.mean() > 0.8 > 0.5 > first.mean()
    data = om.generate(*digits, 40, seed=5, frame_size=24, motion="compass", bars="vertical", bar_spacing=8)
    # sideways motion at 3 pixels per frame shows more of the digit as the frames come;
    # behind static vertical bars, vertical motion never shows what the first frame hid
    first, every = om.seen_digits(data, 1)[..., 1], om.seen_digits(data)[..., 1]
    vertical = data["velocities"][:, 1] == 0
    assert 0 < vertical.sum() < len(vertical)
    np.testing.assert_array_equal(first[vertical], every[vertical])
    assert every[~vertical].mean() > first[~vertical].mean() + 0.3
    assert np.all(every >= first)
    # without bars every pixel is seen, and the image is the digit
    whole = om.seen_digits(dict(data, bars=np.zeros_like(data["bars"])), 1)
    assert whole[..., 1].min() == 1.0
    top, left = data["positions"][0, 0]
    np.testing.assert_array_equal(whole[0, ..., 0], data["clean"][0, 0, top : top + 14, left : left + 14, 0])


def test_seen_digits_refuses_what_it_cannot_read(digits):
    data = om.generate(*digits, 4, seed=5, frame_size=24)
    with pytest.raises(InputError, match="'clean', 'positions' and 'bars'"):
        om.seen_digits({"frames": data["frames"], "labels": data["labels"]})
    for frames in (0, 6):
        with pytest.raises(InputError, match="num_frames"):
            om.seen_digits(data, frames)
    with pytest.raises(InputError, match="digit_size"):
        om.seen_digits(data, digit_size=20)
    with pytest.raises(InputError, match=r"'positions' \[n, T, 2\]"):
        om.seen_digits(dict(data, positions=data["positions"][:, :2]))


def test_fusion_benchmark_classifies_the_seen_digits(capsys):
    bench = _rladder_benchmark("rladder_benchmark_under_test")
    results = bench.main(["fusion", "--data-dir", str(shared_path("data", "mnist")), "--num-train", "64",
                          "--num-test", "32", "--epochs", "1", "--verbose", "0", "--intra-op-threads", "1"])
    assert list(results) == ["seen in frame 1", "seen in frames 1-5", "no bars (the whole digit)"]
    assert all(0.0 <= error <= 1.0 for error in results.values())
    out = capsys.readouterr().out
    assert "64 training and 32 test sequences" in out and "load average" in out
    # the paper's motion: no sequence moves only vertically, a dash (numpy's mean of nothing warned and gave nan)
    assert "(0 of them move only vertically)" in out and out.count("vertical only      -") == 3 and "nan" not in out


# audit 2026-11-28 (Recurrent Ladder applications)
def test_the_tfds_digits_are_read_offline_with_mock_data(tmp_path, capsys, monkeypatch):
    # `load_digits("tfds")` asked TFDS for the whole split as one batch (batch_size=-1): for a
    # split of unknown size, as tfds.testing.mock_data's, a batch of sys.maxsize that
    # aborted the process (std::length_error), so that the TFDS path could not be tested
    import json

    import tensorflow_datasets as tfds

    from applications import __main__ as cli
    from applications import tfds_data

    # mock_data prepares nothing on disk: the builder stands for a prepared one
    monkeypatch.setattr(tfds_data, "require_prepared", lambda name, data_dir=None: tfds.builder(name, data_dir=data_dir))
    model = tmp_path / "model.keras"
    om.build_model("temporal", frame_size=16, **TINY).save(model)
    with tfds.testing.mock_data(num_examples=12):
        images, labels = om.load_digits("tfds", str(tmp_path), "train")
        assert images.shape == (12, 28, 28) and images.dtype == np.float32
        assert 0.0 <= images.min() and images.max() <= 1.0 and images.max() > 0.5
        assert labels.shape == (12,) and labels.dtype == np.int32 and set(labels) <= set(range(10))
        train, test = om.make_sequences("tfds", str(tmp_path), num_train=6, num_test=4, frame_size=16)
        assert train["frames"].shape == (6, 5, 16, 16, 1) and test["frames"].shape == (4, 5, 16, 16, 1)
        again = om.make_sequences("tfds", str(tmp_path), num_train=6, num_test=4, frame_size=16)
        assert all(np.array_equal(test[key], again[1][key]) for key in test)
        capsys.readouterr()
        argv = ["evaluate", "occluded_mnist", "--model", str(model), "--source", "tfds", "--data-dir",
                str(tmp_path), "--num-test", "4", "--quiet"]
        read, load = [], om.load_digits
        monkeypatch.setattr(om, "load_digits", lambda *a, **kw: (read.append(a[2:] or kw.get("split")), load(*a, **kw))[1])
        assert cli.main(argv) == 0, capsys.readouterr().err
    assert read == [("test",)]  # evaluate read (and dropped) the 60,000 training digits too
    result = json.loads(capsys.readouterr().out)
    assert result["test_error_per_step"]["counts"]["all"] == 4 and 0.0 <= result["test_error"] <= 1.0


def test_train_from_python_stops_a_diverged_run_in_one_line(tmp_path):
    # audit (2026-11-28): `train` called from Python (without the command line's resumable
    # callbacks) trained a NaN model to the end, then saved and scored it: no error
    from applications.fault_tolerance import TrainingDivergedError
    from tests.applications.cli_helpers import PoisonWeightsAt
    from tests.conftest import shared_path

    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match=r"^training diverged: the loss became nan in epoch 1, batch 2"):
        om.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(run_dir), epochs=1, num_train=8, num_test=4,
                 variant="temporal", conv_units=(4,), dense_units=8, batch_size=4, frame_size=16, verbose=0,
                 callbacks=[PoisonWeightsAt(1)])
    assert not (run_dir / "model.keras").exists() and not (run_dir / "metrics.json").exists()


@pytest.mark.graph_mode  # graph mode: it checks traced code
def test_train_predicts_the_test_sequences_once_for_the_errors_and_the_plot(tmp_path, monkeypatch):
    # train predicted the plot's three sequences, then every test sequence: a batch of
    # another shape, so Keras traced the predict step a second time (about 1 s a run)
    from keras.src.backend.tensorflow import trainer as tf_trainer

    traces, drawn = [], []
    predict_step = tf_trainer.TensorFlowTrainer.predict_step
    monkeypatch.setattr(tf_trainer.TensorFlowTrainer, "predict_step",
                        lambda self, data: traces.append(1) or predict_step(self, data))
    draw = om._draw_predictions
    monkeypatch.setattr(om, "_draw_predictions", lambda out, frames, path, labels: drawn.append((out, frames, labels))
                        or draw(out, frames, path, labels))
    run_dir = tmp_path / "run"
    result = om.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(run_dir), epochs=1, num_train=8,
                      num_test=10, variant="rladder", conv_units=(4,), dense_units=8, batch_size=8, frame_size=16,
                      verbose=0)
    assert len(traces) == 1
    assert (run_dir / "predictions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the plot shows the predictions of its sequences, those that the errors counted
    (out, frames, labels), = drawn
    assert len(frames) == 10 and result["test_error_per_step"]["counts"]["all"] == 10
    again = keras.models.load_model(run_dir / "model.keras").predict(frames[:3], verbose=0)
    for key in ("digit_steps", "next_frames"):
        np.testing.assert_allclose(out[key][:3], again[key], rtol=1e-5, atol=1e-6)
    assert result["test_error"] == pytest.approx(float(np.mean(np.argmax(out["digit"], -1) != labels)))


def test_train_files_beside_t10k_train_and_evaluate_keeps_the_split_train_recorded(tmp_path, monkeypatch):
    # Only the t10k files were read: a folder with MNIST's 60,000 training digits beside
    # them trained on four fifths of the 10,000 test digits. Now the train files train;
    # and a model trained on a t10k split is scored on that split's test digits even once
    # train files are put beside it (all of t10k would hold its training digits).
    import json

    from applications.mnist_digits import load_idx_train_test
    from tests.applications.mnist_folders import mnist_folder, write_idx

    drawn, tiny = _record_generated_digits(monkeypatch), TINY_TRAIN
    full = mnist_folder(tmp_path / "full", num_train=40)
    train_files, t10k = (load_idx_digits(full, prefix) for prefix in ("train", "t10k"))
    om.train(run_dir=str(tmp_path / "on_full"), data_dir=str(full), **tiny)
    assert [len(d) for d in drawn] == [40, 10000]
    np.testing.assert_array_equal(drawn[0], train_files[0][..., 0])
    np.testing.assert_array_equal(drawn[1], t10k[0][..., 0])
    assert json.loads((tmp_path / "on_full" / "metrics.json").read_text())["split"]["idx_layout"] == "train+t10k"
    (full / "train-images-idx3-ubyte.gz").write_bytes(b"gone")  # evaluate reads no training digit
    drawn.clear()
    om.evaluate(str(tmp_path / "on_full" / "model.keras"))
    np.testing.assert_array_equal(drawn[0], t10k[0][..., 0])

    alone = mnist_folder(tmp_path / "alone")
    drawn.clear()
    trained = om.train(run_dir=str(tmp_path / "on_alone"), data_dir=str(alone), seed=1, **tiny)
    want_train, want_test, _ = load_idx_train_test(alone, 1)
    np.testing.assert_array_equal(drawn[0], want_train[0][..., 0])
    np.testing.assert_array_equal(drawn[1], want_test[0][..., 0])
    metrics_path = tmp_path / "on_alone" / "metrics.json"
    assert json.loads(metrics_path.read_text())["split"]["idx_layout"] == "t10k"
    write_idx(alone, "train", (train_files[0][..., 0] * 255).round(), train_files[1])  # put there after training
    for older in (False, True):  # older: a record written before the layout was recorded
        if older:
            metrics = json.loads(metrics_path.read_text())
            del metrics["split"]["idx_layout"]
            metrics_path.write_text(json.dumps(metrics))
        drawn.clear()
        scored = om.evaluate(str(tmp_path / "on_alone" / "model.keras"))
        np.testing.assert_array_equal(drawn[0], want_test[0][..., 0])
        assert scored["test_error_per_step"] == trained["test_error_per_step"]


def test_a_backup_on_a_t10k_split_is_not_resumed_once_train_files_are_beside_it(tmp_path, monkeypatch):
    # Left alone in note 76: a run that crashed on a folder of t10k files alone, rerun
    # (the same command) after MNIST's train files were put beside them, resumed its backup
    # and went on training on the train digits, scored on all of t10k (four fifths of which
    # had trained it). Now the backup records the folder's split and the rerun is refused
    # before anything is written; with the folder as it was, the run resumes.
    import json

    from applications import fault_tolerance
    from applications.mnist_digits import idx_fingerprint
    from tests.applications import cli_helpers
    from tests.applications.mnist_folders import mnist_folder, write_idx

    folder, run_dir = mnist_folder(tmp_path / "digits"), tmp_path / "run"
    options = {"data_dir": str(folder), "epochs": 2}  # as the command line records them

    def train(run_dir, callbacks=()):
        return om.train(data_dir=str(folder), run_dir=run_dir, **{**TINY_TRAIN, "epochs": 2}, callbacks=[
            *fault_tolerance.resumable_callbacks(run_dir, run_options=options), *callbacks])

    with pytest.raises(RuntimeError, match="simulated"):
        train(str(run_dir), callbacks=[cli_helpers.CrashAt(1)])
    backup = run_dir / fault_tolerance.BACKUP_DIR
    recorded = json.loads((backup / "training_metadata.json").read_text())
    assert recorded["epoch"] == 1 and recorded["options"] == {
        **options, "idx_layout": "t10k", "data_fingerprint": idx_fingerprint(folder)}
    write_idx(folder, "train", np.zeros((8, 28, 28)), np.arange(8))
    drawn = _record_generated_digits(monkeypatch)
    before = sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file())
    with pytest.raises(fault_tolerance.BackupMismatchError,
                       match=r"is of a run on other data: MNIST IDX files in .*, where train-images-idx3-ubyte.gz is "
                             r"new, train-labels-idx1-ubyte.gz is new\), the data folder's MNIST split t10k "
                             r"\(now train\+t10k\); put the data folder back"):
        train(str(run_dir))
    assert drawn == []  # refused before a sequence was made
    assert sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file()) == before
    for prefix_file in folder.glob("train-*"):
        prefix_file.unlink()
    result = train(str(run_dir))
    assert result["epochs_run"] == 2 and result["split"]["idx_layout"] == "t10k"
    assert not backup.exists()


def test_a_backup_is_resumed_on_its_digits_in_another_folder_and_not_on_other_digits(tmp_path):
    # Another folder of t10k files alone (other digits, the same split) resumed the backup:
    # the run went on training on the other digits, and was scored on them. The backup
    # records the files' fingerprint now; the same files moved elsewhere still resume.
    from applications import fault_tolerance
    from tests.applications import cli_helpers
    from tests.applications.mnist_folders import mnist_folder, other_t10k_folder

    first, other, run_dir = mnist_folder(tmp_path / "first"), other_t10k_folder(tmp_path / "other"), tmp_path / "run"

    def train(folder, callbacks=()):
        return om.train(data_dir=str(folder), run_dir=str(run_dir), **{**TINY_TRAIN, "epochs": 2}, callbacks=[
            *fault_tolerance.resumable_callbacks(str(run_dir), run_options={"epochs": 2}), *callbacks])

    with pytest.raises(RuntimeError, match="simulated"):
        train(first, callbacks=[cli_helpers.CrashAt(1)])
    with pytest.raises(fault_tolerance.BackupMismatchError, match=re.escape(
            f"is of a run on other data: MNIST IDX files in {first} (now MNIST IDX files in {other}, where")):
        train(other)
    os.rename(first, tmp_path / "moved")
    assert train(tmp_path / "moved")["epochs_run"] == 2


def test_evaluate_refuses_other_test_digits_in_the_runs_folder_and_takes_them_moved(tmp_path):
    # evaluate read the recorded --data-dir whatever it held since: other digits there were
    # scored silently as the run's test sequences, and the same files moved elsewhere were
    # refused as another split. metrics.json records the IDX files' fingerprint now.
    import json

    from applications.errors import CommandLineError
    from applications.mnist_digits import idx_fingerprint
    from tests.applications.mnist_folders import mnist_folder, other_t10k_folder

    first, moved, run_dir = mnist_folder(tmp_path / "first"), tmp_path / "moved", tmp_path / "run"
    trained = om.train(run_dir=str(run_dir), data_dir=str(first), **TINY_TRAIN)
    model, metrics_path = str(run_dir / "model.keras"), run_dir / "metrics.json"
    assert json.loads(metrics_path.read_text())["data_fingerprint"] == idx_fingerprint(first)
    os.rename(first, moved)
    assert om.evaluate(model, data_dir=str(moved))["test_error_per_step"] == trained["test_error_per_step"]
    other_t10k_folder(first)
    for data_dir in (None, str(first)):
        with pytest.raises(InputError, match=re.escape(
                f"the model in {run_dir} was trained and tested on MNIST IDX files in {first}; {first} now holds "
                "other data (MNIST IDX files, where t10k-images-idx3-ubyte.gz differs, t10k-labels-idx1-ubyte.gz "
                "differs): put the run's data back there")):
            om.evaluate(model, data_dir=data_dir)
    with pytest.raises(CommandLineError, match="was trained on another train/test split"):
        om.evaluate(model, data_dir=str(other_t10k_folder(tmp_path / "else")))
    metrics = json.loads(metrics_path.read_text())  # a record of an older version: evaluated as before
    del metrics["data_fingerprint"]
    metrics_path.write_text(json.dumps(metrics))
    assert om.evaluate(model)["scored_on"] == "test"


def test_classification_error_refuses_labels_that_are_not_one_per_sequence():
    # Audit (apps 1): labels of length 1 were broadcast against every sequence's guess (an
    # error rate, no error), where error_per_step refused the same data.
    model = _FixedPredictions(_steps_guessing([[1, 0], [0, 2], [2, 0]]))  # last guesses: 0, 2, 0
    frames = np.zeros((3, 2, 8, 8, 1), "float32")
    for labels, shape in (([0], "(1,)"), ([0, 2], "(2,)"), ([0, 2, 0, 1], "(4,)"), ([[0, 2, 0]], "(1, 3)")):
        with pytest.raises(InputError, match=rf"n >= 1 sequences.*Received: labels shape={re.escape(shape)}, "
                                             "3 frame sequences"):
            om.classification_error(model, {"frames": frames, "labels": labels})
    with pytest.raises(InputError, match="must be a dict with 'frames' and 'labels'"):
        om.classification_error(model, {"frames": frames})
    assert model.calls == []  # checked before predicting
    assert om.classification_error(model, {"frames": frames, "labels": [0, 2, 1]}) == pytest.approx(1 / 3)


@pytest.mark.parametrize("augment", ["fresh", "affine"])
def test_an_augmented_training_dataset_checks_its_frame_size_when_made(digits, augment):
    # Audit (apps 1): with augment, a frame smaller than the digit (10 < 14) was refused only
    # when the dataset was read (inside a tf.data error), and frame_size=2.5 was a TypeError
    # of tf.TensorSpec.
    for bad in (10, 2.5, 0):
        with pytest.raises(InputError, match=rf"Received: frame_size={bad}$"):
            om.make_training_dataset(*digits, 4, batch_size=4, augment=augment, frame_size=bad)
    frames, targets = next(iter(om.make_training_dataset(*digits, 4, batch_size=4, augment=augment, frame_size=14)))
    assert frames.shape == (4, om.NUM_FRAMES, 14, 14, 1) and targets["digit"].shape == (4,)


def test_bars_trajectories_and_seeds_refuse_what_they_cannot_use(digits):
    # Audit (apps 1): bar_mask(offset=nan) was a frame without bars; trajectory(limit=-5)
    # positions outside [0, limit]; augment_digits(seed=-1) numpy's traceback;
    # make_sequences(seed=[1, 2]) a TypeError after the digits were read; and
    # generate(digit_size=5) named downscale's `size`.
    for offset in (float("nan"), 0.5, True, "1"):
        with pytest.raises(InputError, match=rf"`offset` must be an integer.*Received: offset={re.escape(repr(offset))}"):
            om.bar_mask(offset=offset)
    np.testing.assert_array_equal(om.bar_mask(offset=np.int64(3)), om.bar_mask(offset=3 + 12))
    for limit in (-5, 2.5):
        with pytest.raises(InputError, match=rf"Received: limit={limit}"):
            om.trajectory((0, 0), (1, 1), 3, limit)
    with pytest.raises(InputError, match="Received: num_frames=0"):
        om.trajectory((0, 0), (1, 1), 0, 4)
    for seed in (-1, True, 1.5):
        with pytest.raises(InputError, match=rf"Received: seed={seed}"):
            om.augment_digits(np.zeros((2, 28, 28), "float32"), seed=seed)
    for seed in ([1, 2], -1, 1.5):
        with pytest.raises(InputError, match=rf"Received: seed={re.escape(repr(seed))}"):
            om.make_sequences(num_train=2, num_test=2, seed=seed)
    with pytest.raises(InputError, match=r"`digit_size` must divide the digits' size 28. Received: digit_size=5"):
        om.generate(*digits, 2, digit_size=5)


def test_an_unreadable_idx_file_is_one_line_in_train_and_evaluate(tmp_path, monkeypatch):
    # (2026-12-06) The IDX files' fingerprint (mnist_digits.idx_fingerprint) read them before
    # the loader: a t10k file that cannot be read (no permission) was a PermissionError
    # traceback from train (of occluded_mnist and textured_mnist) and from evaluate (of
    # them and the demo), where the loader said in one line which file is unreadable.
    import builtins

    from applications import demo
    from applications import textured_mnist as tm
    from tests.applications.mnist_folders import mnist_folder

    folder, run_dir = mnist_folder(tmp_path / "mnist"), tmp_path / "run"
    om.train(run_dir=str(run_dir), data_dir=str(folder), **TINY_TRAIN)
    demo_run = demo.train(run_dir=str(tmp_path / "demo"), data_dir=str(folder), epochs=1, limit=60)
    locked, opened = str(folder / "t10k-images-idx3-ubyte.gz"), builtins.open

    def denied(file, *args, **kwargs):  # (as a file without read permission: root reads anyway)
        if isinstance(file, (str, os.PathLike)) and os.fspath(file) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return opened(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    unreadable = re.escape(f"{locked} is not a readable gzipped IDX file: [Errno 13] Permission denied")
    for run in (lambda: om.train(run_dir=str(tmp_path / "again"), data_dir=str(folder), **TINY_TRAIN),
                lambda: tm.train(run_dir=str(tmp_path / "textured"), data_dir=str(folder), epochs=1, num_train=8,
                                 num_test=8, verbose=0),
                lambda: om.evaluate(str(run_dir / "model.keras")),
                lambda: demo.evaluate(demo_run["model"])):
        with pytest.raises(InputError, match=unreadable):  # was a PermissionError traceback
            run()


class _InlinePool:
    """A stand-in for ``ProcessPoolExecutor``: runs every submitted call at once, here."""

    def __init__(self, workers, mp_context=None):
        self.workers = workers

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def submit(self, function, *args):
        import concurrent.futures

        future = concurrent.futures.Future()
        future.set_result(function(*args))
        return future


def test_the_parallel_benchmark_says_how_many_variants_share_the_machine(monkeypatch, capsys):
    import concurrent.futures

    bench = _rladder_benchmark("rladder_benchmark_parallel")
    budgets, pools = [], []

    def fake_variant(args, variant, budget_seconds):
        budgets.append((variant, budget_seconds))
        return _fake_run(variant, 1e-3)

    monkeypatch.setattr(bench, "_occluded_variant", fake_variant)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor",
                        lambda workers, mp_context=None: pools.append(workers) or _InlinePool(workers))
    bench.main(["occluded", "--budget-minutes", "2"])
    assert "3 variants side by side, 2 minutes each\n" in capsys.readouterr().out
    # each one has the whole budget, in a process of its own
    assert pools == [3] and budgets == [(v, 120.0) for v in ("rladder", "temporal", "no_feedback")]
    bench.main(["occluded", "--budget-minutes", "2", "--variants", "rladder"])
    out = capsys.readouterr().out
    assert "1 variant in a process of its own, 2 minutes\n" in out and "side by side" not in out
