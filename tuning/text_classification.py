"""Capsule text classification's search space: the routing head of CCCapsNet.

* ``routing`` kmeans/dynamic/linear: k-means routing (the paper), dynamic routing
  (Sabour et al.) or no capsules at all (a masked mean and a sigmoid per class), the
  comparison the paper makes.
* ``n_iters`` 1-5: routing iterations (the paper: 3).
* ``capsule_dim`` 4/8/16: the sentence vector (the mean of the BiGRU outputs) is cut
  into ``gru_units / capsule_dim`` lower capsules; ``class_capsule_dim`` 8/16/32: the
  class capsules, whose length is the class score. With ``gru_units`` pinned to a width
  that not all of 4/8/16 divide (``--fixed gru_units=12``), ``capsule_dim`` is drawn from
  those that do (or is the greatest common divisor of ``gru_units`` and 16 when none
  does), so that no trial builds a model that cannot cut its sentence vector.
* ``gru_units`` 32/64/128: each direction of the two BiGRU layers (the paper: 128),
  ``dropout`` 0-0.6 between them (the paper: 0.5), and ``learning_rate`` 1e-4 to 1e-2
  (log scale) of Adam (1e-3).

The routing entries (``n_iters``, ``capsule_dim``, ``class_capsule_dim``) are
conditional on ``routing`` being kmeans or dynamic: the linear head has no capsules, so
a linear trial neither draws nor records them (they varied in linear trials that never
used them); ``--fixed`` can still pin any of them (for the capsule trials). The
embedding (compositional or standard, ``--embedding``) and its size are options of the
command, not searched. The vocabulary and the length-bucketed datasets are made once,
before the first trial; the objective is the accuracy on the validation split: SST's
dev split, and for the TFDS sets (which have none) the last tenth of their training
split, which the search then trains without (``data.HELD_OUT_SPLITS``). The test split
never takes part in the choice of a trial.
"""

import math
import os

from applications import checks, distribute, fault_tolerance
from applications.text_classification import data as data_lib
from applications.text_classification import model as model_lib
from applications.text_classification import recipe
from tuning.base import DatasetHyperModel, stepped_choice

#: the sizes of the lower capsules searched (each divides every searched gru_units)
CAPSULE_DIMS = (4, 8, 16)
#: the routings of capsules, which the routing entries configure (not the linear head)
CAPSULE_ROUTINGS = [routing for routing in model_lib.ROUTINGS if routing != "linear"]


class TextClassificationHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.text_classification``.

    Args:
        dataset: one of ``applications.text_classification.data.DATASETS``.
        data_dir: the SST tree-file folder, or the TFDS data directory (never downloaded).
        limit: use only the first ``limit`` examples of every split.
        vocab_size, max_length, phrases: the data options of ``recipe.train``.
        embedding, embedding_dim, num_codebooks: the (fixed) embedding of every trial.
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.
    """

    application = "text_classification"

    def __init__(self, dataset="sst2", data_dir=None, limit=None, vocab_size=60000,
                 max_length=data_lib.MAX_LENGTH, phrases=False, embedding="compositional", embedding_dim=64,
                 num_codebooks=8, **kwargs):
        super().__init__(**kwargs)
        # by their own names, before any data is read, as recipe.train refuses them: vocab_size=2
        # was refused as "`max_size` must be at least 3", a name the search was never given
        data_lib.num_classes(dataset)  # an unknown dataset
        phrases = data_lib.check_phrases(dataset, phrases)  # (phrases="yes" was taken as True)
        # the fixed embedding of every trial (embedding="word" failed every trial's build)
        model_lib.check_arguments(embedding=embedding, embedding_dim=embedding_dim, num_codebooks=num_codebooks)
        vocab_size = checks.integer_at_least("vocab_size", vocab_size, 3)
        max_length = checks.integer_at_least("max_length", max_length, 1)
        if limit is not None:
            limit = checks.integer_at_least("limit", limit, 1)
        self.dataset, self.data_dir, self.limit = dataset, data_dir, limit
        self.vocab_size, self.max_length, self.phrases = vocab_size, max_length, phrases
        self.embedding, self.embedding_dim, self.num_codebooks = embedding, embedding_dim, num_codebooks

    @classmethod
    def options_from_args(cls, args):
        names = ("dataset", "data_dir", "limit", "vocab_size", "max_length", "phrases", "embedding",
                 "embedding_dim", "num_codebooks")
        return {name: getattr(args, name) for name in names}

    def load_data(self):
        data_lib.require_data(self.dataset, self.data_dir)
        data = recipe.prepare_data(self.dataset, self.data_dir, self.batch_size, self.vocab_size,
                                   self.max_length, self.phrases, self.limit, self.seed, test=False,
                                   hold_out=True, verbose=self.verbose, replicas=self.replicas)
        # The training texts and their lookup (``prepare_data``'s, not read again), which
        # `datasets` batches anew for every trial, and the number of batches counted here;
        # not these batches (their cache of every encoded text would stay in memory beside
        # the trial's).
        data["train_batches"] = int(data.pop("train").cardinality())
        return data

    def build(self, hp):
        data = self.prepare()
        routing = hp.Choice("routing", list(model_lib.ROUTINGS), default="kmeans")
        gru_units = hp.Choice("gru_units", [32, 64, 128], default=128)
        dropout = stepped_choice(hp, "dropout", 0.0, 0.6, 0.1, default=0.5)
        with hp.conditional_scope("routing", CAPSULE_ROUTINGS):  # None for the linear head
            # Every width of the space takes all three; a pinned one (a tiny search) may not.
            # The list is the same for every trial of a search (gru_units is pinned or always
            # one of 32/64/128), and keras-tuner's build that activates the capsule branch
            # draws capsule_dim at random even when the routing is pinned to linear.
            dims = [dim for dim in CAPSULE_DIMS if gru_units % dim == 0] or [math.gcd(gru_units, CAPSULE_DIMS[-1])]
            capsules = dict(
                capsule_dim=hp.Choice("capsule_dim", dims, default=8 if 8 in dims else dims[0]),
                class_capsule_dim=hp.Choice("class_capsule_dim", [8, 16, 32], default=16),
                n_iters=hp.Int("n_iters", 1, 5, default=3),
            )
        if routing not in CAPSULE_ROUTINGS:  # the linear head has no capsules to configure
            capsules = {}
        model = model_lib.build_model(
            data["vocab_size"],
            data["num_classes"],
            routing=routing,
            embedding=self.embedding,
            embedding_dim=self.embedding_dim,
            num_codebooks=self.num_codebooks,
            gru_units=gru_units,
            dropout=dropout,
            **capsules,
        )
        return model_lib.compile_model(model, hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=1e-3))

    def datasets(self, hp, data):
        """The training batches made anew (shuffled as every trial's first, with ``seed``), and
        the validation batches of ``prepare``.

        One shuffled dataset shared by the trials gave each trial the next orders of its
        reshuffling: a trial trained on other orders according to the trials before it
        in the process (and a resumed search's first trial on those of the search's first).
        """
        import tensorflow as tf

        train = distribute.even_batches(
            data_lib.make_dataset(data["train_texts"], data["lookup"], self.batch_size, shuffle=True,
                                  seed=self.seed, max_length=self.max_length),
            self.replicas)
        # the number of batches that `prepare` counted (the same examples, bucketed alike)
        train = train.apply(tf.data.experimental.assert_cardinality(data["train_batches"]))
        return train, data["validation"]

    # evaluate encodes the texts with the vocabulary beside the model (the search's, made of
    # its training examples: no `train` run has the same)
    beside_best = {"vocabulary": "vocab.txt"}

    def recorded_options(self):
        return {"dataset": self.dataset, "embedding": self.embedding, "vocab_size": int(self.prepare()["vocab_size"]),
                "max_length": self.max_length}  # evaluate cuts the texts as the trials did by default

    def write_beside_best(self, directory):
        path = os.path.join(directory, self.beside_best["vocabulary"])
        vocabulary = self.prepare()["vocabulary"]
        fault_tolerance.atomic_write(path, lambda tmp: data_lib.save_vocabulary(vocabulary, tmp))
        return {"vocabulary": path}


__all__ = ["TextClassificationHyperModel"]
