"""What the HyperModels of ``tuning/`` share: data read once, datasets per trial, ``fit``.

A subclass of :class:`DatasetHyperModel` implements

* ``load_data()``: reads or generates the application's data once, with the
  application's own data functions. Missing data raises
  ``applications.errors.DataNotFoundError`` (a ``FileNotFoundError``), which
  ``keras-capsules tune`` reports as one line before any trial runs (it calls
  :meth:`DatasetHyperModel.prepare` first);
* ``datasets(hp, data)``: the training and validation data of one trial, batched with
  ``self.batch_size`` (the *global* batch: ``--batch-size`` times the replicas);
* ``build(hp)``: the compiled model, from the application's ``build_model`` and compile
  recipe. Every hyperparameter is declared here, also those that only ``datasets``
  reads (with ``hp.get``), so that keras-tuner knows the whole space before the first
  trial and ``--fixed NAME=VALUE`` can pin any of them. A learning-rate schedule spans
  :meth:`DatasetHyperModel.trial_epochs` (under Hyperband, the epochs of the trial's round);

and may override ``fit_options(hp)`` (extra ``model.fit`` arguments such as
``steps_per_epoch``, or callbacks that must run before the tuner's own),
``options_from_args(args)`` (its constructor arguments from the parsed ``tune``
options), ``recorded_options()`` (the data options that the application's ``train``
records in ``metrics.json`` and its ``evaluate`` reads back: the search writes them
beside its best model) and ``write_beside_best(directory)`` with ``beside_best`` (other
files that ``evaluate`` reads beside a model, such as a vocabulary).
"""

import keras
import keras_tuner
import numpy as np

from applications import arguments, checks, distribute, fault_tolerance
from applications.errors import InputError


class DatasetHyperModel(keras_tuner.HyperModel):
    """Base of the HyperModels that train on datasets they make themselves.

    Args:
        batch_size: the global batch size.
        seed: seeds the data (splits, shuffling, generated examples) and every model
            :meth:`build` makes (its initial weights, dropout), as ``train`` does.
        epochs: epochs per trial (Hyperband: the most a trial trains; schedules that need
            the number of steps read :meth:`trial_epochs`).
        verbose: 1 (default) shows the progress of ``load_data``'s long steps (CLEVR's
            feature extraction, SST's embedding); 0 (``--quiet``) hides it; 2 shows it as
            the applications' data passes do (``applications.checks.verbosity``).
        name: the HyperModel's name (default: the class attribute ``application``).
        tunable: True or False, keras-tuner's: whether the hyperparameters that
            :meth:`build` declares join the search space. Default True.
        precision: the Keras dtype policy every trial's model is built and trained under
            (``applications.arguments.PRECISIONS``: float32, mixed_float16 or
            mixed_bfloat16; :meth:`from_args`: ``--precision``). Default None: the global
            policy as it is when a trial builds.
        replicas: the replicas in sync under the search's strategy (:meth:`from_args`:
            the strategy's): the trials' training batches are cut for them, as the
            applications' ``train`` cuts its own (``distribute.even_batches``: a batch
            that did not split evenly over the replicas trained with a wrong gradient).
    """

    #: the metric keras-tuner optimises (a name, or a ``keras_tuner.Objective``).
    objective = "val_accuracy"
    #: the application this HyperModel tunes.
    application = None

    def __init__(self, batch_size=32, seed=0, epochs=3, name=None, tunable=True, verbose=1, replicas=1,
                 precision=None):
        tunable = checks.true_or_false("tunable", tunable)
        self.precision = arguments.check_precision(precision)
        super().__init__(name=name or self.application, tunable=tunable)
        # (int() turned batch_size=2.7 into 2 and "8" into 8, epochs=0 was taken; a seed of -1
        # failed later in numpy)
        self.batch_size = checks.integer_at_least("batch_size", batch_size, 1)
        self.seed = checks.integer_at_least("seed", seed, 0)
        self.epochs = checks.integer_at_least("epochs", epochs, 1)
        self.replicas = checks.integer_at_least("replicas", replicas, 1)
        # (verbose="no" showed the progress; tunable="no" was taken as True by keras-tuner)
        self.verbose = checks.verbosity(verbose)  # the applications' check: load_data passes it to theirs
        self._data = None
        # Keras' random state is seeded before every build: the trials' initial weights
        # were drawn from an unseeded state, so the same command scored other values on
        # every run (and the Bayesian tuner then drew other trials), where every `train`
        # seeds Keras. keras-tuner's __init__ sets `self.build` to its own wrapper (a bound
        # method); it is wrapped in turn by a bound method, as keras-tuner does, not by a
        # closure: a closure kept the instance it was made for, so a copy
        # (`copy.deepcopy`) built with the original's seed, `tunable` and data, and the
        # HyperModel could not be pickled.
        self._unseeded_build = self.build
        self.build = self._seeded_build

    def _seeded_build(self, hp, *args, **kwargs):
        """``build`` (through keras-tuner's wrapper) with Keras' random state seeded first,
        under the dtype policy of ``precision``: keras-tuner clears Keras' session before
        every trial's build, which puts the global policy back to float32 (a policy set
        once around the whole search held for the first trial only)."""
        keras.utils.set_random_seed(self.seed)
        with arguments.precision_policy(self.precision):
            return self._unseeded_build(hp, *args, **kwargs)

    @classmethod
    def from_args(cls, args, strategy):
        """From the parsed ``keras-capsules tune`` options (``--batch-size`` is per replica)."""
        return cls(
            batch_size=distribute.global_batch_size(args.batch_size, strategy),
            replicas=strategy.num_replicas_in_sync,
            seed=args.seed,
            epochs=args.epochs,
            verbose=0 if args.quiet else 1,
            precision=getattr(args, "precision", None),
            **cls.options_from_args(args),
        )

    @classmethod
    def options_from_args(cls, args):
        """The application's own constructor arguments from the parsed options."""
        return {}

    def prepare(self):
        """The data of :meth:`load_data`, loaded on the first call only."""
        if self._data is None:
            self._data = self.load_data()
        return self._data

    def trial_epochs(self, hp):
        """The epochs that the trial of ``hp`` trains, which a learning-rate schedule must span.

        ``epochs``, but under Hyperband those of the trial's round: ``tuner/epochs`` less
        ``tuner/initial_epoch`` (a later round starts from the weights of an earlier trial,
        with a new optimizer whose step count starts at 0). A schedule of ``epochs`` cut
        the trials of Hyperband's first rounds short of its decay (they were scored near
        the peak rate, and the best of them chosen so) and left the later rounds' undecayed.
        """
        values = hp.values
        return max(1, int(values.get("tuner/epochs", self.epochs)) - int(values.get("tuner/initial_epoch", 0)))

    def load_data(self):
        raise NotImplementedError

    def datasets(self, hp, data):
        """``(train, validation)`` of one trial."""
        raise NotImplementedError

    def fit_options(self, hp):
        """Extra ``model.fit`` keyword arguments; ``callbacks`` run before the tuner's."""
        return {}

    #: the files besides ``best_model.keras`` that :meth:`write_beside_best` writes (key ->
    #: file name): a search with ``--overwrite`` removes them with the old best model.
    beside_best = {}

    def recorded_options(self):
        """The data options of every trial as the application's ``train`` records them in its
        ``metrics.json`` (the same keys and form): the search writes them into the
        ``metrics.json`` beside its best model, where the application's ``evaluate`` takes
        its defaults from (image size, split, text length, ...). Here: none, ``{}``."""
        return {}

    def write_beside_best(self, directory):
        """Writes the files of :attr:`beside_best` into ``directory`` (beside the best
        model); returns their paths by key."""
        return {}

    def fit(self, hp, model, *args, **kwargs):
        """Trains ``model`` on this HyperModel's datasets (positional ``args`` are not used:
        the data comes from :meth:`datasets`); ``kwargs`` are those of ``tuner.search``.
        First lets the traced steps and models of earlier trials go
        (``applications.fault_tolerance.release_traced_graphs``)."""
        # (the earlier trials' traced steps and models, which TensorFlow's gradient registry kept)
        fault_tolerance.release_traced_graphs()
        train, validation = self.datasets(hp, self.prepare())
        options = dict(self.fit_options(hp))
        kwargs["callbacks"] = [FailDivergedTrial(), *options.pop("callbacks", ()), *kwargs.get("callbacks", ())]
        for key, value in options.items():
            kwargs.setdefault(key, value)
        kwargs.setdefault("validation_data", _for_strategies(validation))
        # the datasets shuffle themselves; fit's default shuffle=True only made Keras warn
        # that it ignores it, at every trial
        kwargs.setdefault("shuffle", False)
        train = _for_strategies(train)
        with arguments.precision_policy(self.precision):  # (what fit builds: under the model's policy)
            return model.fit(train, **kwargs)


def stepped_choice(hp, name, low, high, step, default):
    """Declares ``low, low + step, ..., high`` (a ``Choice`` of the rounded values); returns
    the trial's value.

    keras-tuner's stepped ``Float`` counts its values as ``(high - low) // step + 1``,
    which is one short in floating point (``0.3 // 0.05 == 5.0``): its top value was
    never drawn (dropouts documented up to 0.3 stopped at 0.25), and the values it drew
    carried rounding noise into the trials (0.15000000000000002). A numeric ``Choice``
    is ordered, as the ``Float`` was, for the Bayesian tuner.
    """
    count = int(round((high - low) / step)) + 1
    values = [round(low + i * step, 10) for i in range(count)]
    if values[-1] != round(high, 10) or default not in values:
        raise ValueError(f"{name}: {high} is not {low} plus a whole number of steps {step}, "
                         f"or the default {default} is not one of {values}")
    return hp.Choice(name, values, default=default)


def level_widths(hp, levels_name, width_name, widths, defaults, default_levels):
    """Declares how many levels a ladder has and how wide each is; returns the used widths.

    ``levels_name`` (an ``Int`` from 1 to ``len(defaults)``, default ``default_levels``) and
    ``{width_name}_{k}`` (a ``Choice`` of ``widths``, default ``defaults[k]``) for every
    level ``k``. The width of level ``k >= 1`` is declared in a
    ``hp.conditional_scope(levels_name, [k + 1, ...])``: it is active, searched and
    recorded only in the trials that have that level (it stayed in every trial's values,
    and varied in trials that never built it). Every width stays declared, so that
    ``--fixed`` can pin it.

    Returns:
        The widths of the ``levels`` levels, bottom to top (a tuple).

    Raises:
        InputError: ``levels`` (pinned by ``--fixed``) is not in ``[1, len(defaults)]``:
            ``widths[:levels]`` silently built another number of levels.
    """
    most = len(defaults)
    levels = hp.Int(levels_name, 1, most, default=default_levels)
    if not 1 <= levels <= most:
        raise InputError(f"`{levels_name}` must be an integer in [1, {most}] (the widths {width_name}_0 .. "
                         f"{width_name}_{most - 1}). Received: {levels_name}={levels!r}")
    used = [hp.Choice(f"{width_name}_0", list(widths), default=defaults[0])]
    for k in range(1, most):
        # None (keras-tuner's value of an inactive entry) where the trial has no level k
        with hp.conditional_scope(levels_name, list(range(k + 1, most + 1))):
            used.append(hp.Choice(f"{width_name}_{k}", list(widths), default=defaults[k]))
    return tuple(used[:levels])


class FailDivergedTrial(keras.callbacks.Callback):
    """Fails the trial (``keras_tuner.errors.FailedTrialError``) whose training diverged:
    a NaN or infinite training loss after a batch or an epoch, or such a weight after an
    epoch; it stops at once, before keras-tuner checkpoints or scores that epoch.

    (A diverged model still has a finite validation accuracy, that of always guessing one
    class: such a trial completed with that score, and, ahead of trials that learned
    little, came out as the best model with NaN weights.) keras-tuner counts failed
    trials: the search stops after three in a row (``search._failed_trials_error``).
    """

    def on_train_batch_end(self, batch, logs=None):
        self._check_loss(logs, f"batch {batch + 1} of epoch {self._epoch + 1}")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        where = f"epoch {epoch + 1}"
        self._check_loss(logs, where)
        for weight in self.model.weights:
            values = np.asarray(keras.ops.convert_to_numpy(weight))
            if values.dtype.kind in "fc" and not np.isfinite(values).all():
                self._fail(f"weight {weight.path} is NaN or infinite after {where}")

    _epoch = 0

    def _check_loss(self, logs, where):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.all(np.isfinite(loss)):
            self._fail(f"loss {float(np.asarray(loss).ravel()[0])} in {where}")

    def _fail(self, what):
        # (keras-tuner prints the trial's traceback, which ends with this message)
        raise keras_tuner.errors.FailedTrialError(
            f"the training diverged ({what}): the trial fails; try a smaller learning rate")


def _for_strategies(data):
    """``tf.data`` datasets shard by ``DATA`` (in-memory or generated data); others as they are."""
    import tensorflow as tf

    if isinstance(data, tf.data.Dataset):
        return distribute.distribute_dataset_options(data)
    return data


__all__ = ["DatasetHyperModel", "FailDivergedTrial", "level_widths"]
