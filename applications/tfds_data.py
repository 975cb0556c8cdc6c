"""TFDS helpers: a friendly error when a dataset is not prepared and we are offline."""

import contextlib
import os

from applications.errors import DataNotFoundError


def require_prepared(name, data_dir=None):
    """The ``tfds`` builder of ``name`` in ``data_dir``, if its data is prepared there.

    Applications call this before ``builder.as_dataset(...)`` instead of
    ``tfds.load(..., download=True)``, so that a missing dataset is reported as one line
    that suggests ``--data-dir`` (or ``tfds build``) rather than as a download attempt
    and a network traceback.

    ``data_dir`` None reads TFDS' own default (``TFDS_DATA_DIR``, or
    ``~/tensorflow_datasets``).

    Raises:
        DataNotFoundError: the dataset is unknown, not prepared in ``data_dir`` (the
            message names the versions prepared there when TFDS reads another one), or
            prepared only in part (record files of a split are missing).
    """
    import tensorflow_datasets as tfds

    if data_dir and "://" not in str(data_dir) and not os.path.isdir(data_dir):
        # (TFDS logged "Variant folder .../2.0.0 has no dataset_info.json" before the
        # error below: a second line, about a folder that is not there)
        what = "is a file, not a folder" if os.path.exists(data_dir) else "does not exist"
        raise DataNotFoundError(f"data directory {str(data_dir)!r} {what}")
    where = data_dir or _default_data_dir()
    try:
        with _absl_errors_only():
            builder = tfds.builder(name, data_dir=data_dir)
            prepared = builder.is_prepared()
    except Exception as err:  # unknown name, unreadable directory, ...
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataNotFoundError(
            f"cannot open TFDS dataset {name!r} in {where}: {first_line}"
        ) from None
    build = f"tfds build {name.split('/')[0]} --data_dir DIR"
    if not prepared:
        others = _other_versions(builder)
        found = (
            f" (it holds version {', '.join(others)} of it; this TFDS reads "
            f"{builder.version})" if others else ""
        )
        raise DataNotFoundError(
            f"TFDS dataset {name!r} is not prepared in {where}{found}; pass --data-dir "
            f"(data_dir in Python) with a directory holding it, or prepare it with network "
            f"access: {build}"
        )
    missing = _missing_files(builder)
    if missing:
        raise DataNotFoundError(
            f"TFDS dataset {name!r} in {builder.data_dir} is incomplete: {missing}; copy "
            f"the folder again, or prepare it anew with network access: {build}"
        )
    return builder


def load(name, data_dir=None, download=False, **kwargs):
    """The TFDS dataset ``name`` read from ``data_dir``: ``tfds.load(name,
    data_dir=data_dir, download=download, **kwargs)``.

    Without ``download``, data that TFDS cannot find there is the one-line
    :class:`DataNotFoundError` of :func:`require_prepared` (naming the dataset, the
    folder and how to prepare it) instead of TFDS' ``AssertionError`` "could not find
    data": the applications' ``load_split`` read through this, so that their Python
    API reports missing data as the command line does. The check runs only when TFDS
    fails to open the data, so ``tfds.testing.mock_data`` (no data on disk) still
    stands for a prepared dataset. ``kwargs`` are those of ``builder.as_dataset``
    (``split``, ``shuffle_files``, ``read_config``, ``decoders``, ...).
    """
    import tensorflow_datasets as tfds

    if download:
        return tfds.load(name, data_dir=data_dir, download=True, **kwargs)
    try:
        with _absl_errors_only():  # ("Variant folder ... has no dataset_info.json")
            builder = tfds.builder(name, data_dir=data_dir)
        return builder.as_dataset(**kwargs)
    except (AssertionError, tfds.core.DatasetNotFoundError) as err:  # TFDS 4.9 asserts that the data is there
        failure = err
    # (outside the except clause: the one-line error does not chain TFDS' traceback)
    require_prepared(name, data_dir)
    raise failure  # prepared after all: TFDS failed for another reason


@contextlib.contextmanager
def _absl_errors_only():
    """Only errors of TFDS' absl log: for a data directory without the dataset, TFDS
    logs "Variant folder <data_dir>/<name>/<version> has no dataset_info.json", a
    second line before the one-line error of :func:`require_prepared`."""
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(verbosity)


def _default_data_dir():
    """How to name the data directory TFDS reads when no ``--data-dir`` is given."""
    from tensorflow_datasets.core import constants

    root = constants.get_default_data_dir()
    if os.environ.get("TFDS_DATA_DIR"):
        return f"TFDS_DATA_DIR ({root})"
    return f"the default TFDS data directory ({root})"


def _other_versions(builder):
    """The versions of ``builder``'s dataset (or config) prepared beside the one it reads."""
    try:
        parent = builder.data_path.parent
        return sorted(
            entry.name for entry in parent.iterdir()
            if entry.name != str(builder.version) and (entry / "dataset_info.json").exists()
        )
    except OSError:  # no such folder, unreadable, ...
        return []


def _missing_files(builder):
    """What is missing of a prepared dataset's record files, as a phrase, or ``""``.

    ``builder.is_prepared()`` only looks for ``dataset_info.json``: a folder copied in
    part (or a shard deleted) passed it and failed later, while reading, with
    TensorFlow's ``NotFoundError`` traceback.
    """
    for split, info in builder.info.splits.items():
        paths = list(info.filepaths)
        absent = [path for path in paths if not path.exists()]
        if absent:
            return (
                f"{len(absent)} of the {len(paths)} files of its {split!r} split are "
                f"missing ({absent[0].name}" + (", ..." if len(absent) > 1 else "") + ")"
            )
    return ""
