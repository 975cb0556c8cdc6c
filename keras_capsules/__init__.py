"""keras-capsules: Keras 3 layers for networks that iterate to infer.

Capsule routing (EM with a D-step, k-means, dynamic routing), compositional-code
embeddings, Recurrent Ladder networks and MAC reasoning cells, written with
``keras.ops`` so that they run on any Keras backend and compile with XLA.
"""

from keras_capsules import callbacks, layers, losses, metrics, ops, optimizers
from keras_capsules.layers import *  # noqa: F401,F403  (the public layers, see layers.__all__)
from keras_capsules.optimizers import RAdam

__version__ = "0.1.0"

__all__ = [*layers.__all__, "RAdam", "callbacks", "layers", "losses", "metrics", "ops", "optimizers", "__version__"]
