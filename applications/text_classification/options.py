"""The choices and defaults of capsule text classification that need no TensorFlow.

Command lines (``benchmarks/text_classification.py``, the ``keras-capsules`` parsers)
offer these before TensorFlow loads, so that ``--help`` and a bad value answer at once:
this module imports nothing, and the package (``applications/text_classification/__init__.py``)
loads its TensorFlow parts only when one of them is used.
"""

#: the class-capsule heads of ``model.build_model``: k-means routing (the paper's),
#: dynamic routing (Sabour et al. 2017), or a linear layer on the sentence vector
ROUTINGS = ("kmeans", "dynamic", "linear")
#: the word embeddings: compositional codes (the paper's) or a standard lookup table
EMBEDDINGS = ("compositional", "standard")
#: the recurrent encoder: the projected GRU (``projected_gru``) or Keras' GRU
GRUS = ("projected", "keras")
#: how k-means routing compares a vote with a cluster centre
SIMILARITIES = ("cosine", "dot")

# The BiGRU steps' matrix products are too small to split over cores: one thread per op
# trains 1.5x faster on a 2-core CPU (applications.distribute.set_intra_op_threads).
INTRA_OP_THREADS = 1

__all__ = ["EMBEDDINGS", "GRUS", "INTRA_OP_THREADS", "ROUTINGS", "SIMILARITIES"]
