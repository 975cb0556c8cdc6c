"""Private base of ConvG2 and ConvG3: a hidden layer ``u`` from both inputs."""

from keras import ops

from keras_capsules.layers.rladder._conv_combinator import ConvCombinatorBase
from keras_capsules.layers.rladder._utils import positive_int
from keras_capsules.ops import conv


class HiddenConvCombinatorBase(ConvCombinatorBase):
    """``u = relu(A1 * up(x_top) + B1 * x_lat + b1)`` with ``filters`` channels."""

    #: names of the maps computed from u by a convolution (subclasses set them)
    HEADS = ()

    def __init__(self, filters=None, **kwargs):
        super().__init__(**kwargs)
        self.filters = positive_int("filters", filters, allow_none=True)

    def build(self, input_shape):
        top, lat = self._shapes(input_shape)
        self.lat_channels = lat[-1]
        hidden = self.filters or self.lat_channels
        self._build_top(top, hidden, lat)
        self.lateral_kernel = self._conv_kernel("lateral_kernel", self.lat_channels, hidden)
        self.hidden_bias = self._bias("hidden_bias", hidden)
        for head in self.HEADS:
            kernel = self._conv_kernel(f"{head}_kernel", hidden, self.lat_channels)
            setattr(self, f"{head}_kernel", kernel)
            setattr(self, f"{head}_bias", self._bias(f"{head}_bias", self.lat_channels))
        self.built = True

    def _hidden(self, inputs):
        x_top, x_lat = self._split_and_check(inputs)
        pre = conv(x_lat, self.lateral_kernel, padding="same") + self.hidden_bias
        if x_top is not None:
            pre = pre + self._top_signal(x_top, x_lat)
        return ops.relu(pre), x_lat

    def _head(self, name, u):
        return conv(u, getattr(self, f"{name}_kernel"), padding="same") + getattr(
            self, f"{name}_bias"
        )

    def get_config(self):
        config = super().get_config()
        config["filters"] = self.filters
        return config
