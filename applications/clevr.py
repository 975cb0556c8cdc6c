"""CLEVR answered by a MAC network (Hudson & Manning 2018), and the MAC model parts
shared with :mod:`applications.sort_of_clevr`.

Model parts (reusable builders, used by both applications):

* :func:`input_unit`: word embeddings and a bidirectional LSTM over the question;
  its outputs are the contextual words, the concatenated final states of both
  directions the question vector ``q``. Padding (token 0) is masked.
* :func:`image_knowledge_base`: a feature map ``[H, W, C]`` -> optional positional
  encoding (:class:`PositionalEncoding`, sin/cos or a linear meshgrid) -> two 3x3
  convolutions with ELU -> a knowledge base of ``H * W`` cells of size ``d``.
* :func:`output_unit`: a two-layer classifier on ``[m_p, q]``.
* :func:`mac_answer_logits`: the three around a :class:`keras_capsules.layers.MACNetwork`
  named ``"mac"`` (built with ``return_attention=True``; the attention maps are read
  by :func:`attention_model`).

CLEVR data: TFDS ``clevr`` 3.1.0 (features ``image``, ``objects``, and a sequence
``question_answer`` of ``{"question", "answer"}`` texts per image). Images are
resized (224x224 in the paper) and passed once through a frozen ImageNet ResNet-101
up to its conv4 stage (layer ``"conv4_block23_out"``: ``14 x 14 x 1024`` at 224);
the features are cached on disk (:func:`cache_features`, float16 ``.npy``, written
atomically, with a progress bar). Questions are lowercased, punctuation is split off
and they are tokenized with tensorflow-text's ``WhitespaceTokenizer``; the word and
answer vocabularies come from the training split (:func:`build_vocabularies`).
A validation question whose answer no training question has (label ``UNSEEN_ANSWER``)
is kept in validation and evaluation: the model has no logit for that answer, so it
counts as an error in the accuracy (whose denominator is every question) and adds
nothing to the loss, which is the mean over the other questions of the split at any
batch size (:func:`make_dataset`); ``train`` and ``evaluate`` report how many there are.

Recipe (:func:`compile_model`, :func:`train`): Adam with learning rate 1e-4, batches
of 64, gradient clipping by norm (8), and an exponential moving average of the
weights used for evaluation. How the EMA weights are used, with Keras 3:

* ``Adam(use_ema=True, ema_momentum=0.999)`` keeps the average in the optimizer
  (``optimizer._model_variables_moving_average``), updated after every step;
* during ``fit``, the ``keras.callbacks.SwapEMAWeights()`` callback swaps the model's
  weights with the averages at ``on_test_begin`` and back at ``on_test_end``, so the
  validation metrics are those of the EMA weights while training continues on the
  raw weights;
* at the end of ``fit`` Keras itself calls ``optimizer.finalize_variable_values(
  model.trainable_weights)``, which assigns the averages to the model: after ``fit``
  the model *holds* the EMA weights, so ``evaluate``, ``predict`` and ``save`` use
  them (calling ``fit`` again continues from the EMA weights);
* the averages are of the trainable weights only: a model with batch normalization
  (Sort-of-CLEVR's image stem) gets ``recipe_callbacks(run_dir, statistics_data)``,
  whose ``keras_capsules.callbacks.SwapEMAWeightsAndStatistics`` also gives the EMA
  weights batch-normalization statistics of their own (re-estimated on training
  batches), during validation and in the model that ``fit`` leaves.

Attention maps: :func:`attention_model` and :func:`plot_attention` (word attention
and knowledge-base attention of every step, as a heat map over the image grid for a
spatial knowledge base, as bars over objects for a symbolic one);
:func:`plot_question_attention` draws those of a cached question (``train`` writes the
first validation question's to ``attention.png``).

Reference:
    D. A. Hudson and C. D. Manning, "Compositional Attention Networks for Machine
    Reasoning", ICLR 2018, arXiv:1803.03067.
"""

import json
import logging
import numbers
import os
import pathlib

import keras
import numpy as np
from keras import ops

from applications import arguments, checks, console, distribute, fault_tolerance, plotting, tfds_data
from applications.checks import integer_at_least
from applications.errors import (DataNotFoundError, InputError, PathNotFoundError, check_run_dir, create_run_dir,
                                 leaves_no_empty_run_dir, writable_folder)
from keras_capsules.callbacks import swap_ema_weights
from keras_capsules.layers import MACNetwork

logger = logging.getLogger(__name__)

FEATURE_LAYER = "conv4_block23_out"
IMAGE_SIZE = 224
PAD, UNK = "<pad>", "<unk>"
TFDS_NAME = "clevr:3.1.0"
UNSEEN_ANSWER = -1  # the label of an answer that no training question has (no logit for it)


# ------------------------------------------------------------------------- layers
@keras.saving.register_keras_serializable(package="applications")
class PositionalEncoding(keras.layers.Layer):
    """Appends position channels to a feature map ``[batch, H, W, C]``.

    Args:
        mode: ``"linear"``: two channels, the column and row coordinates from -1 to 1
            (a meshgrid); ``"sincos"``: ``dim`` channels, sines and cosines of the
            column index (first half) and of the row index (second half) at ``dim / 4``
            geometrically spaced frequencies (the Transformer's scheme in 2D).
        dim: number of sin/cos channels (a multiple of 4; ``"sincos"`` only).

    Call arguments:
        features: ``[batch, H, W, C]`` (``H``, ``W`` may be unknown).

    Returns:
        ``[batch, H, W, C + 2]`` (linear) or ``[batch, H, W, C + dim]`` (sincos).
    """

    def __init__(self, mode="sincos", dim=32, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("sincos", "linear"):
            raise InputError(f"`mode` must be 'sincos' or 'linear'. Received: mode={mode!r}")
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 4 or dim % 4:
            raise InputError(f"`dim` must be a positive multiple of 4. Received: dim={dim!r}")
        self.mode = mode
        self.dim = int(dim)

    @property
    def channels(self):
        return 2 if self.mode == "linear" else self.dim

    def _check(self, input_shape):
        # another rank built (with a made-up output shape) and failed inside TensorFlow's
        # concat at predict or fit
        if len(input_shape) != 4:
            raise ValueError(
                "PositionalEncoding expects a feature map of shape [batch, H, W, C]. "
                f"Received: shape={tuple(input_shape)}"
            )

    def build(self, input_shape):
        self._check(input_shape)
        self.built = True

    def _axis(self, n):
        """Encoding of positions ``0..n-1``: ``[n, channels / 2]``."""
        if self.mode == "linear":
            # Written out (not ops.linspace): the TensorFlow backend's linspace tests its
            # ``num`` as a Python bool and fails when H or W is unknown (a traced graph).
            steps = ops.cast(ops.maximum(n - 1, 1), "float32")
            positions = ops.cast(ops.arange(n), "float32")
            return ops.reshape(-1.0 + positions * (2.0 / steps), (-1, 1))
        k = self.dim // 4
        positions = ops.cast(ops.arange(n), "float32")[:, None]
        frequencies = ops.exp(ops.arange(k, dtype="float32") * (-np.log(10000.0) / k))[None]
        angles = positions * frequencies
        return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)

    def call(self, features):
        shape = ops.shape(features)
        batch, height, width = shape[0], shape[1], shape[2]
        half = self.channels // 2
        x = ops.broadcast_to(self._axis(width)[None], (height, width, half))
        y = ops.broadcast_to(self._axis(height)[:, None], (height, width, half))
        grid = ops.cast(ops.concatenate([x, y], axis=-1), features.dtype)
        grid = ops.broadcast_to(grid[None], (batch, height, width, self.channels))
        return ops.concatenate([features, grid], axis=-1)

    def compute_output_shape(self, input_shape):
        self._check(input_shape)
        channels = None if input_shape[-1] is None else input_shape[-1] + self.channels
        return tuple(input_shape[:-1]) + (channels,)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "dim": self.dim}


# ------------------------------------------------------------------------- model parts
def mac_units(units):
    """``units``, the MAC dimension ``d``, as an int if it is an even integer >= 2 (Python
    or numpy: a numpy integer, e.g. from a search space, was refused as "not even": units=8).

    Raises:
        InputError (a ValueError): ``"`units` must be an even integer >= 2 ... Received: units=value"``.
    """
    if isinstance(units, bool) or not isinstance(units, numbers.Integral) or units < 2 or units % 2:
        raise InputError(
            f"`units` must be an even integer >= 2 (a BiLSTM of units // 2 each way). Received: units={units!r}"
        )
    return int(units)


def dropout_rate(name, value):
    """``value`` as a float if it is a number in [0, 1) (Keras' ``Dropout`` takes rate=1,
    and zeroes its input: the answer from biases only).

    Raises:
        InputError (a ValueError): ``"`name` must be a number in [0, 1). Received: name=value"``
        (a negative one: ``"... a finite number >= 0 ..."``).
    """
    if checks.finite_number(name, value, positive=False) >= 1:
        raise InputError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")
    return float(value)


def input_unit(tokens, vocabulary_size, embedding_dim=300, units=512, dropout=0.0, name="input"):
    """Word embeddings + BiLSTM over the question tokens (0 = padding).

    Args:
        tokens: int tensor ``[batch, words]`` (a Keras input).
        vocabulary_size: rows of the embedding (including padding 0).
        embedding_dim: word-embedding size (the paper: 300).
        units: ``d``, the size of the contextual words and of ``q`` (even: each
            direction has ``units // 2``; the paper: 512).
        dropout: dropout on the embeddings.
        name: prefix of the layer names.

    Returns:
        ``(contextual_words [batch, words, units] (masked), question [batch, units])``.
    """
    units = mac_units(units)
    # numpy integers (e.g. sizes counted with numpy) were refused by Keras' Embedding as not
    # positive integers: "Received: output_dim=4 (of type int64)"
    vocabulary_size = integer_at_least("vocabulary_size", vocabulary_size, 1)
    embedding_dim = integer_at_least("embedding_dim", embedding_dim, 1)
    dropout = dropout_rate("dropout", dropout)
    x = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True, name=f"{name}_embedding")(
        tokens
    )
    if dropout:
        x = keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
    words, forward_h, _, backward_h, _ = keras.layers.Bidirectional(
        keras.layers.LSTM(units // 2, return_sequences=True, return_state=True),
        name=f"{name}_bilstm",
    )(x)
    question = keras.layers.Concatenate(name="question_vector")([forward_h, backward_h])
    return words, question


def image_knowledge_base(features, units=512, positional_encoding="sincos", encoding_dim=32,
                         dropout=0.0, name="kb"):
    """A knowledge base ``[batch, H * W, units]`` from a feature map ``[batch, H, W, C]``.

    Optional positional encoding (``"sincos"``, ``"linear"`` or None, see
    :class:`PositionalEncoding`), then two 3x3 convolutions (same padding) of ``units``
    channels with ELU, then the grid flattened row by row into cells.
    """
    dropout = dropout_rate("dropout", dropout)
    x = features
    if positional_encoding is not None:
        x = PositionalEncoding(positional_encoding, encoding_dim, name=f"{name}_position")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
    for k in (1, 2):
        x = keras.layers.Conv2D(units, 3, padding="same", activation="elu", name=f"{name}_conv{k}")(x)
    return keras.layers.Reshape((-1, units), name=f"{name}_cells")(x)


def output_unit(memory, question, num_answers, units=512, dropout=0.0, name="output"):
    """The classifier: ``[m_p, q]`` -> Dense(units, ELU) -> Dense(num_answers) logits."""
    dropout = dropout_rate("output_dropout", dropout)
    # (a numpy integer was refused by Keras' Dense: "Received: units=5")
    num_answers = integer_at_least("num_answers", num_answers, 1)
    x = keras.layers.Concatenate(name=f"{name}_concat")([memory, question])
    if dropout:
        x = keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
    x = keras.layers.Dense(units, activation="elu", name=f"{name}_hidden")(x)
    # (float32 under a mixed policy: the logits the loss and metrics read)
    return keras.layers.Dense(num_answers, name="answer", dtype=arguments.output_dtype())(x)


def mac_answer_logits(words, question, kb, num_answers, max_steps=12, classifier_units=None,
                      output_dropout=0.0, **mac_kwargs):
    """Contextual words, question and knowledge base -> MAC network -> answer logits.

    The MAC network is the layer ``"mac"`` (``return_attention=True``; its first output
    is the final memory). ``mac_kwargs`` go to :class:`MACNetwork`.
    """
    units = int(words.shape[-1])
    memory = MACNetwork(max_steps=max_steps, return_attention=True, name="mac", **mac_kwargs)(
        [words, question, kb]
    )[0]
    return output_unit(memory, question, num_answers, classifier_units or units, output_dropout)


def build_model(
    vocabulary_size,
    num_answers,
    feature_shape=(14, 14, 1024),
    units=512,
    embedding_dim=300,
    max_steps=12,
    positional_encoding="sincos",
    self_attention=False,
    memory_gate=False,
    memory_dropout=0.15,
    input_dropout=0.0,
    output_dropout=0.15,
    name="clevr_mac",
):
    """The MAC model for CLEVR on cached ResNet-101 conv4 features.

    Defaults are the paper's: ``d = 512``, 300-d embeddings, 12 steps.

    Returns:
        A ``keras.Model`` with inputs ``{"question": int [batch, words] (0 = padding),
        "features": float [batch, H, W, C]}`` and answer logits ``[batch, num_answers]``.
    """
    # input_dropout=1 zeroed the embeddings and the features (Keras' Dropout takes it)
    input_dropout = dropout_rate("input_dropout", input_dropout)
    tokens = keras.Input((None,), dtype="int32", name="question")
    features = keras.Input(tuple(feature_shape), name="features")
    words, question = input_unit(tokens, vocabulary_size, embedding_dim, units, input_dropout)
    kb = image_knowledge_base(features, units, positional_encoding, dropout=input_dropout)
    logits = mac_answer_logits(
        words, question, kb, num_answers, max_steps, output_dropout=output_dropout,
        self_attention=self_attention, memory_gate=memory_gate, memory_dropout=memory_dropout,
    )
    return keras.Model({"question": tokens, "features": features}, logits, name=name)


@keras.saving.register_keras_serializable(package="applications")
class AnswerCrossEntropy(keras.losses.Loss):
    """Cross-entropy of the answer logits ``[batch, answers]`` for the labels ``[batch]``;
    0 for a question labelled ``UNSEEN_ANSWER`` (its answer is no training class: it
    has no logit), which is left out of the loss by a weight of 0 (see
    :func:`make_dataset`), not of the accuracy.

    The batch's loss is Keras' ``"sum_over_batch_size"``: the (weighted) sum over the
    batch divided by the number of questions in it, those of unseen answers too. (The
    ``SparseCategoricalCrossentropy(ignore_class=UNSEEN_ANSWER)`` of before divided by
    the questions it kept in each batch, and Keras averages the batches' losses
    weighted by their sizes: the validation loss depended on the batch size, 1.4169 at
    batch 1 and 1.5002 at batch 18 for the same questions.)
    """

    def __init__(self, reduction="sum_over_batch_size", name="answer_cross_entropy", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        labels = ops.reshape(ops.cast(y_true, "int32"), ops.shape(y_pred)[:-1])
        seen = ops.not_equal(labels, UNSEEN_ANSWER)
        # (any class for the unseen ones, whose value is then dropped: -1 is no class)
        values = keras.losses.sparse_categorical_crossentropy(
            ops.where(seen, labels, 0), y_pred, from_logits=True
        )
        return ops.where(seen, values, ops.zeros_like(values))


def answer_loss():
    """The loss of the answers: :class:`AnswerCrossEntropy` (a question labelled
    ``UNSEEN_ANSWER`` adds nothing to it and counts in the accuracy as an error)."""
    return AnswerCrossEntropy()


def compile_model(model, learning_rate=1e-4, clipnorm=8.0, ema_momentum=0.999, metrics=("accuracy",)):
    """The paper's recipe: Adam, clipped gradients, EMA of the weights (see module doc).

    The loss is :func:`answer_loss`: questions whose answer is no training class count
    as errors in the accuracy but have no loss. Training batches hold none of them
    (:func:`make_dataset` drops them): the loss of a batch is its mean cross-entropy.
    The validation batches give them a weight of 0, and the other questions the one
    that makes the loss Keras reports the mean over the questions of known answer of
    the whole split, at any batch size (:func:`make_dataset`, ``drop_unknown=False``).
    """
    optimizer = keras.optimizers.Adam(  # a rate <= 0 trained uphill or not at all, silently
        checks.learning_rate(learning_rate), clipnorm=clipnorm, use_ema=True, ema_momentum=ema_momentum
    )
    model.compile(optimizer=optimizer, loss=answer_loss(), metrics=list(metrics))
    return model


def recipe_callbacks(run_dir, statistics_data=None, statistics_steps=100):
    """A stop on divergence (``fault_tolerance.StopOnDivergence``: the first batch whose
    loss is not finite ends ``fit`` in one line; before, ``train`` called from Python
    without the command line's callbacks saved and scored a NaN model), the EMA swap
    for validation, then TensorBoard logs under ``run_dir/logs``. With
    ``statistics_data`` (training batches) the swap also re-estimates the
    batch-normalization statistics for the EMA weights on its first ``statistics_steps``
    batches (``keras_capsules.callbacks.SwapEMAWeightsAndStatistics``)."""
    if statistics_data is None:
        swap = swap_ema_weights()
    else:
        swap = swap_ema_weights(statistics_data, statistics_steps=statistics_steps)
    return [
        fault_tolerance.StopOnDivergence(str(run_dir)),
        swap,
        keras.callbacks.TensorBoard(os.path.join(str(run_dir), "logs")),
    ]


# ------------------------------------------------------------------------- attention
def attention_model(model):
    """A model with the inputs of ``model`` and outputs ``{"answer", "control_attention"
    [b, p, words], "read_attention" [b, p, cells]}`` (from its ``"mac"`` layer)."""
    mac = model.get_layer("mac")
    outputs = mac.output
    if not isinstance(outputs, (list, tuple)):
        raise ValueError("the model's 'mac' layer must be built with return_attention=True")
    return keras.Model(
        model.input,
        {"answer": model.output, "control_attention": outputs[1], "read_attention": outputs[2]},
    )


def plot_attention(path, words, control_attention, read_attention, grid=None, image=None,
                   object_names=None, title=None):
    """Writes the attention maps of one question, one row per reasoning step, to a PNG.

    Args:
        path: output file.
        words: the question's words (``len(words) <= control_attention.shape[-1]``;
            padding columns beyond are dropped).
        control_attention: ``[p, words]`` attention of the control unit.
        read_attention: ``[p, cells]`` attention of the read unit.
        grid: ``(H, W)`` when the knowledge base is spatial (``cells == H * W``): the
            read attention is drawn as a heat map, over ``image`` if given. Every
            step's map has one colour scale, from 0 to the largest weight of all steps
            (as the bars share the scale 0..1): a near-uniform attention looks uniform.
        image: optional ``[h, w, 3]`` image (floats in [0, 1] or uint8).
        object_names: labels of the cells of a symbolic knowledge base (bars).
        title: optional figure title (e.g. the question, answer and prediction).
    """

    control_attention = np.asarray(control_attention, "float32")
    read_attention = np.asarray(read_attention, "float32")
    words = list(words)
    if read_attention.ndim != 2 or control_attention.ndim != 2 or len(read_attention) < 1:
        raise InputError(
            "`control_attention` and `read_attention` must be [steps, n] arrays with at least one "
            f"step. Received shapes: {control_attention.shape} and {read_attention.shape}"
        )
    steps, cells = read_attention.shape
    if len(control_attention) != steps:
        raise InputError(
            "`control_attention` and `read_attention` must have one row per step each. "
            f"Received shapes: {control_attention.shape} and {read_attention.shape}"
        )
    if len(words) > control_attention.shape[1]:
        raise InputError(
            f"`words` must have at most one word per column of `control_attention` "
            f"({control_attention.shape[1]}). Received: {len(words)} words"
        )
    if grid is not None:
        if (
            not isinstance(grid, (tuple, list))
            or len(grid) != 2
            or not all(isinstance(g, numbers.Integral) and not isinstance(g, bool) and g > 0 for g in grid)
        ):
            raise InputError(f"`grid` must be a pair (H, W) of positive integers. Received: grid={grid!r}")
        if grid[0] * grid[1] != cells:
            raise InputError(f"grid {grid} does not hold {cells} cells")
    elif object_names is not None and len(object_names) != cells:
        raise InputError(
            f"`object_names` must name the {cells} cells of `read_attention`. "
            f"Received: {len(object_names)} names"
        )
    if image is not None:  # (matplotlib's TypeError came once the figure was half drawn)
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3 or min(image.shape[:2]) < 1:
            raise InputError(f"`image` must be an RGB image [h, w, 3]. Received shape: {image.shape}")
    control_attention = control_attention[:, : len(words)]
    # One colour scale for the heat maps of all steps: scaled each to its own range, a
    # near-uniform attention (all weights within 1e-3 of 1 / cells) was drawn as hot and
    # cold spots, and the steps' maps could not be compared.
    peak = float(np.max(read_attention, initial=0.0))
    heat_scale = {"vmin": 0.0, "vmax": peak if peak > 0 else 1.0}
    fig, axes = plotting.subplots(steps, 2, figsize=(10, 2.2 * steps + 0.6), squeeze=False)
    for i in range(steps):
        ax = axes[i, 0]
        ax.bar(range(len(words)), control_attention[i], color="tab:blue")
        ax.set_xticks(range(len(words)))
        ax.set_xticklabels(words, rotation=60, fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_ylabel(f"step {i + 1}")
        ax = axes[i, 1]
        if grid is not None:
            height, width = grid
            heat = read_attention[i].reshape(height, width)
            if image is not None:
                ax.imshow(image, extent=(0, width, height, 0))
                ax.imshow(heat, cmap="jet", alpha=0.5, extent=(0, width, height, 0),
                          interpolation="bilinear", **heat_scale)
            else:
                ax.imshow(heat, cmap="viridis", **heat_scale)
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            labels = list(object_names) if object_names is not None else [str(c) for c in range(cells)]
            ax.bar(range(cells), read_attention[i], color="tab:orange")
            ax.set_xticks(range(cells))
            ax.set_xticklabels(labels, rotation=60, fontsize=7)
            ax.set_ylim(0, 1)
    axes[0, 0].set_title("word attention")
    axes[0, 1].set_title("knowledge-base attention")
    if title:
        fig.suptitle(title, fontsize=9)
    return plotting.save_and_close(fig, path, dpi=80)


def plot_question_attention(model, split, vocabulary, classes, path, index=0, image=None):
    """Draws the attention maps of question ``index`` of a split of :func:`prepare` to a PNG.

    ``split`` holds the keyword arguments of :func:`make_dataset` (``features_path``,
    ``image_index``, ``tokens``, ``labels``); the read attention is drawn as a heat map
    over the feature grid, laid over ``image`` when given (the question's image,
    ``[h, w, 3]``, e.g. :func:`question_image`; the cache keeps only features). The
    title is the question, the model's answer and the true one. Returns ``path``.
    """
    n = len(split["tokens"])
    if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < n:
        raise InputError(f"`index` must be an integer in [0, {n}) for a split of {n} questions. "
                         f"Received: index={index!r}")
    if image is not None:
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3 or min(image.shape[:2]) < 1:
            raise InputError(f"`image` must be an RGB image [h, w, 3]. Received shape: {image.shape}")
    tokens = np.asarray(split["tokens"][index : index + 1], "int32")
    features = load_features(split["features_path"])
    number = int(split["image_index"][index])
    out = attention_model(model)({"question": tokens, "features": np.asarray(features[number : number + 1], "float32")})
    words = [vocabulary[i] if 0 <= i < len(vocabulary) else UNK for i in tokens[0] if i != 0]
    predicted = classes[int(np.argmax(keras.ops.convert_to_numpy(out["answer"][0])))]
    label = int(split["labels"][index])
    truth = classes[label] if 0 <= label < len(classes) else "(an answer no training question has)"
    return plot_attention(
        path, words, keras.ops.convert_to_numpy(out["control_attention"][0]),
        keras.ops.convert_to_numpy(out["read_attention"][0]), grid=tuple(features.shape[1:3]), image=image,
        title=f"{' '.join(words)} -> {predicted} (answer: {truth})",
    )


def question_image(split, image_index, data_dir=None):
    """Image ``image_index`` (in the order :func:`cache_split` extracted them) of the
    TFDS ``clevr`` split ``split`` as uint8 ``[h, w, 3]``, read from ``data_dir``
    without any download; None when the split is not prepared there (the run uses
    only the feature cache). The images before it are read and skipped.
    """
    if isinstance(image_index, bool) or not isinstance(image_index, numbers.Integral) or image_index < 0:
        raise InputError(f"`image_index` must be a non-negative integer. Received: image_index={image_index!r}")
    try:
        ds = load_split(split, data_dir)
    except DataNotFoundError:
        return None
    for example in ds.skip(int(image_index)).take(1):
        return np.asarray(example["image"])[..., :3]  # CLEVR's PNGs are RGBA
    return None


# ------------------------------------------------------------------------- data
def load_split(split, data_dir=None, download=False):
    """A TFDS ``clevr`` 3.1.0 split in a fixed order.

    Raises:
        DataNotFoundError: without ``download``, the dataset is not prepared in
            ``data_dir`` (one line naming the folder and how to prepare it, as the
            command line says it: ``applications.tfds_data.load``).
    """
    return tfds_data.load(TFDS_NAME, data_dir, download, split=split, shuffle_files=False)


def feature_extractor(image_size=IMAGE_SIZE, weights="imagenet"):
    """Frozen ResNet-101 from images ``[b, s, s, 3]`` (0..255) to its conv4 output.

    ``weights=None`` gives random weights (tests; no download). Built in float32
    whatever the global dtype policy (``--precision``): the features are cached, and a
    cache is read by runs of any precision."""
    with arguments.precision_policy("float32"):
        base = keras.applications.ResNet101(
            include_top=False, weights=weights, input_shape=(image_size, image_size, 3)
        )
        extractor = keras.Model(base.input, base.get_layer(FEATURE_LAYER).output, name="resnet101_conv4")
    extractor.trainable = False
    return extractor


def _preprocess(image, image_size):
    import tensorflow as tf

    image = tf.image.resize(tf.cast(image[..., :3], tf.float32), (image_size, image_size))
    return keras.applications.resnet.preprocess_input(image)


def features_file(split, image_size=IMAGE_SIZE, weights="imagenet"):
    """Name of the feature cache of ``split`` for these images and ResNet-101 weights.

    ``{split}_{image_size}.npy`` for the ImageNet weights; other weights add a tag
    (``_random`` for ``weights=None``, a hash of the path of a weights file), so that
    features of other weights are never taken for these.
    """
    if weights == "imagenet":
        tag = ""
    elif weights is None:
        tag = "_random"
    else:
        import hashlib

        tag = "_w" + hashlib.sha256(os.path.abspath(str(weights)).encode()).hexdigest()[:12]
    return f"{split}_{image_size}{tag}.npy"


def cache_split(split, cache_dir, data_dir=None, image_size=IMAGE_SIZE, weights="imagenet",
                batch_size=32, extractor=None, verbose=1):
    """One pass over ``split``: conv4 features of every image and its questions, cached.

    Writes ``{cache_dir}/{split}_{image_size}.npy`` (float16 ``[images, H, W, 1024]``
    in the split's order; named by :func:`features_file`, which tells ResNet-101's
    ``weights`` apart: pass those of ``extractor``) and
    ``{cache_dir}/{split}_questions.json`` (image index, question, answer of every
    question) through temporary files renamed at the end (``fault_tolerance.atomic_write``;
    the features last), so an interrupted run never leaves a truncated cache, and the
    temporary features of a writer killed midway are removed by the next writer. An
    existing cache of the same images and weights is reused. Processes that share
    ``cache_dir`` (the workers of ``--strategy multiworker``, commands run at once)
    extract a split once: the others wait for it (``fault_tolerance.build_lock``).
    A progress bar counts the images.

    Returns:
        ``(features_path, questions_path)``.
    """

    cache_dir = pathlib.Path(cache_dir)
    path = cache_dir / features_file(split, image_size, weights)
    questions_path = cache_dir / f"{split}_questions.json"
    if path.exists() and questions_path.exists():
        return str(path), str(questions_path)
    writable_folder(cache_dir, f"cannot write into the cache directory {str(cache_dir)!r}")
    with fault_tolerance.build_lock(path, verbose):
        if path.exists() and questions_path.exists():  # extracted by another process while this one waited
            return str(path), str(questions_path)
        ds = load_split(split, data_dir)
        n = int(ds.cardinality())
        if n < 0:
            n = sum(1 for _ in ds)
        extractor = extractor or feature_extractor(image_size, weights)

        def write_features(tmp):
            table = _extract(ds, n, tmp, extractor, image_size, batch_size, verbose, split)
            # the questions first: the features file, the long work, completes the cache
            fault_tolerance.atomic_write(questions_path, lambda tmp_questions: _write_json(table, tmp_questions))

        fault_tolerance.atomic_write(path, write_features)
    return str(path), str(questions_path)


def _extract(ds, n, path, extractor, image_size, batch_size, verbose, split):
    """Writes the features of the ``n`` images of ``ds`` to ``path`` (a float16 ``.npy``);
    returns the question table of :func:`question_table`, as lists."""
    shape = tuple(int(s) for s in extractor.output.shape[1:])
    out = np.lib.format.open_memmap(path, mode="w+", dtype="float16", shape=(n,) + shape)

    def example(ex):
        qa = ex["question_answer"]
        # Questions and answers come in pairs (min() guards against ragged mock data).
        count = ops.minimum(ops.shape(qa["question"])[0], ops.shape(qa["answer"])[0])
        return _preprocess(ex["image"], image_size), qa, count

    # One pass over the split: the question counts travel with their images. (A second
    # pipeline over ``ds`` for the counts read and decoded every image twice.)
    batches = ds.map(example).padded_batch(batch_size)
    extract = _compiled_extractor(extractor, batches.element_spec[0])
    progress = keras.utils.Progbar(n, verbose=verbose, unit_name="image")
    table = {"image_index": [], "question": [], "answer": []}
    start = 0
    for images, qa, counts in batches:
        feats = extract(images)
        out[start : start + len(feats)] = ops.convert_to_numpy(feats).astype("float16")
        for k, count in enumerate(counts.numpy()):
            table["image_index"].extend([start + k] * int(count))
            table["question"].extend(q.decode() for q in qa["question"][k, :count].numpy())
            table["answer"].extend(a.decode() for a in qa["answer"][k, :count].numpy())
        start += len(feats)
        progress.update(start)
    out.flush()
    del out
    if start != n:
        raise RuntimeError(f"split {split!r} gave {start} images, expected {n}")
    return table


def _compiled_extractor(extractor, spec):
    """``images -> extractor(images, training=False)``: for a ``keras.Model`` one graph,
    traced once for batches of ``spec`` (any batch size, the last partial one too).

    ResNet-101 run eagerly batch after batch took 6.4-11.4 s per batch of 32 images at
    224x224 on a loaded 2-core CPU, 3.8-5.1 s in the graph (the same features, to the bit).
    Any other callable (a stand-in of the tests) is called for every batch, as before,
    and so is a model while ``tf.config.run_functions_eagerly(True)`` holds.
    """
    eager = lambda images: extractor(images, training=False)  # noqa: E731
    if not isinstance(extractor, keras.Model) or keras.backend.backend() != "tensorflow":
        return eager
    import tensorflow as tf

    if tf.config.functions_run_eagerly():
        return eager
    # the concrete function is called: one trace, whatever the batch sizes
    graph = tf.function(lambda images: extractor(images, training=False), autograph=False)
    return graph.get_concrete_function(spec)


def _write_json(data, path):
    with open(path, "w") as f:
        json.dump(data, f)


def _damaged_cache(path, problem):
    # a truncated, emptied or foreign cache file ended the command with a traceback
    # (JSONDecodeError, KeyError, "mmap length is greater than file size", EOFError, ...)
    return InputError(f"the cached file {path} is damaged ({problem}); delete it to have it built again")


def question_table(questions_path):
    """``(image_index int64 [n], questions [n], answers [n])`` from a cached split."""
    try:
        with open(questions_path) as f:
            table = json.load(f)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise _damaged_cache(questions_path, error) from None
    keys = ("image_index", "question", "answer")
    if not isinstance(table, dict) or any(not isinstance(table.get(k), list) for k in keys):
        raise _damaged_cache(questions_path, f"expected a JSON object of the lists {keys}")
    try:
        index = np.array(table["image_index"], "int64")
    except (TypeError, ValueError, OverflowError) as error:
        raise _damaged_cache(questions_path, f"image_index: {error}") from None
    if not len(index) == len(table["question"]) == len(table["answer"]):
        raise _damaged_cache(questions_path, "its lists differ in length")
    return index, np.array(table["question"], dtype=object), np.array(table["answer"], dtype=object)


def load_features(features_path):
    """The cached features ``[n, H, W, C]`` of a split, memory-mapped."""
    try:
        features = np.load(features_path, mmap_mode="r")
    except (ValueError, EOFError, OSError) as error:
        if isinstance(error, OSError) and not os.path.isfile(features_path):
            raise
        raise _damaged_cache(features_path, error) from None
    if features.ndim != 4:
        raise _damaged_cache(features_path, f"features of shape {features.shape}, expected [images, H, W, C]")
    return features


def split_punctuation(texts):
    """Lowercases and puts spaces around punctuation (a ``tf.string`` tensor of UTF-8).

    Letters, digits and marks of any script stay in their words: TensorFlow's ``\\w``
    and ``tf.strings.lower`` are ASCII only, and split ``"café"`` into ``caf`` and ``é``.
    """
    import tensorflow as tf

    # a NUL is a space: tf.strings.lower(encoding="utf-8") drops everything after it
    texts = tf.strings.regex_replace(texts, r"\x00", " ")
    texts = tf.strings.lower(texts, encoding="utf-8")
    return tf.strings.regex_replace(texts, r"([^\pL\pN\pM_\s])", r" \1 ")


def tokenize(texts):
    """Word tokens (``tf.RaggedTensor`` of strings) with tensorflow-text."""
    import tensorflow_text as tf_text

    return tf_text.WhitespaceTokenizer().tokenize(split_punctuation(texts))


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def build_vocabularies(questions, answers):
    """Word vocabulary ``(<pad>, <unk>, sorted words...)`` and answer classes (sorted)."""
    import tensorflow as tf

    tokens = tokenize(tf.constant(list(questions), tf.string)) if len(questions) else None
    words = set() if tokens is None else {w.decode() for w in tokens.flat_values.numpy()}
    words -= {PAD, UNK}
    classes = sorted({_text(a) for a in answers} - {""})
    return (PAD, UNK) + tuple(sorted(words)), tuple(classes)


def encode(questions, answers, vocabulary, classes):
    """Token ids ``[n, max_words]`` (0-padded, 1 unknown) and answer classes
    (``UNSEEN_ANSWER``, -1, for an answer that is not in ``classes``)."""
    import tensorflow as tf

    word_ids = {w: i for i, w in enumerate(vocabulary)}
    class_ids = {a: i for i, a in enumerate(classes)}
    tokens = tokenize(tf.constant(list(questions), tf.string)).to_list() if len(questions) else []
    ids = [[word_ids.get(w.decode(), 1) for w in q] for q in tokens]
    length = max((len(q) for q in ids), default=1) or 1
    array = np.zeros((len(ids), length), "int32")
    for i, q in enumerate(ids):
        array[i, : len(q)] = q
    labels = np.array(
        [class_ids.get(_text(a), UNSEEN_ANSWER) for a in answers], "int32"
    )
    return array, labels


def make_dataset(features_path, image_index, tokens, labels, batch_size=64, shuffle=False, seed=0,
                 drop_unknown=True, replicas=1, first_epoch=None):
    """``({"question", "features"}, answer)`` batches; features read from the cache.

    The cache is memory-mapped and the features of a batch gathered from it, so the
    full CLEVR cache (tens of GB) never has to fit in memory. Questions whose answer
    is not a training class (label ``UNSEEN_ANSWER``) are dropped when ``drop_unknown``
    (for training: there is nothing to learn from them). Pass ``drop_unknown=False``
    for validation and evaluation: dropping them computed the accuracy over fewer
    questions than there are, and overstated it; kept, each counts as an error (see
    :func:`compile_model`). ``replicas``: training batches are cut for that many
    replicas in sync (``distribute.even_batches``), before their features are read.

    With ``drop_unknown=False`` the batches are ``(inputs, answers, weights)``: of the
    ``n`` questions, ``k`` of which have a known answer, each of those weighs ``n / k``
    and each other 0 (all 0 for ``k = 0``). Keras averages the losses of the batches
    weighted by their sizes, and :func:`answer_loss` divides a batch's weighted sum by
    its size, so the loss it reports for the whole split is the sum of the ``k``
    cross-entropies over ``k``: the mean over the questions of known answer, whatever
    the batch size. The accuracy (an unweighted metric) counts all ``n`` questions.

    ``first_epoch``: None (default): the dataset is one epoch, which ``tf.data``
    reshuffles (with ``shuffle``) each time it is iterated, from ``seed`` and the
    number of iterations made so far in this process (a run resumed in a new process
    at epoch ``k`` would train on the orders of epochs 0, 1, ... again). An epoch
    number ``k``: the endless stream of the epochs ``k, k + 1, ...``
    (``distribute.epoch_stream``), epoch ``e`` shuffled by ``(seed, e)`` alone, so that
    a run resumed at epoch ``k`` trains on the uninterrupted run's orders; train on it
    with ``fit(stream, steps_per_epoch=training_batches(labels, batch_size, drop_unknown,
    replicas))`` (:func:`training_batches`), as :func:`train` does.
    """
    import tensorflow as tf

    batch_size = integer_at_least("batch_size", batch_size, 1)
    # ("False", a non-empty string, was taken as on)
    shuffle = checks.true_or_false("shuffle", shuffle)
    drop_unknown = checks.true_or_false("drop_unknown", drop_unknown)
    image_index, tokens, labels = np.asarray(image_index), np.asarray(tokens), np.asarray(labels)
    if not len(image_index) == len(tokens) == len(labels):
        raise InputError(
            "`image_index`, `tokens` and `labels` must hold one entry per question each. "
            f"Received: lengths {len(image_index)}, {len(tokens)} and {len(labels)}"
        )
    features = load_features(features_path)
    if len(image_index) and not 0 <= image_index.min() <= image_index.max() < len(features):
        # a question table of another cache: was an IndexError inside tf.data in the middle of fit
        raise InputError(
            f"`image_index` must index the {len(features)} images of {features_path}. "
            f"Received: image indices in [{image_index.min()}, {image_index.max()}]"
        )
    known = labels != UNSEEN_ANSWER
    columns = (image_index, tokens, labels)
    if drop_unknown:
        columns = tuple(column[known] for column in columns)
    else:  # the weights of the loss: the mean over the known answers (see above)
        columns += (np.where(known, len(labels) / max(int(known.sum()), 1), 0.0).astype("float32"),)
    labels = columns[2]
    feature_shape = features.shape[1:]

    def gather(index):
        return np.asarray(features[np.sort(index)][np.argsort(np.argsort(index))], "float32")

    examples = tf.data.Dataset.from_tensor_slices(columns)
    buffer = max(len(labels), 1)  # a buffer of at least 1: tf.data refuses 0 (no question kept)
    batches = distribute.even_batch_count(len(labels), batch_size, replicas)
    if first_epoch is not None:
        first_epoch = integer_at_least("first_epoch", first_epoch, 0)
        if not batches:  # (an endless stream of empty epochs)
            raise InputError(f"no batch of questions to train on: {len(labels)} question(s) kept, fewer than the "
                             f"{replicas} replicas" if len(labels) else "no question to train on")

    def one_pass(pass_seed, redraw):  # (see distribute.training_epochs)
        ds = examples.shuffle(buffer, seed=pass_seed, reshuffle_each_iteration=redraw) if shuffle else examples
        return distribute.even_batches(ds.batch(batch_size), replicas, batches)

    ds = distribute.training_epochs(one_pass, seed, batches, first_epoch)

    def attach(index, question, label, *weight):
        feats = tf.numpy_function(gather, [index], tf.float32)
        feats.set_shape((None,) + feature_shape)
        return ({"question": question, "features": feats}, label, *weight)

    return distribute.prefetched(ds.map(attach))


def training_batches(labels, batch_size=64, drop_unknown=True, replicas=1):
    """The batches of an epoch of :func:`make_dataset` of the questions of ``labels``
    (the ``steps_per_epoch`` of its stream, see its ``first_epoch``)."""
    labels = np.asarray(labels)
    kept = int(np.sum(labels != UNSEEN_ANSWER)) if drop_unknown else len(labels)
    return distribute.even_batch_count(kept, integer_at_least("batch_size", batch_size, 1), replicas)


def prepare(cache_dir, data_dir=None, splits=("train", "validation"), image_size=IMAGE_SIZE,
            weights="imagenet", extractor=None, batch_size=32, verbose=1):
    """Caches ``splits`` (:func:`cache_split`), builds the vocabularies on ``splits[0]``
    and saves them to ``cache_dir/vocabulary.json``.

    Returns:
        A dict with ``"vocabulary"``, ``"classes"`` and, per split, the keyword
        arguments of :func:`make_dataset` (``features_path``, ``image_index``,
        ``tokens``, ``labels``).
    """
    # an empty tuple failed with an IndexError after the loop (tables[splits[0]]), a string
    # was read as the splits "t", "r", "a", ...
    if isinstance(splits, str) or not splits or not all(isinstance(s, str) for s in splits):
        raise InputError(
            f"`splits` must be a sequence of at least one split name, e.g. ('train', 'validation'). "
            f"Received: splits={splits!r}"
        )
    splits = tuple(splits)
    paths = {}
    for s in splits:
        if extractor is None and not is_cached(cache_dir, s, image_size, weights):
            # the data first: a CLEVR not prepared in data_dir was reported only after
            # ResNet-101's weights were loaded (a 171 MB download on a first run, or an
            # offline fetch's retries)
            tfds_data.require_prepared(TFDS_NAME, data_dir)
            extractor = feature_extractor(image_size, weights)
        paths[s] = cache_split(s, cache_dir, data_dir, image_size, weights, batch_size, extractor, verbose)
    tables = {s: question_table(paths[s][1]) for s in splits}
    vocabulary, classes = build_vocabularies(tables[splits[0]][1], tables[splits[0]][2])
    result = {"vocabulary": vocabulary, "classes": classes}
    for s in splits:
        index, questions, answers = tables[s]
        tokens, labels = encode(questions, answers, vocabulary, classes)
        result[s] = {"features_path": paths[s][0], "image_index": index, "tokens": tokens, "labels": labels}
    from applications.fault_tolerance import write_json_atomically

    write_json_atomically({"vocabulary": vocabulary, "classes": classes},
                          pathlib.Path(cache_dir) / "vocabulary.json")
    return result


SPLITS = ("train", "validation")


def is_cached(cache_dir, split, image_size=IMAGE_SIZE, weights="imagenet"):
    """Whether :func:`cache_split` would reuse the cache of ``split`` (no TFDS, no ResNet)."""
    folder = pathlib.Path(cache_dir)
    return all(
        (folder / f).is_file() for f in (features_file(split, image_size, weights), f"{split}_questions.json")
    )


def offline_extractor(cache_dir, data_dir=None, image_size=IMAGE_SIZE, weights="imagenet", splits=SPLITS):
    """The feature extractor :func:`prepare` needs, or None when every split is cached.

    Checks first that TFDS ``clevr`` is prepared in ``data_dir`` (it is never
    downloaded) and reports missing ImageNet weights as one line.

    Raises:
        DataNotFoundError: the cache is incomplete and the dataset or the weights are missing.
    """
    if all(is_cached(cache_dir, s, image_size, weights) for s in splits):
        return None
    tfds_data.require_prepared(TFDS_NAME, data_dir)
    try:
        return feature_extractor(image_size, weights)
    except Exception as err:  # keras.utils.get_file raises a bare Exception when offline
        if weights is None:
            raise
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataNotFoundError(
            f"cannot load ResNet-101's {weights!r} weights to cache the CLEVR features ({first_line}); "
            f"Keras downloads them once into ~/.keras/models"
        ) from None


def _check_limit(limit):
    """``limit`` of :func:`first_questions`: None or a positive integer."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1):
        # a negative limit would silently drop the last questions (v[:-1])
        raise InputError(f"`limit` must be None or a positive integer. Received: limit={limit!r}")
    return limit


def first_questions(data, limit=None):
    """``data`` of :func:`prepare` with only the first ``limit`` questions of every split."""
    if _check_limit(limit) is None:
        return data
    return {
        key: {k: v if k == "features_path" else v[:limit] for k, v in value.items()}
        if key in SPLITS else value
        for key, value in data.items()
    }


def split_by_image(split, share, seed=0):
    """Two parts of one split of :func:`prepare`'s data: the questions of the images other
    than a random ``share`` of them, and the questions of that share (at least one image).

    The CLEVR test split has no answers, so the validation split is what ``evaluate``
    reports: a search choosing its trials on it reported its choice's own score. The
    search validates on a share of the training images instead (by image: questions about
    one scene in both parts would let a trial be scored on scenes it trained on).

    Raises:
        InputError: for a share outside (0, 1), or a split of fewer than two images.
    """
    if isinstance(share, bool) or not isinstance(share, numbers.Real) or not 0 < share < 1:
        raise InputError(f"`share` must be a number in (0, 1). Received: share={share!r}")
    images = np.unique(split["image_index"])
    if len(images) < 2:
        raise InputError(f"cannot hold out a share of {len(images)} image(s): questions of two or more "
                         "images are needed")
    held = np.random.default_rng(seed).permutation(images)[:min(len(images) - 1, max(1, round(share * len(images))))]
    held_out = np.isin(split["image_index"], held)
    return tuple({key: value if key == "features_path" else value[mask] for key, value in split.items()}
                 for mask in (~held_out, held_out))


def prepare_offline(cache_dir, data_dir=None, image_size=IMAGE_SIZE, limit=None, verbose=1, weights="imagenet"):
    """:func:`prepare` of both splits without any download (see :func:`offline_extractor`),
    keeping the first ``limit`` questions of each split; ``weights``: ResNet-101's, as
    :func:`prepare` takes them."""
    extractor = offline_extractor(cache_dir, data_dir, image_size, weights)
    data = prepare(cache_dir, data_dir, SPLITS, image_size, weights, extractor=extractor, verbose=verbose)
    return first_questions(data, limit)


#: ``evaluate``'s default ``weights``: those ``train`` recorded (:func:`recorded_weights`).
RECORDED = "recorded"


def recorded_weights(model_path):
    """The ResNet-101 weights whose features ``train`` recorded in ``metrics.json`` beside
    ``model_path`` (``"imagenet"``, None for random ones, or a weights file), else
    ``"imagenet"`` (a run of an older version recorded none: the command line's)."""
    recorded = checks.recorded_metrics(model_path)
    if "weights" not in recorded:
        return "imagenet"
    weights = recorded["weights"]
    if weights is not None and not isinstance(weights, str):
        raise InputError(f"metrics.json beside {model_path!r} records weights={weights!r}, which are no "
                         "ResNet-101 weights: 'imagenet', null or a file")
    return weights


def require_questions(data, cache_dir, splits=SPLITS):
    """Raises a one-line ``InputError`` when a split of :func:`prepare`'s ``data`` has no
    question: a model cannot be trained or scored on none (``train`` trained for nothing
    and then failed with "not enough values to unpack" from the empty evaluation)."""
    for split in splits:
        if not len(data[split]["tokens"]):
            raise InputError(
                f"the {split} split of the CLEVR cache {str(cache_dir)!r} has no questions "
                f"({split}_questions.json): delete the split's cached files to have them built again"
            )


def embedding_rows(model):
    """Rows of the word embedding of a model of :func:`build_model` (the size of the
    vocabulary it was trained with), or None when it has no layer ``"input_embedding"``.

    ``evaluate`` encodes the questions with the vocabulary of the cache's training split:
    a model trained on another vocabulary read other words for the same ids (an id past
    its rows failed inside the embedding, mid-evaluation)."""
    try:
        layer = model.get_layer("input_embedding")
    except ValueError:
        return None
    return getattr(layer, "input_dim", None)


def question_counts(split):
    """``{"validation_questions": n, "validation_unseen_answers": k}`` of a split of
    :func:`prepare` (``k``: the questions whose answer is no training class, every one
    counted as an error in the accuracy)."""
    labels = np.asarray(split["labels"])
    return {"validation_questions": int(len(labels)),
            "validation_unseen_answers": int(np.sum(labels == UNSEEN_ANSWER))}


def feature_shape(data):
    """Shape ``(H, W, C)`` of the cached features of :func:`prepare`'s ``data``."""
    return load_features(data["train"]["features_path"]).shape[1:]


#: the arguments of :func:`build_model` that :func:`train` takes from the data, not from ``model_kwargs``
_DATA_SIZES = ("vocabulary_size", "num_answers", "feature_shape")


def _checked_model_options(model_kwargs):
    """``model_kwargs`` of :func:`train` as a dict (``{}`` for None), refused as
    :func:`build_model` refuses them (names that are none of its options, or that the
    data set: :func:`applications.checks.model_options`), building a model on stand-in
    sizes and dropping it."""
    model_kwargs = checks.model_options(model_kwargs, build_model, given=_DATA_SIZES)
    build_model(2, 2, (2, 2, 8), **model_kwargs)
    return model_kwargs


@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(cache_dir, run_dir="runs/clevr", data_dir=None, epochs=25, batch_size=64, image_size=IMAGE_SIZE,
          weights="imagenet", model_kwargs=None, extractor=None, seed=0, verbose=1, learning_rate=1e-4,
          limit=None, strategy=None, callbacks=(), precision=None):
    """Trains the CLEVR MAC model with the paper's recipe, as the demo does.

    Writes ``model.keras`` (EMA weights), ``history.png``, ``attention.png`` (the
    attention maps of the first validation question, :func:`plot_question_attention`,
    over its image when the TFDS data is in ``data_dir``: :func:`question_image`),
    ``metrics.json`` and TensorBoard logs to ``run_dir``. Returns the metrics dict: the validation accuracy
    over every validation question (see :func:`question_counts`: those whose answer no
    training question has are errors; how many there are is reported too), the loss,
    the parameter count, the epochs and the paths. ``limit`` keeps the
    first questions of every split (quick runs), and ``metrics.json`` records it
    (``"limit"``, null for all): :func:`evaluate` scores the same first validation
    questions by default; with ``strategy`` the model is built
    and compiled in its scope (``batch_size`` is then the global batch); ``callbacks``
    run after the recipe's (the backup of a ``fault_tolerance.AtomicBackupAndRestore``
    among them is deleted once the outputs are written: ``fault_tolerance.finish_run``;
    a run resumed from it at epoch ``k`` trains epochs ``k, k + 1, ...`` on the orders
    the uninterrupted run had: :func:`make_dataset`'s ``first_epoch``).
    A split without questions is refused before training (:func:`require_questions`).
    ``verbose`` (0, 1 or 2) is ``fit``'s, and 1 or 2 also shows the feature extraction's
    progress.

    ``precision`` (``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``) is the Keras
    dtype policy the run builds, trains and saves its model under (its outputs in
    float32); None (the default): the global one. See
    ``applications.arguments.trains_under_precision``.
    """

    from applications import fault_tolerance
    from applications.demo import plot_history, save_atomically

    # epochs=0 wrote and scored an untrained model; -1 and 1.5 failed inside fit
    epochs = integer_at_least("epochs", epochs, 1)
    seed = integer_at_least("seed", seed, 0)  # (-1 and 1.5 were Keras' errors from set_random_seed)
    verbose = checks.verbosity(verbose)  # ("no" was taken by the progress bars and fit, and hid them)
    # The other options before the features are cached (hours for a cold cache), not
    # after: a bad limit, batch size or learning rate, and the model's options, which a
    # throw-away model on stand-in sizes checks (0.2 s; `units=7`, odd, or a typo in
    # model_kwargs were refused only once every image had gone through ResNet-101).
    _check_limit(limit)
    integer_at_least("batch_size", batch_size, 1)
    # as evaluate checks it: image_size=0 or True looked for features of that size, and
    # was refused as TFDS's clevr not prepared (to extract them), or by ResNet-101
    image_size = integer_at_least("image_size", image_size, 1)
    checks.learning_rate(learning_rate)
    model_kwargs = _checked_model_options(model_kwargs)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    strategy = distribute.resolve_strategy(strategy)
    keras.utils.set_random_seed(seed)  # (a seed Keras refuses, 2**32, fails here, not after the features)
    check_run_dir(run_dir)  # (a file in the way: refused before the features are cached)
    data = prepare(cache_dir, data_dir, SPLITS, image_size, weights, extractor, verbose=verbose)
    data = first_questions(data, limit)
    require_questions(data, cache_dir)  # before training, not after it
    create_run_dir(run_dir)  # once the data are there
    # seeded again after the features are cached: building ResNet-101 (a split not cached yet,
    # no `extractor` given) drew from the global generators, and a run with the cache already
    # filled built other weights
    keras.utils.set_random_seed(seed)
    replicas = strategy.num_replicas_in_sync
    # the epochs a resumed run trains are shuffled as the uninterrupted run's (distribute.epoch_stream)
    train_ds = make_dataset(**data["train"], batch_size=batch_size, shuffle=True, seed=seed, replicas=replicas,
                            first_epoch=fault_tolerance.resume_epoch(callbacks, epochs))
    # (and a mid-epoch backup's epoch goes on after the steps it had trained)
    train_ds = fault_tolerance.skip_trained_steps(train_ds, callbacks, epochs)
    steps = training_batches(data["train"]["labels"], batch_size, replicas=replicas)
    val_ds = make_dataset(**data["validation"], batch_size=batch_size, drop_unknown=False)
    with strategy.scope():
        model = build_model(
            len(data["vocabulary"]), len(data["classes"]), feature_shape(data), **model_kwargs
        )
        compile_model(model, learning_rate)
    callbacks = [*recipe_callbacks(run_dir), *callbacks]
    history = model.fit(distribute.distribute_dataset_options(train_ds), steps_per_epoch=steps,
                        validation_data=val_ds, epochs=epochs, verbose=verbose, callbacks=callbacks, shuffle=False)
    loss, accuracy = model.evaluate(val_ds, verbose=0)  # EMA weights (see module doc)
    paths = {k: os.path.join(run_dir, f) for k, f in
             (("model", "model.keras"), ("plot", "history.png"), ("attention", "attention.png"),
              ("metrics", "metrics.json"), ("logs", "logs"))}
    save_atomically(model, paths["model"])
    plot_history(fault_tolerance.logged_history(history, callbacks)[0], paths["plot"])
    # the first validation question's attention maps, over its image
    image = question_image("validation", int(data["validation"]["image_index"][0]), data_dir)
    plot_question_attention(model, data["validation"], data["vocabulary"], data["classes"], paths["attention"],
                            image=image)
    result = {"validation_accuracy": float(accuracy), "validation_loss": float(loss),
              **question_counts(data["validation"]), "parameters": int(model.count_params()), "epochs": epochs,
              "image_size": int(image_size),  # evaluate reads the features of this size by default
              "limit": limit,  # and scores the same first validation questions (None: all)
              # and the features of these ResNet-101 weights ("imagenet", null for random, a file)
              "weights": weights if weights is None or weights == "imagenet" else os.path.abspath(str(weights)),
              "cache_dir": checks.cache_dir_record(cache_dir, run_dir),  # evaluate reads the features there by default
              **paths}
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(callbacks)  # the outputs are written: the backup goes
    return result


def evaluate(model_path, cache_dir, data_dir=None, image_size=None, limit=None, batch_size=64,
             strategy=None, verbose=0, weights=RECORDED):
    """Validation loss and accuracy of a saved model (the CLEVR test split has no answers).

    The questions are encoded with the vocabulary of the cached training split, as in
    :func:`train`; a model whose word embedding has another number of rows (trained on
    another vocabulary, :func:`embedding_rows`) is refused in one line, as one with
    another number of answers. A missing cache is made first (see :func:`prepare_offline`). Every
    question counts in the accuracy, those whose answer no training question has as
    errors; their number is in the result (:func:`question_counts`). The model is
    compiled again with :func:`answer_loss` (a model saved before that loss left such
    questions out could not score their labels). ``image_size`` (None) defaults to the
    one :func:`train` recorded in ``metrics.json`` beside the model, else 224 (the
    features of another size are another cache, of another shape than the model takes).
    ``weights`` (ResNet-101's: ``"imagenet"``, None for random ones, or a weights file)
    defaults likewise to those ``train`` recorded, else ``"imagenet"``: a model trained
    on the features of other weights was scored on the ImageNet features.
    ``limit`` (None: the first questions of every split) defaults likewise to the one
    recorded there, else all: a model trained with a limit is scored on the validation
    questions that ``train`` scored. A given ``limit`` wins; one at least the number of
    validation questions scores all of them. A validation split without questions is a
    one-line ``InputError`` (:func:`require_questions`).

    ``verbose``: 1 shows the feature extraction's and Keras' progress bars, on stderr
    (stdout keeps only the result); 0 (the default) is silent.
    """

    verbose = checks.verbosity(verbose)  # (as train's)
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    from applications.checks import recorded_integers

    if image_size is None:
        image_size = recorded_integers(model_path, ("image_size",)).get("image_size", IMAGE_SIZE)
    image_size = integer_at_least("image_size", image_size, 1)
    # (make_dataset's check came after the features were cached: hours for a missing cache)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    if limit is None:  # (every validation question was scored, other ones than train scored)
        limit = recorded_integers(model_path, ("limit",), minimum=1).get("limit")
    if weights is RECORDED:
        weights = recorded_weights(model_path)
    strategy = distribute.resolve_strategy(strategy)
    with console.progress_on_stderr(verbose):  # a missing cache: hours
        data = prepare_offline(cache_dir, data_dir, image_size, limit, verbose=verbose, weights=weights)
    require_questions(data, cache_dir, ("validation",))
    val_ds = make_dataset(**data["validation"], batch_size=batch_size, drop_unknown=False)
    with strategy.scope():
        model = checks.load_model(model_path)
        # another application's model failed deep inside Keras ("Missing data for input ...")
        expected_features = tuple(feature_shape(data))
        checks.require_model(
            model, model_path,
            lambda shapes, model: {getattr(t, "name", "") for t in model.inputs} == {"question", "features"}
            and sorted(len(shape) for shape in shapes) == [2, 4]
            and any(shape[1:] == expected_features for shape in shapes)
            and checks.single_output_shape(model) == (None, len(data["classes"]))
            and embedding_rows(model) in (None, len(data["vocabulary"])),
            "a CLEVR model", "clevr",
            f"inputs question [batch, words] and features [batch, {', '.join(map(str, expected_features))}] "
            f"(those of the cache), an embedding of the cache's {len(data['vocabulary'])} words, "
            f"{len(data['classes'])} answer logits out",
        )
        model.compile(loss=answer_loss(), metrics=["accuracy"])
    with console.progress_on_stderr(verbose):
        loss, accuracy = model.evaluate(val_ds, verbose=verbose)
    return {"validation_accuracy": float(accuracy), "validation_loss": float(loss),
            **question_counts(data["validation"]), "model": model_path}


# The command-line protocol (applications/registry.py).



def add_arguments(parser, command):
    """CLEVR's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import positive_int
    if command == "train":
        parser.set_defaults(epochs=25, batch_size=64)  # the recipe of train() (module docstring)

    parser.add_argument("--data-dir", default=None,
                        help="TFDS data directory holding a prepared clevr:3.1.0, read only while "
                        "the feature cache is incomplete (default: ~/tensorflow_datasets; no download "
                        "is attempted)")
    parser.add_argument("--cache-dir", default=None,
                        help="the cache of ResNet-101 features and questions (default: RUN_DIR/cache "
                        "for train; for evaluate, the cache train recorded beside the model if it still "
                        "exists, else the model's folder/cache; DIRECTORY/cache for tune)")
    parser.add_argument("--image-size", type=positive_int, default=None if command == "evaluate" else IMAGE_SIZE,
                        help="images are resized to N x N before ResNet-101 (default: "
                        + ("the size `train` recorded beside the model, else 224)" if command == "evaluate"
                           else "%(default)s)"))
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="score only the first N validation questions (default: the --limit `train` "
                        "recorded beside the model, else all; a larger N: all)" if command == "evaluate"
                        else "use only the first N questions of every split (quick runs)")
    if command == "train":
        add_mac_arguments(parser, units=512, mac_steps=12, embedding_dim=300)


def add_mac_arguments(parser, units, mac_steps, embedding_dim, learning_rate=1e-4):
    """The MAC model's options of ``train`` (CLEVR and Sort-of-CLEVR), with their defaults;
    :func:`mac_options` reads them back as ``build_model`` arguments."""
    from applications.arguments import positive_float, positive_int

    parser.add_argument("--learning-rate", type=positive_float, default=learning_rate)
    parser.add_argument("--units", type=positive_int, default=units, help="MAC state size d (even)")
    parser.add_argument("--mac-steps", type=positive_int, default=mac_steps, help="MAC reasoning steps p")
    parser.add_argument("--embedding-dim", type=positive_int, default=embedding_dim, help="word embedding size")


def mac_options(args):
    """The ``build_model`` arguments of the options of :func:`add_mac_arguments`."""
    return {"units": args.units, "max_steps": args.mac_steps, "embedding_dim": args.embedding_dim}


def run_train(args, strategy):
    from applications.arguments import cache_dir_of, train_options

    cache_dir = cache_dir_of(args)
    extractor = offline_extractor(cache_dir, args.data_dir, args.image_size)
    return train(
        cache_dir,
        data_dir=args.data_dir,
        image_size=args.image_size,
        model_kwargs=mac_options(args),
        extractor=extractor,
        learning_rate=args.learning_rate,
        limit=args.limit,
        **train_options(args, strategy),
    )


def run_evaluate(args, strategy):
    from applications.arguments import cache_dir_of

    return evaluate(args.model, cache_dir_of(args), args.data_dir, args.image_size, args.limit,
                    batch_size=distribute.global_batch_size(args.batch_size, strategy), strategy=strategy,
                    verbose=0 if args.quiet else 1)
