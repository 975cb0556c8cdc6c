"""Public layers of keras-capsules (one layer per module)."""

from keras_capsules.layers.em_routing import EMRouting

__all__ = ["EMRouting"]
from keras_capsules.layers.mac import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit  # noqa: E402

__all__ += ["ControlUnit", "MACCell", "MACNetwork", "ReadUnit", "WriteUnit"]
