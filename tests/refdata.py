"""The golden reference files below ``shared/refdata``."""

import numpy as np

from tests.conftest import shared_path


def refdata_path(*parts):
    """Path of a file below ``shared/refdata``; a clear error if it is missing."""
    path = shared_path("refdata", *parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the tests need ../shared beside the checkout")
    return path


def load_cccaps(name):
    """One of the ``refdata/cccaps/*.npz`` golden files (loaded without pickle)."""
    return np.load(refdata_path("cccaps", f"{name}.npz"))
