"""MixtureNLL: the negative log-likelihood of a per-pixel Gaussian mixture (RTagger).

Kept apart from ``keras_capsules.losses`` (owned elsewhere); re-exported there later.
"""

import math

import keras
from keras import ops


def _check_axis(group_axis, rank):
    axis = group_axis + rank if group_axis < 0 else group_axis
    if not 0 < axis < rank - 1:
        raise ValueError(
            "`group_axis` must name an axis of y_pred between the batch axis and the "
            f"channel axis. Received: group_axis={group_axis} for y_pred of rank {rank}"
        )
    return axis


def mixture_nll(x, m, pi, sigma, group_axis=1, from_logits=False, epsilon=1e-7):
    """Per-pixel ``-log sum_k pi_k N(x; m_k, sigma^2 I)``.

    Args:
        x: targets ``[batch, ..., C]`` (the shape of ``m`` without the group axis).
        m: group means ``[batch, ..., K, ..., C]`` with the groups at ``group_axis``.
        pi: group probabilities (or logits with ``from_logits=True``) of the shape of
            ``m`` with one channel.
        sigma: the fixed standard deviation.
        group_axis: the axis of ``m`` and ``pi`` that holds the groups.
        from_logits: ``pi`` holds logits (normalized by a log-softmax over groups).
        epsilon: lower bound on probabilities before their logarithm.

    Returns:
        The negative log-likelihood per pixel, of shape ``x.shape[:-1]``; computed in
        float32 with a log-sum-exp over groups.
    """
    rank = len(m.shape)
    axis = _check_axis(group_axis, rank)
    x = ops.expand_dims(ops.cast(x, "float32"), axis)
    m = ops.cast(m, "float32")
    pi = ops.cast(pi, "float32")
    channels = m.shape[-1]
    var = float(sigma) ** 2
    log_norm = -ops.sum(ops.square(x - m), axis=-1) / (2.0 * var) - 0.5 * channels * math.log(
        2.0 * math.pi * var
    )
    pi = pi[..., 0]
    if from_logits:
        log_pi = ops.log_softmax(pi, axis=axis)
    else:
        log_pi = ops.log(ops.maximum(pi, epsilon))
    return -ops.logsumexp(log_pi + log_norm, axis=axis)


@keras.saving.register_keras_serializable(package="keras_capsules")
class MixtureNLL(keras.losses.Loss):
    """Negative log-likelihood of a per-pixel Gaussian mixture (RTagger's cost).

    For groups ``k`` with means ``m_k`` and per-pixel probabilities ``pi_k`` the loss
    per pixel is

    ```
    -log sum_k pi_k N(x; m_k, sigma^2 I)
    ```

    computed stably as a negative log-sum-exp of ``log pi_k + log N`` in float32.
    ``N`` includes its normalizing constant, summed over the ``C`` channels. The
    per-pixel values are averaged (``reduction="sum_over_batch_size"``, default) or
    summed (``reduction="sum"``) by the usual Keras reduction.

    Args:
        sigma: the fixed standard deviation of the Gaussians. Default 0.5.
        group_axis: the axis of ``y_pred`` holding the groups. Default 1 (for
            ``[batch, K, ..., C + 1]``); 2 for RTagger's full output
            ``[batch, T, K, ...]``.
        from_logits: the last channel of ``y_pred`` holds logits, not probabilities.
        epsilon: lower bound on probabilities before their logarithm. Default 1e-7.
        reduction, name, dtype: as for every Keras loss.

    Call arguments:
        y_true: the data ``x``, the shape of ``y_pred`` without the group axis and
            with ``C`` channels.
        y_pred: ``ops.concatenate([m, pi], axis=-1)``: the means in the first ``C``
            channels and ``pi`` in the last one, groups at ``group_axis``.

    Returns:
        The reduced loss (a scalar by default).

    Example:

    ```python
    pi, m = keras_capsules.layers.RTagger(3, levels, n_iters=4)(images)
    packed = keras.ops.concatenate([m, pi], axis=-1)          # [b, T, K, H, W, C + 1]
    loss = MixtureNLL(sigma=0.5, group_axis=2)(targets, packed)  # targets [b, T, H, W, C]
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (equation (79)).
    """

    def __init__(
        self,
        sigma=0.5,
        group_axis=1,
        from_logits=False,
        epsilon=1e-7,
        reduction="sum_over_batch_size",
        name="mixture_nll",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not sigma > 0:
            raise ValueError(f"`sigma` must be a positive number. Received: sigma={sigma!r}")
        if isinstance(group_axis, bool) or not isinstance(group_axis, int) or group_axis == 0:
            raise ValueError(
                "`group_axis` must be a non-zero integer (the batch axis cannot hold "
                f"groups). Received: group_axis={group_axis!r}"
            )
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon > 0:
            raise ValueError(f"`epsilon` must be a positive number. Received: epsilon={epsilon!r}")
        self.sigma = float(sigma)
        self.group_axis = group_axis
        self.from_logits = bool(from_logits)
        self.epsilon = float(epsilon)

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        if len(y_true.shape) != len(y_pred.shape) - 1 or (
            y_true.shape[-1] is not None
            and y_pred.shape[-1] is not None
            and y_true.shape[-1] + 1 != y_pred.shape[-1]
        ):
            raise ValueError(
                "MixtureNLL expects y_pred = concatenate([m, pi], -1) with the groups at "
                f"group_axis={self.group_axis}, and y_true of rank one less with one channel "
                f"less. Received: y_true shape={tuple(y_true.shape)}, "
                f"y_pred shape={tuple(y_pred.shape)}"
            )
        return mixture_nll(
            y_true,
            y_pred[..., :-1],
            y_pred[..., -1:],
            self.sigma,
            group_axis=self.group_axis,
            from_logits=self.from_logits,
            epsilon=self.epsilon,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sigma": self.sigma,
                "group_axis": self.group_axis,
                "from_logits": self.from_logits,
                "epsilon": self.epsilon,
            }
        )
        return config
