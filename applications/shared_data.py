"""Where the project's shared data (``shared/data/...`` beside a checkout) is found."""

import pathlib

#: the repository (this file's package's parent folder)
REPO = pathlib.Path(__file__).resolve().parents[1]


def shared_data_path(*parts):
    """``shared/data/<parts>`` beside this checkout or beside one of its parent folders
    (worktrees and clones in subfolders), the first that exists; if none does, the one
    beside the checkout (so that the error names where it was expected)."""
    for parent in REPO.parents:
        candidate = parent.joinpath("shared", "data", *parts)
        if candidate.exists():
            return candidate
    return REPO.parent.joinpath("shared", "data", *parts)
