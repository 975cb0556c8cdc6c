"""CLEVR's search space: the MAC network's reasoning steps and width (shared with Sort-of-CLEVR).

The MAC part is :func:`tuning.sort_of_clevr.mac_hyperparameters` at CLEVR's scale:

* ``max_steps`` (``p``) 4-16, default 12 (the paper's): CLEVR's questions chain up
  to a dozen operations (filter, relate, count, compare);
* ``units`` (``d``) 128/256/512, default 512 (the paper's);
* ``embedding_dim`` 100/200/300, default 300 (the paper's GloVe size);
* ``memory_gate``, ``self_attention``, ``memory_dropout``, ``output_dropout`` (the
  paper: 0.15 each) and the learning rate (1e-4) as for Sort-of-CLEVR.

The ResNet-101 features are cached once (``--cache-dir``; TFDS ``clevr`` is read from
``--data-dir`` only while the cache is incomplete, never downloaded); every trial
trains on the cached features. The objective is the accuracy on the questions of a
tenth of the training images, held out of the trials' training
(``clevr.split_by_image``; every such question counts, one whose answer no training
question has as an error): CLEVR's test split has no answers, so its validation split
is what ``evaluate`` reports, and a search choosing on it reported its choice's own score.
"""

from applications import checks, clevr
from tuning.sort_of_clevr import MACHyperModel


class ClevrHyperModel(MACHyperModel):
    """HyperModel of ``applications.clevr`` on cached ResNet-101 conv4 features.

    Args:
        cache_dir: the feature cache (made on first use from ``data_dir``).
        data_dir: TFDS data directory holding a prepared ``clevr:3.1.0``.
        image_size: side of the images given to ResNet-101.
        limit: use only the first ``limit`` questions of every split.
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.

    Raises:
        InputError (a ValueError): ``image_size`` not an integer >= 1.
    """

    application = "clevr"
    steps = (4, 16, 12)
    units = (128, 256, 512)
    default_units = 512
    embedding_dims = (100, 200, 300)
    default_dropout = 0.15
    #: the share of the training images whose questions validate the trials
    validation_share = 0.1

    def __init__(self, cache_dir, data_dir=None, image_size=clevr.IMAGE_SIZE, limit=None, **kwargs):
        super().__init__(**kwargs)
        # checked here, as clevr.evaluate checks it: image_size=0 looked for features of that
        # size, and was refused as TFDS's clevr not prepared (to extract them)
        image_size = checks.integer_at_least("image_size", image_size, 1)
        self.cache_dir, self.data_dir, self.image_size, self.limit = cache_dir, data_dir, image_size, limit

    @classmethod
    def options_from_args(cls, args):
        from applications.arguments import cache_dir_of

        return {"cache_dir": cache_dir_of(args), "data_dir": args.data_dir, "image_size": args.image_size,
                "limit": args.limit}

    def load_data(self):
        data = clevr.prepare_offline(self.cache_dir, self.data_dir, self.image_size, self.limit,
                                     verbose=self.verbose)
        clevr.require_questions(data, self.cache_dir)  # no trial trains on no questions
        return data

    def build_mac(self, hp, **mac_kwargs):
        data = self.prepare()
        return clevr.build_model(len(data["vocabulary"]), len(data["classes"]), clevr.feature_shape(data),
                                 **mac_kwargs)

    def datasets(self, hp, data):
        # the same held-out images for every trial, whatever --seed
        fit, held_out = clevr.split_by_image(data["train"], self.validation_share)
        return (clevr.make_dataset(**fit, batch_size=self.batch_size, shuffle=True, seed=self.seed,
                                   replicas=self.replicas),
                # every held-out question counts in the objective (an unseen answer: an error)
                clevr.make_dataset(**held_out, batch_size=self.batch_size, drop_unknown=False))

    def recorded_options(self):
        # evaluate reads the features of this size by default. Not --limit (which `train`
        # records): it only sized the search, so evaluate of the best model scores every
        # validation question (none of which chose it) unless told --limit
        return {"image_size": int(self.image_size)}


__all__ = ["ClevrHyperModel"]
