"""Benchmark harness: mpsgraph against the peers that are installed (numpy always;
PyTorch, JAX, MLX and ONNX Runtime when importable), measured in this one process.

    python benchmarks/bench.py                 # all workloads, CPU
    python benchmarks/bench.py --device cuda   # mpsgraph on another device (peers on theirs)
    python benchmarks/bench.py --only matmul --repeat 50 --json out.json
    python benchmarks/bench.py --only onnx_resnet18_b1 onnx_mobilenetv2_b8 --repeat 5   # ONNX models vs ONNX Runtime

Prints the median time of each (workload, framework) and its ratio to mpsgraph's
median (>1 means the peer is slower). Nothing here is a test: speed is never asserted."""
import argparse
import json
import statistics
import sys
import time

import numpy as np

import mpsgraph as mg


def time_runs(fn, repeat, warmup=3):
    """(median, min, max) of `repeat` timed calls after `warmup` untimed ones."""
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


def environment():
    """What the numbers depend on: versions, BLAS, CPU, threads, vector ISA, huge pages."""
    import platform
    env = {"mpsgraph": mg.__version__, "numpy": np.__version__, "python": platform.python_version(),
           "threads": mg.get_num_threads(), "cpu_isa": mg._core._cpu_isa(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            env["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        env["cpu"] = platform.processor()
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            env["transparent_hugepages"] = f.read().strip()
    except OSError:
        pass
    try:
        import scipy_openblas32
        env["blas"] = scipy_openblas32.get_openblas_config()
    except (ImportError, AttributeError):
        env["blas"] = "Accelerate" if sys.platform == "darwin" else "unknown"
    for mod in ("torch", "jax", "onnxruntime", "mlx"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return env


# ---------------- workloads: each returns {framework: callable} ----------------

def w_elementwise(device, n=1 << 20):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((n,), mg.float32)
    y = g.relu(p * 1.5 + 0.25) * 0.5
    exe = g.compile({p: ((n,), mg.float32)}, [y], device=device)
    td = mg.TensorData(x)
    fns = {"mpsgraph": lambda: exe.run([td]), "numpy": lambda: np.maximum(x * 1.5 + 0.25, 0) * 0.5}
    return fns, f"relu(x*1.5+0.25)*0.5, {n} float32"


def w_matmul(device, n=512):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    g = mg.Graph()
    pa, pb = g.placeholder((n, n)), g.placeholder((n, n))
    exe = g.compile({pa: ((n, n), mg.float32), pb: ((n, n), mg.float32)}, [pa @ pb], device=device)
    ta, tb = mg.TensorData(a), mg.TensorData(b)
    return {"mpsgraph": lambda: exe.run([ta, tb]), "numpy": lambda: a @ b}, f"matmul {n}x{n} float32"


def w_reduction(device, n=1024):
    x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((n, n))
    exe = g.compile({p: ((n, n), mg.float32)}, [g.reduction_sum(p, axes=0)], device=device)
    td = mg.TensorData(x)
    return {"mpsgraph": lambda: exe.run([td]), "numpy": lambda: x.sum(axis=0, keepdims=True)}, \
        f"sum over axis 0 of {n}x{n} float32"


def w_softmax(device, b=256, k=1000):
    x = np.random.default_rng(0).standard_normal((b, k)).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((b, k))
    exe = g.compile({p: ((b, k), mg.float32)}, [g.softmax(p, axis=-1)], device=device)
    td = mg.TensorData(x)

    def np_softmax():
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return {"mpsgraph": lambda: exe.run([td]), "numpy": np_softmax}, f"softmax {b}x{k} float32"


def w_run_overhead(device):
    """Per-call cost of a tiny graph: Graph.run (cache lookup included) and a compiled
    Executable.run, against eager numpy on the same 16 floats."""
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((None, 16))
    y = g.relu(p * 2.0 + 1.0)
    exe = g.compile({p: ((1, 16), mg.float32)}, [y], device=device)
    fns = {"mpsgraph": lambda: exe.run([x]),
           "mpsgraph Graph.run": lambda: g.run({p: x}, [y], device=device),
           "numpy": lambda: np.maximum(x * 2.0 + 1.0, 0)}
    return fns, "relu(x*2+1) on 1x16 float32: per-call overhead"


def w_mlp_step(device, batch=64):
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((batch, 64)).astype(np.float32)
    yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    sizes = [64, 128, 64, 10]
    init = [(rng.normal(0, np.sqrt(2 / i), (i, o)).astype(np.float32), np.zeros(o, np.float32))
            for i, o in zip(sizes[:-1], sizes[1:])]
    g = mg.Graph()
    x, t = g.placeholder((None, 64)), g.placeholder((None, 10))
    params, h = [], x
    for k, (w0, b0) in enumerate(init):
        w, b = g.variable(w0), g.variable(b0)
        params += [w, b]
        h = h @ w + b
        if k < len(init) - 1:
            h = g.relu(h)
    loss = g.softmax_cross_entropy(h, t, reduction="mean")
    ops = mg.optimizers.SGD(lr=0.01).minimize(g, loss, params)
    exe = g.compile({x: ((None, 64), mg.float32), t: ((None, 10), mg.float32)}, [loss], target_operations=ops,
                    device=device)
    tx, ty = mg.TensorData(xb), mg.TensorData(yb)
    fns = {"mpsgraph": lambda: exe.run([tx, ty])}
    try:
        import torch
        torch.set_num_threads(max(1, torch.get_num_threads()))
        layers = []
        for k, (w0, b0) in enumerate(init):
            lin = torch.nn.Linear(w0.shape[0], w0.shape[1])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(w0.T.copy()))
                lin.bias.copy_(torch.from_numpy(b0))
            layers.append(lin)
            if k < len(init) - 1:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        txb, tyb = torch.from_numpy(xb), torch.from_numpy(yb)

        def torch_step():
            opt.zero_grad()
            l = torch.nn.functional.cross_entropy(net(txb), tyb)
            l.backward()
            opt.step()
            return l

        fns["torch"] = torch_step
    except ImportError:
        pass
    return fns, f"MLP 64-128-64-10 training step (forward, backward, SGD), batch {batch}"


def _rnn_data(t=100, batch=8, hidden=64):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((t, batch, hidden)).astype(np.float32)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    return xs, w


def _rnn_graph(device, grad):
    xs_np, w_np = _rnn_data()
    g = mg.Graph()
    xs = g.placeholder(xs_np.shape, mg.float32)
    w = g.placeholder(w_np.shape, mg.float32)
    h0 = g.zeros(xs_np.shape[1:], mg.float32)
    (h,) = g.for_loop(xs_np.shape[0], [h0], lambda i, h: [g.tanh(h @ w + g.gather(xs, i, axis=0))])
    loss = g.reduction_sum(h * h, keep_dims=False)
    target = g.gradients(loss, [w])[w] if grad else loss
    exe = g.compile({xs: (xs_np.shape, mg.float32), w: (w_np.shape, mg.float32)}, [target], device=device)
    return lambda: exe.run([xs_np, w_np])


def w_rnn_loop(device):
    """A 100-step recurrent loop as one for_loop (per-iteration overhead of control flow)
    against Python loops in numpy / PyTorch and jax.lax.fori_loop."""
    xs, w = _rnn_data()

    def np_loop():
        h = np.zeros(xs.shape[1:], np.float32)
        for t in range(xs.shape[0]):
            h = np.tanh(h @ w + xs[t])
        return (h * h).sum()

    return {"mpsgraph": _rnn_graph(device, False), "numpy": np_loop}, \
        "for_loop of 100 steps h = tanh(h @ W + x_t), batch 8, hidden 64 (forward)"


def w_rnn_loop_grad(device):
    return {"mpsgraph": _rnn_graph(device, True)}, \
        "gradient of sum(h_T^2) w.r.t. W through the 100-step for_loop"


def _onnx_workload(net, batch):
    """An ONNX model exported from a torchvision-style definition, run through mg.onnx.load and
    through ONNX Runtime in the same process (needs torch and onnx; onnxruntime as the peer)."""
    def w(device):
        try:
            import onnx  # noqa: F401
            from onnx_models import export
            data = export(net, batch)
        except ImportError as e:
            return {}, f"ONNX {net} batch {batch}: skipped ({e.name} not installed)"
        x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        model = mg.onnx.load(data)
        exe = model.compile(device=device)
        td = mg.TensorData(x)
        fns = {"mpsgraph": lambda: exe.run([td])}
        try:
            import onnxruntime as ort
            sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
            fns["onnxruntime"] = lambda: sess.run(None, {"x": x})
        except ImportError:
            pass
        return fns, f"ONNX {net} (torchvision-style, exported by torch.onnx), batch {batch}, 224x224"
    return w


def w_chain16m(device, n=1 << 24):
    """The issue's bandwidth-bound chain relu(x*a+b)*sigmoid(x) over 16M floats."""
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((n,), mg.float32)
    y = g.relu(p * 1.5 + 0.25) * g.sigmoid(p)
    exe = g.compile({p: ((n,), mg.float32)}, [y], device=device)
    td = mg.TensorData(x)
    return {"mpsgraph": lambda: exe.run([td])}, f"relu(x*1.5+0.25)*sigmoid(x), {n} float32"


def _unary_workload(op, n=1 << 22):
    def w(device):
        x = (np.random.default_rng(0).standard_normal(n) * 3).astype(np.float32)
        if op == "logarithm":
            x = np.abs(x) + 1e-3
        g = mg.Graph()
        p = g.placeholder((n,), mg.float32)
        exe = g.compile({p: ((n,), mg.float32)}, [getattr(g, op)(p)], device=device)
        td = mg.TensorData(x)
        return {"mpsgraph": lambda: exe.run([td])}, f"{op} of {n} float32"
    return w


def w_relu6(device, n=1 << 22):
    x = (np.random.default_rng(0).standard_normal(n) * 4).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((n,), mg.float32)
    exe = g.compile({p: ((n,), mg.float32)}, [g.clamp(p, g.constant(np.float32(0)), g.constant(np.float32(6)))],
                    device=device)
    td = mg.TensorData(x)
    return {"mpsgraph": lambda: exe.run([td])}, f"clamp(x, 0, 6) (ReLU6) of {n} float32"


def w_maxpool(device, shape=(8, 64, 112, 112)):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder(shape, mg.float32)
    y = g.max_pooling_2d(p, kernel_sizes=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), data_layout="NCHW")
    exe = g.compile({p: (shape, mg.float32)}, [y], device=device)
    td = mg.TensorData(x)
    return {"mpsgraph": lambda: exe.run([td])}, f"ResNet stem max pool 3x3/2 of {shape} NCHW float32"


def w_depthwise(device, shape=(8, 144, 56, 56)):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], 1, 3, 3)).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder(shape, mg.float32)
    y = g.convolution_2d(p, g.constant(w), padding=(1, 1, 1, 1), groups=shape[1], data_layout="NCHW",
                         weights_layout="OIHW")
    exe = g.compile({p: (shape, mg.float32)}, [y], device=device)
    td = mg.TensorData(x)
    return {"mpsgraph": lambda: exe.run([td])}, f"MobileNet depthwise 3x3 conv of {shape} NCHW float32"


def _attention_data(b, h, L, d):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, h, L, d)).astype(np.float32) for _ in range(4)]  # q, k, v, output weights


def w_attention_train(device, b=1, h=8, L=2048, d=64):
    """Causal attention forward + backward (d query, d key, d value of sum(w * attention)) at a long
    sequence: the CPU runs the blocked forward and gradient kernels."""
    data = _attention_data(b, h, L, d)
    g = mg.Graph()
    q, k, v, w = (g.placeholder((b, h, L, d), mg.float32) for _ in range(4))
    y = g.scaled_dot_product_attention(q, k, v, causal=True)
    grads = g.gradients(g.reduction_sum(y * w, axes=[0, 1, 2, 3]), [q, k, v])
    exe = g.compile({t: ((b, h, L, d), mg.float32) for t in (q, k, v, w)}, [grads[t] for t in (q, k, v)],
                    device=device)
    tds = [mg.TensorData(a) for a in data]
    return {"mpsgraph": lambda: exe.run(tds)}, f"causal attention fwd+bwd (B, H, L, D) = {(b, h, L, d)} float32"


def torch_attention_train(b=1, h=8, L=2048, d=64):
    """w_attention_train's peer: torch.nn.functional.scaled_dot_product_attention and autograd."""
    import torch
    q, k, v, w = (torch.from_numpy(a) for a in _attention_data(b, h, L, d))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    def step():
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad((y * w).sum(), [q, k, v])

    return step


def add_torch_peer(name, fns, device):
    """Same computation in PyTorch (CPU) where installed, for the simple workloads."""
    try:
        import torch
    except ImportError:
        return
    rng = np.random.default_rng(0)
    if name == "elementwise":
        x = torch.from_numpy(rng.standard_normal(1 << 20).astype(np.float32))
        fns["torch"] = lambda: torch.relu(x * 1.5 + 0.25) * 0.5
    elif name == "matmul":
        a = torch.from_numpy(rng.standard_normal((512, 512)).astype(np.float32))
        b = torch.from_numpy(rng.standard_normal((512, 512)).astype(np.float32))
        fns["torch"] = lambda: a @ b
    elif name == "reduction":
        x = torch.from_numpy(rng.standard_normal((1024, 1024)).astype(np.float32))
        fns["torch"] = lambda: x.sum(dim=0, keepdim=True)
    elif name == "softmax":
        x = torch.from_numpy(rng.standard_normal((256, 1000)).astype(np.float32))
        fns["torch"] = lambda: torch.softmax(x, dim=-1)
    elif name == "run_overhead":
        x = torch.from_numpy(rng.standard_normal((1, 16)).astype(np.float32))
        fns["torch"] = lambda: torch.relu(x * 2.0 + 1.0)
    elif name == "chain16m":
        x = torch.from_numpy(rng.standard_normal(1 << 24).astype(np.float32))
        fns["torch"] = lambda: torch.relu(x * 1.5 + 0.25) * torch.sigmoid(x)
    elif name in _UNARY:
        x = torch.from_numpy((rng.standard_normal(1 << 22) * 3).astype(np.float32))
        if name == "log":
            x = x.abs() + 1e-3
        f = _UNARY[name][1]
        fns["torch"] = lambda: f(torch, x)
    elif name == "relu6":
        x = torch.from_numpy((rng.standard_normal(1 << 22) * 4).astype(np.float32))
        fns["torch"] = lambda: torch.clamp(x, 0, 6)
    elif name == "maxpool":
        x = torch.from_numpy(rng.standard_normal((8, 64, 112, 112)).astype(np.float32))
        fns["torch"] = lambda: torch.nn.functional.max_pool2d(x, 3, 2, 1)
    elif name == "depthwise":
        x = torch.from_numpy(rng.standard_normal((8, 144, 56, 56)).astype(np.float32))
        w = torch.from_numpy(rng.standard_normal((144, 1, 3, 3)).astype(np.float32))
        fns["torch"] = lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=144)
    elif name == "attention_train":
        fns["torch"] = torch_attention_train()
    elif name in ("rnn_loop", "rnn_loop_grad"):
        xs_np, w_np = _rnn_data()
        xs = torch.from_numpy(xs_np)
        w = torch.from_numpy(w_np).requires_grad_(name == "rnn_loop_grad")

        def torch_loop():
            h = torch.zeros(xs.shape[1:])
            for t in range(xs.shape[0]):
                h = torch.tanh(h @ w + xs[t])
            loss = (h * h).sum()
            return torch.autograd.grad(loss, [w])[0] if name == "rnn_loop_grad" else loss

        fns["torch"] = torch_loop


def add_jax_peer(name, fns):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return
    rng = np.random.default_rng(0)
    if name == "elementwise":
        x = jnp.asarray(rng.standard_normal(1 << 20).astype(np.float32))
        f = jax.jit(lambda v: jax.nn.relu(v * 1.5 + 0.25) * 0.5)
        fns["jax"] = lambda: f(x).block_until_ready()
    elif name == "matmul":
        a = jnp.asarray(rng.standard_normal((512, 512)).astype(np.float32))
        b = jnp.asarray(rng.standard_normal((512, 512)).astype(np.float32))
        f = jax.jit(lambda u, v: u @ v)
        fns["jax"] = lambda: f(a, b).block_until_ready()
    elif name == "softmax":
        x = jnp.asarray(rng.standard_normal((256, 1000)).astype(np.float32))
        f = jax.jit(lambda v: jax.nn.softmax(v, axis=-1))
        fns["jax"] = lambda: f(x).block_until_ready()
    elif name in ("rnn_loop", "rnn_loop_grad"):
        xs_np, w_np = _rnn_data()
        xs, w = jnp.asarray(xs_np), jnp.asarray(w_np)

        def loss(w):
            h = jax.lax.fori_loop(0, xs.shape[0], lambda t, h: jnp.tanh(h @ w + xs[t]), jnp.zeros(xs.shape[1:]))
            return (h * h).sum()

        f = jax.jit(jax.grad(loss) if name == "rnn_loop_grad" else loss)
        fns["jax"] = lambda: f(w).block_until_ready()


_UNARY = {"exp": ("exponent", lambda t, x: t.exp(x)), "log": ("logarithm", lambda t, x: t.log(x)),
          "tanh": ("tanh", lambda t, x: t.tanh(x)), "sigmoid": ("sigmoid", lambda t, x: t.sigmoid(x)),
          "erf": ("erf", lambda t, x: t.erf(x))}

WORKLOADS = {"elementwise": w_elementwise, "matmul": w_matmul, "reduction": w_reduction, "softmax": w_softmax,
             "mlp_step": w_mlp_step, "run_overhead": w_run_overhead, "rnn_loop": w_rnn_loop,
             "rnn_loop_grad": w_rnn_loop_grad,
             "onnx_resnet18_b1": _onnx_workload("resnet18", 1), "onnx_resnet18_b8": _onnx_workload("resnet18", 8),
             "onnx_mobilenetv2_b1": _onnx_workload("mobilenet_v2", 1),
             "onnx_mobilenetv2_b8": _onnx_workload("mobilenet_v2", 8),
             "chain16m": w_chain16m, "relu6": w_relu6, "maxpool": w_maxpool, "depthwise": w_depthwise,
             "attention_train": w_attention_train}
WORKLOADS.update({name: _unary_workload(op) for name, (op, _) in _UNARY.items()})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    results = []
    print(f"mpsgraph {mg.__version__} on {args.device}; median of {args.repeat} runs after warm-up")
    print(f"{'workload':<14}{'framework':<20}{'median':>12}{'vs mpsgraph':>13}")
    for name in args.only or WORKLOADS:
        fns, desc = WORKLOADS[name](args.device)
        add_torch_peer(name, fns, args.device)
        add_jax_peer(name, fns)
        base = None
        for fw, fn in fns.items():
            t, lo, hi = time_runs(fn, args.repeat)
            base = t if fw == "mpsgraph" else base
            ratio = t / base if base else float("nan")
            results.append({"workload": name, "description": desc, "framework": fw, "median_s": t, "min_s": lo,
                            "max_s": hi, "ratio_to_mpsgraph": ratio})
            print(f"{name:<14}{fw:<20}{t * 1e3:>10.4f}ms{ratio:>12.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "device": args.device, "repeat": args.repeat,
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
