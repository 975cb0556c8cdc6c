"""The tuning tests run their trials' Keras steps eagerly (TensorFlow backend).

What these tests check is the search around the model: the hyperparameters each trial
gets, the files a search writes, resuming, failed trials, the best model. Each trial
trains for one or two steps of a tiny model, and in graph mode about 80% of a trial is
TensorFlow tracing its train and evaluation steps (profiled); run eagerly, the same steps
skip the tracing. Measured on one core (2026-11-27, ``pytest -n 0 tests/tuning``): 592 s
in graph mode against 256 s eagerly.

Graph mode stays covered: every application's ``train`` and ``evaluate`` from the
command line run traced (tests/applications/conftest.py), ``test_search.py``'s search under a
``MirroredStrategy`` is marked ``graph_mode`` and runs traced, and the multi-worker
search runs in subprocesses, which this fixture does not reach.
"""

import pytest

from tests.conftest import functions_run_eagerly


@pytest.fixture(autouse=True)
def _trials_run_eagerly(request):
    yield from functions_run_eagerly(request)
