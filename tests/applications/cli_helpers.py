"""Helpers for tests that run the command line in subprocesses (bounded in time)."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

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


def start(args, log_path, **extra_env):
    """Starts ``python <args>`` in its own process group, output to ``log_path``."""
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=str(REPO), env=env(**extra_env),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    proc.log_file = log
    proc.log_path = log_path
    return proc


def kill(proc, sig=signal.SIGKILL):
    """Kills ``proc``'s process group (it was started in a session of its own)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
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
