"""The convolutional combinators' top-down path computes the convolution of the nearest
upsampling of x_top at x_top's resolution (``_utils.upsampled_conv``, a speed change):
the same outputs and gradients as the upsampled convolution it replaced, checked
against an independent NumPy formulation and against the old Keras formulation (frozen
here), for single layers and for the Occluded Moving MNIST ladder as the benchmark
builds it (gated convolutional levels, instance normalization), eagerly and under XLA."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ConvG1, ConvG2
from keras_capsules.layers.rladder import _conv_combinator
from keras_capsules.layers.rladder._utils import upsample_nearest, upsampled_conv

TOL = 1e-6  # relative to the largest magnitude of each compared tensor (float32 sums in another order)
# a whole ladder: its weights' gradients pass instance normalizations and several frames; the
# old code's own eager and XLA results differ by up to 2e-6 (relative, as here) on these models
MODEL_TOL = 5e-6


def _old_upsampled_conv(x, kernel, factor):
    """The formulation before the change (frozen copy): upsample, then a "same" convolution."""
    return ops.conv(upsample_nearest(x, factor), kernel, padding="same")


def _numpy_upsampled_conv(x, kernel, factor):
    """Nearest upsampling by repetition, Keras' "same" zero padding ((k - 1) // 2 before),
    and every output pixel as an explicit sum over the kernel's taps, in float64."""
    up = np.repeat(np.repeat(x.astype("float64"), factor, axis=1), factor, axis=2)
    kh, kw = kernel.shape[:2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    padded = np.pad(up, [(0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)])
    n, h, w, _ = up.shape
    out = np.zeros((n, h, w, kernel.shape[-1]))
    for dy in range(kh):
        for dx in range(kw):
            out += np.einsum("nhwc,co->nhwo", padded[:, dy:dy + h, dx:dx + w], kernel[dy, dx].astype("float64"))
    return out


def _close(actual, expected, tol=TOL, name=""):
    actual, expected = np.asarray(actual, "float64"), np.asarray(expected, "float64")
    assert actual.shape == expected.shape, name
    scale = max(np.abs(expected).max(), 1e-30)
    error = np.abs(actual - expected).max() / scale
    print(f"{name}: {error:.1e}")
    assert error <= tol, (name, error)


def _with_gradients(fn, x, kernel, upstream, jit):
    import tensorflow as tf

    def run(x, kernel):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = fn(x, kernel)
            loss = tf.reduce_sum(y * upstream)
        return [y] + tape.gradient(loss, [x, kernel])

    return [v.numpy() for v in tf.function(run, jit_compile=jit)(tf.constant(x), tf.constant(kernel))]


CASES = [  # (height, width, factor, kernel height, kernel width): the ladder's (2, 3x3), odd, even, large
    (6, 6, 2, 3, 3),
    (5, 7, 2, 3, 3),
    (4, 3, 3, 3, 3),
    (4, 4, 2, 5, 5),
    (4, 5, 2, 2, 4),
    (3, 3, 4, 3, 1),
    (4, 4, 2, 1, 1),
]


@pytest.mark.parametrize("case", CASES)
def test_upsampled_conv_matches_numpy(case):
    h, w, factor, kh, kw = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((2, h, w, 3)).astype("float32")
    kernel = rng.standard_normal((kh, kw, 3, 4)).astype("float32")
    _close(upsampled_conv(ops.convert_to_tensor(x), ops.convert_to_tensor(kernel), factor),
           _numpy_upsampled_conv(x, kernel, factor), tol=2e-6)  # (against float64)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_upsampled_conv_outputs_and_gradients_equal_the_old_formulation(case, jit):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("gradients through TensorFlow's tape")
    h, w, factor, kh, kw = case
    rng = np.random.default_rng(100 + sum(case))
    x = rng.standard_normal((2, h, w, 3)).astype("float32")
    kernel = rng.standard_normal((kh, kw, 3, 4)).astype("float32")
    upstream = rng.standard_normal((2, h * factor, w * factor, 4)).astype("float32")
    new = _with_gradients(lambda a, k: upsampled_conv(a, k, factor), x, kernel, upstream, jit)
    old = _with_gradients(lambda a, k: _old_upsampled_conv(a, k, factor), x, kernel, upstream, jit)
    for name, a, b in zip(("output", "x gradient", "kernel gradient"), new, old):
        _close(a, b, name=name)


@pytest.mark.parametrize("cls", [ConvG1, ConvG2])
def test_upsampling_combinators_match_numpy(cls):
    """A whole combinator with an upsampled top: its top-down signal u (read through ConvG1's
    gate with f(u) = u for mu and s = 0, so that y = u) is the NumPy upsampled convolution
    plus the bias."""
    rng = np.random.default_rng(7)
    top = rng.standard_normal((2, 3, 3, 5)).astype("float32")
    lat = rng.standard_normal((2, 6, 6, 4)).astype("float32")
    if cls is ConvG1:
        layer = ConvG1(upsample=2, mu_initializer=keras.initializers.Constant(0.0),
                       s_initializer=keras.initializers.Constant(0.0))
        layer.build([top.shape, lat.shape])
        mu = np.zeros((5, 4), "float32")
        mu[3] = 1.0  # f(u) = u
        layer.mu_weights.assign(mu)  # s = f(u; 0) = 0: y = mu = u
        layer.bias.assign(rng.standard_normal(4).astype("float32"))
        expected = _numpy_upsampled_conv(top, keras.ops.convert_to_numpy(layer.top_kernel), 2) + layer.bias.numpy()
        _close(layer([top, lat]), expected, tol=2e-6)
    else:  # ConvG2 shares the top-down path: the same layer with the old formulation patched in
        layer = cls(upsample=2)
        new = keras.ops.convert_to_numpy(layer([top, lat]))
        original = _conv_combinator.upsampled_conv
        _conv_combinator.upsampled_conv = _old_upsampled_conv
        try:
            old = keras.ops.convert_to_numpy(layer([top, lat]))
        finally:
            _conv_combinator.upsampled_conv = original
        _close(new, old)


def _benchmark_ladder(variant):
    from applications import occluded_mnist as om

    keras.utils.set_random_seed(0)
    # the benchmark's default levels (gated convolutions, instance normalization, a gated
    # top), smaller: frames 8, conv units 2/3/3, dense 4; feedback kernels not at zero (the
    # benchmark's start), so that the feedback path's gradients are compared too
    return om.build_model(variant, num_frames=3, frame_size=8, conv_units=(2, 3, 3), dense_units=4,
                          conv_encoder="gatedconv", conv_normalization="instance", feedback_initializer=None)


def _ladder_outputs_and_gradients(model, frames, jit):
    import tensorflow as tf

    rng = np.random.default_rng(5)  # fixed random upstream weights for both outputs
    frame_weights = tf.constant(rng.standard_normal((2, 2, 8, 8, 1)).astype("float32"))
    class_weights = tf.constant(rng.standard_normal((2, 3, 10)).astype("float32"))

    def run(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.reduce_sum(out["next_frames"] * frame_weights) + tf.reduce_sum(
                tf.math.log(out["digit_steps"]) * class_weights
            )
        return [out["next_frames"], out["digit_steps"]] + tape.gradient(loss, model.trainable_variables)

    return [v.numpy() for v in tf.function(run, jit_compile=jit)(tf.constant(frames))]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("variant", ["rladder", "no_feedback"])
def test_benchmark_ladder_outputs_and_gradients_equal_the_old_formulation(monkeypatch, variant, jit):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the application's model, gradients through TensorFlow's tape")
    model = _benchmark_ladder(variant)
    frames = (np.random.default_rng(3).random((2, 3, 8, 8, 1)) < 0.3).astype("float32")
    new = _ladder_outputs_and_gradients(model, frames, jit)
    monkeypatch.setattr(_conv_combinator, "upsampled_conv", _old_upsampled_conv)
    old = _ladder_outputs_and_gradients(model, frames, jit)
    assert len(new) == len(old) == 2 + len(model.trainable_variables)
    names = ["next_frames", "digit_steps"] + [v.path for v in model.trainable_variables]
    for name, a, b in zip(names, new, old):
        assert np.all(np.isfinite(a)), name
        _close(a, b, tol=MODEL_TOL, name=name)
