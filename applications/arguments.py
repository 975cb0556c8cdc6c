"""Argument types and the options common to every application's commands."""

import argparse
import contextlib
import contextvars
import math
import os

from applications import distribute
from applications.errors import InputError, user_path


def _number_type(convert, accept, what):
    """An argparse ``type``: ``convert`` the text, and refuse it unless ``accept(value)``."""

    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what.replace("a ", "", 1).replace(" ", "_").replace("-", "_")
    return parse


positive_int = _number_type(int, lambda v: v >= 1, "a positive integer")
non_negative_int = _number_type(int, lambda v: v >= 0, "a non-negative integer")


def int_at_least(minimum):
    """An argparse ``type``: an integer >= ``minimum``."""
    return _number_type(int, lambda v: v >= minimum, f"an integer >= {minimum}")


# Floats must be finite: "inf" (which float() reads) as a learning rate trains to NaN.
positive_float = _number_type(float, lambda v: math.isfinite(v) and v > 0, "a positive number")
non_negative_float = _number_type(float, lambda v: math.isfinite(v) and v >= 0, "a non-negative number")
# dropout rates and the like (NaN fails the comparison, so it is refused too)
rate = _number_type(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
fraction = _number_type(float, lambda v: 0 <= v <= 1, "a number in [0, 1]")
# Keras' set_random_seed takes [0, 2**32); outside it, training failed late with "Seed must be between ...".
seed_int = _number_type(int, lambda v: 0 <= v < 2**32, "an integer seed in [0, 2**32)")


def _word_or(word, parse, what):
    """An argparse ``type``: ``word`` itself, or what ``parse`` accepts; ``what`` names both."""

    def parse_word_or_value(text):
        if text == word:
            return text
        try:
            return parse(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    return parse_word_or_value


#: RTagger's ``mask_damping``: ``learned``, or a number in [0, 1)
mask_damping = _word_or("learned", rate, "a number in [0, 1) or 'learned'")
#: a checkpoint frequency: ``epoch``, or a number of steps
save_freq = _word_or("epoch", positive_int, "'epoch' or a positive number of steps")


#: ``--precision``: the Keras dtype policies a ``train`` or ``tune`` may build and train under.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def check_precision(precision):
    """``precision`` if it is one of :data:`PRECISIONS` or None, else an ``InputError``."""
    if precision is not None and precision not in PRECISIONS:
        raise InputError(f"`precision` must be one of {', '.join(PRECISIONS)}. Received: precision={precision!r}")
    return precision


@contextlib.contextmanager
def precision_policy(precision):
    """Sets Keras' global dtype policy to ``precision`` (one of :data:`PRECISIONS`) inside
    the block and puts back the policy that was set before it on leaving, on an error too.
    ``None`` changes nothing (the policy set outside stays in force).

    Models built inside compute in the policy's dtype (float16 or bfloat16) and keep their
    weights in float32; Keras' ``Model.compile`` wraps the optimizer in a
    ``LossScaleOptimizer`` under ``mixed_float16``. A ``.keras`` model saved inside keeps
    its layers' policies: loaded anywhere, it computes as it was trained.
    """
    if check_precision(precision) is None:
        yield
        return
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def output_dtype():
    """The ``dtype`` of the layers that make a model's outputs: ``"float32"`` under a
    mixed global dtype policy (16-bit compute, float32 weights: ``mixed_float16``,
    ``mixed_bfloat16``), else None (the global policy, as every other layer).

    Keras' mixed-precision guide has the layers that make a model's outputs compute in
    float32, so that the losses, metrics and softmaxes see float32 logits and
    probabilities; the hidden layers keep computing in 16 bits. A float32 layer casts
    its 16-bit inputs up (Keras' autocast; the library's layers cast their own). None
    under float32 builds exactly the model built before this (same layers, config and
    weights for a seed). Call it while building, under the policy the model is built in.
    """
    import keras

    policy = keras.config.dtype_policy()
    mixed = policy.variable_dtype == "float32" and policy.compute_dtype != "float32"
    return "float32" if mixed else None


def float32_output(x, name):
    """``x``, a model output made by a layer that cannot compute in float32 alone (a
    recurrent ladder whose decoder makes the logits), as float32 under a mixed global
    policy: a linear ``Activation`` named ``name`` computing in float32 (Keras'
    mixed-precision guide); ``x`` itself otherwise (:func:`output_dtype`)."""
    dtype = output_dtype()
    if dtype is None:
        return x
    import keras

    return keras.layers.Activation("linear", dtype=dtype, name=name)(x)


def trains_under_precision(train):
    """Decorator of an application's Python ``train(..., precision=None)``.

    ``precision`` is one of :data:`PRECISIONS`: the Keras dtype policy under which the
    call builds, trains and saves its model (:func:`precision_policy`). Under a mixed
    one the hidden layers compute in 16 bits, the layers making the outputs in float32
    (:func:`output_dtype`) and every weight stays float32; under ``mixed_float16``
    Keras' ``compile`` wraps the optimizer in a ``LossScaleOptimizer``. None (the
    default): the global policy set outside (the command line sets ``--precision``
    around the call). The policy set before comes back after the call, on an error too.
    Another value is an ``InputError`` before anything is read or written.

    The run's backup records the precision, wherever its callbacks were made
    (``fault_tolerance.resumable_callbacks``), and a resume under another is refused:
    at once for callbacks made inside the call (:func:`policy_is_final`), before
    ``fit`` for a user's callbacks made outside it.
    """
    import functools
    import inspect

    signature = inspect.signature(train)
    if "precision" not in signature.parameters:
        raise TypeError(f"{train.__qualname__} takes no `precision` argument")

    @functools.wraps(train)
    def train_under_precision(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:  # Python's own error for the call
            return train(*args, **kwargs)
        with precision_policy(bound.arguments.get("precision")):
            token = _POLICY_IS_FINAL.set(True)
            try:
                return train(*args, **kwargs)
            finally:
                _POLICY_IS_FINAL.reset(token)

    return train_under_precision


_POLICY_IS_FINAL = contextvars.ContextVar("keras_capsules_policy_is_final", default=False)


def policy_is_final():
    """True inside an application's ``train`` (:func:`trains_under_precision`): the
    global dtype policy in force now is the one its run trains under, so that
    ``fault_tolerance.resumable_callbacks`` made there refuses a backup of another
    precision at once, before any data is read; outside (a user's callbacks made before
    the call), it is known only when training begins, and compared then."""
    return _POLICY_IS_FINAL.get()


def add_common_arguments(parser, command):
    """Options every application's ``train`` / ``evaluate`` / ``tune`` command has."""
    parser.add_argument(
        "--batch-size", type=positive_int, default=32,
        help="examples per replica and step; the global batch is this times the "
        "number of replicas, and a partial training batch (an epoch's last) is cut to a "
        "multiple of them, so that every replica trains on as many (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=seed_int, default=0,
        help="random seed (default: %(default)s)" if command != "evaluate" else
        "random seed of what evaluate draws: the test data an application generates, or samples; the "
        "applications that draw nothing ignore it (default: %(default)s)",
    )
    parser.add_argument(
        "--strategy", choices=distribute.STRATEGIES, default="default",
        help="tf.distribute strategy: default (one device), mirrored (all GPUs or logical "
        "CPUs), multiworker (cluster from TF_CONFIG), tpu (default: %(default)s)",
    )
    parser.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu")
    parser.add_argument(
        "--intra-op-threads", type=non_negative_int, default=None, metavar="N",
        help="threads TensorFlow may use inside one op; 0: all cores (TensorFlow's default). "
        "Default: the application's choice (1 for the recurrent text classifier, whose small "
        "per-step products run faster unsplit; 0 for the others)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    if command in ("train", "tune"):
        parser.add_argument(
            "--precision", choices=PRECISIONS, default="float32",
            help="Keras dtype policy the model is built and trained under: mixed_float16 (GPUs; the "
            "optimizer scales the loss), mixed_bfloat16 (TPUs, recent GPUs and CPUs) compute in 16 bits "
            "with float32 weights, losses and metrics; a saved model keeps it (evaluate needs no option); "
            "a resumed run or search keeps the precision it started with (default: %(default)s)",
        )
    if command == "train":
        parser.add_argument("--run-dir", default=None,
                            help="where the model, plots, metrics, backup and TensorBoard logs go "
                            "(default: runs/APPLICATION)")
        parser.add_argument("--epochs", type=positive_int, default=15,
                            help="total epochs; a resumed run trains the remaining ones (for sort_of_clevr, "
                            "smallnorb and sst a resume keeps the crashed run's --epochs) (default: %(default)s)")
        parser.add_argument("--save-freq", type=save_freq, default="epoch",
                            help="back up the training state every epoch or every N steps; a run "
                            "resumed from a backup made mid-epoch goes on at the step after it (the "
                            "epoch's remaining batches only), so it ends with the weights of a run "
                            "that never stopped, as one backed up every epoch does (default: %(default)s)")
    elif command == "evaluate":
        parser.add_argument("--model", default=None,
                            help="a .keras model written by `train` or `tune`, or the folder of a `train` run "
                            "(its model.keras) or of a `tune` search (its best_model.keras) "
                            "(default: runs/APPLICATION/model.keras)")
    elif command == "tune":
        parser.add_argument("--tuner", choices=("hyperband", "bayesian", "random"), default="hyperband",
                            help="search algorithm (default: %(default)s)")
        parser.add_argument("--directory", default=None,
                            help="search state, trials, best model and hyperparameters; a stopped "
                            "search resumes from it (default: runs/tune-APPLICATION)")
        parser.add_argument("--max-trials", type=positive_int, default=10,
                            help="total trials of the search, including those of earlier runs "
                            "(default: %(default)s)")
        parser.add_argument("--epochs", type=positive_int, default=3,
                            help="epochs per trial (hyperband: the most epochs a trial gets; 1 gives 2, "
                            "hyperband's least) (default: %(default)s)")
        parser.add_argument("--overwrite", action="store_true",
                            help="start the search again instead of resuming it")
        parser.add_argument("--fixed", action="append", default=[], metavar="NAME=VALUE",
                            help="pin a hyperparameter of the search space to one value and search "
                            "the others (repeatable), e.g. --fixed n_iters=3")


def recorded_default(parser, dest, help):
    """Makes the option ``dest`` of ``parser`` (an ``evaluate`` command's) default to None,
    read as the value that ``train`` recorded beside the model, with the ``help`` that
    says so (it should name the value used when nothing is recorded).

    Setting the default alone (``parser.set_defaults(seed=None)``) left the help of the
    option as it was: ``--seed`` said "random seed (default: None)", ``--source``
    "(default: None)", where the recorded value, else 0 or idx, is used.
    """
    actions = [action for action in parser._actions if action.dest == dest]
    parser.set_defaults(**{dest: None})  # (also on a parser without the option: as before)
    for action in actions:
        action.help = help


#: Options a resumed run may change: where things are, how it runs and reports, how
#: far it trains (``--epochs``), how often it backs up; not what it trains.
RESUMABLE_CHANGES = frozenset({
    "application", "command", "run_dir", "data_dir", "cache_dir", "epochs", "save_freq", "quiet",
    "strategy", "tpu", "intra_op_threads", "jit_compile", "test_hang_at",
})


def _digits_data(args):
    """demo: scikit-learn's 8x8 digits without ``--data-dir``, else its ``t10k`` IDX files."""
    from applications.mnist_digits import arrays_fingerprint

    return arrays_fingerprint(args.data_dir)


def _idx_data(args):
    """occluded_mnist and textured_mnist: the IDX files of ``--data-dir`` (default: the
    shared copy); occluded_mnist's ``--source tfds`` reads TFDS's ``mnist``: a location."""
    from applications.mnist_digits import default_data_dir, idx_fingerprint

    if getattr(args, "source", "idx") != "idx":
        return None
    return idx_fingerprint(args.data_dir or default_data_dir())


def _chorales_data(args):
    """music: the JSON file of the chorales (``--data-dir``, the file or its folder), read
    in the file itself (not its folder: another file beside it is elsewhere) and named as
    in a folder, ``jsb_chorales.json``, whatever it is called (a symbolic link, a renamed
    copy: the same file was other data)."""
    from applications.jsb_chorales import data_file
    from applications.shared_data import files_fingerprint

    path = data_file(args.data_dir)
    fingerprint = files_fingerprint("JSB Chorales", path, [path])
    return {**fingerprint, "files": {"jsb_chorales.json": entry for entry in fingerprint["files"].values()}}


def _tree_data(args):
    """sst, and text_classification's SST sets: the tree files of ``--data-dir``; the
    TFDS sets of text_classification are read from a location."""
    from applications.shared_data import files_fingerprint
    from applications.sst_trees import FINGERPRINT_KIND, SPLITS

    if args.application == "text_classification":
        from applications.text_classification.data import SST_DATASETS

        if getattr(args, "dataset", None) not in SST_DATASETS:
            return None
    if args.data_dir is None or not os.path.isdir(args.data_dir):
        return None
    paths = [os.path.join(args.data_dir, f"{split}.txt") for split in SPLITS]
    paths = [path for path in paths if os.path.isfile(path)]
    return files_fingerprint(FINGERPRINT_KIND, args.data_dir, paths) if paths else None


#: Applications whose ``--data-dir`` chooses the data, not only where it lives, each with
#: the function of the command line's arguments that gives the fingerprint of its data
#: (:func:`data_fingerprint`): demo's default is scikit-learn's 8x8 digits, a folder of
#: MNIST IDX files another dataset; the IDX files of occluded_mnist and textured_mnist,
#: music's chorales file and the SST tree files are the data themselves. A search or a
#: run of theirs resumed on other data ranked trials trained on other data against each
#: other, or trained its last epochs on them: :func:`run_options` records the
#: fingerprint. For the others (and for TFDS's data folder, which occluded_mnist
#: ``--source tfds`` and text_classification's TFDS sets read too) ``--data-dir`` is a
#: location, which a resume may move: the TFDS dataset's name and the version that the
#: installed TFDS builds choose the data.
DATA_DIR_CHOOSES_THE_DATA = {
    "demo": _digits_data,
    "occluded_mnist": _idx_data,
    "textured_mnist": _idx_data,
    "music": _chorales_data,
    "sst": _tree_data,
    "text_classification": _tree_data,
}


def data_fingerprint(args):
    """The fingerprint of the data that ``--data-dir`` chooses for ``args.application``
    (``applications.shared_data.files_fingerprint``: each file's name, size and SHA-256,
    and the folder it was read in, which comparisons leave out: the same data moved to
    another folder is the same data), or None: the application's ``--data-dir`` is a
    location only (:data:`DATA_DIR_CHOOSES_THE_DATA`), or its data cannot be read (the
    run reports that itself when it reads them)."""
    fingerprint = DATA_DIR_CHOOSES_THE_DATA.get(getattr(args, "application", None))
    if fingerprint is None:
        return None
    args = argparse.Namespace(**{"data_dir": None, **vars(args)})  # (arguments made by hand may lack it)
    try:
        return fingerprint(args)
    except OSError:  # (DataNotFoundError too) a missing or unreadable file
        return None


#: Applications whose ``--epochs`` shapes what a run trains, not only how far:
#: sort_of_clevr spreads ``--steps`` over the epochs, sst and smallnorb stretch their
#: one-cycle learning-rate schedule over all of them. A resume with another ``--epochs``
#: trained batches twice or skipped them (sort_of_clevr), or jumped to a point of another
#: schedule (sst, smallnorb): their backups record it, as any option.
EPOCHS_SHAPE_THE_RUN = frozenset({"sort_of_clevr", "smallnorb", "sst"})


def run_options(args):
    """The options of a ``train`` command that its backups record (all but
    :data:`RESUMABLE_CHANGES`, and ``--epochs`` too for :data:`EPOCHS_SHAPE_THE_RUN`):
    rerunning the command after a crash with another value of one of them is refused,
    where it silently resumed the old run (``fault_tolerance.AtomicBackupAndRestore``'s
    ``run_options``). Where ``--data-dir`` chooses the data, they hold its fingerprint
    as ``"data_fingerprint"`` (:func:`data_fingerprint`), not the folder: a resume on
    other data is refused, one on the same data in another folder is not
    (``fault_tolerance.DATA_RECORDS``; ``tune`` records and compares it too).
    ``--precision`` is recorded unless it is float32, which a record without it means."""
    free = RESUMABLE_CHANGES
    if getattr(args, "application", None) in EPOCHS_SHAPE_THE_RUN:
        free = free - {"epochs"}
    options = {name: value for name, value in vars(args).items() if name not in free and not callable(value)}
    if options.get("precision") == "float32":  # (recorded as before the option: fault_tolerance reads none so)
        del options["precision"]
    fingerprint = data_fingerprint(args)
    if fingerprint is not None:
        options["data_fingerprint"] = fingerprint
    return options


def train_options(args, strategy):
    """The keyword arguments of an application's ``train`` that every ``run_train`` passes.

    ``run_dir`` (this process's ``distribute.output_dir``, created), ``epochs``,
    ``batch_size`` (the global batch for ``strategy``), ``seed``, ``verbose``,
    ``strategy`` and ``callbacks`` (``fault_tolerance.resumable_callbacks`` of the run
    directory, so that the same command resumes after a crash, and only the same:
    :func:`run_options`).
    """
    from applications import fault_tolerance

    out = distribute.output_dir(args.run_dir, strategy)
    with user_path(f"cannot create the run directory {out!r}"):
        os.makedirs(out, exist_ok=True)
    # the backup's refusals (a run another process trains, other options, a backup beyond
    # --epochs) before anything is written into the run (fault_tolerance.check_resumable)
    callbacks = fault_tolerance.resumable_callbacks(out, save_freq=args.save_freq, run_options=run_options(args),
                                                    epochs=args.epochs)
    return {
        "run_dir": out,
        "epochs": args.epochs,
        "batch_size": distribute.global_batch_size(args.batch_size, strategy),
        "seed": args.seed,
        "verbose": 0 if args.quiet else 1,
        "strategy": strategy,
        "callbacks": callbacks,
    }


def cache_dir_of(args):
    """``--cache-dir``, else a ``cache`` folder beside the command's outputs.

    ``RUN_DIR/cache`` for ``train``; for ``evaluate``, the cache ``train`` recorded in
    ``metrics.json`` beside the model while that folder exists
    (:func:`applications.checks.recorded_cache_dir`), else the model's folder ``/cache``
    (the cache ``train`` made by default); ``DIRECTORY/cache`` for ``tune``.
    """
    if getattr(args, "cache_dir", None):
        return args.cache_dir
    if args.command == "train":
        return os.path.join(args.run_dir, "cache")
    if args.command == "evaluate":
        from applications.checks import recorded_cache_dir

        return recorded_cache_dir(args.model) or os.path.join(os.path.dirname(os.path.abspath(args.model)), "cache")
    return os.path.join(args.directory, "cache")
