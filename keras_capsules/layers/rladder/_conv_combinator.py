"""Private base of the convolutional combinators ConvG1, ConvG2 and ConvG3.

It handles what they share: the ``[x_top, x_lat]`` inputs, shape validation, the
top-down path (upsampling + convolution of ``x_top``, or a dense projection when
``x_top`` is a vector: broadcast over the pixels, or to every pixel with weights
of its own), and the kernel/bias arguments.
"""

import keras
from keras import ops

from keras_capsules._validation import check_floating_dtype, get_constraint, get_initializer, get_regularizer
from keras_capsules.layers.rladder._utils import (
    clone_initializer,
    float_inputs,
    UPSAMPLE_MODES,
    VECTOR_TOPS,
    batch_checked_when_run,
    check_same_batch,
    check_top_as_built,
    choice,
    loaded_upsample_mode,
    loaded_without_effect,
    positive_int,
    serialize_all,
    split_top_lateral,
    upsampled_conv,
)
from keras_capsules.ops import matmul

_BASE_INITIALIZERS = ("kernel_initializer", "bias_initializer")
_BASE_REGULARIZERS = ("kernel_regularizer", "bias_regularizer")
_BASE_CONSTRAINTS = ("kernel_constraint", "bias_constraint")


class ConvCombinatorBase(keras.layers.Layer):
    """Shared machinery; see ConvG1 for the public documentation of the arguments."""

    def __init__(
        self,
        kernel_size=3,
        upsample=1,
        upsample_mode="nearest",
        vector_top="broadcast",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.kernel_size = positive_int("kernel_size", kernel_size)
        self.upsample = positive_int("upsample", upsample)
        self.upsample_mode = choice("upsample_mode", upsample_mode, UPSAMPLE_MODES)
        if self.upsample_mode != "nearest" and self.upsample == 1:
            raise ValueError(
                "`upsample_mode` sets how x_top is upsampled, and upsample=1 upsamples nothing. "
                f"Received: upsample_mode={upsample_mode!r}, upsample=1"
            )
        self.vector_top = choice("vector_top", vector_top, VECTOR_TOPS)
        self.kernel_initializer = get_initializer("kernel_initializer", kernel_initializer)
        self.bias_initializer = get_initializer("bias_initializer", bias_initializer)
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.bias_regularizer = get_regularizer("bias_regularizer", bias_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.bias_constraint = get_constraint("bias_constraint", bias_constraint)

    # ------------------------------------------------------------------ shapes
    def _shapes(self, input_shape):
        name = type(self).__name__
        if isinstance(input_shape, (list, tuple)) and input_shape and not all(
            d is None or isinstance(d, int) for d in input_shape
        ):
            top, lat = split_top_lateral(name, list(input_shape))
        else:
            top, lat = None, input_shape
        lat = tuple(lat)
        if len(lat) != 4 or any(d is None for d in lat[1:]):
            raise ValueError(
                f"{name} expects x_lat of shape [batch, height, width, channels] (rank 4, "
                f"channels last, known sizes). Received: x_lat shape={lat}"
            )
        if top is not None:
            top = tuple(top)
            if len(top) == 2:
                if top[-1] is None:
                    raise ValueError(
                        f"{name} expects a vector x_top of shape [batch, top_units] with "
                        f"known top_units. Received: x_top shape={top}"
                    )
                self._check_vector_top_upsample(top)
            elif len(top) == 4:
                if lat[1] % self.upsample or lat[2] % self.upsample:
                    raise ValueError(
                        f"{name} with upsample={self.upsample} needs the height and width "
                        f"of x_lat divisible by {self.upsample} (x_top is x_lat's size "
                        f"divided by it). Received: x_lat shape={lat}"
                    )
                expected = (lat[1] // self.upsample, lat[2] // self.upsample)
                if top[3] is None or tuple(top[1:3]) != expected:
                    raise ValueError(
                        f"{name} with upsample={self.upsample} expects x_top of shape "
                        f"[batch, {expected[0]}, {expected[1]}, top_channels] for x_lat of "
                        f"shape {lat}. Received: x_top shape={top}"
                    )
            else:
                raise ValueError(
                    f"{name} expects x_top of shape [batch, height, width, channels] or "
                    f"[batch, top_units]. Received: x_top shape={top}"
                )
            check_same_batch(name, [("x_top", top), ("x_lat", lat)])
        elif self.upsample > 1:
            self._check_no_top_upsample()
        if self.built:  # on every call, symbolic too (a reuse on other sizes built the model)
            self._check_built(top, lat)
        return top, lat

    def _check_built(self, top, lat):
        """The inputs are those the weights were built for: x_top's rank and channels
        (and, for a dense vector x_top, x_lat's height and width), x_lat's channels.
        Other heights and widths are fine: a convolution does not depend on them."""
        name = type(self).__name__
        check_top_as_built(name, self.top_rank is not None, top)
        if top is not None:
            built_top = self._built_top_shape
            dense = len(top) == 2 and self.vector_top == "dense"
            if (
                len(top) != self.top_rank
                or top[-1] != built_top[-1]
                or (dense and tuple(lat[1:3]) != self._built_lat_shape[:2])
            ):
                expected = f"[batch, {built_top[-1]}]" if self.top_rank == 2 else f"[batch, height, width, {built_top[-1]}]"
                raise ValueError(
                    f"This {name} layer was built for x_top of shape {expected}"
                    + (f" and x_lat of height and width {self._built_lat_shape[:2]}" if dense else "")
                    + f". Received: x_top shape={top}, x_lat shape={lat}"
                )
        if lat[-1] != self.lat_channels:
            raise ValueError(
                f"This {name} layer was built for x_lat of shape [batch, height, width, "
                f"{self.lat_channels}]. Received: x_lat shape={lat}"
            )

    def _refuse_upsample(self, where, without, message, received=""):
        """Refuses ``upsample > 1`` where there is nothing to upsample (``message``), or,
        for a layer loaded from a config saved before it was refused (it was ignored),
        takes ``upsample=1`` instead with a warning: the same weights and outputs."""
        if getattr(self, "_from_saved_config", False):
            self.upsample = loaded_without_effect(f"{type(self).__name__} {where}: ", "upsample", self.upsample, 1,
                                                  without)
            self.upsample_mode = "nearest"
            return
        raise ValueError(
            f"{message} Received: upsample={self.upsample}, upsample_mode={self.upsample_mode!r}{received}"
        )

    def _check_no_top_upsample(self):
        """Without x_top there is nothing to upsample: ``upsample > 1`` is refused, as
        ``vector_top`` is (it was accepted and did nothing)."""
        self._refuse_upsample(
            "without x_top", "without x_top",
            f"`upsample` sets how x_top is upsampled; this {type(self).__name__} has no x_top, "
            "so it would have no effect.",
        )

    def _check_vector_top_upsample(self, top):
        """A vector x_top has no height or width to upsample: ``upsample > 1`` is refused."""
        if self.upsample == 1:
            return
        self._refuse_upsample(
            "with a vector x_top", "on a vector x_top",
            f"{type(self).__name__} broadcasts a vector x_top [batch, top_units] (a dense "
            "level above) over all pixels of x_lat; it has no height or width to upsample, "
            "so it needs upsample=1.", f", x_top shape={top}",
        )

    def compute_output_shape(self, input_shape):
        return self._shapes(input_shape)[1]

    # ------------------------------------------------------------------ weights
    def _kernel(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=clone_initializer(self.kernel_initializer, f"{type(self).__name__}/{name}"),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )

    def _bias(self, name, size):
        return self.add_weight(
            name=name,
            shape=(size,),
            initializer=clone_initializer(self.bias_initializer, f"{type(self).__name__}/{name}"),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )

    def _conv_kernel(self, name, in_channels, out_channels):
        k = self.kernel_size
        return self._kernel(name, (k, k, in_channels, out_channels))

    def _build_top(self, top, out_channels, lat):
        """Creates ``top_kernel`` mapping x_top to ``out_channels`` (None without top)."""
        self.top_rank = None if top is None else len(top)
        self._built_top_shape = None if top is None else tuple(top[1:])
        self._built_lat_shape = tuple(lat[1:])
        if self.vector_top != "broadcast" and self.top_rank != 2:
            raise ValueError(
                f"`vector_top` sets how a vector x_top [batch, top_units] reaches the pixels; "
                f"this {type(self).__name__} has "
                + ("no x_top" if top is None else f"an x_top image of shape {top}")
                + f", so it would have no effect. Received: vector_top={self.vector_top!r}"
            )
        if top is None:
            return
        if len(top) == 2 and self.vector_top == "dense":  # every pixel's channels
            self.top_kernel = self._kernel("top_kernel", (top[-1], lat[1] * lat[2] * out_channels))
        elif len(top) == 2:
            self.top_kernel = self._kernel("top_kernel", (top[-1], out_channels))
        elif self.upsample > 1 and self.upsample_mode == "transpose":
            k = max(self.kernel_size, self.upsample)
            self.top_kernel = self._kernel("top_kernel", (k, k, out_channels, top[-1]))
        else:
            self.top_kernel = self._conv_kernel("top_kernel", top[-1], out_channels)

    def _top_signal(self, x_top, x_lat):
        """The top-down contribution to ``u``, broadcastable to x_lat's spatial shape."""
        if len(x_top.shape) == 2:  # (upsample is 1: see _check_vector_top_upsample)
            if self.vector_top == "dense":
                height, width = x_lat.shape[1], x_lat.shape[2]
                channels = self.top_kernel.shape[-1] // (height * width)
                return ops.reshape(matmul(x_top, self.top_kernel), (-1, height, width, channels))
            return matmul(x_top, self.top_kernel)[:, None, None, :]
        if self.upsample > 1 and self.upsample_mode == "transpose":
            return ops.conv_transpose(
                x_top, self.top_kernel, strides=self.upsample, padding="same"
            )
        # (the convolution of the nearest upsampling, computed at x_top's resolution)
        return upsampled_conv(x_top, ops.cast(self.top_kernel, x_top.dtype), self.upsample)

    def _split_and_check(self, inputs):
        name = type(self).__name__
        # integer or boolean inputs: Keras casts only floating inputs to the compute dtype
        x_top, x_lat = float_inputs(self, *split_top_lateral(name, inputs))
        # the shapes against each other and against the weights (_shapes, once built),
        # and the batch sizes where they are unknown until the layer runs
        self._shapes(tuple(x_lat.shape) if x_top is None else [tuple(x_top.shape), tuple(x_lat.shape)])
        if x_top is not None:
            x_top = batch_checked_when_run(name, [("x_top", x_top), ("x_lat", x_lat)])
        return x_top, x_lat

    @classmethod
    def from_config(cls, config):
        if config.get("upsample_mode") == "transpose" and config.get("upsample", 1) == 1:
            config = dict(config, upsample_mode=loaded_upsample_mode(f"{cls.__name__}: "))
        layer = super().from_config(config)
        layer._from_saved_config = True  # upsample > 1 for a vector x_top: _check_vector_top_upsample
        return layer

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel_size": self.kernel_size,
                "upsample": self.upsample,
                "upsample_mode": self.upsample_mode,
                "vector_top": self.vector_top,
            }
        )
        serialize_all(config, self, _BASE_INITIALIZERS, "initializers")
        serialize_all(config, self, _BASE_REGULARIZERS, "regularizers")
        serialize_all(config, self, _BASE_CONSTRAINTS, "constraints")
        return config
