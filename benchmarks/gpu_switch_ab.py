"""mpsgraph alone on one of benchmarks/gpu.py's network workloads, with an environment switch on
and off, each setting in its own process (switches are read once per process or per compile),
the settings alternated over rounds:

    python benchmarks/gpu_switch_ab.py MPSGRAPH_CUDA_CUDNN_FUSION --rounds 3 \\
        --nets "resnet18 256 float16" "resnet18 256 float16 NHWC" "mobilenet_v2 256 float16"
    python benchmarks/gpu_switch_ab.py MPSGRAPH_CUDA_BATCH_LANDINGS --nets --workloads mlp_b128 mlp_b8192

Prints one line per process: workload, setting, median µs per call (gpu.per_call). `--nets`
with no value times the named workloads only."""
import argparse
import os
import subprocess
import sys


def child(net, batch=None, dtype=None, layout=None):
    """net: a network (with batch, dtype, layout), or any of gpu.py's workload names alone."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch

    import gpu
    make = gpu.WORKLOADS[net] if batch is None else gpu.w_convnet(net, int(batch), dtype, layout)
    _, fns = make(torch, None)
    fn, sync = fns["mpsgraph"]
    return gpu.per_call(fn, sync) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("switch", help="environment variable set to 1, then 0")
    ap.add_argument("--nets", nargs="*", default=["resnet18 256 float16"],
                    help='"net batch dtype [NCHW|NHWC]" (net: resnet18 or mobilenet_v2)')
    ap.add_argument("--workloads", nargs="*", default=[], help="gpu.py workload names (e.g. mlp_b128), timed too")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(f"{child(*a.child):.1f}")
        return
    for r in range(a.rounds):
        for value in ("1", "0"):
            for spec in a.nets + a.workloads:
                parts = spec.split() + ([] if spec in a.workloads else ["NCHW"])
                env = dict(os.environ, **{a.switch: value})
                out = subprocess.run([sys.executable, __file__, a.switch, "--child", *parts[:4]], env=env,
                                     capture_output=True, text=True)
                if out.returncode == 0 and out.stdout.strip():
                    result = out.stdout.strip().splitlines()[-1] + " us"
                else:
                    result = "failed: " + (out.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"round {r + 1}  {' '.join(parts[:4]):32} {a.switch}={value}  {result}", flush=True)


if __name__ == "__main__":
    main()
