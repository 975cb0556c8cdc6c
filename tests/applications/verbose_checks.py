"""The check of ``verbose`` that the applications' ``train``, ``evaluate`` and passes over
the data make before any work (``applications.checks.verbosity``), as their tests use it.

Keras' ``fit``, ``evaluate`` and ``predict`` took any ``verbose`` (``"no"`` and ``-1`` hid
their progress bars, ``True`` showed them), and the applications' own progress bars were
shown for any true value. A test stands in for the first work a function does after its
checks (reading data, making the run directory, loading the model) with
:func:`reached`, or passes an :class:`Unread` data set, and asserts with
:func:`assert_verbose_checked_first` that a bad value is refused before it.
"""

import re

import numpy as np
import pytest

from applications.errors import InputError

#: values to parametrize over: refused (a string, a bool, integers other than 0, 1 and 2,
#: a float), and a numpy integer, taken
VERBOSE_VALUES = ["no", True, -1, 3, 1.5, np.int64(2)]


class Reached(Exception):
    """Raised by a stand-in for the first work a function does after its checks."""


def reached(*args, **kwargs):
    """A stand-in for that work (to ``monkeypatch.setattr``)."""
    raise Reached


class Unread:
    """A data set (or split) that raises :class:`Reached` at its first use: nothing of it is read."""

    def __getattr__(self, name):
        raise Reached(name)


def assert_verbose_checked_first(calls, verbose):
    """Every one of ``calls`` (functions of no argument) refuses ``verbose`` with the
    one-line ``InputError`` of ``checks.verbosity``; a numpy integer is taken: the call
    goes on to the stand-in for its first work (:class:`Reached`)."""
    for call in calls:
        if isinstance(verbose, np.integer):
            with pytest.raises(Reached):
                call()
        else:
            message = f"`verbose` must be 0, 1 or 2. Received: verbose={verbose!r}"
            with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
                call()
