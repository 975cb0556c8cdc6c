"""MACNetwork: the recurrence against numpy, masks, dropout, contract, errors, learning."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import ControlUnit, MACCell, MACNetwork, ReadUnit, WriteUnit
from tests.backends import BACKEND, compiled, grads, tensor
from tests.harness import run_layer_contract
from tests.layers.mac import reference as ref

B, S, N, D, DQ, DKB, P = 2, 4, 5, 4, 3, 6, 3
WORDS_MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
KB_MASK = np.array([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1]], bool)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((B, S, D)).astype("float32"),
        rng.standard_normal((B, DQ)).astype("float32"),
        rng.standard_normal((B, N, DKB)).astype("float32"),
    ]


def _network(**kwargs):
    kwargs.setdefault("max_steps", P)
    net = MACNetwork(return_attention=True, **kwargs)
    net(_inputs())
    return ref.randomize(net)


CONFIGS = {
    "paper": {},
    "full": {"self_attention": True, "memory_gate": True},
    "official": {"use_previous_control": False, "read_activation": "elu", "memory_gate": True},
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("masked", [False, True])
def test_matches_numpy(config, masked):
    net = _network(**CONFIGS[config])
    x = _inputs(1)
    masks = (WORDS_MASK, KB_MASK) if masked else (None, None)
    out = net(x, words_mask=masks[0], kb_mask=masks[1])
    want = ref.mac_network(net, *x, *masks)
    assert len(out) == len(want)
    for got, exp in zip(out, want):
        np.testing.assert_allclose(got, exp, atol=2e-5, rtol=2e-5)


def test_the_knowledge_base_is_projected_once_per_call(monkeypatch):
    # Audit (2026-12-01): every step's read projected the knowledge base anew
    # (kb W_k and its half of the concat dense), which no step changes: at 196 cells,
    # d = 128, 12 steps, a training step took 0.26-0.28 s where 0.145 s do.
    net = _network(**CONFIGS["paper"])
    x = _inputs(1)
    want = [keras.ops.convert_to_numpy(t) for t in net(x, kb_mask=KB_MASK)]
    calls = []
    project = ReadUnit.project_knowledge_base
    monkeypatch.setattr(ReadUnit, "project_knowledge_base", lambda self, *a, **k: calls.append(1) or project(self, *a, **k))
    got = net(x, kb_mask=KB_MASK)
    assert len(calls) == 1
    for a, b in zip(got, want):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), b)
    # and a cell or read unit called on its own projects it itself, to the same result
    read = net.cell.read_unit
    rng = np.random.default_rng(3)
    memory, control = (rng.standard_normal((B, D)).astype("float32") for _ in range(2))
    kb = x[2]
    alone = read([memory, kb, control], kb_mask=KB_MASK)
    given = read([memory, kb, control], kb_mask=KB_MASK, projected_kb=read.project_knowledge_base(kb, KB_MASK))
    for a, b in zip(alone, given):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_masked_positions_never_change_the_result():
    net = _network(self_attention=True, memory_gate=True)
    words, question, kb = (tensor(v) for v in _inputs(2))
    dirty_words = np.asarray(words).copy()
    dirty_words[~WORDS_MASK] = np.nan
    dirty_kb = np.asarray(kb).copy()
    dirty_kb[~KB_MASK] = 1e30
    dirty_words, dirty_kb = tensor(dirty_words), tensor(dirty_kb)
    clean = net([words, question, kb], words_mask=WORDS_MASK, kb_mask=KB_MASK)
    out = net([dirty_words, question, dirty_kb], words_mask=WORDS_MASK, kb_mask=KB_MASK)

    def loss(dirty_words, dirty_kb):
        outputs = net([dirty_words, question, dirty_kb], words_mask=WORDS_MASK, kb_mask=KB_MASK)
        return sum(keras.ops.sum(o * (1.0 + i)) for i, o in enumerate(outputs))
    for a, b in zip(clean, out):
        np.testing.assert_array_equal(a, b)
    memory, control_attention, read_attention, self_attention = (np.asarray(o) for o in out)
    # Attention maps sum to one over the real positions and are zero elsewhere.
    np.testing.assert_allclose(control_attention.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(read_attention.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(self_attention.sum(-1), 1.0, atol=1e-6)
    assert np.all(control_attention.transpose(1, 0, 2)[:, ~WORDS_MASK] == 0)
    assert np.all(read_attention.transpose(1, 0, 2)[:, ~KB_MASK] == 0)
    assert np.all(np.triu(np.ones((P, P)), 1)[None] * self_attention == 0)
    g_words, g_kb, *weight_grads = grads(loss, [dirty_words, dirty_kb], net.trainable_weights)
    assert all(g is not None and np.all(np.isfinite(keras.ops.convert_to_numpy(g))) for g in weight_grads + [g_words, g_kb])
    assert np.all(np.asarray(g_words)[~WORDS_MASK] == 0)
    assert np.all(np.asarray(g_kb)[~KB_MASK] == 0)


def test_all_padded_inputs_give_finite_gradients():
    net = _network(self_attention=True, memory_gate=True)
    x = [tensor(v) for v in _inputs(3)]
    masks = dict(words_mask=np.zeros((B, S), bool), kb_mask=np.zeros((B, N), bool))
    out = net(x, **masks)
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(o))) for o in out)
    weight_grads = grads(lambda: sum(keras.ops.sum(o) for o in net(x, **masks)), variables=net.trainable_weights)
    assert all(g is not None and np.all(np.isfinite(keras.ops.convert_to_numpy(g))) for g in weight_grads)


def test_mask_sources_agree():
    """Call arguments, dict entries and Keras mask propagation give the same result."""
    net = _network()
    words, question, kb = _inputs(4)
    words[~WORDS_MASK] = 0.0
    kb[~KB_MASK] = 0.0
    by_args = net([words, question, kb], words_mask=WORDS_MASK, kb_mask=KB_MASK)
    by_dict = net({"words": words, "question": question, "kb": kb,
                   "words_mask": WORDS_MASK, "kb_mask": KB_MASK})
    w_in, q_in, kb_in = keras.Input((S, D)), keras.Input((DQ,)), keras.Input((N, DKB))
    masked = [keras.layers.Masking(0.0)(w_in), q_in, keras.layers.Masking(0.0)(kb_in)]
    by_keras = keras.Model([w_in, q_in, kb_in], net(masked))([words, question, kb])
    unmasked = net([words, question, kb])
    for a, b, c in zip(by_args, by_dict, by_keras):
        np.testing.assert_allclose(b, a, atol=1e-6)
        np.testing.assert_allclose(c, a, atol=1e-6)
    assert not np.allclose(unmasked[0], by_args[0])


def test_variational_memory_dropout_uses_one_mask_for_all_steps():
    for variational in (True, False):
        net = _network(memory_dropout=0.5, variational_memory_dropout=variational, seed=7)
        seen = []
        call = net.cell.call

        def spy(*args, memory_dropout_mask=None, **kwargs):
            seen.append(memory_dropout_mask)
            return call(*args, memory_dropout_mask=memory_dropout_mask, **kwargs)

        net.cell.call = spy
        x = _inputs(5)
        eval_a, eval_b = net(x, training=False), net(x)
        assert all(m is None for m in seen)
        np.testing.assert_array_equal(eval_a[0], eval_b[0])
        seen.clear()
        train = net(x, training=True)
        assert len(seen) == P and all(m is not None for m in seen)
        masks = np.stack([np.asarray(m) for m in seen])
        assert set(np.unique(masks)) <= {0.0, 2.0}
        same = all(np.array_equal(masks[0], m) for m in masks[1:])
        assert same == variational
        assert not np.allclose(train[0], eval_a[0])


def test_dropout_compiles_with_xla():
    net = MACNetwork(max_steps=2, memory_dropout=0.3, read_dropout=0.2, seed=1)
    x = _inputs(6)
    if BACKEND == "tensorflow":
        train_call = compiled(lambda t: net(t, training=True))
    else:  # a jitted JAX function is pure: the dropout seed state goes in and out
        net(x)
        step = compiled(lambda trainable, state, t: net.stateless_call(trainable, state, t, training=True))
        state = [v.value for v in net.non_trainable_variables]

        def train_call(t):
            nonlocal state
            out, state = step([v.value for v in net.trainable_variables], state, t)
            return out

    first, second = np.asarray(train_call(x)), np.asarray(train_call(x))
    assert np.all(np.isfinite(first)) and not np.allclose(first, second)


def test_shapes_and_default_output():
    net = MACNetwork(max_steps=2)
    x = _inputs()
    memory = net(x)
    assert memory.shape == (B, D)
    assert net.compute_output_shape([v.shape for v in x]) == (B, D)
    sym = [keras.Input((None, D)), keras.Input((DQ,)), keras.Input((None, DKB))]
    out = MACNetwork(max_steps=2, return_attention=True, self_attention=True)(sym)
    assert [tuple(o.shape) for o in out] == [(None, D), (None, 2, None), (None, 2, None), (None, 2, 2)]


def test_layer_contract_default(tmp_path):
    run_layer_contract(MACNetwork, {"max_steps": 2}, _inputs(), tmp_path=tmp_path)


def test_layer_contract_masked_full(tmp_path):
    # Masks as int32 (non-zero = real): Keras' fit under MirroredStrategy sums the
    # first batch over replicas while building, which fails for boolean inputs.
    words, question, kb = _inputs()
    inputs = {"words": words, "question": question, "kb": kb,
              "words_mask": WORDS_MASK.astype("int32"), "kb_mask": KB_MASK.astype("int32")}
    run_layer_contract(
        MACNetwork,
        {"max_steps": 2, "self_attention": True, "memory_gate": True,
         "return_attention": True, "read_activation": "elu"},
        inputs,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_steps": 0}, "Received: max_steps=0"),
        ({"max_steps": 2, "memory_dropout": 1.5}, "Received: memory_dropout=1.5"),
        ({"max_steps": 2, "read_dropout": "0.1"}, "Received: read_dropout='0.1'"),
        ({"max_steps": 2, "return_attention": "yes"}, "Received: return_attention='yes'"),
        ({"max_steps": 2, "variational_memory_dropout": 1},
         "Received: variational_memory_dropout=1"),
        ({"max_steps": 2, "read_activation": "relu"}, "Received: read_activation='relu'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MACNetwork(**kwargs)


def test_bad_inputs():
    words, question, kb = _inputs()
    with pytest.raises(ValueError, match=r"knowledge_base of shape \[batch, cells, d_kb\]"):
        MACNetwork(max_steps=2)([words, question, kb[:, 0]])
    with pytest.raises(ValueError, match=r"question of shape \[batch, d_q\]"):
        MACNetwork(max_steps=2)([words, question[:, None], kb])
    with pytest.raises(ValueError, match="keys"):
        MACNetwork(max_steps=2)({"words": words, "kb": kb})
    with pytest.raises(ValueError, match="kb_mask"):
        MACNetwork(max_steps=2)([words, question, kb], kb_mask=np.ones((B, N + 1), bool))
    with pytest.raises(ValueError, match="words_mask"):
        MACNetwork(max_steps=2)({"words": words, "question": question, "kb": kb,
                                 "words_mask": np.ones((B, S + 2), bool)})


def _retrieval_task(n, rng, keys=6, cells=4, values=4):
    """Each sample: ``cells`` (key, value) pairs with distinct keys; the question is one
    of the keys; the answer is the value stored with it."""
    key_ids = np.stack([rng.permutation(keys)[:cells] for _ in range(n)])
    value_ids = rng.integers(0, values, (n, cells))
    kb = np.concatenate([np.eye(keys)[key_ids], np.eye(values)[value_ids]], -1)
    pick = rng.integers(0, cells, n)
    question = np.eye(keys)[key_ids[np.arange(n), pick]]
    answer = value_ids[np.arange(n), pick]
    return kb.astype("float32"), question.astype("float32"), answer


def test_learns_key_value_retrieval():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    kb, question, answer = _retrieval_task(1024, rng)
    d = 16
    q_in, kb_in = keras.Input(question.shape[1:]), keras.Input(kb.shape[1:])
    q = keras.layers.Dense(d, activation="tanh")(q_in)
    words = keras.layers.Reshape((1, d))(q)
    memory = MACNetwork(max_steps=2)([words, q, keras.layers.Dense(d)(kb_in)])
    hidden = keras.layers.Dense(d, activation="elu")(keras.layers.Concatenate()([memory, q]))
    model = keras.Model([q_in, kb_in], keras.layers.Dense(4)(hidden))
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit([question, kb], answer, batch_size=64, epochs=12, verbose=0)
    kb_t, q_t, a_t = _retrieval_task(256, np.random.default_rng(1))
    _, accuracy = model.evaluate([q_t, kb_t], a_t, verbose=0)
    assert accuracy > 0.9, accuracy  # chance is 0.25


def test_memory_and_read_dropout_draw_different_numbers():
    # Audit 3: both dropouts were seeded with `seed`, so the read unit's first draw
    # repeated the memory mask's uniforms (stateless RNG, one seed, one counter).
    net = MACNetwork(max_steps=1, memory_dropout=0.5, read_dropout=0.5, seed=3)
    memory_u = np.ravel(keras.random.uniform((B, D), seed=net.seed_generator))
    read_u = np.ravel(keras.random.uniform((B, N, D), seed=net.cell.read_unit.seed_generator))
    assert not np.array_equal(memory_u, read_u[: B * D])
    assert MACNetwork.from_config(net.get_config()).get_config() == net.get_config()
    with pytest.raises(ValueError, match="Received: seed='3'"):
        MACNetwork(max_steps=1, seed="3")


def test_batch_size_mismatch_is_a_clear_error():
    # Audit 6: question/words and knowledge base with different batch sizes raised a raw
    # TensorFlow ConcatOp / Mul error; now a ValueError naming the inputs and shapes.
    words, question, kb = _inputs()
    with pytest.raises(ValueError, match=r"same batch size.*knowledge_base shape=\(3, 5, 6\)"):
        MACNetwork(max_steps=2)([words, question, np.concatenate([kb, kb[:1]])])
    with pytest.raises(ValueError, match=r"same batch size.*question shape=\(1, 3\)"):
        MACNetwork(max_steps=2)({"words": words, "question": question[:1], "kb": kb})
    symbolic = [keras.Input((S, D), batch_size=2), keras.Input((DQ,), batch_size=2),
                keras.Input((N, DKB), batch_size=4)]
    with pytest.raises(ValueError, match=r"knowledge_base shape=\(4, 5, 6\)"):
        MACNetwork(max_steps=2)(symbolic)


def test_numpy_integer_seeds_are_seeds():
    # Audit 6: a numpy integer seed was refused ("must be an integer").
    import json

    net = MACNetwork(max_steps=1, memory_dropout=0.5, read_dropout=0.5, seed=np.int64(3))
    config = net.get_config()
    assert config["seed"] == 3 and type(config["seed"]) is int
    json.dumps(config)
    assert net.cell.read_unit.seed == 4
    with pytest.raises(ValueError, match="Received: seed=1.0"):
        MACNetwork(max_steps=1, seed=1.0)


@pytest.mark.parametrize("seed", [0, 2**31 - 1, 2**31, 2**32, 2**63 - 1, np.uint64(2**63 - 1)])
def test_any_valid_seed_seeds_both_dropouts(seed):
    # review: the read dropout was seeded with seed + 1, which overflowed int64 for
    # seed=2**63 - 1 ("Can't convert Python sequence with out-of-range integer"); JAX's
    # uint32 generator state held no seed of 2**32 or more.
    net = MACNetwork(max_steps=2, memory_dropout=0.5, read_dropout=0.5, seed=seed)
    out = np.asarray(net(_inputs(7), training=True))
    assert out.shape == (B, D) and np.all(np.isfinite(out))
    assert net.get_config()["seed"] == int(seed) and net.cell.read_unit.seed == (int(seed) + 1) % 2**31
    assert MACNetwork.from_config(net.get_config()).get_config() == net.get_config()
    memory_u = np.ravel(keras.random.uniform((B, D), seed=net.seed_generator))
    read_u = np.ravel(keras.random.uniform((B, D), seed=net.cell.read_unit.seed_generator))
    assert not np.array_equal(memory_u, read_u)


def test_seeds_below_2_to_the_31_keep_their_streams():
    net = MACNetwork(max_steps=1, memory_dropout=0.5, read_dropout=0.5, seed=12345)
    want = np.ravel(keras.random.uniform((B, D), seed=keras.random.SeedGenerator(12345)))
    np.testing.assert_array_equal(np.ravel(keras.random.uniform((B, D), seed=net.seed_generator)), want)
    assert net.cell.read_unit.seed == 12346


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64, 1.0, True])
def test_invalid_seeds_are_refused(seed):
    match = r"`seed` must be an integer in \[0, 2\*\*63 - 1\] or None|`seed` must be an integer or None"
    with pytest.raises(ValueError, match=match):
        MACNetwork(max_steps=1, read_dropout=0.5, seed=seed)
    with pytest.raises(ValueError, match=f"Received: seed={seed!r}"):
        ReadUnit(dropout=0.5, seed=seed)


def test_weights_of_one_shape_start_different():
    # Audit 11: one unseeded initializer instance filled every weight of a shape alike:
    # initial_control == initial_memory, every step's question projection the same.
    net = MACNetwork(max_steps=3)
    net(list(_inputs()))
    assert not np.allclose(np.asarray(net.initial_control), np.asarray(net.initial_memory))
    steps = np.asarray(net.cell.control_unit.question_kernel)
    assert not np.allclose(steps[0], steps[1]) and not np.allclose(steps[1], steps[2])
    net = MACNetwork(max_steps=2, self_attention=True)
    net(list(_inputs()))
    write = net.cell.write_unit
    assert not np.allclose(np.asarray(write.self_memory_kernel), np.asarray(write.info_kernel))


@pytest.mark.parametrize("empty", ["batch", "words", "cells"])
def test_empty_batches_words_and_cells_give_zeros_not_an_error(empty):
    # An empty batch (e.g. a replica's share of a last batch smaller than the number
    # of replicas), a question without words or a
    # knowledge base without cells failed with "InvalidArgumentError: Cannot compute
    # the max of an empty tensor" (the attention's max over an empty axis).
    words, question, kb = _inputs()
    if empty == "batch":
        words, question, kb = words[:0], question[:0], kb[:0]
    elif empty == "words":
        words = words[:, :0]
    else:
        kb = kb[:, :0]
    net = _network(self_attention=True, memory_gate=True)
    memory, control_att, read_att, self_att = (np.asarray(x) for x in net([words, question, kb]))
    assert memory.shape == (len(words), D) and np.isfinite(memory).all()
    assert control_att.shape == (len(words), P, words.shape[1]) and np.isfinite(control_att).all()
    assert read_att.shape == (len(words), P, kb.shape[1]) and np.isfinite(read_att).all()
    assert self_att.shape == (len(words), P, P) and np.isfinite(self_att).all()


def test_seeded_initializers_give_distinct_weights_of_one_shape_and_reproduce():
    # With a seeded initializer (what reproducible runs pass) every weight of one shape
    # started equal: initial_control == initial_memory, and the read unit's
    # memory_kernel, the write unit's self_memory_kernel and info_kernel (all d x d).
    def make():
        net = MACNetwork(
            max_steps=2, self_attention=True, memory_gate=True,
            kernel_initializer=keras.initializers.GlorotUniform(seed=1),
            bias_initializer=keras.initializers.RandomNormal(seed=5),
            state_initializer=keras.initializers.RandomNormal(seed=2),
        )
        net(list(_inputs()))
        return net

    net = make()
    assert not np.allclose(np.asarray(net.initial_control), np.asarray(net.initial_memory))
    cell = net.cell
    squares = [cell.read_unit.memory_kernel, cell.write_unit.self_memory_kernel, cell.write_unit.info_kernel]
    columns = [cell.control_unit.attention_kernel, cell.read_unit.attention_kernel,
               cell.write_unit.self_attention_kernel, cell.write_unit.gate_kernel]
    biases = [cell.read_unit.memory_bias, cell.read_unit.kb_bias, cell.read_unit.concat_bias,
              cell.control_unit.control_question_bias, cell.write_unit.bias]
    for group in (squares, columns, biases):
        values = [np.asarray(w) for w in group]
        for i in range(len(values)):
            for j in range(i):
                assert not np.allclose(values[i], values[j]), (group[i].path, group[j].path)
    again = make()  # the same seeds give the same weights
    for w, v in zip(net.weights, again.weights):
        np.testing.assert_array_equal(np.asarray(w), np.asarray(v))


@pytest.mark.parametrize("make, n_inputs", [
    (lambda: ControlUnit(max_steps=2), 3),
    (lambda: ReadUnit(), 3),
    (lambda: WriteUnit(), 3),
    (lambda: WriteUnit(self_attention=True), 5),
    (lambda: MACCell(max_steps=2), 5),
    (lambda: MACNetwork(max_steps=2), 3),
])
@pytest.mark.parametrize("rank", ["as many axes as inputs", "another rank"])
def test_a_single_tensor_for_a_list_of_inputs_is_a_clear_error(make, n_inputs, rank):
    # A single tensor where the MAC layers take a list was read as the list of its
    # shape's entries: with as many axes as the layer has inputs it failed with
    # "TypeError: 'NoneType' object is not iterable" ('int' object eagerly), otherwise
    # it said "Received: 3" (the rank, as if three inputs had been given).
    axes = (4,) * (n_inputs - 1 if rank == "as many axes as inputs" else n_inputs)  # without batch
    for x in (keras.Input(axes), np.zeros((2,) + axes, "float32")):
        with pytest.raises(ValueError, match=r"expects a list of inputs .*Received: a single input of shape \("):
            make()(x)
    with pytest.raises(ValueError, match=r"Received: 2 inputs"):
        make()([keras.Input((4,)), keras.Input((4,))])


def test_a_dict_mask_entry_of_none_is_no_mask():
    # audit 4: {"kb_mask": None} (an optional entry given as None) failed with
    # "AttributeError: 'NoneType' object has no attribute 'shape'".
    words, question, kb = _inputs(5)
    net = MACNetwork(max_steps=2)  # unbuilt: the first call builds from the dict too
    out = net({"words": words, "question": question, "kb": kb, "words_mask": WORDS_MASK, "kb_mask": None})
    want = net([words, question, kb], words_mask=WORDS_MASK)
    np.testing.assert_array_equal(out, want)
    out = net({"words": words, "question": question, "kb": kb, "words_mask": None, "kb_mask": None})
    np.testing.assert_array_equal(out, net([words, question, kb]))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("masked", [False, True])
def test_compiles_as_one_torch_graph(config, masked):
    # torch audit: every attention's softmax took its largest logit with
    # ops.max(..., initial=-inf), whose Keras torch implementation tests
    # isinstance(result.values, torch.Tensor); dynamo cannot trace that for a plain
    # tensor ("builtin isinstance() cannot determine type of argument") and broke the
    # graph at every attention of every step. With self-attention the graph still
    # breaks at every step for another reason, Keras' own: its Layer.__call__ reads the
    # masks of the cell's inputs with hasattr, which dynamo does not support there
    # ("Unsupported hasattr call", keras/src/backend/common/tensor_attributes.py).
    if BACKEND != "torch":
        pytest.skip(f"torch.compile is torch's (backend is {BACKEND})")
    import torch

    from tests.layers.rladder.loops import assert_compiles_as_one_torch_graph

    net = _network(**CONFIGS[config])
    words, question, kb = (tensor(v) for v in _inputs(7))
    masks = (tensor(WORDS_MASK), tensor(KB_MASK)) if masked else (None, None)

    def run(kb):
        return net([words, question, kb], words_mask=masks[0], kb_mask=masks[1])

    whole = not CONFIGS[config].get("self_attention", False)
    if not whole:
        torch._dynamo.reset()
        reasons = [
            (str(r.reason).splitlines()[0], [f"{f.filename}:{f.lineno} {f.name}" for f in r.user_stack])
            for r in torch._dynamo.explain(run)(kb).break_reasons
        ]
        ours = [r for r in reasons if "isinstance" in r[0] or any(f.endswith((" max", " min")) for f in r[1])]
        assert not ours, ours[:3]
        assert all("hasattr" in r[0] for r in reasons), reasons[:3]
    assert_compiles_as_one_torch_graph(run, kb, whole=whole)


@pytest.mark.parametrize("use_previous_control", [True, False])
@pytest.mark.parametrize("self_attention", [True, False])
def test_every_weight_gets_a_gradient(use_previous_control, self_attention):
    # Audit (2026-12-06): with use_previous_control=False and self_attention=False no
    # unit reads c_0, yet the network held an initial_control weight; fit warned that
    # it had no gradient. The network now holds it only where a unit reads it.
    net = _network(use_previous_control=use_previous_control, self_attention=self_attention, memory_gate=True)
    assert (net.initial_control is not None) == (use_previous_control or self_attention)
    x = [tensor(v) for v in _inputs(5)]
    pull = tensor(np.random.default_rng(6).standard_normal((B, D)).astype("float32"))
    weight_grads = grads(lambda: keras.ops.sum(net(x)[0] * pull), variables=net.trainable_weights)
    for weight, g in zip(net.trainable_weights, weight_grads):
        assert g is not None, weight.path
        g = keras.ops.convert_to_numpy(g)
        if weight.path.endswith("self_attention_bias"):
            # shifts every step's self-attention logit alike, which the softmax ignores
            # (WriteUnit's docstring): its gradient is zero up to rounding. TensorFlow's
            # rounding left -6e-8 here (2026-12-07), which an "any nonzero" check took for a gradient;
            # torch gives exactly zero.
            np.testing.assert_allclose(g, 0.0, atol=1e-6, err_msg=weight.path)
            continue
        assert np.any(g != 0), weight.path


def test_files_that_hold_an_unread_initial_control_load(tmp_path):
    """Earlier code saved initial_control in every configuration (store entry "0",
    initial_memory "1"); a network without a unit that reads c_0 loads such a file."""
    import h5py
    import zipfile

    def model():
        inputs = [keras.Input((S, D)), keras.Input((DQ,)), keras.Input((N, DKB))]
        net = MACNetwork(max_steps=P, use_previous_control=False)
        return keras.Model(inputs, net(inputs)), net

    saved, net = model()
    ref.randomize(net)
    assert net.initial_control is None and len(net.weights) == len(net.cell.weights) + 1
    x = _inputs(7)
    want = keras.ops.convert_to_numpy(saved(x))
    new_file, old_file = tmp_path / "new.keras", tmp_path / "old.keras"
    saved.save(new_file)
    # the file as earlier code wrote it: an unread initial_control first
    with zipfile.ZipFile(new_file) as src, zipfile.ZipFile(old_file, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "model.weights.h5":
                (tmp_path / "w.h5").write_bytes(data)
                with h5py.File(tmp_path / "w.h5", "r+") as f:
                    own = f["layers/mac_network/vars"]
                    assert sorted(own.keys()) == ["0"]
                    own.move("0", "1")
                    own.create_dataset("0", data=np.full((D,), 123.0, "float32"))
                data = (tmp_path / "w.h5").read_bytes()
            dst.writestr(item, data)
    for path in (new_file, old_file):
        loaded = keras.models.load_model(path)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), want)
        fresh, _ = model()
        fresh.load_weights(path)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(fresh(x)), want)
