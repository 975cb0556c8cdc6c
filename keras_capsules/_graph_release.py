"""Ties TensorFlow's registered custom gradients to the graphs they differentiate.

In a traced function (graph mode), ``tf.custom_gradient`` registers its gradient under a
new name (``CustomGradient-<uid>``) in TensorFlow's process-wide gradient registry, which
never lets go (tensorflow/tensorflow#97697). The registered function holds the forward
pass's tensors, so their whole graph and its closures, such as a layer's ``call`` (the
layer, its weights, the model around it): every model a process trained stayed alive.

Here such an entry becomes a weak reference (:class:`_GraphGradient`), and an op of the
graph it differentiates holds the function: it lives as long as that graph (its gradient
is only ever asked for an op of it), and the entry leaves the registry with the graph.

* :func:`release_gradients_of` releases the entries of the custom gradients that produced
  some tensors, as they are traced, and every other entry registered so far: the
  library's own ``tf.custom_gradient`` sites (``ops.recomputed_where``, RLadder's row
  writes) call it, so a user's plain loop of ``fit`` calls keeps nothing of earlier models.
* :func:`release_traced_graphs` releases every entry registered so far (TensorFlow's own,
  such as swish and all-reduce, too): the applications call it as a run or trial begins.

Imports no backend at module level; off TensorFlow, in eager execution, or if
TensorFlow's private registry or ``custom_gradient`` change shape, both do nothing.
"""

import sys
import weakref

_PREFIX = "CustomGradient-"
#: the attribute of a graph op that holds the gradient functions released onto it
_HOLDERS = "_keras_capsules_gradients"


class _GraphGradient:
    """A gradient function of TensorFlow's gradient registry, held weakly (an op of its
    graph holds it strongly)."""

    __slots__ = ("_function", "__weakref__")

    def __init__(self, function):
        self._function = weakref.ref(function)

    def __call__(self, *args, **kwargs):
        function = self._function()
        if function is None:  # (never asked: its graph, and every op it differentiates, is gone)
            raise LookupError("the graph of this custom gradient is gone")
        return function(*args, **kwargs)


def _tf_registry():
    """TensorFlow's gradient registry (a dict: name -> {"type": function, ...}), or None
    if TensorFlow was never imported (nothing registered) or its registry changed shape."""
    tf_ops = sys.modules.get("tensorflow.python.framework.ops")
    if tf_ops is None:
        return None
    registry = getattr(getattr(tf_ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


def _executing_eagerly():
    """Whether TensorFlow executes eagerly here (True if it cannot tell)."""
    context = sys.modules.get("tensorflow.python.eager.context")
    try:
        return context is None or bool(context.executing_eagerly())
    except AttributeError:
        return True


def _entries(registry):
    """A copy of ``registry``'s items (a garbage collection during the copy may run a
    graph's finalizer, which pops its entry)."""
    for _ in range(3):
        try:
            return list(registry.copy().items())
        except RuntimeError:  # (changed size during the copy)
            continue
    return []


def _release(registry, name, op):
    """Makes registry entry ``name`` weak, its function held by ``op`` (an op of the graph
    the gradient differentiates), and has the entry leave with that graph. True if done."""
    entry = registry.get(name)
    function = entry.get("type") if isinstance(entry, dict) else None
    if function is None or isinstance(function, _GraphGradient) or not callable(function):
        return False
    try:
        graph = op.graph
        holders = getattr(op, _HOLDERS, None)
        if holders is None:
            holders = []
            setattr(op, _HOLDERS, holders)
        weakref.finalize(graph, registry.pop, name, None)
    except (AttributeError, TypeError, ValueError):  # an op that takes no attribute, ...
        return False
    holders.append(function)
    entry["type"] = _GraphGradient(function)
    return True


def release_gradients_of(tensors):
    """Releases the registry entries of the ``tf.custom_gradient`` calls whose outputs
    are among ``tensors`` (a structure of tensors), as soon as they are traced: each
    entry then lives as long as the graph of those outputs. Then releases every other
    entry registered so far (:func:`release_traced_graphs`): TensorFlow's own too, such
    as the all-reduce Keras' optimizer runs in every traced train step, which held that
    step's graph, whose nested graphs hold the closures of this library's layers, so
    every earlier model of a user's loop of ``fit`` calls. (The last model's all-reduce
    is released when a next model's step is traced, or by :func:`release_traced_graphs`.)
    Returns ``tensors``.

    Nothing happens in eager execution (no entry is registered there), off TensorFlow,
    or if the outputs are not those of a ``custom_gradient`` as TensorFlow builds them
    today (an ``IdentityN`` op whose ``_gradient_op_type`` names the entry).
    """
    registry = _tf_registry()
    if registry is None or _executing_eagerly():
        return tensors
    seen = set()
    stack = [tensors]
    while stack:  # (a small nest of tuples and lists; no backend import for a tree util)
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
            continue
        op = getattr(item, "op", None)
        if op is None or id(op) in seen or getattr(op, "type", None) != "IdentityN":
            continue
        seen.add(id(op))
        try:
            name = op.get_attr("_gradient_op_type")
        except (AttributeError, TypeError, ValueError):  # (no such attribute: not a custom gradient)
            continue
        name = name.decode() if isinstance(name, bytes) else name
        if isinstance(name, str) and name.startswith(_PREFIX):
            _release(registry, name, op)
    # and those TensorFlow registered itself meanwhile (Keras' optimizer all-reduces the
    # gradients of every train step by one: it held that step's graph, whose nested
    # graphs hold this library's layers, the model of every earlier fit)
    release_traced_graphs()
    return tensors


def _forward_tensor(function):
    """A tensor of the forward pass that TensorFlow's registered gradient ``function``
    of a ``tf.custom_gradient`` holds (its ``result``), or None."""
    cells = dict(zip(function.__code__.co_freevars, function.__closure__ or ()))
    inner = cells.get("tape_grad_fn")
    if inner is None or not callable(inner.cell_contents):
        return None
    inner = inner.cell_contents
    cells = dict(zip(inner.__code__.co_freevars, inner.__closure__ or ()))
    if "result" not in cells:
        return None
    stack = [cells["result"].cell_contents]
    while stack:
        item = stack.pop(0)
        if isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif isinstance(item, dict):
            stack[:0] = list(item.values())
        elif getattr(item, "graph", None) is not None and getattr(item, "op", None) is not None:
            return item
    return None


def release_traced_graphs():
    """Releases every ``tf.custom_gradient`` entry of TensorFlow's gradient registry not
    released yet (see the module's docstring): each lives as long as its forward graph.
    Entries whose forward graph cannot be found are left as they are."""
    registry = _tf_registry()
    if registry is None:
        return
    for name, entry in _entries(registry):
        function = entry.get("type") if name.startswith(_PREFIX) and isinstance(entry, dict) else None
        if function is None or isinstance(function, _GraphGradient) or not hasattr(function, "__code__"):
            continue
        try:
            tensor = _forward_tensor(function)
        except (AttributeError, TypeError, ValueError):
            continue
        if tensor is not None:
            _release(registry, name, tensor.op)
