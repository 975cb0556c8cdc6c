"""CapsuleLength: the lengths of capsule vectors, used as class scores."""

import keras
from keras import ops

from keras_capsules._validation import check_floating_dtype
from keras_capsules.layers._vote_routing import shape_of, shape_tuple
from keras_capsules.ops import routing_dtype, safe_norm


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleLength(keras.layers.Layer):
    """The Euclidean length of every capsule vector (the last axis).

    After a squash the length of an output capsule lies in ``[0, 1)`` and is read as
    the probability that its entity (e.g. its class) is present, so the lengths of
    the class capsules are the class scores a margin or focal loss is applied to.

    The norm has a finite (zero) gradient at the zero vector, where
    ``sqrt(sum(x^2))`` would give NaN; lengths below ``1e-12`` (the epsilon of
    :func:`~keras_capsules.ops.safe_norm`) are returned as 0, with a zero gradient.
    It is computed in float32 under mixed precision and cast back to the compute
    dtype. The layer has no weights. A mask
    over the capsules (e.g. ``[batch, n_caps]`` for inputs ``[batch, n_caps, d]``)
    passes through unchanged.

    Args:
        **kwargs: base layer arguments (``name``, ``dtype``, ...); the dtype (or
            policy) must be floating.

    Call arguments:
        inputs: capsules, shape ``[..., d]`` (rank at least 2).

    Returns:
        The lengths, shape ``[...]`` (the last axis removed).

    Example:

    ```python
    caps = keras.Input((10, 16))                     # 10 class capsules of 16
    scores = keras_capsules.layers.CapsuleLength()(caps)   # [batch, 10]
    ```

    Reference:
        S. Sabour, N. Frosst, G. E. Hinton, "Dynamic Routing Between Capsules",
        NeurIPS 2017 (section 3: the length of a digit capsule as class score).
    """

    def __init__(self, **kwargs):
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.supports_masking = True

    def _check_shape(self, input_shape):
        shape = shape_tuple(input_shape)  # None for a list of shapes (several inputs)
        if shape is None or len(shape) < 2 or shape[-1] is None:
            raise ValueError(
                "CapsuleLength expects capsules of shape [batch, ..., d] (rank >= 2, "
                f"known capsule dimension d). Received: input_shape={input_shape}"
            )
        return shape

    def build(self, input_shape):
        self._check_shape(input_shape)
        self.built = True

    def compute_output_shape(self, input_shape):
        return self._check_shape(input_shape)[:-1]

    def compute_mask(self, inputs, mask=None):
        return mask

    def call(self, inputs):
        self._check_shape(shape_of(inputs))  # a list, after build, was an AttributeError
        x = ops.cast(inputs, routing_dtype(self.compute_dtype))
        return ops.cast(safe_norm(x, axis=-1), self.compute_dtype)
