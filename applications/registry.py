"""The application registry: how an application joins the command line.

To add an application ``foo``, write ``applications/foo.py`` (or a package) and add one
entry to ``_REGISTERED`` below: its module, the one line that ``keras-capsules --help``
shows for it and its benchmark (and, for ``tune``, one line to ``tuning.HYPERMODELS``).
Modules are imported only when their command runs: the description and the benchmark
are kept here, not read from the module, because importing an application loads
TensorFlow (seconds, and lines of its start-up on stderr), which ``keras-capsules
--help``, ``--version``, a mistyped command or application name, and ``keras-capsules
bench`` (whose script runs in a process of its own) do without.

The protocol (an application module exposes):

``add_arguments(parser, command)``
    Adds the application's own options to the ``argparse`` sub-parser of ``command``
    (``"train"``, ``"evaluate"`` or ``"tune"``): model sizes, ``--data-dir``, ... The
    command line already adds the common options (see
    ``applications.__main__.add_common_arguments``): ``--run-dir``, ``--epochs``,
    ``--batch-size`` (per replica), ``--seed``, ``--strategy``, ``--tpu``,
    ``--intra-op-threads``, ``--save-freq``, ``--quiet``; ``evaluate`` adds ``--model``;
    ``train`` and ``tune`` add ``--precision``, whose Keras dtype policy the command line
    sets around ``run_train`` (and a HyperModel around each trial's build and fit), so
    ``run_train`` builds its model under it; a frozen feature extractor whose outputs are
    cached builds itself in float32 (``arguments.precision_policy("float32")``).

``run_train(args, strategy) -> dict``
    Trains under ``strategy`` (build and compile the model inside ``strategy.scope()``,
    batch datasets with ``applications.distribute.global_batch_size``), with the
    callbacks of ``applications.fault_tolerance.resumable_callbacks`` so that a
    restarted command resumes, writes its outputs below
    ``applications.distribute.output_dir(args.run_dir, strategy)`` with atomic writes,
    then calls ``applications.fault_tolerance.finish_run`` with those callbacks (the
    backup outlives ``fit`` until the outputs are written, then goes),
    and returns a JSON-serialisable summary (the command line prints it and where the
    outputs went: keys ``model``, ``plot``, ``metrics``, ``logs`` when present).

``run_evaluate(args, strategy) -> dict``
    Evaluates ``args.model`` and returns a JSON-serialisable dict of metrics.

``INTRA_OP_THREADS`` (optional)
    Threads TensorFlow may use inside one op when the user does not pass
    ``--intra-op-threads`` (see ``applications.distribute.set_intra_op_threads``);
    absent or None: TensorFlow's default, all cores.

User mistakes (missing data, bad values, a dataset that needs a download while
offline: see ``applications.tfds_data.require_prepared``) are raised as
``applications.errors.CommandLineError`` (``InputError``, a ``ValueError``, for a bad
argument value or data file; ``PathError``, an ``OSError``, for a path the user named
that is not there or cannot be created, read or written: ``PathNotFoundError`` is a
``FileNotFoundError``, ``PathPermissionError`` a ``PermissionError``, ... and
``errors.user_path`` makes one of the ``OSError`` of an operation on such a path); the
command line prints them as one line and exits with code 2. A plain ``ValueError`` or
``OSError`` (``FileNotFoundError``, ``PermissionError``, ...) is taken for a bug and
shown with its traceback.
"""

import importlib

#: application name -> (module that implements the protocol above, the line that
#: ``keras-capsules --help`` shows for it, its benchmark or None): the benchmark is the
#: stem of a script in ``benchmarks/`` run by ``keras-capsules bench <name>``, optionally
#: followed by the script's arguments that select the application's part (``"rladder
#: jsb"``); the user's own arguments come after them.
_REGISTERED = {
    "demo": ("applications.demo",
             "two-layer EM-routing capsule network on digits (no download needed)",
             "em_routing_mnist"),
    "sort_of_clevr": ("applications.sort_of_clevr",
                      "MAC network on generated Sort-of-CLEVR questions (no download needed)",
                      "sort_of_clevr"),
    "music": ("applications.music",
              "Recurrent Ladder next-step prediction of JSB Chorales (--data-dir: jsb_chorales.json)",
              "rladder jsb"),
    "occluded_mnist": ("applications.occluded_mnist",
                       "Recurrent Ladder on Occluded Moving MNIST (--data-dir: MNIST IDX files, or --source tfds)",
                       "rladder occluded"),
    "smallnorb": ("applications.smallnorb",
                  "EM-routing capsules on smallNORB stereo pairs (TFDS smallnorb in --data-dir)",
                  "mnist_capsules"),
    "sst": ("applications.sst",
            "EM routing over a frozen transformer's hidden states, SST-5/SST-2 (--data-dir: SST trees)",
            "sst_routing"),
    "text_classification": ("applications.text_classification",
                            "CCCapsNet: k-means/dynamic routing text classifier (SST trees or prepared TFDS sets)",
                            "text_classification"),
    "clevr": ("applications.clevr",
              "MAC network on CLEVR (TFDS clevr in --data-dir, ResNet-101 features cached once)",
              None),
    "textured_mnist": ("applications.textured_mnist",
                       "RTagger grouping textured MNIST digits (--data-dir: MNIST IDX files)",
                       "rladder tagger"),
}

#: application name -> module that implements the protocol above.
APPLICATIONS = {name: module for name, (module, _, _) in _REGISTERED.items()}
#: application name -> its line in ``keras-capsules --help``.
DESCRIPTIONS = {name: description for name, (_, description, _) in _REGISTERED.items()}
#: application name -> what ``keras-capsules bench <name>`` runs (see ``_REGISTERED``);
#: an application without one is absent.
BENCHMARKS = {name: benchmark for name, (_, _, benchmark) in _REGISTERED.items() if benchmark}

DEFAULT_APPLICATION = "demo"


def names():
    return tuple(APPLICATIONS)


def load(name):
    """The module of application ``name``."""
    if name not in APPLICATIONS:
        raise KeyError(f"unknown application {name!r}; choose from {', '.join(APPLICATIONS)}")
    return importlib.import_module(APPLICATIONS[name])
