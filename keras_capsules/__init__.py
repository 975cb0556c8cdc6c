"""keras-capsules: Keras 3 layers for networks that iterate to infer.

Capsule routing (EM with a D-step, k-means, dynamic routing), compositional-code
embeddings, Recurrent Ladder networks and MAC reasoning cells, written with
``keras.ops`` so that they run on any Keras backend and compile with XLA.
"""

from keras_capsules import layers, ops
from keras_capsules.layers import EMRouting

__version__ = "0.1.0"

__all__ = ["EMRouting", "layers", "ops", "__version__"]
from keras_capsules.optimizers import RAdam  # noqa: E402
__all__ += ["RAdam"]
