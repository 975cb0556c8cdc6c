"""EMRouting: routing capsules by expectation-maximization with a D-step (Heinsen 2019)."""

import math

import keras
from keras import ops

from keras_capsules.layers._own_casting import OwnCastingLayer
from keras_capsules._validation import (
    check_floating_dtype,
    choice,
    exactly_shaped_like,
    get_constraint,
    get_initializer,
    get_regularizer,
    positive_float,
    positive_int,
)
from keras_capsules.layers._initializers import fresh_initializer
from keras_capsules.layers._vote_routing import (
    dense_from_ragged,
    is_ragged,
    mask_list,
    shape_tuple,
)
from keras_capsules.ops import masked_softmax, max_with_initial, maximum, recomputed_where, routing_dtype

_ALGORITHMS = ("auto", "votes", "moments")

# Poses whose largest component (per sample) lies above this are routed rescaled
# (see _pose_scale); all others are routed as they are, bit for bit.
_RESCALE_ABOVE = {"float32": 2.0**16, "float64": 2.0**128}
# The variance floor of rescaled poses is at least this (see _pose_scale).
_RESCALED_FLOOR = {"float32": 2.0**-60, "float64": 2.0**-500}
# "moments" hands a batch to "votes" when its estimated rounding error exceeds
# _MOMENTS_TOLERANCE (see EMRouting._route_moments): the estimate is the unit roundoff
# times _ROUNDING_FACTOR times the magnitude of the terms that cancel.
_UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
_ROUNDING_FACTOR = 2.0
_MOMENTS_TOLERANCE = 1e-3
# ... and sums its returned variances from the residuals when the relative rounding
# error estimated for their expansion exceeds this.
_VARIANCE_TOLERANCE = 1e-3
# Softmax weights below exp(-gap) of a row's largest are below the dtype's resolution.
_NEGLIGIBLE_GAP = {"float32": 17.0, "float64": 37.0}
# The smallest eps accepted: the smallest normal number of the routing dtype.
_SMALLEST_NORMAL = {"float32": 2.0**-126, "float64": 2.0**-1022}
_LARGEST = {"float32": (2 - 2.0**-23) * 2.0**127, "float64": (2 - 2.0**-52) * 2.0**1023}


def _pose_scale(x, eps):
    """How the (masked) poses ``x`` are routed: per sample ``[b, 1, 1, 1]``, the
    factor ``s`` applied to poses and biases, ``1 / s``, and the variance floor.

    Routing is invariant to a per-sample scale ``s``: poses and biases times ``s``
    and the variance floor ``eps`` times ``s**2`` give votes and means times ``s``,
    variances times ``s**2`` and the same assignments and scores. Unscaled, the
    backward pass multiplies gradients of order ``|V|**2`` by squared votes (and
    ``"moments"`` by squared poses), which overflows in float32 for poses of about
    1e12 even where the forward pass and the true gradients are finite. Poses with
    a component above ``2**16`` are therefore routed at ``s = 1 / max|x|``; all
    others at ``s = 1``, exactly as written.

    The rescaled floor is at least ``min(eps, 2**-60)`` (float32): a floor near
    ``eps * s**2`` gives ``1 / sig2**2`` (the variance's local derivative) beyond
    the float32 range, and NaN at outputs that receive no data. In the poses' own
    units this floor is a standard deviation of ``2**-30`` times the sample's
    largest component, below float32's resolution of such votes. ``s`` carries no
    gradient (the outputs do not depend on it).
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    largest = max_with_initial(ops.abs(x), axis=(1, 2, 3), keepdims=True, initial=0.0)
    big = largest > _RESCALE_ABOVE[dtype]
    scale = ops.stop_gradient(1.0 / ops.where(big, largest, ops.ones_like(largest)))
    unscale = ops.stop_gradient(ops.where(big, largest, ops.ones_like(largest)))
    floor = maximum(eps * ops.square(scale), min(eps, _RESCALED_FLOOR[dtype]))
    return scale, unscale, floor


def _largest(estimates, axis=None):
    """The largest of non-negative error estimates, 0 for none; NaN estimates (of a
    sample whose outputs are NaN anyway) are left out, on every backend alike, so that
    they decide nothing for the other samples."""
    return max_with_initial(ops.where(ops.isnan(estimates), 0.0, estimates), axis=axis, initial=0.0)


def _uniform_use(f, n_out):
    """D_use of the first iteration: every input's activation split evenly over outputs."""
    n = ops.cast(n_out, f.dtype)
    return f[:, :, None] * ops.ones((1, 1, n_out), dtype=f.dtype) / n


def _uniform_use_over(f, out_valid):
    """The first iteration's ``D_use`` with only the ``out_valid`` ``[b, n_out]`` outputs."""
    count = maximum(ops.sum(out_valid, axis=1), 1.0)  # [b]
    return f[:, :, None] * out_valid[:, None, :] / count[:, None, None]


def _ranked_spread(out_valid, dtype):
    """Per sample, ``linspace(-1, 1, n)`` over its ``n`` valid outputs in order (0 elsewhere).

    ``out_valid`` is ``[b, n_out]`` (float 0/1). A valid output's value depends only on
    its rank among the sample's valid outputs and their number, so padded positions
    never change it.
    """
    rank = ops.cumsum(out_valid, axis=1) - 1.0
    last = maximum(ops.sum(out_valid, axis=1, keepdims=True) - 1.0, 1.0)
    return ops.cast((2.0 * rank / last - 1.0) * out_valid, dtype)


def _symmetric_spread(n, dtype):
    """``linspace(-1, 1, n)`` (``[-1]`` for ``n = 1``), also for a traced, dynamic ``n``.

    ``ops.linspace`` needs a Python integer count inside a traced function (it fails
    with a dynamic number of inputs under ``tf.function``, ``model.fit`` or XLA).
    """
    steps = ops.cast(ops.arange(n), dtype)
    last = maximum(ops.cast(n, dtype) - 1.0, 1.0)
    return 2.0 * steps / last - 1.0


@keras.saving.register_keras_serializable(package="keras_capsules")
class EMRouting(OwnCastingLayer):
    """Routes input capsules to output capsules by EM with a D-step (Heinsen 2019).

    Each input capsule ``i`` has a score ``a_inp[i]`` (a logit: its activation is
    ``f = sigmoid(a_inp)``) and a pose matrix ``mu_inp[i]`` of shape ``d_cov x d_inp``.
    It casts a vote ``V[i, j] = mu_inp[i] @ W[i, j] + B[i, j]`` (``d_cov x d_out``) for
    every output capsule ``j``. Each iteration then

    * E-step: assigns each input to the outputs in proportion to the outputs'
      activations and the Gaussian likelihood of its votes (uniformly at first);
    * D-step: splits the input's activation into data *used* by each output,
      ``D_use = f * R``, and data it *ignores*, ``D_ign = f - D_use``;
    * M-step: scores each output by the net benefit to use minus the net cost to
      ignore, ``a_out = sum_i beta_use D_use - sum_i beta_ign D_ign``, and fits the mean
      and diagonal variance of its votes weighted by ``D_use``.

    The number of input capsules may be fixed (``n_inp=int``: one weight set per input)
    or variable (``n_inp=None``: weights shared over inputs, any number accepted). The
    number of outputs may be fixed (``n_out=int``) or follow the number of inputs
    (``n_out=None``, paper section 2.1.1: weights shared over outputs, with a learned
    ``bias_break`` scaled by ``linspace(-1, 1, n_out)`` added to the votes so that
    outputs receiving identical votes can separate).

    Stacking layers: ``a_out`` is a sum over the inputs, so its scale grows with their
    number and with the betas. Fed unchanged to a next ``EMRouting`` (whose ``f`` is its
    sigmoid) it can pin every activation at 0 or 1 whatever the input, and outputs of
    the next layer can then lose every assignment and give a constant score for good.
    Normalizing the scores in between (``applications.demo`` puts a
    ``BatchNormalization`` there) kept that from happening in the demo's runs.

    Inputs are excluded from routing by a score of ``-inf`` or by a Keras ``mask``
    (False = padding). Excluded inputs never change an output or a gradient, whatever
    their ``mu_inp`` holds (even NaN or inf), and a sample whose inputs are all excluded
    yields finite outputs. (A NaN score at a real input is not an exclusion: it makes
    its sample's outputs NaN, as in the reference.)

    With ``n_out=None`` and a mask, a padded position is padding on the output side
    too: its output is zeros, it takes no part in the E-step, the symmetry-breaking
    spread runs over each sample's real positions only (``linspace(-1, 1, n_real)``),
    and the layer returns the mask with its outputs. The real outputs are then exactly
    those of the same sample without its padding. (A ``-inf`` score excludes an input
    from routing but keeps its output position.)

    Two exact algorithms compute the same routing:

    * ``"votes"`` forms the vote tensor ``V[b, i, j, c, h]`` as the reference does;
      it is the cheaper one when ``d_inp`` is large next to ``d_out``.
    * ``"moments"`` (shared weights only) never forms ``V``: the means and variances of
      the votes are computed from the ``D_use``-weighted first and second moments of
      the *inputs*, and the E-step's Gaussian log-likelihoods from a quadratic form in
      the inputs, all as matrix products over the input axis. Memory no longer grows
      with ``n_out * d_out``; at the smallNORB first-layer shape it is 13-20x faster and
      needs 1.5-3.4x less memory than ``"votes"`` (with and without XLA; two threads,
      ``benchmarks/em_routing.py``, 2026-12-01, with the check below). Inputs
      are centred per sample first, which keeps the expanded quadratic forms accurate
      in float32 on well-conditioned data. They lose digits where votes lie close to
      their output's mean on the scale of the votes themselves (a variance near the
      floor ``eps`` next to votes of order 100 cancelled terms of order
      ``vote**2 / eps`` and gave ``mu_out`` 55-75% off; variances of tight clusters
      came out 2.6% to 640x off). So "moments" estimates the rounding error of every
      expansion it makes from the magnitudes of the terms that cancel, and:

      - where the E-step's error could move an input's responsibilities by more than
        1e-3 (to first order, in L1), the whole batch is routed again by ``"votes"``
        (a conditional on a tensor: only then are the votes formed, and a backward
        pass recomputes them rather than keeping them);
      - where the returned variances' expansion could be off by more than 1e-3
        (relative), ``sig2_out`` is summed from the residuals as ``"votes"`` sums it
        (forming ``V`` once, for that alone; a compiled graph that does not use
        ``sig2_out`` never forms it).

      The estimates are not guaranteed bounds: measured against float64 they ranged
      from 1.3x to about 1e8x the true error. Over 2,000 random cases (poses of
      1e-3 to 1e4, ``eps`` 1e-8 to 0.1, 1 to 20 iterations, masks, duplicates,
      clusters), float32 "moments" was within 1e-3 of float64 (1e-2 for variances) or
      within 10x the error of float32 "votes" in all but 5. In those 5 the iteration
      itself amplifies rounding: float64 "votes", its means perturbed after the first
      iteration by float32-sized noise (1.2e-7 relative), moved as far as "moments"
      did (up to 1.2 of the largest mean). Float32 "votes" matched float64 in 4 of
      them only because its rounding happened to be structured: ``n_out=None`` with the
      initial ``bias_break`` of zeros, for example, makes every output identical,
      "votes" computes them bit for bit alike, and any rounding that differs between
      them separates them within 8 iterations. On TensorFlow, JAX and torch the
      tests' data agree with float64 within 3.3x of float32 "votes"' error (JAX runs
      the fallback compiled inside its conditional, so it rounds as compiled "votes"
      does, not as eager "votes"). The check
      is batch-wide: a sample's outputs may differ at float32 rounding with the batch
      it is in. A batch handed to ``"votes"`` costs the time of both algorithms. On
      MNIST features (Conv+BN, 392 inputs to 16 outputs, 3 iterations) 1 of 12
      batches of 32 was handed over, needlessly, at initialization and after 2
      epochs; the README's demo (``keras-capsules train``) handed over 0 of 1,437.
      Where the check finds nothing to do it costs little: at the smallNORB shape,
      forward and backward, see the README's table. Under ``torch.compile`` both
      algorithms run and the check selects (``torch.cond`` does not compile them).
    * ``"auto"`` (default) picks ``"moments"`` for shared weights when
      ``d_inp * (d_inp + 1) <= 64 * d_out`` and ``"votes"`` otherwise: measured
      (forward and backward, batch 8, 512 inputs, 32 outputs, a 2-core CPU), the two
      break even near 68-78 (4x16 to 4x4 poses, 4x12 to 4x2); at 4x8 to 4x4 poses
      (18) ``"moments"`` took half the time and a quarter of the memory, and at 1x32
      to 1x4 (264) ``"votes"`` half the time. (The bound was 16 until 2026-12-01,
      which sent 4x8 to 4x4 poses to the slower one.)

    The routing math always runs in float32 (float64 for a float64 layer), also under
    mixed precision; outputs are cast to the layer's compute dtype. The iteration count
    is static, so the layer compiles with XLA.

    Range: a sample whose poses have a component above ``2**16`` is routed with its
    poses and biases divided by its largest component and its outputs scaled back
    (routing does not depend on that scale; the variance floor ``eps`` is scaled
    alike, but kept above ``2**-60`` times the square of that component, a standard
    deviation far below float32's resolution of such votes). So in float32 the
    outputs, and the gradients of ``a_out`` and ``mu_out``, are finite for poses and
    votes with components up to about ``1e18`` (``sig2_out`` is about their square).
    The gradients of ``sig2_out`` itself are of the order of the squared votes, and
    are finite for components up to about ``1e15``. Beyond these ranges results
    overflow to inf or NaN without an error (this is not checked, to keep the
    routing loop fast); scale such poses down first. Under a float16 policy
    (``mixed_float16``) the outputs are cast to float16, whose largest value is
    65,504: ``sig2_out`` overflows to inf once the output poses' spread passes about
    250, and ``mu_out`` once they pass 65,504 (bfloat16 has float32's range).

    Args:
        n_out: number of output capsules, or None for as many as there are inputs.
        d_out: columns of each output capsule (outputs are ``d_cov x d_out``).
        n_iters: number of EM iterations (at least 1). Default 3.
        n_inp: number of input capsules if fixed (one set of weights per input), or
            None (default) to accept any number with weights shared over inputs.
        eps: small positive constant added to the used-data sums and the variances.
        algorithm: ``"auto"``, ``"votes"`` or ``"moments"`` (see above).
        kernel_initializer: initializer of ``kernel``; None (default) is the paper's
            normal distribution with standard deviation ``1 / d_inp``.
        bias_initializer: initializer of ``bias`` (and ``bias_break``). Default zeros.
        beta_initializer: initializer of ``beta_use`` and ``beta_ign``. Default zeros.
        kernel_regularizer, bias_regularizer, beta_regularizer: optional regularizers.
        kernel_constraint, bias_constraint, beta_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a list ``[a_inp, mu_inp]``: ``a_inp`` of shape ``[batch, n_inp]`` holds
            raw scores (logits; ``-inf`` excludes an input, ``+inf`` means fully
            active), ``mu_inp`` of shape ``[batch, n_inp, d_cov, d_inp]`` the poses.
            Either may be a ragged tensor (``[batch, (n_inp), ...]``): it is routed as
            zero-padded to its longest row with the padding masked (TensorFlow; not
            inside an XLA-compiled function, which has no kernel for that
            conversion: pass the capsules padded, with a mask, there).
        mask: optional boolean tensor ``[batch, n_inp]`` (or a list of masks for the
            two inputs, as Keras propagates them); False excludes an input. It is
            never broadcast: a mask of another shape is a ``ValueError`` where the
            shapes are known when the layer is called, and fails when it runs (the
            backend's shape error) where they are not (e.g. a ``tf.function``
            traced for any batch size).

    Returns:
        A list ``[a_out, mu_out, sig2_out]``: ``a_out`` ``[batch, n_out]`` raw output
        scores (pre-activation logits, never sigmoided), ``mu_out`` and ``sig2_out``
        ``[batch, n_out, d_cov, d_out]``, the means and variances of the output
        capsules' votes. With ``n_out=None`` the input mask is passed on to all three
        (zeros at padded positions).

    Weights:
        ``kernel`` ``[n_inp or 1, n_out or 1, d_inp, d_out]``, ``bias``
        ``[n_inp or 1, n_out or 1, d_cov, d_out]``, ``beta_use`` and ``beta_ign``
        ``[n_inp or 1, n_out or 1]``, and for ``n_out=None`` ``bias_break``
        ``[1, d_cov, d_out]``.

    Example:

    ```python
    a_inp = keras.Input((None,))               # scores of a variable number of inputs
    mu_inp = keras.Input((None, 4, 4))          # 4x4 pose matrices
    a, mu, sig2 = keras_capsules.layers.EMRouting(n_out=32, d_out=4)([a_inp, mu_inp])
    a, mu, sig2 = keras_capsules.layers.EMRouting(n_out=10, d_out=4)([a, mu])
    model = keras.Model([a_inp, mu_inp], keras.layers.Softmax()(a))
    ```

    Reference:
        F. A. Heinsen, "An Algorithm for Routing Capsules in All Domains", 2019,
        arXiv:1911.00792 (Algorithm 1).
    """

    def __init__(
        self,
        n_out,
        d_out,
        n_iters=3,
        n_inp=None,
        eps=1e-5,
        algorithm="auto",
        kernel_initializer=None,
        bias_initializer="zeros",
        beta_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        beta_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        beta_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.n_out = positive_int("n_out", n_out, allow_none=True)
        self.d_out = positive_int("d_out", d_out)
        self.n_iters = positive_int("n_iters", n_iters)
        self.n_inp = positive_int("n_inp", n_inp, allow_none=True)
        self.eps = positive_float("eps", eps)
        # Below the routing dtype's smallest normal number the floor is flushed to zero
        # (1e-38 in float32): a sample or output that receives no data then divides
        # 0 by 0 and returns NaN.
        routing = routing_dtype(self.dtype_policy.compute_dtype)
        if self.eps < _SMALLEST_NORMAL[routing]:
            raise ValueError(
                f"`eps` must be at least {_SMALLEST_NORMAL[routing]:.4g}, the smallest normal "
                f"number of the layer's routing dtype ({routing}). Received: eps={eps!r}"
            )
        largest = _LARGEST[routing]
        if self.eps > largest:  # (inf in the routing dtype: every output NaN, silently)
            raise ValueError(
                f"`eps` must be at most {largest:.4g}, the largest number of the layer's routing "
                f"dtype ({routing}). Received: eps={eps!r}"
            )
        choice("algorithm", algorithm, _ALGORITHMS)
        if algorithm == "moments" and self.n_inp is not None:
            raise ValueError(
                "`algorithm='moments'` needs weights shared over inputs (n_inp=None). "
                f"Received: algorithm={algorithm!r}, n_inp={n_inp!r}"
            )
        self.algorithm = algorithm
        self.kernel_initializer = (
            None if kernel_initializer is None else get_initializer("kernel_initializer", kernel_initializer)
        )
        self.bias_initializer = get_initializer("bias_initializer", bias_initializer)
        self.beta_initializer = get_initializer("beta_initializer", beta_initializer)
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.bias_regularizer = get_regularizer("bias_regularizer", bias_regularizer)
        self.beta_regularizer = get_regularizer("beta_regularizer", beta_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.bias_constraint = get_constraint("bias_constraint", bias_constraint)
        self.beta_constraint = get_constraint("beta_constraint", beta_constraint)
        self.supports_masking = True

    # ------------------------------------------------------------------ shapes
    def _split_shapes(self, input_shape):
        shapes = (
            [shape_tuple(s) for s in input_shape]
            if isinstance(input_shape, (list, tuple))
            else []
        )
        if len(shapes) != 2 or any(s is None for s in shapes):
            raise ValueError(
                "EMRouting expects a list of two inputs [a_inp, mu_inp] with shapes "
                "[batch, n_inp] and [batch, n_inp, d_cov, d_inp]. "
                f"Received: input_shape={input_shape}"
            )
        a_shape, mu_shape = shapes
        if len(a_shape) != 2 or len(mu_shape) != 4:
            raise ValueError(
                "EMRouting expects a_inp of shape [batch, n_inp] (rank 2) and mu_inp of "
                "shape [batch, n_inp, d_cov, d_inp] (rank 4). "
                f"Received: a_inp shape={a_shape}, mu_inp shape={mu_shape}"
            )
        if a_shape[1] is not None and mu_shape[1] is not None and a_shape[1] != mu_shape[1]:
            raise ValueError(
                "a_inp and mu_inp must have the same number of input capsules (axis 1). "
                f"Received: a_inp shape={a_shape}, mu_inp shape={mu_shape}"
            )
        if mu_shape[2] is None or mu_shape[3] is None:
            raise ValueError(
                "The capsule dimensions d_cov and d_inp (axes 2 and 3 of mu_inp) must be "
                f"known. Received: mu_inp shape={mu_shape}"
            )
        if a_shape[0] is not None and mu_shape[0] is not None and a_shape[0] != mu_shape[0]:
            raise ValueError(
                "a_inp and mu_inp must have the same batch size (axis 0). "
                f"Received: a_inp shape={a_shape}, mu_inp shape={mu_shape}"
            )
        n = a_shape[1] if a_shape[1] is not None else mu_shape[1]
        if self.n_inp is not None and n is not None and n != self.n_inp:
            raise ValueError(
                f"This EMRouting layer has a fixed n_inp={self.n_inp}, so it expects inputs "
                f"of shape [batch, {self.n_inp}] and [batch, {self.n_inp}, d_cov, d_inp]. "
                f"Received: a_inp shape={a_shape}, mu_inp shape={mu_shape}"
            )
        # Also when the model is built: a built layer reused on other poses was accepted
        # there, with outputs of a shape it never produces, and failed in predict.
        if self.built and tuple(mu_shape[2:]) != (self.d_cov, self.d_inp):
            raise ValueError(
                f"This EMRouting layer was built for input capsules of d_cov x d_inp = "
                f"{self.d_cov} x {self.d_inp}, so mu_inp must have shape "
                f"[batch, n_inp, {self.d_cov}, {self.d_inp}]. "
                f"Received: mu_inp shape={mu_shape}"
            )
        return a_shape, mu_shape

    def build(self, input_shape):
        _, mu_shape = self._split_shapes(input_shape)
        self.d_cov, self.d_inp = int(mu_shape[2]), int(mu_shape[3])
        one_or_n_inp = self.n_inp or 1
        one_or_n_out = self.n_out or 1
        # (poses with no columns, d_inp = 0, have an empty kernel: any deviation fills it; 1 / 0
        # was a ZeroDivisionError)
        kernel_init = self.kernel_initializer or keras.initializers.RandomNormal(
            stddev=1.0 / max(self.d_inp, 1)
        )
        self.kernel = self.add_weight(
            name="kernel",
            shape=(one_or_n_inp, one_or_n_out, self.d_inp, self.d_out),
            initializer=kernel_init,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(one_or_n_inp, one_or_n_out, self.d_cov, self.d_out),
            initializer=self.bias_initializer,
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self.beta_use = self.add_weight(
            name="beta_use",
            shape=(one_or_n_inp, one_or_n_out),
            initializer=self.beta_initializer,
            regularizer=self.beta_regularizer,
            constraint=self.beta_constraint,
        )
        self.beta_ign = self.add_weight(
            name="beta_ign",
            shape=(one_or_n_inp, one_or_n_out),
            # a copy: one instance filled beta_use and beta_ign alike (also when seeded)
            initializer=fresh_initializer(self.beta_initializer, "EMRouting/beta_ign"),
            regularizer=self.beta_regularizer,
            constraint=self.beta_constraint,
        )
        if self.n_out is None:
            self.bias_break = self.add_weight(
                name="bias_break",
                shape=(1, self.d_cov, self.d_out),
                # a copy: one random instance filled bias_break with bias's values (also when seeded)
                initializer=fresh_initializer(self.bias_initializer, "EMRouting/bias_break"),
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        self.built = True

    def compute_output_shape(self, input_shape):
        a_shape, mu_shape = self._split_shapes(input_shape)
        n_in = a_shape[1] if a_shape[1] is not None else mu_shape[1]
        if n_in is None:  # a fixed n_inp is the number the inputs must have
            n_in = self.n_inp
        n_out = self.n_out if self.n_out is not None else n_in
        pose = (a_shape[0], n_out, mu_shape[2], self.d_out)
        return [(a_shape[0], n_out), pose, pose]

    def compute_output_spec(self, inputs, mask=None):
        if isinstance(inputs, (list, tuple)) and len(inputs) == 2 and mask is not None:
            # the mask as call checks it (a mask of another shape built the model, and
            # only predict refused it)
            a_shape, mu_shape = (tuple(x.shape) for x in inputs)
            n_inp = a_shape[1] if a_shape[1] is not None else mu_shape[1]
            batch = a_shape[0] if a_shape[0] is not None else mu_shape[0]
            self._combined_mask(mask, n_inp, batch)
        return super().compute_output_spec(inputs, mask=mask)

    def compute_mask(self, inputs, mask=None):
        if (
            self.n_out is None
            and isinstance(inputs, (list, tuple))
            and any(is_ragged(x) for x in inputs)
        ):
            # Ragged inputs are routed as padded and masked (see call): their padding
            # is padding on the output side too, as for the same data with a mask.
            _, mask = self._dense_from_ragged(inputs, mask)
        if self.n_out is not None or not mask_list(mask):
            return None  # a fixed set of output capsules is never padding
        combined = self._combined_mask(mask)  # n_out=None: outputs are padded where inputs are
        return None if combined is None else [combined] * 3

    @property
    def resolved_algorithm(self):
        """The algorithm ``"auto"`` resolves to for this layer's shapes (after build)."""
        if self.algorithm != "auto":
            return self.algorithm
        if self.n_inp is not None:
            return "votes"
        if not self.built:
            raise ValueError(
                "resolved_algorithm of EMRouting(algorithm='auto') depends on the input "
                "capsules' d_inp, so it is known once the layer is built. "
                "Received: an unbuilt layer"
            )
        cheap = self.d_inp * (self.d_inp + 1) <= 64 * self.d_out
        return "moments" if cheap else "votes"

    # ------------------------------------------------------------------ call
    def _combined_mask(self, mask, n_inp=None, batch=None):
        combined = None
        for m in mask_list(mask):
            m = ops.cast(m, "bool")
            if len(m.shape) != 2 or (
                n_inp is not None and m.shape[1] is not None and m.shape[1] != n_inp
            ):
                raise ValueError(
                    f"EMRouting expects a mask of shape [batch, n_inp] = [batch, {n_inp}]. "
                    f"Received: mask shape={tuple(m.shape)}"
                )
            if batch is not None and m.shape[0] is not None and m.shape[0] != batch:
                raise ValueError(
                    "EMRouting expects a mask with one row per sample, of shape "
                    f"[batch, n_inp] = [{batch}, {n_inp}]. Received: mask shape={tuple(m.shape)}"
                )
            combined = m if combined is None else ops.logical_and(combined, m)
        return combined

    @staticmethod
    def _dense_from_ragged(inputs, mask):
        """Ragged ``a_inp`` ``[batch, (n_inp)]`` and/or ``mu_inp`` as zero-padded
        tensors, with their padding (and ``mask``, padded with False) as the mask."""
        masks = [m.to_tensor(default_value=False) if is_ragged(m) else m for m in mask_list(mask)]
        dense = []
        for x in inputs:
            if is_ragged(x):
                x, valid = dense_from_ragged(x, None)
                masks.append(valid)
            dense.append(x)
        return dense, masks

    def call(self, inputs, mask=None):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError(
                "EMRouting expects a list of two inputs [a_inp, mu_inp]. "
                f"Received: {type(inputs).__name__} of length "
                f"{len(inputs) if isinstance(inputs, (list, tuple)) else 'n/a'}"
            )
        if any(is_ragged(x) for x in inputs):
            inputs, mask = self._dense_from_ragged(inputs, mask)
        a_inp, mu_inp = inputs
        self._split_shapes([tuple(a_inp.shape), tuple(mu_inp.shape)])
        dtype = routing_dtype(self.compute_dtype)
        a_inp = ops.cast(a_inp, dtype)
        mu_inp = ops.cast(mu_inp, dtype)

        # Excluded inputs: -inf scores or mask == False. Their activation is zero and
        # their poses are replaced by zeros before any arithmetic touches them.
        # A NaN score is not an exclusion: it gives NaN, as in the reference.
        valid = ops.not_equal(a_inp, ops.cast(-math.inf, dtype))
        # Sizes unknown when traced (a tf.function or XLA for any batch or n_inp): a_inp,
        # mu_inp and a fixed n_inp must still agree when the layer runs, where a size-1
        # axis of one of them would otherwise be broadcast silently over the others.
        if None in tuple(a_inp.shape[:2]) or tuple(a_inp.shape[:2]) != tuple(mu_inp.shape[:2]):
            valid = exactly_shaped_like(valid, ops.ones(ops.shape(mu_inp)[:2], "bool"))
        if self.n_inp is not None and a_inp.shape[1] is None:
            valid = exactly_shaped_like(valid, ops.ones((ops.shape(a_inp)[0], self.n_inp), "bool"))
        n_inp = a_inp.shape[1] if a_inp.shape[1] is not None else mu_inp.shape[1]
        batch = a_inp.shape[0] if a_inp.shape[0] is not None else mu_inp.shape[0]
        user_mask = self._combined_mask(mask, n_inp, batch)
        if user_mask is not None:
            user_mask = exactly_shaped_like(user_mask, valid)
            valid = ops.logical_and(valid, user_mask)
        f = ops.where(valid, ops.sigmoid(ops.where(valid, a_inp, ops.zeros_like(a_inp))), 0.0)
        x = ops.where(ops.expand_dims(valid, (2, 3)), mu_inp, ops.zeros_like(mu_inp))

        kernel, bias, beta_use, beta_ign = (
            ops.cast(w, dtype) for w in (self.kernel, self.bias, self.beta_use, self.beta_ign)
        )
        n_out = self.n_out
        out_valid = None  # [b, n_out] 0/1: the real outputs (n_out=None with a mask only)
        if n_out is None:  # as many outputs as inputs, with symmetry breaking
            n_out = ops.shape(a_inp)[1]
            break_ = ops.cast(self.bias_break, dtype)
            if user_mask is None:
                spread = _symmetric_spread(n_out, dtype)
                bias = bias + break_[None] * spread[None, :, None, None]
            else:  # a per-sample spread over the real positions: [b, n_inp or 1, n_out, c, h]
                out_valid = ops.cast(user_mask, dtype)
                spread = _ranked_spread(out_valid, dtype)
                bias = bias[None] + break_[None, None] * spread[:, None, :, None, None]
            kernel = ops.broadcast_to(kernel, (ops.shape(kernel)[0], n_out) + tuple(kernel.shape[2:]))
            beta_use = ops.broadcast_to(beta_use, (ops.shape(beta_use)[0], n_out))
            beta_ign = ops.broadcast_to(beta_ign, (ops.shape(beta_ign)[0], n_out))

        # Routed at a per-sample scale (1 for ordinary poses, see _pose_scale); the
        # bias is per sample from here on: [b, n_inp or 1, j, c, h].
        scale, unscale, var_eps = _pose_scale(x, self.eps)  # [b, 1, 1, 1]
        x = x * scale
        if out_valid is None:
            bias = bias[None]
        bias = bias * scale[:, :, :, :, None]
        if self.resolved_algorithm == "moments":
            (a_out, mu_out, spread), ill_conditioned = self._route_moments(
                f, x, valid, kernel[0], bias[:, 0], beta_use[0], beta_ign[0], n_out, var_eps, out_valid
            )
            # The returned variances from the final residuals (outside the conditional,
            # so that a compiled graph that does not use them never forms them).
            sig2_out = spread()

            def route_votes(f, x, kernel, bias, beta_use, beta_ign):
                return self._route_votes(f, x, kernel, bias, beta_use, beta_ign, n_out, var_eps, out_valid)

            # Rounding beyond the tolerance somewhere in the batch: the batch is routed
            # again from the votes (only then are they formed). Recomputed in a backward
            # pass (recomputed_where), so the conditional keeps no vote-sized
            # intermediates (under XLA it kept them, zeros when not taken, at 10x the
            # time of "moments" and 5x its memory).
            voted = recomputed_where(
                ill_conditioned, route_votes, (f, x, kernel, bias, beta_use, beta_ign), (a_out, mu_out, mu_out)
            )
            outputs = tuple(ops.where(ill_conditioned, v, m) for v, m in zip(voted, (a_out, mu_out, sig2_out)))
        else:
            outputs = self._route_votes(f, x, kernel, bias, beta_use, beta_ign, n_out, var_eps, out_valid)
        a_out, mu_out, sig2_out = outputs
        mu_out = mu_out * unscale
        sig2_out = sig2_out * ops.square(unscale)
        if out_valid is not None:
            keep = out_valid > 0
            a_out = ops.where(keep, a_out, ops.zeros_like(a_out))
            mu_out = ops.where(keep[:, :, None, None], mu_out, ops.zeros_like(mu_out))
            sig2_out = ops.where(keep[:, :, None, None], sig2_out, ops.zeros_like(sig2_out))
        return [ops.cast(o, self.compute_dtype) for o in (a_out, mu_out, sig2_out)]

    @staticmethod
    def _logits(a_out, log_p):
        return ops.log_sigmoid(a_out)[:, None, :] + log_p

    @staticmethod
    def _responsibilities(logits, out_valid):
        """``R``: the softmax of the E-step's logits over the (real) outputs."""
        if logits.shape[-1] == 1:
            # A single output takes every input whole (Keras warns on a softmax over one entry).
            r = ops.ones_like(logits)
            if out_valid is not None:
                r = r * out_valid[:, None, :]
        elif out_valid is None:
            # (ops.softmax, not ops.shifted_softmax: these logits are a sum after a
            # reduction, which XLA computes once, and no float32 defect showed for them
            # at inputs of 1e6-1e12; the written-out softmax cost ~10% of the step)
            r = ops.softmax(logits, axis=-1)
        else:
            r = masked_softmax(logits, out_valid[:, None, :] > 0, axis=-1)
        return r

    @classmethod
    def _assign(cls, a_out, log_p, f, out_valid):
        """E-step: ``D_use = f R``, ``R`` the softmax over the (real) outputs."""
        return f[:, :, None] * cls._responsibilities(cls._logits(a_out, log_p), out_valid)

    def _m_step_scores(self, f, d_use, beta_use, beta_ign):
        # a_out = sum_i beta_use D_use - sum_i beta_ign (f - D_use)
        d_ign = f[:, :, None] - d_use
        if len(beta_use.shape) == 1:  # shared over inputs
            return beta_use * ops.sum(d_use, axis=1) - beta_ign * ops.sum(d_ign, axis=1)
        return ops.sum(beta_use * d_use, axis=1) - ops.sum(beta_ign * d_ign, axis=1)

    def _route_votes(self, f, x, kernel, bias, beta_use, beta_ign, n_out, var_eps, out_valid=None):
        """The reference algorithm: forms V[b, i, j, c, h].

        ``bias`` is per sample, ``[b, n_inp or 1, j, c, h]``; ``var_eps`` ``[b, 1, 1, 1]``
        is the floor added to the variances.
        """
        if self.n_inp is None:  # one weight set shared over inputs
            votes = ops.einsum("bicd,jdh->bijch", x, kernel[0]) + bias
            beta_use, beta_ign = beta_use[0], beta_ign[0]
        else:
            votes = ops.einsum("bicd,ijdh->bijch", x, kernel) + bias
        eps = self.eps
        for t in range(self.n_iters):
            if t == 0:
                d_use = _uniform_use(f, n_out) if out_valid is None else _uniform_use_over(f, out_valid)
            else:
                # A product and a sum, not einsum("bijch,bjch->bij"): TensorFlow Lite's
                # converter rejects the BatchMatMul that einsum becomes (TFLite export).
                log_p = -ops.sum(
                    ops.square(votes - mu_out[:, None]) * (0.5 / sig2_out)[:, None], axis=(3, 4)
                ) - 0.5 * ops.sum(ops.log(sig2_out), axis=(2, 3))[:, None, :]
                d_use = self._assign(a_out, log_p, f, out_valid)
            a_out = self._m_step_scores(f, d_use, beta_use, beta_ign)
            inv_s = 1.0 / (ops.sum(d_use, axis=1) + eps)  # [b, j]
            mu_out = ops.einsum("bij,bijch->bjch", d_use, votes) * inv_s[:, :, None, None]
            sig2_out = (
                ops.einsum("bij,bijch->bjch", d_use, ops.square(votes - mu_out[:, None]))
                * inv_s[:, :, None, None]
                + var_eps
            )
        return a_out, mu_out, sig2_out

    def _route_moments(self, f, x, valid, kernel, bias, beta_use, beta_ign, n_out, var_eps, out_valid=None):
        """The same routing from moments of the inputs; V is never formed.

        With y[b,i,j,c,:] = x[b,i,c,:] @ kernel[j] the bias-free vote, every quantity
        the algorithm needs is linear in sums over inputs of D_use * x and
        D_use * x x^T, or in x and x x^T weighted by per-output coefficients.
        ``bias`` is per sample, ``[b, j, c, h]``; ``var_eps`` as in ``_route_votes``.

        Returns ``[a_out, mu_out, sig2_out_fn]`` and a boolean scalar, true where the
        E-step's rounding may exceed ``_MOMENTS_TOLERANCE`` somewhere in the batch;
        ``sig2_out_fn()`` computes the returned variances (called outside the caller's
        conditional, so that a graph that does not use them prunes them).

        Both expansions subtract terms that are large next to their difference when
        votes lie close to their output's mean on the scale of the votes themselves
        (a variance near the floor ``eps`` next to large votes): the E-step's
        ``quad - 2 lin + const`` (the squared residuals weighted by the precisions) and
        the M-step's ``sum D y**2 - 2 g sum D y + g**2 sum D`` (the variance's sum).
        Their rounding error is estimated as the unit roundoff times
        ``_ROUNDING_FACTOR`` times the magnitude of the cancelling terms (bounded over
        the pose rows without forming a vote: by Cauchy-Schwarz in the E-step, by
        Minkowski's inequality for the variances). A variance's
        counts relative to the variance; it moves the next E-step's log-likelihoods by
        up to that times ``sum_ch prec (y - g)**2 + c h / 2``. An E-step logit's error
        counts through the responsibilities it moves: ``2 sum_j R_ij (1 - R_ij)
        err_ij`` bounds, to first order, the L1 change of an input's row of ``R``; an
        error of one nat or more also counts wherever the logit may lie within
        ``_NEGLIGIBLE_GAP`` of its row's largest (where the first order no longer
        holds). Only real inputs and outputs count. The returned variances are summed
        from the residuals where their expansion's estimate exceeds
        ``_VARIANCE_TOLERANCE``.
        """
        eps = self.eps
        dtype = keras.backend.standardize_dtype(x.dtype)
        rounding = _ROUNDING_FACTOR * _UNIT_ROUNDOFF[dtype]
        gap = _NEGLIGIBLE_GAP[dtype]
        real_in = ops.cast(f > 0, dtype)[:, :, None]  # [b, i, 1]
        worst = ops.zeros((), dtype)  # the largest error estimate so far
        # Centre the inputs per sample and row (weighted by activation): V is unchanged
        # once the shift's image m @ kernel moves into a per-sample bias.
        f_sum = ops.sum(f, axis=1)  # [b]
        centre = ops.einsum("bi,bicd->bcd", f, x) / (f_sum[:, None, None] + 1e-12)
        bias = bias + ops.einsum("bcd,jdh->bjch", centre, kernel)  # [b, j, c, h]
        x = ops.where(ops.expand_dims(valid, (2, 3)), x - centre[:, None], ops.zeros_like(x))
        xx = x[..., :, None] * x[..., None, :]  # [b, i, c, d, e]

        def m2_of(d_use):
            return ops.einsum("bij,bicde->bjcde", d_use, xx)

        k_outer = kernel[:, :, None, :] * kernel[:, None, :, :]  # [j, d, e, h]
        x_norm2 = ops.sum(ops.square(x), axis=3)  # [b, i, c]
        k_norm2 = ops.sum(ops.square(kernel), axis=1)  # [j, h]
        for t in range(self.n_iters):
            if t == 0:
                d_use = _uniform_use(f, n_out) if out_valid is None else _uniform_use_over(f, out_valid)
            else:
                # log p = -sum_ch (y - g)^2 / (2 sig2) - 0.5 sum_ch log sig2, g = mu - bias
                prec = 0.5 / sig2_out  # [b, j, c, h]
                g = mu_out - bias
                quad = ops.einsum("bicde,bjcde->bij", xx, ops.einsum("bjch,jdeh->bjcde", prec, k_outer))
                lin = ops.einsum("bicd,bjcd->bij", x, ops.einsum("bjch,jdh->bjcd", prec * g, kernel))
                g_quad = ops.sum(prec * ops.square(g), axis=(2, 3))[:, None, :]  # [b, 1, j]
                log_det = 0.5 * ops.sum(ops.log(sig2_out), axis=(2, 3))[:, None, :]
                log_p = -(quad - 2.0 * lin + g_quad + log_det)
                logits = self._logits(a_out, log_p)
                r = self._responsibilities(logits, out_valid)
                d_use = f[:, :, None] * r
                # The rounding error of log_p at each (i, j) and what it can move.
                # sum_ch prec (sum_d |x_d K_dh|)^2 <= sum_c |x_c|^2 sum_h prec |K_h|^2
                quad_abs = ops.einsum("bic,bjc->bij", x_norm2, ops.einsum("bjch,jh->bjc", prec, k_norm2))
                err = rounding * (quad_abs + 2.0 * ops.sqrt(quad_abs * g_quad) + g_quad + ops.abs(log_det))
                # and that of the variances: a relative error rho moves log_p by up to
                # rho (sum_ch prec (y - g)^2 + 0.5 c h)
                half_count = 0.5 * sig2_out.shape[2] * sig2_out.shape[3]
                err = err + sig2_err[:, None, :] * (maximum(-log_p - log_det, 0.0) + half_count)
                err = err * real_in if out_valid is None else err * real_in * out_valid[:, None, :]
                row_change = 2.0 * ops.sum(r * (1.0 - r) * err, axis=2)  # [b, i]
                if out_valid is not None:
                    logits = ops.where(out_valid[:, None, :] > 0, logits, ops.full_like(logits, -math.inf))
                top = max_with_initial(logits - err, axis=2, keepdims=True, initial=-math.inf)
                near_top = ops.cast(logits + err >= top - gap, dtype)
                # [b, i]: errors of a nat or more where they may count
                large = max_with_initial(err * near_top, axis=2, initial=0.0)
                large = ops.where(large >= 1.0, large, ops.zeros_like(large))
                worst = maximum(worst, _largest(maximum(row_change, large)))
            a_out = self._m_step_scores(f, d_use, beta_use, beta_ign)
            d_sum = ops.sum(d_use, axis=1)  # [b, j]
            inv_s = (1.0 / (d_sum + eps))[:, :, None, None]
            m1 = ops.einsum("bij,bicd->bjcd", d_use, x)
            sum_y = ops.einsum("bjcd,jdh->bjch", m1, kernel)  # sum_i D y
            mu_out = (sum_y + d_sum[:, :, None, None] * bias) * inv_s
            g = mu_out - bias
            if t == self.n_iters - 1:
                break
            sig2_out, sig2_err = self._expanded_variances(d_use, d_sum, inv_s, sum_y, g, m2_of, kernel,
                                                          k_outer, var_eps, out_valid, rounding)

        def spread():
            # The returned variances: the expansion where its rounding stays within
            # the tolerance, else from the residuals as "votes" sums them
            # (rematerialized: V is formed for this alone, and again in a backward pass).
            expanded, err = self._expanded_variances(d_use, d_sum, inv_s, sum_y, g, m2_of, kernel,
                                                     k_outer, var_eps, out_valid, rounding)

            def from_residuals(x, kernel, g, d_use, inv_s):
                resid = ops.einsum("bicd,jdh->bijch", x, kernel) - g[:, None]
                return (ops.einsum("bij,bijch->bjch", d_use, ops.square(resid)) * inv_s + var_eps,)

            cancelled = _largest(err) > _VARIANCE_TOLERANCE
            summed = recomputed_where(cancelled, from_residuals, (x, kernel, g, d_use, inv_s), (expanded,))[0]
            return ops.where(cancelled, summed, expanded)

        return [a_out, mu_out, spread], worst > _MOMENTS_TOLERANCE

    @staticmethod
    def _expanded_variances(d_use, d_sum, inv_s, sum_y, g, m2_of, kernel, k_outer, var_eps, out_valid, rounding):
        """``sig2_out`` of "moments" and its rounding error relative to it, by output.

        sum_i D (y - g)^2 = sum_i D y^2 - 2 g sum_i D y + g^2 sum_i D, never negative
        in exact arithmetic; the magnitude of sum_i D y^2's terms is bounded by
        Minkowski's inequality over the pose rows, that of |sum_i D y| from it by
        Cauchy-Schwarz.
        """
        m2 = m2_of(d_use)
        sum_y2 = ops.einsum("bjcde,jdeh->bjch", m2, k_outer)  # sum_i D y^2
        g_sum_y = g * sum_y
        g2_sum = d_sum[:, :, None, None] * ops.square(g)
        sig2 = maximum(sum_y2 - 2.0 * g_sum_y + g2_sum, 0.0) * inv_s + var_eps
        # sum_i D (sum_d |x_d K_dh|)^2 <= (sum_d sqrt(sum_i D x_d^2) |K_dh|)^2 (Minkowski)
        diagonal = maximum(ops.diagonal(m2, axis1=3, axis2=4), 0.0)  # [b, j, c, d]
        y2_abs = ops.square(ops.einsum("bjcd,jdh->bjch", ops.sqrt(diagonal), ops.abs(kernel)))
        y_abs = ops.sqrt(y2_abs * d_sum[:, :, None, None])
        err = rounding * (y2_abs + 2.0 * ops.abs(g) * y_abs + g2_sum) * inv_s / sig2
        if out_valid is not None:
            err = err * out_valid[:, :, None, None]
        return sig2, _largest(err, axis=(2, 3))  # [b, j, c, h], [b, j]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "n_out": self.n_out,
                "d_out": self.d_out,
                "n_iters": self.n_iters,
                "n_inp": self.n_inp,
                "eps": self.eps,
                "algorithm": self.algorithm,
                "kernel_initializer": None
                if self.kernel_initializer is None
                else keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "beta_initializer": keras.initializers.serialize(self.beta_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "beta_regularizer": keras.regularizers.serialize(self.beta_regularizer),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
                "beta_constraint": keras.constraints.serialize(self.beta_constraint),
            }
        )
        return config
