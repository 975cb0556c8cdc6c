"""Fault tolerance: atomic writes and training that resumes after a crash.

* :func:`atomic_write` writes a file through a temporary file in the same directory
  and ``os.replace``: a reader sees the old complete file or the new complete file,
  never a half-written one, whatever happens mid-write (exception, SIGKILL, power cut
  after the ``fsync``). :func:`save_model_atomically` and :func:`write_json_atomically`
  use it, as do :func:`save_figure_atomically` and :class:`AtomicModelCheckpoint`, Keras' ``ModelCheckpoint``
  whose every save replaces the file atomically (``applications.training.run_callbacks``).
* :class:`AtomicBackupAndRestore` is ``keras.callbacks.BackupAndRestore`` with atomic
  writes of its two files (``latest.weights.h5`` and ``training_metadata.json``) and a
  record of the epoch it resumed from. Training that uses it (``train`` of every
  application, via :func:`resumable_callbacks`) writes its state to
  ``<run_dir>/backup`` every epoch (or every N steps: ``--save-freq N``). Running the
  same command again after a crash restores the weights and optimizer state and
  continues at the epoch after the last one saved; a mid-epoch backup (``--save-freq
  N``) restarts its epoch from the first step with the saved weights. The backup is
  deleted when training finishes.
* ``history.csv`` (a ``CSVLogger`` in append mode) keeps one row per finished epoch
  across restarts; a fresh run (no backup) starts it again.
* :class:`HangForTest` is a test-only callback (hidden option ``--test-hang-at``)
  that stops training in the middle of an epoch until the process is killed.
"""

import json
import numbers
import os
import time

import keras

BACKUP_DIR = "backup"
HISTORY_CSV = "history.csv"


def atomic_write(path, write):
    """Calls ``write(tmp_path)`` then moves ``tmp_path`` onto ``path`` atomically.

    ``tmp_path`` is in the directory of ``path`` (so ``os.replace`` is a rename on one
    file system) and ends with the base name of ``path`` (so suffix checks such as
    Keras' ``.keras`` / ``.weights.h5`` pass). If ``write`` raises, the temporary file
    is removed and ``path`` is left as it was. The directory is synced after the
    rename (where the system allows it), so the new file survives a power cut.
    """
    path = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{base}")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_directory(directory)  # the rename itself survives a power cut too


def _fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a directory: nothing to sync there
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def save_model_atomically(model, path):
    """``model.save(path)`` (a ``.keras`` file) that never leaves a corrupt file at ``path``."""
    atomic_write(path, model.save)


def write_json_atomically(data, path):
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)

    atomic_write(path, write)


def save_figure_atomically(fig, path, **savefig_kwargs):
    """``fig.savefig(path, ...)`` (format from the suffix of ``path``) through :func:`atomic_write`."""
    atomic_write(path, lambda tmp: fig.savefig(tmp, **savefig_kwargs))


class AtomicModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """``keras.callbacks.ModelCheckpoint`` whose saves go through :func:`atomic_write`.

    Same arguments and choice of when to save (``monitor``, ``save_best_only``,
    ``save_freq``, ...); a crash or an error in the middle of a save leaves the last
    complete checkpoint at ``filepath`` and no temporary file.
    """

    def _save_model(self, epoch, batch, logs):
        filepath = self._get_file_path(epoch, batch, logs)
        if not self._should_save_model(epoch, batch, logs, filepath):
            return
        if self.save_weights_only:
            atomic_write(filepath, lambda tmp: self.model.save_weights(tmp, overwrite=True))
        else:
            save_model_atomically(self.model, filepath)
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished saving model to {filepath}")


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` whose files are replaced atomically.

    Unlike Keras' callback, it can be used for several ``fit`` calls of one model, and
    a mid-epoch backup records the epoch it was made in (Keras' records the epoch of
    an earlier ``fit``, or 0 in a new process or a ``fit(initial_epoch=...)``, until the
    first epoch ends, so a crash in a resumed run restarted training from that epoch).

    Attributes:
        restored_epoch: the epoch training resumed at (0 for a fresh start), set by
            ``on_train_begin``.
    """

    restored_epoch = 0

    def on_train_begin(self, logs=None):
        # Keras never clears the epoch a restore sets: an earlier fit's would apply here.
        self.model._initial_epoch = None
        super().on_train_begin(logs)
        self.restored_epoch = int(self.model._initial_epoch or 0)
        # The epoch that backups record until the first epoch of this fit ends.
        self._current_epoch = self.restored_epoch
        self._last_batch_seen = 0
        self._batches_seen_since_last_saving = 0

    def on_epoch_begin(self, epoch, logs=None):
        # Also right when fit starts at its own initial_epoch (Keras knew only restored epochs).
        self._current_epoch = epoch

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        # A later fit of the model (with or without this callback) starts at its own initial_epoch.
        self.model._initial_epoch = None

    def _save_model(self):
        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint:
            for src, dst in (
                (self._weights_path, self._prev_weights_path),
                (self._training_metadata_path, self._prev_training_metadata_path),
            ):
                if os.path.exists(src):
                    atomic_write(dst, lambda tmp, src=src: _copy(src, tmp))
        atomic_write(self._weights_path, lambda tmp: self.model.save_weights(tmp, overwrite=True))
        # Weights first, then the epoch: a crash between the two repeats one epoch
        # with newer weights, it never skips one.
        write_json_atomically(
            {"epoch": self._current_epoch, "batch": self._last_batch_seen},
            self._training_metadata_path,
        )


def _copy(src, dst):
    import shutil

    shutil.copyfile(src, dst)


def backup_exists(run_dir):
    return os.path.exists(os.path.join(run_dir, BACKUP_DIR, "training_metadata.json"))


def resumable_callbacks(run_dir, save_freq="epoch"):
    """``[AtomicBackupAndRestore, CSVLogger]`` for a run in ``run_dir``.

    Args:
        run_dir: the run directory (backup in ``run_dir/backup``, log in
            ``run_dir/history.csv``).
        save_freq: ``"epoch"`` or a number of steps between backups.

    A fresh run (no backup in ``run_dir``) truncates ``history.csv``; a resumed run
    appends to it.
    """
    # Keras took 0 (or True, or -3) as "back up after every batch" and refused np.int64.
    if save_freq != "epoch" and (
        isinstance(save_freq, bool) or not isinstance(save_freq, numbers.Integral) or save_freq < 1
    ):
        raise ValueError(f"`save_freq` must be 'epoch' or a positive number of steps. Received: save_freq={save_freq!r}")
    save_freq = save_freq if save_freq == "epoch" else int(save_freq)
    csv_path = os.path.join(run_dir, HISTORY_CSV)
    if not backup_exists(run_dir) and os.path.exists(csv_path):
        os.remove(csv_path)
    return [
        AtomicBackupAndRestore(os.path.join(run_dir, BACKUP_DIR), save_freq=save_freq),
        keras.callbacks.CSVLogger(csv_path, append=True),
    ]


def read_history_csv(path):
    """``{metric: [value per epoch]}`` and the epoch numbers from a ``CSVLogger`` file."""
    import csv

    history, epochs = {}, []
    if not os.path.exists(path):
        return history, epochs
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            epochs.append(int(row.pop("epoch")))
            for key, value in row.items():
                history.setdefault(key, []).append(float(value) if value not in ("", None) else float("nan"))
    return history, epochs


class HangForTest(keras.callbacks.Callback):
    """Test only: in epoch ``epoch`` after batch ``batch``, write ``marker`` and wait.

    The wait lasts until the process is killed, or ``timeout`` seconds (then it raises,
    so that a forgotten process stops by itself). It happens once per run directory:
    when ``marker`` exists already (a restarted run), the callback does nothing.
    """

    def __init__(self, epoch, batch, marker, timeout=300.0):
        super().__init__()
        self.epoch, self.batch, self.marker, self.timeout = int(epoch), int(batch), marker, timeout
        self._current_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self._current_epoch != self.epoch or batch != self.batch or os.path.exists(self.marker):
            return
        write_json_atomically({"epoch": self.epoch, "batch": self.batch, "pid": os.getpid()}, self.marker)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"HangForTest: not killed within {self.timeout} s")
