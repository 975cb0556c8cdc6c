"""RLadder: the Recurrent Ladder network unrolled over time (Ilin et al. 2017)."""

import math
import numbers

import keras
from keras import ops

from keras_capsules._validation import (
    boolean,
    check_floating_dtype,
    concrete_values,
    get_constraint,
    get_initializer,
    get_regularizer,
    rate,
)
from keras_capsules.layers.rladder._utils import (
    batches_made_alike,
    check_one_tensor,
    loop_steps,
    symbolic_loop,
    expand_to,
    check_step_mask,
    exact_step_mask,
    spread_step_mask,
    clone_initializer,
    fresh_initializer,
    salted_initializer,
    loaded_without_effect,
    max_pool,
    normalize,
    output_spec,
    positive_int,
    generator_seed,
    seed_value,
    serialize_all,
    warn_without_effect,
    zero_of_the_weights,
)
from keras_capsules.layers.rladder.conv_g1 import ConvG1
from keras_capsules.layers.rladder.conv_g2 import ConvG2
from keras_capsules.layers.rladder.conv_g3 import ConvG3
from keras_capsules.layers.rladder.conv_encoder_cell import ConvEncoderCell
from keras_capsules.layers.rladder.gated_conv_encoder_cell import GatedConvEncoderCell
from keras_capsules.layers.rladder.conv_lstm_encoder_cell import ConvLSTMEncoderCell
from keras_capsules.layers.rladder.g1 import G1
from keras_capsules.layers.rladder.gated_encoder_cell import GatedEncoderCell
from keras_capsules.layers.rladder.level_spec import (
    COMBINATORS,
    CONV_COMBINATORS,
    DEFAULT_KERNEL_SIZE,
    NORMALIZED_ENCODERS,
    level_kind,
    normalize_level,
    saved_levels,
)
from keras_capsules.layers.rladder.lstm_encoder_cell import LSTMEncoderCell
from keras_capsules.ops import matmul

_COMBINATOR_CLASSES = {"G1": G1, "ConvG1": ConvG1, "ConvG2": ConvG2, "ConvG3": ConvG3}
#: the cells of the encoders that take a ``normalization`` (level_spec.NORMALIZED_ENCODERS)
_NORMALIZED_CELLS = {"conv": ConvEncoderCell, "gatedconv": GatedConvEncoderCell}
assert tuple(_NORMALIZED_CELLS) == NORMALIZED_ENCODERS, "a normalized encoder of level_spec without its cell here"
_INITIALIZERS = ("kernel_initializer", "recurrent_initializer", "bias_initializer")
_REGULARIZERS = ("kernel_regularizer", "recurrent_regularizer", "bias_regularizer")
_CONSTRAINTS = ("kernel_constraint", "recurrent_constraint", "bias_constraint")
DROPOUT_NOISE = ("step", "sequence")
NORMALIZATIONS = (None, "layer")


def _is_tensor(value):
    """A tensor (or array) of any backend: a shape and a dtype, not a list."""
    return not isinstance(value, (list, tuple)) and hasattr(value, "shape") and hasattr(value, "dtype")


def _batch_of(features):
    """A per-sample shape as the errors of ``RLadder.step`` show it: ``(batch, 4, 4, 2)``."""
    return "(" + ", ".join(["batch"] + [str(d) for d in features]) + ")"


def _shaped(value, features):
    """True for a tensor ``[batch, *features]`` (a size unknown where it is traced passes)."""
    return (
        _is_tensor(value)
        and len(value.shape) == len(features) + 1
        and all(d is None or int(d) == f for d, f in zip(tuple(value.shape)[1:], features))
    )


def _described(value):
    """``value`` in an error of ``RLadder.step``: a tensor as ``Tensor(2, 4)`` (its
    shape), lists and tuples by their items, anything else by its type."""
    if _is_tensor(value):
        return "Tensor(" + ", ".join(str(d) for d in tuple(value.shape)) + ")"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_described(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' * (len(value) == 1)})"
    return "None" if value is None else f"<{type(value).__name__}>"


@keras.saving.register_keras_serializable(package="keras_capsules")
class RLadder(keras.layers.Layer):
    """A Recurrent Ladder network: a ladder of recurrent encoder cells and decoder
    combinators, unrolled over time with shared weights.

    Levels ``l = 1..L`` each have an encoder cell and a decoder combinator; level 0 is
    the input, with a combinator of its own. At every step ``t``:

    * encoder: ``e_0 = x_t``; level ``l`` receives ``pool(e_{l-1})`` (max pooling by
      the level's ``pool`` factor; flattened when a dense level follows a
      convolutional one) and, through its feedback input, the decoder output
      ``d_l`` of the *previous* step (zeros at ``t = 0``), and updates its state;
      its output ``e_l`` is the new state ``h``;
    * decoder: ``d_L = g_L(e_L)`` (the top combinator has no top-down input),
      then ``d_l = g_l([d_{l+1}, e_l])`` down to ``d_0 = g_0([d_1, x_t])``, the
      prediction of the next input ``x_{t+1}``. Combinators upsample ``d_{l+1}`` by
      the pooling factor of level ``l + 1``.

    The time axis is the axis 1 of a sequence input ``[batch, T, ...]``
    (``n_iters=None``), or a static input ``[batch, ...]`` is presented
    ``n_iters`` times (iterative inference). Every step reuses the same weights. The
    loop over steps is, by default, a Python loop unrolled into the graph when the
    number of steps is known, and a symbolic loop (``keras.ops.scan`` on JAX,
    ``keras.ops.while_loop`` on TensorFlow, a Python loop on torch) when it is not
    (``T = None``: sequences of any length through one model); ``unroll`` chooses.
    Both compile with XLA and give the same outputs.

    Ablations of the paper: ``decoder_to_encoder=False`` removes the feedback
    connections (the encoder cells take no decoder input); ``use_decoder=False``
    removes the decoder altogether, leaving a hierarchical RNN whose only output is
    the top encoder sequence.

    Options that matter only together with another (the ``dropout_noise`` of a ladder
    without dropout, a ``seed`` without dropout or zoneout, the decoder's options with
    ``use_decoder=False``, ...; each says so below) are accepted when set where they
    have no effect, so that configs saved with them still load, but a ``UserWarning``
    names the option, its value and what it needs. Their defaults never warn.

    Args:
        levels: a list of level specifications, dicts as made by
            :func:`level_spec` (``encoder``, ``units``, ``combinator``, ``pool``,
            ``kernel_size``, ``combinator_filters``, ``upsample_mode``,
            ``normalization``, ``unflatten``). Convolutional levels (``"convlstm"``, or the
            feed-forward ``"conv"`` and ``"gatedconv"``, whose memory of the past is
            then only the decoder feedback) must come before dense ones.
        n_iters: None (default) for sequence inputs, or the number of iterations on
            a static input.
        decoder_to_encoder: feed each level's decoder output of step ``t - 1`` to
            its encoder at step ``t``. Default True. False needs the decoder (with
            ``use_decoder=False`` it has no effect and warns).
        use_decoder: build the decoder. Default True.
        input_combinator: the combinator of level 0 (``"G1"``, ``"ConvG1"``,
            ``"ConvG2"``, ``"ConvG3"``); None (default) picks ``"ConvG1"`` when the
            first level is convolutional and ``"G1"`` otherwise. An image input to a
            dense first level needs a convolutional one given explicitly. Another
            than that pick needs the decoder (it warns with ``use_decoder=False``), as
            do the levels' ``combinator``, ``combinator_filters`` and ``upsample_mode``.
        input_combinator_filters: hidden channels of a ConvG2/ConvG3 input combinator
            (other input combinators take None; it warns with ``use_decoder=False``).
        output_units: if set, a learned linear map (a 1x1 convolution for images)
            of ``d_0`` to this many channels gives the prediction; None (default)
            returns ``d_0``, which has the shape of the input. Needs the decoder.
        kernel_initializer, recurrent_initializer, bias_initializer: passed to every
            encoder cell and combinator (and the output map). Every weight gets a
            copy of its own: a seeded initializer's copies take seeds derived from
            its seed and the weight's level and name, so that weights of one shape
            start different and the same seed gives the same ladder.
        feedback_initializer: initializer of the encoder cells' feedback kernels
            (the decoder-to-encoder connections); None (default) uses
            ``kernel_initializer``. Only a ladder with feedback
            (``decoder_to_encoder=True`` and ``use_decoder=True``) has feedback
            kernels: elsewhere it would have no effect and is a ``ValueError``
            (configs saved before load with a warning, without it).
            ``"zeros"`` starts the ladder as the same
            ladder without feedback (the feedback kernels still receive gradients,
            since the decoder outputs are not zero) and lets training bring the
            feedback in: on Occluded Moving MNIST (feed-forward instance-normalized
            convolutional levels) the decoder outputs fed back with Glorot kernels
            outweighed the frames at the encoder inputs, and the ladder reached 57%
            validation accuracy after 3,000 updates against 81% with zeros (and 80%
            without feedback).
        learn_initial_feedback: False (default): the feedback at the first step
            (``t = 0``, before any decoder output exists) is zeros; True: it is a
            weight of the ladder per level, ``initial_feedback_l`` (the shape of the
            level's decoder output, starting at zeros, trained with the rest and
            shared by every sample), the learned initial state of the feedback
            recurrence. With zeros, a trained ladder's encoders see at ``t = 0`` a
            feedback they never see later. Needs feedback (``decoder_to_encoder=True``
            and ``use_decoder=True``): elsewhere it is a ``ValueError``. Measured on
            Occluded Moving MNIST (validation sequences, 4 epochs, one seed:
            ``benchmarks/rladder_measurements.md``, occluded, twenty-fourth round) it
            changed nothing: 12.25% error after the last frame and 27.85% after the
            first, against 11.80% and 28.05% with zeros.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: likewise.
        kernel_constraint, recurrent_constraint, bias_constraint: likewise (the
            feedback kernels take the kernel's). The combinators' elementwise
            parameters (``mu_weights``, ``s_weights``) and the normalization gains
            take no regularizer or constraint of these.
        dropout: dropout rate, in ``[0, 1)``, on the signals between levels during
            training: every encoder output ``e_l`` (``l >= 1``) where it leaves its
            level (upwards to the next encoder and sideways to the decoder) and every
            decoder output ``d_l`` (``l >= 1``) where it goes down to the combinator
            below and back to its encoder as feedback. The encoder states themselves
            (the recurrence) are never dropped, nor is the returned ``top`` output
            (the clean top encoder output, as a classifier reading the top level
            sees it; only its copy going to the top decoder combinator is dropped).
            Default 0 (off). A ladder of one level without decoder has no signal to
            drop: dropout has no effect there and warns.
        dropout_noise: ``"step"`` (default) draws new dropout masks at every step;
            ``"sequence"`` draws one mask per sequence and signal and keeps it for
            every step (variational dropout, Gal & Ghahramani 2016). ``"sequence"``
            needs dropout (with ``dropout=0`` it has no effect and warns).
        zoneout: zoneout rate, in ``[0, 1)``, of the encoder states (Krueger et al.
            2017): during training every unit of every encoder state keeps its
            previous value with this probability instead of taking the cell's
            update; at inference the state is the expectation,
            ``zoneout * h_prev + (1 - zoneout) * h_new``. Default 0 (off). The
            feed-forward ``"conv"`` and ``"gatedconv"`` levels have no state: a
            ladder of only those warns that zoneout has no effect.
        seed: seed of the dropout and zoneout masks, an integer in ``[0, 2**63 - 1]``
            (its generator is seeded with ``seed % 2**31``), or None (random). It
            seeds nothing else: without dropout or zoneout it has no effect and warns
            (the initializers take seeds of their own).
        unroll: None (default): unroll the loop over steps (a Python loop, one copy
            of the step in the graph per step) when the number of steps is known
            when the layer is called (``T`` of the input, or ``n_iters``), and run a
            symbolic loop (one copy of the step) when ``T`` is None there; True:
            always unroll (``T`` must be known); False: always the symbolic loop.
            (On TensorFlow a functional model built on ``T = None`` still unrolls
            where ``fit`` or ``predict`` trace it with the steps of their data, until
            a batch of another length makes them trace ``T = None``; the outputs are
            the same either way. On JAX, whose ``jax.jit`` traces and compiles every
            new ``T`` whatever the loop, a ladder built on ``T = None`` runs the
            symbolic loop for every ``T``: unrolled, each new length of
            variable-length batches took a compilation growing with ``T``, 29 s at
            ``T = 20`` and 381 s at 80 for a small gated ladder under XLA, against
            6-7 s for the loop.) An unrolled ladder takes time and memory proportional to
            ``T`` to trace and compile, the symbolic loop a constant amount (JSB
            Chorales' dense ladder at ``T = 32``: 13 s against 2 s to trace, 52 s
            against 9 s to compile with XLA). Speed per step, measured on a CPU
            (``benchmarks/rladder.py loop``): the same without XLA; with XLA the
            loop was 2.6 times faster for that dense ladder but 4 times slower for a
            small convolutional one (Occluded Moving MNIST's), whose unrolled steps
            XLA optimizes better. On TensorFlow the loop writes every step's outputs
            into ``[T, ...]`` buffers: with XLA (``jit_compile=True``) in place, so
            its time stays linear, like JAX's scan; without XLA TensorFlow copies
            the buffer at every write, so the time grows as ``T**2`` for long
            sequences (batch 64, 64 features, two gated levels, on a loaded 2-core
            CPU: a training step under XLA took 0.25 s at ``T = 200``, 1.3 s at 800
            and 2.0 s at 1600; the forward pass alone without XLA 0.16 s, 2.2 s and
            8.8 s). No ``keras.ops`` form is linear both ways: the only TensorFlow
            ops Keras offers that add a step's output in constant time use
            TensorArrays (``ops.scan``, linear without XLA; ``ops.map``, which
            carries no state), and Keras' TensorFlow ``scan`` runs a while loop
            without ``maximum_iterations``, so its gradient does not compile with
            XLA ("XLA compilation requires a fixed tensor list size"), even for a
            known ``T``; a ``scatter_update`` copies the whole buffer on
            TensorFlow's CPU kernels even outside a loop; and a layer cannot tell,
            with ``keras.ops``, whether XLA is compiling it. For long sequences
            on TensorFlow, compile with XLA. In training, the loop draws
            every step's dropout and zoneout masks before it starts (the same
            distributions as unrolled, other random draws).

            The symbolic loop is a while loop whose number of iterations is known
            only when it runs, where DESIGN.md asks for static counts so that
            layers compile with XLA and run under any ``tf.distribute`` strategy.
            It keeps that intent: its bound (``maximum_iterations``, ``T + 1``)
            comes from the input's shape, which XLA knows when it compiles (one
            program per batch shape), and every replica runs the same loop on its
            own shard, with no cross-replica step inside it. Tested: ``model.fit``
            on batches traced with ``T = None`` compiles with XLA, and trains on
            two replicas of a ``MirroredStrategy``.
        normalization: None (default) or ``"layer"``: layer-normalize the bottom-up
            input of every encoder level (after pooling and flattening), per sample
            over all its features (height, width and channels for images), to zero
            mean and unit variance (no learned parameters: the encoder's kernel
            that follows absorbs a gain and a shift). Without it a stack of
            recurrent levels (ConvLSTM and gated cells with Glorot kernels) shrinks
            the signal several times per level (the top output of the Occluded
            Moving MNIST ladder varies by ~1e-4 between inputs at initialization);
            with it every level sees an input of the same scale. The decoder's
            lateral inputs (the encoder outputs themselves) are not normalized.
            Measured on Occluded Moving MNIST it did *not* help: the encoder-only
            ladder stayed at chance for 1,125 updates with it and reached 44%
            validation accuracy without it, so it is off by default.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[batch, T, features]`` or ``[batch, T, H, W, C]`` for
            ``n_iters=None`` (``T`` may be None unless ``unroll=True``);
            ``[batch, features]`` or ``[batch, H, W, C]`` otherwise.
        mask: optional ``[batch, T]`` boolean Keras mask of a sequence input: at a
            padded step the encoder states and the decoder feedback are left as they
            were and both outputs are zeros, so padded steps (leading, inner or
            trailing, whatever they hold) never change the outputs at the others.
            The mask is passed on: to ``top`` as it is (as Keras' recurrent layers
            pass theirs on), to ``predictions`` spread over their pixels,
            ``[batch, T, H, W]`` (the shape Keras' losses weigh, so a loss on the
            predicted frames leaves the padded steps out). A convolutional ``top``
            ``[batch, T, h, w, c]`` keeps the ``[batch, T]`` mask too, for the
            ``TimeDistributed`` and recurrent layers above it; Keras' losses cannot
            weigh such an output by it (a shape error, or for a 1x1 map a silently
            wrong loss; ``keras.layers.ConvLSTM2D``'s output alike), so pool or
            flatten the top per step before a loss on it. With ``n_iters`` set the input is
            static (the same ``x`` at every iteration, no time axis to pad), so a mask
            is a ``ValueError`` rather than being dropped.
        training: Python boolean; dropout and zoneout act only in training.

    Returns:
        With the decoder: ``[predictions, top]``, ``predictions``
        ``[batch, T, *input_features]`` (``output_units`` channels if set) the
        bottom decoder output at every step and ``top`` ``[batch, T, *top_features]``
        the top encoder output at every step (``T = n_iters`` for static inputs;
        never dropped out, see ``dropout``).
        With ``use_decoder=False``: ``top`` alone.
        An empty sequence (``T = 0``) gives empty outputs, and zero gradients for
        every weight, whether ``T`` is known when the layer is called or only when
        it runs.

    Example:

    ```python
    from keras_capsules.layers import RLadder, level_spec
    frames = keras.Input((10, 16, 16, 1))
    levels = [level_spec("convlstm", 8), level_spec("convlstm", 16, pool=2),
              level_spec("gated", 32)]
    predictions, top = RLadder(levels)(frames)   # (None, 10, 16, 16, 1), (None, 10, 32)

    notes = keras.Input((None, 88))                # sequences of any length
    predictions, top = RLadder([level_spec("gated", 32), level_spec("gated", 16)])(notes)
    # (None, None, 88), (None, None, 16): one model for sequences of any length
    ```

    Reference:
        A. Ilin, I. Prémont-Schwarz, T. H. Hao, A. Rasmus, R. Boney, H. Valpola,
        "Recurrent Ladder Networks", NIPS 2017.
    """

    def __init__(
        self,
        levels,
        n_iters=None,
        decoder_to_encoder=True,
        use_decoder=True,
        input_combinator=None,
        input_combinator_filters=None,
        output_units=None,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        dropout_noise="step",
        zoneout=0.0,
        seed=None,
        normalization=None,
        feedback_initializer=None,
        unroll=None,
        learn_initial_feedback=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.supports_masking = True
        if not isinstance(levels, (list, tuple)) or not levels:
            raise ValueError(
                f"`levels` must be a non-empty list of level specs. Received: levels={levels!r}"
            )
        self.levels = [normalize_level(spec, i) for i, spec in enumerate(levels)]
        kinds = [level_kind(s) for s in self.levels]
        if "dense" in kinds and "conv" in kinds[kinds.index("dense"):]:
            raise ValueError(
                "Convolutional levels must come before dense levels. "
                f"Received: levels={[s['encoder'] for s in self.levels]}"
            )
        for i, (spec, kind) in enumerate(zip(self.levels, kinds)):
            below_dense = i > 0 and kinds[i - 1] == "dense"
            if spec["pool"] > 1 and below_dense:
                raise ValueError(
                    f"levels[{i}]: pooling needs an image below the level. "
                    f"Received: pool={spec['pool']}"
                )
        self.n_iters = positive_int("n_iters", n_iters, allow_none=True)
        self.decoder_to_encoder = boolean("decoder_to_encoder", decoder_to_encoder)
        self.use_decoder = boolean("use_decoder", use_decoder)
        if input_combinator is None:
            input_combinator = "ConvG1" if kinds[0] == "conv" else "G1"
        if input_combinator not in COMBINATORS:
            raise ValueError(
                f"`input_combinator` must be one of {COMBINATORS}. "
                f"Received: input_combinator={input_combinator!r}"
            )
        self.input_combinator = input_combinator
        for i, spec in enumerate(self.levels):
            if spec["unflatten"] == "broadcast":
                continue
            below = "a dense level" if i > 0 and kinds[i - 1] == "dense" else None
            if i == 0 and input_combinator not in CONV_COMBINATORS:
                below = f"the {input_combinator} input combinator"
            if not self.use_decoder:
                below = "no decoder (use_decoder=False)"
            if below is not None:
                raise ValueError(
                    f"levels[{i}]: `unflatten` sets how a dense level's decoder output reaches "
                    f"the pixels of a convolutional decoder below it; this ladder has {below} "
                    f"there. Received: unflatten={spec['unflatten']!r}"
                )
        self.input_combinator_filters = positive_int(
            "input_combinator_filters", input_combinator_filters, allow_none=True
        )
        if self.input_combinator_filters is not None and input_combinator not in CONV_COMBINATORS[1:]:
            raise ValueError(
                "`input_combinator_filters` sets the hidden channels of a ConvG2 or ConvG3 "
                f"input combinator; a {input_combinator} combinator has none. Received: "
                f"input_combinator_filters={input_combinator_filters!r}, "
                f"input_combinator={input_combinator!r}"
            )
        self.output_units = positive_int("output_units", output_units, allow_none=True)
        if self.output_units is not None and not self.use_decoder:
            raise ValueError(
                "`output_units` maps the decoder's prediction, and use_decoder=False builds "
                f"no decoder. Received: output_units={output_units!r}, use_decoder=False"
            )
        self.dropout = rate("dropout", dropout)
        if dropout_noise not in DROPOUT_NOISE:
            raise ValueError(
                f"`dropout_noise` must be one of {DROPOUT_NOISE}. Received: dropout_noise={dropout_noise!r}"
            )
        self.dropout_noise = dropout_noise
        self.zoneout = rate("zoneout", zoneout)
        self.seed = seed = seed_value(seed)
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"`normalization` must be one of {NORMALIZATIONS}. Received: normalization={normalization!r}"
            )
        self.normalization = normalization
        self.unroll = None if unroll is None else boolean("unroll", unroll)
        self.seed_generator = (
            keras.random.SeedGenerator(generator_seed(seed)) if self.dropout or self.zoneout else None
        )
        self.kernel_initializer = get_initializer("kernel_initializer", kernel_initializer)
        self.recurrent_initializer = get_initializer("recurrent_initializer", recurrent_initializer)
        self.bias_initializer = get_initializer("bias_initializer", bias_initializer)
        self.feedback_initializer = (
            None if feedback_initializer is None else get_initializer("feedback_initializer", feedback_initializer)
        )
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.recurrent_regularizer = get_regularizer("recurrent_regularizer", recurrent_regularizer)
        self.bias_regularizer = get_regularizer("bias_regularizer", bias_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.recurrent_constraint = get_constraint("recurrent_constraint", recurrent_constraint)
        self.bias_constraint = get_constraint("bias_constraint", bias_constraint)

        use_feedback = self.decoder_to_encoder and self.use_decoder
        self.learn_initial_feedback = boolean("learn_initial_feedback", learn_initial_feedback)
        if self.learn_initial_feedback and not use_feedback:
            raise ValueError(
                "`learn_initial_feedback` learns the decoder feedback of the first step, and "
                + ("use_decoder=False" if not self.use_decoder else "decoder_to_encoder=False")
                + " builds no feedback. Received: learn_initial_feedback=True, "
                f"decoder_to_encoder={self.decoder_to_encoder}, use_decoder={self.use_decoder}"
            )
        if self.feedback_initializer is not None and not use_feedback:
            raise ValueError(
                "`feedback_initializer` initializes the encoders' feedback kernels (the "
                "decoder-to-encoder connections), and "
                + ("use_decoder=False" if not self.use_decoder else "decoder_to_encoder=False")
                + f" builds none. Received: feedback_initializer={feedback_initializer!r}, "
                f"decoder_to_encoder={self.decoder_to_encoder}, use_decoder={self.use_decoder}"
            )
        # One copy of each initializer for all the sublayers (each copies it again for
        # every weight). A seeded one is copied for every sublayer with a seed salted by
        # the sublayer's name: with one seed for all of them, the same-shaped weights of
        # different levels (and a level's input and feedback kernels) started identical.
        shared = dict(
            kernel=fresh_initializer(self.kernel_initializer),
            bias=fresh_initializer(self.bias_initializer),
            recurrent=fresh_initializer(self.recurrent_initializer),
        )
        if use_feedback:  # a cell without feedback refuses feedback options
            shared["feedback"] = fresh_initializer(
                self.kernel_initializer if self.feedback_initializer is None else self.feedback_initializer
            )

        def initializers(name, kinds):
            return {
                f"{kind}_initializer": salted_initializer(shared[kind], f"RLadder/{name}/{kind}")
                for kind in kinds
            }

        def common(name):
            return dict(
                initializers(name, ("kernel", "bias")),
                dtype=self.dtype_policy,
                trainable=self.trainable,  # (Keras gives a frozen layer's sublayers none)
                kernel_regularizer=self.kernel_regularizer,
                bias_regularizer=self.bias_regularizer,
                kernel_constraint=self.kernel_constraint,
                bias_constraint=self.bias_constraint,
            )

        def cell_common(name):
            options = dict(
                common(name),
                **initializers(name, ("recurrent",) + (("feedback",) if use_feedback else ())),
                use_feedback=use_feedback,
                recurrent_regularizer=self.recurrent_regularizer,
                recurrent_constraint=self.recurrent_constraint,
            )
            if use_feedback:
                options["feedback_regularizer"] = self.kernel_regularizer
                options["feedback_constraint"] = self.kernel_constraint
            return options

        self.encoders = []
        for i, spec in enumerate(self.levels):
            name = f"encoder_{i + 1}"
            if spec["encoder"] == "gated":
                cell = GatedEncoderCell(spec["units"], name=name, **cell_common(name))
            elif spec["encoder"] == "lstm":
                cell = LSTMEncoderCell(spec["units"], name=name, **cell_common(name))
            elif spec["encoder"] in _NORMALIZED_CELLS:
                cell = _NORMALIZED_CELLS[spec["encoder"]](
                    spec["units"],
                    kernel_size=spec["kernel_size"],
                    normalization=spec["normalization"],
                    name=name,
                    **cell_common(name),
                )
            else:
                cell = ConvLSTMEncoderCell(
                    spec["units"], kernel_size=spec["kernel_size"], name=name, **cell_common(name)
                )
            self.encoders.append(cell)
        self.decoders = []
        if self.use_decoder:
            n = len(self.levels)
            for l in range(n + 1):  # decoder of level l (0 = the input level)
                if l == 0:
                    combinator, filters, ksize = (
                        self.input_combinator,
                        self.input_combinator_filters,
                        self.levels[0]["kernel_size"],
                    )
                else:
                    spec = self.levels[l - 1]
                    combinator, filters, ksize = (
                        spec["combinator"],
                        spec["combinator_filters"],
                        spec["kernel_size"],
                    )
                self.decoders.append(
                    self._make_combinator(l, combinator, filters, ksize, common(f"decoder_{l}"))
                )
        self._warn_options_without_effect(kinds)

    def _warn_options_without_effect(self, kinds):
        """A ``UserWarning`` for every option the user set to a value other than its
        default that has no effect on this ladder (it matters only together with
        another option). Such options are accepted, not refused: configs saved with
        them still load, as the same ladder (defaults never warn)."""
        where = "RLadder: "

        def warn(*args):  # (pointing at the code that made the ladder)
            warn_without_effect(*args, stacklevel=5)

        drops = bool(self.dropout) and (self.use_decoder or len(self.levels) > 1)
        zones = bool(self.zoneout) and any(cell.NUM_STATES for cell in self.encoders)
        if self.dropout and not drops:
            warn(
                where, "dropout", self.dropout,
                "a signal between levels to drop: use_decoder=True or more than one level "
                "(the top encoder output, this ladder's only signal, is never dropped)",
            )
        if self.dropout_noise != DROPOUT_NOISE[0] and not drops:
            warn(
                where, "dropout_noise", self.dropout_noise,
                "dropout > 0 acting on the ladder (it sets how the dropout masks are drawn)",
            )
        stateless = "a level with a state (every 'conv' and 'gatedconv' encoder is feed-forward, stateless)"
        if self.zoneout and not zones:
            warn(where, "zoneout", self.zoneout, stateless)
        if not any(cell.NUM_STATES for cell in self.encoders):
            # no level has a recurrent kernel: the recurrent options were taken and dropped
            default = keras.initializers.serialize(keras.initializers.get("orthogonal"))
            given = keras.initializers.serialize(self.recurrent_initializer)
            if given != default:
                warn(where, "recurrent_initializer", given["class_name"], stateless)
            for name in ("recurrent_regularizer", "recurrent_constraint"):
                value = getattr(self, name)
                if value is not None:
                    warn(where, name, type(value).__name__, stateless)
        if self.seed is not None and not (drops or zones):
            warn(
                where, "seed", self.seed, "dropout > 0 or zoneout > 0 (it seeds their masks only)"
            )
        if not self.use_decoder:
            needs = "use_decoder=True (use_decoder=False builds no decoder)"
            if not self.decoder_to_encoder:
                warn(where, "decoder_to_encoder", False, needs)
            if self.input_combinator != ("ConvG1" if kinds[0] == "conv" else "G1"):
                warn(where, "input_combinator", self.input_combinator, needs)
            if self.input_combinator_filters is not None:
                warn(where, "input_combinator_filters", self.input_combinator_filters, needs)
            for i, (spec, kind) in enumerate(zip(self.levels, kinds)):
                default_combinator = "G1" if kind == "dense" else CONV_COMBINATORS[0]
                for key, default in (
                    ("combinator", default_combinator), ("combinator_filters", None), ("upsample_mode", "nearest")
                ):
                    if spec[key] != default:
                        warn(f"{where}levels[{i}]: ", key, spec[key], needs)
        for i, (spec, kind) in enumerate(zip(self.levels, kinds)):
            # a dense level's cell and G1 have no kernel of that size; the input
            # combinator takes the first level's (a convolutional one, for an image input)
            uses_it = i == 0 and self.use_decoder and self.input_combinator in CONV_COMBINATORS
            if kind == "dense" and not uses_it and spec["kernel_size"] != DEFAULT_KERNEL_SIZE:
                warn(
                    f"{where}levels[{i}]: ", "kernel_size", spec["kernel_size"],
                    "a convolutional level (a dense encoder and G1 have no kernel of that size; "
                    "only the first level's sets a convolutional input combinator's)",
                )

    def _make_combinator(self, l, combinator, filters, kernel_size, common):
        cls = _COMBINATOR_CLASSES[combinator]
        name = f"decoder_{l}"
        if cls is G1:
            return G1(name=name, **common)
        above = self.levels[l] if l < len(self.levels) else None
        upsample, mode, vector_top = 1, "nearest", "broadcast"
        if above is not None and level_kind(above) == "conv":
            upsample, mode = above["pool"], above["upsample_mode"]
        elif above is not None:
            vector_top = above["unflatten"]
        kwargs = dict(
            kernel_size=kernel_size, upsample=upsample, upsample_mode=mode, vector_top=vector_top, name=name
        )
        if combinator in CONV_COMBINATORS[1:]:
            kwargs["filters"] = filters
        return cls(**kwargs, **common)

    # ------------------------------------------------------------------ shapes
    def _feature_shape(self, input_shape):
        shape = tuple(input_shape)
        if self.n_iters is None:
            what = "[batch, T, features] or [batch, T, height, width, channels]"
            if len(shape) not in (3, 5):
                raise ValueError(
                    f"RLadder with n_iters=None expects a sequence of shape {what}. "
                    f"Received: input_shape={shape}"
                )
            if shape[1] is None and self.unroll:
                raise ValueError(
                    "RLadder with unroll=True unrolls a known number of steps T; a "
                    "sequence of unknown length needs unroll=None or False (a symbolic "
                    f"loop). Received: input_shape={shape}"
                )
            steps, features = shape[1], shape[2:]
        else:
            what = "[batch, features] or [batch, height, width, channels]"
            if len(shape) not in (2, 4):
                raise ValueError(
                    f"RLadder with n_iters={self.n_iters} expects a static input of shape "
                    f"{what}. Received: input_shape={shape}"
                )
            steps, features = self.n_iters, shape[1:]
        if any(d is None for d in features):
            raise ValueError(
                f"RLadder needs known feature sizes (all axes after the batch and time "
                f"axes). Received: input_shape={shape}"
            )
        return shape[0], steps, tuple(features)

    def _level_shapes(self, features):
        """Per-sample shapes: encoder inputs and outputs of every level."""
        inputs, outputs = [], []
        below = features
        for i, (spec, cell) in enumerate(zip(self.levels, self.encoders)):
            x = below
            if spec["pool"] > 1:
                if len(x) != 3 or x[0] % spec["pool"] or x[1] % spec["pool"]:
                    raise ValueError(
                        f"levels[{i}] pools by {spec['pool']}, so it expects an image below "
                        f"it whose height and width are divisible by {spec['pool']}. "
                        f"Received: shape below={x}"
                    )
                x = (x[0] // spec["pool"], x[1] // spec["pool"], x[2])
            if level_kind(spec) == "dense" and len(x) == 3:
                x = (math.prod(x),)
            if level_kind(spec) == "conv" and len(x) != 3:
                raise ValueError(
                    f"levels[{i}] is convolutional and expects an image [height, width, "
                    f"channels] below it. Received: shape below={x}"
                )
            inputs.append(x)
            below = cell.output_feature_shape(x)
            outputs.append(below)
        return inputs, outputs

    def build(self, input_shape):
        _, steps, features = self._feature_shape(input_shape)
        # Built for sequences of any length (T = None, e.g. keras.Input((None, ...))):
        # JAX, which traces every batch with its T, loops symbolically (see ``unroll``).
        self._built_for_any_length = steps is None
        # The levels first: a convolutional level on a vector input is the error to name
        # (not the input combinator, which the defaults give).
        self._enc_inputs, self._enc_outputs = self._level_shapes(features)
        if len(features) == 1 and self.use_decoder and self.input_combinator != "G1":
            raise ValueError(
                "A vector input needs input_combinator='G1'. "
                f"Received: input_combinator={self.input_combinator!r}"
            )
        if len(features) == 3 and self.use_decoder and self.input_combinator == "G1":
            raise ValueError(
                "An image input needs a convolutional input_combinator (ConvG1, ConvG2 or "
                f"ConvG3). Received: input_combinator={self.input_combinator!r}"
            )
        if self.normalization == "layer":
            for i, x in enumerate(self._enc_inputs):
                if None not in x and math.prod(x) == 1:
                    raise ValueError(
                        f"normalization='layer' normalizes each level's bottom-up input over its "
                        f"features; level {i}'s input has one ({x}), which normalizes to 0 for "
                        f"every input. Use normalization=None, or give the level more features. "
                        f"Received: input shape={tuple(input_shape)}"
                    )
        self._features = features
        for cell, x, h in zip(self.encoders, self._enc_inputs, self._enc_outputs):
            shapes = [(None,) + x]
            if cell.use_feedback:
                shapes.append((None,) + h)
            shapes += [(None,) + h] * cell.NUM_STATES
            cell.build(shapes)
        # the learned feedback of the first step (t = 0), one per level with feedback
        self.initial_feedback = [
            self.add_weight(name=f"initial_feedback_{l + 1}", shape=h, initializer="zeros")
            if self.learn_initial_feedback and cell.use_feedback
            else None
            for l, (cell, h) in enumerate(zip(self.encoders, self._enc_outputs))
        ]
        if self.use_decoder:
            lateral = [features] + self._enc_outputs
            for l, comb in enumerate(self.decoders):
                lat = (None,) + lateral[l]
                comb.build(lat if l == len(self.levels) else [(None,) + lateral[l + 1], lat])
            if self.output_units is not None:
                self.output_kernel = self.add_weight(
                    name="output_kernel",
                    shape=(features[-1], self.output_units),
                    initializer=clone_initializer(self.kernel_initializer, "RLadder/output_kernel"),
                    regularizer=self.kernel_regularizer,
                    constraint=self.kernel_constraint,
                )
                self.output_bias = self.add_weight(
                    name="output_bias",
                    shape=(self.output_units,),
                    initializer=clone_initializer(self.bias_initializer, "RLadder/output_bias"),
                    regularizer=self.bias_regularizer,
                    constraint=self.bias_constraint,
                )
        self.built = True

    def _prediction_features(self, features):
        if self.output_units is None:
            return features
        return features[:-1] + (self.output_units,)

    def compute_output_shape(self, input_shape):
        batch, steps, features = self._feature_shape(input_shape)
        _, outputs = self._level_shapes(features)
        top = (batch, steps) + outputs[-1]
        if not self.use_decoder:
            return top
        return [(batch, steps) + self._prediction_features(features), top]

    def compute_output_spec(self, inputs, training=None, mask=None):
        # a built ladder reused on other features: refused when the model is built (the
        # symbolic output had a shape the ladder never produces; predict then failed)
        self._check_built_features(tuple(inputs.shape))
        self._check_mask(mask, tuple(inputs.shape))
        return output_spec(self, inputs)

    def _check_built_features(self, input_shape):
        if self.built and self._feature_shape(input_shape)[2] != self._features:
            raise ValueError(
                f"This RLadder was built for inputs with features of shape {self._features}. "
                f"Received: input shape={tuple(input_shape)}"
            )

    def _check_mask(self, mask, input_shape):
        batch, steps, _ = self._feature_shape(input_shape)
        check_step_mask(self, mask, (batch, steps),
                        " (mask the sequence before, or use n_iters=None on a [batch, T, ...] input)")

    # ------------------------------------------------------------------ steps
    def _require_built(self, method):
        # (the level shapes come from build: an AttributeError on '_enc_outputs' before)
        if not self.built:
            raise ValueError(
                f"RLadder.{method} needs a built ladder: call it on an input, or "
                "build(input_shape), first"
            )

    def initial_carry(self, batch_size, dtype):
        """The carry of the first step for ``batch_size`` samples: zero encoder states,
        and zero decoder feedback (the learned one with ``learn_initial_feedback``).

        Args:
            batch_size: the number of samples, an integer >= 0 (0 for an empty batch,
                such as a replica's share of a last batch smaller than the number of
                replicas), or a scalar integer tensor (``ops.shape(x)[0]`` where the
                batch is known only when the ladder runs).
            dtype: a floating dtype, that of the inputs ``step`` will take (None:
                Keras' float type, ``keras.config.floatx()``).

        Returns:
            ``(states, feedback)``: ``states`` per level a list of the level's
            encoder states (none for the feed-forward ``"conv"`` and ``"gatedconv"``
            levels, one for ``"gated"``, two, ``h`` and ``c``, for ``"lstm"`` and
            ``"convlstm"``), each ``[batch_size, *level_features]``; ``feedback`` per
            level the decoder output fed back to its encoder, of the same shape, or
            None for a level without feedback (``decoder_to_encoder=False`` or
            ``use_decoder=False``).
        """
        self._require_built("initial_carry")
        batch_size = self._checked_batch_size(batch_size)
        dtype = self._checked_carry_dtype(dtype)
        states = [
            [ops.zeros((batch_size,) + h, dtype=dtype) for _ in range(cell.NUM_STATES)]
            for cell, h in zip(self.encoders, self._enc_outputs)
        ]

        def first_feedback(cell, h, learned):
            if not cell.use_feedback:
                return None
            if learned is None:
                return ops.zeros((batch_size,) + h, dtype=dtype)
            return ops.broadcast_to(ops.cast(learned, dtype), (batch_size,) + h)

        feedback = [
            first_feedback(cell, h, learned)
            for cell, h, learned in zip(self.encoders, self._enc_outputs, self.initial_feedback)
        ]
        return states, feedback

    def _checked_batch_size(self, batch_size):
        """``initial_carry``'s ``batch_size``: an integer >= 0 (as a Python int) or a
        scalar integer tensor (a concrete one >= 0). A float, a bool, a negative size or
        None failed in the backend's ``zeros`` (``Dimension -1 must be >= 0``), or were
        taken (``True`` as one sample)."""
        if isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool):
            if batch_size >= 0:
                return int(batch_size)
        elif _is_tensor(batch_size) and not tuple(batch_size.shape):
            dtype = keras.backend.standardize_dtype(batch_size.dtype)
            value = concrete_values(batch_size)
            if dtype.startswith(("int", "uint")) and (value is None or value >= 0):
                return batch_size
        raise ValueError(
            "`batch_size` of RLadder.initial_carry must be an integer >= 0 (or a scalar integer "
            f"tensor, such as ops.shape(x)[0]). Received: batch_size={batch_size!r}"
        )

    def _checked_carry_dtype(self, dtype):
        """``initial_carry``'s ``dtype``, standardized; refused unless floating (integer
        or boolean states were made, and cast to floats by the cells at the first step)."""
        try:
            standard = keras.backend.standardize_dtype(dtype)
        except (TypeError, ValueError):
            standard = None
        if standard is None or not standard.startswith(("float", "bfloat")):
            raise ValueError(
                "`dtype` of RLadder.initial_carry must be a floating dtype (that of the inputs "
                f"step will take, e.g. \"float32\"). Received: dtype={dtype!r}"
            )
        return standard

    def step(self, x, carry):
        """One step of the ladder: ``(x_t, carry) -> (prediction, top, new carry)``.

        ``prediction`` is None with ``use_decoder=False``. The layer must be built.
        No dropout is applied (this is the inference step).

        Args:
            x: the input of the step, ``[batch, *features]`` (one step of a
                sequence input, or the static input with ``n_iters``).
            carry: ``(states, feedback)`` as ``initial_carry`` makes it and ``step``
                returns it: one entry per level in each, lists or tuples. Its
                structure and the feature sizes of ``x`` and of every state and
                feedback are checked before the step runs: a ``ValueError`` names the
                entry and states the structure this ladder expects (too few levels
                failed with an ``IndexError``, extra ones were ignored). Batch sizes
                are compared by the encoder cells.
        """
        self._require_built("step")
        self._check_step_arguments(x, carry)
        return self._step(x, carry, None, False)

    def _expected_carry(self):
        """The carry ``step`` takes, for its errors: ``initial_carry``'s structure and
        per-level shapes."""
        levels = list(zip(self.encoders, self._enc_outputs))
        states = ", ".join("[" + ", ".join([_batch_of(h)] * cell.NUM_STATES) + "]" for cell, h in levels)
        feedback = ", ".join(_batch_of(h) if cell.use_feedback else "None" for cell, h in levels)
        return (
            "carry = (states, feedback) as initial_carry(batch_size, dtype) makes it, one entry "
            f"per level: states = [{states}], feedback = [{feedback}]"
        )

    def _check_step_arguments(self, x, carry):
        """Refuses an ``x`` or a ``carry`` that ``step`` cannot run on (see ``step``)."""
        if not _shaped(x, self._features):
            raise ValueError(
                f"RLadder.step expects x, the input of one step, of shape {_batch_of(self._features)}. "
                f"Received: x={_described(x)}"
            )

        def refuse(why, name, value):
            raise ValueError(
                f"RLadder.step expects {self._expected_carry()}. {why}Received: {name}={_described(value)}"
            )

        n = len(self.levels)
        if not isinstance(carry, (list, tuple)) or len(carry) != 2:
            refuse("", "carry", carry)
        for name, value in zip(("states", "feedback"), carry):
            if not isinstance(value, (list, tuple)) or len(value) != n:
                refuse(f"The ladder has {n} level{'s' * (n > 1)}. ", name, value)
        states, feedback = carry
        for i, (cell, h) in enumerate(zip(self.encoders, self._enc_outputs)):
            level = f"Level {i + 1} ({self.levels[i]['encoder']})"
            count = cell.NUM_STATES
            if not isinstance(states[i], (list, tuple)) or len(states[i]) != count:
                refuse(f"{level} has {count} state{'s' * (count != 1)}. ", f"states[{i}]", states[i])
            for j, state in enumerate(states[i]):
                if not _shaped(state, h):
                    refuse(f"{level}'s states are {_batch_of(h)}. ", f"states[{i}][{j}]", state)
            if not cell.use_feedback and feedback[i] is not None:
                reason = "use_decoder=False" if not self.use_decoder else "decoder_to_encoder=False"
                refuse(f"{level} has no feedback ({reason}): its feedback is None. ", f"feedback[{i}]", feedback[i])
            if cell.use_feedback and not _shaped(feedback[i], h):
                refuse(f"{level} takes the decoder feedback {_batch_of(h)}. ", f"feedback[{i}]", feedback[i])

    def _dropper(self, batch_size, dtype):
        """The dropout applied to signal ``key`` at one step (``drop(key, x)``)."""
        rate = self.dropout
        if self.dropout_noise == "step":
            return lambda key, v: keras.random.dropout(v, rate, seed=self.seed_generator)
        masks = {}

        def drop(key, v):
            if key not in masks:
                ones = ops.ones((batch_size,) + tuple(v.shape[1:]), dtype=dtype)
                masks[key] = keras.random.dropout(ones, rate, seed=self.seed_generator)
            return v * masks[key]

        return drop

    def _dropped_signals(self):
        """``{key: per-sample shape}`` of every signal dropout acts on (see ``_step``)."""
        n = len(self.levels)
        shapes = {}
        for i in range(n):
            if self.use_decoder or i < n - 1:
                shapes[("e", i)] = self._enc_outputs[i]
        if self.use_decoder:
            for l in range(n):  # d_{l+1} has the shape of the encoder output e_{l+1}
                shapes[("d", l + 1)] = self._enc_outputs[l]
        return shapes

    def _loop_noise(self, steps, batch_size, dtype, training):
        """The random masks of the symbolic loop, drawn before it (no random draw runs
        inside ``scan``): ``(per_step, fixed)``, ``per_step`` time-major tensors to scan
        over (``"drop"``: ``{key: mask}`` of ``dropout_noise="step"``; ``"zone"``: per
        level, per state, the units that keep their old value), ``fixed`` the dropout
        masks of ``dropout_noise="sequence"``."""
        per_step, fixed = {}, {}
        if training and self.dropout:
            step_noise = self.dropout_noise == "step"
            lead = (steps, batch_size) if step_noise else (batch_size,)
            masks = {
                f"{kind}{index}": keras.random.dropout(
                    ops.ones(lead + shape, dtype=dtype), self.dropout, seed=self.seed_generator
                )
                for (kind, index), shape in self._dropped_signals().items()
            }
            if step_noise:
                per_step["drop"] = masks
            else:
                fixed = masks
        if training and self.zoneout:
            per_step["zone"] = [
                [
                    keras.random.uniform((steps, batch_size) + h, seed=self.seed_generator) < self.zoneout
                    for _ in range(cell.NUM_STATES)
                ]
                for cell, h in zip(self.encoders, self._enc_outputs)
            ]
        return per_step, fixed

    def _zone(self, old, new, training, keep=None):
        """Zoneout of one state: keep ``old`` units with probability ``zoneout``
        (``keep``: which units, drawn beforehand; else drawn here)."""
        if not self.zoneout:
            return new
        if not training:
            return self.zoneout * old + (1.0 - self.zoneout) * new
        if keep is None:
            keep = keras.random.uniform(ops.shape(new), seed=self.seed_generator) < self.zoneout
        return ops.where(keep, old, new)

    def _step(self, x, carry, drop, training, zone_keep=None):
        states, feedback = carry
        below, lateral, new_states = x, [x], []
        for i, (spec, cell) in enumerate(zip(self.levels, self.encoders)):
            inp = max_pool(below, spec["pool"])
            if level_kind(spec) == "dense" and len(inp.shape) == 4:
                inp = ops.reshape(inp, (-1, math.prod(inp.shape[1:])))
            if self.normalization == "layer":
                inp = normalize(inp, tuple(range(1, len(inp.shape))))  # all axes but the batch
            below, cell_states = cell.step(inp, feedback[i], states[i])
            if self.zoneout and cell.NUM_STATES:
                keeps = zone_keep[i] if zone_keep is not None else [None] * cell.NUM_STATES
                cell_states = [
                    self._zone(o, h, training, k) for o, h, k in zip(states[i], cell_states, keeps)
                ]
                below = cell_states[0]
            new_states.append(cell_states)
            top = below  # the returned top output is never dropped
            if drop is not None and (self.use_decoder or i < len(self.levels) - 1):
                below = drop(("e", i), below)
            lateral.append(below)
        if not self.use_decoder:
            return None, top, (new_states, feedback)
        n = len(self.levels)
        decoded = [None] * (n + 1)
        d = self.decoders[n](lateral[n])
        decoded[n] = d
        for l in range(n - 1, -1, -1):
            if drop is not None:
                d = drop(("d", l + 1), d)
                decoded[l + 1] = d
            d = self.decoders[l]([d, lateral[l]])
            decoded[l] = d
        new_feedback = [
            decoded[i + 1] if cell.use_feedback else None for i, cell in enumerate(self.encoders)
        ]
        prediction = decoded[0]
        if self.output_units is not None:
            # Cast explicitly: ``call`` reads the weights in the compute dtype (Keras
            # autocast) but ``step`` runs outside it, where they are float32 and would
            # promote a float16 prediction to float32.
            dtype = prediction.dtype
            # An image's 1x1 map as a matmul of [pixels, channels]: a matmul of the
            # [b, H, W, C] tensor is a tensordot on TensorFlow, whose gradient XLA does
            # not compile in the symbolic loop over a batch of unknown size ("Transpose
            # must be a compile-time constant": unroll=False under jit_compile=True).
            pixels = tuple(prediction.shape[1:-1])
            flat = ops.reshape(prediction, (-1, prediction.shape[-1])) if pixels else prediction
            prediction = matmul(flat, ops.cast(self.output_kernel, dtype)) + ops.cast(
                self.output_bias, dtype
            )
            if pixels:
                prediction = ops.reshape(prediction, (-1,) + pixels + (self.output_units,))
        return prediction, top, (new_states, new_feedback)

    def _masked_step(self, x_t, keep, carry, drop, training, zone_keep=None):
        """``_step`` for one step of a sequence whose ``[batch]`` mask there is ``keep``
        (None: no mask)."""
        if keep is None:
            return self._step(x_t, carry, drop, training, zone_keep)
        # a padded step runs on zeros (an inf or NaN it holds would reach the gradients
        # through the discarded branch), leaves the carry as it was and outputs zeros
        keep = ops.cast(keep, "bool")
        x_t = ops.where(expand_to(keep, x_t), x_t, ops.zeros_like(x_t))
        prediction, top, (new_states, new_feedback) = self._step(x_t, carry, drop, training, zone_keep)
        old_states, old_feedback = carry

        def hold(new, old):
            return None if new is None else ops.where(expand_to(keep, new), new, old)

        carry = (
            [[hold(n, o) for n, o in zip(ns, os_)] for ns, os_ in zip(new_states, old_states)],
            [hold(n, o) for n, o in zip(new_feedback, old_feedback)],
        )
        top = ops.where(expand_to(keep, top), top, ops.zeros_like(top))
        if prediction is not None:
            prediction = ops.where(expand_to(keep, prediction), prediction, ops.zeros_like(prediction))
        return prediction, top, carry

    def compute_mask(self, inputs, mask=None):
        # the top gets the step mask [batch, T], as Keras' recurrent layers pass theirs
        # on (TimeDistributed and RNNs above it take that); the prediction, an output
        # for a loss, gets it spread over its pixels, the shape Keras' losses weigh
        if mask is None or not self.use_decoder:
            return mask
        prediction_shape = self.compute_output_shape(tuple(inputs.shape))[0]
        return [spread_step_mask(mask, prediction_shape), mask]

    def call(self, inputs, training=None, mask=None):
        # (every input of the sublayers comes from this one batch: no run-time batch checks)
        with batches_made_alike():
            return self._call(inputs, training, mask)

    def _call(self, inputs, training, mask):
        check_one_tensor(self, inputs)
        if not keras.backend.is_float_dtype(inputs.dtype):
            # integer or boolean inputs (0/1 piano rolls, binary frames): Keras casts
            # only floating inputs to the compute dtype, and the states and loop
            # buffers take the input's dtype
            inputs = ops.cast(inputs, self.compute_dtype)
        batch, steps, features = self._feature_shape(tuple(inputs.shape))
        self._check_built_features(tuple(inputs.shape))
        self._check_mask(mask, tuple(inputs.shape))
        mask = exact_step_mask(mask, inputs)
        if steps == 0:
            # an empty sequence has no step to run: the unrolled loop stacked no outputs
            # and TensorFlow's loop refused to write a step into its [0, ...] buffers.
            # The empty outputs still depend on every weight (through an exact zero), so
            # that their gradients are zeros as on the symbolic loop, not None
            # (TensorFlow's tape gives None for a weight the outputs do not touch).
            batch_size = ops.shape(inputs)[0]
            zero = zero_of_the_weights(self, inputs.dtype)
            top = ops.zeros((batch_size, 0) + self._enc_outputs[-1], dtype=inputs.dtype) + zero
            if not self.use_decoder:
                return top
            prediction = ops.zeros((batch_size, 0) + self._prediction_features(self._features), dtype=inputs.dtype)
            return [prediction + zero, top]
        carry = self.initial_carry(ops.shape(inputs)[0], inputs.dtype)
        if self.unroll is False or (self.unroll is None and (steps is None or self._jax_any_length())):
            return self._scan(inputs, mask, carry, bool(training))
        drop = self._dropper(ops.shape(inputs)[0], inputs.dtype) if training and self.dropout else None
        predictions, tops = [], []
        for t in range(steps):
            x_t = inputs[:, t] if self.n_iters is None else inputs
            keep = None if mask is None else mask[:, t]
            prediction, top, carry = self._masked_step(x_t, keep, carry, drop, bool(training))
            predictions.append(prediction)
            tops.append(top)
        top = ops.stack(tops, axis=1)
        if not self.use_decoder:
            return top
        return [ops.stack(predictions, axis=1), top]

    def _jax_any_length(self):
        """On JAX, a ladder built for T = None loops symbolically (``unroll=None``):
        ``jax.jit`` traces and compiles every new T, an unrolled ladder in time growing
        with T (see ``unroll``)."""
        return keras.backend.backend() == "jax" and getattr(self, "_built_for_any_length", False)

    def _scan(self, inputs, mask, carry, training):
        """The loop over steps as one symbolic loop (any number of steps)."""
        batch_size, dtype = ops.shape(inputs)[0], inputs.dtype
        sequence = self.n_iters is None
        steps, spare, time_major = loop_steps(inputs, self.n_iters)
        per_step, fixed = self._loop_noise(steps + spare, batch_size, dtype, training)
        if sequence:
            per_step["x"] = time_major(inputs)
        if mask is not None:
            per_step["keep"] = time_major(ops.cast(mask, "bool"))
        states, feedback = carry
        with_feedback = [f is not None for f in feedback]
        # the loop's carry holds tensors only (no None)
        init = {"states": states, "feedback": [f for f in feedback if f is not None]}

        def step(t, c):
            """Step ``t``: ``(new carry, outputs)``; time-major tensors are indexed by ``t``."""
            x = keras.tree.map_structure(lambda v: ops.take(v, t, axis=0), per_step)
            fb = iter(c["feedback"])
            step_carry = (c["states"], [next(fb) if has else None for has in with_feedback])
            masks = x.get("drop", fixed)
            drop = (lambda key, v: v * masks[f"{key[0]}{key[1]}"]) if masks else None
            prediction, top, (new_states, new_feedback) = self._masked_step(
                x["x"] if sequence else inputs, x.get("keep"), step_carry, drop, training, x.get("zone")
            )
            outputs = {"top": top}
            if self.use_decoder:
                outputs["prediction"] = prediction
            return {"states": new_states, "feedback": [f for f in new_feedback if f is not None]}, outputs

        shapes = {"top": self._enc_outputs[-1]}
        if self.use_decoder:
            shapes["prediction"] = self._prediction_features(self._features)
        outputs = symbolic_loop(step, init, steps, spare, batch_size, shapes, dtype)
        top = ops.moveaxis(outputs["top"], 0, 1)
        if not self.use_decoder:
            return top
        return [ops.moveaxis(outputs["prediction"], 0, 1), top]

    @classmethod
    def from_config(cls, config):
        config = dict(config, levels=saved_levels(config.get("levels")))
        saved = config.get("feedback_initializer")
        if saved is not None and not (config.get("decoder_to_encoder", True) and config.get("use_decoder", True)):
            # saved before it was refused without feedback: it never changed the model
            config["feedback_initializer"] = loaded_without_effect(
                "RLadder: ", "feedback_initializer", saved, None,
                "without decoder-to-encoder feedback (decoder_to_encoder=False or use_decoder=False)",
            )
        return super().from_config(config)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "levels": [dict(spec) for spec in self.levels],
                "n_iters": self.n_iters,
                "decoder_to_encoder": self.decoder_to_encoder,
                "use_decoder": self.use_decoder,
                "input_combinator": self.input_combinator,
                "input_combinator_filters": self.input_combinator_filters,
                "output_units": self.output_units,
                "dropout": self.dropout,
                "dropout_noise": self.dropout_noise,
                "zoneout": self.zoneout,
                "seed": self.seed,
                "normalization": self.normalization,
                "unroll": self.unroll,
                "learn_initial_feedback": self.learn_initial_feedback,
            }
        )
        serialize_all(config, self, _INITIALIZERS, "initializers")
        serialize_all(config, self, _REGULARIZERS, "regularizers")
        serialize_all(config, self, _CONSTRAINTS, "constraints")
        config["feedback_initializer"] = (
            None
            if self.feedback_initializer is None
            else keras.initializers.serialize(self.feedback_initializer)
        )
        return config
