"""Where the commands' output goes: results on stdout, progress on stderr.

``keras-capsules evaluate ... > result.json`` must leave a JSON document in the file,
while the user still sees Keras' progress bars (which Keras writes to ``sys.stdout``,
looked up at every print) on the terminal.
"""

import contextlib
import sys


def progress_on_stderr(verbose):
    """A context in which what is written to ``sys.stdout`` (Keras' progress bars,
    ``keras.utils.Progbar``) goes to stderr while ``verbose``; a no-op otherwise."""
    return contextlib.redirect_stdout(sys.stderr) if verbose else contextlib.nullcontext()
