"""smallNORB application: the paper's model, the TFDS pipeline (mocked), saving, plots, learning."""


import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from applications import smallnorb
from keras_capsules.layers import EMRouting
from applications.mnist_digits import load_idx_digits
from tests.conftest import shared_path

TINY = dict(d_chns=8, n_parts=8)  # the paper's architecture, narrower


def test_paper_model_parameter_count_and_any_image_size():
    model = smallnorb.build_model()
    counts = smallnorb.parameter_counts(model)
    # The authors' code has 271,688 parameters; Keras also counts the 904 moving
    # means/variances of batch normalization: 272,592, the paper's "273K".
    assert counts == {"trainable": 271_688, "non_trainable": 904, "total": 272_592}
    assert model.count_params() == 272_592
    part, cls = model.get_layer("part_routing"), model.get_layer("class_routing")
    assert (part.n_inp, part.n_out, part.d_out) == (None, 64, 4)
    assert (cls.n_inp, cls.n_out, cls.d_out) == (64, 5, 4)
    convs = [lay for lay in model.layers if isinstance(lay, keras.layers.Conv2D)]
    assert [c.strides[0] for c in convs[:6]] == [1, 2, 1, 2, 1, 2]
    assert [c.kernel_size for c in convs] == [(3, 3)] * 6 + [(1, 1)] * 2
    assert model.input_shape == (None, None, None, 2)
    for size in (96, 40):
        out = model(np.random.default_rng(0).uniform(size=(2, size, size, 2)).astype("float32"))
        assert out.shape == (2, 5) and np.all(np.isfinite(out))


def test_coordinate_channels():
    images = np.zeros((2, 3, 5, 2), "float32")
    out = smallnorb.CoordinateChannels()(images).numpy()
    assert out.shape == (2, 3, 5, 4)
    np.testing.assert_allclose(out[1, 2, :, 2], np.linspace(-1, 1, 5), atol=1e-6)  # horizontal
    np.testing.assert_allclose(out[1, :, 4, 3], np.linspace(-1, 1, 3), atol=1e-6)  # vertical
    assert smallnorb.CoordinateChannels().compute_output_shape((None, None, None, 2)) == (
        None, None, None, 4,
    )


def test_keras_round_trip_of_the_full_model(tmp_path):
    model = smallnorb.build_model()
    x = np.random.default_rng(1).uniform(size=(2, 32, 32, 2)).astype("float32")
    # Every weight away from its initial value (BN statistics and routing betas included).
    rng = np.random.default_rng(2)
    for w in model.weights:
        value = rng.uniform(0.5, 1.5, size=w.shape) if "variance" in w.name else (
            np.asarray(w) + 0.05 * rng.normal(size=w.shape)
        )
        w.assign(value.astype("float32"))
    expected = model(x, training=False).numpy()
    assert np.all(np.isfinite(expected)) and np.ptp(expected) > 0
    path = tmp_path / "smallnorb.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded(x, training=False).numpy(), expected)
    assert isinstance(loaded.get_layer("class_routing"), EMRouting)


def test_pipeline_shapes_and_one_training_step_with_mock_data(tmp_path):
    with tfds.testing.mock_data(num_examples=8):
        train_split = smallnorb.load_split("train", data_dir=str(tmp_path / "tfds"))
        x, y = next(iter(smallnorb.make_dataset(train_split, True, batch_size=4, image_size=24, seed=0)))
        assert x.shape == (4, 24, 24, 2) and x.dtype == tf.float32
        assert y.shape == (4, 5)
        np.testing.assert_allclose(y.numpy().sum(1), 1.0, rtol=1e-6)
        assert float(tf.reduce_min(x)) >= 0.0 and float(tf.reduce_max(x)) <= 1.0
        test_split = smallnorb.load_split("test", data_dir=str(tmp_path / "tfds"))
        x, y = next(iter(smallnorb.make_dataset(test_split, False, batch_size=4)))
        assert x.shape == (4, 96, 96, 2)
        assert set(np.unique(y.numpy())) <= {0.0, 1.0}  # test labels are never mixed

        run_dir = tmp_path / "run"
        model, history = smallnorb.train(
            data_dir=str(tmp_path / "tfds"), run_dir=str(run_dir), epochs=1, batch_size=4,
            image_size=24, steps_per_epoch=1, validation_steps=1, seed=0, verbose=0,
            model_kwargs=TINY,
        )
    assert np.isfinite(history.history["loss"][0]) and "val_accuracy" in history.history
    assert isinstance(model.optimizer, smallnorb.RAdam)
    assert int(model.optimizer.iterations) == 1
    assert list((run_dir / "logs").rglob("events.out.tfevents.*")), "no TensorBoard logs"
    assert (run_dir / "model.keras").is_file()


def test_training_crops_are_new_every_epoch_and_reproducible(tmp_path):
    # The crop seeds restarted with every pass over the (unrepeated) data, so every epoch
    # saw the first epoch's crops of each image again.
    with tfds.testing.mock_data(num_examples=4):
        split = smallnorb.load_split("train", data_dir=str(tmp_path / "tfds"))

        def epochs(n):
            ds = smallnorb.make_dataset(split, True, batch_size=4, image_size=24, mixup_alpha=None,
                                        shuffle_buffer=1, seed=3)
            return [np.concatenate([x.numpy() for x, _ in ds]) for _ in range(n)]

        first, second = epochs(2)
        assert not np.array_equal(first, second)
        np.testing.assert_array_equal(epochs(1)[0], first)  # the same seed, the same crops


def test_a_training_split_smaller_than_a_batch_is_an_error_not_a_hang(tmp_path, monkeypatch):
    # Audit 5: with fewer training examples than one batch (mock data, a huge batch)
    # steps_per_epoch became 0 and fit looped for ever on the repeated dataset.
    def no_model(**kwargs):
        raise AssertionError("train went on to build the model")

    monkeypatch.setattr(smallnorb, "build_model", no_model)
    with tfds.testing.mock_data(num_examples=8):
        with pytest.raises(ValueError, match=r"\(8 examples\) is smaller than one batch of 16"):
            smallnorb.train(data_dir=str(tmp_path / "tfds"), run_dir=str(tmp_path / "run"), epochs=1,
                            batch_size=16, image_size=24, verbose=0)


def test_reverse_graphics_plot_writes_a_png(tmp_path):
    model = smallnorb.build_model(**TINY)
    images = np.random.default_rng(2).uniform(size=(6, 24, 24, 2)).astype("float32")
    poses, classes = smallnorb.class_capsule_poses(model, images)
    assert poses.shape == (6, 16) and classes.shape == (6,)
    path = tmp_path / "plots" / "azimuth.png"
    points = smallnorb.plot_pose_trajectory(model, images, path, labels=[0, 20, 40, 60, 80, 100])
    assert points.shape == (6, 2) and np.all(np.isfinite(points))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(str(path)).shape[:2] == (500, 500)


def test_viewpoint_sequence_selects_one_object_in_azimuth_order():
    n = 10
    azimuths = np.array([8, 2, 5, 0, 3, 2, 4, 4, 1, 6])
    examples = {
        "image": np.arange(n, dtype="uint8").reshape(n, 1, 1, 1) * np.ones((1, 4, 4, 1), "uint8"),
        "image2": np.zeros((n, 4, 4, 1), "uint8"),
        "instance": np.array([3, 3, 3, 3, 3, 5, 3, 3, 3, 3]),
        "label_category": np.array([1] * n),
        "label_elevation": np.array([0, 0, 0, 0, 0, 0, 0, 2, 0, 0]),
        "label_lighting": np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
        "label_azimuth": azimuths,
    }
    ds = tf.data.Dataset.from_tensor_slices(examples)
    pairs, values = smallnorb.viewpoint_sequence(ds, vary="azimuth", image_size=4)
    # Example 5 is another object, 7 another elevation, 8 another lighting.
    np.testing.assert_array_equal(values, [0, 2, 3, 4, 5, 6, 8])
    np.testing.assert_allclose(pairs[:, 0, 0, 0] * 255, [3, 1, 4, 6, 2, 9, 0], atol=1e-4)
    with pytest.raises(ValueError, match="vary"):
        smallnorb.viewpoint_sequence(ds, vary="lighting")
    # the longest sequence: object 3 at elevation 0 and lighting 0 (7 azimuths; object 5 has 1)
    pairs, values, name = smallnorb.longest_viewpoint_sequence(ds, image_size=4)
    np.testing.assert_array_equal(values, [0, 2, 3, 4, 5, 6, 8])
    assert pairs.shape == (7, 4, 4, 2) and name == "human 3, elevation 0, lighting 0"
    pairs, values, _ = smallnorb.longest_viewpoint_sequence(ds, vary="elevation", image_size=4)
    assert len(values) == 2  # object 3 at azimuth 4: elevations 0 and 2
    assert smallnorb.longest_viewpoint_sequence(ds.take(0), image_size=4)[2] == ""


def _mnist():
    images, labels = load_idx_digits(shared_path("data", "mnist"))
    return (images[..., 0] * 255).round().astype(np.uint8), labels


def test_the_architecture_learns_mnist_digits_at_small_size():
    """CI-sized learning test: real digits 0, 1, 2 at 14x14, a narrow version of the model.

    300 training and 150 held-out digits, 20 epochs of 10 steps. Held-out predictions
    run in inference mode: with the authors' batch-normalization momentum (0.9, PyTorch's
    default) 100 steps are enough for the moving statistics. (10 epochs were marginal:
    held-out accuracy 0.78 with one TensorFlow thread at this seed, 0.96-0.98 at others;
    with 20 epochs 0.95-0.99 over four seeds, one thread or two.)
    """
    images, labels = _mnist()
    keep = np.where(labels < 3)[0][:450]
    images, labels = images[keep], labels[keep]
    x = tf.image.resize(images[..., None].astype("float32") / 255.0, (14, 14), antialias=True).numpy()
    y = np.eye(3, dtype="float32")[labels]
    model = smallnorb.build_model(n_classes=3, image_channels=1, d_chns=16, n_parts=16)
    epochs, batch = 20, 30
    smallnorb.compile_model(model, total_steps=epochs * (300 // batch), min_lr=6e-4, max_lr=3e-2)
    history = model.fit(x[:300], y[:300], epochs=epochs, batch_size=batch, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0], losses
    accuracy = np.mean(np.argmax(model(x[300:], training=False), -1) == labels[300:])
    assert accuracy > 0.9, (accuracy, losses)  # chance is 1/3


@pytest.mark.parametrize("name, bad", [("batch_size", 0), ("batch_size", -4), ("epochs", 0), ("image_size", 0),
                                       ("steps_per_epoch", 0), ("validation_steps", -1)])
def test_train_refuses_bad_sizes_before_reading_data(tmp_path, monkeypatch, name, bad):
    # audit (2026-11-27): batch_size=0 was a ZeroDivisionError (with steps_per_epoch a
    # tf.data InvalidArgumentError), a negative one "Dimension -4 must be >= 0"
    def no_data(*args, **kwargs):
        raise AssertionError("train read the data")

    monkeypatch.setattr(smallnorb, "load_split", no_data)
    kwargs = dict(data_dir=str(tmp_path / "tfds"), run_dir=str(tmp_path / "run"), epochs=1, batch_size=4,
                  image_size=24, verbose=0)
    with pytest.raises(ValueError, match=rf"Received: {name}={bad}"):
        smallnorb.train(**{**kwargs, name: bad})


def test_evaluate_refuses_bad_sizes(tmp_path):
    model_path = tmp_path / "model.keras"
    model_path.write_bytes(b"")  # only its existence is checked first
    for name, bad in [("batch_size", 0), ("image_size", -1), ("steps", 0)]:
        with pytest.raises(ValueError, match=rf"Received: {name}={bad}"):
            smallnorb.evaluate(str(model_path), data_dir=str(tmp_path / "tfds"), **{name: bad})


@pytest.mark.parametrize("epochs", ["0", "-1"])
def test_module_entry_point_refuses_non_positive_epochs(epochs, capsys):
    # `python -m applications.smallnorb --epochs 0` was accepted
    from applications import smallnorb

    with pytest.raises(SystemExit) as exit_info:
        smallnorb.main(["--epochs", epochs])
    assert exit_info.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_evaluate_refuses_another_applications_model_in_one_clear_line(tmp_path):
    # The demo's model failed with Keras' cryptic 'Exception encountered when calling Sequential.call().'
    from applications.errors import CommandLineError

    digits = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(10)])
    digits.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])  # as train saves it
    digits.save(tmp_path / "demo.keras")
    ours = smallnorb.compile_model(smallnorb.build_model(**TINY), total_steps=10)
    ours.save(tmp_path / "smallnorb.keras")
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(CommandLineError) as error:
            smallnorb.evaluate(str(tmp_path / "demo.keras"), data_dir=str(tmp_path / "tfds"), image_size=24)
        message = str(error.value)
        assert "\n" not in message and message.startswith(f"{tmp_path / 'demo.keras'} is not a smallNORB model")
        assert "stereo pairs [batch, 24, 24, 2] in, 5 class logits out" in message
        assert "it takes inputs of shape [(None, 8, 8, 1)]" in message
        result = smallnorb.evaluate(str(tmp_path / "smallnorb.keras"), data_dir=str(tmp_path / "tfds"),
                                    batch_size=2, image_size=24, steps=1)
    assert 0.0 <= result["test_accuracy"] <= 1.0


def test_a_rerun_that_finishes_from_a_backup_of_every_epoch_still_reports_the_test_accuracy(tmp_path, monkeypatch):
    # A crash after the last epoch's backup (here: in a callback's on_epoch_end) leaves a
    # backup of all the epochs; the rerun trains nothing and writes the outputs from it,
    # but its metrics.json lacked test_accuracy (read from this fit's empty history).
    import json

    import tensorflow as tf

    from applications import __main__ as cli
    from applications import fault_tolerance

    class CrashAfterLastEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("crash (simulated)")

    run = tmp_path / "run"
    args = cli._defaults(cli.build_parser("smallnorb").parse_args(
        ["train", "smallnorb", "--run-dir", str(run), "--epochs", "1", "--batch-size", "2", "--image-size", "24",
         "--steps-per-epoch", "1", "--validation-steps", "1", "--channels", "8", "--parts", "8", "--quiet",
         "--data-dir", str(tmp_path / "tfds")]))
    make = fault_tolerance.resumable_callbacks
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks",
                        lambda *a, **kw: [*make(*a, **kw), CrashAfterLastEpoch()])
    monkeypatch.setattr(smallnorb, "_require_data", lambda data_dir: None)
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(RuntimeError, match="simulated"):
            smallnorb.run_train(args, tf.distribute.get_strategy())
        assert fault_tolerance.backup_epoch(str(run / "backup")) == 1
        monkeypatch.setattr(fault_tolerance, "resumable_callbacks", make)
        result = smallnorb.run_train(args, tf.distribute.get_strategy())
    assert result["resumed_from_epoch"] == 1
    logged = fault_tolerance.read_history_csv(str(run / "history.csv"))[0]
    assert result["test_accuracy"] == pytest.approx(logged["val_accuracy"][-1])
    assert json.loads((run / "metrics.json").read_text())["test_accuracy"] == result["test_accuracy"]


def test_a_crash_between_fit_and_the_model_save_is_finished_by_the_rerun(tmp_path, monkeypatch):
    # The backup was deleted as soon as fit ended, before run_train wrote the model and
    # metrics: a crash in between made the rerun train from scratch.
    from applications import __main__ as cli
    from applications import fault_tolerance
    from tests.applications import cli_helpers

    run = tmp_path / "run"
    args = cli._defaults(cli.build_parser("smallnorb").parse_args(
        ["train", "smallnorb", "--run-dir", str(run), "--epochs", "1", "--batch-size", "2", "--image-size", "24",
         "--steps-per-epoch", "1", "--validation-steps", "1", "--channels", "8", "--parts", "8", "--quiet",
         "--data-dir", str(tmp_path / "tfds")]))
    make, save = fault_tolerance.resumable_callbacks, fault_tolerance.save_model_atomically
    fit_ended = cli_helpers.crash_when_saving_after_fit(monkeypatch)
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks", lambda *a, **kw: [*make(*a, **kw), fit_ended])
    monkeypatch.setattr(smallnorb, "_require_data", lambda data_dir: None)
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(RuntimeError, match="simulated"):
            smallnorb.run_train(args, tf.distribute.get_strategy())
        assert fault_tolerance.backup_epoch(str(run / "backup")) == 1
        counter = cli_helpers.CountBatches()
        monkeypatch.setattr(fault_tolerance, "save_model_atomically", save)
        monkeypatch.setattr(fault_tolerance, "resumable_callbacks", lambda *a, **kw: [*make(*a, **kw), counter])
        result = smallnorb.run_train(args, tf.distribute.get_strategy())
    assert counter.batches == 0 and result["resumed_from_epoch"] == 1
    assert (run / "metrics.json").is_file() and not (run / "backup").exists()


def test_training_crops_pad_with_the_border_pixels_as_the_authors_code():
    # The crops were of a zero-padded pair: nearly every training image had black borders
    # (smallNORB's backgrounds are grey) that no test image has. The authors' code pads
    # with the edge pixels (torchvision RandomCrop(96, padding=16, padding_mode="edge")).
    rng = np.random.default_rng(0)
    pair = rng.uniform(0.2, 1.0, size=(12, 10, 2)).astype("float32")
    padded = np.pad(pair, ((4, 4), (4, 4), (0, 0)), mode="edge")
    windows = {
        (r, c): padded[r : r + 8, c : c + 8] for r in range(padded.shape[0] - 7) for c in range(padded.shape[1] - 7)
    }
    corners = set()
    for k in range(40):
        crop = smallnorb.training_crop(pair, 4, 8, tf.constant([k, 7])).numpy()
        assert crop.shape == (8, 8, 2) and crop.min() >= 0.2  # never a zero of padding
        found = [corner for corner, window in windows.items() if np.array_equal(window, crop)]
        assert found, "the crop is no window of the edge-padded pair"
        corners.update(found)
    assert len(corners) > 10  # the corners vary, over the whole padded range
    assert min(r for r, _ in corners) <= 2 and max(r for r, _ in corners) >= 10
    np.testing.assert_array_equal(  # a seed gives its crop
        smallnorb.training_crop(pair, 4, 8, tf.constant([3, 7])), smallnorb.training_crop(pair, 4, 8, tf.constant([3, 7]))
    )
    with pytest.raises(ValueError, match=r"Received: image_size=30"):
        smallnorb.training_crop(pair, 4, 30, tf.constant([1, 2]))


def test_the_same_seed_trains_the_same_model(tmp_path):
    # train(seed=...) seeded the crops, shuffling and mixup but not Keras: the initial
    # weights (and so the trained model) differed from run to run with the same --seed.
    def run(name):
        with tfds.testing.mock_data(num_examples=8):
            model, _ = smallnorb.train(
                data_dir=str(tmp_path / "tfds"), run_dir=str(tmp_path / name), epochs=1, batch_size=4,
                image_size=24, steps_per_epoch=2, validation_steps=1, seed=7, verbose=0, model_kwargs=TINY,
            )
        return [w.numpy() for w in model.weights]

    first, second = run("a"), run("b")
    assert len(first) == len(second)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_viewpoint_sequence_of_a_category_alone_is_of_that_category():
    # With `category` given and no `instance`, the first example's instance *and category*
    # replaced them: the sequence was of another category's object.
    categories = np.array([0, 0, 2, 2, 2, 0])
    examples = {
        "image": np.arange(6, dtype="uint8").reshape(6, 1, 1, 1) * np.ones((1, 4, 4, 1), "uint8"),
        "image2": np.zeros((6, 4, 4, 1), "uint8"),
        "instance": np.array([4, 4, 7, 7, 4, 4]),
        "label_category": categories,
        "label_elevation": np.zeros(6, "int64"),
        "label_lighting": np.zeros(6, "int64"),
        "label_azimuth": np.array([0, 2, 4, 0, 6, 4]),
    }
    ds = tf.data.Dataset.from_tensor_slices(examples)
    pairs, values = smallnorb.viewpoint_sequence(ds, category=2, image_size=4)
    np.testing.assert_array_equal(values, [0, 4])  # instance 7 of category 2: examples 3 and 2
    np.testing.assert_allclose(pairs[:, 0, 0, 0] * 255, [3, 2], atol=1e-4)
    _, values = smallnorb.viewpoint_sequence(ds, instance=4, image_size=4)  # the first such: category 0
    np.testing.assert_array_equal(values, [0, 2, 4])
    _, values = smallnorb.viewpoint_sequence(ds, instance=4, category=2, image_size=4)
    np.testing.assert_array_equal(values, [6])


def test_coordinate_channels_trace_and_export_with_unknown_image_sizes(tmp_path):
    # audit (2026-11-27): ops.linspace tests its count as a Python bool on TensorFlow, so
    # the default model (image_size=None) failed in a graph of unknown H, W: model.export,
    # a tf.function with such a signature, predict on variable-size batches
    layer = smallnorb.CoordinateChannels()
    x = np.random.rand(1, 3, 4, 2).astype("float32")
    traced = tf.function(layer, input_signature=[tf.TensorSpec([None, None, None, 2])])
    np.testing.assert_allclose(traced(x), layer(x), rtol=0, atol=1e-6)
    grid = np.asarray(layer(x))[0, ..., 2:]
    np.testing.assert_allclose(grid[0, :, 0], np.linspace(-1, 1, 4), atol=1e-6)
    np.testing.assert_allclose(grid[:, 0, 1], np.linspace(-1, 1, 3), atol=1e-6)
    np.testing.assert_allclose(np.asarray(layer(x[:, :1, :1]))[0, 0, 0, 2:], [-1.0, -1.0])  # one pixel
    smallnorb.build_model(**TINY).export(str(tmp_path / "exported"), verbose=False)
    assert (tmp_path / "exported" / "saved_model.pb").is_file()


def test_evaluate_scores_a_model_saved_without_compiling(tmp_path):
    # audit (2026-11-27): build_model, train your own way, save: evaluate failed with
    # Keras' "You must call `compile()` before using the model"
    smallnorb.build_model(**TINY).save(tmp_path / "plain.keras")
    with tfds.testing.mock_data(num_examples=4):
        result = smallnorb.evaluate(str(tmp_path / "plain.keras"), data_dir=str(tmp_path / "tfds"),
                                    batch_size=2, image_size=24, steps=1)
    assert 0.0 <= result["test_accuracy"] <= 1.0


def test_validation_steps_beyond_the_test_split_count_each_test_batch_once(tmp_path):
    # `test_ds.repeat().take(N)`: with N above the split's batches, validation went round
    # the split again and counted its first batches twice (train's val_accuracy then
    # differed from evaluate's with the same --validation-steps).
    class CountTestBatches(keras.callbacks.Callback):
        batches = 0

        def on_test_batch_end(self, batch, logs=None):
            CountTestBatches.batches += 1

    with tfds.testing.mock_data(num_examples=8):  # 8 test examples: 2 batches of 4
        smallnorb.train(data_dir=str(tmp_path / "tfds"), run_dir=str(tmp_path / "run"), epochs=1, batch_size=4,
                        image_size=24, steps_per_epoch=1, validation_steps=5, seed=0, verbose=0,
                        model_kwargs=TINY, callbacks=[CountTestBatches()])
    assert CountTestBatches.batches == 2


def test_evaluate_scores_pairs_of_the_image_size_that_train_recorded(tmp_path, monkeypatch):
    # audit 8: evaluate's --image-size defaulted to 96 whatever size train used: a model
    # trained with --image-size 24 (it takes any size) was scored on 96x96 pairs, four
    # times the scale it learned, and evaluate reported another accuracy than train
    import inspect
    import json

    import tensorflow as tf

    from applications import __main__ as cli

    run = tmp_path / "run"
    args = cli._defaults(cli.build_parser("smallnorb").parse_args(
        ["train", "smallnorb", "--run-dir", str(run), "--epochs", "1", "--batch-size", "2", "--image-size", "24",
         "--steps-per-epoch", "1", "--channels", "8", "--parts", "8", "--quiet", "--data-dir", str(tmp_path / "tfds")]))
    monkeypatch.setattr(smallnorb, "_require_data", lambda data_dir: None)
    sizes, make = [], smallnorb.make_dataset

    def spy(*a, **kw):
        bound = inspect.signature(make).bind(*a, **kw)
        bound.apply_defaults()
        sizes.append(bound.arguments["image_size"])
        return make(*a, **kw)

    from applications import demo

    plotted, plot = [], demo.plot_history  # (which curves the plot calls what: fit watches the test pairs)
    monkeypatch.setattr(demo, "plot_history", lambda *a, **kw: (plotted.append(kw.get("held_out")), plot(*a, **kw)))
    with tfds.testing.mock_data(num_examples=4):
        result = smallnorb.run_train(args, tf.distribute.get_strategy())
        monkeypatch.setattr(smallnorb, "make_dataset", spy)
        evaluate_args = cli._defaults(cli.build_parser("smallnorb").parse_args(
            ["evaluate", "smallnorb", "--model", str(run / "model.keras"), "--batch-size", "2", "--quiet",
             "--data-dir", str(tmp_path / "tfds")]))
        assert evaluate_args.image_size is None
        evaluated = smallnorb.run_evaluate(evaluate_args, tf.distribute.get_strategy())
    assert sizes == [24] and plotted == ["test"]
    assert json.loads((run / "metrics.json").read_text())["image_size"] == 24
    assert evaluated["test_loss"] == pytest.approx(result["test_loss"], rel=1e-6)
    assert cli.build_parser("smallnorb").parse_args(["train", "smallnorb"]).image_size == smallnorb.IMAGE_SIZE
