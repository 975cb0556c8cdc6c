"""ConvEncoderCell: a feed-forward convolutional encoder level with decoder feedback."""

import keras
from keras import ops

from keras_capsules.layers.rladder._cell_base import EncoderCellBase
from keras_capsules.layers.rladder._utils import normalize, positive_int
from keras_capsules.ops import conv_sum, tanh

NORMALIZATIONS = (None, "instance", "layer")
ACTIVATIONS = ("relu", "leaky_relu", "elu", "gelu", "tanh", "linear")


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvEncoderCell(EncoderCellBase):
    """One step of a feed-forward convolutional encoder level of a Recurrent Ladder.

    The Recurrent Ladder's encoder cell at a level may be recurrent or feed-forward
    (Ilin et al. 2017, section 2): here it has no state of its own; what it knows of
    the past comes only through the decoder feedback ``d`` (this level's decoder
    output at the previous step), concatenated channel-wise to the bottom-up input
    ``x``:

    ```
    h = activation(W * x + U * d + b)          (2-D convolutions, 'same' padding)
    ```

    With ``use_feedback=False`` the cell is a plain convolution with an activation:
    a ladder of such levels (and no feedback) is a per-frame convolutional network
    whose only memory is in its recurrent levels above. Unlike the ConvLSTM cell it
    does not squash its output through gates, so a stack of such levels passes the
    signal on at the scale of the frames (ReLU with Glorot kernels, as a plain
    convolutional network) and each costs one convolution of the input and one of the
    feedback instead of three convolutions (input, feedback, state) with four times
    the channels. With a ``normalization``:

    ```
    h = activation(gamma * normalize(W * x + U * d) + b)
    ```

    Normalization of the pre-activations, per sample (no batch statistics, so the
    same in training and inference, whatever the step): ``"instance"`` over height
    and width, separately for every channel (Ulyanov et al. 2016), ``"layer"`` over
    height, width and channels (Ba et al. 2016); then a learned gain ``gamma`` per
    channel (ones at first) and the bias ``b``. In a ladder trained with a
    next-frame cost at the bottom, the cost pushes the upper convolutional levels
    towards silence (their lateral output only disturbs the prediction at first):
    on Occluded Moving MNIST most ReLU channels of the third level were dead after
    a few hundred updates without normalization, and the classifier above them
    stayed at chance; with ``"instance"`` every channel's pre-activations have zero
    mean and unit variance over the pixels of every sample (only a large negative
    bias could silence it), and the ladder left chance within the first 250
    updates.
    (``"layer"`` allows single channels to die, and did not help there.)

    Args:
        filters: output channels.
        kernel_size: height and width of the kernels. Default 3.
        activation: ``"relu"`` (default), ``"leaky_relu"``, ``"elu"``, ``"gelu"``,
            ``"tanh"`` or ``"linear"``.
        normalization: None (default), ``"instance"`` or ``"layer"`` (see above).
        use_feedback: whether the cell takes the decoder feedback ``d``. Default True.
        kernel_initializer, feedback_initializer, bias_initializer: initializers of
            ``kernel`` (``W``), ``feedback_kernel`` (``U``) and ``bias`` (``b``).
            The feedback initializer, regularizer and constraint need
            ``use_feedback=True`` (a cell without feedback has no ``U``; they are
            a ``ValueError`` there).
        kernel_regularizer, feedback_regularizer, bias_regularizer: optional.
        kernel_constraint, feedback_constraint, bias_constraint: optional.
        recurrent_initializer, recurrent_regularizer, recurrent_constraint: accepted
            for a uniform interface with the recurrent cells and unused (the cell
            has no recurrent kernel).
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[x, d]`` (or ``[x]`` / ``x`` with ``use_feedback=False``): ``x``
            ``[batch, H, W, C]``, ``d`` ``[batch, H, W, filters]``.

    Returns:
        ``h`` ``[batch, H, W, filters]``, the level's output. The cell has no state
        (``NUM_STATES = 0``): in a ladder, ``step`` returns ``(h, [])``.

    Example:

    ```python
    cell = keras_capsules.layers.ConvEncoderCell(filters=8)
    x, d = keras.Input((16, 16, 1)), keras.Input((16, 16, 8))
    h = cell([x, d])                                       # (None, 16, 16, 8)
    ```

    Reference:
        A. Ilin, I. Prémont-Schwarz, T. H. Hao, A. Rasmus, R. Boney, H. Valpola,
        "Recurrent Ladder Networks", NIPS 2017.
    """

    NUM_STATES = 0
    INPUT_RANK = 4
    #: pre-activation channels per output channel (the gated cell's three gates)
    GATES = 1

    def __init__(
        self,
        filters,
        kernel_size=3,
        activation="relu",
        use_feedback=True,
        normalization=None,
        **kwargs,
    ):
        super().__init__(use_feedback=use_feedback, **kwargs)
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"`normalization` must be one of {NORMALIZATIONS}. "
                f"Received: normalization={normalization!r}"
            )
        self.normalization = normalization
        self.filters = positive_int("filters", filters)
        self.kernel_size = positive_int("kernel_size", kernel_size)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"`activation` must be one of {ACTIVATIONS}. Received: activation={activation!r}"
            )
        self.activation = activation

    def _state_shape(self, x_shape):
        return (x_shape[1], x_shape[2], self.filters)

    def _state_names(self):
        return []

    def _as_list(self, inputs):
        # a single tensor is accepted when the cell takes no feedback
        if not isinstance(inputs, (list, tuple)) and not self.use_feedback:
            return [inputs]
        return inputs

    def _as_shape_list(self, input_shape):
        if (
            not self.use_feedback
            and isinstance(input_shape, (list, tuple))
            and all(d is None or isinstance(d, int) for d in input_shape)
        ):
            return [input_shape]
        return input_shape

    def build(self, input_shape):
        super().build(self._as_shape_list(input_shape))

    def _split_shapes(self, input_shape):
        x, fb, state = super()._split_shapes(input_shape)
        # A normalization over a single value makes it 0 whatever the input: the level
        # would put out its bias alone (on a 1x1 map, e.g. a small image pooled twice).
        # Checked on every call: a cell built on a larger map accepted a 1x1 one later.
        n = self.GATES * self.filters
        pixels = None if None in tuple(x[1:3]) else x[1] * x[2]
        if self.normalization is not None and pixels == 1 and (self.normalization == "instance" or n == 1):
            raise ValueError(
                f"{type(self).__name__} with normalization={self.normalization!r} normalizes each "
                "pre-activation over the pixels of its map (and, for 'layer', its channels): on "
                "a 1x1 map that is one value, which normalizes to 0 for every input. Use no "
                "normalization, or 'layer' with more than one channel, or a larger map. "
                f"Received: input shape={tuple(x)}"
            )
        return x, fb, state

    def _build(self, x, fb, state):
        k, n = self.kernel_size, self.GATES * self.filters
        self.kernel = self._weight("kernel", "kernel", (k, k, x[-1], n))
        if self.use_feedback:
            self.feedback_kernel = self._weight("feedback", "feedback_kernel", (k, k, self.filters, n))
        if self.normalization is not None:  # a gain per channel; the bias is the shift
            self.gamma = self.add_weight(name="gamma", shape=(n,), initializer="ones")
        self.bias = self._weight("bias", "bias", (n,))

    def compute_output_shape(self, input_shape):
        _, _, state = self._split_shapes(self._as_shape_list(input_shape))
        return state

    def call(self, inputs):
        inputs = self._checked_inputs(self._as_list(inputs))
        # W * x + U * d as one convolution of [x, d] (ops.conv_sum)
        kernels = [self.kernel] + ([self.feedback_kernel] if self.use_feedback else [])
        pre = conv_sum(inputs[: len(kernels)], kernels, padding="same")
        if self.normalization is None:
            pre = pre + self.bias
        else:
            axis = (1, 2) if self.normalization == "instance" else (1, 2, 3)
            pre = normalize(pre, axis) * ops.cast(self.gamma, pre.dtype) + self.bias
        return self._activate(pre)

    def _activate(self, pre):
        """The output from the (normalized) pre-activations ``[..., GATES * filters]``."""
        if self.activation == "linear":
            return pre
        if self.activation == "tanh":  # keras.activations.tanh is float32 for float64 on JAX
            return tanh(pre)
        return getattr(keras.activations, self.activation)(pre)

    def step(self, x, feedback, states):
        """Runs the cell; returns ``(output, [])`` (the cell has no state). ``feedback``
        is None for a cell made with ``use_feedback=False``."""
        self._check_step_feedback(feedback)
        if states:
            raise ValueError(f"ConvEncoderCell has no state. Received: {len(states)} states")
        inputs = [x] + ([feedback] if self.use_feedback else [])
        return self(inputs), []

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "activation": self.activation,
                "normalization": self.normalization,
            }
        )
        return config
