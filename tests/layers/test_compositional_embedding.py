"""CompositionalEmbedding: reference conformance, fixed codes, masking, contract, errors."""

import pathlib
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

from keras_capsules.layers import CompositionalEmbedding
from keras_capsules.layers.compositional_embedding import default_num_codewords
from tests.backends import BACKEND, grads, require_float64, tensor, tensorflow_only, value_and_grads
from tests.harness import run_layer_contract
from tests.refdata import load_cccaps

REPO = pathlib.Path(__file__).resolve().parents[2]


def _reference_layer(ref, dtype="float32"):
    layer = CompositionalEmbedding(
        int(ref["num_embeddings"]), int(ref["embedding_dim"]),
        num_codebooks=int(ref["num_codebook"]), dtype=dtype,
    )
    assert layer.num_codewords == int(ref["num_codeword"])  # K = 2 by default
    layer.build()
    layer.codes.assign(ref["code"].astype(dtype))
    layer.codebook.assign(ref["codebook"].astype(dtype))
    return layer


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_reference(dtype):
    if dtype == "float64":
        require_float64()
    ref = load_cccaps("cc_embedding_cwc")
    layer = _reference_layer(ref, dtype)
    ids = tensor(ref["ids"])  # id 0 is embedded like any id
    out = layer(ids)
    cotangent = tensor(ref["cotangent"], dtype)
    losses = {"sum": lambda: keras.ops.sum(layer(ids)),
              "cot": lambda: keras.ops.sum(layer(ids) * cotangent)}
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out), ref["out"], **tol)
    for key, loss in losses.items():
        g_code, g_book = grads(loss, variables=[layer.codes, layer.codebook])
        np.testing.assert_allclose(np.asarray(g_code), ref[f"grad_{key}_code"], err_msg=key, **tol)
        np.testing.assert_allclose(np.asarray(g_book), ref[f"grad_{key}_codebook"], err_msg=key, **tol)


@pytest.mark.parametrize(
    "vocab,books,k",
    [(50, 8, 2), (60000, 8, 4), (65536, 8, 4), (65537, 8, 5), (6561, 8, 3), (6562, 8, 4),
     (1, 8, 1), (1000, 1, 1000), (10**6, 3, 100), (10**6 + 1, 3, 101), (2**40, 20, 4)],
)
def test_default_number_of_codewords_is_exact(vocab, books, k):
    assert default_num_codewords(vocab, books) == k
    assert k**books >= vocab and (k == 1 or (k - 1) ** books < vocab)


def test_parameter_count_is_about_half_of_an_embedding():
    vocab, dim, books = 60000, 64, 8
    layer = CompositionalEmbedding(vocab, dim, num_codebooks=books)
    layer.build()
    assert layer.num_codewords == 4
    k = layer.num_codewords
    assert layer.count_params() == vocab * books * k + books * k * dim == 1_922_048
    standard = vocab * dim
    assert standard == 3_840_000
    assert layer.count_params() <= 0.55 * standard  # >= 45% fewer (here 49.9%)
    # The deployable fixed-code form stores V*M small integers and the codebooks.
    fixed = layer.to_fixed_codes()
    assert fixed.count_params() == vocab * books + books * k * dim


def _numpy_fixed(codes, codebook, ids):
    m = np.arange(codes.shape[1])
    return codebook[m, codes[ids]].sum(-2)  # [..., M, D] summed over codebooks


def test_fixed_codes_embed_by_codeword_sums():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, size=(20, 4))
    layer = CompositionalEmbedding(20, 5, num_codebooks=4, num_codewords=3, codes=codes)
    ids = rng.integers(0, 20, size=(3, 6))
    out = np.asarray(layer(ids))
    assert layer.fixed_codes and layer.codes.dtype == "int32" and not layer.codes.trainable
    assert [w.name for w in layer.trainable_weights] == ["codebook"]
    np.testing.assert_array_equal(layer.hard_codes(), codes)
    np.testing.assert_allclose(out, _numpy_fixed(codes, np.asarray(layer.codebook), ids), rtol=1e-6)
    (grad,) = grads(lambda: keras.ops.sum(layer(ids) ** 2), variables=layer.trainable_weights)
    assert np.all(np.isfinite(np.asarray(grad)))


def test_export_hard_codes_from_a_learned_layer(tmp_path):
    ref = load_cccaps("cc_embedding_cwc")
    learned = _reference_layer(ref)
    fixed = learned.to_fixed_codes(name="deployed")
    hard = np.argmax(ref["code"], axis=-1)
    np.testing.assert_array_equal(fixed.hard_codes(), hard)
    np.testing.assert_array_equal(np.asarray(fixed.codebook), ref["codebook"])
    ids = ref["ids"]
    # atol: a sum of float32 codewords that cancel rounds by the summation order (XLA on JAX)
    np.testing.assert_allclose(
        np.asarray(fixed(ids)), _numpy_fixed(hard, ref["codebook"], ids), rtol=1e-6, atol=1e-6
    )
    # With (nearly) one-hot learned codes the fixed layer reproduces the learned one.
    learned.codes.assign(30.0 * (np.eye(2)[hard] - 0.5).astype("float32"))
    np.testing.assert_allclose(np.asarray(fixed(ids)), np.asarray(learned(ids)), rtol=1e-5, atol=1e-5)
    # The code table travels with the weights of a .keras file, not in the config.
    config = fixed.get_config()
    assert config["fixed_codes"] is True and "codes" not in config
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, fixed(inputs))
    model.save(tmp_path / "fixed.keras")
    loaded = keras.saving.load_model(tmp_path / "fixed.keras")
    np.testing.assert_array_equal(loaded.layers[-1].hard_codes(), hard)
    np.testing.assert_allclose(np.asarray(loaded(ids)), np.asarray(fixed(ids)), rtol=1e-6)


def test_mask_zero():
    layer = CompositionalEmbedding(10, 4, num_codebooks=2, mask_zero=True)
    ids = np.array([[1, 2, 0], [3, 0, 0]])
    out = layer(ids)
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(ids)), ids != 0)
    np.testing.assert_array_equal(np.asarray(out._keras_mask), ids != 0)
    assert CompositionalEmbedding(10, 4).compute_mask(ids) is None
    # In a model the mask reaches the next layer.
    tokens = keras.Input((None,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(layer(tokens))
    model = keras.Model(tokens, pooled)
    np.testing.assert_allclose(np.asarray(model(ids[:, :2]))[0], np.asarray(model(ids))[0], rtol=1e-6)


def test_out_of_range_ids_raise_in_eager_mode():
    layer = CompositionalEmbedding(10, 4, num_codebooks=2)
    with pytest.raises(ValueError, match=r"\[0, 10\).*\[10\]"):
        layer(np.array([[1, 10]]))
    with pytest.raises(ValueError, match=r"\[-1\]"):
        layer(np.array([-1, 3]))
    fixed = CompositionalEmbedding(10, 4, num_codebooks=2, codes=np.zeros((10, 2), int))
    with pytest.raises(ValueError, match="input_dim"):
        fixed(np.array([12]))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(input_dim=0, output_dim=4), "input_dim"),
        (dict(input_dim=10, output_dim=2.0), "output_dim"),
        (dict(input_dim=10, output_dim=4, num_codebooks=0), "num_codebooks"),
        (dict(input_dim=10, output_dim=4, num_codewords=-2), "num_codewords"),
        # num_codewords=1 gave every id the same embedding, silently.
        (dict(input_dim=10, output_dim=4, num_codewords=1), "num_codewords=1, input_dim=10"),
        (dict(input_dim=10, output_dim=4, num_codebooks=2, num_codewords=1,
              codes=np.zeros((10, 2), int)), "num_codewords=1"),
        (dict(input_dim=10, output_dim=4, mask_zero="yes"), "mask_zero"),
        (dict(input_dim=10, output_dim=4, fixed_codes=1), "fixed_codes"),
        (dict(input_dim=10, output_dim=4, codes=np.zeros((10, 8), int), fixed_codes=False),
         "fixed_codes"),
        (dict(input_dim=10, output_dim=4, codes=np.zeros((9, 8), int)), r"codes with shape \[9, 8\]"),
        (dict(input_dim=10, output_dim=4, codes=np.zeros((10, 8))), "dtype float64"),
        (dict(input_dim=10, output_dim=4, num_codebooks=2, codes=np.full((10, 2), 4)),
         r"values in \[4, 4\]"),
        # they act on learned codes only: with fixed codes they were silently ignored
        (dict(input_dim=10, output_dim=4, fixed_codes=True, codes_regularizer="l2"), "codes_regularizer"),
        (dict(input_dim=10, output_dim=4, num_codebooks=2, codes=np.zeros((10, 2), int),
              codes_constraint="non_neg"), "codes_constraint"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"Received: .*{message}"):
        CompositionalEmbedding(**kwargs)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        # (built, TensorFlow said "Can't convert Python sequence with out-of-range integer to
        # Tensor" or "Shape [...] would have more than 2**63 - 1 elements", naming no argument)
        (dict(input_dim=4, output_dim=4, num_codebooks=2**60, num_codewords=3),
         r"`codes` weight would hold input_dim \* num_codebooks \* num_codewords = 4 \* 1152921504606846976 "
         r"\* 3 numbers, .*Received: input_dim=4, num_codebooks=1152921504606846976, num_codewords=3$"),
        (dict(input_dim=4, output_dim=4, num_codebooks=2**60, num_codewords=3, fixed_codes=True),
         r"`codebook` weight would hold num_codebooks \* num_codewords \* output_dim = .*Received: "
         r"num_codebooks=1152921504606846976, num_codewords=3, output_dim=4$"),
        (dict(input_dim=10, output_dim=10**20, num_codebooks=2), r"`codebook` .*output_dim=100000000000000000000$"),
        (dict(input_dim=10**20, output_dim=4, num_codebooks=2, num_codewords=2, fixed_codes=True),
         r"`codes` weight would hold input_dim \* num_codebooks = 100000000000000000000 \* 2 numbers or more"),
    ],
)
def test_sizes_that_no_tensor_can_hold_are_refused_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        CompositionalEmbedding(**kwargs)
    assert "more than the 2**63 - 1 that a tensor can hold" in str(info.value)


def test_a_huge_number_of_codebooks_is_refused_at_once_not_a_hang():
    # audit s66: num_codebooks=1e20 hung the constructor (default_num_codewords computed
    # 2 ** 10**20 exactly); 1e9 took 5 s there. In a subprocess, so that a hang fails the
    # test (a Python integer power cannot be interrupted) instead of the whole run.
    script = (
        "from keras_capsules.layers import CompositionalEmbedding\n"
        "from keras_capsules.layers.compositional_embedding import default_num_codewords\n"
        "assert default_num_codewords(100, 10**20) == 2 and default_num_codewords(1, 10**20) == 1\n"
        "assert CompositionalEmbedding(100, 4, num_codebooks=10**9).num_codewords == 2\n"
        "try:\n"
        "    CompositionalEmbedding(100, 4, num_codebooks=10**20)\n"
        "except ValueError as error:\n"
        "    print(error)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == (
        "CompositionalEmbedding's `codes` weight would hold input_dim * num_codebooks = 100 * "
        "100000000000000000000 numbers or more, more than the 2**63 - 1 that a tensor can hold: lower "
        "input_dim or num_codebooks. Received: input_dim=100, num_codebooks=100000000000000000000"
    )


def test_mixed_precision_with_fixed_codes():
    codes = np.random.default_rng(0).integers(0, 2, size=(12, 3))
    for policy in ("mixed_float16", "mixed_bfloat16"):
        layer = CompositionalEmbedding(12, 6, num_codebooks=3, num_codewords=2, codes=codes,
                                       dtype=policy)
        out = layer(np.array([[1, 5, 11]]))
        _, _, (grad,) = value_and_grads(
            lambda: keras.ops.sum(keras.ops.cast(layer(np.array([[1, 5, 11]])), "float32")),
            variables=layer.trainable_weights,
        )
        assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
        assert layer.codebook.dtype == "float32" and layer.codes.dtype == "int32"
        assert np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.parametrize("mask_zero", [False, True])
def test_layer_contract_learned_codes(mask_zero, tmp_path):
    ids = np.random.default_rng(7).integers(0, 30, size=(4, 5)).astype("int32")
    ids[1, 3:] = 0
    run_layer_contract(
        CompositionalEmbedding,
        dict(input_dim=30, output_dim=6, num_codebooks=3, mask_zero=mask_zero,
             codebook_regularizer="l2"),
        ids, tmp_path=tmp_path,
    )


def test_layer_contract_fixed_codes(tmp_path):
    ids = np.random.default_rng(7).integers(0, 30, size=(4, 5)).astype("int32")
    codes = np.random.default_rng(8).integers(0, 4, size=(30, 3))
    run_layer_contract(
        CompositionalEmbedding,
        dict(input_dim=30, output_dim=6, num_codebooks=3, num_codewords=4, codes=codes),
        ids, tmp_path=tmp_path,
    )


@pytest.mark.parametrize("kwargs", [dict(codes_regularizer="l2"), dict(codes_constraint="non_neg")])
def test_to_fixed_codes_of_a_layer_with_a_codes_regularizer_or_constraint(kwargs):
    # to_fixed_codes() raised a ValueError: it passed the learned codes' regularizer /
    # constraint on to the fixed-code constructor, which refuses them.
    layer = CompositionalEmbedding(10, 4, num_codebooks=2, num_codewords=3,
                                   codebook_regularizer="l1", **kwargs)
    layer.build()
    fixed = layer.to_fixed_codes()
    config = fixed.get_config()
    assert fixed.fixed_codes and config["codes_regularizer"] is None
    assert config["codes_constraint"] is None
    assert config["codebook_regularizer"] == layer.get_config()["codebook_regularizer"]
    np.testing.assert_array_equal(fixed.hard_codes(), layer.hard_codes())


def test_a_codes_initializer_of_fixed_codes_warns_that_it_has_no_effect():
    # helper-181: it was taken, recorded in the config and never used
    codes = np.zeros((10, 2), "int32")
    with pytest.warns(UserWarning, match=r"codes_initializer='Ones' has no effect: it needs learned codes"):
        layer = CompositionalEmbedding(10, 4, num_codebooks=2, num_codewords=3, codes=codes, codes_initializer="ones")
    with pytest.warns(UserWarning, match="codes_initializer='Ones' has no effect"):  # and again from its config
        CompositionalEmbedding.from_config(layer.get_config())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        # the default (also as a fixed layer's saved config holds it), learned codes, to_fixed_codes
        fixed = CompositionalEmbedding(10, 4, num_codebooks=2, num_codewords=3, codes=codes)
        CompositionalEmbedding.from_config(fixed.get_config())
        learned = CompositionalEmbedding(10, 4, num_codebooks=2, num_codewords=3, codes_initializer="ones")
        learned.build()
        learned.to_fixed_codes()


@pytest.mark.parametrize("kwargs", [{"codes": np.zeros((10, 2), "int32")}, {"fixed_codes": False}])
def test_to_fixed_codes_refuses_codes_arguments(kwargs):
    layer = CompositionalEmbedding(10, 4, num_codebooks=2, num_codewords=3)
    layer.build()
    with pytest.raises(ValueError, match=f"Received: {next(iter(kwargs))}="):
        layer.to_fixed_codes(**kwargs)


def test_single_id_vocabulary_gives_no_softmax_warning():
    # input_dim=1 (num_codewords=1) made Keras warn "softmax over axis -1 ... has size 1".
    layer = CompositionalEmbedding(1, 3, num_codebooks=2, codebook_initializer="ones")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = layer(np.zeros((2, 4), "int32"))
    np.testing.assert_allclose(np.asarray(out), 2.0)


def test_nan_and_fractional_float_ids_raise_in_eager_mode():
    # NaN ids passed the check (a GatherV2 error on index -2**31); 2.5 was cut to id 2.
    layer = CompositionalEmbedding(10, 4, num_codebooks=2)
    with pytest.raises(ValueError, match=r"\[0, 10\).*\[nan\]"):
        layer(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"\[2\.5\]"):
        layer(np.array([[2.5, 3.0]]))
    np.testing.assert_array_equal(np.asarray(layer(np.array([[2.0]]))), np.asarray(layer(np.array([[2]]))))


@pytest.mark.parametrize("fixed", [False, True])
def test_ragged_ids_as_in_keras_embedding(fixed):
    # Ragged ids failed with "TypeError: object of type 'RaggedTensor' has no len()".
    tensorflow_only("tf.RaggedTensor ids")
    import tensorflow as tf

    codes = np.arange(20).reshape(10, 2) % 4 if fixed else None
    layer = CompositionalEmbedding(10, 3, num_codebooks=2, mask_zero=True, codes=codes)
    ids = tf.ragged.constant([[1, 2, 0], [4]])
    out = layer(ids)
    assert isinstance(out, tf.RaggedTensor) and out.shape.as_list() == [2, None, 3]
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(layer(np.array([1, 2, 0]))), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out[1]), np.asarray(layer(np.array([4]))), rtol=1e-6)
    assert layer.compute_mask(ids).to_list() == [[True, True, False], [True]]
    with pytest.raises(ValueError, match=r"\[12\]"):
        layer(tf.ragged.constant([[1, 12]]))
    # Audit s65: the symbolic output of a ragged input was not ragged (Embedding's is)
    ragged_input = keras.Input((None,), dtype="int32", ragged=True)
    assert layer(ragged_input).ragged and not layer(keras.Input((None,), dtype="int32")).ragged


@pytest.mark.parametrize("rank", [0, 1, 2, 3, 4, 5, 6])
def test_ids_of_any_rank_embed_id_by_id(rank):
    # Ids of rank 4 or more ([batch, documents, sentences, words]) failed with
    # "Output subscripts contain a label appearing more than once": the einsum letter
    # of the fourth id axis was "d", also the embedding axis. (A symbolic model built,
    # and failed only when it ran.)
    layer = CompositionalEmbedding(10, 3, num_codebooks=2)
    ids = np.arange(2**rank).reshape((2,) * rank) % 10
    out = np.asarray(layer(ids))
    assert out.shape == (2,) * rank + (3,)
    table = np.asarray(layer(np.arange(10)))  # [10, 3], one row per id
    np.testing.assert_allclose(out, table[ids], rtol=1e-6, atol=1e-7)
    model = keras.Sequential([keras.Input((2,) * max(rank - 1, 0), dtype="int32"), layer])
    if rank:
        np.testing.assert_allclose(np.asarray(model(ids)), table[ids], rtol=1e-6, atol=1e-7)


def test_numpy_booleans_are_booleans():
    # mask_zero=np.True_ and fixed_codes=np.True_ (e.g. read from a numpy config or a
    # tuner) were refused as "must be True or False", which every other layer accepts.
    layer = CompositionalEmbedding(10, 4, num_codebooks=2, mask_zero=np.True_, fixed_codes=np.False_)
    assert layer.mask_zero is True and layer.fixed_codes is False
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(np.array([[0, 3]]))), [[False, True]])
    config = layer.get_config()
    assert config["mask_zero"] is True and config["fixed_codes"] is False
    fixed = CompositionalEmbedding(10, 4, num_codebooks=2, fixed_codes=np.True_)
    assert fixed.fixed_codes is True
    with pytest.raises(ValueError, match="Received: mask_zero=1"):
        CompositionalEmbedding(10, 4, mask_zero=1)


def test_a_list_of_tensors_or_string_ids_are_clear_errors():
    # A list of id tensors failed with "AttributeError: 'list' object has no attribute
    # 'shape'" (also in a functional model); string ids with "TypeError: '>=' not
    # supported between instances of 'bytes' and 'int'".
    layer = CompositionalEmbedding(10, 3, num_codebooks=2)
    with pytest.raises(ValueError, match=r"one tensor of integer ids.*Received: a list of 1"):
        layer([keras.Input((4,), dtype="int32")])
    with pytest.raises(ValueError, match=r"one tensor of integer ids.*Received: a list of 2"):
        layer([np.array([[1, 2]]), np.array([[3, 4]])])
    if BACKEND == "tensorflow":  # string tensors are TensorFlow's
        with pytest.raises(ValueError, match=r"integer ids.*Received: ids of dtype string"):
            layer(np.array([["a", "b"]]))


def test_learns_the_sentiment_of_bags_of_words():
    # DESIGN.md's check 7: a small model built with the layer learns a small task. Each
    # of 60 words is "positive" or "negative"; a sequence of 7 words is positive when most
    # of its words are. Mean of the (learned-code) embeddings -> Dense; chance is 50%.
    rng = np.random.default_rng(0)
    vocab = 60
    polarity = rng.integers(0, 2, vocab)
    ids = rng.integers(0, vocab, (1200, 7))
    labels = (polarity[ids].sum(axis=1) > 3).astype("int32")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((7,), dtype="int32")
    x = CompositionalEmbedding(vocab, 8, num_codebooks=3)(inputs)
    outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(ids[:1000], labels[:1000], batch_size=50, epochs=15, verbose=0)
    accuracy = model.evaluate(ids[1000:], labels[1000:], verbose=0)[1]
    assert accuracy > 0.85, accuracy


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("fixed", [False, True])
def test_out_of_range_ids_embed_as_nan_in_a_traced_call(fixed, jit_compile):
    """Audit s64: in a traced call (where the eager range check does not run) id -1
    embedded as id V-1 and -V as id 0; under XLA every id out of range was another row.
    They now embed as NaN, and the ids in range as in an eager call."""
    if not jit_compile and keras.backend.backend() in ("jax", "torch"):
        pytest.skip(f"{keras.backend.backend()} runs predict eagerly without jit_compile (the eager check raises)")
    kwargs = dict(codes=np.arange(20).reshape(10, 2) % 4, num_codewords=4) if fixed else {}
    layer = CompositionalEmbedding(10, 3, num_codebooks=2, **kwargs)
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, layer(inputs))
    model.compile(jit_compile=jit_compile)
    ids = np.array([[3, -1, 9, 10, -10, 0, 2**31 - 1]], "int32")
    got = model.predict(ids, verbose=0)
    valid = (ids >= 0) & (ids < 10)
    assert np.isnan(got[~valid]).all()
    np.testing.assert_allclose(got[valid], np.asarray(layer(ids[valid][None]))[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fixed", [False, True])
def test_int64_ids_of_2_pow_31_and_more_are_not_wrapped_in_a_traced_call(fixed):
    """review: ids were cast to int32, so in a traced call (where the eager range check
    does not run) int64 id 2**32 + 3 embedded as row 3 and 2**31 as a negative row.
    They are compared as int64, and embed as NaN."""
    tensorflow_only("int64 ids in a tf.function")
    import tensorflow as tf

    kwargs = dict(codes=np.arange(20).reshape(10, 2) % 4, num_codewords=4) if fixed else {}
    layer = CompositionalEmbedding(10, 3, num_codebooks=2, **kwargs)
    for jit_compile in (False, True):
        embed = tf.function(layer, jit_compile=jit_compile)
        np.testing.assert_allclose(
            np.asarray(embed(tf.constant([[3, 9]], tf.int64))), np.asarray(layer(np.array([[3, 9]]))), rtol=1e-6
        )
        got = np.asarray(embed(tf.constant([[1, 2**32 + 3, 2**31, 2**63 - 1]], tf.int64)))
        np.testing.assert_allclose(got[0, 0], np.asarray(layer(np.array([[1]])))[0, 0], rtol=1e-6)
        assert np.isnan(got[0, 1:]).all()


@pytest.mark.parametrize("bad", [0, "", []])
def test_an_empty_looking_codes_initializer_is_refused_not_the_default(bad):
    # Audit s64: 0, "" and [] fell through `or` to the default initializer.
    with pytest.raises(ValueError, match=r"`codes_initializer` must be a Keras initializer.*Received: codes_initializer="):
        CompositionalEmbedding(10, 3, codes_initializer=bad)
