"""A compact check that the library runs on the backend ``KERAS_BACKEND`` selects.

``python -m tests.portability OUT_DIR`` (run from the repository root, e.g. with
``KERAS_BACKEND=jax`` or ``KERAS_BACKEND=torch``) checks, for every public layer (the Recurrent Ladder family
included), the contract checks that do not need TensorFlow (config, finite gradients,
``.keras`` round trip, XLA except on torch; ``tests/harness.py``), and saves into ``OUT_DIR``:

* ``<Layer>.keras`` with ``<Layer>.npz``: a functional model using the layer, its
  inputs and its outputs, for another backend to load and compare;
* ``losses.npz``: every loss's value and gradient on fixed predictions;
* ``radam.npz``: RAdam's trajectory on a small quadratic;
* ``float64.npz``: float64 layers' outputs from fixed weights (``float64_outputs``);
* ``report.json``: ``{check name: "ok" or the error}``.

It exits with status 1 when a check failed. ``tests/test_backend_portability.py``
runs it in a subprocess on JAX (and on torch where installed) and compares what it saved with the test process's
own backend (TensorFlow in the default test run).
"""

import json
import os
import pathlib
import sys
import time
import traceback

import keras_capsules  # noqa: F401  (before keras: see keras_capsules/__init__.py)
import keras
import numpy as np

from keras_capsules import layers, losses
from keras_capsules.layers import level_spec
from keras_capsules.optimizers import RAdam

B = 2  # the batch of every example input


def _normal(rng, *shape):
    return rng.standard_normal((B, *shape)).astype("float32")


def _em_inputs(rng):
    a = _normal(rng, 5)
    a[1, -2:] = -np.inf  # padding by -inf scores takes part
    return [a, _normal(rng, 5, 2, 3)]


def _ids(rng):
    ids = rng.integers(1, 30, size=(B, 5)).astype("int32")
    ids[1, 3:] = 0  # padding (mask_zero)
    return ids


#: name -> (init kwargs, inputs from a numpy Generator, call kwargs, contract checks)
CASES = {
    "CapsuleLength": ({}, lambda rng: _normal(rng, 3, 5), {}, ("config", "saving", "jit")),
    "CompositionalEmbedding": (
        dict(input_dim=30, output_dim=6, num_codebooks=3, mask_zero=True), _ids, {}, None
    ),
    "DynamicRouting": (dict(n_out=3, d_out=4), lambda rng: _normal(rng, 5, 6), {}, None),
    "KMeansRouting": (dict(n_out=3, d_out=4), lambda rng: _normal(rng, 5, 6), {}, None),
    "EMRouting": (dict(n_out=3, d_out=2, bias_initializer="random_normal"), _em_inputs, {}, None),
    "ControlUnit": (
        dict(max_steps=3), lambda rng: [_normal(rng, 3), _normal(rng, 4), _normal(rng, 5, 4)],
        {"step": 1}, None,
    ),
    "ReadUnit": (
        dict(activation="elu"), lambda rng: [_normal(rng, 4), _normal(rng, 6, 3), _normal(rng, 4)],
        {}, None,
    ),
    "WriteUnit": (
        dict(self_attention=True, memory_gate=True),
        lambda rng: [_normal(rng, 3), _normal(rng, 4), _normal(rng, 4), _normal(rng, 3, 4),
                     _normal(rng, 3, 4)],
        {}, None,
    ),
    "MACCell": (
        dict(max_steps=2, self_attention=True, memory_gate=True),
        lambda rng: [_normal(rng, 4, 4), _normal(rng, 3), _normal(rng, 5, 6), _normal(rng, 4),
                     _normal(rng, 4), _normal(rng, 2, 4), _normal(rng, 2, 4)],
        {"step": 1}, None,
    ),
    "MACNetwork": (
        dict(max_steps=2), lambda rng: [_normal(rng, 4, 4), _normal(rng, 3), _normal(rng, 5, 6)],
        {}, None,
    ),
    # the Recurrent Ladder family
    "G1": (dict(bias_initializer="random_normal"), lambda rng: [_normal(rng, 3), _normal(rng, 4)], {}, None),
    "ConvG1": (dict(upsample=2), lambda rng: [_normal(rng, 2, 2, 3), _normal(rng, 4, 4, 2)], {}, None),
    "ConvG2": (dict(filters=3, kernel_size=1), lambda rng: [_normal(rng, 3), _normal(rng, 4, 4, 2)], {}, None),
    "ConvG3": (
        dict(upsample=2, upsample_mode="transpose"),
        lambda rng: [_normal(rng, 2, 2, 2), _normal(rng, 4, 4, 2)], {}, None,
    ),
    "GatedEncoderCell": (dict(units=3), lambda rng: [_normal(rng, 5), _normal(rng, 3), _normal(rng, 3)], {}, None),
    "LSTMEncoderCell": (
        dict(units=3), lambda rng: [_normal(rng, 5), _normal(rng, 3), _normal(rng, 3), _normal(rng, 3)], {}, None,
    ),
    "ConvLSTMEncoderCell": (
        dict(filters=2),
        lambda rng: [_normal(rng, 3, 3, 1), _normal(rng, 3, 3, 2), _normal(rng, 3, 3, 2), _normal(rng, 3, 3, 2)],
        {}, None,
    ),
    "ConvEncoderCell": (
        dict(filters=2, normalization="instance"), lambda rng: [_normal(rng, 3, 3, 1), _normal(rng, 3, 3, 2)],
        {}, None,
    ),
    "GatedConvEncoderCell": (
        dict(filters=2, normalization="instance"), lambda rng: [_normal(rng, 3, 3, 1), _normal(rng, 3, 3, 2)],
        {}, None,
    ),
    "RLadder": (
        dict(levels=[level_spec("gated", 3), level_spec("lstm", 2)], normalization="layer"),
        lambda rng: _normal(rng, 2, 4), {}, None,
    ),
    "RTagger": (
        dict(n_groups=2, levels=[level_spec("gated", 3)], n_iters=2, mask_update="posterior"),
        lambda rng: rng.uniform(size=(B, 4)).astype("float32"), {}, None,
    ),
}
CONTRACT_CHECKS = ("config", "gradients", "saving", "jit")

LABELS = np.array([0, 2, 1, 2])
SCORES = np.array([[0.9, 0.2, 0.1], [0.3, 0.4, 0.8], [0.5, 0.5, 0.05], [0.0, 0.1, 0.99]], "float32")
_MIXTURE = np.random.default_rng(0)
PIXELS = _MIXTURE.uniform(size=(B, 2, 3, 3, 1)).astype("float32")  # [b, T, H, W, C]
MEANS_AND_LOGITS = _MIXTURE.normal(size=(B, 2, 3, 3, 3, 2)).astype("float32")  # [b, T, K, H, W, C + 1]

#: name -> (loss, y_true, y_pred); the gradient is taken with respect to y_pred
LOSSES = {
    "MarginLoss": (lambda: losses.MarginLoss(), LABELS, SCORES),
    "CapsuleLoss": (lambda: losses.CapsuleLoss(terms=("margin", "focal", "cross")), LABELS, SCORES),
    "MixtureNLL": (
        lambda: losses.MixtureNLL(sigma=0.5, group_axis=2, from_logits=True), PIXELS, MEANS_AND_LOGITS
    ),
}


def public_layers():
    """Names of the public layers this check covers: all of them."""
    return sorted(name for name in layers.__all__ if isinstance(getattr(layers, name), type))


def case_inputs(name):
    return CASES[name][1](np.random.default_rng(0))


def check_layer(name, out_dir):
    """The contract checks; the model their ``saving`` check saved to ``<name>.keras``
    is kept, with its outputs in ``<name>.npz`` (no second model is built for them)."""
    from tests.harness import run_layer_contract

    init_kwargs, _, call_kwargs, checks = CASES[name]
    cls = getattr(layers, name)
    inputs = case_inputs(name)
    from tests.backends import SUPPORTED

    checks = checks or CONTRACT_CHECKS
    if keras.backend.backend() not in SUPPORTED:  # torch: no XLA compile to compare with
        checks = tuple(c for c in checks if c != "jit")
    # every case's checks include "saving", whose model and outputs are kept
    path, outputs = run_layer_contract(cls, init_kwargs, inputs, tmp_path=out_dir, call_kwargs=call_kwargs,
                                       checks=checks, atol=1e-5, rtol=1e-4)
    assert pathlib.Path(path) == out_dir / f"{name}.keras", path
    np.savez(out_dir / f"{name}.npz", *outputs)


def loss_values_and_gradients():
    """``{name: (value, gradient with respect to the scores)}`` on this backend."""
    from tests.backends import tensor, value_and_grads

    results = {}
    for name, (make, y_true, y_pred) in LOSSES.items():
        loss = make()
        value, [grad], _ = value_and_grads(lambda p: loss(y_true, p), [tensor(y_pred)])
        results[name] = (keras.ops.convert_to_numpy(value), keras.ops.convert_to_numpy(grad))
    return results


def radam_trajectory(steps=8):
    """RAdam on f(x) = 0.5 |A x - b|^2 from a fixed start, through the threshold."""
    from tests.backends import grads

    # tensors: torch's ``tensor - ndarray`` goes through numpy and loses the gradient
    a = keras.ops.convert_to_tensor(np.array([[3.0, 0.5], [0.5, 1.0]], "float32"))
    b = keras.ops.convert_to_tensor(np.array([1.0, -2.0], "float32"))
    x = keras.Variable(np.array([0.7, -0.3], "float32"))
    optimizer = RAdam(0.05, weight_decay=0.125)

    def loss():
        return 0.5 * keras.ops.sum(keras.ops.square(keras.ops.matmul(a, x) - b))

    history = []
    for _ in range(steps):
        optimizer.apply_gradients([(grads(loss, variables=[x])[0], x)])
        history.append(keras.ops.convert_to_numpy(x))
    return np.stack(history)


#: layers whose float64 outputs (random weights set from numpy) must agree across
#: backends to float64 rounding: they take matmul, maximum or minimum, which Keras' torch
#: backend computes in float32 for float64 operands
FLOAT64_CASES = ("DynamicRouting", "EMRouting", "G1", "GatedEncoderCell", "KMeansRouting", "LSTMEncoderCell",
                 "ReadUnit", "WriteUnit")


def float64_outputs():
    """``{name: [outputs]}`` of each ``FLOAT64_CASES`` layer built in float64 with weights
    drawn from a fixed numpy generator (the same on every backend), and
    ``keras_capsules.ops.mean(x, keepdims=True)`` of a rank-3 tensor."""
    from keras_capsules import ops as capsule_ops
    from tests.backends import float64_enabled

    results = {}
    with float64_enabled():  # jax_enable_x64 on JAX
        for name in FLOAT64_CASES:
            init_kwargs, _, call_kwargs, _ = CASES[name]
            inputs = keras.tree.map_structure(lambda x: x.astype("float64"), case_inputs(name))
            layer = getattr(layers, name)(**init_kwargs, dtype="float64")
            layer(inputs, **call_kwargs)
            rng = np.random.default_rng(7)
            layer.set_weights([
                0.5 * rng.standard_normal(w.shape) if "float" in str(w.dtype) else keras.ops.convert_to_numpy(w)
                for w in layer.weights
            ])
            results[name] = [keras.ops.convert_to_numpy(o) for o in keras.tree.flatten(layer(inputs, **call_kwargs))]
        x = np.arange(24, dtype="float64").reshape(2, 3, 4)
        results["mean_keepdims"] = [keras.ops.convert_to_numpy(capsule_ops.mean(keras.ops.convert_to_tensor(x), keepdims=True))]
    return results


def main(out_dir):
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(1234)
    report = {}

    def attempt(name, fn):
        start = time.perf_counter()
        try:
            fn()
            report[name] = "ok"
        except BaseException as error:  # pytest.skip/fail are BaseExceptions
            report[name] = "".join(traceback.format_exception_only(error)).strip()
            traceback.print_exc()
        print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)

    for name in public_layers():
        if name not in CASES:
            report[name] = f"no portability case for public layer {name} in tests/portability.py"
            continue
        attempt(name, lambda: check_layer(name, out_dir))

    def save_losses():
        np.savez(out_dir / "losses.npz", **{
            f"{k}_{part}": v for k, pair in loss_values_and_gradients().items()
            for part, v in zip(("value", "grad"), pair)
        })

    attempt("losses", save_losses)
    attempt("float64", lambda: np.savez(out_dir / "float64.npz", **{
        f"{name}_{k}": v for name, values in float64_outputs().items() for k, v in enumerate(values)
    }))
    attempt("RAdam", lambda: np.save(out_dir / "radam.npy", radam_trajectory()))
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    print(f"{keras.backend.backend()}: {sum(v == 'ok' for v in report.values())} of {len(report)} checks ok")
    return 0 if all(v == "ok" for v in report.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: KERAS_BACKEND=jax python -m tests.portability OUT_DIR ({os.getcwd()})")
    sys.exit(main(sys.argv[1]))
