"""G1: the dense decoder combinator of the Recurrent Ladder (Ilin et al. 2017)."""

import keras
from keras import ops

from keras_capsules._validation import (
    check_built,
    check_floating_dtype,
    get_constraint,
    get_initializer,
    get_regularizer,
)
from keras_capsules.layers.rladder._elementwise_gate import ElementwiseGate
from keras_capsules.layers.rladder._utils import (
    batch_checked_when_run,
    check_same_batch,
    check_top_as_built,
    clone_initializer,
    float_inputs,
    serialize_all,
    split_top_lateral,
)
from keras_capsules.ops import matmul


@keras.saving.register_keras_serializable(package="keras_capsules")
class G1(ElementwiseGate, keras.layers.Layer):
    """Dense decoder combinator G1 of the Recurrent Ladder (paper appendix).

    Merges the top-down signal ``x_top`` (the decoder output of the level above) with
    the lateral signal ``x_lat`` (this level's encoder output):

    ```
    u  = x_top @ A + b                                  (a dense projection)
    mu = f(u; w_mu),  s = f(u; w_s)
    f(u; w) = w0 * sigmoid(w1 * u + w2) + w3 * u + w4   (elementwise, per unit)
    y  = x_lat * s + (1 - s) * mu
    ```

    ``w_mu`` and ``w_s`` hold five parameter vectors each, one value per unit. The
    output has the shape of ``x_lat``. At the top level of a ladder there is no
    ``x_top``: pass ``x_lat`` alone (or ``[None, x_lat]``) and ``u = b``, a learned
    bias vector (zeros at initialization), so that ``mu`` and ``s`` are learned
    constants per unit.

    Args:
        kernel_initializer: initializer of ``kernel`` (``A``). Default glorot uniform.
        bias_initializer: initializer of ``bias`` (``b``). Default zeros.
        mu_initializer: initializer of ``mu_weights`` ``[5, units]`` (rows ``w0..w4``).
            Default: rows ``(0, 1, 0, 1, 0)``, i.e. ``mu = u``.
        s_initializer: initializer of ``s_weights`` ``[5, units]``. Default: rows
            ``(1, 1, 0, 0, 0)``, i.e. ``s = sigmoid(u)``.
        kernel_regularizer, bias_regularizer, mu_regularizer, s_regularizer: optional.
        kernel_constraint, bias_constraint, mu_constraint, s_constraint: optional.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``[x_top, x_lat]`` with ``x_top`` ``[batch, ..., top_units]`` and
            ``x_lat`` ``[batch, ..., units]`` (same leading axes), or ``x_lat`` alone /
            ``[None, x_lat]`` at the top level. Integer or boolean inputs are cast to
            the compute dtype.

    Returns:
        ``y``, a tensor of the shape of ``x_lat``.

    Example:

    ```python
    top = keras.Input((8,))
    lateral = keras.Input((16,))
    y = keras_capsules.layers.G1()([top, lateral])        # (None, 16)
    y_top = keras_capsules.layers.G1()(lateral)            # top level: no x_top
    ```

    Reference:
        A. Ilin, I. Prémont-Schwarz, T. H. Hao, A. Rasmus, R. Boney, H. Valpola,
        "Recurrent Ladder Networks", NIPS 2017 (appendix, decoder functions); the
        function ``f`` follows the vanilla combinator of Rasmus et al. 2015.
    """

    def __init__(
        self,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        mu_initializer=None,
        s_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        mu_regularizer=None,
        s_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        mu_constraint=None,
        s_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self)
        self.kernel_initializer = get_initializer("kernel_initializer", kernel_initializer)
        self.bias_initializer = get_initializer("bias_initializer", bias_initializer)
        self.kernel_regularizer = get_regularizer("kernel_regularizer", kernel_regularizer)
        self.bias_regularizer = get_regularizer("bias_regularizer", bias_regularizer)
        self.kernel_constraint = get_constraint("kernel_constraint", kernel_constraint)
        self.bias_constraint = get_constraint("bias_constraint", bias_constraint)
        self._init_gate(mu_initializer, s_initializer, mu_regularizer, s_regularizer, mu_constraint, s_constraint)

    def _shapes(self, input_shape):
        if isinstance(input_shape, (list, tuple)) and input_shape and not all(
            d is None or isinstance(d, int) for d in input_shape
        ):
            top, lat = split_top_lateral("G1", list(input_shape))
        else:
            top, lat = None, input_shape
        lat = tuple(lat)
        if len(lat) < 2 or lat[-1] is None:
            raise ValueError(
                "G1 expects x_lat of shape [batch, ..., units] with a known number of "
                f"units. Received: x_lat shape={lat}"
            )
        if top is not None:
            top = tuple(top)
            if len(top) != len(lat) or top[-1] is None:
                raise ValueError(
                    "G1 expects x_top of shape [batch, ..., top_units] with the same rank "
                    f"as x_lat and known top_units. Received: x_top shape={top}, "
                    f"x_lat shape={lat}"
                )
            for a, b in zip(top[1:-1], lat[1:-1]):
                if a is not None and b is not None and a != b:
                    raise ValueError(
                        "G1 expects x_top and x_lat to share their leading axes. "
                        f"Received: x_top shape={top}, x_lat shape={lat}"
                    )
            check_same_batch("G1", [("x_top", top), ("x_lat", lat)])
        if self.built:  # on every call, symbolic too (a reuse on other sizes built the model)
            self._check_built(top, lat)
        return top, lat

    def _check_built(self, top, lat):
        """The inputs' last axes are those the weights were built for."""
        check_top_as_built("G1", self.has_top, top)
        if lat[-1] != self.bias.shape[0]:
            raise ValueError(
                f"This G1 layer was built for x_lat of shape [batch, ..., {self.bias.shape[0]}]. "
                f"Received: x_lat shape={lat}"
            )
        if top is not None:
            check_built("G1", [("x_top", top, self.kernel.shape[0])])

    def build(self, input_shape):
        top, lat = self._shapes(input_shape)
        units = lat[-1]
        self.has_top = top is not None
        if self.has_top:
            self.kernel = self.add_weight(
                name="kernel",
                shape=(top[-1], units),
                initializer=clone_initializer(self.kernel_initializer, "G1/kernel"),
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
            )
        self.bias = self.add_weight(
            name="bias",
            shape=(units,),
            initializer=clone_initializer(self.bias_initializer, "G1/bias"),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self._build_gate(units)
        self.built = True

    def compute_output_shape(self, input_shape):
        return self._shapes(input_shape)[1]

    def call(self, inputs):
        x_top, x_lat = float_inputs(self, *split_top_lateral("G1", inputs))
        # the shapes against each other, as in build (after it, mismatched batches or
        # leading axes were broadcast into an output of neither's shape), and against
        # the weights
        self._shapes(tuple(x_lat.shape) if x_top is None else [tuple(x_top.shape), tuple(x_lat.shape)])
        if x_top is None:
            u = ops.cast(self.bias, x_lat.dtype)
        else:
            # and, where some are unknown until the layer runs (a tf.function for any
            # batch), the leading axes there
            axes = len(x_lat.shape) - 1
            x_top = batch_checked_when_run(
                "G1", [("x_top", x_top), ("x_lat", x_lat)], axes, "batch size" if axes == 1 else "leading axes"
            )
            u = matmul(x_top, self.kernel) + self.bias
        return self._gate(u, x_lat)

    def get_config(self):
        config = super().get_config()
        serialize_all(config, self, ("kernel_initializer", "bias_initializer"), "initializers")
        serialize_all(config, self, ("kernel_regularizer", "bias_regularizer"), "regularizers")
        serialize_all(config, self, ("kernel_constraint", "bias_constraint"), "constraints")
        return self._gate_config(config)
