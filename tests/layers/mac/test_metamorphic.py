"""Metamorphic properties of the MAC layers (Hudson & Manning 2018).

Relations the model implies, checked on outputs rather than against formulas:

* the read unit attends over the knowledge-base cells without positions: permuting the
  cells (and their mask) leaves every output unchanged (the read attention permuted);
  masked cells are as good as removed cells;
* padded (masked) question words are as good as a shorter question;
* a sample's outputs do not depend on the other samples of its batch;
* gradients with masked positions are those without them (zero at masked positions);
* ``MACNetwork`` with ``p`` steps is ``p`` applications of its ``MACCell``; the memory
  gate at its extremes keeps the previous memory or writes the new one.

Each check runs eager, traced (``tf.function``) and compiled with XLA, and
``test_on_jax`` runs them all on JAX in a subprocess (``python -m`` this module).
"""

import sys

import keras
import numpy as np
import pytest

from keras_capsules.layers import MACNetwork, WriteUnit
from tests.backends import BACKEND, checks_on_jax, compiled, run_checks, value_and_grads
from tests.layers.mac import reference as ref

B, S, N, D, DQ, DKB, P = 3, 5, 6, 4, 3, 5, 3
ATOL = dict(rtol=2e-5, atol=2e-5)

CONFIGS = {
    "paper": {},
    "official": {"use_previous_control": False, "read_activation": "elu", "memory_gate": True},
    "full": {"self_attention": True, "memory_gate": True, "gate_per_dimension": True},
}
#: (config, mode) pairs each check runs in: every config eager, the fullest one under XLA,
#: one traced without XLA (TensorFlow only); JAX runs ``JAX_CASES`` (eager and ``jax.jit``).
CASES = [(c, "eager") for c in sorted(CONFIGS)] + [("full", "xla"), ("paper", "traced")]
JAX_CASES = [("official", "eager"), ("full", "xla")]


def _inputs(seed=0, batch=B, words=S, cells=N):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((batch, words, D)).astype("float32"),
        rng.standard_normal((batch, DQ)).astype("float32"),
        rng.standard_normal((batch, cells, DKB)).astype("float32"),
    ]


def _network(config):
    net = MACNetwork(max_steps=P, return_attention=True, **CONFIGS[config])
    net(_inputs())
    return ref.randomize(net, seed=3, scale=0.7)


def _runner(net, mode):
    """``run(words, question, kb, words_mask, kb_mask)`` -> numpy outputs, in ``mode``."""

    def call(w, q, kb, wm, km):
        return net([w, q, kb], words_mask=wm, kb_mask=km)

    if mode == "eager":
        fn = call
    elif BACKEND != "tensorflow" and mode == "traced":
        pytest.skip("traced without XLA is TensorFlow's tf.function")
    else:
        fn = compiled(call, jit_compile=mode == "xla")

    def run(w, q, kb, wm=None, km=None):
        n_words, n_cells = w.shape[1], kb.shape[1]
        wm = np.ones((len(w), n_words), bool) if wm is None else np.asarray(wm, bool)
        km = np.ones((len(kb), n_cells), bool) if km is None else np.asarray(km, bool)
        return [keras.ops.convert_to_numpy(t) for t in fn(w, q, kb, wm, km)]

    return run


def _masks(seed=0):
    rng = np.random.default_rng(seed)
    words = np.ones((B, S), bool)
    words[0, 3:] = False
    words[1, 4:] = False
    kb = rng.random((B, N)) < 0.6
    kb[:, 0] = True
    return words, kb


# ------------------------------------------------------------------ 1. knowledge base
def check_kb_permutation(config, mode):
    net = _network(config)
    run = _runner(net, mode)
    w, q, kb = _inputs(1)
    wm, km = _masks(1)
    rng = np.random.default_rng(7)
    perm = np.stack([rng.permutation(N) for _ in range(B)])  # one per sample
    base = run(w, q, kb, wm, km)
    permuted = run(w, q, np.take_along_axis(kb, perm[:, :, None], 1), wm, np.take_along_axis(km, perm, 1))
    np.testing.assert_allclose(permuted[0], base[0], **ATOL, err_msg="memory")
    np.testing.assert_allclose(permuted[1], base[1], **ATOL, err_msg="control attention")
    np.testing.assert_allclose(permuted[2], np.take_along_axis(base[2], perm[:, None], 2), **ATOL,
                               err_msg="read attention")
    for k in range(3, len(base)):
        np.testing.assert_allclose(permuted[k], base[k], **ATOL, err_msg=f"output {k}")


def check_masked_cells_are_removed(config, mode):
    """Masked cells (holding huge values) == the knowledge base without them; sample 1
    keeps a single cell."""
    net = _network(config)
    run = _runner(net, mode)
    w, q, kb = _inputs(2, batch=2)
    keeps = ([0, 2, 5], [4])
    km = np.zeros((2, N), bool)
    for i, keep in enumerate(keeps):
        km[i, keep] = True
    full = run(w, q, np.where(km[:, :, None], kb, np.float32(3e4)), None, km)
    assert np.all(full[2][~np.broadcast_to(km[:, None], full[2].shape)] == 0), "masked cells got attention"
    for i, keep in enumerate(keeps):
        small = run(w[i : i + 1], q[i : i + 1], kb[i : i + 1, keep])
        np.testing.assert_allclose(full[0][i : i + 1], small[0], **ATOL, err_msg=f"memory, kept {keep}")
        np.testing.assert_allclose(full[1][i : i + 1], small[1], **ATOL, err_msg=f"control, kept {keep}")
        np.testing.assert_allclose(full[2][i : i + 1][:, :, keep], small[2], **ATOL, err_msg=f"read, kept {keep}")


# ------------------------------------------------------------------ 2. question words
def check_padded_words_are_a_shorter_question(config, mode):
    """Padded words (holding huge values) == a shorter question; sample 1 has one word."""
    net = _network(config)
    run = _runner(net, mode)
    w, q, kb = _inputs(3, batch=2)
    lengths = (S - 2, 1)
    wm = np.arange(S)[None] < np.array(lengths)[:, None]
    full = run(np.where(wm[:, :, None], w, np.float32(-5e4)), q, kb, wm, None)
    assert np.all(full[1][~np.broadcast_to(wm[:, None], full[1].shape)] == 0), "padded words got attention"
    for i, n in enumerate(lengths):
        short = run(w[i : i + 1, :n], q[i : i + 1], kb[i : i + 1])
        np.testing.assert_allclose(full[1][i : i + 1, :, :n], short[1], **ATOL, err_msg=f"control, {n} words")
        for k in [0] + list(range(2, len(full))):
            np.testing.assert_allclose(full[k][i : i + 1], short[k], **ATOL, err_msg=f"output {k}, {n} words")


def check_word_permutation(config, mode):
    """The MAC network has no positions over the contextual words either (order lives in
    the words themselves, from the BiLSTM): permuting them and their mask per sample
    permutes the control attention and changes nothing else."""
    net = _network(config)
    run = _runner(net, mode)
    w, q, kb = _inputs(9)
    wm, _ = _masks(9)
    rng = np.random.default_rng(9)
    perm = np.stack([rng.permutation(S) for _ in range(B)])
    base = run(w, q, kb, wm, None)
    permuted = run(np.take_along_axis(w, perm[:, :, None], 1), q, kb, np.take_along_axis(wm, perm, 1), None)
    np.testing.assert_allclose(permuted[1], np.take_along_axis(base[1], perm[:, None], 2), **ATOL,
                               err_msg="control attention")
    for k in [0] + list(range(2, len(base))):
        np.testing.assert_allclose(permuted[k], base[k], **ATOL, err_msg=f"output {k}")


# ------------------------------------------------------------------ 3. batch
def check_batch_independence(config, mode):
    """Sample 0 alone == sample 0 beside extreme, fully masked and ordinary neighbours."""
    net = _network(config)
    run = _runner(net, mode)
    w, q, kb = _inputs(4, batch=4)
    wm = np.ones((4, S), bool)
    km = np.ones((4, N), bool)
    wm[0, 4:] = False
    km[0, 1] = False
    w[1], kb[1], q[1] = 1e4, -1e4, 1e4  # extreme neighbour
    wm[2], km[2] = False, False  # a neighbour with nothing at all
    alone = run(w[:1], q[:1], kb[:1], wm[:1], km[:1])
    together = run(w, q, kb, wm, km)
    for k, (a, t) in enumerate(zip(alone, together)):
        np.testing.assert_allclose(t[:1], a, **ATOL, err_msg=f"output {k}")
    for k, t in enumerate(together):
        assert np.all(np.isfinite(t)), f"output {k} not finite beside extreme neighbours"
    # the fully masked sample attends to nothing
    assert np.all(together[1][2] == 0) and np.all(together[2][2] == 0)


# ------------------------------------------------------------------ 4. steps
def check_network_is_its_cell_repeated(config, mode):
    """MACNetwork's p steps == p manual MACCell calls with its weights and states."""
    net = _network(config)
    run = _runner(net, mode)
    w, q, kb = _inputs(5)
    wm, km = _masks(5)
    out = run(w, q, kb, wm, km)
    cell = net.cell
    c = np.broadcast_to(
        np.zeros(D, "float32") if net.initial_control is None else np.asarray(net.initial_control), (B, D)
    )
    m = np.broadcast_to(np.asarray(net.initial_memory), (B, D))
    controls, memories, c_maps, r_maps, s_maps = [c], [m], [], [], []
    for step in range(P):
        inputs = [w, q, kb, c, m]
        if cell.self_attention:
            inputs += [np.stack(controls, 1), np.stack(memories, 1)]
        res = [keras.ops.convert_to_numpy(t) for t in cell(inputs, step=step, words_mask=wm, kb_mask=km)]
        c, m = res[0], res[1]
        controls.append(c)
        memories.append(m)
        c_maps.append(res[2])
        r_maps.append(res[3])
        if cell.self_attention:  # row `step` weights m_0..m_step, zeros after
            s_maps.append(np.pad(res[4], [(0, 0), (0, P - 1 - step)]))
    np.testing.assert_allclose(out[0], m, **ATOL, err_msg="memory")
    np.testing.assert_allclose(out[1], np.stack(c_maps, 1), **ATOL, err_msg="control attention")
    np.testing.assert_allclose(out[2], np.stack(r_maps, 1), **ATOL, err_msg="read attention")
    if s_maps:
        np.testing.assert_allclose(out[3], np.stack(s_maps, 1), **ATOL, err_msg="self-attention")
        np.testing.assert_allclose(out[3].sum(-1), 1.0, **ATOL, err_msg="self-attention rows")


def check_fewer_steps_are_a_prefix(config, mode):
    """A network of ``P - 1`` steps holding the first ``P - 1`` step projections of a
    ``P``-step one (all else shared) attends as the first ``P - 1`` steps of it."""
    net = _network(config)
    short = MACNetwork(max_steps=P - 1, return_attention=True, **CONFIGS[config])
    short(_inputs())
    for a, b in zip(short.weights, net.weights):
        assert a.path.split("/")[-1] == b.path.split("/")[-1]
        value = np.asarray(b)
        a.assign(value[: P - 1] if a.shape != b.shape else value)
    w, q, kb = _inputs(10)
    wm, km = _masks(10)
    full = _runner(net, mode)(w, q, kb, wm, km)
    part = _runner(short, mode)(w, q, kb, wm, km)
    np.testing.assert_allclose(part[1], full[1][:, : P - 1], **ATOL, err_msg="control attention")
    np.testing.assert_allclose(part[2], full[2][:, : P - 1], **ATOL, err_msg="read attention")
    if len(full) > 3:
        np.testing.assert_allclose(part[3], full[3][:, : P - 1, : P - 1], **ATOL, err_msg="self-attention")


def check_network_gate_keeps_memory(config, mode):
    """With the memory gate closed on ``m_prev`` (gate bias +30), every step keeps the
    memory: the network returns ``m_0`` whatever the inputs."""
    if not CONFIGS[config].get("memory_gate"):
        pytest.skip("no memory gate")
    net = _network(config)
    gate = net.cell.write_unit.gate_bias
    gate.assign(np.full(gate.shape, 30.0, "float32"))
    w, q, kb = _inputs(11)
    out = _runner(net, mode)(w, q, kb)
    np.testing.assert_allclose(out[0], np.broadcast_to(np.asarray(net.initial_memory), (B, D)), **ATOL)


def check_gradients_finite(config):
    net = _network(config)
    w, q, kb = _inputs(6)
    wm, km = _masks(6)
    wm[2], km[2] = False, False  # one sample with nothing at all

    def loss(w, q, kb):
        out = net([w, q, kb], words_mask=wm, kb_mask=km)
        return keras.ops.sum(out[0] ** 2) + keras.ops.sum(out[2])

    _, tensor_grads, weight_grads = value_and_grads(loss, [w, q, kb], net.trainable_weights)
    for g, v in zip(weight_grads, net.trainable_weights):
        assert g is not None, f"no gradient for {v.path}"
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(g))), f"gradient of {v.path} not finite"
    for g in tensor_grads:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(g)))


def check_masked_gradients_are_removed_ones(config):
    """Gradients with padded words and masked cells (holding huge values) == those of
    the inputs without them; the masked positions get exactly zero gradient."""
    net = _network(config)
    w, q, kb = _inputs(12, batch=1)
    words, keep = 3, [0, 2, 3, 5]
    wm = np.arange(S)[None] < words
    km = np.isin(np.arange(N), keep)[None]

    def loss(masks):
        def fn(w, kb):
            out = net([w, q, kb], words_mask=masks[0], kb_mask=masks[1])
            return sum(keras.ops.sum(o**2) for o in out)

        return fn

    padded = [np.where(wm[:, :, None], w, np.float32(1e4)), np.where(km[:, :, None], kb, np.float32(-1e4))]
    value, (g_w, g_kb), g_vars = value_and_grads(loss((wm, km)), padded, net.trainable_weights)
    want, (h_w, h_kb), h_vars = value_and_grads(loss((None, None)), [w[:, :words], kb[:, keep]],
                                                net.trainable_weights)
    np.testing.assert_allclose(float(value), float(want), rtol=1e-5)
    g_w, g_kb = keras.ops.convert_to_numpy(g_w), keras.ops.convert_to_numpy(g_kb)
    assert np.all(g_w[:, words:] == 0) and np.all(g_kb[~km] == 0), "masked positions got a gradient"
    np.testing.assert_allclose(g_w[:, :words], keras.ops.convert_to_numpy(h_w), **ATOL)
    np.testing.assert_allclose(g_kb[:, keep], keras.ops.convert_to_numpy(h_kb), **ATOL)
    for g, h, v in zip(g_vars, h_vars, net.trainable_weights):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(h), **ATOL,
                                   err_msg=v.path)


def check_memory_gate_extremes(per_dimension):
    """Gate bias +30: ``m = m_prev`` (the write keeps the memory); -30: ``m = m''``,
    the write without a gate."""
    rng = np.random.default_rng(8)
    r, m, c = (rng.standard_normal((B, D)).astype("float32") for _ in range(3))
    gated = WriteUnit(memory_gate=True, gate_per_dimension=per_dimension)
    plain = WriteUnit()
    gated([r, m, c])
    plain([r, m, c])
    ref.randomize(gated, seed=1)
    plain.kernel.assign(gated.kernel)
    plain.bias.assign(gated.bias)
    for bias, want in ((30.0, m), (-30.0, keras.ops.convert_to_numpy(plain([r, m, c])))):
        gated.gate_bias.assign(np.full(gated.gate_bias.shape, bias, "float32"))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(gated([r, m, c])), want, **ATOL,
                                   err_msg=f"gate bias {bias}")


# ------------------------------------------------------------------ pytest
LAYER_CHECKS = {
    "kb_permutation": check_kb_permutation,
    "masked_cells_are_removed": check_masked_cells_are_removed,
    "padded_words_are_a_shorter_question": check_padded_words_are_a_shorter_question,
    "word_permutation": check_word_permutation,
    "batch_independence": check_batch_independence,
    "network_is_its_cell_repeated": check_network_is_its_cell_repeated,
    "fewer_steps_are_a_prefix": check_fewer_steps_are_a_prefix,
    "network_gate_keeps_memory": check_network_gate_keeps_memory,
}


@pytest.mark.parametrize("config, mode", CASES)
@pytest.mark.parametrize("check", sorted(LAYER_CHECKS))
def test_property(check, config, mode):
    LAYER_CHECKS[check](config, mode)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_gradients_finite(config):
    check_gradients_finite(config)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_masked_gradients_are_removed_ones(config):
    check_masked_gradients_are_removed_ones(config)


@pytest.mark.parametrize("per_dimension", [False, True])
def test_memory_gate_extremes(per_dimension):
    check_memory_gate_extremes(per_dimension)


def test_on_jax():
    """The checks above on JAX (eager and ``jax.jit``), in a subprocess."""
    checks_on_jax("tests.layers.mac.test_metamorphic")


def main():
    cases = JAX_CASES if BACKEND == "jax" else CASES
    checks = [(f"{name}[{c}-{m}]", fn, (c, m)) for name, fn in sorted(LAYER_CHECKS.items()) for c, m in cases]
    checks += [(f"gradients_finite[{c}]", check_gradients_finite, (c,)) for c in sorted(CONFIGS)]
    checks += [(f"masked_gradients_are_removed_ones[{c}]", check_masked_gradients_are_removed_ones, (c,))
               for c in sorted(CONFIGS)]
    checks += [(f"memory_gate_extremes[{p}]", check_memory_gate_extremes, (p,)) for p in (False, True)]
    return run_checks(checks)


if __name__ == "__main__":
    sys.exit(main())
