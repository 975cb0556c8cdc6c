"""ControlUnit: the control step of a MAC cell (Hudson & Manning 2018, section 3.2.1)."""

import numbers

import keras
from keras import ops

from keras_capsules._validation import check_built, concrete_values
from keras_capsules.layers.mac import _base

_LAYER = "ControlUnit"
_INPUTS = "[question [batch, d_q], control_prev [batch, d], context_words [batch, words, d]]"


@keras.saving.register_keras_serializable(package="keras_capsules")
class ControlUnit(_base.MACLayerBase):
    """Selects the part of the question a MAC reasoning step attends to.

    With ``q`` the question vector, ``c_prev`` the previous control state and
    ``cw_s`` the contextual words, step ``i`` computes

    * the position-aware question ``q_i = q W_q[i] + b_q[i]`` (one projection per
      step, ``W_q`` of shape ``[max_steps, d_q, d]``);
    * ``cq_i = [c_prev, q_i] W_cq + b_cq`` (``W_cq`` ``[2d, d]``); with
      ``use_previous_control=False`` (a variant of the official code) ``cq_i = q_i``
      and ``c_prev`` is ignored;
    * the attention over words ``cv_i = softmax_s((cq_i * cw_s) W_a + b_a)`` (padded
      words masked out);
    * the new control ``c_i = sum_s cv_i,s cw_s``.

    The logits and softmax run in float32 under mixed precision. Masked words are
    zeroed before any arithmetic and the softmax runs over the unmasked words only
    (exact for any finite logits, however negative): padded words never change the
    result, whatever they hold, and an all-padded question gives a zero control and
    a zero attention (finite gradients).

    Args:
        max_steps: number of reasoning steps (one question projection per step).
        use_previous_control: True (default, the paper) to condition on ``c_prev``;
            False for the official code's variant that uses ``q_i`` alone.
        kernel_initializer: initializer of the kernels (each step's ``[d_q, d]``
            matrix of ``question_kernel`` is initialised on its own; a seeded
            initializer draws step ``s`` with ``seed + s``, or ``(seed + s) % 2**31``
            for a seed of ``2**31`` or more, so any seed up to ``2**63 - 1`` works).
            Default ``"glorot_uniform"``.
        bias_initializer: initializer of the biases. Default ``"zeros"``.
        kernel_regularizer, bias_regularizer: optional regularizers.
        kernel_constraint, bias_constraint: optional constraints.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a list ``[question, control_prev, context_words]`` of shapes
            ``[batch, d_q]``, ``[batch, d]`` and ``[batch, words, d]``.
        step: the reasoning step ``i`` (0-based), a Python int or an integer scalar
            tensor in ``[0, max_steps)``. Default 0. Out-of-range steps raise a
            ``ValueError`` when the value is known (eager calls); a traced step is
            used as given.
        words_mask: optional boolean ``[batch, words]``, False for padded words.
        mask: the Keras mask (a list with the words' mask at index 2, as Keras
            propagates it, e.g. from ``Embedding(mask_zero=True)``). Combined with
            ``words_mask`` by logical AND.

    Returns:
        A list ``[control, attention]``: ``control`` ``[batch, d]`` and the attention
        over words ``[batch, words]`` (zero at padded words).

    Weights:
        ``question_kernel`` ``[max_steps, d_q, d]``, ``question_bias``
        ``[max_steps, d]``, ``control_question_kernel`` ``[2d, d]`` and
        ``control_question_bias`` ``[d]`` (only with ``use_previous_control``; the
        first ``d`` rows act on ``c_prev``), ``attention_kernel`` ``[d, 1]``,
        ``attention_bias`` ``[1]`` (it shifts every word's logit alike, so the softmax
        ignores it and its gradient is zero: kept as the attention's linear layer has a
        bias, and for saved models).

    Example:

    ```python
    words = keras.Input((None, 64))
    question = keras.Input((64,))
    control = keras.Input((64,))
    c, attention = keras_capsules.layers.ControlUnit(max_steps=4)(
        [question, control, words], step=0
    )
    ```

    Reference:
        D. A. Hudson and C. D. Manning, "Compositional Attention Networks for Machine
        Reasoning", ICLR 2018, arXiv:1803.03067 (section 3.2.1).
    """

    def __init__(self, max_steps, use_previous_control=True, **kwargs):
        super().__init__(**kwargs)
        self.max_steps = _base.positive_int("max_steps", max_steps)
        self.use_previous_control = _base.boolean("use_previous_control", use_previous_control)
        self.supports_masking = True

    def _shapes(self, input_shape):
        q, c, w = _base.as_list(input_shape, (3,), _LAYER, _INPUTS)
        q = _base.check_shape(q, 2, "question", "[batch, d_q]", _LAYER)
        c = _base.check_shape(c, 2, "control_prev", "[batch, d]", _LAYER)
        w = _base.check_shape(w, 3, "context_words", "[batch, words, d]", _LAYER)
        if c[-1] != w[-1]:
            raise ValueError(
                f"{_LAYER} expects control_prev [batch, d] and context_words "
                f"[batch, words, d] with the same d. Received: control_prev shape={c}, "
                f"context_words shape={w}"
            )
        _base.check_same_axis(
            [("question", q), ("control_prev", c), ("context_words", w)], _LAYER
        )
        if self.built:  # on every call, symbolic too (a reuse on other sizes built the model)
            check_built(
                _LAYER,
                [
                    ("question", q, self.question_kernel.shape[1]),
                    ("context_words", w, self.question_kernel.shape[2]),
                ],
            )
        return q, c, w

    def build(self, input_shape):
        q, _, w = self._shapes(input_shape)
        d_q, d = int(q[-1]), int(w[-1])
        self.units = d
        self.question_kernel = self.add_kernel(
            "question_kernel",
            (self.max_steps, d_q, d),
            initializer=_base.per_step_initializer(self.kernel_initializer, self.max_steps),
            per_step=True,
        )
        self.question_bias = self.add_bias("question_bias", (self.max_steps, d), per_step=True)
        if self.use_previous_control:
            self.control_question_kernel = self.add_kernel("control_question_kernel", (2 * d, d))
            self.control_question_bias = self.add_bias("control_question_bias", (d,))
        self.attention_kernel = self.add_kernel("attention_kernel", (d, 1))
        self.attention_bias = self.add_bias("attention_bias", (1,))
        self.built = True

    def compute_output_shape(self, input_shape):
        _, _, w = self._shapes(input_shape)
        return [(w[0], w[2]), (w[0], w[1])]

    def compute_output_spec(self, inputs, step=0, words_mask=None, mask=None):
        shapes = self.compute_output_shape([tuple(x.shape) for x in inputs])
        # the words' mask as call checks it (one of other sizes built the model)
        _base.check_mask_shape(
            _base.combine_masks(words_mask, _base.pick_mask(mask, 2, "words")),
            tuple(inputs[2].shape),
            "words_mask",
            _LAYER,
        )
        return [keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes]

    def compute_mask(self, inputs, mask=None):
        return None

    def __call__(self, *args, **kwargs):
        # Checked before Keras converts a numpy integer ``step`` to a tensor, so that
        # numpy integers are range-checked (and sliced statically) like Python ints.
        if "step" in kwargs:
            kwargs["step"] = self._check_step(kwargs["step"])
        elif len(args) > 1:
            args = (args[0], self._check_step(args[1]), *args[2:])
        return super().__call__(*args, **kwargs)

    def call(self, inputs, step=0, words_mask=None, mask=None):
        question, control, words = _base.as_list(inputs, (3,), _LAYER, _INPUTS)
        self._shapes([tuple(question.shape), tuple(control.shape), tuple(words.shape)])
        question, control, words = (self.to_compute(x) for x in (question, control, words))
        words_mask = _base.check_mask(
            _base.combine_masks(words_mask, _base.pick_mask(mask, 2, "words")),
            words,
            "words_mask",
            _LAYER,
        )
        if words_mask is not None:
            words = ops.where(words_mask[:, :, None], words, ops.zeros_like(words))
        step = self._check_step(step)
        if isinstance(step, int):
            w_q, b_q = self.question_kernel[step], self.question_bias[step]
        else:
            # int32 indices: a uint8/int8/uint16/... step is a valid step, but no
            # backend gathers with every integer dtype (TensorFlow refused uint8).
            step = ops.cast(step, "int32")
            w_q = ops.take(self.question_kernel, step, axis=0)
            b_q = ops.take(self.question_bias, step, axis=0)
        q_i = self.dense(question, w_q, b_q)
        if self.use_previous_control:
            cq = self.dense(
                ops.concatenate([control, q_i], axis=-1),
                self.control_question_kernel,
                self.control_question_bias,
            )
        else:
            cq = q_i
        # The product is part of the attention logit: float32 under mixed precision (in
        # float16 it overflowed to inf, then NaN, for inputs of a few hundred).
        work = _base.routing_dtype(words.dtype)
        logits = self.logit(
            ops.cast(cq, work)[:, None, :] * ops.cast(words, work),
            self.attention_kernel,
            self.attention_bias,
        )
        new_control, attention = _base.attend(logits, words, words_mask)
        return [new_control, attention]

    def _check_step(self, step):
        """``step`` as a Python int (range-checked) or an integer scalar tensor."""
        if isinstance(step, numbers.Integral) and not isinstance(step, bool):
            if not 0 <= step < self.max_steps:
                raise ValueError(
                    f"`step` must be in [0, max_steps={self.max_steps}). Received: step={step}"
                )
            return int(step)
        dtype = getattr(step, "dtype", None)
        shape = getattr(step, "shape", None)
        if (
            isinstance(step, (bool, numbers.Number))
            or dtype is None
            or not keras.backend.standardize_dtype(dtype).startswith(("int", "uint"))
            or (shape is not None and len(shape) != 0)
        ):
            raise ValueError(
                f"`step` must be an integer in [0, max_steps={self.max_steps}) or an integer "
                f"scalar tensor. Received: step={step!r}"
            )
        value = concrete_values(step)  # eager: range-checked too (traced: as given)
        if value is not None and not 0 <= value < self.max_steps:
            raise ValueError(
                f"`step` must be in [0, max_steps={self.max_steps}). Received: step={value}"
            )
        return step

    def get_config(self):
        config = super().get_config()
        config.update(
            {"max_steps": self.max_steps, "use_previous_control": self.use_previous_control}
        )
        return config
