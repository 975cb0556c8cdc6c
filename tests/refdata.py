"""Locating ``shared/refdata`` from any checkout of the repository.

``tests.conftest.shared_path`` looks for ``shared/`` next to the checkout, which
holds for the main checkout but not for a git worktree nested one level deeper
(``<root>/wt/<name>``). This helper tries that location first and then every
ancestor directory, so the reference tests run from either.
"""

import pathlib

import numpy as np

from tests.conftest import shared_path


def refdata_path(*parts):
    """Path of a file below ``shared/refdata`` (the first ancestor that has it)."""
    candidate = shared_path("refdata", *parts)
    if candidate.exists():
        return candidate
    for ancestor in pathlib.Path(__file__).resolve().parents:
        path = ancestor.joinpath("shared", "refdata", *parts)
        if path.exists():
            return path
    raise FileNotFoundError(f"shared/refdata/{'/'.join(parts)} not found above {__file__}")


def load_cccaps(name):
    """One of the ``refdata/cccaps/*.npz`` golden files (loaded without pickle)."""
    return np.load(refdata_path("cccaps", f"{name}.npz"))
