"""The applications' Python API refuses bad arguments in one clear error, before writing
anything (audit s65: the CLI checked them, some Python functions did not)."""

import os

import pytest

from applications import clevr, demo, music, sort_of_clevr, sst, textured_mnist
from applications.errors import InputError


@pytest.mark.parametrize("epochs", [0, -1, 1.5, True])
@pytest.mark.parametrize("application", ["demo", "music", "clevr", "textured_mnist"])
def test_train_refuses_a_bad_epochs_before_writing_anything(application, epochs, tmp_path):
    # epochs=0 wrote and scored an untrained model; -1 blamed `first_epoch`, which train
    # does not take; 1.5 failed inside fit after the run directory and a backup were written
    run_dir = tmp_path / "run"
    train = {"demo": lambda: demo.train(run_dir=str(run_dir), epochs=epochs, verbose=0),
             "music": lambda: music.train(str(tmp_path / "none.json"), run_dir=str(run_dir), epochs=epochs, verbose=0),
             "clevr": lambda: clevr.train(str(tmp_path / "cache"), run_dir=str(run_dir), epochs=epochs, verbose=0),
             "textured_mnist": lambda: textured_mnist.train(str(tmp_path / "mnist"), run_dir=str(run_dir), epochs=epochs,
                                                            verbose=0)}[application]
    with pytest.raises(InputError, match=r"`epochs` must be an integer >= 1\. Received: epochs="):
        train()
    assert not os.path.exists(run_dir)


@pytest.mark.parametrize("batch_size", [0, -3, 2.5])
def test_sort_of_clevr_evaluate_refuses_a_bad_batch_size(batch_size, tmp_path):
    # 0 scored at Keras' default batch size; -3 and 2.5 failed inside TensorFlow
    with pytest.raises(InputError, match=r"`batch_size` must be an integer >= 1"):
        sort_of_clevr.evaluate(str(tmp_path / "model.keras"), batch_size=batch_size)


@pytest.mark.parametrize("test_fraction", [0, 1.0, 1.5, -0.2, "0.2"])
def test_demo_split_blames_a_bad_test_fraction_not_the_data(test_fraction):
    # was "1797 example(s) are too few for a train/test split ... use a larger --limit"
    with pytest.raises(InputError, match=r"`test_fraction` must be a number in \(0, 1\)"):
        demo.split_indices(1797, test_fraction=test_fraction)
    assert len(demo.split_indices(1797, test_fraction=0.2)[1]) == 359


@pytest.mark.parametrize("total_steps", [0, -100, 0.5])
def test_sst_compile_model_refuses_a_bad_total_steps(total_steps):
    # 0, -100 or 0.5 became a schedule of 2 steps without a word
    with pytest.raises(InputError, match=r"`total_steps` must be an integer >= 1"):
        sst.compile_model(object(), total_steps)


@pytest.mark.parametrize("application", ["sort_of_clevr", "textured_mnist", "clevr", "occluded_mnist"])
def test_train_into_a_run_dir_that_is_a_file_is_one_clear_error(application, tmp_path):
    # was a bare FileExistsError from os.makedirs (demo alone named the run directory)
    from applications import occluded_mnist
    from applications.errors import PathError

    run_dir = tmp_path / "a_file"
    run_dir.write_text("x")
    train = {
        "sort_of_clevr": lambda: sort_of_clevr.train(str(run_dir), steps=2, batch_size=4, validation_examples=4,
                                                     verbose=0),
        "textured_mnist": lambda: textured_mnist.train(str(tmp_path / "mnist"), run_dir=str(run_dir), epochs=1,
                                                       verbose=0),
        "clevr": lambda: clevr.train(str(tmp_path / "cache"), run_dir=str(run_dir), epochs=1, verbose=0),
        "occluded_mnist": lambda: occluded_mnist.train(run_dir=str(run_dir), data_dir=str(tmp_path / "mnist"),
                                                       epochs=1, verbose=0),
    }[application]
    with pytest.raises(PathError, match=rf"cannot create the run directory '{run_dir}'"):
        train()
    assert run_dir.read_text() == "x"


@pytest.mark.parametrize("entry", ["smallnorb.train", "smallnorb.evaluate", "smallnorb.load_split",
                                   "clevr.train", "clevr.load_split"])
def test_tfds_data_missing_from_data_dir_is_the_clear_error_of_the_cli(entry, tmp_path):
    # audit s65: from Python these raised TFDS' raw AssertionError ("could not find data in
    # ..."); the command line checked the data first and said it in one line
    from applications import smallnorb
    from applications.errors import DataNotFoundError

    data_dir = tmp_path / "tfds"
    data_dir.mkdir()
    model_path = tmp_path / "model.keras"
    if entry == "smallnorb.evaluate":
        smallnorb.build_model(n_parts=2, d_chns=2, image_size=8, n_iters=1).save(model_path)
    run = {
        "smallnorb.train": lambda: smallnorb.train(data_dir=str(data_dir), run_dir=str(tmp_path / "run"), epochs=1,
                                                   download=False, verbose=0),
        "smallnorb.evaluate": lambda: smallnorb.evaluate(str(model_path), data_dir=str(data_dir), image_size=8),
        "smallnorb.load_split": lambda: smallnorb.load_split("test", str(data_dir), download=False),
        "clevr.train": lambda: clevr.train(str(tmp_path / "cache"), run_dir=str(tmp_path / "run"),
                                           data_dir=str(data_dir), epochs=1, weights=None, verbose=0),
        "clevr.load_split": lambda: clevr.load_split("validation", str(data_dir)),
    }[entry]
    name = "smallnorb" if entry.startswith("smallnorb") else "clevr:3.1.0"
    with pytest.raises(DataNotFoundError) as info:
        run()
    message = str(info.value)
    assert message == (f"TFDS dataset {name!r} is not prepared in {data_dir}; pass --data-dir (data_dir in "
                       f"Python) with a directory holding it, or prepare it with network access: tfds build "
                       f"{name} --data_dir DIR")
    assert info.value.__context__ is None  # no chained TFDS traceback
    if entry == "smallnorb.train":
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("entry", ["load_split", "train", "evaluate"])
@pytest.mark.parametrize("dataset", ["ag_news", "yelp_polarity"])
def test_text_classification_tfds_data_missing_from_data_dir_is_the_clear_error_of_the_cli(entry, dataset,
                                                                                           tmp_path):
    # audit s66: text_classification read TFDS with tfds.load, whose AssertionError ("could not
    # find data in ...") was what the Python API said; the command line said it in one line
    from applications import text_classification
    from applications.errors import DataNotFoundError
    from applications.text_classification import data as data_lib

    data_dir = tmp_path / "tfds"
    data_dir.mkdir()
    model_path = tmp_path / "model.keras"
    if entry == "evaluate":  # (the model file and vocabulary are looked for first)
        model_path.write_bytes(b"")
        (tmp_path / "vocab.txt").write_text("good\nbad\n")
    run = {
        "load_split": lambda: text_classification.load_split(dataset, "test", str(data_dir)),
        "train": lambda: text_classification.train(dataset, data_dir=str(data_dir), run_dir=str(tmp_path / "run"),
                                                   epochs=1, verbose=0),
        "evaluate": lambda: text_classification.evaluate(str(model_path), dataset=dataset, data_dir=str(data_dir)),
    }[entry]
    name = data_lib.TFDS_DATASETS[dataset][0]
    with pytest.raises(DataNotFoundError) as info:
        run()
    assert str(info.value) == (f"TFDS dataset {name!r} is not prepared in {data_dir}; pass --data-dir (data_dir "
                               f"in Python) with a directory holding it, or prepare it with network access: tfds "
                               f"build {name} --data_dir DIR")
    assert info.value.__context__ is None  # no chained TFDS traceback


def _string_flag_calls(tmp_path):
    """Each application function's True/False option, given as the text "False"."""
    import numpy as np

    from applications import occluded_mnist, smallnorb

    digits, labels = np.zeros((4, 28, 28), "float32"), np.arange(4)
    rolls = [np.zeros((6, 88), "float32")]
    sst_rows = [np.zeros((3, 4), "float32")] * 2
    return {
        "music.make_dataset shuffle": lambda: music.make_dataset(rolls, 1, shuffle="False"),
        "music.make_dataset targets_as_input": lambda: music.make_dataset(rolls, 1, targets_as_input="no"),
        "occluded_mnist.generate random_bar_offset": lambda: occluded_mnist.generate(
            digits, labels, 2, random_bar_offset="False"),
        "occluded_mnist.make_dataset shuffle": lambda: occluded_mnist.make_dataset(
            occluded_mnist.generate(digits, labels, 2), shuffle="False"),
        "occluded_mnist.train hold_out": lambda: occluded_mnist.train(
            data_dir=str(tmp_path / "mnist"), run_dir=str(tmp_path / "run"), epochs=1, hold_out="False"),
        "sst.make_dataset shuffle": lambda: sst.make_dataset(sst_rows, [0, 1], 2, shuffle="False"),
        "clevr.make_dataset shuffle": lambda: clevr.make_dataset(
            str(tmp_path / "f.npy"), [0], [[1]], [0], shuffle="False"),
        "clevr.make_dataset drop_unknown": lambda: clevr.make_dataset(
            str(tmp_path / "f.npy"), [0], [[1]], [0], drop_unknown="False"),
        "textured_mnist.make_dataset shuffle": lambda: textured_mnist.make_dataset(
            textured_mnist.generate(digits, labels, 2), 1, shuffle="False"),
        "textured_mnist.make_images hold_out": lambda: textured_mnist.make_images(
            str(tmp_path / "mnist"), 2, 2, hold_out="False"),
        "smallnorb.make_dataset repeat": lambda: smallnorb.make_dataset(None, False, repeat="False"),
        "smallnorb.make_dataset training": lambda: smallnorb.make_dataset(None, "False"),
        "smallnorb.load_split download": lambda: smallnorb.load_split("test", str(tmp_path / "norb"), download="False"),
        "smallnorb.train download": lambda: smallnorb.train(
            str(tmp_path / "norb"), run_dir=str(tmp_path / "run"), epochs=1, download="False"),
    }


@pytest.mark.parametrize("entry", sorted(_string_flag_calls(None)))
def test_true_or_false_options_refuse_text(entry, tmp_path):
    # "False" and "no" are non-empty strings, which Python takes as true: the option was on
    # (smallnorb's download="False" let TFDS try to download for minutes offline), and
    # nothing was written or read before the refusal
    option = entry.split()[-1]
    with pytest.raises(InputError, match=rf"^`{option}` must be True or False\. Received: {option}="):
        _string_flag_calls(tmp_path)[entry]()
    assert not (tmp_path / "run").exists() and not (tmp_path / "norb").exists()


@pytest.mark.parametrize("seed", [-1, 1.5, "3", None])
@pytest.mark.parametrize("application", ["sst", "clevr", "text_classification", "occluded_mnist", "music",
                                         "textured_mnist"])
def test_train_refuses_a_seed_that_is_no_integer_at_least_0_by_its_name(application, seed, tmp_path):
    # Keras' set_random_seed refused them as a plain ValueError ("Seed must be between 0 and
    # 2**32 - 1", "Expected `seed` argument to be an integer"): a traceback on the command line
    from applications import occluded_mnist
    from applications.text_classification import recipe

    run_dir, data = str(tmp_path / "run"), str(tmp_path / "data")
    train = {
        "sst": lambda: sst.train(data, run_dir=run_dir, seed=seed, verbose=0),
        "clevr": lambda: clevr.train(str(tmp_path / "cache"), run_dir=run_dir, seed=seed, verbose=0),
        "text_classification": lambda: recipe.train("sst2", data_dir=data, run_dir=run_dir, seed=seed, verbose=0),
        "occluded_mnist": lambda: occluded_mnist.train(data_dir=data, run_dir=run_dir, seed=seed, verbose=0),
        "music": lambda: music.train(data, run_dir=run_dir, seed=seed, verbose=0),
        "textured_mnist": lambda: textured_mnist.train(data, run_dir=run_dir, seed=seed, verbose=0),
    }[application]
    with pytest.raises(InputError, match=rf"^`seed` must be an integer >= 0\. Received: seed={seed!r}$"):
        train()
    assert not os.path.exists(run_dir)


@pytest.mark.parametrize("application", ["clevr", "demo", "text_classification"])
def test_evaluate_refuses_a_bad_batch_size_before_reading_data_or_model(application, tmp_path, monkeypatch):
    # refused where the test batches were made: after the CLEVR features were cached (hours
    # for a missing cache) or the digits, vocabulary and test split were read
    from applications import checks
    from applications.text_classification import recipe

    model = tmp_path / "model.keras"
    model.write_text("not read")
    (tmp_path / "vocab.txt").write_text("a\n")
    monkeypatch.setattr(checks, "load_model", lambda *args, **kwargs: pytest.fail("model loaded"))
    evaluate = {
        "clevr": lambda: clevr.evaluate(str(model), str(tmp_path / "cache"), data_dir=str(tmp_path / "none"),
                                        batch_size=0, image_size=32, weights=None),
        "demo": lambda: demo.evaluate(str(model), batch_size=0, seed=0, data_dir=str(tmp_path / "none"), limit=10),
        "text_classification": lambda: recipe.evaluate(str(model), "sst2", data_dir=str(tmp_path / "none"),
                                                       batch_size=0, max_length=8, limit=2),
    }[application]
    with pytest.raises(InputError, match=r"^`batch_size` must be an integer >= 1\. Received: batch_size=0$"):
        evaluate()


@pytest.mark.parametrize("callbacks", ["single", "not_a_callback", "a_string"])
@pytest.mark.parametrize("application", ["demo", "music", "clevr", "occluded_mnist", "smallnorb", "sst",
                                         "textured_mnist", "text_classification", "sort_of_clevr"])
def test_train_refuses_callbacks_that_are_no_list_of_callbacks_before_reading_data(application, callbacks,
                                                                                   tmp_path):
    # a single callback, or something else in the list, was an error of Keras' fit once
    # the data were read and the run directory made; None was a TypeError ([*None])
    import keras

    from applications import checks, occluded_mnist, smallnorb
    from applications.text_classification import recipe

    given = {"single": keras.callbacks.History(), "not_a_callback": [keras.callbacks.History(), print],
             "a_string": "history"}[callbacks]
    run_dir, data = str(tmp_path / "run"), str(tmp_path / "data")
    train = {
        "demo": lambda: demo.train(run_dir=run_dir, callbacks=given, verbose=0),
        "music": lambda: music.train(data, run_dir=run_dir, callbacks=given, verbose=0),
        "clevr": lambda: clevr.train(str(tmp_path / "cache"), run_dir=run_dir, callbacks=given, verbose=0),
        "occluded_mnist": lambda: occluded_mnist.train(data_dir=data, run_dir=run_dir, callbacks=given, verbose=0),
        "smallnorb": lambda: smallnorb.train(data_dir=data, run_dir=run_dir, callbacks=given, verbose=0),
        "sst": lambda: sst.train(data, run_dir=run_dir, callbacks=given, verbose=0),
        "textured_mnist": lambda: textured_mnist.train(data, run_dir=run_dir, callbacks=given, verbose=0),
        "text_classification": lambda: recipe.train("sst2", data_dir=data, run_dir=run_dir, callbacks=given,
                                                    verbose=0),
        "sort_of_clevr": lambda: sort_of_clevr.train(run_dir, steps=2, batch_size=4, validation_examples=4,
                                                     callbacks=given, verbose=0),
    }[application]
    with pytest.raises(InputError, match=r"^`callbacks` must be None or a list of keras\.callbacks\.Callback "
                                         r"instances\. Received: callbacks="):
        train()
    assert not os.path.exists(run_dir)
    history = keras.callbacks.History()
    assert checks.callback_list(None) == [] and checks.callback_list((history,)) == [history]
