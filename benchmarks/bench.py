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

def _lazy(build):
    """A callable that builds its step on the first call (the untimed warm-up), so a process
    imports only the framework whose entry it times."""
    step = []

    def run():
        if not step:
            step.append(build())
        return step[0]()
    return run


def _attention_data(b, h, L, d):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, h, L, d)).astype(np.float32) for _ in range(4)]  # q, k, v, output weights


def w_attention_train(device, b=1, h=8, L=2048, d=64):
    """Causal attention forward + backward (d query, d key, d value of sum(w * attention)) at a long
    sequence: the CPU runs the blocked forward and gradient kernels; torch's SDPA and autograd beside it."""
    def mpsgraph_step():
        g = mg.Graph()
        q, k, v, w = (g.placeholder((b, h, L, d), mg.float32) for _ in range(4))
        y = g.scaled_dot_product_attention(q, k, v, causal=True)
        grads = g.gradients(g.reduction_sum(y * w, axes=[0, 1, 2, 3]), [q, k, v])
        exe = g.compile({t: ((b, h, L, d), mg.float32) for t in (q, k, v, w)}, [grads[t] for t in (q, k, v)],
                        device=device)
        tds = [mg.TensorData(a) for a in _attention_data(b, h, L, d)]
        return lambda: exe.run(tds)

    def torch_step():
        import torch
        q, k, v, w = (torch.from_numpy(a) for a in _attention_data(b, h, L, d))
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))

        def step():
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return torch.autograd.grad((y * w).sum(), [q, k, v])
        return step

    return ({"mpsgraph": _lazy(mpsgraph_step), "torch": _lazy(torch_step)},
            f"causal attention fwd+bwd (B, H, L, D) = {(b, h, L, d)} float32")


WORKLOADS = {"attention_train": w_attention_train}


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
