"""RAdam and the one-cycle schedule: the published rule, schedules, serialization, training."""

import math
import re

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.optimizers import RAdam, one_cycle_schedule
from tests.backends import BACKEND, grads, require_float64, tensor, tensorflow_only


def _numpy_radam(theta, grad_fn, lrs, beta_1=0.9, beta_2=0.999, eps=1e-8, weight_decay=0.0):
    """RAdam as published (Algorithm 2, threshold rho_t > 4), in float64 numpy.

    Returns the parameters after every step and whether each step was rectified.
    """
    theta = np.array(theta, np.float64)
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    rho_inf = 2.0 / (1.0 - beta_2) - 1.0
    history, rectified = [], []
    for t, lr in enumerate(lrs, start=1):
        g = grad_fn(theta)
        if weight_decay:  # decoupled, applied before the step as Keras does
            theta = theta - lr * weight_decay * theta
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        m_hat = m / (1 - beta_1**t)
        rho_t = rho_inf - 2 * t * beta_2**t / (1 - beta_2**t)
        if rho_t > 4:
            v_hat = v / (1 - beta_2**t)
            r_t = math.sqrt(
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            )
            theta = theta - lr * r_t * m_hat / (np.sqrt(v_hat) + eps)
        else:
            theta = theta - lr * m_hat
        history.append(theta.copy())
        rectified.append(rho_t > 4)
    return history, rectified


# A small anisotropic quadratic: f(x) = 0.5 x^T A x - b^T x.
A = np.array([[3.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 0.3]])
B = np.array([1.0, -2.0, 0.5])
X0 = np.array([0.7, -0.3, 1.5])


def _keras_steps(optimizer, n_steps, dtype="float64"):
    if dtype == "float64":
        require_float64()
    x = keras.Variable(X0.astype(dtype), dtype=dtype)
    a, b = tensor(A, dtype), tensor(B, dtype)

    def loss():
        # einsum, not matmul or tensordot: Keras' torch backend returns those in float32
        # for float64 operands (a float64 gradient 7e-8 off, see keras_capsules.ops.matmul).
        return 0.5 * keras.ops.einsum("i,ij,j->", x, a, x) - keras.ops.einsum("i,i->", b, x)

    history = []
    for _ in range(n_steps):
        optimizer.apply_gradients([(grads(loss, variables=[x])[0], x)])
        history.append(np.asarray(x))
    return history


# rho_t is computed without cancellation (from -log(beta_2), not beta_2 rounded to
# float32), so float32 agrees to float32 rounding too; float64 agrees to rounding. The
# learning rate is held in float32 by Keras, so the reference uses its float32 value.
LR = float(np.float32(0.05))
TOLERANCES = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=1e-5, atol=1e-6)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("beta_2", [0.999, 0.99])
def test_matches_the_published_rule_across_the_threshold(beta_2, dtype):
    n = 9
    ours = _keras_steps(RAdam(LR, beta_2=beta_2), n, dtype)
    ref, rectified = _numpy_radam(X0, lambda x: A @ x - B, [LR] * n, beta_2=beta_2)
    # Steps 1-4 are momentum SGD, the rest rectified adaptive steps (rho_t ~ t).
    assert rectified == [False] * 4 + [True] * (n - 4)
    for k, (got, want) in enumerate(zip(ours, ref)):
        np.testing.assert_allclose(got, want, err_msg=f"step {k + 1}", **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", [
    pytest.param("float64", marks=pytest.mark.xfail(
        BACKEND == "torch", strict=True,
        reason="Keras' torch optimizer decays every variable by 1 - weight_decay * lr computed in float32 "
        "(the decay of a float64 variable 2e-5 off at lr * weight_decay = 1.25e-3)")),
    "float32"])
def test_learning_rate_schedule_and_weight_decay(dtype):
    # weight_decay = 1/8 is exact in float32, in which the base class holds it.
    schedule = one_cycle_schedule(20, min_lr=0.01, max_lr=0.1, warmup_fraction=0.25)
    n = 8
    lrs = [float(schedule(k)) for k in range(n)]  # the optimizer's step k uses schedule(k)
    ours = _keras_steps(RAdam(schedule, weight_decay=0.125), n, dtype)
    ref, _ = _numpy_radam(X0, lambda x: A @ x - B, lrs, weight_decay=0.125)
    for k, (got, want) in enumerate(zip(ours, ref)):
        np.testing.assert_allclose(got, want, err_msg=f"step {k + 1}", **TOLERANCES[dtype])


def test_first_step_is_sgd_with_momentum():
    ours = _keras_steps(RAdam(0.1), 1, "float32")[0]
    np.testing.assert_allclose(ours, X0 - 0.1 * (A @ X0 - B), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_variables_follow_the_published_rule(dtype):
    # Audit 9: with float16/bfloat16 variables, 1 - beta_2^t and rho_t were computed in
    # that dtype and cancelled, so the rectified step never started (momentum SGD throughout).
    gradient = np.array([1.0, 0.0, -1.0])  # exact in both dtypes; a zero gradient must stay finite
    x = keras.Variable(np.zeros(3), dtype=dtype)
    optimizer = RAdam(0.01)
    for _ in range(8):
        optimizer.apply_gradients([(tensor(gradient, dtype), x)])
    ref, rectified = _numpy_radam(np.zeros(3), lambda theta: gradient, [0.01] * 8)
    assert rectified[-1]
    np.testing.assert_allclose(np.asarray(np.asarray(x), np.float64), ref[-1], atol=1e-3)


def test_serialization_round_trip(tmp_path):
    opt = RAdam(one_cycle_schedule(100), beta_1=0.8, beta_2=0.99, epsilon=1e-6, weight_decay=0.01)
    config = keras.optimizers.serialize(opt)
    assert config["registered_name"] == "keras_capsules>RAdam"
    clone = keras.optimizers.deserialize(config)
    assert isinstance(clone, RAdam)
    assert clone.get_config() == opt.get_config()
    assert keras_capsules.RAdam is RAdam

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer=opt, loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    model.fit(x, x[:, :1], epochs=1, batch_size=8, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.optimizer, RAdam)
    assert int(loaded.optimizer.iterations) == 2
    for a, b in zip(loaded.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "kwargs,name",
    [(dict(beta_1=1.0), "beta_1"), (dict(beta_2=-0.1), "beta_2"), (dict(epsilon=-1.0), "epsilon"),
     # Audit 9: a NaN epsilon or learning rate was accepted and trained every weight to NaN.
     (dict(epsilon=float("nan")), "epsilon"), (dict(learning_rate=float("nan")), "learning_rate"),
     (dict(learning_rate=-0.1), "learning_rate"),
     # audit (2026-11-27): a NaN weight decay turned every weight into NaN at the first step
     (dict(weight_decay=float("nan")), "weight_decay"), (dict(weight_decay=-1e-4), "weight_decay")],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=f"Received: {name}="):
        RAdam(**kwargs)


@pytest.mark.parametrize("name", ["clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, "1", True])
def test_bad_clip_and_loss_scale_values_are_refused(name, value):
    # audit s66: Keras checks none of them. A NaN, negative or zero clip clipped nothing,
    # silently; clipnorm=inf or global_clipnorm=inf trained NaN weights at the first step, as
    # did loss_scale_factor=0; clipnorm="1" failed at the first step with a TypeError.
    with pytest.raises(ValueError, match=rf"^`{name}` must be a positive, finite number\. Received: {name}="):
        RAdam(**{name: value})


@pytest.mark.parametrize("momentum", [float("nan"), 1.5, -0.1, "0.9"])
def test_a_bad_ema_momentum_is_refused(momentum):
    # audit s66: Keras refused 1.5 and -0.1 but not NaN (nor "0.9", a TypeError)
    with pytest.raises(ValueError, match=r"^`ema_momentum` must be a number in \[0, 1\]\. Received: ema_momentum="):
        RAdam(use_ema=True, ema_momentum=momentum)


@pytest.mark.parametrize("steps", [0, 1, -2, 2.5, 2.0, "2", True])
def test_a_bad_gradient_accumulation_count_is_refused(steps):
    # audit s79: Keras refused 1 and -2 only; 0 meant no accumulation, silently, and 2.5
    # failed at the first step with a TypeError
    with pytest.raises(ValueError, match=r"^`gradient_accumulation_steps` must be None or an integer of at "
                                         r"least 2\. Received: gradient_accumulation_steps="):
        RAdam(gradient_accumulation_steps=steps)


@pytest.mark.parametrize("value", ["False", "True", 1, 0, None])
def test_use_ema_must_be_true_or_false(value):
    # helper-180: Keras takes any truthy use_ema: "False" averaged the weights (and fit
    # ended on the average), and get_config saved the string
    with pytest.raises(ValueError, match=rf"^`use_ema` must be True or False\. Received: use_ema={value!r}$"):
        RAdam(use_ema=value)
    assert RAdam(use_ema=np.bool_(True)).get_config()["use_ema"] is True


@pytest.mark.parametrize("value", [True, 0, -1, 2.5, "5"])
def test_a_bad_ema_overwrite_frequency_is_refused(value):
    # helper-180: True overwrote the weights with their average at every step, 0 never
    with pytest.raises(ValueError, match=rf"^`ema_overwrite_frequency` must be a positive integer\. "
                                         rf"Received: ema_overwrite_frequency={value!r}$"):
        RAdam(use_ema=True, ema_overwrite_frequency=value)
    # (Keras refused a numpy integer, with a message showing "=5")
    assert RAdam(use_ema=True, ema_overwrite_frequency=np.int64(5)).get_config()["ema_overwrite_frequency"] == 5


def test_a_numpy_gradient_accumulation_count_is_kept_as_an_int():
    optimizer = RAdam(gradient_accumulation_steps=np.int64(3))
    assert optimizer.get_config()["gradient_accumulation_steps"] == 3
    assert type(optimizer.get_config()["gradient_accumulation_steps"]) is int


@pytest.mark.parametrize("name", ["clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor"])
def test_clip_and_loss_scale_values_are_kept_and_serialized(name):
    schedule = keras.optimizers.schedules.ExponentialDecay(0.01, 10, 0.5)
    opt = RAdam(schedule, **{name: np.float32(2.0)}, use_ema=True, ema_momentum=1.0)
    config = opt.get_config()
    assert config[name] == 2.0 and type(config[name]) is float  # (np.float32 is not JSON)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert getattr(restored, name) == 2.0 and restored.ema_momentum == 1.0
    assert isinstance(restored._learning_rate, keras.optimizers.schedules.ExponentialDecay)
    assert restored.get_config() == config
    # (and the default None: nothing clipped, no loss scale)
    assert RAdam().get_config()[name] is None


def test_clipnorm_clips():
    opt = RAdam(0.1, clipnorm=1.0)
    v = keras.Variable(np.ones(2, "float32"))
    opt.apply_gradients([(tensor(np.array([100.0, 0.0], "float32")), v)])
    # the first step is momentum SGD: v -= lr * g, with g clipped to norm 1
    np.testing.assert_allclose(np.asarray(v), [0.9, 1.0], rtol=1e-6)


def test_epsilon_zero_leaves_a_weight_whose_gradient_was_always_zero_unchanged():
    # audit (2026-11-27): with epsilon=0 (allowed), the rectified step (from step 5)
    # of a weight whose gradient had been zero so far was 0 / 0 = NaN
    opt = RAdam(0.01, epsilon=0.0)
    v = keras.Variable(np.ones(2, "float32"))
    for _ in range(8):
        opt.apply_gradients([(tensor(np.array([0.5, 0.0], "float32")), v)])
    got = np.asarray(v)
    assert got[1] == 1.0 and np.isfinite(got[0]) and got[0] < 1.0


def test_numpy_scalar_arguments_are_numbers():
    # Audit 9: np.float32 betas and epsilon were refused as "must be a number".
    opt = RAdam(np.float32(0.01), beta_1=np.float32(0.8), beta_2=np.float64(0.99), epsilon=np.float32(1e-7))
    assert opt.beta_1 == float(np.float32(0.8)) and opt.epsilon == float(np.float32(1e-7))
    keras.optimizers.deserialize(keras.optimizers.serialize(opt))


def test_trains_a_tiny_model():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([1.0, -1.0, 0.5, 0.0]) > 0).astype("int32")
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(hidden))
    model.compile(
        optimizer=RAdam(one_cycle_schedule(8 * 15, min_lr=1e-3, max_lr=5e-2)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    before = model.evaluate(x, y, verbose=0)[0]
    history = model.fit(x, y, epochs=15, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x, y, verbose=0)
    assert loss < 0.5 * before, (before, history.history["loss"])
    assert accuracy > 0.9


def test_one_cycle_schedule_values():
    total = 1000
    schedule = one_cycle_schedule(total)
    assert isinstance(schedule, keras.optimizers.schedules.CosineDecay)
    lr = lambda step: float(schedule(step))  # noqa: E731
    np.testing.assert_allclose(lr(0), 1e-5, rtol=1e-5)
    np.testing.assert_allclose(lr(50), 1e-5 + 0.5 * (5e-4 - 1e-5), rtol=1e-5)  # linear
    np.testing.assert_allclose(lr(100), 5e-4, rtol=1e-5)  # end of warm-up: the peak
    mid = 100 + 450  # half way through the cosine: the mean of the two ends
    np.testing.assert_allclose(lr(mid), 0.5 * (5e-4 + 1e-5), rtol=1e-4)
    np.testing.assert_allclose(lr(total), 1e-5, rtol=1e-4)  # the end
    np.testing.assert_allclose(lr(2 * total), 1e-5, rtol=1e-4)  # and after it
    values = [lr(s) for s in range(0, total + 1, 10)]
    peak = int(np.argmax(values))
    assert peak == 10
    assert np.all(np.diff(values[: peak + 1]) > 0) and np.all(np.diff(values[peak:]) < 0)
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    np.testing.assert_allclose(float(clone(321)), lr(321), rtol=1e-6)


def test_one_cycle_schedule_without_warm_up_starts_at_the_peak():
    # As its docstring says: with no warm-up step the half cosine starts at max_lr.
    schedule = one_cycle_schedule(100, min_lr=1e-5, max_lr=5e-4, warmup_fraction=0.0)
    lr = lambda step: float(schedule(step))  # noqa: E731
    np.testing.assert_allclose(lr(0), 5e-4, rtol=1e-5)
    np.testing.assert_allclose(lr(50), 0.5 * (5e-4 + 1e-5), rtol=1e-4)
    np.testing.assert_allclose(lr(100), 1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [dict(total_steps=1), dict(total_steps=10, min_lr=1e-3, max_lr=1e-4),
     dict(total_steps=10, warmup_fraction=1.0),
     # Audit 5: an infinite peak was accepted (an infinite learning rate, NaN weights).
     dict(total_steps=10, max_lr=float("inf")), dict(total_steps=10, min_lr=float("nan")),
     dict(total_steps=10.0), dict(total_steps=True),
     # Audit 9: strings were a TypeError ("'<' not supported between 'int' and 'str'").
     dict(total_steps=10, min_lr="1e-5"), dict(total_steps=10, warmup_fraction="0.1")],
)
def test_one_cycle_schedule_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="Received"):
        one_cycle_schedule(**kwargs)


@pytest.mark.parametrize("fraction", [1.0, -0.1, math.nan, math.inf, True, "0.1", None])
def test_one_cycle_schedule_warmup_fraction_must_be_a_number_in_0_1(fraction):
    # One message for every bad fraction, in the house format of _validation.rate: a string
    # was "must be a number" and 1.0 "must be in [0, 1)", neither naming the other bound.
    with pytest.raises(ValueError, match=re.escape(f"`warmup_fraction` must be a number in [0, 1). "
                                                   f"Received: warmup_fraction={fraction!r}")):
        one_cycle_schedule(10, warmup_fraction=fraction)
    assert one_cycle_schedule(8, warmup_fraction=np.float32(0.25)).warmup_steps == 2


def test_an_ema_momentum_is_kept_as_a_python_float():
    # As beta_1, beta_2 and epsilon: an np.float32 momentum (from a tuner or a config) was
    # kept as it came, in the optimizer and its config.
    opt = RAdam(use_ema=True, ema_momentum=np.float32(0.5))
    assert type(opt.ema_momentum) is float and type(opt.get_config()["ema_momentum"]) is float
    assert opt.ema_momentum == 0.5


def test_one_cycle_schedule_takes_numpy_step_counts():
    # Audit 5: np.int64 steps (a dataset's cardinality().numpy() times epochs) were refused
    # as "not an integer".
    steps_per_epoch = np.int64(10)  # what tf.data's cardinality().numpy() gives
    schedule = one_cycle_schedule(3 * steps_per_epoch)
    reference = one_cycle_schedule(30)
    assert schedule.get_config() == reference.get_config()
    assert type(schedule.decay_steps) is int and type(schedule.warmup_steps) is int


@pytest.mark.parametrize("beta_2", [0.9999, 0.99999])
def test_float32_rectification_starts_at_step_5_for_a_beta_2_near_one(beta_2):
    # rho_t was rho_inf - 2 t beta_2^t / (1 - beta_2^t) with beta_2 rounded to float32:
    # its error in 1 - beta_2 (1e-4 relative at 0.99999), times rho_inf (2e5), put rho_1
    # far above 4, so the very first steps were rectified adaptive steps (a step of
    # 0.003-0.04 lr instead of the momentum-SGD step lr * m_hat). (The float32 cases of
    # the tests above, at rtol 1e-5, also failed: rho_t was off by 0.03 at 0.999.)
    n = 8
    ours = _keras_steps(RAdam(LR, beta_2=beta_2), n, "float32")
    ref, rectified = _numpy_radam(X0, lambda x: A @ x - B, [LR] * n, beta_2=beta_2)
    assert rectified == [False] * 4 + [True] * (n - 4)
    for k, (got, want) in enumerate(zip(ours, ref)):
        np.testing.assert_allclose(got, want, err_msg=f"step {k + 1}", **TOLERANCES["float32"])


def test_a_beta_2_whose_rho_inf_is_4_gives_momentum_sgd_steps():
    # audit (RAdam): beta_2 = 0.6 makes rho_inf = 2 / (1 - beta_2) - 1 exactly 4, and the
    # first step raised ZeroDivisionError (the rectification's constant divides by
    # rho_inf - 4). rho_t < rho_inf <= 4 at every step, so every step is momentum SGD.
    n = 8
    ours = _keras_steps(RAdam(LR, beta_2=0.6), n, "float32")
    ref, rectified = _numpy_radam(X0, lambda x: A @ x - B, [LR] * n, beta_2=0.6)
    assert not any(rectified)
    for k, (got, want) in enumerate(zip(ours, ref)):
        np.testing.assert_allclose(got, want, err_msg=f"step {k + 1}", **TOLERANCES["float32"])


def test_sparse_gradients_with_repeated_rows_follow_the_published_rule():
    # audit (RAdam): the gradient of an embedding lookup is a tf.IndexedSlices holding one
    # slice per looked-up id; keras.ops.square squared each slice before the repeated ids
    # were summed, so the second moment of a row looked up k times was a sum of squares
    # (up to k times too small) instead of the square of the row's gradient, and the
    # rectified steps of frequent tokens were too large.
    tensorflow_only("tf.IndexedSlices gradients")
    import tensorflow as tf

    rows = np.array([1, 3, 1, 0, 1])  # row 1 is looked up three times, row 2 never
    slices = np.random.default_rng(5).normal(size=(5, 2)).astype("float32")
    dense = np.zeros((4, 2))
    np.add.at(dense, rows, slices.astype("float64"))
    x = keras.Variable(np.zeros((4, 2), "float32"))
    optimizer = RAdam(LR)
    for _ in range(8):
        gradient = tf.IndexedSlices(tf.constant(slices), tf.constant(rows), tf.constant([4, 2]))
        optimizer.apply_gradients([(gradient, x)])
    ref, rectified = _numpy_radam(np.zeros((4, 2)), lambda theta: dense, [LR] * 8)
    assert rectified[-1]
    np.testing.assert_allclose(np.asarray(x), ref[-1], **TOLERANCES["float32"])


def _exact_rectification(beta_2, t):
    """``r_t`` of the published rule in 60-digit decimal arithmetic (None: not rectified)."""
    import decimal
    import fractions

    with decimal.localcontext() as context:
        context.prec = 60
        exact = fractions.Fraction(beta_2)
        b = decimal.Decimal(exact.numerator) / decimal.Decimal(exact.denominator)
        rho_inf = 2 / (1 - b) - 1
        rho_t = rho_inf - 2 * t * b**t / (1 - b**t)
        if rho_t <= 4:
            return None
        return float(((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)).sqrt())


@pytest.mark.parametrize("beta_2", [0.600000001, 0.6000001, 0.601])
def test_a_beta_2_just_above_0_6_rectifies_with_r_t_at_most_1(beta_2):
    # audit (RAdam): for beta_2 just above 0.6, rho_inf - 4 is tiny (5e-9 at 0.600000001)
    # while rho_t - 4 was a difference of float32 numbers near 4 (an ulp is 5e-7): r_t
    # reached 1.07 at 0.6000001 (a step larger than lr), and at 0.600000001 rho_t never
    # rose above 4, so every step stayed momentum SGD. With a constant gradient of 1,
    # m_hat = v_hat = 1 and every step is lr * r_t (rectified) or lr (momentum SGD);
    # resetting the weight to 0 before each step reads the step off exactly.
    lr = 0.125
    x = keras.Variable(np.zeros(1, "float32"))
    optimizer = RAdam(lr, beta_2=beta_2, epsilon=0.0)
    gradient = tensor([1.0], "float32")
    for t in range(1, 61):
        x.assign(np.zeros(1, "float32"))
        optimizer.apply_gradients([(gradient, x)])
        step = -float(np.asarray(x)[0])
        r_t = _exact_rectification(beta_2, t)
        want = lr if r_t is None else lr * r_t
        assert step == pytest.approx(want, rel=2e-5, abs=1e-7), f"step {t} (r_t={r_t})"
        assert step <= lr * (1 + 1e-6), f"step {t}"


def _steps_with_a_constant_gradient(dtype, gradient, n_steps, lr=0.01):
    """The steps of RAdam(lr) on a weight of ``dtype`` reset to 0 before each, in float64."""
    x = keras.Variable(np.zeros(1), dtype=dtype)
    optimizer = RAdam(lr)
    g = tensor([gradient], dtype)
    steps = []
    for _ in range(n_steps):
        x.assign(np.zeros(1))
        optimizer.apply_gradients([(g, x)])
        steps.append(-float(np.asarray(np.asarray(x), np.float64)[0]))
    return steps


@pytest.mark.parametrize("gradient", [1e-4, 300.0])
def test_float16_variables_with_tiny_or_large_gradients_take_the_published_steps(gradient):
    # audit (RAdam): the moments of a float16 variable were float16. A gradient of 1e-4
    # has a square (1e-8) below float16's smallest subnormal, so v stayed 0 and the first
    # rectified step was r_t lr m_hat / epsilon (173 lr at step 5); a gradient of 300 has a
    # square above float16's maximum, so v became inf, then NaN. With a constant
    # gradient m_hat = g and v_hat = g^2: the published steps are lr (momentum SGD,
    # steps 1-4, times g) and lr * r_t (rectified, from step 5).
    lr = 1.0  # keeps the momentum steps lr * g normal float16 numbers
    steps = _steps_with_a_constant_gradient("float16", gradient, 8, lr)
    g = float(np.float16(gradient))
    for t, step in enumerate(steps, start=1):
        r_t = _exact_rectification(0.999, t)
        want = lr * g if r_t is None else lr * r_t
        assert step == pytest.approx(want, rel=2e-3), f"step {t}"


def test_bfloat16_variables_keep_an_accurate_second_moment():
    # audit (RAdam): in bfloat16 moments, v's increment (1 - beta_2) (g^2 - v) fell below
    # half an ulp of v after ~300 steps and v stalled: at step 400 the step was 1.13 lr r_t
    # (1.32 at step 600), with a constant gradient whose steps are exactly lr r_t.
    lr = 0.01
    step = _steps_with_a_constant_gradient("bfloat16", 1.0, 400, lr)[-1]
    assert step == pytest.approx(lr * _exact_rectification(0.999, 400), rel=1e-2)


def test_float16_sparse_gradients_are_summed_without_overflow():
    # audit (RAdam): the slices of an embedding lookup's gradient (tf.IndexedSlices) were
    # summed in the variable's dtype: three slices of 30000 for one row of a float16
    # embedding summed to inf in float16 (the float32 sum, 90000, is fine), and the row
    # became NaN. Steps 1-4 are momentum SGD steps of lr * 90000.
    tensorflow_only("tf.IndexedSlices gradients")
    import tensorflow as tf

    x = keras.Variable(np.zeros((3, 2)), dtype="float16")
    optimizer = RAdam(0.01)
    slices = tf.IndexedSlices(
        tf.constant(np.full((3, 2), 30000.0), tf.float16), tf.constant([1, 1, 1]), tf.constant([3, 2])
    )
    for _ in range(4):
        optimizer.apply_gradients([(slices, x)])
    np.testing.assert_allclose(np.asarray(x, np.float32), [[0, 0], [-3600, -3600], [0, 0]], rtol=1e-3)


@pytest.mark.parametrize("clip", [dict(clipnorm=1.5), dict(global_clipnorm=1.5), dict(clipvalue=1.5)],
                         ids=["clipnorm", "global_clipnorm", "clipvalue"])
def test_a_sparse_gradient_is_clipped_as_the_dense_gradient_it_stands_for(clip):
    # (helper-197) Keras clipped the slices of a tf.IndexedSlices before the slices of
    # repeated ids were summed: row 0 looked up twice with a slice [1, 0] each (a gradient
    # [2, 0], norm 2) passed a clip of 1.5 unclipped, and the first moment was 0.2, not 0.15.
    tensorflow_only("tf.IndexedSlices gradients")
    import tensorflow as tf

    moments = []
    for gradient in (tf.IndexedSlices(tf.constant([[1.0, 0.0], [1.0, 0.0]]), tf.constant([0, 0]), tf.constant([3, 2])),
                     tf.constant([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]])):
        x = keras.Variable(np.zeros((3, 2), "float32"))
        optimizer = RAdam(0.1, **clip)
        optimizer.apply_gradients([(gradient, x)])
        moments.append(keras.ops.convert_to_numpy(optimizer._momentums[0]))
    np.testing.assert_allclose(moments[0], moments[1], rtol=1e-6)
    assert moments[1][0, 0] == pytest.approx(0.15)  # (1 - beta_1) * 1.5


def _fit_weights(strategy, clip, embedding=False):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.integers(0, 10, size=(32, 3)) if embedding else rng.normal(size=(32, 4)).astype("float32")
    y = rng.normal(size=(32, 1)).astype("float32")
    with strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope():
        keras.utils.set_random_seed(1)
        layers = ([keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4), keras.layers.Flatten()] if embedding
                  else [keras.Input((4,)), keras.layers.Dense(8, activation="tanh")])
        model = keras.Sequential(layers + [keras.layers.Dense(1)])
        model.compile(RAdam(0.01, **clip), "mse")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return model.get_weights()


@pytest.mark.parametrize("embedding", [False, True], ids=["dense", "embedding"])
@pytest.mark.parametrize("clip", [dict(clipnorm=0.05), dict(global_clipnorm=0.05), dict(clipvalue=0.002)],
                         ids=["clipnorm", "global_clipnorm", "clipvalue"])
def test_clipping_under_a_mirrored_strategy_takes_the_one_device_steps(clip, embedding):
    # (helper-197) Keras clips each replica's gradient before the replicas' gradients are
    # summed: under two replicas a clip let through up to twice the gradient (clipvalue
    # clipped each half of a value), and a fit under the strategy ended 1e-4 to 3e-4 away
    # from the same fit on one device (1e-10 without clipping).
    from tests.harness import two_cpu_strategy

    strategy = two_cpu_strategy()  # (skips on another backend)
    for got, want in zip(_fit_weights(strategy, clip, embedding), _fit_weights(None, clip, embedding)):
        np.testing.assert_allclose(got, want, atol=1e-7)


def test_gradient_accumulation_under_a_mirrored_strategy_is_a_clear_error():
    # (helper-197) it failed at the first step with TensorFlow's RuntimeError "`merge_call`
    # called while defining a new graph or a tf.function" (keras.optimizers.Adam alike)
    from tests.harness import two_cpu_strategy

    strategy = two_cpu_strategy()
    with pytest.raises(ValueError, match=re.escape("Received: gradient_accumulation_steps=2")):
        _fit_weights(strategy, dict(gradient_accumulation_steps=2))
