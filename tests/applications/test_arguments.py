"""The applications' Python functions and HyperModels refuse a bad argument at once, in
one line (an ``InputError``, a ``ValueError``), where it failed late with a raw error or
was silently changed (audit 2026-11-30)."""

import os
import re
import shutil
import tempfile
import warnings

import numpy as np
import pytest

from applications import demo, occluded_mnist, sort_of_clevr, textured_mnist
from applications.errors import InputError
from applications.text_classification import data as text_data
from applications.text_classification import recipe as text_recipe
from tests.conftest import shared_path
from tuning.demo import DemoHyperModel

_DIGITS = np.zeros((4, 28, 28), "float32"), np.arange(4) % 10
#: a run folder that the refused calls must not make
_NEVER_MADE = os.path.join(tempfile.gettempdir(), "keras-capsules-never-made-run-folder")

CASES = {
    # a negative limit dropped the last digits silently; 2.5 was a slicing TypeError
    "demo.load_arrays limit=-5": (lambda: demo.load_arrays(limit=-5), "limit=-5"),
    "demo.load_arrays limit=2.5": (lambda: demo.load_arrays(limit=2.5), "limit=2.5"),
    # -1 was numpy's "expected non-negative integer"
    "demo.make_datasets seed=-1": (lambda: demo.make_datasets(*demo.load_arrays(limit=20), 4, seed=-1), "seed=-1"),
    # pose_size=0 failed naming `filters`; hidden_norm="no" was true
    "demo.build_model pose_size=0": (lambda: demo.build_model(pose_size=0), "pose_size=0"),
    "demo.build_model hidden_norm='no'": (lambda: demo.build_model(hidden_norm="no"), "hidden_norm='no'"),
    # int() made 2.7 a batch of 2; epochs=0 was taken; seed -1 failed later in numpy
    "DemoHyperModel batch_size=2.7": (lambda: DemoHyperModel(batch_size=2.7), "batch_size=2.7"),
    "DemoHyperModel epochs=0": (lambda: DemoHyperModel(epochs=0), "epochs=0"),
    "DemoHyperModel seed=-1": (lambda: DemoHyperModel(seed=-1), "seed=-1"),
    # built, then failed in predict with a raw shape error
    "textured_mnist.build_model image_size=0": (lambda: textured_mnist.build_model(image_size=0), "image_size=0"),
    "textured_mnist.generate seed=-1": (lambda: textured_mnist.generate(*_DIGITS, 2, seed=-1), "seed=-1"),
    "occluded_mnist.generate seed=-1": (lambda: occluded_mnist.generate(*_DIGITS, 2, seed=-1), "seed=-1"),
    # a vocabulary smaller than the task's failed on its questions in a raw gather; one
    # answer was a softmax that is always 1
    "sort_of_clevr.build_model vocabulary_size=3": (
        lambda: sort_of_clevr.build_model(vocabulary_size=3), "vocabulary_size=3"),
    "sort_of_clevr.build_model num_answers=1": (lambda: sort_of_clevr.build_model(num_answers=1), "num_answers=1"),
    # audit s83: phrases="no" trained on every phrase (a truthy string); phrases=True on a
    # TFDS set was refused only once the run folder was made and the data were read
    "text_classification load_split phrases='no'": (
        lambda: text_data.load_split("sst2", "dev", "no-such-folder", phrases="no"), "phrases='no'"),
    "text_classification train phrases='no'": (
        lambda: text_recipe.train("sst2", "no-such-folder", run_dir=_NEVER_MADE, phrases="no"), "phrases='no'"),
    "text_classification train ag_news phrases=True": (
        lambda: text_recipe.train("ag_news", run_dir=_NEVER_MADE, phrases=True), "dataset='ag_news'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_argument_is_refused_in_one_line(case):
    call, received = CASES[case]
    shutil.rmtree(_NEVER_MADE, ignore_errors=True)
    with pytest.raises(InputError, match=f"Received: {received}") as caught:
        call()
    made = os.path.exists(_NEVER_MADE)
    shutil.rmtree(_NEVER_MADE, ignore_errors=True)
    assert "\n" not in str(caught.value)
    assert not made, "the refused call made its run folder"


def test_the_batch_size_of_an_evaluation_is_checked():
    # batch_size=0 gave a result in both, where error_per_step refused it
    with pytest.raises(InputError, match="Received: batch_size=0"):
        occluded_mnist.classification_error(None, {"frames": np.zeros((1, 5, 32, 32, 1)), "labels": [0]}, batch_size=0)
    with pytest.raises(InputError, match="Received: batch_size=0"):
        textured_mnist.evaluate_iterations(None, {"images": np.zeros((1, 28, 28, 1))}, batch_size=0)


# ----------------------------------------------------------------- tf.data seeds
def _music(seed, first_epoch, tmp_path):
    from applications import music

    return music.make_dataset([np.zeros((6, 88), "float32")], 2, shuffle=True, seed=seed, transpose=1,
                              first_epoch=first_epoch)


def _textured(seed, first_epoch, tmp_path):
    data = {"images": np.zeros((4, 28, 28, 1), "float32"), "labels": np.arange(4)}
    return textured_mnist.make_dataset(data, 2, 2, shuffle=True, seed=seed, first_epoch=first_epoch)


def _occluded(seed, first_epoch, tmp_path):
    return occluded_mnist.make_dataset(occluded_mnist.generate(*_DIGITS, 4), batch_size=2, shuffle=True, seed=seed)


def _occluded_training(augment, endless):
    def make(seed, first_epoch, tmp_path):
        return occluded_mnist.make_training_dataset(*_DIGITS, 4, batch_size=2, seed=seed, augment=augment,
                                                    endless=endless)
    return make


def _sst_texts():
    from applications import sst

    return sst.EmbeddedTexts(np.zeros((6, 3, 16), "float16"), [0, 2, 4], [2, 2, 2]), [0, 1, 1]


def _sst(seed, first_epoch, tmp_path):
    from applications import sst

    return sst.make_dataset(*_sst_texts(), 2, batch_size=2, shuffle=True, seed=seed)


def _sst_training(seed, first_epoch, tmp_path):
    from applications import sst

    return sst.training_dataset(*_sst_texts(), 2, batch_size=2, seed=seed, first_epoch=first_epoch)


def _clevr(seed, first_epoch, tmp_path):
    from applications import clevr

    path = str(tmp_path / "train_32.npy")
    np.save(path, np.zeros((3, 2, 2, 4), "float16"))
    return clevr.make_dataset(path, np.array([0, 2, 1]), np.ones((3, 5), "int32"), np.array([0, 1, 0], "int32"),
                              batch_size=2, shuffle=True, seed=seed, first_epoch=first_epoch)


def _smallnorb(seed, first_epoch, tmp_path):
    import tensorflow as tf

    from applications import smallnorb

    images = np.zeros((4, 96, 96, 1), "uint8")
    examples = tf.data.Dataset.from_tensor_slices(
        {"image": images, "image2": images, "label_category": np.zeros(4, "int64")})
    return smallnorb.make_dataset(examples, True, batch_size=2, image_size=24, seed=seed, first_epoch=first_epoch)


def _demo(seed, first_epoch, tmp_path):
    return demo.make_datasets(np.zeros((10, 8, 8, 1), "float32"), np.arange(10) % 2, 2, seed=seed,
                              first_epoch=first_epoch)[0]


def _text_classification(seed, first_epoch, tmp_path):
    import tensorflow as tf

    from applications.text_classification import data

    raw = tf.data.Dataset.from_tensor_slices((tf.constant(["good film", "bad", "good"]), tf.constant([1, 0, 1])))
    made = data.make_dataset(raw, data.make_lookup(["good", "film", "bad"]), 2, shuffle=True, seed=seed,
                             first_epoch=first_epoch)
    return made if first_epoch is None else made[0]


def _sort_of_clevr(seed, first_epoch, tmp_path):
    return sort_of_clevr.make_dataset(2, seed=seed)


#: every public tf.data pipeline of the applications that takes a seed: (make, takes first_epoch)
PIPELINES = {
    "music.make_dataset": (_music, True),
    "textured_mnist.make_dataset": (_textured, True),
    "occluded_mnist.make_dataset": (_occluded, False),
    "occluded_mnist.make_training_dataset": (_occluded_training(None, False), False),
    "occluded_mnist.make_training_dataset endless": (_occluded_training(None, True), False),
    "occluded_mnist.make_training_dataset augment='fresh'": (_occluded_training("fresh", False), False),
    "sst.make_dataset": (_sst, False),
    "sst.training_dataset": (_sst_training, True),
    "clevr.make_dataset": (_clevr, True),
    "smallnorb.make_dataset": (_smallnorb, True),
    "demo.make_datasets": (_demo, True),
    "text_classification.data.make_dataset": (_text_classification, True),
    "sort_of_clevr.make_dataset": (_sort_of_clevr, False),
}
_STREAMS = [(name, None) for name in PIPELINES] + [(name, 0) for name, (_, epochs) in PIPELINES.items() if epochs]


@pytest.mark.parametrize("seed", [1.5, "a", True, -1], ids=repr)
@pytest.mark.parametrize("name, first_epoch", _STREAMS)
def test_a_bad_seed_of_a_pipeline_is_refused_in_one_line_when_it_is_made(name, first_epoch, seed, tmp_path):
    # tf.data took 1.5 and "a" with a raw TypeError ("Cannot convert 1.5 to EagerTensor of dtype
    # int64"; with first_epoch only when the stream was read), True and -1 silently; the
    # augmented occluded_mnist epochs failed when drawn, sst's seeds in numpy
    make, _ = PIPELINES[name]
    with pytest.raises(InputError, match=re.escape(f"Received: seed={seed!r}")) as caught:
        make(seed, first_epoch, tmp_path)  # not read: the error comes when the pipeline is made
    assert "\n" not in str(caught.value)


_UNSEEDED = ["music.make_dataset", "textured_mnist.make_dataset", "occluded_mnist.make_dataset",
             "occluded_mnist.make_training_dataset", "sst.make_dataset", "sst.training_dataset",
             "clevr.make_dataset", "smallnorb.make_dataset", "text_classification.data.make_dataset",
             "sort_of_clevr.make_dataset"]


@pytest.mark.parametrize("name", _UNSEEDED)
def test_seed_none_draws_a_pipeline_anew_where_it_did(name, tmp_path):
    make, _ = PIPELINES[name]
    assert next(iter(make(None, None, tmp_path))) is not None


@pytest.mark.parametrize("name, first_epoch", [
    *[(name, 0) for name, (_, epochs) in PIPELINES.items() if epochs and name != "demo.make_datasets"],
    ("occluded_mnist.make_training_dataset endless", None),
    ("occluded_mnist.make_training_dataset augment='fresh'", None),
])
def test_seed_none_is_refused_where_the_epochs_are_drawn_from_it(name, first_epoch, tmp_path):
    # the epochs of a stream are drawn from (seed, epoch): None was a raw ValueError of
    # tf.cast (or failed when the augmented epoch was drawn)
    make, _ = PIPELINES[name]
    with pytest.raises(InputError, match=r"epochs drawn from \(seed, epoch\).*Received: seed=None") as caught:
        make(None, first_epoch, tmp_path)
    assert "\n" not in str(caught.value)


# ----------------------------------------------------------------- music's levels
@pytest.mark.parametrize("units", [0, -1, 2.5, "64", [], [64, 0], True, None], ids=repr)
def test_music_units_must_be_positive_integers(units):
    from applications import music

    # "64" built two levels (of 6 and 4 units), [] and [64, 0] failed inside RLadder
    with pytest.raises(InputError, match=re.escape(f"Received: units={units!r}")) as caught:
        music.build_model(4, units=units)
    assert "\n" not in str(caught.value)


def test_music_units_may_be_one_integer_and_nade_units_is_named():
    from applications import music

    # units=8 was a TypeError ("'int' object is not iterable"): one level of 8
    assert [level["units"] for level in music.paper_levels(8)] == [8]
    model = music.build_model(4, units=8)
    assert model.get_layer("rladder").levels == music.build_model(4, units=[8]).get_layer("rladder").levels
    # nade_units=0 was refused as KeyNADE's `hidden_units`, a name the caller never used
    with pytest.raises(InputError, match=r"`nade_units`.*Received: nade_units=0"):
        music.build_model(4, units=8, readout="nade", nade_units=0)


# ----------------------------------------------------------------- occluded MNIST's labels
@pytest.mark.parametrize("labels", [[0, 1, 2, 10], [-1, 0, 1, 2]])
def test_occluded_mnist_labels_are_digit_classes(labels):
    # a label outside 0-9 made sequences of a class the model does not have
    with pytest.raises(InputError, match=r"`labels` must be digit classes") as caught:
        occluded_mnist.generate(_DIGITS[0], labels, 2)
    assert "\n" not in str(caught.value)
    # with augment, when the dataset is made, not when its first epoch is drawn
    with pytest.raises(InputError, match=r"`labels` must be digit classes"):
        occluded_mnist.make_training_dataset(_DIGITS[0], labels, 2, augment="fresh")
    assert len(occluded_mnist.generate(_DIGITS[0], [9, 0, 9., 3], 2)["labels"]) == 2


# ----------------------------------------------------------------- options without effect
_TINY_TEXTURED = dict(n_iters=1, conv_units=2, dense_units=2)
_TINY_MAC = dict(units=8, max_steps=1, embedding_dim=4)
_TINY_OCCLUDED = dict(conv_units=(4,), dense_units=4, frame_size=16)


def _text_model(**options):
    from applications.text_classification import model as text_model

    return text_model.build_model(20, 2, **{"embedding_dim": 4, "gru_units": 8, "gru": "keras", **options})

WITHOUT_EFFECT = {
    # the classifier's options without a classifier
    "head_type='conv'": lambda: textured_mnist.build_model(head_type="conv", **_TINY_TEXTURED),
    "head_input='mask'": lambda: textured_mnist.build_model(head_input="mask", **_TINY_TEXTURED),
    "head_units=8": lambda: textured_mnist.build_model(head_units=8, **_TINY_TEXTURED),
    # the image stem's options with the object list, and back
    "stem_filters=8": lambda: sort_of_clevr.build_model(stem_filters=8, **_TINY_MAC),
    "positional_encoding='sincos'": lambda: sort_of_clevr.build_model(positional_encoding="sincos", **_TINY_MAC),
    "coordinate_frequencies=0": lambda: sort_of_clevr.build_model(kb="image", stem_filters=4,
                                                                  coordinate_frequencies=0, **_TINY_MAC),
    # the ladder's normalization in the baseline without a ladder
    "normalization='layer'": lambda: occluded_mnist.build_model("temporal", normalization="layer",
                                                                **_TINY_OCCLUDED),
    # the routing's options with the linear head, k-means' similarity with dynamic routing
    "capsule_dim=4": lambda: _text_model(routing="linear", capsule_dim=4),
    "class_capsule_dim=4": lambda: _text_model(routing="linear", class_capsule_dim=4),
    "n_iters=2": lambda: _text_model(routing="linear", n_iters=2),
    "similarity='dot'": lambda: _text_model(routing="dynamic", similarity="dot"),
}


@pytest.mark.parametrize("option", sorted(WITHOUT_EFFECT))
def test_an_option_without_effect_warns(option):
    with pytest.warns(UserWarning, match=re.escape(f"{option} has no effect")):
        WITHOUT_EFFECT[option]()


def _no_effect_warnings(build):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    return [str(w.message) for w in caught if "has no effect" in str(w.message)]


def test_the_defaults_and_the_options_with_effect_warn_of_nothing():
    builds = [
        lambda: textured_mnist.build_model(**_TINY_TEXTURED),
        lambda: textured_mnist.build_model(num_classes=10, head_type="conv", head_input="mask", head_units=8,
                                           **_TINY_TEXTURED),
        lambda: sort_of_clevr.build_model(**_TINY_MAC),
        lambda: sort_of_clevr.build_model(coordinate_frequencies=0, **_TINY_MAC),
        lambda: sort_of_clevr.build_model(kb="image", stem_filters=4, positional_encoding="sincos", **_TINY_MAC),
        lambda: occluded_mnist.build_model("temporal", **_TINY_OCCLUDED),
        lambda: occluded_mnist.build_model("hierarchical", normalization="layer", **_TINY_OCCLUDED),
        lambda: _text_model(routing="linear"),
        lambda: _text_model(routing="dynamic", capsule_dim=4, class_capsule_dim=4, n_iters=2),
        lambda: _text_model(routing="kmeans", similarity="dot", capsule_dim=4),
    ]
    assert [_no_effect_warnings(build) for build in builds] == [[]] * len(builds)


@pytest.mark.parametrize("application, options", [
    ("textured_mnist", []),
    ("textured_mnist", ["--classify"]),
    ("sort_of_clevr", ["--kb", "image"]),
    ("occluded_mnist", ["--variant", "temporal"]),
])
def test_the_command_line_builds_its_models_without_a_warning(application, options, tmp_path, monkeypatch):
    # `keras-capsules train` passes its defaults down to build_model: they must not warn
    from applications import __main__ as cli
    from applications import distribute
    from tests.conftest import shared_path

    module = {"textured_mnist": textured_mnist, "sort_of_clevr": sort_of_clevr,
              "occluded_mnist": occluded_mnist}[application]
    build_model, built = module.build_model, []

    class Built(Exception):
        pass

    def spy(*args, **kwargs):  # builds the model train asks for, then stops train
        built.append(_no_effect_warnings(lambda: build_model(*args, **kwargs)))
        raise Built

    monkeypatch.setattr(module, "build_model", spy)
    sizes = {"textured_mnist": ["--num-train", "2", "--num-test", "2"],
             "sort_of_clevr": ["--validation-examples", "2"],
             "occluded_mnist": ["--num-train", "2", "--num-test", "2"]}[application]
    data = ["--data-dir", str(shared_path("data", "mnist"))] if application != "sort_of_clevr" else []
    args = cli.build_parser(application).parse_args(
        ["train", application, "--run-dir", str(tmp_path / "run"), "--quiet", *sizes, *data, *options])
    with pytest.raises(Built):
        module.run_train(args, distribute.make_strategy("default"))
    assert built == [[]]


@pytest.mark.parametrize("hypermodel", ["textured_mnist", "sort_of_clevr image", "occluded_mnist temporal"])
def test_the_tuners_build_their_default_models_without_a_warning(hypermodel):
    import keras_tuner

    from tuning.occluded_mnist import OccludedMNISTHyperModel
    from tuning.sort_of_clevr import SortOfClevrHyperModel
    from tuning.textured_mnist import TexturedMNISTHyperModel

    made = {
        "textured_mnist": lambda: TexturedMNISTHyperModel(),
        "sort_of_clevr image": lambda: SortOfClevrHyperModel(kb="image"),
        "occluded_mnist temporal": lambda: OccludedMNISTHyperModel(variant="temporal"),
    }[hypermodel]()
    assert _no_effect_warnings(lambda: made.build(keras_tuner.HyperParameters())) == []


def test_the_linear_text_head_takes_any_width_it_has_no_capsules_to_cut():
    # capsule_dim (default 8) had to divide gru_units even for the linear head, which
    # reads neither: gru_units=12 was refused, and the tuner passed capsule_dim=gru_units
    from applications.text_classification import model as text_model

    text_model.check_arguments(routing="linear", gru_units=12)
    model = _text_model(routing="linear", gru_units=12)
    assert model.get_layer("scores").input.shape[-1] == 12
    assert model.predict(np.array([[1, 2, 0]]), verbose=0).shape == (1, 2)
    # the capsule heads still need it to divide
    for routing in ("kmeans", "dynamic"):
        with pytest.raises(InputError, match="Received: gru_units=12, capsule_dim=8"):
            text_model.check_arguments(routing=routing, gru_units=12)


# (application, options, the files whose fingerprint run_options records: None for a
# fixed token, () where --data-dir is a location only)
_DATA_CASES = {
    "demo 8x8 digits": ("demo", {}, None),
    "demo MNIST": ("demo", {"data_dir": "mnist"}, ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")),
    "occluded_mnist idx": ("occluded_mnist", {"source": "idx", "data_dir": "mnist"},
                           ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")),
    "occluded_mnist tfds": ("occluded_mnist", {"source": "tfds", "data_dir": "mnist"}, ()),
    "textured_mnist": ("textured_mnist", {"data_dir": "mnist"}, ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")),
    "music": ("music", {"data_dir": "jsb_chorales"}, ("jsb_chorales.json",)),
    "sst": ("sst", {"data_dir": "sst"}, ("dev.txt", "test.txt", "train.txt")),
    "text_classification sst5": ("text_classification", {"dataset": "sst5", "data_dir": "sst"},
                                 ("dev.txt", "test.txt", "train.txt")),
    "text_classification ag_news": ("text_classification", {"dataset": "ag_news", "data_dir": "sst"}, ()),
    "smallnorb": ("smallnorb", {"data_dir": "mnist"}, ()),
}


@pytest.mark.parametrize("case", sorted(_DATA_CASES))
def test_run_options_record_the_data_a_data_dir_chooses_wherever_it_is(case, tmp_path):
    # --data-dir was free on a resume (a location), but for demo, whose backup and search
    # recorded its path: a resume on other data files went on training on them, and the
    # same files moved to another folder were refused for demo. The options now record the
    # data's fingerprint: the same for a copy elsewhere, another for a changed file.
    import argparse

    from applications import arguments
    from applications.shared_data import same_data

    def copy(source, folder):  # (writable files: the shared ones are read-only)
        folder.mkdir()
        for path in source.iterdir():
            shutil.copyfile(path, folder / path.name)
        return folder

    application, options, files = _DATA_CASES[case]
    if "data_dir" in options:
        options = {**options, "data_dir": str(copy(shared_path("data", options["data_dir"]), tmp_path / "data"))}

    def recorded(**changed):
        args = argparse.Namespace(application=application, command="train", seed=0, **{**options, **changed})
        return arguments.run_options(args).get("data_fingerprint")

    fingerprint = recorded()
    if files == ():
        assert fingerprint is None  # a location: not recorded
        return
    if files is None:
        assert fingerprint == {"data": "scikit-learn's 8x8 digits"}
        return
    # (music's data are read in the chorales file itself, not its folder: 2026-12-06)
    source = os.path.join(options["data_dir"], *files) if application == "music" else options["data_dir"]
    assert fingerprint["source"] == source and sorted(fingerprint["files"]) == list(files)
    moved = copy(tmp_path / "data", tmp_path / "moved")
    assert recorded(data_dir=str(moved)) != fingerprint and same_data(recorded(data_dir=str(moved)), fingerprint)
    with open(moved / files[-1], "ab") as f:
        f.write(b"\0")
    assert not same_data(recorded(data_dir=str(moved)), fingerprint)
    assert recorded(data_dir=str(tmp_path / "nowhere")) is None  # (the run names the missing data)
