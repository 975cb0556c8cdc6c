"""Every public layer's initializer, regularizer and constraint arguments: a value that
Keras cannot read is refused at once, in the house format (``Received: name=value``)."""

import inspect

import pytest

import keras_capsules.layers as layers
from keras_capsules.layers import level_spec

#: the least each layer needs to be made
REQUIRED = {
    "CompositionalEmbedding": {"input_dim": 10, "output_dim": 4},
    "ControlUnit": {"max_steps": 2},
    "ConvEncoderCell": {"filters": 2},
    "ConvLSTMEncoderCell": {"filters": 2},
    "DynamicRouting": {"n_out": 2, "d_out": 2},
    "EMRouting": {"n_out": 2, "d_out": 2},
    "GatedConvEncoderCell": {"filters": 2},
    "GatedEncoderCell": {"units": 2},
    "KMeansRouting": {"n_out": 2, "d_out": 2},
    "LSTMEncoderCell": {"units": 2},
    "MACCell": {"max_steps": 2},
    "MACNetwork": {"max_steps": 2},
    "RLadder": {"levels": [level_spec("gated", 2)]},
    "RTagger": {"n_groups": 2, "levels": [level_spec("gated", 2)]},
}
SUFFIXES = ("_initializer", "_regularizer", "_constraint")


def _cases():
    for name in sorted(layers.__all__):
        cls = getattr(layers, name)
        if not (inspect.isclass(cls) and hasattr(cls, "get_config")):
            continue
        config = cls(**REQUIRED.get(name, {})).get_config()
        for argument in sorted(k for k in config if k.endswith(SUFFIXES)):
            yield pytest.param(cls, argument, id=f"{name}-{argument}")


CASES = list(_cases())


def test_the_cases_cover_every_kind_of_argument():
    # (a layer renamed or an argument dropped would leave the test below with nothing to check)
    arguments = {argument for _, argument in (case.values for case in CASES)}
    assert len(CASES) > 60 and {a.rsplit("_", 1)[1] for a in arguments} == {"initializer", "regularizer", "constraint"}


@pytest.mark.parametrize("cls,argument", CASES)
def test_a_value_keras_cannot_read_is_refused_naming_the_argument(cls, argument):
    # Audit 2026-11-30: Keras' own error, "Could not interpret initializer identifier:
    # nope", did not say which argument it was.
    kind = argument.rsplit("_", 1)[1]
    with pytest.raises(ValueError, match=rf"`{argument}` must be a Keras {kind}.*Received: {argument}='nope'"):
        cls(**REQUIRED.get(cls.__name__, {}), **{argument: "nope"})
