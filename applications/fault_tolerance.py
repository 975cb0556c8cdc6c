"""Fault tolerance: atomic writes and training that resumes after a crash.

* :func:`atomic_write` writes a file through a temporary file in the same directory
  and ``os.replace``: a reader sees the old complete file or the new complete file,
  never a half-written one, whatever happens mid-write (exception, SIGKILL, power cut
  after the ``fsync``). :func:`save_model_atomically` and :func:`write_json_atomically`
  (and :func:`write_metrics_json`, standard JSON for ``metrics.json``)
  use it, as do :func:`save_figure_atomically` and :class:`AtomicModelCheckpoint`, Keras' ``ModelCheckpoint``
  whose every save replaces the file atomically (``applications.training.run_callbacks``).
* :class:`AtomicBackupAndRestore` is ``keras.callbacks.BackupAndRestore`` with atomic
  writes of its two files (``latest.weights.h5`` and ``training_metadata.json``) and a
  record of the epoch it resumed from. Training that uses it (``train`` of every
  application, via :func:`resumable_callbacks`) writes its state to
  ``<run_dir>/backup`` every epoch (or every N steps: ``--save-freq N``). Running the
  same command again after a crash restores the weights and optimizer state and
  continues at the epoch after the last one saved; from a mid-epoch backup
  (``--save-freq N``), at the step after it: :func:`skip_trained_steps` drops the
  batches of that epoch that the backup had trained from the run's stream, and the
  callback ends that epoch after its remaining steps, its running metrics restored
  (the backup records how many steps of its epoch were done, and the metrics' states;
  a backup due at an epoch's last step is made at the epoch's end instead, so that a
  resumed epoch always has steps left). The backup
  outlives ``fit``: it is deleted by :func:`finish_run` once the application has
  written its outputs (model, metrics, plots), so that a crash between the end of
  ``fit`` and those writes loses nothing: the rerun restores the backup of all the
  epochs, trains nothing and writes the outputs. A rerun after a finished run (no
  backup left) starts a fresh run. A backup is never lost to a smaller ``--epochs``:
  when it already holds more epochs than asked for, training is refused
  (:class:`BackupAheadError`: pass ``--epochs N`` or more, or another run directory),
  and when it holds exactly the epochs asked for (a crash after the last epoch) the
  run trains nothing and writes its outputs from the backup.
  :func:`resume_epoch` tells, before ``fit``, the epoch a run will resume at: the
  applications' training data are endless streams of epochs, each shuffled (and its
  crops, mixup weights, transpositions or generated sequences drawn) from the run's
  seed and the epoch's number alone (``applications.distribute.epoch_stream``,
  started at that epoch; Sort-of-CLEVR's generated stream at the step after it; every
  application's then through :func:`skip_trained_steps`), so a resumed epoch trains on
  the batches of the uninterrupted run's, in the same order
  (not smallNORB's Python ``train`` with ``seed=None``: no seed to draw them from
  again; the command line always passes one). The backup also keeps the states of the
  layers' ``keras.random.SeedGenerator`` (dropout, noise), which ``save_weights``
  leaves out.
  (``tf.data``'s own reshuffling counts the iterators made, which a resumed process
  starts again: the resumed epochs saw the orders of epochs 0, 1, ... again.)
  One process at a time trains a run: from the start of its ``fit`` to
  :func:`finish_run`, it holds ``backup/.lock`` (an advisory ``flock``, released by
  the system when the process dies, however it dies), and another process that would
  train the same run meanwhile is refused (:class:`RunInUseError`, one line on the
  command line).
* ``history.csv`` (a ``CSVLogger`` in append mode) keeps one row per finished epoch
  across restarts (a resumed run drops the rows of the epochs it trains again); a
  fresh run (no backup) starts it again when its training begins. Each backup also
  holds the logs of every epoch done (in ``training_metadata.json``, written
  atomically with the epoch it resumes at), and a resumed run writes the rows
  missing from ``history.csv`` from them: a kill after an epoch's backup and before
  its row loses no row.
  :func:`logged_history` reads it back for the run's plots and summaries.
* :class:`KeepBestWeights` keeps the weights of the best epoch (lowest validation
  loss) and, given the backup folder, persists them beside the backup so that a
  resumed run still knows the best epoch from before the crash (also when the
  backup is older than the last improvement, as with ``--save-freq N``).
  :class:`ResumableReduceLROnPlateau` keeps ``ReduceLROnPlateau``'s patience,
  best value and cooldown beside the backup in the same way.
* :func:`atomic_write`'s temporary files name their process
  (``.tmp-PID@HOST-<name>``); a write removes the leftovers that processes of this
  host which died mid-write left for the same file.
* Caches that several processes build at once (the workers of ``--strategy
  multiworker`` share ``RUN_DIR/cache``; so do commands run with one ``--cache-dir``):
  :func:`build_lock` lets one process build an entry while the others wait and then
  read it, and :func:`publish_folder` publishes a folder written at its
  :func:`temporary_path` in one rename, the first complete one winning. A cache file
  goes through :func:`atomic_write`.
* What an output folder holds (:func:`folder_contents`): a ``train`` run (named by its
  :data:`RUN_RECORD`, which the command line writes through :func:`recorded_run`), a
  ``tune`` search (:data:`SEARCH_RECORD`), both or neither. ``train`` refuses a folder
  that holds a search or another application's run (:func:`check_train_folder`),
  ``tune`` one that holds a run (:func:`check_search_folder`), before either writes
  anything; :func:`resumable_callbacks` refuses what the backup would refuse (a run
  another process trains, other options, a backup beyond ``--epochs``) before it
  writes anything too (:func:`check_resumable`).
* :func:`release_traced_graphs` (called by :func:`resumable_callbacks`, so as every
  run begins, and by the searches' trials) lets earlier runs' traced steps and models
  go, which TensorFlow's gradient registry kept for the life of the process.
* :class:`HangForTest` is a test-only callback (hidden option ``--test-hang-at``)
  that stops training in the middle of an epoch until the process is killed.
"""

import contextlib
import errno
import json
import numbers
import os
import re
import socket
import time

import keras
import numpy as np

from applications.errors import CommandLineError, InputError
from applications.shared_data import describe_data, same_data
from keras_capsules import _graph_release
from keras_capsules.callbacks import trained_weights_in

BACKUP_DIR = "backup"
HISTORY_CSV = "history.csv"


def atomic_write(path, write):
    """Calls ``write(tmp_path)`` then moves ``tmp_path`` onto ``path`` atomically.

    ``tmp_path`` is in the directory of ``path`` (so ``os.replace`` is a rename on one
    file system) and ends with the base name of ``path`` (so suffix checks such as
    Keras' ``.keras`` / ``.weights.h5`` pass). If ``write`` raises, the temporary file
    is removed and ``path`` is left as it was. The directory is synced after the
    rename (where the system allows it), so the new file survives a power cut.

    ``tmp_path`` is ``.tmp-PID@HOST-<base name>``. A process killed mid-write leaves
    it behind; the next write to ``path`` removes such leftovers of processes of
    this host that are no longer running (never those of a live process, nor of
    another host, nor of another target).
    """
    path = os.path.abspath(os.fspath(path))
    tmp = temporary_path(path)
    try:
        write(tmp)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_directory(os.path.dirname(path))  # the rename itself survives a power cut too


_TMP_PREFIX = ".tmp-"
_HOST = socket.gethostname().replace(os.sep, "_")


def temporary_path(path):
    """The temporary name through which :func:`atomic_write` writes ``path``:
    ``.tmp-PID@HOST-<base name>`` in the directory of ``path`` (created if missing).

    The name is this process's own, also among the processes of other hosts that share
    the directory on a network disk (they may have the same pid). The temporaries that
    processes of this host, no longer running, left for ``path`` are removed first.
    """
    directory, base = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(directory, exist_ok=True)
    _remove_dead_temporaries(directory, base)
    return os.path.join(directory, f"{_TMP_PREFIX}{os.getpid()}@{_HOST}-{base}")


def publish_folder(tmp, path):
    """Renames the folder ``tmp`` (from :func:`temporary_path`) to ``path``, unless
    another writer published ``path`` first: then ``tmp`` is deleted and theirs kept.

    Readers see no ``path``, or a complete one that is never replaced under them. The
    files of ``tmp`` and ``tmp`` itself are synced to disk before the rename and the
    parent directory after it, so that ``path`` is complete after a power cut too.

    Returns:
        True if ``tmp`` became ``path``, False if another writer's ``path`` was kept.

    Raises:
        OSError: the rename's, when ``path`` is not a folder (a file in the way:
            ``NotADirectoryError``); ``tmp`` is then left to the caller.
    """
    tmp, path = os.fspath(tmp), os.fspath(path)
    for name in os.listdir(tmp):
        _fsync_file(os.path.join(tmp, name))
    _fsync_directory(tmp)
    try:
        os.replace(tmp, path)  # a folder never replaces a non-empty one: "Directory not empty"
    except OSError:
        if not os.path.isdir(path):  # (a file in the way is no folder another writer published)
            raise
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        return False
    _fsync_directory(os.path.dirname(os.path.abspath(path)))
    return True


@contextlib.contextmanager
def build_lock(path, verbose=0):
    """Lets one process at a time build ``path``, a file or folder that takes long to
    compute (a cache): the block runs holding an advisory ``flock`` on
    ``.lock-<base name>`` beside ``path``.

    A process that enters the block while another one holds the lock waits (saying so
    when ``verbose``), and should then look for ``path`` again before building it. The
    holder removes the lock file when it leaves the block, and the system releases the
    lock of a process that dies, however it dies: the next process then builds. A lock
    file of another user that this one may not write (a shared cache) is locked through
    a read-only descriptor. Where the file system has no locks (or Python has no
    ``fcntl``: Windows) the block runs unlocked, so builders must still publish atomically (:func:`atomic_write`,
    :func:`publish_folder`): the lock saves duplicated work, it does not keep the cache
    correct.
    """
    directory, base = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(directory, exist_ok=True)
    lock_path = os.path.join(directory, f"{LOCK_FILE}-{base}")
    f = _take_build_lock(lock_path, path, verbose)
    try:
        yield
    finally:
        if f is not None:
            try:  # removed while still held: a waiter then finds it gone and takes a fresh one
                os.remove(lock_path)
            except OSError:
                pass
            f.close()


def _take_build_lock(lock_path, path, verbose):
    """The open lock file ``lock_path``, locked for this process (waiting for its
    holder), or None when the file system cannot lock it."""
    try:
        import fcntl
    except ImportError:
        return None
    said = False
    while True:
        try:
            f = open(lock_path, "a+")
        except PermissionError as err:
            # another user's lock file (their mode, 0644 under umask 022) in a shared
            # cache: flock needs no write access, only the holder's name is not written
            try:
                f = open(lock_path)
            except FileNotFoundError:
                if os.access(os.path.dirname(lock_path), os.W_OK | os.X_OK):
                    continue  # removed by its holder meanwhile: a fresh one
                raise err from None  # a folder this user may not write: no lock file can be made
            except PermissionError:  # not even readable: unlocked, as without locks
                return None
        try:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                    raise
                if verbose and not said:
                    f.seek(0)
                    owner = f.read().strip() or "another process"
                    print(f"waiting for {owner} to finish writing {path}", flush=True)
                    said = True
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        except OSError:  # a file system without locks (ENOLCK, EOPNOTSUPP, ...): unlocked
            f.close()
            try:
                os.remove(lock_path)
            except OSError:
                pass
            return None
        except BaseException:  # e.g. Ctrl-C while waiting
            f.close()
            raise
        if _same_file(f, lock_path):
            if f.writable():
                f.seek(0)
                f.truncate()
                f.write(f"{os.getpid()}@{_HOST}\n")
                f.flush()
            return f
        f.close()  # the lock of a holder that has finished: take the next one


def _remove_dead_temporaries(directory, base):
    """Removes ``directory``'s temporaries of :func:`atomic_write` for ``base`` whose
    writer (a process of this host) is dead. Names without a host (``.tmp-PID-base``,
    before hosts were recorded) count as this host's."""
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
        return
    suffix = f"-{base}"
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith(_TMP_PREFIX) and name.endswith(suffix)):
            continue
        pid, _, host = name[len(_TMP_PREFIX) : -len(suffix)].partition("@")
        if not pid.isdigit() or (host and host != _HOST) or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path):  # a backup folder whose deletion was killed (AtomicBackupAndRestore.finish)
                import shutil

                shutil.rmtree(path)
            else:
                os.remove(path)
        except OSError:  # removed by another writer meanwhile, or not ours to remove
            pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, under another user
        return True
    return True


def _fsync_file(path):
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


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
    """``json.dump(data)`` to ``path`` (indented) through :func:`atomic_write`.

    Non-finite floats are written as Python's ``json`` writes them (``NaN``,
    ``Infinity``), which Python reads back; for files meant for any JSON reader use
    :func:`write_metrics_json`.
    """

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)

    atomic_write(path, write)


def finite_or_none(data):
    """``data`` (nested dicts, lists and tuples) with every NaN or infinite number
    (Python or NumPy float) replaced by ``None``, NumPy scalars by Python numbers and
    tuples and NumPy arrays by lists: a value that standard JSON can hold (an array
    failed in ``json.dump``, after the run had trained)."""
    if isinstance(data, np.ndarray):
        data = data.tolist()
    if isinstance(data, dict):
        return {key: finite_or_none(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite_or_none(value) for value in data]
    if isinstance(data, np.generic):
        data = data.item()
    if isinstance(data, float) and not np.isfinite(data):
        return None
    return data


def write_metrics_json(metrics, path):
    """Writes an application's ``metrics.json``: :func:`write_json_atomically` of
    :func:`finite_or_none` ``(metrics)``, so that the file is standard JSON (RFC 8259
    has no NaN or Infinity; ``jq``, JavaScript's ``JSON.parse`` and other readers
    refuse Python's ``NaN``). A metric that is not finite (a test loss that overflowed,
    a score of an empty split) is ``null`` in the file; the dict the application's
    ``train`` returns keeps the float.
    """

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(finite_or_none(metrics), f, indent=2, allow_nan=False)

    atomic_write(path, write)


def save_figure_atomically(fig, path, **savefig_kwargs):
    """``fig.savefig(path, ...)`` (format from the suffix of ``path``) through :func:`atomic_write`."""
    if savefig_kwargs.get("format") is None:
        # Without a format and a suffix, matplotlib writes to tmp + ".png", not to tmp.
        import matplotlib

        suffix = os.path.splitext(os.fspath(path))[1][1:]
        savefig_kwargs["format"] = suffix or matplotlib.rcParams["savefig.format"]
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


class BackupAheadError(CommandLineError, ValueError):
    """The backup of a run already holds more epochs than the run is asked to train."""


class BackupMismatchError(CommandLineError, ValueError):
    """A run's backup does not fit the model of the command that would resume it (its
    options changed since the crash): the backup is kept."""


class TrainingDivergedError(CommandLineError, FloatingPointError):
    """Training diverged: a batch's loss, or the weights a backup would keep, are not
    finite (NaN or infinite). Nothing of the diverged epoch is kept: the run's backup
    holds the last epoch (or step) whose weights were finite."""


# what the two messages of TrainingDivergedError tell the user to do
_DIVERGED_REMEDY = ("Lower the learning rate (--learning-rate), or look for NaN or infinite values in the data, "
                    "and start a new run (a new --run-dir)")


class StopOnDivergence(keras.callbacks.TerminateOnNaN):
    """Keras' ``TerminateOnNaN`` that ends ``fit`` with :class:`TrainingDivergedError`.

    Keras' callback either stops training quietly (the run then goes on to save and
    evaluate a NaN model, and writes ``NaN`` metrics) or raises a ``RuntimeError``
    (a traceback on the command line). This one raises a user error that says where
    training diverged and what to do (one line, exit code 2 on the command line), at
    the end of the first batch whose running loss is not finite: before the epoch's
    end, so the epoch's backup is not written (and :class:`AtomicBackupAndRestore`
    refuses to back up weights that are not finite). ``run_dir`` (optional): the
    run's folder, whose backup the message names.
    """

    def __init__(self, run_dir=None):
        super().__init__(raise_error=True)
        self.run_dir = run_dir
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.all(np.isfinite(loss)):
            kept = ""
            if self.run_dir and backup_exists(self.run_dir):
                kept = f"; the backup in {os.path.join(self.run_dir, BACKUP_DIR)} keeps what came before"
            raise TrainingDivergedError(
                f"training diverged: the loss became {loss} in epoch {self._epoch + 1}, batch {batch + 1}; "
                f"training stopped and nothing of this epoch was saved{kept}. {_DIVERGED_REMEDY}"
            )


class RunInUseError(CommandLineError, RuntimeError):
    """Another live process trains the run whose backup a ``fit`` would use."""


LOCK_FILE = ".lock"
_HELD = {}  # lock file path -> the open lock file of a lock this process holds


def _same_file(f, path):
    try:
        here, there = os.fstat(f.fileno()), os.stat(path)
    except OSError:
        return False
    return (here.st_ino, here.st_dev) == (there.st_ino, there.st_dev)


def _lock_backup(backup_dir):
    """Takes the lock of the run whose backup is ``backup_dir`` for this process
    (``backup_dir/.lock``, an advisory ``flock`` that the system releases when the
    process ends, however it ends). Taking it again in the same process is a no-op;
    a lock of another live process raises :class:`RunInUseError`."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock, no lock
        return
    path = os.path.join(os.path.abspath(backup_dir), LOCK_FILE)
    if path in _HELD:
        if _same_file(_HELD[path], path):
            return
        _release_backup(backup_dir)  # its folder was renamed away (a finish)
    for _ in range(10):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                f.close()  # a file system without locks (ENOLCK, EOPNOTSUPP, ...): train unlocked, as before
                return
            f.seek(0)  # held by another process
            owner = f.read().strip() or "unknown"
            f.close()
            run_dir = os.path.dirname(os.path.abspath(backup_dir))
            raise RunInUseError(
                f"the run in {run_dir} is being trained by another process (pid@host {owner}): wait for it to "
                "end (then the same command resumes or finishes the run), or pass another --run-dir"
            ) from None
        if _same_file(f, path):  # else a finish renamed the folder away between open and flock
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}@{_HOST}\n")
            f.flush()
            _HELD[path] = f
            return
        f.close()
    raise RunInUseError(f"could not lock {path}: its folder keeps being replaced by another process")


def _release_backup(backup_dir):
    """Releases this process's lock of ``backup_dir`` (nothing if it holds none)."""
    f = _HELD.pop(os.path.join(os.path.abspath(backup_dir), LOCK_FILE), None)
    if f is not None:
        f.close()  # closing the file releases its flock


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` whose files are replaced atomically.

    Unlike Keras' callback, it can be used for several ``fit`` calls of one model, and
    a mid-epoch backup records the epoch it was made in (Keras' records the epoch of
    an earlier ``fit``, or 0 in a new process or a ``fit(initial_epoch=...)``, until the
    first epoch ends, so a crash in a resumed run restarted training from that epoch).

    A mid-epoch backup (``save_freq`` in steps) also records how many steps of its epoch
    were done (``epoch_steps``) and the states of the model's metrics then. A ``fit``
    whose data :func:`skip_trained_steps` has cut to start after those steps (it tells
    this callback so: ``skipped_steps``) resumes that epoch where the backup was made:
    the callback ends it after its remaining steps (of ``steps_per_epoch``; a
    ``spread_steps`` callback, put first, after those of a shorter epoch) and restores
    its metrics when it begins, so the epoch's logs are those of the uninterrupted run.
    A ``fit`` whose data were not cut so starts the epoch again from its first step
    (Keras' behaviour). A backup due at an epoch's last step (``steps_per_epoch``
    reached, or training stopping after the step) is made at the epoch's end instead.

    A backup is never lost to a ``fit`` with fewer ``epochs`` than it holds: Keras'
    trained nothing and deleted it. Here a backup beyond ``epochs`` raises
    :class:`BackupAheadError` (the backup is kept), and a backup of exactly
    ``epochs`` epochs (a crash after the last one) is restored, trains nothing and is
    kept.

    When the backup goes (``delete_checkpoint``, Keras' argument):

    * ``delete_checkpoint=True`` (the default, Keras' behaviour): it is deleted when a
      ``fit`` that trained ends, so a later ``fit`` with the same ``backup_dir``
      starts from scratch. Right for a ``fit`` whose model is all its output; but a
      crash after ``fit`` and before the model is saved loses the run.
    * ``delete_checkpoint=False``: when a ``fit`` that trained ends, the backup is
      brought up to its end (the weights after the last epoch and the epochs
      trained, also with a ``save_freq`` in steps) and kept. A later ``fit`` with the
      same ``epochs`` restores it and trains nothing (a larger ``epochs`` trains the
      rest): a crash before the outputs are written costs no training. Call
      :meth:`finish` (or :func:`finish_run`) once they are written: until then, a
      ``fit`` in this ``backup_dir`` is the same run's. :func:`resumable_callbacks`
      (the applications' training) makes its callback so.

    From the start of a ``fit`` to the deletion of the backup (the end of the ``fit``
    with ``delete_checkpoint=True``, :meth:`finish` without), this process holds the
    lock of ``backup_dir`` (``backup_dir/.lock``): a ``fit`` of another live process
    with the same ``backup_dir`` raises :class:`RunInUseError` when it begins. After an
    exception (a crash in ``fit`` or before ``finish``) this process keeps it (and may
    ``fit`` again) until it ends.

    A run that records its options (``run_options``, a JSON-able dict: the command
    line's, see ``applications.arguments.run_options``) keeps them in every backup; a
    ``fit`` with other options raises :class:`BackupMismatchError` naming the options
    that differ (the backup is kept). Without this, a rerun that changed an option
    which leaves the weights' shapes alone (``--learning-rate``, ``--seed``, ...)
    silently resumed the old run with its old options' weights and the new options'
    training. A backup without recorded options (or a run that records none) is
    resumed unchecked.

    Such a run also records its precision, as ``"precision"``: the name of Keras' global
    dtype policy in force when training begins (``--precision``; that of an
    application's ``train(precision=...)``, wherever the callback was made), unless
    float32, which a record without it means (a backup made before it was recorded
    trained in float32). A ``"precision"`` among ``run_options`` is replaced by it.
    A resume under another policy is refused as a run with other options.

    Args:
        backup_dir, save_freq, double_checkpoint, delete_checkpoint: as in
            ``keras.callbacks.BackupAndRestore``.
        run_options: the options of this run (default None: not recorded, not checked).

    Attributes:
        restored_epoch: the epoch training resumed at (0 for a fresh start), set by
            ``on_train_begin``.
        resumed_steps: the steps of that epoch that the backup had trained and the
            ``fit`` skipped (0: the epoch ran from its first step), set by
            ``on_train_begin``.
        skipped_steps: set by :func:`skip_trained_steps` for the next ``fit`` only.
    """

    restored_epoch = 0
    skipped_steps = 0  # set by skip_trained_steps for the next fit
    resumed_steps = 0
    _trains = True

    def __init__(self, backup_dir, *args, run_options=None, **kwargs):
        super().__init__(backup_dir, *args, **kwargs)
        self.run_options = None if run_options is None else _json_normalized(run_options)

    def on_train_begin(self, logs=None):
        # Two processes training one run (a job started again while the first still ran)
        # both trained, their backups and history.csv rows interleaved.
        _lock_backup(self.backup_dir)
        # the policy this fit trains under, not the one in force when the callback was made
        # (a train(precision=...) sets its policy after the user made it)
        self._record_precision()
        self._check_run_options()
        if os.path.exists(self._weights_path) and not os.path.exists(self._training_metadata_path):
            # A kill inside the first backup of a run (after its weights, before its epoch):
            # no backup, so a fresh run (history.csv, bests, patience start again), which
            # Keras started from those weights and their optimizer step all the same.
            _remove(self._weights_path)
        # Keras never clears the epoch a restore sets: an earlier fit's would apply here.
        self.model._initial_epoch = None
        try:
            super().on_train_begin(logs)
        except ValueError as err:  # Keras could not load the backup's weights into this model
            run_dir = self._give_up()
            raise BackupMismatchError(
                f"the backup in {run_dir} is of another model (the options of the crashed run differ from "
                "these): rerun with that run's options to finish it, or pass a new --run-dir"
            ) from err
        self.restored_epoch = int(self.model._initial_epoch or 0)
        if self.restored_epoch:
            _restore_random_states(self.model, self._training_metadata_path)
        epochs = (self.params or {}).get("epochs")
        if epochs is not None and self.restored_epoch > epochs:
            run_dir = self._give_up()
            raise BackupAheadError(
                f"the run in {run_dir} already reached epoch {self.restored_epoch} (its backup is kept), "
                f"more than the {epochs} asked for: pass --epochs {self.restored_epoch} to finish it or "
                "more to train further, or a new --run-dir to start again"
            )
        self._trains = epochs is None or self.restored_epoch < epochs
        # The epoch that backups record until the first epoch of this fit ends.
        self._current_epoch = self.restored_epoch
        self._last_batch_seen = 0
        self._batches_seen_since_last_saving = 0
        self._check_skipped_steps()
        # the resumed epoch's first batches, which the stream skipped (_EpochSteps reads it)
        self.model._resumed_epoch_steps = (self.restored_epoch, self.resumed_steps) if self.resumed_steps else None
        self._epoch_steps, self._offset, self._save_at_epoch_end = 0, 0, False
        # The logs of the epochs before the resume, which later backups keep holding.
        self._epoch_logs = {e: cells for e, cells in backup_logs(self.backup_dir).items() if e < self.restored_epoch}

    def _record_precision(self):
        """Puts the global dtype policy in force now into the recorded options, as
        ``"precision"`` (left out under float32: :func:`_precision_now`); nothing for a run
        that records none."""
        if self.run_options is not None:
            self.run_options = _with_precision(self.run_options, _precision_now())

    def _check_run_options(self):
        """Raises :class:`BackupMismatchError` when the backup recorded other options."""
        try:
            _check_backup_options(self.backup_dir, self.run_options)
        except BackupMismatchError:
            _release_backup(self.backup_dir)
            raise

    def _check_skipped_steps(self):
        """Takes the steps :func:`skip_trained_steps` skipped for this ``fit`` (into
        ``resumed_steps``), refused unless they are those the restored backup's epoch has
        done (it read another backup than the one restored). None skipped: the epoch
        starts again (Keras' way, for data that were not given to that function)."""
        done = backup_epoch_steps(self.backup_dir) if self._trains else 0
        skipped, self.skipped_steps = self.skipped_steps, 0  # for this fit only
        self.resumed_steps = skipped
        if skipped and skipped != done:
            self.resumed_steps = 0
            run_dir = self._give_up()
            raise BackupMismatchError(
                f"the training data of the run in {run_dir} skip {skipped} batch(es) of epoch "
                f"{self.restored_epoch + 1}, but its backup has trained {done} of them (the backup changed "
                "since the data were made): run the same command again"
            )

    def _give_up(self):
        """Undoes the restore of a ``fit`` that is refused (the backup is kept, its lock
        released); returns the run's folder, for the message."""
        self.model._initial_epoch = None
        _release_backup(self.backup_dir)
        return os.path.dirname(os.path.abspath(self.backup_dir))

    def on_epoch_begin(self, epoch, logs=None):
        # Also right when fit starts at its own initial_epoch (Keras knew only restored epochs).
        self._current_epoch = epoch
        # the resumed epoch goes on after the steps its mid-epoch backup had trained
        self._offset = self.resumed_steps if epoch == self.restored_epoch else 0
        self._epoch_steps = self._offset
        if self._offset:
            _restore_metric_states(self.model, self._training_metadata_path)  # (fit has just reset them)

    def on_train_batch_end(self, batch, logs=None):
        self._epoch_steps = self._offset + batch + 1
        steps = (self.params or {}).get("steps")
        if self._offset and steps and self._epoch_steps >= steps and not self.model.stop_training:
            from applications.training import _EndOfEpoch

            self.model.stop_training = self._ended = _EndOfEpoch()  # the resumed epoch's steps are done
        if not self._should_save_on_batch(batch):
            return
        if self.model.stop_training or (steps and self._epoch_steps >= steps):
            # the epoch's last step: backed up at its end (with its logs), so a backup
            # never holds an epoch whose steps are all done and whose end is not
            self._save_at_epoch_end = True
        else:
            self._save_model()

    def on_epoch_end(self, epoch, logs=None):
        # The epoch's logs go into its backup (the same atomic write that says the epoch
        # is done): a kill after the backup and before history.csv's row of the epoch
        # lost that row for good; the resumed run now writes it from here.
        epoch_logs = getattr(self, "_epoch_logs", {})
        self._epoch_logs = {e: cells for e, cells in epoch_logs.items() if e < epoch}
        self._epoch_logs[int(epoch)] = _csv_cells(logs)
        self._epoch_steps = 0
        ended = getattr(self, "_ended", None)
        if ended is not None and self.model.stop_training is ended:
            self.model.stop_training = False  # only the resumed epoch ended, not training
        self._ended = None
        super().on_epoch_end(epoch, logs)
        if self._save_at_epoch_end:
            self._save_at_epoch_end = False
            self._save_model()

    def on_train_end(self, logs=None):
        if self._trains:  # a backup of all the epochs asked for is kept: nothing trained it further
            if self.delete_checkpoint:
                super().on_train_end(logs)
            elif self.save_freq != "epoch":  # "epoch": the last epoch's end is backed up already
                self._save_model()  # the state fit ends with (on_epoch_end set its epoch)
        # A later fit of the model (with or without this callback) starts at its own initial_epoch.
        self.model._initial_epoch = None
        self.model._resumed_epoch_steps = None
        if self.delete_checkpoint:  # else the run goes on until finish (its outputs are not written yet)
            _release_backup(self.backup_dir)

    def finish(self):
        """Deletes the backup: the run is complete (its outputs are written).

        A later ``fit`` with this callback's ``backup_dir`` then starts from scratch.
        Nothing happens when there is no backup.

        The folder is renamed away first (atomically), then deleted: a deletion killed
        half-way left a backup of the finished run without its weights, which a rerun
        restored as a run at its last epoch with fresh weights (training nothing, it
        wrote an untrained model over the trained one). A kill now leaves the renamed
        folder (``.tmp-PID@HOST-backup``), which the next finish in the same place
        removes (as :func:`atomic_write` removes the temporaries of dead writers).
        """
        import shutil

        if os.path.exists(self.backup_dir):
            directory, base = os.path.split(os.path.abspath(self.backup_dir))
            doomed = os.path.join(directory, f"{_TMP_PREFIX}{os.getpid()}@{_HOST}-{base}")
            shutil.rmtree(doomed, ignore_errors=True)  # an interrupted finish of this process left it
            os.replace(self.backup_dir, doomed)
            _release_backup(self.backup_dir)
            shutil.rmtree(doomed)
            _remove_dead_temporaries(directory, base)

    def _save_model(self):
        # NaN weights over the last finite ones lost the run: a resume restored NaN
        bad = [w.path for w in self.model.weights if w.dtype.startswith(("float", "bfloat"))
               and not np.all(np.isfinite(keras.ops.convert_to_numpy(w)))]
        if bad:
            # (a run that diverged before its first backup has no finite weights to point to)
            kept = (
                f"the backup in {self.backup_dir} keeps the last finite ones"
                if os.path.exists(self._weights_path)
                else "no backup was made before (nothing of the run is kept)"
            )
            raise TrainingDivergedError(
                f"training diverged: {len(bad)} weight(s) of the model are not finite (NaN or infinite; "
                f"{bad[0]} the first); {kept}. {_DIVERGED_REMEDY}"
            )
        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint:
            for src, dst in (
                (self._weights_path, self._prev_weights_path),
                (self._training_metadata_path, self._prev_training_metadata_path),
            ):
                if os.path.exists(src):
                    atomic_write(dst, lambda tmp, src=src: _copy(src, tmp))
        # the trained weights, also where an EMA swap of keras_capsules.callbacks before
        # this callback has put the average in at the epoch's end (a resumed run trained
        # on from the average)
        with trained_weights_in(self.model):
            atomic_write(self._weights_path, lambda tmp: self.model.save_weights(tmp, overwrite=True))
        # Weights first, then the epoch: a crash between the two repeats one epoch
        # with newer weights, it never skips one.
        # The logs of every epoch done, for the rows of history.csv (see backup_logs).
        done = {str(e): cells for e, cells in sorted(getattr(self, "_epoch_logs", {}).items())
                if e < self._current_epoch}
        steps = getattr(self, "_epoch_steps", 0)
        metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen, "epoch_steps": steps,
                    "logs": done, "random_states": _random_states(self.model)}
        if steps:  # the epoch's metrics so far: its logged means go on from them
            metadata["metric_states"] = _metric_states(self.model)
        if self.run_options is not None:
            metadata["options"] = self.run_options
        write_json_atomically(metadata, self._training_metadata_path)


def _random_state_variables(model):
    """The model's state that is not in its weights: the states of its layers'
    ``keras.random.SeedGenerator`` (dropout, noise, random masks), in a fixed order."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _random_states(model):
    """``[[path, values], ...]`` of :func:`_random_state_variables`, for a backup.

    ``save_weights`` leaves these out, so a resumed run drew the dropout masks and
    noise of its first epochs again (music's input dropout: 0.029 max weight
    difference to the uninterrupted run after the data were drawn alike)."""
    return [[v.path, np.asarray(keras.ops.convert_to_numpy(v)).tolist()] for v in _random_state_variables(model)]


def _metric_variables(model):
    """The variables of the model's metrics (its loss's mean too), in a fixed order."""
    return [v for metric in model.metrics for v in metric.variables]


def _metric_states(model):
    """``[[path, values], ...]`` of :func:`_metric_variables`: the epoch's metrics so far,
    for a mid-epoch backup (the resumed epoch's logged means go on from them)."""
    return [[v.path, np.asarray(keras.ops.convert_to_numpy(v)).tolist()] for v in _metric_variables(model)]


def _restore_metric_states(model, metadata_path):
    """Restores the metrics' states a mid-epoch backup saved (:func:`_metric_states`);
    states missing, or of another layout, are left alone (the epoch's means then cover
    its resumed steps only)."""
    _assign_saved(_metric_variables(model), metadata_path, "metric_states")


def _restore_random_states(model, metadata_path):
    """Restores the states :func:`_random_states` saved in a backup's metadata; a backup
    without them (written before they were kept) or with states of other shapes or
    number is left alone."""
    _assign_saved(_random_state_variables(model), metadata_path, "random_states")


def _assign_saved(variables, metadata_path, key):
    """Assigns ``variables`` the values saved under ``key`` in a backup's metadata, by
    position; nothing when they are missing or of another number or shapes."""
    try:
        with open(metadata_path) as f:
            saved = json.load(f).get(key)
    except (OSError, ValueError, AttributeError):
        return
    # by position, as the weights are loaded (a state's path holds a process-wide count:
    # seed_generator_7 here may be seed_generator_2 in the process that saved it)
    try:
        values = [np.asarray(v, dtype=variable.dtype) for (_, v), variable in zip(saved, variables, strict=True)]
    except (TypeError, ValueError):  # not a list of pairs, another number of states, not numbers
        return
    if all(v.shape == tuple(variable.shape) for v, variable in zip(values, variables)):
        for variable, value in zip(variables, values):
            variable.assign(value)


_MISSING = object()


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_json_value(obj):
    """A JSON-able stand-in for ``obj`` that is the same in every process.

    The ``default`` of ``json.dumps`` for recorded options: Keras objects (a
    learning-rate schedule, a regularizer, an initializer) as their Keras
    serialization, NumPy scalars as numbers, anything else as its text without a
    memory address (``<function f at 0x7f...>`` becomes ``<function f>``), so that a
    resumed run in a new process records what the first one did.
    """
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "get_config"):
        try:
            return keras.saving.serialize_keras_object(obj)
        except Exception:  # noqa: BLE001 - a get_config that fails: fall back to the text
            pass
    return _ADDRESS.sub("", str(obj))


def _json_normalized(options):
    """``options`` as JSON gives it back (tuples as lists, other objects as
    :func:`stable_json_value`)."""
    if not isinstance(options, dict):
        raise InputError(f"`run_options` must be a dict. Received: run_options={options!r}")
    return json.loads(json.dumps(options, default=stable_json_value, sort_keys=True))


def _option_text(name, value, bare=False, than=None):
    """``--name value`` as a command line would give it (``bare``: the value alone; a
    :data:`DATA_RECORDS` name by its words; a data fingerprint in words, by itself, with
    the files in which it differs from the fingerprint ``than``)."""
    if name == "data_fingerprint" and isinstance(value, dict):
        return describe_data(value, than)
    if value is _MISSING:
        text = "not given"
    elif isinstance(value, bool):
        text = "on" if value else "off"
    elif value is None:
        text = "default"
    elif isinstance(value, list):
        text = " ".join(str(v) for v in value)
    elif isinstance(value, dict) and isinstance(value.get("config"), dict) and "class_name" in value:
        # a Keras object (stable_json_value): ExponentialDecay(decay_rate=0.9, ...)
        text = f"{value['class_name']}({', '.join(f'{k}={v}' for k, v in value['config'].items() if k != 'name')})"
    else:
        text = str(value)
    if bare:
        return text
    return f"{DATA_RECORDS[name]} {text}" if name in DATA_RECORDS else f"--{name.replace('_', '-')} {text}"


def _copy(src, dst):
    import shutil

    shutil.copyfile(src, dst)


def backup_exists(run_dir):
    return os.path.exists(os.path.join(run_dir, BACKUP_DIR, "training_metadata.json"))


def backup_epoch(backup_dir):
    """The epoch a run resumes at from the backup in ``backup_dir`` (0: no backup)."""
    try:
        with open(os.path.join(backup_dir, "training_metadata.json")) as f:
            return int(json.load(f)["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def backup_epoch_steps(backup_dir):
    """The steps of its epoch (:func:`backup_epoch`) that the backup in ``backup_dir``
    has trained: those of a mid-epoch backup (``--save-freq N``), 0 at an epoch's start,
    without a backup, or for a backup of an earlier version (which recorded none)."""
    try:
        with open(os.path.join(backup_dir, "training_metadata.json")) as f:
            steps = json.load(f).get("epoch_steps", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else 0


def skip_trained_steps(stream, callbacks, epochs=None):
    """``stream`` without the batches that a mid-epoch backup has trained: the training
    data of a ``fit`` given ``callbacks`` that resumes exactly where the backup was made.

    ``stream`` must be the run's endless stream from the epoch the run resumes at
    (:func:`resume_epoch`; ``applications.distribute.epoch_stream``): the batches of
    the uninterrupted run from that epoch's first one on. When the (first)
    :class:`AtomicBackupAndRestore` among ``callbacks`` holds a backup made ``s``
    steps into its epoch (``--save-freq N``), the first ``s`` batches are skipped,
    and the callback, told so, ends that epoch after its remaining steps (and
    ``applications.training.spread_steps``' callback after those of a shorter epoch):
    the resumed run trains the steps, batches, optimizer updates and logged means of
    the uninterrupted one. Else (an epoch's backup, no backup, no such callback, a
    backup beyond ``epochs``) ``stream`` is returned as it is.

    Raises:
        InputError: a mid-epoch backup and a ``stream`` that is not endless (a dataset
            of one epoch, which ``fit`` iterates again every epoch, cannot skip the
            first batches of one epoch only), before ``fit``: nothing is trained.
        BackupMismatchError: the backup recorded another precision than the global
            dtype policy in force now (``train``'s, before ``fit``: :func:`_check_precision`).
    """
    _check_precision(callbacks)
    backups = _backups(callbacks)
    if not backups:
        return stream
    backup = backups[0]
    steps = backup_epoch_steps(backup.backup_dir)
    if steps and epochs is not None and backup_epoch(backup.backup_dir) >= epochs:
        steps = 0
    backup.skipped_steps = steps
    if not steps:
        return stream
    import tensorflow as tf

    endless = isinstance(stream, tf.data.Dataset) and \
        tf.get_static_value(stream.cardinality()) == tf.data.INFINITE_CARDINALITY
    if not endless:
        backup.skipped_steps = 0
        run_dir = os.path.dirname(os.path.abspath(backup.backup_dir))
        raise InputError(
            f"the backup in {run_dir} was made {steps} step(s) into epoch {backup_epoch(backup.backup_dir) + 1}, "
            "and this training data is not an endless stream of epochs whose first steps can be skipped "
            f"(received: {type(stream).__name__}): train on the run's stream from that epoch "
            "(applications.distribute.epoch_stream), or start a new run directory"
        )
    return stream.skip(steps)


def backup_logs(backup_dir):
    """``{epoch: {metric: CSV cell text}}``: the logs of the epochs that the backup in
    ``backup_dir`` holds as done (those before :func:`backup_epoch`), as
    ``CSVLogger`` writes them; empty without a backup, or for a backup of a version
    that did not keep them."""
    try:
        with open(os.path.join(backup_dir, "training_metadata.json")) as f:
            metadata = json.load(f)
        resumes_at, saved = int(metadata["epoch"]), metadata.get("logs") or {}
        logs = {int(epoch): {str(k): str(v) for k, v in cells.items()} for epoch, cells in saved.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {epoch: cells for epoch, cells in logs.items() if 0 <= epoch < resumes_at}


def _csv_cells(logs):
    """An epoch's ``logs`` as the cells that ``keras.callbacks.CSVLogger`` writes for them
    (its ``handle_value``, then the ``csv`` module's text of a value)."""
    import collections.abc

    cells = {}
    for key, value in (logs or {}).items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, collections.abc.Iterable) and not (isinstance(value, np.ndarray) and value.ndim == 0):
            text = f'"[{", ".join(map(str, value))}]"'
        elif value is None:
            text = ""
        else:  # str(), as the csv module writes it: repr() of a numpy float64 is "np.float64(0.5)"
            text = str(value)
        cells[str(key)] = text
    return cells


class KeepBestWeights(keras.callbacks.Callback):
    """Keeps the model's weights of the epoch with the best ``monitor``, across restarts.

    The best is the lowest value (``mode="min"``, default: a loss) or the highest
    (``mode="max"``: a score such as a segmentation AMI); epochs whose logs lack
    ``monitor`` are skipped.

    After ``fit``, ``weights`` holds them (None if no epoch reported ``monitor``),
    ``best`` the value and ``best_epoch`` the epoch. With ``backup_dir`` (the folder
    of the run's :class:`AtomicBackupAndRestore`) every improvement is also written
    atomically to ``backup_dir/best-<epoch>.npz``, and a run resumed at epoch ``r``
    (the backup's epoch) starts from the best of the epochs before ``r``, with its
    weights, not from scratch. Put it before the backup callback, so that an
    epoch's best is on disk before the backup that says it is done.

    The backup may be older than the last improvement (``--save-freq N``: the last
    mid-epoch backup can precede the end of several epochs; or a crash between an
    epoch's best and its backup), and the resumed run trains those epochs again: so
    the improvements made since the backup's epoch are kept, each in its file, beside
    the last one before it (older ones are deleted), and a resume takes the last one
    before its epoch (those of the epochs it trains again are deleted when its first
    epoch begins: after the backup callback has taken the run's lock). Files go with
    the backup (:func:`finish_run`). A ``best.npz`` of the single-file format before
    this one is read as well.
    """

    FILE = "best.npz"  # the single file of earlier versions (read, never written)
    _NAME = re.compile(r"best-(\d+)\.npz")

    def __init__(self, monitor="val_loss", backup_dir=None, mode="min"):
        super().__init__()
        if mode not in ("min", "max"):
            raise ValueError(f"`mode` must be 'min' or 'max'. Received: mode={mode!r}")
        self.monitor, self.backup_dir, self.mode = monitor, backup_dir, mode
        self.best, self.best_epoch, self.weights = self._worst(), None, None

    def _worst(self):
        return float("inf") if self.mode == "min" else -float("inf")

    def _better(self, value):
        return value < self.best if self.mode == "min" else value > self.best

    def _saved(self):
        """``{epoch: path}`` of the bests saved in ``backup_dir``."""
        saved = {}
        try:
            names = os.listdir(self.backup_dir)
        except OSError:
            return saved
        for name in names:
            match = self._NAME.fullmatch(name)
            if match:
                saved[int(match.group(1))] = os.path.join(self.backup_dir, name)
        legacy = os.path.join(self.backup_dir, self.FILE)
        if self.FILE in names:
            try:
                with np.load(legacy) as old:
                    saved.setdefault(int(old["epoch"]), legacy)
            except (OSError, ValueError, KeyError):
                pass
        return saved

    def on_train_begin(self, logs=None):
        self.best, self.best_epoch, self.weights = self._worst(), None, None
        self._stale = []
        if self.backup_dir is None:
            return
        resumed_at = backup_epoch(self.backup_dir)  # 0: a new run, whose bests so far are a crashed start's
        saved = self._saved()
        # The bests of the epochs this run trains again go when its first epoch begins, once
        # the backup callback holds the run's lock: deleted here (before that callback's
        # train begin), a process then refused because another live process trains the run
        # had deleted that run's bests since its last backup.
        self._stale = [path for epoch, path in saved.items() if epoch >= resumed_at]
        before = [epoch for epoch in saved if epoch < resumed_at]
        if before:
            with np.load(saved[max(before)]) as best:
                self.best, self.best_epoch = float(best["value"]), int(best["epoch"])
                self.weights = [best[f"w{i}"] for i in range(int(best["count"]))]

    def on_epoch_begin(self, epoch, logs=None):
        for path in getattr(self, "_stale", ()):
            _remove(path)
        self._stale = []

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or not self._better(float(value)):  # NaN is never better
            return
        self.best, self.best_epoch, self.weights = float(value), int(epoch), self.model.get_weights()
        if self.backup_dir is None:
            return
        arrays = {f"w{i}": w for i, w in enumerate(self.weights)}

        def write(tmp):
            with open(tmp, "wb") as f:
                np.savez(f, epoch=epoch, value=self.best, count=len(self.weights), **arrays)

        atomic_write(os.path.join(self.backup_dir, f"best-{int(epoch)}.npz"), write)
        # A resume at the backup's epoch (or later) needs the last best before it and those since.
        backed_up = backup_epoch(self.backup_dir)
        saved = self._saved()
        needed = [e for e in saved if e < backed_up]
        for old, path in saved.items():
            if old < backed_up and old != max(needed):
                _remove(path)


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class ResumableReduceLROnPlateau(keras.callbacks.ReduceLROnPlateau):
    """``keras.callbacks.ReduceLROnPlateau`` whose state survives a resume.

    Keras' callback keeps the epochs waited without improvement, the best value and
    the cooldown left in memory only, and resets them when training begins: a
    resumed run started its patience again (the learning rate itself, an optimizer
    variable, was restored by the backup). With ``backup_dir`` (the folder of the
    run's :class:`AtomicBackupAndRestore`) this one writes that state at every
    epoch's end, atomically, to ``backup_dir/reduce_lr_on_plateau.json`` (one entry
    per epoch of the run), and a run resumed at epoch ``r`` (the backup's epoch,
    also that of a mid-epoch backup of ``--save-freq N``) starts from the state
    epoch ``r - 1`` ended with: the learning rate drops at the epochs of an
    uninterrupted run. The file goes with the backup (:func:`finish_run`). Put it
    before the backup callback, so that an epoch's state is on disk before the
    backup that says the epoch is done.

    Args:
        *args, **kwargs: those of ``keras.callbacks.ReduceLROnPlateau``.
        backup_dir: the run's backup folder; None: Keras' behaviour (nothing saved).
    """

    FILE = "reduce_lr_on_plateau.json"

    def __init__(self, *args, backup_dir=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.backup_dir = backup_dir
        self._states = {}  # str(epoch) -> the state that epoch ended with

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)  # Keras resets the state
        self._states = {}
        resumed_at = backup_epoch(self.backup_dir) if self.backup_dir is not None else 0
        if not resumed_at:
            return
        try:
            with open(os.path.join(self.backup_dir, self.FILE)) as f:
                saved = json.load(f)
        except (OSError, ValueError):  # no state saved (e.g. a backup of an older version)
            return
        # entries of the epochs the resumed run trains again are dropped
        self._states = {k: v for k, v in saved.items() if k.isdigit() and int(k) < resumed_at}
        state = self._states.get(str(resumed_at - 1))
        if state is not None:
            self.wait = int(state["wait"])
            self.cooldown_counter = int(state["cooldown_counter"])
            # None: the monitor was never logged before the resume (Keras' start value)
            self.best = None if state["best"] is None else float(state["best"])

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if self.backup_dir is None:
            return
        self._states = {k: v for k, v in self._states.items() if int(k) < epoch}
        self._states[str(epoch)] = {
            "wait": int(self.wait), "cooldown_counter": int(self.cooldown_counter),
            "best": None if self.best is None else float(self.best),
        }
        write_json_atomically(self._states, os.path.join(self.backup_dir, self.FILE))


class _RunHistoryCSV(keras.callbacks.CSVLogger):
    """``CSVLogger`` that appends to the log of a resumed run and starts that of a fresh
    run again, deciding when training begins (not when the callback is made: a run
    that ends up not training keeps its log).

    A resumed run first brings the log in line with its backup (:func:`_repair_history_csv`):
    the rows of the epochs it trains again (those from the backup's epoch on) are
    dropped (with backups every N steps, the last one can precede the end of an epoch
    whose row is logged, and that epoch was logged twice), and the rows of the epochs
    the backup holds as done that are missing (a kill after an epoch's backup and
    before its row) are written from the logs the backup keeps."""

    def __init__(self, filename, run_dir):
        super().__init__(filename, append=True)
        self.run_dir = run_dir

    def on_train_begin(self, logs=None):
        if not backup_exists(self.run_dir):
            if os.path.exists(self.filename):
                os.remove(self.filename)
        else:
            backup_dir = os.path.join(self.run_dir, BACKUP_DIR)
            _repair_history_csv(self.filename, backup_epoch(backup_dir), backup_logs(backup_dir), self.sep)
        super().on_train_begin(logs)


def _repair_history_csv(path, epoch, logged, sep=","):
    """Rewrites the ``CSVLogger`` file ``path`` (atomically, if anything changes) for a
    run that resumes at ``epoch``: without its rows of epochs ``epoch`` and later, and
    with a row for each epoch of ``logged`` (``{epoch: {metric: cell text}}``, see
    :func:`backup_logs`) that has none, or a torn one (fewer cells than the header), in
    epoch order. A last line without its line end (a write cut short) is dropped. The
    other lines are kept as they are. Without a header (no file, or an empty one) the
    header is the one ``CSVLogger`` would write for the first of ``logged``."""
    import csv

    class Dialect(csv.excel):  # CSVLogger's
        delimiter = sep

    try:
        with open(path, newline="") as f:
            lines = f.readlines()
    except FileNotFoundError:
        lines = []
    original = lines
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines = lines[:-1]  # torn: the rest of the file is whole lines
    logged = {e: cells for e, cells in logged.items() if e < epoch}
    if lines:
        header = next(csv.reader(lines[:1], Dialect), [])
        if "epoch" not in header:
            return  # not a CSVLogger's log: leave it alone
        out = [lines[0]]
    elif not logged:
        header, out = ["epoch"], []  # nothing to write (but a torn header goes)
    else:
        keys = sorted(logged[min(logged)])
        if keys and not any(key.startswith("val_") for key in keys):  # as CSVLogger does
            keys += [f"val_{key}" for key in keys]
        header = ["epoch", *keys]
        out = [_csv_line(header, dict(zip(header, header)), Dialect)]
    column = header.index("epoch")
    missing = sorted(logged)  # those without a whole row, removed as they are found
    rows = []  # (epoch or None, line)
    for line in lines[1:]:
        row = next(csv.reader([line], Dialect), [])
        try:
            row_epoch = int(row[column])
        except (IndexError, ValueError):
            rows.append((None, line))  # not a row of an epoch: kept where it is
            continue
        if row_epoch >= epoch:
            continue
        if row_epoch in logged and (row_epoch not in missing or len(row) < len(header)):
            continue  # a second row of the epoch, or a torn one: the backup's row replaces it
        if row_epoch in missing:
            missing.remove(row_epoch)
        rows.append((row_epoch, line))
    for row_epoch, line in rows:
        while missing and row_epoch is not None and missing[0] < row_epoch:
            restored = missing.pop(0)
            out.append(_csv_line(header, {"epoch": restored, **logged[restored]}, Dialect))
        out.append(line)
    out += [_csv_line(header, {"epoch": e, **logged[e]}, Dialect) for e in missing]
    if out != original:

        def write(tmp):
            with open(tmp, "w", newline="") as f:
                f.writelines(out)

        atomic_write(path, write)


def _csv_line(header, cells, dialect):
    """One line of a ``CSVLogger`` file: ``cells`` under ``header`` ("NA" where missing)."""
    import csv
    import io

    text = io.StringIO()
    row = {key: cells.get(key, "NA") for key in header}
    csv.DictWriter(text, fieldnames=header, dialect=dialect).writerow(row)
    return text.getvalue()


def _precision_now():
    """The ``"precision"`` a backup records: the name of Keras' global dtype policy in
    force now, None under float32 (a record without it means float32)."""
    policy = keras.config.dtype_policy().name
    return None if policy == "float32" else policy


def _with_precision(run_options, precision):
    """``run_options`` (a new dict) with their ``"precision"`` replaced by ``precision``,
    or left out when it is None (float32, or not known yet)."""
    options = {name: value for name, value in run_options.items() if name != "precision"}
    if precision is not None:
        options["precision"] = precision
    return options


def _check_backup_options(backup_dir, run_options, precision=True):
    """Raises :class:`BackupMismatchError` when the backup in ``backup_dir`` recorded other
    options than ``run_options`` (nothing when either is missing). ``precision=False``:
    the ``"precision"`` they record is not compared (not known yet)."""
    if run_options is None:
        return
    try:
        with open(os.path.join(backup_dir, "training_metadata.json")) as f:
            saved = json.load(f).get("options")
    except (OSError, ValueError, AttributeError):  # no backup, or not a dict
        return
    if not isinstance(saved, dict) or saved == run_options:
        return
    from applications.arguments import RESUMABLE_CHANGES

    # An option that a resume could change when the backup was made is not in it (a
    # backup of sst made before its --epochs was recorded): not a difference. Nor is one
    # that a resume may change now, recorded by an older backup (demo's --data-dir, whose
    # data the fingerprint records now), nor a record of the data on one side only: a
    # backup of an earlier version made none, and the command line's check
    # (check_resumable) comes before train adds them.
    saved, run_options = dict(saved), dict(run_options)
    # a backup made before --precision existed trained in float32, as a run without it does
    for options in (saved, run_options):
        options.setdefault("precision", "float32")
        if not precision:
            del options["precision"]
    for name in (set(run_options) ^ set(saved)) & RESUMABLE_CHANGES:
        saved[name] = run_options[name] = run_options.get(name, saved.get(name))
    for name in set(DATA_RECORDS) & (set(saved) ^ set(run_options)):
        saved.pop(name, None)
        run_options.pop(name, None)
    # the same data read from another folder (moved, copied) are the same data
    if same_data(saved.get("data_fingerprint"), run_options.get("data_fingerprint")):
        saved.pop("data_fingerprint", None)
        run_options.pop("data_fingerprint", None)
    if saved == run_options:
        return
    differ = [
        f"{_option_text(name, saved.get(name, _MISSING))} (now "
        f"{_option_text(name, run_options.get(name, _MISSING), bare=True, than=saved.get(name))})"
        for name in sorted(set(saved) | set(run_options))
        if saved.get(name, _MISSING) != run_options.get(name, _MISSING)
    ]
    run_dir = os.path.dirname(os.path.abspath(backup_dir))
    if any(saved.get(name, _MISSING) != run_options.get(name, _MISSING) for name in DATA_RECORDS):
        raise BackupMismatchError(
            f"the backup in {run_dir} is of a run on other data: {', '.join(differ)}; put the data "
            "folder back as that run had it to finish the run, or pass a new --run-dir"
        )
    raise BackupMismatchError(
        f"the backup in {run_dir} is of a run with other options: {', '.join(differ)}; rerun with that "
        "run's options to finish it, or pass a new --run-dir"
    )


#: What a run's ``train`` adds to its backups' recorded options besides the command
#: line's (:func:`record_data`), with the words a refusal names it by. ``idx_layout``:
#: which split an MNIST IDX folder gave (``mnist_digits.idx_layout``); the same
#: ``--data-dir`` gives another once the ``train`` files are put beside the ``t10k``
#: ones, and a resume then went on training on other digits, scored on other test digits.
#: ``data_fingerprint``: what the data files are (``arguments.data_fingerprint``, named by
#: their kind and folder), compared without the folder: a resume on the same files in
#: another folder goes on, one on other files (another folder, or the same one changed)
#: trained its last epochs on them.
DATA_RECORDS = {"idx_layout": "the data folder's MNIST split", "data_fingerprint": "the data"}


def record_data(callbacks, **records):
    """Adds ``records`` (names of :data:`DATA_RECORDS`, JSON-able values: what the data
    gave this run) to the recorded options of the :class:`AtomicBackupAndRestore` among
    ``callbacks`` that records its run's (``run_options``), before ``fit``: its backups
    keep them, and a resume whose data give another value is refused here, before
    anything is written (:class:`BackupMismatchError`, the backup kept), where it silently
    trained on other data. A backup made before a record existed is resumed unchecked on
    it; a record of None (data that cannot be read: the run reports that when it reads
    them) is not made."""
    unknown = sorted(set(records) - set(DATA_RECORDS))
    if unknown:
        raise InputError(f"record_data records {sorted(DATA_RECORDS)}. Received: {unknown}")
    records = {name: value for name, value in records.items() if value is not None}
    for backup in _backups(callbacks):
        if backup.run_options is not None:
            backup._record_precision()  # (train calls it under its precision: compared too)
            backup.run_options = _json_normalized({**backup.run_options, **records})
            _check_backup_options(backup.backup_dir, backup.run_options)


def _check_not_in_use(backup_dir):
    """Raises :class:`RunInUseError` when another live process holds the lock of the run
    whose backup is ``backup_dir``; writes nothing (the lock is tested, not taken: the
    backup callback takes it when training begins)."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock, no lock
        return
    path = os.path.join(os.path.abspath(backup_dir), LOCK_FILE)
    if path in _HELD and _same_file(_HELD[path], path):
        return  # this process's own
    try:
        f = open(path)  # (read-only: flock needs no write access, and nothing is created)
    except OSError:  # no lock file: no process trains the run
        return
    with f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                return  # a file system without locks: trained unlocked
            owner = f.read().strip() or "unknown"
            run_dir = os.path.dirname(os.path.abspath(backup_dir))
            raise RunInUseError(
                f"the run in {run_dir} is being trained by another process (pid@host {owner}): wait for it to "
                "end (then the same command resumes or finishes the run), or pass another --run-dir"
            ) from None
        # (closing the file releases the test's lock)


def check_resumable(run_dir, run_options=None, epochs=None, precision_known=False):
    """Refuses, before anything is written, a ``train`` that the backup in ``run_dir``
    would refuse when training begins: the run is being trained by another live process
    (:class:`RunInUseError`), its backup recorded other ``run_options``
    (:class:`BackupMismatchError`) or already holds more than ``epochs`` epochs
    (:class:`BackupAheadError`). Writes nothing. The precision the backup recorded is
    compared only when ``precision_known`` (``run_options`` then hold the run's
    ``"precision"``, none for float32): else it is the policy in force when training
    begins, which an application's ``train(precision=...)`` may set after this
    (:func:`resume_epoch` and :func:`skip_trained_steps` compare it, in ``train``,
    before ``fit``).

    :func:`resumable_callbacks` calls it: a refusal that came only when ``fit`` began
    came after Keras' ``TensorBoard`` callback had written an events file into the run's
    ``logs/train/`` (into the logs of a run that another process trains, too), and after
    whatever an application wrote before ``fit``. (The backup callback still checks when
    training begins: another process may have started meanwhile.)
    """
    backup_dir = os.path.join(run_dir, BACKUP_DIR)
    if not os.path.isdir(backup_dir):
        return
    _check_not_in_use(backup_dir)
    if run_options is not None:
        _check_backup_options(backup_dir, _json_normalized(run_options), precision=precision_known)
    reached = backup_epoch(backup_dir)
    if epochs is not None and reached > epochs:
        raise BackupAheadError(
            f"the run in {os.path.abspath(run_dir)} already reached epoch {reached} (its backup is kept), "
            f"more than the {epochs} asked for: pass --epochs {reached} to finish it or "
            "more to train further, or a new --run-dir to start again"
        )


# What a folder of the command line's outputs holds: a `train` run, a `tune` search, both or neither.

#: ``<run-dir>/keras_capsules_run.json``: ``{"command": "train", "application": NAME}``, the
#: record of the application whose run a ``train`` folder holds (written by the command
#: line when its training starts; runs of older versions have none).
RUN_RECORD = "keras_capsules_run.json"
#: ``<directory>/keras_capsules_search.json``: the record of a ``tune`` search (``tuning.search``).
SEARCH_RECORD = "keras_capsules_search.json"
#: files that only a ``train`` run writes at the top of its folder (``backup/`` while it trains)
RUN_FILES = ("model.keras", HISTORY_CSV, BACKUP_DIR)
#: files that only a ``tune`` search writes at the top of its folder
SEARCH_FILES = ("best_model.keras", "best_hyperparameters.json")
#: what a folder holds of an application whose name no record gives (an older version's)
UNKNOWN = "?"


def _recorded_application(path):
    """The ``"application"`` of the JSON record ``path``, ``UNKNOWN`` if it has none
    (damaged), None if there is no such file."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            application = json.load(f).get("application")
    except (OSError, ValueError, AttributeError):
        return UNKNOWN
    return application if isinstance(application, str) and application else UNKNOWN


def folder_contents(folder):
    """What ``folder`` holds of the outputs of ``train`` and ``tune``:
    ``{"train": owner, "tune": owner}``, each None (none of that command's outputs), the
    application whose run or search it is, or :data:`UNKNOWN` (outputs of an older
    version, which recorded no application).

    A ``train`` run: :data:`RUN_FILES` (``model.keras``, ``history.csv``, a ``backup/``
    while it trains or after a crash), or a ``metrics.json`` that no search wrote; its
    application is that of :data:`RUN_RECORD` (a record without those files, left by a
    run refused before it trained, holds no run). A ``tune`` search: its
    :data:`SEARCH_RECORD` or :data:`SEARCH_FILES`.
    """
    def has(name):
        return os.path.lexists(os.path.join(folder, name))

    search = _recorded_application(os.path.join(folder, SEARCH_RECORD))
    if search is None and any(has(name) for name in SEARCH_FILES):
        search = UNKNOWN
    run = None
    if any(has(name) for name in RUN_FILES) or (has("metrics.json") and search is None):
        run = _recorded_application(os.path.join(folder, RUN_RECORD)) or UNKNOWN
    return {"train": run, "tune": search}


def check_train_folder(folder, application):
    """Refuses (:class:`FolderInUseError`, before anything is written) a ``train`` of
    ``application`` into ``folder`` when it holds a ``tune`` search or the run of another
    application: the run replaced the search's ``metrics.json`` (``evaluate`` of its best
    model then scored another split) or the other run's model, metrics and plots, and
    mixed its TensorBoard logs. A run of ``application`` (or of an older version, which
    recorded none) is its own: the same command resumes or starts it afresh."""
    held = folder_contents(folder)
    if held["tune"] is not None:
        whose = "" if held["tune"] == UNKNOWN else f" of {held['tune']}"
        raise FolderInUseError(
            f"--run-dir {folder} holds the `keras-capsules tune` search{whose}, whose metrics.json (the data options "
            f"that `evaluate` of its best model reads) a run would replace: train {application} into another --run-dir"
        )
    if held["train"] not in (None, UNKNOWN, application):
        raise FolderInUseError(
            f"--run-dir {folder} holds the run of {held['train']}, whose model, metrics and plots a run of "
            f"{application} would replace (and mix its logs with): train {application} into another --run-dir"
        )


def check_search_folder(folder, application):
    """Refuses (:class:`FolderInUseError`) a ``tune`` of ``application`` into ``folder``
    when it holds a ``train`` run (also one still training, or crashed, before its
    ``metrics.json`` is written; also beside a search: a run trained into a search's
    folder), whose ``metrics.json`` the search would replace, ``--overwrite`` or not.
    (``tuning.search`` refuses another application's search.)"""
    run = folder_contents(folder)["train"]
    if run is not None and not any(os.path.lexists(os.path.join(folder, name)) for name in (*RUN_FILES, RUN_RECORD)):
        metrics = os.path.join(folder, "metrics.json")  # the only sign of a run (as tuning.search says it)
        raise FolderInUseError(f"{metrics} was not written by a search (a `keras-capsules train` run's?): "
                               f"the search would replace it; tune {application} into another --directory")
    if run is not None:
        whose = "" if run == UNKNOWN else f" of {run}"
        files = ", ".join(name for name in (*RUN_FILES, "metrics.json") if os.path.lexists(os.path.join(folder, name)))
        raise FolderInUseError(
            f"--directory {folder} holds a `keras-capsules train` run{whose} ({files}), whose metrics.json "
            f"a search would replace: tune {application} into another --directory"
        )


class FolderInUseError(CommandLineError, ValueError):
    """An output folder holds what a command would replace: a search, or another
    application's run (:func:`check_train_folder`, :func:`check_search_folder`)."""


# folder (absolute) -> [application, what the record's writing changed] of the runs that
# recorded_run is to record, once resumable_callbacks of their folder passed its checks
_PENDING_RECORDS = {}


@contextlib.contextmanager
def recorded_run(folder, application):
    """Records in ``folder`` (:data:`RUN_RECORD`) that it holds ``application``'s
    ``train`` run, for the block that trains it (after :func:`check_train_folder`).

    The record is written when :func:`resumable_callbacks` of ``folder`` have passed
    their checks (:func:`check_resumable`: a command that the backup refuses writes
    nothing into the folder), else when the block ends. A record written in the block
    (none was there, or another application's without its run: :func:`folder_contents`)
    is taken back when the block fails before the run trained (no new backup): a
    command refused for its data leaves nothing behind. A new run that crashed after
    its first backup keeps it, and so does one that wrote its ``history.csv`` or
    TensorBoard ``logs/`` (one that diverged in its first epoch): the folder holds its
    run (without the record, a run of another application was let in, and mixed its
    logs with these).
    """
    key = os.path.abspath(folder)
    had_backup = backup_exists(folder)
    had_run_files = _run_outputs(folder)
    _PENDING_RECORDS[key] = pending = {"application": application, "done": False, "wrote": False, "previous": None}
    try:
        yield
        _write_pending_record(folder)
    except BaseException:
        if pending["wrote"] and (had_backup or not backup_exists(folder)) and _run_outputs(folder) <= had_run_files:
            path = os.path.join(folder, RUN_RECORD)
            if pending["previous"] is None:
                _remove(path)
            else:

                def write(tmp):
                    with open(tmp, "wb") as f:
                        f.write(pending["previous"])

                atomic_write(path, write)
        raise
    finally:
        _PENDING_RECORDS.pop(key, None)


def _run_outputs(folder):
    """The outputs a ``train`` run writes as it starts training that ``folder`` holds."""
    return {name for name in (HISTORY_CSV, "logs") if os.path.lexists(os.path.join(folder, name))}


def _write_pending_record(folder):
    """Writes the record that :func:`recorded_run` holds for ``folder``, once."""
    pending = _PENDING_RECORDS.get(os.path.abspath(folder))
    if pending is None or pending["done"]:
        return
    pending["done"] = True
    path = os.path.join(folder, RUN_RECORD)
    if _recorded_application(path) == pending["application"]:
        return
    if os.path.lexists(path):
        with open(path, "rb") as f:
            pending["previous"] = f.read()
    write_json_atomically({"command": "train", "application": pending["application"]}, path)
    pending["wrote"] = True


def resumable_callbacks(run_dir, save_freq="epoch", run_options=None, epochs=None):
    """``[AtomicBackupAndRestore, CSVLogger, StopOnDivergence]`` for a run in ``run_dir``.

    Args:
        run_dir: the run directory (backup in ``run_dir/backup``, log in
            ``run_dir/history.csv``).
        save_freq: ``"epoch"`` or a number of steps between backups.
        run_options: the run's options, recorded in its backups: resuming the backup
            with other options is refused (:class:`BackupMismatchError`). Default None:
            not recorded. Recorded with them as ``"precision"``: the name of Keras' global
            dtype policy in force when training begins (``--precision``, or an
            application's ``train(precision=...)``, wherever the callbacks were made),
            unless float32 (what a record without it means); a ``"precision"`` among
            them is replaced by it.
        epochs: the epochs the run's ``fit`` trains to, if known: a backup beyond them
            is refused now (:class:`BackupAheadError`), not when ``fit`` begins.

    A run that its backup refuses (another live process trains it, other
    ``run_options``, a backup beyond ``epochs``) is refused here, before the callbacks
    exist (:func:`check_resumable`): nothing is written into ``run_dir`` then. So is a
    backup of another precision when the callbacks are made inside an application's
    ``train`` (the command line's too: ``arguments.policy_is_final``); made outside, the
    precision is compared by the ``train`` (:func:`resume_epoch`), before ``fit``, and
    when training begins.

    A fresh run (no backup in ``run_dir`` when training begins) starts
    ``history.csv`` again; a resumed run appends to it.

    It also lets the traced steps and models of earlier runs in the process go
    (:func:`release_traced_graphs`).

    The backup outlives ``fit`` (``delete_checkpoint=False``): call
    :func:`finish_run` with these callbacks once the run's outputs are written. Until
    then a rerun with the same ``run_dir`` finishes this run from its backup.
    """
    # Keras took 0 (or True, or -3) as "back up after every batch" and refused np.int64.
    if save_freq != "epoch" and (
        isinstance(save_freq, bool) or not isinstance(save_freq, numbers.Integral) or save_freq < 1
    ):
        raise InputError(f"`save_freq` must be 'epoch' or a positive number of steps. Received: save_freq={save_freq!r}")
    save_freq = save_freq if save_freq == "epoch" else int(save_freq)
    from applications.arguments import policy_is_final

    # The Keras dtype policy the run trains under (`--precision`) is recorded when
    # training begins (AtomicBackupAndRestore): one read now, when the callbacks are
    # made, was float32 for a user's callbacks given to train(precision=...), whose
    # resume under another precision then went on in other arithmetic. Made inside an
    # application's train (the command line's too), the policy now is the run's: a backup
    # of another precision is refused at once, before any data is read (the model built,
    # caches made). Made outside, the policy is compared when training begins.
    known = policy_is_final()
    if isinstance(run_options, dict):
        run_options = _with_precision(run_options, _precision_now() if known else None)
    check_resumable(run_dir, run_options, epochs, precision_known=known)
    _write_pending_record(run_dir)  # the command line's record of the run's application
    # (an earlier run's traced steps and model, which TensorFlow's gradient registry kept)
    release_traced_graphs()
    return [
        AtomicBackupAndRestore(os.path.join(run_dir, BACKUP_DIR), save_freq=save_freq, delete_checkpoint=False,
                               run_options=run_options),
        _RunHistoryCSV(os.path.join(run_dir, HISTORY_CSV), run_dir),
        StopOnDivergence(run_dir),
    ]


def _backups(callbacks):
    return [c for c in callbacks or () if isinstance(c, AtomicBackupAndRestore)]


def _check_precision(callbacks):
    """Records the global dtype policy in force now as the precision of the runs of the
    :class:`AtomicBackupAndRestore` among ``callbacks`` that record their options, and
    refuses a backup of another (:class:`BackupMismatchError`, the backup kept and this
    process's lock of it released), as ``fit`` would when it begins, but before it: a
    ``train`` calls it under its precision (:func:`resume_epoch`,
    :func:`skip_trained_steps`), before callbacks that come before the backup's (Keras'
    ``TensorBoard``) write anything."""
    for backup in _backups(callbacks):
        backup._record_precision()
        backup._check_run_options()


class RunCompleteInterrupt(KeyboardInterrupt):
    """Ctrl-C during :func:`finish_run` of a complete run: its outputs are written and
    its backup is deleted; there is nothing to resume (a rerun starts a new run)."""


@contextlib.contextmanager
def _held_interrupts():
    """Holds Ctrl-C (SIGINT) back until the block ends; yields a list that then holds
    the signals that came meanwhile. Outside the main thread (where no signal handler
    can be set) nothing is held."""
    import signal
    import threading

    held, installed, previous = [], False, None
    if threading.current_thread() is threading.main_thread():
        try:
            previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
            installed = True
        except (ValueError, OSError):  # e.g. an interpreter that does not let Python handle signals
            pass
    try:
        yield held
    finally:
        if installed:  # None: a handler not set from Python; Python's own is the closest
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def finish_run(callbacks, complete=True):
    """Ends the run of ``callbacks``: deletes the backup of each
    :class:`AtomicBackupAndRestore` among them (see :meth:`AtomicBackupAndRestore.finish`).

    An application calls it once its outputs (model, metrics, plots) are written:
    a crash before that point leaves the backup, and rerunning finishes the run from
    it without training; after it, a rerun in the same run directory starts afresh.
    ``callbacks`` may hold other callbacks (ignored) or be empty or None.

    The finish is not cut short by Ctrl-C: a SIGINT that comes meanwhile is held back
    until the backups are gone (in the main thread; elsewhere a KeyboardInterrupt may
    still stop it, which leaves the backup whole or renamed away, never half
    deleted), then raised: as :class:`RunCompleteInterrupt` when ``complete`` (the
    default: the run's outputs are all written, so the command line does not say
    that a rerun resumes, which would start a new run), else as a plain
    ``KeyboardInterrupt`` (``complete=False``: outputs that a rerun still completes
    follow, as for a member of a music ensemble).
    """
    try:
        with _held_interrupts() as held:
            for backup in _backups(callbacks):
                backup.finish()
    except KeyboardInterrupt as interrupt:  # not held back (outside the main thread)
        if complete and not isinstance(interrupt, RunCompleteInterrupt):
            raise RunCompleteInterrupt(*interrupt.args) from interrupt
        raise
    if held:
        raise RunCompleteInterrupt("interrupted while the finished run's backup was deleted") if complete \
            else KeyboardInterrupt()


def resume_epoch(callbacks, epochs=None):
    """The epoch the ``fit`` given ``callbacks`` will start at, read before ``fit``:
    that of the backup of the (first) :class:`AtomicBackupAndRestore` among them, 0
    without one (or without a backup); at most ``epochs`` (when given: a backup
    beyond it makes ``fit`` raise :class:`BackupAheadError`).

    An application's ``train`` calls it under the policy it trains under: a backup that
    recorded another precision is refused here (:class:`BackupMismatchError`, the backup
    kept), before ``fit`` writes anything (:func:`_check_precision`)."""
    _check_precision(callbacks)
    backups = _backups(callbacks)
    epoch = backup_epoch(backups[0].backup_dir) if backups else 0
    return epoch if epochs is None else min(epoch, epochs)


def epochs_run(history, callbacks):
    """The epochs a run has trained in all, those before a resume too: the epoch after
    the last one of ``history`` (the ``History`` of the run's last ``fit``, given
    ``callbacks``), else (that ``fit`` trained nothing: a run finished from its
    backup) the epoch the backup among ``callbacks`` restored, else 0."""
    if history.epoch:
        return int(history.epoch[-1]) + 1
    backups = _backups(callbacks)
    return backups[0].restored_epoch if backups else 0


def read_history_csv(path):
    """``{metric: [value per epoch]}`` and the epoch numbers from a ``CSVLogger`` file.

    A value the logger wrote as empty or ``"NA"`` (a metric missing in that epoch's
    logs) is NaN.
    """
    import csv

    history, epochs = {}, []
    if not os.path.exists(path):
        return history, epochs
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            epochs.append(int(row.pop("epoch")))
            for key, value in row.items():
                history.setdefault(key, []).append(float(value) if value not in ("", "NA", None) else float("nan"))
    return history, epochs


def logged_history(history, callbacks):
    """Every epoch's metrics of a run: ``(metrics, csv_path)``.

    With a ``CSVLogger`` among ``callbacks`` (that of :func:`resumable_callbacks`) whose
    file holds rows, its log: it spans the epochs before a resume too, and a rerun that
    only finishes a run from its backup (and so trains nothing) still has them. Else
    ``history.history`` (the epochs of this ``fit``) and None.
    """
    for callback in callbacks or ():
        if isinstance(callback, keras.callbacks.CSVLogger):
            logged, _ = read_history_csv(callback.filename)
            if logged:
                return logged, callback.filename
    return history.history, None


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


def release_traced_graphs():
    """Lets the graphs of ``tf.custom_gradient`` traces go when nothing else holds them.

    In a traced function, ``tf.custom_gradient`` (the projected GRU, TensorFlow's own
    swish and all-reduce) registers its gradient under a new name in TensorFlow's
    process-wide gradient registry, which never lets go (tensorflow/tensorflow#97697):
    the function holds the forward pass's tensors, so their whole graph, and its
    closures, such as a layer's ``call`` (the layer, its weights, every layer beside it).
    So each ``train`` of a notebook and each trial of a search kept every traced step of
    its model for good. Here each such registry entry becomes a weak reference, and an op
    of its graph holds the function: it lives as long as its graph (the gradient is only
    ever asked for an op of it), and the entry goes with the graph. Called where a
    training run or a trial begins; entries already released are left alone. (The
    library's own custom gradients, EM routing's recomputed branch and RLadder's row
    writes, release theirs as they are traced, and with them those registered so far.)
    Off TensorFlow, or if TensorFlow's private registry or ``custom_gradient`` change
    shape, it does nothing (``keras_capsules._graph_release``).
    """
    if keras.backend.backend() != "tensorflow":
        return
    _graph_release.release_traced_graphs()
