"""Occluded Moving MNIST: classifying a moving digit seen through bars (Ilin et al. 2017, 3.1).

A 14x14 (downscaled) MNIST digit moves over a black 32x32 frame with one of 8
discrete velocities, bouncing off the borders; a static grid of vertical and
horizontal bars 4 pixels wide with 8 visible pixels between them is drawn *over* the
digit, so that no single frame shows all of it. The velocities are the paper's,
(+-1, +-2) and (+-2, +-1) pixels per frame: every one moves along both axes, so that
over a sequence's 5 frames the digit passes behind the bars and almost all of it shows
in some frame (:func:`generate`). ``motion="compass", bars="vertical", bar_spacing=8``
(arguments of :func:`train` and the other data functions; ``--motion compass --bars
vertical --bar-spacing 8`` on the command line) gives the data of the benchmark's first
26 rounds, where a quarter of the digits moved only vertically and never showed the
columns behind their bars; :func:`evaluate` makes the data ``train`` recorded.
The task is to name the digit; the unsupervised cost is predicting the next
(occluded) frame.

The model (in the spirit of the paper's Table 7): an RLadder with convolutional
levels (by default feed-forward, instance-normalized, gated convolutional encoders, see
below; ConvLSTM encoders as in the paper with ``conv_encoder="convlstm"``; ConvG1
combinators, max pooling between levels) and a dense gated level on top. Costs: next-frame prediction at the
bottom (per-pixel sigmoid cross-entropy of a 1x1 read-out of the bottom decoder,
for frames 2..T from steps 1..T-1) plus classification: one softmax Dense shared by
all steps reads the top encoder output of every step (``digit_steps``); by default
(``compile_model(classify="every")``) the classification cost is the mean over
steps of their cross-entropies, and the reported digit (``digit``) is the last
step's. Baselines (``variant``):

* ``"rladder"``: the full model;
* ``"no_feedback"``: RLadder without decoder-to-encoder connections;
* ``"hierarchical"``: hierarchical RNN, the ladder's encoder alone (no decoder, no
  frame prediction);
* ``"temporal"``: a per-frame convolutional network with a GRU on top.

Defaults of :func:`build_model` that depart from the paper's layout, chosen on a
validation split (``benchmarks/rladder_measurements.md`` records the measurements):
``conv_encoder="gatedconv"`` (feed-forward convolutional levels gated as a ConvLSTM
step without its state, :class:`GatedConvEncoderCell`, whose memory is the decoder
feedback and the gated top; the ConvLSTM ladder stayed at chance for thousands of
updates, and with normalized gates integrated the frames poorly; the ReLU levels,
``"conv"``, the default until the sixteenth round, ended 2.25 points higher on
validation), ``conv_normalization="auto"`` (per-sample instance normalization in
every variant's convolutions: without it the next-frame cost silences the ladder's
upper ReLU levels) and ``feedback_initializer="zeros"`` (the full ladder starts as
``no_feedback`` and learns its feedback).

Training-data augmentation (:func:`make_training_dataset`, ``train(augment=...)``,
``--augment`` on the command line; off by default): ``"fresh"`` draws a new set of
training sequences every epoch (digits, start positions, velocities and bar
offsets), ``"affine"`` also gives every sequence's digit its own random small
affine transform (:func:`augment_digits`: rotation, scale, shear and sub-pixel
shift, at the digit's full 28x28 resolution before downscaling), so that a few
thousand training digits act as many more. Validation and test sequences are
never augmented.
"""

import numbers
import os
import re
import sys

import keras
import numpy as np
from keras import ops

from applications import arguments, checks, console, distribute, plotting
from applications.checks import integer_at_least
from applications.mnist_digits import check_digits
from applications.errors import (InputError, PathNotFoundError, check_run_dir, create_run_dir,
                                 leaves_no_empty_run_dir)
from keras_capsules.layers import RLadder, level_spec
from keras_capsules.layers.rladder.level_spec import CONV_ENCODERS, NORMALIZED_ENCODERS, UNFLATTENS

FRAME_SIZE = 32
DIGIT_SIZE = 14
NUM_FRAMES = 5
NUM_CLASSES = 10
VARIANTS = ("rladder", "no_feedback", "hierarchical", "temporal")
#: the eight velocities (rows, columns per frame) of the paper's section 3.1, ``motion="paper"``:
#: every one moves along both axes, one pixel along one and two along the other
PAPER_VELOCITIES = ((-2, -1), (-2, 1), (-1, -2), (-1, 2), (1, -2), (1, 2), (2, -1), (2, 1))
#: the eight compass directions, ``motion="compass"`` (times ``speed``)
DIRECTIONS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
#: ``generate``'s motions and bar layouts
MOTIONS = ("paper", "compass")
BAR_LAYOUTS = ("grid", "vertical")
#: the bars' width in pixels, the paper's (``generate``'s default; ``train`` has no option for it)
BAR_WIDTH = 4
#: the options of the sequences' data that :func:`train` (``make_sequences``,
#: ``make_training_dataset``) passes to every ``generate`` call, at their defaults: the
#: paper's data; ``train`` records them in ``metrics.json`` (``"sequences"``)
SEQUENCE_OPTIONS = {"motion": "paper", "bars": "grid", "bar_spacing": 12}
#: the data before the paper's were the default (the benchmark's first 26 rounds): what
#: :func:`evaluate` makes for a run whose ``metrics.json`` records no ``"sequences"``
OLD_SEQUENCE_OPTIONS = {"motion": "compass", "bars": "vertical", "bar_spacing": 8}
PAPER_ERROR = {"rladder": 0.0074, "temporal": 0.0202, "no_feedback": 0.0160}


# ------------------------------------------------------------------------- data
def load_digits(source="idx", data_dir=None, split="test"):
    """MNIST digits ``[n, 28, 28]`` float32 in [0, 1] and int32 labels.

    Args:
        source: ``"idx"`` reads the canonical IDX files in ``data_dir`` (see
            ``applications.mnist_digits``); ``"tfds"`` reads TFDS ``mnist``
            (``data_dir`` is TFDS's data folder).
        split: ``"train"`` or ``"test"`` (for IDX: prefix ``train`` or ``t10k``; TFDS
            also takes its split syntax, e.g. ``"train[:80%]"``).
    """
    if source == "idx":
        from applications.mnist_digits import default_data_dir, load_idx_digits

        if split not in ("train", "test"):
            # any other split (e.g. "validation") silently read the training files
            raise InputError(f"`split` must be 'train' or 'test' for IDX files. Received: split={split!r}")
        prefix = "t10k" if split == "test" else "train"
        images, labels = load_idx_digits(data_dir or default_data_dir(), prefix=prefix)
        return images[..., 0], labels
    if source == "tfds":
        import tensorflow_datasets as tfds

        from applications.tfds_data import require_prepared

        builder = require_prepared("mnist", data_dir)
        # read in batches: batch_size=-1 made one batch of the split's recorded size, and a
        # split whose size TFDS does not know (tfds.testing.mock_data's) was a batch of
        # sys.maxsize that aborted the process (std::length_error, no traceback)
        try:
            batches = list(tfds.as_numpy(builder.as_dataset(split=split, batch_size=4096)))
        except (ValueError, KeyError) as error:  # an unknown split name or bad split syntax
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise InputError(f"cannot read split {split!r} of TFDS mnist: {first_line}") from None
        if not batches:
            raise InputError(f"split {split!r} of TFDS mnist holds no digits")
        images = np.concatenate([batch["image"] for batch in batches])
        labels = np.concatenate([batch["label"] for batch in batches])
        return images[..., 0].astype("float32") / 255.0, labels.astype("int32")
    raise InputError(f"`source` must be 'idx' or 'tfds'. Received: source={source!r}")


def downscale(digits, size=DIGIT_SIZE):
    """``[n, 28, 28]`` digits to ``[n, size, size]`` by averaging blocks (size must divide 28)."""
    size = integer_at_least("size", size, 1)
    digits = np.asarray(digits, "float32")
    if digits.ndim != 3 or digits.shape[1] != digits.shape[2]:
        # non-square digits failed in numpy's reshape ("cannot reshape array of size ...")
        raise InputError(f"`digits` must be square images [n, side, side]. Received: shape={digits.shape}")
    factor = digits.shape[1] // size
    if factor * size != digits.shape[1]:
        raise InputError(f"size={size} must divide the digit size {digits.shape[1]}")
    n = len(digits)
    return digits.reshape(n, size, factor, size, factor).mean(axis=(2, 4))


def _check_bars(bar_width, bar_spacing):
    """Bars narrower than their spacing: wider ones covered every column (the digit was never seen)."""
    if bar_width >= bar_spacing:
        raise InputError(
            "`bar_width` must be smaller than `bar_spacing` (else the bars cover every column). "
            f"Received: bar_width={bar_width}, bar_spacing={bar_spacing}"
        )


def _check_choice(name, value, choices):
    """``value`` if it is one of the strings ``choices``, else an ``InputError`` naming them."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"`{name}` must be one of {', '.join(map(repr, choices))}. Received: {name}={value!r}")
    return value


def _check_offset(name, offset):
    if isinstance(offset, bool) or not isinstance(offset, numbers.Integral):
        # NaN gave a frame without bars, 0.5 bars of other widths
        raise InputError(f"`{name}` must be an integer (a pixel index). Received: {name}={offset!r}")
    return int(offset)


def bar_mask(frame_size=FRAME_SIZE, bar_width=BAR_WIDTH, bar_spacing=12, offset=0, bars="grid", row_offset=0):
    """A ``[frame_size, frame_size]`` bool mask of the occluding bars (True on a bar).

    Args:
        frame_size: the frames' height and width.
        bar_width: a bar's width in pixels.
        bar_spacing: the distance between the leading edges of neighbouring bars (the
            default 12: bars 4 pixels wide with 8 visible pixels between them, the
            paper's); must exceed ``bar_width``.
        offset: the column of the first vertical bar's left edge (modulo ``bar_spacing``).
        bars: ``"grid"`` (default: vertical and horizontal bars, the paper's) or
            ``"vertical"`` (vertical bars only).
        row_offset: the row of the first horizontal bar's top edge (``"grid"`` only).
    """
    frame_size = integer_at_least("frame_size", frame_size, 1)
    bar_width = integer_at_least("bar_width", bar_width, 0)
    bar_spacing = integer_at_least("bar_spacing", bar_spacing, 1)
    _check_bars(bar_width, bar_spacing)
    offset = _check_offset("offset", offset)
    row_offset = _check_offset("row_offset", row_offset)
    bars = _check_choice("bars", bars, BAR_LAYOUTS)
    line = np.arange(frame_size)
    columns = (line - offset) % bar_spacing < bar_width
    mask = np.broadcast_to(columns[None, :], (frame_size, frame_size))
    if bars == "grid":
        mask = mask | ((line - row_offset) % bar_spacing < bar_width)[:, None]
    return mask.copy()


def trajectory(start, velocity, num_frames, limit):
    """Top-left positions ``[num_frames, 2]`` moving by ``velocity``, bouncing inside ``[0, limit]``
    (``limit`` an integer >= 0: a negative one gave positions outside it)."""
    limit = integer_at_least("limit", limit, 0)
    num_frames = integer_at_least("num_frames", num_frames, 1)
    return trajectories(np.asarray(start)[None], np.asarray(velocity)[None], num_frames, limit)[0]


def trajectories(starts, velocities, num_frames, limit):
    """Top-left positions ``[n, num_frames, 2]`` of ``n`` digits at once (see :func:`trajectory`).

    Each digit moves by its velocity; an axis whose next position would leave
    ``[0, limit]`` reverses its velocity for that step and on.
    """
    pos = np.array(starts, "int64").reshape(-1, 2)
    vel = np.array(velocities, "int64").reshape(-1, 2)
    out = np.zeros((len(pos), num_frames, 2), "int64")
    for t in range(num_frames):
        out[:, t] = pos
        nxt = pos + vel
        bounce = (nxt < 0) | (nxt > limit)
        vel = np.where(bounce, -vel, vel)
        pos = np.clip(np.where(bounce, pos + vel, nxt), 0, limit)
    return out


#: default parameters of :func:`augment_digits` (``augment="affine"``)
AFFINE_DEFAULTS = {"rotation": 15.0, "scale": 0.1, "shear": 10.0, "shift": 2.0}


def _check_affine(options, size=None):
    """``AFFINE_DEFAULTS`` updated with ``options`` (a dict or None), validated; with
    ``size`` (the digits' ``(height, width)``) also ``shift`` against it."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise InputError(f"`affine` options must be a dict or None. Received: affine={options!r}")
    unknown = sorted(set(options) - set(AFFINE_DEFAULTS))
    if unknown:
        raise InputError(
            f"Unknown affine augmentation option(s) {unknown}; expected some of "
            f"{sorted(AFFINE_DEFAULTS)}. Received: affine={options!r}"
        )
    merged = {**AFFINE_DEFAULTS, **options}
    for key, value in merged.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
            np.isfinite(value) and value >= 0
        ):
            raise InputError(f"`{key}` must be a finite number >= 0. Received: {key}={value!r}")
    if merged["rotation"] >= 90 or merged["shear"] >= 60:
        raise InputError(
            "`rotation` must be below 90 degrees and `shear` below 60 degrees. "
            f"Received: rotation={merged['rotation']!r}, shear={merged['shear']!r}"
        )
    if merged["scale"] >= 1:
        raise InputError(
            f"`scale` must be below 1 (factors 1 - scale .. 1 + scale). Received: scale={merged['scale']!r}"
        )
    if size is not None and merged["shift"] >= min(size) / 2:
        # (a shift of 100 px moved every 28x28 digit out of its image: blank training
        # digits, without an error, as rotation, scale and shear are bounded)
        raise InputError(
            f"`shift` must be below half the digits' size ({min(size) / 2:g} px for digits of "
            f"{size[0]}x{size[1]}): a larger one moves the digits' centres off their images. "
            f"Received: shift={merged['shift']!r}"
        )
    return {k: float(v) for k, v in merged.items()}


def augment_digits(digits, seed=0, rotation=15.0, scale=0.1, shear=10.0, shift=2.0):
    """Random small affine transforms of digit images, one per image (deterministic for a seed).

    Each image is rotated, sheared (horizontally) and scaled about its centre and
    then shifted, all by amounts drawn uniformly and independently per image, and
    resampled bilinearly (ink moved in from outside the image is zero). Vectorized
    numpy: about 0.1 s per 10,000 images of 28x28 on one CPU core.

    Args:
        digits: ``[n, H, W]`` images (float, e.g. in [0, 1]).
        seed: an int, a sequence of ints or a ``numpy.random.Generator``.
        rotation: largest rotation in degrees (angles in ``[-rotation, rotation]``);
            below 90.
        scale: largest relative change of size (factors in ``[1 - scale, 1 + scale]``);
            below 1.
        shear: largest horizontal shear angle in degrees; below 60.
        shift: largest translation in pixels along each axis (sub-pixel amounts
            included); below half the images' smaller side.

    Returns:
        ``[n, H, W]`` float32 images; every value stays within the input's range,
        widened to 0 (bilinear interpolation averages neighbours, and the ink moved
        in from outside is 0). With all four parameters at 0 the images are
        returned unchanged (as float32).
    """
    digits = np.asarray(digits, "float32")
    if digits.ndim != 3:
        raise InputError(f"`digits` must have shape [n, height, width]. Received: shape={digits.shape}")
    options = _check_affine({"rotation": rotation, "scale": scale, "shear": shear, "shift": shift},
                            size=digits.shape[1:])
    # (-1 was numpy's traceback, True the draws of seed 1)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(checks.numpy_seed(seed))
    n, height, width = digits.shape
    angle = np.deg2rad(rng.uniform(-options["rotation"], options["rotation"], n))
    shear_angle = np.deg2rad(rng.uniform(-options["shear"], options["shear"], n))
    factor = rng.uniform(1 - options["scale"], 1 + options["scale"], n)
    offset = rng.uniform(-options["shift"], options["shift"], (n, 2))
    # forward map (row, column about the centre): p' = R(angle) S(shear) (factor p) + offset;
    # each output pixel is read at the inverse image of its position
    cos, sin, tan = np.cos(angle), np.sin(angle), np.tan(shear_angle)
    forward = np.empty((n, 2, 2))
    # S(shear) = [[1, 0], [tan, 1]] moves columns by tan * row; R = [[cos, -sin], [sin, cos]]
    forward[:, 0, 0] = (cos - sin * tan) * factor
    forward[:, 0, 1] = -sin * factor
    forward[:, 1, 0] = (sin + cos * tan) * factor
    forward[:, 1, 1] = cos * factor
    inverse = np.linalg.inv(forward)
    centre = np.array([(height - 1) / 2, (width - 1) / 2])
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    grid = np.stack([rows.ravel(), cols.ravel()], -1) - centre  # [H*W, 2]
    out = np.empty_like(digits)
    padded = np.pad(digits, ((0, 0), (1, 1), (1, 1)))  # zero ink around the image
    for lo in range(0, n, 4096):  # bounded memory
        hi = min(n, lo + 4096)
        source = np.einsum("nij,npj->npi", inverse[lo:hi], grid - offset[lo:hi, None]) + centre
        r0, c0 = np.floor(source[..., 0]), np.floor(source[..., 1])
        fr, fc = (source[..., 0] - r0).astype("float32"), (source[..., 1] - c0).astype("float32")
        # indices into the padded images: -1 and H (W) are the zero border; anything further
        # out is clamped onto that border
        r0 = np.clip(r0.astype("int64"), -1, height) + 1
        c0 = np.clip(c0.astype("int64"), -1, width) + 1
        r1 = np.clip(r0 + 1, 0, height + 1)
        c1 = np.clip(c0 + 1, 0, width + 1)
        image = np.arange(lo, hi)[:, None]
        value = (
            padded[image, r0, c0] * (1 - fr) * (1 - fc)
            + padded[image, r0, c1] * (1 - fr) * fc
            + padded[image, r1, c0] * fr * (1 - fc)
            + padded[image, r1, c1] * fr * fc
        )
        out[lo:hi] = value.reshape(hi - lo, height, width)
    if n:
        # rounding in the weighted sums gave values just outside it (1.0000001 for digits in [0, 1])
        np.clip(out, min(float(digits.min()), 0.0), float(digits.max()), out=out)
    return out


def generate(
    digits,
    labels,
    num_sequences,
    seed=0,
    num_frames=NUM_FRAMES,
    frame_size=FRAME_SIZE,
    digit_size=DIGIT_SIZE,
    speed=None,
    bar_width=BAR_WIDTH,
    bar_spacing=12,
    bar_value=1.0,
    random_bar_offset=True,
    affine=None,
    motion="paper",
    bars="grid",
):
    """Occluded moving-digit sequences, deterministic for a seed.

    The defaults are the data of the paper's section 3.1: a grid of vertical and
    horizontal bars 4 pixels wide with 8 visible pixels between them, and eight
    velocities that all move along both axes, so that over the five frames the
    digit passes behind the bars and (but for a few pixels) every part of it shows in
    some frame. ``motion="compass", bars="vertical", bar_spacing=8`` gives the data of
    this project's first 26 benchmark rounds (the same draws for the same seed):
    vertical bars only, half the columns covered, the eight compass directions at
    3 pixels per frame, where a digit that moves only vertically (a quarter of the
    sequences) never shows the columns behind its bars.

    Args:
        digits: ``[n, 28, 28]`` images in [0, 1] (or already ``digit_size`` wide).
        labels: ``[n]`` their digit classes, integers in [0, 9] (``NUM_CLASSES``).
        num_sequences: how many sequences to make (digits drawn with replacement).
        seed: the generator's seed (an int or a sequence of ints).
        num_frames, frame_size, digit_size: frames per sequence, the frames' side
            and the (downscaled) digit's side.
        speed: an integer >= 0 multiplying the velocities; None (default): 1 with
            ``motion="paper"``, 3 with ``motion="compass"``.
        bar_width, bar_spacing: width of a bar and distance between the leading
            edges of neighbouring bars (see :func:`bar_mask`).
        bar_value: intensity of the bars (drawn over the digit), in [0, 1].
        random_bar_offset: shift the bar pattern by a random 0..bar_spacing-1 pixels
            per sequence (the horizontal bars by another draw; else bars start at
            row and column 0).
        affine: None (default: the digits as they are), or a dict of
            :func:`augment_digits` parameters (``{}``: ``AFFINE_DEFAULTS``): every
            sequence's digit gets its own random affine transform, applied at the
            digits' full resolution before downscaling. For training data only.
            The other draws (digits, starts, velocities, bars) are the same as
            without it for the same seed.
        motion: ``"paper"`` (default: one of ``PAPER_VELOCITIES``, (+-1, +-2) or
            (+-2, +-1) pixels per frame, times ``speed``) or ``"compass"`` (one of the
            eight compass ``DIRECTIONS`` times ``speed``).
        bars: ``"grid"`` (default: vertical and horizontal bars) or ``"vertical"``.

    Returns:
        A dict: ``frames`` ``[num_sequences, num_frames, S, S, 1]`` float32 in [0, 1]
        (occluded), ``clean`` the same without bars, ``labels`` ``[num_sequences]``,
        ``positions`` ``[num_sequences, num_frames, 2]`` (top-left row, column of
        the digit), ``velocities`` ``[num_sequences, 2]`` and ``bars``
        ``[num_sequences, S, S]`` (bool masks).
    """
    num_sequences = integer_at_least("num_sequences", num_sequences, 0)
    num_frames = integer_at_least("num_frames", num_frames, 1)
    frame_size = integer_at_least("frame_size", frame_size, 1)
    digit_size = integer_at_least("digit_size", digit_size, 1)
    motion = _check_choice("motion", motion, MOTIONS)
    bars = _check_choice("bars", bars, BAR_LAYOUTS)
    speed = (1 if motion == "paper" else 3) if speed is None else integer_at_least("speed", speed, 0)
    # ("False", a non-empty string, moved the bars)
    random_bar_offset = checks.true_or_false("random_bar_offset", random_bar_offset)
    bar_width = integer_at_least("bar_width", bar_width, 0)
    bar_spacing = integer_at_least("bar_spacing", bar_spacing, 1)
    _check_bars(bar_width, bar_spacing)
    if isinstance(bar_value, bool) or not isinstance(bar_value, numbers.Real) or not 0 <= bar_value <= 1:
        # frames are intensities in [0, 1]: bar_value=255 made bars of 255 (and NaN, NaN bars)
        raise InputError(f"`bar_value` must be a number in [0, 1]. Received: bar_value={bar_value!r}")
    rng = np.random.default_rng(checks.numpy_seed(seed))  # (-1 was numpy's traceback)
    digits = _check_digits(digits, labels)
    options = None if affine is None else _check_affine(affine, size=digits.shape[1:])
    if digits.shape[1] % digit_size:  # (downscale's message named its own `size`)
        raise InputError(f"`digit_size` must divide the digits' size {digits.shape[1]}. "
                         f"Received: digit_size={digit_size}")
    limit = _check_frame_size(frame_size, digit_size) - digit_size
    index = rng.integers(0, len(digits), num_sequences)
    starts = rng.integers(0, limit + 1, (num_sequences, 2))
    table = np.asarray(PAPER_VELOCITIES if motion == "paper" else DIRECTIONS)
    directions = table[rng.integers(0, len(table), num_sequences)]
    offsets = rng.integers(0, bar_spacing, num_sequences) if random_bar_offset else np.zeros(
        num_sequences, "int64"
    )
    # the rows' offsets after the columns' (no draw for "vertical": its draws stay those of before)
    row_offsets = rng.integers(0, bar_spacing, num_sequences) if random_bar_offset and bars == "grid" else np.zeros(
        num_sequences, "int64"
    )
    if options is None:
        small = digits if digits.shape[1] == digit_size else downscale(digits, digit_size)
        small = small[index]
    else:  # one transform per sequence, drawn after the other draws
        chosen = augment_digits(digits[index], rng, **options)
        small = chosen if digits.shape[1] == digit_size else downscale(chosen, digit_size)
    positions = trajectories(starts, directions * speed, num_frames, limit)
    clean = np.zeros((num_sequences, num_frames, frame_size, frame_size), "float32")
    span = np.arange(digit_size)
    rows = positions[..., 0, None, None] + span[:, None]  # [n, T, d, 1]
    cols = positions[..., 1, None, None] + span[None, :]  # [n, T, 1, d]
    clean[np.arange(num_sequences)[:, None, None, None], np.arange(num_frames)[None, :, None, None],
          rows, cols] = small[:, None]
    line = np.arange(frame_size)
    columns = (line[None, :] - offsets[:, None]) % bar_spacing < bar_width
    masks = np.broadcast_to(columns[:, None, :], (num_sequences, frame_size, frame_size)).copy()
    if bars == "grid":
        masks |= ((line[None, :] - row_offsets[:, None]) % bar_spacing < bar_width)[:, :, None]
    frames = np.where(masks[:, None], np.float32(bar_value), clean)
    return {
        "frames": frames[..., None].astype("float32"),
        "clean": clean[..., None],
        "labels": np.asarray(labels, "int32")[index],
        "positions": positions,
        "velocities": directions * speed,
        "bars": masks,
    }


def _check_frame_size(frame_size, digit_size=DIGIT_SIZE):
    """``frame_size`` as an int, if it is an integer that frames a digit of ``digit_size``."""
    frame_size = integer_at_least("frame_size", frame_size, 1)
    if frame_size < digit_size:
        raise InputError(f"`frame_size` must be at least the digit's size ({digit_size}). "
                         f"Received: frame_size={frame_size}")
    return frame_size


def seen_digits(data, num_frames=None, digit_size=DIGIT_SIZE):
    """What a perfect temporal integrator could know of each digit: its pixels that any of
    the first ``num_frames`` frames shows, in the digit's own coordinates.

    A pixel of the digit is seen when, in some frame, the digit's position puts it where
    no bar is. This is an oracle (it knows where the digit is in every frame): a static
    classifier of these images bounds what integrating the frames can give (the
    ``fusion`` benchmark of ``benchmarks/rladder.py``). With ``generate``'s
    ``bars="vertical"``, sequences that move only vertically never show the columns
    the bars hide; with the default grid and motion nearly every pixel shows.

    Args:
        data: ``generate``'s dict (its ``"clean"`` frames, ``"positions"`` and ``"bars"``).
        num_frames: how many of the first frames were seen (1..T); None (default): all T.
        digit_size: side of the digits ``generate`` placed (default ``DIGIT_SIZE``).

    Returns:
        ``[n, digit_size, digit_size, 2]`` float32: the digit's intensities where seen
        (0 elsewhere), and the seen mask (1 where seen).
    """
    if not hasattr(data, "keys") or any(key not in data for key in ("clean", "positions", "bars")):
        found = sorted(data.keys()) if hasattr(data, "keys") else type(data).__name__
        raise InputError(f"`data` must be a dict with 'clean', 'positions' and 'bars' (as `generate` returns). "
                         f"Received: {found}")
    clean, positions, bars = np.asarray(data["clean"]), np.asarray(data["positions"]), np.asarray(data["bars"])
    if clean.ndim == 5:
        clean = clean[..., 0]
    n, steps = clean.shape[:2]
    if (clean.ndim != 4 or positions.shape != (n, steps, 2) or bars.shape != (n,) + clean.shape[2:]
            or clean.shape[2] != clean.shape[3]):
        raise InputError(f"`data` must hold 'clean' [n, T, S, S(, 1)], 'positions' [n, T, 2] and 'bars' "
                         f"[n, S, S]. Received: clean {clean.shape}, positions {positions.shape}, "
                         f"bars {bars.shape}")
    digit_size = integer_at_least("digit_size", digit_size, 1)
    if n and (positions.min() < 0 or positions.max() + digit_size > clean.shape[2]):
        raise InputError(f"`digit_size` {digit_size} at `data`'s positions leaves the {clean.shape[2]}-pixel "
                         f"frames: it must be the digit_size `generate` used. Received: digit_size={digit_size}")
    if num_frames is None:
        num_frames = steps
    num_frames = integer_at_least("num_frames", num_frames, 1)
    if num_frames > steps:
        raise InputError(f"`num_frames` must be at most the sequences' {steps} frames. "
                         f"Received: num_frames={num_frames}")
    span = np.arange(digit_size)
    rows = positions[:, :num_frames, 0, None, None] + span[:, None]  # [n, k, d, 1]
    cols = positions[:, :num_frames, 1, None, None] + span[None, :]  # [n, k, 1, d]
    sample = np.arange(n)[:, None, None, None]
    seen = ~bars[sample, rows, cols].all(axis=1)  # [n, d, d]: not under a bar in some frame
    digit = clean[sample[:, 0], 0, rows[:, 0], cols[:, 0]]  # the digit where the first frame put it
    return np.stack([np.where(seen, digit, 0.0), seen], axis=-1).astype("float32")


def targets_for(variant, frames, labels):
    """The ``y`` of ``fit`` for a variant: ``{"digit", "digit_steps"(, "next_frames")}``.

    ``digit`` is the label, ``digit_steps`` the label repeated for every frame and
    ``next_frames`` (RLadder variants) the frames 2..T.
    """
    check_variant(variant)  # an unknown variant ("ladder") silently had no next-frame targets
    labels = np.asarray(labels)
    targets = {"digit": labels, "digit_steps": np.repeat(labels[:, None], frames.shape[1], axis=1)}
    if variant in ("rladder", "no_feedback"):
        targets["next_frames"] = frames[:, 1:]
    return targets


def _check_digits(digits, labels):
    """``check_digits`` (the digits as float32), and ``labels`` MNIST's digit classes,
    integers in [0, ``NUM_CLASSES``): a label of 10 or -1 made sequences whose targets
    the model's classes cannot hold (a raw error in ``fit``, or a wrong score)."""
    digits = check_digits(digits, labels)
    labels = np.asarray(labels)
    if labels.size and not 0 <= labels.min() <= labels.max() < NUM_CLASSES:
        raise InputError(
            f"`labels` must be digit classes, integers in [0, {NUM_CLASSES - 1}]. "
            f"Received: labels in [{labels.min()}, {labels.max()}]"
        )
    return digits


def make_dataset(data, variant="rladder", batch_size=32, shuffle=False, seed=0):
    """A ``tf.data`` pipeline of ``(frames, targets)`` from ``generate``'s output.

    ``seed``: the shuffle's seed, an integer >= 0 (None: another order every run).
    """
    import tensorflow as tf

    seed = checks.stream_seed(seed)  # (1.5 and "a" were raw TensorFlow errors, True and -1 taken)
    check_variant(variant)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    shuffle = checks.true_or_false("shuffle", shuffle)  # ("False", a non-empty string, shuffled)
    ds = tf.data.Dataset.from_tensor_slices(
        (data["frames"], targets_for(variant, data["frames"], data["labels"]))
    )
    if shuffle:
        # a buffer of at least 1: tf.data refuses 0 (an empty set of sequences)
        ds = ds.shuffle(max(len(data["frames"]), 1), seed=seed, reshuffle_each_iteration=True)
    return distribute.prefetched(ds.batch(batch_size))


AUGMENTS = (None, "fresh", "affine")


def check_variant(variant):
    """Raises an ``InputError`` naming :data:`VARIANTS` for any other ``variant``."""
    if variant not in VARIANTS:
        raise InputError(f"`variant` must be one of {VARIANTS}. Received: variant={variant!r}")


def check_sequence_options(motion="paper", bars="grid", bar_spacing=12):
    """The sequences' data options as a dict ``{"motion", "bars", "bar_spacing"}``, checked
    as :func:`generate` checks them (with its bars :data:`BAR_WIDTH` pixels wide): an
    ``InputError`` naming a bad one, so that a caller refuses it before any digit is read or
    folder made.

    Args:
        motion: ``"paper"`` (default) or ``"compass"`` (see :func:`generate`).
        bars: ``"grid"`` (default) or ``"vertical"``.
        bar_spacing: pixels between the leading edges of neighbouring bars, an integer
            above the bars' width :data:`BAR_WIDTH` (4; default 12, the paper's).
    """
    motion = _check_choice("motion", motion, MOTIONS)
    bars = _check_choice("bars", bars, BAR_LAYOUTS)
    bar_spacing = integer_at_least("bar_spacing", bar_spacing, 1)
    _check_bars(BAR_WIDTH, bar_spacing)  # generate's bar_width
    return {"motion": motion, "bars": bars, "bar_spacing": bar_spacing}


def _check_augment(augment, affine):
    if augment not in AUGMENTS:
        raise InputError(f"`augment` must be one of {AUGMENTS}. Received: augment={augment!r}")
    if affine is not None and augment != "affine":
        raise InputError(f"`affine` options need augment='affine'. Received: augment={augment!r}, affine={affine!r}")
    return _check_affine(affine) if augment == "affine" else None


def make_training_dataset(
    digits,
    labels,
    num_sequences,
    variant="rladder",
    batch_size=32,
    seed=0,
    augment=None,
    affine=None,
    frame_size=FRAME_SIZE,
    first_epoch=0,
    replicas=1,
    endless=False,
    motion="paper",
    bars="grid",
    bar_spacing=12,
):
    """A ``tf.data`` pipeline of training ``(frames, targets)`` batches, augmented or not.

    Args:
        digits, labels: the training digits (``[n, 28, 28]`` in [0, 1]) and labels.
        num_sequences: sequences per epoch (one pass over the dataset).
        seed: the seed of the sequences and of their order, an integer >= 0 (None:
            others every run, with ``augment=None`` and ``endless=False`` only).
        augment: None (default): ``num_sequences`` sequences generated once (seed
            ``seed``) and reshuffled every epoch, as :func:`make_dataset` with
            ``shuffle=True``. ``"fresh"``: a new set of ``num_sequences`` sequences
            every epoch (new digits drawn, start positions, velocities and bar
            offsets; epoch ``e`` uses seed ``(seed, e)``, so the stream is
            deterministic for a seed). ``"affine"``: as ``"fresh"``, and every
            sequence's digit gets its own random affine transform
            (:func:`augment_digits`, with ``affine``'s parameters). Validation and
            test sequences are never augmented.
        affine: the parameters of :func:`augment_digits` for ``augment="affine"``
            (a dict; None or missing keys: ``AFFINE_DEFAULTS``).
        first_epoch: the epoch of the first pass (default 0). With ``endless``, the
            stream starts at that epoch. Otherwise, with ``augment``, pass ``p`` draws
            the sequences of epoch ``first_epoch + p``; without ``augment`` it changes
            nothing (tf.data's reshuffled order of a pass is that of the first passes).
        replicas: the batches are cut for that many replicas in sync
            (``distribute.even_batches``).
        endless: False (default): one epoch, drawn again (``augment``) or reshuffled
            by tf.data each time it is iterated. True: the endless stream of the
            epochs ``first_epoch, first_epoch + 1, ...`` (``distribute.epoch_stream``;
            ``fit(..., steps_per_epoch=training_batches(num_sequences, batch_size,
            replicas))``), epoch ``e`` shuffled (or drawn, with ``augment``) from
            ``(seed, e)`` alone: a run resumed at epoch ``e`` trains on what the
            uninterrupted run trained on, in the same order (what :func:`train` does).
        motion, bars, bar_spacing: the sequences' data, passed to every ``generate``
            call (defaults: the paper's, see :func:`check_sequence_options`).

    Returns:
        A ``tf.data.Dataset``; with ``augment`` it generates an epoch's sequences (in
        numpy, ~1.5 s per 20,000 sequences of 24x24 frames on one core, ~3 s with
        ``"affine"``) when the epoch is first read, that is every epoch of ``fit``
        (or every pass of ``.repeat()``).
    """
    import tensorflow as tf

    options = _check_augment(augment, affine)
    check_variant(variant)
    sequence_options = check_sequence_options(motion, bars, bar_spacing)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    num_sequences = integer_at_least("num_sequences", num_sequences, 1)
    first_epoch = integer_at_least("first_epoch", first_epoch, 0)
    # the epochs of the stream, and the sequences of every epoch with augment, are drawn
    # from (seed, epoch): a bad seed failed when the stream was read, or in tf.data
    seed = checks.stream_seed(seed, first_epoch if endless or augment is not None else None)
    batches = training_batches(num_sequences, batch_size, replicas)
    if augment is None:
        data = generate(digits, labels, num_sequences, seed=seed, frame_size=frame_size, **sequence_options)
        if not endless:
            return distribute.even_batches(make_dataset(data, variant, batch_size, shuffle=True, seed=seed),
                                           replicas, batches)
        sequences = tf.data.Dataset.from_tensor_slices(
            (data["frames"], targets_for(variant, data["frames"], data["labels"])))

        def shuffled_epoch(epoch):
            shuffled = sequences.shuffle(num_sequences, seed=distribute.epoch_seed(seed, epoch))
            return distribute.even_batches(shuffled.batch(batch_size), replicas, batches)

        return distribute.prefetched(distribute.epoch_stream(shuffled_epoch, batches, first_epoch))
    digits = _check_digits(digits, labels)  # here, not when the first epoch is drawn
    if options is not None:  # the shift against the digits' size, here too
        _check_affine(options, size=digits.shape[1:])
    # here too: a frame too small for the digit, or not an integer (2.5), failed only
    # when the dataset was read (inside tf.data), or in tf.TensorSpec below
    frame_size = _check_frame_size(frame_size)
    labels = np.asarray(labels)
    passes = [first_epoch]  # the epoch of the next pass over the dataset (each one draws new sequences)

    def generated(epoch=None):
        if epoch is None:  # one pass of a dataset iterated again: the next epoch
            epoch = passes[0]
            passes[0] += 1
        data = generate(digits, labels, num_sequences, seed=(seed, int(epoch)), frame_size=frame_size,
                        affine=options, **sequence_options)
        targets = targets_for(variant, data["frames"], data["labels"])
        for lo in range(0, num_sequences, batch_size):
            yield data["frames"][lo : lo + batch_size], {k: v[lo : lo + batch_size] for k, v in targets.items()}

    frame_spec = tf.TensorSpec((None, NUM_FRAMES, frame_size, frame_size, 1), tf.float32)
    target_spec = {
        "digit": tf.TensorSpec((None,), tf.int32),
        "digit_steps": tf.TensorSpec((None, NUM_FRAMES), tf.int32),
    }
    if variant in ("rladder", "no_feedback"):
        target_spec["next_frames"] = tf.TensorSpec((None, NUM_FRAMES - 1, frame_size, frame_size, 1), tf.float32)
    signature = (frame_spec, target_spec)
    if endless:
        def drawn_epoch(epoch):
            epoch_ds = tf.data.Dataset.from_generator(generated, args=(epoch,), output_signature=signature)
            return distribute.even_batches(epoch_ds, replicas, batches)

        return distribute.prefetched(distribute.epoch_stream(drawn_epoch, batches, first_epoch))
    ds = tf.data.Dataset.from_generator(generated, output_signature=signature)
    # a generator's length is unknown to tf.data: without it `fit` warned at the end of the
    # first epoch that the input ran out of data (and its progress bar had no total)
    ds = ds.apply(tf.data.experimental.assert_cardinality(-(-num_sequences // batch_size)))
    return distribute.prefetched(distribute.even_batches(ds, replicas, batches))


def training_batches(num_sequences, batch_size, replicas=1):
    """The batches of an epoch of :func:`make_training_dataset` (``steps_per_epoch``)."""
    return distribute.even_batch_count(num_sequences, batch_size, replicas)


# ------------------------------------------------------------------------- model
def _check_conv_options(conv_encoder, conv_normalization):
    """Validates the two options and resolves ``conv_normalization="auto"``."""
    if conv_encoder not in CONV_ENCODERS:
        raise InputError(
            f"`conv_encoder` must be one of {CONV_ENCODERS}. Received: conv_encoder={conv_encoder!r}"
        )
    if conv_normalization not in CONV_NORMALIZATIONS:
        raise InputError(
            f"`conv_normalization` must be one of {CONV_NORMALIZATIONS}. "
            f"Received: conv_normalization={conv_normalization!r}"
        )
    if conv_normalization == "auto":
        return "instance" if conv_encoder in NORMALIZED_ENCODERS else None
    if conv_normalization is not None and conv_encoder not in NORMALIZED_ENCODERS:
        raise InputError(
            f"`conv_normalization` needs conv_encoder in {NORMALIZED_ENCODERS}. "
            f"Received: conv_encoder={conv_encoder!r}, conv_normalization={conv_normalization!r}"
        )
    return conv_normalization


CONV_NORMALIZATIONS = ("auto", None, "instance")


def _check_unflatten(unflatten):
    if unflatten not in UNFLATTENS:
        raise InputError(f"`unflatten` must be one of {UNFLATTENS}. Received: unflatten={unflatten!r}")


def paper_levels(
    conv_units=(32, 64, 64), dense_units=128, conv_encoder="gatedconv", conv_normalization="auto", unflatten="broadcast"
):
    """Convolutional levels (pooling by 2 from the second on) and a dense gated top.

    Args:
        conv_units: channels of the convolutional levels.
        dense_units: units of the gated top level.
        conv_encoder: the encoder of the convolutional levels, ``"gatedconv"``
            (default: feed-forward, gated as a ConvLSTM, see
            :class:`GatedConvEncoderCell`), ``"conv"`` (feed-forward ReLU
            convolutions of the input and the decoder feedback, see
            :class:`ConvEncoderCell`) or ``"convlstm"`` (recurrent).
        conv_normalization: ``"auto"`` (default: ``"instance"`` with ``"conv"``
            and ``"gatedconv"`` levels, None with ``"convlstm"``), None, or
            ``"instance"`` (per-sample, per-channel normalization of the
            convolutions' pre-activations; not with ``conv_encoder="convlstm"``).
        unflatten: how the gated top's decoder output reaches the pixels of the
            convolutional decoder below it (the top level's ``unflatten``, see
            :func:`level_spec`): ``"broadcast"`` (default: a dense projection to
            the channels, the same at every pixel) or ``"dense"`` (a kernel to
            every pixel's channels, so that the top-down path can say *where*).

    Returns:
        A list of level specs for :class:`RLadder`.
    """
    conv_normalization = _check_conv_options(conv_encoder, conv_normalization)
    _check_unflatten(unflatten)
    levels = [
        level_spec(conv_encoder, u, pool=1 if i == 0 else 2, normalization=conv_normalization)
        for i, u in enumerate(conv_units)
    ]
    return levels + [level_spec("gated", dense_units, unflatten=unflatten)]


def build_model(
    variant="rladder",
    num_frames=NUM_FRAMES,
    frame_size=FRAME_SIZE,
    conv_units=(32, 64, 64),
    dense_units=128,
    num_classes=NUM_CLASSES,
    normalization=None,
    conv_encoder="gatedconv",
    conv_normalization="auto",
    feedback_initializer="zeros",
    unflatten="broadcast",
    name=None,
):
    """Builds one of the models (see the module docstring for ``variant``).

    Args:
        variant: ``"rladder"`` (default), ``"no_feedback"``, ``"hierarchical"`` or
            ``"temporal"``.
        num_frames, frame_size: the sequences' length ``T`` (>= 1) and the frames'
            height and width ``S``.
        conv_units: channels of the convolutional levels (at least one), the
            second and later ones pooling by 2 (so ``S`` must be divisible by
            ``2 ** (len(conv_units) - 1)`` for the ladders).
        dense_units: units of the top level (the ladders' gated level, the
            temporal baseline's GRU).
        num_classes: digit classes (>= 2).
        normalization: the RLadder's ``normalization`` (None by default, or
            ``"layer"``: measured slower to learn here, see the benchmark); the
            temporal baseline (plain convolutions and a GRU) has no ladder: another
            value than None has no effect there and warns (``UserWarning``).
        conv_encoder: the encoder of the ladder's convolutional levels:
            ``"gatedconv"`` (default: feed-forward, the ConvLSTM's gates in place
            of a ReLU, :class:`GatedConvEncoderCell`; measured better than
            ``"conv"`` on validation, sixteenth round), ``"conv"`` (feed-forward
            ReLU convolutions of the input and the decoder feedback,
            :class:`ConvEncoderCell`) or ``"convlstm"`` (the recurrent levels
            of the paper's Table 7; measured to stay near chance far longer, see
            ``benchmarks/rladder_measurements.md``); the temporal baseline ignores
            it (its convolutions are feed-forward anyway).
        conv_normalization: ``"instance"``: per-sample normalization, per channel
            over height and width, of the pre-activations of every convolution
            before its ReLU or gates, with a learned gain and shift per channel (without
            it the next-frame cost silences the ladder's upper ReLU levels).
            Applies to the ladder's ``"conv"`` and ``"gatedconv"`` levels and, so
            that every variant has the same per-frame convolutions, to the
            temporal baseline's convolutions too (a Keras ``GroupNormalization``
            with one group per channel). Needs ``conv_encoder="conv"`` or
            ``"gatedconv"`` for the ladder variants. None: no normalization.
            ``"auto"`` (default): ``"instance"`` with ``"conv"`` and
            ``"gatedconv"``, None with ``"convlstm"``.
        feedback_initializer: the RLadder's ``feedback_initializer`` (``"zeros"``,
            the default: the full ladder starts as ``no_feedback`` and learns its
            feedback; None: as its other kernels). Only the ``"rladder"`` variant
            has feedback, so the other variants do not pass it on.
        unflatten: how the ladder's gated top reaches the pixels of the
            convolutional decoder below it (see :func:`paper_levels`):
            ``"broadcast"`` (default) or ``"dense"``. Only the variants with a
            decoder (``"rladder"``, ``"no_feedback"``) use it; the
            ``"hierarchical"`` ladder (no decoder) and the temporal baseline
            ignore it.

    Returns:
        A ``keras.Model`` from frames ``[batch, T, S, S, 1]`` to ``{"next_frames":
        logits [batch, T-1, S, S, 1], "digit_steps": probabilities [batch, T,
        classes] (every step), "digit": probabilities [batch, classes] (the last
        step)}`` for ``"rladder"`` / ``"no_feedback"``, or to ``{"digit_steps",
        "digit"}`` for the baselines.
    """
    check_variant(variant)
    conv_normalization = _check_conv_options(conv_encoder, conv_normalization)
    _check_unflatten(unflatten)
    if variant == "temporal" and normalization is not None:  # was silently without effect
        checks.warn_without_effect("occluded_mnist.build_model", "normalization", normalization,
                                   "a ladder variant ('rladder', 'no_feedback' or 'hierarchical')")
    # num_frames=0 failed with "out-of-bounds index", conv_units=() with a message about the
    # ladder's input combinator, num_classes=1 only in fit
    num_frames = integer_at_least("num_frames", num_frames, 1)
    frame_size = integer_at_least("frame_size", frame_size, 1)
    dense_units = integer_at_least("dense_units", dense_units, 1)
    num_classes = integer_at_least("num_classes", num_classes, 2)
    if isinstance(conv_units, (str, bytes)) or not isinstance(conv_units, (list, tuple)) or not conv_units:
        raise InputError(
            f"`conv_units` must be a non-empty list of channel counts. Received: conv_units={conv_units!r}"
        )
    conv_units = tuple(integer_at_least("conv_units", u, 1) for u in conv_units)
    # every convolutional level after the first pools by 2: the ladders need frames they divide
    # evenly, the temporal baseline (pooling rounds down) at least one pixel left; both failed in
    # Keras' build with a plain ValueError (a traceback on the command line)
    pooling = 2 ** (len(conv_units) - 1)
    if (frame_size % pooling if variant != "temporal" else frame_size < pooling):
        need = "divisible by" if variant != "temporal" else "at least"
        raise InputError(
            f"`frame_size` must be {need} {pooling} for {len(conv_units)} convolutional levels "
            f"(every level after the first pools by 2). Received: frame_size={frame_size}, "
            f"conv_units={list(conv_units)}"
        )
    frames = keras.Input((num_frames, frame_size, frame_size, 1), name="frames")
    outputs = {}
    if variant == "temporal":
        x = frames
        for i, units in enumerate(conv_units):
            if conv_normalization is None:
                x = keras.layers.TimeDistributed(
                    keras.layers.Conv2D(units, 3, padding="same", activation="relu"), name=f"conv{i}"
                )(x)
            else:  # convolution, instance normalization (gain and shift per channel), ReLU
                x = keras.layers.TimeDistributed(
                    keras.layers.Conv2D(units, 3, padding="same", use_bias=False), name=f"conv{i}"
                )(x)
                x = keras.layers.TimeDistributed(
                    keras.layers.GroupNormalization(groups=-1, epsilon=1e-5), name=f"norm{i}"
                )(x)
                x = keras.layers.Activation("relu", name=f"relu{i}")(x)
            if i > 0:
                x = keras.layers.TimeDistributed(keras.layers.MaxPooling2D(2), name=f"pool{i}")(x)
        x = keras.layers.TimeDistributed(keras.layers.Flatten(), name="flatten")(x)
        tops = keras.layers.GRU(dense_units, return_sequences=True, name="rnn")(x)
    else:
        # the hierarchical ladder has no decoder to unflatten into (RLadder refuses "dense" there)
        decoded = variant != "hierarchical"
        levels = paper_levels(
            conv_units, dense_units, conv_encoder, conv_normalization, unflatten if decoded else "broadcast"
        )
        if not decoded:
            tops = RLadder(
                levels, use_decoder=False, normalization=normalization, name="rladder"
            )(frames)
        else:
            feedback = variant == "rladder"
            predictions, tops = RLadder(
                levels,
                decoder_to_encoder=feedback,
                output_units=1,
                normalization=normalization,
                # only the full ladder has feedback kernels (RLadder refuses it without)
                feedback_initializer=feedback_initializer if feedback else None,
                name="rladder",
            )(frames)
            outputs["next_frames"] = keras.layers.Identity(name="next_frames", dtype=arguments.output_dtype())(
                predictions[:, :-1]
            )
    # one classifier shared by all steps; the digit is read at the last step
    # (the output layers compute in float32 under a mixed policy: what the losses and metrics read)
    steps = keras.layers.Dense(num_classes, activation="softmax", name="digit_steps",
                               dtype=arguments.output_dtype())(tops)
    outputs["digit_steps"] = steps
    outputs["digit"] = keras.layers.Identity(name="digit", dtype=arguments.output_dtype())(steps[:, -1])
    return keras.Model(frames, outputs, name=name or f"occluded_mnist_{variant}")


CLASSIFY = ("every", "last")


def compile_model(
    model, learning_rate=1e-3, frame_loss="bce", frame_weight=1.0, classify="every", jit_compile=False
):
    """Adam; cross-entropy for the digit, per-pixel sigmoid CE (``"bce"``) or ``"mse"`` for frames.

    ``classify="every"`` (default) puts the classification cost on every step
    (``digit_steps``, the mean over steps of the cross-entropy of each step's
    prediction); ``"last"`` on the last step's prediction only. The reported
    accuracy is always the last step's. ``learning_rate`` (Adam's, a finite number
    > 0 or a schedule) and ``frame_weight`` (the weight of the next-frame cost against the
    digit's, a finite number >= 0). ``frame_loss`` and ``frame_weight`` have no
    effect on the baselines, which predict no frames (so that one search space or
    command serves every variant). ``jit_compile``: compile the training and
    evaluation steps with XLA (``model.compile(jit_compile=...)``; the ladder's
    five steps are unrolled, so tracing takes ~30 s, and a step then costs about
    half as much on a CPU). Default False.

    Returns:
        The compiled ``model``.
    """
    jit_compile = checks.true_or_false("jit_compile", jit_compile)
    if classify not in CLASSIFY:
        raise InputError(f"`classify` must be one of {CLASSIFY}. Received: classify={classify!r}")
    if frame_loss not in ("bce", "mse"):  # was checked only for models with next frames (not the baselines)
        raise InputError(f"`frame_loss` must be 'bce' or 'mse'. Received: frame_loss={frame_loss!r}")
    # a NaN frame_weight made the loss NaN; a negative one (or learning rate) trained uphill
    checks.learning_rate(learning_rate)
    checks.finite_number("frame_weight", frame_weight, positive=False)
    digit = "digit_steps" if classify == "every" else "digit"
    losses = {digit: keras.losses.SparseCategoricalCrossentropy()}
    weights = {digit: 1.0}
    if "next_frames" in model.output:
        if frame_loss == "bce":
            losses["next_frames"] = keras.losses.BinaryCrossentropy(from_logits=True)
        else:
            losses["next_frames"] = _SigmoidMSE()
        weights["next_frames"] = frame_weight
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, clipnorm=1.0),
        loss=losses,
        loss_weights=weights,
        metrics={"digit": ["accuracy"]},
        jit_compile=jit_compile,
    )
    return model


@keras.saving.register_keras_serializable(package="applications")
class _SigmoidMSE(keras.losses.Loss):
    """Mean squared error between frames and the sigmoid of the predicted logits."""

    def __init__(self, reduction="sum_over_batch_size", name="sigmoid_mse", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return ops.mean(ops.square(ops.cast(y_true, y_pred.dtype) - ops.sigmoid(y_pred)), axis=-1)


def _digit_error(out, labels):
    """The misclassified fraction of the predicted ``digit`` (``out``: ``model.predict``'s dict)."""
    return float(np.mean(np.argmax(out["digit"], -1) != labels))


def classification_error(model, data, batch_size=64, verbose=0):
    """Fraction of sequences whose digit is misclassified (``verbose``: 1 shows Keras'
    progress bar, on stderr).

    Raises:
        InputError: ``data`` without frames and labels, or not one label per sequence
            (as :func:`error_per_step`), or a bad ``batch_size``.
    """
    # (labels of another length were broadcast against the guesses: one label scored every sequence)
    labels, _ = _check_step_data(data)
    batch_size = integer_at_least("batch_size", batch_size, 1)  # (0 returned a result)
    return _digit_error(console.predict(model, data["frames"], batch_size, verbose), labels)


#: the groups of :func:`error_per_step` besides "all" (vertical only: horizontal velocity 0)
STEP_ERROR_GROUPS = ("sideways", "vertical_only")


def _check_step_data(data):
    """``(labels [n], velocities [n, 2] or None)`` of ``generate``-like ``data``, checked."""
    if not hasattr(data, "keys") or "frames" not in data or "labels" not in data:
        found = sorted(data.keys()) if hasattr(data, "keys") else type(data).__name__
        raise InputError(f"`data` must be a dict with 'frames' and 'labels' (as `generate` returns). "
                         f"Received: {found}")
    labels = np.asarray(data["labels"])
    if labels.ndim != 1 or len(labels) == 0 or len(data["frames"]) != len(labels):
        raise InputError(f"`data` must hold n >= 1 sequences: 'labels' [n] and 'frames' [n, T, S, S, 1]. "
                         f"Received: labels shape={labels.shape}, {len(data['frames'])} frame sequences")
    velocities = data.get("velocities")
    if velocities is not None:
        velocities = np.asarray(velocities)
        if velocities.shape != (len(labels), 2):
            raise InputError(f"`data['velocities']` must have shape [n, 2] (dy, dx per sequence) with "
                             f"n={len(labels)}. Received: velocities shape={velocities.shape}")
    return labels, velocities


def _errors_per_step(out, labels, velocities):
    """:func:`error_per_step`'s dict from ``model.predict``'s ``out``."""
    steps = np.asarray(out["digit_steps"]) if hasattr(out, "keys") and "digit_steps" in out else None
    if steps is None or steps.ndim != 3 or len(steps) != len(labels) or steps.shape[1] == 0:
        raise InputError(
            "the model must output 'digit_steps', the digit probabilities after every frame "
            f"[n, T, classes] with n={len(labels)} (a model of `build_model`). Received: "
            + (f"digit_steps shape={steps.shape}" if steps is not None else
               f"outputs {sorted(out) if hasattr(out, 'keys') else type(out).__name__}")
        )
    wrong = np.argmax(steps, -1) != labels[:, None]  # [n, T]
    errors = {"all": wrong.mean(0).tolist(), "counts": {"all": len(labels)}}
    vertical = None if velocities is None else velocities[:, 1] == 0
    for name, members in zip(STEP_ERROR_GROUPS, (None, None) if vertical is None else (~vertical, vertical)):
        errors[name] = wrong[members].mean(0).tolist() if members is not None and members.any() else None
        errors["counts"][name] = None if members is None else int(members.sum())
    return errors


def error_per_step(model, data, batch_size=64, verbose=0):
    """Fraction of misclassified sequences after each frame, over all sequences and by motion.

    Step ``t``'s digit is the argmax of the model's ``digit_steps[:, t]`` (the last
    step's is the reported ``digit``, so ``errors["all"][-1]`` is
    :func:`classification_error`). A model that integrates what it sees over the
    frames shows it as error falling with the frame. Sequences that do not move
    sideways (``velocities[:, 1] == 0``: they move vertically, or not at all when
    ``generate`` had ``speed=0``) keep the same digit columns behind the static
    vertical bars in every frame, so no frame shows what those bars hide; they are
    the ``"vertical_only"`` group (empty with ``generate``'s default, the paper's
    motion, where every velocity has a sideways part). The others move sideways.

    Args:
        model: a model of :func:`build_model` (any variant), or any model whose
            ``predict`` returns a dict with ``"digit_steps"`` ``[n, T, classes]``.
        data: ``generate``'s dict: ``"frames"``, ``"labels"`` and (optional)
            ``"velocities"`` ``[n, 2]`` (dy, dx).
        batch_size: batch size of the prediction.
        verbose: 1 shows Keras' progress bar, on stderr; 0 (the default) is silent.

    Returns:
        A dict: ``"all"``, ``"sideways"``, ``"vertical_only"``: the error after each of
        the T frames (lists of T floats in [0, 1]), the latter two None when ``data``
        has no ``velocities`` or the group is empty; ``"counts"``: the number of
        sequences of each (``{"all": n, "sideways": a, "vertical_only": b}``; a and b
        are None without ``velocities``).

    Raises:
        InputError: ``data`` without frames and labels, or with none, velocities not
            ``[n, 2]``, a bad ``batch_size`` or a model without ``digit_steps``.
    """
    labels, velocities = _check_step_data(data)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    return _errors_per_step(console.predict(model, data["frames"], batch_size, verbose), labels, velocities)


def _test_errors(model, data, batch_size=64, verbose=0, out=None):
    """``(classification_error, error_per_step)`` of ``data`` from one prediction (``out``:
    ``model.predict``'s dict of ``data["frames"]``, made here if None)."""
    labels, velocities = _check_step_data(data)
    if out is None:
        out = console.predict(model, data["frames"], batch_size, verbose)
    return _digit_error(out, labels), _errors_per_step(out, labels, velocities)


# ------------------------------------------------------------------------- recipe
def _idx_layout(source, data_dir):
    """The IDX folder's split (``mnist_digits.idx_layout``) for ``source="idx"``, else None."""
    from applications.mnist_digits import default_data_dir, idx_layout

    check_source(source)
    return idx_layout(data_dir or default_data_dir()) if source == "idx" else None


def _train_test_digits(source, data_dir, seed, test_only=False, layout=None):
    """The digits of the training and of the test sequences (see :func:`train`);
    ``test_only``: those of the training sequences may be None (TFDS's 60,000 training
    digits, or the IDX ``train`` files, are then not read: ``evaluate`` read and dropped
    them). ``layout``: the IDX split to use (``mnist_digits.load_idx_train_test``; None:
    the folder's own)."""
    check_source(source)
    if source == "tfds":
        return None if test_only else load_digits("tfds", data_dir, "train"), load_digits("tfds", data_dir, "test")
    from applications.mnist_digits import default_data_dir, load_idx_train_test

    train, test, _ = load_idx_train_test(data_dir or default_data_dir(), seed, layout, test_only=test_only)
    # [n, 28, 28], as load_digits gives them
    return tuple(None if digits is None else (digits[0][..., 0], digits[1]) for digits in (train, test))


def check_source(source):
    """Raises an ``InputError`` for a ``source`` other than ``"idx"`` or ``"tfds"``."""
    if source not in ("idx", "tfds"):
        raise InputError(f"`source` must be 'idx' or 'tfds'. Received: source={source!r}")


def _hold_out(digits, seed):
    """Splits training digits ``(images, labels)`` into four fifths and a held-out fifth."""
    images, labels = digits
    if len(images) < 2:
        raise InputError(f"holding out validation digits needs at least 2 training digits. Received: {len(images)}")
    order = np.random.default_rng([seed, 1]).permutation(len(images))
    cut = min(max(int(0.8 * len(images)), 1), len(images) - 1)
    return (images[order[:cut]], labels[order[:cut]]), (images[order[cut:]], labels[order[cut:]])


def make_sequences(source="idx", data_dir=None, num_train=20000, num_test=5000, seed=0, frame_size=FRAME_SIZE,
                   hold_out=False, motion="paper", bars="grid", bar_spacing=12):
    """The training and test sequences of :func:`train` (``generate``'s dicts).

    With ``source="idx"`` the IDX folder's digits (``mnist_digits.load_idx_train_test``:
    its ``train`` files train and its ``t10k`` files test when it holds both, else the
    ``t10k`` digits are split 80/20 by ``seed``); with ``"tfds"`` the TFDS train and test
    splits are used.

    With ``hold_out=True`` the second dict holds ``num_test`` *validation*
    sequences instead: their digits are a fifth of the training digits, held out
    (the training sequences use the other four fifths), and the test digits are not
    used. Model selection (``tuning.occluded_mnist``) uses these, so that the test
    sequences never take part in a choice.

    ``seed``: an integer >= 0 (the test sequences are drawn from ``seed + 1``).
    ``motion``, ``bars``, ``bar_spacing``: the data of both (defaults: the paper's; see
    :func:`check_sequence_options` and :func:`generate`).
    """
    seed = integer_at_least("seed", seed, 0)  # ([1, 2] failed at seed + 1, after the digits were read)
    sequence_options = check_sequence_options(motion, bars, bar_spacing)  # before the digits are read
    train_digits, test_digits = _train_test_digits(source, data_dir, seed)
    if hold_out:
        train_digits, test_digits = _hold_out(train_digits, seed)
    return (
        generate(*train_digits, num_train, seed=seed, frame_size=frame_size, **sequence_options),
        generate(*test_digits, num_test, seed=seed + 1, frame_size=frame_size, **sequence_options),
    )


@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    variant="rladder",
    source="idx",
    data_dir=None,
    run_dir="runs/occluded_mnist",
    num_train=20000,
    num_test=5000,
    epochs=20,
    batch_size=32,
    learning_rate=1e-3,
    conv_units=(32, 64, 64),
    dense_units=128,
    seed=0,
    verbose=1,
    callbacks=(),
    strategy=None,
    classify="every",
    normalization=None,
    frame_size=FRAME_SIZE,
    conv_encoder="gatedconv",
    conv_normalization="auto",
    jit_compile=False,
    frame_weight=1.0,
    feedback_initializer="zeros",
    augment=None,
    affine=None,
    unflatten="broadcast",
    hold_out=False,
    precision=None,
    motion="paper",
    bars="grid",
    bar_spacing=12,
):
    """Trains one variant on generated sequences; writes model, plot, metrics and logs.

    With ``source="idx"`` the IDX folder's digits (``mnist_digits.load_idx_train_test``:
    its ``train`` files train and its ``t10k`` files test when it holds both, else the
    ``t10k`` digits are split 80/20 by ``seed``; ``metrics.json`` records which); with
    ``"tfds"`` the TFDS train and test splits are used. With ``strategy`` the model is
    built and compiled in its scope (``batch_size`` is then the global batch). ``classify``: see
    :func:`compile_model`; ``normalization``: see :func:`build_model`;
    ``frame_size``: height and width of the frames (32 as in the paper; smaller
    frames leave the digit fewer positions and cost less per step);
    ``conv_encoder``, ``conv_normalization``, ``feedback_initializer``,
    ``unflatten``: see :func:`build_model`;
    ``jit_compile``, ``frame_weight``: see :func:`compile_model`;
    ``augment`` (None, the default; ``"fresh"``: new training sequences every
    epoch; ``"affine"``: new sequences every epoch, each digit randomly
    transformed) and ``affine`` (the transforms' parameters, a dict of
    :func:`augment_digits` arguments): see :func:`make_training_dataset`;
    ``num_train`` is then the number of sequences per epoch (a run resumed from the
    backup in ``callbacks`` at epoch ``k`` draws those of epochs ``k``, ``k + 1``, ...,
    as an uninterrupted run). The test sequences are never augmented. The backup of
    a ``fault_tolerance.AtomicBackupAndRestore`` among ``callbacks`` is deleted once
    the outputs are written (``fault_tolerance.finish_run``). ``verbose`` is ``fit``'s; while
    it is set, the scoring of the test sequences after training shows its progress bar too
    (on stderr). With ``hold_out=True`` the model trains on four fifths of the training
    digits and is watched and scored on ``num_test`` *validation* sequences of the
    held-out fifth instead of the test sequences (as ``make_sequences(hold_out=True)``),
    so that a choice made on its figures never sees a test digit; the result's
    ``"scored_on"`` says which (``"test"`` or ``"validation"``), and the figures keep
    their ``test_*`` names.

    ``motion``, ``bars`` and ``bar_spacing`` choose the data of the training and test
    sequences alike (:func:`check_sequence_options`; defaults: the paper's, a grid of
    bars 4 pixels wide, 12 apart, and the velocities (+-1, +-2), (+-2, +-1); ``"compass",
    "vertical", 8``: the data of before, see :func:`generate`); ``metrics.json`` records
    them (``"sequences"``), and :func:`evaluate` makes the same test sequences.

    ``precision`` (``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``) is the Keras
    dtype policy the run builds, trains and saves its model under (its outputs in
    float32); None (the default): the global one. See
    ``applications.arguments.trains_under_precision``.

    Returns:
        A dict (also written to ``metrics.json``) with the test classification error
        (``"test_error"``), the error after every frame over all test sequences and
        split by motion (``"test_error_per_step"``: :func:`error_per_step`'s dict,
        drawn in ``error_per_step.png``, key ``"error_plot"``), the parameter count,
        the epochs trained (``"epochs_run"``, one stopped part-way by a time budget
        included) and the optimizer updates (``"updates"``; both count those before a
        resume), and the paths (model, ``history.png``, ``predictions.png``, metrics, logs).
    """
    from applications import fault_tolerance
    from applications.demo import plot_history, save_atomically

    _check_augment(augment, affine)
    _check_unflatten(unflatten)  # before the data are made
    sequence_options = check_sequence_options(motion, bars, bar_spacing)
    # num_test=0 failed only after training (drawing the test predictions), epochs=0 saved and
    # scored an untrained model
    num_test = integer_at_least("num_test", num_test, 1)
    epochs = integer_at_least("epochs", epochs, 1)
    seed = integer_at_least("seed", seed, 0)  # (-1 was Keras' error from set_random_seed)
    # ("False", a non-empty string, held out a fifth of the training digits)
    hold_out = checks.true_or_false("hold_out", hold_out)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    strategy = distribute.resolve_strategy(strategy)
    keras.utils.set_random_seed(seed)
    check_run_dir(run_dir)  # (a file in the way: refused before the data are made)
    layout = _idx_layout(source, data_dir)
    fingerprint = None
    if layout:  # a backup of a run on the folder's t10k split is not resumed on its train files,
        # nor on other digits (on the same files in another folder it is)
        from applications.mnist_digits import default_data_dir, idx_fingerprint

        fingerprint = idx_fingerprint(data_dir or default_data_dir())
        fault_tolerance.record_data(callbacks, idx_layout=layout, data_fingerprint=fingerprint)
    train_digits, test_digits = _train_test_digits(source, data_dir, seed, layout=layout)
    if hold_out:  # the test digits are not used at all
        train_digits, test_digits = _hold_out(train_digits, seed)
    # the same sequences as make_sequences (without augmentation)
    # every epoch shuffled (or drawn) from (seed, epoch): a resumed run trains as the uninterrupted one
    train_dataset = make_training_dataset(
        *train_digits, num_train, variant, batch_size, seed=seed, augment=augment, affine=affine,
        frame_size=frame_size, first_epoch=fault_tolerance.resume_epoch(callbacks, epochs),
        replicas=strategy.num_replicas_in_sync, endless=True, **sequence_options,
    )
    # (and a mid-epoch backup's epoch goes on after the steps it had trained)
    train_dataset = fault_tolerance.skip_trained_steps(train_dataset, callbacks, epochs)
    test_data = generate(*test_digits, num_test, seed=seed + 1, frame_size=frame_size, **sequence_options)
    with strategy.scope():
        model = compile_model(
            build_model(
                variant,
                frame_size=frame_size,
                conv_units=conv_units,
                dense_units=dense_units,
                normalization=normalization,
                conv_encoder=conv_encoder,
                conv_normalization=conv_normalization,
                feedback_initializer=feedback_initializer,
                unflatten=unflatten,
            ),
            learning_rate,
            frame_weight=frame_weight,
            classify=classify,
            jit_compile=jit_compile,
        )
    # once the data are made and the model built: a bad model option or data set refused
    # above made no folder (a Python caller's folder is also removed again on an error
    # by leaves_no_empty_run_dir)
    create_run_dir(run_dir)
    paths = {
        "model": os.path.join(run_dir, "model.keras"),
        "plot": os.path.join(run_dir, "history.png"),
        "metrics": os.path.join(run_dir, "metrics.json"),
        "logs": os.path.join(run_dir, "logs"),
    }
    history = model.fit(
        train_dataset,
        steps_per_epoch=training_batches(num_train, batch_size, strategy.num_replicas_in_sync),
        validation_data=make_dataset(test_data, variant, batch_size),
        epochs=epochs,
        verbose=verbose,
        # (the stop on divergence: `train` called from Python without the command line's
        # callbacks trained a NaN model to the end, then saved and scored it)
        callbacks=[fault_tolerance.StopOnDivergence(str(run_dir)), keras.callbacks.TensorBoard(paths["logs"]), *callbacks],
        shuffle=False,
    )
    save_atomically(model, paths["model"])
    scored_on = "validation" if hold_out else "test"
    plot_history(fault_tolerance.logged_history(history, callbacks)[0], paths["plot"], accuracy="digit_accuracy",
                 held_out=scored_on)  # (fit watches the test or validation sequences)
    # one prediction for the errors and the plot (a second, of the plot's few sequences,
    # traced the predict step again), with a progress bar (on stderr) while verbose: the
    # 5000 test sequences of the recipe took minutes after the last epoch's bar, in silence
    out = console.predict(model, test_data["frames"], 64, verbose)
    paths["predictions_plot"] = _draw_predictions(out, test_data["frames"], os.path.join(run_dir, "predictions.png"),
                                                  test_data["labels"])
    test_error, errors = _test_errors(model, test_data, out=out)
    paths["error_plot"] = plot_error_per_step(errors, os.path.join(run_dir, "error_per_step.png"),
                                              title=f"{variant}: {scored_on} error per frame")
    result = {
        "variant": variant,
        "test_error": test_error,
        "test_error_per_step": errors,
        "parameters": int(model.count_params()),
        "epochs_run": fault_tolerance.epochs_run(history, callbacks),  # those before a resume too
        # the optimizer's updates in all (restored by a resume): a time budget that stops an
        # epoch part-way counts it in epochs_run, here only its batches
        "updates": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "augment": augment,
        "scored_on": scored_on,
        # what defines the train/test split: `evaluate` uses it (another split overlaps training digits)
        # (and for IDX files which split of them: mnist_digits.load_idx_train_test)
        "split": {"seed": seed, "source": source, "data_dir": None if data_dir is None else os.path.abspath(data_dir),
                  **({"idx_layout": layout} if layout else {})},
        # and what the IDX files are: evaluate refuses other digits in that folder (checks.recorded_data)
        **({"data_fingerprint": fingerprint} if fingerprint else {}),
        "num_test": num_test,  # `evaluate` scores as many test sequences by default
        "sequences": sequence_options,  # and makes them with these data options
        **paths,
    }
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(callbacks)  # the outputs are written: the backup goes
    return result


def _recorded_sequences(model_path, given):
    """``(options, note)``: the sequences' data options ``given`` (``{"motion", "bars",
    "bar_spacing"}``, None where not given), those left None taken from ``"sequences"`` in
    ``metrics.json`` beside the model (as :func:`train` recorded them), else from
    ``OLD_SEQUENCE_OPTIONS``: a run that records none was trained and tested on those
    (before the paper's were the default), and ``note`` then says so (None otherwise,
    or when all three were given)."""
    recorded = checks.recorded_metrics(model_path).get("sequences")
    metrics = os.path.join(os.path.dirname(os.path.abspath(model_path)), "metrics.json")
    note = None
    if not isinstance(recorded, dict):
        recorded = OLD_SEQUENCE_OPTIONS
        if any(value is None for value in given.values()):
            note = (f"note: {metrics} records no sequence options (a run trained before the paper's data "
                    "were the default?): scoring the data of before, compass motion and vertical bars 8 px "
                    "apart (--motion, --bars and --bar-spacing choose others)")
    for name in SEQUENCE_OPTIONS:  # a recorded one that train never writes (a hand-edited file): say where
        if given[name] is None and name in recorded:
            try:
                check_sequence_options(**{name: recorded[name]})
            except InputError as error:
                raise InputError(
                    f"{metrics} records test sequences that train does not make (was it edited?): {error}. "
                    f"Give --{name.replace('_', '-')} (`{name}`) to choose the test sequences' {name}"
                ) from None
    chosen = {name: given[name] if given[name] is not None else recorded.get(name, OLD_SEQUENCE_OPTIONS[name])
              for name in SEQUENCE_OPTIONS}
    return check_sequence_options(**chosen), note


def evaluate(model_path, source=None, data_dir=None, num_test=None, seed=None, batch_size=64, strategy=None,
             verbose=0, motion=None, bars=None, bar_spacing=None):
    """Classification error of a saved model on the test sequences of :func:`train`: ``seed``,
    ``source`` and ``data_dir`` default to those ``train`` recorded in ``metrics.json`` beside
    the model; others are refused (``checks.recorded_split``), but for a folder of the
    run's IDX files moved elsewhere; other test digits where the run's were (the files
    changed since) are refused too (``checks.recorded_data``). ``num_test`` (None) defaults
    to the number of test sequences ``train`` recorded there, else 5000.

    ``motion``, ``bars`` and ``bar_spacing`` (None) default to the data options ``train``
    recorded there (``"sequences"``): the test sequences ``train`` scored. A run that
    records none was trained before the paper's data were the default: its test
    sequences are those of ``OLD_SEQUENCE_OPTIONS`` (compass motion, vertical bars 8
    pixels apart), used then, with a note on stderr. Given ones make other test
    sequences (the same digits, moving or occluded otherwise); see
    :func:`check_sequence_options`. A recorded one that ``train`` never writes (the file
    edited by hand) is refused in one line naming ``metrics.json``, unless given.

    ``verbose``: 1 shows Keras' progress bars, on stderr (stdout keeps only the result);
    0 (the default) is silent.

    Returns:
        ``{"test_error": ..., "test_error_per_step": ..., "scored_on": "test", "sequences":
        ..., "model": model_path}``: the error of the reported digit and
        :func:`error_per_step`'s dict (the error after every frame, over all sequences and
        split by motion), from one prediction, always on test sequences, and the data
        options they were made with. For a model ``train(hold_out=True)`` made
        (scored on validation sequences) ``"train_scored_on": "validation"`` says that
        this is not the figure ``train`` reported.
    """
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    from applications.mnist_digits import default_data_dir, idx_fingerprint, recorded_idx_layout

    def test_files(folder, source):
        """The fingerprint of the test digits' files (IDX: t10k) in ``folder``; None for TFDS."""
        return idx_fingerprint(folder or default_data_dir(), ("t10k",)) if (source or "idx") == "idx" else None

    # a recorded data_dir of None is the folder train read without --data-dir: IDX files the
    # project's shared copy, TFDS its own default folder (not resolved here); a folder of
    # the run's IDX files moved elsewhere is its split too
    split, note = checks.recorded_split(model_path, {
        "seed": seed, "source": source, "data_dir": None if data_dir is None else os.path.abspath(data_dir)},
        defaults={"data_dir": lambda split: str(default_data_dir()) if (split.get("source") or "idx") == "idx"
                  else None}, holds_data=lambda path: checks.holds_recorded_data(model_path, test_files(path, source)))
    seed, source, data_dir = split["seed"], split["source"] or "idx", split["data_dir"]
    # other test digits in the run's folder since: not the run's test split
    checks.recorded_data(model_path, test_files(data_dir, source))
    if num_test is None:  # (5000 always: other sequences than train scored, unless given its number)
        num_test = checks.recorded_integers(model_path, ("num_test",), minimum=1).get("num_test", 5000)
    num_test = integer_at_least("num_test", num_test, 1)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    # the test sequences' data: those train recorded, else those of before (an older run's)
    sequence_options, sequences_note = _recorded_sequences(
        model_path, {"motion": motion, "bars": bars, "bar_spacing": bar_spacing})
    strategy = distribute.resolve_strategy(strategy)
    with strategy.scope():
        model = checks.load_model(model_path)
    _check_occluded_mnist_model(model, model_path)
    for said in (note, sequences_note):  # nothing recorded the split, or the sequences' data
        if said:
            print(said, file=sys.stderr)
    recorded = checks.recorded_metrics(model_path)
    # the IDX split train used (its test digits, whatever was added to the folder since)
    layout = recorded_idx_layout(recorded.get("split")) if source == "idx" else None
    _, test_digits = _train_test_digits(source, data_dir, seed, test_only=True, layout=layout)
    # [batch, T, S, S, 1]: the sequences the model was built for
    num_frames, frame_size = model.input_shape[1], model.input_shape[2]
    test_data = generate(*test_digits, num_test, seed=seed + 1, frame_size=frame_size, num_frames=num_frames,
                         **sequence_options)
    test_error, errors = _test_errors(model, test_data, batch_size, verbose)
    result = {"test_error": test_error, "test_error_per_step": errors, "scored_on": "test",
              "sequences": sequence_options, "model": model_path}
    # a --hold-out run reported validation sequences (held-out training digits); these are the
    # test digits' sequences: evaluate says so, as its figure is not the one train printed
    trained_on = recorded.get("scored_on")
    if isinstance(trained_on, str) and trained_on != "test":
        result["train_scored_on"] = trained_on
    return result


def _check_occluded_mnist_model(model, model_path):
    """Refuses a model that ``build_model`` did not make (another application's raised an
    IndexError, ``list index out of range``)."""
    from applications.checks import require_model

    require_model(
        model, model_path,
        lambda shapes, model: len(shapes) == 1 and len(shapes[0]) == 5 and shapes[0][-1] == 1
        and None not in shapes[0][1:] and isinstance(model.output, dict) and "digit" in model.output,
        "an Occluded Moving MNIST model", "occluded_mnist",
        "frames [batch, T, S, S, 1] in, a dict with the 'digit' probabilities out",
    )


# The command-line protocol (applications/registry.py).


def plot_predictions(model, frames, path, labels=None, num_sequences=3, batch_size=64, title=None):
    """Writes, for a few sequences, the frames, the predicted next frames and digits to a PNG.

    One row of input frames per sequence, each frame titled with the digit the model
    predicts at that step (``argmax`` of ``digit_steps``, with its probability). For a
    model with a ``next_frames`` output (the ``"rladder"`` and ``"no_feedback"``
    variants) a second row shows the predicted frames (``sigmoid`` of the logits)
    under the frames they predict (frames 2..T); the baselines (and sequences of one
    frame, with nothing to predict) have that one row only.

    Args:
        model: a model of ``build_model`` (any variant).
        frames: ``[n, T, S, S, 1]`` (or ``[n, T, S, S]``) sequences, e.g. ``generate``'s ``"frames"``.
        path: output file.
        labels: optional ``[n]`` true digits (shown beside each sequence).
        num_sequences: how many of the first sequences to draw (at most ``n``). Default 3.
        batch_size: batch size of the model's prediction.
        title: optional figure title.

    Returns:
        ``path``.
    """

    frames = np.asarray(frames, "float32")
    if frames.ndim == 4:
        frames = frames[..., None]
    if frames.ndim != 5 or frames.shape[-1] != 1 or len(frames) == 0:
        raise InputError(f"`frames` must have shape [n, T, S, S, 1] or [n, T, S, S] with n >= 1. "
                         f"Received: frames shape={frames.shape}")
    count = min(plotting.positive_count("num_sequences", num_sequences), len(frames))
    frames = frames[:count]
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if len(labels) < count:
            raise InputError(f"`labels` must hold a label for each of the {count} sequences drawn. "
                             f"Received: labels shape={labels.shape}")
    return _draw_predictions(model.predict(frames, batch_size=batch_size, verbose=0), frames, path, labels, count,
                             title)


def _draw_predictions(out, frames, path, labels=None, count=3, title=None):
    """:func:`plot_predictions`' figure of the first ``count`` of ``frames`` ``[n, T, S, S, 1]``
    from ``out``, ``model.predict``'s dict of (at least) them."""
    count = min(count, len(frames))
    frames = np.asarray(frames[:count], "float32")
    steps_probs = np.asarray(out["digit_steps"][:count], "float32")  # [b, T, classes]
    guesses, confidence = steps_probs.argmax(-1), steps_probs.max(-1)
    predicted = None
    if "next_frames" in out and np.shape(out["next_frames"])[1]:  # logits of frames 2..T (none when T = 1)
        predicted = 1 / (1 + np.exp(-np.asarray(out["next_frames"][:count], "float32")[..., 0]))
    num_frames = frames.shape[1]
    per_sequence = 1 if predicted is None else 2
    rows = count * per_sequence
    fig, axes = plotting.subplots(rows, num_frames, figsize=(1.5 * num_frames + 0.6, 1.55 * rows + 0.5), squeeze=False)
    for i in range(count):
        top = i * per_sequence
        for t in range(num_frames):
            ax = axes[top, t]
            ax.imshow(frames[i, t, ..., 0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(f"t={t + 1}: {guesses[i, t]} ({confidence[i, t]:.2f})", fontsize=7)
            if predicted is not None:
                below = axes[top + 1, t]
                if t:
                    below.imshow(predicted[i, t - 1], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
                else:
                    below.axis("off")
        axes[top, 0].set_ylabel(f"frames\n(digit {labels[i]})" if labels is not None else "frames", fontsize=7)
        if predicted is not None:
            axes[top + 1, 1].set_ylabel("predicted", fontsize=7)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=9)
    return plotting.save_and_close(fig, path, dpi=100, format="png")


def plot_error_per_step(errors, path, title=None):
    """Draws :func:`error_per_step`'s errors to a PNG: percent error against the frame.

    One line per group that has sequences (all, sideways, vertical only), the
    legend giving each group's number of sequences.

    Args:
        errors: :func:`error_per_step`'s dict (``"all"`` a list of T errors in [0, 1];
            ``"sideways"``, ``"vertical_only"`` and ``"counts"`` optional).
        path: output file.
        title: optional figure title.

    Returns:
        ``path``.

    Raises:
        InputError: no errors, or groups of different lengths or of non-finite values.
    """
    if not hasattr(errors, "keys") or errors.get("all") is None or len(errors["all"]) == 0:
        raise InputError("`errors` must be error_per_step's dict with the errors of at least one frame in 'all'. "
                         f"Received: errors={errors!r}")
    counts = errors.get("counts") or {}
    lines = {}
    for name in ("all", *STEP_ERROR_GROUPS):
        if errors.get(name) is None:
            continue
        values = np.asarray(errors[name], "float64")
        if values.shape != (len(errors["all"]),) or not np.all(np.isfinite(values)):
            raise InputError(f"`errors[{name!r}]` must be {len(errors['all'])} finite numbers, one per frame "
                             f"as in 'all'. Received: {errors[name]!r}")
        lines[name] = values
    frames = np.arange(1, len(errors["all"]) + 1)
    fig, ax = plotting.subplots(figsize=(5, 3.5))
    for name, values in lines.items():
        label = name.replace("_", " ")
        if counts.get(name) is not None:
            label += f" ({counts[name]:,} sequences)"
        ax.plot(frames, 100 * values, "-o", markersize=4, label=label)
    ax.set_xticks(frames)
    ax.set_xlabel("frame")
    ax.set_ylabel("test error (%)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return plotting.save_and_close(fig, path, dpi=100, format="png")


def add_arguments(parser, command):
    """Occluded Moving MNIST's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import int_at_least, non_negative_float, positive_float, positive_int
    if command == "train":
        parser.set_defaults(epochs=20)  # the recipe of train()

    parser.add_argument("--source", choices=("idx", "tfds"), default="idx",
                        help="MNIST IDX files in --data-dir, or TFDS mnist (prepared in --data-dir) "
                        "(default: %(default)s)")
    parser.add_argument("--data-dir", default=None,
                        help="folder of the MNIST IDX files (default: the project's shared copy): with the "
                        "train files they train and t10k tests, with t10k alone its digits split 80/20; "
                        "or TFDS's data folder with --source tfds")
    parser.add_argument("--num-test", type=positive_int, default=None if command == "evaluate" else 5000,
                        help=("validation sequences of every trial" if command == "tune" else "test sequences")
                        + " (default: " + ("the number `train` recorded beside the model, else "
                        "5000)" if command == "evaluate" else "%(default)s)"))
    if command == "evaluate":  # the split must be training's: the one `train` recorded beside the model
        from applications.arguments import recorded_default

        recorded_default(parser, "seed", "seed of the train/test split of the digits (default: the one that "
                         "`train` recorded in metrics.json beside the model, else 0); another one is refused")
        recorded_default(parser, "source", "MNIST IDX files in --data-dir, or TFDS mnist (prepared in --data-dir) "
                         "(default: the one that `train` recorded beside the model, else idx); another one is "
                         "refused")
        recorded_default(parser, "data_dir", "folder of the MNIST IDX files, or TFDS's data folder with --source "
                         "tfds (default: the one that `train` recorded beside the model, else the project's "
                         "shared copy); another folder is refused unless it holds the same IDX files")
    # the sequences' data (train's motion, bars, bar_spacing); evaluate: None, those train
    # recorded beside the model (else the data of before, which a run that records none used)
    recorded = command == "evaluate"
    then = (" (default: the one `train` recorded beside the model, else {old}, which a run that records "
            "none was trained on)") if recorded else " (default: %(default)s)"
    parser.add_argument("--motion", choices=MOTIONS, default=None if recorded else SEQUENCE_OPTIONS["motion"],
                        help="the digits' velocities: the paper's, (+-1, +-2) and (+-2, +-1) pixels per frame "
                        "(paper), or the eight compass directions at 3 pixels per frame (compass, the data of "
                        "before)" + then.format(old=OLD_SEQUENCE_OPTIONS["motion"]))
    parser.add_argument("--bars", choices=BAR_LAYOUTS, default=None if recorded else SEQUENCE_OPTIONS["bars"],
                        help="the occluding bars: the paper's grid of vertical and horizontal bars (grid), or "
                        "vertical bars only (vertical, the data of before)"
                        + then.format(old=OLD_SEQUENCE_OPTIONS["bars"]))
    parser.add_argument("--bar-spacing", type=int_at_least(5), metavar="N",
                        default=None if recorded else SEQUENCE_OPTIONS["bar_spacing"],
                        help="pixels between the leading edges of neighbouring bars, which are 4 pixels wide: "
                        "12 is the paper's (8 visible pixels between bars), 8 the data of before"
                        + then.format(old=OLD_SEQUENCE_OPTIONS["bar_spacing"]))
    if command in ("train", "tune"):
        parser.add_argument("--variant", choices=VARIANTS, default="rladder",
                            help="the RLadder or one of the paper's baselines: without decoder-to-encoder "
                            "connections, encoder only, conv net + GRU (default: %(default)s)")
        parser.add_argument("--num-train", type=positive_int, default=20000, help="training sequences")
    if command == "train":
        parser.add_argument("--learning-rate", type=positive_float, default=1e-3,
                            help="Adam's step size (default: %(default)s)")
        parser.add_argument("--conv-units", type=positive_int, nargs="+", default=[32, 64, 64],
                            help="units of the convolutional levels (default: 32 64 64)")
        parser.add_argument("--dense-units", type=positive_int, default=128,
                            help="units of the gated top level (default: %(default)s)")
        parser.add_argument("--frame-size", type=positive_int, default=FRAME_SIZE,
                            help="height and width of the frames (default: %(default)s, as the paper; "
                            "the benchmark uses 24)")
        parser.add_argument("--conv-encoder", choices=CONV_ENCODERS, default="gatedconv",
                            help="the ladder's convolutional levels: feed-forward with ConvLSTM gates "
                            "'gatedconv' (default), feed-forward ReLU 'conv', or recurrent 'convlstm' (the paper's)")
        parser.add_argument("--conv-normalization", choices=("auto", "instance", "none"), default="auto",
                            help="normalization of the convolutions' pre-activations (default: auto, "
                            "instance normalization with 'conv' and 'gatedconv' levels, none with 'convlstm')")
        parser.add_argument("--unflatten", choices=UNFLATTENS, default="broadcast",
                            help="how the ladder's gated top reaches the pixels of the convolutional "
                            "decoder below it: one projection broadcast over all pixels (default) or a "
                            "dense kernel to every pixel (dense); the variants without a decoder ignore it")
        parser.add_argument("--frame-weight", type=non_negative_float, default=1.0,
                            help="weight of the next-frame cost against the digit's (default: %(default)s)")
        parser.add_argument("--jit-compile", action="store_true",
                            help="compile the training step with XLA (about 2x faster on a CPU)")
        parser.add_argument("--augment", choices=("none", "fresh", "affine"), default="none",
                            help="training data: fixed sequences (none, default), new sequences every "
                            "epoch (fresh), or new sequences of randomly transformed digits every epoch "
                            "(affine); test sequences are never augmented")
        for key, what in (("rotation", "largest rotation in degrees"), ("scale", "largest relative change "
                          "of size"), ("shear", "largest shear angle in degrees"), ("shift", "largest shift "
                          "in pixels of the 28x28 digit, below 14")):
            parser.add_argument(f"--affine-{key}", type=non_negative_float, default=None,
                                help=f"with --augment affine: {what} (default: {AFFINE_DEFAULTS[key]:g})")
        parser.add_argument("--hold-out", action="store_true",
                            help="train on four fifths of the training digits and score validation "
                            "sequences of the held-out fifth instead of the test sequences (for "
                            "choices that must not see a test digit)")


def affine_options(args):
    """The ``affine`` dict of :func:`train` from ``--affine-*`` options (None if none is given)."""
    given = {key: getattr(args, f"affine_{key}", None) for key in AFFINE_DEFAULTS}
    given = {key: value for key, value in given.items() if value is not None}
    return given or None


def run_train(args, strategy):
    from applications.arguments import train_options

    affine = affine_options(args)
    if affine is not None and args.augment != "affine":
        # (train's own message named the Python arguments: "Received: --augment None, affine={...}")
        given = " ".join(f"--affine-{key} {value:g}" for key, value in affine.items())
        raise InputError(f"the --affine-* options need --augment affine. Received: --augment {args.augment}, {given}")
    try:
        return _train_from_args(args, strategy, affine, train_options(args, strategy))
    except InputError as err:
        if affine is None:
            raise
        # the affine checks name train's Python parameters: "`rotation` must be below 90
        # degrees ... Received: rotation=95.0" reads "`--affine-rotation` ... --affine-rotation 95.0"
        keys = "|".join(AFFINE_DEFAULTS)
        named = re.sub(rf"`({keys})`", r"`--affine-\1`", str(err))
        named = re.sub(rf"(?<![\w\-])({keys})=", r"--affine-\1 ", named)
        if named == str(err):
            raise
        raise InputError(named) from err


def _train_from_args(args, strategy, affine, options):
    return train(
        variant=args.variant,
        source=args.source,
        data_dir=args.data_dir,
        num_train=args.num_train,
        num_test=args.num_test,
        learning_rate=args.learning_rate,
        conv_units=tuple(args.conv_units),
        dense_units=args.dense_units,
        frame_size=args.frame_size,
        conv_encoder=args.conv_encoder,
        conv_normalization=None if args.conv_normalization == "none" else args.conv_normalization,
        frame_weight=args.frame_weight,
        jit_compile=args.jit_compile,
        augment=None if args.augment == "none" else args.augment,
        affine=affine,
        unflatten=args.unflatten,
        hold_out=args.hold_out,
        motion=args.motion,
        bars=args.bars,
        bar_spacing=args.bar_spacing,
        **options,
    )


def run_evaluate(args, strategy):
    return evaluate(args.model, source=args.source, data_dir=args.data_dir, num_test=args.num_test,
                    seed=args.seed, batch_size=distribute.global_batch_size(args.batch_size, strategy), strategy=strategy,
                    verbose=0 if args.quiet else 1, motion=args.motion, bars=args.bars, bar_spacing=args.bar_spacing)
