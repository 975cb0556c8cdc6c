"""The base of the layers that cast their inputs and weights themselves (private)."""

import keras

from keras_capsules.layers._initializers import narrow_float_safe


class OwnCastingLayer(keras.layers.Layer):
    """A layer with ``autocast`` off, whose weights are always read in their own dtype.

    The routing layers, ``CompositionalEmbedding`` and the MAC units cast inputs and
    weights themselves (routing, attention and softmaxes in float32 under a mixed
    policy). Turning the layer's ``autocast`` off is not enough: Keras enters an
    autocast scope for any layer of a mixed policy called outside another scope (a
    layer called directly, or one with ``dtype="mixed_float16"`` in a float32 model)
    whatever its ``autocast``, and ``add_weight``'s variables (``autocast=True`` by
    default) were then read rounded to float16 or bfloat16 before the float32 math,
    their gradients through that rounding (one ``fit`` step made an EMRouting kernel
    NaN). Every weight here is made with ``autocast=False``.

    An ``Orthogonal`` initializer of a float16 or bfloat16 weight (a layer with a plain
    ``dtype="bfloat16"``) draws in float32 and casts (:func:`narrow_float_safe`):
    TensorFlow's QR, which it uses, has no bfloat16 kernel ("Value for attr 'T' of
    bfloat16 is not in the list of allowed values" at the first call).
    """

    def __init__(self, **kwargs):
        kwargs["autocast"] = False
        super().__init__(**kwargs)

    def add_weight(self, *args, **kwargs):
        kwargs.setdefault("autocast", False)
        initializer = kwargs.get("initializer")
        # a name or config is made into an object only if it names Orthogonal: making a random
        # initializer draws a default seed from Python's random (add_weight makes it anyway)
        name = initializer.get("class_name") if isinstance(initializer, dict) else initializer
        if isinstance(name, str) and name.replace("_", "").lower() in ("orthogonal", "orthogonalinitializer"):
            initializer = keras.initializers.get(initializer)
        if isinstance(initializer, keras.initializers.Orthogonal):
            kwargs["initializer"] = narrow_float_safe(initializer)
        return super().add_weight(*args, **kwargs)
