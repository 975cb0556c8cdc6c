"""Every application's HyperModel: a tiny two-trial `keras-capsules tune` on tiny data.

Each search fixes the model's sizes at their smallest (``--fixed``) and searches the
rest; the three tuners each run on more than one application. (The HyperModels' shared
base, ``tuning.base.DatasetHyperModel``, runs under a ``MirroredStrategy`` in
``test_search.py``, through the demo's HyperModel.)
"""

import contextlib
import json
import os
import re

import keras
import numpy as np
import pytest

import tuning
from applications import __main__ as cli
from applications.errors import InputError
from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, SST_DIR, tiny_bert_preset, tiny_clevr_cache
from tests.applications.verbose_checks import VERBOSE_VALUES
from tests.conftest import shared_path

MNIST_DIR = str(shared_path("data", "mnist"))
JSB_DIR = str(shared_path("data", "jsb_chorales"))
# the first 4 chorales of each split cut into windows of 8 steps: 42 training and 37
# validation windows, one batch each (a trial's epoch is then one eager step, not 11)
MUSIC_DATA = ["--data-dir", JSB_DIR, "--limit", "4", "--window", "8", "--batch-size", "48"]


def fixed(**values):
    return [option for name, value in values.items() for option in ("--fixed", f"{name}={value}")]


# name -> (tuner, options, fixed values, {searched hyperparameter: (low, high) or choices},
#          objective, output shape of the best model)
SEARCHES = {
    "smallnorb": (
        "hyperband",
        ["--image-size", "24", "--steps-per-epoch", "1", "--validation-steps", "1", "--batch-size", "4"],
        dict(d_chns=8, n_parts=4, pose_size=2),
        {"n_iters": (2, 4), "max_lr": (1e-4, 2e-3), "mixup_alpha": (0.0, 0.2, 0.4)},
        "val_accuracy", (None, 5),
    ),
    "sst": (
        "bayesian",
        ["--data-dir", str(SST_DIR), "--granularity", "2", "--train-on", "sentences", "--max-train", "32",
         "--max-eval", "16", "--max-length", "12", "--batch-size", "16"],
        dict(hidden_dim=8, hidden_capsules=4),
        {"n_iters": (2, 4), "capsule_dim": (1, 4), "max_lr": (1e-4, 2e-3), "mixup_alpha": (0.0, 0.2, 0.4)},
        "val_accuracy", (None, 2),
    ),
    "text_classification": (
        "random",
        ["--dataset", "sst2", "--data-dir", str(SST_DIR), "--limit", "32", "--max-length", "12",
         "--embedding-dim", "8", "--batch-size", "16"],
        dict(gru_units=8, capsule_dim=4, class_capsule_dim=4),
        {"routing": ("kmeans", "dynamic", "linear"), "n_iters": (1, 5), "dropout": (0.0, 0.6),
         "learning_rate": (1e-4, 1e-2)},
        "val_accuracy", (None, 2),
    ),
    "sort_of_clevr": (
        "hyperband",
        ["--steps-per-epoch", "2", "--validation-examples", "8", "--batch-size", "4"],
        dict(units=8, embedding_dim=4),
        {"max_steps": (1, 6), "memory_dropout": (0.0, 0.3), "output_dropout": (0.0, 0.3),
         "learning_rate": (3e-5, 1e-3)},
        "val_accuracy", (None, 10),
    ),
    "clevr": (
        "random",
        ["--image-size", str(CLEVR_IMAGE_SIZE), "--batch-size", "8"],
        dict(units=8, embedding_dim=4, max_steps=1),
        {"memory_gate": (False, True), "memory_dropout": (0.0, 0.3), "learning_rate": (3e-5, 1e-3)},
        "val_accuracy", None,  # (None, number of answers): read from the cache
    ),
    "occluded_mnist": (
        "random",
        ["--data-dir", MNIST_DIR, "--num-train", "8", "--num-test", "8", "--batch-size", "8"],
        dict(conv_levels=1, conv_units_0=4, dense_units=8),
        {"learning_rate": (1e-4, 1e-2), "frame_weight": (0.1, 0.3, 1.0)},
        "val_digit_accuracy", None,  # a dict of outputs
    ),
    "music": (
        "bayesian",
        MUSIC_DATA,
        dict(levels=1, units_0=8, encoder="gated"),
        {"input_dropout": (0.0, 0.3), "learning_rate": (1e-4, 1e-2), "decoder_to_encoder": (False, True),
         "readout": ("independent", "nade")},
        "val_nll_per_step", (None, 8, 88),
    ),
    "textured_mnist": (
        "random",
        ["--data-dir", MNIST_DIR, "--num-train", "8", "--num-test", "8", "--batch-size", "8"],
        dict(n_groups=2, n_iters=1, conv_units=4, dense_units=8),
        {"learning_rate": (1e-4, 1e-2)},
        "val_loss", None,  # a dict of outputs
    ),
}


# Entries that the model uses only for some values of another entry, declared in
# keras-tuner's conditional_scope: entry -> (its parent, the parent's values whose models
# use it). Elsewhere a trial neither draws nor records them (they varied, and were
# reported among the best hyperparameters, in trials whose model never used them).
CONDITIONAL = {
    "music": {"units_1": ("levels", (2, 3)), "units_2": ("levels", (3,))},
    "occluded_mnist": {"conv_units_1": ("conv_levels", (2, 3)), "conv_units_2": ("conv_levels", (3,))},
    "text_classification": {entry: ("routing", ("kmeans", "dynamic"))
                            for entry in ("capsule_dim", "class_capsule_dim", "n_iters")},
}


def _check_only_used(name, values):
    """Every conditional entry of ``name`` is in a trial's ``values`` exactly where its model uses it."""
    for entry, (parent, using) in CONDITIONAL.get(name, {}).items():
        assert (entry in values) == (values[parent] in using), (entry, values)


def test_every_application_with_a_hypermodel_can_be_tuned():
    assert set(SEARCHES) | {"demo"} == set(tuning.HYPERMODELS)
    assert set(cli._hypermodel_names()) == set(tuning.HYPERMODELS)
    tuners = [search[0] for search in SEARCHES.values()]
    assert all(tuners.count(t) >= 2 for t in ("hyperband", "bayesian", "random"))


def _data_options(name, tmp_path, monkeypatch, stack):
    """Data options that need files made for the test (and mock TFDS for smallnorb)."""
    if name == "sst":
        return ["--preset", tiny_bert_preset(tmp_path / "preset")]
    if name == "clevr":
        return ["--cache-dir", tiny_clevr_cache(tmp_path / "clevr-cache")]
    if name == "smallnorb":
        import tensorflow_datasets as tfds

        from applications import tfds_data

        monkeypatch.setattr(tfds_data, "require_prepared", lambda name, data_dir=None: None)
        stack.enter_context(tfds.testing.mock_data(num_examples=8))
        return ["--data-dir", str(tmp_path / "tfds")]
    return []


def _trial_values(directory, name):
    project = os.path.join(directory, name)
    trials = sorted(p for p in os.listdir(project) if p.startswith("trial_"))
    values = []
    for trial in trials:
        with open(os.path.join(project, trial, "trial.json")) as f:
            values.append(json.load(f)["hyperparameters"]["values"])
    return values


def _check_range(name, value, allowed):
    if len(allowed) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in allowed):
        assert allowed[0] <= value <= allowed[1], (name, value, allowed)
    else:
        assert value in allowed, (name, value, allowed)


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_a_tiny_search_writes_the_best_model_and_hyperparameters(name, tmp_path, capsys, monkeypatch):
    tuner, options, pinned, searched, objective, output_shape = SEARCHES[name]
    directory = tmp_path / "search"
    with contextlib.ExitStack() as stack:
        argv = ["tune", name, "--tuner", tuner, "--directory", str(directory), "--max-trials", "2",
                "--epochs", "1", "--quiet", *options, *_data_options(name, tmp_path, monkeypatch, stack),
                *fixed(**pinned)]
        code = cli.main(argv)
    assert code == 0, capsys.readouterr().err
    assert "2 new trial(s), 2 in total" in capsys.readouterr().out
    trials = _trial_values(str(directory), name)
    assert len(trials) == 2
    assert trials[0] != trials[1]  # the two trials tried two points of the space
    for values in trials:
        assert {k: values[k] for k in pinned} == pinned
        _check_only_used(name, values)
        for key, allowed in searched.items():
            if key in values or key not in CONDITIONAL.get(name, {}):  # (else unused: not drawn)
                _check_range(key, values[key], allowed)
    best = json.loads((directory / "best_hyperparameters.json").read_text())
    # the model's hyperparameters of a trial; Hyperband's "tuner/..." entries apart
    assert best["objective"] == objective
    assert any(best["hyperparameters"] == {k: v for k, v in values.items() if not k.startswith("tuner/")}
               and best.get("tuner", {}) == {k[6:]: v for k, v in values.items() if k.startswith("tuner/")}
               for values in trials), (best, trials)
    assert ("tuner" in best) == (tuner == "hyperband")
    model = keras.saving.load_model(directory / "best_model.keras")
    if name == "clevr":  # one logit per answer of the training questions
        classes = json.loads((tmp_path / "clevr-cache" / "vocabulary.json").read_text())["classes"]
        output_shape = (None, len(classes))
    if name == "occluded_mnist":
        assert model.output["digit"].shape == (None, 10)
    elif name == "textured_mnist":  # [b, T, K, H, W, mean and assignment]
        assert model.output["mixture"].shape == (None, 1, 2, 28, 28, 2)
    else:
        assert model.output_shape == output_shape


def test_the_image_sort_of_clevr_searchs_best_model_has_the_statistics_of_its_ema_weights(tmp_path, capsys):
    # keras-tuner checkpoints the EMA weights (swap_on_epoch); their image stem's batch
    # normalization had kept the statistics of the raw weights
    from applications import sort_of_clevr
    from keras_capsules.callbacks import estimate_batch_norm_statistics

    directory = tmp_path / "search"
    argv = ["tune", "sort_of_clevr", "--kb", "image", "--tuner", "random", "--directory", str(directory),
            "--max-trials", "1", "--epochs", "2", "--quiet", "--steps-per-epoch", "3", "--validation-examples", "8",
            "--batch-size", "4", "--seed", "2",
            *fixed(units=8, embedding_dim=4, max_steps=1, learning_rate=1e-3)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    model = keras.saving.load_model(directory / "best_model.keras")
    layers = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(layers) == 4
    stream = sort_of_clevr.make_dataset(4, 2, kb="image")  # the trials' training stream, its first 100 batches
    for layer, (mean, variance) in zip(layers, estimate_batch_norm_statistics(model, stream, 100)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_mean), mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_variance), variance, rtol=1e-4, atol=1e-5)


def test_an_unknown_fixed_hyperparameter_is_one_line(tmp_path, capsys):
    argv = ["tune", "music", "--data-dir", JSB_DIR, "--limit", "2", "--directory", str(tmp_path / "t"),
            "--quiet", *fixed(levels=1, units_0=8, layers=3)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--fixed: layers not in the search space of 'music'" in err and "units_0" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "t").exists()  # no trial ran


def test_music_search_with_the_nade_readout(tmp_path, capsys):
    directory = tmp_path / "search"
    argv = ["tune", "music", "--tuner", "random", "--directory", str(directory), "--max-trials", "1",
            "--epochs", "1", "--quiet", *MUSIC_DATA, *fixed(levels=1, units_0=8, readout="nade")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    model = keras.saving.load_model(directory / "best_model.keras")
    assert model.get_layer("nade").hidden_units > 0 and model.output_shape == (None, 8, 88)
    assert set(model.input) == {"rolls", "targets"}
    # the chorales it searched on are recorded beside the best model, where `evaluate` reads
    # its default data (helper-182: it scored the shared copy, whatever --data-dir searched)
    import json

    metrics = json.loads((directory / "metrics.json").read_text())
    assert metrics["data_path"] == os.path.abspath(MUSIC_DATA[MUSIC_DATA.index("--data-dir") + 1])


@pytest.mark.parametrize("name", ["sort_of_clevr", "clevr"])
def test_the_default_point_is_the_applications_default_model(name, tmp_path):
    # Audit 3: Sort-of-CLEVR's search space defaulted both dropouts to CLEVR's 0.15,
    # while its build_model (and `keras-capsules train sort_of_clevr`) use 0.
    import inspect

    import keras_tuner

    from applications import clevr, sort_of_clevr

    if name == "clevr":
        hypermodel = tuning.HYPERMODELS[name](cache_dir=tiny_clevr_cache(tmp_path / "cache"),
                                              image_size=CLEVR_IMAGE_SIZE)
        builder = clevr.build_model
    else:
        hypermodel = tuning.HYPERMODELS[name](validation_examples=8)
        builder = sort_of_clevr.build_model
    hp = keras_tuner.HyperParameters()
    hypermodel.build(hp)
    defaults = {key: p.default for key, p in inspect.signature(builder).parameters.items()}
    shared = sorted(set(hp.values) & set(defaults))
    assert {"units", "max_steps", "embedding_dim", "memory_dropout", "output_dropout"} <= set(shared)
    assert {key: hp.values[key] for key in shared} == {key: defaults[key] for key in shared}


def _default_point(name, tmp_path):
    """The HyperParameters of ``name``'s search space at its default point."""
    import keras_tuner

    options = {
        "sort_of_clevr": lambda: dict(validation_examples=8),
        "clevr": lambda: dict(cache_dir=tiny_clevr_cache(tmp_path / "cache"), image_size=CLEVR_IMAGE_SIZE),
        "music": lambda: dict(data_dir=JSB_DIR, limit=2),
        "occluded_mnist": lambda: dict(data_dir=MNIST_DIR, num_train=8, num_test=8),
        "textured_mnist": lambda: dict(data_dir=MNIST_DIR, num_train=8, num_test=8),
    }[name]()
    hp = keras_tuner.HyperParameters()
    tuning.HYPERMODELS[name](**options).build(hp)
    return hp


def _signature_defaults(function):
    import inspect

    return {key: p.default for key, p in inspect.signature(function).parameters.items()}


@pytest.mark.parametrize("name", ["sort_of_clevr", "clevr", "music", "occluded_mnist", "textured_mnist"])
def test_every_default_lies_in_its_range(name, tmp_path):
    hp = _default_point(name, tmp_path)
    assert hp.space
    for param in hp.space:
        kind, default = type(param).__name__, param.default
        if kind in ("Int", "Float"):
            assert param.min_value <= default <= param.max_value, (param.name, default)
        elif kind == "Choice":
            assert default in param.values, (param.name, default, param.values)
        else:
            assert kind in ("Boolean", "Fixed"), kind


@pytest.mark.parametrize("name", ["music", "occluded_mnist", "textured_mnist"])
def test_the_default_point_is_the_rladder_applications_default_model(name, tmp_path):
    # Audit 6: the music search space defaulted input_dropout to 0.1, its build_model to 0.
    from applications import music, occluded_mnist, textured_mnist

    application = {"music": music, "occluded_mnist": occluded_mnist, "textured_mnist": textured_mnist}[name]
    values = dict(_default_point(name, tmp_path).values)
    if name == "music":
        values["units"] = tuple(values.pop(f"units_{k}") for k in range(values.pop("levels")))
    if name == "occluded_mnist":
        values["conv_units"] = tuple(values.pop(f"conv_units_{k}") for k in range(values.pop("conv_levels")))
    for key in [k for k in values if k.startswith(("units_", "conv_units_"))]:
        values.pop(key)  # the widths of unused levels
    defaults = {**_signature_defaults(application.compile_model), **_signature_defaults(application.build_model)}
    assert set(values) <= set(defaults), set(values) - set(defaults)
    assert values == {key: defaults[key] for key in values}


def test_the_textured_mnist_search_validates_on_held_out_training_digits_not_the_test_images():
    # audit (2026-11-27): the objective (val_loss) and the best epoch were measured on the
    # test images; train() chooses on held-out training digits and never on the test ones
    import keras_tuner

    from applications import textured_mnist
    from tuning.textured_mnist import TexturedMNISTHyperModel

    hypermodel = TexturedMNISTHyperModel(data_dir=MNIST_DIR, num_train=6, num_test=6, batch_size=6, seed=0)
    hp = keras_tuner.HyperParameters()
    hypermodel.build(hp)
    _, validation = hypermodel.datasets(hp, hypermodel.prepare())
    pixels = 28 * 28
    seen = np.asarray(next(iter(validation))[0]).reshape(6, -1)[:, :pixels]  # each example's image
    _, test = textured_mnist.make_images(MNIST_DIR, 6, 6, seed=0)
    held_out = textured_mnist.validation_images(MNIST_DIR, 6, seed=0)
    np.testing.assert_array_equal(seen, held_out["images"].reshape(6, -1)[:, :pixels])
    assert not np.array_equal(seen, test["images"].reshape(6, -1)[:, :pixels])


def test_the_occluded_mnist_search_validates_on_held_out_training_digits_not_the_test_sequences():
    # the objective (val_digit_accuracy) and keras-tuner's best epoch were measured on the
    # test sequences; now on sequences of a held-out fifth of the training digits
    import keras_tuner

    from applications import occluded_mnist
    from tuning.occluded_mnist import OccludedMNISTHyperModel

    hypermodel = OccludedMNISTHyperModel(data_dir=MNIST_DIR, num_train=4, num_test=4, batch_size=4, seed=0)
    hp = keras_tuner.HyperParameters()
    hypermodel.build(hp)
    _, validation = hypermodel.datasets(hp, hypermodel.prepare())
    seen = np.asarray(next(iter(validation))[0])
    _, held_out = occluded_mnist.make_sequences("idx", MNIST_DIR, 4, 4, seed=0, hold_out=True)
    _, test = occluded_mnist.make_sequences("idx", MNIST_DIR, 4, 4, seed=0)
    np.testing.assert_array_equal(seen, held_out["frames"])
    assert not np.array_equal(seen, test["frames"])
    # the held-out digits are training digits, and the training sequences no longer use them
    train_digits, test_digits = occluded_mnist._train_test_digits("idx", MNIST_DIR, 0)
    kept, valid = occluded_mnist._hold_out(train_digits, 0)
    as_rows = lambda images: {image.tobytes() for image in images}  # noqa: E731
    assert len(valid[0]) == len(train_digits[0]) - len(kept[0]) > 0
    assert as_rows(valid[0]) <= as_rows(train_digits[0])
    assert not as_rows(valid[0]) & as_rows(kept[0])
    assert not as_rows(valid[0]) & as_rows(test_digits[0])


def test_the_smallnorb_search_validates_on_held_out_training_examples_not_the_test_split(monkeypatch, tmp_path):
    # the objective (val_accuracy) and keras-tuner's best epoch were measured on the test split
    import tensorflow_datasets as tfds

    from applications import smallnorb, tfds_data
    from tuning.smallnorb import SmallNORBHyperModel

    read = []
    load_split = smallnorb.load_split

    def recording(split, *args, **kwargs):
        read.append(split)
        return load_split(split, *args, **kwargs)

    monkeypatch.setattr(smallnorb, "load_split", recording)
    monkeypatch.setattr(tfds_data, "require_prepared", lambda name, data_dir=None: None)
    with tfds.testing.mock_data(num_examples=8):
        hypermodel = SmallNORBHyperModel(data_dir=str(tmp_path), batch_size=4, image_size=24)
        hypermodel.prepare()
        assert read == ["train[:90%]", "train[90%:]"]
        # Every trial reads the training split anew: TFDS reshuffles its files each time a
        # dataset is read, so trials that shared one read them in the orders after the
        # trials before them (and a resumed search's first trial in those of the first).
        import keras_tuner

        hp = keras_tuner.HyperParameters()
        hypermodel.build(hp)
        for trial in range(2):
            hypermodel.datasets(hp, hypermodel.prepare())
            assert read == ["train[:90%]", "train[90%:]", *["train[:90%]"] * (trial + 1)]


@pytest.mark.parametrize("dataset", ["ag_news", "sst2"])
def test_the_text_classification_search_never_validates_on_the_test_split(dataset, monkeypatch, tmp_path):
    # the TFDS sets validated on their test split (they have no validation split): the
    # objective and keras-tuner's best epoch were measured on it. Now a held-out tenth of
    # the training split; SST keeps its dev split.
    import tensorflow_datasets as tfds

    from applications import tfds_data
    from applications.text_classification import data as data_lib
    from tuning.text_classification import TextClassificationHyperModel

    read = []
    load_split = data_lib.load_split

    def recording(name, split, *args, **kwargs):
        read.append(split)
        return load_split(name, split, *args, **kwargs)

    monkeypatch.setattr(data_lib, "load_split", recording)
    monkeypatch.setattr(tfds_data, "require_prepared", lambda name, data_dir=None: None)
    data_dir = SST_DIR if dataset == "sst2" else str(tmp_path)
    with tfds.testing.mock_data(num_examples=12):
        TextClassificationHyperModel(dataset, data_dir, limit=12, batch_size=4).prepare()
    # each split read once (the search read the training split a second time for the texts
    # that every trial's datasets batch anew; it now keeps prepare_data's)
    assert read == (["train", "dev"] if dataset == "sst2" else ["train[:90%]", "train[90%:]"])


@pytest.mark.parametrize("options, message", [
    (dict(vocab_size=2), "^`vocab_size` must be an integer >= 3. Received: vocab_size=2$"),
    (dict(max_length=0), "^`max_length` must be an integer >= 1. Received: max_length=0$"),
    (dict(limit=0), "^`limit` must be an integer >= 1. Received: limit=0$"),
    (dict(dataset="sst3"), "Received: dataset='sst3'"),
    # audit s83: phrases="yes" (and "no") was taken as True; phrases=True on a TFDS set and
    # a bad fixed embedding failed only once the data were read (every trial's build)
    (dict(phrases="no"), "^`phrases` must be True or False. Received: phrases='no'$"),
    (dict(dataset="ag_news", phrases=True), "^`phrases=True` exists for SST only. Received: dataset='ag_news'$"),
    (dict(embedding="glove"), "Received: embedding='glove'"),
    (dict(embedding_dim=0), "Received: embedding_dim=0"),
    (dict(num_codebooks=-1), "Received: num_codebooks=-1"),
])
def test_the_text_classification_search_refuses_bad_data_options_by_their_names(options, message):
    # audit s69: `tune text_classification --vocab-size 2` was refused as "`max_size` must be
    # at least 3" (a name the search was never given), and only once the data were read
    from applications.errors import InputError
    from tuning.text_classification import TextClassificationHyperModel

    with pytest.raises(InputError, match=message):
        TextClassificationHyperModel(**{"dataset": "sst2", "data_dir": SST_DIR, **options})


def test_every_text_classification_trial_trains_on_the_same_batches():
    # The trials shared one shuffled dataset: each trial got the next orders of its
    # reshuffling, so a trial trained on other batches according to the trials before it.
    import keras_tuner

    from tuning.text_classification import TextClassificationHyperModel

    hypermodel = TextClassificationHyperModel("sst2", SST_DIR, limit=24, batch_size=4, seed=1)
    hp = keras_tuner.HyperParameters()

    def epoch():
        train, _ = hypermodel.datasets(hp, hypermodel.prepare())
        return [(ids.tolist(), labels.tolist()) for ids, labels in train.as_numpy_iterator()]

    first = epoch()
    assert epoch() == first and len(first) == hypermodel.prepare()["train_batches"]
    # as `train` shuffles them: another order in every epoch
    train, _ = hypermodel.datasets(hp, hypermodel.prepare())
    epochs = [[labels.tolist() for _, labels in train.as_numpy_iterator()] for _ in range(3)]
    assert epochs[0] == [labels for _, labels in first] and epochs[1:] != epochs[:1] * 2


# audit 2026-11-27 (tuner hyperparameters): pinned values that built another model than
# the one recorded, trained on a blank input or uphill, or searched a no-op
@pytest.mark.parametrize("name, pinned, message", [
    # units[:levels] with 3 widths: levels=7 built 3 levels, and the search recorded 7
    ("music", dict(levels=7), "`levels` must be an integer in [1, 3]"),
    ("occluded_mnist", dict(conv_levels=5), "`conv_levels` must be an integer in [1, 3]"),
    ("music", dict(input_dropout=1.0), "`input_dropout` must be a number in [0, 1)"),  # Dropout(1) zeroes all
    ("sort_of_clevr", dict(output_dropout=1.0), "`output_dropout` must be a number in [0, 1)"),
    ("demo", dict(learning_rate=-0.01), "`learning_rate` must be a finite number > 0"),
    ("sort_of_clevr", dict(learning_rate=0.0), "`learning_rate` must be a finite number > 0"),
    ("text_classification", dict(learning_rate=-1e-3), "`learning_rate` must be a finite number > 0"),
])
def test_a_fixed_value_that_would_build_another_model_is_one_line(name, pinned, message, tmp_path, capsys):
    options = ["--limit", "40"] if name == "demo" else SEARCHES[name][1]
    directory = tmp_path / "t"
    argv = ["tune", name, *options, "--directory", str(directory), "--max-trials", "1", "--epochs", "1",
            "--quiet", *fixed(**pinned)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not directory.exists()  # no trial ran


def test_frame_weight_is_searched_only_for_the_variants_that_predict_frames():
    # the temporal baseline and the hierarchical ladder have no next-frame cost: their
    # searches trained the same model under three frame weights
    import keras_tuner

    from tuning.occluded_mnist import OccludedMNISTHyperModel

    for variant, searched in (("rladder", True), ("no_feedback", True), ("temporal", False),
                              ("hierarchical", False)):
        hp = keras_tuner.HyperParameters()
        OccludedMNISTHyperModel(variant=variant).build(hp)
        assert ("frame_weight" in hp.values) == searched, variant


def _parent_values(hp, parent):
    """Every value of the entry ``parent`` of the space ``hp`` (an ``Int`` or a ``Choice``)."""
    (entry,) = [p for p in hp.space if p.name == parent]
    if type(entry).__name__ == "Int":
        return list(range(entry.min_value, entry.max_value + 1))
    return list(entry.values)


@pytest.mark.parametrize("name", sorted(CONDITIONAL))
def test_an_entry_is_active_only_where_the_model_uses_it(name, shared_hypermodels):
    # music declared units_0 .. units_2 whatever `levels`, occluded_mnist conv_units_k
    # whatever `conv_levels`, text_classification the routing entries for the linear
    # head too: a trial drew, varied and recorded widths of levels it did not build
    import keras_tuner

    hypermodel = shared_hypermodels(name)
    declared = keras_tuner.HyperParameters()
    hypermodel.build(declared)
    (parent,) = {parent for parent, _ in CONDITIONAL[name].values()}
    for value in _parent_values(declared, parent):
        hp = keras_tuner.HyperParameters()
        hp.Fixed(parent, value)
        hypermodel.build(hp)
        _check_only_used(name, hp.values)
        for entry in CONDITIONAL[name]:
            assert hp.is_active(entry) == (entry in hp.values), (entry, value)
        # every entry stays declared, so that --fixed can pin it
        assert set(CONDITIONAL[name]) <= {p.name for p in hp.space}


def _layers_and_weights(model):
    return [type(layer).__name__ for layer in model.layers], [tuple(w.shape) for w in model.weights]


@pytest.mark.parametrize("name", sorted(CONDITIONAL))
def test_the_default_point_builds_the_applications_default_model(name, shared_hypermodels):
    # the conditional entries keep the default model: that of the application's build_model
    import keras_tuner

    from applications import music, occluded_mnist
    from applications.text_classification import model as model_lib

    hypermodel = shared_hypermodels(name)
    model = hypermodel.build(keras_tuner.HyperParameters())
    if name == "music":
        expected = music.build_model(hypermodel.window)
    elif name == "occluded_mnist":
        expected = occluded_mnist.build_model()
    else:
        data = hypermodel.prepare()
        expected = model_lib.build_model(data["vocab_size"], data["num_classes"])
    assert _layers_and_weights(model) == _layers_and_weights(expected)


def test_a_search_over_levels_records_only_the_widths_of_the_levels_each_trial_builds(tmp_path, capsys):
    # One search over `levels` (2, 1 and 3 with this seed) with units_1 pinned: a trial
    # records the widths of its levels only, the pinned width holds where it is used (an
    # unconditional pin was replaced there by the width drawn for the conditional entry),
    # and the best hyperparameters rebuild the best model, as do those of a search before
    # the widths were conditional (which recorded every width).
    import keras_tuner

    from tuning.music import WIDTHS, MusicHyperModel

    directory = tmp_path / "search"
    argv = ["tune", "music", "--tuner", "random", "--directory", str(directory), "--max-trials", "3",
            "--epochs", "1", "--quiet", "--seed", "4", *MUSIC_DATA, *fixed(units_0=8, units_1=8)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    trials = _trial_values(str(directory), "music")
    for values in trials:
        _check_only_used("music", values)
        assert values["units_0"] == 8 and values.get("units_1", 8) == 8 and values.get("units_2", 32) in WIDTHS
    assert sorted(values["levels"] for values in trials) == [1, 2, 3]
    settings = json.loads((directory / "keras_capsules_search.json").read_text())
    assert settings["fixed"] == {"units_0": 8, "units_1": 8}
    best = json.loads((directory / "best_hyperparameters.json").read_text())
    assert best["hyperparameters"] in trials
    model = keras.saving.load_model(directory / "best_model.keras")
    hypermodel = MusicHyperModel(data_dir=JSB_DIR, limit=4, window=8)

    def rebuilt(values):  # as the search's docstring tells: hp.Fixed for each, then build
        hp = keras_tuner.HyperParameters()
        for key, value in values.items():
            hp.Fixed(key, value)
        return hypermodel.build(hp)

    assert _layers_and_weights(rebuilt(best["hyperparameters"])) == _layers_and_weights(model)
    for values in trials:  # recorded before: every width, also of the levels a trial did not build
        built = _layers_and_weights(rebuilt(values))
        assert _layers_and_weights(rebuilt({"units_1": 64, "units_2": 256, **values})) == built
    # the search resumes (its oracle, with the conditional pinned entry, reloads)
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "0 new trial(s), 3 in total" in capsys.readouterr().out


def _schedule_steps(model):
    """The steps that a model's one-cycle schedule spans (warm-up and decay)."""
    schedule = model.optimizer.get_config()["learning_rate"]["config"]
    return schedule["warmup_steps"] + schedule["decay_steps"]


@pytest.mark.parametrize("name", ["smallnorb", "sst"])
def test_the_one_cycle_schedule_spans_the_epochs_that_the_trial_trains(name, tmp_path, monkeypatch):
    # The schedule spanned --epochs whatever the trial trained: Hyperband's first-round
    # trials (1 epoch of 3) were scored near the peak rate, its later rounds (a new
    # optimizer, from an earlier trial's weights) never decayed.
    import keras_tuner

    with contextlib.ExitStack() as stack:
        if name == "smallnorb":
            _data_options(name, tmp_path, monkeypatch, stack)
            hypermodel = tuning.HYPERMODELS[name](data_dir=str(tmp_path / "tfds"), image_size=24, steps_per_epoch=5,
                                                  batch_size=4, epochs=9)
        else:
            hypermodel = tuning.HYPERMODELS[name](SST_DIR, granularity="2", preset=tiny_bert_preset(tmp_path / "p"),
                                                  cache_dir=str(tmp_path / "cache"), train_on="sentences",
                                                  max_train=20, max_eval=4, max_length=12, batch_size=4, epochs=9)
        steps = 5  # per epoch (sst: 20 examples in batches of 4)

        def built(**tuner_values):
            hp = keras_tuner.HyperParameters()
            for key, value in dict(d_chns=8, n_parts=4, pose_size=2, hidden_dim=8, hidden_capsules=4).items():
                hp.Fixed(key, value)
            hp.values.update({f"tuner/{key}": value for key, value in tuner_values.items()})
            return _schedule_steps(hypermodel.build(hp))

        assert built() == 9 * steps  # random, bayesian: --epochs
        assert built(epochs=1, initial_epoch=0, bracket=2, round=0) == 1 * steps  # Hyperband's first round
        assert built(epochs=9, initial_epoch=3, bracket=2, round=2, trial_id="0004") == 6 * steps


def test_evaluate_of_the_tuned_smallnorb_model_scores_the_searchs_image_size(tmp_path, capsys, monkeypatch):
    # `tune smallnorb --image-size N` wrote no metrics.json beside best_model.keras:
    # `evaluate` of it then scored images of the default size (96), not the search's
    from applications import smallnorb

    directory = tmp_path / "search"
    model_path = str(directory / "best_model.keras")
    sizes = []
    make_dataset = smallnorb.make_dataset

    def recording(examples, training, batch_size=20, image_size=smallnorb.IMAGE_SIZE, *args, **kwargs):
        sizes.append(image_size)
        return make_dataset(examples, training, batch_size, image_size, *args, **kwargs)

    monkeypatch.setattr(smallnorb, "make_dataset", recording)
    with contextlib.ExitStack() as stack:
        data = _data_options("smallnorb", tmp_path, monkeypatch, stack)
        argv = ["tune", "smallnorb", "--tuner", "random", "--directory", str(directory), "--max-trials", "1",
                "--epochs", "1", "--quiet", "--image-size", "24", "--steps-per-epoch", "1", "--validation-steps", "1",
                "--batch-size", "4", *data, *fixed(d_chns=8, n_parts=4, pose_size=2, n_iters=2)]
        assert cli.main(argv) == 0, capsys.readouterr().err
        capsys.readouterr()
        sizes.clear()
        code = cli.main(["evaluate", "smallnorb", "--model", model_path, "--validation-steps", "1", "--batch-size", "4",
                         "--quiet", *data])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert sizes == [24]  # the test images, of the search's size
    assert json.loads(out)["model"] == model_path
    best = json.loads((directory / "best_hyperparameters.json").read_text())
    metrics = json.loads((directory / "metrics.json").read_text(), parse_constant=pytest.fail)  # standard JSON
    assert metrics["image_size"] == 24
    assert {key: metrics[key] for key in ("trial_id", "objective", "best_score")} == {
        key: best[key] for key in ("trial_id", "objective", "best_score")}
    assert metrics["objective"] == "val_accuracy" and 0 <= metrics["best_score"] <= 1
    assert metrics["model"] == model_path and metrics["metrics"] == str(directory / "metrics.json")


class _Stop(Exception):
    """Raised where every application's `evaluate` has read what `train` recorded."""


class _Reads(dict):
    """A dict of ``metrics.json`` that logs the entries read from it (``split.seed`` in nested dicts)."""

    _MISSING = "<not recorded>"

    def __init__(self, data, log, prefix=""):
        super().__init__({key: _Reads(value, log, f"{prefix}{key}.") if isinstance(value, dict) else value
                          for key, value in data.items()})
        self._log, self._prefix = log, prefix

    def _read(self, key, value):
        if not isinstance(value, _Reads):
            self._log[self._prefix + key] = value
        return value

    def __getitem__(self, key):
        return self._read(key, super().__getitem__(key))

    def get(self, key, default=None):
        value = self._read(key, super().get(key, self._MISSING))
        return default if value is self._MISSING else value


def _evaluate_of(name, tmp_path):
    """``(HyperModel of a search of name, evaluate(model_path) of its application)``."""
    from applications import clevr, demo, music, occluded_mnist, smallnorb, sort_of_clevr, sst, textured_mnist
    from applications.text_classification import recipe

    hypermodel = tuning.HYPERMODELS[name]
    return {
        "demo": (lambda: hypermodel(limit=120, seed=3), demo.evaluate),
        "smallnorb": (lambda: hypermodel(image_size=24), smallnorb.evaluate),
        "sst": (lambda: hypermodel(data_dir=str(SST_DIR), granularity="2", preset="tiny-preset", max_length=12),
                sst.evaluate),
        "text_classification": (lambda: hypermodel("sst2", str(SST_DIR), limit=32, max_length=20, batch_size=16),
                                recipe.evaluate),
        "sort_of_clevr": (lambda: hypermodel(validation_examples=8, seed=3), sort_of_clevr.evaluate),
        "clevr": (lambda: hypermodel(cache_dir=str(tmp_path / "cache"), image_size=CLEVR_IMAGE_SIZE),
                  lambda path: clevr.evaluate(path, str(tmp_path / "cache"))),
        "occluded_mnist": (lambda: hypermodel(data_dir=MNIST_DIR, num_test=8, seed=3), occluded_mnist.evaluate),
        "music": (lambda: hypermodel(data_dir=JSB_DIR, limit=4), lambda path: music.evaluate(path, JSB_DIR)),
        "textured_mnist": (lambda: hypermodel(data_dir=MNIST_DIR, num_test=8, seed=3), textured_mnist.evaluate),
    }[name]


# entries of metrics.json that each application's `evaluate` reads (at least), to take the
# options of the data it scores by default
EVALUATE_READS = {
    "demo": {"split.seed", "split.data_dir", "split.limit"},
    "smallnorb": {"image_size"},
    # (sst and text_classification: the folder of the SST tree files, that of their fingerprint)
    "sst": {"granularity", "preset", "max_length", "data_fingerprint.source"},
    "text_classification": {"dataset", "max_length", "data_fingerprint.source"},
    "sort_of_clevr": {"seed", "validation_examples"},
    "clevr": {"image_size", "limit"},
    "occluded_mnist": {"split.seed", "split.source", "split.data_dir"},
    "music": set(),
    "textured_mnist": {"split.seed", "split.data_dir", *(f"textures.{key}" for key in (
        "texture_style", "mean_gap", "texture_set", "bank_size", "texture_shift"))},
}

# entries that `train` records and `evaluate` reads but a search must not record: they sized
# the search's own data (validation sequences, the first chorales, questions, dev sentences or
# examples), not a test set that its best model was scored on, so `evaluate` of a tuned model
# scores its default one
# (smallnorb's test_examples: the test pairs train scored; the search scored held-out
# training pairs, so evaluate of its best model scores every test pair unless told)
NOT_RECORDED = {"music": {"limit"}, "clevr": {"limit"}, "sst": {"max_eval"}, "text_classification": {"limit"},
                "occluded_mnist": {"num_test"}, "textured_mnist": {"num_test"}, "smallnorb": {"test_examples"}}


def _searched(hypermodel, key):
    """The search's value of the option that evaluate reads as ``key`` (``split.seed``,
    ``image_size``, ...): the HyperModel's attribute of that name (a path made absolute,
    as ``train`` records it)."""
    group, _, name = key.rpartition(".")
    if key == "data_fingerprint":
        return _search_fingerprint(hypermodel)
    if group == "data_fingerprint":  # (its "source": the folder evaluate reads by default)
        return (_search_fingerprint(hypermodel) or {}).get(name, "<not in the search's fingerprint>")
    if group == "textures":
        return hypermodel.textures[name]
    value = getattr(hypermodel, name, "<no such option of the search>")
    return os.path.abspath(value) if name == "data_dir" and value is not None else value


def _search_fingerprint(hypermodel):
    """The fingerprint of the search's data that ``run_search`` records (that of its
    command line's ``--data-dir``, ``arguments.data_fingerprint``), from the HyperModel's
    data options; None where its data folder is a location only."""
    from applications import checks

    application = next(name for name, cls in tuning.HYPERMODELS.items() if isinstance(hypermodel, cls))
    options = {key: getattr(hypermodel, key) for key in ("data_dir", "dataset", "source") if hasattr(hypermodel, key)}
    return checks.data_fingerprint(application, **options)


@pytest.mark.parametrize("name", sorted(tuning.HYPERMODELS))
def test_the_search_records_beside_its_best_model_what_evaluate_reads(name, tmp_path, monkeypatch):
    # Only `train` wrote a metrics.json: `evaluate` of a tuned best model fell back to the
    # defaults (image size, split, text length, preset, textures) and scored other data
    # than the search used. Each application's evaluate reads the recorded entries it
    # takes as defaults (those of EVALUATE_READS at least): every one is there, with the
    # search's value.
    from applications import checks, distribute, fault_tolerance
    from tuning import search

    assert set(EVALUATE_READS) == set(tuning.HYPERMODELS)
    make, evaluate = _evaluate_of(name, tmp_path)
    hypermodel = make()
    directory = tmp_path / "search"
    directory.mkdir()
    paths = {key: str(directory / file) for key, file in search.BEST_FILES.items()}
    (directory / "best_model.keras").write_bytes(b"")  # evaluate stops before it loads the model
    paths.update(hypermodel.write_beside_best(str(directory)))
    summary = {"trial_id": "0", "objective": "val_accuracy", "best_score": 0.5, "hyperparameters": {}}
    fault_tolerance.write_metrics_json(search.best_metrics(hypermodel, summary, paths, _search_fingerprint(hypermodel)), paths["metrics"])
    reads = {}
    recorded_metrics = checks.recorded_metrics
    monkeypatch.setattr(checks, "recorded_metrics", lambda path: _Reads(recorded_metrics(path), reads))

    def stop(strategy=None):
        raise _Stop

    # every evaluate resolves its strategy once it has its options, before any data or model
    monkeypatch.setattr(distribute, "resolve_strategy", stop)
    with pytest.raises(_Stop):
        evaluate(paths["model"])
    # every entry read is there (none "<not recorded>"), with the search's value, except
    # those a search must not record
    metrics = json.loads((directory / "metrics.json").read_text())
    skipped = NOT_RECORDED.get(name, set())
    assert not skipped & set(metrics)
    assert {key: value for key, value in reads.items() if key not in skipped} == {
        key: _searched(hypermodel, key) for key in reads if key not in skipped}
    assert EVALUATE_READS[name] <= set(reads)
    assert {key: metrics[key] for key in ("trial_id", "objective", "best_score")} == {
        "trial_id": "0", "objective": "val_accuracy", "best_score": 0.5}


def test_a_clevr_search_over_a_split_without_questions_is_one_line_before_any_trial(tmp_path):
    # The CLEVR HyperModel took a cache whose validation split had no questions: its
    # trials trained, with no validation question to score them on.
    import pathlib

    cache = pathlib.Path(tiny_clevr_cache(tmp_path / "cache"))
    (cache / "validation_questions.json").write_text(json.dumps({"image_index": [], "question": [], "answer": []}))
    hypermodel = tuning.HYPERMODELS["clevr"](cache_dir=str(cache), image_size=CLEVR_IMAGE_SIZE)
    with pytest.raises(ValueError, match="the validation split of the CLEVR cache .* has no questions"):
        hypermodel.prepare()


def _hypermodel_for_batches(name, **kwargs):
    from tuning.demo import DemoHyperModel
    from tuning.music import MusicHyperModel
    from tuning.occluded_mnist import OccludedMNISTHyperModel
    from tuning.text_classification import TextClassificationHyperModel
    from tuning.textured_mnist import TexturedMNISTHyperModel

    return {
        "demo": lambda: DemoHyperModel(limit=45, **kwargs),
        "occluded_mnist": lambda: OccludedMNISTHyperModel(data_dir=MNIST_DIR, num_train=11, num_test=6, **kwargs),
        "textured_mnist": lambda: TexturedMNISTHyperModel(data_dir=MNIST_DIR, num_train=11, num_test=6, **kwargs),
        "music": lambda: MusicHyperModel(data_dir=JSB_DIR, limit=3, window=8, **kwargs),
        "text_classification": lambda: TextClassificationHyperModel("sst2", SST_DIR, limit=23, **kwargs),
    }[name]()


@pytest.fixture(scope="module")
def shared_hypermodels():
    """``shared(name)``: ``_hypermodel_for_batches(name, batch_size=4)``, made (and its data
    prepared: text_classification reads and encodes the real SST) once per module. The tests
    that share one only build models from it and read its data."""
    made = {}

    def shared(name):
        if name not in made:
            made[name] = _hypermodel_for_batches(name, batch_size=4)
        return made[name]

    return shared


@pytest.mark.parametrize("name", ["demo", "occluded_mnist", "textured_mnist", "music", "text_classification"])
def test_trials_train_on_batches_that_split_evenly_over_the_replicas(name):
    # The applications' `train` cuts its training batches for the replicas in sync (Keras
    # averaged the replicas' mean losses: a batch split 2 + 1 trained with a wrong
    # gradient); the trials of `tune --strategy mirrored` trained on the uncut batches.
    import keras_tuner

    def batch_rows(replicas):
        hypermodel = _hypermodel_for_batches(name, batch_size=4, seed=0, replicas=replicas)
        hp = keras_tuner.HyperParameters()
        hypermodel.build(hp)
        train, _ = hypermodel.datasets(hp, hypermodel.prepare())
        rows = [len(keras.tree.flatten(batch[1])[0]) for batch in train.as_numpy_iterator()]
        assert len(rows) == int(train.cardinality())  # the count Keras plans the epochs with
        return rows

    single = batch_rows(1)
    assert any(n % 3 for n in single)  # an uneven batch to cut: the test has something to check
    cut = batch_rows(3)
    assert cut and all(n > 0 and n % 3 == 0 for n in cut), cut
    assert sum(cut) >= sum(single) - 2 * sum(1 for n in single if n % 3)  # at most 2 examples left out per batch


@pytest.mark.parametrize("gru_units, dims", [(None, [4, 8, 16]), (8, [4, 8]), (12, [4]), (6, [2]), (7, [1])])
def test_a_pinned_gru_width_is_cut_only_into_capsules_that_divide_it(gru_units, dims, tmp_path, shared_hypermodels):
    # `tune text_classification --fixed gru_units=8` failed at random before the first trial:
    # keras-tuner's build that activates the capsule branch (even with routing pinned to
    # linear) drew capsule_dim 16 one time in three, and 16 does not divide 8
    import keras_tuner

    from tuning.search import fixed_hyperparameters

    hypermodel = shared_hypermodels("text_classification")
    pins = ["routing=linear"] + ([] if gru_units is None else [f"gru_units={gru_units}"])
    space = fixed_hyperparameters(hypermodel, pins)
    hypermodel.build(space)
    (entry,) = [p for p in space.space if p.name == "capsule_dim"]
    assert list(entry.values) == dims and entry.default in dims
    # keras-tuner's activation of every condition, with capsule_dim drawn at random each time
    tuner = keras_tuner.RandomSearch(hypermodel, hyperparameters=space, max_trials=1,
                                     directory=str(tmp_path), project_name="search")
    for _ in range(3):
        tuner._activate_all_conditions()


@pytest.mark.parametrize("name,entries", [
    ("music", {"input_dropout": (0.0, 0.3, 0.05)}),
    ("sort_of_clevr", {"memory_dropout": (0.0, 0.3, 0.05), "output_dropout": (0.0, 0.3, 0.05)}),
    ("clevr", {"memory_dropout": (0.0, 0.3, 0.05), "output_dropout": (0.0, 0.3, 0.05)}),
])
def test_stepped_entries_reach_their_documented_top_value_exactly(name, entries, tmp_path):
    # Audit s65: keras-tuner's stepped Float counted (0.3 - 0) // 0.05 + 1 = 6 values, so
    # no tuner ever drew 0.3, and its draws carried noise (0.15000000000000002).
    space = {p.name: p for p in _default_point(name, tmp_path).space}
    for entry, (low, high, step) in entries.items():
        want = [round(low + i * step, 10) for i in range(int(round((high - low) / step)) + 1)]
        assert list(space[entry].values) == want, entry
        drawn = set()
        for seed in range(200):
            drawn.add(space[entry].random_sample(seed))
        assert drawn == set(want), (entry, sorted(drawn))


def test_text_classification_dropout_reaches_its_documented_top_value(shared_hypermodels):
    import keras_tuner

    hp = keras_tuner.HyperParameters()
    shared_hypermodels("text_classification").build(hp)
    (dropout,) = [p for p in hp.space if p.name == "dropout"]
    assert list(dropout.values) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6] and dropout.default == 0.5


def test_stepped_choice_refuses_a_top_off_the_steps():
    import keras_tuner

    from tuning.base import stepped_choice

    with pytest.raises(ValueError, match="whole number of steps"):
        stepped_choice(keras_tuner.HyperParameters(), "x", 0.0, 0.33, 0.1, default=0.0)
    with pytest.raises(ValueError, match="default 0.12"):
        stepped_choice(keras_tuner.HyperParameters(), "x", 0.0, 0.3, 0.1, default=0.12)


def test_the_clevr_search_validates_on_held_out_training_images_not_on_the_validation_split(tmp_path):
    # audit s69: the CLEVR search chose its trials on the validation split, which is what
    # `evaluate clevr` reports (the test split has no answers): the best model's evaluate
    # score was its own selection score. Now a tenth of the training images, held out.
    from applications import clevr

    hypermodel = tuning.HYPERMODELS["clevr"](cache_dir=tiny_clevr_cache(tmp_path / "cache", images=20),
                                             image_size=CLEVR_IMAGE_SIZE, batch_size=4)
    data = hypermodel.prepare()
    made = []

    def recording(**split):
        made.append(split)
        return split

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clevr, "make_dataset", lambda **kwargs: recording(**kwargs))
        hypermodel.datasets(None, data)
    fit, held_out = made
    train = data["train"]
    assert len(fit["labels"]) + len(held_out["labels"]) == len(train["labels"])
    assert set(np.unique(held_out["image_index"])) == set(np.unique(train["image_index"])) - set(fit["image_index"])
    assert len(np.unique(held_out["image_index"])) == 2  # a tenth of 20 images
    assert fit["features_path"] == held_out["features_path"] == train["features_path"]
    assert held_out["drop_unknown"] is False and fit["shuffle"] is True
    # the same images for every trial and seed
    again = clevr.split_by_image(train, 0.1)[1]
    np.testing.assert_array_equal(again["image_index"], held_out["image_index"])


@pytest.mark.parametrize("share, images, message", [(0.0, 6, "share"), (1.0, 6, "share"), (0.5, 1, "two or more")])
def test_split_by_image_refuses_what_cannot_be_split(share, images, message, tmp_path):
    from applications import clevr
    from applications.errors import InputError

    data = clevr.prepare_offline(tiny_clevr_cache(tmp_path / "cache", images=images), image_size=CLEVR_IMAGE_SIZE,
                                 verbose=0)
    with pytest.raises(InputError, match=message):
        clevr.split_by_image(data["train"], share)


@pytest.mark.parametrize("options, message", [
    ({"steps_per_epoch": 0}, "Received: steps_per_epoch=0"),
    ({"steps_per_epoch": 2.5}, "Received: steps_per_epoch=2.5"),
    ({"validation_examples": 0}, "Received: validation_examples=0"),
    ({"kb": "both"}, "Received: kb='both'"),
])
def test_the_sort_of_clevr_hypermodel_refuses_bad_options_by_their_names(options, message):
    # Audit s80: steps_per_epoch=0 is "no limit" to Keras and the question stream is
    # endless, so the first trial never ended; kb="both" failed inside the first trial
    from tuning.sort_of_clevr import SortOfClevrHyperModel
    with pytest.raises(ValueError, match=re.escape(message)):
        SortOfClevrHyperModel(**options)


@pytest.mark.parametrize("options, message", [
    ({"validation_steps": 0}, "Received: validation_steps=0"),
    ({"validation_steps": -1}, "Received: validation_steps=-1"),
    ({"steps_per_epoch": 0}, "Received: steps_per_epoch=0"),
    ({"steps_per_epoch": 2.5}, "Received: steps_per_epoch=2.5"),
    ({"image_size": 0}, "Received: image_size=0"),
    ({"image_size": 2.5}, "Received: image_size=2.5"),
    ({"image_size": True}, "Received: image_size=True"),
])
def test_the_smallnorb_hypermodel_refuses_bad_options_by_their_names(options, message):
    # Audit apps2: validation_steps=0 and any image_size were taken (the command line's
    # positive_int checked them for `tune` only), to fail in or after a trial
    from applications.errors import InputError
    from tuning.smallnorb import SmallNORBHyperModel
    with pytest.raises(InputError, match=re.escape(message)):
        SmallNORBHyperModel(**options)
    hypermodel = SmallNORBHyperModel(image_size=24, validation_steps=1, steps_per_epoch=None)
    assert (hypermodel.image_size, hypermodel.validation_steps, hypermodel.steps_per_epoch) == (24, 1, None)


def _data_options_of(name, tmp_path):
    return {"music": {"data_dir": JSB_DIR, "limit": 2},
            "occluded_mnist": {"data_dir": MNIST_DIR},
            "textured_mnist": {"data_dir": MNIST_DIR},
            "clevr": {"cache_dir": str(tmp_path / "cache")},
            "sst": {"data_dir": str(SST_DIR)}}[name]


@pytest.mark.parametrize("name, options, message", [
    # Audit (tuning): window=0 built a model of whole chorales, then failed every trial in
    # its datasets (`self.window or longest`); True and 2.5 were refused as `steps`
    ("music", {"window": 0}, "Received: window=0"),
    ("music", {"window": -1}, "Received: window=-1"),
    ("music", {"window": True}, "Received: window=True"),
    ("music", {"window": 2.5}, "Received: window=2.5"),
    # num_train=0 completed every trial untrained (scored so), num_test=0 failed every trial
    # with a KeyError traceback (no val_digit_accuracy)
    ("occluded_mnist", {"num_train": 0}, "Received: num_train=0"),
    ("occluded_mnist", {"num_test": 0}, "Received: num_test=0"),
    ("occluded_mnist", {"num_train": True}, "Received: num_train=True"),  # (was `num_sequences`)
    # num_train=0 completed every trial untrained; num_test=0 was refused as `num_valid`,
    # 2.5 as `num_images`; classify="no" added the classifier
    ("textured_mnist", {"num_train": 0}, "Received: num_train=0"),
    ("textured_mnist", {"num_test": 0}, "Received: num_test=0"),
    ("textured_mnist", {"num_train": 2.5}, "Received: num_train=2.5"),
    ("textured_mnist", {"classify": "no"}, "Received: classify='no'"),
    ("textured_mnist", {"classify": 1}, "Received: classify=1"),
    # image_size=0 was refused as TFDS's clevr not prepared (to extract features of size 0)
    ("clevr", {"image_size": 0}, "Received: image_size=0"),
    ("clevr", {"image_size": True}, "Received: image_size=True"),
    # train_on="words" trained on the sentences; max_train=0 was "`requests['train'] limit`"
    ("sst", {"train_on": "words"}, "Received: train_on='words'"),
    ("sst", {"max_train": 0}, "Received: max_train=0"),
    ("sst", {"max_eval": -2}, "Received: max_eval=-2"),
    # audit s83: a bad variant or source was refused only once the search ran; SST's
    # max_length=1 only by the embedding; verbose="no" showed the progress and
    # tunable="no" was taken as True (keras-tuner's truthiness)
    ("occluded_mnist", {"variant": "ladder"}, "Received: variant='ladder'"),
    ("occluded_mnist", {"source": "npz"}, "Received: source='npz'"),
    ("sst", {"max_length": 1}, "Received: max_length=1"),
    ("sst", {"max_length": "64"}, "Received: max_length='64'"),
    ("music", {"verbose": "no"}, "Received: verbose='no'"),
    ("textured_mnist", {"verbose": 3}, "Received: verbose=3"),
    ("clevr", {"tunable": "no"}, "Received: tunable='no'"),
])
def test_the_hypermodels_refuse_bad_data_options_by_their_names(name, options, message, tmp_path):
    from applications.errors import InputError

    with pytest.raises(InputError, match=re.escape(message)):
        tuning.HYPERMODELS[name](**_data_options_of(name, tmp_path), **options)


@pytest.mark.parametrize("verbose", VERBOSE_VALUES)
def test_the_hypermodels_check_verbose_as_the_applications_do(verbose, tmp_path):
    # (2026-12-06) DatasetHyperModel checked verbose inline, 0 or 1 with a message of its own
    # ("`verbose` must be 0 or 1"): now applications.checks.verbosity, as the data passes its
    # load_data calls (CLEVR's features, SST's embedding) check it, and takes their 2
    from tuning.base import DatasetHyperModel

    for make in (lambda: DatasetHyperModel(verbose=verbose),
                 lambda: tuning.HYPERMODELS["textured_mnist"](**_data_options_of("textured_mnist", tmp_path),
                                                              verbose=verbose)):
        if isinstance(verbose, np.integer):
            hypermodel = make()
            assert hypermodel.verbose == int(verbose) and type(hypermodel.verbose) is int
        else:
            message = f"`verbose` must be 0, 1 or 2. Received: verbose={verbose!r}"
            with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
                make()


def test_the_hypermodels_take_numpy_integers_and_booleans(tmp_path):
    hypermodels = {
        "music": dict(window=np.int64(8)),
        "occluded_mnist": dict(num_train=np.int32(4), num_test=np.int64(4)),
        "textured_mnist": dict(num_train=np.int64(4), num_test=np.int32(4), classify=True),
        "clevr": dict(image_size=np.int64(CLEVR_IMAGE_SIZE)),
        "sst": dict(max_train=np.int64(8), max_eval=np.int32(4), train_on="sentences", max_length=np.int64(16)),
    }
    for name, options in hypermodels.items():
        hypermodel = tuning.HYPERMODELS[name](**_data_options_of(name, tmp_path), **options)
        for key, value in options.items():
            got = getattr(hypermodel, key) if key != "classify" else hypermodel.num_classes == 10
            assert got == value and type(got) in (int, bool, str), (name, key, got)


def test_a_music_window_longer_than_every_chorale_is_cut_to_the_longest():
    # Audit (tuning): as music.train cuts it, the same examples and NLL; the trials' models
    # were unrolled over the whole window (--window 1000 --limit 2: 1,000 steps for chorales
    # of 129 at most, every trial minutes longer)
    import keras_tuner

    from tuning.music import MusicHyperModel

    hypermodel = MusicHyperModel(data_dir=JSB_DIR, limit=2, window=1000, batch_size=4)
    _, longest = hypermodel.prepare()
    assert longest < 1000
    hp = keras_tuner.HyperParameters()
    hp.Fixed("levels", 1)
    hp.Fixed("units_0", 8)
    model = hypermodel.build(hp)
    assert model.inputs[0].shape == (None, longest, 88)
    train, valid = hypermodel.datasets(hp, hypermodel.prepare())
    for dataset in (train, valid):
        inputs, targets, mask = next(iter(dataset))
        assert inputs.shape[1] == targets.shape[1] == longest
    assert np.isfinite(model.evaluate(valid, verbose=0)).all()
