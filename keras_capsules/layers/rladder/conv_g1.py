"""ConvG1: the convolutional form of the G1 combinator (Ilin et al. 2017)."""

import keras
from keras import ops

from keras_capsules.layers.rladder._conv_combinator import ConvCombinatorBase
from keras_capsules.layers.rladder._elementwise_gate import ElementwiseGate


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvG1(ElementwiseGate, ConvCombinatorBase):
    """Convolutional decoder combinator ConvG1 of the Recurrent Ladder (paper appendix).

    As :class:`G1`, with ``u`` computed by a convolution of the top-down signal and
    the elementwise parameters shared over pixels (one value per channel):

    ```
    u  = A * up(x_top) + b                      (convolution, 'same' padding)
    mu = f(u; w_mu),  s = f(u; w_s),  f(u; w) = w0 * sigmoid(w1 * u + w2) + w3 * u + w4
    y  = x_lat * s + (1 - s) * mu
    ```

    Upsampling: where the encoder pooled by a factor ``upsample`` between this level
    and the one above, ``x_top`` is ``upsample`` times smaller in height and width.
    ``upsample_mode="nearest"`` repeats every pixel ``upsample`` times along both axes
    and then convolves with a ``kernel_size`` kernel; ``"transpose"`` replaces both by
    one transposed convolution with stride ``upsample`` and kernel size
    ``max(kernel_size, upsample)``. A vector ``x_top`` ``[batch, top_units]`` (a
    dense level above a convolutional one) is projected by a dense kernel: with
    ``vector_top="broadcast"`` to the channels, the same at every pixel (the top can
    then say *what* but not *where*), with ``"dense"`` to every pixel's channels
    (``H * W * C`` outputs reshaped to ``x_lat``'s shape: the mirror of the encoder
    flattening the map into the dense level). At the top level (``x_lat`` alone or
    ``[None, x_lat]``) ``u = b``, a learned bias per channel (zeros at first).

    Args:
        kernel_size: height and width of the convolution kernel of ``A``. Default 3.
        upsample: the factor between x_top's and x_lat's height and width. Default 1.
            A vector ``x_top`` has no height or width: it needs 1 (a ``ValueError``
            at build otherwise; configs saved before load with 1 and a warning).
        upsample_mode: ``"nearest"`` (default) or ``"transpose"`` (see above;
            needs ``upsample > 1``, since with 1 it would have no effect).
        vector_top: ``"broadcast"`` (default) or ``"dense"``: how a vector
            ``x_top`` reaches the pixels (see above). ``"dense"`` needs a vector
            ``x_top`` (a ``ValueError`` at build otherwise) and has
            ``top_units * H * W * C`` weights.
        kernel_initializer, bias_initializer: initializers of ``top_kernel`` and
            ``bias``. Defaults glorot uniform and zeros.
        mu_initializer, s_initializer: initializers of the ``[5, channels]``
            parameters of ``f`` (defaults ``mu = u``, ``s = sigmoid(u)``, as in G1).
        kernel_regularizer, bias_regularizer, mu_regularizer, s_regularizer: optional.
        kernel_constraint, bias_constraint, mu_constraint, s_constraint: optional.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[x_top, x_lat]``: ``x_lat`` ``[batch, H, W, C]``; ``x_top``
            ``[batch, H / upsample, W / upsample, C_top]`` or ``[batch, top_units]``;
            or ``x_lat`` alone / ``[None, x_lat]`` at the top level. Integer or
            boolean inputs are cast to the compute dtype.

    Returns:
        ``y`` of the shape of ``x_lat``.

    Example:

    ```python
    top = keras.Input((4, 4, 16))
    lateral = keras.Input((8, 8, 8))
    y = keras_capsules.layers.ConvG1(upsample=2)([top, lateral])   # (None, 8, 8, 8)
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (appendix).
    """

    def __init__(
        self,
        kernel_size=3,
        upsample=1,
        upsample_mode="nearest",
        vector_top="broadcast",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        mu_initializer=None,
        s_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        mu_regularizer=None,
        s_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        mu_constraint=None,
        s_constraint=None,
        **kwargs,
    ):
        super().__init__(
            kernel_size=kernel_size,
            upsample=upsample,
            upsample_mode=upsample_mode,
            vector_top=vector_top,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self._init_gate(mu_initializer, s_initializer, mu_regularizer, s_regularizer, mu_constraint, s_constraint)

    def build(self, input_shape):
        top, lat = self._shapes(input_shape)
        channels = self.lat_channels = lat[-1]
        self._build_top(top, channels, lat)
        self.bias = self._bias("bias", channels)
        self._build_gate(channels)
        self.built = True

    def call(self, inputs):
        x_top, x_lat = self._split_and_check(inputs)
        if x_top is None:
            u = ops.cast(self.bias, x_lat.dtype)
        else:
            u = self._top_signal(x_top, x_lat) + self.bias
        return self._gate(u, x_lat)

    def get_config(self):
        return self._gate_config(super().get_config())
