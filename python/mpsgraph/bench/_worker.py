"""One (workload, peer) measurement in its own process: python -m mpsgraph.bench._worker reads a
JSON request on stdin and prints one result line, prefixed with RESULT_TAG, on stdout.
The parent sets the thread environment variables (OMP_NUM_THREADS, ...) before starting it."""
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback

RESULT_TAG = "@@mpsgraph-bench-result "


def load_modules(paths):
    """Imports extra workload files (e.g. benchmarks/bench.py) so that they register their workloads."""
    from .workloads import WORKLOADS, legacy
    for path in paths:
        name = "_bench_extra_" + os.path.splitext(os.path.basename(path))[0]
        if name in sys.modules:
            continue
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        for wname, fn in getattr(mod, "WORKLOADS", {}).items():
            if wname not in WORKLOADS and callable(fn):
                legacy(wname, fn)


def set_threads(peer, n):
    """The peer's own thread knob, besides the environment variables; returns what it reports."""
    if peer.startswith("mpsgraph"):
        import mpsgraph as mg
        mg.set_num_threads(n)
        return mg.get_num_threads()
    if peer.startswith("torch"):
        import torch
        torch.set_num_threads(n)
        return torch.get_num_threads()
    if peer == "numpy":
        try:
            from threadpoolctl import threadpool_limits
            threadpool_limits(n)
        except ImportError:
            pass
    return n


def peer_version(peer):
    mod = {"torch.compile": "torch", "onnxruntime": "onnxruntime", "mlx": "mlx.core"}.get(peer, peer.split()[0])
    try:
        return getattr(__import__(mod, fromlist=["_"]), "__version__", "")
    except ImportError:
        return ""


def measure(fn, time_box, min_iters, max_iters, warmup_s):
    """First-call time, then warm-up calls for warmup_s (at least two), then timed calls until
    time_box seconds have passed (at least min_iters, at most max_iters)."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    t0, n = time.perf_counter(), 0
    while n < 2 or (time.perf_counter() - t0 < warmup_s and n < max_iters):
        fn()
        n += 1
    times = []
    t0 = time.perf_counter()
    while len(times) < min_iters or (time.perf_counter() - t0 < time_box and len(times) < max_iters):
        a = time.perf_counter()
        fn()
        times.append(time.perf_counter() - a)
    return {"first_s": first, "warmup_iters": n, "n": len(times), "median_s": statistics.median(times),
            "min_s": min(times), "max_s": max(times), "mean_s": statistics.fmean(times)}


def run(req):
    from .workloads import WORKLOADS, Context, Skip
    load_modules(req.get("modules", []))
    w, peer = WORKLOADS[req["workload"]], req["peer"]
    out = {"workload": w.name, "peer": peer, "version": peer_version(peer), "pid": os.getpid()}
    try:
        out["threads"] = set_threads(peer, req["threads"])
        ctx = Context(peer, req["device"], req["threads"])
        t = time.perf_counter()
        fn = w.build(peer, ctx)
        out["setup_s"] = time.perf_counter() - t
        out.update(measure(fn, req["time_box"], req["min_iters"], req["max_iters"], req["warmup_s"]))
        out.update(ok=True, peer_device=ctx.peer_device if not peer.startswith("mpsgraph") else req["device"])
    except ImportError as e:
        out.update(ok=False, skipped=True, error=f"{e.name or e} not installed")
    except Skip as e:
        out.update(ok=False, skipped=True, error=str(e))
    except Exception as e:  # reported in the results, the run goes on
        out.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000], traceback=traceback.format_exc()[-4000:])
    out["description"] = w.desc
    return out


def main():
    req = json.loads(sys.stdin.read())
    res = run(req)
    sys.stdout.write("\n" + RESULT_TAG + json.dumps(res) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
