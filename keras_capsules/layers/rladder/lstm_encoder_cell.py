"""LSTMEncoderCell: an LSTM encoder level with decoder feedback (Ilin et al. 2017)."""

import keras
from keras import ops

from keras_capsules._validation import boolean
from keras_capsules.layers.rladder._cell_base import EncoderCellBase
from keras_capsules.layers.rladder._utils import positive_int
from keras_capsules.ops import matmul, tanh


def lstm_update(pre, c):
    """The LSTM state update from gate pre-activations ``[..., 4 * units]`` (i, f, g, o)."""
    i, f, g, o = ops.split(pre, 4, axis=-1)
    # (keras_capsules.ops.tanh: keras.ops.tanh is float32 for float64 on JAX)
    c_new = ops.sigmoid(f) * c + ops.sigmoid(i) * tanh(g)
    return [ops.sigmoid(o) * tanh(c_new), c_new]


@keras.saving.register_keras_serializable(package="keras_capsules")
class LSTMEncoderCell(EncoderCellBase):
    """One step of an LSTM encoder level of a Recurrent Ladder.

    The decoder feedback ``d`` of the previous step is concatenated to the bottom-up
    input ``x`` and the result drives a standard LSTM (gates ``i, f, o``, candidate
    ``g``). The concatenation is implemented as a separate ``feedback_kernel`` (the
    rows of the input kernel that ``d`` would meet), which is the same thing:

    ```
    [i, f, g, o] = x W + d U + h V + b
    c_new = sigmoid(f) * c + sigmoid(i) * tanh(g);  h_new = sigmoid(o) * tanh(c_new)
    ```

    Args:
        units: size of the states ``h`` and ``c``.
        use_feedback: whether the cell takes the decoder feedback ``d``. Default True.
        unit_forget_bias: add 1 to the forget gate's bias at initialization.
            Default True.
        kernel_initializer, feedback_initializer, recurrent_initializer,
            bias_initializer: initializers of ``kernel``, ``feedback_kernel``,
            ``recurrent_kernel`` (orthogonal by default) and ``bias``. The
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
            ``x`` ``[batch, features]``, ``d``, ``h`` and ``c`` ``[batch, units]``.

    Returns:
        ``[h_new, c_new]``, each ``[batch, units]``; ``h_new`` is the level's output.

    Example:

    ```python
    cell = keras_capsules.layers.LSTMEncoderCell(units=32)
    x, d = keras.Input((10,)), keras.Input((32,))
    h, c = keras.Input((32,)), keras.Input((32,))
    h_new, c_new = cell([x, d, h, c])
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017; S. Hochreiter and
        J. Schmidhuber, "Long Short-Term Memory", 1997.
    """

    NUM_STATES = 2
    INPUT_RANK = 2

    def __init__(self, units, use_feedback=True, unit_forget_bias=True, **kwargs):
        super().__init__(use_feedback=use_feedback, **kwargs)
        self.units = positive_int("units", units)
        self.unit_forget_bias = boolean("unit_forget_bias", unit_forget_bias)

    def _state_shape(self, x_shape):
        return (self.units,)

    def _lstm_bias(self, n_channels):
        bias = self._weight("bias", "bias", (4 * n_channels,))
        if self.unit_forget_bias:
            bias.assign(bias + ops.concatenate(
                [ops.zeros((n_channels,)), ops.ones((n_channels,)), ops.zeros((2 * n_channels,))]
            ))
        return bias

    def _build(self, x, fb, state):
        n = 4 * self.units
        self.kernel = self._weight("kernel", "kernel", (x[-1], n))
        if self.use_feedback:
            self.feedback_kernel = self._weight("feedback", "feedback_kernel", (self.units, n))
        self.recurrent_kernel = self._weight("recurrent", "recurrent_kernel", (self.units, n))
        self.bias = self._lstm_bias(self.units)

    def _step(self, x, d, states):
        h, c = states
        pre = matmul(x, self.kernel) + matmul(h, self.recurrent_kernel) + self.bias
        if d is not None:
            pre = pre + matmul(d, self.feedback_kernel)
        return lstm_update(pre, c)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "unit_forget_bias": self.unit_forget_bias})
        return config
