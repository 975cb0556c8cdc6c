"""Where the commands' output goes: results on stdout, progress on stderr.

``keras-capsules evaluate ... > result.json`` must leave a JSON document in the file,
while the user still sees Keras' progress bars (which Keras writes to ``sys.stdout``,
looked up at every print) on the terminal.

It also makes the progress bars of passes over a ``tf.data`` dataset, whose length
tf.data may or may not know (:func:`progress_bar`, :func:`finish`), and loads
TensorFlow for the command line without the lines of its start-up that ask nothing of
the user (:func:`load_tensorflow_quietly`).
"""

import contextlib
import os
import re
import sys
import tempfile


def progress_on_stderr(verbose):
    """A context in which what is written to ``sys.stdout`` (Keras' progress bars,
    ``keras.utils.Progbar``) goes to stderr while ``verbose``; a no-op otherwise."""
    return contextlib.redirect_stdout(sys.stderr) if verbose else contextlib.nullcontext()


def predict(model, x, batch_size, verbose):
    """``model.predict(x)``, with Keras' progress bar on stderr while ``verbose``."""
    with progress_on_stderr(verbose):
        return model.predict(x, batch_size=batch_size, verbose=verbose)


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


#: Lines that TensorFlow's C++ start-up writes straight to the file descriptor 2 while
#: it loads on a machine without a GPU: some before absl's logging starts, so
#: ``TF_CPP_MIN_LOG_LEVEL`` does not hide them (the stub's "Could not find cuda
#: drivers", twice; absl's notice that it is not initialized, twice; the CPU
#: instructions TensorFlow's build does not use, on two lines; oneDNN's "custom
#: operations are on", where the user turned them on).
STARTUP_NOISE = (
    re.compile(r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"),
    re.compile(r"[IW]\d{4} \S+\s+\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine"),
    re.compile(r"I\d{4} \S+\s+\d+ cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized"),
    re.compile(r"To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\."),
    re.compile(r"I\d{4} \S+\s+\d+ port\.cc:\d+\] oneDNN custom operations are on"),
)
#: The CUDA platform's error when it looks for a GPU: noise where the stub found no CUDA
#: driver (a machine without a GPU), the cause to read where it did.
NO_DRIVER = STARTUP_NOISE[1]
CUINIT_ERROR = re.compile(r"E\d{4} \S+\s+\d+ cuda_platform\.cc:\d+\] failed call to cuInit")


def without_startup_noise(text):
    """``text`` (what TensorFlow's start-up wrote) without the lines of
    :data:`STARTUP_NOISE`, and without the failed ``cuInit`` when the same start-up
    found no CUDA driver; every other line is kept, in its order."""
    lines = text.splitlines(keepends=True)
    no_driver = any(NO_DRIVER.match(line) for line in lines)
    return "".join(
        line for line in lines
        if not any(noise.match(line) for noise in STARTUP_NOISE)
        and not (no_driver and CUINIT_ERROR.match(line))
    )


def load_tensorflow_quietly():
    """Imports TensorFlow and lists its devices (where TensorFlow looks for a GPU, not
    yet its runtime: thread counts can still be set) with the file descriptor 2 sent to
    a temporary file, then writes what was written there to ``sys.stderr`` without the
    start-up noise (:func:`without_startup_noise`). Python's warnings, an error
    TensorFlow logs and the traceback of a failed import still show. Unless the user
    set it, ``TF_CPP_MIN_LOG_LEVEL`` becomes 1: the INFO lines of TensorFlow's C++ (XLA's
    service start-up, "Compiled cluster using XLA!") go too, its warnings and errors
    stay. Nothing is held back with ``KERAS_CAPSULES_DEBUG`` set. A no-op once
    TensorFlow is loaded (its start-up is over)."""
    if "tensorflow" in sys.modules or os.environ.get("KERAS_CAPSULES_DEBUG"):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        capture = tempfile.TemporaryFile()
    except OSError:  # no temporary folder to write to: TensorFlow's lines as they come
        capture = None
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2: nothing to show anything on
        saved = None
    if capture is None or saved is None:
        for opened, close in ((capture, lambda f: f.close()), (saved, os.close)):
            if opened is not None:
                close(opened)
        import tensorflow  # noqa: F401

        return
    with capture:
        try:
            _flush_stderr()
            os.dup2(capture.fileno(), 2)
            import tensorflow as tf

            tf.config.list_physical_devices()
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = without_startup_noise(capture.read().decode("utf-8", errors="replace"))
            if text:
                sys.stderr.write(text)
                _flush_stderr()


def _flush_stderr():
    for stream in (sys.stderr, sys.__stderr__):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
