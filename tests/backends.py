"""Backend-neutral test tools: tensors, gradients and XLA compilation on any Keras backend.

The library promises to run on any Keras backend (DESIGN.md); its tests run under the
backend ``KERAS_BACKEND`` selects (TensorFlow by default, see ``conftest.py``). What a
test needs from the backend itself goes through here:

* ``tensor(x, dtype)``: a backend tensor;
* ``value_and_grads(fn, tensors, variables)``: ``fn(*tensors)`` and its gradients with
  respect to the tensors and to Keras variables read inside ``fn`` (a
  ``tf.GradientTape`` on TensorFlow; ``jax.value_and_grad`` with the variables' values
  fed through a ``keras.StatelessScope`` on JAX; ``torch.autograd.grad`` on torch);
* ``compiled(fn)``: ``fn`` traced and compiled with XLA (``tf.function(jit_compile=True)``
  or ``jax.jit``; skipped on torch, which has no XLA);
* ``require_float64()`` skips a float64 test where the backend has no float64, and
  ``float64_enabled()`` gives it float64 for a block (``jax.enable_x64`` on JAX);
* ``tensorflow_only(what)``: skips a test that exercises TensorFlow itself
  (``tf.distribute``, ``tf.data``, ``tf.function`` signatures, ragged tensors), with
  the reason ``TensorFlow-only: ...``;
* ``run_checks(checks)`` and ``checks_on_jax(module)``: a test module's checks run as a
  script (its ``main``) and, from the test process, in a subprocess on JAX.
"""

import contextlib
import importlib.util
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()

if BACKEND == "torch":
    import torch

    _torch_array = torch.Tensor.__array__

    def _detached_array(self, dtype=None, copy=None):
        """A tensor's values, also when autograd tracks it (an eager layer call with
        trainable weights): ``np.asarray`` of TensorFlow and JAX tensors gives them, torch
        refuses ("Can't call numpy() on Tensor that requires grad")."""
        values = _torch_array(self.detach(), dtype)
        return values.copy() if copy else values

    torch.Tensor.__array__ = _detached_array

    def _tensor_operand(method):
        """``method`` (an arithmetic operator of ``torch.Tensor``) with a numpy operand
        made a tensor first. torch 2.14 hands ``tensor * ndarray`` to numpy, which reads
        the tensor through ``__array__`` (detached, above) and wraps the result back into
        a tensor without autograd history: a test's ``ops.sum(layer(x) * np_weights)``
        had no gradient on torch ("element 0 of tensors does not require grad"). On
        TensorFlow and JAX such a product is a tensor op, gradient included."""

        def operator(self, other):
            if isinstance(other, (np.ndarray, np.generic)):
                other = torch.as_tensor(other, device=self.device)
            return method(self, other)

        operator.__name__ = method.__name__
        return operator

    for _name in ("add", "sub", "mul", "truediv", "pow", "matmul"):
        for _form in (f"__{_name}__", f"__r{_name}__"):
            setattr(torch.Tensor, _form, _tensor_operand(getattr(torch.Tensor, _form)))
SUPPORTED = ("tensorflow", "jax")
#: backends whose gradients the tests can take (``value_and_grads``); torch has no XLA
#: compile here, so ``compiled`` skips on it
DIFFERENTIABLE = SUPPORTED + ("torch",)


def tensorflow_only(what):
    """Skips the calling test unless the backend is TensorFlow, saying why."""
    if BACKEND != "tensorflow":
        pytest.skip(f"TensorFlow-only: {what} (backend is {BACKEND})")


def tensor(x, dtype=None):
    """``x`` (array-like) as a tensor of the backend (``dtype`` if given)."""
    return keras.ops.convert_to_tensor(np.asarray(x) if dtype is None else np.asarray(x, dtype))


def _dense(gradient):
    """TensorFlow gives ``tf.IndexedSlices`` for embedding lookups: made dense."""
    if BACKEND == "tensorflow" and gradient is not None:
        import tensorflow as tf

        if isinstance(gradient, tf.IndexedSlices):
            return tf.convert_to_tensor(gradient)
    return gradient


def value_and_grads(fn, tensors=(), variables=(), has_aux=False):
    """``fn(*tensors)`` and its gradients with respect to ``tensors`` and ``variables``.

    ``fn`` returns a scalar, or ``(scalar, aux)`` with ``has_aux=True``. Every Keras
    variable in ``variables`` must exist before the call (build layers first). Returns
    ``(value, tensor_grads, variable_grads)``, or ``((value, aux), ...)`` with aux; a
    gradient that does not depend on the value is ``None`` on TensorFlow and zeros on
    JAX.
    """
    tensors = [keras.ops.convert_to_tensor(t) for t in tensors]
    variables = list(variables)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape(persistent=True) as tape:
            tape.watch(tensors)
            result = fn(*tensors)
        loss = result[0] if has_aux else result
        tensor_grads = [_dense(g) for g in tape.gradient(loss, tensors)]
        variable_grads = [_dense(g) for g in tape.gradient(loss, variables)]
        del tape
        return result, tensor_grads, variable_grads
    if BACKEND == "jax":
        import jax

        def pure(tensor_values, variable_values):
            with keras.StatelessScope(state_mapping=list(zip(variables, variable_values))):
                result = fn(*tensor_values)
            return result if has_aux else (result, None)

        values = [v.value for v in variables]
        (loss, aux), (tensor_grads, variable_grads) = jax.value_and_grad(
            pure, argnums=(0, 1), has_aux=True
        )(tensors, values)
        return ((loss, aux) if has_aux else loss), list(tensor_grads), list(variable_grads)
    if BACKEND == "torch":
        import torch

        tensors = [t.detach().requires_grad_(True) if t.is_floating_point() else t for t in tensors]
        values = [v.value for v in variables]
        frozen = [value for value in values if not value.requires_grad]
        for value in frozen:  # non-trainable variables too, as on TensorFlow and JAX
            value.requires_grad_(True)
        try:
            result = fn(*tensors)
        finally:
            for value in frozen:
                value.requires_grad_(False)
        loss = result[0] if has_aux else result
        sources = tensors + values
        wanted = [k for k, s in enumerate(sources) if s.requires_grad or any(s is f for f in frozen)]
        found = torch.autograd.grad(loss, [sources[k] for k in wanted], allow_unused=True)
        gradients = [None] * len(sources)
        for k, g in zip(wanted, found):
            gradients[k] = g  # None: the value does not depend on it (as on TensorFlow)
        # detached, like the values TensorFlow and JAX give (numpy refuses a tensor with a graph)
        result = keras.tree.map_structure(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, result)
        return result, gradients[: len(tensors)], gradients[len(tensors):]
    pytest.skip(f"the tests' gradient tools support {DIFFERENTIABLE}, not {BACKEND}")


def grads(fn, tensors=(), variables=()):
    """Just the gradients of ``value_and_grads``: tensor gradients then variable ones."""
    _, tensor_grads, variable_grads = value_and_grads(fn, tensors, variables)
    return tensor_grads + variable_grads


def compiled(fn, jit_compile=True):
    """``fn`` traced (values unknown while it runs) and compiled with XLA.

    ``jit_compile=False`` gives TensorFlow's traced graph without XLA; JAX traces only
    through ``jax.jit``, which always compiles with XLA.
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=jit_compile)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    pytest.skip(f"the tests' compile tool supports {SUPPORTED}, not {BACKEND}")


def require_float64():
    """Skips the calling test when the backend cannot hold float64 tensors.

    JAX computes in float64 only with ``jax_enable_x64`` (off by default, and Keras
    leaves it off): a float64 request silently gives float32 there.
    """
    if not has_float64():
        pytest.skip("float64 needs jax_enable_x64 on JAX (off by default; set JAX_ENABLE_X64=1)")


def has_float64():
    return BACKEND != "jax" or __import__("jax").config.jax_enable_x64


def float64_enabled():
    """A context in which the backend computes float64 as float64.

    ``jax.enable_x64(True)`` on JAX (for the block only, so the rest of the session
    keeps JAX's float32 default); nothing to do on TensorFlow. For a float64 test
    that must run on every backend, such as a regression test of float64 precision.
    """
    if BACKEND == "jax":
        return __import__("jax").enable_x64(True)
    return contextlib.nullcontext()


def precise():
    """The most precise float dtype of the backend, and tolerances against float64 numpy.

    ``("float64", {rtol: 1e-10, atol: 1e-12})``, or float32 with float32 tolerances
    where float64 is missing (JAX without x64), so the comparison still runs there.
    """
    if has_float64():
        return "float64", dict(rtol=1e-10, atol=1e-12)
    return "float32", dict(rtol=1e-4, atol=1e-5)


def run_checks(checks):
    """Runs ``checks``, ``(name, function, args)`` triples, on this process's backend,
    printing every skip and failure and a count; returns 1 if one failed, else 0 (a test
    module's ``main``, which :func:`checks_on_jax` runs)."""
    failed = 0
    for name, check, args in checks:
        try:
            check(*args)
        except pytest.skip.Exception as e:
            print(f"skipped {name}: {e}", flush=True)
        except AssertionError as e:
            failed += 1
            print(f"FAILED {name} on {BACKEND}: {str(e)[:1500]}", flush=True)
    print(f"{len(checks) - failed} passed, {failed} failed on {BACKEND}")
    return 1 if failed else 0


def checks_on_jax(module, timeout=900):
    """Asserts that ``python -m module`` (a test module whose ``main`` returns
    :func:`run_checks`' status) passes on JAX, run from the repository root in a
    subprocess: its checks under ``jax.jit`` beside the test process's backend. Skips on
    JAX itself and where jax is not installed."""
    if BACKEND == "jax":
        pytest.skip("the test process runs on JAX itself")
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, "-m", module], cwd=pathlib.Path(__file__).resolve().parents[1],
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-3000:]}"
