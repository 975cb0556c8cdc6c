"""The layer contract every public layer is tested against (DESIGN.md, checks 2-6).

``run_layer_contract(layer_cls, init_kwargs, inputs)`` builds the layer on example
inputs and checks, in order:

* ``config``: ``from_config(get_config())`` rebuilds an identical configuration and
  ``compute_output_shape`` agrees with what a call returns;
* ``constraints``: every ``*_constraint`` argument of the constructor (each given its
  own tagged constraint) constrains at least one weight and every ``*_regularizer``
  argument (tagged too) enters the layer's ``losses``, also in the layer rebuilt from
  its config (an argument accepted and then dropped went unseen: no case passed one);
  an argument that the case's configuration has no weight for must be refused with
  a ``ValueError`` that names it;
* ``gradients``: every trainable weight (and every floating input) receives a finite
  gradient of a random-cotangent loss over all outputs;
* ``saving``: a functional model using the layer saves to ``.keras`` and loads back
  with identical outputs;
* ``jit``: a call compiled with XLA (``tf.function(jit_compile=True)``, ``jax.jit``)
  matches eager (the layer ``config`` built and called, when that check ran);
* ``mixed_precision``: under ``mixed_float16`` and ``mixed_bfloat16`` the weights stay
  float32, outputs and weight gradients are finite;
* ``distributed``: one ``model.fit`` step under ``tf.distribute.MirroredStrategy`` over
  two logical CPU devices updates the weights to finite values. TensorFlow only: on
  another backend one ``model.fit`` step of that backend's trainer runs instead, and
  the test is then skipped with a reason that says so (the other checks have passed).

The checks run on the backend ``KERAS_BACKEND`` selects (``tests/backends.py``).

A layer's own test file states what is particular to it (reference data, masks, bad
input) and calls this once.
"""

import contextlib
import inspect
import json
import zipfile

import numpy as np
import keras
import pytest

from tests.backends import BACKEND, compiled, tensor, tensorflow_only, value_and_grads

ALL_CHECKS = ("config", "constraints", "gradients", "saving", "jit", "mixed_precision", "distributed")


def edit_saved_layer_config(path, layer_name, edit):
    """Rewrites, in the ``.keras`` file ``path``, the config of the model's layer
    ``layer_name`` with ``edit(config)`` (in place): makes what an older version saved."""
    with zipfile.ZipFile(path) as z:
        files = {name: z.read(name) for name in z.namelist()}
    config = json.loads(files["config.json"])
    layer = next(l for l in config["config"]["layers"] if l["config"]["name"] == layer_name)
    edit(layer["config"])
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def _as_structure(inputs):
    """Inputs as given (array, list/tuple or dict) with numpy leaves."""
    return keras.tree.map_structure(np.asarray, inputs)


def _to_tensors(inputs):
    return keras.tree.map_structure(tensor, inputs)


def _symbolic_inputs(inputs):
    def make(x, name=None):
        return keras.Input(shape=x.shape[1:], dtype=str(x.dtype), name=name)

    if isinstance(inputs, dict):  # named after their keys, as Keras expects for dict inputs
        return {key: make(value, name=key) for key, value in inputs.items()}
    return keras.tree.map_structure(make, inputs)


def _flat_outputs(outputs):
    return [keras.ops.convert_to_numpy(o) for o in keras.tree.flatten(outputs)]


def _assert_all_finite(arrays, what):
    for k, a in enumerate(arrays):
        a = np.asarray(a, dtype=np.float64)
        assert np.all(np.isfinite(a)), f"{what} #{k} is not finite: {a}"


def _random_cotangents(outputs, seed=0):
    rng = np.random.default_rng(seed)
    return [
        tensor(rng.standard_normal(o.shape).astype("float32")) for o in keras.tree.flatten(outputs)
    ]


def _is_float(t):
    return "float" in keras.backend.standardize_dtype(t.dtype)


def _loss_and_grads(layer, tensors, call_kwargs, seed=0):
    """Random-cotangent loss over every output; gradients for weights and float inputs."""
    flat_inputs = keras.tree.flatten(tensors)
    float_at = [k for k, t in enumerate(flat_inputs) if _is_float(t)]
    if not layer.built:  # the weights must exist before a JAX gradient is taken
        layer(tensors, **call_kwargs)

    def loss_fn(*float_inputs):
        leaves = list(flat_inputs)
        for k, t in zip(float_at, float_inputs):
            leaves[k] = t
        outputs = layer(keras.tree.pack_sequence_as(tensors, leaves), **call_kwargs)
        cots = _random_cotangents(outputs, seed)
        loss = sum(
            keras.ops.sum(keras.ops.cast(o, "float32") * c)
            for o, c in zip(keras.tree.flatten(outputs), cots)
        )
        return loss, outputs

    (_, outputs), input_grads, weight_grads = value_and_grads(
        loss_fn, [flat_inputs[k] for k in float_at], layer.trainable_weights, has_aux=True
    )
    return outputs, weight_grads, input_grads


def _shape_leaves(shape):
    """A shape, or a nested structure of shapes, as a flat list of tuples."""
    if isinstance(shape, dict):
        return [leaf for v in shape.values() for leaf in _shape_leaves(v)]
    if isinstance(shape, (list, tuple)) and all(d is None or isinstance(d, int) for d in shape):
        return [tuple(shape)]
    return [leaf for s in shape for leaf in _shape_leaves(s)]


def check_config(layer_cls, init_kwargs, inputs, call_kwargs):
    """Returns the layer it built, its input tensors and its eager outputs, for
    ``check_jit`` to compile the same layer and compare with them."""
    layer = layer_cls(**init_kwargs)
    tensors = _to_tensors(inputs)
    outputs = layer(tensors, **call_kwargs)
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config, "from_config(get_config()) changed the config"
    shapes = keras.tree.map_structure(lambda t: tuple(t.shape), tensors)
    expected = _shape_leaves(layer.compute_output_shape(shapes))
    got = [tuple(o.shape) for o in keras.tree.flatten(outputs)]
    assert len(expected) == len(got), f"compute_output_shape gave {expected}, call {got}"
    for e, g in zip(expected, got):
        assert len(e) == len(g) and all(a is None or a == b for a, b in zip(e, g)), (
            f"compute_output_shape gave {e}, call returned {g}"
        )
    return layer, tensors, _flat_outputs(outputs)


@keras.saving.register_keras_serializable(package="keras_capsules_tests")
class TaggedNonNeg(keras.constraints.Constraint):
    """Non-negative weights; ``tag`` names the constructor argument it was given as."""

    def __init__(self, tag):
        self.tag = tag

    def __call__(self, w):
        return keras.ops.maximum(w, keras.ops.zeros_like(w))

    def get_config(self):
        return {"tag": self.tag}


@keras.saving.register_keras_serializable(package="keras_capsules_tests")
class TaggedL2(keras.regularizers.Regularizer):
    """An L2 penalty that logs its ``tag`` (the constructor argument it was given as)
    in ``TaggedL2.calls`` whenever Keras computes it into a layer's ``losses``."""

    calls = []

    def __init__(self, tag):
        self.tag = tag

    def __call__(self, w):
        TaggedL2.calls.append(self.tag)
        return 0.1 * keras.ops.sum(keras.ops.square(w))

    def get_config(self):
        return {"tag": self.tag}


def _weight_option_names(layer_cls, init_kwargs, suffix, tagged, weightless):
    """The constructor's ``*<suffix>`` arguments to check: not given by the case, not
    ``weightless``, and not refused by name (a ``ValueError`` naming the argument is
    how a configuration without its weight may answer)."""
    names = []
    for n in inspect.signature(layer_cls.__init__).parameters:
        if not n.endswith(suffix) or init_kwargs.get(n) is not None or n in weightless:
            continue
        if n == "activity_regularizer":  # Keras' own, on the outputs: no weight's
            continue
        try:
            layer_cls(**init_kwargs, **{n: tagged(n)})
        except ValueError as err:
            assert f"`{n}`" in str(err), f"{n} refused with an error that does not name it: {err}"
            continue
        names.append(n)
    return names


def _tags_in_effect(layer):
    """``(constraint tags on the layer's weights, regularizer tags in its losses)``."""
    constrained = {w.constraint.tag for w in layer.weights if isinstance(getattr(w, "constraint", None), TaggedNonNeg)}
    TaggedL2.calls.clear()
    layer.losses  # computes every weight regularizer (Keras' Layer._get_regularization_losses)
    return constrained, set(TaggedL2.calls)


def check_weight_options(layer_cls, init_kwargs, inputs, call_kwargs, weightless_constraints=()):
    """Every ``*_constraint`` argument constrains a weight and every ``*_regularizer``
    argument adds a loss, also in the layer rebuilt from its config (Keras' optimizer
    applies a weight's constraint, and ``losses`` sums its regularizer)."""
    weightless_regularizers = tuple(n.replace("_constraint", "_regularizer") for n in weightless_constraints)
    constraints = _weight_option_names(layer_cls, init_kwargs, "_constraint", TaggedNonNeg, weightless_constraints)
    regularizers = _weight_option_names(layer_cls, init_kwargs, "_regularizer", TaggedL2, weightless_regularizers)
    if not constraints and not regularizers:
        return
    sym = _symbolic_inputs(inputs)
    layer = layer_cls(**init_kwargs, **{n: TaggedNonNeg(n) for n in constraints},
                      **{n: TaggedL2(n) for n in regularizers})
    layer(sym, **call_kwargs)
    constrained, regularized = _tags_in_effect(layer)
    unused = [n for n in constraints if n not in constrained] + [n for n in regularizers if n not in regularized]
    assert not unused, f"{unused} act on no weight of {layer_cls.__name__}({init_kwargs})"
    clone = layer_cls.from_config(layer.get_config())
    clone(sym, **call_kwargs)
    assert _tags_in_effect(clone) == (constrained, regularized), (
        "constraints or regularizers did not survive get_config/from_config"
    )


def check_gradients(layer_cls, init_kwargs, inputs, call_kwargs):
    layer = layer_cls(**init_kwargs)
    outputs, weight_grads, input_grads = _loss_and_grads(layer, _to_tensors(inputs), call_kwargs)
    _assert_all_finite(_flat_outputs(outputs), "output")
    assert layer.trainable_weights, f"{layer_cls.__name__} has no trainable weights"
    for w, g in zip(layer.trainable_weights, weight_grads):
        assert g is not None, f"weight {w.path} gets no gradient"
        _assert_all_finite([g], f"gradient of weight {w.path}")
    for k, g in enumerate(input_grads):  # None: the input was cut off (e.g. stop_gradient)
        assert g is not None, f"floating input #{k} gets no gradient"
        _assert_all_finite([g], f"gradient of floating input #{k}")


def check_saving(layer_cls, init_kwargs, inputs, call_kwargs, tmp_path, atol, rtol):
    """Returns the ``.keras`` file's path and the model's outputs before saving."""
    sym = _symbolic_inputs(inputs)
    layer = layer_cls(**init_kwargs)
    model = keras.Model(sym, layer(sym, **call_kwargs))
    expected = _flat_outputs(model(_to_tensors(inputs), training=False))
    path = str(tmp_path / f"{layer_cls.__name__}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    got = _flat_outputs(loaded(_to_tensors(inputs), training=False))
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, atol=atol, rtol=rtol, err_msg="after .keras round trip")
    loaded_layer = [lay for lay in loaded.layers if isinstance(lay, layer_cls)]
    assert loaded_layer and loaded_layer[0].get_config() == layer.get_config()
    # get_config() == get_config() holds also when both lost an argument: a regularizer
    # left out of the config is seen in the loaded model's losses (same weights here).
    want = [float(keras.ops.convert_to_numpy(l)) for l in model.losses]
    got = [float(keras.ops.convert_to_numpy(l)) for l in loaded.losses]
    assert len(got) == len(want), f"{len(want)} regularization losses before saving, {len(got)} after"
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg="regularization losses after .keras round trip")
    return path, expected


def check_jit(layer_cls, init_kwargs, inputs, call_kwargs, atol, rtol, built=None):
    """The layer's call compiled with XLA matches its eager call on the same weights.

    ``built`` is ``(layer, tensors, eager outputs)`` from ``check_config``, which called
    the layer eagerly once (and nothing since): compiling that layer saves building and
    calling another one per contract run. Without it, a new layer is built and called.
    """
    if built is None:
        layer = layer_cls(**init_kwargs)
        tensors = _to_tensors(inputs)
        eager = _flat_outputs(layer(tensors, **call_kwargs))
    else:
        layer, tensors, eager = built
    jitted = _flat_outputs(compiled(lambda t: layer(t, **call_kwargs))(tensors))
    for e, g in zip(eager, jitted):
        np.testing.assert_allclose(g, e, atol=atol, rtol=rtol, err_msg="XLA vs eager")


def check_mixed_precision(layer_cls, init_kwargs, inputs, call_kwargs):
    for policy in ("mixed_float16", "mixed_bfloat16"):
        layer = layer_cls(**init_kwargs, dtype=policy)
        outputs, weight_grads, _ = _loss_and_grads(layer, _to_tensors(inputs), call_kwargs)
        for w in layer.weights:
            if "float" in str(w.dtype):  # integer tables (e.g. fixed codes) stay integer
                assert w.dtype == "float32", f"{policy}: weight {w.path} is {w.dtype}, not float32"
        _assert_all_finite(_flat_outputs(outputs), f"{policy} output")
        for w, g in zip(layer.trainable_weights, weight_grads):
            assert g is not None, f"{policy}: weight {w.path} gets no gradient"
            _assert_all_finite([g], f"{policy} gradient of {w.path}")


_STRATEGY = []


def two_cpu_strategy():
    """One ``MirroredStrategy`` over the two logical CPUs, shared by the whole session.

    TensorFlow's collective ops key their instances per process; several strategies
    created one after another in one process collide, so every test uses this one.
    On another backend the calling test is skipped (``tf.distribute`` is TensorFlow's).
    """
    tensorflow_only("tf.distribute.MirroredStrategy over two logical CPU devices")
    import tensorflow as tf

    if not _STRATEGY:
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
        assert len(devices) == 2, "conftest.py must configure two logical CPU devices"
        _STRATEGY.append(tf.distribute.MirroredStrategy(devices))
    return _STRATEGY[0]


def replica_losses_add_up(loss, y_true, y_pred, mask=None, sample_weight=None):
    """The loss of the whole batch on one device, and the sum of the losses that the two
    replicas of a MirroredStrategy compute on their halves (what their gradients add up to)."""
    import tensorflow as tf

    strategy = two_cpu_strategy()

    def compute(y, p, m, w):
        p = tf.identity(p)
        if m is not None:
            p._keras_mask = m  # as a masking layer leaves it on its output
        return loss(y, p, sample_weight=w)

    parts = [tensor(a) if a is not None else None for a in (y_true, y_pred, mask, sample_weight)]
    one = float(compute(*parts))
    half = len(y_pred) // 2

    def shard(context):
        i = context.replica_id_in_sync_group
        return tuple(None if a is None else a[i * half:(i + 1) * half] for a in parts)

    shards = strategy.experimental_distribute_values_from_function(shard)
    per_replica = tf.function(lambda s: strategy.run(compute, args=s))(shards)
    return one, float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))


def check_distributed(layer_cls, init_kwargs, inputs, call_kwargs):
    """The MirroredStrategy step; on another backend, one step of its own trainer, then
    a skip that says the TensorFlow-only part did not run."""
    if BACKEND != "tensorflow":
        _check_fit_step(layer_cls, init_kwargs, inputs, call_kwargs, None)
        pytest.skip(
            f"TensorFlow-only: tf.distribute.MirroredStrategy step (backend is {BACKEND}); "
            "every other check passed, and one model.fit step of this backend's trainer did"
        )
    strategy = two_cpu_strategy()
    assert strategy.num_replicas_in_sync == 2
    _check_fit_step(layer_cls, init_kwargs, inputs, call_kwargs, strategy)


def _check_fit_step(layer_cls, init_kwargs, inputs, call_kwargs, strategy):
    """One ``model.fit`` step (under ``strategy`` if given) changes a weight, to finite values."""
    batch = len(keras.tree.flatten(inputs)[0])
    scope = strategy.scope if strategy is not None else contextlib.nullcontext
    with scope():
        sym = _symbolic_inputs(inputs)
        layer = layer_cls(**init_kwargs)
        outputs = keras.tree.flatten(layer(sym, **call_kwargs))
        model = keras.Model(sym, outputs)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss=["mse"] * len(outputs))
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    eager_out = _flat_outputs(model(_to_tensors(inputs)))
    rng = np.random.default_rng(1)
    targets = tuple(rng.standard_normal(o.shape).astype("float32") for o in eager_out)
    x = inputs if not isinstance(inputs, list) else tuple(inputs)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with scope():  # the loss built from these outputs: fit traces the model once, in its step
            model.compute_loss(y=_to_tensors(list(targets)), y_pred=[tensor(o) for o in eager_out])
        # repeated, for one step: fit makes one iterator (after the last batch of a
        # finite dataset it makes another one, for an epoch that never comes)
        dataset = tf.data.Dataset.from_tensor_slices((x, targets)).batch(batch).repeat()
        data = dict(x=dataset, steps_per_epoch=1)
    else:
        data = dict(x=x, y=targets, batch_size=batch)
    history = model.fit(**data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]), history.history
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    _assert_all_finite(after, "weight after a distributed step")
    assert any(not np.array_equal(a, b) for a, b in zip(before, after)), (
        "a training step changed no weight"
    )


def run_layer_contract(
    layer_cls,
    init_kwargs,
    inputs,
    *,
    tmp_path,
    call_kwargs=None,
    checks=ALL_CHECKS,
    atol=1e-5,
    rtol=1e-5,
    weightless_constraints=(),
):
    """Runs the shared layer contract on ``layer_cls(**init_kwargs)``.

    Args:
        layer_cls: the layer class (must be registered serializable).
        init_kwargs: constructor arguments (without ``dtype``: the harness sets it).
        inputs: example inputs, a numpy array or a list/tuple/dict of them, with a
            batch dimension divisible by two (for the two-replica step).
        tmp_path: a directory for the ``.keras`` file (pytest's ``tmp_path``).
        call_kwargs: static keyword arguments for ``call`` (not tensors).
        checks: the subset of ``ALL_CHECKS`` to run; every layer runs them all
            unless its test says why not.
        atol, rtol: tolerances of the save/load and XLA comparisons.
        weightless_constraints: constructor ``*_constraint`` arguments whose weight
            these inputs do not create (e.g. ``G1``'s ``kernel_constraint`` without
            ``x_top``); the ``constraints`` check leaves them (and the matching
            ``*_regularizer``) out.

    Returns:
        ``(path, outputs)``: the ``.keras`` file the ``saving`` check wrote and its
        model's (flat, numpy) outputs on ``inputs`` before saving, or ``None`` without
        that check (``tests/portability.py`` hands them to another backend).
    """
    unknown = set(checks) - set(ALL_CHECKS)
    if unknown:
        raise ValueError(f"Unknown checks {sorted(unknown)}; choose from {ALL_CHECKS}")
    inputs = _as_structure(inputs)
    call_kwargs = dict(call_kwargs or {})
    built = None  # check_config's layer, inputs and eager outputs, compiled by check_jit
    if "config" in checks:
        built = check_config(layer_cls, init_kwargs, inputs, call_kwargs)
    if "constraints" in checks:
        check_weight_options(layer_cls, init_kwargs, inputs, call_kwargs, weightless_constraints)
    if "gradients" in checks:
        check_gradients(layer_cls, init_kwargs, inputs, call_kwargs)
    saved = None
    if "saving" in checks:
        saved = check_saving(layer_cls, init_kwargs, inputs, call_kwargs, tmp_path, atol, rtol)
    not_run = []  # checks this backend cannot run (no XLA on torch): the others still run
    if "jit" in checks:
        try:
            check_jit(layer_cls, init_kwargs, inputs, call_kwargs, atol, rtol, built)
        except pytest.skip.Exception as skipped:
            not_run.append(f"jit ({skipped})")
    if "mixed_precision" in checks:
        check_mixed_precision(layer_cls, init_kwargs, inputs, call_kwargs)
    if "distributed" in checks:
        try:
            check_distributed(layer_cls, init_kwargs, inputs, call_kwargs)
        except pytest.skip.Exception as skipped:
            not_run.append(f"distributed ({skipped})")
    if not_run:
        pytest.skip(f"not run on {BACKEND}: {'; '.join(not_run)}; every other check passed")
    return saved
