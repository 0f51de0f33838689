"""Fused elementwise groups on CUDA: every fused form against the same graph compiled with
fusion off (MPSGRAPH_CUDA_FUSION=0; bit-identical, since each node rounds to its dtype as its
own kernel stores it and no multiply-add is contracted across nodes) and against numpy, across
dtypes (float32, float16, bfloat16, bool, integers), broadcast operands (bias rows, per-row
scales, scalars), casts, select and clamp, random elementwise DAGs, the 100-op dispatch chain and
the benchmark chain. GPU tests skip where no GPU is present."""

import ml_dtypes
import numpy as np
import pytest
from fusion_helpers import fusion as cpu_or_cuda_fusion
from hypothesis import given, settings
from hypothesis import strategies as st

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
gpu = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

BF16 = np.dtype(ml_dtypes.bfloat16)
MG_DT = {np.dtype("float32"): mg.float32, np.dtype("float16"): mg.float16, BF16: mg.bfloat16,
         np.dtype("bool"): mg.bool, np.dtype("int32"): mg.int32, np.dtype("uint8"): mg.uint8,
         np.dtype("int64"): mg.int64, np.dtype("int8"): mg.int8}


def fusion(on):
    return cpu_or_cuda_fusion(on, "MPSGRAPH_CUDA_FUSION")


def compile_run(build, arrays, fuse):
    """(results, memory plan) of build(g, *placeholders) compiled for cuda:0 with fusion on or off."""
    with fusion(fuse):
        g = mg.Graph()
        ps = [g.placeholder(a.shape, MG_DT[a.dtype]) for a in arrays]
        out = build(g, *ps)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        exe = g.compile({p: (a.shape, MG_DT[a.dtype]) for p, a in zip(ps, arrays)}, outs, device="cuda:0")
        res = exe.run(list(arrays))
        return [r.numpy().copy() for r in res], exe.memory_plan()


def bits(a):
    """The array's bytes as unsigned integers: NaN payloads and -0.0 compared too."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind in "fV" or a.dtype == BF16 else a


def arena_values(plan):
    return sum(1 for e in plan if e["storage"] == "arena")


def fused_and_unfused(build, arrays, fewer=True):
    """Results with fusion on; asserts they equal fusion off bit for bit and (where `fewer`)
    that fusion removed intermediates."""
    with np.errstate(all="ignore"):
        fused, plan_f = compile_run(build, arrays, True)
        plain, plan_u = compile_run(build, arrays, False)
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(bits(a), bits(b))
    if fewer:
        assert arena_values(plan_f) < arena_values(plan_u)
    return fused


def rand(shape, dtype, rng, scale=2.0):
    return np.asarray((rng.standard_normal(shape) * scale).astype(np.float32)).astype(dtype)


@gpu
@pytest.mark.parametrize("n", [1, 3, 1000, 4099, 1 << 20])
def test_benchmark_chain(n):
    """relu(x*1.5+0.25)*sigmoid(x): one kernel, sizes with and without a vector tail."""
    x = rand((n,), np.float32, np.random.default_rng(n))
    y, = fused_and_unfused(lambda g, p: g.relu(p * 1.5 + 0.25) * g.sigmoid(p), [x], fewer=n > 1)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, np.maximum(x64 * 1.5 + 0.25, 0) / (1 + np.exp(-x64)), rtol=2e-6, atol=1e-7)


@gpu
@pytest.mark.parametrize("n", [1, 7, 1023, 1024, 4099, 3 * 4096 + 9, 1 << 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_packs_per_thread_match_one_pack(n, dtype):
    """The vector path loads up to 4 packs per thread before computing any
    (MPSGRAPH_CUDA_EW_PACKS=1: one pack per grid-stride step): the same bits at every size around
    the 1024-pack block span, for one, two and three full-size operands (fewer packs each)."""
    rng = np.random.default_rng(n)
    xs = [rng.integers(0, 256, n).astype(dtype) if dtype == np.uint8 else rand((n,), dtype, rng) for _ in range(3)]
    graphs = [lambda g, p: g.relu(p * 1.5 + 0.25) * g.sigmoid(p) if dtype != np.uint8 else p * p + 3,
              lambda g, p, q: p * q + p, lambda g, p, q, r: p * q + r]
    for k, build in enumerate(graphs):
        arrays = xs[:k + 1]
        got = {}
        for packs in ("1", "4"):
            with fusion(True), pytest.MonkeyPatch.context() as mp:
                mp.setenv("MPSGRAPH_CUDA_EW_PACKS", packs)
                got[packs], _ = compile_run(build, arrays, True)
        np.testing.assert_array_equal(bits(got["4"][0]), bits(got["1"][0]))
        if k == 1:
            want = xs[0] * xs[1] + xs[0]  # numpy rounds each op to the dtype, as the kernel does
            np.testing.assert_array_equal(got["4"][0], want)


@gpu
def test_dispatch_chain_is_one_kernel():
    """The 100-op chain (x*1.0001, +0.0001) runs as one kernel with no intermediate buffer, and
    equals numpy's float32 chain exactly (each op rounds once; nothing is contracted)."""
    x = rand((1024,), np.float32, np.random.default_rng(0))

    def build(g, p):
        y = p
        for i in range(100):
            y = y * 1.0001 if i % 2 == 0 else y + 0.0001
        return y

    y, = fused_and_unfused(build, [x])
    _, plan = compile_run(build, [x], True)
    assert arena_values(plan) == 0
    ref = x.copy()
    for i in range(100):
        ref = ref * np.float32(1.0001) if i % 2 == 0 else ref + np.float32(0.0001)
    np.testing.assert_array_equal(y, ref)


BROADCASTS = [((37, 129), (129,), (37, 1)), ((37, 129), (1, 129), ()), ((37, 129), (1, 1), (37, 129)),
              ((5, 7, 33), (7, 1), (5, 1, 33)), ((5, 7, 33), (1, 7, 1), (33,)), ((3, 1, 4000), (1, 1), (4000,))]


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=lambda s: "x".join(map(str, s)))
def test_bias_scale_chain_broadcasts(shapes, dtype):
    """relu(x * s + b) * sigmoid(x) - b with s, b read with broadcast strides."""
    rng = np.random.default_rng(len(shapes[1]) * 7 + len(shapes[2]))
    x, s, b = (rand(sh, dtype, rng) for sh in shapes)
    y, = fused_and_unfused(lambda g, px, ps, pb: g.relu(px * ps + pb) * g.sigmoid(px) - pb, [x, s, b])
    x64, s64, b64 = (a.astype(np.float64) for a in (x, s, b))
    ref = np.maximum(x64 * s64 + b64, 0) / (1 + np.exp(-x64)) - b64
    tol = 2e-6 if dtype == np.float32 else 3e-2
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol * 4)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32], ids=["f32", "f16", "i32"])
@pytest.mark.parametrize("shapes", [((37, 1), (37, 129)), ((129,), (37, 129)), ((), (5, 7, 33)), ((7, 1), (5, 1, 33))],
                         ids=lambda s: "x".join(map(str, s)))
def test_broadcast_like_joins_the_group(shapes, dtype):
    """broadcast_like(r, y) * y + y: the broadcast is read through strides inside the group (its
    `like` operand gives only the shape) instead of a strided copy of its own; the same bits as
    fusion off, and one intermediate fewer."""
    rng = np.random.default_rng(len(shapes[0]) * 5 + len(shapes[1]))
    r, y = (rand(sh, np.float32, rng).astype(dtype) for sh in shapes)
    got, = fused_and_unfused(lambda g, pr, py: g.broadcast_like(pr, py) * py + py, [r, y])
    want = np.broadcast_to(r, np.broadcast_shapes(r.shape, y.shape)) * y + y
    tol = 0 if dtype == np.int32 else 2e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@gpu
def test_softmax_cross_entropy_gradient_fuses_its_broadcasts():
    """The gradient of softmax cross-entropy, whose broadcast_like nodes had run as strided
    copies: fused as unfused, and (softmax(z) - labels) / batch in float64."""
    rng = np.random.default_rng(3)
    z = rand((128, 10), np.float32, rng)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]

    def build(g, pz, pl):
        loss = g.softmax_cross_entropy(pz, pl, axis=1, reduction="mean")
        return g.gradients(loss, [pz])[pz]

    got, = fused_and_unfused(build, [z, labels])
    e = np.exp(z.astype(np.float64) - z.max(axis=1, keepdims=True))
    want = (e / e.sum(axis=1, keepdims=True) - labels) / 128
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def prologue_on_and_off(build, arrays):
    """Results with reduction prologues on (MPSGRAPH_CUDA_REDUCTION_PROLOGUES=0 turns them off);
    asserts they equal prologues off bit for bit and that the reduced group's result no longer
    has a buffer of its own."""
    runs = []
    for on in (True, False):
        with cpu_or_cuda_fusion(on, "MPSGRAPH_CUDA_REDUCTION_PROLOGUES"), np.errstate(all="ignore"):
            runs.append(compile_run(build, arrays, True))
    (fused, plan_on), (plain, plan_off) = runs
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(bits(a), bits(b))
    assert arena_values(plan_on) < arena_values(plan_off), (plan_on, plan_off)
    return fused


REDUCTION_PROLOGUES = {
    # name: (build, input shapes, float64 reference); the reduction's source is a group (or a lone node)
    "softmax_denominator_rows": (
        lambda g, x: g.reduction_sum(g.exponent(x - g.reduction_maximum(x, axes=[1])), axes=[1]),
        [(128, 10)], lambda x: np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    "mean_of_columns": (lambda g, x, s, b: g.mean(g.relu(x * s + b), axes=[0]), [(300, 70), (70,), (70,)],
                        lambda x, s, b: np.maximum(x * s + b, 0).mean(0, keepdims=True)),
    "max_over_outer_axes": (lambda g, x, y: g.reduction_maximum(x * y, axes=[0, 2]), [(6, 5, 7), (5, 1)],
                            lambda x, y: (x * y).max((0, 2), keepdims=True)),
    "long_rows_split": (lambda g, x: g.reduction_sum(g.sigmoid(x) * x, axes=[1]), [(3, 50000)],
                        lambda x: (x / (1 + np.exp(-x))).sum(1, keepdims=True)),
    "whole_tensor_product": (lambda g, x: g.reduction_product(g.sign(x) * 0.5 + 1.0, axes=[0]), [(41,)],
                             lambda x: np.prod(np.sign(x) * 0.5 + 1.0, 0, keepdims=True)),
    "bias_gradient_sum_to_like": (lambda g, x, dy, b: g.sum_to_like(g.select(g.greater_than(x, 0.0), dy, 0.0), b),
                                  [(64, 32), (64, 32), (32,)], lambda x, dy, b: np.where(x > 0, dy, 0).sum(0)),
}


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", list(REDUCTION_PROLOGUES))
def test_reduction_computes_its_source_group(case, dtype):
    """The group a reduction alone reads is computed inside the reduction's kernel, in every
    reduction layout (rows, columns, outer axes, long rows over blocks, the whole tensor) and for
    sum_to_like: the same bits as the group's own kernel then the reduction, and the float64
    value within the dtype's rounding."""
    build, shapes, ref = REDUCTION_PROLOGUES[case]
    rng = np.random.default_rng(len(case))
    arrays = [rand(sh, dtype, rng, scale=1.0) for sh in shapes]
    got, = prologue_on_and_off(build, arrays)
    want = ref(*(a.astype(np.float64) for a in arrays))
    tol = 1e-4 if dtype == np.float32 else 2e-2 if dtype == np.float16 else 8e-2
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * float(np.abs(want).max()))


@gpu
@pytest.mark.parametrize("lone", [True, False], ids=["relu", "bias_relu"])
def test_reduction_leaves_a_convolution_epilogue_alone(lone):
    """A channels-last float16 convolution whose ReLU (alone, or after a bias) feeds a global
    mean: the convolution's fused epilogue keeps the group, the mean reads its result, and the
    values match the CPU whether or not reduction prologues are on."""
    rng = np.random.default_rng(7)
    x = rand((2, 9, 9, 16), np.float16, rng, scale=1.0)
    w = rand((3, 3, 16, 32), np.float16, rng, scale=0.2)
    b = rand((32,), np.float16, rng, scale=1.0)

    def build(g, px, pw, pb):
        c = g.convolution_2d(px, pw, padding=[1, 1, 1, 1], data_layout="NHWC", weights_layout="HWIO")
        return g.mean(g.relu(c if lone else c + pb), axes=[1, 2])

    results = []
    for on in (True, False):
        with cpu_or_cuda_fusion(on, "MPSGRAPH_CUDA_REDUCTION_PROLOGUES"):
            results.append(compile_run(build, [x, w, b], True)[0][0])
    np.testing.assert_array_equal(bits(results[0]), bits(results[1]))
    g = mg.Graph()
    ps = [g.placeholder(a.shape, MG_DT[a.dtype]) for a in (x, w, b)]
    out = build(g, *ps)
    want = np.asarray(g.run(dict(zip(ps, (x, w, b))), [out], device="cpu")[out]).astype(np.float64)
    np.testing.assert_allclose(results[0].astype(np.float64), want, rtol=2e-2, atol=2e-2)


@gpu
def test_reduction_prologue_integers_and_bools():
    """An int32 sum of a product (wrapping as the unfused kernels do) and reduction_and of a
    comparison, each computing its source in the reduction."""
    rng = np.random.default_rng(5)
    x = rng.integers(-1 << 30, 1 << 30, (37, 129)).astype(np.int32)
    y = rng.integers(-9, 9, (129,)).astype(np.int32)
    got, = prologue_on_and_off(lambda g, px, py: g.reduction_sum(px * py + 3, axes=[1]), [x, y])
    want = ((x.astype(np.int64) * y + 3).sum(1, keepdims=True) + (1 << 31)) % (1 << 32) - (1 << 31)
    np.testing.assert_array_equal(got.astype(np.int64), want)
    got, = prologue_on_and_off(lambda g, px: g.reduction_and(g.greater_than(px, -(1 << 29)), axes=[0]), [x])
    np.testing.assert_array_equal(got, (x > -(1 << 29)).all(0, keepdims=True))


@gpu
def test_select_clamp_compare_and_bool_output():
    """select(x > 0, g, 0) (ReLU's gradient) with NaN and -0.0, clamp with broadcast bounds,
    comparisons and logical ops ending in a bool result."""
    rng = np.random.default_rng(2)
    x, gr = rand((33, 65), np.float32, rng), rand((33, 65), np.float32, rng)
    x.flat[::7] = np.nan
    x.flat[1::11] = -0.0
    lo, hi = rand((65,), np.float32, rng) - 1, rand((33, 1), np.float32, rng) + 1

    def build(g, px, pg, pl, ph):
        relu_grad = g.select(px > 0.0, pg * 2.0, g.constant(np.float32(0))) + 1.0
        clamped = g.clamp(px * 3.0, pl, ph) - 0.5
        mask = g.logical_and(g.less_than(px, pg), g.logical_not(g.isnan(px * pg)))
        return [relu_grad, clamped, mask]

    rg, cl, mk = fused_and_unfused(build, [x, gr, lo, hi])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(rg, np.where(x > 0, gr * np.float32(2), np.float32(0)) + np.float32(1))
        np.testing.assert_array_equal(cl, np.minimum(np.maximum(x * np.float32(3), lo), hi) - np.float32(0.5))
        np.testing.assert_array_equal(mk, (x < gr) & ~np.isnan(x * gr))


@gpu
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["f16", "bf16"])
def test_casts_inside_groups_round_each_op(half):
    """float32 -> half -> arithmetic -> float32 inside one group: each half op rounds as its own
    kernel does."""
    rng = np.random.default_rng(6)
    x, b = rand((50, 40), np.float32, rng), rand((40,), np.float32, rng)

    def build(g, px, pb):
        h = g.cast(px * pb, MG_DT[np.dtype(half)])
        return g.cast(g.tanh(h) * h + h, mg.float32) * 2.0

    y, = fused_and_unfused(build, [x, b])
    h = (x * b).astype(half)
    hh = (np.tanh(h.astype(np.float32)).astype(half).astype(np.float32) * h.astype(np.float32)).astype(half)
    ref = (hh.astype(np.float32) + h.astype(np.float32)).astype(half).astype(np.float32) * np.float32(2)
    np.testing.assert_allclose(y, ref, rtol=1e-2, atol=1e-2)


@gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
def test_integer_chains(dtype):
    """Integer arithmetic (floor division and modulo of negatives, shifts, wrapping products),
    comparisons and saturating float casts in one group."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    a = rng.integers(lo, hi, (40, 30)).astype(dtype)
    b = rng.integers(lo, hi, (30,)).astype(dtype)
    b[b == 0] = 3
    f = (rng.standard_normal((40, 30)) * 1e4).astype(np.float32)

    def build(g, pa, pb, pf):
        q = g.floor_division(pa, pb) + g.modulo(pa, pb) * pa
        sat = g.cast(pf, MG_DT[np.dtype(dtype)])
        return [g.maximum(q, sat) - g.minimum(pa, pb), g.greater_than(q, pa)]

    y, gt = fused_and_unfused(build, [a, b, f])
    with np.errstate(all="ignore"):
        q = (a // b + (a % b) * a).astype(dtype)
        sat = np.where(np.isnan(f), 0, np.clip(f, info.min, info.max)).astype(dtype)
        np.testing.assert_array_equal(y, (np.maximum(q, sat) - np.minimum(a, b)).astype(dtype))
        np.testing.assert_array_equal(gt, q > a)


@gpu
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
    np.testing.assert_array_equal(bits(fused[1]), bits(plain[1]))


@gpu
def test_unaligned_gpu_operands_take_the_scalar_path():
    """A CUDA tensor fed at an offset that breaks 16-byte alignment gives the same results."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    x = rand((4097,), np.float32, np.random.default_rng(8))
    g = mg.Graph()
    p = g.placeholder((4096,), mg.float32)
    exe = g.compile({p: ((4096,), mg.float32)}, [g.relu(p * 1.5 + 0.25) * g.sigmoid(p)], device="cuda:0")
    xt = torch.from_numpy(x).cuda()
    shifted = exe.run([mg.TensorData(xt[1:])])[0].numpy()
    aligned = exe.run([x[1:].copy()])[0].numpy()
    np.testing.assert_array_equal(shifted, aligned)


# ---------------- random elementwise DAGs: fused == unfused, bit for bit ----------------

UNARY = ["negative", "absolute", "square", "relu", "exponent", "tanh", "sigmoid", "erf", "reciprocal",
         "square_root", "logarithm", "floor", "sin"]
BINARY = ["addition", "subtraction", "multiplication", "division", "maximum", "minimum", "power", "modulo"]
COMPARE = ["greater_than", "less_than", "equal", "not_equal", "greater_than_or_equal_to", "less_than_or_equal_to"]
OPERAND_SHAPES = [(6, 70), (70,), (6, 1), (1, 70), ()]


@st.composite
def dag(draw):
    n_ops = draw(st.integers(2, 20))
    steps = []
    for i in range(n_ops):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "select", "cast", "clamp"]))
        pick = st.integers(-len(OPERAND_SHAPES), i - 1)  # < 0: a fed operand; else an earlier step
        args = [draw(pick) for _ in range(3)]
        op = {"unary": st.sampled_from(UNARY), "binary": st.sampled_from(BINARY),
              "select": st.sampled_from(COMPARE), "cast": st.sampled_from(["float16", "bfloat16", "int32", "bool"]),
              "clamp": st.just("clamp")}[kind]
        steps.append((kind, draw(op), args))
    targets = draw(st.lists(st.integers(0, n_ops - 1), min_size=1, max_size=3, unique=True))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    return steps, targets, dtype


@gpu
@settings(max_examples=60, deadline=None)
@given(dag(), st.integers(0, 2**31 - 1))
def test_random_dags_fused_equal_unfused(case, seed):
    steps, targets, dtype = case
    np_dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    arrays = [rand(sh, np_dt, rng) for sh in OPERAND_SHAPES]
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
            elif kind == "cast":  # a round trip through another dtype
                t = getattr(mg, op)
                v = g.cast(g.cast(val(a), t), MG_DT[np_dt])
            else:
                v = g.clamp(val(a), val(b), val(c))
            vals.append(v)
        return [vals[t] for t in targets]

    fused_and_unfused(build, arrays, fewer=False)
