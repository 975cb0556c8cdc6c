"""The application tests run their Keras steps eagerly (TensorFlow backend), unless marked.

Most of these tests train a tiny model for an epoch or two and check what is around it:
the files a run writes, resuming after a crash, the command line, evaluation of the
split a run recorded. Tracing the train, test and predict steps is most of such a run.
The folder's tests took 2,168 s summed over both workers when all ran traced (the whole
suite, ``pytest tests --durations=0``, 2026-11-30), and 1,473 s with the marks below
(``pytest tests/applications tests/tuning --durations=0``, the same machine and day).
Which tests keep graph mode for speed was chosen from each test's time in both modes.

Marked ``graph_mode`` (traced, as a user's ``fit`` is), with the reason on the marker:
- every application's ``train`` and ``evaluate`` from the command line (the tiny
  train-then-evaluate runs of ``test_cli_applications.py``; the demo's in ``test_demo.py``);
- tests that check traced code: how often a step is traced, ``tf.function`` on unknown
  shapes, the ladder's symbolic loop, the strategies and Keras fixes of
  ``test_distribute.py``;
- tests that train for many steps (the learning tests, longer runs), where eager
  execution took longer than the trace it saves.
The multi-worker tests run their workers in subprocesses, traced; the layers are traced
and compiled with XLA by their own contract tests (tests/layers).
"""

import pytest

from tests.conftest import functions_run_eagerly


@pytest.fixture(autouse=True)
def _steps_run_eagerly(request):
    yield from functions_run_eagerly(request)
