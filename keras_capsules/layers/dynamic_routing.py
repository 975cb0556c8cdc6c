"""DynamicRouting: routing by agreement between capsules (Sabour, Frosst & Hinton 2017)."""

import keras
from keras import ops

from keras_capsules.layers._vote_routing import VoteRouting, couplings
from keras_capsules.ops import squash


@keras.saving.register_keras_serializable(package="keras_capsules")
class DynamicRouting(VoteRouting):
    """Routes input capsules to output capsules by iterative agreement (Sabour 2017).

    Every input capsule ``u_i`` (a vector of ``d_in`` numbers) predicts every output
    capsule through a learned matrix: ``u_hat[i, j] = u_i @ kernel[(i,) j]``. The
    routing logits ``b[i, j]`` start at zero and each iteration

    * turns them into coupling coefficients ``c[i, :] = softmax_j(b[i, :])`` (every
      input distributes itself over the outputs),
    * forms each output as the coupled sum of its votes ``s_j = sum_i c[i, j] u_hat[i, j]``
      and squashes it, ``v_j = squash(s_j)``,
    * and, except after the last iteration, raises the logits by the agreement
      between vote and output, ``b[i, j] += <u_hat[i, j], v_j>``.

    The output is ``squash(s)`` of the last iteration: vectors whose length in
    ``[0, 1)`` can be read as the probability that the entity exists (see
    :class:`~keras_capsules.layers.CapsuleLength`).

    Padded input capsules (Keras ``mask`` False) take no part: their votes are zero,
    their couplings are exactly zero and they never change an output or a gradient,
    whatever values they hold (NaN included). A sample whose inputs are all padded
    gives zero outputs with finite gradients.

    The routing math runs in float32 (float64 for a float64 layer), also under mixed
    precision; results are cast to the layer's compute dtype. The loop over
    iterations is unrolled (static), so the layer compiles with XLA. Gradients flow
    through every iteration.

    Args:
        n_out: number of output capsules.
        d_out: dimension of each output capsule.
        n_iters: number of routing iterations (at least 1). Default 3.
        shared_weights: if True (default), one matrix per output capsule is shared by
            all inputs (``kernel`` ``[n_out, d_in, d_out]``) and any number of inputs
            is accepted; if False, every input position has its own matrices
            (``kernel`` ``[n_in, n_out, d_in, d_out]``) and ``n_in`` must be static.
        return_couplings: if True, the layer also returns the coupling coefficients
            of the last iteration. Default False.
        kernel_initializer: initializer of ``kernel``. Default ``"glorot_uniform"``.
        kernel_regularizer: optional regularizer of ``kernel``.
        kernel_constraint: optional constraint of ``kernel``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...); the dtype (or
            policy) must be floating.

    Call arguments:
        inputs: input capsules, shape ``[batch, n_in, d_in]``, or a ragged tensor
            ``[batch, (n_in), d_in]`` (shared weights), routed as zero-padded to its
            longest row with the padding masked (TensorFlow; not inside an
            XLA-compiled function, which has no kernel for that conversion: pass
            the capsules padded, with a mask, there).
        mask: optional boolean tensor ``[batch, n_in]``; False marks a padded input.

    Returns:
        The squashed output capsules ``[batch, n_out, d_out]``; with
        ``return_couplings=True`` a list ``[outputs, couplings]`` where ``couplings``
        ``[batch, n_in, n_out]`` sums to 1 over outputs for every real input and is 0
        for padded inputs.

    Example:

    ```python
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20000, 64, mask_zero=True)(tokens)
    x = keras.layers.Dense(8)(x)                                 # [batch, n, 8]
    caps = keras_capsules.layers.DynamicRouting(n_out=4, d_out=16)(x)  # mask propagates
    scores = keras_capsules.layers.CapsuleLength()(caps)
    model = keras.Model(tokens, scores)
    model.compile("adam", keras_capsules.losses.MarginLoss())
    ```

    Reference:
        S. Sabour, N. Frosst, G. E. Hinton, "Dynamic Routing Between Capsules",
        NeurIPS 2017, arXiv:1710.09829 (Procedure 1).
    """

    def _route(self, u_hat, valid):
        logits = ops.zeros(ops.shape(u_hat)[:3], dtype=u_hat.dtype)  # [b, i, j]
        for t in range(self.n_iters):
            c = couplings(logits, valid)
            s = ops.einsum("bij,bijo->bjo", c, u_hat)
            if t < self.n_iters - 1:
                logits = logits + ops.einsum("bijo,bjo->bij", u_hat, squash(s))
        return s, c
