"""Numpy versions of the MAC formulas (Hudson & Manning 2018), written from the paper.

Each function takes the layer's weights as a dict of numpy arrays (``weights(layer)``)
and computes the unit in float64, so that tests compare the Keras layers against a
direct transcription of the equations.
"""

import numpy as np


def weights(layer):
    """``{name: array}`` of a layer's own weights (last path component)."""
    return {w.path.split("/")[-1]: np.asarray(np.asarray(w), np.float64) for w in layer.weights}


def softmax(x, mask=None):
    x = np.asarray(x, np.float64)
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    x = x - np.max(np.where(np.isfinite(x), x, -1e300), axis=-1, keepdims=True)
    e = np.where(np.isfinite(x), np.exp(x), 0.0)
    s = e.sum(-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def control_unit(w, q, c_prev, cw, step, mask=None, use_previous_control=True):
    q_i = q @ w["question_kernel"][step] + w["question_bias"][step]
    if use_previous_control:
        cq = np.concatenate([c_prev, q_i], -1) @ w["control_question_kernel"] + w[
            "control_question_bias"
        ]
    else:
        cq = q_i
    logits = ((cq[:, None, :] * cw) @ w["attention_kernel"])[..., 0] + w["attention_bias"][0]
    cv = softmax(logits, mask)
    cw = cw if mask is None else np.where(mask[..., None], cw, 0.0)
    return np.einsum("bs,bsd->bd", cv, cw), cv


def read_unit(w, m, kb, c, mask=None, activation=None):
    act = (lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))) if activation else (lambda x: x)
    inter = (m @ w["memory_kernel"] + w["memory_bias"])[:, None, :] * (kb @ w["kb_kernel"] + w["kb_bias"])
    inter2 = act(np.concatenate([inter, kb], -1) @ w["concat_kernel"] + w["concat_bias"])
    logits = (act(c[:, None, :] * inter2) @ w["attention_kernel"])[..., 0] + w["attention_bias"][0]
    rv = softmax(logits, mask)
    kb = kb if mask is None else np.where(mask[..., None], kb, 0.0)
    return np.einsum("bh,bhd->bd", rv, kb), rv


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def write_unit(w, r, m_prev, c, prev_c=None, prev_m=None, self_attention=False, gate=False):
    m1 = np.concatenate([r, m_prev], -1) @ w["kernel"] + w["bias"]
    sa = None
    if self_attention:
        logits = ((c[:, None, :] * prev_c) @ w["self_attention_kernel"])[..., 0] + w[
            "self_attention_bias"
        ][0]
        sa = softmax(logits)
        m_sa = np.einsum("bj,bjd->bd", sa, prev_m)
        m1 = m_sa @ w["self_memory_kernel"] + m1 @ w["info_kernel"] + w["self_memory_bias"]
    if gate:
        g = sigmoid(c @ w["gate_kernel"] + w["gate_bias"])
        m1 = g * m_prev + (1 - g) * m1
    return m1, sa


def mac_network(net, cw, q, kb, words_mask=None, kb_mask=None):
    """The whole recurrence with the weights of a built ``MACNetwork``."""
    cell = net.cell
    wc, wr, ww = weights(cell.control_unit), weights(cell.read_unit), weights(cell.write_unit)
    top = weights(net)
    b = cw.shape[0]
    # without a unit that reads c_0 the network holds no initial_control: any value does
    c = np.tile(top.get("initial_control", np.zeros_like(top["initial_memory"])), (b, 1))
    m = np.tile(top["initial_memory"], (b, 1))
    controls, memories, c_maps, r_maps, s_maps = [c], [m], [], [], []
    p = net.max_steps
    for i in range(p):
        c, cv = control_unit(wc, q, c, cw, i, words_mask, cell.use_previous_control)
        r, rv = read_unit(wr, m, kb, c, kb_mask, cell.read_activation)
        m, sa = write_unit(
            ww, r, m, c, np.stack(controls, 1), np.stack(memories, 1),
            cell.self_attention, cell.memory_gate,
        )
        controls.append(c)
        memories.append(m)
        c_maps.append(cv)
        r_maps.append(rv)
        if sa is not None:
            s_maps.append(np.pad(sa, [(0, 0), (0, p - i - 1)]))
    out = [m, np.stack(c_maps, 1), np.stack(r_maps, 1)]
    if s_maps:
        out.append(np.stack(s_maps, 1))
    return out


def randomize(layer, seed=0, scale=0.5):
    """Gives every weight (biases too) random normal values, so no term is trivially 0."""
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign((scale * rng.standard_normal(tuple(w.shape))).astype(w.dtype))
    return layer
