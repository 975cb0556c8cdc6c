"""Errors that the command line reports as one line and exit code 2 (no traceback).

Raise them for mistakes a user can fix: a bad option value, a missing data directory,
a dataset that needs a download while offline, an unreachable TPU, a data file that
is not what it should be, an output folder that cannot be created or written. Every
other exception is a bug as far as the command line knows: it ends with its traceback
(a ``ValueError`` too, unless it is an :class:`InputError`; an ``OSError`` such as a
``FileNotFoundError`` or a ``PermissionError`` too, unless it is a :class:`PathError`,
raised where a path the user named is checked, created, read or written: see
:func:`user_path`).
"""

import contextlib
import errno
import os


class CommandLineError(Exception):
    """A user error: ``keras-capsules`` prints ``keras-capsules: error: <message>``, exits 2."""


class InputError(CommandLineError, ValueError):
    """A bad argument value or bad input data (an argument check quoting
    ``Received: name=value``, a data file of the wrong form).

    A ``ValueError`` for Python callers (``except ValueError`` catches it, as the
    library's conventions promise); a :class:`CommandLineError` for the command line,
    which prints it as one line. Checks of the code's own consistency (a layer built
    on a shape its model never gives it) raise a plain ``ValueError``: the command
    line shows those with their traceback.
    """


class PathError(CommandLineError, OSError):
    """A path the user named (an output folder, a model file, a vocabulary, a data
    folder) cannot be used: it is missing, in the way, not a folder, or not allowed.

    Each kind is also the ``OSError`` subclass that Python raises for it, so that
    ``except PermissionError`` (or ``FileNotFoundError``, ...) of a Python caller
    still catches it: :class:`PathNotFoundError`, :class:`PathExistsError`,
    :class:`NotAFolderError`, :class:`IsAFolderError`, :class:`PathPermissionError`;
    any other ``OSError`` of a user's path (a read-only file system, a full disk) is a
    ``PathError`` itself. The message names the path and what is wrong, in one line.
    The same ``OSError`` subclasses raised anywhere else (a file the code itself
    writes, reads or creates) are bugs there: they keep their traceback.
    """


class PathNotFoundError(PathError, FileNotFoundError):
    """A path the user gave (a model file, a vocabulary, a folder) is not there.

    The message names the path and what it should be. A ``FileNotFoundError`` for
    Python callers; one line on the command line. Any other ``FileNotFoundError`` (a
    file the code itself should have found) is a bug there: it keeps its traceback.
    """


class PathExistsError(PathError, FileExistsError):
    """A path the user gave for a new folder is taken by a file."""


class NotAFolderError(PathError, NotADirectoryError):
    """A path the user gave goes through a file (``a_file/run``)."""


class IsAFolderError(PathError, IsADirectoryError):
    """A path the user gave for a file (a model, a vocabulary) is a folder."""


class PathPermissionError(PathError, PermissionError):
    """A path the user gave may not be created, read or written by this user."""


class DataNotFoundError(PathNotFoundError):
    """The data an application needs is not where it was told to look."""


class StrategyError(CommandLineError, RuntimeError):
    """The requested ``tf.distribute`` strategy cannot be created here."""


# The most specific first: the class of an OSError of a user's path.
_PATH_ERRORS = (
    (FileNotFoundError, PathNotFoundError),
    (FileExistsError, PathExistsError),
    (NotADirectoryError, NotAFolderError),
    (IsADirectoryError, IsAFolderError),
    (PermissionError, PathPermissionError),
    (OSError, PathError),
)


@contextlib.contextmanager
def user_path(doing):
    """Makes the ``OSError`` of an operation on a path the user named a :class:`PathError`.

    ``doing`` says what failed, naming the path (``"cannot create the run directory
    'runs/x'"``); the message adds the system's reason and the path it concerns:
    ``"cannot create the run directory 'runs/x': Permission denied: 'runs'"``. The error is the
    matching class of :data:`_PATH_ERRORS` (a ``PermissionError`` stays one), with
    the same ``errno``, raised from the original.

    Wrap only the operations on the user's path itself (create the folder, open the
    file): an ``OSError`` of anything else in the block would pass for the user's
    mistake and lose its traceback. A :class:`CommandLineError` passes unchanged.
    """
    try:
        yield
    except CommandLineError:
        raise
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        if isinstance(err.filename, (str, bytes, os.PathLike)):
            reason += f": {os.fsdecode(err.filename)!r}"
        kind = next(kind for base, kind in _PATH_ERRORS if isinstance(err, base))
        error = kind(f"{doing}: {reason}")
        error.errno = err.errno  # (without strerror, the message stays the one above)
        raise error from err


def create_run_dir(run_dir):
    """Creates the run directory ``run_dir`` (with its parents) if it is missing; a
    :class:`PathError` naming it when that fails (a file of that name was a bare
    ``FileExistsError`` from ``os.makedirs`` in most applications' ``train``)."""
    with user_path(f"cannot create the run directory {os.fspath(run_dir)!r}"):
        os.makedirs(run_dir, exist_ok=True)


def check_run_dir(run_dir):
    """Raises the :class:`PathError` that :func:`create_run_dir` would raise for a file in
    the way (``run_dir`` itself, or one of the folders above it, is a file), creating
    nothing: for a ``train`` that makes its run directory only once its data are ready
    (minutes later), so that the run directory is refused first, as it was there."""
    path = os.path.abspath(os.fspath(run_dir))
    there = path
    while not os.path.lexists(there) and os.path.dirname(there) != there:
        there = os.path.dirname(there)
    if os.path.lexists(there) and not os.path.isdir(there):
        kind, code = (FileExistsError, errno.EEXIST) if there == path else (NotADirectoryError, errno.ENOTDIR)
        with user_path(f"cannot create the run directory {os.fspath(run_dir)!r}"):
            raise kind(code, os.strerror(code), there)


def first_missing(path):
    """The outermost folder of ``path`` that is not there yet (``runs`` for a new
    ``runs/sst`` when ``runs`` is missing too), or None when ``path`` exists: the
    folders a refused or failed run removes again when they hold no file."""
    path = os.path.abspath(path)
    if os.path.lexists(path):
        return None
    while os.path.dirname(path) != path and not os.path.lexists(os.path.dirname(path)):
        path = os.path.dirname(path)
    return path


def remove_empty_dirs(top):
    """Removes ``top`` and the folders below it that hold no file (a folder that holds
    one, and the folders above it, are kept: nothing written is lost)."""
    for folder, _, _ in os.walk(top, topdown=False):
        try:
            os.rmdir(folder)
        except OSError:  # not empty: something was written there, keep it
            pass


def leaves_no_empty_run_dir(argument="run_dir"):
    """Decorator of an application's ``train``: a call that raises leaves no empty run
    directory behind.

    The run directory (the function's argument ``argument``) and its parents that were
    missing when the call began are removed again when the call raises (a bad option
    or data file refused once the folder was made, a Ctrl-C while the data were being
    prepared) and they hold no file; a folder that was already there, or that holds a
    file (a backup, a saved member, TensorBoard logs of an epoch), is kept. The command
    line did so for its own calls; a Python caller got an empty run directory from every
    refusal after ``create_run_dir``.
    """
    import functools
    import inspect

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # the function's own error for its arguments
                return function(*args, **kwargs)
            bound.apply_defaults()
            run_dir = bound.arguments.get(argument)
            new = first_missing(os.fspath(run_dir)) if isinstance(run_dir, (str, os.PathLike)) else None
            try:
                return function(*args, **kwargs)
            except BaseException:
                if new:
                    remove_empty_dirs(new)
                raise

        return wrapper

    return decorate


def writable_folder(folder, doing):
    """Creates ``folder`` (with its parents) if it is missing and makes sure this user
    may write into it; a :class:`PathError` saying ``doing`` otherwise (see
    :func:`user_path`). For a folder the user named that the code is about to write
    into (a cache that is missing an entry): a complete read-only cache is never asked."""
    with user_path(doing):
        os.makedirs(folder, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):  # (root passes, unless the file system is read-only)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(folder))


def report(err, prog):
    """Prints the user error ``err`` as one line ``PROG: error: ...`` on stderr and returns
    the exit code 2; with ``KERAS_CAPSULES_DEBUG`` set, raises it instead (the traceback,
    for developers). What every command line of the project does with a
    :class:`CommandLineError`."""
    import sys

    if os.environ.get("KERAS_CAPSULES_DEBUG"):
        raise err
    message = (str(err).strip().splitlines() or [type(err).__name__])[0]
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


#: The ``ValueError`` messages of sizes beyond what any machine addresses, which numpy and
#: TensorFlow raise before they try to allocate: numpy's array of more bytes than an
#: ``intp`` counts (``occluded_mnist --frame-size 99999999999``), and TensorFlow's shape
#: of a dimension beyond int64 (``demo --pose-size 99999999999``: 2e22 filters). Each
#: ended the command with its traceback, where a size that fits the address space but not
#: the memory was one line.
_SIZE_BEYOND_ANY_MACHINE = (
    "array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size",
    "Maximum allowed dimension exceeded",
    "Can't convert Python sequence with out-of-range integer to Tensor",
)


def out_of_memory(err):
    """Whether ``err`` says the machine ran out of memory: a ``MemoryError`` (numpy's
    "Unable to allocate ..." is one), TensorFlow's ``ResourceExhaustedError`` (OOM), or
    numpy's or TensorFlow's refusal of a size beyond any machine's memory
    (:data:`_SIZE_BEYOND_ANY_MACHINE`), also when an error raised while handling it
    wraps it."""
    import sys

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, MemoryError):
            return True
        if type(err) is ValueError and any(text in str(err) for text in _SIZE_BEYOND_ANY_MACHINE):
            return True
        tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
        if tf_errors is not None and isinstance(err, tf_errors.ResourceExhaustedError):
            return True
        err = err.__cause__ or err.__context__
    return False


def report_out_of_memory(err, prog):
    """Prints running out of memory (:func:`out_of_memory`) as one line
    ``PROG: error: out of memory (...)`` that says to ask for less, and returns the exit
    code 2; with ``KERAS_CAPSULES_DEBUG`` set, raises ``err`` instead. Not a bug, and not
    an input the checks could refuse ahead of time (how much fits depends on the
    machine): ``--num-train 100000000`` ended in numpy's "Unable to allocate 292. GiB"
    and ``train music --units 1000000000`` in TensorFlow's OOM, each with a traceback."""
    import re
    import sys

    if os.environ.get("KERAS_CAPSULES_DEBUG"):
        raise err
    detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
    # (TensorFlow's message: without its "{{function_node ...}}" and "[Op:...] name:")
    detail = re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:[^\]]*\].*$", "", detail) or type(err).__name__
    print(f"{prog}: error: out of memory ({detail}): ask for less: fewer examples, smaller sizes, "
          "units or batches (KERAS_CAPSULES_DEBUG=1 shows the traceback)", file=sys.stderr)
    return 2


def report_if_not_a_bug(err, prog):
    """The exit code 2 after :func:`report` of a :class:`CommandLineError` or
    :func:`report_out_of_memory` of running out of memory; None for any other error, a
    bug, which the caller raises again (its traceback)."""
    if isinstance(err, CommandLineError):
        return report(err, prog)
    if out_of_memory(err):
        return report_out_of_memory(err, prog)
    return None


def run_main(main, prog):
    """Runs a module's ``main()`` as the ``keras-capsules`` command does its commands: a
    :class:`CommandLineError` is one line and exit code 2, and so is running out of
    memory (:func:`report_if_not_a_bug`)."""
    try:
        result = main()
    except Exception as err:
        code = report_if_not_a_bug(err, prog)
        if code is None:
            raise
        return code
    # a main() may return its results (a list, a dict, a tuple) for callers in Python:
    # sys.exit() of those printed them to stderr and exited with code 1 after a success
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
