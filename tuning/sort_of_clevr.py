"""Sort-of-CLEVR's search space: the MAC network's reasoning steps and width.

* ``max_steps`` (the paper's ``p``) 1-6: reasoning steps. Relational and two-hop
  questions need several steps (attend to the object asked about, then to the others);
  each step costs one more pass of the control, read and write units.
* ``units`` (the paper's ``d``) 32/64/128/256: the size of the memory, control and
  contextual words, and of the knowledge-base projection.
* ``memory_gate`` and ``self_attention``: the two optional parts of the write unit
  (Hudson & Manning's variants).
* ``memory_dropout`` and ``output_dropout`` 0-0.3: dropout on the memory and before
  the classifier (default 0, as ``applications.sort_of_clevr.build_model`` and its
  recipe; CLEVR's default is the paper's 0.15).
* ``learning_rate`` 3e-5 to 1e-3 (log scale) of Adam with the recipe's clipping and
  EMA of the weights (validation, the objective and the best model use the EMA
  weights).
* ``embedding_dim`` 16/32/64: word embeddings of the question (CLEVR: 100/200/300).

:class:`MACHyperModel` holds the MAC part of the space and the recipe; the CLEVR
HyperModel (``tuning/clevr.py``) shares it.
"""

from applications import checks, clevr, distribute, sort_of_clevr
from applications.errors import InputError
from keras_capsules.callbacks import swap_ema_weights
from tuning.base import DatasetHyperModel, stepped_choice


def mac_hyperparameters(hp, steps=(1, 6, 4), units=(32, 64, 128, 256), default_units=128,
                        embedding_dims=(16, 32, 64), default_dropout=0.0):
    """Declares the MAC part of a search space; returns the ``build_model`` keyword arguments.

    Args:
        steps: ``(min, max, default)`` reasoning steps.
        units: the choices of ``d`` (even numbers), and ``default_units`` the default one.
        embedding_dims: the choices of the word-embedding size (the last is the default).
        default_dropout: the default of ``memory_dropout`` and ``output_dropout`` (that
            of the application's ``build_model``).
    """
    return {
        "embedding_dim": hp.Choice("embedding_dim", list(embedding_dims), default=embedding_dims[-1]),
        "max_steps": hp.Int("max_steps", steps[0], steps[1], default=steps[2]),
        "units": hp.Choice("units", list(units), default=default_units),
        "memory_gate": hp.Boolean("memory_gate", default=False),
        "self_attention": hp.Boolean("self_attention", default=False),
        "memory_dropout": stepped_choice(hp, "memory_dropout", 0.0, 0.3, 0.05, default=default_dropout),
        "output_dropout": stepped_choice(hp, "output_dropout", 0.0, 0.3, 0.05, default=default_dropout),
    }


class MACHyperModel(DatasetHyperModel):
    """A MAC application's HyperModel: the MAC space, the learning rate, the EMA recipe.

    Subclasses implement ``build_mac(hp, **mac_kwargs)`` (the uncompiled model),
    ``load_data`` and ``datasets``; ``steps``, ``units``, ``default_units``,
    ``embedding_dims`` and ``default_dropout`` are the arguments of
    :func:`mac_hyperparameters`: the defaults must be those of the application's
    ``build_model``.
    """

    steps = (1, 6, 4)
    units = (32, 64, 128, 256)
    default_units = 128
    embedding_dims = (16, 32, 64)
    default_dropout = 0.0

    def build_mac(self, hp, **mac_kwargs):
        raise NotImplementedError

    def build(self, hp):
        mac_kwargs = mac_hyperparameters(hp, self.steps, self.units, self.default_units, self.embedding_dims,
                                         self.default_dropout)
        learning_rate = hp.Float("learning_rate", 3e-5, 1e-3, sampling="log", default=1e-4)
        return clevr.compile_model(self.build_mac(hp, **mac_kwargs), learning_rate)

    def statistics_data(self):
        """Training batches from which the EMA weights get batch-normalization
        statistics of their own (``SwapEMAWeightsAndStatistics``), or None: the model
        has no batch normalization (here: None; subclasses with one override it)."""
        return None

    def fit_options(self, hp):
        # Validation, keras-tuner's checkpoint of the best epoch and the best model all
        # see the EMA weights (the checkpoint callback runs after this one), with their
        # own batch-normalization statistics where the model has some.
        return {"callbacks": [swap_ema_weights(self.statistics_data(), swap_on_epoch=True)]}


class SortOfClevrHyperModel(MACHyperModel):
    """HyperModel of ``applications.sort_of_clevr`` (questions generated on the fly).

    Args:
        kb: ``"symbolic"`` (the object list) or ``"image"`` (the rendered scene).
        steps_per_epoch: training batches of every epoch (the stream is endless).
        validation_examples: validation questions, half of them relational.
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.
    """

    application = "sort_of_clevr"

    def __init__(self, kb="symbolic", steps_per_epoch=500, validation_examples=2000, **kwargs):
        super().__init__(**kwargs)
        if kb not in ("symbolic", "image"):
            raise InputError(f"`kb` must be 'symbolic' or 'image'. Received: kb={kb!r}")
        # checked here: Keras reads steps_per_epoch=0 as "no limit", and the question
        # stream is endless, so the first epoch of the first trial never ended
        self.kb = kb
        self.steps_per_epoch = checks.integer_at_least("steps_per_epoch", steps_per_epoch, 1)
        # at least one question of each kind, as sort_of_clevr.validation_data needs (1 was
        # taken here and refused only when the first trial read the data)
        self.validation_examples = checks.integer_at_least("validation_examples", validation_examples, 2)

    @classmethod
    def options_from_args(cls, args):
        return {"kb": args.kb, "steps_per_epoch": args.steps_per_epoch,
                "validation_examples": args.validation_examples}

    def load_data(self):
        # not the questions that `keras-capsules evaluate sort_of_clevr` reports
        return sort_of_clevr.validation_data(self.validation_examples, self.seed, self.kb, selection=True)

    def build_mac(self, hp, **mac_kwargs):
        return sort_of_clevr.build_model(kb=self.kb, **mac_kwargs)

    def datasets(self, hp, data):
        import tensorflow as tf

        # whole batches: cut only when the replicas do not divide the batch
        train = distribute.even_batches(sort_of_clevr.make_dataset(self.batch_size, self.seed, kb=self.kb),
                                        self.replicas)
        return train, tf.data.Dataset.from_tensor_slices(data).batch(self.batch_size)

    def statistics_data(self):
        # the image stem's batch normalization (the symbolic model has none: nothing is drawn)
        return sort_of_clevr.make_dataset(self.batch_size, self.seed, kb=self.kb)

    def fit_options(self, hp):
        return {**super().fit_options(hp), "steps_per_epoch": self.steps_per_epoch}

    def recorded_options(self):
        # evaluate asks the questions of train of this seed and number: not those the search
        # chose on (validation_data(selection=True))
        return {"seed": self.seed, "validation_examples": int(self.validation_examples)}


__all__ = ["MACHyperModel", "SortOfClevrHyperModel", "mac_hyperparameters"]
