"""Learning benchmark: MAC on Sort-of-CLEVR with the symbolic knowledge base.

Three models on the same generated data (``applications.sort_of_clevr``, all seven
question types, two-hop included), each trained for the same wall-time budget:

* MAC with ``p = 4`` reasoning steps;
* MAC with ``p = 1`` (one read: relational questions need more);
* a non-MAC baseline: question LSTM, the object list flattened, an MLP on both.

Training: batches of 64 generated on the fly, Adam with gradient clipping (norm 8)
and an EMA of the weights (``applications.clevr.compile_model``, momentum 0.99);
``d = 64`` and a learning rate of 3e-3 by default here (the paper's ``d = 512`` and
1e-4 are for CLEVR's 700k questions and hours of GPU time; on this CPU the small
model runs ~4x more steps in the same time). Evaluation: EMA weights, on fixed held-out sets of non-relational and
relational questions, reported separately.

Targets: MAC p=4 >= 98% non-relational and >= 90% relational, beating p=1 by >= 15
points on relational, within 20 minutes on a 2-core CPU (``--minutes 20``: about 6.5
minutes per model).

Usage (from the repository root):

    python benchmarks/sort_of_clevr.py [--minutes 20] [--models mac4,mac1,baseline]

Prints a table (accuracies, steps, seconds per model) and the machine load.

Short runs on a shared 2-core CPU (load average 8-12), 2026-11-21 (test sets of
1,000 questions each):

    --minutes 9, d=128, lr 1e-3 (3 min per model):
         mac4: non-relational 0.601  relational 0.683  (1512 steps)
         mac1: non-relational 0.658  relational 0.705  (3882 steps)
     baseline: non-relational 0.814  relational 0.698  (6222 steps)
    --minutes 5 --models mac4, d=64, lr 3e-3 (the defaults now):
         mac4: non-relational 0.988  relational 0.748  (8276 steps)

The targets were not reached in these short runs.

The full run with the defaults (``python benchmarks/sort_of_clevr.py``: 20 minutes,
400 s per model, 2026-11-23, TensorFlow's oneDNN off, load average ~5 on 2 CPUs):

         mac4: non-relational 0.994  relational 0.756  (10917 steps)
         mac1: non-relational 0.809  relational 0.749  (16222 steps)
     baseline: non-relational 0.642  relational 0.685  (25689 steps)

Non-relational is met (>= 0.98); relational (>= 0.90, and p=4 15 points above p=1)
is not: p=4 leads p=1 by under a point.

Why, and the fix: the read unit scores an object with a bilinear form of the memory
and the object, so on the raw coordinates an object's score is linear in its
position and "the object nearest to the one in memory" cannot be expressed
(farthest only roughly). ``applications.sort_of_clevr.CoordinateEncoding`` appends
unit-norm sines and cosines of the coordinates (4 frequencies from pi/2, the MAC
paper's positional scheme applied to object positions), and cos(w (p - q)) is then a
bilinear form of two objects' channels. By question type after 10,000 steps (mac4,
one core, ``--coordinate-frequencies`` 0 / 4 unscaled / 4 unit-norm):

    closest 0.650 / 0.838 / 0.870   farthest 0.686 / 0.954 / 0.928
    count   1.000 / 0.840 / 0.998   two-hop  0.700 / 0.714 / 0.718

The learning rate now decays linearly over each model's time budget to 5% of its
start (``keras_capsules.callbacks.BudgetLinearDecay``; ``--final-lr-fraction 1``
keeps it constant, as before). Every run of the current code, 2026-11-23, each
pinned to one core with ``taskset -c 0`` while another job used the other (load
average 2-3 on 2 CPUs); relational accuracy, steps in brackets:

    run                                 mac4           mac1           baseline
    constant lr, seed 0, 400 s/model    0.914 (15784)  0.759 (16469)  0.702 (22797)
    constant lr, seed 1, 400 s/model    0.873 (13110)  -              -
    decay, seed 1, 400 s (mac4 only)    0.925 (12660)  -              -
    decay, seed 0, 400 s/model          0.913 (12614)  0.766 (12977)  0.703 (16927)
    decay, seed 0, 600 s/model          0.896 (18752)  0.754 (22386)  -
      (the same as ``--minutes 30``; the baseline run was stopped)

Non-relational: mac4 0.996-1.000, mac1 0.83-1.00, baseline 0.65 in every run.

Verdict: non-relational >= 0.98 is met in every run. Relational >= 0.90 is met in
4 of 5 mac4 runs (0.873-0.925), and the lead over p=1 is 14.2-15.5 points, so the
">= 15 points" target is met in one run of three: the targets are at the edge of
what this model reaches in this time, not reliably met. By type (first table) the
two-hop question (nearest to the farthest: ~0.72) and "closest" (which must skip
the object itself: ~0.87) hold the relational mean back.

More steps, same model (2026-11-23 evening). Profiling a mac4 step on one core showed
two fifths of its CPU time in the input pipeline: ``tf.data.Dataset.from_generator``
yielded one example at a time (37.8 CPU-ms per step against 22.1 on a fixed batch).
``make_dataset`` now yields whole batches from Python (the same examples in the same
order), 22.5 CPU-ms per step, and the benchmark XLA-compiles the training step
(``--jit``, default on; Keras' ``"auto"`` leaves XLA off on CPUs), 18.8. So a model
now runs about twice the steps in its 400 s. At a fixed number of steps (a one-off
script, not kept: mac4 d=64, lr 3e-3 decaying
linearly to 5% over them, one seed, runs sharing the machine) relational accuracy
grows with steps, and two-hop is learned last:

    steps   closest  farthest  count  two-hop  relational
     8000   0.668    0.758     0.999  0.686    0.768
    16000   0.933    0.969     1.000  0.699    0.882
    24000   0.966    0.988     1.000  0.695    0.900
    16000 with MACNetwork(memory_gate=True): 0.974 0.990 1.000 0.721, 0.898

The full benchmark with the defaults (``python benchmarks/sort_of_clevr.py``, unpinned,
20 minutes, 400 s per model; load average 1.8-3.9 on 2 CPUs, other jobs running):

    seed 0   mac4      non-relational 0.998  relational 0.929  (22202 steps)
               closest 0.974, farthest 0.986, count 1.000, two-hop 0.794
             mac1      non-relational 0.995  relational 0.757  (29613 steps)
             baseline  non-relational 0.649  relational 0.705  (47287 steps)
    seed 1   mac4      non-relational 0.999  relational 0.962  (27820 steps)
               closest 0.972, farthest 0.988, count 1.000, two-hop 0.924
             mac1      non-relational 0.998  relational 0.756  (37973 steps)
             baseline  non-relational 0.646  relational 0.713  (47109 steps)

Targets (>= 0.98 non-relational, >= 0.90 relational, >= 15 points over p=1): met in
both runs (leads of 17.2 and 20.6 points).

Re-run 2026-11-24 on the next session's clean checkout, defaults (seed 0), pinned to
one core (``taskset -c 0 python benchmarks/sort_of_clevr.py``) while two other
single-core jobs shared the other core (load average 3.9-4.0 on 2 CPUs):

    mac4      non-relational 1.000  relational 0.971  (25560 steps)
                closest 0.982, farthest 0.988, count 1.000, two-hop 0.908
    mac1      non-relational 1.000  relational 0.760  (32811 steps)
    baseline  non-relational 0.732  relational 0.750  (41446 steps)

Targets met again: p=4 leads p=1 by 21.1 points on relational questions.
"""

import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from applications import console  # noqa: E402  (sets the oneDNN default; loads no TensorFlow)
# TensorFlow loads in main, after the arguments: --help and a bad value
# answer at once
from applications.arguments import fraction, non_negative_int, positive_float, positive_int, seed_int  # noqa: E402


TYPE_NAMES = {3: "closest", 4: "farthest", 5: "count", 6: "two-hop"}


def build_baseline(units=128, embedding_dim=64, name="lstm_mlp_baseline"):
    """Question LSTM + MLP over the concatenated object features (no attention)."""
    import keras

    from applications import sort_of_clevr as soc

    tokens = keras.Input((None,), dtype="int32", name="question")
    objects = keras.Input((soc.NUM_OBJECTS, soc.KB_DIM), name="kb")
    x = keras.layers.Embedding(len(soc.VOCAB), embedding_dim, mask_zero=True)(tokens)
    question = keras.layers.LSTM(units)(x)
    x = keras.layers.Concatenate()([question, keras.layers.Flatten()(objects)])
    for _ in range(3):
        x = keras.layers.Dense(2 * units, activation="relu")(x)
    logits = keras.layers.Dense(len(soc.ANSWERS), name="answer")(x)
    return keras.Model({"question": tokens, "kb": objects}, logits, name=name)


def build(name, units, coordinate_frequencies=4):
    from applications import sort_of_clevr as soc

    if name == "baseline":
        return build_baseline(units)
    return soc.build_model(units=units, max_steps=int(name[3:]), name=name,
                           coordinate_frequencies=coordinate_frequencies)


def run(name, seconds, test_sets, units=64, batch_size=64, learning_rate=3e-3, ema_momentum=0.99, seed=0,
        coordinate_frequencies=4, final_lr_fraction=None, jit_compile=True, verbose=2):
    import keras

    from applications import clevr
    from applications import sort_of_clevr as soc
    from keras_capsules.callbacks import BudgetLinearDecay, TimeBudget

    keras.utils.set_random_seed(seed)
    model = clevr.compile_model(build(name, units, coordinate_frequencies), learning_rate,
                                ema_momentum=ema_momentum)
    model.jit_compile = jit_compile  # Keras' "auto" leaves XLA off on CPUs
    budget = TimeBudget(seconds)
    callbacks = [budget]
    if final_lr_fraction is not None:
        callbacks.append(BudgetLinearDecay(budget, final_lr_fraction))
    start = time.time()
    model.fit(soc.make_dataset(batch_size, seed=seed), steps_per_epoch=100, epochs=100_000,
              verbose=verbose, callbacks=callbacks, shuffle=False)  # EMA weights are in the model after fit
    train_time = time.time() - start
    result = {"model": name, "steps": budget.steps, "seconds": round(train_time),
              "parameters": model.count_params()}
    for kind, (x, y) in test_sets.items():
        result[kind] = model.evaluate(x, y, batch_size=500, verbose=0)[1]
    for template in soc.RELATIONAL:  # which relational questions hold the mean back
        x, y = soc.generate_examples(500, seed=20_000 + template, templates=[template])
        result[f"type {template}"] = model.evaluate(x, y, batch_size=500, verbose=0)[1]
    return result


def model_names(text):
    """``--models``: comma-separated ``baseline`` or ``macN`` (a MAC network of N >= 1
    steps), checked before any training (a bad last name failed after the others had
    trained)."""
    names = text.split(",")
    for name in names:
        steps = name[3:] if name.startswith("mac") else ""
        if name != "baseline" and not (steps.isdigit() and int(steps) >= 1):
            raise argparse.ArgumentTypeError(
                f"each model is baseline or macN with N >= 1 steps, comma-separated "
                f"(e.g. mac4,mac1,baseline); received {name!r} in {text!r}"
            )
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=positive_float, default=20.0, help="total training time budget")
    parser.add_argument("--models", type=model_names, default="mac4,mac1,baseline",
                        help="comma-separated baseline or macN (N reasoning steps)")
    parser.add_argument("--units", type=positive_int, default=64)
    parser.add_argument("--learning-rate", type=positive_float, default=3e-3)
    parser.add_argument("--test-examples", type=positive_int, default=1000, help="per kind")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the weights and the training stream")
    parser.add_argument("--coordinate-frequencies", type=non_negative_int, default=4,
                        help="MAC's symbolic KB: sin/cos frequencies per coordinate (0: raw x, y)")
    parser.add_argument("--final-lr-fraction", type=fraction, default=0.05,
                        help="decay the learning rate linearly over each model's time budget to this "
                             "fraction of --learning-rate (1: constant)")
    parser.add_argument("--jit", default="on", choices=("on", "off"),
                        help="XLA-compile the training step (default on: ~1.2x the steps on a CPU)")
    parser.add_argument("--verbose", type=non_negative_int, default=2,
                        help="Keras fit verbosity (2: a line per 100 steps; 0: silent)")
    args = parser.parse_args(argv)
    # without TensorFlow's start-up lines that ask nothing (no CUDA driver, ...); importing
    # applications set keras_capsules' runtime default (oneDNN) before TensorFlow loads
    console.load_tensorflow_quietly()
    from applications import sort_of_clevr as soc

    models = args.models
    test_sets = {
        "non_relational": soc.generate_examples(args.test_examples, seed=10_001, relational=False),
        "relational": soc.generate_examples(args.test_examples, seed=10_002, relational=True),
    }
    seconds = 60 * args.minutes / len(models)
    print(f"{len(models)} models, {seconds:.0f} s of training each")
    results = []
    for name in models:
        results.append(run(name, seconds, test_sets, args.units, learning_rate=args.learning_rate,
                           coordinate_frequencies=args.coordinate_frequencies, seed=args.seed,
                           final_lr_fraction=args.final_lr_fraction, jit_compile=args.jit == "on",
                           verbose=args.verbose))
        r = results[-1]
        print(f"{r['model']:>9}: non-relational {r['non_relational']:.3f}  relational "
              f"{r['relational']:.3f}  ({r['steps']} steps, {r['seconds']} s, {r['parameters']:,} params)",
              flush=True)
        print("           relational by type: " + ", ".join(
            f"{TYPE_NAMES[t]} {r[f'type {t}']:.3f}" for t in soc.RELATIONAL), flush=True)
    print("load average (1, 5, 15 min):", " ".join(f"{v:.2f}" for v in os.getloadavg()))
    return results


if __name__ == "__main__":
    # a user error (missing data, a bad value) is one line, as under `keras-capsules bench`
    from applications.errors import run_main

    sys.exit(run_main(main, "sort_of_clevr.py"))
