"""Public layers of keras-capsules (one layer per module)."""

from keras_capsules.layers.em_routing import EMRouting

__all__ = ["EMRouting"]
