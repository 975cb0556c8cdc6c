"""Textured MNIST: perceptual grouping of a textured digit with RTagger (Ilin et al. 2017, 4.1).

Each image shows an MNIST digit filled with one texture on a background of another
texture, so that intensity alone does not separate them: the groups must be found
from the textures' statistics. The ground-truth segmentation is the digit's shape
(pixels of the 28x28 digit above ``threshold``: label 1, background: label 0).

Textures are procedural (``texture``): stripes (random angle, period, phase),
checkerboards (random cell size and phase) and noise (random blob size), each with
a random pair of intensities; the digit and the background always get textures of
different kinds or different parameters. ``style="binary"`` (default) keeps each
texture to its two intensities; ``style="smooth"`` draws the same patterns with
continuous values between them (sinusoidal gratings, plaids, interpolated noise),
closer to the natural textures of Tagger's Textured MNIST. With two-level
textures, two groups can lower the mixture NLL as much by splitting every pixel
into a "bright" and a "dark" hypothesis as by splitting digit from background, so
the cheaper intensity split wins (measured: the masks end up a threshold of the
intensity); continuous values leave no such two-value shortcut. ``mean_gap``
(optional) keeps the midpoints of the two textures' intensity ranges apart.

``texture_set="fixed"`` replaces the procedural textures by a small fixed bank
(``texture_bank``: ``bank_size`` sinusoidal gratings of different orientations
and periods, all spanning [0, 1]), as Tagger's Textured MNIST: the digit and the
background get two different textures of the bank, with a fixed phase (a
template) or, with ``shift=True``, a random phase per image. With textures drawn
per image a group can hardly learn to predict *its* texture under the other
group's pixels, which is what makes the right masks pay in the mixture NLL; with
a fixed bank it can learn each texture as a whole.

The model: :class:`~keras_capsules.layers.RTagger` with ``K`` groups sharing one
Recurrent Ladder (convolutional bottom level, dense top), trained with
:class:`~keras_capsules.losses.MixtureNLL` on every iteration (the input may be
corrupted by Gaussian noise, ``noise_std``; the target is the clean image). The
segmentation quality per iteration is the adjusted mutual information (AMI) of
``argmax_k pi_k`` with the truth.

An optional classifier (``num_classes``) reads each group's share of the image
(``pi_k * x``; ``head_input="mask"``: the mask ``pi_k``; ``"mask_and_share"``:
both as two channels) with one shared small network (``head_type="dense"``: one
hidden layer; ``"conv"``: two strided 3x3 convolutions first), sums the groups'
logits (the order of the groups does not matter) and is trained on every
iteration: its error per iteration is reported too. RTagger does not expose its
ladder's top level, so this head works on the groups' outputs, not on the
paper's top-level features.

``pool`` max-pools the ladder's convolutional level before its dense top, which
divides most of the parameters by ``pool ** 2`` (the benchmark uses 2: 0.9M
parameters instead of 3.3M with 16 channels, 6.5M with 32).
"""

import numbers
import os
import sys

import keras
import numpy as np
from keras import ops

from applications import arguments, checks, console, distribute, plotting
from applications.checks import integer_at_least
from applications.mnist_digits import check_digits
from applications.errors import (InputError, PathNotFoundError, check_run_dir, create_run_dir,
                                 leaves_no_empty_run_dir)
from keras_capsules.layers import RTagger, level_spec
from keras_capsules.layers.rladder.level_spec import CONV_ENCODERS, UNFLATTENS
from keras_capsules.losses import MixtureNLL
from keras_capsules.metrics import adjusted_mutual_info

IMAGE_SIZE = 28
TEXTURE_KINDS = ("stripes", "checker", "noise")


# ------------------------------------------------------------------------- data
def texture_levels(rng):
    """A random pair ``(low, high)`` of intensities in [0, 1], at least ~0.4 apart."""
    low, high = np.sort(rng.uniform(0.0, 1.0, 2))
    if high - low < 0.4:  # keep a visible contrast
        # widened by 0.2 each way, then moved back into [0, 1] (clipping left pairs near 0 or 1
        # as little as 0.2 apart, e.g. (0, 0.2))
        low, high = low - 0.2, high + 0.2
        shift = max(0.0, -low) - max(0.0, high - 1.0)
        low, high = low + shift, high + shift
    return float(low), float(high)


TEXTURE_STYLES = ("binary", "smooth")


def _bilinear(coarse, scale, size):
    """Bilinear upsampling of a 2-D ``coarse`` grid by ``scale``, cropped to ``size``."""
    pos = np.arange(size, dtype="float64") / scale
    i0 = np.floor(pos).astype(int)
    frac = pos - i0
    rows = coarse[i0] * (1 - frac)[:, None] + coarse[i0 + 1] * frac[:, None]
    return rows[:, i0] * (1 - frac)[None] + rows[:, i0 + 1] * frac[None]


def texture(kind, rng, size=IMAGE_SIZE, levels=None, style="binary"):
    """A ``[size, size]`` float32 texture in [0, 1] with random parameters from ``rng``.

    ``levels``: its two intensities ``(low, high)`` (None: drawn by ``texture_levels``).
    ``style``: ``"binary"`` (default): the pattern takes only those two values;
    ``"smooth"``: the same pattern with continuous values between them (a
    sinusoidal grating, a plaid of sinusoids with the checkerboard's cells, smooth
    noise interpolated between random values one blob apart). The draws from
    ``rng`` are the same for both styles. The plaid is sampled a quarter of a pixel
    before each pixel's centre: at the centres, cells of 2 pixels took only the two
    values ``0.5 +- 0.5 * sin(pi / 4) ** 2`` of the pattern (a binary checkerboard
    of less contrast); sampled so, every cell size gives at least 6 values.
    """
    if style not in TEXTURE_STYLES:
        raise InputError(f"`style` must be one of {TEXTURE_STYLES}. Received: style={style!r}")
    smooth = style == "smooth"
    if levels is not None:
        pair = np.asarray(levels)
        # levels such as (0, 255) gave a texture outside [0, 1] silently
        if pair.shape != (2,) or not np.issubdtype(pair.dtype, np.number) or not np.all((pair >= 0) & (pair <= 1)):
            raise InputError(f"`levels` must be two intensities (low, high) in [0, 1]. Received: levels={levels!r}")
    low, high = texture_levels(rng) if levels is None else levels
    rows, cols = np.mgrid[0:size, 0:size].astype("float32")
    if kind == "stripes":
        angle = rng.uniform(0, np.pi)
        period = rng.uniform(3.0, 8.0)
        phase = rng.uniform(0, 2 * np.pi)
        wave = np.sin(2 * np.pi * (rows * np.sin(angle) + cols * np.cos(angle)) / period + phase)
        pattern = 0.5 + 0.5 * wave if smooth else (wave > 0).astype("float32")
    elif kind == "checker":
        cell = int(rng.integers(2, 6))
        dr, dc = rng.integers(0, cell, 2)
        if smooth:  # (at the pixels' centres, + 0.5, cells of 2 pixels were two-valued: see the docstring)
            wave_rows, wave_cols = np.sin(np.pi * (rows + dr + 0.25) / cell), np.sin(np.pi * (cols + dc + 0.25) / cell)
            pattern = 0.5 + 0.5 * wave_rows * wave_cols
        else:
            pattern = (((rows + dr) // cell + (cols + dc) // cell) % 2).astype("float32")
    elif kind == "noise":
        blob = int(rng.integers(1, 4))
        coarse = rng.uniform(0, 1, (size // blob + 2, size // blob + 2))
        if smooth:  # values one blob + 1 pixels apart, interpolated (correlated over 2-4 pixels)
            pattern = _bilinear(coarse, blob + 1, size)
            pattern = (pattern - pattern.min()) / max(pattern.max() - pattern.min(), 1e-6)
        else:
            pattern = (np.kron(coarse, np.ones((blob, blob)))[:size, :size] > 0.5).astype("float32")
    else:
        raise InputError(f"`kind` must be one of {TEXTURE_KINDS}. Received: kind={kind!r}")
    return (low + (high - low) * pattern).astype("float32")


TEXTURE_SETS = ("random", "fixed")
#: draws of the background's levels for one digit texture before ``mean_gap`` redraws the digit's too
#: (while the midpoints of the two pairs of levels are less than ``mean_gap`` apart)
LEVEL_DRAWS = 100
BANK_PERIODS = (4.0, 6.0, 9.0)


def texture_bank(bank_size=8):
    """A fixed bank of ``bank_size`` gratings: their parameters depend on nothing but ``bank_size``.

    Texture ``j`` is a sinusoidal grating at angle ``pi * j / bank_size`` (every
    texture its own orientation) with a period of ``BANK_PERIODS[j % 3]`` pixels,
    spanning the intensities [0, 1] (so all textures share one mean intensity and
    their ranges overlap fully: intensity alone never separates them), as Tagger's
    Textured MNIST, whose textures come from a small bank of sinusoids of different
    frequencies and orientations. ``style="binary"`` thresholds each grating to
    the two values {0, 1}.

    Returns:
        ``(angles, periods)``: two ``[bank_size]`` float arrays; render texture ``j``
        with :func:`bank_texture`.
    """
    if isinstance(bank_size, bool) or not isinstance(bank_size, numbers.Integral) or bank_size < 2:
        raise InputError(f"`bank_size` must be an integer of at least 2. Received: bank_size={bank_size!r}")
    index = np.arange(bank_size)
    return np.pi * index / bank_size, np.asarray(BANK_PERIODS)[index % len(BANK_PERIODS)]


def bank_texture(angle, period, phase=0.0, size=IMAGE_SIZE, style="binary"):
    """A ``[size, size]`` float32 grating in [0, 1] (see :func:`texture_bank`)."""
    if style not in TEXTURE_STYLES:  # any other value (e.g. "smoth") drew a binary grating
        raise InputError(f"`style` must be one of {TEXTURE_STYLES}. Received: style={style!r}")
    if isinstance(period, bool) or not isinstance(period, numbers.Real) or not 0 < period < np.inf:
        raise InputError(f"`period` must be a positive, finite number. Received: period={period!r}")
    rows, cols = np.mgrid[0:size, 0:size].astype("float32")
    wave = np.sin(2 * np.pi * (rows * np.sin(angle) + cols * np.cos(angle)) / period + phase)
    return (0.5 + 0.5 * wave if style == "smooth" else (wave > 0)).astype("float32")


def _random_textures(rng, size, mean_gap, style):
    """The digit's and background's procedural textures and kinds (``texture_set="random"``).

    With ``mean_gap`` the two pairs of levels ``(low, high)`` are drawn again until
    their midpoints ``(low + high) / 2`` are at least ``mean_gap`` apart (the
    textures' means may be closer: see :func:`generate`).
    """
    fg_kind, bg_kind = rng.integers(0, len(TEXTURE_KINDS), 2)
    fg_levels = bg_levels = None
    if mean_gap > 0:
        fg_levels = texture_levels(rng)
        bg_levels = texture_levels(rng)
        draws = 0
        while abs(sum(fg_levels) - sum(bg_levels)) / 2 < mean_gap:
            draws += 1
            if draws % LEVEL_DRAWS == 0:
                # no background may be far enough from this digit's levels (the midpoints lie
                # in (0.1, 0.9): with a midpoint near 0.5, a gap of 0.4 or more looped for ever)
                fg_levels = texture_levels(rng)
            bg_levels = texture_levels(rng)
    fg = texture(TEXTURE_KINDS[fg_kind], rng, size, fg_levels, style)
    bg = texture(TEXTURE_KINDS[bg_kind], rng, size, bg_levels, style)
    return fg, bg, (fg_kind, bg_kind)


def generate(digits, labels, num_images, seed=0, threshold=0.5, size=IMAGE_SIZE, mean_gap=0.0, style="binary",
             texture_set="random", bank_size=8, shift=False):
    """Textured digits, deterministic for a seed.

    Args:
        digits: ``[n, 28, 28]`` (or ``[n, 28, 28, 1]``) images in [0, 1].
        labels: ``[n]`` labels.
        num_images: how many images (digits drawn with replacement).
        threshold: digit pixels above it belong to the digit.
        mean_gap: the midpoints ``(low + high) / 2`` of the intensity ranges of the
            digit's and the background's textures (their two ``levels``, see
            :func:`texture`) differ by at least this much (the ranges may still
            overlap, so that single pixels stay ambiguous). The textures' actual
            mean intensities are ``low + (high - low) * duty``, ``duty`` the mean of
            the pattern in [0, 1] (of a binary one, the share of its pixels at
            ``high``: its duty cycle), near but not exactly 0.5 (a pattern of noise
            or stripes may be mostly low or mostly high), so they may differ by less
            (24 of 300 pairs of binary textures by less than 0.3 with
            ``mean_gap=0.3``). Default 0 (independent draws); at most 0.5.
        style: the textures' ``style`` (see :func:`texture`): ``"binary"`` (default)
            or ``"smooth"``.
        texture_set: ``"random"`` (default): procedural textures with parameters
            drawn per image (:func:`texture`); ``"fixed"``: the digit and the
            background get two different textures of the fixed bank of
            :func:`texture_bank` (``mean_gap`` must then be 0), so that a group can
            learn each texture as a whole and predict it also under the other
            group's pixels.
        bank_size: the number of textures in the fixed bank. Default 8.
        shift: with ``texture_set="fixed"``, each texture gets a random phase per
            image (a random shift of the grating, as Tagger's random crops);
            default False: every texture always has the same phase (a template).

    Returns:
        A dict: ``images`` ``[num_images, 28, 28, 1]`` float32 in [0, 1],
        ``segmentation`` ``[num_images, 28, 28]`` int32 (1 digit, 0 background),
        ``labels`` ``[num_images]`` int32 and ``kinds`` ``[num_images, 2]`` (indices
        into ``TEXTURE_KINDS``, or into the bank with ``texture_set="fixed"``, of the
        digit's and the background's texture).
    """
    num_images = integer_at_least("num_images", num_images, 0)
    style, mean_gap, texture_set, bank_size, shift = check_texture_options(style, mean_gap, texture_set, bank_size,
                                                                          shift)
    if texture_set == "fixed":
        angles, periods = texture_bank(bank_size)
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0 <= threshold < 1:
        raise InputError(f"`threshold` must be a number in [0, 1). Received: threshold={threshold!r}")
    rng = np.random.default_rng(checks.numpy_seed(seed))  # (-1 was numpy's traceback)
    digits = check_digits(digits, labels)
    size = integer_at_least("size", size, 1)  # (28.0 matched the digits' shape, then failed in np.zeros)
    if digits.shape[1:] != (size, size):
        raise InputError(
            f"`size` must be the digits' size (the textures fill the digit images). "
            f"Received: size={size!r}, digits shape={digits.shape}"
        )
    index = rng.integers(0, len(digits), num_images)
    images = np.zeros((num_images, size, size), "float32")
    kinds = np.zeros((num_images, 2), "int32")
    segmentation = (digits[index] > threshold).astype("int32")
    for i in range(num_images):
        if texture_set == "fixed":
            pair = rng.choice(bank_size, 2, replace=False)
            phases = rng.uniform(0, 2 * np.pi, 2) if shift else (0.0, 0.0)
            fg, bg = (bank_texture(angles[j], periods[j], p, size, style) for j, p in zip(pair, phases))
        else:
            fg, bg, pair = _random_textures(rng, size, mean_gap, style)
        images[i] = np.where(segmentation[i] == 1, fg, bg)
        kinds[i] = pair
    return {
        "images": images[..., None],
        "segmentation": segmentation,
        "labels": np.asarray(labels, "int32")[index],
        "kinds": kinds,
    }


def check_texture_options(style="binary", mean_gap=0.0, texture_set="random", bank_size=8, shift=False,
                          names=("style", "mean_gap", "texture_set", "bank_size", "shift")):
    """:func:`generate`'s texture options, checked: ``(style, mean_gap, texture_set,
    bank_size, shift)`` or an ``InputError`` quoting the option by its name in ``names``
    (:func:`train` and :func:`evaluate` call them ``texture_style``, ..., ``texture_shift``:
    ``TEXTURE_OPTIONS``). ``bank_size`` is checked with ``texture_set="fixed"`` only (the
    random textures use no bank); ``shift`` must be True or False (``"False"``, a non-empty
    string, shifted the textures).
    """
    style_name, gap_name, set_name, bank_name, shift_name = names
    if isinstance(mean_gap, bool) or not isinstance(mean_gap, numbers.Real) or not 0 <= mean_gap <= 0.5:
        raise InputError(f"`{gap_name}` must be a number in [0, 0.5]. Received: {gap_name}={mean_gap!r}")
    if not isinstance(style, str) or style not in TEXTURE_STYLES:
        raise InputError(f"`{style_name}` must be one of {TEXTURE_STYLES}. Received: {style_name}={style!r}")
    if not isinstance(texture_set, str) or texture_set not in TEXTURE_SETS:
        raise InputError(f"`{set_name}` must be one of {TEXTURE_SETS}. Received: {set_name}={texture_set!r}")
    if texture_set == "fixed":
        if isinstance(bank_size, bool) or not isinstance(bank_size, numbers.Integral) or bank_size < 2:
            raise InputError(f"`{bank_name}` must be an integer of at least 2. Received: {bank_name}={bank_size!r}")
        bank_size = int(bank_size)
        if mean_gap:
            raise InputError(f"`{gap_name}` needs {set_name}='random'. Received: {gap_name}={mean_gap!r}")
    return style, mean_gap, texture_set, bank_size, checks.true_or_false(shift_name, shift)


def make_dataset(data, n_iters, batch_size=32, num_classes=None, shuffle=False, seed=0, replicas=1,
                 first_epoch=None):
    """``tf.data`` of ``(images, targets)``: the image repeated per iteration (and labels).

    Args:
        data: the images (and ``"labels"``), as :func:`generate` makes them.
        n_iters: RTagger's iterations (the targets are repeated as many times).
        batch_size: the (global) batch size.
        num_classes: with a classifier, the labels' classes (the targets get ``"digit"``).
        shuffle: shuffle the images every epoch (seeded by ``seed``): training data only.
        seed: the shuffle's seed: an integer >= 0 (None: another order every run,
            without ``first_epoch`` only); refused with an ``InputError`` when the
            pipeline is made.
        replicas: training batches are cut for that many replicas in sync
            (``distribute.even_batches``).
        first_epoch: None (default): the pipeline is one epoch, which ``tf.data``
            reshuffles each time it is iterated. An epoch ``k``: the endless stream of
            the epochs ``k, k + 1, ...``, epoch ``e`` shuffled by ``(seed, e)`` alone
            (``distribute.epoch_stream``; train on it with
            ``steps_per_epoch=distribute.even_batch_count(len(images), batch_size, replicas)``),
            so that a run resumed at epoch ``k`` trains on the orders of the
            uninterrupted run (what :func:`train` does).
    """
    import tensorflow as tf

    n_iters = integer_at_least("n_iters", n_iters, 1)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    if num_classes is not None:
        num_classes = integer_at_least("num_classes", num_classes, 2)
    shuffle = checks.true_or_false("shuffle", shuffle)  # ("False", a non-empty string, shuffled)
    images = data["images"]
    targets = {"mixture": np.repeat(images[:, None], n_iters, axis=1)}
    if num_classes:
        labels = np.asarray(data["labels"])
        if len(labels) and not 0 <= labels.min() <= labels.max() < num_classes:
            # was a "Graph execution error" of SparseSoftmaxCrossEntropyWithLogits inside fit
            raise InputError(
                f"`data` holds labels in [{labels.min()}, {labels.max()}], outside the {num_classes} classes "
                f"[0, {num_classes}). Received: num_classes={num_classes}"
            )
        targets["digit"] = np.repeat(labels[:, None], n_iters, axis=1)
    examples = tf.data.Dataset.from_tensor_slices((images, targets))
    batches = distribute.even_batch_count(len(images), batch_size, replicas)

    def one_pass(pass_seed, redraw):  # (see distribute.training_epochs)
        ds = examples
        if shuffle:
            # a buffer of at least 1: tf.data refuses 0 (an empty set of images)
            ds = ds.shuffle(max(len(images), 1), seed=pass_seed, reshuffle_each_iteration=redraw)
        return distribute.even_batches(ds.batch(batch_size), replicas, batches)

    return distribute.prefetched(distribute.training_epochs(one_pass, seed, batches, first_epoch))


# ------------------------------------------------------------------------- model
@keras.saving.register_keras_serializable(package="applications")
class GaussianCorruption(keras.layers.Layer):
    """Adds Gaussian noise of standard deviation ``stddev`` in training (seeded)."""

    def __init__(self, stddev, seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(stddev, bool) or not isinstance(stddev, numbers.Real) or not 0 <= stddev < np.inf:
            raise InputError(f"`stddev` must be a finite number >= 0. Received: stddev={stddev!r}")
        self.stddev = float(stddev)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, x, training=False):
        if not training or self.stddev == 0:
            return x
        # drawn in float32 and cast: under mixed precision x is float16/bfloat16, and
        # adding float32 noise to it failed (TF refuses mixed-dtype AddV2)
        noise = keras.random.normal(ops.shape(x), stddev=self.stddev, seed=self.seed_generator)
        return x + ops.cast(noise, x.dtype)

    def get_config(self):
        return {**super().get_config(), "stddev": self.stddev, "seed": self.seed}


@keras.saving.register_keras_serializable(package="applications")
class GroupShares(keras.layers.Layer):
    """``[pi [b, T, K, H, W, 1], x [b, H, W, 1]] -> pi * x`` (each group's share of the image)."""

    def call(self, inputs):
        pi, x = inputs
        return pi * ops.cast(x, pi.dtype)[:, None, None]

    def compute_output_shape(self, input_shapes):
        return input_shapes[0]


@keras.saving.register_keras_serializable(package="applications")
class SumGroups(keras.layers.Layer):
    """Sums ``[b, T, K, n]`` over the group axis 2: ``[b, T, n]``."""

    def call(self, x):
        return ops.sum(x, axis=2)

    def compute_output_shape(self, input_shape):
        return input_shape[:2] + input_shape[3:]


def paper_levels(conv_units=32, dense_units=64, pool=1, unflatten="broadcast", conv_encoder="convlstm"):
    """A convolutional bottom level and a dense gated top (narrow for a CPU).

    ``conv_encoder`` is the bottom level's encoder: ``"convlstm"`` (default) or
    ``"conv"`` (feed-forward, :class:`~keras_capsules.layers.ConvEncoderCell`: no
    state of its own, its memory of the iterations being the decoder's feedback and
    the top's state; about half the cost of a training step of the benchmark's model
    on a quiet core; measured against the ConvLSTM level in the twelfth round of
    ``benchmarks/rladder_measurements.md``).

    ``pool`` max-pools the convolutional level's output before the dense top, which
    divides the top's input weights (most of the parameters) by ``pool ** 2``.
    ``unflatten`` is the top's (see :func:`~keras_capsules.layers.level_spec`): how
    its decoder output, a vector, reaches the convolutional decoder below.
    ``"broadcast"`` (default) projects it to the channels, the same at every pixel,
    so without the lateral connections a group's mean cannot vary over the image
    (but near its borders); ``"dense"`` projects it to every pixel's channels
    (``dense_units * H * W * conv_units`` weights instead of ``dense_units *
    conv_units``), so that the top can paint a whole texture. (Measured on the
    benchmark's validation probes, eleventh round of ``benchmarks/rladder_measurements.md``: no
    better segmentation either way.)
    """
    if unflatten not in UNFLATTENS:  # level_spec's ValueError named the top level, not this option
        raise InputError(f"`unflatten` must be one of {UNFLATTENS}. Received: unflatten={unflatten!r}")
    if conv_encoder not in CONV_ENCODERS:  # the bottom level reads images: a convolutional encoder
        raise InputError(f"`conv_encoder` must be one of {CONV_ENCODERS}. Received: conv_encoder={conv_encoder!r}")
    return [level_spec(conv_encoder, conv_units), level_spec("gated", dense_units, pool=pool, unflatten=unflatten)]


#: the classifier head's ``head_input`` and ``head_type`` (:func:`build_model`)
HEAD_INPUTS = ("share", "mask", "mask_and_share")
HEAD_TYPES = ("dense", "conv")


def build_model(
    n_groups=3,
    n_iters=3,
    image_size=IMAGE_SIZE,
    conv_units=32,
    dense_units=64,
    sigma=0.5,
    noise_std=0.1,
    num_classes=None,
    head_units=64,
    pool=1,
    head_input="share",
    head_type="dense",
    mask_update="learned",
    initial_mask_scale=1,
    posterior_sigma=None,
    initial_mask_stddev=1.0,
    unflatten="broadcast",
    conv_encoder="convlstm",
    group_codes=False,
    mask_damping=0.0,
    seed=0,
    name="rtagger_textured_mnist",
):
    """RTagger with ``n_groups`` groups on ``[size, size, 1]`` images.

    ``conv_units``, ``dense_units``, ``pool``, ``unflatten`` and ``conv_encoder`` shape the ladder
    (:func:`paper_levels`); ``sigma``, ``mask_update``, ``initial_mask_scale``,
    ``posterior_sigma``, ``initial_mask_stddev``, ``group_codes`` and ``mask_damping`` are RTagger's.
    ``seed`` (an integer >= 0, default 0; :func:`train` passes its own) seeds the training
    noise of the input corruption (``noise_std``): another seed, another noise stream.
    ``head_input``, ``head_type`` and ``head_units`` shape the classifier of
    ``num_classes`` (see the module docstring): without ``num_classes`` there is none,
    and a value other than their default warns (``UserWarning``) that it has no effect.

    Returns:
        A ``keras.Model`` with outputs ``{"mixture": concatenate([m, pi]) [b, T, K,
        H, W, 2]}`` (``pi`` is the last channel: see ``assignments``) and, with
        ``num_classes``, ``"digit"``: class probabilities ``[b, T, classes]`` at every
        iteration.
    """
    if num_classes is not None:  # num_classes=1 built a classifier whose softmax is always 1
        num_classes = integer_at_least("num_classes", num_classes, 2)
    # RTagger's own ValueError for n_groups=1 ended `train --n-groups 1` with a traceback
    n_groups = integer_at_least("n_groups", n_groups, 2)
    # (image_size=0 built a model that failed in predict with a raw shape error)
    image_size = integer_at_least("image_size", image_size, 1)
    # (the corruption's seed was 0 whatever the model's or train's seed: every run drew the same noise)
    seed = integer_at_least("seed", seed, 0)
    if head_input not in HEAD_INPUTS:
        raise InputError(f"`head_input` must be one of {HEAD_INPUTS}. Received: head_input={head_input!r}")
    if head_type not in HEAD_TYPES:
        raise InputError(f"`head_type` must be one of {HEAD_TYPES}. Received: head_type={head_type!r}")
    head_units = integer_at_least("head_units", head_units, 1)
    if num_classes is None:  # no classifier: its options were silently without effect
        for option, value, default in (("head_input", head_input, "share"), ("head_type", head_type, "dense"),
                                       ("head_units", head_units, 64)):
            if value != default:
                checks.warn_without_effect("textured_mnist.build_model", option, value,
                                           "num_classes (the classifier it shapes)")
    images = keras.Input((image_size, image_size, 1), name="images")
    x = GaussianCorruption(noise_std, seed=seed, name="corruption")(images) if noise_std else images
    pi, m = RTagger(
        n_groups, paper_levels(conv_units, dense_units, pool, unflatten, conv_encoder), n_iters=n_iters, sigma=sigma,
        mask_update=mask_update, initial_mask_scale=initial_mask_scale, posterior_sigma=posterior_sigma,
        initial_mask_stddev=initial_mask_stddev, group_codes=group_codes, mask_damping=mask_damping,
        name="rtagger",
    )(x)
    # (the output layers compute in float32 under a mixed policy: what the losses and metrics read)
    outputs = {"mixture": keras.layers.Concatenate(axis=-1, name="mixture", dtype=arguments.output_dtype())([m, pi])}
    if num_classes:
        # each group's share of the image (and/or its mask), read by one shared network
        shares = GroupShares(name="group_shares")([pi, images])  # [b, T, K, H, W, 1]
        head_in = {"share": shares, "mask": pi}.get(head_input)
        if head_input == "mask_and_share":
            head_in = keras.layers.Concatenate(name="mask_and_share")([pi, shares])
        width = head_in.shape[-1]
        if head_type == "conv":
            maps = keras.layers.Reshape(
                (n_iters * n_groups, image_size, image_size, width), name="group_maps"
            )(head_in)
            for i, filters in enumerate((8, 16)):
                maps = keras.layers.TimeDistributed(
                    keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu"),
                    name=f"head_conv{i + 1}",
                )(maps)
            flat = keras.layers.Reshape((n_iters, n_groups, -1), name="flat")(maps)
        else:  # "dense"
            flat = keras.layers.Reshape(
                (n_iters, n_groups, image_size * image_size * width), name="flat"
            )(head_in)
        hidden = keras.layers.Dense(head_units, activation="relu", name="head_hidden")(flat)
        logits = keras.layers.Dense(num_classes, name="head_logits")(hidden)
        summed = SumGroups(name="sum_groups")(logits)
        outputs["digit"] = keras.layers.Softmax(name="digit", dtype=arguments.output_dtype())(summed)
    return keras.Model(images, outputs, name=name)


def compile_model(model, learning_rate=1e-3, sigma=None, class_weight=1.0):
    """Adam (clipnorm 1); :class:`MixtureNLL` on every iteration, and cross-entropy for
    the digit when the model classifies.

    Args:
        model: a model from :func:`build_model`.
        learning_rate: Adam's step size (a finite number > 0 or a schedule).
        sigma: the standard deviation of the MixtureNLL; None (default) takes the
            model's RTagger ``sigma``, so that the cost and the likelihood terms the
            tagger is given agree.
        class_weight: the weight of the digit's cross-entropy against the mixture's
            NLL (a finite number >= 0).

    Returns:
        The compiled ``model``.
    """
    learning_rate = checks.learning_rate(learning_rate)
    class_weight = checks.finite_number("class_weight", class_weight, positive=False)
    if sigma is None:
        taggers = [layer for layer in model.layers if isinstance(layer, RTagger)]
        if len(taggers) != 1:
            raise InputError(
                "`sigma` is needed for a model without exactly one RTagger layer. "
                f"Received: sigma=None and {len(taggers)} RTagger layers"
            )
        sigma = taggers[0].sigma
    losses = {"mixture": MixtureNLL(sigma=sigma, group_axis=2)}
    weights = {"mixture": 1.0}
    metrics = {}
    if "digit" in model.output:
        losses["digit"] = keras.losses.SparseCategoricalCrossentropy()
        weights["digit"] = class_weight
        metrics["digit"] = ["accuracy"]
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, clipnorm=1.0),
        loss=losses,
        loss_weights=weights,
        metrics=metrics or None,
    )
    return model


def assignments(outputs):
    """The group assignments ``pi`` ``[b, T, K, H, W, 1]`` from the model's outputs."""
    return outputs["mixture"][..., -1:]


def evaluate_iterations(model, data, batch_size=64, verbose=0):
    """Per-iteration segmentation AMI (and classification error with a classifier);
    ``verbose``: 1 shows Keras' progress bar, on stderr.

    Returns:
        ``{"ami": [T floats], "error": [T floats] (with a classifier)}``.

    Raises:
        InputError: a classifier's ``data`` without one label per image (``"labels"``
            ``[n]``, ``n`` the number of images).
    """
    batch_size = integer_at_least("batch_size", batch_size, 1)  # (0 returned a result)
    return _score_iterations(console.predict(model, data["images"], batch_size, verbose), data)


def _score_iterations(out, data):
    """:func:`evaluate_iterations`' scores of ``data`` from ``out``, ``model.predict``'s dict of its images."""
    pi = assignments(out)  # [b, T, K, H, W, 1]
    if not np.all(np.isfinite(pi)):
        # (adjusted_mutual_info's ValueError "`pi` must be finite", a traceback of `evaluate`
        # of a model whose weights are NaN: helper-196)
        raise InputError(
            f"the model's group masks hold {int(np.size(pi) - np.count_nonzero(np.isfinite(pi)))} NaN or infinite "
            "values: its weights are not finite (a diverged or damaged model), nothing to score"
        )
    result = {
        "ami": [
            adjusted_mutual_info(data["segmentation"], pi[:, t], group_axis=1)
            for t in range(pi.shape[1])
        ]
    }
    if "digit" in out:
        guesses = np.argmax(out["digit"], axis=-1)  # [b, T]
        labels = _image_labels(data, len(guesses))
        result["error"] = [float(e) for e in np.mean(guesses != labels[:, None], axis=0)]
    return result


def _image_labels(data, num_images):
    """``data["labels"]`` as an array, checked to hold one label per image (``num_images``).

    A single label was broadcast against every image's guesses (an error rate of
    whatever that one label gave), and no labels at all a bare ``KeyError``.
    """
    if "labels" not in data:
        raise InputError(f"`data` must hold the images' 'labels' [n] (n={num_images}) to score a classifier. "
                         f"Received: keys {sorted(data)}")
    labels = np.asarray(data["labels"])
    if labels.shape != (num_images,):
        raise InputError(f"`data` must hold one label per image: 'labels' [n] with n={num_images}. "
                         f"Received: labels shape={labels.shape}")
    return labels


def image_blind_ami(train_segmentation, test_segmentation, select_segmentation=None,
                    thresholds=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)):
    """The AMI of the best segmentation that never looks at the image: the same mask for
    every image, where the training digits are more often than ``threshold``.

    The digits are centred, so where a pixel is tells a lot about its group: a model's
    AMI is worth its distance above this. The threshold is chosen on
    ``select_segmentation`` (validation images; default: the training ones), never on
    the test images.

    Args:
        train_segmentation: ``[n, H, W]`` true segmentations of the training images.
        test_segmentation: ``[m, H, W]`` those of the images to score.
        select_segmentation: ``[v, H, W]`` those that choose the threshold.
        thresholds: the thresholds tried.

    Returns:
        ``{"ami": test AMI, "threshold": the threshold chosen}``.
    """
    share = np.mean(np.asarray(train_segmentation) > 0, axis=0)  # [H, W]: how often a digit pixel

    def score(segmentation, threshold):
        mask = (share > threshold).astype("float32")
        pi = np.broadcast_to(np.stack([mask, 1 - mask]), (len(segmentation), 2, *mask.shape))
        return adjusted_mutual_info(np.asarray(segmentation), pi, group_axis=1)

    select = train_segmentation if select_segmentation is None else select_segmentation
    best = max(thresholds, key=lambda t: score(select, t))
    return {"ami": float(score(test_segmentation, best)), "threshold": float(best)}


class SegmentationValidation(keras.callbacks.Callback):
    """Adds the segmentation AMI of validation images after every iteration to an epoch's logs.

    At the end of every epoch the model segments ``data`` (``generate``'s dict) and the
    logs get ``val_ami_1`` ... ``val_ami_T`` (iteration ``t``'s AMI, as
    :func:`evaluate_iterations` scores it) and ``val_ami`` (the last iteration's), so
    that ``History``, CSV logs, TensorBoard and ``fault_tolerance.KeepBestWeights(
    "val_ami", mode="max")`` see them: put it before those callbacks. With
    ``verbose`` it prints them on a line of their own, once Keras' progress bar has
    ended the epoch's line (at the next epoch's start, and at the end of training).

    A model with a classifier (a ``"digit"`` output) is scored on the labels too
    (:func:`evaluate_iterations`): ``data`` then needs ``"labels"``, one per image,
    else ``fit`` stops with an ``InputError`` before its first epoch (a ``KeyError``
    after it, before).
    """

    def __init__(self, data, batch_size=64, verbose=0):
        super().__init__()
        if not isinstance(data, dict) or "images" not in data or "segmentation" not in data:
            raise InputError("`data` must be a dict of `generate` (keys 'images' and 'segmentation'). "
                             f"Received: {type(data).__name__}")
        if len(data["images"]) == 0 or len(data["images"]) != len(data["segmentation"]):
            raise InputError("`data` must hold at least one image and one segmentation per image. Received: "
                             f"{len(data['images'])} images, {len(data['segmentation'])} segmentations")
        if "labels" in data:  # (needed by a classifier only: see on_train_begin)
            _image_labels(data, len(data["images"]))
        self.data, self.batch_size, self.verbose = data, integer_at_least("batch_size", batch_size, 1), verbose
        self._line = None  # the epoch's line, printed once Keras' progress bar has ended its own

    def on_train_begin(self, logs=None):
        self._line = None  # a fit that crashed before its next epoch left its line unprinted: not this fit's
        # the model it validates is known only now: a classifier without labels failed after epoch 1
        outputs = getattr(self.model, "output", None)
        if isinstance(outputs, dict) and "digit" in outputs:
            _image_labels(self.data, len(self.data["images"]))

    def on_epoch_end(self, epoch, logs=None):
        amis = evaluate_iterations(self.model, self.data, self.batch_size)["ami"]
        if logs is not None:
            logs.update({f"val_ami_{t + 1}": ami for t, ami in enumerate(amis)})
            logs["val_ami"] = amis[-1]
        if self.verbose:  # Keras' progress bar ends the epoch's line after this callback: print then
            self._line = f"epoch {epoch + 1}: validation AMI per iteration " + " / ".join(f"{ami:.3f}" for ami in amis)

    def on_epoch_begin(self, epoch, logs=None):
        self._print_line()

    def on_train_end(self, logs=None):
        self._print_line()

    def _print_line(self):
        # printed from on_epoch_end it came in the middle of the bar's line ("2/2 ━━ epoch 1: ...")
        if self._line:
            print(self._line, flush=True)
            self._line = None


def plot_validation_ami(history, path, best_epoch=None, first_epoch=1):
    """Writes the validation AMI of every iteration over the epochs to a PNG (atomically).

    ``history``: a dict of per-epoch lists with ``val_ami_1`` ... ``val_ami_T`` (the logs
    of :class:`SegmentationValidation`), whose first entries are of epoch
    ``first_epoch`` (1-based); ``best_epoch`` (1-based, optional) is marked.

    Returns:
        ``path``.
    """
    from matplotlib.ticker import MaxNLocator

    iterations = sorted((int(k.rsplit("_", 1)[1]), k) for k in history if k.startswith("val_ami_")
                        and k.rsplit("_", 1)[1].isdigit())
    if not iterations:
        raise InputError("`history` has no validation AMI (keys 'val_ami_1', ...): "
                         "train with SegmentationValidation among the callbacks")
    fig, ax = plotting.subplots(figsize=(5.5, 3.5))
    colours = plotting.colormap("viridis")(np.linspace(0, 0.9, len(iterations)))
    for colour, (t, key) in zip(colours, iterations):
        values = [np.nan if v is None else float(v) for v in history[key]]
        epochs = range(first_epoch, first_epoch + len(values))
        ax.plot(epochs, values, "-o", markersize=3, color=colour, label=f"iteration {t}")
    if best_epoch is not None:
        ax.axvline(best_epoch, color="grey", linestyle=":", label=f"kept (epoch {best_epoch})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation AMI")
    ax.set_title("segmentation of the validation images per iteration")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return plotting.save_and_close(fig, path, dpi=100, format="png")


def plot_iterations(result, path, image_blind=None, title=None):
    """Writes the test AMI (and classification error) of every iteration to a PNG (atomically).

    ``result``: :func:`evaluate_iterations`'s dict (``"ami"``, and ``"error"`` with a
    classifier: then a second panel). ``image_blind`` (optional): the AMI of the
    best image-blind mask (:func:`image_blind_ami`), drawn as a dashed line: a
    segmentation is worth its distance above it.

    Returns:
        ``path``.
    """
    from matplotlib.ticker import MaxNLocator

    amis = result.get("ami") if isinstance(result, dict) else None
    if not amis:
        raise InputError("`result` must be a dict of `evaluate_iterations` with a non-empty 'ami' list. "
                         f"Received: {result!r}")
    if image_blind is not None and (isinstance(image_blind, bool) or not isinstance(image_blind, numbers.Real)
                                    or not np.isfinite(image_blind)):  # an AMI may be below 0
        raise InputError(f"`image_blind` must be a finite number or None. Received: image_blind={image_blind!r}")
    errors = result.get("error")
    fig, axes = plotting.subplots(1, 2 if errors else 1, figsize=(9.0 if errors else 5.0, 3.4), squeeze=False)
    iterations = np.arange(1, len(amis) + 1)
    ax = axes[0, 0]
    ax.plot(iterations, amis, "-o", markersize=4, label="model")
    if image_blind is not None:
        ax.axhline(image_blind, color="grey", linestyle="--", label=f"image-blind mask ({image_blind:.3f})")
    ax.set_ylabel("test AMI")
    ax.set_title("segmentation per iteration")
    ax.legend(fontsize=7)
    if errors:
        axes[0, 1].plot(np.arange(1, len(errors) + 1), 100 * np.asarray(errors, "float64"), "-o", markersize=4,
                        color="tab:red")
        axes[0, 1].set_ylabel("test error (%)")
        axes[0, 1].set_title("classification per iteration")
    for ax in axes[0]:
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    return plotting.save_and_close(fig, path, dpi=100, format="png")


def plot_segmentation(model, images, path, segmentation=None, num_images=4, batch_size=64, title=None):
    """Writes, for a few images, the groups and the reconstruction at every iteration to a PNG.

    One row per image: the input image, the true segmentation (if given), then for
    every iteration ``t`` the argmax group assignment ``argmax_k pi_k`` (one colour per
    group, as ``evaluate_iterations`` scores it) and the mixture's reconstruction
    ``sum_k pi_k m_k``.

    Args:
        model: a model of ``build_model`` (outputs ``{"mixture": ...}``).
        images: ``[n, H, W, 1]`` (or ``[n, H, W]``) images in [0, 1], e.g. ``generate``'s ``"images"``.
        path: output file.
        segmentation: optional ``[n, H, W]`` integer true groups (``generate``'s ``"segmentation"``).
        num_images: how many of the first images to draw (at most ``n``). Default 4.
        batch_size: batch size of the model's prediction.
        title: optional figure title.

    Returns:
        ``path``.
    """
    images = np.asarray(images, "float32")
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] != 1 or len(images) == 0:
        raise InputError(f"`images` must have shape [n, H, W, 1] or [n, H, W] with n >= 1. "
                         f"Received: images shape={images.shape}")
    count = min(plotting.positive_count("num_images", num_images), len(images))
    images = images[:count]
    if segmentation is not None:
        segmentation = np.asarray(segmentation)
        if segmentation.ndim != 3 or segmentation.shape[1:] != images.shape[1:3] or len(segmentation) < count:
            raise InputError(f"`segmentation` must have shape [n, H, W] matching the images {images.shape[:3]}. "
                             f"Received: segmentation shape={segmentation.shape}")
        segmentation = segmentation[:count]
    return _draw_segmentation(model.predict(images, batch_size=batch_size, verbose=0), images, path, segmentation,
                              count, title)


def _draw_segmentation(out, images, path, segmentation=None, count=4, title=None):
    """:func:`plot_segmentation`' figure of the first ``count`` of ``images`` ``[n, H, W, 1]``
    (and of ``segmentation`` ``[n, H, W]``, if given) from ``out``, ``model.predict``'s dict
    of (at least) them."""
    from matplotlib.colors import ListedColormap

    count = min(count, len(images))
    images = images[:count]
    if segmentation is not None:
        segmentation = segmentation[:count]
    mixture = np.asarray(out["mixture"][:count], "float32")  # [b, T, K, H, W, C + 1]: m then pi
    pi, m = mixture[..., -1:], mixture[..., :-1]
    groups = np.argmax(pi[..., 0], axis=2)  # [b, T, H, W]
    reconstruction = np.sum(pi * m, axis=2)[..., 0]  # [b, T, H, W]
    n_iters, n_groups = pi.shape[1], pi.shape[2]
    # one colour per group: tab10 drew every group past the tenth in the tenth's colour
    if n_groups <= 10:
        colours = ListedColormap(plotting.colormap("tab10").colors[: max(n_groups, 2)])
    elif n_groups <= 20:
        colours = ListedColormap(plotting.colormap("tab20").colors[:n_groups])
    else:
        colours = ListedColormap(plotting.colormap("hsv")(np.linspace(0, 1, n_groups, endpoint=False)))
    columns = 1 + (segmentation is not None) + 2 * n_iters
    fig, axes = plotting.subplots(count, columns, figsize=(1.3 * columns, 1.4 * count + 0.5), squeeze=False)
    for i in range(count):
        panels = [(images[i, ..., 0], "input", dict(cmap="gray", vmin=0, vmax=1))]
        if segmentation is not None:
            panels.append((segmentation[i], "truth", dict(cmap=colours, vmin=-0.5, vmax=colours.N - 0.5)))
        for t in range(n_iters):
            panels.append((groups[i, t], f"groups t={t + 1}", dict(cmap=colours, vmin=-0.5, vmax=colours.N - 0.5)))
            panels.append((reconstruction[i, t], f"recon. t={t + 1}", dict(cmap="gray", vmin=0, vmax=1)))
        for ax, (picture, name, style) in zip(axes[i], panels):
            ax.imshow(picture, interpolation="nearest", **style)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(name, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return plotting.save_and_close(fig, path, dpi=100, format="png")


# ------------------------------------------------------------------------- recipe
def _train_test_digits(data_dir, seed, layout=None, test_only=False):
    """The training and test digits of the IDX folder ``data_dir`` (None: the project's
    shared copy): ``mnist_digits.load_idx_train_test``'s (``layout`` None: the folder's own;
    ``test_only``: the training digits are None, not read)."""
    from applications.mnist_digits import load_idx_train_test

    train, test, _ = load_idx_train_test(_digits_dir(data_dir), seed, layout, test_only=test_only)
    return train, test


def _digits_dir(data_dir):
    from applications.mnist_digits import default_data_dir

    return data_dir or default_data_dir()


def _held_out_digits(train_digits):
    """Training digits split 4:1: those of the training images and those of the validation images."""
    (images, labels), cut = train_digits, int(0.8 * len(train_digits[0]))
    return (images[:cut], labels[:cut]), (images[cut:], labels[cut:])


def _texture_options(texture_style, mean_gap, texture_set, bank_size, texture_shift):
    return dict(style=texture_style, mean_gap=mean_gap, texture_set=texture_set, bank_size=bank_size,
                shift=texture_shift)


def make_images(data_dir=None, num_train=8000, num_test=1000, seed=0, texture_style="binary", mean_gap=0.0,
                texture_set="random", bank_size=8, texture_shift=False, hold_out=False, layout=None):
    """The training and test images of :func:`train` (``generate``'s dicts).

    The IDX digits of ``data_dir`` (None: the project's shared copy) give the digits of
    the training and of the test images (``mnist_digits.load_idx_train_test``: the
    ``train`` files and the ``t10k`` files when the folder holds both, else the ``t10k``
    digits split 80/20 by ``seed``), which are generated with
    seeds ``seed`` and ``seed + 1`` (``texture_style``, ``mean_gap``, ``texture_set``,
    ``bank_size`` and ``texture_shift``: passed to :func:`generate` as ``style``,
    ``mean_gap``, ``texture_set``, ``bank_size`` and ``shift``). With ``hold_out``
    the training images use only the first four fifths of the training digits: the
    rest are :func:`validation_images`'. ``layout``: the folder's split to use
    (``mnist_digits.IDX_LAYOUTS``; None: the folder's own, ``mnist_digits.idx_layout``).
    """
    hold_out = checks.true_or_false("hold_out", hold_out)  # ("False", a non-empty string, held out)
    train_digits, test_digits = _train_test_digits(data_dir, seed, layout)
    if hold_out:
        train_digits = _held_out_digits(train_digits)[0]
    options = _texture_options(texture_style, mean_gap, texture_set, bank_size, texture_shift)
    return (generate(*train_digits, num_train, seed=seed, **options),
            generate(*test_digits, num_test, seed=seed + 1, **options))


def validation_images(data_dir=None, num_valid=200, seed=0, texture_style="binary", mean_gap=0.0,
                      texture_set="random", bank_size=8, texture_shift=False, layout=None):
    """``num_valid`` validation images (``generate``'s dict) for choosing among models or epochs.

    Made of the last fifth of :func:`make_images`' training digits (which
    ``make_images(hold_out=True)`` leaves out; the test digits are never used), with
    seed ``seed + 2`` and the texture options (and ``layout``) of :func:`make_images`.
    """
    num_valid = integer_at_least("num_valid", num_valid, 1)
    valid_digits = _held_out_digits(_train_test_digits(data_dir, seed, layout)[0])[1]
    return generate(*valid_digits, num_valid, seed=seed + 2,
                    **_texture_options(texture_style, mean_gap, texture_set, bank_size, texture_shift))


@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    data_dir=None,
    run_dir="runs/textured_mnist",
    num_train=8000,
    num_test=1000,
    n_groups=3,
    n_iters=3,
    epochs=10,
    batch_size=32,
    learning_rate=1e-3,
    num_classes=None,
    conv_units=32,
    dense_units=64,
    pool=1,
    sigma=0.5,
    noise_std=0.1,
    head_input="share",
    head_type="dense",
    mask_update="learned",
    initial_mask_scale=1,
    posterior_sigma=None,
    initial_mask_stddev=1.0,
    unflatten="broadcast",
    conv_encoder="convlstm",
    group_codes=False,
    mask_damping=0.0,
    class_weight=1.0,
    texture_style="binary",
    mean_gap=0.0,
    texture_set="random",
    bank_size=8,
    texture_shift=False,
    num_valid=0,
    seed=0,
    verbose=1,
    callbacks=(),
    strategy=None,
    precision=None,
):
    """Trains RTagger on textured digits (IDX digits from ``data_dir``: its ``train`` and ``t10k``
    files, or its ``t10k`` digits split 80/20; see :func:`make_images`).

    Writes ``model.keras``, ``history.png``, ``segmentation.png`` (``plot_segmentation``
    of the first test images), ``iterations.png`` (:func:`plot_iterations`: the test AMI
    and error per iteration, against the image-blind mask's AMI), ``metrics.json`` (all
    atomically) and TensorBoard logs.
    With ``strategy`` the model is built and compiled in its scope
    (``batch_size`` is then the global batch). When ``callbacks`` log to
    ``run_dir/history.csv`` (``fault_tolerance.resumable_callbacks``), the plot shows
    every epoch of a resumed run; the backup of a
    ``fault_tolerance.AtomicBackupAndRestore`` among them is deleted once the outputs
    are written (``fault_tolerance.finish_run``). A resumed run trains its epochs on
    the orders of the uninterrupted run (``make_dataset(..., first_epoch=...)``: each
    epoch shuffled by the seed and the epoch, not anew from epoch 0 in the new process).
    ``mask_update``, ``initial_mask_scale``,
    ``posterior_sigma``, ``initial_mask_stddev``, ``group_codes`` and ``mask_damping`` are RTagger's, ``unflatten`` the
    ladder's top and ``conv_encoder`` its bottom level (see :func:`paper_levels`); ``class_weight``
    weighs the classifier's cost against the mixture NLL; ``texture_style``, ``mean_gap``, ``texture_set``, ``bank_size`` and
    ``texture_shift`` choose the images (see :func:`make_images`).

    With ``num_valid > 0`` the segmentation is validated after every epoch on
    ``num_valid`` images of held-out training digits (:func:`validation_images`; the
    training images then use the other four fifths, ``make_images(hold_out=True)``):
    the logs get ``val_ami_1`` ... ``val_ami_T`` (:class:`SegmentationValidation`),
    ``ami.png`` plots them, and the weights of the epoch with the best last-iteration
    validation AMI are kept (``fault_tolerance.KeepBestWeights``, across a resume too)
    and saved, evaluated and plotted instead of the last epoch's. The test images are
    never used for that choice.

    ``verbose`` is ``fit``'s; while it is set, the scoring of the test images after
    training shows its progress bar too (on stderr).

    ``precision`` (``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``) is the Keras
    dtype policy the run builds, trains and saves its model under (its outputs in
    float32); None (the default): the global one. See
    ``applications.arguments.trains_under_precision``.

    Returns:
        A dict with the per-iteration test AMI (and error), the parameter count, the
        paths (with ``num_valid``: ``ami_plot``, and ``best_epoch`` (1-based) and
        ``valid_ami`` (per iteration, of the epoch kept)), ``image_blind_ami`` (the test AMI
        of the best image-blind segmentation, :func:`image_blind_ami`: the model's AMI is
        worth its distance above it), ``epochs_run`` (the epochs of
        the whole run, those before a resume too: ``fault_tolerance.epochs_run``) and
        ``resumed_from_epoch`` (0 for a fresh run).
    """
    from applications import fault_tolerance
    from applications.demo import plot_history, save_atomically

    # num_test=0 failed only after training (an empty validation set: "batch_outputs" unbound),
    # num_train=0 in fit
    num_train = integer_at_least("num_train", num_train, 1)
    num_test = integer_at_least("num_test", num_test, 1)
    num_valid = integer_at_least("num_valid", num_valid, 0)
    epochs = integer_at_least("epochs", epochs, 1)  # 0 wrote and scored an untrained model
    seed = integer_at_least("seed", seed, 0)  # (-1 was Keras' error from set_random_seed)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    check_run_dir(run_dir)  # (a file in the way, refused where create_run_dir was)
    # Every option is checked, the digits looked for and the model built before the images are made
    # (minutes for the recipe's) and before the run directory is made (a refusal left it empty).
    textures = check_texture_options(texture_style, mean_gap, texture_set, bank_size, texture_shift,
                                     names=tuple(TEXTURE_OPTIONS))
    strategy = distribute.resolve_strategy(strategy)
    keras.utils.set_random_seed(seed)
    from applications.mnist_digits import idx_fingerprint, idx_layout

    layout = idx_layout(_digits_dir(data_dir))  # (used throughout and recorded: evaluate rebuilds it)
    # a resume on other digits is refused (on the same files in another folder it goes on),
    # and so is evaluate on other test digits in that folder (checks.recorded_data)
    fingerprint = idx_fingerprint(_digits_dir(data_dir))
    fault_tolerance.record_data(callbacks, idx_layout=layout, data_fingerprint=fingerprint)
    with strategy.scope():
        model = compile_model(
            build_model(
                n_groups, n_iters, conv_units=conv_units, dense_units=dense_units,
                sigma=sigma, noise_std=noise_std, num_classes=num_classes, pool=pool,
                head_input=head_input, head_type=head_type, mask_update=mask_update,
                initial_mask_scale=initial_mask_scale, posterior_sigma=posterior_sigma,
                initial_mask_stddev=initial_mask_stddev, unflatten=unflatten, conv_encoder=conv_encoder,
                group_codes=group_codes, mask_damping=mask_damping, seed=seed,
            ),
            learning_rate,
            sigma=sigma,
            class_weight=class_weight,
        )
    batch_size = integer_at_least("batch_size", batch_size, 1)  # (make_dataset's check, before the images)
    train_data, test_data = make_images(data_dir, num_train, num_test, seed, *textures, hold_out=num_valid > 0,
                                        layout=layout)
    paths = {
        "model": os.path.join(run_dir, "model.keras"),
        "plot": os.path.join(run_dir, "history.png"),
        "metrics": os.path.join(run_dir, "metrics.json"),
        "logs": os.path.join(run_dir, "logs"),
    }
    # the epochs from the one a backup among the callbacks resumes at, each shuffled by
    # (seed, epoch): a resumed run trains on the orders of the uninterrupted run (tf.data's
    # reshuffling started again at epoch 0 in the new process)
    train_ds = distribute.distribute_dataset_options(
        make_dataset(train_data, n_iters, batch_size, num_classes, shuffle=True, seed=seed,
                     replicas=strategy.num_replicas_in_sync,
                     first_epoch=fault_tolerance.resume_epoch(callbacks, epochs))
    )
    # (and a mid-epoch backup's epoch goes on after the steps it had trained)
    train_ds = fault_tolerance.skip_trained_steps(train_ds, callbacks, epochs)
    batches = distribute.even_batch_count(len(train_data["images"]), batch_size, strategy.num_replicas_in_sync)
    selection, valid_data = [], None
    if num_valid:
        valid_data = validation_images(data_dir, num_valid, seed, *textures, layout=layout)
        # before the callbacks that read an epoch's logs (KeepBestWeights, CSV, TensorBoard);
        # the best epoch is kept beside the run's backup, so a resumed run keeps it too
        backup = next((c for c in callbacks if isinstance(c, fault_tolerance.AtomicBackupAndRestore)), None)
        best = fault_tolerance.KeepBestWeights("val_ami", backup.backup_dir if backup else None, mode="max")
        selection = [SegmentationValidation(valid_data, verbose=verbose), best]
    create_run_dir(run_dir)  # once everything is checked (see above)
    history = model.fit(
        train_ds,
        steps_per_epoch=batches,
        validation_data=make_dataset(test_data, n_iters, batch_size, num_classes),
        epochs=epochs,
        verbose=verbose,
        # (the stop on divergence first: `train` called from Python without the command
        # line's callbacks trained a NaN model to the end, then saved and scored it)
        callbacks=[fault_tolerance.StopOnDivergence(str(run_dir)), *selection, *callbacks,
                   keras.callbacks.TensorBoard(paths["logs"])], shuffle=False,
    )
    kept = {}
    if num_valid and best.weights is not None:
        model.set_weights(best.weights)
        kept["best_epoch"] = best.best_epoch + 1
    save_atomically(model, paths["model"])
    logged, csv_path = fault_tolerance.logged_history(history, callbacks)
    if csv_path:
        paths["history"] = csv_path
    plot_history(logged, paths["plot"], accuracy="digit_accuracy", held_out="test")  # (fit watches the test images)
    if num_valid and logged.get("val_ami_1"):
        # the log's rows end at the run's last epoch; without a CSV log a resumed run's start at the resume
        first = fault_tolerance.epochs_run(history, callbacks) - len(logged["val_ami_1"]) + 1
        paths["ami_plot"] = plot_validation_ami(logged, os.path.join(run_dir, "ami.png"), kept.get("best_epoch"),
                                                first_epoch=first)
        if kept.get("best_epoch", 0) >= first:
            kept["valid_ami"] = [float(logged[f"val_ami_{t + 1}"][kept["best_epoch"] - first])
                                 for t in range(n_iters)]
    # one prediction for the scores and the plot (a second, of the plot's few images,
    # traced the predict step again), with a progress bar (on stderr) while verbose: the
    # recipe's 1000 test images took a minute after the last epoch's bar, in silence
    out = console.predict(model, test_data["images"], 64, verbose)
    paths["segmentation_plot"] = _draw_segmentation(out, test_data["images"], os.path.join(run_dir, "segmentation.png"),
                                                    test_data["segmentation"])
    scores = _score_iterations(out, test_data)
    # what a segmentation that ignores the image gets (the digits are centred)
    blind = image_blind_ami(train_data["segmentation"], test_data["segmentation"],
                            None if valid_data is None else valid_data["segmentation"])["ami"]
    paths["iterations_plot"] = plot_iterations(scores, os.path.join(run_dir, "iterations.png"), blind)
    result = {
        **scores,
        "parameters": int(model.count_params()),
        "epochs_run": fault_tolerance.epochs_run(history, callbacks),  # those before a resume too
        "resumed_from_epoch": next(
            (c.restored_epoch for c in callbacks if isinstance(c, fault_tolerance.AtomicBackupAndRestore)), 0
        ),
        "replicas": int(strategy.num_replicas_in_sync),
        "image_blind_ami": blind,
        **kept,
        # what defines the train/test split: `evaluate` uses it (another split overlaps training digits)
        # (and which split of the folder's IDX files: mnist_digits.load_idx_train_test)
        "split": {"seed": seed, "data_dir": None if data_dir is None else os.path.abspath(data_dir),
                  "idx_layout": layout},
        **({"data_fingerprint": fingerprint} if fingerprint else {}),  # what the IDX files are
        # the test images' textures: `evaluate` makes the same ones by default
        "textures": dict(zip(TEXTURE_OPTIONS, textures)),
        "num_test": num_test,  # and as many test images
        **paths,
    }
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(callbacks)  # the outputs are written: the backup goes
    return result


#: :func:`train`'s texture options (recorded in ``metrics.json``) and their defaults
TEXTURE_OPTIONS = {"texture_style": "binary", "mean_gap": 0.0, "texture_set": "random", "bank_size": 8,
                   "texture_shift": False}


def _recorded_textures(model_path, given):
    """``given`` texture options, those that are None taken from ``metrics.json`` beside the model
    (as :func:`train` recorded them), else from ``TEXTURE_OPTIONS``."""
    recorded = checks.recorded_metrics(model_path).get("textures")
    recorded = recorded if isinstance(recorded, dict) else {}
    return {name: given[name] if given[name] is not None else recorded.get(name, default)
            for name, default in TEXTURE_OPTIONS.items()}


def evaluate(model_path, data_dir=None, num_test=None, seed=None, batch_size=64, strategy=None,
             texture_style=None, mean_gap=None, texture_set=None, bank_size=None, texture_shift=None,
             verbose=0):
    """Per-iteration AMI (and error) of a saved model on the test images of :func:`train` (same seed
    and texture options).

    The texture options left None are those ``train`` recorded in ``metrics.json`` beside
    the model (else ``generate``'s defaults): the test images of training, whose textures
    a model trained on smooth or fixed-bank textures was scored on (they defaulted to
    binary random textures, whatever the model was trained on). Given ones make other
    test images (the same digits with other textures). ``num_test`` (None) defaults to
    the number of test images ``train`` recorded there, else 1000. ``seed`` and
    ``data_dir`` default to the recorded ones; others are refused (``checks.recorded_split``),
    but for a folder of the run's IDX files moved elsewhere; other test digits where the
    run's were (the files changed since) are refused too (``checks.recorded_data``).

    ``verbose``: 1 shows Keras' progress bars, on stderr (stdout keeps only the result);
    0 (the default) is silent.
    """
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    textures = _recorded_textures(model_path, {"texture_style": texture_style, "mean_gap": mean_gap,
                                               "texture_set": texture_set, "bank_size": bank_size,
                                               "texture_shift": texture_shift})
    # (before the digits are read and the images made; "False" as texture_shift was taken as on)
    textures = dict(zip(TEXTURE_OPTIONS, check_texture_options(*textures.values(), names=tuple(TEXTURE_OPTIONS))))
    if num_test is None:  # (1000 always: other images than train scored, unless given its number)
        num_test = checks.recorded_integers(model_path, ("num_test",), minimum=1).get("num_test", 1000)
    # num_test=0 was Keras' UnboundLocalError ("batch_outputs") inside predict
    num_test = integer_at_least("num_test", num_test, 1)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    # seed and data_dir default to those train recorded beside the model; others are refused
    from applications.mnist_digits import default_data_dir, idx_fingerprint, recorded_idx_layout

    def test_files(folder):  # the fingerprint of the test digits' files (t10k)
        return idx_fingerprint(_digits_dir(folder), ("t10k",))

    # (a recorded data_dir of None is the folder train read without --data-dir: default_data_dir;
    # a folder of the run's IDX files moved elsewhere is its split too)
    split, note = checks.recorded_split(model_path, {
        "seed": seed, "data_dir": None if data_dir is None else os.path.abspath(data_dir)},
        defaults={"data_dir": lambda split: str(default_data_dir())},
        holds_data=lambda path: checks.holds_recorded_data(model_path, test_files(path)))
    seed, data_dir = split["seed"], split["data_dir"]
    checks.recorded_data(model_path, test_files(data_dir))  # other test digits in the run's folder since
    strategy = distribute.resolve_strategy(strategy)
    # the IDX split train used (its test digits, whatever was added to the folder since)
    layout = recorded_idx_layout(checks.recorded_metrics(model_path).get("split"))
    _, test_digits = _train_test_digits(data_dir, seed, layout, test_only=True)
    test_data = generate(*test_digits, num_test, seed=seed + 1,
                         **_texture_options(*(textures[name] for name in TEXTURE_OPTIONS)))
    with strategy.scope():
        model = checks.load_model(model_path)
    _check_textured_mnist_model(model, model_path)
    if note:  # nothing recorded the split
        print(note, file=sys.stderr)
    return {**evaluate_iterations(model, test_data, batch_size, verbose), "model": model_path}


def _check_textured_mnist_model(model, model_path):
    """Refuses a model that ``build_model`` did not make (another application's failed deep in
    Keras or in ``assignments``)."""
    from applications.checks import require_model

    require_model(
        model, model_path,
        lambda shapes, model: len(shapes) == 1
        and checks.image_shape_matches(shapes[0], (IMAGE_SIZE, IMAGE_SIZE, 1))
        and isinstance(model.output, dict) and "mixture" in model.output,
        "a Textured MNIST model", "textured_mnist",
        f"images [batch, {IMAGE_SIZE}, {IMAGE_SIZE}, 1] in, a dict with the RTagger 'mixture' out",
    )


# The command-line protocol (applications/registry.py).


def add_arguments(parser, command):
    """Textured MNIST's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import mask_damping, non_negative_int, positive_float, positive_int
    if command == "train":
        parser.set_defaults(epochs=10)  # the recipe of train()

    parser.add_argument("--data-dir", default=None,
                        help="folder of the MNIST IDX files (default: the project's shared copy): with the "
                        "train files they train and t10k tests, with t10k alone its digits split 80/20")
    parser.add_argument("--num-test", type=positive_int, default=None if command == "evaluate" else 1000,
                        help=("validation images of every trial" if command == "tune" else "test images")
                        + " (default: " + ("the number `train` recorded beside the model, else "
                        "1000)" if command == "evaluate" else "%(default)s)"))
    if command == "evaluate":  # the split must be training's: the one `train` recorded beside the model
        from applications.arguments import recorded_default

        recorded_default(parser, "seed", "seed of the train/test split of the digits (default: the one that "
                         "`train` recorded in metrics.json beside the model, else 0); another one is refused")
        recorded_default(parser, "data_dir", "folder of the MNIST IDX files (default: the one that `train` "
                         "recorded beside the model, else the project's shared copy); another folder is refused "
                         "unless it holds the same files")
    if command in ("train", "evaluate"):
        # evaluate: None, the textures train recorded beside the model (a default of "binary"
        # scored a model trained on smooth textures on binary ones)
        train_default = lambda value: value if command == "train" else None  # noqa: E731
        parser.add_argument("--texture-style", default=train_default("binary"), choices=TEXTURE_STYLES,
                            help="two-level or continuous-valued textures (default: binary; evaluate: "
                            "those of training)")
        parser.add_argument("--texture-set", default=train_default("random"), choices=TEXTURE_SETS,
                            help="textures drawn per image or a fixed bank (default: random; evaluate: "
                            "those of training)")
    if command in ("train", "tune"):
        parser.add_argument("--num-train", type=positive_int, default=8000, help="training images")
        parser.add_argument("--classify", action="store_true",
                            help="add the digit classifier on the groups (reports its error per iteration)")
    if command == "train":
        parser.add_argument("--learning-rate", type=positive_float, default=1e-3,
                            help="Adam's step size (default: %(default)s)")
        parser.add_argument("--n-groups", type=positive_int, default=3, help="RTagger's groups K")
        parser.add_argument("--n-iters", type=positive_int, default=3, help="RTagger's iterations T")
        parser.add_argument("--conv-units", type=positive_int, default=32,
                            help="units of the ladder's convolutional level")
        parser.add_argument("--conv-encoder", choices=CONV_ENCODERS, default="convlstm",
                            help="the ladder's convolutional level: ConvLSTM or feed-forward")
        parser.add_argument("--dense-units", type=positive_int, default=64,
                            help="units of the ladder's dense gated top")
        parser.add_argument("--group-codes", action="store_true",
                            help="give each group's ladder input its one-hot group code (groups may take roles)")
        parser.add_argument("--mask-damping", type=mask_damping, default=0.0,
                            help="share of the previous iteration's masks kept in the new ones: a number "
                                 "in [0, 1) or 'learned' (RTagger's mask_damping; default: none)")
        parser.add_argument("--num-valid", type=non_negative_int, default=0,
                            help="validation images of held-out training digits: the epoch with the best "
                                 "validation AMI is kept (0: the last epoch)")


def run_train(args, strategy):
    from applications.arguments import train_options

    return train(
        data_dir=args.data_dir,
        num_train=args.num_train,
        num_test=args.num_test,
        n_groups=args.n_groups,
        n_iters=args.n_iters,
        learning_rate=args.learning_rate,
        num_classes=10 if args.classify else None,
        conv_units=args.conv_units,
        dense_units=args.dense_units,
        texture_style=args.texture_style,
        texture_set=args.texture_set,
        num_valid=args.num_valid,
        conv_encoder=args.conv_encoder,
        group_codes=args.group_codes,
        mask_damping=args.mask_damping,
        **train_options(args, strategy),
    )


def run_evaluate(args, strategy):
    return evaluate(args.model, data_dir=args.data_dir, num_test=args.num_test, seed=args.seed,
                    batch_size=distribute.global_batch_size(args.batch_size, strategy), strategy=strategy, texture_style=args.texture_style,
                    texture_set=args.texture_set, verbose=0 if args.quiet else 1)
