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
from keras_capsules.ops import masked_softmax, max_with_initial, maximum, routing_dtype

_ALGORITHMS = ("auto", "votes", "moments")

# Poses whose largest component (per sample) lies above this are routed rescaled
# (see _pose_scale); all others are routed as they are, bit for bit.
_RESCALE_ABOVE = {"float32": 2.0**16, "float64": 2.0**128}
# The variance floor of rescaled poses is at least this (see _pose_scale).
_RESCALED_FLOOR = {"float32": 2.0**-60, "float64": 2.0**-500}


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
      with ``n_out * d_out``; at the smallNORB first-layer shape it is 18-24x faster and
      needs 2.6-5.6x less memory than ``"votes"`` (with and without XLA; one thread,
      ``benchmarks/em_routing.py``, 2026-12-01). Inputs
      are centred per sample first, which keeps the expanded quadratic forms accurate
      in float32. It agrees with ``"votes"`` to float32 rounding on
      well-conditioned data; when votes cluster so tightly that the variances fall to
      ~1e-4 of the squared vote magnitudes, it loses a few more digits than
      ``"votes"`` does. **Known limit (float32, mixed precision included):** once an
      output's variance reaches the floor ``eps`` while the votes are large, the
      E-step's expanded quadratic form (terms of order ``vote**2 / eps``) cancels
      catastrophically: with poses of about 100 and the default ``eps``, after 5 or
      more iterations ``mu_out`` came out 55-75% off (relative) where ``"votes"`` and
      float64 agree to 1e-5 (measured 2026-12-01, batch 4, 256 inputs, 16 outputs,
      4x4 poses; with 3 iterations, or with poses of order 1-30 at up to 20
      iterations, it was within 1e-5). For such data use ``algorithm="votes"``, a
      float64 layer, or poses of order 1.
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
    routing loop fast); scale such poses down first.

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
        kernel_init = self.kernel_initializer or keras.initializers.RandomNormal(
            stddev=1.0 / self.d_inp
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
            outputs = self._route_moments(
                f, x, valid, kernel[0], bias[:, 0], beta_use[0], beta_ign[0], n_out, var_eps, out_valid
            )
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
    def _assign(a_out, log_p, f, out_valid):
        """E-step: ``D_use = f R``, ``R`` the softmax over the (real) outputs."""
        logits = ops.log_sigmoid(a_out)[:, None, :] + log_p
        if logits.shape[-1] == 1:
            # A single output takes every input whole (Keras warns on a softmax over one entry).
            r = ops.ones_like(logits)
            if out_valid is not None:
                r = r * out_valid[:, None, :]
        elif out_valid is None:
            r = ops.softmax(logits, axis=-1)
        else:
            r = masked_softmax(logits, out_valid[:, None, :] > 0, axis=-1)
        return f[:, :, None] * r

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
        """
        eps = self.eps
        # Centre the inputs per sample and row (weighted by activation): V is unchanged
        # once the shift's image m @ kernel moves into a per-sample bias.
        f_sum = ops.sum(f, axis=1)  # [b]
        centre = ops.einsum("bi,bicd->bcd", f, x) / (f_sum[:, None, None] + 1e-12)
        bias = bias + ops.einsum("bcd,jdh->bjch", centre, kernel)  # [b, j, c, h]
        x = ops.where(ops.expand_dims(valid, (2, 3)), x - centre[:, None], ops.zeros_like(x))
        xx = x[..., :, None] * x[..., None, :]  # [b, i, c, d, e]
        k_outer = kernel[:, :, None, :] * kernel[:, None, :, :]  # [j, d, e, h]
        for t in range(self.n_iters):
            if t == 0:
                d_use = _uniform_use(f, n_out) if out_valid is None else _uniform_use_over(f, out_valid)
            else:
                # log p = -sum_ch (y - g)^2 / (2 sig2) - 0.5 sum_ch log sig2, g = mu - bias
                prec = 0.5 / sig2_out  # [b, j, c, h]
                g = mu_out - bias
                quad = ops.einsum("bicde,bjcde->bij", xx, ops.einsum("bjch,jdeh->bjcde", prec, k_outer))
                lin = ops.einsum("bicd,bjcd->bij", x, ops.einsum("bjch,jdh->bjcd", prec * g, kernel))
                const = ops.sum(prec * ops.square(g) + 0.5 * ops.log(sig2_out), axis=(2, 3))
                log_p = -(quad - 2.0 * lin + const[:, None, :])
                d_use = self._assign(a_out, log_p, f, out_valid)
            a_out = self._m_step_scores(f, d_use, beta_use, beta_ign)
            d_sum = ops.sum(d_use, axis=1)  # [b, j]
            inv_s = (1.0 / (d_sum + eps))[:, :, None, None]
            m1 = ops.einsum("bij,bicd->bjcd", d_use, x)
            m2 = ops.einsum("bij,bicde->bjcde", d_use, xx)
            sum_y = ops.einsum("bjcd,jdh->bjch", m1, kernel)  # sum_i D y
            sum_y2 = ops.einsum("bjcde,jdeh->bjch", m2, k_outer)  # sum_i D y^2
            mu_out = (sum_y + d_sum[:, :, None, None] * bias) * inv_s
            # sum_i D (y - g)^2 with g = mu_out - bias, never negative in exact arithmetic.
            g = mu_out - bias
            sq = sum_y2 - 2.0 * g * sum_y + d_sum[:, :, None, None] * ops.square(g)
            sig2_out = maximum(sq, 0.0) * inv_s + var_eps
        return a_out, mu_out, sig2_out

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
