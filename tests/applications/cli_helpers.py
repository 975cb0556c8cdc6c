"""Helpers for tests that run the command line in subprocesses (bounded in time), and
:class:`CrashAt`, the crash of an in-process training run that a resume test restarts."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import keras

REPO = pathlib.Path(__file__).resolve().parents[2]

# A model small enough for subprocess tests on a loaded 2-core machine.
TINY_MODEL = ["--filters", "8", "--primary-capsules", "2", "--hidden-capsules", "4",
              "--pose-size", "2", "--n-iters", "2"]


def env(**extra):
    environment = dict(os.environ)
    environment.update(
        PYTHONPATH=str(REPO) + (os.pathsep + environment["PYTHONPATH"] if environment.get("PYTHONPATH") else ""),
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        KERAS_BACKEND="tensorflow",
        PYTHONUNBUFFERED="1",
    )
    environment.update(extra)
    return environment


def _default_ctrl_c():
    # A job started in the background without job control (``cmd &`` in a script,
    # ``nohup``) inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt: give the child the terminal's default, as a user has it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args, log_path, **extra_env):
    """Starts ``python <args>`` in its own process group, output to ``log_path``.

    The child gets SIGINT's default action whatever this process inherited, so
    that a test can send it what Ctrl-C sends.
    """
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=str(REPO), env=env(**extra_env),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_default_ctrl_c,
    )
    proc.log_file = log
    proc.log_path = log_path
    return proc


def kill(proc, sig=signal.SIGKILL):
    """Sends ``sig`` to ``proc``'s process group (it was started in a session of its own)
    and waits for it; if it is still running after 60 s, kills it and fails."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        if sig != signal.SIGKILL:
            kill(proc)
        raise AssertionError(f"still running 60 s after signal {sig!r}:\n{tail(proc)}")
    finally:
        proc.log_file.close()


def wait(proc, timeout):
    """Waits for ``proc``; kills it and fails when it runs longer than ``timeout`` s."""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        raise AssertionError(f"timed out after {timeout} s:\n{tail(proc)}")
    proc.log_file.close()
    return code


def tail(proc, lines=40):
    with open(proc.log_path, "rb") as f:
        return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])


def wait_for_file(path, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended ({proc.returncode}) before {path} appeared:\n{tail(proc)}")
        time.sleep(0.2)
    kill(proc)
    raise AssertionError(f"{path} did not appear within {timeout} s:\n{tail(proc)}")


def free_ports(n):
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_workers(args_of, log_dir, n=2, timeout=300):
    """Runs ``n`` worker processes of one ``MultiWorkerMirroredStrategy`` cluster on
    local ports: worker ``i`` runs ``args_of(i)`` (see :func:`start`) with its
    ``TF_CONFIG`` and logs to ``log_dir/worker<i>.log``. Asserts that every worker
    exits with 0; kills any left running."""
    import json

    ports = free_ports(n)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    procs = []
    try:
        for index in range(n):
            tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            procs.append(start(args_of(index), pathlib.Path(log_dir) / f"worker{index}.log", TF_CONFIG=tf_config))
        for proc in procs:
            assert wait(proc, timeout=timeout) == 0, tail(proc)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill(proc)


class CrashAt(keras.callbacks.Callback):
    """Raises ``RuntimeError("crash (simulated)")`` after batch ``batch`` of epoch
    ``epoch`` (after the callbacks before it in the list ran, e.g. a backup)."""

    def __init__(self, epoch, batch=0):
        super().__init__()
        self.at, self._epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self._epoch, batch) == self.at:
            raise RuntimeError("crash (simulated)")


def crash_and_resume(train, run_dir, crash_at, **kwargs):
    """Runs ``train(run_dir=..., callbacks=[CrashAt(*crash_at)], **kwargs)``, which must
    crash, then the same call without the crash (it resumes from the backup); returns
    what the second call returned."""
    import pytest

    with pytest.raises(RuntimeError, match="simulated"):
        train(run_dir=str(run_dir), callbacks=[CrashAt(*crash_at)], **kwargs)
    return train(run_dir=str(run_dir), **kwargs)


def max_weight_difference(model_a, model_b):
    """The largest absolute difference between two models' weights (same layout), or
    ``inf`` when the layouts differ. Paths are loaded with ``keras.models.load_model``."""
    import numpy as np

    a, b = (keras.models.load_model(str(m)) if isinstance(m, (str, os.PathLike)) else m for m in (model_a, model_b))
    wa, wb = a.get_weights(), b.get_weights()
    if len(wa) != len(wb) or any(x.shape != y.shape for x, y in zip(wa, wb)):
        return float("inf")
    return max((float(np.max(np.abs(x - y))) if x.size else 0.0 for x, y in zip(wa, wb)), default=0.0)


class CountBatches(keras.callbacks.Callback):
    """Counts the training batches (``batches``) of the ``fit`` calls it is given to, or
    with ``mode="test"`` the batches of their validation (and of ``evaluate``)."""

    def __init__(self, mode="train"):
        super().__init__()
        if mode not in ("train", "test"):
            raise ValueError(f"mode must be 'train' or 'test'. Received: mode={mode!r}")
        self.mode = mode
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        if self.mode == "train":
            self.batches += 1

    def on_test_batch_end(self, batch, logs=None):
        if self.mode == "test":
            self.batches += 1


def crash_when_saving_after_fit(monkeypatch, name=None):
    """Makes the first model save after a ``fit`` ends raise ``RuntimeError("crash
    (simulated)")``: the crash between the end of training and the final model file.

    Returns the callback that tells the end of ``fit``: give it to the ``fit``. Saves
    during ``fit`` (checkpoints) go through, and with ``name`` those to other files.
    """
    from applications import fault_tolerance

    save = fault_tolerance.save_model_atomically

    class FitEnded(keras.callbacks.Callback):
        ended = False

        def on_train_end(self, logs=None):
            FitEnded.ended = True

    def crashing_save(model, path):
        if FitEnded.ended and (name is None or os.path.basename(path) == name):
            raise RuntimeError("crash (simulated)")
        save(model, path)

    monkeypatch.setattr(fault_tolerance, "save_model_atomically", crashing_save)
    return FitEnded()


def start_cache_workers(application, cache, source, folder, processes=2, hang=False):
    """Starts ``processes`` runs of ``tests/applications/cache_worker.py`` that build the
    same ``application`` cache (``"sst"``: ``source`` is a preset folder; ``"clevr"``: a
    TFDS folder for mock data) in ``cache`` at the same moment.

    Returns ``(procs, marks)``: the processes (logs in ``folder/cache-worker<i>.log``)
    and the folder where they mark their builds and save what they read.
    """
    marks = pathlib.Path(folder) / "marks"
    marks.mkdir()
    args = ["tests/applications/cache_worker.py", application, str(cache), str(marks), str(processes), str(source)]
    procs = [start(args + (["--hang"] if hang else []), pathlib.Path(folder) / f"cache-worker{i}.log")
             for i in range(processes)]
    return procs, marks


class PoisonWeightsAt(keras.callbacks.Callback):
    """Sets every trainable weight to NaN before batch ``batch`` of the first epoch: a
    run that diverges there, whatever its data and learning rate."""

    def __init__(self, batch=1):
        super().__init__()
        self.batch, self._first_epoch = batch, True

    def on_epoch_end(self, epoch, logs=None):
        self._first_epoch = False

    def on_train_batch_begin(self, batch, logs=None):
        if self._first_epoch and batch == self.batch:
            for weight in self.model.trainable_weights:
                weight.assign(keras.ops.full(weight.shape, float("nan"), weight.dtype))
