"""MAC reasoning layers (Hudson & Manning 2018): the units, the cell, the network."""

from keras_capsules.layers.mac.control_unit import ControlUnit
from keras_capsules.layers.mac.mac_cell import MACCell
from keras_capsules.layers.mac.mac_network import MACNetwork
from keras_capsules.layers.mac.read_unit import ReadUnit
from keras_capsules.layers.mac.write_unit import WriteUnit

__all__ = ["ControlUnit", "MACCell", "MACNetwork", "ReadUnit", "WriteUnit"]
