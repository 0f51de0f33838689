"""Developer entry of the benchmark harness; the harness and its workloads live in the package
(python/mpsgraph/bench/), installed with it:

    python -m mpsgraph.bench --help
    python benchmarks/bench.py --all --time-box 1        # the same, plus the workloads below

A workload is best added to python/mpsgraph/bench/workloads.py (one builder per peer, each run
in that peer's own process). One being tried out can go here in the older form, a function
w(device) -> ({framework: callable}, description) entered in WORKLOADS: each framework's
process calls it and times its own entry ("mpsgraph", "numpy", "torch", "jax")."""
import sys

import numpy as np  # noqa: F401  (for workloads written here)

import mpsgraph as mg  # noqa: F401
from mpsgraph.bench import main

WORKLOADS = {}


if __name__ == "__main__":
    sys.exit(main(modules=[__file__]))
