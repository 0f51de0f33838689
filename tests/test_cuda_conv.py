"""Convolution and pooling primitives on cuda:0 (cuDNN where it takes the geometry, generated
direct kernels otherwise: asymmetric padding, more than 3 spatial dims, zero-size tensors).
Forward convolutions are checked against a numpy brute-force reference; gradients and pooling
against the CPU backend (itself checked against numpy and PyTorch by the conformance table).
Skips where no GPU is present."""
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

TOL = {"float32": (2e-4, 2e-4), "float16": (2e-2, 2e-2), "bfloat16": (8e-2, 8e-2)}


def _np(a, dtype):
    if dtype == "bfloat16":
        import ml_dtypes
        return a.astype(ml_dtypes.bfloat16)
    return a.astype(dtype)


def conv_ref(x, w, strides, dil, pads, groups):
    """Cross-correlation in float64 by brute force over output positions and taps."""
    k = x.ndim - 2
    N, C = x.shape[:2]
    O = w.shape[0]
    Cg, Og = C // groups, O // groups
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(k)])
    out = [(x.shape[2 + i] + pads[2 * i] + pads[2 * i + 1] - dil[i] * (w.shape[2 + i] - 1) - 1) // strides[i] + 1
           for i in range(k)]
    y = np.zeros((N, O, *out))
    for o in range(O):
        gi = o // Og
        for pos in itertools.product(*[range(n) for n in out]):
            acc = np.zeros(N)
            for tap in itertools.product(*[range(n) for n in w.shape[2:]]):
                idx = tuple(pos[i] * strides[i] + tap[i] * dil[i] for i in range(k))
                xs = xp[(slice(None), slice(gi * Cg, (gi + 1) * Cg)) + idx]
                acc += xs @ w[(o, slice(None)) + tap].astype(np.float64)
            y[(slice(None), o) + pos] = acc
    return y


CASES = [  # (source shape, weights shape, strides, dilation, padding, groups)
    ((2, 4, 9, 8), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),      # cuDNN
    ((2, 4, 9, 8), (6, 2, 3, 2), [2, 1], [1, 2], [1, 1, 0, 0], 2),      # grouped, strided, dilated
    ((1, 3, 7, 7), (3, 1, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 3),      # depthwise
    ((2, 3, 8, 7), (4, 3, 2, 3), [1, 2], [1, 1], [0, 1, 2, 0], 1),      # asymmetric padding: direct kernels
    ((2, 3, 11), (5, 3, 4), [2], [2], [1, 1], 1),                       # 1-d
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2], [1, 1, 0, 0, 1, 1], 1),  # 3-d
    ((1, 2, 3, 4, 3, 4), (2, 2, 2, 1, 2, 2), [1, 1, 1, 1], [1] * 4, [0] * 8, 1),  # 4-d: direct kernels
    ((0, 3, 5, 5), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),      # empty batch
]


def _conv_graph(xs, ws, dtype, strides, dil, pads, groups):
    g = mg.Graph()
    dt = mg.as_dtype(dtype)
    x, w = g.placeholder(xs, dt), g.placeholder(ws, dt)
    y = g.convolution(x, w, strides=strides, dilation_rates=dil, padding=pads, groups=groups)
    return g, x, w, y


def _conv_setup(case, dtype, seed):
    xs, ws, strides, dil, pads, groups = case
    rng = np.random.default_rng(seed)
    xv = _np(rng.standard_normal(xs), dtype)
    wv = _np(rng.standard_normal(ws), dtype)
    return rng, xv, wv, _conv_graph(xs, ws, dtype, strides, dil, pads, groups)


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_convolution_forward(case, dtype):
    xs, ws, strides, dil, pads, groups = case
    rng, xv, wv, (g, x, w, y) = _conv_setup(case, dtype, 0)
    r = g.run({x: xv, w: wv}, [y], device="cuda")[y].numpy().astype(np.float64)
    ref = conv_ref(xv.astype(np.float64), wv.astype(np.float64), strides, dil, pads, groups)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(r, ref, rtol=rtol, atol=atol * max(1.0, np.sqrt(np.prod(ws[1:]))))


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_convolution_gradients_match_cpu(case, dtype):
    xs = case[0]
    rng, xv, wv, (g, x, w, y) = _conv_setup(case, dtype, 1)
    dy = g.placeholder(tuple(g.run({x: xv, w: wv}, [y], device="cpu")[y].numpy().shape), mg.as_dtype(dtype))
    loss = g.reduction_sum(y * dy, axes=list(range(len(xs))))
    gx, gw = g.gradients(loss, [x, w])
    dyv = _np(rng.standard_normal(dy.shape), dtype)
    feeds = {x: xv, w: wv, dy: dyv}
    cpu = g.run(feeds, [gx, gw], device="cpu")
    gpu = g.run(feeds, [gx, gw], device="cuda")
    rtol, atol = TOL[dtype]
    scale = max(1.0, np.sqrt(np.prod(dy.shape)))
    for t in (gx, gw):
        np.testing.assert_allclose(gpu[t].numpy().astype(np.float64), cpu[t].numpy().astype(np.float64), rtol=rtol,
                                   atol=atol * scale)


POOLS = [  # (shape, kernel, strides, dilation, padding, ceil_mode)
    ((2, 3, 9, 8), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], False),
    ((2, 3, 9, 8), [3, 2], [2, 3], [2, 1], [1, 0, 0, 1], True),
    ((1, 2, 7, 7), [7, 7], [1, 1], [1, 1], [0, 0, 0, 0], False),    # global
    ((4, 10), [3], [2], [1], [1, 1], True),                          # 1-d
    ((1, 2, 4, 5, 6), [2, 3, 2], [2, 1, 2], [1, 1, 2], [0, 1, 1, 0, 1, 1], False),  # 3-d
    ((0, 3, 6, 6), [2, 2], [2, 2], [1, 1], [0, 0, 0, 0], False),    # empty
    ((1, 2, 11, 10), [9, 10], [1, 2], [1, 1], [1, 1, 0, 2], False),  # window dims past the unrolled size
    ((2, 5, 6, 4), [3, 3, 1], [2, 2, 1], [1, 1, 1], [1, 1, 1, 1, 0, 0], True),  # NHWC as channels-last plans it
    # NHWC with whole 16-byte packs of channels: the vector kernels (a thread per pack)
    ((2, 7, 6, 16), [3, 3, 1], [2, 2, 1], [1, 1, 1], [1, 1, 1, 1, 0, 0], False),
    ((3, 7, 7, 24), [7, 7, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0, 0, 0, 0], False),  # global
]


def _pool_ops(g, x, k, s, d, p, ceil):
    a = dict(kernel_sizes=k, strides=s, dilation_rates=d, padding=p, ceil_mode=ceil)
    vals, idx = g.max_pooling_nd_return_indices(x, **a)
    return [g.max_pooling_nd(x, **a), vals, idx, g.avg_pooling_nd(x, **a),
            g.avg_pooling_nd(x, include_zero_pad=True, **a), g.sum_pooling_nd(x, **a)]


@pytest.mark.parametrize("case", POOLS, ids=range(len(POOLS)))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pooling_matches_cpu(case, dtype):
    shape, k, s, d, p, ceil = case
    rng = np.random.default_rng(2)
    n = int(np.prod(shape))
    xv = _np((rng.permutation(n).reshape(shape) * 0.37 - n * 0.15) / max(n, 1), dtype)  # distinct values
    if n > 4:
        xv.reshape(-1)[3] = np.nan  # a NaN wins its windows
    g = mg.Graph()
    x = g.placeholder(shape, mg.as_dtype(dtype))
    outs = _pool_ops(g, x, k, s, d, p, ceil)
    # gradients of every pooling (max's scatter, avg's and sum's)
    dy = g.placeholder(tuple(g.run({x: xv}, [outs[0]], device="cpu")[outs[0]].numpy().shape), mg.as_dtype(dtype))
    axes = list(range(len(shape)))
    loss = (g.reduction_sum(outs[0] * dy, axes=axes) + g.reduction_sum(outs[3] * 0.5, axes=axes)
            + g.reduction_sum(outs[4], axes=axes) + g.reduction_sum(outs[5] * 0.25, axes=axes))
    (gx,) = g.gradients(loss, [x])
    feeds = {x: xv, dy: _np(rng.standard_normal(dy.shape), dtype)}
    targets = outs + [gx]
    cpu = g.run(feeds, targets, device="cpu")
    gpu = g.run(feeds, targets, device="cuda")
    rtol, atol = TOL[dtype]
    for t in targets:
        a, b = gpu[t].numpy(), cpu[t].numpy()
        if a.dtype.kind in "iu":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


def test_max_pooling_gather_and_gradient_primitives():
    rng = np.random.default_rng(3)
    shape = (2, 3, 6, 7)
    xv = rng.standard_normal(shape).astype(np.float32)
    sv = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
    g = mg.Graph()
    x, src = g.placeholder(shape), g.placeholder(shape)
    a = dict(kernel_sizes=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])
    gathered = g.max_pooling_nd_gather(x, src, **a)
    pooled = g.max_pooling_nd(src, **a)
    dy = g.placeholder(tuple(g.run({src: sv}, [pooled], device="cpu")[pooled].numpy().shape))
    scattered = g.max_pooling_nd_gradient(dy, src, **a)
    feeds = {x: xv, src: sv, dy: rng.standard_normal(dy.shape).astype(np.float32)}
    cpu = g.run(feeds, [gathered, scattered], device="cpu")
    gpu = g.run(feeds, [gathered, scattered], device="cuda")
    for t in (gathered, scattered):
        np.testing.assert_array_equal(gpu[t].numpy(), cpu[t].numpy())


def test_convolution_is_captured_and_replayed():
    """A training step with convolutions replays (CUDA graph) and keeps matching the CPU."""
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    w0 = rng.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.1

    def step_results(device):
        g = mg.Graph()
        x = g.placeholder((4, 3, 8, 8))
        w = g.variable(w0)
        y = g.max_pooling_2d(g.relu(g.convolution_2d(x, w, padding=[1, 1, 1, 1], data_layout="NCHW",
                                                     weights_layout="OIHW")), kernel_sizes=[2, 2], strides=[2, 2],
                             data_layout="NCHW")
        loss = g.reduction_sum(y * y, axes=[0, 1, 2, 3])
        ops = mg.optimizers.SGD(lr=0.001).minimize(g, loss, [w])
        exe = g.compile({x: ((4, 3, 8, 8), mg.float32)}, [loss], target_operations=ops, device=device)
        return [float(np.asarray(exe.run([xv])[0].numpy()).reshape(-1)[0]) for _ in range(4)]

    np.testing.assert_allclose(step_results("cuda"), step_results("cpu"), rtol=1e-4)


# ---- algorithm search by timing (MPSGRAPH_CUDNN_SEARCH) and channels-last (NHWC) graphs ----

SEARCH_CASES = [CASES[0], CASES[1], CASES[2], CASES[4], CASES[5],
                ((8, 16, 12, 12), (32, 16, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1)]  # tensor-core sized


def _conv_and_grads(case, dtype, seed, device):
    xs = case[0]
    rng, xv, wv, (g, x, w, y) = _conv_setup(case, dtype, seed)
    dy = g.placeholder(tuple(g.run({x: xv, w: wv}, [y], device="cpu")[y].numpy().shape), mg.as_dtype(dtype))
    loss = g.reduction_sum(y * dy, axes=list(range(len(xs))))
    gx, gw = g.gradients(loss, [x, w])
    feeds = {x: xv, w: wv, dy: _np(rng.standard_normal(dy.shape), dtype)}
    r = g.run(feeds, [y, gx, gw], device=device)
    return [r[t].numpy().astype(np.float64) for t in (y, gx, gw)], int(np.prod(dy.shape)), int(np.prod(wv.shape[1:]))


@pytest.mark.parametrize("case", SEARCH_CASES, ids=range(len(SEARCH_CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_search_on_and_off_agree(case, dtype, monkeypatch):
    """The timed choice (default) and cuDNN's heuristic choice give the same convolution and
    gradients within tolerance, and both match the CPU."""
    monkeypatch.setenv("MPSGRAPH_CUDNN_SEARCH", "0")
    off, n_dy, n_w = _conv_and_grads(case, dtype, 5, "cuda")
    monkeypatch.setenv("MPSGRAPH_CUDNN_SEARCH", "1")
    on, _, _ = _conv_and_grads(case, dtype, 5, "cuda")
    cpu, _, _ = _conv_and_grads(case, "float32", 5, "cpu") if dtype == "float32" else (None, 0, 0)
    rtol, atol = TOL[dtype]
    scale = max(1.0, np.sqrt(max(n_dy, n_w)))
    for i in range(3):
        np.testing.assert_allclose(on[i], off[i], rtol=rtol, atol=atol * scale)
        if cpu is not None:
            np.testing.assert_allclose(on[i], cpu[i], rtol=rtol, atol=atol * scale)


NHWC_CASES = [  # (source NHWC, weights HWIO, strides, dilation, padding, groups)
    ((2, 9, 8, 4), (3, 3, 4, 6), [1, 1], [1, 1], [1, 1, 1, 1], 1),
    ((2, 9, 8, 4), (3, 2, 2, 6), [2, 1], [1, 2], [1, 1, 0, 0], 2),
    ((4, 10, 10, 16), (3, 3, 16, 32), [2, 2], [1, 1], [1, 1, 1, 1], 1),
    ((2, 7, 6, 3), (1, 1, 3, 8), [1, 1], [1, 1], [0, 0, 0, 0], 1),
    ((2, 7, 6, 3), (2, 3, 3, 4), [1, 1], [1, 1], [0, 1, 2, 0], 1),  # asymmetric padding: direct kernels
]


@pytest.mark.parametrize("case", NHWC_CASES, ids=range(len(NHWC_CASES)))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("search", ["1", "0"])
def test_nhwc_convolution_and_gradients_match_cpu(case, dtype, search, monkeypatch):
    """NHWC graphs: cuDNN reads and writes channels-last buffers (the graph's transposes are
    absorbed); a two-convolution chain with its gradients against the CPU."""
    monkeypatch.setenv("MPSGRAPH_CUDNN_SEARCH", search)
    xs, ws, strides, dil, pads, groups = case
    rng = np.random.default_rng(6)
    dt = mg.as_dtype(dtype)
    g = mg.Graph()
    x, w = g.placeholder(xs, dt), g.placeholder(ws, dt)
    a = dict(strides=strides, dilation_rates=dil, padding=pads, groups=groups)
    h = g.relu(g.convolution_2d(x, w, **a))
    cout = ws[3]
    w2 = g.placeholder((1, 1, cout, 5), dt)
    y = g.convolution_2d(h, w2)
    feeds0 = {x: _np(rng.standard_normal(xs), dtype), w: _np(rng.standard_normal(ws) * 0.5, dtype),
              w2: _np(rng.standard_normal((1, 1, cout, 5)) * 0.5, dtype)}
    yshape = g.run(feeds0, [y], device="cpu")[y].numpy().shape
    dy = g.placeholder(yshape, dt)
    loss = g.reduction_sum(y * dy, axes=[0, 1, 2, 3])
    gx, gw, gw2 = g.gradients(loss, [x, w, w2])
    feeds = dict(feeds0)
    feeds[dy] = _np(rng.standard_normal(yshape), dtype)
    targets = [h, y, gx, gw, gw2]
    cpu = g.run(feeds, targets, device="cpu")
    gpu = g.run(feeds, targets, device="cuda")
    rtol, atol = TOL[dtype]
    scale = max(1.0, np.sqrt(np.prod(yshape)))
    for t in targets:
        np.testing.assert_allclose(gpu[t].numpy().astype(np.float64), cpu[t].numpy().astype(np.float64), rtol=rtol,
                                   atol=atol * scale)


def test_nhwc_transposes_are_absorbed():
    """The transposes around an NHWC convolution are views in the memory plan (cuDNN reads the
    NHWC source and writes the NHWC result); results still match the CPU, also where the
    convolution's result is itself a result of the run."""
    rng = np.random.default_rng(7)
    g = mg.Graph()
    x, w = g.placeholder((2, 8, 8, 16), mg.float16), g.placeholder((3, 3, 16, 8), mg.float16)
    y = g.relu(g.convolution_2d(x, w, padding_style="same"))
    exe = g.compile({x: ((2, 8, 8, 16), mg.float16), w: ((3, 3, 16, 8), mg.float16)}, [y], device="cuda")
    xv, wv = rng.standard_normal((2, 8, 8, 16)).astype(np.float16), rng.standard_normal((3, 3, 16, 8)).astype(np.float16)
    got = exe.run([xv, wv])[0].numpy().astype(np.float64)
    want = g.run({x: xv, w: wv}, [y], device="cpu")[y].numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * 12)
    storage = [e["storage"] for e in exe.memory_plan() if e["op"] == "transpose"]
    # source and the weights' HWIO-to-OIHW transpose (the convolution copies those weights into
    # the order it runs in); the result's is computed inside the convolution + relu step where
    # cuDNN fuses them, else a view too
    assert storage.count("view") >= 2 and set(storage) == {"view"}, exe.memory_plan()
    # the convolution's direct result as a target too
    z = g.convolution_2d(x, w, padding_style="same")
    r = g.run({x: xv, w: wv}, [z, y], device="cuda")
    c = g.run({x: xv, w: wv}, [z, y], device="cpu")
    for t in (z, y):
        np.testing.assert_allclose(r[t].numpy().astype(np.float64), c[t].numpy().astype(np.float64), rtol=2e-2, atol=0.3)


def test_nchw_half_precision_training_step_matches_cpu():
    """NCHW float16 convolutions, where the search may pick channels-last through scratch
    copies: a few SGD steps (CUDA-graph replays) follow the CPU."""
    rng = np.random.default_rng(8)
    xv = rng.standard_normal((8, 16, 10, 10)).astype(np.float16)
    w0 = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float16)

    def losses(device):
        g = mg.Graph()
        x = g.placeholder((8, 16, 10, 10), mg.float16)
        w = g.variable(w0)
        y = g.relu(g.convolution_2d(x, w, padding=[1, 1, 1, 1], data_layout="NCHW", weights_layout="OIHW"))
        loss = g.reduction_sum(g.cast(y * y, mg.float32), axes=[0, 1, 2, 3]) * (1.0 / 8)
        ops = mg.optimizers.SGD(lr=1e-4).minimize(g, loss, [w])
        exe = g.compile({x: ((8, 16, 10, 10), mg.float16)}, [loss], target_operations=ops, device=device)
        return [float(np.asarray(exe.run([xv])[0].numpy()).reshape(-1)[0]) for _ in range(4)]

    np.testing.assert_allclose(losses("cuda"), losses("cpu"), rtol=2e-2)


def test_algorithm_search_times_every_candidate():
    """Regression: the search's early-out compared an untimed candidate's infinity with twice the
    best, so only the first candidate was ever timed and channels-last plans never won."""
    import re
    import subprocess
    import sys
    code = (
        "import numpy as np, mpsgraph as mg\n"
        "g = mg.Graph()\n"
        "x = g.placeholder((4, 28, 28, 32), mg.float16)\n"
        "w = g.constant(np.ones((32, 32, 3, 3), np.float16))\n"
        "y = g.convolution_2d(x, w, strides=[1, 1], padding=[1, 1, 1, 1], data_layout='NHWC', weights_layout='OIHW')\n"
        "g.compile({x: ((4, 28, 28, 32), mg.float16)}, [y], device='cuda')\n")
    env = dict(__import__("os").environ, MPSGRAPH_CUDNN_VERBOSE="1", MPSGRAPH_CUDNN_SEARCH="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    timed = re.findall(r"algo \d+ math \d+: ([0-9.]+) ms", r.stderr)
    if "descriptors ok" not in r.stderr:
        pytest.skip("cuDNN is not available: the direct kernels run")
    assert len(timed) >= 2, r.stderr
    # both layouts were searched and at least one channels-last candidate got a finite time
    last = r.stderr.split("layout last")[-1]
    assert re.search(r"algo \d+ math \d+: [0-9.]+ ms", last), r.stderr


# A float16 pool computes the elementwise group before it at each window tap when it is that
# group's only reader, its windows overlap little and it runs the vector kernel (NHWC channels
# in 16-byte packs); MPSGRAPH_CUDA_POOL_PROLOGUES=0: never. The group then has no buffer in the
# memory plan. (shape, operand shape, pool, kernel, strides, padding, fused in float16)
PROLOGUES = [
    ((2, 8, 13, 12), (8, 1, 1), "max", [3, 3], [2, 2], [1, 1, 1, 1], False),      # NCHW: no vector kernel
    ((2, 13, 12, 8), (8,), "max", [3, 3, 1], [2, 2, 1], [1, 1, 1, 1, 0, 0], True),  # NHWC, as planned
    ((3, 5, 9, 10), (1,), "sum", [3, 3], [3, 3], [0, 1, 1, 0], False),
    ((2, 7, 7, 24), (24,), "avg", [7, 7, 1], [1, 1, 1], [0, 0, 0, 0, 0, 0], True),  # global: one window
    ((2, 9, 9, 16), (16,), "max", [3, 3, 1], [1, 1, 1], [1, 1, 1, 1, 0, 0], False),  # 9 windows a tap: reads memory
    ((2, 9, 8, 16), (16,), "avg", [2, 2, 1], [2, 2, 1], [0, 1, 0, 1, 0, 0], True),  # NHWC packs, padded
    ((2, 9, 8, 12), (12,), "avg", [2, 2, 1], [2, 2, 1], [0, 1, 0, 1, 0, 0], False),  # 12 channels: no whole packs
]


def _prologue_graph(shape, operand, pool, k, s, p, dtype, also_target=False, lone=False):
    g = mg.Graph()
    x = g.placeholder(shape, mg.as_dtype(dtype))
    sc = g.placeholder(operand, mg.as_dtype(dtype))
    sh = g.placeholder(operand, mg.as_dtype(dtype))
    act = g.relu(x if lone else x * sc + sh, name="act")
    kw = dict(kernel_sizes=k, strides=s, dilation_rates=[1] * len(k), padding=p)
    y = getattr(g, f"{pool}_pooling_nd")(act, **kw)
    rng = np.random.default_rng(5)
    feeds = {x: _np(rng.standard_normal(shape), dtype), sc: _np(rng.standard_normal(operand), dtype),
             sh: _np(rng.standard_normal(operand), dtype)}
    feeds[x].reshape(-1)[7] = np.nan  # a NaN computed at a tap still wins its windows
    return g, feeds, [y, act] if also_target else [y]


@pytest.mark.parametrize("case", PROLOGUES, ids=range(len(PROLOGUES)))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pool_computes_the_group_before_it(case, dtype):
    shape, operand, pool, k, s, p, fused = case
    fused = fused and dtype == "float16"  # bfloat16 and float32 pools read memory (slower fused)
    g, feeds, targets = _prologue_graph(shape, operand, pool, k, s, p, dtype)
    exe = g.compile({t: (v.shape, mg.as_dtype(v.dtype)) for t, v in feeds.items()}, targets, device="cuda")
    got = np.asarray(exe.run([feeds[t] for t in feeds])[0])
    want = g.run(feeds, targets, device="cpu")[targets[0]].numpy()
    if pool == "max":  # the same elementwise bits, the same maximum (float32 compares NaNs of bfloat16 too)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    else:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    planned = {e["node"] for e in exe.memory_plan()}
    assert ("act" not in planned) == fused, exe.memory_plan()


@pytest.mark.parametrize("lone,also_target", [(True, False), (False, True)])
def test_pool_prologue_lone_node_and_shared_value(lone, also_target):
    g, feeds, targets = _prologue_graph((2, 10, 12, 16), (16,), "max", [2, 2, 1], [2, 2, 1], [0, 0, 0, 0, 0, 0],
                                        "float16", also_target=also_target, lone=lone)
    exe = g.compile({t: (v.shape, mg.as_dtype(v.dtype)) for t, v in feeds.items()}, targets, device="cuda")
    got = [np.asarray(r) for r in exe.run([feeds[t] for t in feeds])]
    want = g.run(feeds, targets, device="cpu")
    for t, r in zip(targets, got):
        np.testing.assert_array_equal(r.astype(np.float32), want[t].numpy().astype(np.float32))
    planned = {e["node"] for e in exe.memory_plan()}
    assert ("act" in planned) == also_target  # a target is computed once, into its buffer


def test_pool_prologue_gives_the_bits_of_the_unfused_kernels(tmp_path):
    script = (
        "import sys, numpy as np, mpsgraph as mg\n"
        "g = mg.Graph()\n"
        "x = g.placeholder((2, 15, 14, 16), mg.float16); s = g.placeholder((16,), mg.float16)\n"
        "a = g.sigmoid(x * s) * x\n"
        "kw = dict(dilation_rates=[1, 1, 1])\n"
        "ys = [g.max_pooling_nd(a, kernel_sizes=[3, 3, 1], strides=[2, 2, 1], padding=[1, 1, 1, 1, 0, 0], **kw),\n"
        "      g.avg_pooling_nd(g.relu(x - s), kernel_sizes=[2, 2, 1], strides=[2, 2, 1], padding=[0, 0, 0, 0, 0, 0], **kw)]\n"
        "rng = np.random.default_rng(1)\n"
        "r = g.run({x: rng.standard_normal((2, 15, 14, 16)).astype(np.float16), s: rng.standard_normal(16).astype(np.float16)},\n"
        "          ys, device='cuda')\n"
        "assert not [e for e in g.compile({x: ((2, 15, 14, 16), mg.float16), s: ((16,), mg.float16)}, ys, device='cuda')\n"
        "            .memory_plan() if e['node'].startswith('relu')] or sys.argv[2] == '0'\n"
        "np.save(sys.argv[1], np.concatenate([np.asarray(r[y]).ravel() for y in ys]))\n")
    outs = []
    for flag in ("1", "0"):
        path = str(tmp_path / f"pool{flag}.npy")
        p = subprocess.run([sys.executable, "-c", script, path, flag], env=dict(os.environ, MPSGRAPH_CUDA_POOL_PROLOGUES=flag),
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        outs.append(np.load(path))
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
