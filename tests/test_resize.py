"""resize / resize_gradient: values and gradients against PyTorch's F.interpolate (bilinear with
align_corners True/False, 'nearest', 'nearest-exact'), the other MPSGraph modes (TF1-style
asymmetric coordinates, every nearest rounding mode) against a reference built from exact
fractions, gradients against finite differences (second order: resize_gradient's gradient is
resize), unknown dims, layouts, dtypes and errors."""
import math
from fractions import Fraction

import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import check_op_gradient

RNG = np.random.default_rng(11)


def _np(td):
    return np.array(td.numpy(), copy=True)


def run1(build, x, shape=None, dtype=mg.float64):
    g = mg.Graph()
    p = g.placeholder(x.shape if shape is None else shape, dtype)
    y = build(g, p)
    return _np(g.run({p: x}, [y])[y])


def nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


SIZES = [((5, 4), (9, 7)), ((6, 7), (3, 4)), ((4, 4), (4, 4)), ((3, 5), (1, 1)), ((1, 1), (3, 2)), ((7, 3), (2, 8))]


@pytest.mark.parametrize("insize,outsize", SIZES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_bilinear_matches_torch(insize, outsize, align, layout):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = RNG.standard_normal((2, 3) + insize)
    ref = F.interpolate(torch.from_numpy(x), size=outsize, mode="bilinear", align_corners=align).numpy()
    feed = nhwc(x) if layout == "NHWC" else x
    y = run1(lambda g, p: g.resize(p, outsize, mode="bilinear", center_result=True, align_corners=align,
                                   data_layout=layout), feed)
    if layout == "NHWC":
        y = nchw(y)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("insize,outsize", SIZES + [((3, 9), (9, 3)), ((10, 10), (4, 6))])
@pytest.mark.parametrize("torch_mode", ["nearest", "nearest-exact"])
def test_nearest_matches_torch(insize, outsize, torch_mode):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = RNG.standard_normal((2, 3) + insize)
    ref = F.interpolate(torch.from_numpy(x), size=outsize, mode=torch_mode).numpy()
    if torch_mode == "nearest":  # legacy: floor(d * in / out)
        kw = dict(center_result=False, nearest_rounding_mode="floor")
    else:  # half-pixel: floor((d + 0.5) * in / out)
        kw = dict(center_result=True)
    y = run1(lambda g, p: g.resize(p, outsize, mode="nearest", data_layout="NCHW", **kw), x)
    np.testing.assert_array_equal(y, ref)


# PyTorch's nearest has no align_corners
@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True), ("nearest", False)])
def test_gradient_matches_torch(mode, align):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = RNG.standard_normal((2, 3, 5, 4))
    xt = torch.from_numpy(x).requires_grad_(True)
    kw_t = dict(align_corners=align) if mode == "bilinear" else {}
    y = F.interpolate(xt, size=(7, 3), mode="bilinear" if mode == "bilinear" else "nearest-exact", **kw_t)
    w = RNG.standard_normal(tuple(y.shape))
    (y * torch.from_numpy(w)).sum().backward()
    g = mg.Graph()
    p = g.placeholder((None, None, 5, 4), mg.float64)
    yy = g.resize(p, (7, 3), mode=mode, align_corners=align, data_layout="NCHW")
    gx = g.gradients(g.reduction_sum(yy * g.constant(w), keep_dims=False), [p])[p]
    np.testing.assert_allclose(_np(g.run({p: x}, [gx])[gx]), xt.grad.numpy(), rtol=1e-12, atol=1e-13)


# ---------------- exact-fraction reference for every coordinate mode ----------------

def src_coord(d, n, m, align, center):
    if align:
        return Fraction(d * (n - 1), m - 1) if m > 1 else Fraction(0)
    if center:
        return (Fraction(2 * d + 1, 2) * n) / m - Fraction(1, 2)
    return Fraction(d * n, m)


def round_frac(v, mode):
    fl = math.floor(v)
    r = v - fl
    half = Fraction(1, 2)
    if mode == "floor":
        return fl
    if mode == "ceil":
        return math.ceil(v)
    if r != half:
        return fl + (1 if r > half else 0)
    return {"round_prefer_ceil": fl + 1, "round_prefer_floor": fl, "round_to_even": fl if fl % 2 == 0 else fl + 1,
            "round_to_odd": fl if fl % 2 else fl + 1}[mode]


def axis_matrix(n, m, mode, align, center, rounding):
    A = np.zeros((m, n))
    for d in range(m):
        s = src_coord(d, n, m, align, center)
        if mode == "nearest":
            A[d, min(max(round_frac(s, rounding), 0), n - 1)] = 1
        else:
            s = min(max(s, Fraction(0)), Fraction(n - 1))
            i0 = math.floor(s)
            w = float(s - i0)
            A[d, i0] += 1 - w
            A[d, min(i0 + 1, n - 1)] += w
    return A


def ref_resize_nhwc(x, size, mode, align, center, rounding="round_prefer_ceil"):
    Ah = axis_matrix(x.shape[1], size[0], mode, align, center, rounding)
    Aw = axis_matrix(x.shape[2], size[1], mode, align, center, rounding)
    return np.einsum("ah,bw,nhwc->nabc", Ah, Aw, x)


@pytest.mark.parametrize("insize,outsize", SIZES)
@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("align", [False, True])
def test_bilinear_matches_reference(insize, outsize, center, align):
    x = RNG.standard_normal((2,) + insize + (3,))
    y = run1(lambda g, p: g.resize(p, outsize, center_result=center, align_corners=align), x)
    np.testing.assert_allclose(y, ref_resize_nhwc(x, outsize, "bilinear", align, center), rtol=1e-12, atol=1e-13)


def test_asymmetric_upsampling_by_two():
    # TF1-style (center_result=False, align_corners=False): source = d * in / out
    x = np.arange(4.0).reshape(1, 1, 4, 1) ** 2
    y = run1(lambda g, p: g.resize(p, (1, 8), center_result=False), x)
    np.testing.assert_allclose(y.ravel(), [0, 0.5, 1, 2.5, 4, 6.5, 9, 9])


@pytest.mark.parametrize("rounding", ["round_prefer_ceil", "round_prefer_floor", "ceil", "floor", "round_to_even",
                                      "round_to_odd"])
@pytest.mark.parametrize("center,align", [(False, False), (True, False), (False, True)])
def test_nearest_rounding_modes_match_reference(rounding, center, align):
    for insize, outsize in SIZES + [((4, 2), (8, 6)), ((2, 4), (8, 8))]:  # the last two have exact ties
        x = RNG.standard_normal((1,) + insize + (2,))
        y = run1(lambda g, p: g.resize(p, outsize, mode="nearest", center_result=center, align_corners=align,
                                       nearest_rounding_mode=rounding), x)
        np.testing.assert_array_equal(y, ref_resize_nhwc(x, outsize, "nearest", align, center, rounding),
                                      err_msg=f"{insize} -> {outsize}")


@pytest.mark.parametrize("layout,shape,hw", [("HWC", (5, 4, 3), (0, 1)), ("CHW", (3, 5, 4), (1, 2)),
                                            ("HW", (5, 4), (0, 1))])
def test_other_layouts(layout, shape, hw):
    x = RNG.standard_normal(shape)
    y = run1(lambda g, p: g.resize(p, (7, 2), data_layout=layout), x)
    # move to NHWC for the reference
    perm = list(hw) + [a for a in range(x.ndim) if a not in hw]
    xs = x.transpose(perm).reshape(x.shape[hw[0]], x.shape[hw[1]], -1)[None]
    ref = ref_resize_nhwc(xs, (7, 2), "bilinear", False, True)[0]
    got = y.transpose(perm).reshape(7, 2, -1)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


# ---------------- gradients, unknown dims, dtypes ----------------

@pytest.mark.parametrize("mode,center,align", [("bilinear", True, False), ("bilinear", False, True),
                                               ("bilinear", False, False), ("nearest", True, False)])
def test_gradients_second_order(mode, center, align):
    kw = dict(mode=mode, center_result=center, align_corners=align)
    x = RNG.standard_normal((1, 4, 3, 2))
    check_op_gradient(lambda g, p: g.resize(p, (5, 2), **kw), [x], second_order=True)
    dy = RNG.standard_normal((1, 5, 2, 2))
    check_op_gradient(lambda g, d, s: g.resize_gradient(d, s, (5, 2), **kw), [dy, x], second_order=True)


def test_unknown_batch_and_channel_dims():
    x = RNG.standard_normal((2, 5, 4, 3))
    g = mg.Graph()
    p = g.placeholder((None, 5, 4, None), mg.float64)
    y = g.resize(p, (3, 6))
    assert y.shape == (None, 3, 6, None)
    gx = g.gradients(g.reduction_sum(y * y), [p])[p]
    res = g.run({p: x}, [y, gx])
    np.testing.assert_allclose(_np(res[y]), ref_resize_nhwc(x, (3, 6), "bilinear", False, True), rtol=1e-12)
    assert _np(res[gx]).shape == x.shape
    # unknown spatial dims too
    g = mg.Graph()
    p = g.placeholder((None, None, None, None), mg.float64)
    y = g.resize(p, (3, 6), mode="nearest")
    assert y.shape == (None, 3, 6, None)
    np.testing.assert_array_equal(_np(g.run({p: x}, [y])[y]), ref_resize_nhwc(x, (3, 6), "nearest", False, True))


@pytest.mark.parametrize("dtype,tol", [(mg.float32, 1e-6), (mg.float16, 3e-3), (mg.bfloat16, 2e-2)])
def test_low_precision_dtypes(dtype, tol):
    x = RNG.standard_normal((2, 5, 4, 3))
    npd = {mg.float32: np.float32, mg.float16: np.float16}.get(dtype)
    if npd is None:
        npd = pytest.importorskip("ml_dtypes").bfloat16
    xl = x.astype(npd)
    for mode in ("bilinear", "nearest"):
        y = run1(lambda g, p: g.resize(p, (7, 3), mode=mode), xl, dtype=dtype)
        assert y.dtype == npd
        ref = ref_resize_nhwc(xl.astype(np.float64), (7, 3), mode, False, True)
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=4 * tol, atol=4 * tol)


def test_zero_size_batch():
    g = mg.Graph()
    p = g.placeholder((None, 3, 3, 2), mg.float32)
    y = g.resize(p, (5, 5))
    gx = g.gradients(g.reduction_sum(y), [p])[p]
    res = g.run({p: np.zeros((0, 3, 3, 2), np.float32)}, [y, gx])
    assert _np(res[y]).shape == (0, 5, 5, 2) and _np(res[gx]).shape == (0, 3, 3, 2)


# ---------------- errors ----------------

@pytest.mark.parametrize("kwargs,pattern", [
    (dict(size=(0, 3)), r"size \(0, 3\) must be positive"),
    (dict(size=(3,)), r"size needs 2 values"),
    (dict(size=(3, 3), mode="bicubic"), r"mode must be 'nearest' or 'bilinear'"),
    (dict(size=(3, 3), data_layout="NCDHW"), r"data_layout must be"),
    (dict(size=(3, 3), data_layout="HWC"), r"expects a rank-3 HWC source, got float32\(1, 4, 4, 2\)"),
    (dict(size=(3, 3), mode="nearest", nearest_rounding_mode="up"), r"nearest_rounding_mode must be"),
])
def test_bad_attributes(kwargs, pattern):
    g = mg.Graph()
    x = g.placeholder((1, 4, 4, 2), mg.float32)
    with pytest.raises(mg.GraphError, match=r"^\[resize\] " + pattern):
        g.resize(x, **kwargs)


def test_bad_inputs():
    g = mg.Graph()
    with pytest.raises(TypeError, match=r"\[resize\] expects a floating-point dtype"):
        g.resize(g.placeholder((1, 4, 4, 2), mg.int32), (2, 2))
    with pytest.raises(mg.GraphError, match=r"\[resize\] cannot resize an empty image: source float32\(1, 0, 4, 2\)"):
        g.resize(g.placeholder((1, 0, 4, 2), mg.float32), (2, 2))
    with pytest.raises(mg.GraphError, match=r"\[resize_gradient\] dy float32\(1, 3, 3, 2\) does not match the resized "
                                            r"shape \(1, 2, 2, 2\)"):
        g.resize_gradient(g.placeholder((1, 3, 3, 2), mg.float32), g.placeholder((1, 4, 4, 2), mg.float32), (2, 2))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_gradients_with_every_dim_unknown(mode):
    x = RNG.standard_normal((2, 3, 4, 2))
    check_op_gradient(lambda g, p: g.resize(p, (5, 3), mode=mode), [x], unknown_dims=True)
    dy = RNG.standard_normal((2, 5, 3, 2))
    check_op_gradient(lambda g, d, s: g.resize_gradient(d, s, (5, 3), mode=mode), [dy, x], unknown_dims=True)
