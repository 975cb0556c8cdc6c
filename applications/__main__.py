"""The ``keras-capsules`` command line (also ``python -m applications``).

    keras-capsules train                       # the default demo, no download needed
    keras-capsules train demo --epochs 5 --run-dir runs/demo
    keras-capsules evaluate demo --model runs/demo/model.keras
"""

import argparse
import json
import os
import sys

APPLICATIONS = ("demo",)


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-capsules",
        description="Train and evaluate the keras-capsules applications.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train an application (default: the demo)")
    train.add_argument("application", nargs="?", default="demo", choices=APPLICATIONS)
    train.add_argument("--run-dir", default=os.path.join("runs", "demo"),
                       help="where the model, plots, metrics and TensorBoard logs go")
    train.add_argument("--epochs", type=_positive_int, default=15)
    train.add_argument("--batch-size", type=_positive_int, default=32)
    train.add_argument("--learning-rate", type=_positive_float, default=3e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--quiet", action="store_true", help="no progress bars")

    evaluate = commands.add_parser("evaluate", help="evaluate a trained model")
    evaluate.add_argument("application", nargs="?", default="demo", choices=APPLICATIONS)
    evaluate.add_argument("--model", default=os.path.join("runs", "demo", "model.keras"),
                          help="path of a .keras model written by `train`")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from applications import demo

    try:
        if args.command == "train":
            result = demo.train(
                run_dir=args.run_dir,
                epochs=args.epochs,
                batch_size=args.batch_size,
                learning_rate=args.learning_rate,
                seed=args.seed,
                verbose=0 if args.quiet else 1,
            )
            print(f"test accuracy {result['test_accuracy']:.4f} ({result['parameters']:,} parameters)")
            print(f"outputs in {os.path.abspath(args.run_dir)}: model.keras, history.png, "
                  "metrics.json, logs/ (tensorboard --logdir " + result["logs"] + ")")
        else:
            print(json.dumps(demo.evaluate(args.model), indent=2))
    except (FileNotFoundError, ValueError) as err:
        print(f"keras-capsules: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
