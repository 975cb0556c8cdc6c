"""Speed and memory of EMRouting at the paper's first-layer shapes.

Times one forward + backward pass (gradients of every output with respect to the
weights and inputs) and reports the peak resident memory above the baseline of the
process just before the first pass. Each configuration runs in a fresh subprocess so
that peaks do not mix.

    python benchmarks/em_routing.py                      # all shapes, both algorithms, XLA on and off
    python benchmarks/em_routing.py --shape smallnorb --algorithm auto --jit on

Shapes (Heinsen 2019):
    smallnorb: batch 4, 5184 input capsules of 4x4 (variable n_inp), 64 outputs of 4x4
    sst:       batch 20, 280 input capsules of 1x64 (variable n_inp), 64 outputs of 1x2

For comparison, the author's PyTorch implementation needs about 2.0 s and 1.3 GiB above
its baseline for the smallNORB shape on a quiet 2-core machine of this project.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SHAPES = {
    "smallnorb": dict(batch=4, n_inp=5184, d_cov=4, d_inp=4, n_out=64, d_out=4),
    "sst": dict(batch=20, n_inp=280, d_cov=1, d_inp=64, n_out=64, d_out=2),
}
PYTORCH_REFERENCE = {"smallnorb": dict(seconds=2.0, peak_gib=1.3)}


def _rss_peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(shape, algorithm, jit, repeats):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np

    from keras_capsules.layers import EMRouting  # first: its TensorFlow runtime defaults
    import tensorflow as tf

    cfg = SHAPES[shape]
    rng = np.random.default_rng(0)
    a = tf.constant(rng.normal(size=(cfg["batch"], cfg["n_inp"])).astype("float32"))
    mu = tf.constant(
        rng.normal(size=(cfg["batch"], cfg["n_inp"], cfg["d_cov"], cfg["d_inp"])).astype("float32")
    )
    layer = EMRouting(cfg["n_out"], cfg["d_out"], algorithm=algorithm)
    layer.build([tuple(a.shape), tuple(mu.shape)])

    def step(a, mu):
        with tf.GradientTape() as tape:
            tape.watch([a, mu])
            a_out, mu_out, sig2_out = layer([a, mu])
            loss = tf.reduce_sum(a_out) + tf.reduce_sum(mu_out) + tf.reduce_sum(sig2_out)
        grads = tape.gradient(loss, layer.trainable_weights + [a, mu])
        return loss, grads

    step = tf.function(step, jit_compile=jit)
    baseline = _current_rss_bytes()
    t0 = time.perf_counter()
    out = step(a, mu)
    [g.numpy() for g in out[1]]
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = step(a, mu)
        [g.numpy() for g in out[1]]
        times.append(time.perf_counter() - t0)
    peak = _rss_peak_bytes() - baseline
    return {
        "shape": shape,
        "algorithm": layer.resolved_algorithm,
        "jit": jit,
        "median_s": float(np.median(times)),
        "min_s": float(np.min(times)),
        "first_call_s": first,
        "peak_above_baseline_gib": peak / 2**30,
    }


def _positive_int(text):
    # (applications.arguments.positive_int: not imported here, this process stays without TensorFlow)
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    parser.add_argument("--algorithm", choices=["auto", "votes", "moments", "all"], default="all")
    parser.add_argument("--jit", choices=["on", "off", "both"], default="both")
    parser.add_argument("--repeats", type=_positive_int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.shape, args.algorithm, args.jit == "on", args.repeats)))
        return 0

    shapes = list(SHAPES) if args.shape == "all" else [args.shape]
    algorithms = ["votes", "moments"] if args.algorithm == "all" else [args.algorithm]
    jits = ["off", "on"] if args.jit == "both" else [args.jit]
    print(f"load average before: {os.getloadavg()}")
    print(f"{'shape':10s} {'algorithm':9s} {'XLA':4s} {'median s':>9s} {'min s':>7s} {'peak GiB':>9s}  vs PyTorch reference")
    for shape in shapes:
        for algorithm in algorithms:
            for jit in jits:
                cmd = [sys.executable, __file__, "--worker", "--shape", shape, "--algorithm", algorithm,
                       "--jit", jit, "--repeats", str(args.repeats)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"{shape:10s} {algorithm:9s} {jit:4s} FAILED:\n{proc.stderr[-2000:]}")
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                ref = PYTORCH_REFERENCE.get(shape)
                versus = (
                    f"{ref['seconds'] / r['median_s']:.1f}x faster, {r['peak_above_baseline_gib'] / ref['peak_gib']:.2f}x the memory"
                    if ref else ""
                )
                print(f"{shape:10s} {r['algorithm']:9s} {jit:4s} {r['median_s']:9.4f} {r['min_s']:7.4f} "
                      f"{r['peak_above_baseline_gib']:9.3f}  {versus}")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
