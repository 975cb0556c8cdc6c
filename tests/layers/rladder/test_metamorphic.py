"""Metamorphic checks of the Recurrent Ladder family (helper-206): properties the
algorithms imply, for every level type, rather than values.

* causality over time: RLadder's outputs at step t (prediction and top) do not change,
  and get an exactly zero gradient, when inputs after t change;
* batch independence, layer and instance normalization and training included;
* the unrolled and the symbolic loop give the same outputs and gradients;
* RTagger is equivariant to a permutation of its groups (one shared ladder), its masks
  sum to 1; the AMI metric is invariant to renaming labels and groups, 1 for a perfect
  segmentation and about 0 for random ones;
* ConvG1's elementwise parameters act per channel.

The causality and loop checks also run under ``jax.jit`` in a JAX subprocess
(``python -m tests.layers.rladder.test_metamorphic``) and under TensorFlow's XLA.
"""

import sys

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ConvG1, RLadder, RTagger, level_spec
from keras_capsules.metrics import AdjustedMutualInformation, adjusted_mutual_info
from tests.backends import BACKEND, checks_on_jax, compiled, run_checks, value_and_grads

T = 4
IMAGE, VECTOR = (4, 4, 1), (5,)
#: one ladder per encoder type, each with another combinator or switch below it
LADDERS = {
    "gated": ([level_spec("gated", 4), level_spec("gated", 3)], VECTOR),
    "lstm": ([level_spec("lstm", 4), level_spec("lstm", 3)], VECTOR),
    "conv": ([level_spec("conv", 2, normalization="instance"), level_spec("conv", 3, pool=2, normalization="layer"),
              level_spec("gated", 4)], IMAGE),
    "gatedconv": ([level_spec("gatedconv", 2, normalization="instance"),
                   level_spec("gatedconv", 3, pool=2, combinator="ConvG2"), level_spec("gated", 4, unflatten="dense")],
                  IMAGE),
    "convlstm": ([level_spec("convlstm", 2),
                  level_spec("convlstm", 3, pool=2, combinator="ConvG3", upsample_mode="transpose"),
                  level_spec("gated", 4)], IMAGE),
}
#: decoder switches: (use_decoder, decoder_to_encoder)
SWITCHES = {"feedback": dict(), "no_feedback": dict(decoder_to_encoder=False), "encoder_only": dict(use_decoder=False)}


def _levels(kind, use_decoder=True):
    """The ladder's levels; without decoder, without the decoder's options (they warn)."""
    levels, features = LADDERS[kind]
    if not use_decoder:
        levels = [dict(spec, combinator=None, combinator_filters=None, upsample_mode="nearest", unflatten="broadcast")
                  for spec in levels]
    return levels, features


def _ladder(kind, switch="feedback", **kwargs):
    options = dict(SWITCHES[switch], **kwargs)
    levels, features = _levels(kind, options.get("use_decoder", True))
    return RLadder(levels, **options), features


def _outputs(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


# ------------------------------------------------------------------ causality
def check_causality(kind, switch, unroll, traced=False):
    """Outputs up to step t0 are bit for bit those of the same inputs with every later
    step (and its mask entry) changed, and their gradient w.r.t. the later inputs is 0."""
    ladder, features = _ladder(kind, switch, unroll=unroll)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, T) + features).astype("float32")
    mask = np.ones((3, T), bool)
    mask[0, 1] = mask[2, 0] = False
    t0 = 1
    later = x.copy()
    later[:, t0 + 1:] = 5 * rng.normal(size=later[:, t0 + 1:].shape)
    later_mask = mask.copy()
    later_mask[:, t0 + 1:] = [[False, True], [True, False], [False, False]]
    ladder(x, mask=mask)  # built outside any trace

    def run(v, m):
        return _outputs(ladder(v, mask=m))

    def grad_of_step(v, m):
        def total(u):
            return sum(ops.sum(ops.sin(1.3 * o[:, t0])) for o in run(u, m))

        return value_and_grads(total, [v])[1][0]

    if traced:
        run, grad_of_step = compiled(run), compiled(grad_of_step)
    for a, b in zip(run(x, mask), run(later, later_mask)):
        np.testing.assert_array_equal(_numpy(a)[:, :t0 + 1], _numpy(b)[:, :t0 + 1])
    grad = _numpy(grad_of_step(ops.convert_to_tensor(x), ops.convert_to_tensor(mask)))
    assert np.all(grad[:, t0 + 1:] == 0), np.abs(grad[:, t0 + 1:]).max()
    assert np.any(grad[:, :t0 + 1] != 0)


#: every encoder type with feedback in both loops, and every switch in both loops
CAUSAL_CASES = [
    ("gated", "feedback", True), ("gated", "no_feedback", False),
    ("lstm", "feedback", False), ("lstm", "encoder_only", True),
    ("conv", "feedback", False), ("conv", "no_feedback", True),
    ("gatedconv", "feedback", True), ("gatedconv", "encoder_only", False),
    ("convlstm", "feedback", False), ("convlstm", "no_feedback", True),
]


@pytest.mark.parametrize("kind,switch,unroll", CAUSAL_CASES,
                         ids=[f"{k}-{s}-{'unrolled' if u else 'loop'}" for k, s, u in CAUSAL_CASES])
def test_outputs_at_a_step_do_not_depend_on_later_inputs(kind, switch, unroll):
    check_causality(kind, switch, unroll)


def test_causality_under_xla():
    check_causality("gated", "feedback", False, traced=True)


def test_causality_of_a_sequence_of_unknown_length():
    levels, features = _levels("convlstm")
    inputs = keras.Input((None,) + features)
    model = keras.Model(inputs, RLadder(levels)(inputs))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, T) + features).astype("float32")
    later = x.copy()
    later[:, 2:] = rng.normal(size=later[:, 2:].shape)
    for a, b in zip(model.predict(x, verbose=0), model.predict(later, verbose=0)):
        np.testing.assert_array_equal(a[:, :2], b[:, :2])


# ------------------------------------------------------------------ batch independence
@pytest.mark.parametrize("kind", list(LADDERS))
def test_a_samples_outputs_do_not_depend_on_the_other_samples(kind):
    # (the conv levels normalize per instance and per layer, the ladder per layer)
    ladder, features = _ladder(kind, normalization="layer", output_units=2)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 3) + features).astype("float32")
    others = x.copy()
    others[1:] = 10 * rng.normal(size=others[1:].shape)
    for training in (False, True):
        together, changed, alone = (_outputs(ladder(v, training=training)) for v in (x, others, x[:1]))
        for a, b, c in zip(together, changed, alone):
            np.testing.assert_allclose(_numpy(a)[:1], _numpy(b)[:1], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(_numpy(a)[:1], _numpy(c), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ the two loops
LOOP_CASES = [
    ("gated", "no_feedback", dict(normalization="layer")),
    ("lstm", "feedback", dict(output_units=2, learn_initial_feedback=True)),
    ("gatedconv", "encoder_only", dict()),
    ("convlstm", "feedback", dict(normalization="layer", learn_initial_feedback=True)),
]


def check_loops_agree(kind, switch, kwargs):
    """Unrolled and symbolic loop (same weights, a learned initial feedback made
    non-zero): the same outputs and gradients w.r.t. the inputs and every weight,
    with padded steps."""
    (unrolled, features), (looped, _) = (_ladder(kind, switch, unroll=u, **kwargs) for u in (True, False))
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, T) + features).astype("float32")
    mask = np.ones((3, T), bool)
    mask[0, 1] = mask[2, 0] = mask[1, T - 1] = False
    unrolled(x)
    looped(x)
    for w in unrolled.weights:
        if "initial_feedback" in w.path:
            w.assign(rng.normal(size=w.shape))
    looped.set_weights(unrolled.get_weights())
    results = []
    for ladder in (unrolled, looped):

        def total(v, ladder=ladder):
            outputs = _outputs(ladder(v, mask=mask))
            return sum(ops.sum(ops.sin(o)) for o in outputs), outputs

        (_, outputs), (x_grad,), weight_grads = value_and_grads(total, [x], ladder.trainable_weights, has_aux=True)
        results.append(outputs + [x_grad] + list(weight_grads))
    assert len(results[0]) == len(results[1])
    for a, b in zip(*results):
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind,switch,kwargs", LOOP_CASES, ids=[f"{c[0]}-{c[1]}" for c in LOOP_CASES])
def test_the_two_loops_give_the_same_outputs_and_gradients(kind, switch, kwargs):
    check_loops_agree(kind, switch, kwargs)


# ------------------------------------------------------------------ RTagger and AMI
@pytest.mark.parametrize("kwargs", [dict(), dict(mask_damping="learned", unroll=False),
                                    dict(mask_update="posterior", initial_mask_scale=2)],
                         ids=["learned", "damped_loop", "posterior_coarse"])
@pytest.mark.parametrize("kind", ["gated", "convlstm"])
def test_permuting_the_groups_permutes_the_tagger_outputs(kind, kwargs):
    levels, features = LADDERS[kind]
    if features != IMAGE:
        kwargs = {k: v for k, v in kwargs.items() if k != "initial_mask_scale"}  # (images only)
    tagger = RTagger(3, levels, n_iters=3, random_initial_masks=False, **kwargs)
    x = np.random.default_rng(4).normal(size=(2,) + (features if features == IMAGE else (6,))).astype("float32")
    pi, m = (_numpy(v) for v in tagger(x))
    np.testing.assert_allclose(pi.sum(axis=2), 1.0, rtol=1e-5)
    order = [2, 0, 1]
    tagger.initial_logits.assign(_numpy(tagger.initial_logits)[order])  # the groups' initial states
    pi2, m2 = (_numpy(v) for v in tagger(x))
    np.testing.assert_allclose(pi2, pi[:, :, order], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m2, m[:, :, order], rtol=1e-5, atol=1e-6)


def _one_hot_pi(groups, k):
    return np.moveaxis(np.eye(k, dtype="float32")[groups], -1, 1)  # [batch, K, pixels]


def _ami(truth, groups, k, num_labels=4):
    metric = AdjustedMutualInformation(num_labels)
    metric.update_state(truth, _one_hot_pi(groups, k))
    return float(metric.result())


def test_ami_is_invariant_to_renaming_labels_and_groups_and_one_for_a_perfect_segmentation():
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 4, size=(6, 30))
    groups = rng.integers(0, 5, size=(6, 30))
    base = _ami(truth, groups, 5)
    renamed = _ami(np.array([2, 0, 3, 1])[truth], np.array([4, 2, 0, 1, 3])[groups], 5)
    np.testing.assert_allclose(renamed, base, atol=1e-6)
    np.testing.assert_allclose(adjusted_mutual_info(truth, _one_hot_pi(groups, 5)), base, atol=1e-5)
    np.testing.assert_allclose(_ami(truth, (truth + 1) % 4, 4), 1.0, atol=1e-6)
    np.testing.assert_allclose(_ami(truth, truth, 6), 1.0, atol=1e-6)  # unused groups too


def test_ami_of_random_segmentations_is_zero_in_expectation():
    rng = np.random.default_rng(6)
    truth = rng.integers(0, 4, size=(400, 25))
    groups = rng.integers(0, 3, size=(400, 25))
    metric = AdjustedMutualInformation(4)
    metric.update_state(truth, _one_hot_pi(groups, 3))
    assert abs(float(metric.result())) < 0.01  # standard error ~0.001 here


# ------------------------------------------------------------------ the combinators
def test_conv_g1_parameters_act_per_channel():
    rng = np.random.default_rng(7)
    top, lat = rng.normal(size=(2, 4, 4, 3)).astype("float32"), rng.normal(size=(2, 4, 4, 5)).astype("float32")
    layer = ConvG1()
    before = _numpy(layer([top, lat]))
    assert tuple(layer.mu_weights.shape) == tuple(layer.s_weights.shape) == (5, 5)
    for weights in (layer.mu_weights, layer.s_weights):
        values = _numpy(weights)
        changed = values.copy()
        changed[:, 2] += 0.5
        weights.assign(changed)
        after = _numpy(layer([top, lat]))
        weights.assign(values)
        moved = np.any(after != before, axis=(0, 1, 2))
        assert moved.tolist() == [False, False, True, False, False]


# ------------------------------------------------------------------ on JAX
def _jax_checks():
    return [
        ("causality gated loop, jax.jit", check_causality, ("gated", "feedback", False, True)),
        ("causality conv unrolled", check_causality, ("conv", "no_feedback", True)),
        ("loops lstm", check_loops_agree, LOOP_CASES[1]),
    ]


def test_the_checks_hold_under_jax():
    checks_on_jax("tests.layers.rladder.test_metamorphic")


def main():
    return run_checks(_jax_checks())


if __name__ == "__main__":
    sys.exit(main())
