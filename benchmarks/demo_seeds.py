"""How steadily the demo learns: its accuracy over several seeds, on validation digits.

Each seed draws its own train/test split, initial weights and epoch orders. The model
trains on the demo's training part less a held-out fifth (``demo.make_datasets(
hold_out=True)``) and is scored on that fifth: the test digits of ``keras-capsules
train`` are never used, so the figures can choose a setting without touching them.
The run is the demo's recipe (Adam, batch 32, the seeded epoch stream of ``train``).
A run that ends below ``--stall-below`` counts as stalled.

    python benchmarks/demo_seeds.py                    # 10 seeds, 25 epochs, ~5 min on 2 cores
    python benchmarks/demo_seeds.py --no-hidden-norm   # the earlier model, for comparison
    python benchmarks/demo_seeds.py --seeds 3 --epochs 15 --learning-rate 1e-3
"""

import argparse
import os
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from applications.arguments import non_negative_int, positive_float, positive_int  # noqa: E402


def fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text!r}")
    return value


def run_seed(seed, images, labels, args):
    """Trains the demo model on one seed's held-out split; returns the validation accuracies per epoch."""
    from applications import demo

    _, history = demo.fit_held_out(images, labels, seed=seed, epochs=args.epochs, batch_size=args.batch_size,
                                   learning_rate=args.learning_rate, verbose=args.verbose,
                                   hidden_norm=args.hidden_norm)
    return history.history["val_accuracy"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=positive_int, default=10, help="seeds 0..N-1 (default: %(default)s)")
    parser.add_argument("--epochs", type=positive_int, default=25, help="(default: %(default)s, the demo's)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="(default: %(default)s)")
    parser.add_argument("--learning-rate", type=positive_float, default=3e-3, help="(default: %(default)s)")
    parser.add_argument("--no-hidden-norm", dest="hidden_norm", action="store_false",
                        help="the model without the hidden scores' normalization (default: normalized)")
    parser.add_argument("--data-dir", default=None,
                        help="MNIST t10k IDX files (default: scikit-learn's 8x8 digits, no download)")
    parser.add_argument("--limit", type=positive_int, default=None, help="use only the first N digits (default: all)")
    parser.add_argument("--stall-below", type=fraction, default=0.9,
                        help="a run ending below this validation accuracy counts as stalled (default: %(default)s)")
    parser.add_argument("--verbose", type=non_negative_int, default=0, help="fit's verbosity (default: %(default)s)")
    args = parser.parse_args(argv)

    from applications import console
    from applications.mnist_digits import load_arrays

    # once, before TensorFlow loads (a missing folder answers at once); every seed splits the same digits
    images, labels = load_arrays(args.data_dir, args.limit)
    console.load_tensorflow_quietly()  # without TensorFlow's start-up lines that ask nothing (no CUDA driver, ...)

    print(f"load average at the start (1, 5, 15 min): {os.getloadavg()}")
    print(f"demo model, hidden norm {'on' if args.hidden_norm else 'off'}, {args.epochs} epochs, "
          f"Adam {args.learning_rate}, batch {args.batch_size}; validation digits held out of the training part")
    finals = []
    for seed in range(args.seeds):
        start = time.perf_counter()
        accuracies = run_seed(seed, images, labels, args)
        finals.append(accuracies[-1])
        print(f"seed {seed}: validation accuracy {accuracies[-1]:.4f} (best {max(accuracies):.4f}, "
              f"epoch {int(np.argmax(accuracies)) + 1}), {time.perf_counter() - start:.0f} s", flush=True)
    finals = np.asarray(finals)
    stalled = int(np.sum(finals < args.stall_below))
    print(f"over {len(finals)} seeds: min {finals.min():.4f}, mean {finals.mean():.4f}, max {finals.max():.4f}; "
          f"{stalled} stalled (below {args.stall_below})")
    print(f"load average at the end (1, 5, 15 min): {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    # a user error (missing data, a bad value) is one line, as under `keras-capsules bench`
    from applications.errors import run_main

    sys.exit(run_main(main, "demo_seeds.py"))
