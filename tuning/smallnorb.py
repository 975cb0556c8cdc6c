"""smallNORB's search space: the sizes and iterations of Heinsen's EM-routing classifier.

* ``n_iters`` 2-4: EM iterations of both routings (the paper: 3). One iteration is
  left out: the class scores then do not depend on the votes.
* ``n_parts`` 16/32/64: part capsules per location, and capsules after the first
  routing (the paper: 64): the vote tensor, and most of the time, grows with it.
* ``pose_size`` 2-4: poses are ``pose_size x pose_size`` matrices (the paper: 4x4),
  what a capsule can say about an object's viewpoint.
* ``d_chns`` 32/64/128: channels of the six convolutions that find the parts.
* ``max_lr`` 1e-4 to 2e-3 (log scale): the peak of the one-cycle schedule (5e-4), and
  ``mixup_alpha`` 0/0.2/0.4: the regime's only regulariser (the model has no dropout).

Data: TFDS ``smallnorb`` already prepared in ``--data-dir`` (never downloaded),
training crops and mixup as in ``applications.smallnorb.make_dataset``. The search
trains on the first nine tenths of the training split (TFDS ``train[:90%]``) and its
objective is the accuracy on the last tenth (``train[90%:]``; ``--validation-steps``
batches of it): the test split never takes part in the choice of a trial. The held-out
tenth shows the training objects from other viewpoints and lightings, where the test
split shows other objects, so its accuracy flatters the test accuracy; it ranks trials.
"""

from applications import checks, distribute, smallnorb, tfds_data
from applications.errors import InputError
from tuning.base import DatasetHyperModel

#: TFDS splits of the search: training examples, and the held-out ones it validates on
TRAIN_SPLIT, VALIDATION_SPLIT = "train[:90%]", "train[90%:]"


class SmallNORBHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.smallnorb``.

    Args:
        data_dir: TFDS data directory holding a prepared ``smallnorb``.
        image_size: side of the (resized) stereo pairs; 96 is the dataset's.
        steps_per_epoch: training steps per epoch (None: the whole training split).
        validation_steps: validate on the first N batches of the held-out tenth of the
            training split (None: all of them).
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.

    Raises:
        InputError (a ValueError): ``image_size`` not an integer >= 1, or
            ``steps_per_epoch`` or ``validation_steps`` neither None nor an integer >= 1.
    """

    application = "smallnorb"

    def __init__(self, data_dir=None, image_size=smallnorb.IMAGE_SIZE, steps_per_epoch=None,
                 validation_steps=None, **kwargs):
        super().__init__(**kwargs)
        # checked here, before any trial (the command line's positive_int did it for `tune`):
        # validation_steps=0 and any image_size were taken, to fail in or after a trial
        self.data_dir = data_dir
        self.image_size = checks.integer_at_least("image_size", image_size, 1)
        self.steps_per_epoch, self.validation_steps = (
            None if value is None else checks.integer_at_least(name, value, 1)
            for name, value in (("steps_per_epoch", steps_per_epoch), ("validation_steps", validation_steps))
        )

    @classmethod
    def options_from_args(cls, args):
        return {"data_dir": args.data_dir, "image_size": args.image_size,
                "steps_per_epoch": args.steps_per_epoch, "validation_steps": args.validation_steps}

    def load_data(self):
        tfds_data.require_prepared("smallnorb", self.data_dir)
        train = self._training_examples()
        valid = smallnorb.load_split(VALIDATION_SPLIT, self.data_dir, download=False)
        steps = self.steps_per_epoch or int(train.cardinality()) // self.batch_size
        if steps < 1:
            raise InputError("the smallNORB training split is unknown or smaller than a batch: "
                             "pass --steps-per-epoch")
        return train, valid, steps

    def _training_examples(self):
        """The training split, its files in the order of ``seed`` (TFDS reshuffles them every
        time the dataset is read: each trial reads a split of its own, so that every trial
        reads them in the same orders, not in those after the trials before it)."""
        return smallnorb.load_split(TRAIN_SPLIT, self.data_dir, download=False, shuffle_files=True, seed=self.seed)

    def build(self, hp):
        model = smallnorb.build_model(
            n_parts=hp.Choice("n_parts", [16, 32, 64], default=64),
            d_chns=hp.Choice("d_chns", [32, 64, 128], default=64),
            pose_size=hp.Int("pose_size", 2, 4, default=4),
            n_iters=hp.Int("n_iters", 2, 4, default=3),
        )
        max_lr = hp.Float("max_lr", 1e-4, 2e-3, sampling="log", default=5e-4)
        hp.Choice("mixup_alpha", [0.0, 0.2, 0.4], default=0.2)  # read by `datasets`
        steps = self.prepare()[2]
        return smallnorb.compile_model(model, total_steps=max(2, self.trial_epochs(hp) * steps), max_lr=max_lr)

    def datasets(self, hp, data):
        _, valid, _ = data
        train_ds = smallnorb.make_dataset(
            self._training_examples(), True, self.batch_size, self.image_size,
            mixup_alpha=hp.get("mixup_alpha") or None, seed=self.seed, repeat=True,
        )
        train_ds = distribute.even_batches(train_ds, self.replicas)  # whole batches: cut only if need be
        valid_ds = smallnorb.make_dataset(valid, False, self.batch_size, self.image_size)
        if self.validation_steps is not None:
            valid_ds = valid_ds.take(self.validation_steps)
        return train_ds, valid_ds

    def fit_options(self, hp):
        return {"steps_per_epoch": self.prepare()[2]}

    def recorded_options(self):
        return {"image_size": int(self.image_size)}  # evaluate scores images of this size by default


__all__ = ["SmallNORBHyperModel"]
