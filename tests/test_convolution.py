"""Convolution family against PyTorch (forward, data and weights gradients through autograd) and
against finite differences (tests/gradcheck.py, float64), including second order.

The canonical primitives (convolution, convolution_data_gradient, convolution_weights_gradient)
are channels-first with any number of spatial dims; the MPSGraph-named front ends
(convolution_2d/3d, depthwise_convolution_2d, convolution_transpose_2d,
convolution_2d_data_gradient, convolution_2d_weights_gradient) transpose layouts around them."""
import math

import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import check_op_gradient

try:
    import torch
    F = torch.nn.functional
except ImportError:  # the finite-difference, error and zero-size tests still run
    torch = F = None

# tests that need no PyTorch reference
NO_TORCH = {"test_unknown_batch_and_channels_infer", "test_finite_differences", "test_second_order_finite_differences",
            "test_finite_differences_unknown_dims_same_padding", "test_second_order_front_ends", "test_zero_size",
            "test_errors", "test_error_at_specialisation_for_unknown_dims"}


@pytest.fixture(autouse=True)
def _skip_without_torch(request):
    if torch is None and request.node.originalname not in NO_TORCH:
        pytest.skip("PyTorch is not installed")

RNG = np.random.default_rng(7)


def normal(*shape):
    return RNG.standard_normal(shape)


# ---------------- references ----------------

def same_pads(in_sp, k_sp, strides, dil, lower=False):
    """TensorFlow SAME (extra padding at the end) or ONNX SAME_LOWER, as a flat (before, after) list."""
    pads = []
    for n, k, s, d in zip(in_sp, k_sp, strides, dil):
        out = -(-n // s)
        total = max((out - 1) * s + d * (k - 1) + 1 - n, 0)
        small = total // 2
        pads += [total - small, small] if lower else [small, total - small]
    return pads


def torch_pad_arg(pads):
    """Flat (before, after) per spatial dim -> F.pad's last-dim-first order."""
    k = len(pads) // 2
    arg = []
    for i in reversed(range(k)):
        arg += [pads[2 * i], pads[2 * i + 1]]
    return arg


def ref_conv(x, w, strides, dil, pads, groups=1):
    """Channels-first convolution with explicit (before, after) padding, by PyTorch."""
    k = x.ndim - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[k]
    xt = F.pad(torch.tensor(x), torch_pad_arg(pads))
    return conv(xt, torch.tensor(w), stride=tuple(strides), dilation=tuple(dil), groups=groups).numpy()


def ref_conv_grads(x, w, dy, strides, dil, pads, groups=1):
    """(dx, dw) of sum(dy * conv(x, w)) by PyTorch autograd."""
    k = x.ndim - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[k]
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    y = conv(F.pad(xt, torch_pad_arg(pads)), wt, stride=tuple(strides), dilation=tuple(dil), groups=groups)
    dx, dw = torch.autograd.grad(y, [xt, wt], torch.tensor(dy))
    return dx.numpy(), dw.numpy()


def run(build, *arrays, dtype=mg.float64, unknown=False):
    g = mg.Graph()
    phs = [g.placeholder(tuple(None for _ in a.shape) if unknown else a.shape, dtype) for a in arrays]
    out = build(g, *phs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    r = g.run({p: a for p, a in zip(phs, arrays)}, outs)
    vals = [r[o].numpy() for o in outs]
    return vals if isinstance(out, (tuple, list)) else vals[0]


def nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def from_nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def hwio(w):  # (O, I, *K) -> (*K, I, O)
    return np.ascontiguousarray(np.transpose(w, tuple(range(2, w.ndim)) + (1, 0)))


# ---------------- the canonical primitive, forward ----------------

# (source shape, weights shape, strides, dilation_rates, padding (before, after per dim), groups)
PRIMITIVE_CASES = [
    ((2, 3, 7, 8), (4, 3, 3, 2), (2, 1), (1, 2), (1, 0, 2, 1), 1),
    ((1, 4, 5, 5), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    ((3, 6, 9, 7), (6, 1, 3, 3), (2, 2), (1, 1), (0, 2, 1, 1), 6),
    ((2, 2, 6, 6), (3, 2, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # 1x1 direct
    ((2, 2, 6, 6), (3, 2, 1, 1), (2, 3), (1, 1), (0, 0, 0, 0), 1),  # 1x1 strided
    ((2, 2, 6, 6), (3, 2, 1, 1), (1, 1), (1, 1), (1, 0, 0, 2), 1),  # 1x1 padded
    ((2, 3, 10, 11), (2, 3, 4, 5), (3, 2), (2, 1), (3, 3, 0, 4), 1),
    ((1, 2, 3, 3), (2, 2, 5, 5), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # kernel hangs over both sides
    ((1, 2, 4, 4), (2, 2, 2, 2), (5, 5), (1, 1), (0, 0, 0, 0), 1),  # stride larger than the input
    ((2, 3, 9), (4, 3, 3), (2,), (2,), (1, 2), 1),  # 1-D
    ((2, 4, 5, 6, 7), (4, 2, 2, 3, 2), (1, 2, 1), (2, 1, 1), (1, 0, 0, 1, 1, 1), 2),  # 3-D grouped
]


@pytest.mark.parametrize("dtype", [mg.float64, mg.float32])
@pytest.mark.parametrize("xs,ws,s,d,p,groups", PRIMITIVE_CASES)
def test_convolution_primitive_forward(xs, ws, s, d, p, groups, dtype):
    x, w = normal(*xs), normal(*ws)
    npdt = np.float64 if dtype == mg.float64 else np.float32
    got = run(lambda g, a, b: g.convolution(a, b, strides=s, dilation_rates=d, padding=p, groups=groups),
              x.astype(npdt), w.astype(npdt), dtype=dtype)
    want = ref_conv(x, w, s, d, p, groups)
    tol = 1e-12 if dtype == mg.float64 else 2e-5
    assert got.dtype == npdt
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("xs,ws,s,d,p,groups", PRIMITIVE_CASES)
def test_convolution_primitive_gradients_vs_torch(xs, ws, s, d, p, groups):
    x, w = normal(*xs), normal(*ws)
    y = ref_conv(x, w, s, d, p, groups)
    dy = normal(*y.shape)

    def build(g, a, b):
        out = g.convolution(a, b, strides=s, dilation_rates=d, padding=p, groups=groups)
        grads = g.gradients(g.reduction_sum(out * g.constant(dy)), [a, b])
        return grads[a], grads[b]

    gx, gw = run(build, x, w)
    rx, rw = ref_conv_grads(x, w, dy, s, d, p, groups)
    np.testing.assert_allclose(gx, rx, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, rw, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("xs,ws,s,d,p,groups", PRIMITIVE_CASES)
def test_gradient_primitives_direct_vs_torch(xs, ws, s, d, p, groups):
    """convolution_data_gradient / convolution_weights_gradient called directly."""
    x, w = normal(*xs), normal(*ws)
    dy = normal(*ref_conv(x, w, s, d, p, groups).shape)
    kw = dict(strides=s, dilation_rates=d, padding=p, groups=groups)
    gx, gw = run(lambda g, a, b, c: (g.convolution_data_gradient(c, b, a, **kw),
                                     g.convolution_weights_gradient(c, a, b, **kw)), x, w, dy)
    rx, rw = ref_conv_grads(x, w, dy, s, d, p, groups)
    np.testing.assert_allclose(gx, rx, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, rw, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("n,c,o,hw,groups,k", [
    (1, 64, 32, 64, 1, 3),  # BLAS-threaded products, two column tiles split mid-row
    (4, 8, 8, 12, 2, 3),    # (image, group) units over the pool
    (3, 16, 16, 40, 4, 3),
    (1, 4, 4, 64, 1, 3),    # pool units = tiles of one image, split mid-row
    (2, 4, 4, 64, 1, 3),    # data gradient: whole images as units, several tiles each
    (2, 16, 16, 64, 1, 1),  # 1x1 direct, tiled
    (1, 96, 96, 20, 1, 1),  # 1x1 direct, one BLAS-threaded product
])
def test_large_tiles_and_thread_split(n, c, o, hw, groups, k):
    """Column tiles (also split inside an output row) and the two ways of splitting work."""
    x, w = normal(n, c, hw, hw).astype(np.float32), normal(o, c // groups, k, k).astype(np.float32)
    dy = normal(n, o, hw, hw).astype(np.float32)
    pad = k // 2
    kw = dict(padding=(pad,) * 4, groups=groups)
    y, gx, gw = run(lambda g, a, b, e: (g.convolution(a, b, **kw), g.convolution_data_gradient(e, b, a, **kw),
                                        g.convolution_weights_gradient(e, a, b, **kw)), x, w, dy, dtype=mg.float32)
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    np.testing.assert_allclose(y, ref_conv(x64, w64, (1, 1), (1, 1), kw["padding"], groups), rtol=1e-4, atol=1e-3)
    rx, rw = ref_conv_grads(x64, w64, dy64, (1, 1), (1, 1), kw["padding"], groups)
    np.testing.assert_allclose(gx, rx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gw, rw, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("n", [1, 2])
def test_large_strided_dilated_tiles(n):
    x, w = normal(n, 4, 150, 140), normal(4, 4, 3, 3)
    s, d, p = (2, 3), (2, 1), (2, 1, 0, 3)
    y = ref_conv(x, w, s, d, p)
    dy = normal(*y.shape)
    kw = dict(strides=s, dilation_rates=d, padding=p)
    got, gx, gw = run(lambda g, a, b, e: (g.convolution(a, b, **kw), g.convolution_data_gradient(e, b, a, **kw),
                                          g.convolution_weights_gradient(e, a, b, **kw)), x, w, dy)
    rx, rw = ref_conv_grads(x, w, dy, s, d, p)
    np.testing.assert_allclose(got, y, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gx, rx, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, rw, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("style", ["valid", "same", "same_lower"])
@pytest.mark.parametrize("xs,ws,s,d", [((2, 3, 7, 8), (4, 3, 3, 2), (2, 1), (1, 2)),
                                       ((1, 2, 6, 5), (3, 2, 4, 4), (3, 2), (1, 1)),
                                       ((1, 2, 5, 6, 4), (2, 2, 3, 2, 3), (2, 2, 1), (1, 2, 1))])
def test_primitive_padding_styles(xs, ws, s, d, style):
    x, w = normal(*xs), normal(*ws)
    pads = [0] * (2 * (len(xs) - 2)) if style == "valid" else same_pads(xs[2:], ws[2:], s, d, style == "same_lower")
    got = run(lambda g, a, b: g.convolution(a, b, strides=s, dilation_rates=d, padding_style=style), x, w)
    np.testing.assert_allclose(got, ref_conv(x, w, s, d, pads), rtol=1e-12, atol=1e-12)
    if style != "valid":
        assert got.shape[2:] == tuple(-(-n // st) for n, st in zip(xs[2:], s))


def test_same_padding_with_unknown_spatial_dims():
    """'same' resolves at specialisation; the resolved padding differs per feed shape."""
    g = mg.Graph()
    x = g.placeholder((None, None, None, 3), mg.float64)
    w = g.placeholder((3, 3, 3, 5), mg.float64)
    y = g.convolution_2d(x, w, strides=(2, 2), padding_style="same")
    assert y.shape == (None, None, None, 5)
    grads = g.gradients(g.reduction_sum(y * y), [x, w])
    wv = normal(3, 3, 3, 5)
    for shape in [(1, 7, 8, 3), (2, 6, 5, 3)]:
        xv = normal(*shape)
        r = g.run({x: xv, w: wv}, [y, grads[x], grads[w]])
        xc, wc = from_nhwc(xv), np.transpose(wv, (3, 2, 0, 1))
        pads = same_pads(shape[1:3], (3, 3), (2, 2), (1, 1))
        want = ref_conv(xc, wc, (2, 2), (1, 1), pads)
        np.testing.assert_allclose(r[y].numpy(), nhwc(want), rtol=1e-12, atol=1e-12)
        rx, rw = ref_conv_grads(xc, wc, 2 * want, (2, 2), (1, 1), pads)
        np.testing.assert_allclose(r[grads[x]].numpy(), nhwc(rx), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(r[grads[w]].numpy(), np.transpose(rw, (2, 3, 1, 0)), rtol=1e-11, atol=1e-11)


def test_unknown_batch_and_channels_infer():
    g = mg.Graph()
    x = g.placeholder((None, 3, None, 9), mg.float32)
    w = g.placeholder((8, 3, 3, 3), mg.float32)
    y = g.convolution(x, w, strides=2, padding=(1, 1, 1, 1))
    assert y.shape == (None, 8, None, 5)


# ---------------- convolution_2d / convolution_3d front ends ----------------

@pytest.mark.parametrize("data_layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("weights_layout", ["HWIO", "OIHW"])
@pytest.mark.parametrize("style", ["explicit", "valid", "same"])
@pytest.mark.parametrize("xs,ws,s,d,p,groups", [
    ((2, 4, 9, 8), (6, 2, 3, 2), (2, 1), (1, 2), (1, 0, 2, 1), 2),
    ((1, 3, 5, 7), (4, 3, 3, 3), (1, 2), (2, 1), (2, 2, 0, 1), 1),
])
def test_convolution_2d(xs, ws, s, d, p, groups, style, data_layout, weights_layout):
    x, w = normal(*xs), normal(*ws)
    xin = nhwc(x) if data_layout == "NHWC" else x
    win = hwio(w) if weights_layout == "HWIO" else w
    got = run(lambda g, a, b: g.convolution_2d(a, b, strides=s, dilation_rates=d, padding_style=style, padding=p,
                                               groups=groups, data_layout=data_layout,
                                               weights_layout=weights_layout), xin, win)
    pads = {"explicit": list(p), "valid": [0] * 4, "same": same_pads(xs[2:], ws[2:], s, d)}[style]
    want = ref_conv(x, w, s, d, pads, groups)
    np.testing.assert_allclose(got, nhwc(want) if data_layout == "NHWC" else want, rtol=1e-12, atol=1e-12)


def test_convolution_2d_defaults_are_nhwc_hwio():
    x, w = normal(2, 6, 5, 3), normal(3, 3, 3, 4)  # NHWC, HWIO
    got = run(lambda g, a, b: g.convolution_2d(a, b), x, w)
    want = ref_conv(from_nhwc(x), np.transpose(w, (3, 2, 0, 1)), (1, 1), (1, 1), [0] * 4)
    np.testing.assert_allclose(got, nhwc(want), rtol=1e-12)


def test_convolution_2d_float32_and_gradients_vs_torch():
    x, w = normal(2, 8, 8, 4), normal(3, 3, 4, 6)
    dy_shape = (2, 4, 4, 6)
    dy = normal(*dy_shape)

    def build(g, a, b):
        y = g.convolution_2d(a, b, strides=(2, 2), padding_style="same")
        gr = g.gradients(g.reduction_sum(y * g.constant(dy.astype(np.float32))), [a, b])
        return y, gr[a], gr[b]

    y, gx, gw = run(build, x.astype(np.float32), w.astype(np.float32), dtype=mg.float32)
    xc, wc = from_nhwc(x), np.transpose(w, (3, 2, 0, 1))
    pads = same_pads((8, 8), (3, 3), (2, 2), (1, 1))
    np.testing.assert_allclose(y, nhwc(ref_conv(xc, wc, (2, 2), (1, 1), pads)), rtol=1e-5, atol=1e-5)
    rx, rw = ref_conv_grads(xc, wc, from_nhwc(dy), (2, 2), (1, 1), pads)
    np.testing.assert_allclose(gx, nhwc(rx), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw, np.transpose(rw, (2, 3, 1, 0)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data_layout,weights_layout", [("NDHWC", "DHWIO"), ("NCDHW", "OIDHW"), ("NDHWC", "OIDHW")])
@pytest.mark.parametrize("style", ["explicit", "valid", "same"])
def test_convolution_3d(data_layout, weights_layout, style):
    x, w = normal(2, 4, 6, 5, 7), normal(6, 2, 3, 2, 3)
    s, d, p, groups = (2, 1, 2), (1, 2, 1), (1, 0, 0, 1, 2, 1), 2
    xin = nhwc(x) if data_layout == "NDHWC" else x
    win = hwio(w) if weights_layout == "DHWIO" else w
    got = run(lambda g, a, b: g.convolution_3d(a, b, strides=s, dilation_rates=d, padding_style=style, padding=p,
                                               groups=groups, data_layout=data_layout,
                                               weights_layout=weights_layout), xin, win)
    pads = {"explicit": list(p), "valid": [0] * 6, "same": same_pads(x.shape[2:], w.shape[2:], s, d)}[style]
    want = ref_conv(x, w, s, d, pads, groups)
    np.testing.assert_allclose(got, nhwc(want) if data_layout == "NDHWC" else want, rtol=1e-12, atol=1e-12)


def test_convolution_3d_gradients_vs_torch():
    x, w = normal(1, 5, 4, 6, 2), normal(2, 3, 2, 2, 3)  # NDHWC, DHWIO
    s, d = (1, 2, 1), (1, 1, 1)
    xc, wc = from_nhwc(x), np.transpose(w, (4, 3, 0, 1, 2))
    pads = same_pads(xc.shape[2:], wc.shape[2:], s, d)
    y = ref_conv(xc, wc, s, d, pads)
    dy = normal(*y.shape)

    def build(g, a, b):
        out = g.convolution_3d(a, b, strides=s, padding_style="same")
        gr = g.gradients(g.reduction_sum(out * g.constant(nhwc(dy))), [a, b])
        return gr[a], gr[b]

    gx, gw = run(build, x, w)
    rx, rw = ref_conv_grads(xc, wc, dy, s, d, pads)
    np.testing.assert_allclose(gx, nhwc(rx), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, np.transpose(rw, (2, 3, 4, 1, 0)), rtol=1e-11, atol=1e-11)


# ---------------- depthwise ----------------

@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("weights_layout", ["HWIO", "OIHW"])
@pytest.mark.parametrize("data_layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("style", ["explicit", "same"])
def test_depthwise_convolution_2d(multiplier, weights_layout, data_layout, style):
    C, M = 3, multiplier
    x = normal(2, C, 7, 6)
    w_tf = normal(3, 2, C, M)  # (kh, kw, C, M): TensorFlow's depthwise filter
    s, d, p = (2, 1), (1, 2), (1, 1, 0, 2)
    win = w_tf if weights_layout == "HWIO" else np.ascontiguousarray(np.transpose(w_tf, (3, 2, 0, 1)))  # (M, C, kh, kw)
    xin = nhwc(x) if data_layout == "NHWC" else x
    got = run(lambda g, a, b: g.depthwise_convolution_2d(a, b, strides=s, dilation_rates=d, padding_style=style,
                                                         padding=p, data_layout=data_layout,
                                                         weights_layout=weights_layout), xin, win)
    # PyTorch: groups = C, weight (C*M, 1, kh, kw) with output channel c*M + m
    wt = np.transpose(w_tf, (2, 3, 0, 1)).reshape(C * M, 1, 3, 2)
    pads = list(p) if style == "explicit" else same_pads((7, 6), (3, 2), s, d)
    want = ref_conv(x, wt, s, d, pads, groups=C)
    np.testing.assert_allclose(got, nhwc(want) if data_layout == "NHWC" else want, rtol=1e-12, atol=1e-12)
    # TensorFlow's definition, element by element, for one output
    n, i, j, c, m = 1, 1, 2, 2, M - 1
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
    val = sum(w_tf[di, dj, c, m] * xp[n, c, s[0] * i + d[0] * di, s[1] * j + d[1] * dj]
              for di in range(3) for dj in range(2))
    out_c = nhwc(want)[n, i, j, c * M + m]
    assert abs(val - out_c) < 1e-12


def test_depthwise_gradients_vs_torch():
    C, M = 4, 2
    x, w_tf = normal(2, 6, 6, C), normal(3, 3, C, M)
    xc = from_nhwc(x)
    wt = np.transpose(w_tf, (2, 3, 0, 1)).reshape(C * M, 1, 3, 3)
    pads = same_pads((6, 6), (3, 3), (1, 1), (1, 1))
    dy = normal(*ref_conv(xc, wt, (1, 1), (1, 1), pads, C).shape)

    def build(g, a, b):
        y = g.depthwise_convolution_2d(a, b, padding_style="same")
        gr = g.gradients(g.reduction_sum(y * g.constant(nhwc(dy))), [a, b])
        return gr[a], gr[b]

    gx, gw = run(build, x, w_tf)
    rx, rw = ref_conv_grads(xc, wt, dy, (1, 1), (1, 1), pads, C)
    np.testing.assert_allclose(gx, nhwc(rx), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, np.transpose(rw.reshape(C, M, 3, 3), (2, 3, 0, 1)), rtol=1e-11, atol=1e-11)


# ---------------- transposed convolution ----------------

@pytest.mark.parametrize("data_layout,weights_layout", [("NCHW", "OIHW"), ("NHWC", "HWIO")])
@pytest.mark.parametrize("xs,ws,s,d,pad,out_pad,groups", [
    ((2, 4, 5, 6), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), (0, 0), 1),
    ((2, 4, 5, 6), (4, 3, 3, 3), (2, 3), (1, 1), (1, 0), (1, 2), 1),
    ((1, 6, 4, 4), (6, 2, 3, 2), (3, 2), (2, 1), (2, 1), (2, 1), 3),
    ((1, 2, 3, 3), (2, 5, 2, 2), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    ((2, 3, 4, 5), (3, 2, 1, 1), (2, 2), (1, 1), (0, 0), (1, 0), 1),  # 1x1 strided
])
def test_convolution_transpose_2d_vs_torch(xs, ws, s, d, pad, out_pad, groups, data_layout, weights_layout):
    x, w = normal(*xs), normal(*ws)  # w: PyTorch's (C_in, C_out/groups, kh, kw) = the forward conv's OIHW
    want = F.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=s, padding=pad, output_padding=out_pad,
                              groups=groups, dilation=d).numpy()
    xin = nhwc(x) if data_layout == "NHWC" else x
    win = hwio(w) if weights_layout == "HWIO" else w
    out_shape = nhwc(want).shape if data_layout == "NHWC" else want.shape
    padding = (pad[0], pad[0], pad[1], pad[1])
    kw = dict(strides=s, dilation_rates=d, padding=padding, groups=groups, data_layout=data_layout,
              weights_layout=weights_layout)
    got = run(lambda g, a, b: g.convolution_transpose_2d(a, b, output_shape=out_shape, **kw), xin, win)
    np.testing.assert_allclose(got, nhwc(want) if data_layout == "NHWC" else want, rtol=1e-12, atol=1e-12)
    # spatial-only output_shape, and unknown source dims (the shape is an attribute)
    got2 = run(lambda g, a, b: g.convolution_transpose_2d(a, b, output_shape=want.shape[2:], **kw), xin, win,
               unknown=True)
    np.testing.assert_allclose(got2, got, rtol=0, atol=0)
    if out_pad == (0, 0):  # without output_shape: the smallest result (PyTorch's default)
        got3 = run(lambda g, a, b: g.convolution_transpose_2d(a, b, **kw), xin, win, unknown=True)
        np.testing.assert_allclose(got3, got, rtol=0, atol=0)


def test_convolution_transpose_2d_gradients_vs_torch():
    x, w = normal(2, 3, 4, 5), normal(3, 4, 3, 3)
    s, pad, op = (2, 2), (1, 1), (1, 0)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = F.conv_transpose2d(xt, wt, stride=s, padding=pad, output_padding=op)
    dy = normal(*y.shape)
    rx, rw = torch.autograd.grad(y, [xt, wt], torch.tensor(dy))

    def build(g, a, b):
        out = g.convolution_transpose_2d(a, b, output_shape=y.shape, strides=s, padding=(1, 1, 1, 1),
                                         data_layout="NCHW", weights_layout="OIHW")
        gr = g.gradients(g.reduction_sum(out * g.constant(dy)), [a, b])
        return gr[a], gr[b]

    gx, gw = run(build, x, w)
    np.testing.assert_allclose(gx, rx.numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, rw.numpy(), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("style", ["same", "valid"])
def test_convolution_transpose_2d_styles_without_output_shape(style):
    """'same': result = input * stride (TensorFlow/Keras); 'valid': (in - 1) * stride + kernel."""
    x, w = normal(1, 5, 4, 3), normal(3, 3, 2, 3)  # NHWC; HWIO (kh, kw, C_out, C_in)
    s = (2, 3)
    got = run(lambda g, a, b: g.convolution_transpose_2d(a, b, strides=s, padding_style=style), x, w)
    if style == "same":
        assert got.shape == (1, 10, 12, 2)
    else:
        assert got.shape == (1, (5 - 1) * 2 + 3, (4 - 1) * 3 + 3, 2)
    # reference: the full (unpadded) transposed convolution, cropped/padded by the forward padding
    full = F.conv_transpose2d(torch.tensor(from_nhwc(x)), torch.tensor(np.transpose(w, (3, 2, 0, 1))),
                              stride=s).numpy()
    S = got.shape[1:3]
    pads = same_pads(S, (3, 3), s, (1, 1)) if style == "same" else [0] * 4
    want = np.zeros((1, 2) + S)
    for i in range(S[0]):
        for j in range(S[1]):
            fi, fj = i + pads[0], j + pads[2]
            if fi < full.shape[2] and fj < full.shape[3]:
                want[:, :, i, j] = full[:, :, fi, fj]
    np.testing.assert_allclose(got, nhwc(want), rtol=1e-12, atol=1e-12)


# ---------------- MPSGraph-named gradient front ends ----------------

def test_convolution_2d_data_and_weights_gradient_front_ends():
    x, w = normal(2, 7, 6, 4), normal(3, 2, 2, 6)  # NHWC, HWIO, groups=2
    s, d, p = (2, 1), (1, 2), (1, 0, 1, 1)
    xc, wc = from_nhwc(x), np.transpose(w, (3, 2, 0, 1))
    y = ref_conv(xc, wc, s, d, p, 2)
    dy = normal(*y.shape)
    kw = dict(strides=s, dilation_rates=d, padding=p, groups=2)
    gx, gw = run(lambda g, a, b, c: (g.convolution_2d_data_gradient(c, b, output_shape=x.shape, **kw),
                                     g.convolution_2d_weights_gradient(c, a, output_shape=w.shape, **kw)),
                 x, w, nhwc(dy))
    rx, rw = ref_conv_grads(xc, wc, dy, s, d, p, 2)
    np.testing.assert_allclose(gx, nhwc(rx), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw, np.transpose(rw, (2, 3, 1, 0)), rtol=1e-11, atol=1e-11)
    # torch.nn.grad agrees (NCHW / OIHW, symmetric padding)
    wc2, dy2 = normal(3, 4, 3, 3), normal(2, 3, 7, 6)
    xs2 = (2, 4, 7, 6)
    x2 = normal(*xs2)
    gx2, gw2 = run(lambda g, b, c, a: (
        g.convolution_2d_data_gradient(c, b, output_shape=xs2, padding=(1, 1, 1, 1), data_layout="NCHW",
                                       weights_layout="OIHW"),
        g.convolution_2d_weights_gradient(c, a, output_shape=wc2.shape, padding=(1, 1, 1, 1), data_layout="NCHW",
                                          weights_layout="OIHW")), wc2, dy2, x2)
    np.testing.assert_allclose(gx2, torch.nn.grad.conv2d_input(xs2, torch.tensor(wc2), torch.tensor(dy2),
                                                               padding=1).numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gw2, torch.nn.grad.conv2d_weight(torch.tensor(x2), wc2.shape, torch.tensor(dy2),
                                                                padding=1).numpy(), rtol=1e-11, atol=1e-11)


# ---------------- finite differences (float64), incl. second order ----------------

FD_CASES = [
    ("convolution", lambda g, x, w: g.convolution(x, w, strides=(2, 1), dilation_rates=(1, 2), padding=(1, 0, 2, 1)),
     [(2, 2, 5, 6), (3, 2, 2, 2)]),
    ("convolution_grouped_same", lambda g, x, w: g.convolution(x, w, strides=2, padding_style="same", groups=2),
     [(1, 4, 5, 4), (4, 2, 3, 2)]),
    ("convolution_1d", lambda g, x, w: g.convolution(x, w, padding=(2, 1), dilation_rates=2), [(2, 2, 6), (3, 2, 2)]),
    ("convolution_3d_primitive", lambda g, x, w: g.convolution(x, w, strides=(1, 2, 1), padding=1),
     [(1, 2, 3, 4, 3), (2, 2, 2, 2, 2)]),
    ("data_gradient", lambda g, d, w, like: g.convolution_data_gradient(d, w, like, strides=(2, 1), padding=(1, 1, 0, 1)),
     [(2, 3, 3, 4), (3, 2, 2, 2), (2, 2, 5, 4)]),
    ("weights_gradient", lambda g, d, x, like: g.convolution_weights_gradient(d, x, like, strides=2, groups=2,
                                                                               padding_style="same"),
     [(1, 4, 3, 2), (1, 2, 5, 4), (4, 1, 2, 3)]),
]


@pytest.mark.parametrize("name,build,shapes", FD_CASES, ids=[c[0] for c in FD_CASES])
def test_finite_differences(name, build, shapes):
    arrays = [normal(*s) for s in shapes]
    wrt = [0, 1]  # `like` carries only a shape
    check_op_gradient(build, arrays, wrt=wrt)


@pytest.mark.parametrize("name,build,shapes", [c for c in FD_CASES if c[0] in ("convolution", "data_gradient",
                                                                             "weights_gradient",
                                                                             "convolution_grouped_same")],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_second_order_finite_differences(name, build, shapes):
    arrays = [normal(*s) * 0.5 for s in shapes]
    check_op_gradient(build, arrays, wrt=[0, 1], second_order=True)


def test_finite_differences_unknown_dims_same_padding():
    check_op_gradient(lambda g, x, w: g.convolution_2d(x, w, strides=(2, 2), padding_style="same"),
                      [normal(1, 5, 4, 2), normal(3, 2, 2, 3)], unknown_dims=True, second_order=True)


def test_second_order_front_ends():
    check_op_gradient(lambda g, x, w: g.convolution_transpose_2d(x, w, strides=(2, 2), padding=(1, 1, 0, 1)),
                      [normal(1, 3, 2, 2) * 0.5, normal(2, 2, 3, 2) * 0.5], second_order=True)
    check_op_gradient(lambda g, x, w: g.depthwise_convolution_2d(x, w, padding_style="same"),
                      [normal(1, 4, 3, 2) * 0.5, normal(2, 2, 2, 2) * 0.5], second_order=True)


# ---------------- low precision ----------------

@pytest.mark.parametrize("dtype,npdt,tol", [(mg.float16, np.float16, 2e-2), (mg.bfloat16, None, 8e-2)])
def test_low_precision(dtype, npdt, tol):
    x, w = normal(2, 6, 5, 4) * 0.5, normal(3, 3, 4, 5) * 0.5
    if npdt is None:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        npdt = ml_dtypes.bfloat16
    g = mg.Graph()
    a, b = g.placeholder(x.shape, dtype), g.placeholder(w.shape, dtype)
    y = g.convolution_2d(a, b, padding_style="same")
    gr = g.gradients(g.reduction_sum(y), [a, b])
    r = g.run({a: x.astype(npdt), b: w.astype(npdt)}, [y, gr[a], gr[b]])
    xq, wq = x.astype(npdt).astype(np.float64), w.astype(npdt).astype(np.float64)
    xc, wc = from_nhwc(xq), np.transpose(wq, (3, 2, 0, 1))
    pads = same_pads((6, 5), (3, 3), (1, 1), (1, 1))
    want = ref_conv(xc, wc, (1, 1), (1, 1), pads)
    assert r[y].numpy().dtype == np.dtype(npdt)
    scale = np.abs(want).max()
    np.testing.assert_allclose(r[y].numpy().astype(np.float64), nhwc(want), atol=tol * scale)
    rx, rw = ref_conv_grads(xc, wc, np.ones_like(want), (1, 1), (1, 1), pads)
    np.testing.assert_allclose(r[gr[a]].numpy().astype(np.float64), nhwc(rx), atol=tol * np.abs(rx).max())
    np.testing.assert_allclose(r[gr[b]].numpy().astype(np.float64), np.transpose(rw, (2, 3, 1, 0)),
                               atol=tol * np.abs(rw).max())


# ---------------- zero-size ----------------

def test_zero_size():
    # empty batch
    y = run(lambda g, a, b: g.convolution(a, b, padding=1), normal(0, 2, 4, 4), normal(3, 2, 3, 3))
    assert y.shape == (0, 3, 4, 4)
    # no input channels: zeros
    y = run(lambda g, a, b: g.convolution(a, b), np.zeros((2, 0, 4, 4)), np.zeros((3, 0, 3, 3)))
    np.testing.assert_array_equal(y, np.zeros((2, 3, 2, 2)))
    # no output channels; and gradients through an empty batch are zeros of the right shape
    y = run(lambda g, a, b: g.convolution(a, b), normal(2, 2, 4, 4), np.zeros((0, 2, 3, 3)))
    assert y.shape == (2, 0, 2, 2)

    def build(g, a, b):
        out = g.convolution(a, b, padding=1)
        gr = g.gradients(g.reduction_sum(out), [a, b])
        return gr[a], gr[b]

    gx, gw = run(build, normal(0, 2, 4, 4), normal(3, 2, 3, 3))
    assert gx.shape == (0, 2, 4, 4)
    np.testing.assert_array_equal(gw, np.zeros((3, 2, 3, 3)))
    # zero-size input read only through padding
    y = run(lambda g, a, b: g.convolution(a, b, padding=(1, 1, 0, 0)), normal(1, 1, 0, 3), normal(2, 1, 1, 1))
    np.testing.assert_array_equal(y, np.zeros((1, 2, 2, 3)))


# ---------------- errors ----------------

def raises(fragments, fn, exc=mg.GraphError):
    with pytest.raises(exc) as ei:
        fn()
    msg = str(ei.value)
    for f in fragments:
        assert f in msg, msg


def test_errors():
    g = mg.Graph()
    x = g.placeholder((1, 8, 8, 3), mg.float32, name="img")
    w = g.placeholder((3, 3, 4, 16), mg.float32)
    raises(["[convolution_2d]", "channels differ: source (1, 8, 8, 3) has 3 channels but weights (3, 3, 4, 16) expect 4"],
           lambda: g.convolution_2d(x, w))
    w2 = g.placeholder((3, 3, 1, 16), mg.float32)
    raises(["[convolution_2d]", "groups=2 does not divide the 3 channels of source (1, 8, 8, 3)"],
           lambda: g.convolution_2d(x, w2, groups=2))
    w3 = g.placeholder((3, 3, 1, 4), mg.float32)
    raises(["[convolution_2d]", "groups=3 does not divide the 4 output channels"], lambda: g.convolution_2d(x, w3, groups=3))
    raises(["[convolution_2d]", "must have rank 4 (NHWC)"], lambda: g.convolution_2d(g.placeholder((8, 8, 3), mg.float32), w))
    big = g.placeholder((5, 5, 3, 2), mg.float32)
    small = g.placeholder((1, 3, 3, 3), mg.float32)
    raises(["[convolution_2d]", "kernel larger than padded input", "(1, 3, 3, 3)"], lambda: g.convolution_2d(small, big))
    raises(["[convolution_2d]", "dilated to 9"], lambda: g.convolution_2d(small, big, dilation_rates=(2, 2), padding=(1, 1, 1, 1)))
    ok = g.placeholder((3, 3, 3, 2), mg.float32)
    raises(["[convolution_2d]", "data_layout must be 'NHWC' or 'NCHW', not 'NWHC'"],
           lambda: g.convolution_2d(x, ok, data_layout="NWHC"))
    raises(["[convolution_2d]", "weights_layout must be 'HWIO' or 'OIHW'"], lambda: g.convolution_2d(x, ok, weights_layout="IOHW"))
    raises(["[convolution_3d]", "data_layout must be 'NDHWC' or 'NCDHW'"],
           lambda: g.convolution_3d(g.placeholder((1, 2, 2, 2, 3), mg.float32),
                                    g.placeholder((1, 1, 1, 3, 2), mg.float32), data_layout="NHWC"))
    raises(["[convolution_2d]", "strides (0, 1) must be positive"], lambda: g.convolution_2d(x, ok, strides=(0, 1)))
    raises(["[convolution_2d]", "dilation_rates"], lambda: g.convolution_2d(x, ok, dilation_rates=(1, -1)))
    raises(["[convolution_2d]", "padding (1, 2, 3) must have 4 values"], lambda: g.convolution_2d(x, ok, padding=(1, 2, 3)))
    raises(["[convolution_2d]", "padding_style must be"], lambda: g.convolution_2d(x, ok, padding_style="full"))
    raises(["[convolution]", "expects a floating-point dtype"],
           lambda: g.convolution(g.placeholder((1, 2, 3, 3), mg.int32), g.placeholder((1, 2, 1, 1), mg.int32)))
    raises(["[convolution]", "rank >= 3"], lambda: g.convolution(g.placeholder((2, 3), mg.float32), g.placeholder((2, 3), mg.float32)))
    raises(["[depthwise_convolution_2d]", "channels differ"],
           lambda: g.depthwise_convolution_2d(x, g.placeholder((3, 3, 4, 1), mg.float32)))
    # transposed: output_shape that no convolution maps back to the source
    src = g.placeholder((1, 4, 4, 2), mg.float32)
    tw = g.placeholder((3, 3, 5, 2), mg.float32)  # HWIO of the forward conv: I = 5 outputs, O = 2 = source channels
    raises(["[convolution_transpose_2d]", "does not match output_shape"],
           lambda: g.convolution_transpose_2d(src, tw, output_shape=(1, 12, 9, 5), strides=(2, 2)))
    raises(["[convolution_transpose_2d]", "channels differ"],
           lambda: g.convolution_transpose_2d(src, g.placeholder((3, 3, 5, 3), mg.float32)))
    # the graph still works
    y = g.convolution_2d(x, ok, name="fine")
    r = g.run({x: np.ones((1, 8, 8, 3), np.float32), ok: np.ones((3, 3, 3, 2), np.float32)}, [y])[y].numpy()
    np.testing.assert_allclose(r, np.full((1, 6, 6, 2), 27.0))


def test_error_at_specialisation_for_unknown_dims():
    g = mg.Graph()
    x = g.placeholder((1, None, None, 3), mg.float32)
    w = g.placeholder((5, 5, 3, 2), mg.float32)
    y = g.convolution_2d(x, w)
    with pytest.raises(mg.GraphError, match=r"kernel larger than padded input"):
        g.run({x: np.zeros((1, 3, 8, 3), np.float32), w: np.zeros((5, 5, 3, 2), np.float32)}, [y])
    r = g.run({x: np.zeros((1, 6, 8, 3), np.float32), w: np.zeros((5, 5, 3, 2), np.float32)}, [y])[y]
    assert r.numpy().shape == (1, 2, 4, 2)
