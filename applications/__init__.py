"""keras-capsules applications: data pipelines, model builders and the command line.

``keras_capsules`` is imported first, before anything loads TensorFlow, so that its
runtime defaults (TensorFlow's oneDNN kernels off; see ``keras_capsules/__init__.py``)
hold for every application, the command line and the benchmarks.
"""

import keras_capsules  # noqa: F401
