"""Initializer copies that give every weight values of its own (private helper)."""

import numbers
import zlib

import keras
from keras import ops

#: the floating dtypes narrower than float32, in which ``Orthogonal`` cannot draw:
#: its QR decomposition has no bfloat16 kernel in TensorFlow and no 16-bit one in JAX
_NARROW_FLOATS = ("float16", "bfloat16")


def fresh_initializer(initializer, salt=None):
    """A new copy of ``initializer`` for one weight (other callables as given).

    One Keras random initializer instance used for several weights of the same shape
    fills them with the same values: an unseeded one draws its seed once, when it is
    made, and a seeded one always uses its seed. A copy made from the config of an
    unseeded initializer draws a seed of its own; a seeded initializer's copy gets
    ``seed + crc32(salt)``, so weights with different ``salt`` (e.g. the layer class
    and weight name) start different and the same seed reproduces them all.

    An initializer seeded with a ``keras.random.SeedGenerator`` is returned as it is:
    it draws new values from its generator at every call, whereas a copy made from
    its config starts a generator of its own at the same seed, whose first draw is
    the original's (so the two weights started equal).

    So is an initializer without a ``seed`` in its config (``Zeros``, ``Constant``,
    ``Identity``, a custom deterministic one): it fills weights of one shape alike in
    any case, and a copy made from its config lost the arguments the config leaves
    out (a custom initializer need not define ``get_config``: its copy failed with a
    ``TypeError`` or silently took the constructor's defaults).
    """
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    if isinstance(getattr(initializer, "seed", None), keras.random.SeedGenerator):
        return initializer
    config = initializer.get_config()
    if "seed" not in config:  # not a random initializer
        return initializer
    seed = config["seed"]
    if salt is not None and isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        config["seed"] = (int(seed) + zlib.crc32(salt.encode())) % 2**31
    return initializer.__class__.from_config(config)


def narrow_float_safe(initializer):
    """``initializer`` for ``add_weight``, drawing in float32 where it cannot draw narrower.

    ``keras.initializers.Orthogonal`` fails for a float16 or bfloat16 weight (a layer
    with a plain ``dtype="bfloat16"``, whose variables are bfloat16): it is wrapped in
    a callable that draws such a weight in float32, with the same seed, and casts it.
    Weights of the other dtypes, and every other initializer, are drawn as before.

    Only for the weight itself: the callable has no config, so a layer keeps the
    initializer it was given for its ``get_config()`` and for its sublayers.
    """
    if not isinstance(initializer, keras.initializers.Orthogonal):
        return initializer

    def initialize(shape, dtype=None):
        dtype = keras.backend.standardize_dtype(dtype)
        if dtype not in _NARROW_FLOATS:
            return initializer(shape, dtype=dtype)
        return ops.cast(initializer(shape, dtype="float32"), dtype)

    return initialize
