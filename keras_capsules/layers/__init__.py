"""Public layers of keras-capsules (one layer per module; families in subpackages)."""

from keras_capsules.layers.capsule_length import CapsuleLength
from keras_capsules.layers.compositional_embedding import CompositionalEmbedding
from keras_capsules.layers.dynamic_routing import DynamicRouting
from keras_capsules.layers.em_routing import EMRouting
from keras_capsules.layers.kmeans_routing import KMeansRouting
from keras_capsules.layers.mac import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit

__all__ = [
    "CapsuleLength",
    "CompositionalEmbedding",
    "ControlUnit",
    "DynamicRouting",
    "EMRouting",
    "KMeansRouting",
    "MACCell",
    "MACNetwork",
    "ReadUnit",
    "WriteUnit",
]
