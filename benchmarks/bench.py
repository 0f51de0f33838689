"""Developer entry of the benchmark harness; the harness and its workloads live in the package
(python/mpsgraph/bench/), installed with it:

    python -m mpsgraph.bench --help
    python benchmarks/bench.py --all --time-box 1        # the same, plus the workloads below

A workload is best added to python/mpsgraph/bench/workloads.py (one builder per peer, each run
in that peer's own process). One being tried out can go here in the older form, a function
w(device) -> ({framework: callable}, description) entered in WORKLOADS: each framework's
process calls it and times its own entry ("mpsgraph", "numpy", "torch", "jax")."""
import os
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


def _nhwc_block_data(n, hw, c):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
    w1, w2 = ((rng.standard_normal((3, 3, c, c)) / np.sqrt(9 * c)).astype(np.float32) for _ in range(2))
    return x, w1, w2, rng.random(c).astype(np.float32), rng.random(c).astype(np.float32)


def w_nhwc_block(device, n=8, hw=56, c=64):
    """A residual block built the MPSGraph way, NHWC with HWIO weights: conv3x3 + bias + relu,
    max pool 3x3/2, conv3x3 + bias + the pool's output, relu. Run it with
    MPSGRAPH_CPU_CHANNELS_FIRST=0 and =1 to see what the CPU's NHWC transposes cost; torch runs
    the same block in channels_last memory format."""
    def mpsgraph_step():
        x, w1, w2, b1, b2 = _nhwc_block_data(n, hw, c)
        g = mg.Graph()
        xp = g.placeholder(x.shape, mg.float32)
        h = g.relu(g.convolution_2d(xp, g.constant(w1), padding=[1] * 4) + g.constant(b1))
        p = g.max_pooling_2d(h, kernel_sizes=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])
        y = g.relu(g.convolution_2d(p, g.constant(w2), padding=[1] * 4) + g.constant(b2) + p)
        exe = g.compile({xp: (x.shape, mg.float32)}, [y], device=device)
        td = mg.TensorData(x)
        return lambda: exe.run([td])

    def torch_step():
        import torch
        import torch.nn.functional as F
        x, w1, w2, b1, b2 = (torch.from_numpy(a) for a in _nhwc_block_data(n, hw, c))
        x = x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w1, w2 = (w.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last) for w in (w1, w2))

        def step():
            with torch.inference_mode():
                h = F.relu(F.conv2d(x, w1, b1, padding=1))
                p = F.max_pool2d(h, 3, 2, 1)
                return F.relu(F.conv2d(p, w2, b2, padding=1) + p)
        return step

    return ({"mpsgraph": _lazy(mpsgraph_step), "torch": _lazy(torch_step)},
            f"NHWC residual block (conv3x3, max pool, conv3x3 + residual) on {(n, hw, hw, c)} float32")


def _gpu_builders():
    """benchmarks/gpu.py (its layer-list network builder), importable from a worker process."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import gpu
    return gpu


def w_convnet_nhwc(name, batch):
    """A torchvision-layered network (mpsgraph.bench.models) built the MPSGraph way, NHWC, from
    its layer list (benchmarks/gpu.py's builder, BatchNorm as scale/shift); torch runs the module
    in channels_last memory format. Run with MPSGRAPH_CPU_CHANNELS_FIRST=0 and =1."""
    def w(device):
        def layers():
            import torch

            from mpsgraph.bench import models
            gpu = _gpu_builders()
            torch.manual_seed(0)
            net = getattr(models, name)().eval()
            return net, gpu._layers_of(net)

        x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)

        def mpsgraph_step():
            gpu = _gpu_builders()
            gpu.DEV = str(device)
            exe = gpu._mg_net(layers()[1], batch, "float32", "NHWC")
            td = mg.TensorData(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
            return lambda: exe.run([td])

        def torch_step():
            import torch
            net = layers()[0].to(memory_format=torch.channels_last)
            xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)

            def step():
                with torch.inference_mode():
                    return net(xt)
            return step

        return ({"mpsgraph": _lazy(mpsgraph_step), "torch": _lazy(torch_step)},
                f"{name} inference built NHWC (MPSGraph's layout), batch {batch}, 224x224x3 float32")
    return w


WORKLOADS = {"attention_train": w_attention_train, "nhwc_block": w_nhwc_block,
             "resnet18_b8_nhwc": w_convnet_nhwc("resnet18", 8), "mobilenetv2_b8_nhwc": w_convnet_nhwc("mobilenet_v2", 8)}


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
