"""MACCell: one Memory, Attention and Composition step (Hudson & Manning 2018)."""

import keras
from keras import ops

from keras_capsules._validation import check_built
from keras_capsules.layers.mac import _base
from keras_capsules.layers.mac.control_unit import ControlUnit
from keras_capsules.layers.mac.read_unit import ReadUnit
from keras_capsules.layers.mac.write_unit import WriteUnit

_LAYER = "MACCell"
_INPUTS = (
    "[context_words [batch, words, d], question [batch, d_q], knowledge_base "
    "[batch, cells, d_kb], control_prev [batch, d], memory_prev [batch, d]] (+ "
    "[previous_controls [batch, steps, d], previous_memories [batch, steps, d]] with "
    "self_attention=True)"
)


@keras.saving.register_keras_serializable(package="keras_capsules")
class MACCell(_base.MACLayerBase):
    """One MAC reasoning step: a control, a read and a write unit.

    The :class:`ControlUnit` selects the part of the question for step ``i`` from
    the contextual words, the :class:`ReadUnit` retrieves information from the
    knowledge base guided by that control and the previous memory, and the
    :class:`WriteUnit` integrates it into the new memory. :class:`MACNetwork` runs the
    cell for ``max_steps`` steps with shared weights; the cell is public so that other
    recurrences can be built from it.

    Args:
        max_steps: number of reasoning steps (the control unit keeps one question
            projection per step).
        use_previous_control: passed to :class:`ControlUnit` (default True, the
            paper; False is the official code's variant without ``c_{i-1}``).
        read_activation: passed to :class:`ReadUnit` as ``activation`` (None, the
            paper, or ``"elu"``, the official code).
        read_dropout: passed to :class:`ReadUnit` as ``dropout``. Default 0.
        self_attention, memory_gate, gate_per_dimension, gate_bias_initializer:
            passed to :class:`WriteUnit` (the paper's optional write-unit parts).
        seed: seed of the read dropout, an integer in ``[0, 2**63 - 1]`` or None
            (random); passed to :class:`ReadUnit`.
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
            kernel_constraint, bias_constraint: passed to the three units.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a list ``[context_words, question, knowledge_base, control_prev,
            memory_prev]`` of shapes ``[batch, words, d]``, ``[batch, d_q]``,
            ``[batch, cells, d_kb]``, ``[batch, d]``, ``[batch, d]``; with
            ``self_attention=True`` also ``previous_controls`` and
            ``previous_memories`` ``[batch, steps, d]``.
        step: the step ``i`` (0-based) as a Python int or an integer scalar tensor.
        words_mask: optional boolean ``[batch, words]`` (False = padded word).
        kb_mask: optional boolean ``[batch, cells]`` (False = ignored cell).
        history_mask: optional boolean ``[batch, steps]`` for the self-attention
            (only with ``self_attention=True``; otherwise a ``ValueError``).
        memory_dropout_mask: optional tensor ``[batch, d]`` multiplied into the
            memory the read unit sees (how :class:`MACNetwork` applies variational
            dropout); the write unit gets the memory unchanged. Rank 2, broadcastable
            to ``[batch, d]`` (e.g. ``[batch, 1]``); any other shape is a ``ValueError``.
        mask: the Keras mask (a list; the words' mask at index 0, the knowledge
            base's at index 2), combined with ``words_mask``/``kb_mask``.
        training: whether dropout is active.
        projected_kb: optional, ``self.read_unit.project_knowledge_base(kb, kb_mask)``
            of this call's knowledge base and mask, to compute it once for several
            steps (``MACNetwork`` does); None computes it here.

    Returns:
        A list ``[control, memory, control_attention, read_attention]`` of shapes
        ``[batch, d]``, ``[batch, d]``, ``[batch, words]``, ``[batch, cells]``; with
        ``self_attention=True`` a fifth entry, the self-attention weights
        ``[batch, steps]``.

    Example:

    ```python
    words, kb = keras.Input((None, 32)), keras.Input((16, 32))
    question, c, m = keras.Input((32,)), keras.Input((32,)), keras.Input((32,))
    cell = keras_capsules.layers.MACCell(max_steps=4)
    c1, m1, c_att, r_att = cell([words, question, kb, c, m], step=0)
    ```

    Reference:
        D. A. Hudson and C. D. Manning, "Compositional Attention Networks for Machine
        Reasoning", ICLR 2018, arXiv:1803.03067 (section 3.2).
    """

    def __init__(
        self,
        max_steps,
        use_previous_control=True,
        read_activation=None,
        read_dropout=0.0,
        self_attention=False,
        memory_gate=False,
        gate_per_dimension=False,
        gate_bias_initializer=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        max_steps = _base.positive_int("max_steps", max_steps)
        use_previous_control = _base.boolean("use_previous_control", use_previous_control)
        read_activation = _base.activation_name("read_activation", read_activation)
        read_dropout = _base.rate("read_dropout", read_dropout)
        self_attention = _base.boolean("self_attention", self_attention)
        memory_gate = _base.boolean("memory_gate", memory_gate)
        gate_per_dimension = _base.boolean("gate_per_dimension", gate_per_dimension)
        seed = _base.seed_value(seed)
        weights = self.weight_config()
        # (trainable: Keras gives a frozen layer's sublayers none, "trainable": False in a
        # saved config came back as trainable sublayers)
        sub = dict(dtype=self.dtype_policy, trainable=self.trainable, **weights)
        self.control_unit = ControlUnit(
            max_steps=max_steps, use_previous_control=use_previous_control, name="control", **sub
        )
        self.read_unit = ReadUnit(
            activation=read_activation, dropout=read_dropout, seed=seed, name="read", **sub
        )
        self.write_unit = WriteUnit(
            self_attention=self_attention,
            memory_gate=memory_gate,
            gate_per_dimension=gate_per_dimension,
            gate_bias_initializer=gate_bias_initializer,
            name="write",
            **sub,
        )
        self.max_steps = max_steps
        self.use_previous_control = use_previous_control
        self.read_activation = read_activation
        self.read_dropout = self.read_unit.dropout
        self.self_attention = self_attention
        self.memory_gate = memory_gate
        self.gate_per_dimension = gate_per_dimension
        self.seed = seed
        self.supports_masking = True

    @property
    def _n_inputs(self):
        return 7 if self.self_attention else 5

    def _shapes(self, input_shape):
        shapes = _base.as_list(input_shape, (self._n_inputs,), _LAYER, _INPUTS)
        w = _base.check_shape(shapes[0], 3, "context_words", "[batch, words, d]", _LAYER)
        _base.check_shape(shapes[1], 2, "question", "[batch, d_q]", _LAYER)
        _base.check_shape(shapes[2], 3, "knowledge_base", "[batch, cells, d_kb]", _LAYER)
        d = w[-1]
        for what, s in zip(("control_prev", "memory_prev"), shapes[3:5]):
            s = _base.check_shape(s, 2, what, f"[batch, {d}]", _LAYER)
            if s[-1] != d:
                raise ValueError(
                    f"{_LAYER} expects {what} of shape [batch, d] with d={d}, the last axis "
                    f"of context_words. Received: {what} shape={s}"
                )
        shapes = [tuple(s) for s in shapes]
        names = (
            "context_words", "question", "knowledge_base", "control_prev", "memory_prev",
            "previous_controls", "previous_memories",
        )
        _base.check_same_axis(list(zip(names, shapes)), _LAYER)
        if self.built:  # on every call, symbolic too (a reuse on other sizes built the model)
            question_kernel = self.control_unit.question_kernel
            check_built(
                _LAYER,
                [
                    ("context_words", shapes[0], question_kernel.shape[2]),
                    ("question", shapes[1], question_kernel.shape[1]),
                    ("knowledge_base", shapes[2], self.read_unit.kb_kernel.shape[0]),
                ],
            )
        return shapes

    def _unit_shapes(self, shapes):
        w, q, kb, c, m = shapes[:5]
        control = [q, c, w]
        read = [m, kb, c]
        write = [(kb[0], kb[2]), m, c] + list(shapes[5:])
        return control, read, write

    def build(self, input_shape):
        control, read, write = self._unit_shapes(self._shapes(input_shape))
        self.control_unit.build(control)
        self.read_unit.build(read)
        self.write_unit.build(write)
        self.built = True

    def compute_output_shape(self, input_shape):
        shapes = self._shapes(input_shape)
        w, _, kb, c, m = shapes[:5]
        out = [c, m, (w[0], w[1]), (kb[0], kb[1])]
        if self.self_attention:
            out.append(tuple(shapes[5][:2]))
        return out

    def compute_output_spec(self, inputs, **kwargs):
        self.write_unit._check_history_mask(kwargs.get("history_mask"))
        input_shapes = [tuple(x.shape) for x in inputs]
        shapes = self.compute_output_shape(input_shapes)
        self._masks(input_shapes, **kwargs)  # as call checks them (other sizes built the model)
        return [keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes]

    def compute_mask(self, inputs, mask=None):
        return None

    def _masks(self, shapes, words_mask=None, kb_mask=None, history_mask=None, memory_dropout_mask=None,
               mask=None, **_):
        """``words_mask`` and ``kb_mask`` combined with the Keras masks; each mask's known
        sizes checked against its values' (``shapes``: the inputs' shapes; ``**_``: the
        other call arguments)."""
        words_mask = _base.combine_masks(words_mask, _base.pick_mask(mask, 0, "words"))
        kb_mask = _base.combine_masks(kb_mask, _base.pick_mask(mask, 2, "kb"))
        _base.check_mask_shape(words_mask, shapes[0], "words_mask", _LAYER)
        _base.check_mask_shape(kb_mask, shapes[2], "kb_mask", _LAYER)
        if self.self_attention:
            _base.check_mask_shape(history_mask, shapes[6], "history_mask", _LAYER)
        if memory_dropout_mask is not None:
            memory = shapes[4]
            drop_shape = tuple(memory_dropout_mask.shape)
            if len(drop_shape) != 2 or any(
                a is not None and b is not None and a not in (1, b)
                for a, b in zip(drop_shape, memory)
            ):
                raise ValueError(
                    f"{_LAYER} expects memory_dropout_mask of the shape of memory_prev, "
                    f"{tuple(memory)} (or broadcastable to it, rank 2). "
                    f"Received: memory_dropout_mask shape={drop_shape}"
                )
        return words_mask, kb_mask

    def __call__(self, *args, **kwargs):
        # As ControlUnit.__call__: a numpy integer ``step`` is range-checked (and used as
        # a static index) before Keras converts it to a tensor; traced, an out-of-range
        # one was silently clamped to the last step's projection under XLA.
        if "step" in kwargs:
            kwargs["step"] = self.control_unit._check_step(kwargs["step"])
        elif len(args) > 1:
            args = (args[0], self.control_unit._check_step(args[1]), *args[2:])
        return super().__call__(*args, **kwargs)

    def call(
        self,
        inputs,
        step=0,
        words_mask=None,
        kb_mask=None,
        history_mask=None,
        memory_dropout_mask=None,
        mask=None,
        training=None,
        projected_kb=None,
    ):
        inputs = _base.as_list(inputs, (self._n_inputs,), _LAYER, _INPUTS)
        shapes = self._shapes([tuple(x.shape) for x in inputs])
        words, question, kb, control, memory = inputs[:5]
        words_mask, kb_mask = self._masks(shapes, words_mask, kb_mask, history_mask, memory_dropout_mask, mask)
        control, control_attention = self.control_unit(
            [question, control, words], step=step, words_mask=words_mask
        )
        read_memory = memory
        if memory_dropout_mask is not None:
            read_memory = self.to_compute(memory) * ops.cast(memory_dropout_mask, self.compute_dtype)
        retrieved, read_attention = self.read_unit(
            [read_memory, kb, control], kb_mask=kb_mask, training=training, projected_kb=projected_kb
        )
        written = self.write_unit(
            [retrieved, memory, control] + list(inputs[5:]), history_mask=history_mask
        )
        if self.self_attention:
            memory, self_attention = written
            return [control, memory, control_attention, read_attention, self_attention]
        return [control, written, control_attention, read_attention]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_steps": self.max_steps,
                "use_previous_control": self.use_previous_control,
                "read_activation": self.read_activation,
                "read_dropout": self.read_dropout,
                "self_attention": self.self_attention,
                "memory_gate": self.memory_gate,
                "gate_per_dimension": self.gate_per_dimension,
                "gate_bias_initializer": keras.initializers.serialize(
                    self.write_unit.gate_bias_initializer
                ),
                "seed": self.seed,
            }
        )
        return config
