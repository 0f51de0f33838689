"""Matrix products on the GPU whose operands come through a transpose (a transpose or swap_axes
node, as the gradients' are). By default (MPSGRAPH_CUDA_MATMUL_TRANSPOSES=0, read at the process's
first compile, turns it off) a transpose that only matrix products read is not run: a swap of the last two dims goes
to cuBLASLt as its transpose flag, other orders are copied into scratch inside the product's
step. Checked against numpy in float64 either way, with the memory plan showing which
transposes still run a step. Skips without a GPU."""
import os

import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

ABSORBED = os.environ.get("MPSGRAPH_CUDA_MATMUL_TRANSPOSES") != "0"
TOL = {"float32": (2e-5, 2e-5), "float16": (2e-2, 2e-2), "int32": (0, 0)}


def transpose_steps(exe):
    """Transposes that run as steps of their own (an absorbed one is listed as a view)."""
    return len({e["node"] for e in exe.memory_plan() if e["op"] in ("transpose", "swap_axes") and e["storage"] != "view"})


def check(g, feeds, targets, wants, dtype, transposes_run=0, transposes=1):
    """transposes_run: the transpose steps left when they are absorbed; `transposes` otherwise."""
    exe = g.compile({p: (v.shape, mg.as_dtype(v.dtype)) for p, v in feeds.items()}, targets, device="cuda")
    for _ in range(2):  # the second run replays the captured graph
        outs = exe.run([mg.TensorData(v) for v in feeds.values()])
        for got, want in zip(outs, wants):
            rtol, atol = TOL[dtype]
            np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=rtol, atol=atol * np.abs(want).max())
    assert transpose_steps(exe) == (transposes_run if ABSORBED else transposes)


def as_np(v):
    return np.asarray(v).astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("which", ["x", "y", "both"])
def test_two_d_operands_through_a_transpose(dtype, which):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 20)) if which in ("x", "both") else rng.standard_normal((20, 37))
    b = rng.standard_normal((29, 37)) if which in ("y", "both") else rng.standard_normal((37, 29))
    if dtype == "int32":
        a, b = np.round(a * 3), np.round(b * 3)
    a, b = a.astype(dtype), b.astype(dtype)
    g = mg.Graph()
    pa, pb = g.placeholder(a.shape, mg.as_dtype(dtype)), g.placeholder(b.shape, mg.as_dtype(dtype))
    x = g.transpose(pa, [1, 0]) if which in ("x", "both") else pa
    y = g.swap_axes(pb, 0, 1) if which in ("y", "both") else pb
    want = (as_np(a).T if which in ("x", "both") else as_np(a)) @ (as_np(b).T if which in ("y", "both") else as_np(b))
    check(g, {pa: a, pb: b}, [x @ y], [want], dtype, transposes=2 if which == "both" else 1)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batched_swaps_and_other_orders(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 11, 6)).astype(dtype)   # value (3, 6, 11): last two swapped
    b = rng.standard_normal((11, 3, 5)).astype(dtype)   # value (3, 11, 5): batch dim moved
    c = rng.standard_normal((11, 5)).astype(dtype)
    g = mg.Graph()
    pa, pb, pc = (g.placeholder(v.shape, mg.as_dtype(dtype)) for v in (a, b, c))
    xa = g.transpose(pa, [0, 2, 1])
    r1 = xa @ g.transpose(pb, [1, 0, 2])      # swapped x (no folding of its batch), permuted y
    r2 = xa @ pc                               # swapped x against a 2-D y
    A, B, C = as_np(a).transpose(0, 2, 1), as_np(b).transpose(1, 0, 2), as_np(c)
    check(g, {pa: a, pb: b, pc: c}, [r1, r2], [A @ B, A @ C], dtype, transposes=2)


def test_broadcast_batches_of_a_swapped_operand():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 1, 7, 4)).astype(np.float32)  # value (2, 1, 4, 7)
    b = rng.standard_normal((3, 7, 5)).astype(np.float32)
    g = mg.Graph()
    pa, pb = g.placeholder(a.shape, mg.float32), g.placeholder(b.shape, mg.float32)
    r = g.transpose(pa, [0, 1, 3, 2]) @ pb
    check(g, {pa: a, pb: b}, [r], [as_np(a).transpose(0, 1, 3, 2) @ as_np(b)], "float32")


@pytest.mark.parametrize("relu", [False, True])
def test_bias_epilogue_with_a_transposed_weight(relu):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    w = rng.standard_normal((16, 32)).astype(np.float32)  # used as w.T
    bias = rng.standard_normal(16).astype(np.float32)
    g = mg.Graph()
    px, pw = g.placeholder(x.shape, mg.float32), g.placeholder(w.shape, mg.float32)
    h = px @ g.transpose(pw, [1, 0]) + g.constant(bias)
    h = g.relu(h) if relu else h
    want = as_np(x) @ as_np(w).T + bias
    check(g, {px: x, pw: w}, [h], [np.maximum(want, 0) if relu else want], "float32")


def test_a_transpose_read_elsewhere_still_runs():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((9, 12)).astype(np.float32)
    b = rng.standard_normal((9, 4)).astype(np.float32)
    g = mg.Graph()
    pa, pb = g.placeholder(a.shape, mg.float32), g.placeholder(b.shape, mg.float32)
    t = g.transpose(pa, [1, 0])
    check(g, {pa: a, pb: b}, [t @ pb, t * 2.0], [as_np(a).T @ as_np(b), as_np(a).T * 2], "float32", transposes_run=1)


def test_mlp_gradients_match_the_cpu():
    """The MLP step's weight and data gradients read transposed operands: the same values as
    the CPU's, and no transpose step left on the GPU when they are absorbed."""
    rng = np.random.default_rng(5)
    xb = rng.standard_normal((128, 64)).astype(np.float32)
    yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    dims = [64, 128, 64, 10]
    ws = [rng.normal(0, np.sqrt(2 / i), (i, o)).astype(np.float32) for i, o in zip(dims, dims[1:])]
    outs = {}
    for dev in ("cpu", "cuda"):
        g = mg.Graph()
        x, t = g.placeholder((128, 64)), g.placeholder((128, 10))
        mw = [g.constant(v) for v in ws]
        h = x
        for k, w in enumerate(mw):
            h = h @ w
            h = h if k == len(mw) - 1 else g.relu(h)
        loss = g.softmax_cross_entropy(h, t, reduction="mean")
        grads = g.gradients(loss, mw + [x])
        exe = g.compile({x: ((128, 64), mg.float32), t: ((128, 10), mg.float32)}, [grads[v] for v in mw + [x]],
                        device=dev)
        outs[dev] = [np.asarray(v) for v in exe.run([mg.TensorData(xb), mg.TensorData(yb)])]
        if dev == "cuda":
            assert (transpose_steps(exe) == 0) == ABSORBED
    for c, d in zip(outs["cpu"], outs["cuda"]):
        np.testing.assert_allclose(d, c, rtol=1e-4, atol=1e-5 * np.abs(c).max())
