"""TFDS helpers: a friendly error when a dataset is not prepared and we are offline."""

import os

from applications.errors import DataNotFoundError


def require_prepared(name, data_dir=None):
    """The ``tfds`` builder of ``name`` in ``data_dir``, if its data is prepared there.

    Applications call this before ``builder.as_dataset(...)`` instead of
    ``tfds.load(..., download=True)``, so that a missing dataset is reported as one line
    that suggests ``--data-dir`` (or ``tfds build``) rather than as a download attempt
    and a network traceback.

    Raises:
        DataNotFoundError: the dataset is unknown, or not prepared in ``data_dir``.
    """
    import tensorflow_datasets as tfds

    if data_dir and "://" not in str(data_dir) and not os.path.isdir(data_dir):
        # (TFDS logged "Variant folder .../2.0.0 has no dataset_info.json" before the
        # error below: a second line, about a folder that is not there)
        what = "is a file, not a folder" if os.path.exists(data_dir) else "does not exist"
        raise DataNotFoundError(f"data directory {str(data_dir)!r} {what}")
    from absl import logging as absl_logging

    where = data_dir or "the default TFDS data directory (~/tensorflow_datasets)"
    # TFDS logs "Variant folder <data_dir>/<name>/<version> has no dataset_info.json" for
    # a data directory without the dataset: a second line before the error below.
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        prepared = builder.is_prepared()
    except Exception as err:  # unknown name, unreadable directory, ...
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataNotFoundError(
            f"cannot open TFDS dataset {name!r} in {where}: {first_line}"
        ) from None
    finally:
        absl_logging.set_verbosity(verbosity)
    if not prepared:
        raise DataNotFoundError(
            f"TFDS dataset {name!r} is not prepared in {where}; pass --data-dir with a "
            f"directory holding it, or prepare it with network access: "
            f"tfds build {name.split('/')[0]} --data_dir DIR"
        )
    return builder
