"""The CCCapsNet text classifier (Ren & Lu): compositional embedding, BiGRU, routing.

    ids [batch, length]                       0 = padding
    -> CompositionalEmbedding (M = 8 codebooks, D = 64, mask_zero)    or Embedding
    -> BiGRU(128) -> Dropout(0.5) -> BiGRU(128)   [batch, length, 256], masked
    -> Dense per token -> num_capsules capsules of capsule_dim, squashed
                                               [batch, length * num_capsules, 8]
    -> KMeansRouting / DynamicRouting to one capsule of class_capsule_dim per class
    -> CapsuleLength: class scores in [0, 1)

Padding never takes part: the embedding's mask follows the GRUs (which carry their
state over padded steps), the token capsules repeat it for every capsule of a token,
and the routing layers give padded capsules zero votes and zero couplings. So a
sentence gets the same scores whatever padding its batch adds.

``routing="linear"`` is the baseline without capsules: a mean of the GRU outputs over
the real tokens, then a ``Dense`` layer with a sigmoid per class. The sigmoid keeps
the scores in ``[0, 1]`` like capsule lengths, so the same margin + focal loss and the
same arg-max prediction apply to all three heads.
"""

import keras
from keras import ops

from keras_capsules.layers import (
    CapsuleLength,
    CompositionalEmbedding,
    DynamicRouting,
    KMeansRouting,
)
from keras_capsules.losses import CapsuleLoss
from keras_capsules.ops import squash

ROUTINGS = ("kmeans", "dynamic", "linear")
EMBEDDINGS = ("compositional", "standard")


@keras.saving.register_keras_serializable(package="applications.text_classification")
class TokenCapsules(keras.layers.Layer):
    """Splits every token's features into capsules, squashes them, keeps the mask.

    ``[batch, length, n * d] -> [batch, length * n, d]``; token ``t``'s capsules are
    rows ``t * n ... t * n + n - 1``, and each of them inherits the token's mask.

    Args:
        capsule_dim: ``d``, the dimension of each capsule (must divide the features).
        **kwargs: base layer arguments.
    """

    def __init__(self, capsule_dim, **kwargs):
        super().__init__(**kwargs)
        if isinstance(capsule_dim, bool) or not isinstance(capsule_dim, int) or capsule_dim < 1:
            raise ValueError(f"`capsule_dim` must be a positive integer. Received: capsule_dim={capsule_dim!r}")
        self.capsule_dim = capsule_dim
        self.supports_masking = True

    def _per_token(self, features):
        if features is None or features % self.capsule_dim:
            raise ValueError(
                f"TokenCapsules expects [batch, length, features] with features a multiple of "
                f"capsule_dim={self.capsule_dim}. Received: features={features}"
            )
        return features // self.capsule_dim

    def build(self, input_shape):
        self._per_token(input_shape[-1])
        self.built = True

    def compute_output_shape(self, input_shape):
        n = self._per_token(input_shape[-1])
        length = None if input_shape[1] is None else input_shape[1] * n
        return (input_shape[0], length, self.capsule_dim)

    def call(self, inputs):
        shape = ops.shape(inputs)
        caps = ops.reshape(inputs, (shape[0], -1, self.capsule_dim))
        return squash(caps)

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        n = self._per_token(inputs.shape[-1])
        return ops.repeat(mask, n, axis=1)

    def get_config(self):
        config = super().get_config()
        config["capsule_dim"] = self.capsule_dim
        return config


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}. Received: {name}={value!r}")


def build_model(
    vocab_size,
    num_classes,
    routing="kmeans",
    embedding="compositional",
    embedding_dim=64,
    num_codebooks=8,
    gru_units=128,
    dropout=0.5,
    num_capsules=4,
    capsule_dim=8,
    class_capsule_dim=16,
    n_iters=3,
    similarity="cosine",
    codebook_stddev=1.0,
    codes_stddev=1.0,
    name=None,
):
    """Builds the capsule text classifier (defaults: the paper's configuration).

    Args:
        vocab_size: size of the id space, padding (0) and OOV (1) included.
        num_classes: number of classes (class capsules).
        routing: ``"kmeans"`` (CCCapsNet), ``"dynamic"`` (Sabour et al.) or
            ``"linear"`` (masked mean over tokens + sigmoid ``Dense``; no capsules).
        embedding: ``"compositional"`` (learned compositional codes, ``num_codebooks``
            codebooks) or ``"standard"`` (``keras.layers.Embedding``).
        embedding_dim: word vector size ``D``.
        num_codebooks: ``M``, codebooks of the compositional embedding.
        gru_units: units of each GRU direction (two bidirectional layers).
        dropout: dropout rate between the two GRU layers.
        num_capsules: lower capsules per token.
        capsule_dim: dimension of the lower capsules.
        class_capsule_dim: dimension of the class capsules.
        n_iters: routing iterations.
        similarity: k-means routing similarity, ``"cosine"`` (paper) or ``"dot"``.
        codebook_stddev: the compositional codebooks start normal with this standard
            deviation (1.0, as the authors' code). The library default (uniform in
            +-0.05) makes all words' embeddings nearly equal at first, and the model
            then learns far more slowly.
        codes_stddev: the learned codes start normal with this standard deviation.
        name: model name (default ``"cccapsnet_<routing>_<embedding>"``).

    Returns:
        A ``keras.Model`` from ids ``[batch, length]`` (int32, 0 = padding) to class
        scores ``[batch, num_classes]`` in ``[0, 1]``.
    """
    _choice("routing", routing, ROUTINGS)
    _choice("embedding", embedding, EMBEDDINGS)
    if not 0 <= dropout < 1:
        raise ValueError(f"`dropout` must lie in [0, 1). Received: dropout={dropout!r}")
    ids = keras.Input((None,), dtype="int32", name="ids")
    if embedding == "compositional":
        embed = CompositionalEmbedding(
            vocab_size,
            embedding_dim,
            num_codebooks=num_codebooks,
            mask_zero=True,
            codes_initializer=keras.initializers.RandomNormal(stddev=codes_stddev),
            codebook_initializer=keras.initializers.RandomNormal(stddev=codebook_stddev),
            name="embedding",
        )
    else:
        embed = keras.layers.Embedding(vocab_size, embedding_dim, mask_zero=True, name="embedding")
    x = embed(ids)
    x = keras.layers.Bidirectional(keras.layers.GRU(gru_units, return_sequences=True), name="bigru1")(x)
    x = keras.layers.Dropout(dropout, name="dropout1")(x)
    x = keras.layers.Bidirectional(keras.layers.GRU(gru_units, return_sequences=True), name="bigru2")(x)
    if routing == "linear":
        x = keras.layers.GlobalAveragePooling1D(name="masked_mean")(x)  # honours the mask
        scores = keras.layers.Dense(num_classes, activation="sigmoid", name="scores")(x)
    else:
        x = keras.layers.Dense(num_capsules * capsule_dim, name="primary")(x)
        caps = TokenCapsules(capsule_dim, name="token_capsules")(x)
        if routing == "kmeans":
            router = KMeansRouting(num_classes, class_capsule_dim, n_iters=n_iters, similarity=similarity, name="routing")
        else:
            router = DynamicRouting(num_classes, class_capsule_dim, n_iters=n_iters, name="routing")
        scores = CapsuleLength(name="scores")(router(caps))
    return keras.Model(ids, scores, name=name or f"cccapsnet_{routing}_{embedding}")


def compile_model(model, learning_rate=1e-3, jit_compile="auto"):
    """Adam (as the paper) on the margin + focal capsule loss, with accuracy."""
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=CapsuleLoss(terms=("margin", "focal")),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


def embedding_parameters(model):
    """Number of weights of the model's ``embedding`` layer."""
    return int(model.get_layer("embedding").count_params())


def parameter_report(vocab_size, num_classes, **kwargs):
    """Parameters of the model with a compositional and with a standard embedding.

    Returns:
        A dict ``{"compositional": {"embedding": n, "total": n}, "standard": {...}}``.
    """
    report = {}
    for embedding in EMBEDDINGS:
        model = build_model(vocab_size, num_classes, embedding=embedding, **kwargs)
        report[embedding] = {"embedding": embedding_parameters(model), "total": int(model.count_params())}
        del model
    return report


__all__ = [
    "EMBEDDINGS",
    "ROUTINGS",
    "TokenCapsules",
    "build_model",
    "compile_model",
    "embedding_parameters",
    "parameter_report",
]
