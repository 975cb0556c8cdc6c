"""RTagger: perceptual grouping with a Recurrent Ladder shared by K groups (Ilin et al. 2017)."""

import math

import keras
from keras import ops

from keras_capsules.layers.rladder._utils import (
    batches_made_alike,
    check_one_tensor,
    loop_steps,
    symbolic_loop,
    expand_to,
    check_step_mask,
    exact_step_mask,
    spread_step_mask,
    clone_initializer,
    fresh_initializer,
    output_spec,
    positive_float,
    positive_int,
    generator_seed,
    seed_value,
    serialize_all,
    warn_without_effect,
    zero_of_the_weights,
)
from keras_capsules._validation import (
    boolean,
    check_floating_dtype,
    get_constraint,
    get_initializer,
    get_regularizer,
    rate,
)
from keras_capsules.layers.rladder.level_spec import saved_levels
from keras_capsules.layers.rladder.rladder import RLadder
from keras_capsules.ops import matmul, max_with_initial, min_with_initial, routing_dtype, shifted_softmax

_INITIALIZERS = (
    "kernel_initializer",
    "recurrent_initializer",
    "bias_initializer",
    "means_initializer",
    "mask_initializer",
)
_REGULARIZERS = ("kernel_regularizer", "recurrent_regularizer", "bias_regularizer")
_CONSTRAINTS = ("kernel_constraint", "recurrent_constraint", "bias_constraint")
#: the share of the previous masks that ``mask_damping="learned"`` keeps before training
LEARNED_DAMPING_START = 0.1
#: below it 1 / (2 sigma^2) overflows float32 (~3.8e-20)
_MIN_SIGMA = math.sqrt(0.5 / 3.4028234663852886e38)
#: above it the initial mask logits (standard normal draws, or the learned ones, times it)
#: can leave float32's range (3.4e38): inf - inf in the softmax, NaN masks. Masks are one-hot
#: long before (a stddev of 100 already is), so no use is lost.
_MAX_INITIAL_MASK_STDDEV = 1e30


def _relative_sq_distance(residual):
    """Each group's squared distance ``[b, K, *pixels, 1]`` minus the smallest over the groups.

    The softmaxes over the groups that take ``-distance / (2 sigma^2)`` do not change
    with a shift shared by the groups, and with it the nearest group's term is 0: for a
    small sigma the plain terms all overflowed to -inf at a pixel far from every mean
    (sigma = 1e-19, distance 3), and the softmax of all -inf was NaN.
    """
    sq = ops.sum(ops.square(residual), axis=-1, keepdims=True)
    # (Keras' torch ``ops.min`` broke torch.compile's graph: see min_with_initial)
    nearest = min_with_initial(sq, axis=1, keepdims=True, initial=math.inf)
    relative = sq - nearest
    # The nearest group's term is set to exactly 0 by subtracting it from itself: XLA
    # may fuse the square into ``sq - nearest`` as one FMA, which leaves the unrounded
    # square's rounding error (~1e-7 of it) where 0 should be. Times 1 / (2 sigma^2)
    # (up to ~1e38) that is a logit of +-1e31, and where the softmax's max and its
    # exponentials took it differently every group's exponential was 0: NaN masks
    # (sigma = 1e-19 under XLA and jax.jit). The subtracted copy carries no gradient,
    # so outputs and gradients are those of ``sq - nearest`` wherever it was exact.
    return relative - ops.stop_gradient(ops.where(sq == nearest, relative, ops.zeros_like(relative)))


def _group_softmax(logits):
    """The softmax over the groups (axis 1), written out.

    TensorFlow's softmax over an axis other than the last transposes by a permutation
    it computes with ops (``range``, ``concat``); in the gradient of the symbolic loop
    over the iterations that permutation is a value the loop carries, which XLA refuses
    ("must be a compile-time constant"). Subtracting the largest logit (a constant
    shift, without gradient) keeps the exponentials finite, as the softmax does.
    """
    largest = max_with_initial(logits, axis=1, keepdims=True, initial=-math.inf)
    e = ops.exp(logits - ops.stop_gradient(largest))
    return e / ops.sum(e, axis=1, keepdims=True)


@keras.saving.register_keras_serializable(package="keras_capsules")
class RTagger(keras.layers.Layer):
    """RTagger: iterative perceptual grouping by K groups that share one RLadder.

    The input ``x`` (an image ``[batch, H, W, C]`` or a vector ``[batch, D]``, whose
    entries are then pixels with one channel) is explained as a mixture of ``K``
    groups: group ``k`` holds a mean ``m_k`` per pixel and a probability ``pi_k``
    per pixel of owning it (``sum_k pi_k = 1``). Each iteration, every group runs one
    step of the *same* :class:`RLadder` (shared weights, separate recurrent states)
    on Tagger-style inputs, and a learned 1x1 read-out of the ladder's bottom decoder
    output gives the group's new mean and assignment logit; ``pi`` is the softmax of
    the logits over the groups.

    The per-group inputs follow Tagger (Greff et al. 2016; the RLadder paper's
    equations (76)-(77)). With ``x~`` the (possibly corrupted) input, ``z_k`` the
    group's current mean and ``pi_k`` its current mask, per pixel:

    ```
    dz_k = pi_k (x~ - z_k)                                 gradient-like term
    L_k  = softmax_k(-||x~ - z_k||^2 / (2 sigma^2))        likelihood of each group,
                                                           normalized over groups
    ```

    Group ``k``'s ladder input is the channel concatenation ``[z_k, dz_k, pi_k, L_k]``
    (``2 C + 2`` channels; ``K`` more with ``group_codes``). The raw input is *not* an input of its own: a group sees
    the data only through its masked residual ``dz_k`` and the likelihoods, so a
    group cannot explain pixels it does not own by copying them (the copy shortcut
    that let one group reconstruct everything and made the masks uninformative).
    ``L_k`` is computed in the log domain (a softmax), bounded in ``[0, 1]`` for
    any ``sigma``. The likelihood terms and both softmaxes run in float32, also
    under mixed precision.

    At the first iteration every group's mean is ``initial_mean`` ``[C]``, one
    learned constant shared by the groups (as Tagger's single initial value), and
    the masks are the softmax over groups of random logits, which alone break the
    symmetry between the groups (they share every weight, so nothing else tells
    them apart and no group can be "the one that takes everything"). In training
    (``random_initial_masks=True``, default) the logits are drawn afresh for every
    sample from a standard normal, as in Tagger; at inference they are
    ``initial_logits`` ``[K, *pixels, 1]``, one fixed draw from the same
    distribution made at build time (non-trainable), so that inference is
    deterministic (a saved model gives identical outputs).

    ``initial_mask_scale`` > 1 draws one random logit per ``scale x scale`` pixels
    and upsamples them bilinearly, so that each group starts with spatially
    coherent blobs of the image (i.i.d. per-pixel masks, scale 1, give every group
    a random half of *every* region: nothing then tells the groups' inputs apart
    but speckle). ``initial_logits`` then has the coarse shape.

    ``mask_update`` says where the new masks come from. ``"learned"`` (default):
    the read-out's logits. ``"posterior"``: those logits act as a prior and the
    likelihood of the (corrupted) input under the group's new mean is added,

    ```
    logit_k <- logit_k - ||x~ - m_k||^2 / (2 sigma^2)
    ```

    i.e. the masks are the E-step of EM for the mixture with the new means (as in
    Neural EM), so a pixel goes to the group that explains it, as soon as the
    groups' means differ there. ``posterior_sigma`` replaces ``sigma`` in this
    E-step only (a larger value gives softer masks, the cost keeps ``sigma``).

    ``mask_damping`` ``d`` in ``[0, 1)`` makes each iteration move the masks only part
    of the way to the new ones (a damped fixed-point iteration, as in damped EM):

    ```
    pi_k <- d * pi_k (previous iteration) + (1 - d) * softmax_k(logit_k)
    ```

    ``d = 0`` (default) takes the new masks as they are. A mixture of distributions
    is one, so the masks still sum to 1 over the groups. Damping slows the masks
    down and evens out an update that overshoots and flips back every other
    iteration. It slows the learning too: on the Textured MNIST benchmark
    (``benchmarks/rladder.py tagger``) damping 0.5 and 0.2 gave a steadier rise
    over the iterations but a lower segmentation AMI on every seed tried.

    ``mask_damping="learned"`` lets the cost choose the share per pixel and
    iteration: ``d = sigmoid(mean_k(o_k) w + b)``, where ``o_k`` is group ``k``'s
    ladder output at the pixel (the read-out's input) and ``w``, ``b`` are learned
    (``damping_kernel``, ``damping_bias``). The mean over the groups keeps ``d`` the
    same for every group, so the masks still sum to 1. It starts at ``d = 0.1``
    everywhere (``w = 0``). On the Textured MNIST benchmark it did no better than a
    fixed share: of four seeds one learned to segment (rising at every iteration),
    three did not learn to segment at all.

    ``initial_mask_stddev`` scales the random initial logits (both the training
    draws and ``initial_logits``): larger values give sharper initial masks.

    ``group_codes=True`` appends group ``k``'s one-hot code (``K`` constant
    channels) to its ladder input, so that the shared ladder can give the groups
    different roles (for example one group for the background). Without codes
    (default, as Tagger) the groups are exchangeable: their inputs differ only
    through their masks, so two groups that happen to explain the same pixels get
    the same inputs and make the same moves from then on. With codes the outputs
    are no longer invariant to a permutation of the groups (the segmentation
    metric is: it matches groups to labels in any order).

    The loop over the iterations is, by default, a Python loop unrolled into the
    graph when their number is known (``T`` of a sequence input, or ``n_iters``),
    and a symbolic loop (``keras.ops.scan`` on JAX, ``keras.ops.while_loop`` on
    TensorFlow, a Python loop on torch, as in :class:`RLadder`) when it is not
    (``T = None``: sequences of any length through one model); ``unroll`` chooses.
    Both compile with XLA and give the same outputs and gradients.

    Args:
        n_groups: the number of groups ``K`` (at least 2).
        levels: the shared ladder's levels (see :func:`level_spec`).
        n_iters: None (default) for sequence inputs ``[batch, T, ...]`` (one
            iteration per step; ``T`` may be None), or the number of iterations on
            a static input.
        sigma: the fixed standard deviation of the Gaussian likelihood (at least
            1e-19, where ``1 / (2 sigma^2)`` still fits in float32). Default 0.5.
        decoder_to_encoder: passed to the ladder. Default True.
        input_combinator, input_combinator_filters: passed to the ladder.
        kernel_initializer, recurrent_initializer, bias_initializer: passed to the
            ladder (``kernel_initializer`` and ``bias_initializer`` also to the
            read-out); every weight gets a copy of its own (see :class:`RLadder`).
        means_initializer: initializer of ``initial_mean``. Default zeros.
        mask_initializer: initializer of the fixed ``initial_logits``. Default
            standard normal (seeded).
        random_initial_masks: draw new initial mask logits (standard normal) for
            every sample in training. Default True.
        mask_update: ``"learned"`` (default) or ``"posterior"`` (see above).
        posterior_sigma: the standard deviation of the posterior mask update's
            likelihood. Default None (``sigma``). Only ``mask_update="posterior"``
            uses it: set with ``"learned"`` it has no effect, and a ``UserWarning``
            says so (the layer is built as without it).
        initial_mask_stddev: the standard deviation of the random initial mask
            logits. Default 1.0 (as in Tagger).
        mask_damping: the share of the previous iteration's masks kept in the new
            ones, a number in ``[0, 1)``, or ``"learned"`` (a learned share per pixel;
            see above). Default 0.0 (no damping).
        initial_mask_scale: pixels per random initial logit along each spatial
            axis (images only). Default 1 (per pixel, as in Tagger).
        group_codes: give each group's ladder input its group's one-hot code
            (see above). Default False.
        seed: seed of those draws, an integer in ``[0, 2**63 - 1]`` (its generator is
            seeded with ``seed % 2**31``), or None (random). Only the random initial
            masks of training use it: with ``random_initial_masks=False`` a seed has
            no effect, and a ``UserWarning`` says so (``mask_initializer`` takes a
            seed of its own).
        kernel_regularizer, recurrent_regularizer, bias_regularizer: likewise.
        kernel_constraint, recurrent_constraint, bias_constraint: likewise (as
            :class:`RLadder` takes them; ``initial_mean`` and the damping's bias take
            no regularizer or constraint).
        unroll: None (default): unroll the loop over the iterations (a Python loop,
            one copy of the iteration in the graph per iteration) when their number
            is known when the layer is called (``T`` of the input, or ``n_iters``),
            and run a symbolic loop (one copy) when ``T`` is None there; True:
            always unroll (``T`` must be known); False: always the symbolic loop.
            The loops and their choice on each backend are :class:`RLadder`'s (see
            its ``unroll`` for the reasons and its measurements): on JAX, whose
            ``jax.jit`` compiles every new ``T`` again, a tagger built on ``T = None``
            runs the symbolic loop for every ``T`` (unrolled, each new length took a
            compilation growing with ``T``); on TensorFlow the loop writes every
            iteration's outputs into ``[T, ...]`` buffers, in place with XLA and
            copied at every write without it, so compile long sequences with XLA.
            The random initial masks of training are drawn before either loop: the
            same seed gives the same masks. A training step of a small tagger (two
            groups, levels ConvLSTM 2 and gated 3, a batch of 8 sequences of 4x4
            images, on a loaded 2-core CPU), unrolled against the loop, the first
            step (tracing, compiling) and then each step: at ``T = 5``, TensorFlow
            without XLA 3.8 s and 3.1 s, then 4.2 ms and 6.5 ms; with XLA 11.7 s and
            8.6 s, then 3.6 ms and 5.5 ms; JAX 6.6 s and 6.7 s, then 2.8 ms and
            2.9 ms. At ``T = 20``: 13.8 s and 3.7 s, then 21 ms and 37 ms; with XLA
            58 s and 8 s, then 24 ms and 12 ms; JAX 31 s and 8.5 s, then 23 ms and
            11 ms.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[batch, H, W, C]`` or ``[batch, D]`` with ``n_iters`` set, or
            ``[batch, T, H, W, C]`` / ``[batch, T, D]`` with ``n_iters=None``
            (``T`` may be None unless ``unroll=True``).
        mask: optional ``[batch, T]`` boolean Keras mask of a sequence input: at a
            padded step the ladder's states, the means and the masks are left as
            they were and both outputs are zeros, so padded steps (whatever they
            hold) never change the outputs at the others. The mask is passed on to
            both outputs, spread over the groups and pixels (``[batch, T, K, H, W]``,
            the outputs' shape without the channels). With ``n_iters`` set (a static
            input, no time axis) a mask is a ``ValueError``.
        training: Python boolean; random initial masks in training (see above).

    Returns:
        ``[pi, m]`` for every iteration: for images ``pi`` ``[batch, T, K, H, W, 1]``
        (probabilities, summing to 1 over axis 2) and ``m`` ``[batch, T, K, H, W, C]``;
        for vectors ``pi`` and ``m`` ``[batch, T, K, D, 1]`` (pixels of one channel).
        ``T = n_iters`` for static inputs. Train with
        :class:`keras_capsules.losses.MixtureNLL` on
        ``ops.concatenate([m, pi], axis=-1)``, or on
        ``keras.layers.Concatenate()([m, pi])`` for a masked sequence (an op drops
        the mask, the layer passes it on, and the loss leaves the padded steps
        out). An empty sequence (``T = 0``) gives
        empty outputs, and zero gradients for every weight.

    Example:

    ```python
    from keras_capsules.layers import RTagger, level_spec
    images = keras.Input((20, 20, 1))
    pi, m = RTagger(n_groups=3, n_iters=4,
                    levels=[level_spec("convlstm", 16), level_spec("gated", 32)])(images)

    frames = keras.Input((None, 20, 20, 1))       # sequences of any length
    pi, m = RTagger(n_groups=3, levels=[level_spec("convlstm", 16)])(frames)
    # (None, None, 3, 20, 20, 1) each: one iteration per frame, a symbolic loop
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (RTagger); K. Greff
        et al., "Tagger: Deep Unsupervised Perceptual Grouping", NIPS 2016.
    """

    def __init__(
        self,
        n_groups,
        levels,
        n_iters=None,
        sigma=0.5,
        decoder_to_encoder=True,
        input_combinator=None,
        input_combinator_filters=None,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        means_initializer=None,
        mask_initializer=None,
        random_initial_masks=True,
        mask_update="learned",
        initial_mask_scale=1,
        posterior_sigma=None,
        initial_mask_stddev=1.0,
        group_codes=False,
        mask_damping=0.0,
        seed=None,
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        unroll=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.supports_masking = True
        self.n_groups = positive_int("n_groups", n_groups)
        if self.n_groups < 2:
            raise ValueError(f"`n_groups` must be at least 2. Received: n_groups={n_groups!r}")
        self.n_iters = positive_int("n_iters", n_iters, allow_none=True)
        self.sigma = positive_float("sigma", sigma)
        self.kernel_initializer = get_initializer("kernel_initializer", kernel_initializer)
        self.recurrent_initializer = get_initializer("recurrent_initializer", recurrent_initializer)
        self.bias_initializer = get_initializer("bias_initializer", bias_initializer)
        self.means_initializer = get_initializer(
            "means_initializer",
            means_initializer
            if means_initializer is not None
            else "zeros"
        )
        self.mask_initializer = get_initializer(
            "mask_initializer",
            mask_initializer
            if mask_initializer is not None
            else keras.initializers.RandomNormal(stddev=1.0, seed=1)
        )
        self.random_initial_masks = boolean("random_initial_masks", random_initial_masks)
        if mask_update not in ("learned", "posterior"):
            raise ValueError(
                f"`mask_update` must be 'learned' or 'posterior'. Received: mask_update={mask_update!r}"
            )
        self.mask_update = mask_update
        self.initial_mask_scale = positive_int("initial_mask_scale", initial_mask_scale)
        self.posterior_sigma = None if posterior_sigma is None else positive_float("posterior_sigma", posterior_sigma)
        for name in ("sigma", "posterior_sigma"):
            value = getattr(self, name)
            # 1 / (2 sigma^2) beyond float32's range made every likelihood term inf and pi NaN
            if value is not None and value < _MIN_SIGMA:
                raise ValueError(
                    f"`{name}` is too small: 1 / (2 {name}^2) overflows float32 (use {name} >= 1e-19). "
                    f"Received: {name}={value!r}"
                )
        self.initial_mask_stddev = positive_float("initial_mask_stddev", initial_mask_stddev)
        if self.initial_mask_stddev > _MAX_INITIAL_MASK_STDDEV:
            # initial logits beyond float32's range: every pi and m NaN, silently
            raise ValueError(
                f"`initial_mask_stddev` is too large: the initial mask logits would overflow float32 "
                f"(use initial_mask_stddev <= {_MAX_INITIAL_MASK_STDDEV:g}). "
                f"Received: initial_mask_stddev={self.initial_mask_stddev!r}"
            )
        self.group_codes = boolean("group_codes", group_codes)
        if isinstance(mask_damping, str):
            if mask_damping != "learned":
                raise ValueError(
                    "`mask_damping` must be a number in [0, 1) or 'learned'. "
                    f"Received: mask_damping={mask_damping!r}"
                )
            self.mask_damping = mask_damping
        else:
            self.mask_damping = rate("mask_damping", mask_damping)
        self.seed = seed = seed_value(seed)
        self.unroll = None if unroll is None else boolean("unroll", unroll)
        self.seed_generator = (
            keras.random.SeedGenerator(generator_seed(seed)) if self.random_initial_masks else None
        )
        # options that matter only together with another: accepted (configs saved with
        # them still load), with a warning when the user set them to no effect
        if self.posterior_sigma is not None and self.mask_update != "posterior":
            warn_without_effect("RTagger: ", "posterior_sigma", self.posterior_sigma, "mask_update='posterior'")
        if self.seed is not None and not self.random_initial_masks:
            warn_without_effect(
                "RTagger: ", "seed", self.seed,
                "random_initial_masks=True (the seed draws the random initial masks of training only)",
            )
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.recurrent_regularizer = get_regularizer("recurrent_regularizer", recurrent_regularizer)
        self.bias_regularizer = get_regularizer("bias_regularizer", bias_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.recurrent_constraint = get_constraint("recurrent_constraint", recurrent_constraint)
        self.bias_constraint = get_constraint("bias_constraint", bias_constraint)
        self.ladder = RLadder(
            levels,
            n_iters=1,
            decoder_to_encoder=decoder_to_encoder,
            use_decoder=True,
            input_combinator=input_combinator,
            input_combinator_filters=input_combinator_filters,
            kernel_initializer=fresh_initializer(self.kernel_initializer, "RTagger/ladder"),
            recurrent_initializer=fresh_initializer(self.recurrent_initializer, "RTagger/ladder"),
            bias_initializer=fresh_initializer(self.bias_initializer, "RTagger/ladder"),
            kernel_regularizer=self.kernel_regularizer,
            recurrent_regularizer=self.recurrent_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            recurrent_constraint=self.recurrent_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            trainable=self.trainable,  # (Keras gives a frozen layer's sublayers none)
            name="ladder",
        )

    # ------------------------------------------------------------------ shapes
    def _pixel_shape(self, input_shape):
        """(batch, steps, spatial, channels, is_image) from the input shape (steps None:
        a sequence of unknown length)."""
        shape = tuple(input_shape)
        offset = 2 if self.n_iters is None else 1
        if self.n_iters is None:
            ok = len(shape) in (3, 5)
            what = "[batch, T, H, W, C] or [batch, T, D]"
            if ok and shape[1] is None and self.unroll:
                raise ValueError(
                    "RTagger with unroll=True unrolls a known number of steps T; a "
                    "sequence of unknown length needs unroll=None or False (a symbolic "
                    f"loop). Received: input_shape={shape}"
                )
        else:
            ok = len(shape) in (2, 4)
            what = "[batch, H, W, C] or [batch, D]"
        if not ok or any(d is None for d in shape[offset:]):
            raise ValueError(
                f"RTagger with n_iters={self.n_iters} expects inputs of shape {what} with "
                f"known pixel and channel sizes. Received: input_shape={shape}"
            )
        steps = shape[1] if self.n_iters is None else self.n_iters
        features = shape[offset:]
        if len(features) == 3:
            return shape[0], steps, features[:2], features[2], True
        return shape[0], steps, features, 1, False

    def _coarse_spatial(self, spatial):
        """The grid of the random initial logits: one per ``initial_mask_scale`` pixels."""
        scale = self.initial_mask_scale
        return tuple(-(-int(d) // scale) for d in spatial)

    def _upsample_logits(self, logits, spatial):
        """``[b, K, *coarse, 1]`` logits -> ``[b, K, *spatial, 1]`` (bilinear)."""
        if self.initial_mask_scale == 1:
            return logits
        k = self.n_groups
        coarse = self._coarse_spatial(spatial)
        maps = ops.transpose(ops.reshape(logits, (-1, k) + coarse), (0, 2, 3, 1))  # [b, h, w, K]
        maps = ops.image.resize(maps, tuple(spatial), interpolation="bilinear", data_format="channels_last")
        return ops.transpose(maps, (0, 3, 1, 2))[..., None]

    def _input_width(self, channels):
        """Channels per pixel of a group's ladder input: ``[z, dz, pi, L]`` (and the group's code)."""
        return 2 * channels + 2 + (self.n_groups if self.group_codes else 0)

    def _ladder_features(self, spatial, channels, is_image):
        width = self._input_width(channels)
        return spatial + (width,) if is_image else (spatial[0] * width,)

    def build(self, input_shape):
        _, steps, spatial, channels, is_image = self._pixel_shape(input_shape)
        self._spatial, self._channels, self._is_image = tuple(spatial), channels, is_image
        # Built for sequences of any length (T = None, e.g. keras.Input((None, ...))):
        # JAX, which traces every batch with its T, loops symbolically (see ``unroll``).
        self._built_for_any_length = steps is None
        self.ladder.build((None,) + self._ladder_features(spatial, channels, is_image))
        width = self._input_width(channels)
        if self.initial_mask_scale > 1 and not is_image:
            raise ValueError(
                "`initial_mask_scale` > 1 needs image inputs [batch, H, W, C]. Received: "
                f"initial_mask_scale={self.initial_mask_scale}, input_shape={tuple(input_shape)}"
            )
        if (self.initial_mask_scale > 1 and None not in tuple(spatial)
                and all(c == 1 for c in self._coarse_spatial(spatial))):
            # one initial logit per group for the whole image: masks constant over the pixels
            raise ValueError(
                f"`initial_mask_scale` must be below the image's height or width: a scale of "
                f"{self.initial_mask_scale} gives one initial mask logit per group for all of an "
                f"image of {'x'.join(str(d) for d in spatial)} pixels (the same masks at every "
                f"pixel). Received: initial_mask_scale={self.initial_mask_scale}, "
                f"input_shape={tuple(input_shape)}"
            )
        self.initial_logits = self.add_weight(
            name="initial_logits",
            shape=(self.n_groups,) + self._coarse_spatial(spatial) + (1,),
            initializer=clone_initializer(self.mask_initializer),
            trainable=False,
        )
        self.initial_mean = self.add_weight(
            name="initial_mean",
            shape=(channels,),
            initializer=clone_initializer(self.means_initializer, "RTagger/initial_mean"),
        )
        self.readout_kernel = self.add_weight(
            name="readout_kernel",
            shape=(width, channels + 1),
            initializer=clone_initializer(self.kernel_initializer, "RTagger/readout_kernel"),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.readout_bias = self.add_weight(
            name="readout_bias",
            shape=(channels + 1,),
            initializer=clone_initializer(self.bias_initializer, "RTagger/readout_bias"),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        if self.mask_damping == "learned":
            # starts as a constant damping of LEARNED_DAMPING_START at every pixel
            self.damping_kernel = self.add_weight(
                name="damping_kernel", shape=(width, 1), initializer="zeros",
                regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
            )
            self.damping_bias = self.add_weight(
                name="damping_bias", shape=(1,),
                initializer=keras.initializers.Constant(
                    math.log(LEARNED_DAMPING_START / (1.0 - LEARNED_DAMPING_START))
                ),
            )
        self.built = True

    def compute_output_shape(self, input_shape):
        batch, steps, spatial, channels, is_image = self._pixel_shape(input_shape)
        lead = (batch, steps, self.n_groups) + tuple(spatial)
        return [lead + (1,), lead + (channels,)]

    def compute_output_spec(self, inputs, training=None, mask=None):
        self._check_mask(mask, tuple(inputs.shape))
        # a built tagger reused on other pixels: refused when the model is built
        self._check_built_pixels(tuple(inputs.shape))
        return output_spec(self, inputs)

    def _check_built_pixels(self, input_shape):
        if not self.built:
            return
        _, _, spatial, channels, _ = self._pixel_shape(input_shape)
        if (tuple(spatial), channels) != (tuple(self._spatial), self._channels):
            raise ValueError(
                f"This RTagger was built for inputs with pixels {self._spatial} and "
                f"{self._channels} channels. Received: input shape={tuple(input_shape)}"
            )

    def compute_mask(self, inputs, mask=None):
        # the step mask spread over the groups and pixels, [batch, T, K, ...] (of
        # the outputs without their channels), as Keras' losses and Concatenate take it
        if mask is None:
            return None
        return [spread_step_mask(mask, shape) for shape in self.compute_output_shape(tuple(inputs.shape))]

    def _check_mask(self, mask, input_shape):
        check_step_mask(self, mask, input_shape[:2])

    # ------------------------------------------------------------------ call
    def call(self, inputs, training=None, mask=None):
        # (every input of the sublayers comes from this one batch: no run-time batch checks)
        with batches_made_alike():
            return self._call(inputs, training, mask)

    def _call(self, inputs, training, mask):
        check_one_tensor(self, inputs)
        batch, steps, spatial, channels, is_image = self._pixel_shape(tuple(inputs.shape))
        self._check_mask(mask, tuple(inputs.shape))
        mask = exact_step_mask(mask, inputs)
        self._check_built_pixels(tuple(inputs.shape))
        k = self.n_groups
        dtype = self.compute_dtype
        math_dtype = routing_dtype(dtype)
        n_batch = ops.shape(inputs)[0]
        if steps == 0:
            # an empty sequence (T = 0) has no iteration to stack (it was an IndexError):
            # empty outputs, as RLadder gives, with zero gradients for every weight
            lead = (n_batch, 0, k) + tuple(spatial)
            zero = zero_of_the_weights(self, dtype)
            return [ops.zeros(lead + (1,), dtype=dtype) + zero, ops.zeros(lead + (channels,), dtype=dtype) + zero]

        m = ops.broadcast_to(
            ops.cast(self.initial_mean, math_dtype),
            (n_batch, k) + tuple(spatial) + (channels,),
        )
        logits_shape = (n_batch, k) + self._coarse_spatial(spatial) + (1,)
        # (drawn before the iterations, so that both loops draw the same initial masks)
        if training and self.random_initial_masks:
            logits = keras.random.normal(logits_shape, dtype=math_dtype, seed=self.seed_generator)
        else:
            logits = ops.broadcast_to(ops.cast(self.initial_logits, math_dtype)[None], logits_shape)
        logits = self._upsample_logits(logits * self.initial_mask_stddev, spatial)
        codes = []
        if self.group_codes:  # [b, K, *spatial, K]: group k's one-hot code at every pixel
            codes = [ops.broadcast_to(
                ops.reshape(ops.eye(k, dtype=math_dtype), (1, k) + (1,) * len(spatial) + (k,)),
                (n_batch, k) + tuple(spatial) + (k,),
            )]
        # The initial masks: shifted_softmax, finite under XLA also for initial logits times
        # initial_mask_stddev (up to 1e30) of 1e12 and more, a product that XLA rounded
        # differently inside the maximum and the exponential of ops.softmax (NaN masks).
        # (The iterations' logits keep _group_softmax: no such defect showed for them,
        # and shifted_softmax there cost ~4% of a graph step.)
        state = (self.ladder.initial_carry(n_batch * k, dtype), m, shifted_softmax(logits, axis=1))
        if self.unroll is False or (self.unroll is None and (steps is None or self._jax_any_length())):
            pi, m = self._loop(inputs, mask, state, codes)
        else:
            pis, ms = [], []
            for t in range(steps):
                x = inputs[:, t] if self.n_iters is None else inputs
                state, (pi, m) = self._iterate(x, None if mask is None else mask[:, t], state, codes)
                pis.append(pi)
                ms.append(m)
            pi, m = ops.stack(pis, axis=1), ops.stack(ms, axis=1)
        return [ops.cast(pi, dtype), ops.cast(m, dtype)]

    def _jax_any_length(self):
        """On JAX, a tagger built for T = None loops symbolically (``unroll=None``), as
        RLadder does: ``jax.jit`` traces and compiles every new T, an unrolled tagger in
        time growing with T."""
        return keras.backend.backend() == "jax" and getattr(self, "_built_for_any_length", False)

    def _iterate(self, x, keep, state, codes):
        """One iteration, the same in both loops: ``((carry, m, pi), (pi, m) output)``
        after ``state = (carry, m, pi)`` (the ladder's carry of the ``b * K`` group rows,
        the means and the masks) on ``x``, the step's input ``[batch, *features]`` whose
        ``[batch]`` mask there is ``keep`` (None: no mask)."""
        k, spatial, channels = self.n_groups, tuple(self._spatial), self._channels
        dtype = self.compute_dtype
        math_dtype = routing_dtype(dtype)
        inv_two_var = 1.0 / (2.0 * self.sigma**2)
        posterior_sigma = self.sigma if self.posterior_sigma is None else self.posterior_sigma
        posterior_inv_two_var = 1.0 / (2.0 * posterior_sigma**2)
        width = self._input_width(channels)
        carry, m, pi = held = state
        if keep is not None:
            # a padded step runs on zeros (an inf or NaN it holds would reach the
            # gradients through the discarded branch); its results are dropped below
            keep = ops.cast(keep, "bool")
            x = ops.where(expand_to(keep, x), x, ops.zeros_like(x))
        x = ops.cast(x, math_dtype)
        if not self._is_image:
            x = x[..., None]
        x = x[:, None]  # [b, 1, *spatial, C]
        residual = x - m
        log_lik = -_relative_sq_distance(residual) * inv_two_var
        z = ops.concatenate(
            [m, pi * residual, pi, _group_softmax(log_lik), *codes], axis=-1
        )
        z = ops.cast(z, dtype)
        z = ops.reshape(z, (-1,) + self._ladder_features(spatial, channels, self._is_image))
        out, _, carry = self.ladder.step(z, carry)
        # the 1x1 maps as matmuls of [pixels of every group, width] (a matmul of the
        # [b, K, *spatial, width] tensor is a tensordot on TensorFlow, whose gradient
        # XLA does not compile in the symbolic loop over a batch of unknown size)
        out = ops.reshape(out, (-1, width))
        if self.mask_damping == "learned":
            # one share per pixel (the same for every group, so the masks still
            # sum to 1): the sigmoid of the groups' mean gate logit
            gate = ops.reshape(matmul(out, self.damping_kernel), (-1, k) + spatial + (1,))
            gate = ops.mean(gate, axis=1, keepdims=True) + self.damping_bias
            damping = ops.sigmoid(ops.cast(gate, math_dtype))
        else:
            damping = self.mask_damping
        out = matmul(out, self.readout_kernel) + self.readout_bias
        out = ops.cast(ops.reshape(out, (-1, k) + spatial + (channels + 1,)), math_dtype)
        m, logits = out[..., :channels], out[..., channels:]
        if self.mask_update == "posterior":
            # E-step: the read-out logits are a prior, the evidence is the
            # likelihood of the (corrupted) input under the new means
            logits = logits - _relative_sq_distance(x - m) * posterior_inv_two_var
        new_pi = _group_softmax(logits)
        if self.mask_damping:
            new_pi = damping * pi + (1.0 - damping) * new_pi
        pi = new_pi
        if keep is None:
            return (carry, m, pi), (pi, m)
        # a padded step leaves the ladder's states, the means and the masks as they
        # were (the ladder runs the K groups of a sample on rows b * K + k) and
        # outputs zeros
        rows = ops.repeat(keep, k, axis=0)
        old_carry, old_m, old_pi = held

        def hold(new, old):
            return None if new is None else ops.where(expand_to(rows, new), new, old)

        (states, feedback), (old_states, old_feedback) = carry, old_carry
        carry = (
            [[hold(a, b) for a, b in zip(new, old)] for new, old in zip(states, old_states)],
            [hold(a, b) for a, b in zip(feedback, old_feedback)],
        )
        m = ops.where(expand_to(keep, m), m, old_m)
        pi = ops.where(expand_to(keep, pi), pi, old_pi)
        outputs = (
            ops.where(expand_to(keep, pi), pi, ops.zeros_like(pi)),
            ops.where(expand_to(keep, m), m, ops.zeros_like(m)),
        )
        return (carry, m, pi), outputs

    def _loop(self, inputs, mask, state, codes):
        """The iterations as one symbolic loop (any number of steps; see ``unroll``),
        from ``state`` (as ``_iterate`` takes it): ``(pi, m)`` of every iteration, as the
        unrolled loop stacks them. The structure is RLadder's ``_scan``."""
        dtype = self.compute_dtype
        batch_size = ops.shape(inputs)[0]
        sequence = self.n_iters is None
        steps, spare, time_major = loop_steps(inputs, self.n_iters)
        per_step = {}
        if sequence:
            per_step["x"] = time_major(inputs)
        if mask is not None:
            per_step["keep"] = time_major(ops.cast(mask, "bool"))
        (states, feedback), m, pi = state
        with_feedback = [f is not None for f in feedback]

        def loop_carry(states, feedback, m, pi):
            # the loop's carry holds tensors only (no None)
            return {"states": states, "feedback": [f for f in feedback if f is not None], "m": m, "pi": pi}

        def step(t, c):
            """Iteration ``t``: ``(new carry, outputs)``; time-major tensors are indexed by ``t``."""
            x = keras.tree.map_structure(lambda v: ops.take(v, t, axis=0), per_step)
            fb = iter(c["feedback"])
            carry = (c["states"], [next(fb) if has else None for has in with_feedback])
            ((states, feedback), m, pi), (pi_t, m_t) = self._iterate(
                x["x"] if sequence else inputs, x.get("keep"), (carry, c["m"], c["pi"]), codes
            )
            return loop_carry(states, feedback, m, pi), {"pi": ops.cast(pi_t, dtype), "m": ops.cast(m_t, dtype)}

        init = loop_carry(states, feedback, m, pi)
        pixels = (self.n_groups,) + tuple(self._spatial)
        outputs = symbolic_loop(step, init, steps, spare, batch_size,
                                {"pi": pixels + (1,), "m": pixels + (self._channels,)}, dtype)
        return ops.moveaxis(outputs["pi"], 0, 1), ops.moveaxis(outputs["m"], 0, 1)

    @classmethod
    def from_config(cls, config):
        return super().from_config(dict(config, levels=saved_levels(config.get("levels"))))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "n_groups": self.n_groups,
                "levels": [dict(spec) for spec in self.ladder.levels],
                "n_iters": self.n_iters,
                "sigma": self.sigma,
                "random_initial_masks": self.random_initial_masks,
                "mask_update": self.mask_update,
                "initial_mask_scale": self.initial_mask_scale,
                "posterior_sigma": self.posterior_sigma,
                "initial_mask_stddev": self.initial_mask_stddev,
                "group_codes": self.group_codes,
                "mask_damping": self.mask_damping,
                "seed": self.seed,
                "decoder_to_encoder": self.ladder.decoder_to_encoder,
                "input_combinator": self.ladder.input_combinator,
                "input_combinator_filters": self.ladder.input_combinator_filters,
                "unroll": self.unroll,
            }
        )
        serialize_all(config, self, _INITIALIZERS, "initializers")
        serialize_all(config, self, _REGULARIZERS, "regularizers")
        serialize_all(config, self, _CONSTRAINTS, "constraints")
        return config
