"""The command line: help for every command, one-line errors, bench, registry."""

import errno
import os

import numpy as np
import pytest

from applications import __main__ as cli
from applications import demo, registry, tfds_data
from applications.errors import DataNotFoundError


@pytest.mark.parametrize("argv", [[], ["train"], ["train", "demo"], ["evaluate"], ["tune"], ["bench"]])
def test_help_of_every_command(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: keras-capsules")
    if argv[:1] in (["train"], ["evaluate"], ["tune"]):
        assert "--batch-size" in out and "per replica" in out and "--strategy" in out
        assert "--data-dir" in out  # the demo's own options
    if argv == []:
        assert "demo" in out and all(c in out for c in cli.COMMANDS)
    if argv == ["tune"]:
        assert "hyperband" in out and "--max-trials" in out and "--directory" in out
    if argv[:1] == ["train"]:
        assert "--save-freq" in out and "--test-hang-at" not in out


@pytest.mark.parametrize("argv, message", [
    (["train", "--epochs", "0"], "positive integer"),
    (["train", "--strategy", "gpu-farm"], "invalid choice"),
    (["tune", "demo", "--tuner", "grid"], "invalid choice"),
    (["train", "--save-freq", "often"], "'epoch' or a positive number"),
    (["train", "text_classification", "--intra-op-threads", "-1"], "non-negative integer"),
    (["train", "sort_of_clevr", "--coordinate-frequencies", "-2"], "non-negative integer"),
    (["train", "occluded_mnist", "--frame-weight", "-1"], "non-negative number"),
    (["train", "occluded_mnist", "--conv-normalization", "batch"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    # Audit 5: "inf" passed float(): --learning-rate inf trained to a NaN loss, and a
    # negative or infinite --mixup-alpha failed only once the data was prepared.
    (["train", "--learning-rate", "inf"], "expected a positive number, got 'inf'"),
    (["train", "--learning-rate", "nan"], "expected a positive number, got 'nan'"),
    (["train", "occluded_mnist", "--frame-weight", "inf"], "non-negative number"),
    (["train", "sst", "--data-dir", "x", "--mixup-alpha", "-1"], "non-negative number"),
    (["train", "sst", "--data-dir", "x", "--mixup-alpha", "inf"], "non-negative number"),
    (["train", "smallnorb", "--mixup-alpha", "-0.2"], "non-negative number"),
    (["train", "textured_mnist", "--mask-damping", "1"], "a number in [0, 1) or 'learned', got '1'"),
    (["train", "textured_mnist", "--mask-damping", "learnt"], "a number in [0, 1) or 'learned', got 'learnt'"),
    (["train", "textured_mnist", "--mask-damping", "nan"], "a number in [0, 1) or 'learned', got 'nan'"),
    # audit s83: --max-length 1 (no room for a start and an end token) was refused only
    # after the tree files were looked for (train, evaluate) or read
    (["train", "sst", "--data-dir", "x", "--max-length", "1"], "argument --max-length: expected an integer >= 2, got '1'"),
    (["evaluate", "sst", "--data-dir", "x", "--max-length", "1"], "argument --max-length: expected an integer >= 2, got '1'"),
    (["tune", "sst", "--data-dir", "x", "--max-length", "1"], "argument --max-length: expected an integer >= 2, got '1'"),
])
def test_a_bad_option_is_one_line_and_exit_code_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e999"])
def test_float_options_refuse_what_is_not_finite(text):
    # Audit 5: float("inf") passed both checks (`--learning-rate inf` trained to NaN).
    import argparse

    from applications import arguments

    for parse in (arguments.positive_float, arguments.non_negative_float):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got {text!r}"):
            parse(text)
    assert arguments.positive_float("2.5e-4") == 2.5e-4 and arguments.non_negative_float("0") == 0.0


def test_the_application_may_follow_common_options(tmp_path, capsys):
    # Audit 5: `train --quiet sst ...` parsed with the demo's options, then failed with an
    # AttributeError traceback ('Namespace' object has no attribute 'granularity');
    # `evaluate --quiet smallnorb --image-size 24` refused the option of smallnorb.
    assert cli.main(["train", "--quiet", "sst", "--data-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: SST data directory not found") and err.count("\n") == 1
    assert cli.main(["evaluate", "--batch-size", "4", "smallnorb", "--image-size", "24",
                     "--data-dir", str(tmp_path)]) == 2
    assert "TFDS dataset 'smallnorb' is not prepared" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--quiet", "sst", "--help"])
    assert exit_info.value.code == 0 and "--granularity" in capsys.readouterr().out


def test_a_missing_data_directory_is_one_line(tmp_path, capsys):
    missing = str(tmp_path / "no-mnist")
    for argv in (["train", "demo", "--data-dir", missing, "--quiet", "--run-dir", str(tmp_path / "r")],
                 ["tune", "demo", "--data-dir", missing, "--directory", str(tmp_path / "t"), "--quiet"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("keras-capsules: error: data directory") and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    assert cli.main(["train", "--data-dir", str(tmp_path / "empty"), "--quiet"]) == 2
    assert "t10k-images-idx3-ubyte.gz" in capsys.readouterr().err


def test_a_refused_train_leaves_no_empty_run_directory(tmp_path, capsys):
    # a train refused for a user error left an empty run directory (and its empty subfolders)
    missing = str(tmp_path / "no-data")
    assert cli.main(["train", "demo", "--data-dir", missing, "--quiet", "--run-dir", str(tmp_path / "r")]) == 2
    assert cli.main(["train", "music", "--data-dir", missing, "--quiet", "--run-dir", str(tmp_path / "m")]) == 2
    assert not (tmp_path / "r").exists() and not (tmp_path / "m").exists()
    (tmp_path / "mine").mkdir()  # a folder the user made is theirs: kept
    assert cli.main(["train", "demo", "--data-dir", missing, "--quiet", "--run-dir", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine").is_dir()
    capsys.readouterr()


@pytest.mark.parametrize("argv", [
    ["train", "demo", "--quiet", "--run-dir", "{file}"],
    ["train", "demo", "--quiet", "--run-dir", "{file}/run"],
    ["tune", "demo", "--quiet", "--directory", "{file}"],
    ["tune", "demo", "--quiet", "--directory", "{file}/search/deeper"],
])
def test_an_output_folder_that_is_a_file_is_one_line(argv, tmp_path, capsys):
    # A --run-dir (or --directory) naming a file, or a folder below a file, trained a
    # whole epoch and then failed with a traceback (FileExistsError, NotADirectoryError;
    # for tune a TensorFlow FailedPreconditionError).
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    argv = [a.replace("{file}", str(taken)) for a in argv]
    assert cli.main(argv + ["--data-dir", str(tmp_path / "no-data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: --") and err.count("\n") == 1, err
    assert "is a file" in err and str(taken) in err and "Traceback" not in err
    assert taken.read_text() == "mine"


def _deny_makedirs(monkeypatch, locked):
    """``os.makedirs`` of a path below ``locked`` fails as in a folder without write
    permission (for root too, whom no permission stops)."""
    makedirs = os.makedirs

    def denied(path, *args, **kwargs):
        if os.path.abspath(path).startswith(str(locked)):
            raise PermissionError(errno.EACCES, "Permission denied", str(locked))
        return makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", denied)


@pytest.mark.parametrize("argv, message", [
    (["train", "demo", "--quiet", "--run-dir", "{locked}/run"], "cannot create the run directory"),
    (["train", "music", "--quiet", "--run-dir", "{locked}/run"], "cannot create the run directory"),
    (["tune", "demo", "--quiet", "--directory", "{locked}/search"], "cannot create the search directory"),
])
def test_an_output_folder_that_cannot_be_created_is_one_line(argv, message, tmp_path, capsys, monkeypatch):
    # Where the command creates the folder the user named, a PermissionError (as other
    # OSErrors there) is one line naming the folder and the reason; elsewhere it keeps
    # its traceback (test_an_internal_error_keeps_its_traceback).
    from applications.errors import PathPermissionError

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    locked = tmp_path / "locked"
    _deny_makedirs(monkeypatch, locked)
    argv = [a.replace("{locked}", str(locked)) for a in argv]
    # (demo.train reads its data and builds the model before it makes the run directory, so
    # that a bad model option leaves none: it trains on the 8x8 digits here, which need no folder)
    data = [] if argv[:2] == ["train", "demo"] else ["--data-dir", str(tmp_path / "no-data")]
    assert cli.main(argv + data) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-capsules: error: {message} {argv[-1]!r}: Permission denied"), err
    assert err.count("\n") == 1 and str(locked) in err
    with pytest.raises(PathPermissionError, match="cannot create the run directory") as info:
        demo.train(run_dir=str(locked / "run"), limit=60)
    assert isinstance(info.value, PermissionError) and info.value.errno == errno.EACCES


def test_an_output_folder_without_write_permission_is_one_line(tmp_path, capsys, monkeypatch):
    # Refused before any work (as a folder that is a file), not after an epoch of training;
    # it was one line only because every PermissionError was.
    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:  # root may write anywhere: answer as access(2) does for another user
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: access(path, mode) and str(path) != str(locked))
    try:
        for argv in (["train", "demo", "--quiet", "--run-dir", str(locked / "run")],
                     ["train", "demo", "--quiet", "--run-dir", str(locked)],
                     ["tune", "demo", "--quiet", "--directory", str(locked / "search")]):
            assert cli.main(argv + ["--data-dir", str(tmp_path / "no-data")]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"keras-capsules: error: {argv[-2]} {argv[-1]!r}") and err.count("\n") == 1, err
            assert "no permission to write" in err and "Traceback" not in err
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("raised, kind, python_kind", [
    (PermissionError(errno.EACCES, "Permission denied", "/runs"), "PathPermissionError", PermissionError),
    (FileExistsError(errno.EEXIST, "File exists", "/runs/x"), "PathExistsError", FileExistsError),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/runs/x"), "NotAFolderError", NotADirectoryError),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/runs/x"), "IsAFolderError", IsADirectoryError),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/runs/x"), "PathNotFoundError",
     FileNotFoundError),
    (OSError(errno.EROFS, "Read-only file system", "/runs"), "PathError", OSError),
])
def test_user_path_gives_the_matching_path_error(raised, kind, python_kind):
    from applications import errors

    with pytest.raises(python_kind) as info:
        with errors.user_path("cannot create the run directory '/runs/x'"):
            raise raised
    assert type(info.value).__name__ == kind and isinstance(info.value, errors.CommandLineError)
    assert str(info.value) == f"cannot create the run directory '/runs/x': {raised.strerror}: {raised.filename!r}"
    assert info.value.errno == raised.errno and info.value.__cause__ is raised
    with pytest.raises(errors.InputError):  # a user error inside passes unchanged
        with errors.user_path("cannot read the vocabulary 'v'"):
            raise errors.InputError("line 2 is blank")


def test_a_user_file_that_is_a_folder_is_one_line(tmp_path, capsys, monkeypatch, shared_dir):
    # A --model or --vocabulary naming a folder (not a run directory holding model.keras)
    # failed with IsADirectoryError: one line because every IsADirectoryError was.
    from applications import checks
    from applications.errors import IsAFolderError
    from applications.text_classification import data as text_data

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    folder = tmp_path / "old-run" / "model.keras"
    folder.mkdir(parents=True)
    assert cli.main(["evaluate", "demo", "--model", str(folder.parent), "--limit", "64",
                     "--data-dir", str(shared_dir / "data" / "mnist")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-capsules: error: cannot read the model {str(folder)!r}"), err
    assert "Is a directory" in err and err.count("\n") == 1
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.keras").write_bytes(b"not read: the vocabulary comes first")
    (tmp_path / "vocab").mkdir()
    assert cli.main(["evaluate", "text_classification", "--model", str(tmp_path / "run" / "model.keras"),
                     "--vocabulary", str(tmp_path / "vocab"), "--data-dir", str(shared_dir / "data" / "sst")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-capsules: error: cannot read the vocabulary {str(tmp_path / 'vocab')!r}: "
                          "Is a directory"), err
    assert err.count("\n") == 1
    for read in (text_data.load_vocabulary, checks.load_model):
        with pytest.raises(IsAFolderError) as info:
            read(tmp_path / "vocab")
        assert isinstance(info.value, IsADirectoryError)


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "demo", "--run-dir", "x"],
     "keras-capsules evaluate: error: unrecognized arguments: --run-dir x (see keras-capsules evaluate --help)"),
    (["train", "--batchsize=8"],
     "keras-capsules train: error: unrecognized arguments: --batchsize=8; did you mean --batch-size? "
     "(see keras-capsules train --help)"),
    (["tune", "demo", "--max_trials", "3"],
     "keras-capsules tune: error: unrecognized arguments: --max_trials 3; did you mean --max-trials? "
     "(see keras-capsules tune --help)"),
    (["train", "demo", "extra"],
     "keras-capsules train: error: unrecognized arguments: extra (see keras-capsules train --help)"),
])
def test_an_unknown_option_points_to_the_help_of_its_command(argv, message, capsys):
    # An option the command does not have was reported by the top-level parser,
    # "keras-capsules: error: unrecognized arguments: ... (see keras-capsules --help)",
    # whose help lists no option of any command.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_tune_epochs_help_says_what_hyperband_does_with_one_epoch(capsys):
    # The help said "(hyperband: the most epochs of a trial, at least 2)", which reads
    # as a bound that --epochs 1 breaks; it is accepted and hyperband runs 2
    # (tuning.search.make_tuner: max_epochs=max(epochs, 2)).
    import inspect

    from tuning import search

    assert "max_epochs=max(epochs, 2)" in inspect.getsource(search.make_tuner)
    with pytest.raises(SystemExit):
        cli.main(["tune", "demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--epochs EPOCHS epochs per trial (hyperband: the most epochs a trial gets; 1 gives 2," in help_text


def test_train_reads_mnist_idx_files_from_data_dir(tmp_path, capsys, shared_dir):
    run_dir = tmp_path / "run"
    code = cli.main(["train", "demo", "--data-dir", str(shared_dir / "data" / "mnist"), "--limit", "64",
                     "--epochs", "1", "--batch-size", "16", "--run-dir", str(run_dir), "--quiet",
                     "--filters", "4", "--hidden-capsules", "4", "--primary-capsules", "2", "--pose-size", "2"])
    assert code == 0, capsys.readouterr().err
    import keras

    assert keras.saving.load_model(run_dir / "model.keras").input_shape == (None, 28, 28, 1)


def test_tfds_dataset_that_needs_a_download_is_a_friendly_error(tmp_path, capsys):
    with pytest.raises(DataNotFoundError, match="--data-dir") as info:
        tfds_data.require_prepared("mnist", data_dir=str(tmp_path))
    assert "not prepared" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(DataNotFoundError, match="cannot open TFDS dataset"):
        tfds_data.require_prepared("no_such_dataset_xyz", data_dir=str(tmp_path))
    # Audit 2026-11-30: a folder that is not there was logged about by TFDS ("Variant folder
    # ... has no dataset_info.json") before the error: two lines
    for given, what in ((tmp_path / "nowhere", "does not exist"), (tmp_path / "file", "is a file")):
        (tmp_path / "file").write_text("x")
        with pytest.raises(DataNotFoundError, match=f"data directory '{given}' {what}"):
            tfds_data.require_prepared("smallnorb", data_dir=str(given))
    assert capsys.readouterr().err == ""


def _prepared_dummy_mnist(data_dir):
    """TFDS' own offline test dataset, prepared in ``data_dir`` (no download)."""
    import tensorflow_datasets as tfds

    builder = tfds.testing.DummyMnist(data_dir=str(data_dir))
    builder.download_and_prepare()
    return builder


def test_a_tfds_dataset_prepared_in_part_is_a_friendly_error(tmp_path):
    # Audit (2026-12-01): `is_prepared()` only looks for dataset_info.json, so a folder
    # copied in part passed, and the command ended reading it, with TensorFlow's
    # NotFoundError traceback.
    builder = _prepared_dummy_mnist(tmp_path)
    assert tfds_data.require_prepared("dummy_mnist", data_dir=str(tmp_path)).data_dir == builder.data_dir
    (shard,) = builder.info.splits["test"].filepaths
    shard.unlink()
    with pytest.raises(DataNotFoundError) as info:
        tfds_data.require_prepared("dummy_mnist", data_dir=str(tmp_path))
    message = str(info.value)
    assert "is incomplete: 1 of the 1 files of its 'test' split are missing" in message, message
    assert shard.name in message and "tfds build dummy_mnist" in message and "\n" not in message


def test_a_tfds_dataset_of_another_version_is_named_in_the_error(tmp_path):
    # Audit (2026-12-01): a folder holding another version of the dataset was reported as
    # not prepared, with no word of the version found or the one TFDS reads.
    import tensorflow_datasets as tfds

    builder = _prepared_dummy_mnist(tmp_path)
    (tmp_path / "mnist").mkdir()
    builder.data_path.rename(tmp_path / "mnist" / "3.0.0")  # a prepared folder of an older mnist
    expected = tfds.builder("mnist", data_dir=str(tmp_path)).version
    assert str(expected) != "3.0.0"
    with pytest.raises(DataNotFoundError, match=(
        f"not prepared in {tmp_path} \\(it holds version 3.0.0 of it; this TFDS reads "
        f"{expected}\\)"
    )):
        tfds_data.require_prepared("mnist", data_dir=str(tmp_path))


def test_the_tfds_error_names_the_folder_of_tfds_data_dir(tmp_path, monkeypatch):
    # Audit (2026-12-01): with TFDS_DATA_DIR set, the error named ~/tensorflow_datasets,
    # where TFDS had not looked.
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFoundError, match=f"not prepared in TFDS_DATA_DIR \\({tmp_path}\\)"):
        tfds_data.require_prepared("mnist")
    monkeypatch.delenv("TFDS_DATA_DIR")
    with pytest.raises(DataNotFoundError, match="cannot open TFDS dataset 'no_such_dataset_xyz' in the default TFDS data directory"):
        tfds_data.require_prepared("no_such_dataset_xyz")


def test_bench_runs_a_script_of_benchmarks(tmp_path, capfd, monkeypatch):
    bench_dir = tmp_path / "benchmarks"
    bench_dir.mkdir()
    (bench_dir / "tiny.py").write_text("import sys\nprint('tiny benchmark', sys.argv[1:])\n")
    (bench_dir / "em_routing_mnist.py").write_text("import sys\nprint('demo benchmark', sys.argv[1:])\n")
    monkeypatch.setattr(cli, "BENCHMARKS_DIR", bench_dir)
    assert cli.main(["bench", "tiny", "--shape", "sst"]) == 0
    assert "tiny benchmark ['--shape', 'sst']" in capfd.readouterr().out
    assert cli.main(["bench", "demo"]) == 0  # an application's BENCHMARK
    assert "demo benchmark []" in capfd.readouterr().out
    monkeypatch.setitem(registry.BENCHMARKS, "demo", "em_routing_mnist --part 2")  # script + its arguments
    assert cli.main(["bench", "demo", "--epochs", "1"]) == 0
    assert "demo benchmark ['--part', '2', '--epochs', '1']" in capfd.readouterr().out
    assert cli.main(["bench", "nothing"]) == 2
    assert "no benchmark 'nothing'; choose from em_routing_mnist, tiny" in capfd.readouterr().err


def test_a_benchmark_that_finds_no_data_is_one_line(tmp_path, capfd, monkeypatch):
    # audit (2026-11-27): `bench music --data-path /nonexistent` ended in the script's
    # traceback (exit 1); the other commands give one line and exit 2
    bench_dir = tmp_path / "benchmarks"
    bench_dir.mkdir()
    (bench_dir / "tiny.py").write_text(
        "import sys\nfrom applications.errors import DataNotFoundError\n"
        "if __name__ == '__main__':\n"
        "    print('args', sys.argv[1:])\n"
        "    raise DataNotFoundError(\"data directory 'x' does not exist\")\n"
    )
    (bench_dir / "broken.py").write_text("raise RuntimeError('a bug')\n")
    monkeypatch.setattr(cli, "BENCHMARKS_DIR", bench_dir)
    assert cli.main(["bench", "tiny", "--n", "1"]) == 2
    out, err = capfd.readouterr()
    assert "args ['--n', '1']" in out
    # (only that line: importing applications loads no TensorFlow, whose start-up lines came first)
    assert err == "keras-capsules: error: data directory 'x' does not exist\n"
    assert cli.main(["bench", "broken"]) == 1  # a bug keeps its traceback
    assert "Traceback" in capfd.readouterr().err
    # running out of memory: one line (a huge --num-train ended in numpy's traceback)
    (bench_dir / "huge.py").write_text("import numpy as np\nnp.zeros((10**9, 10**9), 'float32')\n")
    assert cli.main(["bench", "huge"]) == 2
    err = capfd.readouterr().err
    assert err.startswith("keras-capsules: error: out of memory (Unable to allocate") and err.count("\n") == 1, err


def test_bench_outside_a_checkout_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "BENCHMARKS_DIR", tmp_path / "not-here")
    assert cli.main(["bench", "em_routing"]) == 2
    err = capsys.readouterr().err
    assert "benchmarks are not installed" in err and err.count("\n") == 1


def test_the_real_benchmarks_are_found_from_this_checkout():
    script, arguments = cli._benchmark_command("demo")
    assert script.name == "em_routing_mnist.py" and arguments == []
    assert cli._benchmark_command("em_routing")[0].exists()
    for name, part in (("music", "jsb"), ("occluded_mnist", "occluded"), ("textured_mnist", "tagger")):
        script, arguments = cli._benchmark_command(name)
        assert (script.name, arguments) == ("rladder.py", [part])


def test_every_application_benchmark_parses_its_arguments():
    """``bench <application> --help`` reaches the script's own parser with the part selected."""
    import subprocess
    import sys

    for name in ("music", "smallnorb", "sort_of_clevr"):
        script, arguments = cli._benchmark_command(name)
        proc = subprocess.run([sys.executable, str(script), *arguments, "--help"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-1000:]


def test_registry_protocol_of_every_application():
    for name in registry.names():
        module = registry.load(name)
        for attribute in ("add_arguments", "run_train", "run_evaluate"):
            assert callable(getattr(module, attribute)), (name, attribute)
    with pytest.raises(KeyError, match="unknown application"):
        registry.load("nope")


def _raise_value_error(tmp_path):
    raise ValueError("shapes (3,) and (4,) not aligned")


def _open_a_file_never_written(tmp_path):
    open(tmp_path / "run" / "backup" / "never-written.json")


def _make_a_folder_twice(tmp_path):
    os.makedirs(tmp_path / "run" / "backup")
    os.makedirs(tmp_path / "run" / "backup")


def _write_below_a_file(tmp_path):
    (tmp_path / "run").mkdir(exist_ok=True)
    (tmp_path / "run" / "history.csv").write_text("epoch\n")
    open(tmp_path / "run" / "history.csv" / "part", "w")


def _open_a_folder(tmp_path):
    (tmp_path / "run" / "backup").mkdir(parents=True, exist_ok=True)
    open(tmp_path / "run" / "backup")


def _write_a_file_of_another_user(tmp_path):
    # (raised, not provoked: these tests may run as root, whom no permission stops)
    raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "run" / "backup" / "lock"))


@pytest.mark.parametrize(
    "bug, error, message",
    [(_raise_value_error, ValueError, "not aligned"),
     (_open_a_file_never_written, FileNotFoundError, "never-written"),
     (_make_a_folder_twice, FileExistsError, "File exists"),
     (_write_below_a_file, NotADirectoryError, "Not a directory"),
     (_open_a_folder, IsADirectoryError, "Is a directory"),
     (_write_a_file_of_another_user, PermissionError, "Permission denied")],
    ids=["value_error", "file_not_found_error", "file_exists_error", "not_a_directory_error",
         "is_a_directory_error", "permission_error"],
)
def test_an_internal_error_keeps_its_traceback(tmp_path, capsys, monkeypatch, bug, error, message):
    # Every ValueError, every FileNotFoundError, and every FileExistsError,
    # NotADirectoryError, IsADirectoryError and PermissionError was printed as one line
    # "keras-capsules: error: ..." with exit code 2: a bug (a ValueError from deep inside
    # Keras, numpy or our code; a file the code itself wrote and then could not find, or
    # wrote below a file, or a folder it made twice) lost its traceback and looked like
    # a mistake of the user. Only InputError and PathError (a path the user named) are
    # one line.
    from applications.errors import CommandLineError

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    monkeypatch.setattr(demo, "run_train", lambda args, strategy: bug(tmp_path))
    with pytest.raises(error, match=message) as info:
        cli.main(["train", "demo", "--quiet", "--run-dir", str(tmp_path / "run")])
    assert not isinstance(info.value, CommandLineError)
    assert "keras-capsules: error" not in capsys.readouterr().err


def test_a_bad_input_value_error_is_one_line(tmp_path, capsys, monkeypatch):
    # A check of the user's input raises InputError: a ValueError for Python callers,
    # one line and exit code 2 on the command line.
    from applications.errors import CommandLineError, InputError

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    assert issubclass(InputError, ValueError) and issubclass(InputError, CommandLineError)
    with pytest.raises(InputError, match="too few"):
        demo.make_datasets(np.zeros((2, 8, 8, 1), "float32"), np.zeros(2, "int32"), 1)
    argv = ["train", "demo", "--limit", "2", "--epochs", "1", "--quiet", "--run-dir", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: 2 example(s) are too few") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_a_missing_user_path_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    # The paths the user names stay one-line errors (exit code 2) that say which path and
    # what it should be; for Python callers they are FileNotFoundErrors.
    from applications.errors import CommandLineError, PathNotFoundError

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    assert issubclass(PathNotFoundError, FileNotFoundError) and issubclass(PathNotFoundError, CommandLineError)
    assert issubclass(DataNotFoundError, PathNotFoundError)
    missing = tmp_path / "missing"
    cases = [
        (["evaluate", "demo", "--model", str(missing / "model.keras")], "no model at", missing / "model.keras"),
        (["evaluate", "demo", "--model", str(tmp_path)], "no model at", tmp_path / "model.keras"),  # a run dir
        (["train", "demo", "--data-dir", str(missing), "--quiet", "--run-dir", str(tmp_path / "r")],
         "data directory", missing),
        (["train", "sst", "--data-dir", str(missing), "--quiet", "--run-dir", str(tmp_path / "r")],
         "SST data directory not found", missing),
    ]
    for argv, message, path in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"keras-capsules: error: {message}") and err.count("\n") == 1, err
        assert str(path) in err, err
    with pytest.raises(PathNotFoundError, match="no model at"):
        demo.evaluate(str(missing / "model.keras"))


def test_a_missing_preset_folder_is_named(tmp_path):
    from applications import sst
    from applications.errors import PathNotFoundError

    with pytest.raises(PathNotFoundError, match="preset folder not found: .*no-such-preset"):
        sst.resolve_preset(str(tmp_path / "no-such-preset"))
    assert sst.resolve_preset(str(tmp_path)) == str(tmp_path)
    assert sst.resolve_preset("bert_tiny_en_uncased") == "bert_tiny_en_uncased"  # a name: keras-hub's


def test_train_on_the_command_line_defaults_to_each_applications_recipe():
    # audit (2026-11-27): `keras-capsules train smallnorb` trained 15 epochs of batch 32
    # (the command line's common defaults) where train() and the docs give the paper's 50
    # of batch 20; likewise sst, text_classification, clevr, music, sort_of_clevr, ...
    import importlib
    import inspect

    from applications import registry
    from applications.text_classification import recipe

    for name, module_name in registry.APPLICATIONS.items():
        train = recipe.train if name == "text_classification" else importlib.import_module(module_name).train
        defaults = {k: p.default for k, p in inspect.signature(train).parameters.items()}
        extra = ["--data-dir", "x"] if name == "sst" else []
        args = cli.build_parser(name).parse_args(["train", name, *extra])
        assert (args.epochs, args.batch_size) == (defaults["epochs"], defaults["batch_size"]), name
        tune = cli.build_parser(name).parse_args(["tune", name, *extra])
        assert tune.epochs == 3, name  # a trial's epochs: tune keeps its own default


# Runs `python -m MODULE ARGS` for each [MODULE, ARGS] of argv[1] (JSON) one after the
# other in one Python process (both modules load TensorFlow: once), each as -m runs it
# (runpy, as __main__), its file descriptor 2 captured and SystemExit turned into the exit
# code; writes [[exit code, stderr], ...] (JSON) to argv[2].
_PYTHON_M_RUNNER = r"""
import json, os, runpy, sys, tempfile, traceback
cases, results_file, results = json.loads(sys.argv[1]), sys.argv[2], []
for module, args in cases:
    sys.stderr.flush()
    capture, saved = tempfile.TemporaryFile(), os.dup(2)
    os.dup2(capture.fileno(), 2)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code if isinstance(exit_info.code, int) else (0 if exit_info.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2); os.close(saved)
    capture.seek(0)
    results.append([code, capture.read().decode("utf-8", "replace")])
with open(results_file, "w") as f:
    json.dump(results, f)
"""


@pytest.fixture(scope="module")
def python_m_errors(tmp_path_factory):
    """``{module: (exit code, stderr)}`` of ``python -m MODULE`` with a missing data folder,
    for applications.text_classification and applications.sst (one process for both)."""
    import json
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("python_m")
    missing = str(root / "missing")
    cases = [["applications.text_classification", ["--data-dir", missing]],
             ["applications.sst", ["--data-dir", missing, "--run-dir", str(root / "run")]]]
    results_file = root / "results.json"
    proc = subprocess.run([sys.executable, "-c", _PYTHON_M_RUNNER, json.dumps(cases), str(results_file)],
                          capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert results_file.exists(), proc.stderr[-3000:]
    return {module: tuple(result) for (module, _), result in zip(cases, json.loads(results_file.read_text()))}


@pytest.mark.parametrize("module", ["applications.text_classification", "applications.sst"])
def test_the_python_m_entry_points_give_one_line_errors(module, python_m_errors):
    # audit (2026-11-27): the commands of these modules' docstrings (`python -m
    # applications.sst --data-dir ...`) ended a missing data folder in a traceback (exit 1)
    returncode, stderr = python_m_errors[module]
    assert returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.rstrip("\n").splitlines()[-1].startswith(f"python -m {module}: error: ")


def test_evaluate_batches_per_replica_as_the_docs_say(monkeypatch):
    # audit (2026-11-27): `--batch-size` is per replica (applications.distribute), but the
    # evaluate of four applications passed it on as the global batch
    import importlib

    from applications import registry

    class Strategy:  # what global_batch_size reads
        num_replicas_in_sync = 3

    for name in ("sort_of_clevr", "occluded_mnist", "textured_mnist", "music", "demo"):
        module = importlib.import_module(registry.APPLICATIONS[name])
        seen = {}
        monkeypatch.setattr(module, "evaluate", lambda *args, **kwargs: seen.update(kwargs) or {})
        args = cli.build_parser(name).parse_args(["evaluate", name, "--model", "m.keras", "--batch-size", "5"])
        module.run_evaluate(cli._defaults(args), Strategy())
        expected = 5 if name == "demo" else 15  # demo's evaluate multiplies by the replicas itself
        assert seen["batch_size"] == expected, name


@pytest.mark.parametrize("command", ["evaluate clevr", "tune clevr", "tune sst"])
@pytest.mark.parametrize("quiet", [False, True])
def test_long_data_preparation_shows_progress_unless_quiet(command, quiet, tmp_path, capsys, monkeypatch):
    # CLEVR's feature extraction (hours without a cache) and SST's embedding ran with
    # verbose=0 under `evaluate clevr` and `tune`, whatever --quiet said.
    from applications import clevr, sst
    from applications.errors import InputError
    from tests.applications.tiny_data import SST_DIR

    seen = []

    def preparation(*args, verbose=None, **kwargs):
        seen.append(verbose)
        raise InputError("stopped here (simulated)")

    monkeypatch.setattr(clevr, "prepare_offline", preparation)
    monkeypatch.setattr(sst, "embed_splits", preparation)
    (tmp_path / "model.keras").write_bytes(b"")
    verb, name = command.split()
    argv = [verb, name, "--model" if verb == "evaluate" else "--directory",
            str(tmp_path / ("model.keras" if verb == "evaluate" else "search"))]
    argv += ["--data-dir", str(SST_DIR)] if name == "sst" else ["--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*argv, *["--quiet"] * quiet]) == 2
    assert "simulated" in capsys.readouterr().err
    assert seen == [0 if quiet else 1]


def test_a_benchmark_that_returns_its_results_exits_0():
    # run_main passed main()'s return value to sys.exit: a list or dict of results was
    # printed to stderr and the process exited with code 1 after a success.
    from applications.errors import run_main

    assert run_main(lambda: [{"model": "mac1"}], "x") == 0
    assert run_main(lambda: {"nll": 6.4}, "x") == 0
    assert run_main(lambda: None, "x") == 0
    assert run_main(lambda: 3, "x") == 3


def test_run_main_reports_running_out_of_memory_as_one_line(capsys, monkeypatch):
    from applications.errors import run_main

    def huge():
        np.zeros((10**9, 10**9), "float32")

    assert run_main(huge, "x") == 2
    err = capsys.readouterr().err
    assert err.startswith("x: error: out of memory (Unable to allocate") and "ask for less" in err
    with pytest.raises(RuntimeError):  # anything else keeps its traceback
        run_main(lambda: (_ for _ in ()).throw(RuntimeError("a bug")), "x")
    monkeypatch.setenv("KERAS_CAPSULES_DEBUG", "1")
    with pytest.raises(MemoryError):
        run_main(huge, "x")


def test_train_ends_with_the_applications_headline_result_and_every_file_it_wrote(tmp_path, capsys):
    # Only test_accuracy and four fixed files were printed: music's test NLL, occluded's
    # test error, RTagger's AMI and plots such as sample.png or segmentation.png were not.
    for name in ("model.keras", "history.png", "sample.png", "segmentation.png"):
        (tmp_path / name).write_bytes(b"x")
    cli._print_outputs({"test_nll_per_step": 6.3812, "ami": [0.01, 0.3], "parameters": 1234,
                        "model": str(tmp_path / "model.keras"), "plot": str(tmp_path / "history.png"),
                        "sample_plot": str(tmp_path / "sample.png"), "segmentation": str(tmp_path / "segmentation.png"),
                        "data_dir": str(tmp_path.parent), "elsewhere": "/nonexistent/file.png"}, str(tmp_path))
    head, files = capsys.readouterr().out.strip().splitlines()
    assert head == "test NLL per step 6.3812, test AMI per iteration 0.010 / 0.300 (1,234 parameters)"
    assert files.endswith(": model.keras, history.png, sample.png, segmentation.png"), files
    # Audit 2026-11-30: the history.csv of every run, also where the result does not name it
    # (sort_of_clevr, clevr, music, ...)
    (tmp_path / "history.csv").write_text("epoch,loss\n")
    cli._print_outputs({"test_accuracy": 0.5, "model": str(tmp_path / "model.keras")}, str(tmp_path))
    assert capsys.readouterr().out.strip().splitlines()[1].endswith(": model.keras, history.csv")
    cli._print_outputs({"history": str(tmp_path / "history.csv")}, str(tmp_path))
    assert capsys.readouterr().out.strip().endswith(": history.csv")
    (tmp_path / "history.csv").unlink()
    # occluded_mnist: the error after each frame (one frame: the test error says it all)
    cli._print_outputs({"test_error": 0.25, "test_error_per_step": {"all": [0.5, 0.375, 0.25]}}, str(tmp_path))
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "test error 0.2500, test error per frame 0.5000 / 0.3750 / 0.2500"
    cli._print_outputs({"test_error": 0.25, "test_error_per_step": {"all": [0.25]}}, str(tmp_path))
    assert capsys.readouterr().out.splitlines()[0] == "test error 0.2500"
    # a run scored on held-out training data names that data in every figure of it, and only there
    cli._print_outputs({"test_accuracy": 0.5, "relational_accuracy": 0.75, "test_error": 0.25, "test_nll_per_step": 6.5,
                        "ami": [0.1], "test_error_per_step": {"all": [0.5, 0.25]}, "scored_on": "validation"},
                       str(tmp_path))
    assert capsys.readouterr().out.splitlines()[0] == (
        "validation accuracy 0.5000, relational accuracy 0.7500, validation error 0.2500, validation NLL per step "
        "6.5000, validation AMI per iteration 0.100, validation error per frame 0.5000 / 0.2500")


def test_tune_ends_with_every_file_it_wrote_beside_the_best_model(tmp_path, capsys, monkeypatch):
    # `tune` named the best model and hyperparameters only: not the metrics.json beside them
    # (the data options that `evaluate` of the best model reads), nor text_classification's
    # vocab.txt (the vocabulary that evaluate encodes the texts with)
    import json

    import tensorflow as tf

    from tests.applications.tiny_data import SST_DIR

    directory = tmp_path / "search"
    # (TensorFlow may run already: its intra-op threads as they are, not the application's 1)
    threads = ["--intra-op-threads", str(tf.config.threading.get_intra_op_parallelism_threads())]
    argv = ["tune", "text_classification", "--tuner", "random", "--directory", str(directory), "--max-trials", "1",
            "--epochs", "1", "--quiet", "--dataset", "sst5", "--data-dir", str(SST_DIR), "--limit", "32",
            "--embedding-dim", "8", "--batch-size", "16", *threads]
    # (the linear head has no capsules: pinning their sizes too is refused as never used)
    for name, value in (("gru_units", 8), ("routing", "linear")):
        argv += ["--fixed", f"{name}={value}"]
    code = cli.main(argv)  # (eagerly, a one-step trial: no tracing; conftest.py)
    out, err = capsys.readouterr()
    assert code == 0, err
    files = {"best model": "best_model.keras", "hyperparameters": "best_hyperparameters.json",
             "metrics": "metrics.json", "vocabulary": "vocab.txt"}
    assert out.strip().splitlines()[-1] == ", ".join(f"{label} {directory / name}" for label, name in files.items())
    assert all((directory / name).is_file() for name in files.values())
    # evaluate of the best model takes the search's dataset (five classes) from that metrics.json
    assert json.loads((directory / "metrics.json").read_text())["dataset"] == "sst5"
    assert cli.main(["evaluate", "text_classification", "--model", str(directory / "best_model.keras"),
                     "--data-dir", str(SST_DIR), "--limit", "8", "--quiet", *threads]) == 0, capsys.readouterr().err
    assert 0 <= json.loads(capsys.readouterr().out)["test_accuracy"] <= 1
    # a worker that is not the chief writes the hyperparameters only
    result = {"model": None, "hyperparameters": "h.json", "metrics": None, "trials": 1}
    assert cli._best_files(result, "demo") == "hyperparameters h.json"


def test_version_prints_the_version_of_keras_capsules(capsys):
    # `keras-capsules --version` said "the following arguments are required: COMMAND".
    import keras_capsules

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"keras-capsules {keras_capsules.__version__}\n"


@pytest.mark.parametrize("application", registry.names())
def test_help_shows_the_default_of_every_option_that_has_one(application):
    # The demo's --learning-rate and --hidden-capsules had no help at all, and many
    # options of the applications (--filters, --units, --encoder, ...) did not show
    # their default: `--help` printed e.g. "--learning-rate LEARNING_RATE" and nothing.
    import argparse

    parser = cli.build_parser(application)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in ("train", "evaluate", "tune"):
        sub = commands[command]
        for action in sub._actions:
            if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS) \
                    or action.help == argparse.SUPPRESS:
                continue
            # what --help prints beside the option (nothing without a help)
            printed = sub._get_formatter()._expand_help(action) if action.help else ""
            assert "default" in printed.lower(), (application, command, action.option_strings, printed)
    demo_train = " ".join(commands["train"].format_help().split()) if application == "demo" else ""
    if demo_train:
        assert "Adam's learning rate (default: 0.003)" in demo_train
        assert "(default: 16)" in demo_train and "(default: 25)" in demo_train  # --hidden-capsules, --epochs
        assert "(default: normalized)" in demo_train  # --no-hidden-norm


@pytest.mark.parametrize("argv, message", [
    (["train", "--epochz", "1"], "unrecognized arguments: --epochz 1; did you mean --epochs?"),
    (["evaluate", "--modle", "runs/demo"], "unrecognized arguments: --modle runs/demo; did you mean --model?"),
    (["tune", "--max-trails", "3", "demo"], "unrecognized arguments: --max-trails 3; did you mean --max-trials?"),
    (["train", "--image-size", "24"],
     "unrecognized arguments: --image-size 24; --image-size is an option of smallnorb, clevr: "
     "name the application (keras-capsules train smallnorb ...)"),
])
def test_a_mistyped_option_before_the_application_is_named(argv, message, capsys):
    # argparse took the value after an option it did not know for the application:
    # `train --epochz 1` said "argument application: invalid choice: '1' (choose from
    # ...)", never naming the mistyped option.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "invalid choice" not in err, err


def test_an_option_of_the_application_may_come_before_it(capsys):
    # `train --image-size 24 smallnorb` took 24 for the application (invalid choice).
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--image-size", "24", "smallnorb", "--help"])
    assert exit_info.value.code == 0
    assert "Options of 'smallnorb' shown" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("model, command", [
    (None, "keras-capsules train music`"),
    ("elsewhere/model.keras", "keras-capsules train music --run-dir elsewhere`"),
    ("elsewhere", "keras-capsules train music --run-dir elsewhere`"),  # a run directory
    ("runs/tune-music/best_model.keras", "search one first with `keras-capsules tune music`"),
    ("search/best_model.keras", "`keras-capsules tune music --directory search`"),
])
def test_evaluate_before_train_names_the_command_that_makes_the_model(model, command, tmp_path, capsys,
                                                                      monkeypatch):
    # `evaluate music` before any training said "train one first with `keras-capsules
    # train`", a command that trains the demo.
    monkeypatch.chdir(tmp_path)
    if model == "elsewhere":
        (tmp_path / "elsewhere").mkdir()
    argv = ["evaluate", "music", "--quiet"] + (["--model", model] if model else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: no model at ") and err.count("\n") == 1, err
    assert command in err, err


# Audit 82: the command line against what the folders and help texts say.

_TINY_DEMO = ["--epochs", "1", "--limit", "40", "--batch-size", "16", "--quiet", "--filters", "8",
              "--primary-capsules", "2", "--hidden-capsules", "4", "--pose-size", "2", "--n-iters", "2"]


def _files(folder):
    """Every file below ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _write_json(path, data):
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("name", ["occluded_mnist", "textured_mnist"])
def test_evaluate_takes_the_default_mnist_folder_given_by_its_path(name, tmp_path):
    # Audit 82 (1): `train` without --data-dir recorded "data_dir": null, and `evaluate
    # --data-dir /work/shared/data/mnist` (that same default folder) was refused: "trained on
    # another train/test split than --data-dir ... (trained with None)".
    import importlib
    import re

    from applications.errors import CommandLineError
    from applications.mnist_digits import default_data_dir

    module = importlib.import_module(f"applications.{name}")
    default = default_data_dir()
    (tmp_path / "link").symlink_to(default)
    (tmp_path / "other").mkdir()
    split = {"seed": 0, "data_dir": None, **({"source": "idx"} if name == "occluded_mnist" else {})}
    _write_json(tmp_path / "metrics.json", {"split": split, "num_test": 1})  # as train writes it (or wrote)
    model = tmp_path / "model.keras"
    model.write_bytes(b"not a model")  # the split is checked first: its load fails after that
    for given in (str(default), f"{default}/", str(tmp_path / "link")):
        with pytest.raises(CommandLineError, match="is not a Keras model file"):
            module.evaluate(str(model), data_dir=given, num_test=1)
    # a folder that is not the default one still is another split, named as such
    expected = f"than --data-dir {tmp_path / 'other'} (trained with the default {default})"
    with pytest.raises(CommandLineError, match=re.escape(expected)):
        module.evaluate(str(model), data_dir=str(tmp_path / "other"), num_test=1)


def test_train_refuses_the_folder_of_another_applications_run_or_of_a_search(tmp_path, capsys):
    # Audit 82 (2): `train music --run-dir runs/demo` replaced the demo's model, metrics and
    # plots (and mixed the TensorBoard logs); `train --run-dir` into a `tune` folder replaced
    # the search's metrics.json, so `evaluate` of its best model scored another split.
    from applications import fault_tolerance

    missing = str(tmp_path / "no-data")  # (the old source went on to this data error)
    run_dir = tmp_path / "run"
    assert cli.main(["train", "demo", "--run-dir", str(run_dir), *_TINY_DEMO]) == 0, capsys.readouterr().err
    capsys.readouterr()
    before = _files(run_dir)
    assert cli.main(["train", "music", "--run-dir", str(run_dir), "--data-dir", missing, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-capsules: error: --run-dir {run_dir} holds the run of demo") and err.count("\n") == 1
    assert _files(run_dir) == before
    assert fault_tolerance.folder_contents(str(run_dir)) == {"train": "demo", "tune": None}
    fault_tolerance.check_train_folder(str(run_dir), "demo")  # the same application's: its own
    search = tmp_path / "search"
    _write_json(search / "keras_capsules_search.json", {"application": "demo", "tuner": "random"})
    _write_json(search / "metrics.json", {"split": {"seed": 3, "data_dir": None, "limit": 60, "test_fraction": 0.2}})
    (search / "best_model.keras").write_bytes(b"x")
    before = _files(search)
    for application in ("demo", "music"):
        assert cli.main(["train", application, "--run-dir", str(search), "--data-dir", missing, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "holds the `keras-capsules tune` search of demo" in err and err.count("\n") == 1, err
    assert _files(search) == before


def test_evaluate_names_the_application_whose_model_it_was_given(tmp_path, capsys):
    # Audit 2026-11-30: `evaluate demo --model` of a sort_of_clevr run (a model holding
    # that application's layers) failed with a 6 KB traceback and exit code 1 ("Could not
    # locate class 'CoordinateEncoding'"); the same file without its run's record, too.
    import json
    import zipfile

    import keras

    run = tmp_path / "run"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    run.mkdir()
    model.save(run / "model.keras")
    _write_json(run / "keras_capsules_run.json", {"command": "train", "application": "sort_of_clevr"})
    for given in (run, run / "model.keras"):
        assert cli.main(["evaluate", "demo", "--model", str(given)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"keras-capsules: error: --model {run / 'model.keras'} is a model of sort_of_clevr (written by "
            f"`keras-capsules train sort_of_clevr`), not of demo: evaluate it with "
            f"`keras-capsules evaluate sort_of_clevr --model {run / 'model.keras'}`\n"
        ), err
    # without the record: the class that nothing here defines is named, in one line
    alone = tmp_path / "alone.keras"
    with zipfile.ZipFile(run / "model.keras") as src, zipfile.ZipFile(alone, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                layer = config["config"]["layers"][-1]
                layer["class_name"], layer["module"] = "NoSuchLayer", "applications.nowhere"
                layer["registered_name"] = "applications>NoSuchLayer"
                data = json.dumps(config).encode()
            dst.writestr(item, data)
    assert cli.main(["evaluate", "demo", "--model", str(alone)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-capsules: error: {alone} holds a ") and "NoSuchLayer" in err
    assert "another application's model" in err and err.count("\n") == 1, err


def test_tune_refuses_a_train_runs_folder_also_while_it_trains(tmp_path, capsys):
    # Audit 82 (2): tune refused a run's folder only by its metrics.json: a run still training
    # (or crashed: its backup, no metrics yet), or one trained into a search's folder (beside
    # the search's record), was taken, and the search replaced the run's metrics.json.
    missing = str(tmp_path / "no-data")
    training = tmp_path / "training"
    _write_json(training / "keras_capsules_run.json", {"command": "train", "application": "demo"})
    _write_json(training / "backup" / "training_metadata.json", {"epoch": 1, "batch": 0})
    mixed = tmp_path / "mixed"
    _write_json(mixed / "keras_capsules_search.json", {"application": "demo", "tuner": "random"})
    _write_json(mixed / "metrics.json", {"test_accuracy": 0.5})
    for name in ("model.keras", "history.csv", "best_model.keras"):
        (mixed / name).write_bytes(b"x")
    for folder, whose in ((training, "run of demo"), (mixed, "run (")):
        before = _files(folder)
        for overwrite in ([], ["--overwrite"]):
            argv = ["tune", "demo", "--directory", str(folder), "--data-dir", missing, "--quiet", *overwrite]
            assert cli.main(argv) == 2
            err = capsys.readouterr().err
            assert f"holds a `keras-capsules train` {whose}" in err and err.count("\n") == 1, err
        assert _files(folder) == before


def test_evaluate_model_names_a_search_folder_for_its_best_model(tmp_path, capsys):
    # Audit 82 (3): `evaluate demo --model runs/tune-demo` said "no model at
    # 'runs/tune-demo/model.keras': train one first"; the search wrote best_model.keras there.
    import json
    import shutil

    search = tmp_path / "search"
    _write_json(search / "keras_capsules_search.json", {"application": "demo", "tuner": "random"})
    _write_json(search / "metrics.json", {"split": {"seed": 0, "data_dir": None, "limit": 40, "test_fraction": 0.2}})
    model = demo.compile_model(demo.build_model(filters=4, primary_capsules=2, hidden_capsules=4, pose_size=2))
    model.save(search / "best_model.keras")
    assert cli.main(["evaluate", "demo", "--model", str(search), "--quiet"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == str(search / "best_model.keras") and 0 <= result["test_accuracy"] <= 1
    # a folder with both models: which one is meant is the user's to say
    shutil.copy(search / "best_model.keras", search / "model.keras")
    assert cli.main(["evaluate", "demo", "--model", str(search), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "holds a trained model and a search's best model: pass the one to evaluate" in err and err.count("\n") == 1
    # a search that has written no best model yet: the command that writes it
    waiting = tmp_path / "waiting"
    _write_json(waiting / "keras_capsules_search.json", {"application": "demo", "tuner": "random"})
    assert cli.main(["evaluate", "demo", "--model", str(waiting), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"no model at '{waiting / 'best_model.keras'}': search one first with `keras-capsules tune demo " \
           f"--directory {waiting}`" in err, err


@pytest.mark.parametrize("application", registry.names())
def test_help_never_shows_a_default_of_none(application):
    # Audit 82 (5): `evaluate sort_of_clevr|occluded_mnist|textured_mnist --help` showed
    # "--seed SEED random seed (default: None)" (the seed train recorded is used, else 0),
    # occluded_mnist's --source "(default: None)" (the recorded source, else idx).
    import argparse

    parser = cli.build_parser(application)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in ("train", "evaluate", "tune"):
        text = " ".join(commands[command].format_help().split())
        assert "default: None" not in text, (application, command)  # (Python's None; "none" may be a value)


def test_evaluate_help_says_which_defaults_come_from_train():
    # Audit 82 (5): the options whose default is what `train` recorded beside the model say
    # so, and --model takes the folder of a run or of a search.
    import argparse

    def helps(application):
        sub = next(a for a in cli.build_parser(application)._actions
                   if isinstance(a, argparse._SubParsersAction)).choices["evaluate"]
        return {action.dest: " ".join(sub._get_formatter()._expand_help(action).split())
                for action in sub._actions if action.help}

    for application in ("demo", "sort_of_clevr", "occluded_mnist", "textured_mnist"):
        assert "`train` recorded" in helps(application)["seed"] and "else 0" in helps(application)["seed"]
    assert "recorded beside the model, else idx" in helps("occluded_mnist")["source"]
    for application in ("occluded_mnist", "textured_mnist"):
        assert "recorded beside the model, else the project's shared copy" in helps(application)["data_dir"]
    model = helps("demo")["model"]
    assert "folder of a `train` run (its model.keras)" in model and "best_model.keras" in model


def test_bench_without_a_benchmark_names_them(capsys):
    # Audit 82 (5): `keras-capsules bench` said "the following arguments are required:
    # benchmark, benchmark_args", although a benchmark's own arguments are optional.
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: name a benchmark: an application (demo,") and err.count("\n") == 1
    assert "required" not in err and "em_routing" in err


def test_a_refused_command_leaves_no_folder_it_made(tmp_path, capsys, monkeypatch):
    # Audit 82 (6): `train sst --data-dir ...` refused for its missing MiniLM removed runs/sst
    # but left the ./runs it had made (any application, any refusal before training).
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "no-data")
    for argv in (["train", "demo"], ["tune", "demo"], ["train", "demo", "--run-dir", "a/b/run"],
                 ["tune", "demo", "--directory", "c/d/search"]):
        assert cli.main([*argv, "--data-dir", missing, "--quiet"]) == 2
        assert "data directory" in capsys.readouterr().err
        assert os.listdir(tmp_path) == [], argv


def test_a_data_directory_without_the_tfds_dataset_is_one_line(tmp_path, capfd, caplog):
    # Audit (2026-11-30): for a folder that is there but holds no smallnorb, TFDS logged
    # "WARNING:absl:Variant folder .../smallnorb/2.0.0 has no dataset_info.json" before
    # the one-line error.
    from absl import logging as absl_logging

    capfd.readouterr()
    before = absl_logging.get_verbosity()
    with pytest.raises(DataNotFoundError, match="not prepared"):
        tfds_data.require_prepared("smallnorb", data_dir=str(tmp_path))
    assert absl_logging.get_verbosity() == before
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "Variant folder" not in logged and "dataset_info" not in logged, logged


@pytest.mark.parametrize("argv,message", [
    (["train", "occluded_mnist", "--frame-size", "10"],
     "`--frame-size` must be at least the digit's size (14). Received: --frame-size 10"),
    (["train", "textured_mnist", "--n-groups", "1"], "`--n-groups` must be an integer >= 2. Received: --n-groups 1"),
])
def test_errors_of_the_python_checks_name_the_options_as_typed(argv, message, tmp_path, capsys):
    # Audit (2026-11-30): they named the Python parameters ("`frame_size` must be ...
    # Received: frame_size=10"), which a command-line user has to map to the options.
    assert cli.main([*argv, "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert capsys.readouterr().err == f"keras-capsules: error: {message}\n"


@pytest.mark.parametrize("command", ["train", "tune"])
def test_ctrl_c_before_anything_was_written_leaves_no_folder_and_no_resume_hint(command, tmp_path, capsys,
                                                                               monkeypatch):
    # helper-182: a Ctrl-C while the data were prepared left the new folder empty and said
    # "run the same command again to resume the search"
    import applications.demo as demo
    from tuning import search

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_train", interrupted)
    monkeypatch.setattr(search, "run_search", interrupted)
    option = "--run-dir" if command == "train" else "--directory"
    argv = [command, "demo", "--quiet", option, str(tmp_path / "new" / "out")]
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == "\nkeras-capsules: interrupted; nothing was written yet\n"
    assert not (tmp_path / "new").exists()
    # a folder that holds something (a backup, trials) is kept, with the hint to resume
    def wrote_then_interrupted(*args, **kwargs):
        os.makedirs(tmp_path / "new" / "out", exist_ok=True)
        (tmp_path / "new" / "out" / "state.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_train", wrote_then_interrupted)
    monkeypatch.setattr(search, "run_search", wrote_then_interrupted)
    assert cli.main(argv) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    assert (tmp_path / "new" / "out" / "state.json").exists()
