"""G1, ConvG1, ConvG2, ConvG3: hand-derived cases, the layer contract, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import G1, ConvG1, ConvG2, ConvG3
from tests.harness import edit_saved_layer_config, run_layer_contract


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _f(u, w):
    return w[0] * _sigmoid(w[1] * u + w[2]) + w[3] * u + w[4]


def _set_random(layer, rng):
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])


def test_g1_matches_numpy():
    rng = np.random.default_rng(0)
    top = rng.normal(size=(3, 2)).astype("float32")
    lat = rng.normal(size=(3, 4)).astype("float32")
    layer = G1()
    layer([top, lat])
    _set_random(layer, rng)
    a, b, wm, ws = (np.asarray(w) for w in (layer.kernel, layer.bias, layer.mu_weights, layer.s_weights))
    u = top @ a + b
    mu, s = _f(u, wm), _f(u, ws)
    want = lat * s + (1 - s) * mu
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([top, lat])), want, rtol=1e-5, atol=1e-6)


def test_g1_hand_computed_defaults():
    """Default parameters: mu = u, s = sigmoid(u); with A = 1 and b = 0: u = x_top."""
    layer = G1(kernel_initializer="ones")
    top = np.array([[0.0], [2.0]], "float32")
    lat = np.array([[3.0], [1.0]], "float32")
    y = keras.ops.convert_to_numpy(layer([top, lat]))
    # u = 0: s = 0.5, mu = 0 -> y = 1.5; u = 2: s = sigmoid(2), mu = 2 -> y = 1 * s + 2 (1 - s)
    s2 = 1.0 / (1.0 + np.exp(-2.0))
    np.testing.assert_allclose(y, [[1.5], [s2 + 2.0 * (1 - s2)]], rtol=1e-6)


def test_g1_top_level_uses_a_learned_bias():
    rng = np.random.default_rng(1)
    lat = rng.normal(size=(2, 3)).astype("float32")
    for inputs in (lat, [None, lat], [lat]):
        layer = G1(bias_initializer="random_normal")
        y = keras.ops.convert_to_numpy(layer(inputs))
        assert not hasattr(layer, "kernel")
        b, wm, ws = (np.asarray(w) for w in (layer.bias, layer.mu_weights, layer.s_weights))
        np.testing.assert_allclose(y, lat * _f(b, ws) + (1 - _f(b, ws)) * _f(b, wm), rtol=1e-5)
    with pytest.raises(ValueError, match="built without an x_top"):
        layer([lat[:, :2], lat])


def test_conv_combinators_match_numpy_with_1x1_kernels():
    """1x1 kernels: every convolution is a per-pixel matrix product."""
    rng = np.random.default_rng(2)
    top = rng.normal(size=(2, 2, 2, 3)).astype("float32")
    lat = rng.normal(size=(2, 4, 4, 2)).astype("float32")
    up = top.repeat(2, 1).repeat(2, 2)

    g1 = ConvG1(kernel_size=1, upsample=2)
    g1([top, lat])
    _set_random(g1, rng)
    u = up @ np.asarray(g1.top_kernel)[0, 0] + np.asarray(g1.bias)
    s, mu = _f(u, np.asarray(g1.s_weights)), _f(u, np.asarray(g1.mu_weights))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(g1([top, lat])), lat * s + (1 - s) * mu, rtol=1e-4, atol=1e-5)

    for cls in (ConvG2, ConvG3):
        layer = cls(kernel_size=1, upsample=2, filters=5)
        layer([top, lat])
        _set_random(layer, rng)
        w = {v.name: np.asarray(v) for v in layer.weights}
        k = lambda name: w[name][0, 0]  # noqa: E731
        u = np.maximum(up @ k("top_kernel") + lat @ k("lateral_kernel") + w["hidden_bias"], 0)
        s = _sigmoid(u @ k("s_kernel") + w["s_bias"])
        if cls is ConvG2:
            mu = u @ k("mu_kernel") + w["mu_bias"]
            want = lat * s + (1 - s) * mu
        else:
            want = s * (u @ k("mu1_kernel") + w["mu1_bias"]) + (1 - s) * (
                u @ k("mu2_kernel") + w["mu2_bias"]
            )
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([top, lat])), want, rtol=1e-4, atol=1e-5)


def test_vector_top_is_broadcast_over_pixels():
    rng = np.random.default_rng(3)
    top = rng.normal(size=(2, 3)).astype("float32")
    lat = np.zeros((2, 4, 4, 2), "float32")
    layer = ConvG1()
    y = keras.ops.convert_to_numpy(layer([top, lat]))
    np.testing.assert_allclose(y, np.broadcast_to(y[:, :1, :1], y.shape), rtol=1e-6)


def _conv_combinator_numpy(cls, down, lat, w):
    """ConvG1/ConvG2/ConvG3 in numpy for 1x1 kernels, given the top signal ``down`` at the
    lateral's resolution and the layer's weights ``w`` by name."""
    if cls is ConvG1:
        u = down + w["bias"]
        s, mu = _f(u, w["s_weights"]), _f(u, w["mu_weights"])
        return lat * s + (1 - s) * mu
    u = np.maximum(down + lat @ w["lateral_kernel"][0, 0] + w["hidden_bias"], 0)
    s = _sigmoid(u @ w["s_kernel"][0, 0] + w["s_bias"])
    if cls is ConvG2:
        return lat * s + (1 - s) * (u @ w["mu_kernel"][0, 0] + w["mu_bias"])
    return s * (u @ w["mu1_kernel"][0, 0] + w["mu1_bias"]) + (1 - s) * (u @ w["mu2_kernel"][0, 0] + w["mu2_bias"])


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
def test_dense_vector_top_gives_every_pixel_its_own_weights(cls):
    """vector_top="dense": u's top-down term is x_top @ K reshaped to [H, W, C]."""
    rng = np.random.default_rng(5)
    top = rng.normal(size=(2, 3)).astype("float32")
    lat = rng.normal(size=(2, 4, 5, 2)).astype("float32")
    kwargs = dict(kernel_size=1) if cls is ConvG1 else dict(kernel_size=1, filters=6)
    layer = cls(vector_top="dense", **kwargs)
    layer([top, lat])
    _set_random(layer, rng)
    w = {v.name: np.asarray(v) for v in layer.weights}
    hidden = 2 if cls is ConvG1 else 6
    assert w["top_kernel"].shape == (3, 4 * 5 * hidden)
    down = (top @ w["top_kernel"]).reshape(2, 4, 5, hidden)
    want = _conv_combinator_numpy(cls, down, lat, w)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([top, lat])), want, rtol=1e-4, atol=1e-5)
    # with a zero lateral the broadcast top gives every pixel the same output, the dense one not
    zero = np.zeros_like(lat)
    y = keras.ops.convert_to_numpy(layer([top, zero]))
    assert np.abs(y - y[:, :1, :1]).max() > 1e-3


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
def test_dense_vector_top_needs_a_vector_top(cls):
    with pytest.raises(ValueError, match="Received: vector_top='sideways'"):
        cls(vector_top="sideways")
    lat = np.zeros((2, 4, 4, 2), "float32")
    with pytest.raises(ValueError, match=r"an x_top image of shape .*no effect.*vector_top='dense'"):
        cls(vector_top="dense", upsample=2)([np.zeros((2, 2, 2, 3), "float32"), lat])
    with pytest.raises(ValueError, match="has no x_top, so it would have no effect"):
        cls(vector_top="dense")(lat)


VECTOR_TOP_UPSAMPLES = [dict(upsample=2), dict(upsample=3), dict(upsample=2, upsample_mode="transpose")]


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
@pytest.mark.parametrize("kwargs", VECTOR_TOP_UPSAMPLES, ids=["2", "3_not_dividing", "2_transpose"])
def test_upsampling_a_vector_top_is_refused_and_old_saved_models_load(cls, kwargs, tmp_path):
    # fix22: a vector x_top (broadcast over pixels) ignored upsample and upsample_mode
    # (even a factor that does not divide x_lat's size): the same layer as upsample=1
    top, lat = keras.Input((3,)), keras.Input((4, 4, 2))
    with pytest.raises(ValueError, match=rf"needs upsample=1\. Received: upsample={kwargs['upsample']}"):
        cls(**kwargs)([top, lat])
    rng = np.random.default_rng(0)
    x = [rng.normal(size=(2, 3)).astype("float32"), rng.normal(size=(2, 4, 4, 2)).astype("float32")]
    _check_an_old_saved_upsample_loads_as_upsample_1(
        keras.Model([top, lat], cls(name="comb")([top, lat])), kwargs, "on a vector x_top", x, tmp_path)


def _check_an_old_saved_upsample_loads_as_upsample_1(model, kwargs, without, x, tmp_path):
    """A model saved with ``kwargs`` (upsample > 1) on its layer "comb", as saved before
    they were refused, loads with a warning as ``upsample=1``, with the same outputs."""
    path = tmp_path / "old.keras"
    model.save(path)
    edit_saved_layer_config(path, "comb", lambda c: c.update({"upsample_mode": "nearest", **kwargs}))
    with pytest.warns(UserWarning, match=f"upsample={kwargs['upsample']} has no effect {without}"):
        loaded = keras.saving.load_model(path)
    assert (loaded.get_layer("comb").upsample, loaded.get_layer("comb").upsample_mode) == (1, "nearest")
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
@pytest.mark.parametrize("kwargs", VECTOR_TOP_UPSAMPLES, ids=["2", "3", "2_transpose"])
def test_upsampling_without_a_top_is_refused_and_old_saved_models_load(cls, kwargs, tmp_path):
    # helper-179: a combinator without x_top took upsample (and upsample_mode) and did
    # nothing with them, where vector_top there was refused as having no effect
    lat = keras.Input((6, 6, 2))
    with pytest.raises(ValueError, match=rf"this {cls.__name__} has no x_top, so it would have no effect\. "
                                         rf"Received: upsample={kwargs['upsample']}"):
        cls(**kwargs)(lat)
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 2)).astype("float32")
    _check_an_old_saved_upsample_loads_as_upsample_1(keras.Model(lat, cls(name="comb")(lat)), kwargs, "without x_top",
                                                    x, tmp_path)


def test_transposed_upsampling_shapes_and_weights():
    top = np.ones((2, 2, 2, 3), "float32")
    lat = np.ones((2, 6, 6, 2), "float32")
    layer = ConvG3(upsample=3, upsample_mode="transpose", kernel_size=2)
    assert layer([top, lat]).shape == (2, 6, 6, 2)
    assert tuple(layer.top_kernel.shape) == (3, 3, 2, 3)  # max(kernel_size, upsample)


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
def test_transposed_upsampling_matches_numpy(cls):
    """Audit s64 (mutation): x_top * 0.0 in the transposed convolution of _top_signal
    survived every test (the one above checks shapes only). With kernel_size 1 and
    upsample 2 the transposed kernel is 2x2 with stride 2: top pixel (i, j) alone
    feeds the 2x2 block (2i + a, 2j + b) through K[a, b] (out, in), and the rest of
    the layer is per-pixel matrix products, so numpy gives the output exactly."""
    rng = np.random.default_rng(7)
    top = rng.normal(size=(2, 2, 3, 3)).astype("float32")
    lat = rng.normal(size=(2, 4, 6, 2)).astype("float32")
    kwargs = dict(kernel_size=1, upsample=2, upsample_mode="transpose")
    layer = cls(**kwargs) if cls is ConvG1 else cls(filters=5, **kwargs)
    layer([top, lat])
    _set_random(layer, rng)
    w = {v.name: np.asarray(v) for v in layer.weights}
    assert w["top_kernel"].shape[:2] == (2, 2)
    down = np.einsum("bijc,xyoc->bixjyo", top, w["top_kernel"]).reshape(2, 4, 6, -1)
    want = _conv_combinator_numpy(cls, down, lat, w)
    # float32 products of O(1) values over at most 5 terms: 1e-4 as the 1x1 case above
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([top, lat])), want, rtol=1e-4, atol=1e-5)


CONTRACT_CASES = [
    (G1, dict(bias_initializer="random_normal"), [(4, 3), (4, 5)]),
    (G1, dict(mu_regularizer="l2"), [(4, 5)]),
    (ConvG1, dict(upsample=2), [(4, 2, 2, 3), (4, 4, 4, 2)]),
    (ConvG2, dict(filters=3, kernel_size=1), [(4, 3), (4, 4, 4, 2)]),
    (ConvG1, dict(vector_top="dense"), [(4, 3), (4, 4, 5, 2)]),
    (ConvG3, dict(upsample=2, upsample_mode="transpose"), [(4, 2, 2, 2), (4, 4, 4, 2)]),
]


@pytest.mark.parametrize("cls,kwargs,shapes", CONTRACT_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_layer_contract(cls, kwargs, shapes, tmp_path):
    rng = np.random.default_rng(4)
    inputs = [rng.normal(size=s).astype("float32") for s in shapes]
    weightless = ("kernel_constraint",) if len(inputs) == 1 else ()  # no x_top: no kernel A
    run_layer_contract(cls, kwargs, inputs if len(inputs) > 1 else inputs[0], tmp_path=tmp_path,
                       weightless_constraints=weightless)


@pytest.mark.parametrize(
    "cls,kwargs,name",
    [
        (ConvG1, dict(kernel_size=0), "kernel_size"),
        (ConvG1, dict(upsample=1.5), "upsample"),
        (ConvG2, dict(upsample_mode="bilinear"), "upsample_mode"),
        (ConvG3, dict(filters=-2), "filters"),
    ],
)
def test_bad_constructor_arguments(cls, kwargs, name):
    with pytest.raises(ValueError, match=f"Received: {name}="):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
def test_batch_size_mismatch_is_a_clear_error(cls):
    # Audit 11: x_top and x_lat of different batch sizes failed with a raw TensorFlow error.
    with pytest.raises(ValueError, match=r"same batch size.*x_top shape=\(3, 2, 2, 1\)"):
        cls(upsample=2)([np.zeros((3, 2, 2, 1), "float32"), np.zeros((2, 4, 4, 2), "float32")])
    with pytest.raises(ValueError, match=r"same batch size.*x_lat shape=\(2, 4\)"):
        G1()([np.zeros((3, 5), "float32"), np.zeros((2, 4), "float32")])
    # Audit 2026-11-30: once built, G1 broadcast mismatched batches or leading axes silently
    g1 = G1()
    g1([np.zeros((4, 3), "float32"), np.zeros((4, 5), "float32")])
    for top, lat in (((1, 3), (4, 5)), ((4, 3), (1, 5))):
        with pytest.raises(ValueError, match="same batch size"):
            g1([np.zeros(top, "float32"), np.zeros(lat, "float32")])
    g1 = G1()
    g1([np.zeros((2, 3, 3), "float32"), np.zeros((2, 3, 5), "float32")])
    with pytest.raises(ValueError, match="share their leading axes"):
        g1([np.zeros((2, 3, 3), "float32"), np.zeros((2, 1, 5), "float32")])


def test_bad_input_shapes():
    lat = np.zeros((2, 4, 4, 2), "float32")
    with pytest.raises(ValueError, match=r"\[batch, 2, 2, top_channels\]"):
        ConvG1(upsample=2)([np.zeros((2, 3, 3, 1), "float32"), lat])
    with pytest.raises(ValueError, match=r"\[batch, height, width, channels\]"):
        ConvG2()(np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match="same rank"):
        G1()([np.zeros((2, 3, 1), "float32"), np.zeros((2, 3), "float32")])
    with pytest.raises(ValueError, match=r"\[x_top, x_lat\]"):
        G1()([lat, lat, lat])
    layer = G1()
    layer([np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32")])
    with pytest.raises(ValueError, match=r"\[batch, \.\.\., 4\]"):
        layer([np.zeros((2, 3), "float32"), np.zeros((2, 5), "float32")])


def test_functional_model_without_top():
    lat = keras.Input((4, 4, 2))
    model = keras.Model(lat, ConvG3()([None, lat]))
    assert model.output.shape == (None, 4, 4, 2)


def test_same_shape_kernels_start_different():
    """An unseeded initializer is cloned per weight, so mu1 and mu2 do not start equal."""
    layer = ConvG3()
    layer(np.zeros((1, 4, 4, 2), "float32"))
    assert not np.allclose(np.asarray(layer.mu1_kernel), np.asarray(layer.mu2_kernel))


@pytest.mark.parametrize(
    "initializer",
    [
        lambda: keras.initializers.GlorotUniform(seed=3),
        lambda: keras.initializers.GlorotUniform(seed=keras.random.SeedGenerator(3)),
    ],
    ids=["int_seed", "seed_generator"],
)
def test_seeded_initializers_start_same_shape_kernels_different_and_reproducibly(initializer):
    # Audit (2026-11-28): the per-weight copy of a seeded initializer kept its seed (or
    # restarted its SeedGenerator), so ConvG3's lateral, mu1, mu2 and s kernels (one
    # shape) all started identical, and mu1 = mu2 made y = mu1 whatever the gate s.
    def kernels():
        layer = ConvG3(kernel_initializer=initializer())
        layer(np.zeros((1, 4, 4, 2), "float32"))
        return [np.asarray(getattr(layer, f"{n}_kernel")) for n in ("lateral", "mu1", "mu2", "s")]

    first = kernels()
    for i in range(len(first)):
        for j in range(i):
            assert not np.array_equal(first[i], first[j]), (i, j)
    if not isinstance(initializer().seed, keras.random.SeedGenerator):  # an int seed reproduces
        for a, b in zip(first, kernels()):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", [ConvG1, ConvG2, ConvG3])
def test_transpose_upsampling_by_one_is_refused_and_old_configs_load(cls):
    # fix13: upsample_mode="transpose" with upsample=1 was accepted and had no effect
    with pytest.raises(ValueError, match="Received: upsample_mode='transpose', upsample=1"):
        cls(upsample_mode="transpose")
    config = dict(cls(kernel_size=1).get_config(), upsample_mode="transpose")  # as saved before
    with pytest.warns(UserWarning, match="upsample_mode='transpose' has no effect"):
        assert cls.from_config(config).upsample_mode == "nearest"


def _normal(*shape):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


BUILT_AND_CALLED = {  # layer, the inputs it is built on, then inputs whose x_top differs
    # a multiple of the built channels ran silently as a grouped convolution on TensorFlow
    "ConvG1, channels x2": (lambda: ConvG1(), [(2, 4, 4, 3), (2, 4, 4, 2)], [(2, 4, 4, 6), (2, 4, 4, 2)]),
    "ConvG3, channels x2": (lambda: ConvG3(filters=2), [(2, 4, 4, 1), (2, 4, 4, 2)], [(2, 4, 4, 2), (2, 4, 4, 2)]),
    # the others failed deep in the backend ("Matrix size-incompatible", "num_spatial_dims")
    "G1": (lambda: G1(), [(2, 3), (2, 4)], [(2, 5), (2, 4)]),
    "ConvG2, vector then image": (lambda: ConvG2(), [(2, 3), (2, 4, 4, 2)], [(2, 4, 4, 3), (2, 4, 4, 2)]),
    "ConvG1, dense vector top, other size": (
        lambda: ConvG1(vector_top="dense"), [(2, 3), (2, 4, 4, 2)], [(2, 3), (2, 6, 6, 2)]
    ),
}


@pytest.mark.parametrize("case", sorted(BUILT_AND_CALLED))
def test_an_x_top_unlike_the_one_built_for_is_a_clear_error(case):
    # audit (2026-11-27): only x_lat's channels were checked after build
    make, built, called = BUILT_AND_CALLED[case]
    layer = make()
    layer([_normal(*s) for s in built])
    with pytest.raises(ValueError, match=r"was built for x_top (of shape|with a last axis) .*Received: x_top shape="):
        layer([_normal(*s) for s in called])
    layer([_normal(*s) for s in built])  # still fine


@pytest.mark.parametrize("make", [lambda: ConvG1(upsample=2), lambda: ConvG2(upsample=2),
                                  lambda: ConvG3(upsample=2, upsample_mode="transpose")],
                         ids=["ConvG1", "ConvG2", "ConvG3"])
def test_an_x_lat_not_divisible_by_upsample_is_named_as_the_error(make):
    # Audit (2026-11-30): x_lat 7x7 with upsample=2 said "expects x_top of shape
    # [batch, 3, 3, top_channels] ... Received: x_top shape=(2, 3, 3, 4)".
    with pytest.raises(ValueError, match=r"x_lat divisible by 2 .*Received: x_lat shape=\(2, 7, 7, 5\)"):
        make()([_normal(2, 3, 3, 4), _normal(2, 7, 7, 5)])


INTEGER_CASES = {  # layer, x_top shape (None: top level), x_lat shape
    "G1": (lambda: G1(), (2, 3), (2, 4)),
    "G1, top level": (lambda: G1(), None, (2, 4)),
    "ConvG1": (lambda: ConvG1(upsample=2), (2, 2, 2, 3), (2, 4, 4, 2)),
    "ConvG1, vector top": (lambda: ConvG1(), (2, 3), (2, 4, 4, 2)),
    "ConvG2": (lambda: ConvG2(filters=3), (2, 4, 4, 3), (2, 4, 4, 2)),
    "ConvG3, top level": (lambda: ConvG3(), None, (2, 4, 4, 2)),
    "ConvG3, transpose": (lambda: ConvG3(upsample=2, upsample_mode="transpose"), (2, 2, 2, 3), (2, 4, 4, 2)),
}


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("case", sorted(INTEGER_CASES))
def test_integer_and_boolean_inputs_run_as_floats(case, dtype):
    # audit (2026-12): used on their own, the combinators took integer or boolean inputs
    # as they were (Keras casts only floating inputs to the compute dtype) and failed in
    # the backend's matmul or convolution; RLadder cast its inputs first
    make, top_shape, lat_shape = INTEGER_CASES[case]
    rng = np.random.default_rng(0)
    shapes = [lat_shape] if top_shape is None else [top_shape, lat_shape]
    binary = [rng.random(s) > 0.5 for s in shapes]
    layer = make()
    want = keras.ops.convert_to_numpy(layer([b.astype("float32") for b in binary]))
    got = layer([b.astype(dtype) for b in binary])
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, rtol=1e-6, atol=1e-6)
    inputs = [keras.Input(s[1:], dtype=dtype) for s in shapes]
    model = keras.Model(inputs, make()(inputs if top_shape is not None else inputs[0]))
    assert np.all(np.isfinite(model.predict([b.astype(dtype) for b in binary], verbose=0)))


REUSED = {  # layer, the shapes (without the batch) it is built on, then those it is reused on
    # (None: no x_top), and the error
    "G1, x_lat": (G1, [(3,), (4,)], [(3,), (5,)], r"built for x_lat of shape \[batch, \.\.\., 4\]\. Received: x_lat shape=\(None, 5\)"),
    "G1, x_top": (G1, [(3,), (4,)], [(2,), (4,)], r"built for x_top with a last axis of 3\. Received: x_top shape=\(None, 2\)"),
    "G1, an x_top added": (G1, [None, (4,)], [(3,), (4,)], r"built without an x_top input\. Received: x_top shape=\(None, 3\)"),
    "G1, x_top left out": (G1, [(3,), (4,)], [None, (4,)], r"built with an x_top input\. Received: x_top=None"),
    "ConvG1, x_lat": (ConvG1, [None, (4, 4, 3)], [None, (4, 4, 2)],
                      r"built for x_lat of shape \[batch, height, width, 3\]\. Received: x_lat shape=\(None, 4, 4, 2\)"),
    "ConvG2, x_top channels": (lambda: ConvG2(upsample=2), [(2, 2, 3), (4, 4, 3)], [(2, 2, 5), (4, 4, 3)],
                               r"built for x_top of shape \[batch, height, width, 3\]\. Received: x_top shape=\(None, 2, 2, 5\)"),
    "ConvG3, vector then image": (ConvG3, [(3,), (4, 4, 2)], [(4, 4, 3), (4, 4, 2)],
                                  r"built for x_top of shape \[batch, 3\]\. Received: x_top shape=\(None, 4, 4, 3\)"),
    "ConvG1, dense vector top, other size": (
        lambda: ConvG1(vector_top="dense"), [(5,), (4, 4, 3)], [(5,), (3, 3, 3)],
        r"built for x_top of shape \[batch, 5\] and x_lat of height and width \(4, 4\)\. Received:"),
}


def _symbolic(shapes):
    return [None if s is None else keras.Input(s) for s in shapes]


def _call(layer, inputs):
    return layer(inputs[1] if inputs[0] is None else inputs)


@pytest.mark.parametrize("case", sorted(REUSED))
def test_a_reuse_on_inputs_unlike_those_built_for_is_refused_when_the_model_is_built(case):
    # Audit s65: a built combinator reused in a functional model on other inputs was
    # accepted, with an output shape it never produces ((None, 5) for a G1 built on
    # x_lat of 4 units); predict then failed
    make, built, reused, message = REUSED[case]
    layer = make()
    _call(layer, _symbolic(built))
    with pytest.raises(ValueError, match=message):
        _call(layer, _symbolic(reused))
    again = _symbolic(built)  # the same sizes: still fine, and the model runs
    model = keras.Model([x for x in again if x is not None], _call(layer, again))
    data = [_normal(2, *s) for s in built if s is not None]
    assert model.predict(data, verbose=0).shape == (2,) + built[1]


def test_a_reuse_on_unknown_or_other_sizes_the_weights_do_not_fix_is_fine():
    g1 = G1()
    g1([keras.Input((None, 3)), keras.Input((None, 4))])  # any number of steps
    top, lat = keras.Input((7, 3)), keras.Input((7, 4))
    assert tuple(g1([top, lat]).shape) == (None, 7, 4)
    conv = ConvG3(upsample=2)
    conv([keras.Input((2, 2, 3)), keras.Input((4, 4, 2))])
    top, lat = keras.Input((3, 3, 3)), keras.Input((6, 6, 2))  # other heights and widths
    model = keras.Model([top, lat], conv([top, lat]))
    assert model.predict([_normal(2, 3, 3, 3), _normal(2, 6, 6, 2)], verbose=0).shape == (2, 6, 6, 2)
