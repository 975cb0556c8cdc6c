"""Occluded Moving MNIST's search space: the levels of the convolutional Recurrent Ladder.

* ``conv_levels`` 1-3 and ``conv_units_0`` .. ``conv_units_2`` 16/32/64: how many
  convolutional levels the ladder has (the application's default levels: feed-forward,
  instance-normalized, see ``applications.occluded_mnist.build_model``) and how wide
  each is (the default 32, 64, 64 is the spirit of the paper's Table 7; every level
  after the first pools by 2). ``conv_units_k`` is conditional on ``conv_levels > k``
  (``tuning.base.level_widths``): a trial without level ``k`` neither draws nor records
  its width; ``--fixed`` can still pin it (for the trials that have the level).
* ``dense_units`` 64/128/256: the dense gated level on top, which the digit is read from.
* ``frame_weight`` 0.1/0.3/1: weight of the unsupervised next-frame cost against the
  digit's cross-entropy (declared only for the variants that predict frames).
* ``learning_rate`` 1e-4 to 1e-2 (log scale) of Adam. The model has no dropout.

The objective is the accuracy of the digit on validation sequences
(``val_digit_accuracy``) whose digits are a held-out fifth of the training digits
(``occluded_mnist.make_sequences(hold_out=True)``; the training sequences use the other
four fifths): the test digits never take part in the choice of a trial. The sequences
are the paper's data by default (``motion``, ``bars``, ``bar_spacing``: ``--motion``,
``--bars``, ``--bar-spacing`` of ``tune``, as of ``train``), recorded beside the best model
for ``evaluate``.
"""

import os

import keras_tuner

from applications import checks, distribute, occluded_mnist
from tuning.base import DatasetHyperModel, level_widths

#: the default width of every convolutional level the search can build (``conv_units_0`` .. ``conv_units_2``)
DEFAULT_CONV_UNITS = (32, 64, 64)
MAX_CONV_LEVELS = len(DEFAULT_CONV_UNITS)


class OccludedMNISTHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.occluded_mnist``.

    Args:
        variant: the model variant (``rladder``, ``no_feedback``, ``hierarchical``, ``temporal``).
        source: ``"idx"`` (MNIST IDX files in ``data_dir``) or ``"tfds"``.
        data_dir: the IDX folder (None: the shared copy) or TFDS's data folder.
        num_train, num_test: generated training sequences, and validation sequences (of
            held-out training digits, never the test digits).
        motion, bars, bar_spacing: the data of every sequence (defaults: the paper's;
            ``occluded_mnist.check_sequence_options``).
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.

    Raises:
        InputError (a ValueError): ``variant`` or ``source`` not one of the above,
            ``num_train`` or ``num_test`` not an integer >= 1, or a data option that
            ``occluded_mnist.generate`` refuses.
    """

    application = "occluded_mnist"
    objective = keras_tuner.Objective("val_digit_accuracy", "max")

    def __init__(self, variant="rladder", source="idx", data_dir=None, num_train=20000, num_test=5000,
                 motion="paper", bars="grid", bar_spacing=12, **kwargs):
        super().__init__(**kwargs)
        # (a bad variant or source was refused only once the search ran: by the first build
        # or the data)
        occluded_mnist.check_variant(variant)
        occluded_mnist.check_source(source)
        self.variant, self.source, self.data_dir = variant, source, data_dir
        # checked here, as occluded_mnist.train checks num_test: num_train=0 completed every
        # trial untrained (scored as such), num_test=0 failed every trial with a KeyError
        # (no val_digit_accuracy), and True was refused as `num_sequences`
        self.num_train = checks.integer_at_least("num_train", num_train, 1)
        self.num_test = checks.integer_at_least("num_test", num_test, 1)
        # (checked here too: a bad one failed only when the search read the data)
        sequences = occluded_mnist.check_sequence_options(motion, bars, bar_spacing)
        self.motion, self.bars, self.bar_spacing = sequences["motion"], sequences["bars"], sequences["bar_spacing"]

    @classmethod
    def options_from_args(cls, args):
        return {"variant": args.variant, "source": args.source, "data_dir": args.data_dir,
                "num_train": args.num_train, "num_test": args.num_test, "motion": args.motion, "bars": args.bars,
                "bar_spacing": args.bar_spacing}

    @property
    def sequences(self):
        """The data options of every sequence, as ``occluded_mnist.train`` records them."""
        return {"motion": self.motion, "bars": self.bars, "bar_spacing": self.bar_spacing}

    def load_data(self):
        return occluded_mnist.make_sequences(self.source, self.data_dir, self.num_train, self.num_test,
                                             self.seed, hold_out=True, **self.sequences)

    def build(self, hp):
        conv_units = level_widths(hp, "conv_levels", "conv_units", [16, 32, 64], DEFAULT_CONV_UNITS,
                                  default_levels=MAX_CONV_LEVELS)
        model = occluded_mnist.build_model(
            self.variant,
            conv_units=conv_units,
            dense_units=hp.Choice("dense_units", [64, 128, 256], default=128),
        )
        learning_rate = hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=1e-3)
        # declared only for the variants that predict frames: the others ignore it, and
        # their searches trained the same model under three frame weights
        frame_weight = (hp.Choice("frame_weight", [0.1, 0.3, 1.0], default=1.0)
                        if "next_frames" in model.output else 1.0)
        return occluded_mnist.compile_model(model, learning_rate, frame_weight=frame_weight)

    def datasets(self, hp, data):
        train, valid = data
        batches = distribute.even_batch_count(len(train["labels"]), self.batch_size, self.replicas)
        shuffled = occluded_mnist.make_dataset(train, self.variant, self.batch_size, shuffle=True, seed=self.seed)
        return (distribute.even_batches(shuffled, self.replicas, batches),
                occluded_mnist.make_dataset(valid, self.variant, self.batch_size))

    def recorded_options(self):
        # the train/test split (as occluded_mnist.train records it): the search's digits are
        # of its training part, so evaluate scores the test sequences, as for a trained model.
        # Not --num-test: it counted the trials' validation sequences, and no test sequence was
        # scored, so evaluate scores its default number of them unless told otherwise. And the
        # sequences' data options: evaluate makes its test sequences with them
        data_dir = None if self.data_dir is None else os.path.abspath(self.data_dir)
        return {"variant": self.variant, "split": {"seed": self.seed, "source": self.source, "data_dir": data_dir},
                "sequences": self.sequences}


__all__ = ["OccludedMNISTHyperModel"]
