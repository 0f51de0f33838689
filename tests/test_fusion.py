"""Fused elementwise groups on the CPU: every fused form against the same graph compiled with
fusion off (MPSGRAPH_CPU_FUSION=0; bit-identical, since each op rounds as its own kernel does)
and against numpy, across dtypes (float32, float16, bfloat16, bool) and broadcast patterns
(bias rows, per-row scales, scalars, middle axes), plus random elementwise DAGs."""
import ml_dtypes
import numpy as np
import pytest
from fusion_helpers import fusion
from hypothesis import given, settings
from hypothesis import strategies as st

import mpsgraph as mg

BF16 = np.dtype(ml_dtypes.bfloat16)
MG_DT = {np.dtype("float32"): mg.float32, np.dtype("float16"): mg.float16, BF16: mg.bfloat16,
         np.dtype("bool"): mg.bool}


def compile_run(build, arrays, fuse):
    """(results, memory plan) of build(g, *placeholders) compiled with fusion on or off."""
    with fusion(fuse):
        g = mg.Graph()
        ps = [g.placeholder(a.shape, MG_DT[a.dtype]) for a in arrays]
        out = build(g, *ps)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        exe = g.compile({p: (a.shape, MG_DT[a.dtype]) for p, a in zip(ps, arrays)}, outs, device="cpu")
        res = exe.run(list(arrays))
        return [r.numpy().copy() for r in res], exe.memory_plan()


def arena_values(plan):
    return sum(1 for e in plan if e["storage"] == "arena")


def fused_and_unfused(build, arrays):
    """Results with fusion on; asserts they equal fusion off bit for bit and that fusion
    removed intermediates."""
    fused, plan_f = compile_run(build, arrays, True)
    plain, plan_u = compile_run(build, arrays, False)
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.view(np.uint8) if a.dtype == BF16 else a,
                                      b.view(np.uint8) if b.dtype == BF16 else b)
    assert arena_values(plan_f) < arena_values(plan_u)
    return fused


def rand(shape, dtype, rng, scale=2.0):
    return np.asarray((rng.standard_normal(shape) * scale).astype(np.float32)).astype(dtype)


BROADCASTS = [((37, 129), (129,), (37, 1)), ((37, 129), (1, 129), ()), ((37, 129), (1, 1), (37, 129)),
              ((5, 7, 33), (7, 1), (5, 1, 33)), ((5, 7, 33), (1, 7, 1), (33,)), ((3, 1, 4000), (1, 1), (4000,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=lambda s: "x".join(map(str, s)))
def test_bias_scale_chain_broadcasts(shapes, dtype):
    """relu(x * s + b) * sigmoid(x) - b with s, b read with broadcast strides."""
    rng = np.random.default_rng(len(shapes[1]) * 7 + len(shapes[2]))
    x, s, b = (rand(sh, dtype, rng) for sh in shapes)
    y, = fused_and_unfused(lambda g, px, ps, pb: g.relu(px * ps + pb) * g.sigmoid(px) - pb, [x, s, b])
    f = np.float32
    if dtype == np.float32:
        xf, sf, bf = x.astype(f), s.astype(f), b.astype(f)
        ref = np.maximum(xf * sf + bf, 0) * (1 / (1 + np.exp(-xf.astype(np.float64)))).astype(f) - bf
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    else:  # each op rounds to the dtype, as numpy's float16 / ml_dtypes' bfloat16 arithmetic does
        sig = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(dtype)
        ref = (np.maximum(x * s + b, np.zeros((), dtype)) * sig - b).astype(dtype)
        tol = 2e-3 if dtype == np.float16 else 2e-2
        np.testing.assert_allclose(y.astype(f), ref.astype(f), rtol=tol, atol=tol)
    assert y.dtype == np.dtype(dtype)


@pytest.mark.parametrize("n", [1, 33, 100_003])
def test_relu_gradient_select(n):
    """select(x > 0, g, 0) (ReLU's gradient) fused with its neighbours, NaN and -0 included."""
    rng = np.random.default_rng(n)
    x, gr = rand((n,), np.float32, rng), rand((n,), np.float32, rng)
    x[::7] = np.nan
    x[1::11] = -0.0

    def build(g, px, pg):
        mask = g.greater_than(px, g.constant(np.float32(0)))
        return g.select(mask, pg * 2.0, g.constant(np.float32(0))) + 1.0

    y, = fused_and_unfused(build, [x, gr])
    np.testing.assert_array_equal(y, np.where(x > 0, gr * np.float32(2), np.float32(0)) + np.float32(1))


def test_compare_cast_logical_and_bool_output():
    rng = np.random.default_rng(1)
    x, b = rand((64, 50), np.float32, rng), rand((50,), np.float32, rng)
    m = rng.random((64, 1)) > 0.5

    def build(g, px, pb, pm):
        gt = g.greater_than_or_equal_to(px, pb)
        both = g.logical_not(g.not_equal(g.cast(gt, mg.float32), g.cast(pm, mg.float32)))  # gt == m, via casts
        as_f = g.cast(both, mg.float32) * px
        return [g.less_than(as_f, pb), g.equal(g.cast(g.less_than_or_equal_to(px, pb), mg.float32), 1.0)]

    lt, eq = fused_and_unfused(build, [x, b, m])
    both = (x >= b) == m
    np.testing.assert_array_equal(lt, both.astype(np.float32) * x < b)
    np.testing.assert_array_equal(eq, x <= b)
    assert lt.dtype == np.bool_ and eq.dtype == np.bool_


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["f16", "bf16"])
def test_casts_at_group_edges(half):
    """float32 in, half-precision math, float32 out (and back): loads and stores convert."""
    rng = np.random.default_rng(2)
    x, b = rand((300, 17), np.float32, rng), rand((17,), half, rng)
    mg_half = MG_DT[np.dtype(half)]

    def build(g, px, pb):
        h = g.cast(px, mg_half)
        y = g.relu(h * h + pb)
        return [g.cast(y, mg.float32) * 0.5, g.cast(g.exp(g.cast(y, mg.float32) * -1.0), mg_half)]

    y32, yh = fused_and_unfused(build, [x, b])
    h = x.astype(half)
    yr = np.maximum((h * h).astype(half) + b, np.zeros((), half)).astype(half)
    np.testing.assert_array_equal(y32, yr.astype(np.float32) * np.float32(0.5))
    ref = np.exp(-yr.astype(np.float64)).astype(half)
    np.testing.assert_allclose(yh.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-3)
    assert y32.dtype == np.float32 and yh.dtype == np.dtype(half)


def test_clamp_with_broadcast_bounds():
    rng = np.random.default_rng(3)
    x, lo, hi = rand((40, 30), np.float32, rng), rand((30,), np.float32, rng) - 1, rand((40, 1), np.float32, rng) + 1
    x[0, :5] = np.nan
    y, = fused_and_unfused(lambda g, px, pl, ph: g.clamp(px * 3.0, pl, ph) + 1.0, [x, lo, hi])
    np.testing.assert_array_equal(y, np.minimum(np.maximum(x * np.float32(3), lo), hi) + np.float32(1))


def test_intermediate_target_is_kept():
    """A target inside a chain is materialised (it ends the group), with both values right."""
    rng = np.random.default_rng(4)
    x, b = rand((20, 8), np.float32, rng), rand((8,), np.float32, rng)

    def build(g, px, pb):
        a = px * pb + 1.0
        return [a, g.tanh(a) * pb]

    fused, _ = compile_run(build, [x, b], True)
    plain, _ = compile_run(build, [x, b], False)
    np.testing.assert_array_equal(fused[0], x * b + np.float32(1))
    np.testing.assert_array_equal(fused[1], plain[1])
    np.testing.assert_allclose(fused[1], np.tanh(x * b + np.float32(1)) * b, rtol=2e-6, atol=1e-6)


# ---------------- random elementwise DAGs: fused == unfused, bit for bit ----------------

UNARY = ["negative", "absolute", "square", "relu", "exponent", "tanh", "sigmoid", "erf", "reciprocal",
         "square_root", "logarithm"]
BINARY = ["addition", "subtraction", "multiplication", "division", "maximum", "minimum"]
COMPARE = ["greater_than", "less_than", "equal", "not_equal", "greater_than_or_equal_to", "less_than_or_equal_to"]
OPERAND_SHAPES = [(6, 70), (70,), (6, 1), (1, 70), ()]


@st.composite
def dag(draw):
    n_ops = draw(st.integers(2, 14))
    steps = []
    for i in range(n_ops):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "select", "cast", "clamp"]))
        pick = st.integers(-len(OPERAND_SHAPES), i - 1)  # < 0: a fed operand; else an earlier step
        args = [draw(pick) for _ in range(3)]
        op = {"unary": st.sampled_from(UNARY), "binary": st.sampled_from(BINARY),
              "select": st.sampled_from(COMPARE), "cast": st.sampled_from(["float16", "bfloat16"]),
              "clamp": st.just("clamp")}[kind]
        steps.append((kind, draw(op), args))
    targets = draw(st.lists(st.integers(0, n_ops - 1), min_size=1, max_size=3, unique=True))
    return steps, targets


@settings(max_examples=60, deadline=None)
@given(dag(), st.integers(0, 2**31 - 1))
def test_random_dags_fused_equal_unfused(case, seed):
    steps, targets = case
    rng = np.random.default_rng(seed)
    arrays = [rand(sh, np.float32, rng) for sh in OPERAND_SHAPES]
    for a in arrays:
        if a.size > 3:
            a.flat[::17] = np.nan

    def build(g, *ps):
        vals = []

        def val(k):
            return ps[-k - 1] if k < 0 else vals[k]

        for kind, op, (a, b, c) in steps:
            if kind == "unary":
                v = getattr(g, op)(val(a))
            elif kind == "binary":
                v = getattr(g, op)(val(a), val(b))
            elif kind == "select":
                v = g.select(getattr(g, op)(val(a), val(b)), val(b), val(c))
            elif kind == "cast":  # a round trip through half precision
                v = g.cast(g.cast(val(a), getattr(mg, op)) * g.cast(val(b), getattr(mg, op)), mg.float32)
            else:
                v = g.clamp(val(a), val(b), val(c))
            vals.append(v)
        return [vals[t] for t in targets]

    with np.errstate(all="ignore"):
        fused, _ = compile_run(build, arrays, True)
        plain, _ = compile_run(build, arrays, False)
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


# ---------------- the training step: variable updates and pass-through gradients ----------------

def test_variable_updates_in_place_never_touch_held_values():
    """A run's assign overwrites the value the previous run stored when nothing else holds it;
    a value held from Python (or borrowed from numpy by set_variable) is never written."""
    g = mg.Graph()
    v = g.variable(np.zeros(5000, np.float32))
    p = g.placeholder((5000,), mg.float32)
    op = g.assign(v, v * 0.5 + p)
    exe = g.compile({p: ((5000,), mg.float32)}, [], target_operations=[op], device="cpu")
    x = np.linspace(-1, 1, 5000).astype(np.float32)
    ref = np.zeros(5000, np.float32)
    held, ptrs = [], []
    for k in range(6):
        exe.run([x])
        ref = ref * np.float32(0.5) + x
        if k == 2:
            held.append((v.value.numpy(), ref.copy()))  # a Python view of this run's value
        np.testing.assert_array_equal(v.value.numpy(), ref)
        ptrs.append(v.value.data_ptr)
    assert ptrs[4] == ptrs[5]  # updated in place: no allocation per run
    kept, expect = held[0]
    np.testing.assert_array_equal(kept, expect)  # later runs did not write into the held value
    user = np.ones(5000, np.float32)
    g.set_variable(v, user)
    exe.run([x])
    exe.run([x])
    np.testing.assert_array_equal(user, np.ones(5000, np.float32))
    np.testing.assert_array_equal(v.value.numpy(), (np.float32(0.5) + x) * np.float32(0.5) + x)


def test_same_shape_sum_to_like_is_a_view_and_bias_gradients_are_right():
    """Gradients of same-shape operands pass sum_to_like through without a copy; bias
    gradients (broadcast operands) are still column sums."""
    rng = np.random.default_rng(5)
    x, b = rand((64, 30), np.float32, rng), rand((30,), np.float32, rng)
    g = mg.Graph()
    px, pb = g.placeholder(x.shape, mg.float32), g.placeholder(b.shape, mg.float32)
    h = g.relu(px + pb)
    loss = g.reduction_sum(h * px, axes=None, keep_dims=False)
    grads = g.gradients(loss, [px, pb])
    exe = g.compile({px: (x.shape, mg.float32), pb: (b.shape, mg.float32)}, [grads[px], grads[pb]], device="cpu")
    dx, db = (r.numpy() for r in exe.run([x, b]))
    x64, b64 = x.astype(np.float64), b.astype(np.float64)
    on = (x64 + b64) > 0
    np.testing.assert_allclose(dx, np.where(on, x64, 0) + np.maximum(x64 + b64, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, np.where(on, x64, 0).sum(axis=0), rtol=1e-5, atol=1e-5)
    assert all(e["storage"] == "view" for e in exe.memory_plan()
               if e["op"] == "sum_to_like" and e["nbytes"] == x.nbytes)


def test_long_chain_of_scalars_fuses_within_the_tile_budget():
    """Regression: the planner counted a one-element operand of a one-element group as read in
    place, the kernel gives it a tile; a loss summing 16 scalars planned a group of 32 tiles and
    compiling failed with '[fusion] fused group needs too many tiles'."""
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(16)]
    g = mg.Graph()
    ps = [g.placeholder((4, 5), mg.float32) for _ in xs]
    total = g.reduction_sum(ps[0] * ps[0], keep_dims=False)
    for p in ps[1:]:
        total = total + g.reduction_sum(p * p, keep_dims=False) * 0.5
    out = np.asarray(g.run(dict(zip(ps, xs)), [total])[total])
    ref = (xs[0].astype(np.float64) ** 2).sum() + sum((x.astype(np.float64) ** 2).sum() * 0.5 for x in xs[1:])
    np.testing.assert_allclose(out, ref, rtol=1e-5)
