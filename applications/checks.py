"""Argument checks shared by the applications' Python functions (data generators, loaders).

Each returns the normalised value or raises ``applications.errors.InputError`` (a
``ValueError``; one line on the command line) quoting ``Received: name=value``, the
format the library's layers use; :func:`require_model`
refuses a saved model of another application with a one-line ``CommandLineError``.
"""

import math
import numbers
import os
import re
import sys

import numpy as np

from applications.errors import InputError, user_path


def integer_at_least(name, value, minimum):
    """``value`` as an int if it is an integer (Python or numpy, not a bool) >= ``minimum``.

    Raises:
        InputError (a ValueError): ``"`name` must be an integer >= minimum. Received: name=value"``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    return int(value)


def true_or_false(name, value):
    """``value`` as a bool if it is True or False (Python's or numpy's).

    Strings and numbers are refused: ``"no"`` and ``"False"`` are truthy, so an option
    given as text was taken as on.

    Raises:
        InputError (a ValueError): ``"`name` must be True or False. Received: name=value"``.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return bool(value)


def verbosity(verbose):
    """``verbose`` of the applications' ``train``, ``evaluate`` and data passes as an int
    if it is 0, 1 or 2 (Keras' ``fit`` levels; Python or numpy, not a bool).

    Keras' ``fit``, ``evaluate`` and ``predict`` take any value, and so did the
    applications' own progress bars (``if verbose:``): ``"no"`` and ``-1`` hid Keras'
    progress bars and showed the applications' own, ``True`` showed them all.

    Raises:
        InputError (a ValueError): ``"`verbose` must be 0, 1 or 2. Received: verbose=value"``.
    """
    if isinstance(verbose, bool) or not isinstance(verbose, numbers.Integral) or verbose not in (0, 1, 2):
        raise InputError(f"`verbose` must be 0, 1 or 2. Received: verbose={verbose!r}")
    return int(verbose)


def numpy_seed(seed):
    """``seed`` if numpy seeds a generator with it (None, a non-negative integer or a
    sequence of them), else a one-line ``InputError`` (numpy's own was a traceback:
    "expected non-negative integer", or a TensorFlow one where the seed was used only
    when a stream was read)."""
    import numpy as np

    try:
        if isinstance(seed, (bool, str, bytes)):  # numpy reads bools as 0/1; a str is no sequence of ints
            raise TypeError
        np.random.default_rng(seed)
    except (TypeError, ValueError):
        raise InputError(
            f"`seed` must be None, a non-negative integer or a sequence of them. Received: seed={seed!r}"
        ) from None
    return seed


def stream_seed(seed, first_epoch=None):
    """``seed`` of a ``tf.data`` pipeline's draws (``shuffle``, ``Dataset.random``) as an
    int, if it is an integer >= 0 (Python or numpy, not a bool); None (draws that differ
    from run to run) only when ``first_epoch`` is None: the epochs of a stream from
    ``first_epoch`` (``distribute.epoch_stream``) are drawn from ``(seed, epoch)``.

    tf.data took ``seed=1.5`` or ``"a"`` with a raw TensorFlow error (with ``first_epoch``
    only when the stream was read), and ``True`` or ``-1`` silently.

    Raises:
        InputError (a ValueError): ``"`seed` must be an integer >= 0. Received: seed=value"``
        (``"... for epochs drawn from (seed, epoch) ... Received: seed=None"``).
    """
    if seed is None:
        if first_epoch is None:
            return None
        raise InputError("`seed` must be an integer >= 0 for epochs drawn from (seed, epoch) (`first_epoch`): "
                         "without one no run draws its epochs again. Received: seed=None")
    return integer_at_least("seed", seed, 0)


def warn_without_effect(where, name, value, needs):
    """Warns (``UserWarning``) that the option ``name=value`` given to ``where`` (a model
    builder) has no effect: it matters only together with another option, ``needs``.

    As the library's layers do for such an option (``RLadder`` and ``seed`` without
    dropout): the model is built as without it. Callers warn only for a value other than
    the option's default, so that the defaults (and the command line, which passes
    them) stay silent. The warning points at the code that called ``where``.
    """
    import warnings

    warnings.warn(f"{where}: {name}={value!r} has no effect: it needs {needs}.", UserWarning, stacklevel=3)


def finite_number(name, value, positive):
    """``value`` as a float if it is a finite real number (not a bool), > 0 when
    ``positive``, else >= 0.

    Raises:
        InputError (a ValueError): ``"`name` must be a finite number > 0. Received: name=value"``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        what = "> 0" if positive else ">= 0"
        raise InputError(f"`{name}` must be a finite number {what}. Received: {name}={value!r}")
    return float(value)


def model_options(model_kwargs, build_model, given=()):
    """``model_kwargs`` of an application's ``train`` as a new dict (``{}`` for None), if
    it is a mapping of keyword arguments of its ``build_model`` other than ``given`` (the
    arguments ``train`` passes itself: its own options, the data's sizes).

    ``train`` calls it before it reads any data or makes its run directory: a typo was a
    ``TypeError`` from deep inside ``build_model`` ("got an unexpected keyword
    argument"), raised once the run directory was made (Sort-of-CLEVR) or once every
    image had gone through ResNet-101 (CLEVR), and an option ``train`` passes itself
    was Python's "got multiple values for keyword argument". Only the names are checked
    here: ``build_model`` checks the values.

    Raises:
        InputError (a ValueError): ``"`model_kwargs` must be a dict or None. Received:
            model_kwargs=..."``; ``"Unknown model option(s) ['unit']; expected some of
            [...]. Received: model_kwargs=..."``; for names in ``given``, ``"Model
            option(s) [...] are set by train (from its own arguments or the data), not
            by model_kwargs; expected some of [...]. Received: model_kwargs=..."``.
    """
    import collections.abc
    import inspect

    if model_kwargs is None:
        return {}
    if not isinstance(model_kwargs, collections.abc.Mapping):
        raise InputError(f"`model_kwargs` must be a dict or None. Received: model_kwargs={model_kwargs!r}")
    parameters = inspect.signature(build_model).parameters.values()
    known = sorted(p.name for p in parameters
                   if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in given)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    set_by_train = sorted((name for name in model_kwargs if name in given), key=str)
    if set_by_train:
        raise InputError(f"Model option(s) {set_by_train} are set by train (from its own arguments or the data), "
                         f"not by model_kwargs; expected some of {known}. Received: model_kwargs={model_kwargs!r}")
    unknown = [] if takes_any else sorted((name for name in model_kwargs if name not in known), key=str)
    if unknown:
        raise InputError(f"Unknown model option(s) {unknown}; expected some of {known}. "
                         f"Received: model_kwargs={model_kwargs!r}")
    return dict(model_kwargs)


def callback_list(callbacks):
    """``callbacks`` of an application's ``train`` as a new list: None (none, as for
    Keras' ``fit``) or a list or tuple of ``keras.callbacks.Callback`` instances.

    ``train`` calls it before it reads any data or makes its run directory: None was a
    ``TypeError`` (``[*None]``), and a single callback (not in a list) or anything else
    in the list an error of Keras' ``fit``, both once the run directory was made and the
    data were read.

    Raises:
        InputError (a ValueError): ``"`callbacks` must be None or a list of
            keras.callbacks.Callback instances. Received: callbacks=..."``.
    """
    import keras

    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)) or not all(isinstance(c, keras.callbacks.Callback) for c in callbacks):
        raise InputError("`callbacks` must be None or a list of keras.callbacks.Callback instances. "
                         f"Received: callbacks={callbacks!r}")
    return list(callbacks)


def learning_rate(value):
    """A Keras learning-rate schedule as it is, or a finite number > 0 as a float: a NaN
    rate trained into NaN weights, a negative one uphill, without a word."""
    import keras

    if isinstance(value, keras.optimizers.schedules.LearningRateSchedule):
        return value
    return finite_number("learning_rate", value, positive=True)


def load_model(model_path):
    """``keras.saving.load_model(model_path)``; a file that is no Keras model is one line.

    A ``.keras`` file is a zip archive holding ``config.json``; for any other file of
    that name Keras said "File not found" (not a zip) or raised a bare ``KeyError``
    (a zip without the config), although the file was there; a file of another name
    (``--model README.md``) was Keras' "File format not supported". Those are a
    ``CommandLineError`` naming the file and what it should be; every other load
    error is Keras' own. A model path that is a folder, or that this user may not read,
    is a ``PathError`` naming it (``IsAFolderError``, ``PathPermissionError``).
    """
    import zipfile

    import keras

    import keras_capsules  # noqa: F401  (registers the layers the model may hold)
    from applications.arguments import precision_policy
    from applications.errors import CommandLineError

    path = os.fspath(model_path)
    if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
        # (a device such as /dev/null was Keras' "File format not supported" traceback; a
        # named pipe would block the open below)
        raise CommandLineError(
            f"{path} is not a Keras model file (it is no regular file): pass the .keras file "
            "that `keras-capsules train` writes"
        )
    if os.path.exists(path):
        with user_path(f"cannot read the model {path!r}"), open(path, "rb"):
            pass  # (zipfile.is_zipfile below takes an unreadable file for "not a zip")
    if os.path.isfile(path) and not path.endswith(".keras"):
        # (Keras' ValueError "File format not supported", a traceback, or for .h5 its legacy
        # loader's; the applications write .keras files only)
        raise CommandLineError(
            f"{path} is not a Keras model file (one ending in .keras, the zip archive that "
            "`model.save` writes): pass one written by `keras-capsules train`"
        )
    if path.endswith(".keras") and os.path.isfile(path):
        is_model = zipfile.is_zipfile(path)
        if is_model:
            with zipfile.ZipFile(path) as archive:
                is_model = "config.json" in archive.namelist()
        if not is_model:
            raise CommandLineError(
                f"{path} is not a Keras model file (a .keras file is the zip archive that "
                "`model.save` writes): pass one written by `keras-capsules train`"
            )
    try:
        # (a model trained under mixed_float16 loads under it: its optimizer is compiled
        # again as a LossScaleOptimizer, so that the saved state fits it)
        with precision_policy("mixed_float16" if _saved_with_loss_scaling(path) else None):
            model = keras.saving.load_model(path)
    except TypeError as err:
        # a class that neither the library nor the loaded application registers: another
        # application's model (its record was not beside it), a traceback before
        missing = re.search(r"Could not locate class '([^']+)'", str(err))
        if missing is None:
            raise
        raise CommandLineError(
            f"{path} holds a {missing.group(1)!r}, which neither keras_capsules nor this "
            "application defines: is it another application's model? Evaluate it with the "
            "application that trained it (`keras-capsules evaluate APP --model ...`)"
        ) from err
    _note_non_finite_weights(model, path)
    return model


def _saved_with_loss_scaling(path):
    """Whether the ``.keras`` file ``path`` holds the state of a ``LossScaleOptimizer``
    (a model compiled under ``mixed_float16``: its weights file has the group
    ``optimizer/inner_optimizer``); False for anything else, or what cannot be read.

    The functional model's own dtype policy is not saved, only its layers', so
    ``load_model`` under another global policy compiled a plain optimizer: Keras warned
    "Skipping variable loading for optimizer ..." and the optimizer's state (its moments,
    the loss scale) was lost for training on from the file.
    """
    import zipfile

    if not (str(path).endswith(".keras") and os.path.isfile(path)):
        return False
    try:
        import h5py

        with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as stored, \
                h5py.File(stored, "r") as weights:
            return "optimizer/inner_optimizer" in weights
    except (KeyError, OSError, ValueError, zipfile.BadZipFile):  # no weights file, not HDF5: Keras says
        return False


def _note_non_finite_weights(model, path):
    """A note on stderr when ``model``'s weights hold NaN or infinite values (a diverged or
    damaged model): its scores are no measure of anything, and an occluded_mnist model
    of NaN weights scored a test error of 1.0 without a word (helper-196)."""
    bad = sum(int(np.size(w) - np.count_nonzero(np.isfinite(w))) for w in model.get_weights()
              if np.asarray(w).dtype.kind == "f")
    if bad:
        print(f"note: {path} holds {bad} NaN or infinite weight values (a diverged or damaged model): "
              "its scores are not those of a trained model", file=sys.stderr)


def require_model(model, model_path, accepted, kind, application, expected):
    """Refuses a loaded model that ``evaluate`` of ``application`` cannot score.

    ``accepted(shapes, model)`` says whether ``model`` (its input shapes ``shapes``, a
    list of tuples) is one; if not, a one-line ``CommandLineError`` (the command line
    prints it and exits with code 2) names what it should be and what it takes:
    ``"<model_path> is not <kind> (<expected>; it takes inputs of shape [...]): pass
    one written by `keras-capsules train <application>`"``. Keras' own error came
    later, from deep inside the model, and named none of that.
    """
    from applications.errors import CommandLineError

    shapes = [tuple(x.shape) for x in model.inputs]
    if not accepted(shapes, model):
        raise CommandLineError(
            f"{model_path} is not {kind} ({expected}; it takes inputs of shape {shapes}): "
            f"pass one written by `keras-capsules train {application}`"
        )


def recorded_metrics(model_path):
    """The dict ``train`` wrote to ``metrics.json`` beside ``model_path``; ``{}`` when there
    is none or it is not a JSON object (a run of an older version, a model moved away
    from its run directory). ``evaluate`` takes the options of training from it."""
    return _json_object(os.path.join(os.path.dirname(os.path.abspath(model_path)), "metrics.json")) or {}


def data_fingerprint(application, **options):
    """The fingerprint of the data that ``options`` (the command line's, by name:
    ``data_dir``, text_classification's ``dataset``) choose for ``application``
    (``arguments.data_fingerprint``), or None: its ``--data-dir`` is a location only, or
    the data cannot be read. ``train`` records it in ``metrics.json`` as
    ``"data_fingerprint"`` (``tune`` too), where :func:`recorded_data` compares it."""
    import argparse

    from applications.arguments import data_fingerprint as of_arguments

    return of_arguments(argparse.Namespace(application=application, **options))


def _recorded_fingerprint(model_path, fingerprint):
    """The data fingerprint recorded in ``metrics.json`` beside ``model_path``, of only the
    files that ``fingerprint`` (of the data ``evaluate`` reads) holds; None when there is
    none (a run of an older version, a model moved away from its run) or nothing to compare."""
    from applications.shared_data import only_files

    recorded = recorded_metrics(model_path).get("data_fingerprint")
    if not isinstance(recorded, dict) or not isinstance(fingerprint, dict):
        return None
    return only_files(recorded, set(fingerprint.get("files") or ())) if "files" in fingerprint else recorded


def recorded_data_folder(model_path, kind):
    """The folder the data of the run (or search) of ``model_path`` were read in, as
    ``train`` (or ``tune``) recorded it in ``metrics.json`` beside the model: the
    ``"source"`` of its ``"data_fingerprint"`` when that is of data of ``kind`` (its
    ``"data"``, e.g. ``"SST tree files"``), else None (a run of an older version, a model
    moved away from its run, data of no fingerprint: a TFDS set).

    ``evaluate`` of sst and text_classification reads its data there when no folder is
    given, as music's reads the chorales file ``train`` recorded (they needed
    ``--data-dir`` again). Whether the folder still exists is left to the data's loader
    (its one-line error names it), and whether it still holds the run's data to
    :func:`recorded_data`.
    """
    fingerprint = recorded_metrics(model_path).get("data_fingerprint")
    if not isinstance(fingerprint, dict) or fingerprint.get("data") != kind:
        return None
    source = fingerprint.get("source")
    return source if isinstance(source, str) and source else None


def holds_recorded_data(model_path, fingerprint):
    """Whether ``fingerprint`` (of the data in a folder ``evaluate`` was given) is of the data
    the run of ``model_path`` recorded (:func:`recorded_data`): the same files moved to
    another folder are the run's data."""
    from applications.shared_data import same_data

    recorded = _recorded_fingerprint(model_path, fingerprint)
    return recorded is not None and same_data(recorded, fingerprint)


def recorded_data(model_path, fingerprint, explicit=False):
    """Checks that ``evaluate`` of ``model_path`` scores the data its run was trained and
    tested on: ``fingerprint`` (``shared_data.files_fingerprint``) of the files it reads,
    against the one ``train`` (or ``tune``) recorded in ``metrics.json`` beside the model
    (``"data_fingerprint"``, of only the files it reads: files added beside them, or a
    run's training files, do not count). The folder they are read in is not compared: the
    same files moved elsewhere are the same data.

    Other data where the run's were (the recorded folder, by default or given by its
    name: other digits, another chorales file, ``train`` files beside a ``t10k`` split) are
    refused: their score is not the run's test score, and was reported as such.
    ``explicit`` (the user gave the data's folder or file) other data in another folder are
    the user's choice: scored, with a one-line note on stderr for the user. Nothing is
    checked without a record (a run of an older version) or a ``fingerprint`` (data
    that cannot be read: the loader says why; data whose folder is a location only).

    Raises:
        InputError: the data were the run's and have changed since, in one line.
    """
    from applications.shared_data import describe_data, same_data

    recorded = _recorded_fingerprint(model_path, fingerprint)
    if recorded is None or same_data(recorded, fingerprint):
        return None
    run = os.path.dirname(os.path.abspath(model_path))

    def folder(data):
        return os.path.realpath(data["source"]) if isinstance(data.get("source"), str) else None

    if explicit and folder(fingerprint) != folder(recorded):
        print(f"note: {describe_data(fingerprint)} are not the data the model in {run} was trained and tested "
              f"on ({describe_data(recorded)}): this is no score of the run's test data", file=sys.stderr)
        return
    raise InputError(
        f"the model in {run} was trained and tested on {describe_data(recorded)}; "
        f"{fingerprint.get('source') or 'the data'} now holds other data "
        f"({describe_data({**fingerprint, 'source': None}, recorded)}): put the run's data back there "
        "(or pass the folder they were moved to)"
    )


def cache_dir_record(cache_dir, run_dir):
    """How ``train`` records its cache folder in ``metrics.json`` (read back by
    :func:`recorded_cache_dir`): relative to ``run_dir`` when inside it (the default
    ``RUN_DIR/cache``, which moves and is copied with the run), else absolute."""
    cache_dir, run_dir = os.path.abspath(str(cache_dir)), os.path.abspath(str(run_dir))
    inside = os.path.commonpath([cache_dir, run_dir]) == run_dir
    return os.path.relpath(cache_dir, run_dir) if inside else cache_dir


def recorded_cache_dir(model_path):
    """The cache folder ``train`` recorded in ``metrics.json`` beside ``model_path``
    (``"cache_dir"``, see :func:`cache_dir_record`; a relative one is taken from the
    model's folder) when that folder exists, else None (a run of an older version, or a
    cache moved or deleted since).

    ``evaluate`` of a run trained with ``--cache-dir ELSEWHERE`` looked only in the
    model's folder ``/cache``: it stopped at a missing-data error, or rebuilt the cache
    there, though the features were on disk.
    """
    cache_dir = recorded_metrics(model_path).get("cache_dir")
    if not isinstance(cache_dir, str) or not cache_dir:
        return None
    cache_dir = os.path.join(os.path.dirname(os.path.abspath(model_path)), cache_dir)  # (an absolute one as it is)
    return cache_dir if os.path.isdir(cache_dir) else None


def recorded_integers(model_path, names, minimum=0):
    """Of :func:`recorded_metrics`, the options ``names`` that are integers of at least
    ``minimum`` (smallnorb's and clevr's ``image_size``, Sort-of-CLEVR's ``seed``, ...)."""
    metrics = recorded_metrics(model_path)
    return {name: metrics[name] for name in names
            if isinstance(metrics.get(name), int) and not isinstance(metrics[name], bool) and metrics[name] >= minimum}


def recorded_split(model_path, given, defaults=None, holds_data=None):
    """The options that made the train/test split of ``model_path``, as ``train`` recorded
    them (``"split"`` in ``metrics.json`` beside the model), with ``given`` (the user's
    values, None where not given) checked against them.

    ``defaults``: ``{name: value}`` of the options whose recorded None stands for a value
    of their own, the folder ``train`` read when no ``--data-dir`` was given
    (``applications.mnist_digits.default_data_dir``); a value may be a function of the
    recorded split that gives it (or None: no such value, e.g. another ``--source``).
    A given value is checked against the value the recorded None stands for (``train``
    records None for that folder: the same folder, given by its path, was refused as
    "another split"), and paths (``data_dir``) are compared as the folders they name
    (absolute, symbolic links resolved). ``holds_data``: a function of a given
    ``data_dir`` that tells whether it holds the run's data (:func:`holds_recorded_data`):
    the same files moved to another folder are the same split, not another.

    Returns ``(values, note)``. ``values``: the recorded values where ``given`` has None.
    When nothing was recorded (a run of an older version, or a model moved away from its
    run directory), ``given`` as it is (a None seed read as 0) and a ``note`` for the
    user; else ``note`` is None. A given value that differs from the recorded one is
    refused (``CommandLineError``): its test data would hold digits the model was trained
    on (``evaluate`` of demo, occluded_mnist and textured_mnist).
    """
    from applications.errors import CommandLineError

    metrics = os.path.join(os.path.dirname(os.path.abspath(model_path)), "metrics.json")
    recorded = recorded_metrics(model_path).get("split")
    if not isinstance(recorded, dict):
        values = {k: (0 if k == "seed" and v is None else v) for k, v in given.items()}
        why = "a run of an older version?"
        if os.path.isfile(metrics) and _json_object(metrics) is None:  # (the note said "older version" of it too)
            why = "it is not the JSON object train writes: damaged?"
        return values, (
            f"note: {metrics} records no train/test split ({why}): evaluating on "
            f"the test split of --seed {values.get('seed')}; if training used another seed, it overlaps "
            "training digits"
        )

    for name in given:  # (a hand-edited record: data_dir 3 was a TypeError traceback in the loader)
        value = recorded.get(name)
        if value is not None and not _recordable(name, value):
            raise CommandLineError(
                f"{metrics} records the train/test split's {name} as {value!r}, which `train` does not write "
                "(was the file edited?): restore it, or train the model again"
            )

    def meant(name):
        """The value the recorded option ``name`` stands for (its default's for a None)."""
        value = recorded.get(name)
        if value is None and name in (defaults or {}):
            default = defaults[name]
            value = default(recorded) if callable(default) else default
        return value

    def same(name, value, other):
        if name == "data_dir" and isinstance(value, (str, os.PathLike)):
            if isinstance(other, (str, os.PathLike)) and os.path.realpath(value) == os.path.realpath(other):
                return True
            return holds_data is not None and bool(holds_data(value))
        return value == other

    def shown(name):
        if recorded.get(name) is None and meant(name) is not None:
            return f"the default {meant(name)}"
        return recorded.get(name)

    differ = [f"--{name.replace('_', '-')} {value} (trained with {shown(name)})"
              for name, value in given.items() if value is not None and not same(name, value, meant(name))]
    if differ:
        raise CommandLineError(
            f"{model_path} was trained on another train/test split than {', '.join(differ)} gives: its test "
            "digits would overlap the training digits; leave these options out to use the recorded split"
        )
    return {k: recorded.get(k, 0 if k == "seed" else None) if v is None else v for k, v in given.items()}, None


def _json_object(path):
    """The JSON object (a dict) in the file ``path``; None when it is missing, unreadable,
    not JSON or another JSON value."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _recordable(name, value):
    """Whether ``value`` is of the kind ``train`` records for the split option ``name``:
    a folder's path (``data_dir``), a seed (a whole number), or for the others a word or
    a number of at least 0 (a count or fraction; not a list, object or true/false)."""
    if name == "seed":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "data_dir" or isinstance(value, str):
        return isinstance(value, str)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def single_output_shape(model):
    """The shape of ``model``'s one output tensor, or None (several or nested outputs)."""
    output = model.output
    return None if isinstance(output, (dict, list, tuple)) else tuple(output.shape)


def image_shape_matches(shape, image_shape):
    """Whether an input ``shape`` ``[batch, H, W, C]`` takes images of ``image_shape`` (H, W, C);
    a None height or width takes any."""
    return len(shape) == 4 and shape[3] == image_shape[2] and all(
        dim is None or dim == size for dim, size in zip(shape[1:3], image_shape[:2])
    )
