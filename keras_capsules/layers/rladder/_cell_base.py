"""Private base of the Recurrent Ladder encoder cells: inputs, states, arguments."""

import keras
from keras import ops

from keras_capsules._validation import (
    boolean,
    check_built,
    check_floating_dtype,
    get_constraint,
    get_initializer,
    get_regularizer,
)
from keras_capsules.layers.rladder._utils import (
    batch_checked_when_run,
    check_same_batch,
    clone_initializer,
    float_inputs,
    loaded_without_effect,
    output_spec,
    serialize_all,
)

_INITIALIZERS = (
    "kernel_initializer",
    "feedback_initializer",
    "recurrent_initializer",
    "bias_initializer",
)
_REGULARIZERS = (
    "kernel_regularizer",
    "feedback_regularizer",
    "recurrent_regularizer",
    "bias_regularizer",
)
_CONSTRAINTS = (
    "kernel_constraint",
    "feedback_constraint",
    "recurrent_constraint",
    "bias_constraint",
)
#: the options of the feedback kernel, which only a cell with ``use_feedback`` has
_FEEDBACK_OPTIONS = ("feedback_initializer", "feedback_regularizer", "feedback_constraint")
#: the feedback initializer's default (``None`` stands for it in a cell with feedback)
_DEFAULT_FEEDBACK_INITIALIZER = "glorot_uniform"


class EncoderCellBase(keras.layers.Layer):
    """One step of an encoder level: ``[x, feedback, *states] -> new states``.

    Subclasses set ``NUM_STATES``, ``INPUT_RANK`` (2 for vectors, 4 for images) and
    implement ``_state_shape(x_shape)`` (per-sample state shape) and ``_build`` /
    ``_step``.

    ``feedback_initializer`` (None: glorot uniform), ``feedback_regularizer`` and
    ``feedback_constraint`` set the feedback kernel, which a cell with
    ``use_feedback=False`` does not have: given to such a cell they are a
    ``ValueError`` (configs saved before load with a warning, without them).
    """

    NUM_STATES = 1
    INPUT_RANK = 2

    def __init__(
        self,
        use_feedback=True,
        kernel_initializer="glorot_uniform",
        feedback_initializer=None,
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        feedback_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        feedback_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.use_feedback = boolean("use_feedback", use_feedback)
        feedback = dict(
            zip(_FEEDBACK_OPTIONS, (feedback_initializer, feedback_regularizer, feedback_constraint))
        )
        if not self.use_feedback:
            given = [f"{name}={value!r}" for name, value in feedback.items() if value is not None]
            if given:
                raise ValueError(
                    f"`{'`, `'.join(_FEEDBACK_OPTIONS)}` set the feedback kernel, and "
                    f"use_feedback=False builds none. Received: {', '.join(given)}, use_feedback=False"
                )
        elif feedback_initializer is None:
            feedback_initializer = _DEFAULT_FEEDBACK_INITIALIZER
        for name, value in zip(
            _INITIALIZERS,
            (kernel_initializer, feedback_initializer, recurrent_initializer, bias_initializer),
        ):
            setattr(self, name, get_initializer(name, value))
        for name, value in zip(
            _REGULARIZERS,
            (kernel_regularizer, feedback_regularizer, recurrent_regularizer, bias_regularizer),
        ):
            setattr(self, name, get_regularizer(name, value))
        for name, value in zip(
            _CONSTRAINTS,
            (kernel_constraint, feedback_constraint, recurrent_constraint, bias_constraint),
        ):
            setattr(self, name, get_constraint(name, value))

    # ------------------------------------------------------------------ structure
    @property
    def num_inputs(self):
        return 1 + int(self.use_feedback) + self.NUM_STATES

    def _input_names(self):
        return ["x"] + (["feedback"] if self.use_feedback else []) + self._state_names()

    def _expected(self):
        return "[" + ", ".join(self._input_names()) + "]"

    def _state_names(self):
        return ["h"] if self.NUM_STATES == 1 else ["h", "c"]

    def _split_shapes(self, input_shape):
        name = type(self).__name__
        if (
            not isinstance(input_shape, (list, tuple))
            or len(input_shape) != self.num_inputs
            or not all(isinstance(s, (list, tuple)) for s in input_shape)
        ):
            raise ValueError(
                f"{name} with use_feedback={self.use_feedback} expects a list of "
                f"{self.num_inputs} inputs {self._expected()}. Received: input_shape={input_shape}"
            )
        shapes = [tuple(s) for s in input_shape]
        x = shapes[0]
        what = "[batch, features]" if self.INPUT_RANK == 2 else "[batch, height, width, channels]"
        if len(x) != self.INPUT_RANK or any(d is None for d in x[1:]):
            raise ValueError(
                f"{name} expects x of shape {what} with known sizes. Received: x shape={x}"
            )
        state = (x[0],) + self._state_shape(x)
        fb = shapes[1] if self.use_feedback else None
        if fb is not None and (len(fb) != self.INPUT_RANK or tuple(fb[1:]) != state[1:]):
            raise ValueError(
                f"{name} expects the decoder feedback to have the shape of its state, "
                f"[batch, {', '.join(str(d) for d in state[1:])}]. Received: feedback shape={fb}"
            )
        for s, sname in zip(shapes[1 + int(self.use_feedback):], self._state_names()):
            if len(s) != len(state) or tuple(s[1:]) != state[1:]:
                raise ValueError(
                    f"{name} expects the state {sname} of shape "
                    f"[batch, {', '.join(str(d) for d in state[1:])}]. Received: {sname} shape={s}"
                )
        check_same_batch(name, list(zip(self._input_names(), shapes)))
        if self.built:  # also when the model is built (the symbolic output was accepted)
            check_built(name, [("x", x, self._built_x_features)])
        return x, fb, state

    def compute_output_shape(self, input_shape):
        _, _, state = self._split_shapes(input_shape)
        return state if self.NUM_STATES == 1 else [state] * self.NUM_STATES

    def compute_output_spec(self, inputs):
        return output_spec(self, inputs)

    def output_feature_shape(self, x_feature_shape):
        """Per-sample shape of the output (and of every state) for an input shape."""
        return self._state_shape((None,) + tuple(x_feature_shape))

    def initial_states(self, x):
        """Zero states for a batch of inputs ``x``."""
        shape = (ops.shape(x)[0],) + self._state_shape(tuple(x.shape))
        return [ops.zeros(shape, dtype=x.dtype) for _ in range(self.NUM_STATES)]

    # ------------------------------------------------------------------ weights
    def _weight(self, kind, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=clone_initializer(
                getattr(self, f"{kind}_initializer"), f"{type(self).__name__}/{name}"
            ),
            regularizer=getattr(self, f"{kind}_regularizer"),
            constraint=getattr(self, f"{kind}_constraint"),
        )

    def build(self, input_shape):
        x, fb, state = self._split_shapes(input_shape)
        self._build(x, fb, state)
        self._built_x_features = x[-1]
        self.built = True

    def _checked_inputs(self, inputs):
        """``inputs`` after checking their number and shapes, integer and boolean ones cast
        to the compute dtype (:func:`float_inputs`: 0/1 frames or rolls failed in the
        first matmul or convolution with a backend error after the model had built).
        Batch sizes unknown until the cell runs are compared then
        (:func:`batch_checked_when_run`: x carries the check)."""
        if not isinstance(inputs, (list, tuple)) or len(inputs) != self.num_inputs:
            raise ValueError(
                f"{type(self).__name__} expects a list of {self.num_inputs} inputs "
                f"{self._expected()}. Received: {type(inputs).__name__}"
            )
        self._split_shapes([tuple(t.shape) for t in inputs])
        inputs = list(float_inputs(self, *inputs))
        inputs[0] = batch_checked_when_run(type(self).__name__, list(zip(self._input_names(), inputs)))
        return inputs

    def call(self, inputs):
        inputs = self._checked_inputs(inputs)
        x = inputs[0]
        fb = inputs[1] if self.use_feedback else None
        states = list(inputs[1 + int(self.use_feedback):])
        new_states = self._step(x, fb, states)
        return new_states[0] if self.NUM_STATES == 1 else list(new_states)

    def _check_step_feedback(self, feedback):
        """Refuses a ``feedback`` tensor for a cell without feedback (``step`` dropped it
        silently: the output was that of no feedback)."""
        if feedback is not None and not self.use_feedback:
            raise ValueError(
                f"{type(self).__name__} was made with use_feedback=False: its step takes "
                f"feedback=None. Received: feedback of shape {tuple(feedback.shape)}"
            )

    def step(self, x, feedback, states):
        """Runs the cell; returns ``(output, new_states)`` (output = first state).
        ``feedback`` is None for a cell made with ``use_feedback=False``."""
        self._check_step_feedback(feedback)
        inputs = [x] + ([feedback] if self.use_feedback else []) + list(states)
        out = self(inputs)
        new_states = [out] if self.NUM_STATES == 1 else list(out)
        return new_states[0], new_states

    @classmethod
    def from_config(cls, config):
        if not config.get("use_feedback", True):
            # configs saved before the feedback options were refused without feedback hold
            # them (at least the default initializer, which is dropped silently): none ever
            # changed the cell
            config = dict(config)
            default = keras.initializers.serialize(keras.initializers.get(_DEFAULT_FEEDBACK_INITIALIZER))
            for name in _FEEDBACK_OPTIONS:
                saved = config.get(name)
                if saved is None or (name == "feedback_initializer" and saved in (default, _DEFAULT_FEEDBACK_INITIALIZER)):
                    config[name] = None
                else:
                    config[name] = loaded_without_effect(
                        f"{cls.__name__}: ", name, saved, None, "with use_feedback=False"
                    )
        return super().from_config(config)

    def get_config(self):
        config = super().get_config()
        config["use_feedback"] = self.use_feedback
        serialize_all(config, self, _INITIALIZERS, "initializers")
        serialize_all(config, self, _REGULARIZERS, "regularizers")
        serialize_all(config, self, _CONSTRAINTS, "constraints")
        return config
