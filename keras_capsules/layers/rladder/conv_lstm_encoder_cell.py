"""ConvLSTMEncoderCell: a ConvLSTM encoder level with decoder feedback (Ilin et al. 2017)."""

import keras

from keras_capsules.layers.rladder._utils import positive_int
from keras_capsules.layers.rladder.lstm_encoder_cell import LSTMEncoderCell, lstm_update
from keras_capsules.ops import conv_sum


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvLSTMEncoderCell(LSTMEncoderCell):
    """One step of a convolutional LSTM encoder level of a Recurrent Ladder.

    As :class:`LSTMEncoderCell` with every matrix product replaced by a 2-D
    convolution ('same' padding, stride 1, channels last): the decoder feedback ``d``
    of the previous step is concatenated (channel-wise) to the input ``x``.

    ```
    [i, f, g, o] = W * x + U * d + V * h + b
    c_new = sigmoid(f) * c + sigmoid(i) * tanh(g);  h_new = sigmoid(o) * tanh(c_new)
    ```

    Args:
        filters: channels of the states ``h`` and ``c``.
        kernel_size: height and width of the kernels. Default 3.
        use_feedback: whether the cell takes the decoder feedback ``d``. Default True.
        unit_forget_bias: add 1 to the forget gate's bias at initialization.
            Default True.
        kernel_initializer, feedback_initializer, recurrent_initializer,
            bias_initializer: initializers (recurrent: orthogonal by default). The
            feedback initializer, regularizer and constraint need
            ``use_feedback=True`` (a cell without feedback has no
            ``feedback_kernel``; they are a ``ValueError`` there).
        kernel_regularizer, feedback_regularizer, recurrent_regularizer,
            bias_regularizer: optional regularizers.
        kernel_constraint, feedback_constraint, recurrent_constraint,
            bias_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[x, d, h, c]`` (or ``[x, h, c]`` with ``use_feedback=False``):
            ``x`` ``[batch, H, W, C]``, ``d``, ``h`` and ``c`` ``[batch, H, W, filters]``.

    Returns:
        ``[h_new, c_new]``, each ``[batch, H, W, filters]``.

    Example:

    ```python
    cell = keras_capsules.layers.ConvLSTMEncoderCell(filters=8)
    x, d = keras.Input((16, 16, 1)), keras.Input((16, 16, 8))
    h, c = keras.Input((16, 16, 8)), keras.Input((16, 16, 8))
    h_new, c_new = cell([x, d, h, c])
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017; X. Shi et al.,
        "Convolutional LSTM Network", NIPS 2015.
    """

    NUM_STATES = 2
    INPUT_RANK = 4

    def __init__(self, filters, kernel_size=3, use_feedback=True, unit_forget_bias=True, **kwargs):
        filters = positive_int("filters", filters)
        if "units" in kwargs:  # (Python's "got multiple values for keyword argument 'units'")
            raise ValueError(
                "ConvLSTMEncoderCell takes its state size from `filters`, not `units`. "
                f"Received: units={kwargs['units']!r}"
            )
        super().__init__(
            units=filters, use_feedback=use_feedback, unit_forget_bias=unit_forget_bias, **kwargs
        )
        self.filters = filters
        self.kernel_size = positive_int("kernel_size", kernel_size)

    def _state_shape(self, x_shape):
        return (x_shape[1], x_shape[2], self.filters)

    def _build(self, x, fb, state):
        k, n = self.kernel_size, 4 * self.filters
        self.kernel = self._weight("kernel", "kernel", (k, k, x[-1], n))
        if self.use_feedback:
            self.feedback_kernel = self._weight(
                "feedback", "feedback_kernel", (k, k, self.filters, n)
            )
        self.recurrent_kernel = self._weight(
            "recurrent", "recurrent_kernel", (k, k, self.filters, n)
        )
        self.bias = self._lstm_bias(self.filters)

    def _step(self, x, d, states):
        h, c = states
        # W * x + R * h (+ U * d) as one convolution of [x, h, d] (ops.conv_sum)
        inputs, kernels = [x, h], [self.kernel, self.recurrent_kernel]
        if d is not None:
            inputs.append(d)
            kernels.append(self.feedback_kernel)
        return lstm_update(conv_sum(inputs, kernels, padding="same") + self.bias, c)

    def get_config(self):
        config = super().get_config()
        config.pop("units")
        config.update({"filters": self.filters, "kernel_size": self.kernel_size})
        return config
