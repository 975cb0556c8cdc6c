"""keras-capsules: Keras 3 layers for networks that iterate to infer.

Capsule routing (EM with a D-step, k-means, dynamic routing), compositional-code
embeddings, Recurrent Ladder networks and MAC reasoning cells, written with
``keras.ops`` so that they run on any Keras backend and compile with XLA.
"""

from keras_capsules import layers, losses, ops
from keras_capsules.layers import (
    CapsuleLength,
    CompositionalEmbedding,
    DynamicRouting,
    EMRouting,
    KMeansRouting,
)
from keras_capsules.optimizers import RAdam

__version__ = "0.1.0"

__all__ = [
    "CapsuleLength",
    "CompositionalEmbedding",
    "DynamicRouting",
    "EMRouting",
    "KMeansRouting",
    "layers",
    "losses",
    "ops",
    "RAdam",
    "__version__",
]
