"""Errors that the command line reports as one line and exit code 2 (no traceback).

Raise them for mistakes a user can fix: a bad option value, a missing data directory,
a dataset that needs a download while offline, an unreachable TPU.
"""


class CommandLineError(Exception):
    """A user error: ``keras-capsules`` prints ``keras-capsules: error: <message>``, exits 2."""


class DataNotFoundError(CommandLineError, FileNotFoundError):
    """The data an application needs is not where it was told to look."""


class StrategyError(CommandLineError, RuntimeError):
    """The requested ``tf.distribute`` strategy cannot be created here."""
