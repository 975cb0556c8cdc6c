"""The ``keras-capsules`` command line (also ``python -m applications``).

    keras-capsules train                       # the default demo, no download needed
    keras-capsules train demo --epochs 5 --run-dir runs/demo
    keras-capsules train demo --strategy mirrored --batch-size 16
    keras-capsules evaluate demo --model runs/demo/model.keras
    keras-capsules tune demo --tuner bayesian --directory runs/tune --max-trials 20
    keras-capsules bench demo                  # from a source checkout: benchmarks/
    keras-capsules train demo --help           # every option of one command, with its default
    keras-capsules --version

The application, when given, comes right after the command (default: ``demo``).
Applications register in ``applications/registry.py`` (the protocol is documented
there), with the line ``--help`` shows for each; their HyperModels in
``tuning/__init__.py``. ``--help``, ``--version`` and a mistyped command or
application name (``keras-capsules frobnicate``, ``keras-capsules train nosuchapp``)
are answered without importing any application, hence without TensorFlow (seconds,
and lines of its start-up on stderr); a command imports its application, whose
options it takes.

``--batch-size`` is per replica everywhere. ``train`` backs up its state in
``<run-dir>/backup``: the same command, run again after a crash, resumes (also after
a crash between the last epoch and the writing of the outputs: it trains nothing
then and writes them); the backup goes once the outputs are written. An
``--epochs`` below the epoch the backup reached is refused (the backup is kept: pass
that many epochs or more); one equal to it trains nothing more and writes the outputs;
a ``train`` of a run that another live process is training is refused
(see ``applications.fault_tolerance``), as is a ``train`` into the folder of another
application's run or of a ``tune`` search, and a ``tune`` into a run's folder: before
anything is written. ``evaluate --model FOLDER`` scores the ``model.keras`` of a run's
folder or the ``best_model.keras`` of a search's. Mistakes a
user can fix (a bad option, missing data, a dataset that needs a download while
offline, no TPU: ``applications.errors.CommandLineError``, of which ``InputError``
is the ``ValueError`` of a bad argument value or data file, and ``PathError`` the
``OSError`` of a path the user named: ``PathNotFoundError`` a ``FileNotFoundError``,
``PathPermissionError`` a ``PermissionError``, ...) print one line
``keras-capsules: error: ...`` and exit with code 2 (set ``KERAS_CAPSULES_DEBUG=1``
for the traceback). Any other exception (a plain ``ValueError``, ``FileNotFoundError``,
``PermissionError`` or other ``OSError`` too) is a bug: it
ends the command with its traceback, except running out of memory (a ``MemoryError``,
TensorFlow's ``ResourceExhaustedError``): one line ``... error: out of memory (...)``
saying to ask for less, exit code 2, no run folder left empty. Ctrl-C prints one line (how to
resume; or, once ``train`` has written its outputs, that the run is complete and
there is nothing to resume) and exits with code 130. The deletion of the backup
after the outputs are written is not cut short by Ctrl-C
(``fault_tolerance.finish_run``).
"""

import argparse
import difflib
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

from applications import arguments, console, errors, registry
from applications.errors import (CommandLineError, NotAFolderError, PathExistsError, PathNotFoundError,
                                 PathPermissionError, report)

PROG = "keras-capsules"
COMMANDS = ("train", "evaluate", "tune", "bench")
# Where benchmarks live in a source checkout (they are not installed).
BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``prog: error: message``) and exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _shown_default(action):
    """The default of an option as its help shows it, or None when there is none to show
    (None, a flag's False, an empty list, a positional argument)."""
    default = action.default
    if (not action.option_strings or default is argparse.SUPPRESS or default is None
            or isinstance(default, bool) or default in ([], ())):
        return None
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
    return shown.replace("%", "%%")  # (argparse formats the help with %)


class _DefaultsHelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: VALUE)`` to the help of an option whose help does not state its
    default (an application's ``--learning-rate`` showed neither a help nor its value);
    an option without a default (see :func:`_shown_default`) gets nothing. An option
    without a help gets ``default: VALUE`` (:func:`_add_missing_helps`)."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = _shown_default(action)
        if shown is None or "default" in text.lower():
            return text
        return f"{text} (default: {shown})"


def _add_missing_helps(parser):
    """Gives an option that has no help one that shows its default (argparse lists an
    option without a help by its name alone, whatever the formatter)."""
    for action in parser._actions:
        shown = _shown_default(action)
        if not action.help and shown is not None:
            action.help = f"default: {shown}"


def _version():
    """The version of the ``keras_capsules`` that runs (that of the checkout in an
    editable install, where the installed metadata may lag behind): the ``__version__``
    assigned in the ``keras_capsules/__init__.py`` that ``import keras_capsules`` runs,
    read without running it (that loads TensorFlow); where that file cannot be read or
    holds no literal version, the installed distribution's, else the imported one."""
    import ast
    import importlib.util
    from importlib import metadata

    try:
        source = pathlib.Path(importlib.util.find_spec("keras_capsules").origin).read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
                return ast.literal_eval(node.value)
    except (AttributeError, TypeError, ImportError, OSError, SyntaxError, ValueError):
        pass
    try:
        return metadata.version("keras-capsules")  # (the distribution of setup.py)
    except metadata.PackageNotFoundError:
        import keras_capsules

        return keras_capsules.__version__


def _hypermodel_names():
    import tuning

    return tuple(name for name in registry.names() if name in tuning.HYPERMODELS)


def _application_list():
    """The applications and their descriptions (``registry.DESCRIPTIONS``: no module is
    imported)."""
    width = max(len(name) for name in registry.names())
    return "\n".join(f"  {name:<{width}}  {registry.DESCRIPTIONS[name]}" for name in registry.names())


def build_parser(application=registry.DEFAULT_APPLICATION):
    """The parser; ``application``'s own options are added to train/evaluate/tune."""
    return _parser(application, registry.load(application))


class _NeedsApplication(Exception):
    """A command was reached: parsing it needs an application's options."""


class _CommandNeedingApplication(_Parser):
    """The parser of a command in :func:`_parser_without_application`: raises
    :class:`_NeedsApplication` when the command line reaches it."""

    def parse_known_args(self, args=None, namespace=None):
        raise _NeedsApplication


def _parser_without_application():
    """The parser of :func:`build_parser` without any application's options (none is
    imported, nor TensorFlow), whose commands raise :class:`_NeedsApplication` when
    reached; their parsers, with the common options, read as :func:`build_parser`'s
    as far as the application's name."""
    return _parser(registry.DEFAULT_APPLICATION, None, command_class=_CommandNeedingApplication)


def _parser(application, module, command_class=_Parser):
    """:func:`build_parser`, with ``module``'s options (none for None); the parsers of
    the commands are ``command_class``."""
    parser = _Parser(
        prog=PROG,
        description="Train, evaluate, tune and benchmark the keras-capsules applications.",
        epilog="applications:\n" + _application_list()
        + "\n\n`keras-capsules COMMAND APPLICATION --help` lists the options of one application.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=command_class)
    helps = {
        "train": "train an application (default: the demo); rerun to resume after a crash "
                 "(with --epochs at least the epoch reached)",
        "evaluate": "evaluate a trained model",
        "tune": "search hyperparameters with keras-tuner; rerun to resume a stopped search",
    }
    for command, help_text in helps.items():
        sub = commands.add_parser(
            command, help=help_text, description=help_text + f". Options of {application!r} shown.",
            formatter_class=_DefaultsHelpFormatter,
        )
        choices = _hypermodel_names() if command == "tune" else registry.names()
        sub.add_argument("application", nargs="?", default=registry.DEFAULT_APPLICATION, choices=choices,
                         help="one of %(choices)s (default: %(default)s)")
        arguments.add_common_arguments(sub, command)
        if module is not None:
            module.add_arguments(sub, command)
        _add_missing_helps(sub)
    bench = commands.add_parser(
        "bench", help="run a benchmark script of benchmarks/ (source checkout only)",
        description="Runs benchmarks/NAME.py (or an application's benchmark) with the "
        "remaining arguments. Benchmarks are not installed: run from a source checkout.",
    )
    # (both optional to argparse: a missing benchmark is refused with the list of them, and a
    # benchmark's own arguments are optional; argparse called both "required")
    bench.add_argument("benchmark", nargs="?", default=None,
                       help="an application (e.g. demo) or a script name in benchmarks/")
    bench.add_argument("benchmark_args", nargs=argparse.REMAINDER,
                       help="arguments of the benchmark (optional; see `keras-capsules bench NAME --help`)")
    return parser


def _defaults(args):
    if getattr(args, "run_dir", "unset") is None:
        args.run_dir = os.path.join("runs", args.application)
    if getattr(args, "model", "unset") is None:
        args.model = os.path.join("runs", args.application, "model.keras")
    if getattr(args, "directory", "unset") is None:
        args.directory = os.path.join("runs", f"tune-{args.application}")
    return args


#: the model file of a folder given as ``evaluate --model``: a ``train`` run's, a ``tune`` search's
_MODEL_FILES = {"train": "model.keras", "tune": "best_model.keras"}


def _model_of_folder(args):
    """``evaluate --model FOLDER``: the model of the run or search in ``FOLDER``.

    A ``train`` run's folder holds ``model.keras``, a ``tune`` search's
    ``best_model.keras`` (a search's folder was read as a run's: "no model at
    'FOLDER/model.keras': train one first"). A folder that holds both is refused (the
    user says which); one that holds neither gives the file of what it holds (a search
    still running: its ``best_model.keras``), else ``model.keras``, whose absence
    ``evaluate`` reports with the command that writes it.
    """
    folder = getattr(args, "model", None)
    if args.command != "evaluate" or not folder or not os.path.isdir(folder):
        return
    from applications import fault_tolerance

    found = [name for name in _MODEL_FILES.values() if os.path.isfile(os.path.join(folder, name))]
    if len(found) > 1:
        raise CommandLineError(
            f"--model {folder} holds a trained model and a search's best model: pass the one to evaluate, "
            + " or ".join(f"--model {os.path.join(folder, name)}" for name in found)
        )
    if not found:
        held = fault_tolerance.folder_contents(folder)
        found = [_MODEL_FILES["tune"] if held["tune"] is not None and held["train"] is None else _MODEL_FILES["train"]]
    args.model = os.path.join(folder, found[0])


def _check_model_owner(args):
    """Refuses ``evaluate APP --model M`` when the record beside ``M`` (the run or search
    that wrote it) names another application: a model holding that application's layers
    failed to load with a long traceback ("Could not locate class ..."), a model of
    library layers only with "is not a ... model"; this says whose model it is."""
    path = getattr(args, "model", None)
    if args.command != "evaluate" or not path or not os.path.isfile(path):
        return
    kind = {name: kind for kind, name in _MODEL_FILES.items()}.get(os.path.basename(path))
    if kind is None:
        return
    from applications import fault_tolerance

    owner = fault_tolerance.folder_contents(os.path.dirname(path) or ".")[kind]
    if owner not in (None, fault_tolerance.UNKNOWN, args.application):
        raise CommandLineError(
            f"--model {path} is a model of {owner} (written by `keras-capsules {kind} {owner}`), "
            f"not of {args.application}: evaluate it with `keras-capsules evaluate {owner} --model {path}`"
        )


def _benchmark_command(name):
    """``(script, default arguments)`` of a benchmark or of an application's benchmark
    (``registry.BENCHMARKS``: read without importing the application, so the parent
    process of ``bench`` loads no TensorFlow; the script's own process does)."""
    if not BENCHMARKS_DIR.is_dir():
        raise CommandLineError(
            "benchmarks are not installed: run `keras-capsules bench` from a source checkout "
            "(python -m applications bench ...)"
        )
    available = sorted(p.stem for p in BENCHMARKS_DIR.glob("*.py") if not p.stem.startswith("_"))
    if name is None:
        raise CommandLineError(
            f"name a benchmark: an application ({', '.join(registry.names())}) or a script of benchmarks/ "
            f"({', '.join(available)}), e.g. `keras-capsules bench demo`"
        )
    arguments = []
    if name in registry.APPLICATIONS:
        # e.g. "rladder jsb": the script's stem, then arguments that select the application's part.
        name, *arguments = registry.BENCHMARKS.get(name, name).split()
    if name not in available:
        raise CommandLineError(f"no benchmark {name!r}; choose from {', '.join(available)}")
    return BENCHMARKS_DIR / f"{name}.py", arguments


# Runs a benchmark script (argv[1]) as __main__: a user error it raises (missing data, a bad
# value: CommandLineError) is one line and exit code 2, as in the other commands.
_BENCH_RUNNER = """
import os, runpy, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except Exception as err:  # applications is imported only now: the script sets up TensorFlow first
    from applications.errors import report_if_not_a_bug
    code = report_if_not_a_bug(err, "keras-capsules")
    if code is None:
        raise
    sys.exit(code)
"""


def _bench(args):
    script, arguments = _benchmark_command(args.benchmark)
    env = dict(os.environ)
    root = str(BENCHMARKS_DIR.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    sys.stdout.flush()
    command = [sys.executable, "-c", _BENCH_RUNNER, str(script), *arguments, *args.benchmark_args]
    return subprocess.call(command, env=env)


# The headline results of the applications' `train` (the rest is in metrics.json): key,
# label, and whether the label names the data scored (the run's "scored_on": "test", or
# "validation" for a run scored on held-out training data, occluded --hold-out)
_HEADLINES = (("test_accuracy", "accuracy", True), ("validation_accuracy", "validation accuracy", False),
              ("non_relational_accuracy", "non-relational accuracy", False),
              ("relational_accuracy", "relational accuracy", False),
              ("test_error", "error", True), ("test_nll_per_step", "NLL per step", True))


def _print_outputs(result, where):
    scored_on = result.get("scored_on", "test")
    parts = [f"{scored_on + ' ' if named else ''}{label} {result[key]:.4f}" for key, label, named in _HEADLINES
             if isinstance(result.get(key), (int, float))]
    if isinstance(result.get("ami"), list) and result["ami"]:  # RTagger: the segmentation of every iteration
        parts.append(f"{scored_on} AMI per iteration " + " / ".join(f"{a:.3f}" for a in result["ami"]))
    steps = result.get("test_error_per_step")
    if isinstance(steps, dict) and isinstance(steps.get("all"), list) and len(steps["all"]) > 1:
        # Occluded Moving MNIST: what the model makes of each further frame
        parts.append(f"{scored_on} error per frame " + " / ".join(f"{e:.4f}" for e in steps["all"]))
    if parts:
        line = ", ".join(parts)
        if "parameters" in result:
            line += f" ({result['parameters']:,} parameters)"
        print(line)
    # every file the run wrote there (the application's own plots too: sample.png, segmentation.png, ...)
    outputs = [os.path.basename(v) for k, v in result.items() if k != "logs" and isinstance(v, str)
               and os.path.isfile(v) and os.path.dirname(os.path.abspath(v)) == os.path.abspath(where)]
    # the per-epoch history every run keeps beside them (not in every application's result)
    if "history.csv" not in outputs and os.path.isfile(os.path.join(where, "history.csv")):
        outputs.append("history.csv")
    text = f"outputs in {os.path.abspath(where)}: " + ", ".join(outputs)
    if result.get("logs"):
        text += f", logs/ (tensorboard --logdir {result['logs']})"
    print(text)


def _run(args):
    if args.command == "bench":
        return _bench(args)
    from applications import distribute

    module = registry.load(args.application)
    threads = args.intra_op_threads
    if threads is None:
        threads = getattr(module, "INTRA_OP_THREADS", None)
    distribute.set_intra_op_threads(threads)  # before TensorFlow's first op
    # First TensorFlow work of the process: MultiWorkerMirroredStrategy needs that.
    strategy = distribute.make_strategy(args.strategy, tpu=args.tpu)
    from applications import fault_tolerance

    if args.command == "train":
        # before anything is written (another application's run, a search: replaced or mixed)
        out = distribute.output_dir(args.run_dir, strategy)
        fault_tolerance.check_train_folder(out, args.application)
        # the model is built, trained and saved under --precision's dtype policy; the
        # policy set before comes back after, on an error too
        with fault_tolerance.recorded_run(out, args.application), arguments.precision_policy(args.precision):
            result = module.run_train(args, strategy)
        try:
            _print_outputs(result, distribute.output_dir(args.run_dir, strategy))
        except KeyboardInterrupt as interrupt:  # the run is complete: not "rerun to resume"
            from applications.fault_tolerance import RunCompleteInterrupt

            raise RunCompleteInterrupt(*interrupt.args) from interrupt
    elif args.command == "evaluate":
        _print_evaluation(module.run_evaluate(args, strategy))
    else:
        from tuning import search

        # a train run (also one still training: no metrics.json yet) whose metrics.json it replaced
        fault_tolerance.check_search_folder(distribute.output_dir(args.directory, strategy), args.application)
        # (every trial's model is built and trained under --precision's policy: the
        # HyperModel sets it, keras-tuner's clear_session before each build resets it)
        result = search.run_search(args, strategy)
        # (four significant digits: the full score is in best_hyperparameters.json and
        # metrics.json; it was printed as 0.2291666716337204)
        print(f"{result['new_trials']} new trial(s), {result['trials']} in total; "
              f"best {result['objective']} {result['best_score']:.4g}")
        print(_best_files(result, args.application))
    return 0


def _non_finite(data, path=()):
    """The keys (``a.b[2]``) of the NaN or infinite numbers in ``data`` (nested dicts and lists)."""
    import math

    if hasattr(data, "tolist") and not isinstance(data, (bool, int, float, str)):  # NumPy arrays and scalars
        data = data.tolist()
    if isinstance(data, dict):
        return [key for name, value in data.items() for key in _non_finite(value, (*path, str(name)))]
    if isinstance(data, (list, tuple)):
        return [key for i, value in enumerate(data) for key in _non_finite(value, (*path[:-1], f"{path[-1]}[{i}]")
                                                                              if path else (f"[{i}]",))]
    try:
        finite = math.isfinite(data) if not isinstance(data, (bool, str)) and data is not None else True
    except TypeError:
        finite = True
    return [] if finite else [".".join(path)]


def _print_evaluation(result):
    """Prints ``evaluate``'s result as standard JSON (a NaN or infinite score as ``null``,
    as in ``metrics.json``), and a note on stderr naming the scores that are not finite.

    helper-196 (CLI fuzzing): a model whose weights are NaN (a damaged file) printed
    ``"test_loss": NaN`` (demo) or ``"test_nll_per_step": NaN`` (music), which is not
    JSON (``jq`` refuses it), as a success that said nothing of it."""
    from applications.fault_tolerance import finite_or_none

    bad = _non_finite(result)
    print(json.dumps(finite_or_none(result), indent=2, allow_nan=False))
    if bad:
        print(f"note: {', '.join(bad)} not finite (NaN or infinite, printed as null): the model's outputs are not "
              "finite (are its weights? a diverged or damaged model)", file=sys.stderr)


def _best_files(result, application):
    """The line naming the files a search wrote: its best model, hyperparameters and
    ``metrics.json`` (where ``evaluate`` of the model takes its data options from), and
    those its HyperModel writes beside them (text_classification's vocabulary). A
    non-chief worker writes the hyperparameters only (the others are None)."""
    import tuning

    labels = {"model": "best model", "hyperparameters": "hyperparameters", "metrics": "metrics",
              **{key: key for key in getattr(tuning.HYPERMODELS[application], "beside_best", {})}}
    return ", ".join(f"{label} {result[key]}" for key, label in labels.items() if result.get(key))


def _answer_without_application(argv):
    """Answers, as :func:`main` does with the default application's parser, the
    command lines that need no application, importing none (nor TensorFlow, which takes
    seconds and writes lines of its start-up on stderr); returns for the others.

    Answered (by exiting): ``--help``, ``--version`` and the usage errors of the top
    level (no command, an unknown one), which never reach a command's parser; and a
    command followed at once by a name that is no application (``train nosuchapp``),
    when every option after it is ``-h``, ``--help`` or a common option in full (an
    application's option, an unknown or abbreviated one, or ``--``, could be refused
    before the name: those take the usual way), as :func:`main`'s first parse refuses it.
    """
    parser = _parser_without_application()
    try:
        parser.parse_known_args(argv)  # exits, unless a command is reached
    except _NeedsApplication:
        pass
    if len(argv) < 2 or argv[0] not in ("train", "evaluate", "tune"):
        return
    sub = _command_parser(parser, argv[0])
    name, rest = argv[1], [a for a in argv[2:] if a not in ("-h", "--help")]
    if (name.startswith("-") or name in registry.APPLICATIONS
            or any(a.startswith("-") and a.split("=", 1)[0] not in sub._option_string_actions for a in rest)):
        return
    _Parser.parse_known_args(sub, [name, *rest])  # exits: "argument application: invalid choice"


def main(argv=None):
    """Runs the command line; returns the exit code (2 for a user error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _answer_without_application(argv)
    application = _application_of(argv)
    # `bench` runs its script in a process of its own and takes no application's options:
    # its parser needs no application module (importing one loads TensorFlow, seconds)
    if argv[:1] != ["bench"]:
        # the application's module loads TensorFlow: without the lines of its start-up that
        # ask nothing of the user (no CUDA driver, CPU instructions; console.STARTUP_NOISE)
        console.load_tensorflow_quietly()
    parser = _parser(application, None) if argv[:1] == ["bench"] else build_parser(application)
    _refuse_options_of_no_application(parser, argv)
    if argv[:1] in (["train"], ["evaluate"], ["tune"]) and argv[1:2] != [application]:
        # The application may follow common options (`train --quiet sst ...`): learn it
        # first, then parse with that application's options (else they were missing).
        # (without the options it does not know, and their values: argparse took the
        # value of `train --image-size 24 smallnorb` for the application)
        probe = [argv[0], *_without_unknown_options(_command_parser(parser, argv[0]), argv[1:])]
        known, _ = parser.parse_known_args([a for a in probe if a not in ("-h", "--help")])
        if known.application != application:
            parser = build_parser(known.application)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unknown_arguments(parser, args.command, unknown)
    args = _defaults(args)
    # the folder that the command creates for its outputs, if it is not there yet
    output = {"train": getattr(args, "run_dir", None), "tune": getattr(args, "directory", None)}.get(args.command)
    new_output = errors.first_missing(output) if output else None
    try:
        _check_output_folders(args)
        _model_of_folder(args)
        _check_model_owner(args)
        return _run(args)
    except _USER_ERRORS as err:
        if new_output:
            errors.remove_empty_dirs(new_output)
        return report(_with_option_names(_with_the_command_that_makes_the_model(err, args), parser, args), PROG)
    except Exception as err:
        if not errors.out_of_memory(err):
            raise
        if new_output:
            errors.remove_empty_dirs(new_output)
        return errors.report_out_of_memory(err, PROG)
    except KeyboardInterrupt as interrupt:  # Ctrl-C: one line that says how to go on, no traceback
        if new_output:  # (a Ctrl-C while the data were prepared left the new folder empty)
            errors.remove_empty_dirs(new_output)
        if os.environ.get("KERAS_CAPSULES_DEBUG"):
            raise
        hint = {
            "train": "; run the same command again to resume from the last backup",
            "tune": "; run the same command again to resume the search",
        }.get(args.command, "")
        if new_output and not os.path.lexists(new_output):
            # nothing was written, so nothing to resume (the hint said "resume the search")
            hint = "; nothing was written yet"
        # (not imported here: that loads Keras, slow after a Ctrl-C of `bench`; unloaded, it raised nothing)
        fault_tolerance = sys.modules.get("applications.fault_tolerance")
        if fault_tolerance and isinstance(interrupt, fault_tolerance.RunCompleteInterrupt):
            # a rerun would start a new run
            hint = " once the outputs were written: the run is complete, nothing to resume"
        print(f"\n{PROG}: interrupted{hint}", file=sys.stderr)
        return 130


# User errors: one line, exit code 2. CommandLineError covers the checks of the user's
# input: InputError, a ValueError, for a bad argument value or data file; PathError, an
# OSError, for a path the user named that is not there (PathNotFoundError, a
# FileNotFoundError: data, model file, vocabulary) or cannot be created, read or written
# (PathExistsError, NotAFolderError, IsAFolderError, PathPermissionError: the matching
# OSErrors), raised where the code checks, creates, reads or writes that path
# (errors.user_path). Any other exception, a plain ValueError, FileNotFoundError,
# PermissionError, FileExistsError, NotADirectoryError or IsADirectoryError too, is a bug:
# it ends the command with its traceback (every ValueError, every FileNotFoundError, then
# every one of the four others, was one line, which hid the traceback of internal errors).
_USER_ERRORS = (CommandLineError,)
# The options that name a folder the command creates and writes into.
_OUTPUT_FOLDERS = (("run_dir", "--run-dir"), ("directory", "--directory"), ("cache_dir", "--cache-dir"))


# Of those, the ones every run of the command writes into (a --cache-dir that holds a
# complete cache is only read: it may be read-only).
_WRITTEN_FOLDERS = {"train": "run_dir", "tune": "directory"}


def _check_output_folders(args):
    """Refuses an output folder option that names a file or a path through a file, and
    the run or search folder of a ``train`` or ``tune`` that this user may not write.

    Checked before any work: a ``--run-dir`` naming a file trained a whole epoch and
    then failed with a traceback (a ``tune --directory`` with TensorFlow's
    FailedPreconditionError). The errors are the ``OSError`` that creating the folder
    would raise (``PathExistsError``, ``NotAFolderError``, ``PathPermissionError``),
    one line on the command line. Where the folder is then created, a failure this
    check cannot foresee (root squashed on a network file system, ...) is one line too
    (``errors.user_path``).
    """
    for attr, option in _OUTPUT_FOLDERS:
        path = getattr(args, attr, None)
        if not path:
            continue
        existing = os.path.abspath(path)
        while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if os.path.exists(existing) and not os.path.isdir(existing):
            if existing == os.path.abspath(path):
                raise PathExistsError(f"{option} {path!r} is a file; it must name a folder (new or existing)")
            raise NotAFolderError(
                f"{option} {path!r} cannot be created: {existing!r} is a file, not a folder"
            )
        # (os.access: root passes, unless the file system is read-only)
        writes = _WRITTEN_FOLDERS.get(args.command) == attr and os.path.isdir(existing)
        if writes and not os.access(existing, os.W_OK | os.X_OK):
            where = "" if existing == os.path.abspath(path) else f" (in {existing!r})"
            raise PathPermissionError(f"{option} {path!r}: no permission to write{where}")


def _with_the_command_that_makes_the_model(err, args):
    """``err``, or, when it is an application's "no model at MODEL: train one first with
    `keras-capsules train`" of an ``evaluate``, the same error naming the command that
    writes that model: that command trains the demo, whatever the application
    (``evaluate music`` before ``train music``)."""
    prefix = f"no model at {getattr(args, 'model', None)!r}"
    if (args.command != "evaluate" or not isinstance(err, PathNotFoundError)
            or not str(err).startswith(prefix) or os.path.exists(args.model)):
        return err
    folder, name = os.path.split(os.path.normpath(args.model))
    app = args.application
    if name == "best_model.keras":  # what `tune` writes
        command = f"keras-capsules tune {app}"
        if os.path.normpath(folder) != os.path.join("runs", f"tune-{app}"):
            command += f" --directory {shlex.quote(folder or '.')}"
        hint = f"search one first with `{command}`"
    elif name == "model.keras":
        command = f"keras-capsules train {app}"
        if os.path.normpath(folder) != os.path.join("runs", app):
            command += f" --run-dir {shlex.quote(folder or '.')}"
        hint = f"train one first with `{command}`"
    else:
        hint = f"train one first with `keras-capsules train {app} --run-dir DIR` (it writes DIR/model.keras)"
    better = PathNotFoundError(f"{prefix}: {hint}")
    better.__cause__ = err
    return better


def _with_option_names(err, parser, args):
    """``err``, or the same error naming the command's options as they are typed where its
    message named their Python parameters: ``train occluded_mnist --frame-size 10`` said
    "`frame_size` must be at least ... Received: frame_size=10"; it says "`--frame-size`
    must be at least ... Received: --frame-size 10". (The checks that raise are the
    Python API's, shared by both.)"""

    try:
        sub = _command_parser(parser, args.command)
    except (StopIteration, KeyError):
        return err
    message = str(err)
    named = message
    for action in sub._actions:
        option = next((o for o in action.option_strings if o.startswith("--")), None)
        if option is None or action.dest in ("help", argparse.SUPPRESS):
            continue
        named = named.replace(f"`{action.dest}`", f"`{option}`")
        if isinstance(action, argparse._StoreTrueAction):  # "`phrases=True`" is "`--phrases`"
            named = named.replace(f"`{action.dest}=True`", f"`{option}`")
        named = re.sub(rf"(?<![\w`.\-]){re.escape(action.dest)}=", f"{option} ", named)
    if named == message:
        return err
    try:
        better = type(err)(named)
    except Exception:  # an error class with other constructor arguments
        better = CommandLineError(named)
    better.__cause__ = err
    return better


def _accepts(parser, option):
    """Whether ``parser`` takes the long option ``option`` (``--name`` or ``--name=value``),
    in full or by a prefix (argparse takes ``--epoch`` for ``--epochs``)."""
    name = option.split("=", 1)[0]
    return any(known == name or (parser.allow_abbrev and known.startswith(name))
               for known in parser._option_string_actions)


def _command_parser(parser, command):
    """The sub-parser of ``command`` in the parser of :func:`build_parser`."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def _unknown_options(sub, rest):
    """The long options of the arguments ``rest`` (those after the command, up to
    ``--``) that the command's parser ``sub`` does not take, each with the value that
    follows it (what argparse lists as unrecognized, and took for the application),
    unless the option holds it (``--x=1``) or that is an option or an application:
    ``[[option], [option, value], ...]``."""
    rest = rest[:rest.index("--")] if "--" in rest else rest
    found = []
    for i, arg in enumerate(rest):
        if arg.startswith("--") and len(arg) > 2 and not _accepts(sub, arg):
            following = rest[i + 1:i + 2]
            takes_following = ("=" not in arg and following and not following[0].startswith("-")
                               and following[0] not in registry.APPLICATIONS)
            found.append([arg, *following] if takes_following else [arg])
    return found


def _without_unknown_options(sub, rest):
    """``rest`` without what :func:`_unknown_options` finds in it."""
    kept, i = list(rest), 0
    for group in _unknown_options(sub, rest):
        i = kept.index(group[0], i)
        del kept[i:i + len(group)]
    return kept


def _refuse_options_of_no_application(parser, argv):
    """Exits with one line naming a long option that the command does not have, as
    :func:`_unknown_arguments` does, when argparse would not name it.

    Checked before parsing: when the application is not named first, argparse took
    the value after such an option for the application (``train --epochz 1``: "argument
    application: invalid choice: '1'"; ``evaluate --modle runs/demo``: "invalid choice:
    'runs/demo'") and never named the option. Refused here: an option that no
    application's command has, and, when no application is named (the default one
    runs), an option of another application (the line says which has it). An option of
    an application named after it is left to the parse with that application's options.
    """
    command = argv[0] if argv else None
    if command not in ("train", "evaluate", "tune"):
        return
    unknown = _unknown_options(_command_parser(parser, command), argv[1:])
    if not unknown:
        return
    owners = {group[0]: [] for group in unknown}
    for name in registry.names():  # (only now: a parser for each application)
        other = _command_parser(build_parser(name), command)
        for option, found in owners.items():
            if _accepts(other, option):
                found.append(name)
    named = any(arg in registry.APPLICATIONS for arg in argv[1:])
    unknown = [group for group in unknown if not (named and owners[group[0]])]
    if not unknown:
        return
    hint = next((f"; {group[0].split('=', 1)[0]} is an option of {', '.join(owners[group[0]])}: name the "
                 f"application (keras-capsules {command} {owners[group[0]][0]} ...)"
                 for group in unknown if owners[group[0]]), "")
    _unknown_arguments(parser, command, [arg for group in unknown for arg in group], hint)


def _unknown_arguments(parser, command, unknown, hint=""):
    """Exits with one line naming the command, a close option if any, and its help.

    (``parse_args`` reported them from the top-level parser, pointing to
    ``keras-capsules --help``, which lists no option of any command.)
    """
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    message = f"unrecognized arguments: {' '.join(unknown)}"
    options = [o for o in sub._option_string_actions if o.startswith("--")]
    for arg in unknown:
        if arg.startswith("-"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.75)
            if close:
                message += f"; did you mean {close[0]}?"
                break
    sub.error(message + hint)


def _application_of(argv):
    """The application named right after the command, else the default one."""
    if len(argv) > 1 and argv[0] in ("train", "evaluate", "tune") and argv[1] in registry.APPLICATIONS:
        return argv[1]
    return registry.DEFAULT_APPLICATION


if __name__ == "__main__":
    sys.exit(main())
