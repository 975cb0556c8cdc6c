"""Optimizers and learning-rate schedules used by the paper applications.

* ``RAdam``: rectified Adam (Liu et al. 2019).
* ``one_cycle_schedule``: linear warm-up then cosine decay, as in Heinsen 2019.
"""

import fractions
import math
import numbers

import keras
from keras import ops

from keras_capsules._validation import boolean, fraction, positive_float, positive_int, rate, several_replicas
from keras_capsules.ops import minimum


@keras.saving.register_keras_serializable(package="keras_capsules")
class RAdam(keras.optimizers.Optimizer):
    """Rectified Adam: Adam whose adaptive step is switched on only once it is reliable.

    Early in training the second-moment estimate ``v`` averages only a handful of
    squared gradients, so the adaptive learning rate ``1 / sqrt(v_hat)`` has a large
    (or, for the first steps, unbounded) variance. RAdam tracks the length of the
    approximated simple moving average behind ``v``,

        rho_inf = 2 / (1 - beta_2) - 1
        rho_t = rho_inf - 2 t beta_2^t / (1 - beta_2^t)

    and, at step ``t`` (counted from 1), with ``m_hat = m_t / (1 - beta_1^t)`` and
    ``v_hat = v_t / (1 - beta_2^t)``:

    * if ``rho_t > 4`` the variance of the adaptive rate is tractable and the step is
      rescaled by the rectification term

          r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))

      giving ``theta -= lr * r_t * m_hat / (sqrt(v_hat) + epsilon)``;
    * otherwise the update is SGD with momentum, ``theta -= lr * m_hat``.

    Threshold: ``rho_t > 4`` is the condition of the paper's Algorithm 2 (the variance
    of the adaptive rate exists only for more than four degrees of freedom). With the
    default ``beta_2 = 0.999``, ``rho_t`` is about ``t``, so steps 1 to 4 are
    momentum-SGD steps and the rectified adaptive step starts at step 5. (The
    authors' released code uses ``rho_t >= 5`` instead, which starts one step later.)
    ``rho_t`` and the bias corrections are computed from ``log(beta)`` without
    cancellation, so this holds in float32 for any ``beta_2`` (also 0.9999 or 0.99999).
    With ``beta_2 <= 0.6`` (``rho_inf <= 4``) no step is ever rectified: RAdam is then
    SGD with momentum throughout. Just above 0.6, where ``rho_t`` and ``rho_inf`` both lie
    within a float32 rounding of 4, ``rho_t - 4`` is computed from ``rho_inf - rho_t``
    instead, so ``r_t`` stays in ``(0, 1]`` and the rectified steps start when they should.

    The step is computed in float32 (float64 for float64 variables), and the moments
    ``m`` and ``v`` of float16 and bfloat16 variables are float32 slots: in half
    precision the squared gradients underflow or overflow and ``v`` stalls.

    Sparse gradients (the ``tf.IndexedSlices`` of an embedding lookup) are applied as
    the dense gradient they stand for, the slices of repeated ids summed, so every
    row's moments are those of its full gradient (as for any dense variable).

    Decoupled weight decay (``weight_decay=...``), gradient clipping, EMA, gradient
    accumulation and loss scaling come from the base optimizer, and ``learning_rate``
    may be a float or a ``keras.optimizers.schedules.LearningRateSchedule``. Unlike
    Keras' own optimizers, the clipping applies to the gradient of the global batch
    under a ``tf.distribute`` strategy of several replicas (Keras clips each replica's
    share), and to a sparse gradient as the dense one it stands for. Gradient
    accumulation under a strategy of several replicas fails in Keras (a TensorFlow
    ``RuntimeError`` at the first step) and is refused there with a ``ValueError``.

    Args:
        learning_rate: a float or a learning-rate schedule. Default 0.001.
        beta_1: decay rate of the first-moment estimate. Default 0.9.
        beta_2: decay rate of the second-moment estimate. Default 0.999.
        epsilon: added to ``sqrt(v_hat)`` in the adaptive step. Default 1e-8.
        weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
            ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps,
            name: as for every ``keras.optimizers.Optimizer``, checked where Keras does
            not: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` and
            ``loss_scale_factor`` are None or a finite number > 0 (Keras clipped
            nothing, silently, for a NaN, negative or zero clip, and trained NaN weights
            for an infinite norm), ``ema_momentum`` with ``use_ema`` a number in
            ``[0, 1]`` (NaN too was accepted). A bad value raises a ``ValueError``
            naming it.

    Example:

    ```python
    schedule = keras_capsules.optimizers.one_cycle_schedule(total_steps=10_000)
    model.compile(optimizer=keras_capsules.optimizers.RAdam(schedule), loss=...)
    ```

    Reference:
        L. Liu, H. Jiang, P. He, W. Chen, X. Liu, J. Gao, J. Han, "On the Variance of
        the Adaptive Learning Rate and Beyond", ICLR 2020, arXiv:1908.03265.
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        weight_decay=None,
        clipnorm=None,
        clipvalue=None,
        global_clipnorm=None,
        use_ema=False,
        ema_momentum=0.99,
        ema_overwrite_frequency=None,
        loss_scale_factor=None,
        gradient_accumulation_steps=None,
        name="radam",
        **kwargs,
    ):
        # numpy scalars (np.float32 from a config or a tuner) are numbers too.
        beta_1, beta_2 = rate("beta_1", beta_1), rate("beta_2", beta_2)
        # A NaN epsilon was accepted and turned every adaptive step into NaN.
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0 <= epsilon < math.inf:
            raise ValueError(f"`epsilon` must be a finite non-negative number. Received: epsilon={epsilon!r}")
        # A NaN or infinite weight decay turned every weight into NaN at the first step.
        if weight_decay is not None and (
            isinstance(weight_decay, bool)
            or not isinstance(weight_decay, numbers.Real)
            or not 0 <= weight_decay < math.inf
        ):
            raise ValueError(
                "`weight_decay` must be None or a finite non-negative number. "
                f"Received: weight_decay={weight_decay!r}"
            )
        if isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, bool) \
                and not 0 <= learning_rate < math.inf:
            raise ValueError(
                "`learning_rate` must be a finite non-negative number or a schedule. "
                f"Received: learning_rate={learning_rate!r}"
            )
        if isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, bool):
            learning_rate = float(learning_rate)  # Keras refuses an np.float32 rate
        # Keras checks none of these. A NaN, negative or zero clip clipped nothing, silently;
        # an infinite clipnorm or global_clipnorm made every weight NaN at the first step,
        # as did a loss_scale_factor of 0 (the gradients are divided by it).
        clipnorm, clipvalue, global_clipnorm, loss_scale_factor = (
            None if value is None else positive_float(arg, value)
            for arg, value in (("clipnorm", clipnorm), ("clipvalue", clipvalue),
                               ("global_clipnorm", global_clipnorm), ("loss_scale_factor", loss_scale_factor))
        )
        # Keras takes any truthy use_ema: "False" averaged the weights, and fit ended on the
        # average (helper-180: a regression's MSE 5.26 against 2.03 with use_ema=False)
        use_ema = boolean("use_ema", use_ema)
        # Keras took True (overwrite at every step) and 0 (never), and refused np.int64(5)
        ema_overwrite_frequency = positive_int("ema_overwrite_frequency", ema_overwrite_frequency, allow_none=True)
        # (Keras refuses an ema_momentum outside [0, 1], but not NaN: an average that
        # kept the first weights)
        if use_ema:
            ema_momentum = fraction("ema_momentum", ema_momentum)
        # Keras refuses 1 and negative counts but accepted 0 (silently: no accumulation) and
        # 2.5 (a TypeError at the first step).
        if gradient_accumulation_steps is not None:
            if isinstance(gradient_accumulation_steps, bool) \
                    or not isinstance(gradient_accumulation_steps, numbers.Integral) \
                    or gradient_accumulation_steps < 2:
                raise ValueError(
                    "`gradient_accumulation_steps` must be None or an integer of at least 2. "
                    f"Received: gradient_accumulation_steps={gradient_accumulation_steps!r}"
                )
            gradient_accumulation_steps = int(gradient_accumulation_steps)
        super().__init__(
            learning_rate=learning_rate,
            name=name,
            weight_decay=weight_decay,
            clipnorm=clipnorm,
            clipvalue=clipvalue,
            global_clipnorm=global_clipnorm,
            use_ema=use_ema,
            ema_momentum=ema_momentum,
            ema_overwrite_frequency=ema_overwrite_frequency,
            loss_scale_factor=loss_scale_factor,
            gradient_accumulation_steps=gradient_accumulation_steps,
            **kwargs,
        )
        self.beta_1 = beta_1  # (Python floats: rate returns them)
        self.beta_2 = beta_2
        self.epsilon = float(epsilon)

    def build(self, var_list):
        """Creates the first- and second-moment slots of every variable."""
        if self.built:
            return
        super().build(var_list)
        # As add_optimizer_variables(var_list, ["momentum", "velocity"]) (same names,
        # same order), but the slots of float16/bfloat16 variables are float32: in
        # float16 the squared gradients of v underflowed to 0 below ~2.4e-4 (steps of
        # ~lr * |g| / epsilon, hundreds of times lr) and overflowed above 256 (v = inf,
        # then NaN); in bfloat16 the increments (1 - beta_2) (g^2 - v) fell below half
        # an ulp of v after a few hundred steps, so v stalled well below E[g^2].
        self._momentums, self._velocities = [], []
        for variable in var_list:
            for slots, slot in ((self._momentums, "momentum"), (self._velocities, "velocity")):
                if self._overwrite_variable_with_gradient(variable):
                    slots.append(None)
                elif _step_dtype(variable.dtype) == variable.dtype:
                    slots.append(self.add_variable_from_reference(variable, name=slot))
                else:
                    name = (
                        variable.path.replace("/", "_")
                        if hasattr(variable, "path")
                        else str(variable.name).replace("/", "_").replace(":", "_")
                    )
                    slots.append(
                        self.add_variable(
                            shape=variable.shape,
                            dtype=_step_dtype(variable.dtype),
                            name=f"{name}_{slot}",
                            layout=getattr(variable, "_layout", None),
                        )
                    )

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        # The step is computed in float32 (float64 for float64 variables), and the
        # moments are kept in it (see build): in float16 or bfloat16, 1 - beta_2^t and
        # rho_t cancel to nonsense (the rectified step never started) and epsilon
        # rounds to 0 (a zero gradient gave 0 / 0).
        compute_dtype = _step_dtype(dtype)
        lr = ops.cast(learning_rate, compute_dtype)
        t = ops.cast(self.iterations + 1, compute_dtype)
        beta_1, beta_2 = self.beta_1, self.beta_2

        gradient = ops.cast(gradient, compute_dtype)
        if hasattr(gradient, "indices"):
            # A tf.IndexedSlices (an embedding lookup's gradient) holds one slice per
            # looked-up id: ops.square squared each slice before repeated ids were
            # summed (v got a sum of squares). Adding it to zeros sums them first, in
            # the step's dtype (a float16 sum of repeated slices overflowed to inf).
            gradient = ops.add(ops.zeros(variable.shape, compute_dtype), gradient)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), _like(1.0 - beta_1, gradient)))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), _like(1.0 - beta_2, gradient)))
        m_hat = ops.divide(ops.cast(m, compute_dtype), _one_minus_power(beta_1, t))

        # Length of the approximated simple moving average (rho_1 = 1 for any beta_2).
        if _rho_inf_minus_4(beta_2) <= 0.0:
            # rho_t < rho_inf <= 4 at every step (beta_2 <= 0.6): never rectified (and
            # the constant of r_t below would divide by rho_inf - 4 = 0 at beta_2 = 0.6).
            self.assign_sub(variable, ops.cast(ops.multiply(lr, m_hat), dtype))
            return
        rectify, r_t = _rectification(beta_2, t)
        v_hat = ops.divide(ops.cast(v, compute_dtype), _one_minus_power(beta_2, t))
        denom = ops.sqrt(v_hat) + _like(self.epsilon, v_hat)
        # epsilon=0 with a gradient that has been zero so far (v_hat = m_hat = 0): a zero
        # step, not 0 / 0 = NaN.
        adaptive = r_t * m_hat / ops.where(denom > 0, denom, ops.ones_like(denom))
        step = ops.where(rectify, adaptive, m_hat)
        self.assign_sub(variable, ops.cast(ops.multiply(lr, step), dtype))

    def apply(self, grads, trainable_variables=None):
        # Keras' accumulation runs its update in a cond, where a strategy of several
        # replicas cannot all-reduce the gradients: the first step failed with TensorFlow's
        # RuntimeError "`merge_call` called while defining a new graph or a tf.function"
        # (keras.optimizers.Adam alike).
        if self.gradient_accumulation_steps and several_replicas() is not None:
            raise ValueError(
                "`gradient_accumulation_steps` cannot be used under a tf.distribute strategy of several "
                "replicas (Keras updates inside a conditional, where the gradients cannot be all-reduced); "
                "scale the global batch instead. Received: "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}"
            )
        return super().apply(grads, trainable_variables)

    def _clip_gradients(self, grads):
        """Keras' clipping (``clipnorm``, ``global_clipnorm``, ``clipvalue``) of the gradient
        of the global batch, also for sparse gradients and under a ``tf.distribute``
        strategy of several replicas.

        * A sparse gradient (``tf.IndexedSlices``) is clipped as the dense gradient it
          stands for (as it is applied, see the class docstring): Keras clipped its slices
          before the slices of repeated ids were summed, so an embedding row looked up
          twice with a slice of norm 1 each (a gradient of norm 2) passed a ``clipnorm`` of
          1.5 unclipped, and a ``clipvalue`` clipped each slice, not the sum.
        * Keras clips each replica's gradient before the replicas' gradients are summed,
          so under two replicas a ``global_clipnorm`` of 1 let through a gradient of norm
          up to 2 (and a ``clipvalue`` clipped each half of a value, not the value):
          training under a strategy did not take the one-device steps. There the
          replicas' gradients are summed first and clipped as on one device, and each
          replica passes on an equal share of the clipped sum (which the update sums
          again).
        """
        if not (self.clipnorm or self.global_clipnorm or self.clipvalue):
            return grads
        if keras.backend.backend() == "tensorflow":
            grads = [g if g is None or not hasattr(g, "indices") else _dense(g) for g in grads]
        context = several_replicas()
        present = [i for i, g in enumerate(grads) if g is not None]
        if context is None or not present:
            return super()._clip_gradients(grads)
        import tensorflow as tf

        total = context.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
        share = 1.0 / context.num_replicas_in_sync
        clipped = list(grads)
        for i, g in zip(present, super()._clip_gradients(total)):
            clipped[i] = g * ops.cast(share, g.dtype)
        return clipped

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
        return config


def _dense(gradient):
    """The dense gradient a sparse one (a ``tf.IndexedSlices``, TensorFlow's only) stands
    for, the slices of repeated ids summed, in the step's dtype (a float16 sum of repeated
    slices overflowed, see ``update_step``)."""
    import tensorflow as tf

    work = _step_dtype(gradient.dtype)
    return tf.convert_to_tensor(
        tf.IndexedSlices(tf.cast(gradient.values, work), gradient.indices, gradient.dense_shape)
    )


def _step_dtype(dtype):
    """The dtype of the moments and of the step's math for variables of ``dtype``."""
    return "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"


# rho_t and the bias corrections are computed from c = -log(beta) (a Python float64),
# never from beta rounded to the step's dtype: in float32, 1 - beta_2 of beta_2 = 0.9999
# (0.99999) is off by 2e-4 (1e-3) relative, which moved rho_t = rho_inf - 2 t beta_2^t /
# (1 - beta_2^t), a difference of two numbers near rho_inf = 2e4 (2e5), by +2 (+270):
# the first steps were rectified adaptive steps instead of momentum SGD.
_SERIES_BELOW = 0.1


def _like(value, tensor):
    """The Python float ``value`` as a tensor of ``tensor``'s dtype.

    Keras' torch backend turns a Python float operand into a float32 tensor, so
    ``float64_tensor * 0.1`` is a product with 0.1 rounded to float32 there (a float64
    step's first moment came out 1.5e-8 off, relative); TensorFlow and JAX keep the
    Python float exact.
    """
    return ops.convert_to_tensor(value, dtype=keras.backend.standardize_dtype(tensor.dtype))


def _one_minus_power(beta, t):
    """``1 - beta**t`` without cancellation (beta a Python float in [0, 1))."""
    if beta == 0.0:
        return ops.ones_like(t)
    return -ops.expm1(t * _like(math.log(beta), t))


def _g(x):
    """``1/x - 1/(exp(x) - 1)`` for x > 0 (a Python float or a tensor); 1/2 at 0.

    Below ``_SERIES_BELOW`` both terms are about 1/x and cancel, so the Bernoulli
    series is used there (its next term, x^9 / 47900160, is below float64 rounding).
    """
    def series(z):
        z2 = z * z
        return 0.5 - z / 12.0 + z * z2 * (1.0 / 720.0 - z2 * (1.0 / 30240.0 - z2 / 1209600.0))

    if isinstance(x, float):
        return series(x) if x < _SERIES_BELOW else 1.0 / x - 1.0 / math.expm1(x)
    small = x < _SERIES_BELOW
    x_small = ops.where(small, x, ops.zeros_like(x))
    x_large = ops.where(small, ops.ones_like(x), x)
    return ops.where(small, series(x_small), 1.0 / x_large - 1.0 / ops.expm1(x_large))


def _rho_inf_minus_4(beta_2):
    """``rho_inf - 4 = (5 beta_2 - 3) / (1 - beta_2)``, from the exact value of beta_2.

    Rounded once: ``2 / (1 - beta_2) - 5`` in float64 loses all digits for a beta_2
    within ~1e-16 of 0.6.
    """
    b = fractions.Fraction(beta_2)
    return float((5 * b - 3) / (1 - b))


#: Below this ``rho_inf - 4`` (beta_2 < 7/9) ``rho_t - 4`` is computed from the gap
#: ``rho_inf - rho_t`` (see :func:`_rectification`).
_SMALL_GAP = 4.0


def _rectification(beta_2, t):
    """``(rho_t > 4, r_t)`` at step ``t`` (a float32 or float64 tensor), for ``rho_inf > 4``.

    ``r_t`` is written with ``x = rho_t - 4`` and ``gap = rho_inf - 4`` as
    ``sqrt(x (x + 2) (gap + 4) / (gap (gap + 2) (x + 4)))``; it lies in ``(0, 1]``
    (``(rho - 4)(rho - 2) / rho`` increases for ``rho > 4`` and ``rho_t < rho_inf``) and
    is clipped there against rounding. ``x`` must be accurate *relative to* ``gap``:

    * for ``gap >= _SMALL_GAP`` it is ``_rho(beta_2, t) - 4`` (accurate to a few ulps of
      ``rho_t``, which also keeps the step-4/step-5 threshold exact for beta_2 near 1);
    * for a small gap (beta_2 just above 0.6, where ``rho_t`` and ``rho_inf`` both sit
      near 4) an ulp of ``rho_t`` in float32 (5e-7) dwarfs the gap (5e-9 at beta_2 =
      0.600000001): ``rho_t - 4`` from ``_rho`` put ``r_t`` above 1 (1.07 at 0.6000001)
      or never above 0 (at 0.600000001: no step was ever rectified). There
      ``x = gap - 2 t / expm1(t c)``, ``c = -log(beta_2)``: both terms carry a small
      relative error, so ``x`` is accurate relative to ``gap``.
    """
    gap = _rho_inf_minus_4(beta_2)
    if gap < _SMALL_GAP:
        # rho_inf - rho_t = 2 t beta_2^t / (1 - beta_2^t) = 2 t / expm1(t c); t c >= c > 0.25
        # here, and expm1 overflowing to inf for large t gives the limit 0.
        x = _like(gap, t) - 2.0 * t / ops.expm1(t * _like(-math.log(beta_2), t))
    else:
        x = _rho(beta_2, t) - 4.0
    rectify = x > 0.0
    # Both branches of the caller's where() are evaluated: no NaN from the unused one.
    x = ops.where(rectify, x, ops.ones_like(x))
    constant = _like((gap + 4.0) / (gap * (gap + 2.0)), x)
    r_t = ops.sqrt(x * (x + 2.0) * constant / (x + 4.0))
    return rectify, minimum(r_t, 1.0)


def _rho(beta_2, t):
    """``rho_t = rho_inf - 2 t beta_2^t / (1 - beta_2^t)``, accurate in float32.

    With ``c = -log(beta_2)``, ``rho_inf = 2 / expm1(c) + 1`` and the subtracted term is
    ``2 t / expm1(t c)``; writing ``1 / expm1(x) = 1 / x - g(x)`` the two 1/c terms cancel
    exactly, leaving ``rho_t = 1 - 2 g(c) + 2 t g(t c)``.
    """
    if beta_2 == 0.0:  # rho_inf = 1: never rectified
        return ops.ones_like(t)
    c = -math.log(beta_2)
    return _like(1.0 - 2.0 * _g(c), t) + 2.0 * t * _g(t * _like(c, t))


def one_cycle_schedule(total_steps, min_lr=1e-5, max_lr=5e-4, warmup_fraction=0.1):
    """The learning-rate regime of Heinsen 2019: linear warm-up, then cosine decay.

    The rate rises linearly from ``min_lr`` (step 0) to ``max_lr`` over the first
    ``warmup_fraction`` of ``total_steps``, then falls back to ``min_lr`` (at step
    ``total_steps``) along a half cosine, and stays there. With ``warmup_fraction=0``
    there is no warm-up: the rate starts at ``max_lr``. It is expressed exactly by
    ``keras.optimizers.schedules.CosineDecay`` with ``initial_learning_rate=min_lr``,
    ``warmup_target=max_lr``, ``warmup_steps=round(warmup_fraction * total_steps)``,
    ``decay_steps=total_steps - warmup_steps`` and ``alpha=min_lr / max_lr``, so it
    serializes like any built-in schedule.

    Args:
        total_steps: number of optimizer steps of the whole run (epochs x batches).
        min_lr: rate at the start (after a warm-up of at least one step) and at the
            end. Default 1e-5.
        max_lr: peak rate, reached at the end of the warm-up. Default 5e-4.
        warmup_fraction: fraction of the steps spent warming up, in [0, 1). Default 0.1.

    Returns:
        A ``keras.optimizers.schedules.CosineDecay``.
    """
    # numbers.Integral: step counts often come from numpy (np.int64 of a dataset's cardinality).
    if isinstance(total_steps, bool) or not isinstance(total_steps, numbers.Integral) or total_steps < 2:
        raise ValueError(
            f"`total_steps` must be an integer >= 2. Received: total_steps={total_steps!r}"
        )
    total_steps = int(total_steps)
    for arg, value in (("min_lr", min_lr), ("max_lr", max_lr)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):  # "1e-4" was a TypeError
            raise ValueError(f"`{arg}` must be a number. Received: {arg}={value!r}")
    if not 0 < min_lr <= max_lr < math.inf:
        raise ValueError(
            f"Expected 0 < min_lr <= max_lr, both finite. Received: min_lr={min_lr!r}, max_lr={max_lr!r}"
        )
    warmup_fraction = rate("warmup_fraction", warmup_fraction)
    warmup_steps = int(round(warmup_fraction * total_steps))
    warmup_steps = min(warmup_steps, total_steps - 1)
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=float(min_lr),
        decay_steps=total_steps - warmup_steps,
        alpha=float(min_lr) / float(max_lr),
        warmup_target=float(max_lr),
        warmup_steps=warmup_steps,
        name="one_cycle",
    )


__all__ = ["RAdam", "one_cycle_schedule"]
