"""Initializer copies that give every weight values of its own (private helper)."""

import numbers
import zlib

import keras


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
