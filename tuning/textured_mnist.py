"""Textured MNIST's search space: RTagger's groups and iterations, the ladder's widths.

* ``n_groups`` 2-4: RTagger's groups K (the digit and the background need 2; more
  give the model room to split a texture).
* ``n_iters`` 2-4: RTagger's iterations T (the targets repeat the image once per
  iteration, so the datasets of a trial follow it).
* ``conv_units`` 16/32/64 and ``dense_units`` 32/64/128: the widths of the ladder's
  ConvLSTM level and of its dense gated top.
* ``learning_rate`` 1e-4 to 1e-2 (log scale) of Adam.

The objective is the validation loss (the mixture's negative log-likelihood averaged
over the iterations, plus the digit's cross-entropy with ``--classify``): segmentation
needs no labels, and the AMI is not a Keras metric. Validation images are made of
held-out training digits (``textured_mnist.validation_images``; the training images use
the other four fifths, ``make_images(hold_out=True)``): the test digits never take part
in the choice of a trial, as in ``textured_mnist.train(num_valid=...)``.
"""

import os

import keras_tuner

from applications import checks, textured_mnist
from tuning.base import DatasetHyperModel


class TexturedMNISTHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.textured_mnist``.

    Args:
        data_dir: the folder of the MNIST IDX files (None: the shared copy).
        num_train, num_test: generated training images, and validation images (of
            held-out training digits, never the test digits).
        classify: add the digit classifier on the groups (True or False).
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.

    Raises:
        InputError (a ValueError): ``num_train`` or ``num_test`` not an integer >= 1, or
            ``classify`` not True or False.
    """

    application = "textured_mnist"
    objective = keras_tuner.Objective("val_loss", "min")

    def __init__(self, data_dir=None, num_train=8000, num_test=1000, classify=False, **kwargs):
        super().__init__(**kwargs)
        # checked here, as textured_mnist.train checks them: num_train=0 completed every trial
        # untrained (scored as such), num_test=0 was refused as `num_valid`, and
        # classify="no" added the classifier
        classify = checks.true_or_false("classify", classify)
        self.data_dir = data_dir
        self.num_train = checks.integer_at_least("num_train", num_train, 1)
        self.num_test = checks.integer_at_least("num_test", num_test, 1)
        self.num_classes = 10 if classify else None
        #: the textures of every image (``train``'s defaults), recorded beside the best model
        self.textures = dict(textured_mnist.TEXTURE_OPTIONS)

    @classmethod
    def options_from_args(cls, args):
        return {"data_dir": args.data_dir, "num_train": args.num_train, "num_test": args.num_test,
                "classify": args.classify}

    def load_data(self):
        train, _ = textured_mnist.make_images(self.data_dir, self.num_train, self.num_test, self.seed,
                                              hold_out=True, **self.textures)
        return train, textured_mnist.validation_images(self.data_dir, self.num_test, self.seed, **self.textures)

    def build(self, hp):
        model = textured_mnist.build_model(
            n_groups=hp.Int("n_groups", 2, 4, default=3),
            n_iters=hp.Int("n_iters", 2, 4, default=3),
            conv_units=hp.Choice("conv_units", [16, 32, 64], default=32),
            dense_units=hp.Choice("dense_units", [32, 64, 128], default=64),
            num_classes=self.num_classes,
            seed=self.seed,  # the input noise's stream, as train's
        )
        return textured_mnist.compile_model(
            model, hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=1e-3)
        )

    def datasets(self, hp, data):
        train, valid = data
        n_iters = hp.get("n_iters")
        return (
            textured_mnist.make_dataset(train, n_iters, self.batch_size, self.num_classes, shuffle=True,
                                        seed=self.seed, replicas=self.replicas),
            textured_mnist.make_dataset(valid, n_iters, self.batch_size, self.num_classes),
        )

    def recorded_options(self):
        # the train/test split and the textures, as textured_mnist.train records them: evaluate
        # makes the test images of this split with these textures. Not --num-test: it counted
        # the trials' validation images (no test image was scored)
        data_dir = None if self.data_dir is None else os.path.abspath(self.data_dir)
        return {"split": {"seed": self.seed, "data_dir": data_dir}, "textures": dict(self.textures)}


__all__ = ["TexturedMNISTHyperModel"]
