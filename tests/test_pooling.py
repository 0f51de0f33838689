"""Pooling: max / average / L2-norm (2-D, 4-D, N-d primitives), return indices, global
pooling. Values and gradients against PyTorch where it has the op (torch.nn.functional on the
CPU), against a brute-force numpy reference everywhere (padding styles, dilation with
averages, 4-D), and gradients against finite differences (tests/gradcheck.py)."""
import itertools
import math

import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import check_op_gradient

RNG = np.random.default_rng(7)


def _np(td):
    return np.array(td.numpy(), copy=True)


def run1(build, arrays, shapes=None, dtype=mg.float64):
    g = mg.Graph()
    phs = [g.placeholder(a.shape if shapes is None else shapes[i], dtype, name=f"in{i}") for i, a in enumerate(arrays)]
    out = build(g, *phs)
    outs = list(out) if isinstance(out, tuple) else [out]
    res = g.run(dict(zip(phs, arrays)), outs)
    vals = [_np(res[o]) for o in outs]
    return tuple(vals) if isinstance(out, tuple) else vals[0]


def distinct(*shape):
    n = int(np.prod(shape))
    return (RNG.permutation(n).reshape(shape) * 0.37 - n * 0.15).astype(np.float64)


# ---------------- numpy reference (trailing k dims, channels first) ----------------

def out_dims(n, k, s, d, pb, pa, ceil, style):
    ext = (k - 1) * d + 1
    if style in ("same", "same_lower"):
        o = -(-n // s)
        tot = max((o - 1) * s + ext - n, 0)
        b = tot // 2 if style == "same" else tot - tot // 2
        return o, b, tot - b
    if style == "valid":
        pb = pa = 0
    L = n + pb + pa
    if ceil:
        o = -(-(L - ext) // s) + 1
        if (o - 1) * s >= n + pb:
            o -= 1
    else:
        o = (L - ext) // s + 1
    return o, pb, pa


def ref_pool(x, mode, kernel, strides, dilations, padding, ceil=False, style="explicit", include_pad=False):
    """mode: max | avg | sum | l2. Returns values (and flat argmax indices for max)."""
    k = len(kernel)
    lead, sp = x.shape[:-k], x.shape[-k:]
    geo = [out_dims(sp[i], kernel[i], strides[i], dilations[i], padding[2 * i], padding[2 * i + 1], ceil, style)
           for i in range(k)]
    oshape = tuple(g[0] for g in geo)
    out = np.zeros(lead + oshape)
    idx = np.full(lead + oshape, -1, np.int64)
    xf = x.reshape((-1,) + sp)
    of, jf = out.reshape((-1,) + oshape), idx.reshape((-1,) + oshape)
    for b in range(xf.shape[0]):
        for o in itertools.product(*[range(n) for n in oshape]):
            vals, flat, padded = [], [], 1
            for i in range(k):
                start = o[i] * strides[i] - geo[i][1]
                cnt = sum(1 for t in range(kernel[i]) if start + t * dilations[i] < sp[i] + geo[i][2])
                padded *= cnt
            for t in itertools.product(*[range(kk) for kk in kernel]):
                pos = [o[i] * strides[i] - geo[i][1] + t[i] * dilations[i] for i in range(k)]
                if all(0 <= pos[i] < sp[i] for i in range(k)):
                    vals.append(xf[(b,) + tuple(pos)])
                    flat.append(int(np.ravel_multi_index(pos, sp)))
            if mode == "max":
                if vals:
                    j = int(np.argmax(vals))
                    of[(b,) + o], jf[(b,) + o] = vals[j], flat[j]
                else:
                    of[(b,) + o] = -np.inf
            elif mode == "sum":
                of[(b,) + o] = sum(vals)
            elif mode == "l2":
                of[(b,) + o] = math.sqrt(sum(v * v for v in vals))
            else:
                div = padded if include_pad else len(vals)
                of[(b,) + o] = sum(vals) / div if div else 0.0
    return (out, idx) if mode == "max" else out


def to_nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def to_nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


# (kernel, stride, dilation, padding (t, b, l, r), ceil_mode): PyTorch-expressible (symmetric pads <= k/2)
CASES_2D = [
    ((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), False),
    ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), False),
    ((3, 2), (2, 1), (1, 1), (1, 1, 0, 0), True),
    ((3, 3), (2, 2), (2, 1), (1, 1, 1, 1), True),
    ((2, 3), (3, 2), (1, 2), (0, 0, 1, 1), False),
    ((1, 1), (2, 2), (1, 1), (0, 0, 0, 0), True),
]


def torch_args(kernel, stride, dil, pad):
    return dict(kernel_size=kernel, stride=stride, padding=(pad[0], pad[2]))


@pytest.mark.parametrize("case", CASES_2D)
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_max_pooling_2d_matches_torch(case, layout):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    kernel, stride, dil, pad, ceil = case
    x = distinct(2, 3, 7, 6)  # NCHW
    tv, ti = F.max_pool2d(torch.from_numpy(x), dilation=dil, ceil_mode=ceil, return_indices=True,
                          **torch_args(kernel, stride, dil, pad))
    feed = to_nhwc(x) if layout == "NHWC" else x
    kw = dict(kernel_sizes=kernel, strides=stride, dilation_rates=dil, padding=pad, ceil_mode=ceil, data_layout=layout)
    v, i = run1(lambda g, a: g.max_pooling_2d_return_indices(a, indices_dtype=mg.int64, **kw), [feed])
    v2 = run1(lambda g, a: g.max_pooling_2d(a, **kw), [feed])
    if layout == "NHWC":
        v, i, v2 = to_nchw(v), to_nchw(i), to_nchw(v2)
    np.testing.assert_array_equal(v, tv.numpy())
    np.testing.assert_array_equal(v2, tv.numpy())
    np.testing.assert_array_equal(i, ti.numpy())
    rv, ri = ref_pool(x, "max", kernel, stride, dil, pad, ceil)
    np.testing.assert_array_equal(v, rv)
    np.testing.assert_array_equal(i, ri)


@pytest.mark.parametrize("case", [c for c in CASES_2D if c[2] == (1, 1)])
@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_avg_pooling_2d_matches_torch(case, include_pad, layout):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    kernel, stride, dil, pad, ceil = case
    x = RNG.standard_normal((2, 3, 7, 6))
    tv = F.avg_pool2d(torch.from_numpy(x), ceil_mode=ceil, count_include_pad=include_pad,
                      **torch_args(kernel, stride, dil, pad)).numpy()
    feed = to_nhwc(x) if layout == "NHWC" else x
    v = run1(lambda g, a: g.avg_pooling_2d(a, kernel, stride, padding=pad, ceil_mode=ceil,
                                           include_zero_pad=include_pad, data_layout=layout), [feed])
    if layout == "NHWC":
        v = to_nchw(v)
    np.testing.assert_allclose(v, tv, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(v, ref_pool(x, "avg", kernel, stride, dil, pad, ceil, include_pad=include_pad),
                               rtol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES_2D if c[2] == (1, 1)])
def test_l2_norm_pooling_2d_matches_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    kernel, stride, dil, pad, ceil = case
    x = RNG.standard_normal((2, 3, 7, 6))
    tv = F.avg_pool2d(torch.from_numpy(x * x), ceil_mode=ceil, count_include_pad=True, divisor_override=1,
                      **torch_args(kernel, stride, dil, pad)).sqrt().numpy()
    v = run1(lambda g, a: g.l2_norm_pooling_2d(a, kernel, stride, padding=pad, ceil_mode=ceil, data_layout="NCHW"),
             [x])
    np.testing.assert_allclose(v, tv, rtol=1e-12)
    if pad == (0, 0, 0, 0) and not ceil:  # PyTorch's own LP pooling (no padding there)
        lp = F.lp_pool2d(torch.from_numpy(x), 2, kernel, stride).numpy()
        np.testing.assert_allclose(v, lp, rtol=1e-12)


# PyTorch's avg_pool2d has no dilation, so dilated cases are compared for max only
@pytest.mark.parametrize("case,op", [(c, op) for c in CASES_2D for op in ("max", "avg")
                                     if op == "max" or c[2] == (1, 1)])
def test_2d_gradients_match_torch(case, op):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    kernel, stride, dil, pad, ceil = case
    x = distinct(2, 2, 7, 6)
    xt = torch.from_numpy(x).requires_grad_(True)
    if op == "max":
        y = F.max_pool2d(xt, dilation=dil, ceil_mode=ceil, **torch_args(kernel, stride, dil, pad))
    else:
        y = F.avg_pool2d(xt, ceil_mode=ceil, count_include_pad=True, **torch_args(kernel, stride, dil, pad))
    w = RNG.standard_normal(tuple(y.shape))
    (y * torch.from_numpy(w)).sum().backward()
    g = mg.Graph()
    xp = g.placeholder(x.shape, mg.float64)
    kw = dict(kernel_sizes=kernel, strides=stride, dilation_rates=dil, padding=pad, ceil_mode=ceil, data_layout="NCHW")
    yy = g.max_pooling_2d(xp, **kw) if op == "max" else g.avg_pooling_2d(xp, include_zero_pad=True, **kw)
    loss = g.reduction_sum(yy * g.constant(w), keep_dims=False)
    gx = g.gradients(loss, [xp])[xp]
    np.testing.assert_allclose(_np(g.run({xp: x}, [gx])[gx]), xt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_max_pooling_ties_take_the_first_and_nan_wins():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.array([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, np.nan, 5.0], [0.0, 0.0, 0.0, 0.0], [7.0, 7.0, 7.0, 7.0]]]])
    tv, ti = F.max_pool2d(torch.from_numpy(x), 2, 2, return_indices=True)
    v, i = run1(lambda g, a: g.max_pooling_2d_return_indices(a, 2, 2, data_layout="NCHW"), [x])
    np.testing.assert_array_equal(v, tv.numpy())
    np.testing.assert_array_equal(i, ti.numpy())
    assert i.dtype == np.int32


# ---------------- padding styles, dilation, N-d, 4-D (numpy reference) ----------------

@pytest.mark.parametrize("style", ["valid", "same", "same_lower", "explicit"])
@pytest.mark.parametrize("mode", ["max", "avg", "avg_pad", "l2"])
def test_padding_styles_match_reference(style, mode):
    x = distinct(2, 7, 8, 3)  # NHWC
    kernel, stride, dil, pad = (3, 2), (2, 3), (1, 2), (2, 0, 1, 3)
    kw = dict(kernel_sizes=kernel, strides=stride, dilation_rates=dil, padding_style=style, padding=pad)
    if mode == "max":
        v = run1(lambda g, a: g.max_pooling_2d(a, **kw), [x])
    elif mode == "l2":
        v = run1(lambda g, a: g.l2_norm_pooling_2d(a, **kw), [x])
    else:
        v = run1(lambda g, a: g.avg_pooling_2d(a, include_zero_pad=mode == "avg_pad", **kw), [x])
    ref = ref_pool(to_nchw(x), {"avg_pad": "avg"}.get(mode, mode), kernel, stride, dil, pad, style=style,
                   include_pad=mode == "avg_pad")
    if mode == "max":
        ref = ref[0]
    np.testing.assert_allclose(to_nchw(v), ref, rtol=1e-12)
    if style == "same":  # TF_SAME: ceil(in / stride)
        assert v.shape == (2, 4, 3, 3)


@pytest.mark.parametrize("ceil", [False, True])
def test_pooling_4d_matches_reference(ceil):
    x = distinct(3, 4, 5, 6)
    kernel, stride, dil, pad = (2, 1, 3, 2), (1, 2, 2, 3), (1, 1, 1, 2), (0, 1, 0, 0, 1, 1, 2, 0)
    kw = dict(kernel_sizes=kernel, strides=stride, dilation_rates=dil, padding=pad, ceil_mode=ceil)
    v, i = run1(lambda g, a: g.max_pooling_4d_return_indices(a, **kw), [x])
    rv, ri = ref_pool(x, "max", kernel, stride, dil, pad, ceil)
    np.testing.assert_array_equal(v, rv)
    np.testing.assert_array_equal(i, ri)  # flat over all four dims (GlobalFlatten4D)
    np.testing.assert_array_equal(run1(lambda g, a: g.max_pooling_4d(a, **kw), [x]), rv)
    for inc in (False, True):
        np.testing.assert_allclose(run1(lambda g, a: g.avg_pooling_4d(a, include_zero_pad=inc, **kw), [x]),
                                   ref_pool(x, "avg", kernel, stride, dil, pad, ceil, include_pad=inc), rtol=1e-12)
    np.testing.assert_allclose(run1(lambda g, a: g.l2_norm_pooling_4d(a, **kw), [x]),
                               ref_pool(x, "l2", kernel, stride, dil, pad, ceil), rtol=1e-12)


def test_4d_defaults_are_unit_strides():
    x = distinct(2, 3, 4, 5)
    v = run1(lambda g, a: g.max_pooling_4d(a, kernel_sizes=(1, 2, 2, 2)), [x])
    np.testing.assert_array_equal(v, ref_pool(x, "max", (1, 2, 2, 2), (1,) * 4, (1,) * 4, (0,) * 8)[0])


@pytest.mark.parametrize("k", [1, 3])
def test_nd_primitives_pool_trailing_dims(k):
    x = distinct(*(2, 3, 5, 4, 6)[: 2 + k])
    kernel, stride, dil = (2, 3, 2)[:k], (2, 1, 3)[:k], (1, 1, 2)[:k]
    pad = (1, 0, 0, 2, 1, 1)[: 2 * k]
    kw = dict(kernel_sizes=kernel, strides=stride, dilation_rates=dil, padding=pad)
    rv, ri = ref_pool(x, "max", kernel, stride, dil, pad)
    np.testing.assert_array_equal(run1(lambda g, a: g.max_pooling_nd(a, **kw), [x]), rv)
    v, i = run1(lambda g, a: g.max_pooling_nd_return_indices(a, **kw), [x])
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(run1(lambda g, a: g.sum_pooling_nd(a, **kw), [x]), ref_pool(x, "sum", kernel, stride, dil, pad),
                               rtol=1e-12)
    np.testing.assert_allclose(run1(lambda g, a: g.avg_pooling_nd(a, **kw), [x]), ref_pool(x, "avg", kernel, stride, dil, pad),
                               rtol=1e-12)


def test_attribute_sugar_single_values_and_symmetric_padding():
    x = distinct(1, 6, 6, 2)
    a = run1(lambda g, t: g.max_pooling_2d(t, 3, 2, padding=1), [x])
    b = run1(lambda g, t: g.max_pooling_2d(t, (3, 3), (2, 2), padding=(1, 1, 1, 1)), [x])
    c = run1(lambda g, t: g.max_pooling_2d(t, (3, 3), (2, 2), padding=(1, 1)), [x])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_windows_of_padding_only():
    # explicit padding wider than the window: windows that see no input
    x = np.arange(4.0).reshape(1, 1, 2, 2)
    kw = dict(kernel_sizes=(1, 1), strides=(2, 2), padding=(1, 1, 1, 1), data_layout="NCHW")
    v, i = run1(lambda g, a: g.max_pooling_2d_return_indices(a, **kw), [x])
    np.testing.assert_array_equal(v, [[[[-np.inf, -np.inf], [-np.inf, 3.0]]]])
    np.testing.assert_array_equal(i, [[[[-1, -1], [-1, 3]]]])
    np.testing.assert_array_equal(run1(lambda g, a: g.avg_pooling_2d(a, **kw), [x]), [[[[0, 0], [0, 3.0]]]])
    np.testing.assert_array_equal(run1(lambda g, a: g.avg_pooling_2d(a, include_zero_pad=True, **kw), [x]),
                                  [[[[0, 0], [0, 3.0]]]])


def test_global_pooling_keeps_dims():
    x = RNG.standard_normal((2, 5, 4, 3))
    for layout, axes in (("NHWC", (1, 2)), ("NCHW", (2, 3))):
        a = run1(lambda g, t: g.global_average_pooling_2d(t, data_layout=layout), [x])
        m = run1(lambda g, t: g.global_max_pooling_2d(t, data_layout=layout), [x])
        np.testing.assert_allclose(a, x.mean(axis=axes, keepdims=True), rtol=1e-12)
        np.testing.assert_array_equal(m, x.max(axis=axes, keepdims=True))
    g = mg.Graph()
    assert g.global_average_pooling_2d(g.placeholder((None, 5, 4, None), mg.float32)).shape == (None, 1, 1, None)


# ---------------- unknown dims, dtypes, zero sizes ----------------

def test_unknown_batch_and_channel_dims():
    x = distinct(2, 7, 6, 3)
    kw = dict(kernel_sizes=(3, 2), strides=(2, 2), padding=(1, 1, 0, 1), ceil_mode=True)
    g = mg.Graph()
    p = g.placeholder((None, 7, 6, None), mg.float64)
    y = g.max_pooling_2d(p, **kw)
    assert y.shape == (None, 4, 3, None)
    yi = g.max_pooling_2d_return_indices(p, **kw)
    a = g.avg_pooling_2d(p, **kw)
    gx = g.gradients(g.reduction_sum(y * y) + g.reduction_sum(a), [p])[p]
    res = g.run({p: x}, [y, yi[1], a, gx])
    known = run1(lambda gg, t: (gg.max_pooling_2d(t, **kw), gg.avg_pooling_2d(t, **kw)), [x])
    np.testing.assert_array_equal(_np(res[y]), known[0])
    np.testing.assert_array_equal(_np(res[a]), known[1])
    # all dims unknown, 'same' padding resolved at specialisation
    g = mg.Graph()
    p = g.placeholder((None, None, None, None), mg.float64)
    y = g.avg_pooling_2d(p, (3, 3), (2, 2), padding_style="same")
    assert y.shape == (None, None, None, None)
    gx = g.gradients(g.reduction_sum(y), [p])[p]
    res = g.run({p: x}, [y, gx])
    ref = ref_pool(to_nchw(x), "avg", (3, 3), (2, 2), (1, 1), (0,) * 4, style="same")
    np.testing.assert_allclose(to_nchw(_np(res[y])), ref, rtol=1e-12)
    assert _np(res[gx]).shape == x.shape


@pytest.mark.parametrize("dtype,np_dtype,tol", [(mg.float32, np.float32, 1e-6), (mg.float16, np.float16, 2e-3),
                                                (mg.bfloat16, None, 2e-2)])
def test_low_precision_dtypes(dtype, np_dtype, tol):
    x = RNG.standard_normal((2, 6, 5, 3))
    if np_dtype is None:
        ml = pytest.importorskip("ml_dtypes")
        np_dtype = ml.bfloat16
    xl = x.astype(np_dtype)
    kw = dict(kernel_sizes=(3, 2), strides=(2, 1), padding=1)
    for op in ("max_pooling_2d", "avg_pooling_2d", "l2_norm_pooling_2d"):
        lo = run1(lambda g, a: getattr(g, op)(a, **kw), [xl], dtype=dtype)
        hi = run1(lambda g, a: getattr(g, op)(a, **kw), [xl.astype(np.float64)])
        assert lo.dtype == np_dtype
        np.testing.assert_allclose(lo.astype(np.float64), hi, rtol=tol * 4, atol=tol * 4)


def test_zero_size_batch():
    x = np.zeros((0, 5, 5, 2))
    g = mg.Graph()
    p = g.placeholder((None, 5, 5, 2), mg.float64)
    y = g.max_pooling_2d(p, 2, 2)
    a = g.avg_pooling_2d(p, 2, 2)
    gx = g.gradients(g.reduction_sum(y) + g.reduction_sum(a), [p])[p]
    res = g.run({p: x}, [y, a, gx])
    assert _np(res[y]).shape == (0, 2, 2, 2) and _np(res[gx]).shape == (0, 5, 5, 2)


# ---------------- gradients (finite differences, second order) ----------------

KW2 = dict(kernel_sizes=(3, 2), strides=(2, 1), dilation_rates=(1, 2), padding=(1, 1, 0, 1), ceil_mode=True)


@pytest.mark.parametrize("op", ["max_pooling_2d", "avg_pooling_2d", "l2_norm_pooling_2d"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_front_end_gradients_second_order(op, layout):
    x = distinct(1, 5, 5, 2) if layout == "NHWC" else distinct(1, 2, 5, 5)
    if op == "l2_norm_pooling_2d":
        x = x + np.sign(x) * 0.5  # away from zero windows
    check_op_gradient(lambda g, a: getattr(g, op)(a, data_layout=layout, **KW2), [x], second_order=True)


def test_include_zero_pad_gradient():
    check_op_gradient(lambda g, a: g.avg_pooling_2d(a, include_zero_pad=True, **KW2), [distinct(1, 5, 4, 2)],
                      second_order=True)


def test_max_gradient_ops_are_each_others_gradients():
    x = distinct(2, 5, 5)
    kw = dict(kernel_sizes=(2, 3), strides=(2, 1), padding=(1, 0, 1, 1))
    pooled = run1(lambda g, a: g.max_pooling_nd(a, **kw), [x]).shape
    dy = RNG.standard_normal(pooled)
    check_op_gradient(lambda g, d, s: g.max_pooling_nd_gradient(d, s, **kw), [dy, x], second_order=True)
    check_op_gradient(lambda g, v, s: g.max_pooling_nd_gather(v, s, **kw), [RNG.standard_normal(x.shape), x],
                      second_order=True)


def test_l2_pooling_of_zero_window_has_zero_gradient():
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, 0] = 2.0
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float64)
    y = g.l2_norm_pooling_2d(p, 2, 2, data_layout="NCHW")
    gx = g.gradients(g.reduction_sum(y), [p])[p]
    res = g.run({p: x}, [y, gx])
    np.testing.assert_array_equal(_np(res[y]), [[[[2.0, 0], [0, 0]]]])
    expect = np.zeros_like(x)
    expect[0, 0, 0, 0] = 1.0
    np.testing.assert_array_equal(_np(res[gx]), expect)


# ---------------- errors ----------------

def test_window_too_large_message():
    g = mg.Graph()
    x = g.placeholder((1, 3, 3, 2), mg.float32)
    with pytest.raises(mg.GraphError, match=r"^\[max_pooling_2d\] window 5 with dilation 1 does not fit in padded "
                                            r"input of size 3 \(source float32\(1, 3, 3, 2\)\)"):
        g.max_pooling_2d(x, (5, 1), (1, 1))


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(kernel_sizes=(2, 2, 2), strides=(1, 1)), r"kernel_sizes \(2, 2, 2\) needs 2 values"),
    (dict(kernel_sizes=(2, 2), strides=(0, 1)), r"strides \(0, 1\) must be positive"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), padding=(1, 2, 3)), r"padding \(1, 2, 3\) needs 4 values"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), padding=(-1,)), r"padding \(-1,\) must be non-negative"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), padding_style="full"), r"padding_style must be"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), data_layout="NDHWC"), r"data_layout must be 'NHWC' or 'NCHW'"),
])
def test_bad_attributes(kwargs, pattern):
    g = mg.Graph()
    x = g.placeholder((1, 4, 4, 2), mg.float32)
    with pytest.raises(mg.GraphError, match=r"^\[avg_pooling_2d\] " + pattern):
        g.avg_pooling_2d(x, **kwargs)


def test_bad_sources():
    g = mg.Graph()
    with pytest.raises(mg.GraphError, match=r"\[max_pooling_2d\] expects a rank-4 NHWC source, got float32\(4, 4, 2\)"):
        g.max_pooling_2d(g.placeholder((4, 4, 2), mg.float32), 2, 2)
    with pytest.raises(TypeError, match=r"\[max_pooling_2d\] expects a floating-point dtype"):
        g.max_pooling_2d(g.placeholder((1, 4, 4, 2), mg.int32), 2, 2)
    with pytest.raises(mg.GraphError, match=r"\[max_pooling_nd\] kernel_sizes \(2, 2, 2\) pool 3 trailing dims, "
                                            r"but source float32\(4, 4\) has rank 2"):
        g.max_pooling_nd(g.placeholder((4, 4), mg.float32), (2, 2, 2))
    with pytest.raises(mg.GraphError, match=r"\[max_pooling_nd_gradient\] dy float32\(1, 3\) does not match"):
        g.max_pooling_nd_gradient(g.placeholder((1, 3), mg.float32), g.placeholder((1, 4), mg.float32), (2,), (2,))
    with pytest.raises(TypeError, match=r"indices_dtype must be int32 or int64"):
        g.max_pooling_2d_return_indices(g.placeholder((1, 4, 4, 2), mg.float32), 2, 2, indices_dtype=mg.int16)


def test_unknown_dims_too_small_fail_at_run_time():
    g = mg.Graph()
    x = g.placeholder((1, None, None, 2), mg.float32)
    y = g.max_pooling_2d(x, 5, 1)
    assert y.shape == (1, None, None, 2)
    with pytest.raises(mg.GraphError, match=r"window 5 with dilation 1 does not fit in padded input of size 3"):
        g.run({x: np.zeros((1, 3, 3, 2), np.float32)}, [y])
    out = g.run({x: np.zeros((1, 6, 5, 2), np.float32)}, [y])  # the graph stays usable
    assert _np(out[y]).shape == (1, 2, 1, 2)


@pytest.mark.parametrize("op", ["max_pooling_2d", "avg_pooling_2d", "l2_norm_pooling_2d"])
def test_gradients_with_every_dim_unknown(op):
    x = distinct(2, 5, 4, 2) + 0.5
    check_op_gradient(lambda g, a: getattr(g, op)(a, (3, 2), (2, 1), padding_style="same"), [x], unknown_dims=True)
    check_op_gradient(lambda g, a: getattr(g, op)(a, **KW2), [x], unknown_dims=True)
