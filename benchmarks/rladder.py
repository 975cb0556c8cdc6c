"""Learning benchmarks of the Recurrent Ladder applications (Ilin et al. 2017).

Subcommands (each sized to finish within about 20 minutes on a 2-core CPU; a wall
time budget stops training early if the machine is slower):

    python benchmarks/rladder.py occluded [--data-dir ../shared/data/mnist]
        Occluded Moving MNIST classification error of RLadder, the temporal baseline
        (conv net + GRU) and RLadder without decoder-to-encoder connections, trained
        for the same budget each (paper: 0.74%, 2.02%, 1.60%). By default the
        ladder's convolutional levels are feed-forward and instance-normalized
        (the temporal baseline's convolutions too), its feedback kernels start at
        zero, every variant's step is compiled with XLA, each variant's learning
        rate (chosen on validation, twenty-eighth round: RLadder 4e-3, temporal
        baseline 1e-3, no_feedback 2e-3; ``--learning-rate`` sets one for all)
        decays linearly to 5% over the budget, and the three variants train side by side
        (one single-threaded process each, sharing the machine's cores, each for
        the whole budget; ``--no-parallel``: one after another, each for a third).
        ``--augment fresh|affine`` trains every variant on new sequences each
        epoch (``affine``: each digit randomly rotated, scaled, sheared and
        shifted; off by default, fifth round of the occluded measurements). ``--unflatten
        dense`` gives the ladders' gated top a kernel to every pixel of the
        convolutional decoder below it instead of one projection broadcast over
        all pixels (off by default, eighth round of the occluded measurements).
        Below the variants' errors, each one's test error after every frame
        (``applications.occluded_mnist.error_per_step``): over all test sequences,
        those moving sideways and those moving only vertically. ``--hold-out``
        scores validation sequences of a held-out fifth of the training digits
        instead (the variants train on the other four fifths; no test digit is
        used), for choices between settings (seventeenth round).
        ``--ablate-feedback`` scores the trained full ladder again with its
        decoder-to-encoder feedback kernels set to zero, all at once and one level
        at a time: how much the trained ladder relies on its feedback (nineteenth
        round). The sequences are the paper's data by default (a grid of bars 4 px
        wide, 12 px apart, and the velocities (+-1, +-2), (+-2, +-1) px per frame, as
        the run's "data:" line says); ``--motion compass --bars vertical
        --bar-spacing 8`` draws those of rounds 1-26 (the figures below).
    python benchmarks/rladder.py fusion [--data-dir ../shared/data/mnist]
        A bound for ``occluded``: the test error of a static CNN given what an oracle
        of temporal integration could see of each digit
        (``applications.occluded_mnist.seen_digits``: its pixels shown by any of the
        frames, positions known), after the first frame and after all five, and of
        the digits without bars; the ``occluded`` benchmark's sequences (the same
        ``--seed``, ``--num-train``, ``--num-test``, ``--frame-size``, ``--motion``,
        ``--bars``, ``--bar-spacing``), each classifier a third of the budget (15
        minutes). Thirteenth round of the occluded measurements.
    python benchmarks/rladder.py jsb [--data-path ../shared/data/jsb_chorales]
        JSB Chorales test NLL per time step (target below 8.0; paper: RNN 8.76,
        RLadder 5.64). By default one RLadder (gated encoders, dropout between
        levels 0.3, output bias at the keys' log-odds, 150 epochs within 17
        minutes) with the NADE read-out (``--readout nade``: every key's sigmoid
        is also given the lower keys of its step). ``--readout independent
        --encoder gated lstm --ensemble 5 --epochs 45`` gives the second round's
        factorized model back (one Bernoulli per key given the past: five
        RLadders, their per-key probabilities averaged).
    python benchmarks/rladder.py tagger [--data-dir ../shared/data/mnist]
        RTagger on Textured MNIST: segmentation AMI and classification error after
        every iteration (defaults: smooth textures from a fixed bank of 8
        gratings, posterior masks, smooth initial masks, sigma 0.1, input
        noise 0.4, 5 iterations; fourth round of the tagger measurements). The model is
        kept at the epoch with the best last-iteration AMI on 200 validation
        images of held-out training digits (``--num-valid``; 0: the last
        epoch; twelfth round of the tagger measurements); the test images choose nothing.
        Each group's ladder input carries its one-hot group code, so that the
        groups can take different roles (``--no-group-codes``: exchangeable groups,
        as in Tagger; fourteenth round). Adam's learning rate is 2e-3
        (``--learning-rate``; 1e-3 until the fifteenth round, chosen on the validation
        images of six seeds). ``--conv-encoder conv`` makes the ladder's bottom level
        feed-forward instead of ConvLSTM; ``--mask-damping d`` keeps a share ``d`` of
        the previous iteration's masks in the new ones (off by default: sixteenth
        round), ``--mask-damping learned`` a share per pixel that the cost learns
        (starting at 0.1; seventeenth round).

    python benchmarks/rladder.py loop [--steps 32 160]
        RLadder's two loops over the steps on JSB-sized ladders (gated 128/64, 88
        keys, batch 32): the time of the first training step (tracing and, with
        XLA, compiling) and of later ones, unrolled (``unroll=True``) and symbolic
        (``unroll=False``; the default for sequences of unknown length).

Each prints its figures, the wall time and the machine load. The measurements (every
run, probe and diagnosis, by subcommand and round) are in
``benchmarks/rladder_measurements.md``.

Where the targets of the Recurrent Ladder issue stand on a 2-core CPU (figures of
the default commands):

* ``jsb``: test NLL per step 6.23 with the NADE read-out on 8cf177e (1012 s, one core;
  fourth round), 6.38-6.40 on earlier code (6.397 in 806 s and 6.392 in 898 s; 6.381 on
  a machine half as fast, where the budget stopped it at epoch 96 of 150), below the
  target of 8.0: MET. The paper's independent per-key read-out: 8.21 at best (an
  ensemble of five RLadders), not met.
* ``occluded``: on the paper's data (the default since the twenty-seventh round) at each
  variant's own learning rate (twenty-eighth round), test error of the RLadder 13.25%,
  temporal baseline 29.55%, RLadder without feedback 14.20% (seed 0; seed 1: 11.50%,
  23.05%, 14.00%; seed 2: 14.35%, 26.05%, 14.85%): the RLadder lowest in every seed, but
  1.32 points below no_feedback on average, NOT MET (clearly below: at least 2 points
  and a fifth). Seeds 3-5 (thirty-ninth round, a slower machine: 4 / 7 / 5 epochs):
  14.35% / 44.10% / 14.50%, 15.70% / 47.95% / 17.55%, 15.65% / 33.15% / 16.90%; over
  seeds 0-5 the RLadder is 1.20 points below no_feedback on average. ``--augment fresh``
  widens its lead per update (0.76 / 0.78 times no_feedback's validation error after 5,000
  updates, seeds 0 / 1; forty-first and forty-third rounds), but in 17 minutes on a slower
  machine (4 / 6 / 5 epochs) it gave 19.20% / 33.95% / 17.00% at seed 0, against 17.85% /
  36.55% / 18.05% without (forty-second and forty-third rounds): off by default. Each
  variant's line gives its epochs and its optimizer updates (a budget may stop the last epoch
  part-way). At a common 1e-3:
  18.92%, 28.25%, 20.38% on average over three seeds.
  On the data of rounds 1-26 (``--motion compass --bars vertical --bar-spacing 8``,
  1e-3 for all): test error of the RLadder 9.00%, temporal baseline 9.20%, RLadder
  without feedback 8.20% (the three side by side, 17 minutes each, seed 0, with the
  gated feed-forward levels, ``--conv-encoder gatedconv``, the default since the
  sixteenth round; 10.60%, 9.50%, 9.30% on 8cf177e on a slower day, one epoch fewer
  each, twenty-third round; 8.85%, 9.00%, 9.00% on 99b7bc6, whose ladder update is ~7%
  faster, 6 / 8 / 7 epochs, twenty-fifth round: lowest by 0.15 points, within a second
  seed's spread): NOT MET (the RLadder must be clearly below both). The gated
  levels made both ladders better (the ReLU levels the same day: 11.50%, 8.90%, 12.50%)
  and the ladder without feedback the first ladder of these rounds below the temporal
  baseline, but the feedback adds nothing measurable. With ``--seed 1``: 9.50%, 9.20%,
  8.95% (seventeenth round; on validation digits, ``--hold-out``, with and without
  ``--augment affine`` the RLadder is not ahead either; on MNIST's 60,000 training
  digits, twenty-first round: 10.55%, 10.50%, 10.20%; after 60 minutes with ``--augment
  fresh``, twenty-second round: 5.70%, 5.35%, 5.35%). On validation, per update, the
  gated ladder is level with the temporal baseline (8.60% against 8.70% after 7,500
  updates), and an update costs 1.65 times as much (95 against 57 ms on one core).
  Earlier defaults (ReLU levels, before tf.data's autotuner was turned off): 9.90%,
  7.70%, 11.10%; with ``--seed 1``, on a machine half as fast: 12.40%, 9.95%, 11.15%.
  ``fusion`` (thirteenth round): a static CNN given what an oracle of temporal
  integration sees of each digit errs on 4.15% of the same test sequences (2.90% in a
  longer probe), after one frame 8.35%, without bars 2.00%: the models (8-14%, 23-36%
  after the first frame) are 2-3 times the oracle's error, far from convergence.
* ``tagger`` (group codes, learning rate 2e-3: the defaults since the fourteenth and
  fifteenth rounds): test AMI over the 5 iterations 0.009 / 0.192 / 0.278 / 0.279 /
  0.307 with the default seed (two runs, the same figures): MET; 0.006 / 0.216 / 0.299 /
  0.305 / 0.344 after RTagger's symbolic-loop change (nineteenth round); 0.007 / 0.174 /
  0.254 / 0.256 / 0.280 on 8cf177e, after fe8ede2's rounding change (twenty-fourth
  round). Every one of seeds 0-10 meets the rule at its latest run (seeds 1 and 7, which
  dipped once before fe8ede2, re-run after it; twentieth to twenty-fourth rounds), three
  of them (0, 5, 6) above the image-blind mask (0.213-0.221). Before the symbolic loop,
  over seeds 0-10 the rule was met for ten (all but 4, which finds no grouping; seeds 1,
  2, 7 and 10 only weakly, last-iteration AMI 0.022-0.047; mean 0.122). Over seeds 0-8
  the older code of the fifteenth round, which differs only in how often a softmax is
  computed, met it for seven (all but 0 and 7, which dip at the fourth iteration; mean
  0.141): which seeds meet it moved (presumably with rounding), how many hardly did. On
  that older code: with 1e-3 met for four of seeds 0-5 (mean 0.131); without group
  codes: two of six, AMI at most 0.070. Damped masks (``--mask-damping``) remove the dip
  on seeds 0 and 7 but slow the learning: with 0.5 the last-iteration AMI of seeds 0, 3,
  4, 7 falls to 0.071 / 0.008 / 0.124 / 0.086 (seed 3 then misses); with 0.2 (a probe)
  0, 3 and 7 are met at 0.231 / 0.127 / 0.069 but seed 4 collapses (0.010), and the
  period-2 pattern shows on other epochs (sixteenth round). A learned share
  (``--mask-damping learned``) meets seed 0 (0.199) but none of 7, 3 and 4 learns to
  segment (last-iteration AMI 0.019 / 0.034 / 0.024; seventeenth round).
* ``loop``: the symbolic loop traces in a constant ~2 s where the unrolled one takes
  time proportional to the number of steps, and runs as fast per step.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from applications import console  # noqa: E402  (sets the oneDNN default; loads no TensorFlow)
# TensorFlow loads after the arguments (_load_tensorflow): --help and a bad value answer at once
from applications.arguments import fraction, int_at_least, mask_damping, non_negative_float, non_negative_int, positive_float, positive_int, rate, seed_int  # noqa: E402
from applications import jsb_chorales  # noqa: E402  (NumPy only)
from applications.mnist_digits import default_data_dir  # noqa: E402  (NumPy only)

# keras_capsules.layers.rladder.level_spec's, copied: it loads TensorFlow
# (tests/test_benchmarks.py checks the copies)
CONV_ENCODERS = ("convlstm", "conv", "gatedconv")
UNFLATTENS = ("broadcast", "dense")
# Adam's learning rate of each variant in ``occluded`` (``--learning-rate`` sets one for all):
# the lowest validation error after 5,000 updates at a constant rate on the paper's data
# (held-out training digits; twenty-eighth round): rladder 4e-3 of 1e-3 / 2e-3 / 4e-3 / 8e-3,
# temporal 1e-3 of 5e-4 / 1e-3 / 2e-3 (diverged), no_feedback 2e-3 of 1e-3 / 2e-3 / 4e-3.
# 1e-3 for every variant before that round; the hierarchical ladder was not probed.
OCCLUDED_LEARNING_RATES = {"rladder": 4e-3, "temporal": 1e-3, "no_feedback": 2e-3}
DEFAULT_LEARNING_RATE = 1e-3
# applications.occluded_mnist's sequence constants, copied (it loads TensorFlow;
# tests/applications/test_occluded_mnist_data_options.py checks the copies)
MOTIONS = ("paper", "compass")
BAR_LAYOUTS = ("grid", "vertical")
BAR_WIDTH = 4
SEQUENCE_OPTIONS = {"motion": "paper", "bars": "grid", "bar_spacing": 12}  # the paper's
OLD_SEQUENCE_OPTIONS = {"motion": "compass", "bars": "vertical", "bar_spacing": 8}  # rounds 1-26


def _load_tensorflow():
    """Loads TensorFlow without its start-up lines that ask nothing (no CUDA driver, ...):
    in main, and in each process of ``occluded --parallel`` (which imports this script
    without running main)."""
    console.load_tensorflow_quietly()
    import keras_capsules  # noqa: F401  (first: its TensorFlow runtime defaults)


def _load():
    load = os.getloadavg()
    return f"load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"


def occluded_learning_rate(args, variant):
    """Adam's learning rate for ``variant``: ``--learning-rate`` if given, else the
    variant's own (:data:`OCCLUDED_LEARNING_RATES`)."""
    if args.learning_rate is not None:
        return args.learning_rate
    return OCCLUDED_LEARNING_RATES.get(variant, DEFAULT_LEARNING_RATE)


def _occluded_variant(args, variant, budget_seconds):
    """Trains and tests one variant (in this process); returns its figures."""
    import resource

    _load_tensorflow()
    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
    from applications import occluded_mnist as om
    from keras_capsules.callbacks import BudgetLinearDecay, TimeBudget

    budget = TimeBudget(budget_seconds)
    callbacks = [budget]
    if args.final_lr_fraction < 1:  # the learning rate decays linearly over the budget or the epochs
        updates = args.epochs * om.training_batches(args.num_train, args.batch_size)  # (one replica)
        callbacks.append(BudgetLinearDecay(budget, args.final_lr_fraction, decay_steps=updates))
    learning_rate = occluded_learning_rate(args, variant)
    start = time.perf_counter()
    cpu_start = resource.getrusage(resource.RUSAGE_SELF)
    ablation = None
    with tempfile.TemporaryDirectory() as run_dir:
        result = om.train(
            variant=variant,
            source="idx",
            data_dir=args.data_dir,
            run_dir=run_dir,
            num_train=args.num_train,
            num_test=args.num_test,
            epochs=args.epochs,
            batch_size=args.batch_size,
            conv_units=tuple(args.conv_units),
            dense_units=args.dense_units,
            learning_rate=learning_rate,
            frame_size=args.frame_size,
            classify=args.classify,
            normalization=None if args.normalization == "none" else args.normalization,
            conv_encoder=args.conv_encoder,
            conv_normalization=None if args.conv_normalization == "none" else args.conv_normalization,
            jit_compile=args.jit_compile,
            frame_weight=args.frame_weight,
            feedback_initializer=None if args.feedback_initializer == "default" else args.feedback_initializer,
            augment=None if args.augment == "none" else args.augment,
            affine=om.affine_options(args),
            unflatten=args.unflatten,
            hold_out=args.hold_out,
            seed=args.seed,
            verbose=args.verbose,
            callbacks=callbacks,
            **_sequence_options(args),
        )
        if args.ablate_feedback and variant == "rladder":
            # the sequences train scored (make_sequences draws them as train does)
            _, scored = om.make_sequences("idx", args.data_dir, 1, args.num_test, args.seed, args.frame_size,
                                          hold_out=args.hold_out, **_sequence_options(args))
            import keras

            ablation = feedback_ablation(keras.saving.load_model(result["model"]), scored)
    cpu_end = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "variant": variant,
        "learning_rate": learning_rate,
        "test_error": result["test_error"],
        "error_per_step": result["test_error_per_step"],
        "paper_error": om.PAPER_ERROR.get(variant, float("nan")),
        "parameters": result["parameters"],
        "epochs_run": result["epochs_run"],
        "updates": result["updates"],
        "wall": time.perf_counter() - start,
        "cpu": (cpu_end.ru_utime + cpu_end.ru_stime) - (cpu_start.ru_utime + cpu_start.ru_stime),
        "budget_hit": budget.exceeded,
        "feedback_ablation": ablation,
    }


def feedback_ablation(model, data, batch_size=64):
    """How much a trained full ladder of ``applications.occluded_mnist`` relies on its
    decoder-to-encoder feedback: its error after every frame on ``data`` (``generate``'s
    dict) as trained (``"trained"``), with every encoder level's feedback kernel set to
    zero (``"all zeroed"``), and with one level's at a time (the level's name). The
    kernels are restored afterwards. Each value is ``error_per_step``'s list over all
    sequences."""
    import keras
    import numpy as np

    from applications import occluded_mnist as om

    cells = [cell for cell in model.get_layer("rladder").encoders if getattr(cell, "feedback_kernel", None) is not None]
    if not cells:
        raise ValueError(f"model {model.name!r} has no decoder-to-encoder feedback to ablate")
    trained = [keras.ops.convert_to_numpy(cell.feedback_kernel) for cell in cells]

    def errors(zeroed):
        for cell, kernel in zip(cells, trained):
            cell.feedback_kernel.assign(np.zeros_like(kernel) if cell in zeroed else kernel)
        try:
            return om.error_per_step(model, data, batch_size)["all"]
        finally:
            for cell, kernel in zip(cells, trained):
                cell.feedback_kernel.assign(kernel)

    result = {"trained": errors(()), "all zeroed": errors(cells)}
    for cell in cells:
        result[cell.name] = errors((cell,))
    return result


def _print_feedback_ablation(runs, scored_on="test"):
    for run in runs:
        ablation = run.get("feedback_ablation")
        if not ablation:
            continue
        print(f"{run['variant']}: {scored_on} error per frame (%) with the decoder-to-encoder feedback "
              "kernels set to zero after training:")
        for name, values in ablation.items():
            label = name if name in ("trained", "all zeroed") else f"only {name} zeroed"
            print(f"  {label:26s} " + " ".join(f"{100 * e:6.2f}" for e in values))
    sys.stdout.flush()


def _print_error_per_step(runs, scored_on="test"):
    """Each variant's test (or validation) error after every frame: all sequences, those
    moving sideways and those moving only vertically (``occluded_mnist.error_per_step``)."""
    steps = max((len(run["error_per_step"]["all"]) for run in runs if run.get("error_per_step")), default=0)
    if not steps:
        return
    print(f"{scored_on} error per frame (%), frames 1..{steps}:")
    for run in runs:
        errors = run.get("error_per_step")
        if not errors:
            continue
        for i, group in enumerate(("all", "sideways", "vertical_only")):
            count = errors["counts"].get(group)
            values = errors.get(group)
            figures = " ".join(f"{100 * e:6.2f}" for e in values) if values is not None else "     -"
            print(f"  {run['variant'] if i == 0 else '':12s} {group.replace('_', ' '):13s} "
                  f"{'' if count is None else f'n={count}':>7s}  {figures}")
    sys.stdout.flush()


def _percent(wrong):
    """The percentage of True in ``wrong`` as ``" 12.34%"``, or ``"     -"`` for no sequence
    (the paper's motion has none that moves only vertically: numpy's mean warned and gave NaN)."""
    return f"{100 * wrong.mean():5.2f}%" if wrong.size else "     -"


def _sequence_options(args):
    """The data options of the sequences (``occluded_mnist.generate``'s) that ``args`` give."""
    return {"motion": args.motion, "bars": args.bars, "bar_spacing": args.bar_spacing}


def _print_data(args):
    """Says which data the sequences are: the paper's, those of rounds 1-26, or others."""
    options = _sequence_options(args)
    if options == SEQUENCE_OPTIONS:
        print(f"data: the paper's grid of bars ({BAR_WIDTH} px wide, {args.bar_spacing} px apart) and velocities",
              flush=True)
        return
    bars = "a grid of bars" if args.bars == "grid" else "vertical bars"
    motion = ("the paper's velocities (+-1, +-2), (+-2, +-1) px per frame" if args.motion == "paper"
              else "the eight compass directions at 3 px per frame")
    old = options == OLD_SEQUENCE_OPTIONS
    print(f"data: {bars} ({BAR_WIDTH} px wide, {args.bar_spacing} px apart) and {motion}"
          f"{' (the data of rounds 1-26)' if old else ''}", flush=True)


def _add_data_arguments(parser):
    """``--motion``, ``--bars`` and ``--bar-spacing`` of ``occluded`` and ``fusion``."""
    parser.add_argument("--motion", default=SEQUENCE_OPTIONS["motion"], choices=MOTIONS,
                        help="the digits' velocities: the paper's (+-1, +-2), (+-2, +-1) px per frame (default), "
                        "or the compass directions at 3 px per frame (compass: the data of rounds 1-26)")
    parser.add_argument("--bars", default=SEQUENCE_OPTIONS["bars"], choices=BAR_LAYOUTS,
                        help="the paper's grid of vertical and horizontal bars (default), or vertical bars only "
                        "(the data of rounds 1-26)")
    parser.add_argument("--bar-spacing", type=int_at_least(BAR_WIDTH + 1), default=SEQUENCE_OPTIONS["bar_spacing"],
                        metavar="N", help=f"px between the leading edges of neighbouring {BAR_WIDTH}-px bars "
                        "(default: %(default)s, the paper's; 8 in rounds 1-26)")


def _print_digits(data_dir):
    """Says which MNIST digits the run trains and tests on (``mnist_digits.idx_layout``)."""
    from applications.mnist_digits import TRAIN_AND_T10K, idx_layout

    if idx_layout(data_dir) == TRAIN_AND_T10K:
        print(f"digits of {data_dir}: the train files train, the t10k files test", flush=True)
    else:
        print(f"digits of {data_dir}: the t10k files split 80/20 (no train files there)", flush=True)


def occluded(args):
    print("at the start,", _load(), flush=True)
    _print_data(args)
    _print_digits(args.data_dir)
    if args.parallel:
        # every variant in its own process for the whole budget, all at once: the
        # machine's cores are shared equally (the CPU seconds of each are printed)
        import concurrent.futures
        import multiprocessing

        if len(args.variants) > 1:
            print(f"{len(args.variants)} variants side by side, {args.budget_minutes:g} minutes each", flush=True)
        else:
            print(f"1 variant in a process of its own, {args.budget_minutes:g} minutes", flush=True)
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(len(args.variants), mp_context=context) as pool:
            futures = [pool.submit(_occluded_variant, args, v, args.budget_minutes * 60) for v in args.variants]
            runs = [f.result() for f in futures]
    else:
        runs = [_occluded_variant(args, v, args.budget_minutes * 60 / len(args.variants)) for v in args.variants]
    scored_on = "validation" if args.hold_out else "test"
    results = {}
    for run in runs:
        results[run["variant"]] = run["test_error"]
        print(
            f"{run['variant']:12s} {scored_on} error {100 * run['test_error']:.2f}% "
            f"(paper {100 * run['paper_error']:.2f}%), {run['parameters']:,} parameters, "
            f"learning rate {run['learning_rate']:g}, {run['epochs_run']} epochs ({run['updates']:,} updates), "
            f"{run['wall']:.0f} s wall, {run['cpu']:.0f} CPU s"
            f"{' (budget hit)' if run['budget_hit'] else ''}",
            flush=True,
        )
    _print_error_per_step(runs, scored_on)
    _print_feedback_ablation(runs, scored_on)
    print(_load())
    others = [results[v] for v in ("temporal", "no_feedback") if v in results]
    if args.hold_out:
        print("(validation sequences of held-out training digits: the target is judged on the test sequences)")
    elif "rladder" in results and others:
        # clearly below: at least 2 points and a fifth under the best of the others
        best = min(others)
        clearly = results["rladder"] <= best - 0.02 and results["rladder"] <= 0.8 * best
        print("target (RLadder clearly below the temporal baseline and no_feedback):",
              "MET" if clearly else "NOT MET")
    return results


def _fusion_classifier(channels, seed):
    """A static CNN for 14x14 images (two 3x3 convolutions of 32 and 64 channels, max
    pooling, a dense layer of 128, dropout), as MNIST's common Keras example."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((14, 14, channels)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Dropout(0.25),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10),
    ])
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=True)
    return model


def fusion(args):
    """The test error of a static classifier of what an oracle of temporal integration
    could see (``occluded_mnist.seen_digits``: the digit's pixels shown by any of the
    first k frames, positions known), after the first frame and after all of them, and of
    the digits without bars; the sequences are the ``occluded`` benchmark's (the same
    options give the same training and test sequences)."""
    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
    import numpy as np

    from applications import occluded_mnist as om
    from keras_capsules.callbacks import TimeBudget

    print("at the start,", _load(), flush=True)
    _print_data(args)
    _print_digits(args.data_dir)
    start = time.perf_counter()
    train, test = om.make_sequences("idx", args.data_dir, args.num_train, args.num_test, args.seed,
                                    frame_size=args.frame_size, **_sequence_options(args))
    steps = train["frames"].shape[1]
    vertical = test["velocities"][:, 1] == 0
    cases = [("seen in frame 1", lambda data: om.seen_digits(data, 1)),
             (f"seen in frames 1-{steps}", lambda data: om.seen_digits(data, steps)),
             # the same layout with every pixel seen: the digits without bars
             ("no bars (the whole digit)", lambda data: om.seen_digits(dict(data, bars=np.zeros_like(data["bars"]))))]
    print(f"{len(train['labels'])} training and {len(test['labels'])} test sequences "
          f"({int(vertical.sum())} of them move only vertically), {args.epochs} epochs at most, "
          f"{args.budget_minutes:g} minutes for all three classifiers", flush=True)
    results = {}
    for name, images_of in cases:
        x_train, x_test = images_of(train), images_of(test)
        budget = TimeBudget(args.budget_minutes * 60 / len(cases))
        model = _fusion_classifier(x_train.shape[-1], args.seed)
        began = time.perf_counter()
        history = model.fit(x_train, train["labels"], batch_size=args.batch_size, epochs=args.epochs,
                            callbacks=[budget], verbose=args.verbose)
        wrong = model.predict(x_test, batch_size=256, verbose=0).argmax(-1) != test["labels"]
        seen = float(x_test[..., 1].mean())
        results[name] = float(wrong.mean())
        print(f"{name:28s} test error {100 * wrong.mean():5.2f}%  sideways {_percent(wrong[~vertical])}  "
              f"vertical only {_percent(wrong[vertical])}  (digit pixels seen {100 * seen:.1f}%; "
              f"{len(history.epoch)} epochs, {time.perf_counter() - began:.0f} s"
              f"{', budget hit' if budget.exceeded else ''})", flush=True)
    print(f"{time.perf_counter() - start:.0f} s in all;", _load())
    return results


def jsb(args):
    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
    from applications import music
    from keras_capsules.callbacks import TimeBudget

    print("at the start,", _load(), flush=True)
    start = time.perf_counter()
    deadline = start + args.budget_minutes * 60
    budgets = []

    def member_budget(member):
        # each ensemble member gets an equal share of the time still left
        budgets.append(TimeBudget(max(deadline - time.perf_counter(), 1.0) / (args.ensemble - member)))
        return [budgets[-1]]

    with tempfile.TemporaryDirectory() as run_dir:
        result = music.train(
            data_path=args.data_path,
            run_dir=run_dir,
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            units=tuple(args.units),
            encoder=args.encoder if len(args.encoder) > 1 else args.encoder[0],
            input_dropout=args.input_dropout,
            window=args.window,
            transpose=args.transpose,
            weight_decay=args.weight_decay,
            ema_momentum=args.ema_momentum if args.ema_momentum >= 0 else None,
            reduce_lr_patience=args.reduce_lr_patience,
            reduce_lr_factor=args.reduce_lr_factor,
            dropout=args.dropout,
            dropout_noise=args.dropout_noise,
            zoneout=args.zoneout,
            init_output_bias=args.init_output_bias,
            ensemble=args.ensemble,
            readout=args.readout if len(args.readout) > 1 else args.readout[0],
            nade_units=args.nade_units,
            seed=args.seed,
            verbose=args.verbose,
            callbacks=member_budget,
        )
    wall = time.perf_counter() - start
    print("read-out:", ", ".join(args.readout), "(independent: one Bernoulli per key given the past; "
          "nade: each key's sigmoid also given the lower keys of its step)")
    print(f"JSB Chorales test NLL per step: {result['test_nll_per_step']:.3f} "
          f"(valid {result['valid_nll_per_step']:.3f}; paper RNN {music.PAPER_NLL['RNN']}, "
          f"RLadder {music.PAPER_NLL['RLadder']})")
    hit = any(b.exceeded for b in budgets)
    print(f"{result['parameters']:,} parameters, {result['epochs_run']} epochs, wall time "
          f"{wall:.0f} s{' (budget hit)' if hit else ''}")
    print(_load())
    print("target (< 8.0 within 20 min):",
          "MET" if result["test_nll_per_step"] < 8.0 and wall <= 20 * 60 else "NOT MET")
    return result


def tagger(args):
    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
    from applications import textured_mnist as tm
    from keras_capsules.callbacks import TimeBudget

    print("at the start,", _load(), flush=True)
    _print_digits(args.data_dir)
    budget = TimeBudget(args.budget_minutes * 60)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        result = tm.train(
            data_dir=args.data_dir,
            run_dir=run_dir,
            num_train=args.num_train,
            num_test=args.num_test,
            n_groups=args.groups,
            n_iters=args.iters,
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            num_classes=10 if args.classify else None,
            conv_units=args.conv_units,
            dense_units=args.dense_units,
            pool=args.pool,
            sigma=args.sigma,
            noise_std=args.noise_std,
            head_input=args.head_input,
            head_type=args.head_type,
            mask_update=args.mask_update,
            initial_mask_scale=args.initial_mask_scale,
            class_weight=args.class_weight,
            texture_style=args.texture_style,
            mean_gap=args.mean_gap,
            texture_set=args.texture_set,
            bank_size=args.bank_size,
            texture_shift=args.texture_shift,
            posterior_sigma=args.posterior_sigma,
            initial_mask_stddev=args.initial_mask_stddev,
            unflatten=args.unflatten,
            conv_encoder=args.conv_encoder,
            group_codes=args.group_codes,
            mask_damping=args.mask_damping,
            num_valid=args.num_valid,
            seed=args.seed,
            verbose=args.verbose,
            callbacks=[budget],
        )
    if "best_epoch" in result:
        print(f"kept epoch {result['best_epoch']} of {result['epochs_run']} (best last-iteration validation AMI; "
              "validation AMI per iteration " + " / ".join(f"{a:.3f}" for a in result.get("valid_ami", [])) + ")")
    for t, ami in enumerate(result["ami"]):
        error = f", classification error {100 * result['error'][t]:.1f}%" if "error" in result else ""
        print(f"iteration {t + 1}: AMI {ami:.3f}{error}")
    # the digits are centred: one mask for every image, never looking at it, gets this much
    print(f"image-blind segmentation (the training digits' mean mask, thresholded): AMI "
          f"{result['image_blind_ami']:.3f}; last iteration "
          f"{'above' if result['ami'][-1] > result['image_blind_ami'] else 'NOT above'} it")
    wall = time.perf_counter() - start
    print(f"{result['parameters']:,} parameters, {result['epochs_run']} epochs, wall time "
          f"{wall:.0f} s{' (budget hit)' if budget.exceeded else ''}")
    print(_load())
    # a real improvement: the last iteration at least 0.02 above the first, no iteration
    # more than 0.005 below the one before (AMI ~0 at every iteration is no segmentation)
    amis = result["ami"]
    improving = (len(amis) > 1 and amis[-1] >= amis[0] + 0.02
                 and all(b >= a - 0.005 for a, b in zip(amis, amis[1:])))
    print("target (AMI improving over iterations within 20 min):",
          "MET" if improving and wall <= 20 * 60 else "NOT MET")
    return result


def loop(args):
    """Trace/compile time and time per training step of RLadder's two loops."""
    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
    import keras
    import numpy as np

    from keras_capsules.layers import RLadder, level_spec

    print("at the start,", _load(), flush=True)
    rng = np.random.default_rng(args.seed)
    levels = [level_spec(args.encoder, u) for u in args.units]
    print(f"{args.encoder} levels {args.units}, {args.features} features, batch {args.batch_size}, "
          f"{args.steps_timed} timed steps after the first", flush=True)
    print(f"{'T':>5} {'loop':>9} {'XLA':>5} {'first step (trace, compile)':>28} {'per step':>10}", flush=True)
    for steps in args.steps:
        x = rng.uniform(size=(args.batch_size, steps, args.features)).astype("float32")
        y = (rng.uniform(size=x.shape) < 0.1).astype("float32")
        for jit in args.jit_compile:
            for unroll in (True, False):
                if unroll and jit and steps > args.max_unrolled_xla:
                    print(f"{steps:>5} {'unrolled':>9} {'yes':>5} {'skipped (--max-unrolled-xla)':>28}", flush=True)
                    continue
                keras.utils.set_random_seed(args.seed)
                inputs = keras.Input((None if not unroll else steps, args.features))
                logits, _ = RLadder(levels, output_units=args.features, unroll=unroll)(inputs)
                model = keras.Model(inputs, logits)
                model.compile(keras.optimizers.Adam(1e-3),
                              keras.losses.BinaryCrossentropy(from_logits=True), jit_compile=jit)
                start = time.perf_counter()
                model.train_on_batch(x, y)
                first = time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(args.steps_timed):
                    model.train_on_batch(x, y)
                per_step = (time.perf_counter() - start) / args.steps_timed
                print(f"{steps:>5} {'unrolled' if unroll else 'symbolic':>9} {'yes' if jit else 'no':>5} "
                      f"{first:>26.1f} s {1000 * per_step:>7.1f} ms", flush=True)
    print(_load())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="benchmark", required=True)
    common = argparse.ArgumentParser(add_help=False)
    # each benchmark's default budget is its parser's `default_budget_minutes`: the parsers
    # share this action (argparse's `parents`), so a set_defaults(budget_minutes=...) of one
    # changed every benchmark's default (the last one set won)
    common.add_argument("--budget-minutes", type=positive_float, default=None,
                        help="training time budget in minutes (default: the benchmark's)")
    common.add_argument("--seed", type=seed_int, default=0)
    common.add_argument("--verbose", type=non_negative_int, default=2)

    p = sub.add_parser("occluded", parents=[common], help="Occluded Moving MNIST error")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--variants", nargs="+", default=["rladder", "temporal", "no_feedback"])
    p.add_argument("--num-train", type=positive_int, default=20000)
    p.add_argument("--num-test", type=positive_int, default=2000)
    p.add_argument("--epochs", type=positive_int, default=100, help="at most; the time budget stops first")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--conv-units", type=positive_int, nargs=3, default=[8, 16, 16])
    p.add_argument("--dense-units", type=positive_int, default=64)
    p.add_argument("--learning-rate", type=positive_float, default=None,
                   help="Adam's learning rate for every variant (default: each variant's own, chosen on "
                   "validation: " + ", ".join(f"{v} {r:g}" for v, r in OCCLUDED_LEARNING_RATES.items())
                   + f"; others {DEFAULT_LEARNING_RATE:g})")
    p.add_argument("--frame-size", type=positive_int, default=24, help="frames of N x N pixels (paper: 32)")
    p.add_argument("--classify", default="every", choices=("every", "last"),
                   help="classification cost on every step or on the last one")
    p.add_argument("--normalization", default="none", choices=("layer", "none"),
                   help="RLadder's layer normalization of each level's input")
    p.add_argument("--conv-encoder", default="gatedconv", choices=CONV_ENCODERS,
                   help="encoder of the ladder's convolutional levels (feed-forward gated or ReLU, or ConvLSTM)")
    p.add_argument("--conv-normalization", default="instance", choices=("instance", "none"),
                   help="instance normalization in every variant's convolutions (ladder: --conv-encoder gatedconv or conv)")
    p.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=True,
                   help="XLA-compile every variant's training step")
    p.add_argument("--frame-weight", type=non_negative_float, default=1.0, help="weight of the next-frame cost")
    p.add_argument("--final-lr-fraction", type=fraction, default=0.05,
                   help="the learning rate decays linearly to this fraction of its start over each "
                   "variant's budget or its --epochs, whichever ends first (1: constant; default: %(default)s)")
    p.add_argument("--feedback-initializer", default="zeros", choices=("zeros", "default"),
                   help="RLadder's feedback kernels start at zero, or as its other kernels")
    p.add_argument("--unflatten", default="broadcast", choices=UNFLATTENS,
                   help="the ladders' gated top reaches the conv decoder below by one projection "
                   "broadcast over all pixels, or by a dense kernel to every pixel (the temporal "
                   "baseline ignores it)")
    p.add_argument("--augment", default="none", choices=("none", "fresh", "affine"),
                   help="training sequences of every variant: fixed (none), new every epoch (fresh), or new "
                   "every epoch with each digit randomly transformed (affine); test sequences never are")
    for key in ("rotation", "scale", "shear", "shift"):
        p.add_argument(f"--affine-{key}", type=float, default=None,
                       help=f"with --augment affine: applications.occluded_mnist.augment_digits's {key}")
    p.add_argument("--hold-out", action="store_true",
                   help="score validation sequences of a held-out fifth of the training digits instead of "
                   "the test sequences (the variants train on the other four fifths): for choices that "
                   "must not see a test digit; the target is judged on the test sequences only")
    p.add_argument("--intra-op-threads", type=non_negative_int, default=1,
                   help="TensorFlow threads inside one op (0: all cores)")
    p.add_argument("--ablate-feedback", action="store_true",
                   help="score the trained full ladder again with its decoder-to-encoder feedback kernels "
                   "set to zero, all at once and one level at a time")
    p.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=True,
                   help="train the variants side by side, one process each, every one for the whole "
                   "budget (default), or one after another, each for its share of the budget")
    _add_data_arguments(p)
    # 17 minutes of training leave time for generating the sequences and testing within 20
    p.set_defaults(run=occluded, default_budget_minutes=17.0)

    p = sub.add_parser("fusion", parents=[common],
                       help="Occluded Moving MNIST: the error of a static classifier of what an oracle of "
                       "temporal integration sees (a bound for the occluded benchmark's models)")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--num-train", type=positive_int, default=20000)
    p.add_argument("--num-test", type=positive_int, default=2000)
    p.add_argument("--frame-size", type=positive_int, default=24, help="frames of N x N pixels (as occluded's)")
    p.add_argument("--epochs", type=positive_int, default=15, help="at most; the time budget stops first")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--intra-op-threads", type=non_negative_int, default=0,
                   help="TensorFlow threads inside one op (0: all cores)")
    _add_data_arguments(p)
    p.set_defaults(run=fusion, default_budget_minutes=15.0)

    p = sub.add_parser("jsb", parents=[common], help="JSB Chorales test NLL")
    p.add_argument("--data-path", default=str(jsb_chorales.default_data_path()),
                   help="the JSB Chorales JSON file or its folder (default: %(default)s)")
    p.add_argument("--epochs", type=positive_int, default=150, help="epochs of each ensemble member")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--learning-rate", type=positive_float, default=3e-3)
    p.add_argument("--units", type=positive_int, nargs="+", default=[128, 64])
    p.add_argument("--encoder", nargs="+", default=["gated"], choices=("gated", "lstm"),
                   help="encoder cells; several: ensemble member i uses the i-th (cyclically)")
    p.add_argument("--input-dropout", type=rate, default=0.1)
    p.add_argument("--window", type=positive_int, default=32)
    p.add_argument("--transpose", type=non_negative_int, default=0,
                   help="move training windows by up to N semitones (0: off)")
    p.add_argument("--weight-decay", type=non_negative_float, default=0.0, help="AdamW's decoupled weight decay")
    p.add_argument("--ema-momentum", type=rate, default=0.99,
                   help="validate and keep a moving average of the weights (negative: off)")
    p.add_argument("--reduce-lr-patience", type=positive_int, default=None,
                   help="halve the learning rate after N epochs without a better validation loss")
    p.add_argument("--reduce-lr-factor", type=rate, default=0.5)
    p.add_argument("--dropout", type=rate, default=0.3,
                   help="RLadder's dropout on the signals between levels (encoder and decoder outputs)")
    p.add_argument("--dropout-noise", default="step", choices=("step", "sequence"),
                   help="new dropout masks every step, or one per sequence (variational)")
    p.add_argument("--zoneout", type=rate, default=0.0, help="RLadder's zoneout rate of the encoder states")
    p.add_argument("--init-output-bias", action=argparse.BooleanOptionalAction, default=True,
                   help="start the output bias at the log-odds of each key's training frequency")
    p.add_argument("--ensemble", type=positive_int, default=1,
                   help="train N models one after the other within the budget; average their probabilities")
    p.add_argument("--readout", nargs="+", default=["nade"], choices=("independent", "nade"),
                   help="independent: one Bernoulli per key given the past (the paper's); nade: each key "
                   "also given the lower keys of its step; several: member i uses the i-th (cyclically)")
    p.add_argument("--nade-units", type=positive_int, default=64, help="hidden units of the NADE read-out")
    p.add_argument("--intra-op-threads", type=non_negative_int, default=1,
                   help="TensorFlow threads inside one op (0: all cores)")
    # 17 minutes of training leave time for the evaluation of the ensemble within 20
    p.set_defaults(run=jsb, default_budget_minutes=17.0)

    p = sub.add_parser("tagger", parents=[common], help="RTagger AMI per iteration")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--num-train", type=positive_int, default=4000)
    p.add_argument("--num-test", type=positive_int, default=500)
    p.add_argument("--groups", type=positive_int, default=2)
    p.add_argument("--iters", type=positive_int, default=5)
    p.add_argument("--epochs", type=positive_int, default=40, help="at most; the time budget usually stops first")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--learning-rate", type=positive_float, default=2e-3,
                   help="Adam's learning rate (2e-3 since the fifteenth round; 1e-3 before)")
    p.add_argument("--conv-units", type=positive_int, default=16)
    p.add_argument("--dense-units", type=positive_int, default=64)
    p.add_argument("--pool", type=positive_int, default=2, help="max pooling before the ladder's dense top")
    p.add_argument("--sigma", type=positive_float, default=0.1, help="the Gaussians' standard deviation")
    p.add_argument("--noise-std", type=non_negative_float, default=0.4, help="input corruption in training")
    p.add_argument("--classify", action=argparse.BooleanOptionalAction, default=True,
                   help="the classifier head on the groups (reports its error per iteration)")
    p.add_argument("--head-input", default="mask_and_share", choices=("share", "mask", "mask_and_share"))
    p.add_argument("--head-type", default="conv", choices=("dense", "conv"))
    p.add_argument("--class-weight", type=non_negative_float, default=1.0, help="weight of the classifier's cost")
    p.add_argument("--mask-update", default="posterior", choices=("learned", "posterior"),
                   help="RTagger's new masks: the read-out's, or its prior times the likelihood (E-step)")
    p.add_argument("--initial-mask-scale", type=positive_int, default=14,
                   help="pixels per random initial mask logit (1: per pixel; larger: smooth blobs)")
    p.add_argument("--texture-style", default="smooth", choices=("binary", "smooth"),
                   help="two-level or continuous-valued textures")
    p.add_argument("--mean-gap", type=non_negative_float, default=0.0,
                   help="least difference of the digit's and background's mean intensities")
    p.add_argument("--texture-set", default="fixed", choices=("random", "fixed"),
                   help="procedural textures drawn per image, or two of a fixed bank of gratings")
    p.add_argument("--bank-size", type=positive_int, default=8, help="textures in the fixed bank")
    p.add_argument("--texture-shift", action=argparse.BooleanOptionalAction, default=False,
                   help="a random phase per image for the fixed bank's gratings")
    p.add_argument("--posterior-sigma", type=positive_float, default=None,
                   help="sigma of the posterior mask update only (default: --sigma)")
    p.add_argument("--initial-mask-stddev", type=non_negative_float, default=1.0,
                   help="standard deviation of the random initial mask logits")
    p.add_argument("--unflatten", default="broadcast", choices=UNFLATTENS,
                   help="how the ladder's dense top reaches the pixels of the conv decoder below")
    p.add_argument("--conv-encoder", default="convlstm", choices=CONV_ENCODERS,
                   help="the ladder's convolutional level: ConvLSTM or feed-forward (see the twelfth round)")
    p.add_argument("--group-codes", action=argparse.BooleanOptionalAction, default=True,
                   help="each group's ladder input gets its one-hot group code, so groups can take roles "
                        "(--no-group-codes: exchangeable groups, as Tagger; fourteenth round)")
    p.add_argument("--mask-damping", type=mask_damping, default=0.0,
                   help="share of the previous iteration's masks kept in the new ones (RTagger's mask_damping): "
                        "a number in [0, 1) or 'learned' (a learned share per pixel; seventeenth round)")
    p.add_argument("--num-valid", type=non_negative_int, default=200,
                   help="validation images of held-out training digits; the epoch with the best "
                        "last-iteration validation AMI is kept (0: the last epoch)")
    p.add_argument("--intra-op-threads", type=non_negative_int, default=1,
                   help="TensorFlow threads inside one op (0: all cores)")
    p.set_defaults(run=tagger, default_budget_minutes=17.0)

    p = sub.add_parser("loop", parents=[common], help="RLadder's unrolled and symbolic loops: compile time and speed")
    p.add_argument("--steps", type=positive_int, nargs="+", default=[32, 160], help="sequence lengths T")
    p.add_argument("--units", type=positive_int, nargs="+", default=[128, 64])
    p.add_argument("--encoder", default="gated", choices=("gated", "lstm"))
    p.add_argument("--features", type=positive_int, default=88)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--steps-timed", type=positive_int, default=10, help="training steps timed after the first")
    p.add_argument("--jit-compile", type=int, nargs="+", default=[0, 1], choices=(0, 1),
                   help="0: without XLA, 1: with XLA")
    p.add_argument("--max-unrolled-xla", type=positive_int, default=64,
                   help="skip XLA of an unrolled ladder of more steps (minutes to compile)")
    p.add_argument("--intra-op-threads", type=non_negative_int, default=1,
                   help="TensorFlow threads inside one op (0: all cores)")
    p.set_defaults(run=loop)

    args = parser.parse_args(argv)
    if getattr(args, "ablate_feedback", False) and "rladder" not in args.variants:
        parser.error("--ablate-feedback needs the full ladder among --variants (only 'rladder' has feedback)")
    if args.budget_minutes is None:
        args.budget_minutes = getattr(args, "default_budget_minutes", 18.0)
    if args.benchmark == "jsb":
        jsb_chorales.data_file(args.data_path)  # a missing file answers before TensorFlow loads
    _load_tensorflow()
    return args.run(args)


if __name__ == "__main__":
    # a user error (missing data, a bad value) is one line, as under `keras-capsules bench`
    from applications.errors import run_main

    sys.exit(run_main(main, "rladder.py"))
