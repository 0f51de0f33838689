"""Developer entry of the benchmark harness; the harness and its workloads live in the package
(python/mpsgraph/bench/), installed with it:

    python -m mpsgraph.bench --help
    python benchmarks/bench.py --all --time-box 1        # the same, plus the workloads below

A workload is best added to python/mpsgraph/bench/workloads.py (one builder per peer, each run
in that peer's own process). One being tried out can go here in the older form, a function
w(device) -> ({framework: callable}, description) entered in WORKLOADS: each framework's
process calls it and times its own entry ("mpsgraph", "numpy", "torch", "jax")."""
import statistics
import sys
import time

import numpy as np  # noqa: F401  (for workloads written here)

import mpsgraph as mg  # noqa: F401
from mpsgraph.bench import environment, main  # noqa: F401  (environment: for scripts beside this one)

WORKLOADS = {}


def time_runs(fn, repeat, warmup=3):
    """(median, min, max) of `repeat` timed calls after `warmup` untimed ones, in this process
    (for scripts beside this one; the harness times each framework in its own process)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def median_time(fn, repeat, warmup=3):
    return time_runs(fn, repeat, warmup)[0]


if __name__ == "__main__":
    sys.exit(main(modules=[__file__]))
