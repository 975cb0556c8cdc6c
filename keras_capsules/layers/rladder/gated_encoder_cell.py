"""GatedEncoderCell: the gated dense encoder of the Recurrent Ladder (Ilin et al. 2017)."""

import keras
from keras import ops

from keras_capsules.layers.rladder._cell_base import EncoderCellBase
from keras_capsules.layers.rladder._utils import positive_int
from keras_capsules.ops import matmul, tanh


@keras.saving.register_keras_serializable(package="keras_capsules")
class GatedEncoderCell(EncoderCellBase):
    """One step of the gated dense encoder level of a Recurrent Ladder.

    An encoder level of the RLadder has three inputs: the bottom-up signal ``x``
    (the level below at this step), the decoder feedback ``d`` (this level's decoder
    output at the previous step) and its own previous state ``h``. Our reading of the
    paper's gated encoder (its equations (35)-(38)) is a GRU-like update in which each
    of the three inputs has its own weight matrix (``W`` for ``x``, ``U`` for ``d``,
    ``V`` for ``h``) and the two recurrent inputs are gated before they enter the
    candidate state:

    ```
    z = sigmoid(x Wz + d Uz + h Vz + bz)              update gate
    r = sigmoid(x Wr + d Ur + h Vr + br)              gate on the own state
    g = sigmoid(x Wg + d Ug + h Vg + bg)              gate on the decoder feedback
    c = tanh(x Wc + (g * d) Uc + (r * h) Vc + bc)     candidate
    h_new = (1 - z) * h + z * c
    ```

    With ``use_feedback=False`` (no decoder-to-encoder connection) ``d``, ``U`` and
    ``g`` are absent and the cell is a GRU. The feedback must have the shape of the
    state (in a ladder it is the decoder output of the same level).

    Args:
        units: size of the state (and of the output).
        use_feedback: whether the cell takes the decoder feedback ``d``. Default True.
        kernel_initializer: initializer of ``kernel`` (``W``). Default glorot uniform.
        feedback_initializer: initializer of ``feedback_kernel`` (``U``).
            Default (None) glorot uniform. The feedback initializer, regularizer
            and constraint need ``use_feedback=True`` (a cell without feedback has
            no ``U``; they are a ``ValueError`` there).
        recurrent_initializer: initializer of ``recurrent_kernel`` (``V``).
            Default orthogonal.
        bias_initializer: initializer of ``bias``. Default zeros.
        kernel_regularizer, feedback_regularizer, recurrent_regularizer,
            bias_regularizer: optional regularizers.
        kernel_constraint, feedback_constraint, recurrent_constraint,
            bias_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[x, d, h]`` (or ``[x, h]`` with ``use_feedback=False``): ``x``
            ``[batch, features]``, ``d`` and ``h`` ``[batch, units]``.

    Returns:
        The new state ``h_new`` ``[batch, units]`` (also the level's output).

    Example:

    ```python
    cell = keras_capsules.layers.GatedEncoderCell(units=32)
    x, d, h = keras.Input((10,)), keras.Input((32,)), keras.Input((32,))
    h_new = cell([x, d, h])                                  # (None, 32)
    ```

    Reference:
        A. Ilin et al., "Recurrent Ladder Networks", NIPS 2017 (gated encoder,
        equations (35)-(38)); K. Cho et al. 2014 for the GRU form.
    """

    NUM_STATES = 1
    INPUT_RANK = 2

    def __init__(self, units, use_feedback=True, **kwargs):
        super().__init__(use_feedback=use_feedback, **kwargs)
        self.units = positive_int("units", units)

    def _state_shape(self, x_shape):
        return (self.units,)

    @property
    def _num_blocks(self):
        return 4 if self.use_feedback else 3

    def _build(self, x, fb, state):
        n = self._num_blocks * self.units
        self.kernel = self._weight("kernel", "kernel", (x[-1], n))
        if self.use_feedback:
            self.feedback_kernel = self._weight("feedback", "feedback_kernel", (self.units, n))
        self.recurrent_kernel = self._weight("recurrent", "recurrent_kernel", (self.units, n))
        self.bias = self._weight("bias", "bias", (n,))

    def _step(self, x, d, states):
        (h,) = states
        u = self.units
        gates = self._num_blocks - 1  # z, r (, g): the candidate block comes last
        pre = matmul(x, self.kernel) + self.bias
        pre_gates = pre[:, : gates * u] + matmul(h, self.recurrent_kernel[:, : gates * u])
        if d is not None:
            pre_gates = pre_gates + matmul(d, self.feedback_kernel[:, : gates * u])
        z = ops.sigmoid(pre_gates[:, :u])
        r = ops.sigmoid(pre_gates[:, u : 2 * u])
        cand = pre[:, gates * u :] + matmul(r * h, self.recurrent_kernel[:, gates * u :])
        if d is not None:
            g = ops.sigmoid(pre_gates[:, 2 * u : 3 * u])
            cand = cand + matmul(g * d, self.feedback_kernel[:, gates * u :])
        c = tanh(cand)  # (keras.ops.tanh is float32 for float64 on JAX)
        return [(1.0 - z) * h + z * c]

    def get_config(self):
        config = super().get_config()
        config["units"] = self.units
        return config
