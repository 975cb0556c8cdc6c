"""level_spec: the serializable description of one Recurrent Ladder level."""

from keras_capsules.layers.rladder._utils import (
    UPSAMPLE_MODES,
    VECTOR_TOPS,
    choice,
    loaded_upsample_mode,
    positive_int,
)

#: encoder ops: name -> kind of level
ENCODERS = {"gated": "dense", "lstm": "dense", "convlstm": "conv", "conv": "conv", "gatedconv": "conv"}
DENSE_COMBINATORS = ("G1",)
CONV_COMBINATORS = ("ConvG1", "ConvG2", "ConvG3")
COMBINATORS = DENSE_COMBINATORS + CONV_COMBINATORS
#: the encoders of convolutional levels
CONV_ENCODERS = tuple(kind for kind, shape in ENCODERS.items() if shape == "conv")
#: how a dense level's decoder output reaches the pixels of a convolutional level below
#: (``level_spec(..., unflatten=...)``)
UNFLATTENS = VECTOR_TOPS

_KEYS = (
    "encoder",
    "units",
    "combinator",
    "pool",
    "kernel_size",
    "combinator_filters",
    "upsample_mode",
    "normalization",
    "unflatten",
)
#: ``kernel_size`` of a level that does not set it
DEFAULT_KERNEL_SIZE = 3
#: per-sample normalizations of a ``"conv"`` or ``"gatedconv"`` encoder's pre-activations
#: (ConvEncoderCell, GatedConvEncoderCell)
LEVEL_NORMALIZATIONS = (None, "instance", "layer")
#: the encoders that take a ``normalization``
NORMALIZED_ENCODERS = ("conv", "gatedconv")


def level_spec(
    encoder,
    units,
    combinator=None,
    pool=1,
    kernel_size=DEFAULT_KERNEL_SIZE,
    combinator_filters=None,
    upsample_mode="nearest",
    normalization=None,
    unflatten="broadcast",
):
    """Describes one level of an :class:`RLadder` as a plain (JSON-serializable) dict.

    Args:
        encoder: the encoder op: ``"gated"`` (:class:`GatedEncoderCell`, dense),
            ``"lstm"`` (:class:`LSTMEncoderCell`, dense), ``"convlstm"``
            (:class:`ConvLSTMEncoderCell`, convolutional), ``"conv"``
            (:class:`ConvEncoderCell`, convolutional and feed-forward: a ReLU
            convolution of the input and the decoder feedback, no state of its own)
            or ``"gatedconv"`` (:class:`GatedConvEncoderCell`: as ``"conv"``, with
            the ConvLSTM's gates in place of the ReLU).
        units: state size (dense) or channels (convolutional) of the encoder.
        combinator: this level's decoder combinator: ``"G1"`` for dense levels,
            ``"ConvG1"``, ``"ConvG2"`` or ``"ConvG3"`` for convolutional ones. None
            (default) picks ``"G1"`` / ``"ConvG1"``.
        pool: max-pooling factor applied to the level below's output before this
            level's encoder (convolutional inputs only); the decoder of the level
            below then upsamples by the same factor. Default 1 (no pooling).
        kernel_size: kernel size of the convolutional encoder and combinator. A
            dense level has neither (a :class:`RLadder` warns that a value other
            than 3 has no effect there), except the first, whose ``kernel_size``
            also sets a convolutional input combinator's.
        combinator_filters: hidden channels of ConvG2 / ConvG3 (None: as many as the
            level has); other combinators take None.
        upsample_mode: how the level below's combinator upsamples this level's
            decoder output: ``"nearest"`` (default) or ``"transpose"`` (a learned
            transposed convolution). Only a convolutional level that pools
            (``pool > 1``) has a decoder output to upsample: ``"transpose"``
            anywhere else would have no effect and is a ``ValueError``.
        normalization: for ``encoder="conv"`` or ``"gatedconv"`` only: None
            (default), ``"instance"`` or ``"layer"``, the per-sample normalization of
            the encoder's pre-activations (see :class:`ConvEncoderCell`). Other
            encoders take None.
        unflatten: for a dense level above a convolutional one (or above an image
            input): how this level's decoder output, a vector, reaches the pixels of
            the decoder below. ``"broadcast"`` (default): projected to the
            channels, the same at every pixel, so the top-down signal says *what*
            but not *where*; ``"dense"``: projected to every pixel's channels with
            weights of its own (``vector_top="dense"`` of the combinator below, the
            mirror of the encoder flattening the map into this level). Convolutional
            levels take ``"broadcast"``; :class:`RLadder` refuses ``"dense"`` where
            no convolutional decoder is below.

    Returns:
        A dict with every key filled in (the form :class:`RLadder` stores in its
        config).
    """
    return normalize_level(
        dict(
            encoder=encoder,
            units=units,
            combinator=combinator,
            pool=pool,
            kernel_size=kernel_size,
            combinator_filters=combinator_filters,
            upsample_mode=upsample_mode,
            normalization=normalization,
            unflatten=unflatten,
        )
    )


def normalize_level(spec, index=None):
    """Validates a level dict and fills in defaults; raises ValueError on a bad spec."""
    where = "" if index is None else f"levels[{index}]: "
    if not isinstance(spec, dict):
        raise ValueError(
            f"{where}a level must be a dict (see level_spec). Received: level={spec!r}"
        )
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise ValueError(
            f"{where}unknown level keys {unknown}; allowed: {_KEYS}. Received: level={spec!r}"
        )
    if "encoder" not in spec or "units" not in spec:
        raise ValueError(f"{where}a level needs `encoder` and `units`. Received: level={spec!r}")
    encoder = choice("encoder", spec["encoder"], tuple(ENCODERS))
    kind = ENCODERS[encoder]
    allowed = DENSE_COMBINATORS if kind == "dense" else CONV_COMBINATORS
    combinator = spec.get("combinator")
    combinator = allowed[0] if combinator is None else combinator
    if combinator not in allowed:
        raise ValueError(
            f"{where}a {kind} level (encoder={encoder!r}) needs a combinator in {allowed}. "
            f"Received: combinator={combinator!r}"
        )
    if spec.get("combinator_filters") is not None and combinator not in CONV_COMBINATORS[1:]:
        raise ValueError(
            f"{where}`combinator_filters` sets the hidden channels of ConvG2 and ConvG3; "
            f"a {combinator} combinator has none. Received: "
            f"combinator_filters={spec['combinator_filters']!r}, combinator={combinator!r}"
        )
    normalization = spec.get("normalization")
    if normalization not in LEVEL_NORMALIZATIONS or (
        normalization is not None and encoder not in NORMALIZED_ENCODERS
    ):
        allowed_norms = LEVEL_NORMALIZATIONS if encoder in NORMALIZED_ENCODERS else (None,)
        raise ValueError(
            f"{where}an encoder {encoder!r} takes a normalization in {allowed_norms}. "
            f"Received: normalization={normalization!r}"
        )
    unflatten = choice("unflatten", spec.get("unflatten", "broadcast"), VECTOR_TOPS)
    if unflatten != "broadcast" and kind != "dense":
        raise ValueError(
            f"{where}`unflatten` sets how a dense level's decoder output reaches the pixels "
            f"below it; a {kind} level's already has them. Received: unflatten={unflatten!r}, "
            f"encoder={encoder!r}"
        )
    pool = positive_int("pool", spec.get("pool", 1))
    upsample_mode = choice("upsample_mode", spec.get("upsample_mode", "nearest"), UPSAMPLE_MODES)
    if upsample_mode != "nearest" and (pool == 1 or kind == "dense"):
        raise ValueError(
            f"{where}`upsample_mode` sets how the level below upsamples the decoder output "
            f"of a convolutional level that pools (pool > 1); this {kind} level's has "
            f"nothing to upsample. Received: upsample_mode={upsample_mode!r}, pool={pool}, "
            f"encoder={encoder!r}"
        )
    return {
        "encoder": encoder,
        "units": positive_int("units", spec["units"]),
        "combinator": combinator,
        "pool": pool,
        "kernel_size": positive_int("kernel_size", spec.get("kernel_size", DEFAULT_KERNEL_SIZE)),
        "combinator_filters": positive_int(
            "combinator_filters", spec.get("combinator_filters"), allow_none=True
        ),
        "upsample_mode": upsample_mode,
        "normalization": normalization,
        "unflatten": unflatten,
    }


def saved_levels(levels):
    """Level dicts of a saved config, made loadable by this version.

    Configs saved before ``upsample_mode="transpose"`` was refused where it has no
    effect (a level that does not pool, or a dense level) hold it there; it never
    changed the model, so it becomes ``"nearest"`` (with a warning) and the model
    loads with the same weights and outputs.
    """
    if not isinstance(levels, (list, tuple)):
        return levels
    upgraded = []
    for i, spec in enumerate(levels):
        if (
            isinstance(spec, dict)
            and spec.get("upsample_mode") == "transpose"
            and (spec.get("pool", 1) == 1 or ENCODERS.get(spec.get("encoder")) == "dense")
        ):
            spec = dict(spec, upsample_mode=loaded_upsample_mode(f"levels[{i}]: "))
        upgraded.append(spec)
    return upgraded


def level_kind(spec):
    """``"dense"`` or ``"conv"``."""
    return ENCODERS[spec["encoder"]]
