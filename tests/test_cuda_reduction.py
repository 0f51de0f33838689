"""Reductions and cuBLASLt epilogues on cuda:0.

Reductions pick a kernel by the layout of the reduced dims (rows, columns, middle axes, several
axes, whole tensor, split over blocks with a second pass); every layout is checked here against
numpy (float64 references), with NaN, float16/bfloat16, integers, size-0 and size-1 axes, long
rows and arg max/min ties. Epilogues (matmul + bias [+ relu] as one GEMM) are checked against
the CPU and against the same graph run with MPSGRAPH_CUDA_EPILOGUES=0 (in a subprocess: the
switch is read when a program is compiled, and compiled programs are cached per process).
Skips where no GPU is present."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

TOL = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 8e-2}


def _np(a, dtype):
    if dtype == "bfloat16":
        import ml_dtypes
        return a.astype(ml_dtypes.bfloat16)
    return a.astype(dtype)


def _run(build, feeds, device="cuda:0"):
    """build(g, placeholders) -> list of tensors; returns numpy results."""
    g = mg.Graph()
    ph = [g.placeholder(v.shape, getattr(mg, str(v.dtype))) for v in feeds]
    outs = build(g, ph)
    r = g.run(dict(zip(ph, feeds)), outs, device=device)
    return [np.asarray(r[o]) for o in outs]


# (shape, axes): rows, columns, middle axes, several axes, whole tensor, size-1 and size-0 dims
LAYOUTS = [
    ((37, 50), [1]),            # short rows: a warp per row
    ((5, 3000), [1]),           # long rows: blocks over chunks
    ((2, 70000), [1]),          # rows longer than 64K, split with a second pass
    ((200000,), [0]),           # whole tensor, split
    ((8192, 64), [0]),          # column: bias gradient of a batch
    ((3000, 5), [0]),           # column narrower than a warp
    ((4, 300, 33), [1]),        # middle axis
    ((6, 7, 8), [0, 2]),        # reduced, kept, reduced: the general kernel
    ((3, 4, 5, 6), [1, 2]),     # middle axes merged
    ((2, 3, 4, 5), [0, 1, 2, 3]),
    ((7, 1, 9), [1]),           # size-1 axis reduced: nothing summed
    ((1, 9, 1), [0, 2]),
    ((0, 5), [1]),              # no outputs
    ((4, 0, 3), [1]),           # empty reduction: initial values
    ((), []),
]


NUMPY = {"reduction_sum": np.sum, "mean": np.mean, "variance": np.var, "reduction_maximum": np.max,
         "reduction_minimum": np.min, "reduction_product": np.prod}


def _ref(op, x, axes, keep):
    ax = tuple(axes)
    x64 = x.astype(np.float64) if x.dtype.kind == "f" or str(x.dtype) == "bfloat16" else x
    if op != "logsumexp":
        return NUMPY[op](x64, axis=ax, keepdims=keep)
    m = np.max(x64, axis=ax, keepdims=True) if x.size else np.full([1] * x.ndim, -np.inf)
    m = np.where(np.isfinite(m), m, 0)
    r = np.log(np.sum(np.exp(x64 - m), axis=ax, keepdims=True)) + m
    return r if keep else np.squeeze(r, axis=ax)


def _check(got, want, dtype, n_red=1):
    tol = TOL[dtype] * (1 + np.log2(max(n_red, 1)) / 4)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,axes", LAYOUTS)
@pytest.mark.parametrize("op", ["reduction_sum", "mean", "variance", "logsumexp", "reduction_maximum", "reduction_minimum"])
def test_float_reductions_every_layout(op, shape, axes):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    n_red = int(np.prod([shape[a] for a in axes])) if axes else 1
    if n_red == 0 and op in ("reduction_maximum", "reduction_minimum"):
        pytest.skip("a zero-size maximum is an error (tests/test_cuda_reduction.py::test_empty_max_is_an_error)")
    for keep in (False, True):
        got = _run(lambda g, p: [getattr(g, op)(p[0], axes=axes, keep_dims=keep)], [x])[0]
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean/var of an empty slice
            want = _ref(op, x, axes, keep)
        assert got.shape == want.shape
        _check(got, want, "float32", n_red)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,axes", [((37, 50), [1]), ((2, 70000), [1]), ((8192, 64), [0]), ((4, 300, 33), [1]),
                                        ((6, 7, 8), [0, 2]), ((100000,), [0])])
@pytest.mark.parametrize("op", ["reduction_sum", "mean", "variance", "logsumexp", "reduction_maximum"])
def test_half_reductions_accumulate_in_float32(op, shape, axes, dtype):
    rng = np.random.default_rng(2)
    x = _np(rng.standard_normal(shape), dtype)
    got = _run(lambda g, p: [getattr(g, op)(p[0], axes=axes, keep_dims=False)], [x])[0]
    want = _ref(op, x.astype(np.float64), axes, False)
    n_red = int(np.prod([shape[a] for a in axes]))
    # one rounding of the result to the dtype, plus float32 summation
    scale = np.maximum(np.abs(want), 1.0) if op == "reduction_sum" else 1.0
    assert np.all(np.abs(got.astype(np.float64) - want) <= TOL[dtype] * scale * (1 + np.log2(n_red) / 4))


@pytest.mark.parametrize("shape,axes", [((37, 50), [1]), ((5, 3000), [1]), ((8192, 64), [0]), ((6, 7, 8), [0, 2]),
                                        ((200000,), [0])])
def test_nan_propagates(shape, axes):
    x = np.ones(shape, np.float32)
    x.reshape(-1)[x.size // 2] = np.nan
    ops = ["reduction_sum", "mean", "variance", "logsumexp", "reduction_maximum", "reduction_minimum"]
    got = _run(lambda g, p: [getattr(g, o)(p[0], axes=axes, keep_dims=False) for o in ops], [x])
    for o, r in zip(ops, got):
        want = _ref(o, x, axes, False)
        np.testing.assert_array_equal(np.isnan(r), np.isnan(want), err_msg=o)


def test_logsumexp_infinities():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 2.0], [np.inf, np.nan]], np.float32)
    got = _run(lambda g, p: [g.logsumexp(p[0], axes=[1], keep_dims=False)], [x])[0]
    np.testing.assert_array_equal(got[:3], [-np.inf, np.inf, 2.0])
    assert np.isnan(got[3])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
@pytest.mark.parametrize("shape,axes", [((37, 50), [1]), ((3, 5000), [1]), ((9000, 40), [0]), ((6, 7, 8), [0, 2]),
                                        ((100000,), [0])])
def test_integer_reductions_wrap_exactly(dtype, shape, axes):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    small = rng.integers(0, 3, size=shape).astype(dtype)  # products of 0..2 (wrapping)
    ops = ["reduction_sum", "reduction_maximum", "reduction_minimum"]
    got = _run(lambda g, p: [getattr(g, o)(p[0], axes=axes, keep_dims=False) for o in ops] +
               [g.reduction_product(p[1], axes=axes, keep_dims=False)], [x, small])
    ax = tuple(axes)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[0], np.sum(x, axis=ax, dtype=dtype))
        np.testing.assert_array_equal(got[3], np.prod(small, axis=ax, dtype=dtype))
    np.testing.assert_array_equal(got[1], np.max(x, axis=ax))
    np.testing.assert_array_equal(got[2], np.min(x, axis=ax))


@pytest.mark.parametrize("shape,axes", [((37, 50), [1]), ((3, 5000), [1]), ((9000, 40), [0]), ((6, 7, 8), [0, 2]),
                                        ((4, 0, 3), [1])])
def test_and_or(shape, axes):
    rng = np.random.default_rng(4)
    x = rng.random(shape) > 0.001
    y = (rng.random(shape) < 0.001).astype(np.float32)
    got = _run(lambda g, p: [g.reduction_and(p[0], axes=axes, keep_dims=False), g.reduction_or(p[1], axes=axes, keep_dims=False),
                             g.reduction_maximum(p[0], axes=axes, keep_dims=False) if x.size and shape[axes[0]] else
                             g.reduction_or(p[0], axes=axes, keep_dims=False)], [x, y])
    ax = tuple(axes)
    np.testing.assert_array_equal(got[0], np.all(x, axis=ax))
    np.testing.assert_array_equal(got[1], np.any(y != 0, axis=ax))
    np.testing.assert_array_equal(got[2], np.any(x, axis=ax))


@pytest.mark.parametrize("shape,axis", [((37, 50), 1), ((3, 70000), 1), ((9000, 40), 0), ((4, 300, 33), 1), ((200000,), 0)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_arg_reductions_first_index_on_ties(shape, axis, dtype):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, size=shape).astype(dtype)  # many ties
    got = _run(lambda g, p: [g.reduction_arg_maximum(p[0], axis=axis, keep_dims=False),
                             g.reduction_arg_minimum(p[0], axis=axis, keep_dims=False)], [x])
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=axis))
    np.testing.assert_array_equal(got[1], np.argmin(x, axis=axis))


@pytest.mark.parametrize("shape,axis", [((5, 3000), 1), ((9000, 4), 0), ((200000,), 0)])
def test_arg_reductions_first_nan_wins(shape, axis):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[[7, 1234, x.size - 3]] = np.nan
    got = _run(lambda g, p: [g.reduction_arg_maximum(p[0], axis=axis, keep_dims=False),
                             g.reduction_arg_minimum(p[0], axis=axis, keep_dims=False)], [x])
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=axis))
    np.testing.assert_array_equal(got[1], np.argmin(x, axis=axis))


def test_empty_max_is_an_error():
    g = mg.Graph()
    x = g.placeholder((4, 0), mg.float32)
    with pytest.raises(mg.GraphValueError, match="zero-size"):
        g.run({x: np.zeros((4, 0), np.float32)}, [g.reduction_maximum(x, axes=[1])], device="cuda:0")


@pytest.mark.parametrize("xs,like", [((8192, 64), (64,)), ((8192, 64), (1, 64)), ((4, 5, 6), (5, 1)), ((3, 1, 7), (3, 1, 1)),
                                     ((64, 32, 8, 8), (32, 1, 1))])
def test_sum_to_like(xs, like):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    lk = np.zeros(like, np.float32)
    got = _run(lambda g, p: [g.sum_to_like(p[0], p[1])], [x, lk])[0]
    lead = len(xs) - len(like)
    ax = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(like) if n == 1 and xs[lead + d] != 1)
    want = np.sum(x.astype(np.float64), axis=ax, keepdims=True).reshape(like)
    _check(got, want, "float32", x.size // max(want.size, 1))


def test_float_sums_are_deterministic():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((8192, 64)).astype(np.float32)
    y = rng.standard_normal((1 << 20,)).astype(np.float32)
    g = mg.Graph()
    a = g.placeholder(x.shape, mg.float32)
    b = g.placeholder(y.shape, mg.float32)
    outs = [g.reduction_sum(a, axes=[0]), g.mean(b), g.variance(a, axes=[0])]
    first = [np.asarray(v) for v in g.run({a: x, b: y}, outs, device="cuda:0").values()]
    for _ in range(3):
        again = [np.asarray(v) for v in g.run({a: x, b: y}, outs, device="cuda:0").values()]
        for u, v in zip(first, again):
            np.testing.assert_array_equal(u, v)


# ---- cuBLASLt epilogues ----

def _mlp(dtype, act, batch=256, k=64, n=48):
    rng = np.random.default_rng(9)
    feeds = [_np(rng.standard_normal((batch, k)), dtype), _np(rng.standard_normal((k, n)) / 8, dtype),
             _np(rng.standard_normal((n,)), dtype)]

    def build(g, p):
        y = p[0] @ p[1] + p[2]
        if act == "relu":
            y = g.relu(y)
        elif act == "bias_first":
            y = p[2] + p[0] @ p[1]
        return [y]
    return build, feeds


EPI_SCRIPT = r"""
import sys, numpy as np, mpsgraph as mg
sys.path.insert(0, {tests!r})
from test_cuda_reduction import _mlp, _run
build, feeds = _mlp({dtype!r}, {act!r})
np.save({out!r}, _run(build, feeds)[0].astype(np.float32))
"""


@pytest.mark.parametrize("act", ["none", "relu", "bias_first"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_matmul_bias_epilogue(act, dtype, tmp_path):
    build, feeds = _mlp(dtype, act)
    got = _run(build, feeds)[0]
    cpu = _run(build, feeds, device="cpu")[0]
    tol = {"float32": 2e-4, "float16": 2e-2, "bfloat16": 8e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float32), cpu.astype(np.float32), rtol=tol, atol=tol)
    out = str(tmp_path / "off.npy")
    script = EPI_SCRIPT.format(tests=os.path.dirname(__file__), dtype=dtype, act=act, out=out)
    env = dict(os.environ, MPSGRAPH_CUDA_EPILOGUES="0")
    subprocess.run([sys.executable, "-c", script], env=env, check=True)
    np.testing.assert_allclose(got.astype(np.float32), np.load(out), rtol=tol, atol=tol)


def test_epilogue_absorbs_nodes_only_when_read_once():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)

    def build(g, p):
        m = p[0] @ p[1]
        y = m + p[2]
        return [g.relu(y), y * 2.0, m]  # the product and the sum are read elsewhere too
    got = _run(build, [x, w, b])
    m = x.astype(np.float64) @ w
    for u, v in zip(got, [np.maximum(m + b, 0), (m + b) * 2, m]):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)
    g = mg.Graph()
    px, pw, pb = (g.placeholder(a.shape, mg.float32) for a in (x, w, b))
    y = g.relu(px @ pw + pb)
    exe = g.compile({px: (x.shape, mg.float32), pw: (w.shape, mg.float32), pb: (b.shape, mg.float32)}, [y], device="cuda:0")
    ops = [e["op"] for e in exe.memory_plan() if e["storage"] not in ("feed", "constant", "variable", "scratch")]
    assert ops == ["relu"]  # one step: the GEMM with its bias and relu


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mlp_training_step_gradients_match_cpu(dtype):
    rng = np.random.default_rng(11)
    sizes = [64, 128, 64, 10]
    feeds = [_np(rng.standard_normal((512, 64)), dtype), _np(rng.standard_normal((512, 10)), dtype)]
    for a, b in zip(sizes, sizes[1:]):
        feeds += [_np(rng.standard_normal((a, b)) / np.sqrt(a), dtype), _np(rng.standard_normal((b,)) / 4, dtype)]

    def build(g, p):
        h = p[0]
        for i in range(3):
            h = h @ p[2 + 2 * i] + p[3 + 2 * i]
            if i < 2:
                h = g.relu(h)
        loss = g.mean(g.square(h - p[1]))
        grads = g.gradients(loss, p[2:])
        return [loss] + [grads[v] for v in p[2:]]
    got = _run(build, feeds)
    cpu = _run(build, feeds, device="cpu")
    tol = 2e-4 if dtype == "float32" else 3e-2
    for u, v in zip(got, cpu):
        np.testing.assert_allclose(u.astype(np.float32), v.astype(np.float32), rtol=tol, atol=tol)
