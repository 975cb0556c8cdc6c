"""Public layers of keras-capsules (one layer per module)."""

from keras_capsules.layers.em_routing import EMRouting

__all__ = ["EMRouting"]
from keras_capsules.layers.rladder import (  # noqa: E402
    G1,
    ConvG1,
    ConvG2,
    ConvG3,
    ConvLSTMEncoderCell,
    GatedEncoderCell,
    LSTMEncoderCell,
    RLadder,
    RTagger,
    level_spec,
)

__all__ += [
    "G1",
    "ConvG1",
    "ConvG2",
    "ConvG3",
    "GatedEncoderCell",
    "LSTMEncoderCell",
    "ConvLSTMEncoderCell",
    "RLadder",
    "RTagger",
    "level_spec",
]
