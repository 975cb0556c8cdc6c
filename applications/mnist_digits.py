"""Digits that need no download, as NumPy arrays (this module loads no TensorFlow).

Real MNIST digits from the canonical IDX files: the project's tests and benchmarks use
the 10,000 ``t10k`` digits under ``../shared/data/mnist/``; users get the same files
from the MNIST distribution (or the full set through TFDS ``mnist``). A folder that
also holds the distribution's ``train`` files gives those as training digits
(:func:`load_idx_train_test`, the rule of the Recurrent Ladder applications). And the 8x8
digits shipped with scikit-learn, the demo's default (:func:`load_arrays` chooses).
"""

import gzip
import pathlib
import zlib

import numpy as np

from applications import checks
from applications.errors import DataNotFoundError, InputError
from applications.shared_data import files_fingerprint, shared_data_path

MNIST_FILES = ("{prefix}-images-idx3-ubyte.gz", "{prefix}-labels-idx1-ubyte.gz")

#: IDX magic numbers (big-endian int32): unsigned bytes, 3 dimensions (images) or 1 (labels)
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801


def _idx_file(data_dir, name):
    """The file of ``name`` (one of :data:`MNIST_FILES`, formatted) in ``data_dir``: the
    gzipped file as distributed, else the same file extracted (``name`` without ``.gz``, as
    some mirrors and packages ship it); None when neither is there."""
    for path in (data_dir / name, data_dir / name.removesuffix(".gz")):
        if path.is_file():
            return path
    return None


def _read_idx(path, magic, dims):
    """The uint8 payload of an IDX file (gzipped when its name ends in ``.gz``, else as
    extracted), checked against its header.

    The header (magic number, then one big-endian int32 size per dimension) must
    match ``magic`` and ``dims`` dimensions, and the payload must hold exactly the
    items it announces; anything else (a truncated, swapped or non-gzipped file) is a
    ``ValueError`` naming the file.
    """
    gzipped = path.suffix == ".gz"
    try:
        with (gzip.open(path) if gzipped else open(path, "rb")) as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as error:
        # a corrupt deflate stream raised zlib.error (not an OSError): a traceback
        kind = "gzipped IDX" if gzipped else "IDX"
        raise InputError(f"{path} is not a readable {kind} file: {error}") from None
    header = 4 * (1 + dims)
    found_magic = int(np.frombuffer(data, ">i4", count=1)[0]) if len(data) >= 4 else None
    if found_magic != magic:
        found = "none" if found_magic is None else f"{found_magic:#010x}"
        raise InputError(
            f"{path} is not an IDX file of {dims}-dimensional unsigned bytes "
            f"(magic number {found}, expected {magic:#010x})"
        )
    if len(data) < header:
        raise InputError(f"{path} is too short for an IDX header ({len(data)} bytes)")
    shape = [int(v) for v in np.frombuffer(data, ">i4", count=dims, offset=4)]
    size = int(np.prod(shape))
    if len(data) - header != size:
        raise InputError(
            f"{path} announces shape {tuple(shape)} ({size} bytes) but holds {len(data) - header} bytes"
        )
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def _existing_folder(data_dir):
    data_dir = pathlib.Path(data_dir)
    if not data_dir.is_dir():
        # a file given as the folder was reported as missing
        what = "is a file, not a folder" if data_dir.exists() else "does not exist"
        raise DataNotFoundError(f"data directory {str(data_dir)!r} {what}")
    return data_dir


def load_idx_digits(data_dir, prefix="t10k"):
    """Images ``[n, 28, 28, 1]`` as float32 in [0, 1] and int32 labels.

    Args:
        data_dir: folder holding ``{prefix}-images-idx3-ubyte.gz`` and
            ``{prefix}-labels-idx1-ubyte.gz``, or either file extracted (the same name
            without ``.gz``; the gzipped one is read when both are there).
        prefix: ``"t10k"`` (test set) or ``"train"``.

    Raises:
        DataNotFoundError: (a ``FileNotFoundError``) the folder or a file is missing;
            the message names it.
        ValueError: a file is not a well-formed IDX file of 28x28 images or of labels
            (truncated, swapped, not gzipped), or the counts differ.
    """
    data_dir = _existing_folder(data_dir)
    names = [name.format(prefix=prefix) for name in MNIST_FILES]
    images_path, labels_path = (_idx_file(data_dir, name) for name in names)
    for path, name in zip((images_path, labels_path), names):
        if path is None:
            raise DataNotFoundError(
                f"{data_dir / name} not found: the data directory must hold the MNIST files "
                f"{' and '.join(names)} (or the same files extracted, without .gz)"
            )
    images = _read_idx(images_path, IMAGES_MAGIC, 3)
    if images.shape[1:] != (28, 28):
        raise InputError(f"{images_path} holds images of shape {images.shape[1:]}, expected (28, 28)")
    images = images[..., None]
    labels = _read_idx(labels_path, LABELS_MAGIC, 1)
    if len(images) != len(labels):
        raise InputError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels")
    if len(labels) and labels.max() > 9:
        # a label of 10 or more failed in the first training step with TensorFlow's
        # InvalidArgumentError ("Received a label value of 10 which is outside ...")
        bad = int(np.argmax(labels > 9))
        raise InputError(f"{labels_path} holds label {int(labels[bad])} at item {bad}: MNIST labels are digits 0..9")
    return images.astype("float32") / 255.0, labels.astype("int32")


#: The two ways an IDX folder gives training and test digits (:func:`load_idx_train_test`;
#: ``train`` records which as the split's ``"idx_layout"``, ``evaluate`` reads it back).
#: TRAIN_AND_T10K: the folder holds the ``train`` files too: they train, the ``t10k`` files
#: test (the MNIST distribution's own split, 60,000 and 10,000 digits);
#: T10K_SPLIT: only the ``t10k`` files: their digits split 80/20, shuffled by the seed.
TRAIN_AND_T10K, T10K_SPLIT = "train+t10k", "t10k"
IDX_LAYOUTS = (TRAIN_AND_T10K, T10K_SPLIT)


def idx_layout(data_dir):
    """Which split the IDX folder ``data_dir`` gives: :data:`TRAIN_AND_T10K` when it holds
    both ``train`` files (gzipped or extracted), :data:`T10K_SPLIT` when it holds neither.

    Raises:
        DataNotFoundError: the folder is missing, or it holds one ``train`` file without
            the other (a download cut short: half a training set is not silently
            ignored); the message names the missing file.
    """
    data_dir = _existing_folder(data_dir)
    names = [name.format(prefix="train") for name in MNIST_FILES]
    paths = [_idx_file(data_dir, name) for name in names]
    if all(paths):
        return TRAIN_AND_T10K
    if any(paths):
        missing, found = (names[1], paths[0].name) if paths[0] else (names[0], paths[1].name)
        raise DataNotFoundError(
            f"{data_dir / missing} not found beside {found}: the training digits need both files "
            f"(remove {found} to split the t10k digits instead)"
        )
    return T10K_SPLIT


def load_idx_train_test(data_dir, seed=0, layout=None, test_only=False):
    """The training and the test digits of an IDX folder: ``(train, test, layout)``, each
    of the first two ``(images, labels)`` as :func:`load_idx_digits` gives them.

    Args:
        data_dir: the folder (``t10k`` files, and optionally the ``train`` files).
        seed: shuffles the ``t10k`` digits before the 80/20 cut of :data:`T10K_SPLIT`
            (the :data:`TRAIN_AND_T10K` split does not depend on it).
        layout: None (default) for the folder's own (:func:`idx_layout`), else one of
            :data:`IDX_LAYOUTS`: the one a trained model recorded, so that its test
            digits stay the same whatever was added to the folder since (training files
            put beside a ``t10k`` split: its test digits would be all of ``t10k``, four
            fifths of which trained it).
        test_only: the training digits are not read (``train`` is None).

    Returns:
        ``(train, test, layout)``, ``layout`` the one used (record it).
    """
    if layout is None:
        layout = idx_layout(data_dir)
    elif layout not in IDX_LAYOUTS:
        raise InputError(f"`layout` must be one of {IDX_LAYOUTS}. Received: layout={layout!r}")
    test = load_idx_digits(data_dir, "t10k")
    if layout == TRAIN_AND_T10K:
        return (None if test_only else load_idx_digits(data_dir, "train")), test, layout
    images, labels = test
    order = np.random.default_rng(seed).permutation(len(images))
    cut = int(0.8 * len(images))
    train = None if test_only else (images[order[:cut]], labels[order[:cut]])
    return train, (images[order[cut:]], labels[order[cut:]]), layout


def idx_fingerprint(data_dir, prefixes=("t10k", "train")):
    """The fingerprint (``shared_data.files_fingerprint``) of the MNIST IDX files of
    ``prefixes`` in ``data_dir``: of those of :data:`MNIST_FILES` that are there, each the
    file the loaders read (gzipped, else extracted). The default prefixes are those
    :func:`load_idx_train_test` reads: the same folder gives another fingerprint once
    ``train`` files are put beside its ``t10k`` ones. None when the folder holds none of
    them, a missing folder too, or one of them cannot be read (the loaders name what is
    missing or unreadable, in one line: the fingerprint's ``PermissionError`` was a
    traceback before them).
    """
    data_dir = pathlib.Path(data_dir)
    if not data_dir.is_dir():
        return None
    paths = [_idx_file(data_dir, name.format(prefix=prefix)) for prefix in prefixes for name in MNIST_FILES]
    paths = [path for path in paths if path is not None]
    try:
        return files_fingerprint("MNIST IDX files", data_dir, paths) if paths else None
    except OSError:
        return None


def recorded_idx_layout(split):
    """The IDX layout of a split ``train`` recorded in ``metrics.json`` (its ``"split"``
    dict): its ``"idx_layout"``; :data:`T10K_SPLIT` for a record written before the
    layout was (the only split then); None (the folder's own) when nothing was recorded."""
    if not isinstance(split, dict):
        return None
    layout = split.get("idx_layout", T10K_SPLIT)
    if layout not in IDX_LAYOUTS:
        raise InputError(f"the recorded split's idx_layout {layout!r} is not one of {IDX_LAYOUTS}")
    return layout


def check_digits(digits, labels):
    """``digits`` (float32) and ``labels``: as many of each, at least one, pixels in [0, 1],
    labels one integer per digit (not one-hot rows, not fractions)."""
    digits = np.asarray(digits, "float32")
    if digits.ndim == 4 and digits.shape[-1] == 1:
        digits = digits[..., 0]
    if digits.ndim != 3 or len(digits) == 0 or np.ndim(labels) == 0 or len(digits) != len(np.asarray(labels)):
        raise InputError(
            "`digits` must be [n, height, width] images (n >= 1) with as many `labels`. "
            f"Received: digits shape={digits.shape}, labels shape={np.shape(labels)}"
        )
    if not (np.all(digits >= 0) and np.all(digits <= 1)):
        raise InputError(
            "`digits` must hold intensities in [0, 1] (divide uint8 images by 255). "
            f"Received: values in [{np.nanmin(digits)}, {np.nanmax(digits)}]"
            + (" and NaN" if np.isnan(digits).any() else "")
        )
    # one-hot labels [n, classes] were gathered as [m, classes] targets that failed in fit;
    # fractional labels were truncated to integers
    labels = np.asarray(labels)
    if labels.ndim != 1 or not (
        np.issubdtype(labels.dtype, np.integer)
        or (np.issubdtype(labels.dtype, np.floating) and np.all(np.mod(labels, 1) == 0))
    ):
        raise InputError(
            "`labels` must be one integer class per digit, shape [n] (not one-hot). "
            f"Received: labels shape={labels.shape}, dtype={labels.dtype}"
        )
    return digits


def default_data_dir():
    """``shared/data/mnist`` beside this checkout (or beside a parent folder), if any."""
    return shared_data_path("mnist")


def load_digits_arrays():
    """The 8x8 digits shipped with scikit-learn: images in [0, 1] ``[n, 8, 8, 1]``, labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")[..., None]
    return images, digits.target.astype("int32")


#: The fingerprint of scikit-learn's 8x8 digits (the demo's data without a data
#: directory): a fixed token, as scikit-learn ships them.
SKLEARN_DIGITS = {"data": "scikit-learn's 8x8 digits"}


def arrays_fingerprint(data_dir=None):
    """The fingerprint of what :func:`load_arrays` reads: :data:`SKLEARN_DIGITS` for
    ``data_dir`` None, else that of the ``t10k`` IDX files in ``data_dir``
    (:func:`idx_fingerprint`; None when it holds none)."""
    return dict(SKLEARN_DIGITS) if data_dir is None else idx_fingerprint(data_dir, ("t10k",))


def load_arrays(data_dir=None, limit=None):
    """The demo's images and labels: scikit-learn's digits, or MNIST IDX files from ``data_dir``.

    Args:
        data_dir: None for the 8x8 digits (no download), else a directory with the
            MNIST ``t10k`` IDX files.
        limit: keep only the first ``limit`` examples (quick runs and tests).
    """
    # (a negative limit dropped the last examples, silently; 2.5 was a slicing TypeError)
    limit = None if limit is None else checks.integer_at_least("limit", limit, 1)
    images, labels = load_digits_arrays() if data_dir is None else load_idx_digits(data_dir)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return images, labels
