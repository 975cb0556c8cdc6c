"""A ``train`` that raises leaves no empty run directory behind (``errors.leaves_no_empty_run_dir``)."""

import os

import pytest

from applications import errors, registry

def _make_and_fail(run_dir, write=None, error=ValueError):
    errors.create_run_dir(run_dir)
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    if write:
        with open(os.path.join(run_dir, write), "w") as f:
            f.write("kept")
    raise error("refused")


def test_a_raising_call_removes_the_folders_it_created_and_nothing_else(tmp_path):
    train = errors.leaves_no_empty_run_dir()(lambda data, run_dir="unused", write=None, error=ValueError:
                                             _make_and_fail(run_dir, write, error))
    # a new run directory and its new parents go, whether run_dir is passed by position or by name
    with pytest.raises(ValueError, match="refused"):
        train(None, str(tmp_path / "runs" / "a" / "run"))
    assert os.listdir(tmp_path) == []
    with pytest.raises(KeyboardInterrupt):
        train(None, run_dir=tmp_path / "runs" / "run", error=KeyboardInterrupt)
    assert os.listdir(tmp_path) == []
    # a folder that was there is kept, empty or not
    (tmp_path / "mine").mkdir()
    with pytest.raises(ValueError):
        train(None, run_dir=str(tmp_path / "mine"))
    assert (tmp_path / "mine").is_dir()
    # a file written is kept, and the folders that hold it; an empty sibling folder goes
    with pytest.raises(ValueError):
        train(None, run_dir=str(tmp_path / "runs" / "run"), write="backup.txt")
    assert (tmp_path / "runs" / "run" / "backup.txt").read_text() == "kept"
    assert not (tmp_path / "runs" / "run" / "logs").exists()


def test_a_call_that_returns_keeps_its_folders_and_the_signature_is_the_functions(tmp_path):
    import inspect

    def train(run_dir="runs/x", epochs=1):
        """Trains."""
        errors.create_run_dir(run_dir)
        return epochs

    wrapped = errors.leaves_no_empty_run_dir()(train)
    assert wrapped(str(tmp_path / "run"), epochs=3) == 3 and (tmp_path / "run").is_dir()
    assert inspect.signature(wrapped) == inspect.signature(train) and wrapped.__doc__ == "Trains."
    with pytest.raises(TypeError):  # the function's own error for arguments it does not take
        wrapped(str(tmp_path / "other"), bogus=1)


@pytest.mark.parametrize("name", registry.names())
def test_every_applications_train_is_covered(name):
    module = registry.load(name)
    train = getattr(module, "train", None) or module.recipe.train
    assert getattr(train, "__wrapped__", None) is not None, f"{name}.train is not wrapped"


def test_applications_refusing_after_the_run_directory_was_made_leave_none(tmp_path):
    # Each refused here once its run directory had been made (its data are read, or its model
    # built, after it), and left it empty: the command line removed it, a Python caller kept it.
    from applications import occluded_mnist, sort_of_clevr, sst
    from applications.text_classification import recipe

    missing = str(tmp_path / "missing")
    runs = tmp_path / "runs"
    calls = {
        "occluded_mnist": lambda run: occluded_mnist.train(data_dir=missing, run_dir=run, num_train=2, num_test=2,
                                                           epochs=1, verbose=0),
        "sort_of_clevr": lambda run: sort_of_clevr.train(run_dir=run, steps=1, model_kwargs={"bogus": 1}, verbose=0),
        "sst": lambda run: sst.train(missing, run_dir=run, epochs=1, verbose=0),
        "text_classification": lambda run: recipe.train("sst2", data_dir=missing, run_dir=run, epochs=1, verbose=0),
    }
    for name, call in calls.items():
        with pytest.raises((errors.CommandLineError, TypeError)):
            call(str(runs / name))
        assert not runs.exists(), name


def test_check_run_dir_refuses_a_file_in_the_way_as_create_run_dir_does_and_creates_nothing(tmp_path):
    (tmp_path / "a_file").write_text("x")
    for run_dir, error in ((tmp_path / "a_file", errors.PathExistsError),
                           (tmp_path / "a_file" / "run", errors.NotAFolderError)):
        with pytest.raises(error, match=f"cannot create the run directory '{run_dir}'") as checked:
            errors.check_run_dir(str(run_dir))
        with pytest.raises(error) as created:
            errors.create_run_dir(str(run_dir))
        assert type(checked.value) is type(created.value)
    errors.check_run_dir(tmp_path / "new" / "run")
    errors.check_run_dir(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["a_file"]


def test_occluded_mnist_makes_its_run_directory_only_once_the_data_are_made_and_the_model_built(tmp_path,
                                                                                              monkeypatch):
    from applications import occluded_mnist
    from tests.conftest import shared_path

    run_dir = tmp_path / "run"
    seen = {}

    def compile_model(*args, **kwargs):
        seen["run_dir_exists"] = run_dir.exists()
        raise RuntimeError("stop")

    monkeypatch.setattr(occluded_mnist, "compile_model", compile_model)
    with pytest.raises(RuntimeError, match="stop"):
        occluded_mnist.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(run_dir), num_train=2,
                             num_test=2, epochs=1, verbose=0)
    assert seen == {"run_dir_exists": False}
    (tmp_path / "a_file").write_text("x")  # a file in the way: refused before any digit is read
    monkeypatch.setattr(occluded_mnist, "_train_test_digits", lambda *a, **k: pytest.fail("data read"))
    with pytest.raises(errors.PathExistsError):
        occluded_mnist.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(tmp_path / "a_file"),
                             num_train=2, num_test=2, epochs=1, verbose=0)
