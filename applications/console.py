"""Where the commands' output goes: results on stdout, progress on stderr.

``keras-capsules evaluate ... > result.json`` must leave a JSON document in the file,
while the user still sees Keras' progress bars (which Keras writes to ``sys.stdout``,
looked up at every print) on the terminal.

It also makes the progress bars of passes over a ``tf.data`` dataset, whose length
tf.data may or may not know (:func:`progress_bar`, :func:`finish`).
"""

import contextlib
import sys


def progress_on_stderr(verbose):
    """A context in which what is written to ``sys.stdout`` (Keras' progress bars,
    ``keras.utils.Progbar``) goes to stderr while ``verbose``; a no-op otherwise."""
    return contextlib.redirect_stdout(sys.stderr) if verbose else contextlib.nullcontext()


def progress_bar(total, unit, verbose):
    """A ``keras.utils.Progbar`` counting ``unit``s while ``verbose``, else None.

    ``total`` is a number, None (unknown: the bar counts without a target), or a
    ``tf.data.Dataset`` (its cardinality, where tf.data knows it)."""
    if not verbose:
        return None
    import keras

    if hasattr(total, "cardinality"):
        total = int(total.cardinality())
        total = total if total >= 0 else None
    return keras.utils.Progbar(total, unit_name=unit)


def finish(progress, count):
    """Ends ``progress`` (from :func:`progress_bar`, or None) at ``count``: a bar without a
    target does not end by itself."""
    if progress is not None and progress.target is None:
        progress.update(count, finalize=True)
