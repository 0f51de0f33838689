"""The CPU backend's fast paths against numpy / PyTorch, on the edge cases each path has of its
own: sizes that are not a multiple of any vector width and large enough to be split over
threads, scalar and full operands, NaN and signed zeros (clamp with scalar bounds, select with
a full predicate, streamed pooling rows, the depthwise convolution, matrix products whose
transposed operands are folded into the BLAS call, Winograd convolutions, float32 means over
contiguous runs in AVX2)."""
import numpy as np
import pytest

import mpsgraph as mg

SIZES = [1, 7, 33, 100_003]


def run(build, *arrays):
    g = mg.Graph()
    ps = [g.placeholder(a.shape, _dt(a)) for a in arrays]
    out = build(g, *ps)
    outs = out if isinstance(out, (list, tuple)) else [out]
    return runl(g, dict(zip(ps, arrays)), list(outs))


def runl(g, feeds, targets):
    r = g.run(feeds, targets, device="cpu")
    return [np.asarray(r[t]) for t in targets]


def _dt(a):
    return {np.dtype("float32"): mg.float32, np.dtype("float64"): mg.float64, np.dtype("int32"): mg.int32,
            np.dtype("bool"): mg.bool, np.dtype("float16"): mg.float16}[a.dtype]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_clamp_scalar_bounds(n, dtype):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 5).astype(dtype)
    if dtype.startswith("float"):
        x[::5] = np.nan
        x[1::7] = -0.0
    (y,) = run(lambda g, p: g.clamp(p, g.constant(np.array(0, dtype)), g.constant(np.array(6, dtype))), x)
    ref = np.minimum(np.maximum(x, np.array(0, dtype)), np.array(6, dtype))  # NaN-propagating, as the op
    np.testing.assert_array_equal(y, ref)
    if dtype.startswith("float"):  # -0.0 clamped at 0 comes out as +0.0, as maximum(-0.0, 0)'s tie rule
        assert not np.signbit(y[~np.isnan(y)]).any()


@pytest.mark.parametrize("lo,hi", [(np.nan, 6.0), (0.0, np.nan), (4.0, 2.0)])
def test_clamp_scalar_bounds_nan_and_crossed(lo, hi):
    x = np.linspace(-5, 8, 1001).astype(np.float32)
    (y,) = run(lambda g, p: g.clamp(p, g.constant(np.float32(lo)), g.constant(np.float32(hi))), x)
    ref = np.minimum(np.maximum(x, np.float32(lo)), np.float32(hi))
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("form", ["full", "scalar_b", "scalar_a"])
@pytest.mark.parametrize("pred_dtype", ["bool", "float32"])
def test_select_full_predicate(n, form, pred_dtype):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    pred = rng.standard_normal(n) > 0
    p = pred.astype(pred_dtype)
    if pred_dtype == "float32":
        p[pred] = np.nan  # a NaN predicate is true (nonzero)
    if form == "scalar_b":
        (y,) = run(lambda g, pp, pa: g.select(pp, pa, g.constant(np.float32(0.5))), p, a)
        ref = np.where(pred, a, np.float32(0.5))
    elif form == "scalar_a":
        (y,) = run(lambda g, pp, pb: g.select(pp, g.constant(np.float32(-2.0)), pb), p, b)
        ref = np.where(pred, np.float32(-2.0), b)
    else:
        (y,) = run(lambda g, pp, pa, pb: g.select(pp, pa, pb), p, a, b)
        ref = np.where(pred, a, b)
    np.testing.assert_array_equal(y, ref)


def _pool_ref(x, k, s, pads, op, include_pad=False):
    """Brute-force NCHW pooling with explicit padding (top, bottom, left, right)."""
    n, c, h, w = x.shape
    oh = (h + pads[0] + pads[1] - k[0]) // s[0] + 1
    ow = (w + pads[2] + pads[3] - k[1]) // s[1] + 1
    out = np.empty((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s[0] - pads[0], j * s[1] - pads[2]
            win = x[:, :, max(r0, 0):min(r0 + k[0], h), max(c0, 0):min(c0 + k[1], w)].astype(np.float64)
            if op == "max":
                v = win.max(axis=(2, 3))
                v[np.isnan(win).any(axis=(2, 3))] = np.nan
            else:
                cnt = k[0] * k[1] if include_pad else win.shape[2] * win.shape[3]
                v = win.sum(axis=(2, 3)) / cnt
            out[:, :, i, j] = v
    return out


@pytest.mark.parametrize("shape,k,s,pads", [((2, 3, 13, 300), (3, 3), (2, 2), (1, 1, 1, 1)),
                                            ((1, 2, 9, 11), (2, 3), (1, 2), (0, 1, 2, 0)),
                                            ((1, 1, 5, 600), (1, 5), (1, 3), (0, 0, 2, 2))])
@pytest.mark.parametrize("op", ["max", "avg", "avg_pad"])
def test_streamed_pooling(shape, k, s, pads, op):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::97] = np.nan if op == "max" else 0.0
    kw = dict(kernel_sizes=k, strides=s, padding=pads, data_layout="NCHW")
    if op == "max":
        (y,) = run(lambda g, p: g.max_pooling_2d(p, **kw), x)
    else:
        (y,) = run(lambda g, p: g.avg_pooling_2d(p, include_zero_pad=op == "avg_pad", **kw), x)
    ref = _pool_ref(x, k, s, pads, op[:3], include_pad=op == "avg_pad")
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,mult,stride,pad,dil", [((2, 6, 13, 17), 1, 1, 1, 1), ((1, 4, 20, 9), 2, 2, 0, 1),
                                                       ((3, 5, 8, 40), 1, 2, 2, 2), ((1, 3, 1, 70), 3, 1, 1, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_depthwise_convolution(shape, mult, stride, pad, dil, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    c = shape[1]
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((c * mult, 1, 3, 3)).astype(dtype)
    (y,) = run(lambda g, p, pw: g.convolution_2d(p, pw, strides=(stride, stride), dilation_rates=(dil, dil),
                                                 padding=(pad, pad, pad, pad), groups=c, data_layout="NCHW",
                                                 weights_layout="OIHW"), x, w)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=stride,
                                     padding=pad, dilation=dil, groups=c).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_matmul_folded_transposes(dtype, batch):
    """x^T @ y^T, x @ y^T and x^T @ y with transposes of the last two dims (folded into BLAS's
    flags), one of them also read by another op (so kept)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(batch + (5, 7)).astype(dtype)
    b = rng.standard_normal(batch + (6, 5)).astype(dtype)
    c = rng.standard_normal(batch + (6, 7)).astype(dtype)
    d = rng.standard_normal(batch + (5, 4)).astype(dtype)
    r = len(batch)
    perm = list(range(r)) + [r + 1, r]

    def build(g, pa, pb, pc, pd):
        ta = g.transpose(pa, perm)
        return [g.matmul(ta, g.transpose(pb, perm)), g.matmul(pa, g.transpose(pc, perm)), g.matmul(ta, pd), ta * 2.0]

    y1, y2, y3, y4 = run(build, a, b, c, d)
    a64, b64, c64, d64 = (v.astype(np.float64) for v in (a, b, c, d))
    t = lambda v: np.swapaxes(v, -1, -2)  # noqa: E731
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == "float16" else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y1, t(a64) @ t(b64), **tol)
    np.testing.assert_allclose(y2, a64 @ t(c64), **tol)
    np.testing.assert_allclose(y3, t(a64) @ d64, **tol)
    np.testing.assert_allclose(y4, t(a64) * 2, **tol)


def test_dense_layer_gradients_fold():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 9)).astype(np.float32)
    w = rng.standard_normal((9, 4)).astype(np.float32)
    g = mg.Graph()
    px, pw = g.placeholder(x.shape, mg.float32), g.placeholder(w.shape, mg.float32)
    y = g.relu(px @ pw)
    loss = g.reduction_sum(y * y, keep_dims=False)
    grads = g.gradients(loss, [px, pw])
    dx, dw = runl(g, {px: x, pw: w}, [grads[px], grads[pw]])
    h = x.astype(np.float64) @ w
    dy = 2 * np.maximum(h, 0) * (h > 0)
    np.testing.assert_allclose(dx, dy @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, x.T @ dy, rtol=1e-5, atol=1e-5)


def _op_by_op(x, steps):
    """Runs each op as its own graph (nothing to fuse) on the previous result."""
    vals = {"x": x}
    for name, op, args in steps:
        g = mg.Graph()
        ins = [vals[a] if isinstance(a, str) else np.asarray(a, np.float32) for a in args]
        ps = [g.placeholder(v.shape, mg.float32) for v in ins]
        (vals[name],) = runl(g, dict(zip(ps, ins)), [getattr(g, op)(*ps)])
    return vals[steps[-1][0]]


@pytest.mark.parametrize("n", [1, 16, 513, 100_003])
def test_fused_chain_matches_op_by_op_bitwise(n):
    """relu(x*a+b)*sigmoid(x), with tanh/exp/log/erf/max/min/div/sqrt/neg/abs/square/reciprocal
    and scalar operands on either side: fused into one pass, bit-identical to running each op
    alone (every op rounds once, with the same kernels)."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[::11] = np.nan
    x[1::13] = -0.0
    steps = [("m", "multiplication", ["x", 1.5]), ("a", "addition", [0.25, "m"]), ("r", "relu", ["a"]),
             ("s", "sigmoid", ["x"]), ("y", "multiplication", ["r", "s"]), ("t", "tanh", ["y"]),
             ("e", "exponent", ["t"]), ("l", "logarithm", ["e"]), ("f", "erf", ["l"]), ("mx", "maximum", ["f", "x"]),
             ("mn", "minimum", [0.5, "mx"]), ("d", "division", ["mn", "e"]), ("q", "square_root", ["e"]),
             ("n", "negative", ["q"]), ("ab", "absolute", ["n"]), ("sq", "square", ["ab"]),
             ("rc", "reciprocal", ["sq"]), ("z", "subtraction", ["d", "rc"])]
    ref = _op_by_op(x, steps)
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float32)
    vals = {"x": p}
    for name, op, args in steps:
        vals[name] = getattr(g, op)(*[vals[a] if isinstance(a, str) else g.constant(np.float32(a)) for a in args])
    (y,) = runl(g, {p: x}, [vals["z"]])
    np.testing.assert_array_equal(y, ref)


def test_fusion_keeps_intermediates_that_are_read_elsewhere():
    x = np.linspace(-3, 3, 10_001).astype(np.float32)
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float32)
    a = p * 2.0
    b = g.exp(a)
    c = b + 1.0
    d = g.reshape(a, (1, -1))  # a second reader of `a`: it must stay materialised
    y, z, w = runl(g, {p: x}, [c, d, b * c])
    a64 = x.astype(np.float32) * np.float32(2)
    np.testing.assert_allclose(np.asarray(y), np.exp(a64.astype(np.float64)) + 1, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(z), a64.reshape(1, -1))
    np.testing.assert_allclose(np.asarray(w), np.exp(a64.astype(np.float64)) * (np.exp(a64.astype(np.float64)) + 1),
                               rtol=1e-6)


# Winograd F(2x2, 3x3): float32, 3x3, unit strides and dilations, one group, >= 64 source and
# >= 16 output channels and >= 36 output tiles of 2x2 per image (else the generic im2col path runs)
WINOGRAD = [((1, 64, 40, 40), 16, (1, 1, 1, 1)), ((2, 64, 31, 33), 17, (0, 2, 1, 0)),
            ((2, 72, 45, 20), 32, (2, 2, 0, 0))]


def _conv_f32(x, w, pads, generic=False, monkeypatch=None, bias=None):
    if generic:
        monkeypatch.setenv("MPSGRAPH_CPU_WINOGRAD", "0")
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    y = g.convolution(px, g.constant(w), strides=1, padding=pads)
    if bias is not None:
        y = g.relu(y + g.constant(bias))
    exe = g.compile({px: x}, [y], device="cpu")
    if generic:
        monkeypatch.delenv("MPSGRAPH_CPU_WINOGRAD")
    return np.asarray(exe.run([mg.TensorData(x)])[0])


def _conv_ref(x, w, pads, absolute=False):
    torch = pytest.importorskip("torch")
    f = np.abs if absolute else (lambda a: a)
    xt = torch.nn.functional.pad(torch.from_numpy(f(x)).double(), (pads[2], pads[3], pads[0], pads[1]))
    return torch.nn.functional.conv2d(xt, torch.from_numpy(f(w)).double()).numpy()


@pytest.mark.parametrize("shape,o,pads", WINOGRAD)
def test_winograd_error_bound_and_generic_path(shape, o, pads, monkeypatch):
    """Within 2e-6 * sum |w| |x| of the float64 result, as the generic path; and not the
    generic path's bits (so the Winograd kernel ran)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], 3, 3)).astype(np.float32)
    y = _conv_f32(x, w, pads)
    ref, scale = _conv_ref(x, w, pads), _conv_ref(x, w, pads, absolute=True)
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= 2e-6 * scale)
    generic = _conv_f32(x, w, pads, generic=True, monkeypatch=monkeypatch)
    assert np.all(np.abs(generic - ref) <= 2e-6 * scale)
    assert not np.array_equal(y, generic)
    bias = rng.standard_normal((o, 1, 1)).astype(np.float32)
    fused = _conv_f32(x, w, pads, bias=bias)
    np.testing.assert_array_equal(fused, np.maximum(y + bias, 0))


@pytest.mark.parametrize("where", ["source", "weights"])
def test_winograd_non_finite_runs_the_generic_path(where, monkeypatch):
    """A tile mixes 16 sources into each output: an infinity or NaN would spread, so such runs
    take the generic path."""
    shape, o, pads = WINOGRAD[0]
    rng = np.random.default_rng(12)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], 3, 3)).astype(np.float32)
    bad_x, bad_w = x.copy(), w.copy()
    if where == "source":
        bad_x[0, 3, 10, 10], bad_x[0, 5, 30, 7] = np.inf, np.nan
    else:
        bad_w[2, 1, 0, 0] = np.inf
    y = _conv_f32(bad_x, bad_w, pads)
    generic = _conv_f32(bad_x, bad_w, pads, generic=True, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(y, generic)
    with np.errstate(invalid="ignore"):
        ref = _conv_ref(bad_x, bad_w, pads)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))


def _reduced(x, outs, env, monkeypatch):
    """The results of outs(graph, placeholder) for x, compiled with the env switches set."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        g = mg.Graph()
        p = g.placeholder(x.shape, mg.float32)
        exe = g.compile({p: x}, outs(g, p), device="cpu")
    finally:
        for k in env:
            monkeypatch.delenv(k)
    return [np.asarray(r) for r in exe.run([mg.TensorData(x)])]


def _mean_var(x, axes, env, monkeypatch):
    return _reduced(x, lambda g, p: [g.mean(p, axes=axes, keep_dims=True), g.variance(p, axes=axes)], env,
                    monkeypatch)


def _assert_mean_like_float64(mean, x, axes):
    """`mean` against numpy's float64 mean: NaN where it has NaN, its signed zeros and
    infinities, and within 1e-6 relative elsewhere (the sums run in double)."""
    with np.errstate(invalid="ignore"):
        ref = np.mean(x.astype(np.float64), axis=tuple(axes), keepdims=True)
    assert mean.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(mean), np.isnan(ref))
    np.testing.assert_array_equal(np.signbit(mean[ref == 0]), np.signbit(ref[ref == 0]))
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(mean[~fin], ref[~fin].astype(np.float32))
    assert np.all(np.abs(mean[fin] - ref[fin]) <= 1e-6 * np.abs(ref[fin]) + 1e-30)


@pytest.mark.parametrize("shape,axes", [((8, 64, 7, 7), [2, 3]), ((3, 5, 4, 4), [2, 3]), ((2, 6, 17), [2]),
                                        ((4, 23), [1]), ((5, 200), [1]), ((2, 3, 15), [2]), ((0, 3, 49), [2]),
                                        ((1, 2, 3, 300), [1, 3])])
@pytest.mark.parametrize("special", [False, True])
def test_mean_lanes_same_bits(shape, axes, special, monkeypatch):
    """float32 means (and variance's first pass) over runs of 16 or more in AVX2 eight double
    lanes at a time, a tail of fewer than 8 masked (MPSGRAPH_CPU_MEAN_LANES=0: the compiled lanes
    loop): the same bits, NaN, infinities and signed zeros included; runs of 4 to 300, no outputs,
    and runs split over reduced dims; within float32 rounding of the float64 mean."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal(shape).astype(np.float32) * 100
    if special and x.size:
        flat = x.reshape(-1)
        flat[0], flat[min(5, flat.size - 1)] = np.inf, np.nan
        flat[-1] = -np.inf
        x.reshape(shape[0], -1)[-1, :] = -0.0
    mean, var = _mean_var(x, axes, {}, monkeypatch)
    mean0, var0 = _mean_var(x, axes, {"MPSGRAPH_CPU_MEAN_LANES": "0"}, monkeypatch)
    np.testing.assert_array_equal(mean, mean0)
    np.testing.assert_array_equal(var, var0)
    _assert_mean_like_float64(mean, x, axes)


def _mean(x, axes, env, monkeypatch):
    return _reduced(x, lambda g, p: [g.mean(p, axes=axes, keep_dims=True)], env, monkeypatch)[0]


# Global means: 4 rows a pass and 0-3 left over, runs of 16 to 200 with and without a tail,
# batch 1, channels not a multiple of 8, rows split over the threads; the last two take run_plan.
@pytest.mark.parametrize("shape,axes", [((8, 1280, 7, 7), [2, 3]), ((1, 1280, 7, 7), [2, 3]), ((1, 13, 5, 5), [2, 3]),
                                        ((3, 7, 16), [2]), ((2, 5, 17), [2]), ((5, 3, 4, 4), [1, 2, 3]),
                                        ((6, 200), [1]), ((1, 1, 9, 9), [2, 3]), ((2, 3, 15), [2]),
                                        ((3, 4, 20), [0, 2])])
@pytest.mark.parametrize("special", [False, True])
def test_mean_rows_same_bits(shape, axes, special, monkeypatch):
    """float32 means over whole contiguous rows of 16 or more (a global average), four rows a
    pass in AVX2 (MPSGRAPH_CPU_MEAN_ROWS=0: run_plan's loop over the rows, one row a call):
    the same bits, NaN, infinities and signed zeros included; within 1e-6 relative of the
    float64 mean (the sums are in double, so the float rounding of the mean is all that is left)."""
    rng = np.random.default_rng(37)
    x = rng.standard_normal(shape).astype(np.float32) * 100
    if special:
        flat = x.reshape(-1)
        flat[0], flat[min(40, flat.size - 1)] = np.inf, np.nan
        flat[-1] = -np.inf
        x.reshape(shape[0], -1)[-1, :] = -0.0
    mean = _mean(x, axes, {}, monkeypatch)
    np.testing.assert_array_equal(mean, _mean(x, axes, {"MPSGRAPH_CPU_MEAN_ROWS": "0"}, monkeypatch))
    np.testing.assert_array_equal(mean, _mean(x, axes, {"MPSGRAPH_CPU_MEAN_LANES": "0"}, monkeypatch))
    _assert_mean_like_float64(mean, x, axes)
