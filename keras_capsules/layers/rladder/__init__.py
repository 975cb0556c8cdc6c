"""Recurrent Ladder networks (Ilin et al. 2017): combinators, encoder cells, RLadder, RTagger."""

from keras_capsules.layers.rladder.conv_encoder_cell import ConvEncoderCell
from keras_capsules.layers.rladder.conv_g1 import ConvG1
from keras_capsules.layers.rladder.conv_g2 import ConvG2
from keras_capsules.layers.rladder.conv_g3 import ConvG3
from keras_capsules.layers.rladder.conv_lstm_encoder_cell import ConvLSTMEncoderCell
from keras_capsules.layers.rladder.g1 import G1
from keras_capsules.layers.rladder.gated_conv_encoder_cell import GatedConvEncoderCell
from keras_capsules.layers.rladder.gated_encoder_cell import GatedEncoderCell
from keras_capsules.layers.rladder.level_spec import level_spec
from keras_capsules.layers.rladder.lstm_encoder_cell import LSTMEncoderCell
from keras_capsules.layers.rladder.rladder import RLadder

__all__ = [
    "G1",
    "ConvG1",
    "ConvG2",
    "ConvG3",
    "GatedEncoderCell",
    "LSTMEncoderCell",
    "ConvLSTMEncoderCell",
    "ConvEncoderCell",
    "GatedConvEncoderCell",
    "RLadder",
    "level_spec",
]

from keras_capsules.layers.rladder.rtagger import RTagger  # noqa: E402

__all__.append("RTagger")
