"""Public layers of keras-capsules (one layer per module; families in subpackages)."""

from keras_capsules.layers.capsule_length import CapsuleLength
from keras_capsules.layers.compositional_embedding import CompositionalEmbedding
from keras_capsules.layers.dynamic_routing import DynamicRouting
from keras_capsules.layers.em_routing import EMRouting
from keras_capsules.layers.kmeans_routing import KMeansRouting
from keras_capsules.layers.mac import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit
from keras_capsules.layers.rladder import (
    G1,
    ConvG1,
    ConvG2,
    ConvG3,
    ConvEncoderCell,
    ConvLSTMEncoderCell,
    GatedConvEncoderCell,
    GatedEncoderCell,
    LSTMEncoderCell,
    RLadder,
    RTagger,
    level_spec,
)

__all__ = [
    # capsule routing and embeddings
    "CapsuleLength",
    "CompositionalEmbedding",
    "DynamicRouting",
    "EMRouting",
    "KMeansRouting",
    # MAC reasoning cells
    "ControlUnit",
    "MACCell",
    "MACNetwork",
    "ReadUnit",
    "WriteUnit",
    # Recurrent Ladder networks
    "G1",
    "ConvG1",
    "ConvG2",
    "ConvG3",
    "ConvEncoderCell",
    "ConvLSTMEncoderCell",
    "GatedConvEncoderCell",
    "GatedEncoderCell",
    "LSTMEncoderCell",
    "RLadder",
    "RTagger",
    "level_spec",
]
