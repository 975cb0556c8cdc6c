"""ConvG3: the convolutional mixing combinator of the Recurrent Ladder (Ilin et al. 2017)."""

import keras
from keras import ops

from keras_capsules.layers.rladder._hidden_combinator import HiddenConvCombinatorBase


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvG3(HiddenConvCombinatorBase):
    """Convolutional decoder combinator ConvG3 of the Recurrent Ladder (paper appendix).

    A hidden layer sees both inputs; the output mixes two candidate maps with a gate:

    ```
    u   = relu(A1 * up(x_top) + B1 * x_lat + b1)    (convolutions, `filters` channels)
    mu1 = W1 * u + c1,  mu2 = W2 * u + c2,  s = sigmoid(Ws * u + cs)
    y   = s * mu1 + (1 - s) * mu2
    ```

    The lateral signal reaches ``y`` only through ``u``. All convolutions use
    ``kernel_size`` kernels and 'same' padding. Upsampling of ``x_top``, a vector
    ``x_top`` and the top level (no ``x_top``: the ``A1`` term is dropped) are
    handled as in :class:`ConvG1`.

    Args:
        filters: channels of ``u``; None (default) uses the channels of ``x_lat``.
        kernel_size: height and width of every convolution kernel. Default 3.
        upsample: the factor between x_top's and x_lat's height and width. Default 1.
            A vector ``x_top`` has no height or width: it needs 1 (a ``ValueError``
            at build otherwise; configs saved before load with 1 and a warning).
        upsample_mode: ``"nearest"`` (default) or ``"transpose"`` (see ConvG1).
        vector_top: ``"broadcast"`` (default) or ``"dense"``: how a vector
            ``x_top`` reaches the pixels (see ConvG1).
        kernel_initializer, bias_initializer: initializers of every kernel and bias.
        kernel_regularizer, bias_regularizer: optional regularizers.
        kernel_constraint, bias_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[x_top, x_lat]`` as for :class:`ConvG1`, or ``x_lat`` alone.
            Integer or boolean inputs are cast to the compute dtype.

    Returns:
        ``y`` of the shape of ``x_lat``.

    Example:

    ```python
    top = keras.Input((4, 4, 16))
    lateral = keras.Input((8, 8, 8))
    y = keras_capsules.layers.ConvG3(upsample=2, upsample_mode="transpose")([top, lateral])
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (appendix).
    """

    HEADS = ("mu1", "mu2", "s")

    def call(self, inputs):
        u, _ = self._hidden(inputs)
        s = ops.sigmoid(self._head("s", u))
        return s * self._head("mu1", u) + (1.0 - s) * self._head("mu2", u)
