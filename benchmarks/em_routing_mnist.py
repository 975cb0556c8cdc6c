"""Learning benchmark: a two-layer EM-routing network on 10,000 real MNIST digits.

The digits are the canonical MNIST ``t10k`` files (``../shared/data/mnist/`` in this
project), split 8,000 train / 2,000 test with a fixed seed. The model is the demo's
(``applications.demo.build_model``) at 28x28: a small convolutional stem, primary
capsules at every location, ``EMRouting`` to 16 capsules of 4x4 and ``EMRouting`` to
10 class capsules; Adam with a cosine-decayed learning rate. Target: at least 95%
test accuracy.

    python benchmarks/em_routing_mnist.py --data-dir ../shared/data/mnist
"""

import argparse
import os
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from applications.arguments import non_negative_int, positive_float, positive_int, seed_int  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None, help="folder of the t10k IDX files (default: ../shared/data/mnist)")
    parser.add_argument("--epochs", type=positive_int, default=20)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--learning-rate", type=positive_float, default=3e-3)
    parser.add_argument("--n-iters", type=positive_int, default=2, help="EM iterations of both routing layers")
    parser.add_argument("--hidden-capsules", type=positive_int, default=32)
    parser.add_argument("--filters", type=positive_int, default=32)
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--verbose", type=non_negative_int, default=2)
    args = parser.parse_args(argv)

    from applications.mnist_digits import default_data_dir, load_idx_digits

    images, labels = load_idx_digits(args.data_dir or default_data_dir())  # NumPy only: before TensorFlow loads

    from applications import console

    console.load_tensorflow_quietly()  # without TensorFlow's start-up lines that ask nothing (no CUDA driver, ...)
    from applications import demo
    import keras

    keras.utils.set_random_seed(args.seed)
    train_ds, test_ds = demo.make_datasets(
        images, labels, args.batch_size, test_fraction=0.2, seed=args.seed
    )
    steps = int(np.ceil(8000 / args.batch_size)) * args.epochs
    # Cosine decay to 3% of the initial rate: the late epochs settle instead of oscillating.
    schedule = keras.optimizers.schedules.CosineDecay(args.learning_rate, steps, alpha=0.03)
    model = demo.compile_model(demo.build_model(
        input_shape=(28, 28, 1), n_iters=args.n_iters, hidden_capsules=args.hidden_capsules, filters=args.filters
    ), schedule)
    print(f"load average before: {os.getloadavg()}")
    print(f"{model.count_params():,} parameters, {args.n_iters} EM iterations; 8,000 train / 2,000 test digits")
    start = time.perf_counter()
    model.fit(train_ds, validation_data=test_ds, epochs=args.epochs, verbose=args.verbose, shuffle=False)  # shuffled by tf.data
    seconds = time.perf_counter() - start
    _, accuracy = model.evaluate(test_ds, verbose=0)
    print(f"test accuracy {accuracy:.4f} after {args.epochs} epochs, {seconds:.0f} s of training")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    # a user error (missing data, a bad value) is one line, as under `keras-capsules bench`
    from applications.errors import run_main

    sys.exit(run_main(main, "em_routing_mnist.py"))
