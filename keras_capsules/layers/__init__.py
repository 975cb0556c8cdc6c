"""Public layers of keras-capsules (one layer per module)."""

from keras_capsules.layers.capsule_length import CapsuleLength
from keras_capsules.layers.compositional_embedding import CompositionalEmbedding
from keras_capsules.layers.dynamic_routing import DynamicRouting
from keras_capsules.layers.em_routing import EMRouting
from keras_capsules.layers.kmeans_routing import KMeansRouting

__all__ = [
    "CapsuleLength",
    "CompositionalEmbedding",
    "DynamicRouting",
    "EMRouting",
    "KMeansRouting",
]
