"""Where the project's shared data (``shared/data/...`` beside a checkout) is found, and
fingerprints of data files (what a run or a search records of the data it read)."""

import os
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


#: What :func:`files_fingerprint` reads of a file at a time (the file is streamed).
_CHUNK_BYTES = 1 << 20


def files_fingerprint(kind, source, paths):
    """A fingerprint of the data files ``paths``: a small description of their content,
    which runs and searches record in place of the ``--data-dir`` they read it from, so
    that a resume on other data is refused and one on the same files moved to another
    folder is not (:func:`same_data`).

    A JSON-able dict ``{"data": kind, "source": source, "files": {name: {"bytes": size,
    "sha256": hex digest}}}``: ``kind`` says what the files are ("MNIST IDX files"),
    ``source`` where they were read (the folder, absolute: named in messages, never
    compared; ``evaluate`` of sst and text_classification reads there by default,
    ``checks.recorded_data_folder``), and each file is named by its name in that folder. Every file is streamed
    through SHA-256 (the applications' data files are a few MB: milliseconds).

    Raises:
        OSError: a file cannot be read.
    """
    import hashlib

    files = {}
    for path in paths:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK_BYTES):
                digest.update(chunk)
        files[pathlib.Path(path).name] = {"bytes": os.path.getsize(path), "sha256": digest.hexdigest()}
    return {"data": kind, "source": os.path.abspath(source), "files": files}


def same_data(fingerprint, other):
    """Whether two fingerprints (of :func:`files_fingerprint`, or fixed tokens such as
    ``mnist_digits.SKLEARN_DIGITS``) describe the same data, wherever it was read."""
    if not (isinstance(fingerprint, dict) and isinstance(other, dict)):
        return fingerprint == other
    return _content(fingerprint) == _content(other)


def _content(fingerprint):
    """A fingerprint without where its data were read."""
    return {key: value for key, value in fingerprint.items() if key != "source"}


def describe_data(fingerprint, than=None):
    """A fingerprint in words: what the data are and where they were read ("MNIST IDX
    files in /data/mnist"); with ``than`` (a fingerprint of the same kind of data), also
    the files in which they differ from it ("..., where t10k-labels-idx1-ubyte.gz
    differs")."""
    if not isinstance(fingerprint, dict):
        return str(fingerprint)
    text = str(fingerprint.get("data", "data"))
    if fingerprint.get("source"):
        text += f" in {fingerprint['source']}"
    if isinstance(than, dict) and than.get("data") == fingerprint.get("data"):
        files, other = _files_of(fingerprint), _files_of(than)
        changes = [f"{name} {'differs' if name in other else 'is new'}" if name in files else f"{name} is missing"
                   for name in sorted(set(files) | set(other)) if files.get(name) != other.get(name)]
        if changes:
            text += f", where {', '.join(changes)}"
    return text


def _files_of(fingerprint):
    """The ``files`` of a fingerprint, ``{}`` when it has none or they are not the dict
    :func:`files_fingerprint` writes (a ``metrics.json`` edited by hand)."""
    files = fingerprint.get("files")
    return files if isinstance(files, dict) else {}


def only_files(fingerprint, names):
    """``fingerprint`` (of :func:`files_fingerprint`) of only its files ``names``: that of
    the files a reader of some of them reads (``evaluate`` reads a run's test files, not
    its training ones). A fingerprint without files (a fixed token) is returned as it is."""
    if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get("files"), dict):
        return fingerprint
    return {**fingerprint, "files": {name: value for name, value in fingerprint["files"].items() if name in names}}
