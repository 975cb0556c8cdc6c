"""The CCCapsNet text classifier (Ren & Lu): compositional embedding, BiGRU, routing.

    ids [batch, length]                       0 = padding
    -> CompositionalEmbedding (M = 8 codebooks, D = 64, mask_zero)    or Embedding
    -> BiGRU(128) -> Dropout(0.5) -> BiGRU(128)   [batch, length, 128], masked
       (ProjectedGRU: Keras' GRU, faster to train on CPUs; projected_gru.py)
       (the second layer sums its two directions, as the authors' code)
    -> mean over the real tokens                   [batch, 128]
    -> 128 / capsule_dim lower capsules            [batch, 16, 8]
    -> KMeansRouting / DynamicRouting (one weight set per lower capsule) to one
       capsule of class_capsule_dim per class      [batch, num_classes, 16]
    -> CapsuleLength: class scores in [0, 1)

This is the authors' design, with one difference that the issue asks for: their mean
over time also averages the padding; here it runs over the real tokens only (the
embedding's mask follows the GRUs, which carry their state over padded steps, and
:class:`MaskedMean` honours it). So a sentence gets the same scores whatever padding
its batch adds. A row without any real token (an empty text) gets a zero sentence
vector, not ``0 / 0``.

``routing="linear"`` is the baseline without capsules: the same sentence vector, then
a ``Dense`` layer with a sigmoid per class. The sigmoid keeps the scores in ``[0, 1]``
like capsule lengths, so the same margin + focal loss and the same arg-max
prediction apply to all three heads.

(An earlier version of this module routed ``4`` capsules cut from *every token*,
``length * 4`` inputs per sentence. On SST-2 it learned worse than the linear head
- 0.567 for k-means against 0.719 - and routing 512 capsules per sentence cost a
fifth of the training throughput; see ``benchmarks/text_classification.py``.)
"""

import inspect
import numbers

import keras

from keras import ops

# the choices, where the command lines read them without TensorFlow
from applications.text_classification.options import EMBEDDINGS, GRUS, ROUTINGS, SIMILARITIES
from keras_capsules.layers import (
    CapsuleLength,
    CompositionalEmbedding,
    DynamicRouting,
    KMeansRouting,
)
from keras_capsules.losses import CapsuleLoss

from applications.text_classification.projected_gru import ProjectedGRU
from applications import arguments, checks
from applications.errors import InputError

@keras.saving.register_keras_serializable(package="applications")
class MaskedMean(keras.layers.Layer):
    """Mean over the real steps: ``[batch, steps, features]`` -> ``[batch, features]``.

    As ``keras.layers.GlobalAveragePooling1D`` with a mask, except that a row without
    any real step gives zeros (Keras divides by its count, 0: NaN scores, and NaN
    gradients for every weight). Padded steps never change the result.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is None:
            return ops.mean(inputs, axis=1)
        keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
        total = ops.sum(ops.where(keep, inputs, ops.zeros_like(inputs)), axis=1)
        count = ops.sum(ops.cast(keep, inputs.dtype), axis=1)
        return total / ops.maximum(count, ops.ones_like(count))

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])


def _choice(name, value, choices):
    if value not in choices:
        raise InputError(f"`{name}` must be one of {choices}. Received: {name}={value!r}")


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def check_arguments(**options):
    """Raises the ``ValueError`` :func:`build_model` would raise for these options.

    Cheap (no layers are made), so that :func:`recipe.train` can refuse bad options
    before it spends minutes preparing data. Takes :func:`build_model`'s keyword
    arguments; those not given are taken at its defaults.
    """
    bound = inspect.signature(build_model).bind(None, None, **options)
    bound.apply_defaults()
    _check(**bound.arguments)


def _check(routing, embedding, embedding_dim, num_codebooks, gru_units, dropout, capsule_dim,
           class_capsule_dim, n_iters, similarity, gru, codebook_stddev, codes_stddev, **_):
    _choice("routing", routing, ROUTINGS)
    _choice("embedding", embedding, EMBEDDINGS)
    _choice("gru", gru, GRUS)
    _choice("similarity", similarity, SIMILARITIES)
    if (
        isinstance(dropout, bool)
        or not isinstance(dropout, numbers.Real)
        or not 0 <= dropout < 1
    ):
        raise InputError(f"`dropout` must lie in [0, 1). Received: dropout={dropout!r}")
    for arg, value in (
        ("embedding_dim", embedding_dim), ("num_codebooks", num_codebooks), ("gru_units", gru_units),
        ("capsule_dim", capsule_dim), ("class_capsule_dim", class_capsule_dim), ("n_iters", n_iters),
    ):
        _positive_int(arg, value)
    # the initializers' standard deviations: NaN built a model of NaN scores, without a word
    for arg, value in (("codebook_stddev", codebook_stddev), ("codes_stddev", codes_stddev)):
        checks.finite_number(arg, value, positive=False)
    if routing != "linear" and gru_units % capsule_dim:  # the linear head cuts no capsules
        raise InputError(
            f"`capsule_dim` must divide `gru_units` (the sentence vector is cut into capsules). "
            f"Received: gru_units={gru_units}, capsule_dim={capsule_dim}"
        )


def _embedding_layer(embedding, vocab_size, embedding_dim, num_codebooks, codes_stddev, codebook_stddev,
                     zeros=False):
    """The model's ``embedding`` layer; ``zeros=True`` starts every weight at zero
    (:func:`parameter_report` counts a layer without taking a random draw)."""
    def normal(stddev):
        return "zeros" if zeros else keras.initializers.RandomNormal(stddev=stddev)

    if embedding == "compositional":
        return CompositionalEmbedding(
            vocab_size, embedding_dim, num_codebooks=num_codebooks, mask_zero=True,
            codes_initializer=normal(codes_stddev), codebook_initializer=normal(codebook_stddev), name="embedding")
    return keras.layers.Embedding(vocab_size, embedding_dim, mask_zero=True, name="embedding",
                                  embeddings_initializer="zeros" if zeros else "uniform")  # (Keras' default)


def build_model(
    vocab_size,
    num_classes,
    routing="kmeans",
    embedding="compositional",
    embedding_dim=64,
    num_codebooks=8,
    gru_units=128,
    dropout=0.5,
    capsule_dim=8,
    class_capsule_dim=16,
    n_iters=3,
    similarity="cosine",
    codebook_stddev=1.0,
    codes_stddev=1.0,
    gru="projected",
    name=None,
):
    """Builds the capsule text classifier (defaults: the paper's configuration).

    Args:
        vocab_size: size of the id space, padding (0) and OOV (1) included.
        num_classes: number of classes (class capsules), an integer >= 2: the
            prediction is the arg-max of the class scores, which one class always wins.
        routing: ``"kmeans"`` (CCCapsNet), ``"dynamic"`` (Sabour et al.) or
            ``"linear"`` (masked mean over tokens + sigmoid ``Dense``; no capsules).
        embedding: ``"compositional"`` (learned compositional codes, ``num_codebooks``
            codebooks) or ``"standard"`` (``keras.layers.Embedding``).
        embedding_dim: word vector size ``D``.
        num_codebooks: ``M``, codebooks of the compositional embedding.
        gru_units: units of each GRU direction (two bidirectional layers).
        dropout: dropout rate between the two GRU layers.
        capsule_dim: dimension of the lower capsules; the sentence vector (of
            ``gru_units`` features) is cut into ``gru_units // capsule_dim`` of them, so
            it must divide ``gru_units``.
        class_capsule_dim: dimension of the class capsules.
        n_iters: routing iterations.
        similarity: k-means routing similarity, ``"cosine"`` (paper) or ``"dot"``.
            The linear head reads none of ``capsule_dim``, ``class_capsule_dim``,
            ``n_iters`` and ``similarity`` (dynamic routing not ``similarity``): a value
            other than the default there warns (``UserWarning``) and is not checked
            against ``gru_units``.
        codebook_stddev: the compositional codebooks start normal with this standard
            deviation (1.0, as the authors' code). The library default (uniform in
            +-0.05) makes all words' embeddings nearly equal at first, and the model
            then learns far more slowly.
        codes_stddev: the learned codes start normal with this standard deviation.
        gru: ``"projected"`` (default; :class:`ProjectedGRU`, Keras' GRU with its input
            projection out of the time loop and a written-out backward pass: the same
            function and weights, about a third more training samples per CPU-second)
            or ``"keras"`` (``keras.layers.GRU``).
        name: model name (default ``"cccapsnet_<routing>_<embedding>"``).

    Returns:
        A ``keras.Model`` from ids ``[batch, length]`` (int32, 0 = padding) to class
        scores ``[batch, num_classes]`` in ``[0, 1]``.
    """
    # one class built a model whose arg-max prediction is always right: nothing to learn
    num_classes = checks.integer_at_least("num_classes", num_classes, 2)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or vocab_size < 2:
        raise InputError("`vocab_size` must be an integer >= 2 (ids 0 and 1 are the padding and "
                         f"the out-of-vocabulary word). Received: vocab_size={vocab_size!r}")
    check_arguments(
        routing=routing, embedding=embedding, embedding_dim=embedding_dim,
        num_codebooks=num_codebooks, gru_units=gru_units, dropout=dropout,
        capsule_dim=capsule_dim, class_capsule_dim=class_capsule_dim, n_iters=n_iters,
        similarity=similarity, gru=gru, codebook_stddev=codebook_stddev, codes_stddev=codes_stddev,
    )
    # the routing's options are silently without effect where nothing reads them
    unused = [("similarity", similarity, "routing='kmeans'")] if routing != "kmeans" else []
    if routing == "linear":
        unused += [(option, value, "routing='kmeans' or 'dynamic'") for option, value in
                   (("capsule_dim", capsule_dim), ("class_capsule_dim", class_capsule_dim), ("n_iters", n_iters))]
    defaults = inspect.signature(build_model).parameters
    for option, value, needs in unused:
        if value != defaults[option].default:
            checks.warn_without_effect("text_classification.build_model", option, value, needs)
    ids = keras.Input((None,), dtype="int32", name="ids")
    x = _embedding_layer(embedding, vocab_size, embedding_dim, num_codebooks, codes_stddev, codebook_stddev)(ids)
    recurrent = ProjectedGRU if gru == "projected" else keras.layers.GRU
    x = keras.layers.Bidirectional(recurrent(gru_units, return_sequences=True), name="bigru1")(x)
    x = keras.layers.Dropout(dropout, name="dropout1")(x)
    x = keras.layers.Bidirectional(
        recurrent(gru_units, return_sequences=True), merge_mode="sum", name="bigru2"
    )(x)
    x = MaskedMean(name="masked_mean")(x)  # honours the mask; zeros for an all-padding row
    if routing == "linear":
        scores = keras.layers.Dense(num_classes, activation="sigmoid", name="scores", dtype=arguments.output_dtype())(x)
    else:
        n_caps = gru_units // capsule_dim
        caps = keras.layers.Reshape((n_caps, capsule_dim), name="sentence_capsules")(x)
        if routing == "kmeans":
            router = KMeansRouting(
                num_classes, class_capsule_dim, n_iters=n_iters, similarity=similarity,
                shared_weights=False, name="routing",
            )
        else:
            router = DynamicRouting(num_classes, class_capsule_dim, n_iters=n_iters, shared_weights=False, name="routing")
        # (float32 under a mixed policy: the scores the loss and metrics read)
        scores = CapsuleLength(name="scores", dtype=arguments.output_dtype())(router(caps))
    return keras.Model(ids, scores, name=name or f"cccapsnet_{routing}_{embedding}")


def compile_model(model, learning_rate=1e-3, jit_compile="auto"):
    """Adam (as the paper) on the margin + focal capsule loss, with accuracy."""
    from applications import checks

    model.compile(  # a rate <= 0 trained uphill or not at all, silently
        optimizer=keras.optimizers.Adam(checks.learning_rate(learning_rate)),
        loss=CapsuleLoss(terms=("margin", "focal")),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


def embedding_parameters(model):
    """Number of weights of the model's ``embedding`` layer."""
    return int(model.get_layer("embedding").count_params())


def parameter_report(vocab_size, num_classes, model=None, **kwargs):
    """Parameters of the model with a compositional and with a standard embedding.

    Args:
        vocab_size, num_classes, **kwargs: :func:`build_model`'s arguments.
        model: that model, if it is built already (:func:`recipe.train` passes the one
            it trains); None builds it.

    Only one model is built: every layer after the embedding reads
    ``[batch, length, embedding_dim]`` vectors whichever embedding gives them, so the
    other embedding's total is the model's with its embedding layer swapped for the
    other one, which is built alone (at zeros: no random draw is taken for a count).

    Returns:
        A dict ``{"compositional": {"embedding": n, "total": n}, "standard": {...}}``.

    Raises:
        ValueError: ``model`` is not ``build_model(vocab_size, num_classes, **kwargs)``'s
            kind of embedding or number of ids.
    """
    options = inspect.signature(build_model).bind(vocab_size, num_classes, **kwargs)
    options.apply_defaults()
    options = options.arguments
    if model is None:
        model = build_model(**options)
    else:  # (build_model's checks: an unknown embedding was counted as the other one)
        check_arguments(**{k: v for k, v in options.items() if k not in ("vocab_size", "num_classes")})
    own, other = options["embedding"], next(kind for kind in EMBEDDINGS if kind != options["embedding"])
    layer = model.get_layer("embedding")
    if isinstance(layer, CompositionalEmbedding) != (own == "compositional") or layer.input_dim != vocab_size:
        raise InputError(
            f"`model` must be the model of these arguments: a {own} embedding of {vocab_size} ids. "
            f"Received: a {type(layer).__name__} of {layer.input_dim} ids")
    swapped = _embedding_layer(other, vocab_size, options["embedding_dim"], options["num_codebooks"],
                               options["codes_stddev"], options["codebook_stddev"], zeros=True)
    swapped.build((None, None))
    total, own_count, other_count = int(model.count_params()), embedding_parameters(model), int(swapped.count_params())
    return {own: {"embedding": own_count, "total": total},
            other: {"embedding": other_count, "total": total - own_count + other_count}}


__all__ = [
    "EMBEDDINGS",
    "MaskedMean",
    "ROUTINGS",
    "build_model",
    "check_arguments",
    "compile_model",
    "embedding_parameters",
    "parameter_report",
]
