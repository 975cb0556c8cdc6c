"""keras-capsules: Keras 3 layers for networks that iterate to infer.

Capsule routing (EM with a D-step, k-means, dynamic routing), compositional-code
embeddings, Recurrent Ladder networks and MAC reasoning cells, written with
``keras.ops`` so that they compile with XLA and are not tied to one Keras backend.
They are tested on TensorFlow and, where JAX is installed, on JAX
(``tests/test_backend_portability.py``), the Recurrent Ladder family included.
Ragged inputs and ``tf.distribute`` are TensorFlow's.
"""

import os as _os
import sys as _sys
import warnings as _warnings

# TensorFlow 2.21's oneDNN batch-matmul kernels corrupt the heap when they broadcast
# operands of different ranks (tensorflow/tensorflow#117700, fixed after 2.21.0). The
# einsums of the routing layers and Keras' own Dense on rank-3+ inputs reach those
# kernels, and the corruption surfaces later as a random segfault or abort. Unless the
# user chose otherwise, turn the oneDNN kernels off before TensorFlow loads (the Eigen
# kernels are exact and, for these layers, within 2x of oneDNN's speed).
# ``TF_ENABLE_ONEDNN_OPTS=1`` opts back in. ``applications/__init__.py`` sets the same
# default without importing this package (``keras-capsules --help`` loads no TensorFlow):
# change both together (tests/applications/test_cli_startup.py checks that they agree).
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
if "tensorflow" not in _sys.modules:
    _os.environ.setdefault(ONEDNN_VARIABLE, "0")
elif _os.environ.get(ONEDNN_VARIABLE) is None:
    _warnings.warn(
        "keras_capsules was imported after TensorFlow, whose oneDNN CPU kernels (on by "
        "default in TensorFlow 2.21) can corrupt memory in broadcast batch matmuls "
        "(tensorflow/tensorflow#117700). Import keras_capsules before keras/tensorflow, "
        f"or set {ONEDNN_VARIABLE}=0 in the environment.",
        RuntimeWarning,
        stacklevel=2,
    )

from keras_capsules import callbacks, layers, losses, metrics, ops, optimizers  # noqa: E402
from keras_capsules.layers import *  # noqa: F401,F403,E402  (the public layers, see layers.__all__)
from keras_capsules.optimizers import RAdam  # noqa: E402

__version__ = "0.1.0"

__all__ = [*layers.__all__, "RAdam", "callbacks", "layers", "losses", "metrics", "ops", "optimizers", "__version__"]
