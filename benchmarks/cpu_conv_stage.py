"""One CPU convolution alone, or a stage of MobileNetV2's inverted-residual blocks, timed by
mpsgraph and (for the stage) ONNX Runtime in one process, each at the same thread count:

    python benchmarks/cpu_conv_stage.py layer 1 384 14 64 --threads 1     # a 1x1 layer: N C H O
    MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS=0 python benchmarks/cpu_conv_stage.py layer 1 384 14 64 --threads 1
    python benchmarks/cpu_conv_stage.py stage 1 64 14 384 --blocks 4 --threads 2   # N C H expansion
    python benchmarks/cpu_conv_stage.py stage 1 64 14 384 --steps       # and mpsgraph's time per step
    python benchmarks/cpu_conv_stage.py layer 1 384 14 64 --producer    # source written by a step first

`layer`: a 1x1 convolution of an N x C x H x H source to O channels (constant weights), median
µs per run and GFLOP/s; with --producer, the convolution's time per step (profiled) when its
source is written by an elementwise step of the same run (relu(x * 1.5), split over the
threads as such steps are) and when it reads the run's input while that step still runs.
`stage`: `blocks` blocks of C -> E 1x1 + ReLU6, 3x3 depthwise + ReLU6, E -> C 1x1 + the
residual, built as one ONNX model, so both frameworks run the same graph; prints both medians
and their ratio (ONNX Runtime's time over mpsgraph's: above 1 mpsgraph is faster), with
--steps mpsgraph's profiled time per step as well. Switches are read at compile, so compare
settings in separate processes, alternated. Nothing here is a test: speed is never asserted."""
import argparse
import os
import sys

import numpy as np

import mpsgraph as mg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import median_time  # noqa: E402  (the timing loop of the scripts beside bench.py)


def median_us(fn, runs):
    return median_time(fn, runs, warmup=30) * 1e6


def step_us(exe, feeds, runs, name):
    """mpsgraph's profiled time per run of the steps whose key starts with `name` (every step: "")."""
    tds = [mg.TensorData(f) for f in feeds]
    for _ in range(20):
        exe.run(tds)
    with mg.profiler.profile() as prof:
        for _ in range(runs):
            exe.run(tds)
    return {k: sec / calls * 1e6 for k, (sec, calls) in prof.steps.items() if k.startswith(name) and calls}


def producer(a, x, w):
    for src in ("written by the step before", "the run's input"):
        g = mg.Graph()
        p = g.placeholder(x.shape, mg.float32)
        h = g.relu(p * g.constant(np.float32(1.5)))
        y = g.convolution(h if src.startswith("written") else p, g.constant(w), strides=1, padding=0)
        exe = g.compile({p: x}, [y, h], device="cpu")
        for _ in range(a.rounds):
            us = sum(step_us(exe, [x], a.runs, "convolution").values())
            print(f"layer {a.n}x{a.c}x{a.h}x{a.h} -> {a.o}, {a.threads} thread(s), source {src}: {us:.1f} us a step")


def layer(a):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.n, a.c, a.h, a.h)).astype(np.float32)
    w = (rng.standard_normal((a.o, a.c, 1, 1)) * 0.1).astype(np.float32)
    if a.producer:
        return producer(a, x, w)
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float32)
    y = g.convolution(p, g.constant(w), strides=1, padding=0)
    exe = g.compile({p: x}, [y], device="cpu")
    td = mg.TensorData(x)
    got = np.asarray(exe.run([td])[0])
    np.testing.assert_allclose(got, np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x), rtol=1e-4, atol=1e-3)
    for _ in range(a.rounds):
        us = median_us(lambda: exe.run([td]), a.runs)
        print(f"layer {a.n}x{a.c}x{a.h}x{a.h} -> {a.o}, {a.threads} thread(s): {us:.1f} us, "
              f"{2 * a.n * a.c * a.h * a.h * a.o / us / 1e3:.1f} GFLOP/s")


def stage_model(n, c, h, e, blocks):
    import onnx
    import onnx.helper as oh

    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(np.array(0, np.float32), "lo"),
             onnx.numpy_helper.from_array(np.array(6, np.float32), "hi")]

    def weight(name, shape):
        scale = 1 / np.sqrt(np.prod(shape[1:]))
        inits.append(onnx.numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    nodes, cur = [], "x"
    for b in range(blocks):
        nodes += [oh.make_node("Conv", [cur, weight(f"we{b}", (e, c, 1, 1)), weight(f"be{b}", (e,))], [f"e{b}"]),
                  oh.make_node("Clip", [f"e{b}", "lo", "hi"], [f"er{b}"]),
                  oh.make_node("Conv", [f"er{b}", weight(f"wd{b}", (e, 1, 3, 3)), weight(f"bd{b}", (e,))], [f"d{b}"],
                               group=e, pads=[1] * 4, kernel_shape=[3, 3]),
                  oh.make_node("Clip", [f"d{b}", "lo", "hi"], [f"dr{b}"]),
                  oh.make_node("Conv", [f"dr{b}", weight(f"wp{b}", (c, e, 1, 1)), weight(f"bp{b}", (c,))], [f"p{b}"]),
                  oh.make_node("Add", [f"p{b}", cur], [f"o{b}"])]
        cur = f"o{b}"
    graph = oh.make_graph(nodes, "stage", [oh.make_tensor_value_info("x", 1, [n, c, h, h])],
                          [oh.make_tensor_value_info(cur, 1, [n, c, h, h])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


def stage(a):
    import onnxruntime as ort

    data = stage_model(a.n, a.c, a.h, a.o, a.blocks)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    exe = mg.onnx.load(data).compile(device="cpu")
    x = np.random.default_rng(1).standard_normal((a.n, a.c, a.h, a.h)).astype(np.float32)
    td = mg.TensorData(x)
    np.testing.assert_allclose(np.asarray(exe.run([td])[0]), sess.run(None, {"x": x})[0], rtol=1e-3, atol=1e-2)
    for _ in range(a.rounds):
        ours = median_us(lambda: exe.run([td]), a.runs)
        theirs = median_us(lambda: sess.run(None, {"x": x}), a.runs)
        print(f"stage of {a.blocks} blocks {a.c}->{a.o}->{a.c} at {a.h}x{a.h}, batch {a.n}, {a.threads} thread(s): "
              f"mpsgraph {ours:.1f} us, ONNX Runtime {theirs:.1f} us, ratio {theirs / ours:.2f}")
    if a.steps:  # node number order: expansion, depthwise, projection, block after block
        steps = step_us(exe, [x], a.runs, "")
        for k in sorted(steps, key=lambda k: int(k.split(":")[0].rsplit("_", 1)[1])):
            print(f"  {k.split(':')[0]:<18} {steps[k]:7.1f} us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["layer", "stage"])
    ap.add_argument("n", type=int)
    ap.add_argument("c", type=int)
    ap.add_argument("h", type=int)
    ap.add_argument("o", type=int, help="layer: output channels; stage: the expansion's channels")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", action="store_true", help="stage: mpsgraph's profiled time per step too")
    ap.add_argument("--producer", action="store_true", help="layer: the source written by a step first, or not")
    a = ap.parse_args()
    mg.set_num_threads(a.threads)
    (layer if a.what == "layer" else stage)(a)


if __name__ == "__main__":
    main()
