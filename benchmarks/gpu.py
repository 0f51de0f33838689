"""GPU benchmarks (issue 11 item 6): mpsgraph on cuda:0 against PyTorch eager, torch.compile and
JAX (jit), measured in this one process on the same GPU.

    python benchmarks/gpu.py --json out.json            # every workload
    python benchmarks/gpu.py --only gemm8192_f16 chain16m --json out.json
    python benchmarks/gpu.py --deadline 240             # skip what would start after 240 s

Every framework gets its inputs already on the GPU and is timed to completion (mpsgraph's run
returns when its results are ready; PyTorch is synchronised after the loop, JAX blocked until
ready each call). The chains, the dispatch chain and GEMM also time "mpsgraph queued" (run_async
into a GPU buffer, waited for after the loop, as PyTorch is); the chains a device copy waited for
each call, as run() is. Each figure
is the median over 5 timed loops of the per-call time, each loop long enough to take >= 50 ms.
float32 is compared without TF32 everywhere (mpsgraph never uses it; PyTorch's cuDNN and JAX are
told not to). Nothing is asserted: this prints and records numbers."""
import argparse
import json
import statistics
import sys
import time

import numpy as np

import mpsgraph as mg

DEV = "cuda:0"
T0 = time.perf_counter()


def per_call(fn, sync=None, loops=5, min_loop=0.05):
    """Median seconds per call of fn (sync() after the loop, if given)."""
    fn()
    if sync:
        sync()
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    if time.perf_counter() - t0 > 0.2:  # slow: the median of 3 single calls
        single = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            single.append(time.perf_counter() - t0)
        return statistics.median(single)
    k, t = 1, 0.0
    while True:  # calibrate the loop length
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        if sync:
            sync()
        t = time.perf_counter() - t0
        if t >= min_loop or k >= 1 << 16:
            break
        k = max(k * 2, int(k * min_loop / max(t, 1e-6)))
    times = []
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        if sync:
            sync()
        times.append((time.perf_counter() - t0) / k)
    return statistics.median(times)


def _torch():
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        return torch
    except ImportError:
        return None


def _jax():
    try:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")
        if not any(d.platform == "gpu" for d in jax.devices()):
            return None
        return jax
    except Exception:
        return None


def on_gpu(a):
    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16" and DEV.startswith("cuda"):  # no buffer protocol for it: through PyTorch's DLPack
        import torch
        return mg.TensorData(torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda())
    return mg.TensorData(a).to(DEV)


def queued(exe, inputs):
    """mpsgraph timed as PyTorch is: runs queued with run_async into one result buffer on the
    GPU, waited for once after the loop (run() waits for every run, which PyTorch does not)."""
    outs = exe.run(inputs)  # result buffers on the GPU, written again by every queued run
    last = []

    def fn():
        last[:] = [exe.run_async(inputs, out=outs)]

    return fn, lambda: last[0].result()


def mg_dtype(name):
    return {"float32": mg.float32, "float16": mg.float16, "bfloat16": mg.bfloat16}[name]


def np_cast(a, name):
    if name == "bfloat16":
        import ml_dtypes
        return a.astype(ml_dtypes.bfloat16)
    return a.astype(name)


# ---------------- workloads: each returns (description, {framework: (fn, sync)}) ----------------

def w_gemm(n, dtype):
    def w(torch, jax):
        rng = np.random.default_rng(0)
        a, b = (np_cast(rng.standard_normal((n, n)).astype(np.float32), dtype) for _ in range(2))
        g = mg.Graph()
        pa, pb = g.placeholder((n, n), mg_dtype(dtype)), g.placeholder((n, n), mg_dtype(dtype))
        exe = g.compile({pa: ((n, n), mg_dtype(dtype)), pb: ((n, n), mg_dtype(dtype))}, [pa @ pb], device=DEV)
        ta, tb = on_gpu(a), on_gpu(b)
        fns = {"mpsgraph": (lambda: exe.run([ta, tb]), None), "mpsgraph queued": queued(exe, [ta, tb])}
        if torch:
            tdt = getattr(torch, dtype)
            xa = torch.randn(n, n, device="cuda", dtype=tdt)
            xb = torch.randn(n, n, device="cuda", dtype=tdt)
            fns["torch"] = (lambda: xa @ xb, torch.cuda.synchronize)
            cm = torch.compile(lambda p, q: p @ q)
            fns["torch.compile"] = (lambda: cm(xa, xb), torch.cuda.synchronize)
        if jax:
            jnp = jax.numpy
            ja, jb = jnp.asarray(a), jnp.asarray(b)
            f = jax.jit(lambda p, q: p @ q)
            fns["jax"] = (lambda: f(ja, jb).block_until_ready(), None)
        return f"GEMM {n}x{n}x{n} {dtype} (flop rate: 2n^3 / time)", fns
    return w


def w_chain(n):
    def w(torch, jax):
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        g = mg.Graph()
        p = g.placeholder((n,), mg.float32)
        exe = g.compile({p: ((n,), mg.float32)}, [g.relu(p * 1.5 + 0.25) * g.sigmoid(p)], device=DEV)
        tx = on_gpu(x)
        fns = {"mpsgraph": (lambda: exe.run([tx]), None), "mpsgraph queued": queued(exe, [tx])}
        if torch:
            xt = torch.from_numpy(x).cuda()
            f = lambda: torch.relu(xt * 1.5 + 0.25) * torch.sigmoid(xt)  # noqa: E731
            fns["torch"] = (f, torch.cuda.synchronize)
            cf = torch.compile(lambda v: torch.relu(v * 1.5 + 0.25) * torch.sigmoid(v))
            fns["torch.compile"] = (lambda: cf(xt), torch.cuda.synchronize)
            fns["device copy (torch clone)"] = (lambda: xt.clone(), torch.cuda.synchronize)

            def copy_waited():
                xt.clone()
                torch.cuda.synchronize()
            fns["device copy, waited each call"] = (copy_waited, None)
        if jax:
            jx = jax.numpy.asarray(x)
            f = jax.jit(lambda v: jax.nn.relu(v * 1.5 + 0.25) * jax.nn.sigmoid(v))
            fns["jax"] = (lambda: f(jx).block_until_ready(), None)
        return f"relu(x*1.5+0.25)*sigmoid(x), {n} float32 (reads and writes {8 * n / 1e9:.2f} GB, as a copy)", fns
    return w


def w_dispatch100(torch, jax):
    """100 dependent elementwise ops on 1024 floats: per-run launch and dispatch cost."""
    n = 1024
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder((n,), mg.float32)
    y = p
    for i in range(100):
        y = y * 1.0001 if i % 2 == 0 else y + 0.0001
    exe = g.compile({p: ((n,), mg.float32)}, [y], device=DEV)
    tx = on_gpu(x)
    # queued: run_async's own cost per call (the GPU work is shorter than the host's)
    fns = {"mpsgraph": (lambda: exe.run([tx]), None), "mpsgraph queued": queued(exe, [tx])}

    def chain(v):
        for i in range(100):
            v = v * 1.0001 if i % 2 == 0 else v + 0.0001
        return v

    if torch:
        xt = torch.from_numpy(x).cuda()
        fns["torch"] = (lambda: chain(xt), torch.cuda.synchronize)
        cf = torch.compile(chain)
        fns["torch.compile"] = (lambda: cf(xt), torch.cuda.synchronize)
    if jax:
        jx = jax.numpy.asarray(x)
        f = jax.jit(chain)
        fns["jax"] = (lambda: f(jx).block_until_ready(), None)
    return "chain of 100 elementwise ops (x*1.0001, +0.0001) on 1024 float32", fns


def _training_peers(torch, jax, fns, torch_loss, torch_params, jax_loss, jax_params, data):
    """Adds PyTorch eager, torch.compile and JAX (jit) SGD steps (lr 0.01) of the given losses:
    torch_loss() over torch_params; jax_loss(params, *data) over jax_params."""
    if torch:
        opt = torch.optim.SGD(torch_params, lr=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            lv = torch_loss()
            lv.backward()
            opt.step()
            return lv

        fns["torch"] = (step, torch.cuda.synchronize)
        fns["torch.compile"] = (torch.compile(step), torch.cuda.synchronize)
    if jax:
        @jax.jit
        def jstep(ps, *d):
            lv, gr = jax.value_and_grad(jax_loss)(ps, *d)
            return jax.tree_util.tree_map(lambda u, v: u - 0.01 * v, ps, gr), lv

        jd = [jax.numpy.asarray(v) for v in data]
        state = {"p": jax_params}

        def run_j():
            state["p"], lv = jstep(state["p"], *jd)
            lv.block_until_ready()

        fns["jax"] = (run_j, None)


def _jax_xent(jax, logits, onehot):
    return -jax.numpy.mean(jax.numpy.sum(onehot * jax.nn.log_softmax(logits), axis=-1))


def w_mlp(batch):
    """MLP 64-128-64-10 training step (forward, softmax cross-entropy, backward, SGD)."""
    def w(torch, jax):
        rng = np.random.default_rng(0)
        xb = rng.standard_normal((batch, 64)).astype(np.float32)
        yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
        dims = [64, 128, 64, 10]
        ws = [rng.normal(0, np.sqrt(2 / i), (i, o)).astype(np.float32) for i, o in zip(dims, dims[1:])]
        bs = [np.zeros(o, np.float32) for o in dims[1:]]
        last = len(ws) - 1

        g = mg.Graph()
        x, t = g.placeholder((batch, 64)), g.placeholder((batch, 10))
        mw, mb = [g.variable(v) for v in ws], [g.variable(v) for v in bs]
        h = x
        for k in range(len(ws)):
            h = h @ mw[k] + mb[k]
            h = h if k == last else g.relu(h)
        loss = g.softmax_cross_entropy(h, t, reduction="mean")
        exe = g.compile({x: ((batch, 64), mg.float32), t: ((batch, 10), mg.float32)}, [loss],
                        target_operations=mg.optimizers.SGD(lr=0.01).minimize(g, loss, mw + mb), device=DEV)
        tx, ty = on_gpu(xb), on_gpu(yb)
        fns = {"mpsgraph": (lambda: exe.run([tx, ty]), None)}
        tw = tb = txb = tyb = None
        if torch:
            tw = [torch.from_numpy(v).cuda().requires_grad_() for v in ws]
            tb = [torch.from_numpy(v).cuda().requires_grad_() for v in bs]
            txb, tyb = torch.from_numpy(xb).cuda(), torch.from_numpy(yb).cuda()

        def torch_loss():
            a = txb
            for k in range(len(tw)):
                a = torch.addmm(tb[k], a, tw[k])
                a = a if k == last else torch.relu(a)
            return torch.nn.functional.cross_entropy(a, tyb)

        def jax_loss(ps, xv, yv):
            a = xv
            for k, (wv, bv) in enumerate(ps):
                a = a @ wv + bv
                a = a if k == last else jax.nn.relu(a)
            return _jax_xent(jax, a, yv)

        jp = [(jax.numpy.asarray(u), jax.numpy.asarray(v)) for u, v in zip(ws, bs)] if jax else None
        _training_peers(torch, jax, fns, torch_loss, (tw or []) + (tb or []), jax_loss, jp, [xb, yb])
        return f"MLP 64-128-64-10 training step (SGD), batch {batch}", fns
    return w


# ---- convolutional nets: one layer list, interpreted by mpsgraph and JAX; PyTorch runs the module ----

def _layers_of(net):
    """The torchvision-style module as (kind, params) in order, BatchNorm folded into scale/shift
    (eval mode); residual blocks as ('block', [layers], [downsample layers] or None)."""
    import torch.nn as nn

    def conv(m):
        return ("conv", {"w": m.weight.detach().cpu().numpy(), "s": m.stride[0], "p": m.padding[0], "g": m.groups})

    def bn(m):
        scale = (m.weight / torch_sqrt(m.running_var + m.eps)).detach().cpu().numpy()
        shift = (m.bias.detach().cpu().numpy() - m.running_mean.detach().cpu().numpy() * scale)
        return ("bn", {"scale": scale, "shift": shift})

    def walk(mod):
        out = []
        for m in mod.children() if not isinstance(mod, (nn.Conv2d, nn.BatchNorm2d)) else [mod]:
            if isinstance(m, nn.Conv2d):
                out.append(conv(m))
            elif isinstance(m, nn.BatchNorm2d):
                out.append(bn(m))
            elif isinstance(m, nn.ReLU):
                out.append(("relu", {}))
            elif isinstance(m, nn.ReLU6):
                out.append(("relu6", {}))
            elif isinstance(m, nn.MaxPool2d):
                out.append(("maxpool", {"k": m.kernel_size, "s": m.stride, "p": m.padding}))
            elif type(m).__name__ == "BasicBlock":
                body = [conv(m.conv1), bn(m.bn1), ("relu", {}), conv(m.conv2), bn(m.bn2)]
                down = walk(m.downsample) if m.downsample is not None else None
                out.append(("block", {"body": body, "down": down}))
            elif type(m).__name__ == "InvertedResidual":  # MobileNetV2
                out.append(("ires", {"body": walk(m.conv), "res": m.residual}))
            elif isinstance(m, nn.Linear):
                out.append(("gap", {}))
                out.append(("fc", {"w": m.weight.detach().cpu().numpy().T.copy(), "b": m.bias.detach().cpu().numpy()}))
            else:
                out += walk(m)
        return out

    import torch
    torch_sqrt = torch.sqrt
    return walk(net)


def _image_shape(batch, layout):
    return (batch, 3, 224, 224) if layout == "NCHW" else (batch, 224, 224, 3)


def _mg_net(layers, batch, dtype, layout="NCHW"):
    """The layer list as an mpsgraph executable; NHWC: activations channels-last (weights OIHW)."""
    g = mg.Graph()
    dt = mg_dtype(dtype)
    shape = _image_shape(batch, layout)
    x = g.placeholder(shape, dt)
    per_channel = (1, -1, 1, 1) if layout == "NCHW" else (1, 1, 1, -1)

    def c(a):
        return g.constant(np_cast(np.asarray(a, np.float32), dtype))

    def run(h, ls):
        for kind, p in ls:
            if kind == "conv":
                s, pd = p["s"], p["p"]
                h = g.convolution_2d(h, c(p["w"]), strides=[s, s], padding=[pd, pd, pd, pd], groups=p["g"],
                                     data_layout=layout, weights_layout="OIHW")
            elif kind == "bn":
                h = h * c(p["scale"].reshape(per_channel)) + c(p["shift"].reshape(per_channel))
            elif kind == "relu":
                h = g.relu(h)
            elif kind == "relu6":
                h = g.clamp(h, c(0.0), c(6.0))
            elif kind == "maxpool":
                k, s, pd = p["k"], p["s"], p["p"]
                h = g.max_pooling_2d(h, kernel_sizes=[k, k], strides=[s, s], padding=[pd, pd, pd, pd],
                                     data_layout=layout)
            elif kind == "block":
                y = run(h, p["body"])
                h = g.relu(y + (run(h, p["down"]) if p["down"] else h))
            elif kind == "ires":
                y = run(h, p["body"])
                h = h + y if p["res"] else y
            elif kind == "gap":
                h = g.reshape(g.mean(h, axes=[2, 3] if layout == "NCHW" else [1, 2]), (batch, -1))
            elif kind == "fc":
                h = h @ c(p["w"]) + c(p["b"])
        return h

    y = run(x, layers)
    return g.compile({x: (shape, dt)}, [y], device=DEV)


def _jax_net(jax, layers, dtype, layout="NCHW"):
    jnp, lax = jax.numpy, jax.lax
    jdt = jnp.dtype(dtype)
    nchw = layout == "NCHW"
    per_channel = (1, -1, 1, 1) if nchw else (1, 1, 1, -1)

    def prep(ls):
        r = []
        for kind, p in ls:
            if kind == "block":
                r.append((kind, {"body": prep(p["body"]), "down": prep(p["down"]) if p["down"] else None}))
            else:
                r.append((kind, {k: jnp.asarray(v, jdt) if isinstance(v, np.ndarray) else v for k, v in p.items()}))
        return r

    jl = prep(layers)

    def run(h, ls):
        for kind, p in ls:
            if kind == "conv":
                s, pd = p["s"], p["p"]
                h = lax.conv_general_dilated(h, p["w"], (s, s), [(pd, pd), (pd, pd)], feature_group_count=p["g"],
                                             dimension_numbers=(layout, "OIHW", layout),
                                             precision=lax.Precision.HIGHEST)
            elif kind == "bn":
                h = h * p["scale"].reshape(per_channel) + p["shift"].reshape(per_channel)
            elif kind == "relu":
                h = jax.nn.relu(h)
            elif kind == "relu6":
                h = jnp.clip(h, 0, 6)
            elif kind == "maxpool":
                k, s, pd = p["k"], p["s"], p["p"]
                win, pads = ((1, 1, k, k), (1, 1, s, s)), [(0, 0), (0, 0), (pd, pd), (pd, pd)]
                if not nchw:
                    win, pads = ((1, k, k, 1), (1, s, s, 1)), [(0, 0), (pd, pd), (pd, pd), (0, 0)]
                h = lax.reduce_window(h, -jnp.inf, lax.max, win[0], win[1], pads)
            elif kind == "block":
                y = run(h, p["body"])
                h = jax.nn.relu(y + (run(h, p["down"]) if p["down"] else h))
            elif kind == "ires":
                y = run(h, p["body"])
                h = h + y if p["res"] else y
            elif kind == "gap":
                h = jnp.mean(h, axis=(2, 3) if nchw else (1, 2))
            elif kind == "fc":
                h = h @ p["w"] + p["b"]
        return h

    return jax.jit(lambda x: run(x, jl))


def w_convnet(name, batch, dtype="float32", layout="NCHW"):
    """Inference of a torchvision-layered network (mpsgraph.bench.models): mpsgraph and JAX run its
    layer list in `layout`; PyTorch runs the module (channels_last memory format for NHWC)."""
    def w(torch, jax):
        title = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}[name]
        if torch is None:
            return f"{title} (needs torch for its definition): skipped", {}
        from mpsgraph.bench import models
        torch.manual_seed(0)
        net = getattr(models, name)().eval()
        layers = _layers_of(net)
        x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        xl = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        exe = _mg_net(layers, batch, dtype, layout)
        tx = on_gpu(np_cast(xl, dtype))
        fns = {"mpsgraph": (lambda: exe.run([tx]), None)}
        tdt = getattr(torch, dtype)
        tnet = net.cuda().to(tdt)
        xt = torch.from_numpy(x).cuda().to(tdt)
        if layout == "NHWC":
            tnet = tnet.to(memory_format=torch.channels_last)
            xt = xt.contiguous(memory_format=torch.channels_last)

        def fwd():
            with torch.no_grad():
                return tnet(xt)

        fns["torch"] = (fwd, torch.cuda.synchronize)
        cnet = torch.compile(tnet)

        def cfwd():
            with torch.no_grad():
                return cnet(xt)

        fns["torch.compile"] = (cfwd, torch.cuda.synchronize)
        if jax:
            f = _jax_net(jax, layers, dtype, layout)
            jx = jax.numpy.asarray(np_cast(xl, dtype))
            fns["jax"] = (lambda: f(jx).block_until_ready(), None)
        how = "BatchNorm as scale/shift" + (", NHWC (PyTorch: channels_last)" if layout == "NHWC" else "")
        return f"{title} inference (torchvision layers, {how}), batch {batch}, 224x224, {dtype}", fns
    return w


def w_resnet18(batch, dtype="float32", layout="NCHW"):
    return w_convnet("resnet18", batch, dtype, layout)


def w_small_cnn(dtype="float32"):
    return lambda torch, jax: _small_cnn(torch, jax, dtype)


def _small_cnn(torch, jax, dtype):
    """Small CNN training step: conv3x3(3->32) relu maxpool2 conv3x3(32->64) relu maxpool2 fc(4096->10),
    32x32 images, batch 128, SGD; every framework's parameters and data in `dtype`."""
    batch = 128
    rng = np.random.default_rng(0)
    xb = np_cast(rng.standard_normal((batch, 3, 32, 32)), dtype)
    yb = np_cast(np.eye(10)[rng.integers(0, 10, batch)], dtype)
    w1 = np_cast(rng.normal(0, np.sqrt(2 / 27), (32, 3, 3, 3)), dtype)
    w2 = np_cast(rng.normal(0, np.sqrt(2 / 288), (64, 32, 3, 3)), dtype)
    w3 = np_cast(rng.normal(0, np.sqrt(1 / 4096), (4096, 10)), dtype)
    g = mg.Graph()
    dt = mg_dtype(dtype)
    x, t = g.placeholder((batch, 3, 32, 32), dt), g.placeholder((batch, 10), dt)
    v1, v2, v3 = g.variable(w1), g.variable(w2), g.variable(w3)

    def block(h, wv):
        h = g.relu(g.convolution_2d(h, wv, padding=[1, 1, 1, 1], data_layout="NCHW", weights_layout="OIHW"))
        return g.max_pooling_2d(h, kernel_sizes=[2, 2], strides=[2, 2], data_layout="NCHW")

    h = g.reshape(block(block(x, v1), v2), (batch, 4096)) @ v3
    loss = g.softmax_cross_entropy(h, t, reduction="mean")
    ops = mg.optimizers.SGD(lr=0.01).minimize(g, loss, [v1, v2, v3])
    exe = g.compile({x: ((batch, 3, 32, 32), dt), t: ((batch, 10), dt)}, [loss],
                    target_operations=ops, device=DEV)
    tx, ty = on_gpu(xb), on_gpu(yb)
    fns = {"mpsgraph": (lambda: exe.run([tx, ty]), None)}
    tw = txb = tyb = None
    if torch:
        def tt(a):  # through float32: numpy has no bfloat16 for torch.from_numpy
            return torch.from_numpy(np.asarray(a, np.float32)).cuda().to(getattr(torch, dtype))
        tw = [tt(a).requires_grad_() for a in (w1, w2, w3)]
        txb, tyb = tt(xb), tt(yb)

    def torch_loss():
        F = torch.nn.functional
        a = F.max_pool2d(F.relu(F.conv2d(txb, tw[0], padding=1)), 2)
        a = F.max_pool2d(F.relu(F.conv2d(a, tw[1], padding=1)), 2)
        return F.cross_entropy(a.reshape(batch, -1) @ tw[2], tyb)

    def jax_loss(ps, xv, yv):
        lax = jax.lax
        a = xv
        for wv in ps[:2]:
            a = lax.conv_general_dilated(a, wv, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                         precision=lax.Precision.HIGHEST)
            a = lax.reduce_window(jax.nn.relu(a), -np.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return _jax_xent(jax, a.reshape(batch, -1) @ ps[2], yv)

    jp = [jax.numpy.asarray(a) for a in (w1, w2, w3)] if jax else None
    _training_peers(torch, jax, fns, torch_loss, tw or [], jax_loss, jp, [xb, yb])
    return f"small CNN training step (2 conv3x3 + maxpool, fc), 32x32, batch 128, SGD, {dtype}", fns


def w_spmm(n, density, k):
    """csr (n, n) @ dense (n, k) float32: mpsgraph's generated kernels against PyTorch's csr
    product (cuSPARSE) and the dense GEMM of the same matrix."""
    def w(torch, jax):
        rng = np.random.default_rng(0)
        nnz = int(n * n * density)
        r, c = np.sort(rng.integers(0, n, nnz)), rng.integers(0, n, nnz).astype(np.int32)
        starts = np.searchsorted(r, np.arange(n + 1)).astype(np.int32)
        v = rng.standard_normal(nnz).astype(np.float32)
        d = rng.standard_normal((n, k)).astype(np.float32)
        g = mg.Graph()
        types = [((nnz,), mg.float32), ((nnz,), mg.int32), ((n + 1,), mg.int32), ((n, k), mg.float32)]
        ph = [g.placeholder(*t) for t in types]
        y = g.sparse_matmul(g.sparse_tensor("csr", tuple(ph[:3]), (n, n)), ph[3])
        exe = g.compile(dict(zip(ph, types)), [y], device=DEV)
        args = [on_gpu(x) for x in (v, c, starts, d)]
        fns = {"mpsgraph": (lambda: exe.run(args), None)}
        if torch:
            a = torch.sparse_csr_tensor(torch.from_numpy(starts.astype(np.int64)), torch.from_numpy(c.astype(np.int64)),
                                        torch.from_numpy(v), (n, n)).cuda()
            xd = torch.from_numpy(d).cuda()
            fns["torch csr (cuSPARSE)"] = (lambda: a @ xd, torch.cuda.synchronize)
            dense = a.to_dense()
            fns["torch dense GEMM"] = (lambda: dense @ xd, torch.cuda.synchronize)
        return f"csr {n}x{n} ({nnz} entries, {density:.0%}) @ dense ({n}, {k}) float32", fns
    return w


WORKLOADS = {  # most telling first: a deadline cuts the tail
    "dispatch100": w_dispatch100,
    "mlp_b128": w_mlp(128),
    "gemm8192_f32": w_gemm(8192, "float32"),
    "gemm8192_f16": w_gemm(8192, "float16"),
    "gemm8192_bf16": w_gemm(8192, "bfloat16"),
    "chain16m": w_chain(1 << 24),
    "chain256m": w_chain(1 << 28),
    "resnet18_b1": w_resnet18(1),
    "resnet18_b256": w_resnet18(256),
    "small_cnn": w_small_cnn(),
    "mlp_b8192": w_mlp(8192),
    "resnet18_b256_f16": w_resnet18(256, "float16"),
    "resnet18_b256_f16_nhwc": w_resnet18(256, "float16", "NHWC"),
    "mobilenetv2_b1": w_convnet("mobilenet_v2", 1),
    "mobilenetv2_b256": w_convnet("mobilenet_v2", 256),
    "mobilenetv2_b256_f16": w_convnet("mobilenet_v2", 256, "float16"),
    "resnet18_b256_bf16": w_resnet18(256, "bfloat16"),
    "resnet18_b256_nhwc": w_resnet18(256, "float32", "NHWC"),
    "small_cnn_f16": w_small_cnn("float16"),
    "spmm_csr16k": w_spmm(16384, 0.001, 256),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cuda:0", help="mpsgraph's device (the peers run on the GPU)")
    ap.add_argument("--frameworks", nargs="*", default=None,
                    help="time only these (mpsgraph, torch, torch.compile, jax); default all")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds after start: later workloads are skipped")
    a = ap.parse_args(argv)
    globals()["DEV"] = a.device
    torch, jax = _torch(), _jax()
    import os
    env = {"mpsgraph": mg.__version__, "device": mg.Device(DEV).description,
           "MPSGRAPH_CUDNN": os.environ.get("MPSGRAPH_CUDNN", "")}
    if torch:
        env["torch"] = torch.__version__
        env["gpu"] = torch.cuda.get_device_name(0)
    if jax:
        env["jax"] = jax.__version__
    results = {"environment": env, "workloads": {}}
    print(json.dumps(env))

    def save():
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)

    for name, make in WORKLOADS.items():
        if a.only and name not in a.only:
            continue
        if time.perf_counter() - T0 > a.deadline:
            results["workloads"][name] = {"skipped": "deadline"}
            continue
        try:
            desc, fns = make(torch, jax)
        except Exception as e:  # a workload that cannot be built is reported, not fatal
            results["workloads"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(name, "ERROR", results["workloads"][name]["error"], flush=True)
            save()
            continue
        r = {"description": desc, "seconds": {}}
        for fw, (fn, sync) in fns.items():
            if a.frameworks and fw not in a.frameworks:
                continue
            if time.perf_counter() - T0 > a.deadline:
                r["seconds"][fw] = None
                continue
            try:
                t0 = time.perf_counter()
                r["seconds"][fw] = per_call(fn, sync)
                r.setdefault("measure_wall_s", {})[fw] = round(time.perf_counter() - t0, 2)
            except Exception as e:
                r.setdefault("errors", {})[fw] = f"{type(e).__name__}: {e}"[:500]
        base = r["seconds"].get("mpsgraph")
        line = [f"{name:18s}"] + [f"{fw}={s * 1e6:.1f}us" + (f"({s / base:.2f}x)" if base and fw != "mpsgraph" else "")
                                  for fw, s in r["seconds"].items() if s]
        print("  ".join(line), r.get("errors", ""), flush=True)
        results["workloads"][name] = r
        save()
        del fns
    save()


if __name__ == "__main__":
    main()
