"""Sort-of-CLEVR: answers by hand, the data stream, the model (padding, saving, a step)."""

import os
import re

import keras
import numpy as np
import pytest

from applications import sort_of_clevr as soc


def _scene():
    # red (0) left-top square; green (1) circle right next to it; blue (2) far right
    # bottom circle; the rest squares on the right.
    positions = np.array(
        [[0.1, 0.1], [0.2, 0.1], [0.9, 0.9], [0.6, 0.4], [0.7, 0.6], [0.8, 0.2]]
    )
    return {"shapes": np.array([0, 1, 1, 0, 0, 0]), "positions": positions}


@pytest.mark.parametrize(
    "template,color,expected",
    [
        (0, 0, "square"),
        (0, 2, "circle"),
        (1, 0, "yes"),
        (1, 2, "no"),
        (2, 0, "yes"),
        (2, 2, "no"),
        (3, 0, "circle"),  # closest to red: green
        (3, 2, "square"),  # closest to blue: gray (0.7, 0.6)
        (4, 0, "circle"),  # farthest from red: blue
        (4, 2, "square"),  # farthest from blue: red
        (5, 0, "4"),
        (5, 1, "2"),
        (6, 0, "square"),  # farthest from red: blue; nearest to blue: gray
        (6, 2, "circle"),  # farthest from blue: red; nearest to red: green
    ],
)
def test_answers_by_hand(template, color, expected):
    assert soc.ANSWERS[soc.answer(_scene(), template, color)] == expected


def test_examples_are_consistent_and_deterministic():
    (x, y) = soc.generate_examples(32, seed=3)
    assert x["question"].shape == (32, soc.MAX_QUESTION_LENGTH)
    assert x["kb"].shape == (32, 6, soc.KB_DIM) and y.shape == (32,)
    for tokens, kb, ans in zip(x["question"], x["kb"], y):
        text = soc.detokenize(tokens)
        color = next(c for c in soc.COLORS if f" {c} object" in text)
        template = [t for t, s in enumerate(soc.TEMPLATES) if s.format(color) == text]
        scene = {"shapes": kb[:, 6:8].argmax(-1), "positions": kb[:, 8:]}
        assert len(template) == 1
        assert soc.answer(scene, template[0], soc.COLORS.index(color)) == ans
    x2, y2 = soc.generate_examples(32, seed=3)
    np.testing.assert_array_equal(x2["kb"], x["kb"])
    np.testing.assert_array_equal(y2, y)
    _, y_rel = soc.generate_examples(64, seed=0, relational=True)
    _, y_non = soc.generate_examples(64, seed=0, relational=False)
    assert set(y_non) <= {0, 1, 2, 3}
    assert set(y_rel) - {0, 1}  # counts and shapes


def test_dataset_stream():
    ds = soc.make_dataset(batch_size=8, seed=1)
    (x, y), = ds.take(1)
    assert x["question"].shape == (8, soc.MAX_QUESTION_LENGTH) and x["question"].dtype == "int32"
    assert x["kb"].shape == (8, 6, soc.KB_DIM) and y.shape == (8,)
    (x2, _), = soc.make_dataset(batch_size=8, seed=1).take(1)
    np.testing.assert_array_equal(x["kb"], x2["kb"])
    # Batches are the per-example stream cut in order: two batches of 4 are the
    # examples generate_examples draws from the same seed.
    expected_x, expected_y = soc.generate_examples(8, seed=1)
    batches = list(soc.make_dataset(batch_size=4, seed=1).take(2))
    for key in ("question", "kb"):
        np.testing.assert_array_equal(np.concatenate([b[0][key] for b in batches]), expected_x[key])
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), expected_y)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            soc.make_dataset(batch_size=bad)


def test_model_padding_saving_and_a_training_step(tmp_path):
    model = soc.build_model(units=16, max_steps=2, embedding_dim=8)
    x, y = soc.generate_examples(8, seed=2)
    logits = model(x)
    assert logits.shape == (8, len(soc.ANSWERS))
    # Extra padding never changes the answer (the mask reaches the MAC network).
    longer = dict(x, question=np.pad(x["question"], [(0, 0), (0, 3)]))
    np.testing.assert_allclose(model(longer), logits, atol=1e-5)
    path = str(tmp_path / "soc.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded(x), logits, atol=1e-6)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(soc.make_dataset(batch_size=8), steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_render_scene_draws_squares_and_circles_where_the_kb_says():
    scene = {"shapes": np.array([0, 1, 0, 1, 0, 1]), "positions": np.array(
        [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5], [0.5, 0.0]])}
    image = soc.render_scene(scene)
    assert image.shape == (75, 75, 3) and image.dtype == np.float32
    assert image.min() >= 0.0 and image.max() <= 1.0
    centres = soc.pixel_centres(scene["positions"])
    for k, (cx, cy) in enumerate(centres):
        np.testing.assert_array_equal(image[cy, cx], soc.RGB[k])
        corner = image[cy - 5, cx - 5]  # inside a square, outside a circle
        expected = soc.RGB[k] if scene["shapes"][k] == 0 else np.ones(3)
        np.testing.assert_array_equal(corner, expected)
    assert (centres[0] == 6).all() and (centres[3] == 68).all()  # objects stay on the canvas
    # "on the left" agrees with the drawing: centre column < 37 iff x < 0.5.
    assert soc.pixel_centres([[0.49, 0.51]])[0, 0] <= 37 <= soc.pixel_centres([[0.51, 0.51]])[0, 0]


def test_image_examples_match_their_symbolic_scene():
    x, y = soc.generate_examples(6, seed=4, kb="both")
    assert x["image"].shape == (6, 75, 75, 3) and x["kb"].shape == (6, 6, soc.KB_DIM)
    for image, kb in zip(x["image"], x["kb"]):
        pos = kb[:, 8:]
        distances = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + 9 * np.eye(6)
        assert distances.min() >= soc.IMAGE_MIN_DISTANCE  # nothing hidden
        for k, (cx, cy) in enumerate(soc.pixel_centres(pos)):
            np.testing.assert_array_equal(image[cy, cx], soc.RGB[k])
    x_img, y_img = soc.generate_examples(6, seed=4, kb="image")
    assert set(x_img) == {"question", "image"}
    np.testing.assert_array_equal(y_img, y)
    (xd, _), = soc.make_dataset(batch_size=2, seed=4, kb="image").take(1)
    assert xd["image"].shape == (2, 75, 75, 3)
    two_hop = soc.generate_examples(4, templates=[soc.TWO_HOP])[0]["question"]
    assert all("farthest" in soc.detokenize(q) and "nearest" in soc.detokenize(q) for q in two_hop)


def test_image_model_and_attention_plots(tmp_path):
    x, _ = soc.generate_examples(2, seed=5, kb="both")
    model = soc.build_model(units=16, max_steps=2, embedding_dim=8, kb="image", stem_filters=8)
    logits = model({"question": x["question"], "image": x["image"]})
    assert logits.shape == (2, len(soc.ANSWERS))
    assert model.get_layer("kb_cells").output.shape == (None, 25, 16)
    path = str(tmp_path / "img.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded({"question": x["question"], "image": x["image"]}), logits, atol=1e-5)
    png = b"\x89PNG\r\n\x1a\n"
    for kb, m in (("image", loaded), ("kb", soc.build_model(units=16, max_steps=3, embedding_dim=8))):
        out = soc.plot_example_attention(m, {"question": x["question"], kb: x[kb]}, str(tmp_path / f"{kb}.png"), 1)
        with open(out, "rb") as f:
            assert f.read(8) == png


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_learns_shape_questions_in_a_few_seconds():
    keras.utils.set_random_seed(0)
    model = soc.build_model(units=32, max_steps=1, embedding_dim=16)
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = soc.generate_examples(768, seed=1, templates=[0])
    x_test, y_test = soc.generate_examples(256, seed=2, templates=[0])
    model.fit(x, y, batch_size=32, epochs=8, verbose=0)
    # chance: 0.5; seeds 0-3 reach 0.94-1.0 (the coordinate channels slow the colour
    # lookup down at first: without them 4 epochs were enough)
    assert model.evaluate(x_test, y_test, verbose=0)[1] > 0.8


def test_coordinate_encoding_values_and_distance_as_a_bilinear_form():
    objects = soc.scene_kb(_scene())[None]  # [1, 6, 10], x and y last
    layer = soc.CoordinateEncoding(num_frequencies=3)
    out = keras.ops.convert_to_numpy(layer(objects))[0]
    assert out.shape == (6, 10 + 2 * 2 * 3) == layer.compute_output_shape((None, 6, 10))[1:]
    np.testing.assert_array_equal(out[:, :10], objects[0])
    w = np.pi / 2 * 2.0 ** np.arange(3)
    angles = np.concatenate([objects[0, :, -2:] * wk for wk in w], -1)  # [x w0, y w0, x w1, ...]
    np.testing.assert_allclose(out[:, 10:16], np.sin(angles) / np.sqrt(3), atol=1e-6)
    np.testing.assert_allclose(out[:, 16:], np.cos(angles) / np.sqrt(3), atol=1e-6)
    np.testing.assert_allclose(np.sum(out[:, 10:] ** 2, -1), 2.0, atol=1e-5)  # unit norm per coordinate
    # sum over axes of cos(w0 (p - q)) is a dot product of the channels: with w0 = pi/2
    # it falls strictly with the distance along each axis, so the nearest object to red
    # (green, next to it) scores highest among the others.
    lowest = np.concatenate([out[:, 10:12], out[:, 16:18]], -1)  # sin, cos of w0 x, w0 y
    similarity = 3 * lowest @ lowest[0]
    np.testing.assert_allclose(
        similarity, np.cos(w[0] * (objects[0, :, 8] - objects[0, 0, 8]))
        + np.cos(w[0] * (objects[0, :, 9] - objects[0, 0, 9])), atol=1e-6,
    )
    assert np.argmax(similarity[1:]) + 1 == 1


def test_symbolic_model_encodes_coordinates_unless_told_not_to():
    names = [layer.name for layer in soc.build_model(units=8, embedding_dim=4, max_steps=1).layers]
    assert "kb_coordinates" in names
    plain = soc.build_model(units=8, embedding_dim=4, max_steps=1, coordinate_frequencies=0)
    assert "kb_coordinates" not in [layer.name for layer in plain.layers]
    assert plain.get_layer("kb_projection").kernel.shape == (soc.KB_DIM, 8)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: units=15"):
        soc.build_model(units=15)
    with pytest.raises(ValueError, match="Received: relational='yes'"):
        soc.generate_examples(2, relational="yes")
    with pytest.raises(ValueError, match="Received: kb='pixels'"):
        soc.generate_examples(2, kb="pixels")
    with pytest.raises(ValueError, match="Received: kb='both'"):
        soc.build_model(kb="both")
    with pytest.raises(ValueError, match="Received: coordinate_frequencies=-1"):
        soc.build_model(coordinate_frequencies=-1)
    with pytest.raises(ValueError, match="Received: num_frequencies=0"):
        soc.CoordinateEncoding(num_frequencies=0)
    with pytest.raises(ValueError, match="Received: base_frequency=nan"):
        soc.CoordinateEncoding(base_frequency=float("nan"))
    with pytest.raises(ValueError, match="needs at least that many features"):
        soc.CoordinateEncoding(coordinates=3)(np.zeros((1, 6, 2), "float32"))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One tiny ``train sort_of_clevr`` from the command line's options (seed 3, 6 validation
    questions; traced, as module fixtures are set up before the tests' eager mode):
    ``(run folder, train's result)``. Read by test_train_writes_the_run_outputs and
    test_evaluate_asks_the_validation_questions_that_train_recorded, which changes a copy only."""
    import tensorflow as tf

    from applications import __main__ as cli

    run = tmp_path_factory.mktemp("soc_trained_run") / "run"
    args = cli._defaults(cli.build_parser("sort_of_clevr").parse_args(
        ["train", "sort_of_clevr", "--run-dir", str(run), "--steps", "1", "--epochs", "1", "--batch-size", "4",
         "--units", "8", "--embedding-dim", "4", "--mac-steps", "1", "--validation-examples", "6", "--seed", "3",
         "--quiet"]))
    return run, soc.run_train(args, tf.distribute.get_strategy())


def test_train_writes_the_run_outputs(trained_run):
    run, result = trained_run
    assert 0.0 <= result["relational_accuracy"] <= 1.0 and 0.0 <= result["non_relational_accuracy"] <= 1.0
    for key in ("model", "plot", "metrics", "attention"):
        assert os.path.exists(result[key])
    assert os.listdir(run / "logs")


def test_the_image_models_saved_statistics_are_those_of_its_ema_weights(tmp_path):
    # The optimizer averages the trainable weights only: the image stem's batch
    # normalization kept the statistics of the raw weights, and a run of 3,000 steps
    # scored 27.5% with them where statistics of the averaged weights gave 64.1%.
    # (statistics_steps=4: the recipe's 100 batches, three passes of them, took most of the test)
    from keras_capsules.callbacks import estimate_batch_norm_statistics

    result = soc.train(
        str(tmp_path / "run"), steps=6, epochs=2, batch_size=8, kb="image", validation_examples=8,
        learning_rate=3e-3, model_kwargs={"units": 8, "embedding_dim": 4, "max_steps": 2, "stem_filters": 4}, verbose=0,
        statistics_steps=4,
    )
    model = keras.models.load_model(result["model"])
    layers = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(layers) == 4
    # the training stream's first statistics_steps batches, with the saved (EMA) weights
    for layer, (mean, variance) in zip(layers, estimate_batch_norm_statistics(model, soc.make_dataset(8, 0, kb="image"),
                                                                                4)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_mean), mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_variance), variance, rtol=1e-4, atol=1e-5)


def _train_with(monkeypatch, fit):
    """``soc.train`` calls ``fit`` instead of Keras' and neither evaluates, saves nor plots:
    for tests of what train asks of fit (the run itself is tested above)."""
    from applications import demo

    monkeypatch.setattr(keras.Model, "fit", fit)
    monkeypatch.setattr(keras.Model, "evaluate", lambda *args, **kwargs: [1.0, 0.5])
    for module, name in ((demo, "save_atomically"), (demo, "plot_history"), (soc, "plot_example_attention")):
        monkeypatch.setattr(module, name, lambda *args, **kwargs: None)


def test_the_statistics_steps_are_100_unless_told_and_a_bad_count_is_refused(tmp_path, capsys, monkeypatch):
    # train fixed them at 100 batches (clevr.recipe_callbacks): no run could ask for fewer
    import argparse
    import inspect

    import tensorflow as tf

    from applications import __main__ as cli
    from keras_capsules.callbacks import SwapEMAWeightsAndStatistics

    assert inspect.signature(soc.train).parameters["statistics_steps"].default == 100
    parser = cli.build_parser("sort_of_clevr")
    assert parser.parse_args(["train", "sort_of_clevr"]).statistics_steps == 100
    assert parser.parse_args(["train", "sort_of_clevr", "--statistics-steps", "3"]).statistics_steps == 3
    train_parser = argparse.ArgumentParser()
    soc.add_arguments(train_parser, "train")
    assert ("image KB: training batches that re-estimate the stem's batch-normalization statistics for the EMA "
            "weights at every swap to them (validation, the saved model) (default: 100)") in " ".join(
        train_parser.format_help().split())
    for bad in ("0", "-2", "1.5"):
        with pytest.raises(SystemExit):
            parser.parse_args(["train", "sort_of_clevr", "--statistics-steps", bad])
        assert f"--statistics-steps: expected a positive integer, got {bad!r}" in capsys.readouterr().err, bad
    asked = []  # the command line's value reaches train
    with monkeypatch.context() as patch:
        patch.setattr(soc, "train", lambda **kwargs: asked.append(kwargs["statistics_steps"]))
        for argv in ([], ["--statistics-steps", "3"]):
            soc.run_train(cli._defaults(parser.parse_args(
                ["train", "sort_of_clevr", "--run-dir", str(tmp_path / f"cli{len(asked)}"), *argv])),
                tf.distribute.get_strategy())
    assert asked == [100, 3]
    for bad in (0, 2.5, True, None):  # refused before the run directory is made
        with pytest.raises(ValueError, match=rf"Received: statistics_steps={bad!r}"):
            soc.train(str(tmp_path / "bad"), steps=1, statistics_steps=bad, verbose=0)
    assert not (tmp_path / "bad").exists()
    # the count reaches the swap of the recipe's callbacks, whose other callbacks stay
    from applications.fault_tolerance import StopOnDivergence

    swaps = []

    def fit(model, *args, callbacks=(), **kwargs):  # the callbacks train gives fit (the run itself: tested above)
        swaps.extend(c.statistics_steps for c in callbacks if isinstance(c, SwapEMAWeightsAndStatistics))
        assert {StopOnDivergence, keras.callbacks.TensorBoard} <= {type(c) for c in callbacks}
        return keras.callbacks.History()

    _train_with(monkeypatch, fit)
    tiny = {"units": 4, "embedding_dim": 2, "max_steps": 1}
    for given in ({}, {"statistics_steps": 7}):
        soc.train(str(tmp_path / "run"), steps=1, validation_examples=2, model_kwargs=tiny, verbose=0, **given)
    assert swaps == [100, 7]


@pytest.mark.parametrize("options, message", [
    (dict(kb_dim=0), "`kb_dim` must be an integer >= 2. Received: kb_dim=0"),
    (dict(kb_dim=1), "`kb_dim` must be an integer >= 2. Received: kb_dim=1"),
    (dict(kb_dim=-1, coordinate_frequencies=0), "Received: kb_dim=-1"),
    (dict(kb_dim=True), "Received: kb_dim=True"),
    (dict(kb_dim=2.5), "Received: kb_dim=2.5"),
    (dict(kb="image", stem_filters=0), "Received: stem_filters=0"),
    (dict(kb="image", stem_filters=True), "Received: stem_filters=True"),
])
def test_build_model_refuses_a_bad_kb_dim_or_stem_filters_by_its_name(options, message):
    # Audit apps2: kb_dim=0 failed in CoordinateEncoding's check (about `coordinates`),
    # -1 with a raw shape error, True built a model of one feature per object;
    # stem_filters=True built one channel per convolution
    from applications.errors import InputError

    with pytest.raises(InputError, match=re.escape(message)):
        soc.build_model(units=8, embedding_dim=4, max_steps=1, **options)


def test_a_kb_dim_builds_the_symbolic_knowledge_base_and_warns_for_the_image_one():
    plain = soc.build_model(units=8, embedding_dim=4, max_steps=1, kb_dim=1, coordinate_frequencies=0)
    assert plain.get_layer("kb_projection").kernel.shape == (1, 8)
    with pytest.warns(UserWarning, match="kb_dim=3 has no effect"):
        soc.build_model(units=8, embedding_dim=4, max_steps=1, kb="image", kb_dim=3, stem_filters=4)


@pytest.mark.parametrize("seed", [-1, 1.5, True, None, "3"])
@pytest.mark.parametrize("selection", [False, True])
def test_validation_data_refuses_a_seed_that_is_not_an_integer_of_at_least_0(seed, selection):
    # Audit apps2: -1 drew the questions of seed 999 (-1 + 1000), 1.5 was refused as seed=1001.5
    from applications.errors import InputError

    with pytest.raises(InputError, match=re.escape(f"`seed` must be an integer >= 0. Received: seed={seed!r}")):
        soc.validation_data(4, seed=seed, selection=selection)


def test_bad_data_arguments_are_clear_errors():
    # Audit 6: negative counts gave empty arrays, bad template lists raw numpy or
    # IndexErrors (inside the tf.data stream: an opaque UnknownError at iteration), a
    # large min_distance looped for ever, unknown words and colours raised KeyError
    # and IndexError.
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=rf"Received: num_examples={bad!r}"):
            soc.generate_examples(bad)
    assert soc.generate_examples(0)[1].shape == (0,)
    for bad in ([], [7], [-1], [[0, 1]], [0.5]):
        with pytest.raises(ValueError, match="Received: templates="):
            soc.generate_examples(2, templates=bad)
        with pytest.raises(ValueError, match="Received: templates="):
            soc.make_dataset(2, templates=bad)
    with pytest.raises(ValueError, match="Received: min_distance=0.9"):
        soc.random_scene(np.random.default_rng(0), min_distance=0.9)
    with pytest.raises(ValueError, match=r"not in VOCAB: \['purple'\]"):
        soc.tokenize("what is the shape of the purple object ?")
    with pytest.raises(ValueError, match="Received: color=6"):
        soc.answer(_scene(), 0, 6)
    soc.CoordinateEncoding(base_frequency=np.float32(1.0))  # a numpy float is a number


def test_validation_data_has_both_halves():
    # Audit 6: validation_examples=1 made two empty halves; `train` then failed with an
    # IndexError only after training, when evaluating them. An odd count lost one.
    for bad in (1, 0, -2):
        with pytest.raises(ValueError, match=rf"Received: validation_examples={bad}"):
            soc.validation_data(bad)
    x, y = soc.validation_data(5, seed=2)
    assert y.shape == (5,) and x["question"].shape[0] == 5
    _, first = soc.generate_examples(2, seed=1002, relational=False)
    np.testing.assert_array_equal(y[:2], first)  # then three relational questions


def test_plot_example_attention_checks_the_index(tmp_path):
    # Audit 6: index=len(batch) or -1 sliced an empty batch (a TF BiasAdd error from
    # the LSTM), a float index a TypeError; negative indices now count from the end.
    x, _ = soc.generate_examples(3, seed=1)
    model = soc.build_model(units=8, max_steps=1, embedding_dim=4)
    for bad in (3, -4, 1.5):
        with pytest.raises(ValueError, match=rf"Received: index={bad}"):
            soc.plot_example_attention(model, x, str(tmp_path / "bad.png"), index=bad)
    assert os.path.exists(soc.plot_example_attention(model, x, str(tmp_path / "last.png"), index=-1))


def test_plot_example_attention_reads_a_batch_of_both_knowledge_bases(tmp_path):
    # Audit 8: a kb="both" batch (generate_examples' own option) gave a symbolic model the image
    # too and failed with a Keras input-shape error; a batch without the model's input failed inside Keras.
    x, _ = soc.generate_examples(2, seed=3, kb="both")
    for kb in ("symbolic", "image"):
        small_stem = {"stem_filters": 4} if kb == "image" else {}  # (the symbolic kb has no stem)
        model = soc.build_model(units=8, max_steps=1, embedding_dim=4, kb=kb, **small_stem)
        assert os.path.exists(soc.plot_example_attention(model, x, str(tmp_path / f"{kb}.png")))
    with pytest.raises(ValueError, match=r"must hold the model's inputs \['question', 'image'\]"):
        soc.plot_example_attention(model, {"question": x["question"], "kb": x["kb"]}, str(tmp_path / "bad.png"))


def test_objects_near_the_middle_are_drawn_on_the_side_the_answer_says():
    # Audit 8: objects at x (or y) in [0.492, 0.508) were centred on the canvas's middle column
    # (row), in neither half, so the image did not show the answer to "on the left/top ?".
    positions = np.array([[0.495, 0.05], [0.505, 0.3], [0.05, 0.495], [0.3, 0.505], [0.95, 0.4999], [0.75, 0.95]])
    scene = {"shapes": np.array([0, 1, 0, 1, 0, 1]), "positions": positions}
    image = soc.render_scene(scene)
    middle = (soc.IMAGE_SIZE - 1) / 2
    for k in range(soc.NUM_OBJECTS):
        rows, cols = np.nonzero(np.all(image == soc.RGB[k], axis=-1))
        for template, centre in ((1, cols.mean()), (2, rows.mean())):
            on_side = soc.ANSWERS[soc.answer(scene, template, k)] == "yes"
            assert centre != middle and (centre < middle) == on_side, (k, template, centre)
    assert soc.pixel_centres([[0.0, 0.5], [1.0, 0.4999]]).tolist() == [[6, 38], [68, 36]]
    assert soc.pixel_centres([[0.4999, 0.5]], size=74).tolist() == [[36, 37]]  # an even canvas


def test_train_runs_no_more_steps_than_asked(tmp_path, monkeypatch):
    # Audit 8: with fewer steps than epochs each epoch still ran a step (steps=3, epochs=5
    # trained 5 steps); steps=0 trained `epochs` steps instead of being refused.
    runs = []

    def fit(model, data, steps_per_epoch, epochs, **kwargs):  # what train asks of fit (the run itself is tested above)
        runs.append(steps_per_epoch * epochs)
        return keras.callbacks.History()

    _train_with(monkeypatch, fit)
    tiny = {"units": 4, "embedding_dim": 2, "max_steps": 1}
    for steps, epochs in ((3, 5), (1, 10), (20, 10)):
        soc.train(str(tmp_path / "run"), steps=steps, epochs=epochs, validation_examples=2, model_kwargs=tiny,
                  verbose=0)
    assert runs == [3, 1, 20]
    with pytest.raises(ValueError, match="Received: steps=0"):
        soc.train(str(tmp_path / "bad"), steps=0, model_kwargs=tiny, verbose=0)


class _CountSteps(keras.callbacks.Callback):
    """``counts``: the training steps of each epoch."""

    def __init__(self):
        super().__init__()
        self.counts = []

    def on_epoch_begin(self, epoch, logs=None):
        self.counts.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.counts[-1] += 1


def _resumable_run(run_dir, *extra):
    """7 steps over 3 epochs with the command line's resumable callbacks (and ``extra``)."""
    from applications import fault_tolerance

    callbacks = [*fault_tolerance.resumable_callbacks(str(run_dir)), *extra]
    return soc.train(str(run_dir), steps=7, epochs=3, batch_size=4, learning_rate=3e-3, validation_examples=2,
                     verbose=0, model_kwargs={"units": 8, "embedding_dim": 4, "max_steps": 1}, callbacks=callbacks)


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory):
    """One uninterrupted :func:`_resumable_run` (traced) with its steps per epoch counted:
    ``(train's result, steps per epoch)``. Read by the resume test (its weights) and by
    test_train_runs_exactly_the_steps_asked_when_epochs_do_not_divide_them (its steps)."""
    counter = _CountSteps()
    result = _resumable_run(tmp_path_factory.mktemp("soc_uninterrupted") / "a", counter)
    return result, counter.counts


def test_train_runs_exactly_the_steps_asked_when_epochs_do_not_divide_them(uninterrupted_run):
    # steps // epochs steps per epoch: 7 steps over 3 epochs trained 6 (the CLI's
    # default, 20000 over 15 epochs, trained 19995).
    result, counts = uninterrupted_run
    assert counts == [3, 2, 2] and result["steps"] == 7
    from applications.training import spread_steps

    assert spread_steps(20000, 15)[0] == 1334 and spread_steps(20, 10)[0] == 2


@pytest.mark.parametrize("kb", ["symbolic", "image"])
def test_a_stream_started_at_a_batch_is_the_rest_of_the_stream(kb):
    # A run resumed at epoch k restarted the endless stream: it trained again on the
    # examples of epochs 0, 1, ... instead of those an uninterrupted run saw.
    whole = list(soc.make_dataset(batch_size=3, seed=5, kb=kb).take(5))
    rest = list(soc.make_dataset(batch_size=3, seed=5, kb=kb, start=3).take(2))
    for (x, y), (want_x, want_y) in zip(rest, whole[3:], strict=True):
        assert sorted(x) == sorted(want_x)
        for key in x:
            np.testing.assert_array_equal(x[key], want_x[key])
        np.testing.assert_array_equal(y, want_y)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="Received: start="):
            soc.make_dataset(batch_size=3, start=bad)


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_a_resumed_run_trains_on_the_examples_of_an_uninterrupted_one(uninterrupted_run, tmp_path):
    # Crashed in epoch 2 of 3 and resumed from the backup of epochs 0-1: the same
    # weights as a run that never stopped (a restarted stream gave others).
    from applications import fault_tolerance
    from tests.applications.cli_helpers import CrashAt

    def run(run_dir, *extra):
        _resumable_run(run_dir, *extra)
        return keras.saving.load_model(run_dir / "model.keras").get_weights()

    uninterrupted = keras.saving.load_model(uninterrupted_run[0]["model"]).get_weights()
    with pytest.raises(RuntimeError, match="simulated"):
        run(tmp_path / "b", CrashAt(2, 0))
    assert fault_tolerance.backup_epoch(str(tmp_path / "b" / "backup")) == 2
    for got, want in zip(run(tmp_path / "b"), uninterrupted, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_evaluate_refuses_another_applications_model_and_scores_an_uncompiled_one(tmp_path):
    # audit (2026-11-27): another application's model ended in Keras' "Missing data for
    # input" traceback, and a model saved without compiling in "You must call compile()"
    from applications.errors import CommandLineError

    other = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(10)])
    other.compile("adam", "sparse_categorical_crossentropy")
    other.save(tmp_path / "demo.keras")
    with pytest.raises(CommandLineError, match="is not a Sort-of-CLEVR model"):
        soc.evaluate(str(tmp_path / "demo.keras"), validation_examples=8)
    soc.build_model(units=16, max_steps=2, embedding_dim=8).save(tmp_path / "plain.keras")
    result = soc.evaluate(str(tmp_path / "plain.keras"), validation_examples=8)
    assert all(0.0 <= value <= 1.0 for value in result.values() if isinstance(value, float)), result


def test_the_search_chooses_on_other_questions_than_those_train_and_evaluate_report():
    # The HyperModel validated on validation_data(n, seed): the very questions that
    # `evaluate` scores, so `tune` then `evaluate` reported a score the search had chosen on.
    import tuning

    search = tuning.HYPERMODELS["sort_of_clevr"](seed=0, validation_examples=8).load_data()
    reported = soc.validation_data(8, 0)
    assert search[1].shape == reported[1].shape and set(search[0]) == set(reported[0])
    assert not np.array_equal(search[0]["kb"], reported[0]["kb"])


def test_evaluate_asks_the_validation_questions_that_train_recorded(trained_run, tmp_path, monkeypatch):
    # audit 8: evaluate's --seed and --validation-examples defaulted to 0 and 2000: a model
    # trained with --seed 3 (or other --validation-examples) was scored on other questions
    # than those train reported, and evaluate disagreed with train's metrics.json
    # (trained_run: train with --seed 3 --validation-examples 6; a copy, as metrics.json goes below)
    import json
    import shutil

    import tensorflow as tf

    from applications import __main__ as cli

    run = tmp_path / "run"
    shutil.copytree(trained_run[0], run)
    result = trained_run[1]
    asked, real = [], soc._validation_sets
    monkeypatch.setattr(soc, "_validation_sets", lambda *a, **kw: asked.append(a[:2]) or real(*a, **kw))
    evaluate_args = cli._defaults(cli.build_parser("sort_of_clevr").parse_args(
        ["evaluate", "sort_of_clevr", "--model", str(run / "model.keras"), "--quiet"]))
    evaluated = soc.run_evaluate(evaluate_args, tf.distribute.get_strategy())
    assert asked == [(6, 3)]
    for key in ("non_relational_accuracy", "relational_accuracy"):
        assert evaluated[key] == pytest.approx(result[key], abs=1e-6)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["seed"] == 3 and metrics["validation_examples"] == 6
    # given values are used as given; without a record, the old defaults
    asked.clear()
    soc.evaluate(str(run / "model.keras"), validation_examples=4, seed=5)
    (run / "metrics.json").unlink()
    soc.evaluate(str(run / "model.keras"))
    assert asked == [(4, 5), (2000, 0)]


# Digests (and answers) of the stream's first two batches of 3 (seed 7), from its start and
# from batch 2, as the `from_generator` stream of the previous version yielded them.
OLD_STREAM = {
    ("symbolic", 0): ("1c24704b42a83916", [[3, 1, 1], [3, 0, 2]]),
    ("symbolic", 2): ("bd4a9525367ef10f", [[7, 3, 2], [0, 2, 3]]),
    ("image", 0): ("7e565a21b88169d9", [[3, 0, 0], [3, 3, 3]]),
    ("image", 2): ("3408f5285c377d8f", [[0, 2, 0], [1, 1, 6]]),
    # the generator's, except the knowledge base's positions: since image scenes carry
    # the positions they are drawn at (test_image_scenes_answer_what_the_image_shows),
    # those of "both" are on the pixel grid; images and answers are the generator's
    ("both", 0): ("69a5d944372dd0da", [[3, 0, 0], [3, 3, 3]]),
    ("both", 2): ("2fdcb85331e6dadc", [[0, 2, 0], [1, 1, 6]]),
}


def _stream_digest(batches):
    import hashlib

    digest = hashlib.sha256()
    for x, y in batches:
        for key in sorted(x):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(np.asarray(x[key])).tobytes())
        digest.update(np.asarray(y).tobytes())
    return digest.hexdigest()[:16]


def _dataset_ops(ds):
    """The ops of ``ds``'s graph, those of its functions included."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef.FromString(tf.raw_ops.DatasetToGraphV2(
        input_dataset=ds._variant_tensor, external_state_policy=1, strip_device_assignment=True).numpy())
    return {node.op for node in graph.node} | {node.op for f in graph.library.function for node in f.node_def}


@pytest.mark.parametrize("kb", ["symbolic", "image", "both"])
def test_the_stream_is_no_python_generator_and_yields_the_examples_it_yielded(kb):
    # The stream was a `tf.data.Dataset.from_generator`, whose iterator, alive until the
    # interpreter's exit, ended `train` with "Error occurred when finalizing GeneratorDataset
    # iterator" on stderr. Its examples stay those of the generator, batch for batch.
    for start in (0, 2):
        ds = soc.make_dataset(batch_size=3, seed=7, kb=kb, start=start)
        assert "GeneratorDataset" not in _dataset_ops(ds)
        batches = list(ds.take(2))
        assert (_stream_digest(batches), [y.numpy().tolist() for _, y in batches]) == OLD_STREAM[kb, start]
        for x, y in batches:  # static shapes, as the generator's signature gave them
            assert y.shape == (3,) and x["question"].shape == (3, soc.MAX_QUESTION_LENGTH)
    # an iterator made again starts the stream again
    first = list(ds.take(1))[0][1].numpy().tolist()
    assert list(ds.take(1))[0][1].numpy().tolist() == first == OLD_STREAM[kb, 2][1][0]


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_train_ends_without_a_generator_finalization_warning(tmp_path):
    # `keras-capsules train sort_of_clevr` ended with TensorFlow's "Error occurred when
    # finalizing GeneratorDataset iterator: FAILED_PRECONDITION: Python interpreter state is
    # not initialized" on stderr (its stream's generator iterator outlived the interpreter;
    # every time for this run, as with `--strategy mirrored`).
    import subprocess
    import sys

    from tests.applications import cli_helpers

    done = subprocess.run(
        [sys.executable, "-m", "applications", "train", "sort_of_clevr", "--run-dir", str(tmp_path / "run"),
         "--steps", "1", "--epochs", "1", "--batch-size", "4", "--units", "8", "--embedding-dim", "4",
         "--mac-steps", "1", "--validation-examples", "2", "--kb", "image", "--statistics-steps", "2", "--quiet"],
        cwd=str(cli_helpers.REPO), env=cli_helpers.env(TF_CPP_MIN_LOG_LEVEL="0"), capture_output=True, text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GeneratorDataset iterator" not in done.stderr and "finalizing" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "run" / "model.keras").is_file()


def test_image_scenes_answer_what_the_image_shows():
    # Answers came from positions between the pixels: about 1 in 100 relational questions
    # of image scenes named another object than the drawn image's nearest or farthest,
    # or one of two objects tied on the pixel grid.
    x, y = soc.generate_examples(300, seed=7, kb="both", relational=True)
    span = soc.IMAGE_SIZE - 1 - 2 * (soc.OBJECT_SIZE // 2 + 1)
    for image, kb, question, label in zip(x["image"], x["kb"], x["question"], y):
        pos = kb[:, 8:].astype("float64")
        np.testing.assert_allclose(soc.drawn_positions(pos), pos, atol=1e-6)  # on the pixel grid
        centres = soc.pixel_centres(pos)
        for k, (cx, cy) in enumerate(centres):
            np.testing.assert_array_equal(image[cy, cx], soc.RGB[k])
        pixels = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
        assert (pixels + 99 * np.eye(6)).min() >= soc.IMAGE_MIN_DISTANCE * span  # nothing hidden
        words = soc.detokenize(question).split()
        template = next(t for t in range(len(soc.TEMPLATES))
                        if soc.TEMPLATES[t].format("{}").split() == [w if w not in soc.COLORS else "{}" for w in words])
        color = soc.COLORS.index(next(w for w in words if w in soc.COLORS))
        if template == 5:  # a count: no distance to settle
            continue
        # the answer of the drawn image, read in pixels, with room for a pixel either way
        shapes = kb[:, 6:8].argmax(-1)
        frm = color
        if template == soc.TWO_HOP:
            far = np.sort(pixels[color])
            assert far[-1] - far[-2] >= 1.0
            frm = int(np.argmax(pixels[color]))
        others = np.delete(np.arange(6), frm)
        ranked = others[np.argsort(pixels[frm, others])]
        gaps = np.diff(np.sort(pixels[frm, others]))
        nearest = template in (3, soc.TWO_HOP)
        assert (gaps[0] if nearest else gaps[-1]) >= 1.0
        target = ranked[0] if nearest else ranked[-1]
        assert label == soc.ANSWERS.index(soc.SHAPES[shapes[target]])


def test_symbolic_examples_are_the_seeds_plain_draws():
    # the image-scene redraws leave the symbolic stream as it was: scene, template, colour
    rng = np.random.default_rng(3)
    x, y = soc.generate_examples(50, seed=3)
    for kb, label in zip(x["kb"], y):
        scene = soc.random_scene(rng)
        template, color = int(rng.choice(np.arange(len(soc.TEMPLATES)))), int(rng.integers(0, 6))
        np.testing.assert_allclose(kb[:, 8:], scene["positions"], rtol=1e-6)
        assert label == soc.answer(scene, template, color)


def test_train_from_python_stops_a_diverged_run_in_one_line(tmp_path):
    # audit (2026-11-28): `train` called from Python (without the command line's resumable
    # callbacks) trained a NaN model to the end, then saved and scored it: no error
    from applications.fault_tolerance import TrainingDivergedError
    from tests.applications.cli_helpers import PoisonWeightsAt

    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match=r"^training diverged: the loss became nan in epoch 1, batch 2"):
        soc.train(str(run_dir), steps=4, epochs=2, batch_size=4, validation_examples=2, verbose=0,
                  model_kwargs={"units": 4, "embedding_dim": 2, "max_steps": 1}, callbacks=[PoisonWeightsAt(1)])
    assert not (run_dir / "model.keras").exists() and not (run_dir / "metrics.json").exists()


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, [1, -2]])
def test_a_bad_seed_is_one_line_when_the_stream_is_made_not_when_it_is_read(seed, tmp_path):
    # make_dataset took any seed; the first batch then failed inside tf.numpy_function with
    # a TensorFlow traceback (InvalidArgumentError wrapping numpy's "expected non-negative
    # integer"); generate_examples, train and evaluate gave numpy, Keras or TypeErrors.
    from applications.errors import InputError

    message = re.escape(f"Received: seed={seed!r}")
    with pytest.raises(InputError, match=message):
        soc.make_dataset(2, seed=seed)
    with pytest.raises(InputError, match=message):
        soc.generate_examples(2, seed=seed)
    if not isinstance(seed, list):
        with pytest.raises(InputError, match=message):
            soc.train(run_dir=str(tmp_path / "run"), steps=1, seed=seed, verbose=0)
        with pytest.raises(InputError, match=message):
            soc.evaluate(str(tmp_path), seed=seed)
    assert not (tmp_path / "run").exists()


def test_seeds_numpy_takes_still_seed_the_stream():
    for seed in (None, np.int64(3), [3, 1000, 1]):
        (x, y), = soc.make_dataset(2, seed=seed).take(1)
        if seed is not None:
            want_x, want_y = soc.generate_examples(2, seed=seed)
            np.testing.assert_array_equal(x["question"], want_x["question"])
            np.testing.assert_array_equal(y, want_y)


def test_detokenize_refuses_ids_outside_the_vocabulary():
    # Audit (apps 2): detokenize([-1]) was 'yellow' (Python's last word of VOCAB), one past
    # the end an IndexError, 1.5 a TypeError.
    assert soc.detokenize(np.array([0, 1, 0])) == soc.VOCAB[1] and soc.detokenize([]) == ""
    for ids, received in (([-1], "-1 in ids"), ([2, len(soc.VOCAB)], f"{len(soc.VOCAB)} in ids"),
                          ([1.5], "ids of dtype float64")):
        with pytest.raises(ValueError, match=rf"Received: {received}$"):
            soc.detokenize(ids)


@pytest.mark.parametrize("model_kwargs, message", [
    ({"unit": 8}, r"Unknown model option\(s\) \['unit'\]; expected some of \['coordinate_frequencies', .*'units'\]. "
                  r"Received: model_kwargs=\{'unit': 8\}$"),
    ({"kb": "image"}, r"Model option\(s\) \['kb'\] are set by train \(from its own arguments or the data\), not by "
                      r"model_kwargs; expected some of \[.*\]. Received: model_kwargs=\{'kb': 'image'\}$"),
    ([("units", 8)], r"`model_kwargs` must be a dict or None. Received: model_kwargs=\[\('units', 8\)\]$"),
    ({"units": 7}, r"`units` must be an even integer >= 2"),  # build_model's own check of a value
])
def test_train_refuses_model_kwargs_before_it_reads_data_or_makes_the_run_directory(model_kwargs, message, tmp_path,
                                                                                    monkeypatch):
    # audit (apps): a typo in model_kwargs was a raw TypeError from inside build_model ("got an
    # unexpected keyword argument"), raised once the run directory had been made; kb, train's
    # own argument, was "got multiple values for keyword argument 'kb'". CLEVR named the key.
    from applications.errors import InputError

    def never(what):
        return lambda *args, **kwargs: pytest.fail(f"{what} before model_kwargs were checked")

    monkeypatch.setattr(soc, "create_run_dir", never("the run directory was made"))
    monkeypatch.setattr(soc, "make_dataset", never("the training stream was made"))
    monkeypatch.setattr(soc, "_validation_sets", never("the validation data were generated"))
    with pytest.raises(InputError, match=message):
        soc.train(str(tmp_path / "run"), steps=1, model_kwargs=model_kwargs, verbose=0)
    assert not (tmp_path / "run").exists()


def _never_before_the_checks(monkeypatch):
    """``soc.train`` fails the test if it makes its run directory, its training stream or
    its validation questions (it did all three before a check of its arguments)."""
    def never(what):
        return lambda *args, **kwargs: pytest.fail(f"{what} before train's arguments were checked")

    monkeypatch.setattr(soc, "create_run_dir", never("the run directory was made"))
    monkeypatch.setattr(soc, "make_dataset", never("the training stream was made"))
    monkeypatch.setattr(soc, "_validation_sets", never("the validation data were generated"))


@pytest.mark.parametrize("sizes, kb", [
    ({"kb_dim": 5}, "symbolic"),
    ({"kb_dim": 5}, "image"),
    ({"num_answers": 5}, "symbolic"),
    ({"num_answers": 12}, "symbolic"),
    ({"vocabulary_size": 100}, "symbolic"),
    ({"kb_dim": soc.KB_DIM, "num_answers": len(soc.ANSWERS)}, "symbolic"),
])
def test_train_refuses_the_sizes_the_data_set_in_model_kwargs_before_making_the_run_directory(sizes, kb, tmp_path,
                                                                                             monkeypatch):
    # Audit (apps): model_kwargs took the sizes the generated data fix: kb_dim=5 failed inside
    # fit ("Input 0 with name 'kb' ... is incompatible"), num_answers=5 there too (TensorFlow's
    # "label value of 6 which is outside the valid range"), both once the run directory was
    # made; num_answers=12 trained a model that evaluate refused; kb_dim with kb="image" only
    # warned, vocabulary_size=100 added embeddings no question uses.
    from applications.errors import InputError

    _never_before_the_checks(monkeypatch)
    names = re.escape(str(sorted(sizes)))
    message = (rf"^Model option\(s\) {names} are set by train \(from its own arguments or the data\), not by "
               r"model_kwargs; expected some of \[.*'units'\]\. Received: ")
    with pytest.raises(InputError, match=message):
        soc.train(str(tmp_path / "run"), steps=1, kb=kb, model_kwargs={"units": 4, **sizes}, verbose=0)
    assert not (tmp_path / "run").exists()
    assert soc.DATA_SIZES == {"vocabulary_size": len(soc.VOCAB), "num_answers": len(soc.ANSWERS),
                              "kb_dim": soc.KB_DIM}
    x, _ = soc.generate_examples(1)  # the sizes of the data train generates
    assert x["kb"].shape[-1] == soc.DATA_SIZES["kb_dim"] and x["question"].max() < soc.DATA_SIZES["vocabulary_size"]


@pytest.mark.parametrize("options, received", [
    (dict(validation_examples=1), "validation_examples=1"),
    (dict(validation_examples=0), "validation_examples=0"),
    (dict(validation_examples=2.5), "validation_examples=2.5"),
    (dict(validation_examples=None), "validation_examples=None"),
    (dict(validation_examples="8"), "validation_examples='8'"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(batch_size=2.5), "batch_size=2.5"),
    (dict(batch_size=True), "batch_size=True"),
    (dict(callbacks=keras.callbacks.History()), "callbacks=<keras"),
    (dict(callbacks=["not a callback"]), "callbacks=['not a callback']"),
    # audit (mac): fit took any verbose ("no" and -1 hid the progress bars, True showed them)
    (dict(verbose="no"), "verbose='no'"),
    (dict(verbose=True), "verbose=True"),
    (dict(verbose=-1), "verbose=-1"),
    (dict(verbose=3), "verbose=3"),
    (dict(verbose=1.0), "verbose=1.0"),
])
def test_train_checks_its_arguments_before_it_generates_data_or_makes_the_run_directory(options, received, tmp_path,
                                                                                        monkeypatch):
    # Audit (apps): validation_examples was checked only when the validation questions were
    # generated, batch_size when the training stream was made, both after the run directory;
    # callbacks that were no list failed with a TypeError there too (or inside fit).
    from applications.errors import InputError

    _never_before_the_checks(monkeypatch)
    with pytest.raises(InputError, match=re.escape(f"Received: {received}")):
        soc.train(str(tmp_path / "run"), steps=1, model_kwargs={"units": 4, "embedding_dim": 2, "max_steps": 1},
                  **{"verbose": 0, **options})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("verbose", ["no", True, -1, 3, 0.0])
def test_evaluate_refuses_a_bad_verbose_before_it_loads_the_model(verbose, tmp_path):
    # Audit (mac): Keras' evaluate took any verbose, after the model was loaded and the
    # validation questions generated ("no" hid the progress bars, True showed them).
    from applications.errors import InputError

    with pytest.raises(InputError, match=re.escape(f"`verbose` must be 0, 1 or 2. Received: verbose={verbose!r}")):
        soc.evaluate(str(tmp_path / "missing.keras"), verbose=verbose)


def test_build_model_takes_numpy_integer_sizes():
    # Audit (mac): units=np.int64(8) built the BiLSTM, then the symbolic knowledge base's Dense
    # refused it ("expected a positive integer. Received: units=8"); embedding_dim=np.int64(4)
    # was refused by Keras' Embedding ("Received: output_dim=4 (of type int64)").
    for kb in ("symbolic", "image"):
        model = soc.build_model(units=np.int64(8), embedding_dim=np.int32(4), max_steps=np.int64(1), kb=kb,
                                stem_filters=4)
        assert model.output_shape == (None, len(soc.ANSWERS))
        assert model.get_layer("input_embedding").output_dim == 4
        assert model.get_layer("question_vector").output.shape == (None, 8)
    assert soc.build_model(units=8, embedding_dim=4, max_steps=1).get_layer("kb_projection").units == 8
    with pytest.raises(ValueError, match=re.escape("Received: embedding_dim=0")):
        soc.build_model(units=8, embedding_dim=0, max_steps=1)
    with pytest.raises(ValueError, match=re.escape("Received: units=8.0")):
        soc.build_model(units=8.0, embedding_dim=4, max_steps=1)


def test_train_refuses_a_batch_smaller_than_the_replicas_before_making_the_run_directory(tmp_path, monkeypatch):
    # Audit (apps): a global batch of 1 for two replicas was refused by distribute.even_batches
    # once the run directory was made and the validation questions generated.
    from applications.errors import InputError
    from tests.harness import two_cpu_strategy

    _never_before_the_checks(monkeypatch)
    with pytest.raises(InputError, match=r"a batch of 1 cannot be split over 2 replicas"):
        soc.train(str(tmp_path / "run"), steps=1, batch_size=1, strategy=two_cpu_strategy(),
                  model_kwargs={"units": 4, "embedding_dim": 2, "max_steps": 1}, verbose=0)
    assert not (tmp_path / "run").exists()


def test_train_takes_no_callbacks_as_none_as_keras_fit_does(tmp_path, monkeypatch):
    # Audit (apps): callbacks=None was a TypeError ("Value after * must be an iterable") once
    # the run directory was made and the validation questions generated.
    given = []

    def fit(model, *args, callbacks=(), **kwargs):
        given.append([type(c).__name__ for c in callbacks])
        return keras.callbacks.History()

    _train_with(monkeypatch, fit)
    soc.train(str(tmp_path / "run"), steps=1, validation_examples=2, callbacks=None, verbose=0,
              model_kwargs={"units": 4, "embedding_dim": 2, "max_steps": 1})
    assert len(given) == 1 and "StopOnDivergence" in given[0]
