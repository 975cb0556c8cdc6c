"""MACNetwork: a recurrence of MAC cells with shared weights (Hudson & Manning 2018)."""

import keras
from keras import ops

from keras_capsules._validation import check_built, get_initializer
from keras_capsules.layers.mac import _base
from keras_capsules.layers.mac.mac_cell import MACCell

_LAYER = "MACNetwork"
_INPUTS = (
    "[context_words [batch, words, d], question [batch, d_q], knowledge_base "
    "[batch, cells, d_kb]] or a dict with keys 'words', 'question', 'kb' (and optionally "
    "'words_mask' [batch, words], 'kb_mask' [batch, cells])"
)
_KEYS = ("words", "question", "kb")


def _input_shapes(inputs):
    """The shapes of a list or dict of inputs; an optional mask entry given as None
    (``{"kb_mask": None}``, as good as leaving it out) stays None."""
    if isinstance(inputs, dict):
        return {k: None if v is None else tuple(v.shape) for k, v in inputs.items()}
    return keras.tree.map_structure(lambda x: tuple(x.shape), inputs)


@keras.saving.register_keras_serializable(package="keras_capsules")
class MACNetwork(_base.MACLayerBase):
    """The MAC recurrent reasoning network: ``max_steps`` MAC cells, shared weights.

    Starting from a learned initial control ``c_0`` and memory ``m_0`` (both
    ``[d]``), step ``i = 1..p`` runs :class:`MACCell` (control, read and write units)
    on the contextual words, the question vector and the knowledge base; the same
    weights serve every step, except the control unit's per-step question projection
    (the paper's position-aware control). The loop is a static Python loop, so the
    layer compiles with XLA and runs under any ``tf.distribute`` strategy.

    Dropout: ``memory_dropout`` is applied to the memory the read unit sees; with
    ``variational_memory_dropout=True`` (default) one mask ``[batch, d]`` is drawn per
    call and reused at every step (variational dropout), otherwise a fresh one per
    step. ``read_dropout`` is the read unit's dropout before its attention logits.

    Masks: padded words and knowledge-base cells are given either as call arguments
    ``words_mask=`` / ``kb_mask=``, as entries ``"words_mask"`` / ``"kb_mask"`` of a
    dict input, or through Keras mask propagation (e.g. ``Embedding(mask_zero=True)``
    followed by a ``Bidirectional(LSTM(..., return_sequences=True))`` gives the
    contextual words a mask; a mask on the knowledge base is read as well, a mask on
    the question is ignored). All masks given are combined by logical AND. Masks may
    be boolean or numeric (non-zero = real position); prefer integer masks as model
    inputs under ``tf.distribute``, where Keras cannot feed boolean inputs to ``fit``.
    Masked positions never change the result or a gradient, whatever they hold.

    Args:
        max_steps: number of reasoning steps ``p`` (at least 1).
        use_previous_control: the control unit conditions on ``c_{i-1}`` (default
            True, the paper; False is the official code's variant).
        read_activation: None (default, the paper) or ``"elu"`` (the official code's
            ELU projections in the read unit).
        self_attention: add the write unit's self-attention over previous memories
            (keys are the controls; the history starts with ``c_0``/``m_0``).
        memory_gate: add the write unit's memory gate.
        gate_per_dimension: one gate per memory dimension instead of a scalar (needs
            ``memory_gate=True``).
        gate_bias_initializer: initializer of the gate bias. Default ``Constant(1.0)``.
        memory_dropout: dropout rate of the memory fed to the read unit. Default 0.
        variational_memory_dropout: one memory dropout mask for all steps (default
            True) or a new one per step.
        read_dropout: dropout rate inside the read unit. Default 0.
        return_attention: False (default) to return the final memory only; True to
            also return every step's attention maps.
        seed: seed of the dropouts, an integer in ``[0, 2**63 - 1]`` or None (random);
            other values raise a ``ValueError``. The memory dropout is seeded with
            ``seed % 2**31`` and the read unit's dropout, apart from it, with
            ``(seed + 1) % 2**31`` (so any valid seed works on every backend).
        kernel_initializer: initializer of the kernels. Default ``"glorot_uniform"``.
        bias_initializer: initializer of the biases. Default ``"zeros"``.
        state_initializer: initializer of ``initial_control`` and ``initial_memory``.
            Default ``RandomNormal(stddev=1.0)``.
        kernel_regularizer, bias_regularizer: optional regularizers.
        kernel_constraint, bias_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a list ``[context_words, question, knowledge_base]`` of shapes
            ``[batch, words, d]``, ``[batch, d_q]`` and ``[batch, cells, d_kb]``, or
            a dict with keys ``"words"``, ``"question"``, ``"kb"`` and optionally
            ``"words_mask"`` ``[batch, words]`` and ``"kb_mask"`` ``[batch, cells]``
            (boolean). The memory and control size ``d`` is that of the words.
        words_mask: optional boolean ``[batch, words]``, False for padded words.
        kb_mask: optional boolean ``[batch, cells]``, False for cells to ignore.
        mask: the Keras mask of the inputs (set by Keras).
        training: whether dropout is active.

    Returns:
        The final memory ``m_p`` ``[batch, d]``. With ``return_attention=True`` a list
        ``[memory, control_attention, read_attention]`` with the control attentions
        over words ``[batch, p, words]`` and the read attentions over the knowledge
        base ``[batch, p, cells]``, plus, with ``self_attention=True``, the
        self-attention weights ``[batch, p, p]`` whose row ``i`` (step ``i + 1``)
        weights the history ``(m_0, ..., m_i)`` in its first ``i + 1`` columns (zeros
        after).

    Weights:
        ``initial_control`` ``[d]`` (only with ``use_previous_control=True`` or
        ``self_attention=True``, the units that read ``c_0``; otherwise the attribute
        is None), ``initial_memory`` ``[d]`` and those of the :class:`MACCell` ``cell``
        (see :class:`ControlUnit`, :class:`ReadUnit`, :class:`WriteUnit`). Files saved
        by versions that always held ``initial_control`` load as before.

    Example:

    ```python
    tokens = keras.Input((None,), dtype="int32")
    kb = keras.Input((14 * 14, 512))
    x = keras.layers.Embedding(100, 300, mask_zero=True)(tokens)
    words = keras.layers.Bidirectional(keras.layers.LSTM(256, return_sequences=True))(x)
    question = keras.layers.Bidirectional(keras.layers.LSTM(256))(x)
    memory = keras_capsules.layers.MACNetwork(max_steps=12)([words, question, kb])
    logits = keras.layers.Dense(28)(keras.layers.Concatenate()([memory, question]))
    model = keras.Model([tokens, kb], logits)
    ```

    Reference:
        D. A. Hudson and C. D. Manning, "Compositional Attention Networks for Machine
        Reasoning", ICLR 2018, arXiv:1803.03067.
    """

    def __init__(
        self,
        max_steps,
        use_previous_control=True,
        read_activation=None,
        self_attention=False,
        memory_gate=False,
        gate_per_dimension=False,
        gate_bias_initializer=None,
        memory_dropout=0.0,
        variational_memory_dropout=True,
        read_dropout=0.0,
        return_attention=False,
        seed=None,
        state_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_steps = _base.positive_int("max_steps", max_steps)
        self.memory_dropout = _base.rate("memory_dropout", memory_dropout)
        self.variational_memory_dropout = _base.boolean(
            "variational_memory_dropout", variational_memory_dropout
        )
        self.return_attention = _base.boolean("return_attention", return_attention)
        self.state_initializer = get_initializer(
            "state_initializer",
            keras.initializers.RandomNormal(stddev=1.0)
            if state_initializer is None
            else state_initializer
        )
        seed = _base.seed_value(seed)
        self.cell = MACCell(
            max_steps=max_steps,
            use_previous_control=use_previous_control,
            read_activation=read_activation,
            read_dropout=read_dropout,
            self_attention=self_attention,
            memory_gate=memory_gate,
            gate_per_dimension=gate_per_dimension,
            gate_bias_initializer=gate_bias_initializer,
            # The read dropout's generator is seeded apart from the memory dropout's:
            # with one seed both would draw the same uniforms (the memory mask would
            # repeat in the read dropout of the first cells). Reduced modulo 2**31, so
            # that seed + 1 is a valid seed for any valid seed (2**63 - 1 overflowed).
            seed=_base.generator_seed(seed, 1),
            dtype=self.dtype_policy,
            trainable=self.trainable,  # (Keras gives a frozen layer's sublayers none)
            name="cell",
            **self.weight_config(),
        )
        self.seed = seed
        self.seed_generator = (
            keras.random.SeedGenerator(_base.generator_seed(seed))
            if self.memory_dropout > 0
            else None
        )
        self.supports_masking = True

    # ------------------------------------------------------------------ inputs
    def _unpack(self, inputs):
        """(words, question, kb, words_mask, kb_mask) from a list or a dict."""
        if isinstance(inputs, dict):
            unknown = set(inputs) - set(_KEYS) - {"words_mask", "kb_mask"}
            missing = set(_KEYS) - set(inputs)
            if unknown or missing:
                raise ValueError(
                    f"{_LAYER} expects inputs {_INPUTS}. Received: dict with keys "
                    f"{sorted(inputs)}"
                )
            return tuple(inputs.get(k) for k in _KEYS + ("words_mask", "kb_mask"))
        words, question, kb = _base.as_list(inputs, (3,), _LAYER, _INPUTS)
        return words, question, kb, None, None

    def _shapes(self, input_shape):
        words, question, kb, words_mask, kb_mask = self._unpack(input_shape)
        w = _base.check_shape(words, 3, "context_words", "[batch, words, d]", _LAYER)
        q = _base.check_shape(question, 2, "question", "[batch, d_q]", _LAYER)
        kb = _base.check_shape(kb, 3, "knowledge_base", "[batch, cells, d_kb]", _LAYER)
        for what, s, ref in (("words_mask", words_mask, w), ("kb_mask", kb_mask, kb)):
            if s is not None:
                s = tuple(s)
                if len(s) != 2 or any(
                    a is not None and b is not None and a != b for a, b in zip(s, ref[:2])
                ):
                    raise ValueError(
                        f"{_LAYER} expects {what} of shape {ref[:2]}. "
                        f"Received: {what} shape={s}"
                    )
        _base.check_same_axis(
            [("context_words", w), ("question", q), ("knowledge_base", kb)], _LAYER
        )
        if self.built:  # on every call, symbolic too (a reuse on other sizes built the model)
            check_built(
                _LAYER,
                [
                    ("context_words", w, self.units),
                    ("question", q, self.cell.control_unit.question_kernel.shape[1]),
                    ("knowledge_base", kb, self.cell.read_unit.kb_kernel.shape[0]),
                ],
            )
        return w, q, kb

    def build(self, input_shape):
        w, q, kb = self._shapes(input_shape)
        d = int(w[-1])
        self.units = d
        # c_0 reaches the result only through the first control unit's c_{i-1} or the
        # self-attention's history; without both it would be a weight without a gradient
        self.initial_control = None
        if self.cell.control_unit.use_previous_control or self.cell.self_attention:
            self.initial_control = self.add_weight(
                name="initial_control",
                shape=(d,),
                initializer=_base.fresh_initializer(self.state_initializer, self._salt("initial_control")),
            )
        self.initial_memory = self.add_weight(
            name="initial_memory",
            shape=(d,),
            initializer=_base.fresh_initializer(self.state_initializer, self._salt("initial_memory")),
        )
        state = (w[0], d)
        shapes = [w, q, kb, state, state]
        if self.cell.self_attention:
            shapes += [(w[0], None, d)] * 2
        self.cell.build(shapes)
        self.built = True

    def load_own_variables(self, store):
        # Files saved by earlier code held initial_control in every configuration, as
        # entry "0" before initial_memory's "1": without a unit that reads c_0, skip it.
        if self.initial_control is None and sorted(store.keys()) == ["0", "1"]:
            store = {"0": store["1"]}
        super().load_own_variables(store)

    def compute_output_shape(self, input_shape):
        w, _, kb = self._shapes(input_shape)
        memory = (w[0], w[2])
        if not self.return_attention:
            return memory
        p = self.max_steps
        out = [memory, (w[0], p, w[1]), (kb[0], p, kb[1])]
        if self.cell.self_attention:
            out.append((w[0], p, p))
        return out

    def compute_output_spec(self, inputs, words_mask=None, kb_mask=None, mask=None, training=None):
        shapes = self.compute_output_shape(_input_shapes(inputs))
        # the masks as call checks them (masks of other sizes built the model)
        words, _, kb, dict_words_mask, dict_kb_mask = self._unpack(inputs)
        words_mask, kb_mask = self._combined_masks(words_mask, kb_mask, dict_words_mask, dict_kb_mask, mask)
        _base.check_mask_shape(words_mask, tuple(words.shape), "words_mask", _LAYER)
        _base.check_mask_shape(kb_mask, tuple(kb.shape), "kb_mask", _LAYER)
        if not self.return_attention:
            return keras.KerasTensor(shapes, dtype=self.compute_dtype)
        return [keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes]

    @staticmethod
    def _combined_masks(words_mask, kb_mask, dict_words_mask, dict_kb_mask, mask):
        """The words' and the cells' masks: the arguments, the dict entries and the Keras
        masks combined (None where there is none)."""
        return (
            _base.combine_masks(words_mask, dict_words_mask, _base.pick_mask(mask, 0, "words")),
            _base.combine_masks(kb_mask, dict_kb_mask, _base.pick_mask(mask, 2, "kb")),
        )

    def compute_mask(self, inputs, mask=None):
        return [None] * (1 + 2 + self.cell.self_attention) if self.return_attention else None

    # ------------------------------------------------------------------ call
    def call(self, inputs, words_mask=None, kb_mask=None, mask=None, training=None):
        words, question, kb, dict_words_mask, dict_kb_mask = self._unpack(inputs)
        self._shapes(_input_shapes(inputs))
        words, question, kb = (self.to_compute(x) for x in (words, question, kb))
        words_mask, kb_mask = self._combined_masks(words_mask, kb_mask, dict_words_mask, dict_kb_mask, mask)
        words_mask = _base.check_mask(words_mask, words, "words_mask", _LAYER)
        kb_mask = _base.check_mask(kb_mask, kb, "kb_mask", _LAYER)
        batch = ops.shape(words)[0]
        d = self.units
        if self.initial_control is None:  # no unit reads c_0
            control = ops.zeros((batch, d), self.compute_dtype)
        else:
            control = ops.broadcast_to(self.to_compute(self.initial_control)[None], (batch, d))
        memory = ops.broadcast_to(self.to_compute(self.initial_memory)[None], (batch, d))

        dropping = bool(training) and self.memory_dropout > 0

        def dropout_mask():
            keep = 1.0 - self.memory_dropout
            u = keras.random.uniform((batch, d), seed=self.seed_generator)
            return ops.cast(u < keep, self.compute_dtype) / ops.cast(keep, self.compute_dtype)

        drop = dropout_mask() if dropping and self.variational_memory_dropout else None
        # what every step's read computes from the knowledge base alone, once
        projected_kb = self.cell.read_unit.project_knowledge_base(kb, kb_mask)
        controls, memories = [control], [memory]
        control_maps, read_maps, self_maps = [], [], []
        for step in range(self.max_steps):
            if dropping and not self.variational_memory_dropout:
                drop = dropout_mask()
            cell_inputs = [words, question, kb, control, memory]
            if self.cell.self_attention:
                cell_inputs += [ops.stack(controls, axis=1), ops.stack(memories, axis=1)]
            out = self.cell(
                cell_inputs,
                step=step,
                words_mask=words_mask,
                kb_mask=kb_mask,
                memory_dropout_mask=drop,
                training=training,
                projected_kb=projected_kb,
            )
            control, memory, control_attention, read_attention = out[:4]
            controls.append(control)
            memories.append(memory)
            control_maps.append(control_attention)
            read_maps.append(read_attention)
            if self.cell.self_attention:
                pad = self.max_steps - (step + 1)
                self_maps.append(ops.pad(out[4], [[0, 0], [0, pad]]))
        if not self.return_attention:
            return memory
        result = [memory, ops.stack(control_maps, axis=1), ops.stack(read_maps, axis=1)]
        if self.cell.self_attention:
            result.append(ops.stack(self_maps, axis=1))
        return result

    def get_config(self):
        config = super().get_config()
        cell = self.cell.get_config()
        config.update(
            {
                "max_steps": self.max_steps,
                "use_previous_control": cell["use_previous_control"],
                "read_activation": cell["read_activation"],
                "self_attention": cell["self_attention"],
                "memory_gate": cell["memory_gate"],
                "gate_per_dimension": cell["gate_per_dimension"],
                "gate_bias_initializer": cell["gate_bias_initializer"],
                "memory_dropout": self.memory_dropout,
                "variational_memory_dropout": self.variational_memory_dropout,
                "read_dropout": cell["read_dropout"],
                "return_attention": self.return_attention,
                "seed": self.seed,
                "state_initializer": keras.initializers.serialize(self.state_initializer),
            }
        )
        return config
