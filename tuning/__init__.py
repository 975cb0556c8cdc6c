"""keras-tuner HyperModels, one per application, and the search behind ``keras-capsules tune``.

``HYPERMODELS`` maps an application name to its ``keras_tuner.HyperModel`` subclass
(imported when first looked up):

    from tuning import HYPERMODELS
    hypermodel = HYPERMODELS["demo"](batch_size=64)

Protocol of a HyperModel registered here (see ``tuning/demo.py``):

* ``build(hp)`` returns a compiled model; keras-tuner calls it inside the strategy's
  scope when the tuner has a ``distribution_strategy``.
* ``fit(hp, model, *args, **kwargs)`` makes its own datasets (so that data options can
  be tuned too) and returns ``model.fit(...)``'s history; ``kwargs`` are the
  ``epochs``/``callbacks``/``verbose`` of ``tuner.search``.
* ``objective``: the class attribute naming the metric to maximise or minimise
  (e.g. ``"val_accuracy"``).
* ``from_args(args, strategy)``: a classmethod building it from the parsed
  ``keras-capsules tune`` options (the application's ``add_arguments(parser, "tune")``
  adds its data options), with ``args.batch_size`` per replica.
* ``prepare()``: loads the data once; ``keras-capsules tune`` calls it before the
  first trial, so that missing data is a one-line error.
* ``recorded_options()`` (optional): the data options of the trials in the keys and
  form that the application's ``train`` records them in ``metrics.json``; the search
  writes them into the ``metrics.json`` beside its best model, where the application's
  ``evaluate`` reads its defaults (``tuning.search.best_metrics``). ``beside_best`` and
  ``write_beside_best(directory)`` (optional): other files that ``evaluate`` reads
  beside a model (text_classification's vocabulary).

To add one: write ``tuning/<application>.py`` (usually a subclass of
``tuning.base.DatasetHyperModel``, which implements ``fit``, ``from_args`` and
``prepare``) and add a line to ``_HYPERMODELS``.
"""

import importlib
from collections.abc import Mapping

# Before keras_tuner loads TensorFlow: the runtime defaults of keras_capsules, set without
# loading TensorFlow (the command line reads HYPERMODELS' names for its help and errors).
import applications  # noqa: F401

_HYPERMODELS = {
    "demo": "tuning.demo:DemoHyperModel",
    "smallnorb": "tuning.smallnorb:SmallNORBHyperModel",
    "sst": "tuning.sst:SSTHyperModel",
    "text_classification": "tuning.text_classification:TextClassificationHyperModel",
    "sort_of_clevr": "tuning.sort_of_clevr:SortOfClevrHyperModel",
    "clevr": "tuning.clevr:ClevrHyperModel",
    "occluded_mnist": "tuning.occluded_mnist:OccludedMNISTHyperModel",
    "music": "tuning.music:MusicHyperModel",
    "textured_mnist": "tuning.textured_mnist:TexturedMNISTHyperModel",
}


class _LazyRegistry(Mapping):
    def __init__(self, entries):
        self._entries = dict(entries)

    def __getitem__(self, name):
        module, _, attr = self._entries[name].partition(":")
        return getattr(importlib.import_module(module), attr)

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __contains__(self, name):
        return name in self._entries


#: application name -> ``keras_tuner.HyperModel`` subclass.
HYPERMODELS = _LazyRegistry(_HYPERMODELS)

__all__ = ["HYPERMODELS"]
