"""The demo's search space: what matters for a two-layer EM-routing network.

* ``n_iters`` 2-3: EM routing iterations (more iterations sharpen the assignments but
  can saturate them early in small networks; with one iteration the class scores do
  not depend on the votes, so the routing kernels get no gradient);
* ``hidden_capsules`` 8/16/32 and ``pose_size`` 2-4: capacity of the routed layer (the
  vote tensor grows with both);
* ``primary_capsules`` 4/8/16 and ``filters`` 16/32/64: the convolutional stem;
* ``learning_rate`` 1e-4 to 1e-2 (log scale).

The objective is the accuracy on validation examples held out of the demo's training
part (``demo.make_datasets(hold_out=True)``; the trials train without them): the test
examples of ``keras-capsules train`` never take part in the choice of a trial.
"""

import os

import keras_tuner

from applications import demo
from tuning.base import DatasetHyperModel


class DemoHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.demo``.

    Args:
        data_dir: None for scikit-learn's 8x8 digits, else a directory of MNIST IDX files.
        limit: use only the first ``limit`` examples.
        batch_size: the global batch size.
        seed: seeds the train/validation split and shuffling.
    """

    application = "demo"
    objective = "val_accuracy"

    def __init__(self, data_dir=None, limit=None, **kwargs):
        super().__init__(**kwargs)
        self.data_dir, self.limit = data_dir, limit

    @classmethod
    def options_from_args(cls, args):
        return {"data_dir": args.data_dir, "limit": args.limit}

    def load_data(self):  # raises DataNotFoundError before any trial runs
        images, labels = demo.load_arrays(self.data_dir, self.limit)
        demo.make_datasets(images, labels, self.batch_size, seed=self.seed, hold_out=True,
                                  replicas=self.replicas)  # too few: now
        return images, labels

    def build(self, hp):
        images, _ = self.prepare()
        model = demo.build_model(
            input_shape=images.shape[1:],
            filters=hp.Choice("filters", [16, 32, 64], default=32),
            primary_capsules=hp.Choice("primary_capsules", [4, 8, 16], default=8),
            hidden_capsules=hp.Choice("hidden_capsules", [8, 16, 32], default=16),
            pose_size=hp.Int("pose_size", 2, 4, default=4),
            n_iters=hp.Int("n_iters", 2, 3, default=2),
            # as demo.train: batch statistics over the global batch when there are several
            # replicas (each replica normalized its own slice, so a trial under --strategy
            # mirrored trained another model than on one device)
            synchronized_batchnorm=self.replicas > 1,
        )
        learning_rate = hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=3e-3)
        return demo.compile_model(model, learning_rate)

    def datasets(self, hp, data):
        images, labels = data
        return demo.make_datasets(images, labels, self.batch_size, seed=self.seed, hold_out=True,
                                  replicas=self.replicas)

    def recorded_options(self):
        # the train/test split (as demo.train records it): the trials trained and validated
        # on its training part, so evaluate scores the test part, as for a trained model
        data_dir = None if self.data_dir is None else os.path.abspath(self.data_dir)
        return {"split": {"seed": self.seed, "data_dir": data_dir, "limit": self.limit,
                          "test_fraction": demo.TEST_FRACTION}}


def default_model(**kwargs):
    """The demo model at the default point of the search space (for tests and docs)."""
    hypermodel = DemoHyperModel(**kwargs)
    return hypermodel.build(keras_tuner.HyperParameters())


__all__ = ["DemoHyperModel", "default_model"]
