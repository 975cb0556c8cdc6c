"""Capsule losses: reference conformance of every term combination, labels, config."""

import re

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules import losses
from keras_capsules.losses import CapsuleLoss, MarginLoss
from tests.refdata import load_cccaps
from tests.backends import BACKEND, compiled, float64_enabled, tensor, tensorflow_only, value_and_grads
from tests.harness import replica_losses_add_up

REF = load_cccaps("loss_margin_focal")
TERMS = {
    "margin": ("margin",), "focal": ("focal",), "cross": ("cross",),
    "mf": ("margin", "focal"), "mc": ("margin", "cross"), "fc": ("focal", "cross"),
    "mfc": ("margin", "focal", "cross"),
}


def _loss_and_grad(loss_fn, labels):
    value, [grad], _ = value_and_grads(lambda x: loss_fn(labels, x), [tensor(REF["classes"])])
    return np.asarray(value), np.asarray(grad)


@pytest.mark.parametrize("key", sorted(TERMS))
@pytest.mark.parametrize("label_form", ["sparse", "sparse_column", "one_hot"])
def test_matches_reference(key, label_form):
    labels = {
        "sparse": REF["labels"],
        "sparse_column": REF["labels"][:, None],
        "one_hot": REF["targets_onehot"],
    }[label_form]
    value, grad = _loss_and_grad(CapsuleLoss(terms=TERMS[key]), labels)
    np.testing.assert_allclose(value, REF[f"loss_{key}"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, REF[f"grad_{key}"], rtol=1e-5, atol=1e-5)


def test_margin_loss_and_paper_default():
    value, grad = _loss_and_grad(MarginLoss(), REF["labels"])
    np.testing.assert_allclose(value, REF["loss_margin"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, REF["grad_margin"], rtol=1e-5, atol=1e-5)
    # The default composite is the paper's margin + focal loss (`loss`, `grad_classes`).
    value, grad = _loss_and_grad(CapsuleLoss(), REF["labels"])
    np.testing.assert_allclose(value, REF["loss"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, REF["grad_classes"], rtol=1e-5, atol=1e-5)
    # Per-sample values through reduction="none".
    per_sample = np.asarray(MarginLoss(reduction="none")(REF["labels"], REF["classes"]))
    np.testing.assert_allclose(per_sample, REF["margin_per_sample"], rtol=1e-5, atol=1e-6)
    per_sample = CapsuleLoss(terms=["focal"], reduction="none")(REF["labels"], REF["classes"])
    np.testing.assert_allclose(np.asarray(per_sample), REF["focal_per_sample"], rtol=1e-5, atol=1e-6)


def test_margin_hand_values_multi_hot_and_float16():
    x = np.array([[0.95, 0.05, 0.5]], "float32")
    loss = MarginLoss(m_plus=0.9, m_minus=0.1, lambda_=0.5)
    np.testing.assert_allclose(np.asarray(loss(np.array([0]), x)), 0.5 * 0.4**2, rtol=1e-6)
    # Two classes present (multi-hot): 0.2^2 for class 2, nothing for class 1 being low.
    np.testing.assert_allclose(np.asarray(loss(np.array([[1.0, 0.0, 1.0]]), x)), 0.4**2, rtol=1e-6)
    half = loss(np.array([0]), x.astype("float16"))
    # (standardized: a torch dtype, torch.float32, is no string and equals none)
    assert keras.backend.standardize_dtype(half.dtype) == "float32"


@pytest.mark.parametrize("terms", [{"margin"}, 5, None])
def test_bad_terms_are_quoted_as_given(terms):
    # The error said "Received: terms=None" for any terms that is not a list or tuple.
    with pytest.raises(ValueError, match=re.escape(f"Received: terms={terms!r}")):
        CapsuleLoss(terms=terms)


def test_bad_arguments_and_labels():
    with pytest.raises(ValueError, match="Received: terms="):
        CapsuleLoss(terms=("margin", "hinge"))
    with pytest.raises(ValueError, match="Received: terms="):
        CapsuleLoss(terms=())
    with pytest.raises(ValueError, match="Received: terms="):
        CapsuleLoss(terms=("margin", "margin"))
    with pytest.raises(ValueError, match="Received: lambda_=-1"):
        MarginLoss(lambda_=-1)
    with pytest.raises(ValueError, match="Received: m_plus="):
        MarginLoss(m_plus="0.9")
    with pytest.raises(ValueError, match=r"\[batch, 4\]"):
        MarginLoss()(np.zeros((8, 3)), REF["classes"])


@pytest.mark.parametrize(
    "loss",
    [MarginLoss(m_plus=0.8, lambda_=0.25, name="m"), CapsuleLoss(terms=("cross", "margin"), focal_gamma=1.0)],
)
def test_config_and_serialization(loss):
    config = loss.get_config()
    clone = type(loss).from_config(config)
    assert clone.get_config() == config
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is type(loss) and restored.get_config() == config
    np.testing.assert_allclose(
        np.asarray(restored(REF["labels"], REF["classes"])), np.asarray(loss(REF["labels"], REF["classes"]))
    )
    assert losses.MarginLoss is MarginLoss


@pytest.mark.parametrize("make", [lambda dtype: MarginLoss(dtype=dtype), lambda dtype: CapsuleLoss(dtype=dtype),
                                  lambda dtype: losses.MixtureNLL(dtype=dtype)], ids=["margin", "capsule", "mixture"])
def test_the_dtype_argument_survives_the_config(make):
    # audit (2026-11-27): get_config dropped `dtype`, so a copy (and the loss of a loaded
    # .keras model) computed in float32 whatever was set
    loss = make("float16")
    config = loss.get_config()
    assert config["dtype"] is not None and type(loss).from_config(config).dtype == loss.dtype == "float16"
    assert make(None).get_config()["dtype"] is None  # not given: the default stays the default


def test_compiles_into_a_model_and_saves(tmp_path):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="sigmoid")(inputs))
    model.compile("sgd", CapsuleLoss(terms=("margin", "focal")))
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    y = np.arange(8) % 3
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.loss, CapsuleLoss) and loaded.loss.terms == ("margin", "focal")


@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0])
def test_focal_gradient_finite_when_a_probability_is_one(gamma):
    """A single class (p_t = 1): zero loss and a finite (zero) gradient for any gamma."""
    loss = CapsuleLoss(terms=("focal",), focal_gamma=gamma)
    value, [grad], _ = value_and_grads(lambda x: loss(np.array([0, 0]), x), [tensor([[0.3], [0.9]], "float32")])
    np.testing.assert_allclose(np.asarray(value), 0.0, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(grad), 0.0)


@pytest.mark.parametrize(
    "labels,bad",
    [(np.array([0, 4]), "[4]"), (np.array([[-1], [2]]), "[-1]"), (np.array([0.0, 1.5]), "[1.5]")],
)
@pytest.mark.parametrize("loss", [MarginLoss(), CapsuleLoss(terms=("margin", "focal", "cross"))])
def test_out_of_range_class_ids_raise_in_eager_calls(loss, labels, bad):
    """Ids outside [0, n_classes) used to be one-hot zeros: silently "no class present"."""
    x = np.full((2, 4), 0.5, "float32")
    with pytest.raises(ValueError, match=r"\[0, 4\).*Received: y_true with invalid values " + re.escape(bad)):
        loss(labels, x)
    loss(np.array([0, 3]), x)  # the edges of the range are fine


@pytest.mark.parametrize("jit_compile", [False, True])
def test_out_of_range_class_ids_in_fit_give_a_nan_loss_and_finite_weights(jit_compile):
    """Traced (fit, XLA, torch.compile): values cannot be checked, so a bad sample's loss
    is NaN, without gradient; eagerly (run_eagerly=True) fit raises the ValueError."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="sigmoid")(inputs))
    model.compile("sgd", CapsuleLoss(), jit_compile=jit_compile)
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    if BACKEND in ("jax", "torch") and not jit_compile:  # JAX without jit and torch without
        # torch.compile run the step eagerly: the labels are concrete and checked
        with pytest.raises(ValueError, match=r"invalid values \[3\]"):
            model.fit(x, np.array([0, 1, 2, 0, 1, 2, 0, 3]), batch_size=8, epochs=1, verbose=0)
        return
    history = model.fit(x, np.array([0, 1, 2, 0, 1, 2, 0, 3]), batch_size=8, epochs=1, verbose=0)
    assert np.isnan(history.history["loss"][0])
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    history = model.fit(x, np.arange(8) % 3, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    per_sample_loss = CapsuleLoss(reduction="none")
    if BACKEND == "torch":  # (compiled() is XLA's: torch.compile, jit_compile=True here)
        import torch

        traced = torch.compile(lambda y, p: per_sample_loss(y, p))
    else:
        traced = compiled(per_sample_loss, jit_compile)
    per_sample = np.asarray(traced(tensor([0, 3, -1, 2]), keras.ops.full((4, 3), 0.5)))
    assert np.isfinite(per_sample[[0, 3]]).all() and np.isnan(per_sample[[1, 2]]).all()
    model.compile("sgd", CapsuleLoss(), run_eagerly=True)
    with pytest.raises(ValueError, match=r"invalid values \[3\]"):
        model.fit(x, np.array([0, 1, 2, 0, 1, 2, 0, 3]), batch_size=8, epochs=1, verbose=0)


def test_class_ids_compile_as_one_torch_graph():
    # Under torch.compile (jit_compile=True on torch) the eager check of the class ids
    # read the traced labels as numpy: dynamo broke the graph there at every call, valid
    # ids included, and ran the rest of the loss eagerly, where an id out of range
    # raised; torch's one-hot raises for an id >= n_classes in a compiled graph too.
    if BACKEND != "torch":
        pytest.skip(f"torch.compile is torch's (backend is {BACKEND})")
    import torch

    loss = CapsuleLoss(("margin", "focal", "cross"), reduction="none")
    scores = keras.ops.full((4, 3), 0.5)
    for labels in (tensor([0, 2, 1, 2]), tensor([[0.0], [3.0], [-1.0], [1.5]], "float32")):
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(lambda y, p: loss(y, p))(labels, scores)
        reasons = [str(r.reason).splitlines()[0] for r in explanation.break_reasons]
        assert explanation.graph_break_count == 0 and explanation.graph_count == 1, reasons[:3]
    torch._dynamo.reset()
    per_sample = np.asarray(torch.compile(lambda y, p: loss(y, p))(labels, scores))
    assert np.isfinite(per_sample[0]) and np.isnan(per_sample[1:]).all()


@pytest.mark.parametrize("jit_compile", [False, True])
def test_traced_labels_of_unknown_last_axis_are_told_apart_at_run_time(jit_compile):
    # Labels [batch, None] (a tf.data pipeline that lost its static shape) were always
    # read as one-hot, so class ids [batch, 1] were broadcast as targets: a wrong loss.
    tensorflow_only("a tf.function input_signature with an unknown axis (JAX traces static shapes)")
    import tensorflow as tf

    scores = tf.constant(REF["classes"])
    ids = np.argmax(REF["classes"], axis=-1)[:, None] % scores.shape[-1]
    ids[0] = (ids[0] + 1) % scores.shape[-1]
    spec = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec(scores.shape, tf.float32)]
    for loss in (CapsuleLoss(("margin", "focal", "cross"), reduction="none"), MarginLoss(reduction="none")):
        traced = tf.function(lambda y, p: loss(y, p), input_signature=spec, jit_compile=jit_compile)
        want = np.asarray(loss(ids, scores))
        np.testing.assert_allclose(traced(ids.astype("float32"), scores), want, rtol=1e-5, atol=1e-6)
        one_hot = np.eye(scores.shape[-1], dtype="float32")[ids[:, 0]]
        np.testing.assert_allclose(traced(one_hot, scores), want, rtol=1e-5, atol=1e-6)
        bad = ids.astype("float32")
        bad[1] = scores.shape[-1]  # out of range: NaN, as for labels of known shape
        per_sample = np.asarray(traced(bad, scores))
        assert np.isnan(per_sample[1]) and np.isfinite(np.delete(per_sample, 1)).all()


@pytest.mark.parametrize("label_shape", [[None], [None, 1], [None, None], [None, 3]])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_traced_labels_for_another_batch_size_fail_at_run_time(label_shape, jit_compile):
    # Audit (2026-11-30): traced for any batch, one label (ids or one-hot) for 4 samples
    # was broadcast silently over their scores (eagerly a ValueError).
    tensorflow_only("a tf.function input_signature with an unknown batch (JAX traces static shapes)")
    import tensorflow as tf

    scores = np.random.default_rng(2).uniform(size=(4, 3)).astype("float32")
    ids = np.array([0, 2, 1, 1])
    labels = np.eye(3, dtype="float32")[ids] if label_shape in ([None, None], [None, 3]) else ids.astype("float32")
    labels = labels.reshape(4, 1) if label_shape == [None, 1] else labels
    spec = [tf.TensorSpec(label_shape, tf.float32), tf.TensorSpec([None, 3], tf.float32)]
    for loss in (CapsuleLoss(), MarginLoss()):
        traced = tf.function(lambda y, p: loss(y, p), input_signature=spec, jit_compile=jit_compile)
        np.testing.assert_allclose(float(traced(labels, scores)), float(loss(labels, scores)), rtol=1e-6)
        for y, p in ((labels[:1], scores), (labels, scores[:1])):
            with pytest.raises(tf.errors.InvalidArgumentError):
                traced(y, p)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: MarginLoss(m_plus=float("nan")), "Received: m_plus=nan"),
        (lambda: MarginLoss(m_minus=float("inf")), "Received: m_minus=inf"),
        (lambda: CapsuleLoss(lambda_=float("inf")), "Received: lambda_=inf"),
        (lambda: CapsuleLoss(focal_gamma=float("nan")), "Received: focal_gamma=nan"),
        (lambda: losses.MixtureNLL(sigma=float("inf")), "Received: sigma=inf"),
        (lambda: losses.MixtureNLL(epsilon=float("inf")), "Received: epsilon=inf"),
        (lambda: losses.MixtureNLL(epsilon=1.0), "Received: epsilon=1.0"),
    ],
)
def test_non_finite_arguments_are_refused(make, message):
    """They used to give NaN or inf losses (m_minus=inf silently dropped the absent term)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        make()
    losses.MixtureNLL(sigma=np.float32(0.5), epsilon=np.float64(1e-6))  # numpy numbers are fine


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(sigma=-0.5), "`sigma` must be a positive, finite number. Received: sigma=-0.5"),
        (dict(sigma=float("nan")), "`sigma` must be a positive, finite number. Received: sigma=nan"),
        (dict(sigma="0.5"), "`sigma` must be a positive, finite number. Received: sigma='0.5'"),
        (dict(epsilon=-1), "`epsilon` must be a positive number below 1 (a probability floor). Received: epsilon=-1"),
        # helper-178: from_logits="False" was truthy (pi read as logits: a wrong loss) and
        # group_axis=True was taken as axis 1
        (dict(from_logits="False"), "`from_logits` must be True or False. Received: from_logits='False'"),
        (dict(group_axis=True), "`group_axis` must be a non-zero integer (the batch axis cannot hold groups). Received: group_axis=True"),
        (dict(group_axis=1.0), "`group_axis` must be a non-zero integer (the batch axis cannot hold groups). Received: group_axis=1.0"),
    ],
)
def test_the_mixture_nll_function_checks_its_arguments_as_the_class_does(kwargs, message):
    # Audit s64: mixture_nll called a negative or NaN sigma "too small", took a string,
    # and with a negative epsilon gave inf where pi = 0.
    args = dict(x=np.zeros((2, 3, 1), "float32"), m=np.zeros((2, 2, 3, 1), "float32"),
                pi=np.zeros((2, 2, 3, 1), "float32"), sigma=0.5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        losses.mixture_nll(**args)


@pytest.mark.parametrize("x_shape,pi_shape", [
    ((2, 1, 3, 1), (2, 2, 4, 3, 1)),   # x of one row of pixels
    ((4, 3, 1), (2, 2, 4, 3, 1)),      # x without its batch axis
    ((2, 4, 3, 1), (2, 1, 4, 3, 1)),   # pi of one group
    ((2, 4, 3, 1), (2, 2, 4, 3, 2)),   # pi of two channels
])
def test_the_mixture_nll_function_refuses_shapes_that_do_not_fit(x_shape, pi_shape):
    # Audit: x and pi were broadcast against m as the backend allowed: x of one row was
    # scored against every row, a one-group pi weighted every group, a two-channel pi was
    # read from its first channel (all without an error), and x without its batch axis
    # failed with the backend's "Incompatible shapes".
    m = np.zeros((2, 2, 4, 3, 1), "float32")
    with pytest.raises(ValueError, match=re.escape(
        f"mixture_nll expects x of the shape of m without the group axis (group_axis=1) and pi of "
        f"the shape of m with one channel. Received: x shape={x_shape}, m shape={m.shape}, pi shape={pi_shape}"
    )):
        losses.mixture_nll(np.zeros(x_shape, "float32"), m, np.full(pi_shape, 0.5, "float32"), 0.5)
    assert tuple(losses.mixture_nll(np.zeros((2, 4, 3, 1), "float32"), m, np.full((2, 2, 4, 3, 1), 0.5, "float32"), 0.5).shape) == (2, 4, 3)


def test_focal_term_refuses_a_negative_gamma():
    # Audit s64: it was a ZeroDivisionError ("0.0 cannot be raised to a negative power").
    with pytest.raises(ValueError, match=r"`gamma` must be a finite number >= 0. Received: gamma=-1"):
        losses.focal_term(np.eye(2, dtype="float32"), np.full((2, 2), 0.5, "float32"), gamma=-1)


@pytest.mark.parametrize("function, option, value, message", [
    ("focal_term", "alpha", -0.25, "`alpha` must be a finite number >= 0. Received: alpha=-0.25"),
    ("focal_term", "alpha", float("nan"), "`alpha` must be a finite number >= 0. Received: alpha=nan"),
    ("focal_term", "alpha", "0.25", "`alpha` must be a finite number >= 0. Received: alpha='0.25'"),
    ("margin_term", "m_plus", float("nan"), "`m_plus` must be a finite number. Received: m_plus=nan"),
    ("margin_term", "m_minus", None, "`m_minus` must be a finite number. Received: m_minus=None"),
    ("margin_term", "lambda_", -0.5, "`lambda_` must be a finite number >= 0. Received: lambda_=-0.5"),
])
def test_the_public_terms_check_their_weights_as_the_loss_classes_do(function, option, value, message):
    # Audit s83: focal_term(alpha=-0.25) and margin_term(lambda_=-0.5) returned losses that
    # reward the wrong class, a NaN alpha or margin NaN losses, and alpha='0.25' a raw
    # TypeError of the multiplication; CapsuleLoss already refused these values.
    targets, scores = np.eye(2, dtype="float32"), np.full((2, 2), 0.5, "float32")
    with pytest.raises(ValueError, match=re.escape(message)):
        getattr(losses, function)(targets, scores, **{option: value})


def test_the_public_terms_keep_their_values_for_valid_weights():
    targets, scores = np.eye(2, dtype="float32"), np.array([[0.95, 0.05], [0.5, 0.2]], "float32")
    margin = keras.ops.convert_to_numpy(losses.margin_term(targets, scores, m_plus=0.9, m_minus=0.1, lambda_=0.5))
    # Sample 0: nothing (0.95 >= 0.9, 0.05 <= 0.1); sample 1: (0.9 - 0.2)^2 + 0.5 (0.5 - 0.1)^2.
    np.testing.assert_allclose(margin, [0.0, 0.49 + 0.08], rtol=1e-6)
    focal = keras.ops.convert_to_numpy(losses.focal_term(targets, scores, alpha=0.5, gamma=0))
    log_p = scores - np.log(np.exp(scores).sum(-1, keepdims=True))
    np.testing.assert_allclose(focal, -0.5 * (targets * log_p).sum(-1), rtol=1e-6)


def test_margin_of_a_huge_score_is_finite_where_its_weight_is_zero():
    # Audit s64: a present class scoring above ~1.8e19 gave NaN (0 * inf in the absent term).
    scores = np.array([[2e19, 0.0]], "float32")
    assert float(keras.ops.convert_to_numpy(MarginLoss()(np.array([0]), scores))) == 0.0  # its exact value
    assert np.isinf(float(keras.ops.convert_to_numpy(MarginLoss()(np.array([1]), scores))))


@pytest.mark.parametrize("labels", [
    np.array([0, 1, 2]),                  # class ids, one sample short
    np.array([[0], [1], [2]]),            # class ids as a column
    np.eye(3, dtype="float32"),           # one-hot targets
    np.array([0, 1, 2, 1, 0]),            # one sample too many
])
@pytest.mark.parametrize("loss", [MarginLoss(), CapsuleLoss(terms=("margin", "focal", "cross"))])
def test_labels_for_another_batch_size_are_a_clear_error(loss, labels):
    # Labels and scores of different batch sizes failed deep in the math with
    # TensorFlow's "InvalidArgumentError: Incompatible shapes: [3,3] vs. [4,3]"
    # (Keras' own losses say which shapes disagree).
    scores = np.random.default_rng(0).uniform(size=(4, 3)).astype("float32")
    with pytest.raises(ValueError, match=r"one label per sample.*Received: y_true shape=\(\d.*y_pred shape=\(4, 3\)"):
        loss(labels, scores)


@pytest.mark.parametrize("weight_shape", [(3,), (5,), (3, 1)])
@pytest.mark.parametrize("loss", [MarginLoss(), CapsuleLoss(terms=("margin", "focal", "cross"))])
def test_sample_weights_for_another_batch_size_are_a_clear_error(loss, weight_shape):
    # Audit (2026-12-06, random-configuration fuzzing): weights of another batch size
    # than the scores failed in the reduction with TensorFlow's "InvalidArgumentError:
    # Incompatible shapes: [3] vs. [4] [Op:BroadcastTo]", which named neither argument.
    scores = np.random.default_rng(0).uniform(size=(4, 3)).astype("float32")
    with pytest.raises(ValueError, match=r"one weight per sample.*Received: sample_weight shape=\(\d.*y_pred shape=\(4, 3\)"):
        loss(np.array([0, 1, 2, 1]), scores, sample_weight=np.ones(weight_shape, "float32"))
    for good in [(4,), (4, 1), (1,)]:  # per sample, as a column, or one weight for all
        value = keras.ops.convert_to_numpy(loss(np.array([0, 1, 2, 1]), scores, sample_weight=np.ones(good, "float32")))
        assert np.isfinite(value)


@pytest.mark.parametrize("sigma", [1e-20, 1e-30, 1e200])
def test_mixture_nll_with_a_tiny_or_huge_sigma_is_finite(sigma):
    # Audit (2026-11-28): 1 / (2 sigma^2) overflowed float32 below sigma ~1e-19, so an exact
    # mean gave 0 * inf = NaN; sigma^2 overflowed Python's floats for a huge sigma
    # (OverflowError). Exact means: the loss is the log normalizer, log(sqrt(2 pi) sigma).
    x = np.zeros((2, 3, 1), "float32")
    packed = np.concatenate([np.zeros((2, 2, 3, 1), "float32"), np.full((2, 2, 3, 1), 0.5, "float32")], -1)
    loss = float(keras.ops.convert_to_numpy(losses.MixtureNLL(sigma=sigma)(x, packed)))
    np.testing.assert_allclose(loss, 0.5 * np.log(2 * np.pi) + np.log(sigma), rtol=1e-5)


def test_mixture_nll_uses_pi_as_given_as_its_docstring_says():
    # audit s66: a pi summing above 1 gives a lower (here negative) loss, silently. Kept, and
    # documented: the loss of a pi summing to s is that of pi / s minus log(s) (a check of
    # the sums could not run in a traced fit); from_logits=True normalizes.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 1)).astype("float32")
    means = rng.normal(size=(2, 3, 5, 1)).astype("float32")
    logits = rng.normal(size=(2, 3, 5, 1)).astype("float32")
    pi = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)

    def per_pixel(p, **kwargs):
        nll = losses.MixtureNLL(reduction=None, **kwargs)(x, np.concatenate([means, p], -1))
        return keras.ops.convert_to_numpy(nll)

    normalized = per_pixel(pi)
    for s in (3.0, 0.5):
        np.testing.assert_allclose(per_pixel(s * pi), normalized - np.log(s), rtol=1e-5, atol=1e-5)
    assert (per_pixel(1e4 * pi) < 0).all() and (normalized > 0).all()
    # logits of any scale are normalized: the same loss as their softmax
    np.testing.assert_allclose(per_pixel(logits + 5.0, from_logits=True), normalized, rtol=1e-5, atol=1e-6)
    # and a negative loss with a normalized pi: N is a density (above 1 at its mean for sigma < 0.399)
    exact = np.concatenate([np.repeat(x[:, None], 3, 1), pi], -1)
    assert (keras.ops.convert_to_numpy(losses.MixtureNLL(sigma=0.1, reduction=None)(x, exact)) < 0).all()
    assert "used as given" in losses.MixtureNLL.__doc__ and "minus ``log(s)``" in losses.MixtureNLL.__doc__


def test_mixture_nll_with_a_sigma_below_its_dtype_is_a_clear_error():
    # Audit (2026-11-28): it was Python's "math domain error" (sigma^2 rounded to 0).
    x = np.zeros((2, 3, 1), "float32")
    packed = np.concatenate([np.zeros((2, 2, 3, 1), "float32"), np.full((2, 2, 3, 1), 0.5, "float32")], -1)
    with pytest.raises(ValueError, match=r"`sigma` is too small for a loss computed in float32.*Received: sigma=1e-200"):
        losses.MixtureNLL(sigma=1e-200)(x, packed)


class _TokenCapsules(keras.layers.Layer):
    """[batch, seq, 15] -> [batch, seq, 3, 5] capsules, passing the token mask on."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x):
        return keras.ops.reshape(x, (-1, x.shape[1], 3, 5))

    def compute_mask(self, x, mask=None):
        return mask

    def compute_output_shape(self, shape):
        return (shape[0], shape[1], 3, 5)


@pytest.mark.parametrize("one_hot", [False, True])
def test_labels_at_masked_padding_positions_are_ignored(one_hot):
    # audit (losses): per-token scores [batch, seq, n_classes] carrying the mask [batch, seq]
    # of their padding: Keras weights the padded positions 0, but a padding label such as
    # -1 there was refused in eager calls and gave a NaN loss in traced ones (model.fit,
    # evaluate), and 0 * NaN turned the whole batch's loss NaN. One-hot labels holding
    # NaN at padding did the same. The loss must be that of the real positions only.
    from keras_capsules.layers import CapsuleLength

    tokens = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    real = tokens != 0
    labels = np.array([[0, 2, 1, 0], [1, 0, 0, 0]])
    inputs = keras.Input((4,), dtype="int32")
    x = keras.layers.Embedding(10, 15, mask_zero=True, embeddings_initializer="uniform")(inputs)
    model = keras.Model(inputs, CapsuleLength()(_TokenCapsules()(x)))
    loss = CapsuleLoss()
    model.compile("sgd", loss)
    scores = model(tokens)
    if one_hot:
        clean = np.eye(3, dtype="float32")[labels]
        padded = np.where(real[..., None], clean, np.nan).astype("float32")
    else:
        clean, padded = labels, np.where(real, labels, -1)
    per_position = np.asarray(CapsuleLoss(reduction=None)(clean, keras.ops.convert_to_numpy(scores)))
    want = per_position[real].mean()  # the real positions only
    assert float(loss(clean, scores)) == pytest.approx(want, rel=1e-5)
    assert float(loss(padded, scores)) == pytest.approx(want, rel=1e-5)  # raised / NaN
    assert model.evaluate(tokens, padded, verbose=0) == pytest.approx(want, rel=1e-5)  # NaN


def test_a_mask_over_the_classes_is_a_clear_error():
    # audit (losses): capsule lengths [batch, n_caps] whose mask covers the capsules (the
    # classes), e.g. from Masking before CapsuleLength: Keras weights the per-sample loss
    # [batch] by the mask and failed with a backend "Incompatible shapes" error.
    from keras_capsules.layers import CapsuleLength

    inputs = keras.Input((3, 4))
    model = keras.Model(inputs, CapsuleLength()(keras.layers.Masking()(inputs)))
    capsules = np.random.default_rng(0).uniform(size=(2, 3, 4)).astype("float32") * 0.2
    capsules[0, 2] = 0.0  # a masked capsule
    scores = model(capsules)
    with pytest.raises(ValueError, match="not over classes"):
        CapsuleLoss()(np.array([0, 1]), scores)


def test_mixture_nll_traced_for_any_shape_matches_eager():
    # audit (losses): traced with an unknown channel axis (a tf.function signature of
    # None dimensions), the normaliser's channel count was None: TypeError
    # "unsupported operand type(s) for *: 'NoneType' and 'float'".
    tensorflow_only("a tf.function input_signature with unknown dimensions")
    import tensorflow as tf

    rng = np.random.default_rng(3)
    x = rng.uniform(size=(2, 4, 4, 2)).astype("float32")
    packed = rng.uniform(size=(2, 3, 4, 4, 3)).astype("float32")
    loss = losses.MixtureNLL(reduction=None)
    traced = tf.function(
        lambda a, b: loss(a, b),
        input_signature=[tf.TensorSpec((None,) * 4), tf.TensorSpec((None,) * 5)],
    )
    np.testing.assert_allclose(np.asarray(traced(x, packed)), np.asarray(loss(x, packed)), rtol=1e-6)
    # Audit (2026-11-30): traced so, a y_true of batch 1, or of one row of pixels, was
    # broadcast silently over y_pred (eagerly a ValueError), and the reverse too.
    for bad_x, bad_packed in [(x[:1], packed), (x, packed[:1]), (x[:, :1], packed), (x, packed[:, :, :1])]:
        with pytest.raises(tf.errors.InvalidArgumentError):
            traced(bad_x, bad_packed)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean", "mean_with_sample_weight", "sum"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_float64_mixture_nll_is_reduced_in_float64(reduction, weighted, masked):
    # On torch Keras' reduction divided the summed loss in float32 (its divide_no_nan
    # promotes float64 to float32), so a float64 MixtureNLL came back float32, ~1e-7 off.
    from keras.src.backend import set_keras_mask

    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 3, 4, 2))
    means = rng.normal(size=(2, 3, 3, 4, 2))  # [batch, K, 3, 4, C]
    pi = rng.uniform(0.1, 1.0, size=(2, 3, 3, 4, 1))
    pi /= pi.sum(axis=1, keepdims=True)
    weights = rng.uniform(0.5, 2.0, size=(2, 3, 4)) if weighted else None
    mask = rng.uniform(size=(2, 3, 4)) > 0.3 if masked else None
    sigma = 0.7
    log_n = -0.5 * np.sum(((x[:, None] - means) / sigma) ** 2, -1) - 2 * (0.5 * np.log(2 * np.pi) + np.log(sigma))
    per_pixel = -np.log(np.sum(pi[..., 0] * np.exp(log_n), axis=1))  # [2, 3, 4]
    w = np.ones_like(per_pixel) if weights is None else weights
    keep = np.ones_like(per_pixel) if mask is None else mask.astype("float64")
    total = np.sum(per_pixel * w * keep)
    want = {
        "sum": total,
        "mean_with_sample_weight": total / np.sum(w * keep),
    }.get(reduction, total / np.sum(keep))
    with float64_enabled():  # jax_enable_x64 for this test on JAX
        packed = keras.ops.convert_to_tensor(np.concatenate([means, pi], -1), "float64")
        if mask is not None:
            set_keras_mask(packed, keras.ops.convert_to_tensor(mask))
        loss = losses.MixtureNLL(sigma=sigma, reduction=reduction, dtype="float64")
        got = loss(x, packed, sample_weight=weights)
        assert keras.backend.standardize_dtype(got.dtype) == "float64"
        np.testing.assert_allclose(float(got), want, rtol=1e-12)


def _second_replica_short(batch, steps):
    """A ``[batch, steps]`` mask whose second half (the second replica's share) keeps one
    real step per sample, the first half all of them."""
    mask = np.ones((batch, steps), bool)
    mask[batch // 2:, 1:] = False
    return mask


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
@pytest.mark.parametrize("weighted", [False, True])
def test_masked_capsule_loss_under_two_replicas_is_the_one_device_loss(reduction, weighted):
    # Audit s64: each replica divided by its own count of real tokens (or its weights' sum),
    # so a replica whose sequences were shorter weighed more: a gradient off by more than
    # the step itself (per-token MarginLoss, 4 + 4 samples with 6 and 1 real tokens).
    tensorflow_only("tf.distribute")
    rng = np.random.default_rng(0)
    scores = rng.uniform(size=(4, 5, 3)).astype("float32")
    labels = rng.integers(0, 3, size=(4, 5))
    mask = _second_replica_short(4, 5)  # the second replica's samples hold one real token each
    weights = rng.uniform(0.5, 2.0, size=(4, 5)).astype("float32") if weighted else None
    one, replicas = replica_losses_add_up(MarginLoss(reduction=reduction), labels, scores, mask, weights)
    np.testing.assert_allclose(replicas, one, rtol=1e-6)


class KerasSquaredError(keras.losses.Loss):
    def call(self, y_true, y_pred):
        return ops.sum(ops.square(y_true - y_pred), axis=-1)


class SquaredError(losses.GlobalBatchLoss):
    call = KerasSquaredError.call


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
@pytest.mark.parametrize("masked", [False, True])
def test_a_users_global_batch_loss_under_two_replicas_is_the_one_device_loss(reduction, masked):
    # GlobalBatchLoss: the base class of the library's losses, public for users' own.
    tensorflow_only("tf.distribute")
    rng = np.random.default_rng(2)
    y = rng.normal(size=(4, 5, 3)).astype("float32")
    p = rng.normal(size=(4, 5, 3)).astype("float32")
    mask = _second_replica_short(4, 5)
    weights = rng.uniform(0.5, 2.0, size=(4, 5)).astype("float32")
    one, replicas = replica_losses_add_up(SquaredError(reduction=reduction), y, p, mask if masked else None, weights)
    np.testing.assert_allclose(replicas, one, rtol=1e-6)
    # Keras' own division (each replica by its own count) differs on these halves
    _, keras_replicas = replica_losses_add_up(KerasSquaredError(reduction=reduction), y, p,
                                              mask if masked else None, weights)
    if masked or reduction == "mean_with_sample_weight":  # the halves' counts differ
        assert abs(keras_replicas - one) > 1e-2 * abs(one)


def test_a_global_batch_loss_on_one_device_is_keras_loss():
    rng = np.random.default_rng(3)
    y, p = (rng.normal(size=(3, 4, 2)).astype("float32") for _ in range(2))
    weights = rng.uniform(size=(3, 4)).astype("float32")
    for reduction in ("sum_over_batch_size", "mean_with_sample_weight", "sum", "none"):
        ours = SquaredError(reduction=reduction)(y, p, sample_weight=weights)
        theirs = KerasSquaredError(reduction=reduction)(y, p, sample_weight=weights)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs), rtol=1e-6)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
@pytest.mark.parametrize("weighted", [False, True])
def test_masked_mixture_nll_under_two_replicas_is_the_one_device_loss(reduction, weighted):
    # Audit s64: as above, for RTagger's step masks (6% of a step's weight change off).
    tensorflow_only("tf.distribute")
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(4, 3, 5, 1)).astype("float32")  # [batch, T, pixels, channels]
    packed = np.concatenate([rng.uniform(size=(4, 3, 2, 5, 1)), rng.dirichlet([1, 1], size=(4, 3, 5)).transpose(0, 1, 3, 2)[..., None]],
                            -1).astype("float32")  # [batch, T, K, pixels, means + pi]
    mask = _second_replica_short(4, 3)  # the second replica's sequences have one real step
    weights = rng.uniform(0.5, 2.0, size=(4, 3)).astype("float32") if weighted else None
    loss = losses.MixtureNLL(sigma=0.5, group_axis=2, reduction=reduction)
    one, replicas = replica_losses_add_up(loss, x, packed, mask, weights)
    np.testing.assert_allclose(replicas, one, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
@pytest.mark.parametrize("weight_shape", ["batch", "batch_1", "batch_steps", "batch_steps_1"])
def test_mixture_nll_weighted_by_its_leading_axes_is_a_weighted_mean_over_pixels(reduction, weight_shape):
    # Audit s65: [batch] or [batch, T] weights without a mask were spread over the pixel
    # axes as size-1 axes, and "mean_with_sample_weight" divided by their unspread sum:
    # weights of ones multiplied RTagger's loss by the pixel count (20x, 60x), and one
    # device disagreed with two replicas (37.3 against 1.87).
    rng = np.random.default_rng(5)
    batch, steps, groups, pixels = 4, 3, 2, 5
    x = rng.uniform(size=(batch, steps, pixels, 1)).astype("float32")
    pi = rng.dirichlet(np.ones(groups), size=(batch, steps, pixels)).transpose(0, 1, 3, 2)[..., None]
    packed = np.concatenate([rng.uniform(size=(batch, steps, groups, pixels, 1)), pi], -1).astype("float32")
    loss = losses.MixtureNLL(sigma=0.5, group_axis=2, reduction=reduction)
    per_pixel = losses.MixtureNLL(sigma=0.5, group_axis=2, reduction="none")(tensor(x), tensor(packed))
    per_pixel = keras.ops.convert_to_numpy(per_pixel)  # [batch, steps, pixels]
    weights = {"batch": rng.uniform(0.5, 2.0, size=(batch,)),
               "batch_1": rng.uniform(0.5, 2.0, size=(batch, 1)),
               "batch_steps": rng.uniform(0.5, 2.0, size=(batch, steps)),
               "batch_steps_1": rng.uniform(0.5, 2.0, size=(batch, steps, 1))}[weight_shape].astype("float32")
    spread = np.broadcast_to(weights.reshape(batch, -1, 1), per_pixel.shape)  # the weights of every pixel
    divisor = spread.sum() if reduction == "mean_with_sample_weight" else spread.size
    expected = (per_pixel * spread).sum() / divisor
    got = float(loss(tensor(x), tensor(packed), sample_weight=tensor(weights)))
    assert got == pytest.approx(expected, rel=1e-5)
    ones = float(loss(tensor(x), tensor(packed), sample_weight=tensor(np.ones_like(weights))))
    assert ones == pytest.approx(float(loss(tensor(x), tensor(packed))), rel=1e-6)
    if BACKEND == "tensorflow":
        one, replicas = replica_losses_add_up(loss, x, packed, None, weights)
        np.testing.assert_allclose(replicas, one, rtol=1e-6)
        assert one == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight", "sum", "none"])
@pytest.mark.parametrize("weight_shape", [(5,), (5, 1)])
def test_per_sample_weights_of_per_token_scores_weigh_each_sample_s_tokens(reduction, weight_shape):
    # Audit s65: [batch, 1] weights on per-token scores divided by the weights' own sum
    # (a per-token loss 5x the weighted token mean, and not what two replicas gave);
    # [batch] weights were laid along the token axis (an error, or with as many tokens
    # as samples, each token position weighted as if it were a sample).
    rng = np.random.default_rng(6)
    scores = rng.uniform(size=(5, 5, 3)).astype("float32")  # [batch, tokens, classes]
    labels = rng.integers(0, 3, size=(5, 5))
    weights = rng.uniform(0.5, 2.0, size=weight_shape).astype("float32")
    per_token = keras.ops.convert_to_numpy(MarginLoss(reduction="none")(tensor(labels), tensor(scores)))
    spread = np.broadcast_to(weights.reshape(5, 1), per_token.shape)
    divisor = {"mean_with_sample_weight": spread.sum(), "sum_over_batch_size": spread.size}.get(reduction, 1)
    expected = per_token * spread if reduction == "none" else (per_token * spread).sum() / divisor
    loss = MarginLoss(reduction=reduction)
    got = keras.ops.convert_to_numpy(loss(tensor(labels), tensor(scores), sample_weight=tensor(weights)))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    ones = loss(tensor(labels), tensor(scores), sample_weight=tensor(np.ones(weight_shape, "float32")))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ones),
                               keras.ops.convert_to_numpy(loss(tensor(labels), tensor(scores))), rtol=1e-6)


@pytest.mark.parametrize("make", [losses.MarginLoss, losses.CapsuleLoss, losses.MixtureNLL])
@pytest.mark.parametrize("dtype", ["int32", "bool", "uint8"])
def test_a_loss_of_an_integer_or_boolean_dtype_is_refused_when_made(make, dtype):
    # helper-181: it failed at the first training step ("Expected int32, but got 0.9 of type 'float'")
    with pytest.raises(ValueError, match=rf"`dtype` of {make.__name__} must be a floating dtype or policy .*"
                                         rf"Received: dtype='{dtype}'"):
        make(dtype=dtype)
    assert make(dtype="mixed_float16").dtype == "float16" and make(dtype="float64").dtype == "float64"


@pytest.mark.parametrize("make, option, bad, good, dtype, message", [
    (MarginLoss, "m_plus", 1e39, 1e19, None,
     "`m_plus` must be a number whose square is finite in float32, the dtype the loss returns: at most "
     "1.845e+19 in magnitude. Received: m_plus=1e+39"),
    (MarginLoss, "m_plus", 1e20, 1e19, None, "Received: m_plus=1e+20"),  # finite in float32, not its square
    (MarginLoss, "m_minus", -300.0, -100.0, "mixed_float16",
     "`m_minus` must be a number whose square is finite in float16, the dtype the loss returns: at most "
     "255.9 in magnitude. Received: m_minus=-300.0"),
    (MarginLoss, "lambda_", 1e5, 6e4, "mixed_float16",
     "`lambda_` must be a number that is finite in float16, the dtype the loss returns: at most 6.55e+04 "
     "in magnitude. Received: lambda_=100000.0"),
    (CapsuleLoss, "focal_alpha", 1e39, 1e30, None,
     "`focal_alpha` must be a number that is finite in float32, the dtype the loss returns: at most "
     "3.403e+38 in magnitude. Received: focal_alpha=1e+39"),
    (CapsuleLoss, "focal_gamma", 3.4e38, 1e30, "mixed_bfloat16",  # finite in float32, not in bfloat16
     "`focal_gamma` must be a number that is finite in bfloat16, the dtype the loss returns: at most "
     "3.39e+38 in magnitude. Received: focal_gamma=3.4e+38"),
])
def test_loss_constants_beyond_the_range_of_the_loss_dtype_are_refused_when_made(make, option, bad, good, dtype,
                                                                                 message):
    # audit (losses): checked as Python floats, m_plus=1e39 passed and was inf in float32 (an
    # inf loss for every batch), 1e5 under mixed_float16 too, and a margin of 1e20 squared
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**{option: bad}, dtype=dtype)
    loss = make(**{option: good}, dtype=dtype)  # within the range: a finite loss
    value = loss(np.array([0, 1]), np.array([[0.2, 0.7], [0.5, 0.4]], "float32"))
    if loss.dtype in ("float16", "bfloat16"):
        value = ops.cast(value, "float32")  # (no numpy conversion of a bfloat16 tensor on every backend)
    assert np.isfinite(ops.convert_to_numpy(value))


@pytest.mark.parametrize("function, dtype, option, value, message", [
    ("margin_term", "float32", "m_plus", 1e39, "`m_plus` must be a number whose square is finite in float32"),
    ("margin_term", "float16", "m_minus", -1e3, "`m_minus` must be a number whose square is finite in float16"),
    ("margin_term", "float16", "lambda_", 1e5, "`lambda_` must be a number that is finite in float16"),
    ("focal_term", "float32", "alpha", 1e39, "`alpha` must be a number that is finite in float32"),
    ("focal_term", "float16", "gamma", 1e5, "`gamma` must be a number that is finite in float16"),
])
def test_the_public_terms_refuse_weights_beyond_the_range_of_the_scores_dtype(function, dtype, option, value,
                                                                               message):
    # as the loss classes do, in the dtype of the scores they compute in
    targets, scores = tensor(np.eye(2), dtype), tensor(np.full((2, 2), 0.5), dtype)
    with pytest.raises(ValueError, match=re.escape(message) + r".*" + re.escape(f"Received: {option}={value!r}")):
        getattr(losses, function)(targets, scores, **{option: value})


@pytest.mark.parametrize("option", ["sigma", "epsilon"])
def test_mixture_nll_refuses_a_sigma_or_epsilon_that_is_zero_in_the_dtype_it_computes_in(option):
    # audit (losses): epsilon=1e-46 is 0 in float32, so it floored nothing (log(0) = -inf, an
    # inf loss for a pixel of pi 0 in every group); sigma was refused only when the loss ran
    message = re.escape(f"`{option}` is too small for a loss computed in float32: it is below its smallest normal "
                        f"number, 1.175e-38. Received: {option}=1e-46")
    with pytest.raises(ValueError, match=message):
        losses.MixtureNLL(**{option: 1e-46})
    x, m, pi = np.zeros((1, 3, 1), "float32"), np.zeros((1, 2, 3, 1), "float32"), np.zeros((1, 2, 3, 1), "float32")
    with pytest.raises(ValueError, match=message):
        losses.mixture_nll(x, m, pi, **{"sigma": 0.5, option: 1e-46})
    assert losses.MixtureNLL(**{option: 1e-46}, dtype="float64").get_config()[option] == 1e-46


def test_traced_labels_or_scores_of_unknown_rank_are_a_clear_error():
    # audit (losses): traced for tf.TensorSpec(shape=None) (a tf.data pipeline that lost its
    # shapes) the losses failed deep in the trace with "Cannot take the length of shape with
    # unknown rank". Their rank tells class ids from one-hot targets (and finds MixtureNLL's
    # groups): it cannot be guessed, so it is refused, naming the tensor.
    tensorflow_only("a tf.function input_signature of unknown rank (JAX traces static shapes)")
    import tensorflow as tf

    labels, scores = np.array([0.0, 1.0], "float32"), np.array([[0.2, 0.7], [0.5, 0.4]], "float32")
    unknown = tf.TensorSpec(None, tf.float32)
    for loss in (MarginLoss(), CapsuleLoss(("margin", "cross"))):
        for spec, shapes in (([unknown, tf.TensorSpec([None, 2], tf.float32)], "y_true shape=<unknown rank>, "
                                                                                "y_pred shape=(None, 2)"),
                             ([tf.TensorSpec([None], tf.float32), unknown], "y_true shape=(None,), "
                                                                           "y_pred shape=<unknown rank>")):
            traced = tf.function(lambda y, p: loss(y, p), input_signature=spec)
            with pytest.raises(ValueError, match=re.escape(
                f"{type(loss).__name__} needs y_true and y_pred of known rank: it tells class ids from one-hot "
                f"targets by their rank. Give them a static shape (in a tf.data pipeline, e.g. with "
                f"`tf.ensure_shape` after a `tf.numpy_function`). Received: {shapes}"
            )):
                traced(labels, scores)
    x, packed = np.zeros((1, 3, 1), "float32"), np.zeros((1, 2, 3, 2), "float32")
    traced = tf.function(lambda y, p: losses.MixtureNLL()(y, p),
                         input_signature=[unknown, tf.TensorSpec([None, 2, 3, 2], tf.float32)])
    with pytest.raises(ValueError, match=re.escape("MixtureNLL needs y_true and y_pred of known rank: it finds "
                                                   "the groups and channels by their axes.")):
        traced(x, packed)
    traced = tf.function(lambda a, m, pi: losses.mixture_nll(a, m, pi, 0.5),
                         input_signature=[tf.TensorSpec([None, 3, 1], tf.float32), unknown,
                                          tf.TensorSpec([None, 2, 3, 1], tf.float32)])
    with pytest.raises(ValueError, match=re.escape("mixture_nll needs x, m and pi of known rank") + ".*"
                                         + re.escape("Received: x shape=(None, 3, 1), m shape=<unknown rank>, "
                                                     "pi shape=(None, 2, 3, 1)")):
        traced(x, packed[..., :1], packed[..., 1:])


def test_traced_sample_weights_of_unknown_rank_are_a_clear_error():
    # (2026-12-06) Labels and scores of unknown rank were refused by name, but sample weights
    # of unknown rank failed in the reduction with TensorFlow's "Cannot take the length of
    # shape with unknown rank", which named neither the weights nor a remedy: how weights
    # are spread over the per-value losses depends on their axes.
    tensorflow_only("a tf.function input_signature of unknown rank (JAX traces static shapes)")
    import tensorflow as tf

    labels, scores = np.array([0, 1, 1], "int32"), np.array([[0.2, 0.7], [0.5, 0.4], [0.1, 0.9]], "float32")
    message = re.escape("A sample weight or mask needs a known rank to be spread over the per-value losses")
    for loss in (MarginLoss(), CapsuleLoss(("margin", "cross"))):
        traced = tf.function(lambda y, p, w: loss(y, p, sample_weight=w), input_signature=[
            tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec(None, tf.float32)])
        with pytest.raises(ValueError, match=message + ".*Received: a tensor of unknown rank"):
            traced(labels, scores, np.ones(3, "float32"))
    x, packed = np.zeros((1, 3, 1), "float32"), np.zeros((1, 2, 3, 2), "float32")
    traced = tf.function(lambda y, p, w: losses.MixtureNLL()(y, p, sample_weight=w), input_signature=[
        tf.TensorSpec([None, 3, 1], tf.float32), tf.TensorSpec([None, 2, 3, 2], tf.float32),
        tf.TensorSpec(None, tf.float32)])
    with pytest.raises(ValueError, match=message):
        traced(x, packed, np.ones(1, "float32"))
    known = tf.function(lambda y, p, w: MarginLoss()(y, p, sample_weight=w), input_signature=[
        tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.float32)])
    assert np.isfinite(float(known(labels, scores, np.ones(3, "float32"))))  # a known rank, as before


@pytest.mark.parametrize("weight_shape", [(3,), (2, 2), (1, 3), (2, 4, 2)], ids=["batch", "pixels", "row", "extra"])
def test_mixture_nll_sample_weights_of_other_sizes_are_a_clear_error(weight_shape):
    # (helper-197) MarginLoss/CapsuleLoss named weights of another batch size; MixtureNLL (and
    # any GlobalBatchLoss) failed in the reduction with TensorFlow's "Incompatible shapes:
    # [3,1] vs. [2,4] [Op:BroadcastTo]", which named neither the weights nor the losses.
    x = np.zeros((2, 4, 2), "float32")
    packed = np.random.default_rng(0).normal(size=(2, 3, 4, 3)).astype("float32")
    weights = np.ones(weight_shape, "float32")
    message = "sample_weight" if len(weight_shape) < 3 else "sample_weight over the leading axes"
    for reduction in ("sum_over_batch_size", "sum", "mean_with_sample_weight", "none"):
        expected = re.escape(message) + ".*" + re.escape(f"Received: sample_weight shape={weight_shape}")
        with pytest.raises(ValueError, match=expected):
            losses.MixtureNLL(reduction=reduction)(x, packed, sample_weight=weights)
    for good in [(2,), (2, 1), (1,), (2, 4), (1, 4), (2, 4, 1), ()]:  # as before
        assert np.isfinite(float(keras.ops.convert_to_numpy(
            losses.MixtureNLL()(x, packed, sample_weight=np.ones(good, "float32")))))


def test_mixture_nll_masks_of_other_sizes_are_a_clear_error():
    # (helper-197) a Keras mask on y_pred of another size than the pixels it is spread over
    # failed with TensorFlow's "Incompatible shapes: [2,3] vs. [2,4] [Op:LogicalAnd]"
    from keras.src.backend import set_keras_mask

    x = np.zeros((2, 4, 2), "float32")
    rng = np.random.default_rng(1)
    for shape in [(2, 3), (2, 3, 5), (3,)]:
        packed = keras.ops.convert_to_tensor(rng.normal(size=(2, 3, 4, 3)).astype("float32"))
        set_keras_mask(packed, keras.ops.ones(shape, dtype="bool"))
        with pytest.raises(ValueError, match=re.escape("A mask is spread over the per-value losses (2, 4)")):
            losses.MixtureNLL()(x, packed)
    packed = keras.ops.convert_to_tensor(rng.normal(size=(2, 3, 4, 3)).astype("float32"))
    set_keras_mask(packed, keras.ops.ones((2, 3, 4), dtype="bool"))  # over the groups: as before
    assert np.isfinite(float(keras.ops.convert_to_numpy(losses.MixtureNLL()(x, packed))))


def test_a_global_batch_loss_refuses_weights_of_another_batch_size():
    # (helper-197) the reduction of every GlobalBatchLoss (like_values) broadcast the weights
    # with the backend's error for weights of another batch size
    class SquaredError(losses.GlobalBatchLoss):
        def call(self, y_true, y_pred):
            return keras.ops.sum(keras.ops.square(y_true - y_pred), axis=-1)

    for reduction in ("sum_over_batch_size", "sum", "none"):
        expected = re.escape("A sample_weight is spread over the per-value losses (4,) from the left") + ".*"
        with pytest.raises(ValueError, match=expected + re.escape("Received: sample_weight shape=(3,)")):
            SquaredError(reduction=reduction)(np.zeros((4, 3)), np.ones((4, 3)), sample_weight=np.ones(3))
    loss = SquaredError(reduction="mean_with_sample_weight")
    with pytest.raises(ValueError, match=re.escape("Received: sample_weight shape=(4, 2)")):
        loss(np.zeros((4, 5, 3)), np.ones((4, 5, 3)), sample_weight=np.ones((4, 2)))
    assert float(keras.ops.convert_to_numpy(loss(np.zeros((4, 5, 3)), np.ones((4, 5, 3)),
                                                 sample_weight=np.ones((4, 1))))) == pytest.approx(3.0)


def test_the_mixture_nll_function_takes_nested_lists():
    # (helper-197) mixture_nll read m.shape before converting: lists failed with
    # "'list' object has no attribute 'shape'"
    x, m, pi = np.zeros((2, 4, 2)), np.ones((2, 3, 4, 2)), np.full((2, 3, 4, 1), 1 / 3)
    from_lists = losses.mixture_nll(x.tolist(), m.tolist(), pi.tolist(), 0.5)
    from_arrays = losses.mixture_nll(x.astype("float32"), m.astype("float32"), pi.astype("float32"), 0.5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(from_lists), keras.ops.convert_to_numpy(from_arrays))


# --- float16 / bfloat16: computed in float32, returned in the dtype Keras returns (helper-201) ---


def _float32_values(value):
    """A loss value as float32 numpy (no numpy conversion of a bfloat16 tensor on every backend)."""
    return keras.ops.convert_to_numpy(keras.ops.cast(value, "float32"))


def _large_batch(kind):
    """(loss factory, y_true, y_pred) of a batch whose sum or count is beyond float16's range
    (65,504) while every per-value loss is small."""
    if kind == "margin_per_token":  # 65,536 tokens, 1.08 each: the count and the sum overflowed
        return MarginLoss, np.zeros((64, 1024), "int64"), np.full((64, 1024, 4), 0.95, "float32")
    if kind == "capsule":  # 20,000 samples of margin + focal + cross, 5.6 each
        scores = np.full((20000, 10), 0.95, "float32")
        return (lambda **kw: CapsuleLoss(terms=("margin", "focal", "cross"), **kw)), np.zeros(20000, "int64"), scores
    # mixture: 65,536 pixels (a count of inf, a sum of inf: inf / inf = NaN)
    x = np.zeros((64, 32, 32, 1), "float32")
    packed = np.concatenate([np.ones((64, 2, 32, 32, 1), "float32"), np.full((64, 2, 32, 32, 1), 0.5, "float32")], -1)
    return losses.MixtureNLL, x, packed


@pytest.mark.parametrize("kind", ["margin_per_token", "capsule", "mixture"])
@pytest.mark.parametrize("dtype", ["mixed_float16", "float16", "mixed_bfloat16"])
@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
def test_a_float16_loss_reduces_a_large_batch_in_float32(kind, dtype, reduction):
    # helper-201: a loss of dtype "mixed_float16" (Keras computes in its dtype) summed its values
    # and counted them in float16: CapsuleLoss over 20,000 samples was inf, MarginLoss over 65,536
    # tokens and MixtureNLL over 65,536 pixels NaN (inf / inf), every per-value loss about 1-6.
    make, y_true, y_pred = _large_batch(kind)
    weights = np.ones(y_pred.shape[0], "float32")
    value = make(dtype=dtype, reduction=reduction)(y_true, y_pred, sample_weight=weights)
    want = make(reduction=reduction)(y_true, y_pred, sample_weight=weights)
    assert keras.backend.standardize_dtype(value.dtype) == dtype.replace("mixed_", "")  # as Keras returns
    np.testing.assert_allclose(_float32_values(value), _float32_values(want), rtol=1e-2)


def test_a_float16_margin_loss_squares_in_float32():
    # helper-201: the square of a score's distance to the margin overflowed float16 before lambda_
    # brought it back into range: inf where the loss is 0.5 * 299.9^2 = 44970 (a score of 300), or
    # 0.5 * 256^2 = 32768 (m_minus=-255, whose square is finite in float16, and a score of 1)
    for loss, scores, want in ((MarginLoss(dtype="mixed_float16", reduction="none"), [[0.9, 300.0]], 0.5 * 299.9**2),
                               (MarginLoss(m_minus=-255.0, dtype="mixed_float16", reduction="none"), [[0.9, 1.0]],
                                0.5 * 256.0**2)):
        value = loss(np.array([0]), np.array(scores, "float32"))
        assert keras.backend.standardize_dtype(value.dtype) == "float16"
        np.testing.assert_allclose(_float32_values(value), [want], rtol=1e-3)
    value = losses.margin_term(tensor(np.eye(2)[[0]], "float16"), tensor([[0.9, 300.0]], "float16"))
    assert keras.backend.standardize_dtype(value.dtype) == "float16"  # the scores' dtype, as Keras' functions
    np.testing.assert_allclose(_float32_values(value), [0.5 * 299.9**2], rtol=1e-3)


def test_the_softmax_terms_of_float16_scores_run_in_float32():
    # helper-201: log_softmax in float16 was -inf for a score 80,000 below the largest (beyond
    # float16's range): the cross-entropy of the right class (0) was 0 * -inf = NaN, the focal
    # loss of the wrong one, 0.25 * 80,000 = 20,000, NaN too
    scores = np.array([[0.0, 40000.0, -40000.0]], "float32")
    right, wrong = np.eye(3)[[1]], np.eye(3)[[2]]
    for dtype in ("float16", "bfloat16", "float32"):
        x = tensor(scores, dtype)
        for value, want in ((losses.cross_term(tensor(right, dtype), x), 0.0),
                            (losses.focal_term(tensor(right, dtype), x), 0.0),
                            (losses.focal_term(tensor(wrong, dtype), x), 20000.0)):
            assert keras.backend.standardize_dtype(value.dtype) == dtype
            np.testing.assert_allclose(_float32_values(value), [want], rtol=1e-2)
    value = CapsuleLoss(terms=("focal", "cross"), dtype="mixed_float16", reduction="none")(np.array([1]), scores)
    assert keras.backend.standardize_dtype(value.dtype) == "float16"
    np.testing.assert_allclose(_float32_values(value), [0.0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_mixture_nll_function_returns_the_dtype_of_its_means(dtype):
    # helper-201: computed in float32 (as before) it returned float32 for float16 means; Keras'
    # functional losses return the dtype of y_pred (and DESIGN: float32 math, cast back)
    rng = np.random.default_rng(0)
    x, m = rng.normal(size=(2, 4, 2)), rng.normal(size=(2, 3, 4, 2))
    pi = np.full((2, 3, 4, 1), 1 / 3)
    value = losses.mixture_nll(tensor(x, dtype), tensor(m, dtype), tensor(pi, dtype), 0.5)
    assert keras.backend.standardize_dtype(value.dtype) == dtype
    want = losses.mixture_nll(tensor(x, "float32"), tensor(m, "float32"), tensor(pi, "float32"), 0.5)
    np.testing.assert_allclose(_float32_values(value), _float32_values(want), rtol=2e-2, atol=2e-2)


# --- padded positions that hold NaN or inf (helper-202) ---
# DESIGN: "Padded positions never change the result, whatever values they hold". The reduction
# weighted the per-value losses by the mask, 0 * NaN = NaN: a NaN (inf, -inf, 1e30) score of a
# token a Keras mask leaves out made MarginLoss / CapsuleLoss NaN, a masked pixel whose group
# logits were all -inf MixtureNLL NaN, and the gradients NaN too. Masks (the Keras mask of
# y_pred) are padding: the inputs there are replaced before the math. A sample weight of 0 is
# a weight, as in Keras (test_a_zero_sample_weight_is_a_weight_as_in_keras).

_PADDING_VALUES = [np.nan, np.inf, -np.inf, 1e30]


class _MaskedValuesError(losses.GlobalBatchLoss):
    """A user's loss whose ``call`` puts a Keras mask of its own on the per-value losses."""

    def call(self, y_true, y_pred):
        from keras.src.backend import set_keras_mask

        values = ops.sum(ops.square(y_true - y_pred), axis=-1)
        set_keras_mask(values, ops.isfinite(ops.sum(y_pred, axis=-1)))
        return values


def _padded_case(kind, padding):
    """``(loss, y_true, y_pred, mask, padded_y_true, padded_y_pred)``: a batch whose padded
    positions (``mask`` False, the Keras mask set on ``y_pred``) hold ordinary values, and the
    same batch with ``padding`` in every score there and invalid labels (out-of-range ids,
    NaN targets or data) at those positions."""
    rng = np.random.default_rng(5)
    if kind in ("margin_per_token", "capsule_per_token", "capsule_per_sample"):
        per_sample = kind == "capsule_per_sample"
        lead = (4,) if per_sample else (4, 5)
        mask = np.ones(lead, bool)
        mask[1] = False  # a whole padded sample
        if not per_sample:
            mask[2:, 3:] = False  # padded tokens
        scores = rng.uniform(0.0, 1.0, size=lead + (3,)).astype("float32")
        ids = rng.integers(0, 3, size=lead)
        if kind == "margin_per_token":
            loss, y_true, bad_true = MarginLoss(), ids, np.where(mask, ids, -1)  # a padding label of -1
        else:
            loss = CapsuleLoss(terms=("margin", "focal", "cross"))
            y_true = np.eye(3, dtype="float32")[ids]
            bad_true = np.where(mask[..., None], y_true, np.nan).astype("float32")
            if per_sample:  # class ids of 7 in a [batch, 1] column
                y_true, bad_true = ids[:, None], np.where(mask, ids, 7)[:, None]
        padded = mask[..., None]
    elif kind in ("mixture_logits", "mixture_probabilities"):
        logits = kind == "mixture_logits"
        x = rng.uniform(size=(4, 3, 5, 2)).astype("float32")  # [batch, T, pixels, C]
        means = rng.uniform(size=(4, 3, 2, 5, 2))  # [batch, T, K, pixels, C]
        pi = rng.normal(size=(4, 3, 2, 5, 1)) if logits else np.full((4, 3, 2, 5, 1), 0.5)
        y_pred = np.concatenate([means, pi], -1).astype("float32")
        loss = losses.MixtureNLL(sigma=0.5, group_axis=2, from_logits=logits)
        if logits:  # RTagger's step mask [batch, T]
            mask = np.ones((4, 3), bool)
            mask[1:, 2:] = False
            padded, pixels = mask[:, :, None, None, None], mask[:, :, None, None]
        else:  # a mask over every group of every pixel [batch, T, K, pixels]
            pixels = rng.uniform(size=(4, 3, 5)) > 0.3
            mask = np.repeat(pixels[:, :, None], 2, axis=2)
            padded, pixels = pixels[:, :, None, :, None], pixels[..., None]
        bad_true = np.where(pixels, x, np.nan).astype("float32")
        bad_pred = np.where(padded, y_pred, padding).astype("float32")
        if logits and padding == -np.inf:  # logits all -inf, means NaN
            bad_pred[..., :-1] = np.where(padded, y_pred[..., :-1], np.nan)
        return loss, x, y_pred, mask, bad_true, bad_pred
    else:  # a user's GlobalBatchLoss
        mask = rng.uniform(size=(4, 5)) > 0.3
        y_true = rng.normal(size=(4, 5, 3)).astype("float32")
        scores = rng.normal(size=(4, 5, 3)).astype("float32")
        loss, padded = SquaredError(), mask[..., None]
        bad_true = np.where(padded, y_true, np.nan).astype("float32")
    return loss, y_true, scores, mask, bad_true, np.where(padded, scores, padding).astype("float32")


_PADDED_KINDS = ["margin_per_token", "capsule_per_token", "capsule_per_sample", "mixture_logits",
                 "mixture_probabilities", "users_loss"]


def _masked_value_and_grad(loss, y_true, y_pred, mask, weights=None, jit=False):
    """The loss of ``y_pred`` carrying the Keras ``mask``, and its gradient for ``y_pred``."""
    from keras.src.backend import set_keras_mask

    def fn(p):
        set_keras_mask(p, ops.convert_to_tensor(mask))
        return loss(ops.convert_to_tensor(y_true), p,
                    sample_weight=None if weights is None else ops.convert_to_tensor(weights))

    value, [grad], _ = value_and_grads(compiled(fn) if jit else fn, [tensor(y_pred)])
    return float(value), keras.ops.convert_to_numpy(grad)


def _check_padding_is_ignored(got, want, y_pred, mask):
    (value, grad), (want_value, want_grad) = got, want
    assert np.isfinite(want_value) and value == pytest.approx(want_value, rel=1e-6)
    assert np.all(np.isfinite(grad))  # NaN before
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    padded = ~np.broadcast_to(np.reshape(mask, mask.shape + (1,) * (grad.ndim - mask.ndim)), grad.shape)
    assert np.all(grad[padded] == 0) and np.any(grad[~padded] != 0)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight", "sum"])
@pytest.mark.parametrize("padding", _PADDING_VALUES, ids=["nan", "inf", "-inf", "1e30"])
@pytest.mark.parametrize("kind", _PADDED_KINDS)
def test_masked_positions_holding_nan_or_inf_change_neither_the_loss_nor_its_gradient(kind, padding, reduction):
    loss, y_true, y_pred, mask, bad_true, bad_pred = _padded_case(kind, padding)
    loss.reduction = reduction
    weights = np.random.default_rng(6).uniform(0.5, 2.0, size=y_pred.shape[:1]).astype("float32")
    want = _masked_value_and_grad(loss, y_true, y_pred, mask, weights)
    got = _masked_value_and_grad(loss, bad_true, bad_pred, mask, weights)
    _check_padding_is_ignored(got, want, y_pred, mask)


@pytest.mark.parametrize("padding", [np.nan, -np.inf], ids=["nan", "-inf"])
@pytest.mark.parametrize("kind", _PADDED_KINDS)
def test_masked_positions_holding_nan_or_inf_are_ignored_when_compiled(kind, padding):
    # tf.function(jit_compile=True) on TensorFlow, jax.jit on JAX: traced, the labels are not
    # checked, and an invalid id at padding gave its position a NaN loss (0 * NaN)
    loss, y_true, y_pred, mask, bad_true, bad_pred = _padded_case(kind, padding)
    want = _masked_value_and_grad(loss, y_true, y_pred, mask)
    got = _masked_value_and_grad(loss, bad_true, bad_pred, mask, jit=True)
    _check_padding_is_ignored(got, want, y_pred, mask)


@pytest.mark.parametrize("kind", ["capsule_per_token", "mixture_logits", "users_loss"])
def test_masked_positions_holding_nan_are_ignored_under_two_replicas(kind):
    # each replica's loss and its gradient for its share of the scores are those of the clean
    # batch on one device (the replicas' losses add up to it)
    import tensorflow as tf

    from keras.src.backend import set_keras_mask
    from tests.harness import two_cpu_strategy

    strategy = two_cpu_strategy()
    loss, y_true, y_pred, mask, bad_true, bad_pred = _padded_case(kind, np.nan)
    want_value, want_grad = _masked_value_and_grad(loss, y_true, y_pred, mask)

    def compute(y, p, m):
        with tf.GradientTape() as tape:
            tape.watch(p)
            q = tf.identity(p)
            set_keras_mask(q, m)
            value = loss(y, q)
        return value, tape.gradient(value, p)

    parts = [tensor(a) for a in (bad_true, bad_pred, mask)]
    half = len(y_pred) // 2

    def shard(context):
        i = context.replica_id_in_sync_group
        return tuple(a[i * half:(i + 1) * half] for a in parts)

    values, grads = tf.function(lambda s: strategy.run(compute, args=s))(
        strategy.experimental_distribute_values_from_function(shard))
    total = float(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None))
    grad = np.concatenate([g.numpy() for g in strategy.experimental_local_results(grads)])
    _check_padding_is_ignored((total, grad), (want_value, want_grad), y_pred, mask)


def test_a_mask_the_per_value_losses_carry_leaves_their_nan_out():
    # a user's GlobalBatchLoss whose call masks its own non-finite values: 0 * NaN = NaN before
    y_true = np.zeros((3, 2), "float32")
    y_pred = np.array([[1.0, 1.0], [np.nan, 0.0], [2.0, 0.0]], "float32")
    for reduction, want in (("sum_over_batch_size", 3.0), ("sum", 6.0)):
        assert float(_MaskedValuesError(reduction=reduction)(y_true, y_pred)) == pytest.approx(want)
    none = _MaskedValuesError(reduction="none")(y_true, y_pred)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(none), [2.0, 0.0, 4.0])


def test_a_zero_sample_weight_is_a_weight_as_in_keras():
    # The decision (helper-202): masks are padding, sample weights are weights. Keras' own losses
    # give NaN for a NaN value weighted 0 (0 * NaN), and these losses check the labels of a
    # sample weighted 0 as any other (an id of -1 raises eagerly); to pad, use a mask.
    scores = np.array([[0.5, 0.5], [np.nan, 0.5]], "float32")
    weights = np.array([1.0, 0.0], "float32")
    keras_mse = keras.losses.MeanSquaredError()(np.zeros((2, 2), "float32"), scores, sample_weight=weights)
    assert np.isnan(float(keras_mse))
    assert np.isnan(float(MarginLoss()(np.array([0, 1]), scores, sample_weight=weights)))
    with pytest.raises(ValueError, match=r"invalid values \[-1\]"):
        MarginLoss()(np.array([0, -1]), np.array([[0.5, 0.5], [0.2, 0.5]], "float32"), sample_weight=weights)
