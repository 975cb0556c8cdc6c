"""Atomic writes, and training that resumes after SIGKILL from the last saved epoch."""

import json
import os
import pathlib
import re
import signal
import time

import keras
import numpy as np
import pytest

from applications import demo, fault_tolerance
from tests.applications import cli_helpers
from tests.conftest import as_an_application_test


def _small_model():
    return demo.build_model(filters=4, primary_capsules=2, hidden_capsules=4, pose_size=2)


def test_a_save_that_fails_half_way_leaves_the_good_file(tmp_path, monkeypatch):
    path = tmp_path / "model.keras"
    model = _small_model()
    fault_tolerance.save_model_atomically(model, path)
    good = path.read_bytes()

    def half_save(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as f:
            f.write(good[: len(good) // 2])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(keras.Model, "save", half_save)
    with pytest.raises(OSError, match="simulated"):
        fault_tolerance.save_model_atomically(model, path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["model.keras"], "a temporary file was left behind"
    monkeypatch.undo()
    reloaded = keras.saving.load_model(path)
    x = np.random.default_rng(0).random((2, 8, 8, 1)).astype("float32")
    np.testing.assert_allclose(reloaded(x), model(x), atol=1e-6)


def test_json_and_backup_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "m.json"
    fault_tolerance.write_json_atomically({"epoch": 1}, path)

    def broken_dump(*args, **kwargs):
        raise RuntimeError("crash mid-write")

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(RuntimeError):
        fault_tolerance.write_json_atomically({"epoch": 2}, path)
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"epoch": 1}
    assert os.listdir(tmp_path) == ["m.json"]


def _fit(model, callbacks, epochs=1):
    rng = np.random.default_rng(0)
    x = rng.random((8, 8, 8, 1)).astype("float32")
    y = rng.integers(0, 10, 8)
    demo.compile_model(model)
    return model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=callbacks)


def test_the_checkpoint_of_run_callbacks_saves_atomically(tmp_path, monkeypatch):
    from applications.training import run_callbacks

    run_dir = tmp_path / "run"
    checkpoints = [c for c in run_callbacks(run_dir) if isinstance(c, keras.callbacks.ModelCheckpoint)]
    assert len(checkpoints) == 1 and isinstance(checkpoints[0], fault_tolerance.AtomicModelCheckpoint)
    model = _small_model()
    _fit(model, checkpoints, epochs=2)
    path = run_dir / "model.keras"
    good = path.read_bytes()
    assert os.listdir(run_dir) == ["model.keras"], "a temporary file was left behind"
    x = np.random.default_rng(1).random((2, 8, 8, 1)).astype("float32")
    np.testing.assert_allclose(keras.saving.load_model(path)(x), model(x), atol=1e-6)

    saved = []

    def failing_save(self, filepath, *args, **kwargs):
        saved.append(filepath)
        with open(filepath, "wb") as f:
            f.write(b"half a zip")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(keras.Model, "save", failing_save)
    with pytest.raises(OSError, match="simulated"):
        _fit(model, checkpoints)
    monkeypatch.undo()
    assert saved and all(os.path.basename(p) != "model.keras" for p in saved), "saved in place"
    assert path.read_bytes() == good
    assert os.listdir(run_dir) == ["model.keras"], "a temporary file was left behind"


def _train_demo_and_stop_mid_epoch(run_dir, epochs, limit, hang_at, log, sig=signal.SIGKILL):
    """Starts ``train demo``, waits until it hangs at ``EPOCH:STEP`` and sends ``sig``;
    returns the command and the stopped process."""
    command = ["-m", "applications", "train", "demo", "--epochs", str(epochs), "--limit", str(limit),
               "--batch-size", "16", "--run-dir", str(run_dir), "--quiet", "--test-hang-at", hang_at,
               *cli_helpers.TINY_MODEL]
    proc = cli_helpers.start(command, log)
    try:
        cli_helpers.wait_for_file(run_dir / "hang.marker", proc, timeout=300)
    finally:
        cli_helpers.kill(proc, sig)
    return command, proc


@pytest.fixture(scope="module")
def killed_demo_run(tmp_path_factory):
    """One ``train demo`` of 3 epochs SIGKILLed after step 3 of epoch 2 (epochs 0 and 1
    saved): ``(command, process, run folder)``. Each test reruns in a copy of the folder
    (:func:`_copy_of_killed_run`), so that none sees another's rerun."""
    folder = tmp_path_factory.mktemp("killed_demo_run")
    command, proc = _train_demo_and_stop_mid_epoch(folder / "run", 3, 160, "2:3", folder / "first.log")
    return command, proc, folder / "run"


def _copy_of_killed_run(killed_demo_run, tmp_path):
    """``(command, run folder)``: a copy of the killed run's folder in ``tmp_path`` and its
    command with ``--run-dir`` naming the copy."""
    import shutil

    command, _, killed_dir = killed_demo_run
    run_dir = tmp_path / "run"
    shutil.copytree(killed_dir, run_dir)
    command = list(command)
    command[command.index("--run-dir") + 1] = str(run_dir)
    return command, run_dir


def test_killed_training_resumes_from_the_last_saved_epoch(killed_demo_run, tmp_path, capsys):
    # Epochs 0 and 1 are saved; the process is stopped after step 3 of epoch 2 (of 3).
    from applications import __main__ as cli

    first = killed_demo_run[1]
    command, run_dir = _copy_of_killed_run(killed_demo_run, tmp_path)
    assert first.returncode == -9
    backup = json.loads((run_dir / "backup" / "training_metadata.json").read_text())
    assert backup["epoch"] == 2
    assert not (run_dir / "model.keras").exists()

    # the same command, run in this process (the killed one was a process of its own:
    # the kill is what matters, not where the rerun runs; a new process cost seconds)
    assert command[:2] == ["-m", "applications"]
    assert cli.main(command[2:]) == 0, capsys.readouterr().err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["resumed_from_epoch"] == 2
    assert metrics["epochs_logged"] == [0, 1, 2]
    assert (run_dir / "model.keras").stat().st_size > 0
    assert not (run_dir / "backup").exists(), "the backup is removed when training finishes"
    assert not [p for p in os.listdir(run_dir) if ".tmp-" in p]


def test_ctrl_c_is_one_line_that_says_how_to_resume_and_keeps_the_backup(tmp_path):
    # Audit 5: Ctrl-C during `train` ended in a KeyboardInterrupt traceback (the backup
    # was kept, but nothing said that the same command resumes).
    run_dir = tmp_path / "run"
    _, proc = _train_demo_and_stop_mid_epoch(run_dir, 3, 96, "1:2", tmp_path / "train.log", signal.SIGINT)
    log = (tmp_path / "train.log").read_text()
    assert proc.returncode == 130, log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log
    assert "keras-capsules: interrupted; run the same command again to resume from the last backup" in log
    assert json.loads((run_dir / "backup" / "training_metadata.json").read_text())["epoch"] == 1


def _dense_fit(backup_dir, epochs=4, crash_at=None, model=None, save_freq=1, initial_epoch=0, callbacks=(),
               before=(), **backup_kwargs):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
    if model is None:
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    backup = fault_tolerance.AtomicBackupAndRestore(str(backup_dir), save_freq=save_freq, **backup_kwargs)
    callbacks = [*before, backup, *callbacks] + ([cli_helpers.CrashAt(*crash_at)] if crash_at else [])
    history = model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=callbacks,
                        initial_epoch=initial_epoch)
    return model, backup, history


def test_a_resumed_run_that_crashes_again_mid_epoch_resumes_at_the_same_epoch(tmp_path):
    # Audit 9: a resumed run's mid-epoch backups (--save-freq N) recorded epoch 0 until
    # its first epoch ended, so a second crash restarted training from epoch 0.
    metadata = tmp_path / "backup" / "training_metadata.json"
    for _ in range(2):  # two processes that both crash in epoch 2
        with pytest.raises(RuntimeError, match="simulated"):
            _dense_fit(tmp_path / "backup", crash_at=(2, 1))
        assert json.loads(metadata.read_text())["epoch"] == 2
    _, backup, history = _dense_fit(tmp_path / "backup")
    assert backup.restored_epoch == 2 and history.epoch == [2, 3]


def _dropout_fit(backup_dir, crash_at=None):
    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8), keras.layers.Dropout(0.5),
                              keras.layers.GaussianNoise(0.3), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    callbacks = [fault_tolerance.AtomicBackupAndRestore(str(backup_dir), delete_checkpoint=False)]
    callbacks += [cli_helpers.CrashAt(*crash_at)] if crash_at else []
    model.fit(x, y, batch_size=8, epochs=4, verbose=0, shuffle=False, callbacks=callbacks)
    return model


def test_a_resumed_fit_draws_the_dropout_masks_and_noise_of_the_uninterrupted_one(tmp_path):
    # save_weights leaves the layers' SeedGenerator states out: a resumed run drew the
    # masks and noise of its first epochs again
    whole = _dropout_fit(tmp_path / "whole")
    with pytest.raises(RuntimeError, match="simulated"):
        _dropout_fit(tmp_path / "resumed", crash_at=(2, 1))
    metadata = json.loads((tmp_path / "resumed" / "training_metadata.json").read_text())
    assert metadata["epoch"] == 2 and len(metadata["random_states"]) == 2  # Dropout's and GaussianNoise's
    resumed = _dropout_fit(tmp_path / "resumed")
    assert cli_helpers.max_weight_difference(whole, resumed) == 0.0
    for a, b in zip(whole.variables, resumed.variables, strict=True):  # the seed states too
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


@pytest.mark.parametrize("states", [None, [["seed_generator_state", [1, 2]]], [["a", [1, 2, 3]], ["b", [1, 2, 3]]],
                                    "garbage", [1, 2]])
def test_a_backup_without_random_states_or_of_other_ones_still_resumes(tmp_path, states):
    with pytest.raises(RuntimeError, match="simulated"):
        _dropout_fit(tmp_path / "b", crash_at=(2, 1))
    path = tmp_path / "b" / "training_metadata.json"
    metadata = json.loads(path.read_text())
    metadata.pop("random_states")  # None: a backup of an earlier version
    if states is not None:
        metadata["random_states"] = states
    path.write_text(json.dumps(metadata))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8), keras.layers.Dropout(0.5),
                              keras.layers.GaussianNoise(0.3), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    fresh = [keras.ops.convert_to_numpy(v).tolist() for v in fault_tolerance._random_state_variables(model)]
    at_start = []
    record = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: at_start.append(
        [keras.ops.convert_to_numpy(v).tolist() for v in fault_tolerance._random_state_variables(model)]))
    backup = fault_tolerance.AtomicBackupAndRestore(str(tmp_path / "b"), delete_checkpoint=False)
    history = model.fit(np.zeros((8, 3), "float32"), np.zeros((8, 1), "float32"), epochs=3, verbose=0,
                        callbacks=[backup, record])
    assert backup.restored_epoch == 2 and history.epoch == [2]
    assert at_start == [fresh], "states of another layout were loaded"


def test_a_later_fit_of_a_resumed_model_starts_at_epoch_0(tmp_path):
    # Audit 9: Keras kept the restored epoch on the model, so the next fit of the same
    # model (fresh backup) skipped its first epochs and reported restored_epoch=2.
    with pytest.raises(RuntimeError, match="simulated"):
        _dense_fit(tmp_path / "a", crash_at=(2, 3), save_freq="epoch")
    model, backup, history = _dense_fit(tmp_path / "a", save_freq="epoch")
    assert backup.restored_epoch == 2 and history.epoch == [2, 3]
    _, backup, history = _dense_fit(tmp_path / "b", epochs=3, model=model, save_freq="epoch")
    assert backup.restored_epoch == 0 and history.epoch == [0, 1, 2]


@pytest.mark.parametrize("save_freq", [0, -3, True, "5", 2.5])
def test_resumable_callbacks_refuse_a_bad_save_freq(tmp_path, save_freq):
    # Audit 9: 0, -3 and True backed up after every batch; "5" was Keras' "Invalid value".
    with pytest.raises(ValueError, match="Received: save_freq="):
        fault_tolerance.resumable_callbacks(str(tmp_path), save_freq=save_freq)


def test_resumable_callbacks_take_a_numpy_save_freq(tmp_path):
    # Audit 9: np.int64 steps (from a dataset's cardinality) were refused by Keras.
    backup = fault_tolerance.resumable_callbacks(str(tmp_path), save_freq=np.int64(5))[0]
    assert backup.save_freq == 5 and type(backup.save_freq) is int


def test_a_mid_epoch_backup_of_a_fit_with_initial_epoch_records_its_epoch(tmp_path):
    # Audit 9: fit(initial_epoch=2) made mid-epoch backups that recorded epoch 0, so a
    # crash in epoch 2 resumed at epoch 0.
    with pytest.raises(RuntimeError, match="simulated"):
        _dense_fit(tmp_path / "backup", crash_at=(2, 1), initial_epoch=2)
    assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["epoch"] == 2


def test_atomic_write_syncs_the_file_then_its_directory(tmp_path, monkeypatch):
    # Only the file was synced: after a power cut the rename could be lost.
    import stat

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)),
                                                 real_fsync(fd))[1])
    fault_tolerance.write_json_atomically({"a": 1}, tmp_path / "x.json")
    assert synced == [False, True]
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}


def _dead_pid():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_write_removes_the_temporaries_that_dead_writers_left_for_the_same_file(tmp_path):
    # A process killed mid-write left its hidden .tmp- file for ever: they piled up.
    import socket

    dead, live, host = _dead_pid(), os.getppid(), socket.gethostname()
    removed = [f".tmp-{dead}-m.json", f".tmp-{dead}@{host}-m.json"]
    kept = [f".tmp-{live}@{host}-m.json",  # a live writer's
            f".tmp-{dead}@another-host-m.json",  # a process of another host (shared disk)
            f".tmp-{dead}@{host}-other.json",  # another target's
            f".tmp-{dead}@{host}-x-m.json.bak",  # not a temporary of m.json
            "notes-m.json"]
    for name in removed + kept:
        (tmp_path / name).write_text("{")
    fault_tolerance.write_json_atomically({"a": 1}, tmp_path / "m.json")
    assert sorted(os.listdir(tmp_path)) == sorted(kept + ["m.json"])
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 1}


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_a_backup_beyond_the_asked_epochs_is_refused_and_kept(tmp_path):
    # Keras' BackupAndRestore trained nothing and deleted a backup of 3 epochs when
    # fit asked for 2 (or 3): rerunning with a smaller --epochs lost the run.
    metadata = tmp_path / "backup" / "training_metadata.json"
    with pytest.raises(RuntimeError, match="simulated"):
        _dense_fit(tmp_path / "backup", epochs=5, crash_at=(3, 1), save_freq="epoch")
    saved = (tmp_path / "backup" / "latest.weights.h5").read_bytes()
    with pytest.raises(fault_tolerance.BackupAheadError, match="already reached epoch 3 .*--epochs 3"):
        _dense_fit(tmp_path / "backup", epochs=2, save_freq="epoch")
    assert json.loads(metadata.read_text())["epoch"] == 3
    assert (tmp_path / "backup" / "latest.weights.h5").read_bytes() == saved
    # All the epochs asked for are in the backup (a crash after the last one): the
    # weights are restored, nothing is trained, and the backup stays to go further.
    model, backup, history = _dense_fit(tmp_path / "backup", epochs=3, save_freq="epoch")
    assert backup.restored_epoch == 3 and history.epoch == [] and metadata.exists()
    _, backup, history = _dense_fit(tmp_path / "backup", epochs=4, save_freq="epoch")
    assert backup.restored_epoch == 3 and history.epoch == [3]
    assert not (tmp_path / "backup").exists()


@pytest.fixture(scope="module")
def crashed_demo_run(tmp_path_factory):
    """The folder of one :func:`_crash_a_demo_run_after_two_epochs` of 3 epochs, its lock
    released (as when the crashed process is gone). Tests change copies of it only
    (:func:`_copy_of_crashed_run`). Eager, as the tests that made their own ran it (a module
    fixture is set up before the tests' eager mode)."""
    run_dir = tmp_path_factory.mktemp("crashed_demo_run") / "run"
    with as_an_application_test():
        _crash_a_demo_run_after_two_epochs(run_dir, epochs=3)
    fault_tolerance._release_backup(str(run_dir / "backup"))
    return run_dir


def _copy_of_crashed_run(crashed_demo_run, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(crashed_demo_run, run_dir)
    return run_dir


def test_train_with_fewer_epochs_than_the_backup_is_a_usage_error(crashed_demo_run, tmp_path, capsys):
    from applications import __main__ as cli

    run_dir = _copy_of_crashed_run(crashed_demo_run, tmp_path)  # crashed in epoch 2 of 3
    backup = run_dir / "backup" / "training_metadata.json"
    assert json.loads(backup.read_text())["epoch"] == 2
    history = (run_dir / "history.csv").read_text()
    code = cli.main(["train", "--epochs", "1", "--limit", "40", "--batch-size", "16", "--run-dir", str(run_dir),
                     "--quiet", *cli_helpers.TINY_MODEL])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"keras-capsules: error: the run in {run_dir} already reached epoch 2"), err
    assert "--epochs 2" in err
    assert json.loads(backup.read_text())["epoch"] == 2 and (run_dir / "history.csv").read_text() == history


def test_logged_history_reads_the_run_log_only_when_a_csv_logger_wrote_it(tmp_path):
    import types

    history = types.SimpleNamespace(history={"loss": [0.5]})
    (tmp_path / "history.csv").write_text("epoch,loss\n0,0.9\n1,0.7\n")
    logger = keras.callbacks.CSVLogger(str(tmp_path / "history.csv"), append=True)
    logged, path = fault_tolerance.logged_history(history, [keras.callbacks.TerminateOnNaN(), logger])
    assert logged == {"loss": [0.9, 0.7]} and path == str(tmp_path / "history.csv")
    # no logger among the callbacks: a file left by another run is not this run's log
    assert fault_tolerance.logged_history(history, [keras.callbacks.TerminateOnNaN()]) == ({"loss": [0.5]}, None)
    assert fault_tolerance.logged_history(history, None) == ({"loss": [0.5]}, None)
    empty = keras.callbacks.CSVLogger(str(tmp_path / "empty.csv"))
    assert fault_tolerance.logged_history(history, [empty]) == ({"loss": [0.5]}, None)


def test_read_history_csv_takes_the_loggers_na_for_a_missing_metric(tmp_path):
    # CSVLogger writes "NA" for a metric an epoch's logs lack (e.g. val_loss in an
    # epoch without validation); float("NA") failed
    logger = keras.callbacks.CSVLogger(str(tmp_path / "history.csv"))
    logger.set_model(keras.Sequential([keras.layers.Dense(1)]))
    logger.on_train_begin()
    logger.on_epoch_end(0, {"loss": 0.9, "val_loss": 0.8})
    logger.on_epoch_end(1, {"loss": 0.7})
    logger.on_train_end()
    assert "NA" in (tmp_path / "history.csv").read_text()
    logged, epochs = fault_tolerance.read_history_csv(str(tmp_path / "history.csv"))
    assert epochs == [0, 1] and logged["loss"] == [0.9, 0.7]
    assert logged["val_loss"][0] == 0.8 and np.isnan(logged["val_loss"][1])


def test_a_kept_backup_holds_the_end_of_fit_until_finish_run(tmp_path):
    # The applications' backup (delete_checkpoint=False) must survive fit, which Keras'
    # on_train_end deleted before the model file was written; kept, its last backup
    # (every 3 of 4 steps) was made in the middle of the last epoch, which a rerun
    # trained again.
    metadata = tmp_path / "backup" / "training_metadata.json"
    model, _, history = _dense_fit(tmp_path / "backup", epochs=2, save_freq=3, delete_checkpoint=False)
    assert history.epoch == [0, 1] and json.loads(metadata.read_text())["epoch"] == 2
    rerun, backup, history = _dense_fit(tmp_path / "backup", epochs=2, save_freq=3, delete_checkpoint=False)
    assert backup.restored_epoch == 2 and history.epoch == [] and metadata.exists()
    for got, want in zip(rerun.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    fault_tolerance.finish_run([keras.callbacks.History(), backup])  # other callbacks are ignored
    assert not (tmp_path / "backup").exists()
    fault_tolerance.finish_run([backup])  # no backup: nothing to do
    fault_tolerance.finish_run(None)
    _, backup, history = _dense_fit(tmp_path / "backup", epochs=2, save_freq=3, delete_checkpoint=False)
    assert backup.restored_epoch == 0 and history.epoch == [0, 1]  # a finished run: a new one starts


def test_direct_users_keep_keras_default_the_backup_goes_when_fit_ends(tmp_path):
    # Who uses the callback in their own fit gets no stale backup.
    _, backup, _ = _dense_fit(tmp_path / "backup", epochs=2, save_freq=3)
    assert backup.delete_checkpoint and not (tmp_path / "backup").exists()
    assert not fault_tolerance.resumable_callbacks(str(tmp_path))[0].delete_checkpoint


TINY_OPTIONS = {"filters": 8, "primary_capsules": 2, "hidden_capsules": 4, "pose_size": 2, "n_iters": 2}


def _crash_a_demo_run_after_two_epochs(run_dir, epochs):
    """A tiny demo run of ``epochs`` epochs (the model of ``cli_helpers.TINY_MODEL``, 40
    digits, batch 16) in ``run_dir`` that crashes at the start of its third epoch, its
    backup holding two."""
    with pytest.raises(RuntimeError, match="simulated"):
        demo.train(str(run_dir), epochs=epochs, batch_size=16, limit=40, verbose=0, model_options=TINY_OPTIONS,
                   callbacks=[cli_helpers.CrashAt(2, 0)])


def test_a_crash_between_fit_and_the_model_save_resumes_without_training(tmp_path, monkeypatch):
    # Keras' on_train_end deleted the backup as soon as fit ended; the model, metrics and
    # plots are written after: a crash there left neither, and the rerun trained again.
    run_dir = tmp_path / "run"

    def train(callbacks):
        return demo.train(str(run_dir), epochs=2, batch_size=16, limit=40, verbose=0, model_options=TINY_OPTIONS,
                          callbacks=callbacks)

    with pytest.raises(RuntimeError, match="simulated"):
        train([cli_helpers.crash_when_saving_after_fit(monkeypatch)])
    assert not (run_dir / "model.keras").exists() and not (run_dir / "metrics.json").exists()
    assert json.loads((run_dir / "backup" / "training_metadata.json").read_text())["epoch"] == 2
    monkeypatch.undo()
    counter = cli_helpers.CountBatches()
    metrics = train([counter])
    assert counter.batches == 0, "the rerun trained again"
    assert metrics["resumed_from_epoch"] == 2 and metrics["epochs_logged"] == [0, 1]
    assert (run_dir / "model.keras").is_file() and (run_dir / "metrics.json").is_file()
    assert not (run_dir / "backup").exists(), "a finished run leaves no backup"
    # As before, a rerun after a finished run starts a new run in the same directory.
    counter = cli_helpers.CountBatches()
    metrics = train([counter])
    assert counter.batches > 0 and metrics["resumed_from_epoch"] == 0 and metrics["epochs_logged"] == [0, 1]
    assert not (run_dir / "backup").exists()


def test_a_finish_killed_half_way_never_leaves_a_backup_without_its_weights(tmp_path, monkeypatch):
    # finish deleted the backup folder file by file: killed after the weights went, it
    # left training_metadata.json, and the rerun restored "epoch 2" with fresh weights,
    # trained nothing and would write that untrained model as the run's.
    import shutil

    _dense_fit(tmp_path / "backup", epochs=2, delete_checkpoint=False)
    rmtree = shutil.rmtree

    def killed_half_way(path, *args, **kwargs):
        if not os.path.exists(os.path.join(path, "latest.weights.h5")):
            return rmtree(path, *args, **kwargs)
        os.remove(os.path.join(path, "latest.weights.h5"))
        raise KeyboardInterrupt("killed (simulated)")

    monkeypatch.setattr(shutil, "rmtree", killed_half_way)
    with pytest.raises(KeyboardInterrupt, match="simulated"):
        fault_tolerance.finish_run(fault_tolerance.resumable_callbacks(str(tmp_path)))
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert not fault_tolerance.backup_exists(str(tmp_path))
    _, backup, history = _dense_fit(tmp_path / "backup", epochs=2, delete_checkpoint=False)
    assert backup.restored_epoch == 0 and history.epoch == [0, 1]  # a new run
    # the next finish removes what a killed one left, in this process or a dead one
    (tmp_path / f".tmp-{_dead_pid()}-backup").mkdir()
    assert len([n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]) == 2
    fault_tolerance.finish_run([backup])
    assert os.listdir(tmp_path) == []


def test_a_resumed_run_logs_each_epoch_once_with_backups_every_n_steps(tmp_path):
    # With --save-freq N, a crash after an epoch's row was logged and before the next
    # backup (made N steps later) resumed at that epoch and logged it again:
    # history.csv, metrics.json's epochs_logged and history.png showed epochs 0, 0, 1, ...
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")

    def fit(extra=()):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        callbacks = fault_tolerance.resumable_callbacks(str(tmp_path), save_freq=3)
        model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[*callbacks, *extra], validation_data=(x, y))
        return callbacks

    # 4 steps an epoch, a backup every 3: the last one before the crash (epoch 1,
    # batch 0) was made in epoch 0, whose row is logged
    with pytest.raises(RuntimeError, match="simulated"):
        fit([cli_helpers.CrashAt(1, 0)])
    assert fault_tolerance.backup_epoch(str(tmp_path / "backup")) == 0
    assert fault_tolerance.read_history_csv(str(tmp_path / "history.csv"))[1] == [0]
    callbacks = fit()
    assert callbacks[0].restored_epoch == 0
    logged, epochs = fault_tolerance.read_history_csv(str(tmp_path / "history.csv"))
    assert epochs == [0, 1, 2] and len(logged["loss"]) == 3


def _hold_lock(backup_dir, expect="locked"):
    """A process that takes the lock of ``backup_dir`` as a training run does and holds
    it until killed (``expect="locked"``), or finds it taken (``"busy"``) and ends."""
    import subprocess
    import sys

    os.makedirs(backup_dir, exist_ok=True)
    path = os.path.join(backup_dir, fault_tolerance.LOCK_FILE)
    code = ("import fcntl, os, sys, time\n"
            "f = open(sys.argv[1], 'a+')\n"
            "try: fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except OSError: print('busy', flush=True); sys.exit()\n"
            "f.seek(0); f.truncate(); f.write(f'{os.getpid()}@otherrun'); f.flush()\n"
            "print('locked', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == expect
    except BaseException:
        proc.kill()
        raise
    if expect != "locked":
        proc.wait()
    return proc


@pytest.mark.skipif(os.name == "nt", reason="no flock")
def test_a_run_that_another_live_process_trains_is_refused(tmp_path, capsys):
    # Two processes resuming one run (a scheduler starting a job again while the first
    # still ran) both trained: history.csv logged epochs 0, 1, 2, 2, 3, 4, 3, 4.
    from applications import __main__ as cli

    run_dir = tmp_path / "run"
    other = _hold_lock(run_dir / "backup")
    try:
        with pytest.raises(fault_tolerance.RunInUseError, match=rf"pid@host {other.pid}@otherrun"):
            _dense_fit(run_dir / "backup", epochs=1, delete_checkpoint=False)
        code = cli.main(["train", "--epochs", "1", "--limit", "40", "--batch-size", "16", "--run-dir", str(run_dir),
                         "--quiet", *cli_helpers.TINY_MODEL])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"keras-capsules: error: the run in {run_dir} is being trained by another process"), err
        assert not (run_dir / "history.csv").exists() and os.listdir(run_dir / "backup") == [".lock"]
    finally:
        other.kill()
        other.wait()
    # the other process is gone (killed: the system released its lock): the run goes on,
    # and the lock is this process's while it trains and until the run is finished

    class OtherProcessTries(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            _hold_lock(run_dir / "backup", expect="busy")
            tried.append(epoch)

    tried = []
    _, backup, history = _dense_fit(run_dir / "backup", epochs=2, delete_checkpoint=False,
                                    callbacks=[OtherProcessTries()])
    assert history.epoch == [0, 1] and tried == [0, 1]
    _hold_lock(run_dir / "backup", expect="busy")  # the outputs are not written yet
    fault_tolerance.finish_run([backup])
    assert not (run_dir / "backup").exists()
    other = _hold_lock(run_dir / "backup")  # a new run may start
    other.kill()
    other.wait()
    # Keras' default (the backup goes when fit ends): the lock goes with it
    _dense_fit(tmp_path / "direct", epochs=1)
    other = _hold_lock(tmp_path / "direct")
    other.kill()
    other.wait()


def test_the_same_process_may_fit_a_run_again_after_a_crash(tmp_path):
    # the lock is per process: a crash in fit leaves it to the process, which resumes
    with pytest.raises(RuntimeError, match="simulated"):
        _dense_fit(tmp_path / "backup", epochs=3, crash_at=(1, 0), save_freq="epoch", delete_checkpoint=False)
    _, backup, history = _dense_fit(tmp_path / "backup", epochs=3, save_freq="epoch", delete_checkpoint=False)
    assert backup.restored_epoch == 1 and history.epoch == [1, 2]
    fault_tolerance.finish_run([backup])
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.name == "nt", reason="no flock")
def test_a_file_system_without_locks_trains_unlocked(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    _, backup, history = _dense_fit(tmp_path / "backup", epochs=2, delete_checkpoint=False)
    assert history.epoch == [0, 1]
    fault_tolerance.finish_run([backup])
    assert os.listdir(tmp_path) == []


def _interrupt_each_finish(monkeypatch):
    """Ctrl-C (a real SIGINT to this process) as each backup's ``finish`` begins."""
    finish = fault_tolerance.AtomicBackupAndRestore.finish

    def interrupted_finish(self):
        os.kill(os.getpid(), signal.SIGINT)
        finish(self)

    monkeypatch.setattr(fault_tolerance.AtomicBackupAndRestore, "finish", interrupted_finish)


def test_ctrl_c_during_finish_run_finishes_and_says_the_outputs_are_written(tmp_path, capsys, monkeypatch):
    # A Ctrl-C in finish_run (the outputs written, the backup going) said "run the same
    # command again to resume from the last backup": untrue, the run was complete (and
    # with the backup renamed away a rerun trained a new run over its outputs).
    from applications import __main__ as cli

    monkeypatch.delenv("KERAS_CAPSULES_DEBUG", raising=False)
    _interrupt_each_finish(monkeypatch)
    run_dir = tmp_path / "run"
    code = cli.main(["train", "--epochs", "1", "--limit", "40", "--batch-size", "16", "--run-dir", str(run_dir),
                     "--quiet", *cli_helpers.TINY_MODEL])
    err = capsys.readouterr().err
    assert code == 130, err
    assert "resume from" not in err and "the outputs were written" in err and "nothing to resume" in err, err
    assert err.strip().count("\n") == 0, err
    assert (run_dir / "model.keras").is_file() and (run_dir / "metrics.json").is_file()
    assert not (run_dir / "backup").exists(), "the finish was not completed"
    assert not [p for p in os.listdir(run_dir) if ".tmp-" in p]


def test_ctrl_c_during_finish_run_completes_the_finish_then_interrupts(tmp_path, monkeypatch):
    # The handler this test finds: Python's default_int_handler, or SIG_IGN when pytest was
    # started without job control (a background job of a script, nohup, some CI runners:
    # the shell starts it with SIGINT ignored and Python keeps that). Not pytest-xdist's
    # doing: neither it nor execnet sets a SIGINT handler, and its workers (plain
    # subprocesses) inherit the main process's, SIG_IGN exactly when a plain run has it too
    # (measured with pytest-xdist 3.8 / execnet 2.1: default_int_handler in the main process
    # and both workers of `-n 2` from an interactive shell; SIG_IGN in all three, and in a
    # plain run, from `sh -c 'pytest ... & wait'`). No test leaves it changed
    # (conftest's _sigint_handler_kept fails one that would).
    handler_before = signal.getsignal(signal.SIGINT)
    _dense_fit(tmp_path / "backup", epochs=2, delete_checkpoint=False)
    _interrupt_each_finish(monkeypatch)
    with pytest.raises(fault_tolerance.RunCompleteInterrupt):
        fault_tolerance.finish_run(fault_tolerance.resumable_callbacks(str(tmp_path)))
    assert os.listdir(tmp_path) == []  # finished: no backup, no half-deleted folder
    # A run that is not complete when its backup goes (a member of a music ensemble):
    # the interrupt is a plain one (the CLI's "run the same command again" is true).
    _dense_fit(tmp_path / "backup", epochs=2, delete_checkpoint=False)
    with pytest.raises(KeyboardInterrupt) as info:
        fault_tolerance.finish_run(fault_tolerance.resumable_callbacks(str(tmp_path)), complete=False)
    assert not isinstance(info.value, fault_tolerance.RunCompleteInterrupt)
    assert os.listdir(tmp_path) == []
    # The SIGINT handler is the one before again.
    assert signal.getsignal(signal.SIGINT) is handler_before


def test_keep_best_weights_remembers_the_best_from_before_a_mid_epoch_backup(tmp_path):
    # With --save-freq N the backup may be older than the last improvement: best.npz
    # (the one best kept) then belonged to an epoch the resumed run trains again, was
    # ignored, and the best epoch before it was forgotten with its weights.
    backup_dir = tmp_path / "backup"
    seen = {}

    class ScriptedValidation(keras.callbacks.Callback):  # before KeepBestWeights
        def __init__(self, losses):
            super().__init__()
            self.losses = losses

        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = self.losses[epoch]
            seen.setdefault(epoch, self.model.get_weights())

    def fit(losses, crash_at=None):
        keras.utils.set_random_seed(0)
        best = fault_tolerance.KeepBestWeights("val_loss", str(backup_dir))
        # 4 steps per epoch, a backup every 6: the last one before the crash is epoch 1's
        backup = fault_tolerance.AtomicBackupAndRestore(str(backup_dir), save_freq=6, delete_checkpoint=False)
        extra = [cli_helpers.CrashAt(*crash_at)] if crash_at else []
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(x, y, batch_size=8, epochs=4, verbose=0,
                  callbacks=[ScriptedValidation(losses), best, backup, *extra])
        return best

    with pytest.raises(RuntimeError, match="simulated"):
        fit([2.0, 1.0, 9.0, 9.0], crash_at=(2, 0))  # epoch 0 best, then epoch 1
    assert fault_tolerance.backup_epoch(str(backup_dir)) == 1  # epoch 1 is trained again
    bests = lambda: sorted(n for n in os.listdir(backup_dir) if n.startswith("best"))  # noqa: E731
    assert bests() == ["best-0.npz", "best-1.npz"]  # the last best before the backup's epoch, and since
    best = fit([None, 5.0, 3.0, 3.0])  # the retrained epoch 1 does worse
    assert (best.best_epoch, best.best) == (0, 2.0)
    assert bests() == ["best-0.npz"]  # epoch 1's went: the run trained it again
    for got, want in zip(best.weights, seen[0], strict=True):
        np.testing.assert_array_equal(got, want)


def test_keep_best_weights_reads_the_single_best_file_of_earlier_backups(tmp_path):
    backup_dir = tmp_path / "backup"
    backup_dir.mkdir()
    fault_tolerance.write_json_atomically({"epoch": 2, "batch": -1}, str(backup_dir / "training_metadata.json"))
    np.savez(backup_dir / "best.npz", epoch=1, value=0.5, count=1, w0=np.ones(3))
    best = fault_tolerance.KeepBestWeights("val_loss", str(backup_dir))
    best.on_train_begin()
    assert (best.best_epoch, best.best) == (1, 0.5) and np.array_equal(best.weights[0], np.ones(3))


def _fit_resumable(run_dir, epochs, extra=(), save_freq="epoch"):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    callbacks = fault_tolerance.resumable_callbacks(str(run_dir), save_freq=save_freq)
    history = model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[*callbacks, *extra],
                        validation_data=(x, y))
    return callbacks, history


def _killed_after_the_backup_before_the_row(monkeypatch, at_epoch):
    """The process dies (an exception in its place) after epoch ``at_epoch``'s backup
    and before that epoch's row of history.csv is written."""
    write_row = keras.callbacks.CSVLogger.on_epoch_end
    seen = {}

    def killed(self, epoch, logs=None):
        seen[epoch] = dict(logs)
        if epoch == at_epoch:
            raise RuntimeError("killed between the backup and the history row (simulated)")
        write_row(self, epoch, logs)

    monkeypatch.setattr(keras.callbacks.CSVLogger, "on_epoch_end", killed)
    return seen


@pytest.mark.parametrize("at_epoch, save_freq", [(1, "epoch"), (3, "epoch"), (0, "epoch"), (1, 3)])
def test_a_kill_between_an_epochs_backup_and_its_history_row_loses_no_row(tmp_path, monkeypatch, at_epoch,
                                                                           save_freq):
    # The backup of an epoch's end was written before its history.csv row: a SIGKILL in
    # between resumed after that epoch, and its row was missing for good (history.csv,
    # history.png and metrics.json's epochs_logged). At 3, the last epoch: the rerun
    # trains nothing and still needs the row.
    seen = _killed_after_the_backup_before_the_row(monkeypatch, at_epoch)
    with pytest.raises(RuntimeError, match="simulated"):
        _fit_resumable(tmp_path, epochs=4, save_freq=save_freq)
    backed_up = fault_tolerance.backup_epoch(str(tmp_path / "backup"))
    if save_freq == "epoch":
        assert backed_up == at_epoch + 1
    monkeypatch.undo()
    callbacks, history = _fit_resumable(tmp_path, epochs=4, save_freq=save_freq)
    assert history.epoch == list(range(backed_up, 4))
    logged, epochs = fault_tolerance.read_history_csv(str(tmp_path / "history.csv"))
    assert epochs == [0, 1, 2, 3]
    for epoch in range(backed_up):  # the epochs of the first process, as they were logged
        for key, value in seen[epoch].items():
            assert logged[key][epoch] == pytest.approx(value, rel=0, abs=0), (epoch, key)
    for i, epoch in enumerate(history.epoch):
        assert logged["loss"][epoch] == pytest.approx(history.history["loss"][i], rel=0, abs=0)
    # the file reads as one table: a header, then a row per epoch, each with every column
    lines = (tmp_path / "history.csv").read_text().splitlines()
    assert len(lines) == 5 and all(line.count(",") == lines[0].count(",") for line in lines)
    # the rows of the first process's epochs (restored or not) are those CSVLogger writes
    reference = keras.callbacks.CSVLogger(str(tmp_path / "reference.csv"))
    reference.on_train_begin()
    for epoch in range(backed_up):
        reference.on_epoch_end(epoch, seen[epoch])
    reference.on_train_end()
    assert lines[: backed_up + 1] == (tmp_path / "reference.csv").read_text().splitlines()
    fault_tolerance.finish_run(callbacks)


@pytest.mark.skipif(os.name == "nt", reason="no flock")
def test_a_refused_second_process_leaves_the_live_runs_best_weights_alone(tmp_path):
    # KeepBestWeights (before the backup callback, as music puts it) deleted the best-<epoch>.npz
    # files of the epochs from the backup's on when training began, before the backup
    # callback found the run locked by a live process: the refused process deleted the live
    # run's bests since its last backup (with --save-freq N, those of whole epochs), which
    # that run needs once its next backup passes them.
    backup_dir = tmp_path / "backup"
    backup_dir.mkdir()
    fault_tolerance.write_json_atomically({"epoch": 1, "batch": 2}, str(backup_dir / "training_metadata.json"))
    for epoch, value in ((0, 0.9), (1, 0.5), (2, 0.4)):  # 1 and 2: since the (mid-epoch) backup
        np.savez(backup_dir / f"best-{epoch}.npz", epoch=epoch, value=value, count=1, w0=np.full(3, value))
    other = _hold_lock(str(backup_dir))
    before = sorted(p.name for p in backup_dir.iterdir())
    try:
        best = fault_tolerance.KeepBestWeights("val_loss", str(backup_dir))
        with pytest.raises(fault_tolerance.RunInUseError):
            _dense_fit(backup_dir, epochs=4, callbacks=(), delete_checkpoint=False, before=[best])
        assert sorted(p.name for p in backup_dir.iterdir()) == before
    finally:
        other.kill()
        other.wait()
    # the live run is gone: a resume at epoch 1 drops the bests of the epochs it trains again
    best = fault_tolerance.KeepBestWeights("val_loss", str(backup_dir))
    _dense_fit(backup_dir, epochs=2, delete_checkpoint=False, before=[best])
    assert (best.best_epoch, best.best) == (0, 0.9)
    assert not (backup_dir / "best-1.npz").exists() and not (backup_dir / "best-2.npz").exists()


def test_a_kill_inside_a_runs_first_backup_starts_a_fresh_run_from_fresh_weights(tmp_path, monkeypatch):
    # A kill between the first backup's weights and its training_metadata.json left the
    # weights alone: the rerun was a fresh run (no backup: epoch 0, history.csv, bests and
    # patience started again) that Keras nevertheless started from those weights and their
    # optimizer step (a learning-rate schedule then ran ahead of its epochs).
    write = fault_tolerance.write_json_atomically

    def killed(data, path):
        if os.path.basename(path) == "training_metadata.json":
            raise RuntimeError("killed between the backup's weights and its epoch (simulated)")
        write(data, path)

    monkeypatch.setattr(fault_tolerance, "write_json_atomically", killed)
    with pytest.raises(RuntimeError, match="simulated"):
        _dense_fit(tmp_path / "backup", epochs=2, delete_checkpoint=False)
    monkeypatch.undo()
    assert (tmp_path / "backup" / "latest.weights.h5").exists()
    assert not fault_tolerance.backup_exists(str(tmp_path))
    model, backup, history = _dense_fit(tmp_path / "backup", epochs=1, delete_checkpoint=False)
    assert backup.restored_epoch == 0 and history.epoch == [0]
    assert int(model.optimizer.iterations) == 4  # the 4 steps of this run's epoch 0, none before
    fault_tolerance.finish_run([backup])


def test_a_torn_last_row_of_history_csv_is_replaced_from_the_backup(tmp_path):
    # A write of history.csv cut short (a power cut: the row was flushed, not synced) left
    # a last line without its line end, which the resumed run's first row then continued.
    path = tmp_path / "history.csv"
    logged = {0: {"loss": "0.5", "val_loss": "0.6"}, 1: {"loss": "0.25", "val_loss": "0.3"}}
    path.write_bytes(b"epoch,loss,val_loss\r\n0,0.5,0.6\r\n1,0.2")
    fault_tolerance._repair_history_csv(str(path), 2, logged)
    assert path.read_bytes() == b"epoch,loss,val_loss\r\n0,0.5,0.6\r\n1,0.25,0.3\r\n"
    path.write_bytes(b"epoch,loss,val_loss\r\n0,0.5,0.6\r\n1,0.2")  # a backup without logs (older version)
    fault_tolerance._repair_history_csv(str(path), 2, {})
    assert path.read_bytes() == b"epoch,loss,val_loss\r\n0,0.5,0.6\r\n"
    path.write_bytes(b"epoch,lo")  # a torn header, nothing to restore
    fault_tolerance._repair_history_csv(str(path), 1, {})
    assert path.read_bytes() == b""
    path.unlink()  # no file: the header CSVLogger would write, then the rows
    fault_tolerance._repair_history_csv(str(path), 2, {0: {"loss": "0.5"}, 1: {"loss": "0.25"}})
    assert path.read_bytes() == b"epoch,loss,val_loss\r\n0,0.5,NA\r\n1,0.25,NA\r\n"


def test_a_build_lock_makes_the_next_builder_wait_and_leaves_no_lock_file(tmp_path, capsys):
    # flock locks of two open files conflict also within one process: a thread stands
    # for the other process.
    import threading

    target, order = tmp_path / "cache" / "entry", []
    entered, release = threading.Event(), threading.Event()

    def first_builder():
        with fault_tolerance.build_lock(target):
            entered.set()
            release.wait(60)
            order.append("first")

    def second_builder():
        with fault_tolerance.build_lock(target, verbose=1):
            order.append("second")

    first = threading.Thread(target=first_builder)
    first.start()
    assert entered.wait(60)
    second = threading.Thread(target=second_builder)
    second.start()
    deadline = time.monotonic() + 60
    while "waiting for" not in capsys.readouterr().out:  # the second one says whom it waits for
        assert time.monotonic() < deadline and second.is_alive() and not order
        time.sleep(0.05)
    release.set()
    first.join(60)
    second.join(60)
    assert order == ["first", "second"]
    assert os.listdir(tmp_path / "cache") == []


def test_a_build_lock_on_a_file_system_without_locks_runs_unlocked(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with fault_tolerance.build_lock(tmp_path / "entry"):
        (tmp_path / "entry").write_text("built")
    assert os.listdir(tmp_path) == ["entry"]


def test_publish_folder_onto_a_file_is_an_error_not_another_writers_entry(tmp_path):
    # A file where the folder goes is no entry that another writer published: it was
    # taken for one (False), the new folder deleted, and the caller then read the file
    # as the published folder ("Not a directory" on its first file, after all its work).
    tmp = pathlib.Path(fault_tolerance.temporary_path(tmp_path / "entry"))
    tmp.mkdir()
    (tmp / "states.npy").write_bytes(b"states")
    (tmp_path / "entry").write_bytes(b"in the way")
    with pytest.raises(NotADirectoryError):
        fault_tolerance.publish_folder(tmp, tmp_path / "entry")
    assert (tmp_path / "entry").read_bytes() == b"in the way"
    # another writer's folder published first is kept, and this writer's folder deleted
    (tmp_path / "entry").unlink()
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "states.npy").write_bytes(b"theirs")
    assert fault_tolerance.publish_folder(tmp, tmp_path / "entry") is False
    assert not tmp.exists() and (tmp_path / "entry" / "states.npy").read_bytes() == b"theirs"


def test_a_build_lock_file_of_another_user_is_locked_read_only(tmp_path, monkeypatch):
    # Users sharing a cache folder: the lock file that one user's builder left (killed) or
    # holds (building) has that user's mode (0644 under umask 022), which another user may
    # read but not open for writing. A lock needs no write access, but opening it "a+"
    # was a PermissionError with a traceback (or, while the other user built, instead of
    # waiting). (Tests run as root, whom modes never stop: the refusal is simulated.)
    import builtins
    import fcntl

    target = tmp_path / "entry"
    lock_path = str(tmp_path / f"{fault_tolerance.LOCK_FILE}-entry")
    with open(lock_path, "w") as f:
        f.write("4242@another-users-host\n")

    def open_as_another_user(file, mode="r", *args, **kwargs):
        if os.fspath(file) == lock_path and any(c in mode for c in "wa+x"):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr(fault_tolerance, "open", open_as_another_user, raising=False)
    ran = []
    with fault_tolerance.build_lock(target):
        with builtins.open(lock_path) as other:  # another process finds it locked
            with pytest.raises(BlockingIOError):
                fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        ran.append(True)
    assert ran == [True]
    # No lock file, and a folder this user may not write: the refusal to create one, at
    # once (it is no lock file removed meanwhile, to open again and again)
    assert not os.path.exists(lock_path)  # (its holder removed it on leaving)
    monkeypatch.setattr(fault_tolerance.os, "access", lambda path, mode: False)
    with pytest.raises(PermissionError):
        with fault_tolerance.build_lock(target):
            pass


def test_keep_best_weights_in_max_mode_keeps_the_highest_score():
    best = fault_tolerance.KeepBestWeights("val_ami", mode="max")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    best.set_model(model)
    best.on_train_begin()
    weights = {}
    for epoch, value in enumerate([0.1, 0.4, float("nan"), 0.4, 0.2, None]):
        model.set_weights([np.full((2, 1), float(epoch)), np.zeros(1)])
        weights[epoch] = model.get_weights()
        best.on_epoch_end(epoch, {} if value is None else {"val_ami": value})
    # the first of two equal scores; NaN and a missing score never win
    assert (best.best_epoch, best.best) == (1, 0.4)
    np.testing.assert_array_equal(best.weights[0], weights[1][0])
    with pytest.raises(ValueError, match="`mode` must be 'min' or 'max'"):
        fault_tolerance.KeepBestWeights("val_ami", mode="maximum")


def test_a_numpy_float_in_the_logs_is_restored_as_csv_loggers_number(tmp_path):
    # audit (2026-11-27): the backup's copy of a row wrote floats with repr(), and numpy
    # 2's repr of a float64 (a callback's logs["x"] = np.mean(...)) is "np.float64(0.25)":
    # a row restored after a kill was then unreadable, and every rerun failed the same way
    cells = fault_tolerance._csv_cells({"loss": 0.1, "val_score": np.float64(0.25), "lr": np.float32(0.5)})
    assert cells == {"loss": "0.1", "val_score": "0.25", "lr": "0.5"}
    path = tmp_path / "history.csv"
    path.write_bytes(b"epoch,loss,val_score\r\n0,0.6,0.2\r\n")  # the row of epoch 1 lost by a kill
    logged = {0: fault_tolerance._csv_cells({"loss": 0.6, "val_score": np.float64(0.2)}),
              1: fault_tolerance._csv_cells({"loss": 0.5, "val_score": np.float64(0.25)})}
    fault_tolerance._repair_history_csv(str(path), 2, logged)
    history, epochs = fault_tolerance.read_history_csv(str(path))
    assert epochs == [0, 1] and history["val_score"] == [0.2, 0.25] and history["loss"] == [0.6, 0.5]


def test_resumable_reduce_lr_on_plateau_without_its_metric_only_warns(tmp_path):
    # audit (2026-11-27): Keras keeps `best` None until the monitored metric appears, and
    # the state saved at every epoch's end was float(None): a TypeError where Keras warns
    x = np.random.default_rng(0).random((16, 3)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    backup = str(tmp_path / "backup")
    callback = fault_tolerance.ResumableReduceLROnPlateau(patience=1, backup_dir=backup)
    with pytest.warns(UserWarning, match="val_loss"):
        model.fit(x, x[:, :1], epochs=2, verbose=0, callbacks=[callback])
    resumed = fault_tolerance.ResumableReduceLROnPlateau(patience=1, backup_dir=backup)
    with pytest.warns(UserWarning, match="val_loss"):
        model.fit(x, x[:, :1], initial_epoch=2, epochs=3, verbose=0, callbacks=[resumed])
    assert resumed.best is None


def test_a_rerun_with_another_model_is_one_line_and_keeps_the_backup(killed_demo_run, tmp_path, capsys):
    # audit (2026-11-27): a rerun after a crash with a changed model option (--filters)
    # ended in Keras' 70-line "objects could not be loaded" traceback (exit 1)
    from applications import __main__ as cli

    command, run_dir = _copy_of_killed_run(killed_demo_run, tmp_path)  # killed with its backup of epoch 2
    other = list(command)
    other[other.index("--filters") + 1] = "4"
    # (in this process: the run was killed in another one, which is gone)
    assert other[:2] == ["-m", "applications"]
    capsys.readouterr()
    assert cli.main(other[2:]) == 2
    log = capsys.readouterr().err
    assert "Traceback" not in log and "keras-capsules: error: the backup in" in log
    assert json.loads((run_dir / "backup" / "training_metadata.json").read_text())["epoch"] == 2


class _PoisonAt(keras.callbacks.Callback):
    """Makes the model's first kernel NaN at the start of epoch ``epoch`` (0-based), or
    after batch ``batch`` of it: a diverged update."""

    def __init__(self, epoch, batch=None):
        super().__init__()
        self.epoch, self.batch, self._now = epoch, batch, -1

    def _poison(self):
        kernel = self.model.weights[0]
        kernel.assign(np.full(kernel.shape, np.nan, "float32"))

    def on_epoch_begin(self, epoch, logs=None):
        self._now = epoch
        if epoch == self.epoch and self.batch is None:
            self._poison()

    def on_train_batch_end(self, batch, logs=None):
        if self._now == self.epoch and batch == self.batch:
            self._poison()


def _finite_backup_weights(run_dir):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.load_weights(str(run_dir / "backup" / "latest.weights.h5"))
    return all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_a_diverged_run_stops_at_its_first_nan_loss_and_keeps_the_last_finite_backup(tmp_path):
    # it trained on to the last epoch, backed up NaN weights over the good ones (a resume
    # restored NaN), then saved and scored a NaN model and wrote NaN metrics, exit code 0
    run_dir = tmp_path / "run"
    rows = []
    logger = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: rows.append(epoch))
    with pytest.raises(fault_tolerance.TrainingDivergedError) as caught:
        _fit_resumable(run_dir, epochs=4, extra=[_PoisonAt(2), logger])
    message = str(caught.value)
    assert message.startswith("training diverged: the loss became nan in epoch 3, batch 1; training stopped"), message
    assert f"the backup in {run_dir / 'backup'} keeps what came before" in message and "--learning-rate" in message
    assert isinstance(caught.value, FloatingPointError) and rows == [0, 1]
    assert json.loads((run_dir / "backup" / "training_metadata.json").read_text())["epoch"] == 2
    assert _finite_backup_weights(run_dir)
    assert len((run_dir / "history.csv").read_text().splitlines()) == 3  # the header and epochs 1-2


def test_a_backup_refuses_weights_that_are_not_finite(tmp_path):
    # with a backup every step, the update that made the weights NaN was backed up before
    # any loss showed it, over the last finite backup
    with pytest.raises(fault_tolerance.TrainingDivergedError) as caught:
        _dense_fit(tmp_path / "backup", save_freq=1, before=[_PoisonAt(1, batch=1)])
    message = str(caught.value)
    assert message.startswith("training diverged: 1 weight(s) of the model are not finite"), message
    assert f"the backup in {tmp_path / 'backup'} keeps the last finite ones" in message
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata["batch"]) == (1, 0)
    assert _finite_backup_weights(tmp_path)
    # Audit 2026-11-30: a run that diverged before its first backup was pointed to a
    # backup that held no weights
    with pytest.raises(fault_tolerance.TrainingDivergedError) as caught:
        _dense_fit(tmp_path / "early", save_freq=1, before=[_PoisonAt(0, batch=0)])
    assert "no backup was made before (nothing of the run is kept)" in str(caught.value)
    assert "the backup in" not in str(caught.value)


def test_a_diverged_train_command_is_one_line_and_exit_code_2(tmp_path, capsys):
    from applications import __main__ as cli

    run_dir = tmp_path / "run"
    code = cli.main(["train", "--epochs", "2", "--limit", "40", "--batch-size", "16", "--learning-rate", "1e30",
                     "--run-dir", str(run_dir), "--quiet", *cli_helpers.TINY_MODEL])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    # the loss of a batch, or the weights of the first backup (after an update whose loss was finite)
    assert err.startswith("keras-capsules: error: training diverged: "), err
    assert "start a new run (a new --run-dir)" in err
    assert not (run_dir / "model.keras").exists() and not (run_dir / "metrics.json").exists()
    # Audit (2026-11-30): diverged before its first backup, the run took its record back
    # but left history.csv and logs/: a run of another application was let in.
    assert (run_dir / "history.csv").exists() and (run_dir / "logs").is_dir()
    assert fault_tolerance.folder_contents(str(run_dir))["train"] == "demo"
    with pytest.raises(fault_tolerance.FolderInUseError, match="holds the run of demo"):
        fault_tolerance.check_train_folder(str(run_dir), "music")


def _strict_json(text):
    def refuse(constant):
        raise ValueError(f"not standard JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_metrics_json_is_standard_json_with_null_for_numbers_that_are_not_finite(tmp_path):
    # metrics.json held bare NaN (Python's json default), which jq and JSON.parse refuse.
    metrics = {"loss": float("nan"), "errors": (0.5, float("inf"), np.float32("-inf")),
               "nested": {"ami": np.float64("nan"), "count": np.int64(3), "name": "x", "none": None},
               "accuracy": np.float32(0.25)}
    path = tmp_path / "metrics.json"
    fault_tolerance.write_metrics_json(metrics, path)
    assert _strict_json(path.read_text()) == {
        "loss": None, "errors": [0.5, None, None],
        "nested": {"ami": None, "count": 3, "name": "x", "none": None}, "accuracy": 0.25,
    }
    assert np.isnan(metrics["loss"])  # the caller's dict is left as it was
    # NumPy arrays (per-step errors) failed in json.dump, after the run had trained
    fault_tolerance.write_metrics_json({"per_step": np.array([[0.5, np.nan], [np.inf, 1]], "float32"),
                                        "counts": np.arange(3)}, path)
    assert _strict_json(path.read_text()) == {"per_step": [[0.5, None], [None, 1.0]], "counts": [0, 1, 2]}


def test_train_writes_a_test_loss_that_is_not_finite_as_null_and_returns_it_as_nan(tmp_path, monkeypatch):
    real_compile = demo.compile_model

    def compile_with_nan_evaluation(model, learning_rate):
        model = real_compile(model, learning_rate)
        real_evaluate = model.evaluate

        def evaluate(*args, **kwargs):  # fit's validation (return_dict) as before; train's test pass NaN
            if kwargs.get("return_dict"):
                return real_evaluate(*args, **kwargs)
            return [float("nan"), 0.5]

        model.evaluate = evaluate
        return model

    monkeypatch.setattr(demo, "compile_model", compile_with_nan_evaluation)
    result = demo.train(str(tmp_path / "run"), epochs=1, batch_size=16, limit=40, verbose=0,
                        model_options=TINY_OPTIONS)
    assert np.isnan(result["test_loss"]) and result["test_accuracy"] == 0.5
    written = _strict_json(pathlib.Path(result["metrics"]).read_text())
    assert written["test_loss"] is None and written["test_accuracy"] == 0.5


@pytest.mark.skipif(os.name == "nt", reason="no flock")
def test_a_refused_train_writes_nothing_into_the_run_folder(crashed_demo_run, tmp_path, capsys):
    # Audit 82 (4): a train refused by the run's backup (a run another process trains, other
    # options, a backup beyond --epochs) was refused when fit began, after Keras' TensorBoard
    # callback had written an events file into <run>/logs/train/ (also into the logs of a
    # run that another process was training).
    from applications import __main__ as cli

    run_dir = _copy_of_crashed_run(crashed_demo_run, tmp_path)  # crashed in epoch 2 of 3, its lock released
    assert json.loads((run_dir / "backup" / "training_metadata.json").read_text())["epoch"] == 2

    def files():
        return {str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(run_dir.rglob("*")) if p.is_file()}

    def train(*changes):
        argv = ["train", "--epochs", "3", "--limit", "40", "--batch-size", "16", "--run-dir", str(run_dir),
                "--quiet", *cli_helpers.TINY_MODEL]
        for option, value in zip(changes[::2], changes[1::2]):
            argv[argv.index(option) + 1] = value
        return cli.main(argv)

    before = files()
    for changes, message in ((("--epochs", "1"), "already reached epoch 2"),
                             (("--filters", "4"), "is of a run with other options: --filters 8 (now 4)")):
        assert train(*changes) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert files() == before, changes
    other = _hold_lock(run_dir / "backup")
    try:
        before = files()
        assert train() == 2
        err = capsys.readouterr().err
        assert "is being trained by another process" in err and err.count("\n") == 1, err
        assert files() == before
    finally:
        other.kill()
        other.wait()
    # the same command resumes the run (and records its application)
    assert train() == 0, capsys.readouterr().err
    assert json.loads((run_dir / "metrics.json").read_text())["resumed_from_epoch"] == 2
    assert fault_tolerance.folder_contents(str(run_dir)) == {"train": "demo", "tune": None}


def _ema_fit(backup_dir, statistics, crash_at=None):
    from keras_capsules.callbacks import swap_ema_weights

    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8), keras.layers.BatchNormalization(),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9), "mse")
    batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 32, 8)] if statistics else None
    swap = swap_ema_weights(batches, swap_on_epoch=True, **({"statistics_steps": 4} if statistics else {}))
    # the swap before the backup: the order the swap's docstring asks of ModelCheckpoint
    callbacks = [swap, fault_tolerance.AtomicBackupAndRestore(str(backup_dir), delete_checkpoint=False)]
    callbacks += [cli_helpers.CrashAt(*crash_at)] if crash_at else []
    model.fit(x, y, batch_size=8, epochs=4, verbose=0, shuffle=False, callbacks=callbacks)
    return model


@pytest.mark.parametrize("statistics", [False, True])
def test_a_run_with_an_ema_swap_before_its_backup_resumes_as_the_uninterrupted_one(tmp_path, statistics):
    # Audit (2026-12-01): with the swap (swap_on_epoch) before the backup, the epoch's
    # backup held the average as the trained weights (and the average's statistics), and
    # the resumed run trained on from the average: 0.04 off the uninterrupted run.
    whole = _ema_fit(tmp_path / "whole", statistics)
    with pytest.raises(RuntimeError, match="simulated"):
        _ema_fit(tmp_path / "resumed", statistics, crash_at=(2, 1))
    resumed = _ema_fit(tmp_path / "resumed", statistics)
    assert cli_helpers.max_weight_difference(whole, resumed) == 0.0
    for a, b in zip(whole.weights, resumed.weights, strict=True):  # the statistics too
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


@pytest.mark.parametrize("application", ["sort_of_clevr", "smallnorb", "sst", "demo", "music"])
def test_a_backup_records_epochs_where_it_shapes_what_the_run_trains(application):
    # Audit s65: sort_of_clevr spreads --steps over --epochs, sst and smallnorb stretch
    # their one-cycle schedule over them: a resume with another --epochs trained batches
    # twice (32 steps where metrics.json said 24) or jumped to another learning rate.
    import argparse

    from applications import arguments

    args = argparse.Namespace(application=application, command="train", epochs=4, seed=0, run_dir="runs/x",
                              quiet=True)
    options = arguments.run_options(args)
    assert options.get("seed") == 0 and "run_dir" not in options and "quiet" not in options
    assert ("epochs" in options) == (application in ("sort_of_clevr", "smallnorb", "sst"))


def test_a_backup_records_the_precision_in_force_when_training_begins(tmp_path):
    # (2026-12-07) The precision was read when resumable_callbacks made the callback: one
    # made under float32 and trained under mixed_bfloat16 recorded float32, and a resume
    # under float32 was not refused. Now its on_train_begin records the policy of the fit
    # (here with no application's train around it), and compares it with the backup's.
    # (eager, under 1 s: a Dense layer, 2 epochs of one step)
    from applications import arguments

    backup_dir = tmp_path / "run" / "backup"
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 3)).astype("float32"), rng.random((4, 2)).astype("float32")

    def fit(precision, *extra):
        callback = fault_tolerance.AtomicBackupAndRestore(str(backup_dir), delete_checkpoint=False,
                                                          run_options={"seed": 0})  # made under float32
        with arguments.precision_policy(precision):
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile(optimizer="sgd", loss="mse")
            model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[callback, *extra])
        return callback

    def recorded():
        return json.loads((backup_dir / "training_metadata.json").read_text())["options"]

    with pytest.raises(RuntimeError, match="simulated"):
        fit("mixed_bfloat16", cli_helpers.CrashAt(1))
    assert recorded() == {"seed": 0, "precision": "mixed_bfloat16"}
    # an application's train reads the backup under its precision before fit, and refuses it
    # there (before fit's callbacks write anything): resume_epoch, record_data
    callback = fault_tolerance.AtomicBackupAndRestore(str(backup_dir), run_options={"seed": 0})
    for check in (lambda: fault_tolerance.resume_epoch([callback], 2),
                  lambda: fault_tolerance.record_data([callback], idx_layout="t10k")):
        with arguments.precision_policy("mixed_bfloat16"):
            check()
        with pytest.raises(fault_tolerance.BackupMismatchError, match=r"--precision mixed_bfloat16 \(now float32\);"):
            check()
    for other in ("float32", "mixed_float16"):
        with pytest.raises(fault_tolerance.BackupMismatchError) as error:
            fit(other)
        message = str(error.value)
        assert f"other options: --precision mixed_bfloat16 (now {other});" in message and "\n" not in message, message
        assert fault_tolerance.backup_epoch(str(backup_dir)) == 1 and recorded()["precision"] == "mixed_bfloat16"
    assert fit("mixed_bfloat16").restored_epoch == 1
    assert fault_tolerance.backup_epoch(str(backup_dir)) == 2 and recorded()["precision"] == "mixed_bfloat16"
    # a backup made before the precision was recorded trained in float32: resumed under it only
    metadata = json.loads((backup_dir / "training_metadata.json").read_text())
    (backup_dir / "training_metadata.json").write_text(json.dumps({**metadata, "options": {"seed": 0}}))
    with pytest.raises(fault_tolerance.BackupMismatchError, match=r"--precision float32 \(now mixed_float16\);"):
        fit("mixed_float16")
    assert fit("float32").restored_epoch == 2 and recorded() == {"seed": 0}


def test_callbacks_made_inside_a_train_refuse_another_precision_at_once(tmp_path):
    # Inside an application's train (arguments.trains_under_precision; the command line's
    # runs too) the policy in force is the run's: resumable_callbacks refuses a backup of
    # another precision before the train reads its data or writes anything. Outside (a
    # user's callbacks made before train(precision=...)) it cannot know, and does not refuse.
    from applications import arguments

    run_dir = tmp_path / "run"
    backup_dir = run_dir / "backup"
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 3)).astype("float32"), rng.random((4, 2)).astype("float32")
    with arguments.precision_policy("mixed_bfloat16"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
        callback = fault_tolerance.AtomicBackupAndRestore(str(backup_dir), delete_checkpoint=False,
                                                          run_options={"seed": 0})
        with pytest.raises(RuntimeError, match="simulated"):
            model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[callback, cli_helpers.CrashAt(1)])

    @arguments.trains_under_precision
    def train(precision=None):
        return fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0}, epochs=2)

    for other in (None, "float32", "mixed_float16"):
        with pytest.raises(fault_tolerance.BackupMismatchError,
                           match=rf"--precision mixed_bfloat16 \(now {other or 'float32'}\);"):
            train(precision=other)
        assert keras.config.dtype_policy().name == "float32"
    assert train(precision="mixed_bfloat16")
    assert not arguments.policy_is_final()
    # outside a train: not compared yet (resume_epoch and the fit compare it)
    callbacks = fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0}, epochs=2)
    with pytest.raises(fault_tolerance.BackupMismatchError, match=r"--precision mixed_bfloat16 \(now float32\);"):
        fault_tolerance.resume_epoch(callbacks, 2)
    assert fault_tolerance.backup_epoch(str(backup_dir)) == 1


def test_an_option_a_backup_did_not_record_because_it_was_free_then_is_no_difference(tmp_path):
    # Backups of sst made before --epochs was recorded still resume; a recorded --epochs
    # that differs, or an unrecorded option that was never free, is still refused.
    backup = tmp_path / "run" / "backup"
    backup.mkdir(parents=True)

    def check(saved, now):
        (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "options": saved}))
        fault_tolerance._check_backup_options(str(backup), now)

    check({"seed": 0}, {"seed": 0, "epochs": 4})
    with pytest.raises(fault_tolerance.BackupMismatchError, match=r"other options: --epochs 6 \(now 4\);"):
        check({"seed": 0, "epochs": 6}, {"seed": 0, "epochs": 4})
    with pytest.raises(fault_tolerance.BackupMismatchError, match=r"--learning-rate"):
        check({"seed": 0}, {"seed": 0, "learning_rate": 0.1})


def _optimizer_steps(path):
    return int(keras.models.load_model(str(path)).optimizer.iterations)


def test_a_run_killed_mid_epoch_with_save_freq_resumes_exactly_where_its_backup_was_made(tmp_path):
    # s65 audit: with --save-freq N, the rerun restored the weights after step s of epoch k
    # and trained epoch k again from its first batch (demo: 20 optimizer steps for 18, and
    # other weights). Now its stream skips the s batches, the epoch runs the rest, and the
    # epoch's logged means go on from the backup's: the uninterrupted run, bit for bit.
    common = dict(epochs=2, batch_size=8, limit=40, verbose=0, model_options=TINY_OPTIONS, save_freq=3)
    steps = demo.training_batches(40, 8)
    assert steps == 4  # so a backup every 3 steps falls after step 2 of epoch 1 (step 6)
    whole = demo.train(str(tmp_path / "whole"), **common)
    run_dir = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="simulated"):
        demo.train(str(run_dir), callbacks=[cli_helpers.CrashAt(1, 3)], **common)
    metadata = json.loads((run_dir / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] == 1
    counter = cli_helpers.CountBatches()
    resumed = demo.train(str(run_dir), callbacks=[counter], **common)
    assert resumed["resumed_from_epoch"] == 1
    assert counter.batches == 2 * steps - 6, "the steps the backup had trained were trained again"
    assert metadata["epoch_steps"] == 2
    assert _optimizer_steps(resumed["model"]) == _optimizer_steps(whole["model"]) == 2 * steps
    assert cli_helpers.max_weight_difference(whole["model"], resumed["model"]) == 0.0
    assert (run_dir / "history.csv").read_text() == (tmp_path / "whole" / "history.csv").read_text()


def _stream_fit(run_dir, crash_at=None, save_freq=3):
    """A fit of 10 steps over 3 epochs (4, 3, 3: ``spread_steps``) on an endless stream
    whose batch ``i`` is drawn from ``i`` (as Sort-of-CLEVR's), resumable in ``run_dir``."""
    import tensorflow as tf

    from applications.training import spread_steps

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dropout(0.3),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse", metrics=["mae"])
    callbacks = fault_tolerance.resumable_callbacks(str(run_dir), save_freq=save_freq)
    per_epoch, epoch_steps = spread_steps(10, 3)

    def batch(i):
        x = tf.random.stateless_normal([8, 3], tf.stack([i, tf.constant(0, tf.int64)]))
        return x, tf.reduce_sum(x, axis=1, keepdims=True)

    start = epoch_steps.steps_before(fault_tolerance.resume_epoch(callbacks, 3))
    stream = fault_tolerance.skip_trained_steps(tf.data.Dataset.counter(start).map(batch), callbacks, 3)
    counter = cli_helpers.CountBatches()
    extra = [cli_helpers.CrashAt(*crash_at)] if crash_at else []
    history = model.fit(stream, steps_per_epoch=per_epoch, epochs=3, verbose=0,
                        callbacks=[epoch_steps, *callbacks, counter, *extra])
    return model, history, counter.batches


@pytest.mark.parametrize("save_freq, crash_at, backed_up", [
    (3, (1, 2), (1, 2)),  # backups after steps 3 and 6: the second one 2 steps into epoch 1
    (4, (2, 1), (2, 1)),  # after step 8, 1 step into epoch 2
    (4, (1, 1), (1, 0)),  # step 4 is epoch 0's last: backed up at its end (with its logs)
])
def test_a_resumed_stream_skips_the_steps_of_a_mid_epoch_backup_in_epochs_of_uneven_steps(
        tmp_path, save_freq, crash_at, backed_up):
    whole, whole_history, trained = _stream_fit(tmp_path / "whole", save_freq=save_freq)
    assert trained == 10
    with pytest.raises(RuntimeError, match="simulated"):
        _stream_fit(tmp_path / "run", crash_at, save_freq)
    metadata = json.loads((tmp_path / "run" / "backup" / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata["epoch_steps"]) == backed_up
    assert ("metric_states" in metadata) == (backed_up[1] > 0)
    model, history, trained = _stream_fit(tmp_path / "run", save_freq=save_freq)
    assert trained == 10 - [4, 7][backed_up[0] - 1] - backed_up[1]
    assert int(model.optimizer.iterations) == int(whole.optimizer.iterations) == 10
    assert cli_helpers.max_weight_difference(whole, model) == 0.0
    for key, values in history.history.items():  # the resumed epoch's means: of all its steps
        assert values == whole_history.history[key][backed_up[0]:], key


def test_a_mid_epoch_backup_is_refused_for_data_that_cannot_skip_its_steps(tmp_path):
    import tensorflow as tf

    with pytest.raises(RuntimeError, match="simulated"):
        _stream_fit(tmp_path, (1, 2))
    callbacks = fault_tolerance.resumable_callbacks(str(tmp_path), save_freq=3)
    one_epoch = tf.data.Dataset.range(4)  # iterated again every epoch: its first steps cannot go once
    with pytest.raises(ValueError, match=r"made 2 step\(s\) into epoch 2, and this training data is not an endless"):
        fault_tolerance.skip_trained_steps(one_epoch, callbacks, 3)
    assert callbacks[0].skipped_steps == 0
    stream = one_epoch.repeat()
    assert fault_tolerance.skip_trained_steps(stream, callbacks, 3).take(1).get_single_element() == 2
    assert fault_tolerance.skip_trained_steps(stream, callbacks, 1) is stream  # a backup beyond 1 epoch: refused later


def test_a_stream_cut_for_another_backup_than_the_one_restored_is_refused(tmp_path):
    import tensorflow as tf

    with pytest.raises(RuntimeError, match="simulated"):
        _stream_fit(tmp_path, (1, 2))
    callbacks = fault_tolerance.resumable_callbacks(str(tmp_path), save_freq=3)
    stream = fault_tolerance.skip_trained_steps(tf.data.Dataset.from_tensors((np.ones((8, 3)), np.ones((8, 1)))).repeat(),
                                                callbacks, 3)
    path = tmp_path / "backup" / "training_metadata.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "epoch_steps": 1}))  # another process's backup since
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse", metrics=["mae"])
    with pytest.raises(fault_tolerance.BackupMismatchError, match="skip 2 batch\\(es\\) of epoch 2, but its backup has "
                                                                   "trained 1 of them"):
        model.fit(stream, steps_per_epoch=4, epochs=3, verbose=0, callbacks=callbacks)
    assert callbacks[0].skipped_steps == 0 and model._initial_epoch is None
    assert (tmp_path / "backup").is_dir()


def test_record_data_checks_the_backup_at_once_and_a_backup_without_the_record_resumes(tmp_path):
    # (the occluded and textured MNIST trains record their folder's IDX split: see
    # test_occluded_mnist's test_a_backup_on_a_t10k_split_is_not_resumed_once_train_files_are_beside_it)
    backup_dir = tmp_path / fault_tolerance.BACKUP_DIR
    backup_dir.mkdir()

    def backup(options):
        (backup_dir / "training_metadata.json").write_text(json.dumps({"epoch": 1, "options": options}))
        return fault_tolerance.AtomicBackupAndRestore(str(backup_dir), run_options={"seed": 1})

    callback = backup({"seed": 1, "idx_layout": "t10k"})
    fault_tolerance.record_data([callback], idx_layout="t10k")
    assert callback.run_options == {"seed": 1, "idx_layout": "t10k"}
    with pytest.raises(fault_tolerance.BackupMismatchError, match=r"other data: the data folder's MNIST split t10k "
                                                                  r"\(now train\+t10k\)"):
        fault_tolerance.record_data([backup({"seed": 1, "idx_layout": "t10k"})], idx_layout="train+t10k")
    # a backup of an earlier version recorded none: resumed unchecked on it, as before
    fault_tolerance.record_data([backup({"seed": 1})], idx_layout="train+t10k")
    # another option still counts, and is named as a command line's
    with pytest.raises(fault_tolerance.BackupMismatchError, match=r"other options: --seed 2 \(now 1\)"):
        fault_tolerance.record_data([backup({"seed": 2, "idx_layout": "t10k"})], idx_layout="t10k")
    with pytest.raises(ValueError, match=r"Received: \['layout'\]"):
        fault_tolerance.record_data([callback], layout="t10k")
    fault_tolerance.record_data([keras.callbacks.History()], idx_layout="t10k")  # no backup: nothing to record


def test_a_backup_compares_its_data_by_fingerprint_wherever_the_data_are(tmp_path):
    # A backup recorded the data folder's path (demo), or nothing of it: the same files in
    # another folder were refused, other files resumed. The fingerprint of the data is
    # compared without the folder; a backup of an earlier version (demo's path, or no
    # fingerprint) still resumes.
    from applications.mnist_digits import idx_fingerprint
    from tests.applications.mnist_folders import mnist_folder, other_t10k_folder

    backup = tmp_path / "run" / "backup"
    backup.mkdir(parents=True)
    first, other = idx_fingerprint(mnist_folder(tmp_path / "first")), idx_fingerprint(other_t10k_folder(tmp_path / "o"))
    moved = idx_fingerprint(mnist_folder(tmp_path / "moved"))

    def check(saved, now):
        (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "options": saved}))
        fault_tolerance._check_backup_options(str(backup), now)

    check({"seed": 0, "data_fingerprint": first}, {"seed": 0, "data_fingerprint": moved})
    with pytest.raises(fault_tolerance.BackupMismatchError, match=re.escape(
            f"is of a run on other data: MNIST IDX files in {tmp_path / 'first'} (now MNIST IDX files in "
            f"{tmp_path / 'o'}, where t10k-images-idx3-ubyte.gz differs, t10k-labels-idx1-ubyte.gz differs); "
            "put the data folder back")):
        check({"seed": 0, "data_fingerprint": first}, {"seed": 0, "data_fingerprint": other})
    check({"seed": 0}, {"seed": 0, "data_fingerprint": other})  # (an earlier version's backup)
    check({"seed": 0, "data_dir": str(tmp_path / "first")}, {"seed": 0, "data_fingerprint": moved})  # demo's
