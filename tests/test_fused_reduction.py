"""Reductions fused into elementwise groups on the CPU: a reduction (sum, product, mean, maximum,
minimum, sum_to_like over trailing or leading axes) whose input only it reads, made by a fused
group or a lone elementwise op, reduces the values as the group makes them. Checked bit for bit
against the same graph with fusion off (MPSGRAPH_CPU_FUSION=0: the group's output stored, then
the reduction kernel), against numpy in float64, and through the memory plan (the group's
output is no longer an intermediate). Shapes cover short rows (fewer than 16 or 32 values: the
kernels' sequential paths), rows over several tiles, leading axes, the reduce range split over
threads, size-1 and empty dims, keep_dims, broadcast operands, float16/bfloat16, NaN, inf and
signed zeros."""
import ml_dtypes
import numpy as np
import pytest
from fusion_helpers import fusion

import mpsgraph as mg

BF16 = np.dtype(ml_dtypes.bfloat16)
MG_DT = {np.dtype("float32"): mg.float32, np.dtype("float16"): mg.float16, BF16: mg.bfloat16}
DTYPES = [np.dtype("float32"), np.dtype("float16"), BF16]
TOL = {np.dtype("float32"): 2e-5, np.dtype("float16"): 2e-2, BF16: 6e-2}


def compile_run(build, arrays, fuse):
    with fusion(fuse):
        g = mg.Graph()
        ps = [g.placeholder(a.shape, MG_DT[a.dtype]) for a in arrays]
        out = build(g, *ps)
        exe = g.compile({p: (a.shape, MG_DT[a.dtype]) for p, a in zip(ps, arrays)}, [out], device="cpu")
        r, = exe.run(list(arrays))
        return r.numpy().copy(), exe.memory_plan()


def arena_values(plan):
    return sum(1 for e in plan if e["storage"] == "arena" and not e.get("scratch"))


def bits(a):
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(np.uint32)


def fused_equals_unfused(build, arrays, expect_fused=True):
    fused, plan_f = compile_run(build, arrays, True)
    plain, plan_u = compile_run(build, arrays, False)
    assert fused.dtype == plain.dtype and fused.shape == plain.shape
    # NaN where the unfused graph has NaN (its sign is whichever operand an elementwise loop
    # kept, fused or not); every other value the same bits, signed zeros included
    nan = np.isnan(fused.astype(np.float32))
    np.testing.assert_array_equal(nan, np.isnan(plain.astype(np.float32)))
    np.testing.assert_array_equal(bits(fused)[~nan], bits(plain)[~nan])
    if expect_fused:
        assert arena_values(plan_f) < arena_values(plan_u)
    return fused


def rand(shape, dtype, rng, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def check_close(got, want, dtype):
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max(initial=0)))


# the ops in mpsgraph and numpy; numpy reduces the dtype-rounded elementwise result in float64
REDUCE = {
    "sum": (lambda g, v, ax, kd: g.reduction_sum(v, axes=ax, keep_dims=kd), np.sum),
    "mean": (lambda g, v, ax, kd: g.mean(v, axes=ax, keep_dims=kd), np.mean),
    "max": (lambda g, v, ax, kd: g.reduction_maximum(v, axes=ax, keep_dims=kd), np.max),
    "min": (lambda g, v, ax, kd: g.reduction_minimum(v, axes=ax, keep_dims=kd), np.min),
    "prod": (lambda g, v, ax, kd: g.reduction_product(v, axes=ax, keep_dims=kd), np.prod),
}


def expr_mg(g, x, b, red):
    if red == "prod":  # values near 1, so long products stay finite
        return g.tanh(x * 0.01 + b * 0.001) + 1.0
    return g.relu(x * 0.5 + b) - g.sigmoid(x)


def expr_np(x, b, red):
    """The same ops in x's dtype, rounded after each op as the kernels do."""
    dt = x.dtype
    f = lambda v: np.asarray(v, np.float32).astype(dt)  # noqa: E731
    if red == "prod":
        return f(f(np.tanh(f(f(x * dt.type(0.01)) + f(b * dt.type(0.001))).astype(np.float32))) + dt.type(1.0))
    sig = f(1 / (1 + np.exp(-x.astype(np.float32))))
    return f(f(np.maximum(f(f(x * dt.type(0.5)) + b), 0)) - sig)


# (x shape, bias shape, axes): trailing, leading, full, middle (not fused), size-1 dims, short rows
CASES = [((37, 129), (129,), (1,)), ((37, 129), (37, 1), (0,)), ((37, 129), (1,), (0, 1)),
         ((5, 7, 33), (7, 1), (2,)), ((5, 7, 33), (33,), (1, 2)), ((5, 7, 33), (1, 7, 1), (0,)),
         ((5, 7, 33), (33,), (0, 1)), ((1, 50, 1, 7), (7,), (1,)), ((1, 50, 1, 7), (50, 1, 1), (3,)),
         ((9, 5), (5,), (1,)), ((9, 20), (20,), (1,)), ((9, 40), (40,), (1,)), ((3, 1100), (1100,), (1,)),
         ((1100, 3), (3,), (0,)), ((6, 4099), (4099,), (0,)), ((5, 1, 33), (33,), (1,)), ((9000, 2), (2,), (1,))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("red", list(REDUCE))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + "_ax" + "".join(map(str, c[2])))
def test_fused_reduction_bitwise_and_numpy(case, red, dtype):
    shape, bshape, axes = case
    rng = np.random.default_rng(sum(shape) + len(axes))
    x, b = rand(shape, dtype, rng), rand(bshape, dtype, rng)
    mg_red, np_red = REDUCE[red]
    for keep in (True, False):
        got = fused_equals_unfused(lambda g, px, pb: mg_red(g, expr_mg(g, px, pb, red), list(axes), keep), [x, b])
        want = np_red(expr_np(x, b, red).astype(np.float64), axis=axes, keepdims=keep)
        assert got.shape == want.shape
        check_close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("red", ["sum", "mean", "max", "min"])
def test_middle_axes_run_unfused_and_agree(red, dtype):
    rng = np.random.default_rng(3)
    x, b = rand((4, 9, 6), dtype, rng), rand((6,), dtype, rng)
    mg_red, np_red = REDUCE[red]
    got = fused_equals_unfused(lambda g, px, pb: mg_red(g, expr_mg(g, px, pb, red), [1], True), [x, b],
                               expect_fused=False)
    check_close(got, np_red(expr_np(x, b, red).astype(np.float64), axis=1, keepdims=True), dtype)


@pytest.mark.parametrize("red", list(REDUCE))
@pytest.mark.parametrize("shape,axes", [((140000,), (0,)), ((3, 50000), (0, 1)), ((40000, 3), (0,)),
                                        ((20000, 1, 5), (0, 1))], ids=["flat", "full2d", "lead", "lead3d"])
def test_reduce_range_split_over_threads(shape, axes, red):
    """Long reductions with few outputs: the kernels split the range into parts combined in
    order; the fused walk splits it the same way."""
    rng = np.random.default_rng(11)
    x, b = rand(shape, np.float32, rng), rand(shape[-1:], np.float32, rng)
    mg_red, np_red = REDUCE[red]
    got = fused_equals_unfused(lambda g, px, pb: mg_red(g, expr_mg(g, px, pb, red), list(axes), False), [x, b])
    check_close(got, np_red(expr_np(x, b, red).astype(np.float64), axis=axes), np.dtype("float32"))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("red", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("shape,axes", [((7, 300), (1,)), ((7, 45), (1,)), ((300, 7), (0,)), ((640,), (0,))])
def test_nan_inf_and_signed_zeros(shape, axes, red, dtype):
    """NaN (made inside the group by log of a negative, and fed), infinities and -0.0 reduce
    exactly as the unfused kernels reduce them."""
    rng = np.random.default_rng(5)
    x = rand(shape, dtype, rng)
    x.flat[::37] = np.inf
    x.flat[5::41] = -np.inf
    x.flat[3::29] = -0.0
    x.flat[11::97] = np.nan
    mg_red, np_red = REDUCE[red]
    got = fused_equals_unfused(lambda g, px: mg_red(g, g.maximum(px, px * -1.0) - g.logarithm(px * -1.0), list(axes),
                                                    True), [x])
    xf = x.astype(np.float64)
    with np.errstate(all="ignore"):
        want = np_red(np.maximum(xf, -xf) - np.log(-xf), axis=axes, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    check_close(np.where(fin, got, 0), np.where(fin, want, 0), dtype)


def test_signed_zero_maximum_order():
    """max/min over only zeros of both signs: which zero wins depends on the order of
    comparisons, so this pins the fused lanes to the kernel's."""
    for n in (20, 40, 47, 1030):
        x = np.where(np.arange(n) % 3 == 0, np.float32(-0.0), np.float32(0.0)).astype(np.float32)[None, :]
        for red in ("max", "min"):
            mg_red, _ = REDUCE[red]
            got = fused_equals_unfused(lambda g, px: mg_red(g, px * 1.0, [1], False), [x])
            assert got[0] == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("xs,ys", [((64, 33), (33,)), ((64, 33), (1, 33)), ((64, 33), (64, 1)),
                                   ((4, 5, 300), (5, 300)), ((4, 5, 300), (4, 5, 1)), ((9, 1, 7), (1, 7))])
def test_sum_to_like(xs, ys, dtype):
    """The bias gradient: sum_to_like of a fused group's output (adds in x's element order)."""
    rng = np.random.default_rng(len(xs) * 10 + len(ys))
    x, like = rand(xs, dtype, rng), rand(ys, dtype, rng)
    got = fused_equals_unfused(lambda g, px, pl: g.sum_to_like(g.relu(px) * 0.5 - px, pl), [x, like])
    f32 = np.float32
    half = (np.maximum(x, 0).astype(f32) * f32(0.5)).astype(dtype)
    v = (half.astype(f32) - x.astype(f32)).astype(dtype).astype(np.float64)
    lead = len(xs) - len(ys)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(ys) if d == 1 and xs[lead + i] != 1)
    want = v.sum(axis=axes, keepdims=True).reshape(ys)
    check_close(got, want, dtype)


def test_lone_op_and_group_root_fuse_but_shared_values_do_not():
    rng = np.random.default_rng(9)
    x = rand((50, 70), np.float32, rng)
    # a lone elementwise op and its reduction: one step, no intermediate
    _, plan = compile_run(lambda g, px: g.reduction_sum(g.square(px), axes=[1]), [x], True)
    assert arena_values(plan) == 0
    # the group's output is also read elsewhere: it is stored and reduced by the reduction kernel
    def shared(g, px):
        y = g.relu(px * 2.0 + 1.0)
        return g.reduction_sum(y, axes=[1]) + g.reduction_maximum(y, axes=[1])
    got = fused_equals_unfused(shared, [x], expect_fused=False)
    y = np.maximum(x * np.float32(2) + np.float32(1), 0).astype(np.float64)
    np.testing.assert_allclose(got, y.sum(1, keepdims=True) + y.max(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("red", ["sum", "mean", "prod"])
@pytest.mark.parametrize("shape,axes", [((0, 5), (1,)), ((0, 5), (0,)), ((4, 0), (1,)), ((4, 0, 3), (0, 2))])
def test_empty_dims(shape, axes, red):
    """Empty inputs are not fused (nothing to walk) and give numpy's results."""
    x = np.zeros(shape, np.float32)
    b = np.ones(shape[-1:], np.float32)
    mg_red, np_red = REDUCE[red]
    got = fused_equals_unfused(lambda g, px, pb: mg_red(g, expr_mg(g, px, pb, red), list(axes), True), [x, b],
                               expect_fused=False)
    with np.errstate(all="ignore"):
        want = np_red(expr_np(x, b, red).astype(np.float64), axis=axes, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("red", ["sum", "mean"])
@pytest.mark.parametrize("shape,axes", [((6, 40), (1,)), ((3, 1500), (1,)), ((1, 70000), (0, 1)), ((40, 7), (0,)),
                                        ((40000, 2), (0,))])
def test_summation_order_is_the_kernels(shape, axes, red):
    """Values of wildly different sizes (+-1e30 among ones), where the order of additions
    decides the result even in double: the fused walk adds in the kernels' order (eight lanes
    over a row, rows in order over leading axes, parts over threads)."""
    rng = np.random.default_rng(12)
    x = rng.choice(np.array([1.0, 3.0, -7.0], np.float32), size=shape)
    if axes != (0,):  # +1e30 and -1e30 eight apart (one lane) at each row's start
        x.reshape(-1, shape[-1] if len(axes) == 1 else x.size)[:, :9] = [1e30, 1, 1, 1, 1, 1, 1, 1, -1e30]
    else:  # rows of +-1e30 among the others
        x[1::5] = 1e30
        x[3::7] = -1e30
    mg_red, _ = REDUCE[red]
    got = fused_equals_unfused(lambda g, px: mg_red(g, px * 2.0 + 1.0, list(axes), False), [x])
    v = x.astype(np.float64) * 2 + 1
    seq = np.zeros(got.shape, np.float64)  # plain left-to-right sums: a different order
    moved = np.moveaxis(v.reshape(shape), axes, range(len(axes))).reshape((-1,) + got.shape)
    for row in moved:
        seq = seq + row
    if red == "mean":
        seq = seq / moved.shape[0]
    # trailing rows (several lanes) give other values than the left-to-right order somewhere
    if axes != (0,):
        assert (got != seq.astype(np.float32)).any()
