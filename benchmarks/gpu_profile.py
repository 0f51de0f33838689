"""Where a GPU workload's time goes, kernel by kernel, for mpsgraph and its peers.

    python benchmarks/gpu_profile.py resnet18_b256_f16 [--frameworks mpsgraph torch.compile] [--runs 5]

Takes a workload of benchmarks/gpu.py and records its kernels through CUPTI (torch.profiler),
which sees every kernel on the device: mpsgraph's generated ones (all named `k`, so they are
grouped by name and grid), cuDNN's and cuBLAS's, inside CUDA graphs too. Prints, per framework,
the GPU time per run and its largest kernel groups; `--json` keeps them.
"""
import argparse
import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu  # noqa: E402


def kernel_groups(trace_path, runs, by_grid=False):
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    groups = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        cat = e.get("cat", "")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or "dur" not in e:
            continue
        name = e.get("name", "?")
        if len(name) > 100:
            name = name[:97] + "..."
        grid = e.get("args", {}).get("grid")
        key = f"{name} grid={grid}" if name == "k" or by_grid or cat != "kernel" else name
        groups[key][0] += e["dur"] / runs
        groups[key][1] += 1
    return {k: {"us_per_run": round(v[0], 2), "calls_per_run": v[1] / runs} for k, v in groups.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=sorted(gpu.WORKLOADS))
    ap.add_argument("--frameworks", nargs="*", default=["mpsgraph", "torch.compile"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--grid", action="store_true", help="group every kernel by name and grid, not only `k`")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch, jax = gpu._torch(), gpu._jax()
    if torch is None:
        sys.exit("gpu_profile needs PyTorch with CUDA (its profiler records the kernels)")
    from torch.profiler import ProfilerActivity, profile
    desc, fns = gpu.WORKLOADS[a.workload](torch, jax if "jax" in a.frameworks else None)
    print(desc)
    out = {"workload": a.workload, "description": desc, "frameworks": {}}
    for fw in a.frameworks:
        if fw not in fns:
            print(f"== {fw}: not in this workload")
            continue
        fn, _ = fns[fw]
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.runs):
                fn()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            groups = kernel_groups(path, a.runs, a.grid)
        total = sum(g["us_per_run"] for g in groups.values())
        print(f"== {fw}: {total:.0f} us of GPU work per run, {sum(g['calls_per_run'] for g in groups.values()):.0f} kernels")
        for k, g in sorted(groups.items(), key=lambda kv: -kv[1]["us_per_run"])[:a.top]:
            print(f"{g['us_per_run']:10.1f} us {g['us_per_run'] / max(total, 1e-9) * 100:5.1f}% {g['calls_per_run']:6.1f}x  {k}")
        out["frameworks"][fw] = {"us_per_run": total, "kernels": groups}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
