"""The benchmark's workloads. A Workload has seeded input data (numpy, the same in every
process) and one builder per peer; a builder runs only in that peer's own process and returns
the callable to time (it must wait for the result: block_until_ready, mx.eval, cuda sync).

    W = Workload("name", "what it computes", data=lambda: {"x": ...}, group="table")

    @W.peer("torch", "torch.compile")
    def _(d, ctx): ...   # d: the data dict; ctx: device, threads, peer, torch_device(), compile()

group "table" is the default run (issue 10's table); "micro" are the kernel-level workloads
that run with --all or --only."""
import numpy as np

WORKLOADS = {}
PEERS = ("mpsgraph", "numpy", "torch", "torch.compile", "jax", "mlx", "onnxruntime")


class Skip(Exception):
    """Raised by a builder for a peer that cannot run this workload here: reported as skipped."""


class Workload:
    def __init__(self, name, desc, data, group="table"):
        self.name, self.desc, self.data, self.group = name, desc, data, group
        self.impls = {}
        WORKLOADS[name] = self

    def peer(self, *names):
        def deco(fn):
            for n in names:
                self.impls[n] = fn
            return fn
        return deco

    def build(self, peer, ctx):
        return self.impls[peer](self.data(), ctx)


class Context:
    """What a builder may use: the chosen device, the thread count, and the peer being built."""

    def __init__(self, peer, device, threads):
        self.peer, self.device, self.threads = peer, device, threads
        self.peer_device = "cpu"

    def torch_device(self):
        import torch
        if self.device.startswith("cuda") and torch.cuda.is_available():
            self.peer_device = self.device
        elif self.device == "metal" and torch.backends.mps.is_available():
            self.peer_device = "mps"
        return self.peer_device

    def torch_fn(self, fn):
        """fn compiled by torch.compile for the torch.compile peer; synchronised on a GPU."""
        import torch
        f = torch.compile(fn) if self.peer == "torch.compile" else fn
        if self.peer_device.startswith("cuda"):
            def run():
                r = f()
                torch.cuda.synchronize()
                return r
            return run
        if self.peer_device == "mps":
            def run_mps():
                r = f()
                torch.mps.synchronize()
                return r
            return run_mps
        return f

    def torch_tensor(self, a):
        import torch
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.torch_device())

    def ort_session(self, model_bytes):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        if self.device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
            self.peer_device = self.device
        return ort.InferenceSession(model_bytes, so, providers=providers)


def _rng():
    return np.random.default_rng(0)


def _mg_exe(ctx, build, shapes):
    """A compiled mpsgraph executable: build(g, *placeholders) -> outputs (list) or
    (outputs, target_operations); shapes are the placeholders' float32 shapes."""
    import mpsgraph as mg
    g = mg.Graph()
    ps = [g.placeholder(s, mg.float32) for s in shapes]
    out = build(g, *ps)
    outs, ops = out if isinstance(out, tuple) else (out, None)
    return g.compile({p: (s, mg.float32) for p, s in zip(ps, shapes)}, outs, target_operations=ops, device=ctx.device)


def _mg_run(ctx, build, *arrays):
    import mpsgraph as mg
    exe = _mg_exe(ctx, build, [a.shape for a in arrays])
    tds = [mg.TensorData(a) for a in arrays]
    return lambda: exe.run(tds)


def _jax_run(fn, *arrays):
    import jax
    import jax.numpy as jnp
    f = jax.jit(fn)
    xs = [jnp.asarray(a) for a in arrays]
    return lambda: f(*xs).block_until_ready()


def _mlx_run(fn, *arrays):
    import mlx.core as mx
    xs = [mx.array(a) for a in arrays]

    def run():
        r = fn(*xs)
        mx.eval(r)
        return r
    return run


def _onnx_model(nodes, inputs, outputs):
    """ONNX bytes of a float32 graph: nodes (op, inputs, outputs, attrs); inputs/outputs {name: shape}."""
    from onnx import TensorProto, helper
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    vo = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()]
    ns = [helper.make_node(op, i, o, **a) for op, i, o, a in nodes]
    model = helper.make_model(helper.make_graph(ns, "bench", vi, vo), opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


# ---------------- GEMM ----------------

def _gemm(n, group):
    W = Workload(f"gemm{n}", f"GEMM {n}x{n} @ {n}x{n} float32",
                 lambda: {"a": _rng().standard_normal((n, n), np.float32),
                          "b": _rng().standard_normal((n, n), np.float32)}, group)

    @W.peer("mpsgraph")
    def _(d, ctx):
        return _mg_run(ctx, lambda g, a, b: [a @ b], d["a"], d["b"])

    @W.peer("numpy")
    def _(d, ctx):
        a, b = d["a"], d["b"]
        return lambda: a @ b

    @W.peer("torch", "torch.compile")
    def _(d, ctx):
        a, b = ctx.torch_tensor(d["a"]), ctx.torch_tensor(d["b"])
        return ctx.torch_fn(lambda: a @ b)

    @W.peer("jax")
    def _(d, ctx):
        return _jax_run(lambda a, b: a @ b, d["a"], d["b"])

    @W.peer("mlx")
    def _(d, ctx):
        return _mlx_run(lambda a, b: a @ b, d["a"], d["b"])

    @W.peer("onnxruntime")
    def _(d, ctx):
        sess = ctx.ort_session(_onnx_model([("MatMul", ["a", "b"], ["c"], {})], {"a": [n, n], "b": [n, n]},
                                           {"c": [n, n]}))
        return lambda: sess.run(None, {"a": d["a"], "b": d["b"]})


_gemm(1024, "table")
_gemm(4096, "table")
_gemm(512, "micro")


# ---------------- 100-op elementwise chain on 1x16 ----------------

W = Workload("chain100", "100-op elementwise chain (25 x tanh(relu(x*0.9+0.1))) on 1x16 float32, per run",
             lambda: {"x": _rng().standard_normal((1, 16), np.float32)})


def _chain100(x, mul, add, relu, tanh):
    for _ in range(25):
        x = tanh(relu(add(mul(x, 0.9), 0.1)))
    return x


def _mul(a, c):
    return a * c


def _add(a, c):
    return a + c


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [_chain100(x, _mul, _add, g.relu, g.tanh)], d["x"])


@W.peer("numpy")
def _(d, ctx):
    x = d["x"]
    return lambda: _chain100(x, _mul, _add, lambda v: np.maximum(v, 0), np.tanh)


@W.peer("torch", "torch.compile")
def _(d, ctx):
    import torch
    x = ctx.torch_tensor(d["x"])
    return ctx.torch_fn(lambda: _chain100(x, _mul, _add, torch.relu, torch.tanh))


@W.peer("jax")
def _(d, ctx):
    import jax
    import jax.numpy as jnp
    return _jax_run(lambda x: _chain100(x, _mul, _add, jax.nn.relu, jnp.tanh), d["x"])


@W.peer("mlx")
def _(d, ctx):
    import mlx.core as mx
    return _mlx_run(lambda x: _chain100(x, _mul, _add, lambda v: mx.maximum(v, 0), mx.tanh), d["x"])


# ---------------- MLP training step ----------------

def _mlp_data(sizes, batch):
    rng = _rng()
    d = {"x": rng.standard_normal((batch, sizes[0]), np.float32),
         "y": np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]}
    d["params"] = [(rng.normal(0, np.sqrt(2 / i), (i, o)).astype(np.float32), np.zeros(o, np.float32))
                   for i, o in zip(sizes[:-1], sizes[1:])]
    return d


def _mlp(name, sizes, batch, group, lr=0.01):
    arch = "-".join(map(str, sizes))
    W = Workload(name, f"MLP {arch} training step (forward, backward, SGD), batch {batch}",
                 lambda: _mlp_data(sizes, batch), group)

    @W.peer("mpsgraph")
    def _(d, ctx):
        import mpsgraph as mg

        def build(g, x, t):
            params, h = [], x
            for k, (w0, b0) in enumerate(d["params"]):
                w, b = g.variable(w0.copy()), g.variable(b0.copy())
                params += [w, b]
                h = h @ w + b
                if k < len(d["params"]) - 1:
                    h = g.relu(h)
            loss = g.softmax_cross_entropy(h, t, reduction="mean")
            return [loss], mg.optimizers.SGD(lr=lr).minimize(g, loss, params)
        return _mg_run(ctx, build, d["x"], d["y"])

    @W.peer("numpy")
    def _(d, ctx):
        ws = [(w.copy(), b.copy()) for w, b in d["params"]]
        x, y = d["x"], d["y"]

        def step():
            hs = [x]
            for k, (w, b) in enumerate(ws):
                z = hs[-1] @ w + b
                hs.append(np.maximum(z, 0) if k < len(ws) - 1 else z)
            z = hs[-1] - hs[-1].max(axis=1, keepdims=True)
            e = np.exp(z)
            p = e / e.sum(axis=1, keepdims=True)
            loss = -np.mean(np.sum(y * np.log(p + 1e-30), axis=1))
            dz = (p - y) / x.shape[0]
            for k in range(len(ws) - 1, -1, -1):
                w, b = ws[k]
                dw, db = hs[k].T @ dz, dz.sum(axis=0)
                if k:
                    dz = (dz @ w.T) * (hs[k] > 0)
                w -= lr * dw
                b -= lr * db
            return loss
        return step

    @W.peer("torch", "torch.compile")
    def _(d, ctx):
        import torch
        layers = []
        for k, (w0, b0) in enumerate(d["params"]):
            lin = torch.nn.Linear(*w0.shape)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(w0.T.copy()))
                lin.bias.copy_(torch.from_numpy(b0))
            layers.append(lin)
            if k < len(d["params"]) - 1:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers).to(ctx.torch_device())
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        x, y = ctx.torch_tensor(d["x"]), ctx.torch_tensor(d["y"])

        def step():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss
        return ctx.torch_fn(step)

    def loss_fn(xp, params, x, y):
        h = x
        for k, (w, b) in enumerate(params):
            h = h @ w + b
            if k < len(params) - 1:
                h = xp.maximum(h, 0)
        m = h.max(axis=1, keepdims=True)
        lse = xp.log(xp.exp(h - m).sum(axis=1)) + m[:, 0]
        return (lse - (h * y).sum(axis=1)).mean()

    @W.peer("jax")
    def _(d, ctx):
        import jax
        import jax.numpy as jnp

        def sgd(params, x, y):
            loss, grads = jax.value_and_grad(lambda p: loss_fn(jnp, p, x, y))(params)
            return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss
        f = jax.jit(sgd, donate_argnums=0)
        state = [[(jnp.asarray(w), jnp.asarray(b)) for w, b in d["params"]]]
        x, y = jnp.asarray(d["x"]), jnp.asarray(d["y"])

        def step():
            state[0], loss = f(state[0], x, y)
            return loss.block_until_ready()
        return step

    @W.peer("mlx")
    def _(d, ctx):
        import mlx.core as mx
        vg = mx.value_and_grad(lambda p, x, y: loss_fn(mx, p, x, y))
        state = [[(mx.array(w), mx.array(b)) for w, b in d["params"]]]
        x, y = mx.array(d["x"]), mx.array(d["y"])

        def step():
            loss, grads = vg(state[0], x, y)
            state[0] = [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(state[0], grads)]
            mx.eval(state[0], loss)
            return loss
        return step


_mlp("mlp_step", (784, 512, 512, 10), 128, "table")
_mlp("mlp_step_small", (64, 128, 64, 10), 64, "micro")


# ---------------- elementwise ----------------

def _sigmoid_np(x):
    return 1 / (1 + np.exp(-x))


def _ew(name, desc, n, group, expr, onnx_nodes=None):
    """expr(x, relu, sigmoid) over n float32 values drawn from a standard normal."""
    W = Workload(name, desc, lambda: {"x": _rng().standard_normal(n, np.float32)}, group)

    @W.peer("mpsgraph")
    def _(d, ctx):
        return _mg_run(ctx, lambda g, x: [expr(x, g.relu, g.sigmoid)], d["x"])

    @W.peer("numpy")
    def _(d, ctx):
        x = d["x"]
        return lambda: expr(x, lambda v: np.maximum(v, 0), _sigmoid_np)

    @W.peer("torch", "torch.compile")
    def _(d, ctx):
        import torch
        x = ctx.torch_tensor(d["x"])
        return ctx.torch_fn(lambda: expr(x, torch.relu, torch.sigmoid))

    @W.peer("jax")
    def _(d, ctx):
        import jax
        return _jax_run(lambda x: expr(x, jax.nn.relu, jax.nn.sigmoid), d["x"])

    @W.peer("mlx")
    def _(d, ctx):
        import mlx.core as mx
        return _mlx_run(lambda x: expr(x, lambda v: mx.maximum(v, 0), mx.sigmoid), d["x"])

    if onnx_nodes:
        @W.peer("onnxruntime")
        def _(d, ctx):
            sess = ctx.ort_session(_onnx_model(onnx_nodes, {"x": [n]}, {"y": [n]}))
            x = d["x"]
            return lambda: sess.run(None, {"x": x})
    return W


def _const(name, v):
    from onnx import TensorProto, helper
    return ("Constant", [], [name], {"value": helper.make_tensor(name, TensorProto.FLOAT, [], [v])})


_ew("chain16m", "relu(x*1.5+0.25)*sigmoid(x), 16M float32", 1 << 24, "table",
    lambda x, relu, sigmoid: relu(x * 1.5 + 0.25) * sigmoid(x),
    onnx_nodes=[_const("a", 1.5), _const("b", 0.25), ("Mul", ["x", "a"], ["xa"], {}), ("Add", ["xa", "b"], ["xb"], {}),
                ("Relu", ["xb"], ["r"], {}), ("Sigmoid", ["x"], ["s"], {}), ("Mul", ["r", "s"], ["y"], {})])
_ew("elementwise", "relu(x*1.5+0.25)*0.5, 1M float32", 1 << 20, "micro",
    lambda x, relu, sigmoid: relu(x * 1.5 + 0.25) * 0.5)

W = Workload("copy16m", "plain copy of 16M float32 (the memory-bandwidth reference for chain16m)",
             lambda: {"x": _rng().standard_normal(1 << 24, np.float32)})


@W.peer("numpy")
def _(d, ctx):
    x, out = d["x"], np.empty_like(d["x"])
    return lambda: np.copyto(out, x)


# ---------------- CNNs (torch modules; ONNX for mpsgraph and ONNX Runtime) ----------------

def _onnx_bytes(net, batch, image):
    """The exported model, cached on disk; exported in a child process so that torch never runs
    in the process being measured."""
    import importlib.util
    import os
    import subprocess
    import sys
    import tempfile
    for mod in ("torch", "onnx"):
        if importlib.util.find_spec(mod) is None:
            raise ImportError(f"{mod} (to export the model)", name=mod)
    cache = os.path.join(tempfile.gettempdir(), "mpsgraph-bench")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"{net}_b{batch}_{image}.onnx")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        subprocess.run([sys.executable, "-m", "mpsgraph.bench.models", net, str(batch), str(image), tmp], check=True)
        os.replace(tmp, path)
    with open(path, "rb") as f:
        return f.read()


def _cnn(name, net, batch, image, desc):
    W = Workload(name, f"{desc} inference, batch {batch}, {image}x{image}x3 (NCHW)",
                 lambda: {"x": _rng().standard_normal((batch, 3, image, image), np.float32)})

    @W.peer("mpsgraph")
    def _(d, ctx):
        import mpsgraph as mg
        exe = mg.onnx.load(_onnx_bytes(net, batch, image)).compile(device=ctx.device)
        td = mg.TensorData(d["x"])
        return lambda: exe.run([td])

    @W.peer("onnxruntime")
    def _(d, ctx):
        sess = ctx.ort_session(_onnx_bytes(net, batch, image))
        x = d["x"]
        return lambda: sess.run(None, {"x": x})

    @W.peer("torch", "torch.compile")
    def _(d, ctx):
        import torch

        from .models import network
        m = network(net).to(ctx.torch_device())
        x = ctx.torch_tensor(d["x"])

        def run():
            with torch.inference_mode():
                return m(x)
        return ctx.torch_fn(run)


_cnn("small_cnn_b32", "small_cnn", 32, 64, "small CNN conv3x3(32,64,128)+pools+fc")
for _b in (1, 8):
    _cnn(f"resnet18_b{_b}", "resnet18", _b, 224, "ResNet-18 (torchvision layers)")
    _cnn(f"mobilenetv2_b{_b}", "mobilenet_v2", _b, 224, "MobileNetV2 (torchvision layers)")


# ---------------- micro workloads (kernel level) ----------------

W = Workload("reduction", "sum over axis 0 of 1024x1024 float32",
             lambda: {"x": _rng().standard_normal((1024, 1024), np.float32)}, "micro")


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [g.reduction_sum(x, axes=0)], d["x"])


@W.peer("numpy")
def _(d, ctx):
    x = d["x"]
    return lambda: x.sum(axis=0, keepdims=True)


@W.peer("torch", "torch.compile")
def _(d, ctx):
    x = ctx.torch_tensor(d["x"])
    return ctx.torch_fn(lambda: x.sum(dim=0, keepdim=True))


@W.peer("jax")
def _(d, ctx):
    return _jax_run(lambda x: x.sum(axis=0, keepdims=True), d["x"])


W = Workload("ew_reduce", "per-row squared error: sum over the last axis of (x*1.5+0.25-y)**2, 4096x1024 float32",
             lambda: {"x": _rng().standard_normal((4096, 1024), np.float32),
                      "y": _rng().standard_normal((4096, 1024), np.float32)}, "micro")


def _sq_err(x, y):
    d = x * 1.5 + 0.25 - y
    return d * d


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x, y: [g.reduction_sum(_sq_err(x, y), axes=-1)], d["x"], d["y"])


@W.peer("numpy")
def _(d, ctx):
    x, y = d["x"], d["y"]
    return lambda: _sq_err(x, y).sum(axis=-1, keepdims=True)


@W.peer("torch", "torch.compile")
def _(d, ctx):
    x, y = ctx.torch_tensor(d["x"]), ctx.torch_tensor(d["y"])
    return ctx.torch_fn(lambda: _sq_err(x, y).sum(dim=-1, keepdim=True))


@W.peer("jax")
def _(d, ctx):
    return _jax_run(lambda x, y: _sq_err(x, y).sum(axis=-1, keepdims=True), d["x"], d["y"])


W = Workload("softmax", "softmax over the last axis of 256x1000 float32",
             lambda: {"x": _rng().standard_normal((256, 1000), np.float32)}, "micro")


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [g.softmax(x, axis=-1)], d["x"])


@W.peer("numpy")
def _(d, ctx):
    x = d["x"]

    def softmax():
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return softmax


@W.peer("torch", "torch.compile")
def _(d, ctx):
    import torch
    x = ctx.torch_tensor(d["x"])
    return ctx.torch_fn(lambda: torch.softmax(x, dim=-1))


@W.peer("jax")
def _(d, ctx):
    import jax
    return _jax_run(lambda x: jax.nn.softmax(x, axis=-1), d["x"])


W = Workload("run_overhead", "relu(x*2+1) on 1x16 float32: per-call overhead",
             lambda: {"x": _rng().standard_normal((1, 16), np.float32)}, "micro")


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [g.relu(x * 2.0 + 1.0)], d["x"])


@W.peer("mpsgraph Graph.run")
def _(d, ctx):
    import mpsgraph as mg
    g = mg.Graph()
    p = g.placeholder((None, 16))
    y = g.relu(p * 2.0 + 1.0)
    x = d["x"]
    return lambda: g.run({p: x}, [y], device=ctx.device)


@W.peer("numpy")
def _(d, ctx):
    x = d["x"]
    return lambda: np.maximum(x * 2.0 + 1.0, 0)


@W.peer("torch")
def _(d, ctx):
    import torch
    x = ctx.torch_tensor(d["x"])
    return ctx.torch_fn(lambda: torch.relu(x * 2.0 + 1.0))


def _rnn_data(t=100, batch=8, hidden=64):
    rng = _rng()
    return {"xs": rng.standard_normal((t, batch, hidden), np.float32),
            "w": (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)}


def _rnn(name, grad):
    what = "gradient w.r.t. W of sum(h_T^2) through" if grad else "forward of"
    W = Workload(name, f"{what} a 100-step loop h = tanh(h @ W + x_t), batch 8, hidden 64", _rnn_data, "micro")

    @W.peer("mpsgraph")
    def _(d, ctx):
        import mpsgraph as mg

        def build(g, xs, w):
            h0 = g.zeros(d["xs"].shape[1:], mg.float32)
            (h,) = g.for_loop(d["xs"].shape[0], [h0], lambda i, h: [g.tanh(h @ w + g.gather(xs, i, axis=0))])
            loss = g.reduction_sum(h * h, keep_dims=False)
            return [g.gradients(loss, [w])[w] if grad else loss]
        return _mg_run(ctx, build, d["xs"], d["w"])

    if not grad:
        @W.peer("numpy")
        def _(d, ctx):
            xs, w = d["xs"], d["w"]

            def loop():
                h = np.zeros(xs.shape[1:], np.float32)
                for t in range(xs.shape[0]):
                    h = np.tanh(h @ w + xs[t])
                return (h * h).sum()
            return loop

    @W.peer("torch")
    def _(d, ctx):
        import torch
        xs = ctx.torch_tensor(d["xs"])
        w = ctx.torch_tensor(d["w"]).requires_grad_(grad)

        def loop():
            h = torch.zeros(xs.shape[1:], device=xs.device)
            for t in range(xs.shape[0]):
                h = torch.tanh(h @ w + xs[t])
            loss = (h * h).sum()
            return torch.autograd.grad(loss, [w])[0] if grad else loss
        return ctx.torch_fn(loop)

    @W.peer("jax")
    def _(d, ctx):
        import jax
        import jax.numpy as jnp
        xs = jnp.asarray(d["xs"])

        def loss(w):
            h = jax.lax.fori_loop(0, xs.shape[0], lambda t, h: jnp.tanh(h @ w + xs[t]), jnp.zeros(xs.shape[1:]))
            return (h * h).sum()
        return _jax_run(jax.grad(loss) if grad else loss, d["w"])


_rnn("rnn_loop", False)
_rnn("rnn_loop_grad", True)


def _unary(name, op, torch_op, np_op, positive=False):
    def data():
        x = _rng().standard_normal(1 << 22).astype(np.float32) * 3
        return {"x": np.abs(x) + 1e-3 if positive else x}
    W = Workload(name, f"{name} of 4M float32", data, "micro")

    @W.peer("mpsgraph")
    def _(d, ctx):
        return _mg_run(ctx, lambda g, x: [getattr(g, op)(x)], d["x"])

    @W.peer("torch", "torch.compile")
    def _(d, ctx):
        import torch
        x, f = ctx.torch_tensor(d["x"]), getattr(torch, torch_op)
        return ctx.torch_fn(lambda: f(x))

    if np_op:
        @W.peer("numpy")
        def _(d, ctx):
            x, f = d["x"], getattr(np, np_op)
            return lambda: f(x)


_unary("exp", "exponent", "exp", "exp")
_unary("log", "logarithm", "log", "log", positive=True)
_unary("tanh", "tanh", "tanh", "tanh")
_unary("sigmoid", "sigmoid", "sigmoid", None)
_unary("erf", "erf", "erf", None)

W = Workload("relu6", "clamp(x, 0, 6) (ReLU6) of 4M float32",
             lambda: {"x": _rng().standard_normal(1 << 22).astype(np.float32) * 4}, "micro")


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [g.clamp(x, g.constant(np.float32(0)), g.constant(np.float32(6)))], d["x"])


@W.peer("numpy")
def _(d, ctx):
    x = d["x"]
    return lambda: np.clip(x, 0, 6)


@W.peer("torch", "torch.compile")
def _(d, ctx):
    import torch
    x = ctx.torch_tensor(d["x"])
    return ctx.torch_fn(lambda: torch.clamp(x, 0, 6))


W = Workload("maxpool", "ResNet stem max pool 3x3/2 of 8x64x112x112 NCHW float32",
             lambda: {"x": _rng().standard_normal((8, 64, 112, 112), np.float32)}, "micro")


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [g.max_pooling_2d(x, kernel_sizes=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1),
                                                       data_layout="NCHW")], d["x"])


@W.peer("torch", "torch.compile")
def _(d, ctx):
    import torch
    x = ctx.torch_tensor(d["x"])
    return ctx.torch_fn(lambda: torch.nn.functional.max_pool2d(x, 3, 2, 1))


W = Workload("depthwise", "MobileNet depthwise 3x3 convolution of 8x144x56x56 NCHW float32",
             lambda: {"x": _rng().standard_normal((8, 144, 56, 56), np.float32),
                      "w": _rng().standard_normal((144, 1, 3, 3), np.float32)}, "micro")


@W.peer("mpsgraph")
def _(d, ctx):
    return _mg_run(ctx, lambda g, x: [g.convolution_2d(x, g.constant(d["w"]), padding=(1, 1, 1, 1), groups=144,
                                                       data_layout="NCHW", weights_layout="OIHW")], d["x"])


@W.peer("torch", "torch.compile")
def _(d, ctx):
    import torch
    x, w = ctx.torch_tensor(d["x"]), ctx.torch_tensor(d["w"])
    return ctx.torch_fn(lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=144))


def legacy(name, fn, peers=("mpsgraph", "numpy", "torch", "jax")):
    """Registers a workload written in the older form w(device) -> ({framework: callable},
    description): each peer's process calls it and times its own entry."""
    def data():
        return {}
    W = Workload(name, name, data, "micro")

    def build(d, ctx):
        fns, desc = fn(ctx.device)
        W.desc = desc
        if ctx.peer not in fns:
            raise Skip(f"{name} has no {ctx.peer} entry")
        return fns[ctx.peer]
    W.peer(*peers)(build)
    return W
