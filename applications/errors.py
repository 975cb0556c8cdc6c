"""Errors that the command line reports as one line and exit code 2 (no traceback).

Raise them for mistakes a user can fix: a bad option value, a missing data directory,
a dataset that needs a download while offline, an unreachable TPU, a data file that
is not what it should be. Every other exception is a bug as far as the command line
knows: it ends with its traceback (a ``ValueError`` too, unless it is an
:class:`InputError`; a ``FileNotFoundError`` too, unless it is a
:class:`PathNotFoundError`, raised where a path the user named is checked).
"""


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


class PathNotFoundError(CommandLineError, FileNotFoundError):
    """A path the user gave (a model file, a vocabulary, a folder) is not there.

    The message names the path and what it should be. A ``FileNotFoundError`` for
    Python callers; one line on the command line. Any other ``FileNotFoundError`` (a
    file the code itself should have found) is a bug there: it keeps its traceback.
    """


class DataNotFoundError(PathNotFoundError):
    """The data an application needs is not where it was told to look."""


class StrategyError(CommandLineError, RuntimeError):
    """The requested ``tf.distribute`` strategy cannot be created here."""
