"""WriteUnit: the write step of a MAC cell (Hudson & Manning 2018, section 3.2.3)."""

import keras
from keras import ops

from keras_capsules._validation import check_built, get_initializer
from keras_capsules.layers.mac import _base
from keras_capsules.ops import matmul

_LAYER = "WriteUnit"
_INPUTS = (
    "[retrieved [batch, d_r], memory_prev [batch, d], control [batch, d]] (+ "
    "[previous_controls [batch, steps, d], previous_memories [batch, steps, d]] with "
    "self_attention=True)"
)


@keras.saving.register_keras_serializable(package="keras_capsules")
class WriteUnit(_base.MACLayerBase):
    """Integrates retrieved information into the memory of a MAC reasoning step.

    With ``r`` the information retrieved by the read unit, ``m_prev`` the previous
    memory and ``c`` the current control, the unit computes

    * ``m' = [r, m_prev] W + b`` (the first ``d_r`` rows of ``kernel`` act on ``r``);
    * with ``self_attention=True`` (optional in the paper), attention over the
      previous steps keyed by their controls ``c_j``:
      ``sa_j = softmax_j((c * c_j) W_sa + b_sa)``, ``m_sa = sum_j sa_j m_j`` and
      ``m'' = m_sa W_s + m' W_p + b_s``; otherwise ``m'' = m'``;
    * with ``memory_gate=True`` (optional in the paper), the gate
      ``g = sigmoid(c W_g + b_g)`` and ``m = g * m_prev + (1 - g) * m''``;
      otherwise ``m = m''``.

    The self-attention softmax and the gate run in float32 under mixed precision.
    With a ``history_mask`` the softmax runs over the unmasked steps only (exact for
    any finite logits); a sample whose history is all masked gets zero
    self-attention weights and ``m_sa = 0`` (finite gradients).

    Args:
        self_attention: add the self-attention over previous memories. Default False.
        memory_gate: add the memory gate. Default False.
        gate_per_dimension: False (default, the paper) for one scalar gate per
            sample; True for one gate per memory dimension (needs
            ``memory_gate=True``).
        gate_bias_initializer: initializer of ``gate_bias``. Default
            ``Constant(1.0)``, which starts the gate leaning towards keeping
            ``m_prev`` (sigmoid(1) = 0.73). Another initializer needs
            ``memory_gate=True``.
        kernel_initializer: initializer of the kernels. Default ``"glorot_uniform"``.
        bias_initializer: initializer of the other biases. Default ``"zeros"``.
        kernel_regularizer, bias_regularizer: optional regularizers (the bias
            regularizer applies to ``gate_bias`` too).
        kernel_constraint, bias_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a list ``[retrieved, memory_prev, control]`` of shapes
            ``[batch, d_r]``, ``[batch, d]``, ``[batch, d]``; with
            ``self_attention=True`` two more: ``previous_controls`` and
            ``previous_memories``, both ``[batch, steps, d]`` (the controls and
            memories of the steps so far, at least one).
        history_mask: optional boolean ``[batch, steps]``, False for history entries
            to ignore. Only with ``self_attention=True``: without self-attention there
            is no history to mask, and passing a ``history_mask`` raises a
            ``ValueError`` (rather than being silently ignored). Keras masks carried
            by the inputs are not read: the history is masked by ``history_mask`` only.

    Returns:
        The new memory ``[batch, d]``; with ``self_attention=True`` a list
        ``[memory, self_attention]`` where ``self_attention`` ``[batch, steps]`` holds
        the weights over the previous steps.

    Weights:
        ``kernel`` ``[d_r + d, d]``, ``bias`` ``[d]``; with self-attention
        ``self_attention_kernel`` ``[d, 1]``, ``self_attention_bias`` ``[1]`` (a shift of
        every step's logit alike, which the softmax ignores: its gradient is zero),
        ``self_memory_kernel`` ``[d, d]``, ``info_kernel`` ``[d, d]``,
        ``self_memory_bias`` ``[d]``; with the gate ``gate_kernel``
        ``[d, 1 or d]``, ``gate_bias`` ``[1 or d]``.

    Example:

    ```python
    retrieved = keras.Input((64,))
    memory = keras.Input((64,))
    control = keras.Input((64,))
    new_memory = keras_capsules.layers.WriteUnit(memory_gate=True)(
        [retrieved, memory, control]
    )
    ```

    Reference:
        D. A. Hudson and C. D. Manning, "Compositional Attention Networks for Machine
        Reasoning", ICLR 2018, arXiv:1803.03067 (section 3.2.3).
    """

    def __init__(
        self,
        self_attention=False,
        memory_gate=False,
        gate_per_dimension=False,
        gate_bias_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.self_attention = _base.boolean("self_attention", self_attention)
        self.memory_gate = _base.boolean("memory_gate", memory_gate)
        self.gate_per_dimension = _base.boolean("gate_per_dimension", gate_per_dimension)
        if self.gate_per_dimension and not self.memory_gate:
            raise ValueError(
                "`gate_per_dimension` shapes the memory gate, which exists only with "
                "memory_gate=True (otherwise no gate is built). "
                f"Received: gate_per_dimension={gate_per_dimension!r}, memory_gate={memory_gate!r}"
            )
        default = keras.initializers.Constant(1.0)
        self.gate_bias_initializer = get_initializer(
            "gate_bias_initializer", default if gate_bias_initializer is None else gate_bias_initializer
        )
        if (not self.memory_gate and gate_bias_initializer is not None
                and keras.initializers.serialize(self.gate_bias_initializer) != keras.initializers.serialize(default)):
            # Was accepted and ignored. (The default passes: every saved config records it.)
            raise ValueError(
                "`gate_bias_initializer` initializes the memory gate, which exists only with "
                "memory_gate=True (otherwise no gate is built). "
                f"Received: gate_bias_initializer={gate_bias_initializer!r}, memory_gate={memory_gate!r}"
            )
        self.supports_masking = True

    @property
    def _n_inputs(self):
        return 5 if self.self_attention else 3

    def _shapes(self, input_shape):
        shapes = _base.as_list(input_shape, (self._n_inputs,), _LAYER, _INPUTS)
        r = _base.check_shape(shapes[0], 2, "retrieved", "[batch, d_r]", _LAYER)
        m = _base.check_shape(shapes[1], 2, "memory_prev", "[batch, d]", _LAYER)
        c = _base.check_shape(shapes[2], 2, "control", "[batch, d]", _LAYER)
        if m[-1] != c[-1]:
            raise ValueError(
                f"{_LAYER} expects memory_prev and control of the same shape [batch, d]. "
                f"Received: memory_prev shape={m}, control shape={c}"
            )
        out = [r, m, c]
        if self.self_attention:
            for what, s in zip(("previous_controls", "previous_memories"), shapes[3:]):
                s = _base.check_shape(s, 3, what, "[batch, steps, d]", _LAYER)
                if s[-1] != m[-1]:
                    raise ValueError(
                        f"{_LAYER} expects {what} of shape [batch, steps, {m[-1]}]. "
                        f"Received: {what} shape={s}"
                    )
                out.append(s)
        names = ("retrieved", "memory_prev", "control", "previous_controls", "previous_memories")
        _base.check_same_axis(list(zip(names, out)), _LAYER)
        if self.self_attention:
            _base.check_same_axis(
                list(zip(names[3:], out[3:])), _LAYER, axis=1, what="number of steps"
            )
        if self.built:  # on every call, symbolic too (a reuse on other sizes built the model)
            d = self.bias.shape[0]
            check_built(_LAYER, [("memory_prev", m, d), ("retrieved", r, self.kernel.shape[0] - d)])
        return out

    def build(self, input_shape):
        r, m = self._shapes(input_shape)[:2]
        d_r, d = int(r[-1]), int(m[-1])
        self.kernel = self.add_kernel("kernel", (d_r + d, d))
        self.bias = self.add_bias("bias", (d,))
        if self.self_attention:
            self.self_attention_kernel = self.add_kernel("self_attention_kernel", (d, 1))
            self.self_attention_bias = self.add_bias("self_attention_bias", (1,))
            self.self_memory_kernel = self.add_kernel("self_memory_kernel", (d, d))
            self.info_kernel = self.add_kernel("info_kernel", (d, d))
            self.self_memory_bias = self.add_bias("self_memory_bias", (d,))
        if self.memory_gate:
            g = d if self.gate_per_dimension else 1
            self.gate_kernel = self.add_kernel("gate_kernel", (d, g))
            self.gate_bias = self.add_bias("gate_bias", (g,), initializer=self.gate_bias_initializer)
        self.built = True

    def compute_output_shape(self, input_shape):
        shapes = self._shapes(input_shape)
        memory = tuple(shapes[1])
        if self.self_attention:
            return [memory, tuple(shapes[3][:2])]
        return memory

    def _check_history_mask(self, history_mask):
        if history_mask is not None and not self.self_attention:
            raise ValueError(
                f"{_LAYER}: `history_mask` masks the self-attention history and applies "
                "only with self_attention=True; this layer has self_attention=False. "
                f"Received: history_mask shape={getattr(history_mask, 'shape', None)}"
            )

    def compute_output_spec(self, inputs, history_mask=None, mask=None):
        self._check_history_mask(history_mask)
        shapes = self.compute_output_shape([tuple(x.shape) for x in inputs])
        if self.self_attention:  # as call checks it (one of other sizes built the model)
            _base.check_mask_shape(history_mask, tuple(inputs[4].shape), "history_mask", _LAYER)
        if self.self_attention:
            return [keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes]
        return keras.KerasTensor(shapes, dtype=self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        return None

    def call(self, inputs, history_mask=None, mask=None):
        self._check_history_mask(history_mask)
        inputs = _base.as_list(inputs, (self._n_inputs,), _LAYER, _INPUTS)
        self._shapes([tuple(x.shape) for x in inputs])
        retrieved, memory, control = (self.to_compute(x) for x in inputs[:3])
        new = self.dense(ops.concatenate([retrieved, memory], axis=-1), self.kernel, self.bias)
        outputs = []
        if self.self_attention:
            controls, memories = (self.to_compute(x) for x in inputs[3:])
            history_mask = _base.check_mask(history_mask, memories, "history_mask", _LAYER)
            if history_mask is not None:
                keep = history_mask[:, :, None]
                controls = ops.where(keep, controls, ops.zeros_like(controls))
                memories = ops.where(keep, memories, ops.zeros_like(memories))
            work = _base.routing_dtype(control.dtype)
            logits = self.logit(
                ops.cast(control, work)[:, None, :] * ops.cast(controls, work),
                self.self_attention_kernel,
                self.self_attention_bias,
            )
            attended, weights = _base.attend(logits, memories, history_mask)
            new = (
                matmul(attended, ops.cast(self.self_memory_kernel, new.dtype))
                + matmul(new, ops.cast(self.info_kernel, new.dtype))
                + ops.cast(self.self_memory_bias, new.dtype)
            )
            outputs.append(weights)
        if self.memory_gate:
            work = _base.routing_dtype(new.dtype)  # (torch dtypes never equal their names)
            gate = ops.sigmoid(
                matmul(ops.cast(control, work), ops.cast(self.gate_kernel, work))
                + ops.cast(self.gate_bias, work)
            )
            new = ops.cast(
                gate * ops.cast(memory, work) + (1.0 - gate) * ops.cast(new, work), new.dtype
            )
        if self.self_attention:
            return [new] + outputs
        return new

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "self_attention": self.self_attention,
                "memory_gate": self.memory_gate,
                "gate_per_dimension": self.gate_per_dimension,
                "gate_bias_initializer": keras.initializers.serialize(self.gate_bias_initializer),
            }
        )
        return config
