"""KMeansRouting: capsule routing as soft k-means clustering of votes (Ren & Lu)."""

import keras
from keras import ops

from keras_capsules.layers._vote_routing import VoteRouting, couplings
from keras_capsules.ops import _norm_parts, maximum, safe_norm

_SIMILARITIES = ("cosine", "dot")
_NORM_FLOOR = 1e-12


@keras.saving.register_keras_serializable(package="keras_capsules")
class KMeansRouting(VoteRouting):
    """Routes input capsules to output capsules by soft k-means (Ren & Lu, Algorithm 1).

    Every input capsule ``u_i`` votes for every output capsule through a learned
    matrix, ``u_hat[i, j] = u_i @ kernel[(i,) j]``. Each output capsule ``v_j`` is a
    cluster centre of its votes: it starts from the votes' sum scaled by ``1 / n_out``
    and each iteration

    * scores every vote against its centre, ``b[i, j] = similarity(u_hat[i, j], v_j)``
      (the scores *replace* the previous ones, they do not accumulate),
    * turns the scores into coupling coefficients ``c[i, :] = softmax_j(b[i, :])``,
    * and moves every centre to the coupled sum of its votes
      ``v_j = sum_i c[i, j] u_hat[i, j]`` (not normalised).

    The output is ``squash(v)``. Two similarities are available:

    * ``"cosine"`` (the paper): ``<u_hat, v> / (|u_hat| |v|)``;
    * ``"dot"`` (the authors' reference code): ``<u_hat, v> / |v|``, i.e. the
      projection of the vote on the centre's direction.

    Norms are floored at ``1e-12``, so zero votes and zero centres give zero scores
    (never NaN). Both similarities depend only on the direction of ``v``, so the scale
    of the initial centre does not matter: ``sum_i u_hat / n_out`` (as in the reference
    code, which this layer reproduces exactly) and the mean vote ``sum_i u_hat / n_in``
    route identically.

    Padded input capsules (Keras ``mask`` False) take no part at all: their votes are
    zero, so they are left out of the initial centre too (which is then
    ``sum over real inputs / n_out``, pointing the same way as the mean over real
    inputs), their couplings are exactly zero, and they never change an output or a
    gradient, whatever values they hold (NaN included). A sample whose inputs are all
    padded gives zero outputs with finite gradients.

    The routing math runs in float32 (float64 for a float64 layer), also under mixed
    precision; results are cast to the layer's compute dtype. The loop over
    iterations is unrolled (static), so the layer compiles with XLA. Gradients flow
    through every iteration.

    Args:
        n_out: number of output capsules.
        d_out: dimension of each output capsule.
        n_iters: number of k-means iterations (at least 1). Default 3.
        similarity: ``"cosine"`` (default, the paper) or ``"dot"`` (the reference code).
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
    x = keras_capsules.layers.CompositionalEmbedding(60000, 64, mask_zero=True)(tokens)
    x = keras.layers.Dense(8)(x)                                  # [batch, n, 8]
    caps = keras_capsules.layers.KMeansRouting(n_out=4, d_out=16)(x)  # mask propagates
    scores = keras_capsules.layers.CapsuleLength()(caps)
    model = keras.Model(tokens, scores)
    model.compile("adam", keras_capsules.losses.CapsuleLoss(terms=("margin", "focal")))
    ```

    Reference:
        H. Ren, H. Lu, "Compositional Coding Capsule Network with K-Means Routing for
        Text Classification", 2018 (Algorithm 1).
    """

    def __init__(
        self,
        n_out,
        d_out,
        n_iters=3,
        similarity="cosine",
        shared_weights=True,
        return_couplings=False,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        if similarity not in _SIMILARITIES:
            raise ValueError(
                f"`similarity` must be one of {_SIMILARITIES}. "
                f"Received: similarity={similarity!r}"
            )
        super().__init__(
            n_out=n_out,
            d_out=d_out,
            n_iters=n_iters,
            shared_weights=shared_weights,
            return_couplings=return_couplings,
            kernel_initializer=kernel_initializer,
            kernel_regularizer=kernel_regularizer,
            kernel_constraint=kernel_constraint,
            **kwargs,
        )
        self.similarity = similarity

    def _scores(self, u_hat, v, u_norm):
        # The centre's direction v / max(|v|, floor) first, then the product:
        # <u_hat, v> itself overflows (inf / inf = NaN) once |u_hat| |v| passes the
        # float32 range (inputs ~1e19). The direction comes with an overflow-free
        # gradient from _norm_parts, also for huge centres. u_norm: the votes'
        # max(|u_hat|, floor) [b, i, j] for cosine similarity, None for dot.
        direction, v_norm = _norm_parts(v, -1, 1e-12, with_direction=True)  # [b, j, o], [b, j, 1]
        centre = ops.where(v_norm >= _NORM_FLOOR, direction, v / _NORM_FLOOR)
        scores = ops.einsum("bijo,bjo->bij", u_hat, centre)
        return scores if u_norm is None else scores / u_norm

    def _route(self, u_hat, valid):
        # Padded votes are zero already, so this sums over real inputs only.
        v = ops.sum(u_hat, axis=1) / float(self.n_out)  # [b, j, o]
        # the votes' lengths do not change over the iterations: once (each iteration's
        # norm kept several [b, i, j, o] temporaries for the gradient)
        u_norm = maximum(safe_norm(u_hat, axis=-1), _NORM_FLOOR) if self.similarity == "cosine" else None
        for _ in range(self.n_iters):
            c = couplings(self._scores(u_hat, v, u_norm), valid)
            v = ops.einsum("bij,bijo->bjo", c, u_hat)
        return v, c

    def get_config(self):
        config = super().get_config()
        config["similarity"] = self.similarity
        return config
