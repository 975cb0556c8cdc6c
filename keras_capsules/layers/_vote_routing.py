"""Shared machinery of the vote-based routing layers (DynamicRouting, KMeansRouting).

Private: the public layers are the subclasses. This module holds what both need and
nothing algorithm-specific: argument validation, the ``kernel`` weight, the votes
``u_hat[b, i, j, :] = u[b, i, :] @ kernel[(i,) j]``, mask handling and the output
shapes/specs (one output, or two with the coupling coefficients).
"""

import numbers

import keras
from keras import ops

from keras_capsules.layers._own_casting import OwnCastingLayer
from keras_capsules._validation import (  # noqa: F401 (used by subclasses)
    boolean,
    check_floating_dtype,
    exactly_shaped_like,
    get_constraint,
    get_initializer,
    get_regularizer,
    positive_int,
)
from keras_capsules.ops import routing_dtype, shifted_softmax, squash


def shape_tuple(shape):
    """``shape`` as a tuple of Python ints and None, or None if it is not a shape.

    Accepts tuples, lists and ``TensorShape``-like objects (anything with
    ``as_list()``, such as ``tensor.shape`` of a backend tensor) whose dimensions are
    integers (numpy integers too) or None.
    """
    if hasattr(shape, "as_list"):
        try:
            shape = shape.as_list()
        except ValueError:  # unknown rank
            return None
    if not isinstance(shape, (list, tuple)):
        return None
    dims = []
    for d in shape:
        if d is not None and (isinstance(d, bool) or not isinstance(d, numbers.Integral)):
            return None
        dims.append(None if d is None else int(d))
    return tuple(dims)


def shape_of(inputs):
    """The shape of a tensor, or the list of shapes of a list of them (which the
    layers' shape checks refuse with their message, as ``build`` does)."""
    if isinstance(inputs, (list, tuple)):
        return [getattr(x, "shape", None) for x in inputs]
    return inputs.shape


def mask_list(mask):
    """The masks given as ``mask``, a list without the Nones.

    ``mask`` is one mask or a list of masks (one per input, as Keras passes them). A
    mask may be a tensor, a numpy array or nested Python lists of booleans, which are
    one mask (converted to a tensor), not a list of masks.
    """
    if mask is None:
        return []
    if isinstance(mask, (list, tuple)) and all(m is None or hasattr(m, "shape") for m in mask):
        return [m for m in mask if m is not None]
    return [mask if hasattr(mask, "shape") else ops.convert_to_tensor(mask)]


class VoteRouting(OwnCastingLayer):
    """Base of routing layers whose inputs cast linear votes for every output.

    Subclasses implement ``_route(u_hat, valid)`` which receives the votes
    ``[batch, n_in, n_out, d_out]`` (zero at padded inputs), the boolean validity
    ``[batch, n_in]`` (or None) and returns ``(s, c)``: the pre-squash output vectors
    ``[batch, n_out, d_out]`` and the last coupling coefficients ``[batch, n_in, n_out]``
    (zero at padded inputs). Everything runs in the routing dtype.
    """

    def __init__(
        self,
        n_out,
        d_out,
        n_iters=3,
        shared_weights=True,
        return_couplings=False,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.n_out = positive_int("n_out", n_out)
        self.d_out = positive_int("d_out", d_out)
        self.n_iters = positive_int("n_iters", n_iters)
        self.shared_weights = boolean("shared_weights", shared_weights)
        self.return_couplings = boolean("return_couplings", return_couplings)
        self.kernel_initializer = get_initializer("kernel_initializer", kernel_initializer)
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.supports_masking = True

    # ------------------------------------------------------------------ shapes
    def _check_shape(self, input_shape):
        name = type(self).__name__
        shape = shape_tuple(input_shape)
        if shape is None:
            raise ValueError(
                f"{name} expects one input of shape [batch, n_in, d_in]. "
                f"Received: input_shape={input_shape}"
            )
        if len(shape) != 3:
            raise ValueError(
                f"{name} expects input capsules of shape [batch, n_in, d_in] (rank 3). "
                f"Received: input_shape={shape}"
            )
        if shape[2] is None:
            raise ValueError(
                f"{name} needs the capsule dimension d_in (axis 2 of [batch, n_in, d_in]) "
                f"to be known. Received: input_shape={shape}"
            )
        if not self.shared_weights and shape[1] is None:
            raise ValueError(
                f"{name} with shared_weights=False has one weight matrix per input capsule, "
                "so the number of input capsules n_in (axis 1 of [batch, n_in, d_in]) must "
                f"be static. Received: input_shape={shape}"
            )
        if self.built:
            expected_n = "n_in" if self.shared_weights else str(self.n_in)
            if shape[2] != self.d_in or (
                not self.shared_weights and shape[1] is not None and shape[1] != self.n_in
            ):
                raise ValueError(
                    f"This {name} layer was built for inputs of shape "
                    f"[batch, {expected_n}, {self.d_in}]. Received: input_shape={shape}"
                )
        return shape

    def build(self, input_shape):
        shape = self._check_shape(input_shape)
        self.d_in = int(shape[2])
        self.n_in = None if self.shared_weights else int(shape[1])
        kernel_shape = (self.n_out, self.d_in, self.d_out)
        if not self.shared_weights:
            kernel_shape = (self.n_in,) + kernel_shape
        self.kernel = self.add_weight(
            name="kernel",
            shape=kernel_shape,
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.built = True

    def compute_output_shape(self, input_shape):
        shape = self._check_shape(input_shape)
        out = (shape[0], self.n_out, self.d_out)
        if self.return_couplings:
            return [out, (shape[0], shape[1], self.n_out)]
        return out

    def compute_output_spec(self, inputs, mask=None):
        shapes = self.compute_output_shape(tuple(inputs.shape))
        self._single_mask(mask, tuple(inputs.shape))  # as call checks it
        if self.return_couplings:
            return [keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes]
        return keras.KerasTensor(shapes, dtype=self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        # Output capsules are never padding.
        return [None, None] if self.return_couplings else None

    # ------------------------------------------------------------------ call
    def _single_mask(self, mask, input_shape):
        """The one mask in ``mask`` (None if there is none), its sizes checked against
        those of the inputs where both are known.

        Runs on every call, symbolic too (``compute_output_spec``): a mask of another
        shape was accepted when the model was built and refused only in predict.
        """
        masks = mask_list(mask)
        if len(masks) > 1:
            raise ValueError(
                f"{type(self).__name__} takes a single mask of shape [batch, n_in]. "
                f"Received: {len(masks)} masks"
            )
        if not masks:
            return None
        mask = masks[0]
        batch, n_in = input_shape[0], input_shape[1]
        if len(mask.shape) != 2 or (
            n_in is not None and mask.shape[1] is not None and mask.shape[1] != n_in
        ):
            raise ValueError(
                f"{type(self).__name__} expects a mask of shape [batch, n_in] = "
                f"[batch, {n_in}]. Received: mask shape={tuple(mask.shape)}"
            )
        if batch is not None and mask.shape[0] is not None and mask.shape[0] != batch:
            raise ValueError(
                f"{type(self).__name__} expects a mask with one row per sample, of shape "
                f"[batch, n_in] = [{batch}, {n_in}]. Received: mask shape={tuple(mask.shape)}"
            )
        return mask

    def _valid(self, mask, inputs):
        mask = self._single_mask(mask, tuple(inputs.shape))
        if mask is None:
            return None
        batch, n_in = inputs.shape[0], inputs.shape[1]
        mask = ops.cast(mask, "bool")
        if None in (batch, n_in) or None in tuple(mask.shape):
            # sizes unknown at the call (a tf.function traced for any batch or n_in): a
            # mask [batch, 1], [1, n_in] or [1, 1] must fail when the layer runs, not be
            # broadcast over the inputs
            mask = exactly_shaped_like(mask, ops.ones(ops.shape(inputs)[:2], "bool"))
        return mask

    def votes(self, inputs, mask=None):
        """The votes ``u_hat`` ``[batch, n_in, n_out, d_out]`` in the routing dtype.

        Padded inputs (``mask == False``) are replaced by zeros before the product,
        so their votes are zero whatever they held (even NaN or inf).
        """
        dtype = routing_dtype(self.compute_dtype)
        u = ops.cast(inputs, dtype)
        valid = self._valid(mask, inputs)
        if valid is not None:
            # expand_dims, not valid[:, :, None]: a boolean strided slice needs TFLite's Flex ops
            u = ops.where(ops.expand_dims(valid, -1), u, ops.zeros_like(u))
        kernel = ops.cast(self.kernel, dtype)
        if not self.shared_weights:
            return ops.einsum("bid,ijdo->bijo", u, kernel)
        u_hat = ops.einsum("bid,jdo->bijo", u, kernel)
        if 0 in tuple(u.shape[:2]):
            # Keras' TensorFlow einsum computes this product (n_in known) as a matmul
            # reshaped to [-1, n_in, n_out, d_out]: with n_in = 0 the -1 is no longer
            # determined and a batch of 0 came out as 1 (outputs [1, n_out, d_out]).
            u_hat = ops.reshape(u_hat, (ops.shape(u)[0], ops.shape(u)[1]) + tuple(u_hat.shape[2:]))
        return u_hat

    def call(self, inputs, mask=None):
        if is_ragged(inputs):
            inputs, mask = dense_from_ragged(inputs, mask)
        self._check_shape(shape_of(inputs))
        valid = self._valid(mask, inputs)
        u_hat = self.votes(inputs, mask=valid)
        s, c = self._route(u_hat, valid)
        outputs = ops.cast(squash(s), self.compute_dtype)
        if self.return_couplings:
            return [outputs, ops.cast(c, self.compute_dtype)]
        return outputs

    def _route(self, u_hat, valid):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "n_out": self.n_out,
                "d_out": self.d_out,
                "n_iters": self.n_iters,
                "shared_weights": self.shared_weights,
                "return_couplings": self.return_couplings,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            }
        )
        return config


def is_ragged(x):
    """Whether ``x`` is a ragged tensor (TensorFlow's ``tf.RaggedTensor``)."""
    return hasattr(x, "flat_values") and hasattr(x, "to_tensor")


def dense_from_ragged(inputs, mask):
    """Ragged input capsules ``[batch, (n_in), ...]`` as zero-padded ones and the mask
    of their real positions (and of ``mask``, padded with False, if one is given)."""
    # The real positions of the ragged axis 1 only (flat_values would give a mask of
    # the full rank for a tensor of ragged_rank > 1, e.g. tf.ragged.constant's default).
    dense = inputs.to_tensor()
    lengths = ops.cast(inputs.row_lengths(), "int32")  # [batch]
    valid = ops.arange(ops.shape(dense)[1], dtype="int32")[None, :] < lengths[:, None]
    masks = mask_list(mask)
    if len(masks) == 1:
        m = masks[0]
        m = m.to_tensor(default_value=False) if is_ragged(m) else m
        valid = ops.logical_and(valid, ops.cast(m, "bool"))
    elif masks:
        valid = masks  # several masks: refused by _valid
    return dense, valid


def couplings(logits, valid):
    """Softmax over outputs (last axis, :func:`keras_capsules.ops.shifted_softmax`, finite
    and with float64-true gradients also for logits of 1e9-1e12); rows of padded inputs
    are exactly zero."""
    if logits.shape[-1] == 1:
        # A single output takes every input whole (Keras warns on a softmax over one entry).
        c = ops.ones_like(logits)
    else:
        c = shifted_softmax(logits)
    if valid is None:
        return c
    return ops.where(ops.expand_dims(valid, -1), c, ops.zeros_like(c))
