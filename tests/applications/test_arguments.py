"""The applications' Python functions and HyperModels refuse a bad argument at once, in
one line (an ``InputError``, a ``ValueError``), where it failed late with a raw error or
was silently changed (audit 2026-11-30)."""

import numpy as np
import pytest

from applications import demo, occluded_mnist, sort_of_clevr, textured_mnist
from applications.errors import InputError
from tuning.demo import DemoHyperModel

_DIGITS = np.zeros((4, 28, 28), "float32"), np.arange(4) % 10

CASES = {
    # a negative limit dropped the last digits silently; 2.5 was a slicing TypeError
    "demo.load_arrays limit=-5": (lambda: demo.load_arrays(limit=-5), "limit=-5"),
    "demo.load_arrays limit=2.5": (lambda: demo.load_arrays(limit=2.5), "limit=2.5"),
    # -1 was numpy's "expected non-negative integer"
    "demo.make_datasets seed=-1": (lambda: demo.make_datasets(*demo.load_arrays(limit=20), 4, seed=-1), "seed=-1"),
    # pose_size=0 failed naming `filters`; hidden_norm="no" was true
    "demo.build_model pose_size=0": (lambda: demo.build_model(pose_size=0), "pose_size=0"),
    "demo.build_model hidden_norm='no'": (lambda: demo.build_model(hidden_norm="no"), "hidden_norm='no'"),
    # int() made 2.7 a batch of 2; epochs=0 was taken; seed -1 failed later in numpy
    "DemoHyperModel batch_size=2.7": (lambda: DemoHyperModel(batch_size=2.7), "batch_size=2.7"),
    "DemoHyperModel epochs=0": (lambda: DemoHyperModel(epochs=0), "epochs=0"),
    "DemoHyperModel seed=-1": (lambda: DemoHyperModel(seed=-1), "seed=-1"),
    # built, then failed in predict with a raw shape error
    "textured_mnist.build_model image_size=0": (lambda: textured_mnist.build_model(image_size=0), "image_size=0"),
    "textured_mnist.generate seed=-1": (lambda: textured_mnist.generate(*_DIGITS, 2, seed=-1), "seed=-1"),
    "occluded_mnist.generate seed=-1": (lambda: occluded_mnist.generate(*_DIGITS, 2, seed=-1), "seed=-1"),
    # a vocabulary smaller than the task's failed on its questions in a raw gather; one
    # answer was a softmax that is always 1
    "sort_of_clevr.build_model vocabulary_size=3": (
        lambda: sort_of_clevr.build_model(vocabulary_size=3), "vocabulary_size=3"),
    "sort_of_clevr.build_model num_answers=1": (lambda: sort_of_clevr.build_model(num_answers=1), "num_answers=1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_argument_is_refused_in_one_line(case):
    call, received = CASES[case]
    with pytest.raises(InputError, match=f"Received: {received}") as caught:
        call()
    assert "\n" not in str(caught.value)


def test_the_batch_size_of_an_evaluation_is_checked():
    # batch_size=0 gave a result in both, where error_per_step refused it
    with pytest.raises(InputError, match="Received: batch_size=0"):
        occluded_mnist.classification_error(None, {"frames": np.zeros((1, 5, 32, 32, 1)), "labels": [0]}, batch_size=0)
    with pytest.raises(InputError, match="Received: batch_size=0"):
        textured_mnist.evaluate_iterations(None, {"images": np.zeros((1, 28, 28, 1))}, batch_size=0)
