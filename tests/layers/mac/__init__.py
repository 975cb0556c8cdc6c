"""Tests of the MAC layers (keras_capsules.layers.mac)."""
