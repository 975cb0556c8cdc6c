"""Metamorphic properties of the MAC applications (Sort-of-CLEVR, CLEVR).

* A model's answer to a question does not depend on the other questions of its batch
  (also beside extreme inputs or an all-padding question), nor on how far the question
  is padded; a symbolic Sort-of-CLEVR knowledge base is a set of objects: their order
  does not change the answer.
* The generated Sort-of-CLEVR answers are those of the question's words and the scene:
  recomputed here from the question text and the knowledge base by a separate reading
  of the templates, and, for image scenes, from the pixels of the rendered image alone.

The model checks run eagerly and compiled (``jit_compile``; ``jax.jit`` on JAX, whose
run ``test_on_jax`` makes in a subprocess).
"""

import sys

import keras
import numpy as np
import pytest

from applications import clevr
from applications import sort_of_clevr as soc
from tests.backends import checks_on_jax, run_checks

TOL = dict(rtol=1e-5, atol=1e-5)
MODES = ("eager", "jit")


def _predict(model, x, mode):
    model.compile(jit_compile=mode == "jit")
    return model.predict(x, verbose=0, batch_size=len(next(iter(x.values()))))


def _pad(tokens, extra):
    return np.concatenate([tokens, np.zeros((len(tokens), extra), tokens.dtype)], axis=1)


def _sort_of_clevr_model(kb):
    keras.utils.set_random_seed(1)
    image = {"stem_filters": 4} if kb == "image" else {}
    return soc.build_model(units=8, max_steps=2, embedding_dim=6, kb=kb, self_attention=True, memory_gate=True,
                           **image)


# ------------------------------------------------------------------ models
def check_sort_of_clevr_symbolic(mode):
    model = _sort_of_clevr_model("symbolic")
    x, _ = soc.generate_examples(4, seed=2)
    want = _predict(model, x, mode)
    # padding: the same questions with more padding
    padded = _predict(model, {"question": _pad(x["question"], 5), "kb": x["kb"]}, mode)
    np.testing.assert_allclose(padded, want, **TOL, err_msg="more padding")
    # the objects in another order, one per sample
    rng = np.random.default_rng(3)
    perm = np.stack([rng.permutation(soc.NUM_OBJECTS) for _ in range(4)])
    shuffled = _predict(model, {"question": x["question"], "kb": np.take_along_axis(x["kb"], perm[:, :, None], 1)},
                        mode)
    np.testing.assert_allclose(shuffled, want, **TOL, err_msg="objects reordered")
    # sample 0 alone, and beside an all-padding question and an extreme scene
    alone = _predict(model, {k: v[:1] for k, v in x.items()}, mode)
    np.testing.assert_allclose(alone, want[:1], **TOL, err_msg="alone")
    q, kb = x["question"].copy(), x["kb"].copy()
    q[1] = 0
    kb[2] = 1e4
    beside = _predict(model, {"question": q, "kb": kb}, mode)
    np.testing.assert_allclose(beside[:1], want[:1], **TOL, err_msg="beside odd neighbours")
    np.testing.assert_allclose(beside[3:], want[3:], **TOL, err_msg="beside odd neighbours")
    assert np.all(np.isfinite(beside))


def check_sort_of_clevr_image(mode):
    model = _sort_of_clevr_model("image")
    x, _ = soc.generate_examples(3, seed=4, kb="image")
    want = _predict(model, x, mode)
    padded = _predict(model, {"question": _pad(x["question"], 3), "image": x["image"]}, mode)
    np.testing.assert_allclose(padded, want, **TOL, err_msg="more padding")
    alone = _predict(model, {k: v[1:2] for k, v in x.items()}, mode)
    np.testing.assert_allclose(alone, want[1:2], **TOL, err_msg="alone")
    image = x["image"].copy()
    image[0] = 1e4
    beside = _predict(model, {"question": x["question"], "image": image}, mode)
    np.testing.assert_allclose(beside[1:], want[1:], **TOL, err_msg="beside an extreme image")


def check_clevr(mode):
    keras.utils.set_random_seed(2)
    model = clevr.build_model(vocabulary_size=20, num_answers=5, feature_shape=(3, 3, 4), units=8,
                              embedding_dim=6, max_steps=2, self_attention=True, memory_gate=True)
    rng = np.random.default_rng(5)
    tokens = rng.integers(1, 20, (4, 7)).astype("int32")
    tokens[0, 4:] = 0
    tokens[1, 2:] = 0
    features = rng.standard_normal((4, 3, 3, 4)).astype("float32")
    want = _predict(model, {"question": tokens, "features": features}, mode)
    padded = _predict(model, {"question": _pad(tokens, 4), "features": features}, mode)
    np.testing.assert_allclose(padded, want, **TOL, err_msg="more padding")
    # question 0 alone and cut to its words: as in the batch
    alone = _predict(model, {"question": tokens[:1, :4], "features": features[:1]}, mode)
    np.testing.assert_allclose(alone, want[:1], **TOL, err_msg="alone, unpadded")
    tokens[2] = 0
    features[3] = -1e4
    beside = _predict(model, {"question": tokens, "features": features}, mode)
    np.testing.assert_allclose(beside[:2], want[:2], **TOL, err_msg="beside odd neighbours")
    assert np.all(np.isfinite(beside))


# ------------------------------------------------------------------ generated answers
def _answer_from_text(text, objects):
    """The answer of question ``text`` about ``objects`` ``{colour: (shape, (x, y))}``,
    read from the words (not from the template index)."""
    words = text.split()
    color = next(w for w in words if w in soc.COLORS)
    shape = {c: s for c, (s, _) in objects.items()}
    pos = {c: np.asarray(p, np.float64) for c, (_, p) in objects.items()}

    def dist(a, b):
        return float(np.hypot(*(pos[a] - pos[b])))

    def nearest(a):
        return min((o for o in objects if o != a), key=lambda o: dist(a, o))

    def farthest(a):
        return max((o for o in objects if o != a), key=lambda o: dist(a, o))

    if "nearest" in words and "farthest" in words:
        return shape[nearest(farthest(color))]
    if "closest" in words:
        return shape[nearest(color)]
    if "farthest" in words:
        return shape[farthest(color)]
    if words[:2] == ["how", "many"]:
        return str(sum(shape[o] == shape[color] for o in objects))
    if "left" in words:
        return "yes" if pos[color][0] < 0.5 else "no"
    if "top" in words:
        return "yes" if pos[color][1] < 0.5 else "no"
    assert words[:4] == ["what", "is", "the", "shape"], text
    return shape[color]


def _objects_from_kb(kb):
    return {soc.COLORS[int(np.argmax(row[:6]))]: (soc.SHAPES[int(np.argmax(row[6:8]))], row[-2:]) for row in kb}


def _objects_from_image(image):
    """Each colour's shape and position read off the pixels: the centroid of its pixels
    mapped back to [0, 1], a square when it fills its whole box."""
    margin = soc.OBJECT_SIZE // 2 + 1
    objects = {}
    for color, rgb in zip(soc.COLORS, soc.RGB):
        rows, cols = np.nonzero(np.all(np.abs(image - rgb) < 1e-6, axis=-1))
        assert len(rows), f"no {color} pixels"
        box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
        position = (np.array([cols.mean(), rows.mean()]) - margin) / (soc.IMAGE_SIZE - 1 - 2 * margin)
        objects[color] = ("square" if len(rows) == box else "circle", position)
    return objects


def check_generated_answers(kb):
    x, answers = soc.generate_examples(500, seed=6, kb=kb)
    for i, label in enumerate(answers):
        text = soc.detokenize(x["question"][i])
        if kb != "image":
            assert _answer_from_text(text, _objects_from_kb(x["kb"][i])) == soc.ANSWERS[label], (i, text)
        if kb != "symbolic":
            seen = _objects_from_image(x["image"][i])
            assert _answer_from_text(text, seen) == soc.ANSWERS[label], (i, text, "from the image")
            if kb == "both":  # the image shows the objects of the knowledge base
                for color, (shape, position) in _objects_from_kb(x["kb"][i]).items():
                    assert seen[color][0] == shape, (i, color)
                    np.testing.assert_allclose(seen[color][1], position, atol=1e-6)


# ------------------------------------------------------------------ pytest
MODEL_CHECKS = {
    "sort_of_clevr_symbolic": check_sort_of_clevr_symbolic,
    "sort_of_clevr_image": check_sort_of_clevr_image,
    "clevr": check_clevr,
}


@pytest.mark.parametrize("check", sorted(MODEL_CHECKS))
def test_model_eager(check):
    MODEL_CHECKS[check]("eager")


@pytest.mark.graph_mode  # (jit_compile needs the traced predict step)
@pytest.mark.parametrize("check", sorted(MODEL_CHECKS))
def test_model_compiled(check):
    MODEL_CHECKS[check]("jit")


@pytest.mark.parametrize("kb", ["symbolic", "image", "both"])
def test_generated_answers(kb):
    check_generated_answers(kb)


def test_on_jax():
    """The model checks on JAX (eager and ``jax.jit``), in a subprocess."""
    checks_on_jax("tests.applications.test_mac_apps_metamorphic")


def main():
    checks = [(f"{name}[{mode}]", fn, (mode,)) for name, fn in sorted(MODEL_CHECKS.items()) for mode in MODES]
    return run_checks(checks)


if __name__ == "__main__":
    sys.exit(main())
