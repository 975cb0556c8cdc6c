"""Learning benchmarks of the Recurrent Ladder applications (Ilin et al. 2017).

Subcommands (each sized to finish within about 20 minutes on a 2-core CPU; a wall
time budget stops training early if the machine is slower):

    python benchmarks/rladder.py occluded [--data-dir ../shared/data/mnist]
        Occluded Moving MNIST classification error of RLadder, the temporal baseline
        (conv net + GRU) and RLadder without decoder-to-encoder connections, trained
        for the same budget each (paper: 0.74%, 2.02%, 1.60%).
    python benchmarks/rladder.py jsb [--data-path ../shared/data/jsb_chorales]
        JSB Chorales test NLL per time step (target below 8.0; paper: RNN 8.76,
        RLadder 5.64).
    python benchmarks/rladder.py tagger [--data-dir ../shared/data/mnist]
        RTagger on Textured MNIST: segmentation AMI after every iteration.

Each prints its figures, the wall time and the machine load.

Measured (jsb, defaults: gated levels 128/64, windows of 32 steps, 60 epochs):
test NLL 8.577 per step (valid 8.447), 747 s wall, load average ~10 falling to 4 on
2 CPUs. Target < 8.0 not met: the model overfits after ~40 epochs (train 8.1);
wider levels (256/128, input dropout 0.3, 150 epochs) overfit more (test 8.640).
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

from keras_capsules.callbacks import TimeBudget  # noqa: E402


def _load():
    load = os.getloadavg()
    return f"load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"


def occluded(args):
    from applications import occluded_mnist as om

    results = {}
    for variant in args.variants:
        budget = TimeBudget(args.budget_minutes * 60 / len(args.variants))
        start = time.perf_counter()
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
                seed=args.seed,
                verbose=args.verbose,
                callbacks=[budget],
            )
        results[variant] = result["test_error"]
        print(
            f"{variant:12s} test error {100 * result['test_error']:.2f}% "
            f"(paper {100 * om.PAPER_ERROR.get(variant, float('nan')):.2f}%), "
            f"{result['parameters']:,} parameters, {result['epochs_run']} epochs, "
            f"{time.perf_counter() - start:.0f} s{' (budget hit)' if budget.exceeded else ''}",
            flush=True,
        )
    print(_load())
    return results


def jsb(args):
    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
    from applications import music

    budget = TimeBudget(args.budget_minutes * 60)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        result = music.train(
            data_path=args.data_path,
            run_dir=run_dir,
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            units=tuple(args.units),
            encoder=args.encoder,
            input_dropout=args.input_dropout,
            window=args.window,
            transpose=args.transpose,
            weight_decay=args.weight_decay,
            ema_momentum=args.ema_momentum,
            reduce_lr_patience=args.reduce_lr_patience,
            reduce_lr_factor=args.reduce_lr_factor,
            seed=args.seed,
            verbose=args.verbose,
            callbacks=[budget],
        )
    wall = time.perf_counter() - start
    print(f"JSB Chorales test NLL per step: {result['test_nll_per_step']:.3f} "
          f"(valid {result['valid_nll_per_step']:.3f}; paper RNN {music.PAPER_NLL['RNN']}, "
          f"RLadder {music.PAPER_NLL['RLadder']})")
    print(f"{result['parameters']:,} parameters, {result['epochs_run']} epochs, wall time "
          f"{wall:.0f} s{' (budget hit)' if budget.exceeded else ''}")
    print(_load())
    print("target (< 8.0 within 20 min):",
          "MET" if result["test_nll_per_step"] < 8.0 and wall <= 20 * 60 else "NOT MET")
    return result


def tagger(args):
    from applications import textured_mnist as tm

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
            num_classes=10 if args.classify else None,
            seed=args.seed,
            verbose=args.verbose,
            callbacks=[budget],
        )
    for t, ami in enumerate(result["ami"]):
        error = f", classification error {100 * result['error'][t]:.1f}%" if "error" in result else ""
        print(f"iteration {t + 1}: AMI {ami:.3f}{error}")
    print(f"{result['parameters']:,} parameters, {result['epochs_run']} epochs, wall time "
          f"{time.perf_counter() - start:.0f} s{' (budget hit)' if budget.exceeded else ''}")
    print(_load())
    return result


def main(argv=None):
    from applications.mnist_digits import default_data_dir
    from applications.music import default_data_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="benchmark", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--budget-minutes", type=float, default=18.0)
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--verbose", type=int, default=2)

    p = sub.add_parser("occluded", parents=[common], help="Occluded Moving MNIST error")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--variants", nargs="+", default=["rladder", "temporal", "no_feedback"])
    p.add_argument("--num-train", type=int, default=6000)
    p.add_argument("--num-test", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--conv-units", type=int, nargs=3, default=[8, 16, 16])
    p.add_argument("--dense-units", type=int, default=64)
    p.set_defaults(run=occluded)

    p = sub.add_parser("jsb", parents=[common], help="JSB Chorales test NLL")
    p.add_argument("--data-path", default=str(default_data_path()))
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--units", type=int, nargs="+", default=[128, 64])
    p.add_argument("--encoder", default="gated", choices=("gated", "lstm"))
    p.add_argument("--input-dropout", type=float, default=0.1)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--transpose", type=int, default=0,
                   help="move training windows by up to N semitones (0: off)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW's decoupled weight decay")
    p.add_argument("--ema-momentum", type=float, default=None,
                   help="validate and keep a moving average of the weights")
    p.add_argument("--reduce-lr-patience", type=int, default=None,
                   help="halve the learning rate after N epochs without a better validation loss")
    p.add_argument("--reduce-lr-factor", type=float, default=0.5)
    p.add_argument("--intra-op-threads", type=int, default=1,
                   help="TensorFlow threads inside one op (0: all cores)")
    p.set_defaults(run=jsb)

    p = sub.add_parser("tagger", parents=[common], help="RTagger AMI per iteration")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--num-train", type=int, default=4000)
    p.add_argument("--num-test", type=int, default=500)
    p.add_argument("--groups", type=int, default=3)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--classify", action="store_true", help="add the classifier head")
    p.set_defaults(run=tagger)

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    main()
