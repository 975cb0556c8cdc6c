"""Private mixin of G1 and ConvG1: the per-unit gate ``y = x_lat * s + (1 - s) * mu``.

Both combinators compute ``u`` their own way (a dense projection or a convolution of
the top-down signal) and then share everything below: the ``[5, units]`` parameters
of ``f`` for ``mu`` and ``s``, their initializers, regularizers and constraints, the
mix itself and its config entries.
"""

from keras_capsules.layers.rladder._utils import (
    RowwiseConstant,
    clone_initializer,
    elementwise_f,
    serialize_all,
)
from keras_capsules._validation import get_constraint, get_initializer, get_regularizer

#: f(u) = u: mu starts as the top-down signal itself.
DEFAULT_MU_VALUES = (0.0, 1.0, 0.0, 1.0, 0.0)
#: f(u) = sigmoid(u): the lateral weight s starts in (0, 1).
DEFAULT_S_VALUES = (1.0, 1.0, 0.0, 0.0, 0.0)

_KINDS = {"initializers": "_initializer", "regularizers": "_regularizer", "constraints": "_constraint"}
_PARAMS = ("mu", "s")


class ElementwiseGate:
    """Adds ``mu_weights`` and ``s_weights`` (``f``'s parameters, one column per unit)."""

    def _init_gate(self, mu_initializer, s_initializer, mu_regularizer, s_regularizer, mu_constraint, s_constraint):
        defaults = {"mu": DEFAULT_MU_VALUES, "s": DEFAULT_S_VALUES}
        given = {"mu": mu_initializer, "s": s_initializer}
        for param in _PARAMS:
            value = given[param] if given[param] is not None else RowwiseConstant(defaults[param])
            setattr(self, f"{param}_initializer", get_initializer(f"{param}_initializer", value))
        self.mu_regularizer = get_regularizer("mu_regularizer", mu_regularizer)
        self.s_regularizer = get_regularizer("s_regularizer", s_regularizer)
        self.mu_constraint = get_constraint("mu_constraint", mu_constraint)
        self.s_constraint = get_constraint("s_constraint", s_constraint)

    def _build_gate(self, units):
        for param in _PARAMS:
            weight = self.add_weight(
                name=f"{param}_weights",
                shape=(5, units),
                initializer=clone_initializer(
                    getattr(self, f"{param}_initializer"), f"{type(self).__name__}/{param}_weights"
                ),
                regularizer=getattr(self, f"{param}_regularizer"),
                constraint=getattr(self, f"{param}_constraint"),
            )
            setattr(self, f"{param}_weights", weight)

    def _gate(self, u, x_lat):
        """``mu = f(u; w_mu)``, ``s = f(u; w_s)``; returns ``x_lat * s + (1 - s) * mu``."""
        mu = elementwise_f(u, self.mu_weights)
        s = elementwise_f(u, self.s_weights)
        return x_lat * s + (1.0 - s) * mu

    def _gate_config(self, config):
        for kind, suffix in _KINDS.items():
            serialize_all(config, self, [param + suffix for param in _PARAMS], kind)
        return config
