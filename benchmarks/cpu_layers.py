"""Per-layer CPU times of a harness network: mpsgraph's profiler against ONNX Runtime's, on the
same exported model and input, 2 threads each (or the third argument's), in one process (the
profilers' own overhead is in both columns):

    python benchmarks/cpu_layers.py mobilenet_v2 1          # or resnet18, small_cnn; batch
    python benchmarks/cpu_layers.py mobilenet_v2 1 1        # one thread each
    MPSGRAPH_CPU_PACKED_CHANNELS512=0 python benchmarks/cpu_layers.py resnet18 8

At a batch over 1 the CPU may run the network's front one image per thread: those layers show
one image's shapes and time (per image, each thread running one at a time), ONNX Runtime's the
batch's; `MPSGRAPH_CPU_IMAGE_SPLIT=0` compares layer for layer.

Convolutions are paired in order (mpsgraph's by node number, ONNX Runtime's by execution; ONNX
Runtime fuses each with its activation), each row naming the ONNX Runtime node: MobileNetV2
pairs throughout, while ResNet-18's shortcut convolutions run in another place in each order,
so check the names there. GFLOP/s is mpsgraph's: 2 * output elements * input channels per
group * kernel taps over its time."""
import collections
import json
import os
import re
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

import mpsgraph as mg
from mpsgraph.bench.workloads import _onnx_bytes


def ours(data, x, runs, threads):
    mg.set_num_threads(threads)
    exe = mg.onnx.load(data).compile(device="cpu")
    td = mg.TensorData(x)
    for _ in range(10):
        exe.run([td])
    with mg.profiler.profile() as p:
        for _ in range(runs):
            exe.run([td])
    convs, rest = [], []
    for key, (seconds, calls) in p.steps.items():
        m = re.match(r"(\w+?)_(\d+): ", key)
        us = seconds / calls * 1e6
        if m and m.group(1) == "convolution":
            shapes = re.findall(r"float32\(([^)]*)\)", key)
            convs.append((int(m.group(2)), us, shapes))
        else:
            rest.append((key.split(":")[0], us))
    return sorted(convs), rest


def theirs(data, x, runs, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.enable_profiling = threads, True
    with tempfile.TemporaryDirectory() as tmp:  # the profile file, not left in the working directory
        so.profile_file_prefix = os.path.join(tmp, "ort")
        s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            s.run(None, {"x": x})
        for _ in range(runs):
            s.run(None, {"x": x})
        with open(s.end_profiling()) as f:
            events = json.load(f)
    total, calls = collections.OrderedDict(), collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            total[e["name"]] = total.get(e["name"], 0) + e["dur"]
            calls[e["name"]] += 1
    return [(k[: -len("_kernel_time")], v / calls[k]) for k, v in total.items()]


def flops(shapes):
    w = [int(v) for v in shapes[1].split(", ")]
    out = np.prod([int(v) for v in shapes[-1].split(", ")])
    return 2 * out * w[1] * int(np.prod(w[2:]))


def main():
    net, batch = sys.argv[1], int(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    image = 64 if net == "small_cnn" else 224
    data = _onnx_bytes(net, batch, image)
    x = np.random.default_rng(0).standard_normal((batch, 3, image, image)).astype(np.float32)
    runs = 100 if batch == 1 else 20
    t0 = time.perf_counter()
    convs, rest = ours(data, x, runs, threads)
    ort_nodes = theirs(data, x, runs, threads)
    ort_convs = [(k, us) for k, us in ort_nodes if "Conv" in k or "Clip" in k or "Relu" in k]
    paired = len(ort_convs) == len(convs)
    steps = sum(c[1] for c in convs) + sum(r[1] for r in rest)
    print(f"{net} batch {batch}, {threads} threads: mpsgraph steps {steps:.0f} us, "
          f"ONNX Runtime nodes {sum(us for _, us in ort_nodes):.0f} us (per run)")
    print(f"{'conv':>5} {'mpsgraph us':>12} {'ORT us':>9} {'ours/ORT':>9} {'GFLOP/s':>8}  source -> weights; ORT node")
    for i, (n, us, shapes) in enumerate(convs):
        name, o = ort_convs[i] if paired else ("(unpaired)", float("nan"))
        print(f"{n:5d} {us:12.1f} {o:9.1f} {us / o:9.2f} {flops(shapes) / us / 1e3:8.0f}  "
              f"({shapes[0]}) -> ({shapes[1]}); {name.rsplit('/', 2)[-2] if '/' in name else name}")
    for name, us in rest:
        print(f"      mpsgraph {name}: {us:.1f} us")
    for name, us in ort_nodes:
        if (name, us) not in ort_convs:
            print(f"      ONNX Runtime {name}: {us:.1f} us")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
