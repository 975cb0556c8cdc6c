"""Occluded Moving MNIST: the generator, the four models, saving and learning."""

import keras
import numpy as np
import pytest

from applications import occluded_mnist as om
from applications.mnist_digits import load_idx_digits
from tests.conftest import shared_path

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
    # bars: 4 columns on out of every 8, over the digit in every frame
    for bars, seq in zip(data["bars"], frames[..., 0]):
        on = bars[0]
        assert on.sum() == 16 and on[:8].sum() == 4 and np.array_equal(on[:-8], on[8:])
        assert np.all(seq[:, :, on] == 1.0)
    # the clean digit is hidden under the bars
    assert np.any(data["clean"][..., 0][:, :, data["bars"][0]] > 0)
    # bouncing keeps the whole 14x14 digit inside the 32x32 frame
    pos = data["positions"]
    assert pos.min() >= 0 and pos.max() <= 32 - 14
    steps = np.abs(np.diff(pos, axis=1))
    assert np.all((steps == 0) | (steps <= 3))
    assert set(map(tuple, np.sign(data["velocities"]))) <= set(om.DIRECTIONS)
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


def test_rladder_learns_something(digits):
    keras.utils.set_random_seed(0)
    data = om.generate(*digits, 64, seed=0)
    model = om.compile_model(om.build_model("rladder", **TINY), learning_rate=1e-2)
    ds = om.make_dataset(data, "rladder", batch_size=16)
    before = model.evaluate(ds, verbose=0, return_dict=True)
    model.fit(ds, epochs=16, verbose=0)
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


def test_bad_conv_options():
    with pytest.raises(ValueError, match="Received: conv_encoder='lstm'"):
        om.build_model("rladder", conv_encoder="lstm", **TINY)
    with pytest.raises(ValueError, match="Received: conv_normalization='batch'"):
        om.build_model("rladder", conv_encoder="conv", conv_normalization="batch", **TINY)
    with pytest.raises(ValueError, match="needs conv_encoder='conv'"):
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
        assert [s["encoder"] for s in levels] == ["conv"] * 3 + ["gated"]
        assert [s["normalization"] for s in levels[:3]] == ["instance"] * 3
        assert isinstance(default.get_layer("rladder").feedback_initializer, keras.initializers.Zeros)
        levels = paper.get_layer("rladder").levels
        assert [s["encoder"] for s in levels] == ["convlstm"] * 3 + ["gated"]
        assert all(s["normalization"] is None for s in levels[:3])
    with pytest.raises(ValueError, match="Received: jit_compile=1"):
        om.compile_model(om.build_model("temporal", **TINY), jit_compile=1)
    assert om.compile_model(om.build_model("temporal", **TINY), jit_compile=True).jit_compile
