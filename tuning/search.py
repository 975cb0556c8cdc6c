"""The search behind ``keras-capsules tune``: tuner, resume, best model and hyperparameters.

    tuner = make_tuner("bayesian", hypermodel, "runs/tune", "demo", max_trials=20, epochs=3)
    tuner.search(epochs=3)

The tuner state lives in ``<directory>/<application>/``; with ``overwrite=False`` (the
default) a stopped search resumes there: finished trials are kept and only the
remaining ones of ``max_trials`` run, with the tuner, ``--epochs`` and ``--fixed``
values the search was started with, and its other options but paths, ``--strategy``,
``--quiet`` and the like (``--seed``, ``--batch-size``, ``--limit``, the
application's: :func:`search_options`), on the same data where ``--data-dir`` chooses
them (their fingerprint: the same files in another folder are the same data); others
are a one-line error. ``--overwrite`` starts afresh (and removes the old search's best
model, hyperparameters and metrics).
Hyperband has no trial budget of its own: its oracle's ``max_trials`` is set too, and
it sweeps its brackets as many times as it takes, so ``--max-trials`` is the number of
trials of every tuner.

A directory holds the best files of one application's search: ``tune`` of another
application into it (whose best files would replace the first one's) is a one-line
error, unless ``--overwrite`` (which replaces them; the other search's trials stay in
``<directory>/<other application>/``, but resuming it there then needs ``--overwrite``
too). ``<directory>/keras_capsules_search.json`` records which search it is (the
settings a resume is checked against, with ``"application"``). A directory whose
``metrics.json`` no search wrote (a ``keras-capsules train`` run's) is refused: the
search would replace it.

After the search, ``<directory>/best_model.keras`` (written atomically) and
``<directory>/best_hyperparameters.json`` hold the best trial's model and values::

    {"trial_id": "0007", "objective": "val_accuracy", "best_score": 0.91,
     "hyperparameters": {"n_iters": 3, "filters": 32, ...},
     "tuner": {"epochs": 3, "initial_epoch": 1, "bracket": 1, "round": 1, "trial_id": "0002"}}

``hyperparameters`` are the model's, those that rebuild it (``hp.Fixed(name, value)``
for each, then the HyperModel's ``build``); ``tuner`` (Hyperband only) is Hyperband's
bookkeeping of the trial, keras-tuner's ``tuner/...`` entries without that prefix: the
trial trained ``epochs`` epochs in all, from ``initial_epoch`` on in ``round`` of
``bracket``, from the weights of trial ``trial_id`` (in a later round).
Beside the model, ``<directory>/metrics.json`` (standard JSON, as ``train`` writes it)
holds the data options of the trials in the keys and form that the application's
``train`` records them (the HyperModel's ``recorded_options()``: smallnorb's and clevr's
``image_size``, the ``split`` of demo, occluded_mnist and textured_mnist, the text
``max_length``, ...), so that ``keras-capsules evaluate APPLICATION
DIRECTORY/best_model.keras`` scores data made as the search's by default; then the best
trial's ``trial_id``, ``objective`` and ``best_score`` (its validation score) and the
paths. Other files that ``evaluate`` reads beside a model are written there too (the
HyperModel's ``beside_best``: text_classification's ``vocab.txt``).
Under ``--strategy multiworker`` every worker runs the same trials in step; the chief
writes into ``<directory>``, the others keep their tuner state and their
``best_hyperparameters.json`` in ``<directory>/workers/<type>-<index>`` (keras-tuner
keeps the trials' weights, hence the best model, on the chief only; Hyperband, whose
later rounds load them, is refused there).

``--fixed NAME=VALUE`` (repeatable) pins hyperparameters of the search space to one
value (``hp.Fixed``) and searches the others, e.g. ``--fixed n_iters=3`` or a small
model for a quick search. A name that the HyperModel does not declare is an error, and
so is a value of the wrong type for its hyperparameter (``levels=2.5``, ``gate=1``) or a
word outside its choices; numbers outside the searched range are allowed. An entry that
the HyperModel declares conditionally (music's ``units_1``, used where ``levels`` is 2 or
3) is pinned in the trials that use it, and absent from the others' values.
"""

import contextlib
import io
import json
import math
import os

import keras_tuner

from applications import checks, distribute, fault_tolerance
from applications.errors import CommandLineError, InputError, user_path

TUNERS = ("hyperband", "bayesian", "random")


def make_tuner(kind, hypermodel, directory, project_name, max_trials, epochs=3, seed=0,
               strategy=None, overwrite=False, objective=None, hyperparameters=None):
    """A keras-tuner tuner of ``kind`` (hyperband, bayesian or random) for ``hypermodel``.

    Args:
        strategy: a ``tf.distribute.Strategy``: models are built and trained under it.
        epochs: hyperband's ``max_epochs``, at least 2 (``epochs=1`` gives 2; the other
            tuners take epochs in ``search``).
        hyperparameters: a ``keras_tuner.HyperParameters`` of fixed values (see
            :func:`fixed_hyperparameters`: its ``Fixed`` entries, and the parents of the
            conditional ones); the HyperModel's other entries are searched.
        max_trials: the number of trials, an integer >= 1.
        seed: an integer in [0, 2**32): the same seed draws the same trials.

    Raises:
        InputError (a ValueError): ``kind`` is none of :data:`TUNERS`, ``max_trials`` or
            ``epochs`` is not an integer >= 1, or ``seed`` not an integer in [0, 2**32).
    """
    if kind not in TUNERS:  # (before keras-tuner reads or replaces anything in `directory`)
        raise InputError(f"unknown tuner {kind!r}; choose from {', '.join(TUNERS)}")
    # checked here (the command line's options are): keras-tuner reads max_trials=0 as "no
    # limit" (the search never ended), took max_trials=-2 or 2.5, and Hyperband's
    # max_epochs=2.5; a seed of -1 became keras-tuner's "none" (a random seed: the trials
    # differed from run to run), True and 2.7 the seeds 1 and 2
    max_trials = checks.integer_at_least("max_trials", max_trials, 1)
    epochs = checks.integer_at_least("epochs", epochs, 1)
    seed = checks.integer_at_least("seed", seed, 0)
    if seed >= 2**32:
        raise InputError(f"`seed` must be an integer in [0, 2**32). Received: seed={seed!r}")
    objective = objective or getattr(hypermodel, "objective", "val_loss")
    common = dict(
        objective=objective,
        seed=_oracle_seed(seed),
        directory=directory,
        project_name=project_name,
        overwrite=overwrite,
        distribution_strategy=strategy,
        hyperparameters=hyperparameters,
        tune_new_entries=True,
    )
    if kind == "hyperband":
        tuner = _Hyperband(hypermodel, max_epochs=max(epochs, 2), factor=3, **common)
        # Set after keras-tuner has reloaded a stopped search's oracle (which restores
        # both): Hyperband sweeps its brackets again until max_trials trials have run (an
        # iteration runs one trial or more). With keras-tuner's one iteration it stopped
        # at the trials of one sweep (2 at --epochs 1), under any larger --max-trials.
        tuner.oracle.max_trials = max_trials
        tuner.oracle.hyperband_iterations = max_trials
    elif kind == "bayesian":
        tuner = keras_tuner.BayesianOptimization(hypermodel, max_trials=max_trials, **common)
    else:  # random
        tuner = keras_tuner.RandomSearch(hypermodel, max_trials=max_trials, **common)
    _trials_in_start_order(tuner.oracle)
    if kind == "bayesian":
        _replay_restart_points(tuner.oracle)
    return tuner


def _replay_restart_points(oracle):
    """Brings a reloaded Bayesian oracle's random state to where the stopped search left it.

    The oracle draws the start points of its acquisition optimisation (50 per proposal)
    from a ``RandomState(seed)`` that keras-tuner neither saves nor restores: a resumed
    search drew those of its first proposal again, so it proposed other values than the
    same search run without a stop. The draws of the proposals the trials so far took
    (those started after ``num_initial_points`` completed trials) are replayed here.
    """
    import numpy as np

    bounds = getattr(oracle, "_get_hp_bounds", None)
    if bounds is None or not hasattr(oracle, "_random_state") or not oracle.start_order:
        return
    initial = oracle.num_initial_points or max(3 * len(oracle.hyperparameters.space), 3)
    completed = keras_tuner.engine.trial.TrialStatus.COMPLETED
    draws, done = 0, 0
    for trial_id in oracle.start_order:  # (a retried trial took no new values)
        if trial_id not in oracle.trials:
            continue
        draws += done >= initial
        done += oracle.trials[trial_id].status == completed
    state = np.random.RandomState(oracle.seed)
    dimensions = len(bounds())
    for _ in range(draws):
        state.uniform(size=(50, dimensions))  # as many numbers as the oracle's draw takes
    oracle._random_state = state


def _trials_in_start_order(oracle):
    """Puts a reloaded search's ``oracle.trials`` in the order the trials started.

    keras-tuner reloads them in the order its file search lists the trial folders
    (another order on every run): the Bayesian oracle fits its Gaussian process to the
    trials in that order, so a resumed search proposed other values (apart in the 8th
    digit, and drifting) than the same search run without a stop, and than the same
    resume run again. Trials the order does not name (none, in a search this module
    runs) come last, by id.
    """
    trials = getattr(oracle, "trials", None)
    if not isinstance(trials, dict):
        return
    started = {trial_id: index for index, trial_id in enumerate(getattr(oracle, "start_order", ()))}
    ordered = sorted(trials, key=lambda trial_id: (started.get(trial_id, len(started)), trial_id))
    oracle.trials = {trial_id: trials[trial_id] for trial_id in ordered}


def _oracle_seed(seed):
    """The oracle's seed for ``seed``: keras-tuner takes a seed of 0 (``--seed``'s default)
    for "none" and draws a random one, so the default search was not reproducible, and
    the workers of a multi-worker search drew different trials (their collectives then
    failed on mismatched shapes). ``seed + 1`` is passed instead, kept below 2**32 (the
    Bayesian oracle gives it to numpy's ``RandomState``)."""
    return min(int(seed) + 1, 2**32 - 1)


def _finished(tuner):
    done = (keras_tuner.engine.trial.TrialStatus.COMPLETED,)
    return [t for t in tuner.oracle.trials.values() if t.status in done]


def parse_fixed(text):
    """``NAME=VALUE`` of ``--fixed``: the value as JSON (numbers, true/false), else a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise CommandLineError(f"--fixed expects NAME=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    if not isinstance(parsed, (bool, int, float, str)):
        raise CommandLineError(f"--fixed {name}: expected a number, true/false or a word, got {value!r}")
    return name.strip(), parsed


def fixed_hyperparameters(hypermodel, fixed):
    """``keras_tuner.HyperParameters`` holding the ``NAME=VALUE`` texts of ``fixed``.

    Every name must be one that ``hypermodel.build`` declares (checked by one build of
    the default model, as keras-tuner does to learn the space), so that a typo is not
    silently ignored; the pinned values must build the model and its datasets.
    Returns None when ``fixed`` is empty.
    """
    if not fixed:
        return None
    values = {}
    for text in fixed:
        name, value = parse_fixed(text)
        if name in values and values[name] != value:
            # (the last one was kept without a word)
            raise CommandLineError(f"--fixed {name} given twice, with other values: "
                                   f"{name}={json.dumps(values[name])} and {name}={json.dumps(value)}")
        values[name] = value
    declared = keras_tuner.HyperParameters()
    hypermodel.build(declared)
    names = sorted({hp.name for hp in declared.space})
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise CommandLineError(
            f"--fixed: {', '.join(unknown)} not in the search space of {hypermodel.name!r}; "
            f"choose from {', '.join(names)}"
        )
    space = {hp.name: hp for hp in declared.space}
    for name, value in values.items():
        expected = _misfit(space[name], value)
        if expected:
            raise CommandLineError(f"--fixed {name}: expected {expected}, got {value!r}")
    for name, value in values.items():
        # a conditional entry whose parents are pinned to values that never use it
        # (levels=1 with units_1=64) was accepted and then ignored in every trial
        conditions = space[name].conditions
        if conditions and all(c.name in values for c in conditions) and not all(
            c.is_active(values) for c in conditions
        ):
            needs = " and ".join(f"{c.name} in {list(c.values)}" for c in conditions)
            given = ", ".join(f"{c.name}={json.dumps(values[c.name])}" for c in conditions)
            raise CommandLineError(f"--fixed {name}={json.dumps(value)}: never used with {given} "
                                   f"(it is used where {needs})")
    hyperparameters = _pinned(declared.space, values)
    pinned = _pinned(declared.space, values)  # a copy: the build adds the other entries to it
    try:
        # the default model built above, so a ValueError here is the pinned values' (e.g.
        # n_iters=0); raised later by keras-tuner's first build, it ended `tune` with a traceback
        hypermodel.build(pinned)
        # the values that only `datasets` reads (mixup_alpha=-0.5): they failed every trial,
        # with a traceback each, and ended the search with keras-tuner's RuntimeError
        datasets = getattr(hypermodel, "datasets", None)
        if datasets is not None and hasattr(hypermodel, "prepare"):
            datasets(pinned, hypermodel.prepare())
    except ValueError as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        given = " ".join(f"{name}={json.dumps(value)}" for name, value in values.items())
        raise CommandLineError(f"--fixed {given}: the model cannot be built with these values: {first}") from None
    return hyperparameters


def _pinned(space, values):
    """``keras_tuner.HyperParameters`` with ``Fixed`` entries of ``values`` (name -> value)
    for the search space ``space`` (a HyperModel's ``declared.space``, in its order).

    An entry that the HyperModel declares in a ``conditional_scope`` (music's ``units_1``,
    used where ``levels`` is 2 or 3) is pinned under the same conditions, after the
    entries they name (its parents: pinned too, or as the HyperModel declares them, still
    searched): keras-tuner fills a trial's values in the order of the space, and keeps a
    conditional entry's value only where its parents' values activate it. An unconditional
    ``Fixed`` was another entry than the HyperModel's conditional one: the value drawn for
    that one replaced the pinned value in every trial that used it.
    """
    from keras_tuner.engine import hyperparameters as hps

    needed = set(values)
    while True:  # the parents of the pinned entries, and theirs
        parents = {condition.name for hp in space if hp.name in needed for condition in hp.conditions} - needed
        if not parents:
            break
        needed |= parents
    hyperparameters = keras_tuner.HyperParameters()
    for hp in space:
        if hp.name in values:
            hp = hps.Fixed(hp.name, values[hp.name], conditions=hp.conditions)
        if hp.name in needed:
            hyperparameters.merge([hp])
    return hyperparameters


def pinned_values(hyperparameters):
    """The values that ``--fixed`` pinned in ``hyperparameters`` (of
    :func:`fixed_hyperparameters`; None: none), active or not: name -> value."""
    from keras_tuner.engine import hyperparameters as hps

    if hyperparameters is None:
        return {}
    return {hp.name: hp.value for hp in hyperparameters.space if isinstance(hp, hps.Fixed)}


def _misfit(hp, value):
    """What ``hp`` expects when ``value`` (of ``parse_fixed``) cannot stand for it, else None.

    Numbers may lie outside the searched range (a smaller model for a quick search), but
    must be of the hyperparameter's type; a word must be one of its choices.
    """
    from keras_tuner.engine import hyperparameters as hps

    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_number = is_int or (isinstance(value, float) and math.isfinite(value))
    if isinstance(hp, hps.Boolean):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(hp, hps.Int):
        return None if is_int else "an integer"
    if isinstance(hp, hps.Float):
        return None if is_number else "a finite number"
    if isinstance(hp, hps.Choice):
        choices = list(hp.values)
        if all(isinstance(c, str) for c in choices):
            return None if value in choices else "one of " + ", ".join(choices)
        if all(isinstance(c, bool) for c in choices):
            return None if isinstance(value, bool) else "true or false"
        if all(isinstance(c, int) and not isinstance(c, bool) for c in choices):
            return None if is_int else "an integer"
        return None if is_number else "a finite number"
    return None


def run_search(args, strategy):
    """Runs (or resumes) the search that ``keras-capsules tune`` describes; writes the best."""
    import tensorflow as tf

    import tuning

    if args.tuner == "hyperband" and strategy is not None and distribute._is_multi_worker(strategy):
        # Hyperband's later rounds load the weights of an earlier trial, which keras-tuner
        # keeps on the chief only: on the other workers they failed (FileNotFoundError),
        # and with them the chief's.
        raise InputError("--tuner hyperband cannot search under --strategy multiworker (keras-tuner "
                         "keeps the trials' weights on the chief only); use --tuner random or bayesian")
    # The workers of a multi-worker cluster run the same search in step; each keeps its
    # tuner state, checkpoints and best model apart (the chief in --directory), else they
    # wrote the same files at once.
    directory = distribute.output_dir(args.directory, strategy)
    # (keras-tuner creates it with TensorFlow's file functions, whose errors are no OSError)
    with user_path(f"cannot create the search directory {directory!r}"):
        os.makedirs(directory, exist_ok=True)
    # before the data are prepared (CLEVR's features take hours): another application's search
    replaced = _check_directory(directory, args.application, args.overwrite)
    # the replicas the trials train on: their global batch is --batch-size times as many
    # (and batch normalization synchronized over them); a resume under another strategy
    # ranked trials trained so against the others (helper-182)
    replicas = 1 if strategy is None else int(strategy.num_replicas_in_sync)
    settings = {"application": args.application, "tuner": args.tuner, "epochs": args.epochs,
                "replicas": replicas, "options": search_options(args)}
    if not args.overwrite:
        # and a resume with other options (but --fixed, which needs a model build), also
        # before the data are prepared: it was refused after them (25 s for a small SST
        # search, hours for CLEVR's features; helper-182)
        _check_resumed_settings(os.path.join(directory, args.application), settings)
    hypermodel = tuning.HYPERMODELS[args.application].from_args(args, strategy)
    hypermodel.prepare()  # missing data fails now, as one line, before any trial
    default = strategy is None or strategy is tf.distribute.get_strategy()
    fixed = fixed_hyperparameters(hypermodel, args.fixed)
    settings["fixed"] = pinned_values(fixed)
    if not args.overwrite:  # (--fixed now; the others were checked above)
        _check_resumed_settings(os.path.join(directory, args.application), settings)
    # (keras-tuner prints "Reloading Tuner from .../tuner0.json" on a resume: not with --quiet)
    with contextlib.redirect_stdout(io.StringIO()) if args.quiet else contextlib.nullcontext():
        tuner = make_tuner(
            args.tuner, hypermodel, directory, args.application, args.max_trials,
            epochs=args.epochs, seed=args.seed, strategy=None if default else strategy,
            overwrite=args.overwrite, hyperparameters=fixed,
        )
    if args.overwrite:
        # keras-tuner deletes the old search's trials, not its best model and values beside
        # them: they were left as the new search's until its end, for good if it found no best
        names = {**BEST_FILES, **_beside_best(args.application)}
        for other in replaced:
            names.update(_beside_best(other))
        for name in sorted(set(names.values())):
            with user_path(f"cannot remove the old search's {name!r}"):
                if os.path.lexists(os.path.join(directory, name)):
                    os.remove(os.path.join(directory, name))
    fault_tolerance.write_json_atomically(settings, os.path.join(directory, args.application, _SETTINGS))
    # the directory's search: that of its best files (_check_directory)
    fault_tolerance.write_json_atomically(settings, os.path.join(directory, _SETTINGS))
    before = len(_finished(tuner))
    try:
        tuner.search(epochs=args.epochs, verbose=0 if args.quiet else 1)
    except RuntimeError as error:
        raise _failed_trials_error(error, os.path.join(directory, args.application)) from None
    finished = _finished(tuner)
    return export_best(tuner, directory, new_trials=len(finished) - before, data_fingerprint=settings["options"].get(_DATA))


class _Hyperband(keras_tuner.Hyperband):
    """``keras_tuner.Hyperband`` without Keras' warning at every trial of a later round.

    Such a trial starts from an earlier trial's checkpoint, which keras-tuner loads into
    the new model before its optimizer is built: Keras skips the saved optimizer state
    and warns ("Skipping variable loading for optimizer 'adam', because it has 2
    variables whereas the saved optimizer has 54"), which read as state lost by the
    search. A fresh optimizer is what the trial is meant to have
    (:meth:`tuning.base.DatasetHyperModel.trial_epochs`); other warnings pass.
    """

    def _build_hypermodel(self, hp):
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Skipping variable loading for optimizer")
            return super()._build_hypermodel(hp)


# keras-tuner's RuntimeError when max_consecutive_failed_trials trials in a row failed
_CONSECUTIVE_FAILURES = "Number of consecutive failures exceeded the limit"


def _failed_trials_error(error, project_dir):
    """keras-tuner's stop after trials that failed in a row, as one line naming the last
    trial's error (it was a traceback of the tuner's own ``RuntimeError``, ending ``tune``
    with exit 1); any other ``RuntimeError`` is returned as it is."""
    text = str(error)
    if not text.startswith(_CONSECUTIVE_FAILURES):
        return error
    limit = text.splitlines()[0][len(_CONSECUTIVE_FAILURES):].strip(" .of")
    # the trial's message is its traceback: the last non-empty line names the error
    cause = next((line.strip() for line in reversed(text.splitlines()[1:]) if line.strip()), "unknown")
    return CommandLineError(
        f"the search in {project_dir} stopped: {limit} trials in a row failed, the last with {cause} "
        "(keras-tuner printed the trials' tracebacks above); the finished trials are kept: fix the cause "
        "and rerun the command to go on, or start afresh with --overwrite"
    )


_SETTINGS = "keras_capsules_search.json"
_DATA = "data_fingerprint"  # (of search_options: compared without the folder of the data)
_OPTIONS = {"tuner": "--tuner", "epochs": "--epochs", "fixed": "--fixed", "replicas": "--strategy of"}
# `tune` options a resumed search may change besides those of `train`
# (arguments.RESUMABLE_CHANGES: paths, strategy, threads, --quiet): where the search is
# and how many trials it has in all; --tuner, --epochs and --fixed are checked apart.
_RESUMABLE_TUNE_OPTIONS = frozenset({"directory", "max_trials", "overwrite", *_OPTIONS})


def search_options(args):
    """The options of a ``tune`` command, other than ``--tuner``, ``--epochs``, ``--fixed``,
    that a resumed search must keep: those that choose the data and how trials train
    (``--seed``, ``--batch-size``, ``--limit``, the application's, ...), as JSON gives
    them back, and where ``--data-dir`` chooses the data
    (``arguments.DATA_DIR_CHOOSES_THE_DATA``) the fingerprint of those data
    (``"data_fingerprint"``, ``arguments.data_fingerprint``), not the folder. A resume with
    another ``--seed``, ``--limit`` or other data ranked trials scored on different
    validation examples (and trained from other splits or data) against each other, and
    wrote the new data's split beside a best model trained on the old data (``evaluate``
    then scored it on those); the same data moved to another folder are resumed.
    ``--precision`` is among them unless float32 (a search's record without it: float32)."""
    from applications import arguments

    options = {name: value for name, value in arguments.run_options(args).items()
               if name not in _RESUMABLE_TUNE_OPTIONS}
    return json.loads(json.dumps(options, default=str, sort_keys=True))


def _check_resumed_settings(project_dir, settings):
    """Refuses to resume the search in ``project_dir`` with another tuner, ``--epochs``,
    ``--fixed`` or other :func:`search_options`: keras-tuner restores its saved oracle,
    so a new ``--fixed`` or Hyperband's ``--epochs`` was silently ignored, other epochs
    (or data options) made the trials' scores incomparable, and another tuner failed
    with a traceback (or ran on the old one's state). Its data are compared by their
    fingerprint, without the folder they were read in. A name missing from ``settings``
    (or from the saved ones: a search started before it was recorded) is not compared
    (``run_search`` checks all but ``fixed`` before the data are prepared).
    """
    from applications.shared_data import describe_data, same_data

    path = os.path.join(project_dir, _SETTINGS)
    if not os.path.exists(path):  # a new search, or one started before this file existed
        return
    saved = _read_settings(path)
    if saved is None:
        raise InputError(f"{path} is damaged (not the JSON object a search writes), so the search in "
                         f"{project_dir} cannot be checked for a resume: start it afresh with --overwrite "
                         "(or use another --directory)")
    changed = [name for name in _OPTIONS if name in saved and name in settings and saved[name] != settings[name]]
    were = [f"{_OPTIONS[name]} {_describe(name, saved[name])}" for name in changed]
    saved_options, data = saved.get("options"), None
    if isinstance(saved_options, dict):  # (not recorded by searches started before it was)
        current = settings["options"]
        were += [_option_text(name, saved_options[name]) for name in sorted(saved_options)
                 if name in current and name not in (_DATA, "precision") and current[name] != saved_options[name]]
        # --precision: recorded unless float32 (arguments.run_options), which a record without it means
        if saved_options.get("precision", "float32") != current.get("precision", "float32"):
            were.append(_option_text("precision", saved_options.get("precision", "float32")))
        old, new = saved_options.get(_DATA), current.get(_DATA)
        if old is not None and new is not None and not same_data(old, new):
            where = f"{new['source']} holds" if new.get("source") else "the data chosen now are"
            data = f"on {describe_data(old)}; {where} other data ({describe_data({**new, 'source': None}, old)})"
    if were or data:
        started = " ".join(([f"with {', '.join(were)}"] if were else []) + ([data] if data else []))
        same = " and ".join((["the same options"] if were else []) + (["the same data (in any folder)"] if data else []))
        raise InputError(f"the search in {project_dir} was started {started}: resume it with {same}, or start "
                         "it afresh with --overwrite (or another --directory)")


def _check_directory(directory, application, overwrite):
    """Refuses ``directory`` when it holds the search of another application than
    ``application`` (unless ``overwrite``), or a ``metrics.json`` that no search wrote.

    Its ``keras_capsules_search.json`` names the application of the search whose best
    files it holds; a directory of a search started before that file was written there
    holds those of the applications whose project folders (``<directory>/<name>/``) it
    has. Two applications tuned into one directory shared ``best_model.keras`` and
    ``best_hyperparameters.json``: the second silently replaced the first's, and
    ``evaluate`` of the first application then scored the second's model. A
    ``metrics.json`` without that file is a ``keras-capsules train`` run's (searches
    wrote none before it): the search would replace the record that ``evaluate`` of that
    run's ``model.keras`` reads, also with ``overwrite``.

    Returns the other applications whose best files ``overwrite`` lets the search replace.
    """
    import tuning

    path = os.path.join(directory, _SETTINGS)
    saved = _read_settings(path) if os.path.exists(path) else None
    if saved is not None:
        owner = saved.get("application")
        others = [owner] if isinstance(owner, str) and owner != application else []
    else:
        if os.path.exists(path) and not overwrite:
            raise InputError(f"{path} is damaged (not the JSON object a search writes), so it does not "
                             f"say whose search {directory} holds: tune {application} into another "
                             "--directory, or start afresh there with --overwrite")
        metrics = os.path.join(directory, BEST_FILES["metrics"])
        if os.path.lexists(metrics) and not os.path.exists(path):
            raise InputError(f"{metrics} was not written by a search (a `keras-capsules train` run's?): "
                             f"the search would replace it; tune {application} into another --directory")
        others = [name for name in tuning.HYPERMODELS if name != application and any(
            os.path.exists(os.path.join(directory, name, file)) for file in (_SETTINGS, "oracle.json"))]
    if others and not overwrite:
        searches = ", ".join(f"{name} ({os.path.join(directory, name)})" for name in others)
        raise InputError(f"{directory} holds the search of {searches}, whose best model and hyperparameters a "
                         f"search of {application} would replace: tune {application} into another --directory, "
                         "or replace them with --overwrite")
    return others


def _read_settings(path):
    """The JSON object a search wrote to ``path`` (a ``keras_capsules_search.json``), or
    ``None`` when the file is damaged: not JSON, not UTF-8 text, or JSON of another kind
    (a crash of an older version, a disk that filled, a hand edit). Before, a damaged
    file ended ``tune`` in a traceback."""
    try:
        with user_path(f"cannot read the search's record {path!r}"), open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError both are
        return None
    return saved if isinstance(saved, dict) else None


def _beside_best(application):
    """The files that ``application``'s HyperModel writes beside its best model (key -> name)."""
    import tuning

    if application not in tuning.HYPERMODELS:
        return {}
    return dict(getattr(tuning.HYPERMODELS[application], "beside_best", {}))


def _option_text(name, value):
    """``--name value`` as the command line takes it."""
    if isinstance(value, bool):
        text = "on" if value else "off"
    else:
        text = "(default)" if value is None else str(value)
    return f"--{name.replace('_', '-')} {text}"


def _describe(name, value):
    if name == "fixed":
        return " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(value.items())) or "(none)"
    if name == "replicas":
        return f"{value} replica{'s' if value != 1 else ''} (a global batch of --batch-size times that)"
    return str(value)


def best_trial(tuner):
    """The completed trial with the best finite score.

    keras-tuner's own ranking sorts the scores as they are, so a trial whose objective
    was NaN (a diverged run) can come out on top; here such trials never do. Of trials
    with the same score, the one started first is the best.

    Raises:
        CommandLineError: no trial completed, or none has a finite score.
    """
    finished = _finished(tuner)
    scored = [t for t in finished if t.score is not None and math.isfinite(t.score)]
    if not scored:
        where = os.path.join(tuner.directory, tuner.project_name)
        what = (f"all {len(finished)} finished trial(s) have a non-finite objective (NaN or inf: "
                "the training diverged; try a smaller learning rate)" if finished else
                "no trial finished (they failed, a NaN objective included, or were stopped; "
                "see the messages above)")
        raise CommandLineError(f"the search in {where} has no best trial: {what}; "
                               "--overwrite starts it afresh")
    sign = 1 if tuner.oracle.objective.direction == "max" else -1
    # of equal scores, the trial started first (as keras-tuner ranks them in a search):
    # the order of oracle.trials is the file system's after a reload, so a rerun that
    # added no trial exported another of the tied trials than the search had
    started = {trial_id: index for index, trial_id in enumerate(tuner.oracle.start_order)}
    return max(scored, key=lambda t: (sign * t.score, -started.get(t.trial_id, len(started))))


#: the files of the best trial that a search writes into its directory
BEST_FILES = {"model": "best_model.keras", "hyperparameters": "best_hyperparameters.json",
              "metrics": "metrics.json"}

# keras-tuner's prefix of the entries a tuner adds to a trial's hyperparameters for its own
# bookkeeping (Hyperband's "tuner/epochs", "tuner/initial_epoch", "tuner/bracket", ...).
_TUNER_PREFIX = "tuner/"


def best_metrics(hypermodel, summary, paths, data_fingerprint=None):
    """The ``metrics.json`` beside the best model: the data options of the trials as the
    application's ``train`` records them (``hypermodel.recorded_options()``, where
    ``evaluate`` takes its defaults from), and as it, the fingerprint of the data where
    ``--data-dir`` chooses them (``data_fingerprint``, of :func:`search_options`:
    ``evaluate`` refuses other data in their folder, ``checks.recorded_data``), then the
    best trial's ``trial_id``, ``objective`` and ``best_score`` of ``summary`` (that of
    ``best_hyperparameters.json``) and the ``paths`` of the files beside it."""
    recorded = getattr(hypermodel, "recorded_options", None)
    return {
        **(recorded() if recorded is not None else {}),
        **({_DATA: data_fingerprint} if data_fingerprint is not None else {}),
        **{key: summary[key] for key in ("trial_id", "objective", "best_score")},
        **paths,
    }


def split_hyperparameters(values):
    """``{"hyperparameters": ..., "tuner": ...}`` of a trial's ``hyperparameters.values``.

    ``hyperparameters`` holds the model's (the HyperModel's ``build`` declared them);
    ``tuner``, present only if the tuner added any (Hyperband does), its ``tuner/...``
    entries without that prefix. (They were written among the model's, where they
    read as settings of the model, and a rebuild from the file had to leave them out.)
    """
    model = {name: value for name, value in values.items() if not name.startswith(_TUNER_PREFIX)}
    tuner = {name[len(_TUNER_PREFIX):]: value for name, value in values.items() if name.startswith(_TUNER_PREFIX)}
    return {"hyperparameters": model, **({"tuner": tuner} if tuner else {})}


def _trained_model(tuner, trial, strategy):
    """The model of ``trial`` with the weights and optimizer state of its checkpoint.

    ``tuner.load_model`` loads the checkpoint into a model whose optimizer has no
    variables yet: Keras skipped the optimizer's saved state with a warning, and the
    best model was written with a fresh optimizer (its step count 0, Adam's moments
    lost). Here the optimizer is built first, so both load. Built and loaded under
    ``strategy`` (None: no strategy).
    """
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = tuner.hypermodel.build(trial.hyperparameters)
        if getattr(model, "optimizer", None) is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(tuner._get_checkpoint_fname(trial.trial_id))
    return model


def export_best(tuner, directory, new_trials=None, data_fingerprint=None):
    """Writes ``best_model.keras``, ``best_hyperparameters.json`` and ``metrics.json``
    (:func:`best_metrics`, with ``data_fingerprint``: that of the search's data) into
    ``directory``, and the files the HyperModel writes beside them (its ``write_beside_best``).

    The best trial is :func:`best_trial`'s: trials with a NaN or infinite score are
    passed over. A non-chief worker of a multi-worker search writes only
    ``best_hyperparameters.json`` (keras-tuner keeps the trials' weights on the chief
    only); ``model`` and ``metrics`` are then None. The file's form is in this module's docstring
    (:func:`split_hyperparameters`: the model's hyperparameters apart from Hyperband's).
    """
    best = best_trial(tuner)
    strategy = tuner.distribution_strategy
    paths = {key: os.path.join(directory, name) for key, name in BEST_FILES.items()}
    if strategy is None or not distribute._is_multi_worker(strategy):
        fault_tolerance.save_model_atomically(_trained_model(tuner, best, strategy), paths["model"])
    elif distribute.is_chief(strategy):
        # Built outside the strategy: under it, creating and loading the variables are
        # collective ops, which the other workers (without the weights) cannot join.
        fault_tolerance.save_model_atomically(_trained_model(tuner, best, None), paths["model"])
    else:
        paths["model"] = paths["metrics"] = None
    summary = {
        "trial_id": best.trial_id,
        "objective": tuner.oracle.objective.name,
        "best_score": float(best.score),
        **split_hyperparameters(best.hyperparameters.values),
    }
    fault_tolerance.write_json_atomically(summary, paths["hyperparameters"])
    if paths["model"] is not None:  # what `evaluate` reads beside the model
        write_beside_best = getattr(tuner.hypermodel, "write_beside_best", None)
        if write_beside_best is not None:
            paths.update(write_beside_best(directory))
        fault_tolerance.write_metrics_json(best_metrics(tuner.hypermodel, summary, paths, data_fingerprint),
                                           paths["metrics"])
    return {
        **summary,
        "trials": len(_finished(tuner)),
        "new_trials": new_trials,
        **paths,
    }
