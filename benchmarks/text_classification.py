"""Benchmarks of the capsule text classifier (Ren & Lu, CCCapsNet).

Two parts, run separately or together (from the repository root):

    python benchmarks/text_classification.py learning   [--minutes 15] [--epochs 10] [--sentences]
    python benchmarks/text_classification.py throughput [--steps 50] [--repeats 3] [--jit both] [--gru projected|keras|both]
    python benchmarks/text_classification.py all

* ``learning``: SST-2/R (binary, neutral dropped; trained on every labelled phrase of
  the training trees, tested on the root sentences) test accuracy of the model with
  k-means routing, dynamic routing and a linear head, each trained from scratch with
  the paper's recipe (Adam, batch 30, margin + focal loss, 10 epochs) within a
  wall-time budget per model (``--sentences``: train on the sentences only); also the embedding parameters of a 60,000-word vocabulary,
  compositional (M = 8, D = 64) vs standard.
* ``throughput``: training samples/s at batch 30, sequence length 128, 60,000 ids and
  4 classes on synthetic ids, with XLA (``jit_compile``) on and off.

Every report line ends with the machine's load average, as figures on a shared
machine mean little without it.

Measured 2026-11-23 (TensorFlow's oneDNN off, one intra-op thread as the application
sets, 2 CPUs; the paper's recipe, 10 epochs, batch 30):

    SST-2 test accuracy,         kmeans   dynamic   linear
    compositional embedding
      every phrase (default)     0.8078   0.7968    0.8034   (9.9-12.3 min per model,
                                                             load average 2.0-2.2)
      sentences (--sentences)    0.7381   0.7578    0.7073   (1.7-1.9 min per model,
                                                             load average 1.8-2.3)

    embedding parameters, V=60,000: compositional 1,922,048 vs standard 3,840,000 (49.9% fewer)
    throughput, XLA off, median of 3 x 50 steps (load average 1.5-2.0):
        kmeans 255.0 and 203.9 samples/s in two runs (ranges 250.0-263.6, 187.4-213.0),
        dynamic 219.9 / 208.0, linear 226.2 / 195.5; XLA on: ~40 samples/s (kmeans)
    target: 192 samples/s, 1.5x the authors' PyTorch model

Re-measured 2026-11-23 17:00 on the next session's machine (same kind, 2 CPUs, quiet,
load average 1.0-1.5), kmeans, XLA off, 3 runs: 162.2 (3 x 50 steps), 165.5 and
162.4 samples/s (5 x 50 steps; ranges within 160-169): below the 192 target there.
Pinned to one core (``taskset -c 0``) it falls to 94.1, since the two GRU directions
no longer run side by side. The spread between machines and runs is not understood.

Since 2026-11-23 19:30 the model's GRUs are ``ProjectedGRU``
(``applications/text_classification/projected_gru.py``): Keras' GRU with the input
projection taken out of the time loop and the backward pass written out (one reverse
loop carrying the state's gradient; the recurrent kernel's gradient as one product
after it). Same function and weights (outputs and gradients equal Keras' GRU within
1e-5 in ``tests/applications/test_projected_gru.py``). Profiled first: the two BiGRU
layers were ~90% of a step (about 320 of 350 CPU-ms per batch), and of one direction's 48
CPU-ms (forward + backward) the matrix products are under a third: the rest is
TensorFlow's derived backward loop, op by op. Same machine, same quiet 2 CPUs,
``python benchmarks/text_classification.py throughput --jit off --gru both --repeats 5``:

    kmeans, ProjectedGRU   269.6 samples/s (5 x 50 steps, range 263.7-270.4, load 0.5-1.1)
    kmeans, Keras GRU      165.4 samples/s (range 162.6-166.1, load 1.1-1.5)

and ``--routings kmeans dynamic linear`` (3 x 50 steps, load 1.5-1.7): 265.8, 268.6
and 265.8 samples/s. Target 192: met, by 1.4x; 1.6x Keras' GRU. In CPU time (two
runs of 30 steps while other jobs shared the machine): 87 samples per CPU-second with
Keras' GRU, 114 with ProjectedGRU.

Re-measured 2026-11-24 with ProjectedGRU (the model's default since the figures above),
``python benchmarks/text_classification.py learning`` (every phrase, 10 epochs, 2 CPUs
shared with two other single-core jobs, load average 3.8-4.6):

    SST-2 test accuracy      kmeans 0.8166 (6.9 min)  dynamic 0.8182 (8.1 min)  linear 0.8051 (7.9 min)

and ``throughput --jit off`` on a quiet machine (load average 0.6-0.8): kmeans,
ProjectedGRU, 369.1 samples/s (median of 3 x 50 steps, range 368.5-378.0), 1.9x the
192 target.

What moved the figures (same day, earlier versions): routing 4 capsules cut from every
token (512 per sentence) learned worse than the linear head (kmeans 0.5673, dynamic
0.6947, linear 0.7194); routing the 16 capsules of the masked mean, as the authors'
code does, fixed that. TensorFlow splitting every GRU step's small products over both
cores cost a third of the throughput (121 samples/s; one intra-op thread: 183), and
tf.data's autotuner made whole timed runs fall to exactly 146.7 samples/s about half
the time (``applications.distribute.pipeline_options`` turns it off).
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from applications import console  # noqa: E402  (sets the oneDNN default; loads no TensorFlow)
# TensorFlow loads in main, after the arguments: --help, a bad value
# and a missing data folder answer at once
from applications.arguments import non_negative_int, positive_float, positive_int, seed_int  # noqa: E402
from applications import sst_trees  # noqa: E402  (NumPy only)

# the application's choices and defaults (its options module loads no TensorFlow)
from applications.text_classification.options import EMBEDDINGS, GRUS, INTRA_OP_THREADS, ROUTINGS  # noqa: E402


def load_average():
    return "load average %.2f, %.2f, %.2f" % os.getloadavg()


def embedding_report(vocab_size=60000, num_classes=4):
    from applications.text_classification import model as model_lib

    report = model_lib.parameter_report(vocab_size, num_classes)
    comp, std = report["compositional"]["embedding"], report["standard"]["embedding"]
    print(
        f"embedding parameters, V={vocab_size:,}, D=64, M=8: compositional {comp:,} vs "
        f"standard {std:,} ({100 * (1 - comp / std):.1f}% fewer); whole model "
        f"{report['compositional']['total']:,} vs {report['standard']['total']:,}"
    )
    return report


def learning(args):
    from applications.text_classification import recipe
    from keras_capsules.callbacks import TimeBudget

    embedding_report()
    results = {}
    for routing in args.routings:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            result = recipe.train(
                dataset="sst2",
                data_dir=args.data_dir,
                run_dir=run_dir,
                routing=routing,
                embedding=args.embedding,
                epochs=args.epochs,
                batch_size=30,
                phrases=not args.sentences,
                seed=args.seed,
                callbacks=[TimeBudget(args.minutes * 60)],
                verbose=args.verbose,
            )
        seconds = time.perf_counter() - start
        results[routing] = result["test_accuracy"]
        print(
            f"SST-2 test accuracy, {routing:7s} routing, {args.embedding} embedding: {result['test_accuracy']:.4f} after "
            f"{result['epochs_run']} epoch(s), {seconds / 60:.1f} min; {load_average()}",
            flush=True,
        )
    return results


def throughput(args):
    import keras
    import tensorflow as tf

    from applications import distribute
    from applications.text_classification import model as model_lib

    batch, length, vocab, classes = 30, 128, 60000, 4
    rng = np.random.default_rng(0)
    ids = tf.constant(rng.integers(1, vocab, (batch, length)), tf.int32)
    labels = tf.constant(rng.integers(0, classes, batch), tf.int32)
    # The applications' pipeline options (tf.data's autotuner off, see distribute.pipeline_options).
    dataset = tf.data.Dataset.from_tensors((ids, labels)).repeat().with_options(distribute.pipeline_options())
    jits = {"both": (False, True), "on": (True,), "off": (False,)}[args.jit]
    results = {}
    grus = GRUS if args.gru == "both" else (args.gru,)
    for routing in args.routings:
        for gru in grus:
            for jit in jits:
                keras.utils.set_random_seed(0)
                model = model_lib.compile_model(
                    model_lib.build_model(vocab, classes, routing=routing, gru=gru), jit_compile=jit
                )
                model.fit(dataset, steps_per_epoch=args.warmup, epochs=1, verbose=0, shuffle=False)  # trace / compile
                rates = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0, shuffle=False)
                    rates.append(args.steps * batch / (time.perf_counter() - start))
                rate = float(np.median(rates))
                results[(routing, gru, jit)] = rate
                print(
                    f"training throughput, {routing:7s} routing, {gru:9s} GRU, jit_compile={str(jit):5s}: "
                    f"{rate:7.1f} samples/s median of {args.repeats} x {args.steps} steps "
                    f"(range {min(rates):.1f}-{max(rates):.1f}; batch {batch}, length {length}, "
                    f"{vocab:,} ids, {classes} classes); {load_average()}",
                    flush=True,
                )
                del model
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", nargs="?", default="all", choices=("learning", "throughput", "all"))
    parser.add_argument("--routings", nargs="+", default=None, choices=ROUTINGS,
                        help="default: all three for learning, kmeans for throughput")
    parser.add_argument("--data-dir", default=str(sst_trees.default_data_dir()), help="SST tree-file folder")
    parser.add_argument("--minutes", type=positive_float, default=15.0, help="training budget per model")
    parser.add_argument("--epochs", type=positive_int, default=10)
    parser.add_argument("--embedding", default="compositional", choices=EMBEDDINGS,
                        help="learning: the embedding of all three models")
    parser.add_argument("--sentences", action="store_true",
                        help="train on the training sentences only (default: on every labelled phrase "
                        "of the training trees, as SST-2/R is usually trained)")
    parser.add_argument("--steps", type=positive_int, default=50, help="timed training steps per repeat")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed repeats (the median is reported)")
    parser.add_argument("--warmup", type=non_negative_int, default=3, help="untimed steps (tracing, XLA)")
    parser.add_argument("--jit", default="both", choices=("both", "on", "off"))
    parser.add_argument("--gru", default="projected", choices=(*GRUS, "both"),
                        help="GRU implementation (default: ProjectedGRU, the model's default)")
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--verbose", type=non_negative_int, default=2, help="Keras fit verbosity")
    parser.add_argument("--intra-op-threads", type=non_negative_int, default=INTRA_OP_THREADS,
                        help="threads inside one TensorFlow op, 0: all cores (default: the "
                        "application's, %(default)s)")
    args = parser.parse_args(argv)
    if args.part in ("learning", "all"):
        # before the throughput part's minutes of work: a missing folder failed only after them
        sst_trees.require_split_files(args.data_dir)
    # without TensorFlow's start-up lines that ask nothing (no CUDA driver, ...); importing
    # applications set keras_capsules' runtime default (oneDNN) before TensorFlow loads
    console.load_tensorflow_quietly()
    import keras
    import tensorflow as tf

    from applications import distribute

    distribute.set_intra_op_threads(args.intra_op_threads)  # before the first op
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}; intra-op threads "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'all'}; {load_average()}", flush=True)
    routings = args.routings
    if args.part in ("throughput", "all"):
        args.routings = routings or ["kmeans"]
        throughput(args)
    if args.part in ("learning", "all"):
        args.routings = routings or list(ROUTINGS)
        learning(args)
    return 0


if __name__ == "__main__":
    # a user error (missing data, a bad value) is one line, as under `keras-capsules bench`
    from applications.errors import run_main

    sys.exit(run_main(main, "text_classification.py"))
