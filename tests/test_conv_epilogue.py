"""Convolution epilogues on the CPU: a float32 convolution whose only reader is a chain of
elementwise ops (bias add, ReLU, ReLU6 as maximum/minimum or clamp, residual add, sigmoid,
per-channel scale, ...) runs as one step. Checked bit for bit against the same graph with the
fusion prevented (the convolution's output made a target, so each op runs alone), against
PyTorch in float64, and through the profiler (the fused ops no longer run as kernels)."""
import numpy as np
import pytest
import torch
from fusion_helpers import apply_chain, reference_chain

import mpsgraph as mg

F = torch.nn.functional

# (N, C, H, W), (O, C/groups, kh, kw), stride, pad, groups: 1x1 direct, 3x3 im2col (small units
# over the pool and one large product), strided, grouped, depthwise, strided 1x1
CONVS = [((2, 8, 9, 11), (16, 8, 1, 1), 1, 0, 1),
         ((1, 3, 17, 19), (8, 3, 3, 3), 1, 1, 1),
         ((2, 16, 40, 40), (32, 16, 3, 3), 1, 1, 1),
         ((1, 6, 15, 13), (12, 3, 3, 3), 2, 1, 2),
         ((2, 8, 14, 14), (8, 1, 3, 3), 1, 1, 8),
         ((1, 8, 13, 13), (16, 1, 3, 3), 2, 1, 8),
         ((1, 4, 7, 7), (8, 4, 1, 1), 2, 0, 1)]

# each step: (op, operand): operand "bias"/"scale" per channel (C,1,1), "res" full, a float scalar,
# None for unary; "first" puts the operand first
CHAINS = {
    "bias_relu": [("addition", "bias"), ("relu", None)],
    "bias_relu6": [("addition", "bias"), ("maximum", 0.0), ("minimum", 6.0)],
    "bias_clamp": [("addition", "bias"), ("clamp", (0.0, 6.0))],
    "bias_res_relu": [("addition", "bias"), ("addition", "res"), ("relu", None)],
    "bn_sigmoid": [("multiplication", "scale"), ("addition", "bias"), ("sigmoid", None)],
    "first_operands": [("subtraction", "bias", "first"), ("maximum", 0.5, "first"), ("minimum", "res", "first"),
                       ("tanh", None)],
    "bias4d_sub_scalar": [("addition", "bias4"), ("subtraction", 1.0), ("multiplication", 2.0)],
}


def build(g, x, w, operands, conv, chain, keep_conv=False):
    _, _, stride, pad, groups = conv
    y = g.convolution(x, w, strides=stride, padding=(pad, pad, pad, pad), groups=groups)
    return ([y] if keep_conv else []) + [apply_chain(g, y, operands, chain)]


def reference(xv, wv, vals, conv, chain):
    _, _, stride, pad, groups = conv
    y = F.conv2d(torch.from_numpy(xv).double(), torch.from_numpy(wv).double(), stride=stride, padding=pad,
                 groups=groups).numpy()
    return reference_chain(y, vals, chain)


def out_shape(conv):
    (n, _, h, w), (o, _, kh, kw), s, p, _ = conv
    return (n, o, (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1)


def feeds(conv, rng, special=False):
    xs, ws = conv[0], conv[1]
    o = ws[0]
    x = rng.standard_normal(xs).astype(np.float32)
    if special:  # NaN, infinities and signed zeros through the chain
        x.flat[::53] = np.nan
        x.flat[7::61] = np.inf
    vals = {"bias": rng.standard_normal((o, 1, 1)).astype(np.float32),
            "bias4": rng.standard_normal((1, o, 1, 1)).astype(np.float32),
            "scale": rng.standard_normal((o, 1, 1)).astype(np.float32),
            "res": rng.standard_normal(out_shape(conv)).astype(np.float32)}
    if special:
        vals["bias"].flat[::3] = -0.0
        vals["res"].flat[::17] = np.nan
    return x, rng.standard_normal(ws).astype(np.float32), vals


def run_chain(conv, chain, x, wv, vals, keep_conv, profile=False, unknown=False):
    g = mg.Graph()
    px = g.placeholder((None,) + x.shape[1:] if unknown else x.shape, mg.float32)
    pw = g.placeholder(wv.shape, mg.float32)
    ps = {k: g.placeholder(v.shape, mg.float32) for k, v in vals.items()}
    targets = build(g, px, pw, ps, conv, chain, keep_conv)
    fd = {px: x, pw: wv, **{ps[k]: v for k, v in vals.items()}}
    if profile:
        with mg.profiler.profile() as prof:
            r = g.run(fd, targets, device="cpu")
        return np.asarray(r[targets[-1]]), prof
    r = g.run(fd, targets, device="cpu")
    return np.asarray(r[targets[-1]])


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "x".join(map(str, c[1])) + f"s{c[2]}g{c[4]}")
@pytest.mark.parametrize("chain", list(CHAINS), ids=str)
def test_fused_matches_unfused_bitwise_and_torch(conv, chain):
    rng = np.random.default_rng(3)
    x, wv, vals = feeds(conv, rng)
    fused = run_chain(conv, CHAINS[chain], x, wv, vals, keep_conv=False)
    unfused = run_chain(conv, CHAINS[chain], x, wv, vals, keep_conv=True)
    np.testing.assert_array_equal(fused, unfused)
    ref = reference(x, wv, vals, conv, CHAINS[chain])
    np.testing.assert_allclose(fused, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("conv", [CONVS[0], CONVS[2], CONVS[4]], ids=["1x1", "3x3", "depthwise"])
@pytest.mark.parametrize("chain", ["bias_relu", "bias_relu6", "bias_clamp", "first_operands", "bias_res_relu"])
def test_nan_inf_and_signed_zero_as_unfused(conv, chain):
    rng = np.random.default_rng(4)
    x, wv, vals = feeds(conv, rng, special=True)
    fused = run_chain(conv, CHAINS[chain], x, wv, vals, keep_conv=False)
    unfused = run_chain(conv, CHAINS[chain], x, wv, vals, keep_conv=True)
    assert np.isnan(unfused).any()
    np.testing.assert_array_equal(fused, unfused)  # NaN in the same places, zeros with the same sign
    real = ~np.isnan(unfused)  # (a NaN's sign is whichever operand the compiler's add kept)
    np.testing.assert_array_equal(np.signbit(fused[real]), np.signbit(unfused[real]))


def test_epilogue_runs_inside_the_convolution_step():
    conv, chain = CONVS[2], CHAINS["bias_res_relu"]
    x, wv, vals = feeds(conv, np.random.default_rng(5))
    _, prof = run_chain(conv, chain, x, wv, vals, keep_conv=False, profile=True)
    assert set(prof.kernels) == {"convolution"}
    _, prof = run_chain(conv, chain, x, wv, vals, keep_conv=True, profile=True)
    assert "convolution" in prof.kernels and len(prof.kernels) > 1  # the chain ran on its own


def test_unknown_batch_specialises_per_feed():
    conv = CONVS[1]
    chain = [("addition", "bias"), ("relu", None)]
    rng = np.random.default_rng(6)
    for n in (1, 3):
        c = ((n,) + conv[0][1:],) + conv[1:]
        x, wv, vals = feeds(c, rng)
        got = run_chain(c, chain, x, wv, {"bias": vals["bias"]}, keep_conv=False, unknown=True)
        np.testing.assert_allclose(got, reference(x, wv, vals, c, chain), rtol=2e-5, atol=2e-5)


def test_chain_stops_at_a_second_reader_and_at_other_shapes():
    """x * sigmoid(x) reads the convolution twice; a bias of another shape broadcasts the output
    up: neither joins the step, and results stay right."""
    rng = np.random.default_rng(8)
    conv = CONVS[1]
    x, wv, _ = feeds(conv, rng)
    g = mg.Graph()
    px, pw = g.placeholder(x.shape, mg.float32), g.placeholder(wv.shape, mg.float32)
    y = g.convolution(px, pw, strides=1, padding=(1, 1, 1, 1))
    silu = y * g.sigmoid(y)
    wide = rng.standard_normal((2,) + out_shape(conv)).astype(np.float32)
    up = g.addition(y + 1.0, g.constant(wide))
    r = g.run({px: x, pw: wv}, [silu, up], device="cpu")
    ref = reference(x, wv, {}, conv, [])
    np.testing.assert_allclose(np.asarray(r[silu]), ref / (1 + np.exp(-ref)), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(r[up]), ref + 1 + wide, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_dtypes_run_unfused(dtype):
    conv = CONVS[1]
    rng = np.random.default_rng(9)
    x, wv, vals = feeds(conv, rng)
    g = mg.Graph()
    dt = getattr(mg, dtype)
    px, pw = g.placeholder(x.shape, dt), g.placeholder(wv.shape, dt)
    y = g.relu(g.convolution(px, pw, strides=1, padding=(1, 1, 1, 1)) + g.constant(vals["bias"].astype(dtype)))
    r = np.asarray(g.run({px: x.astype(dtype), pw: wv.astype(dtype)}, [y], device="cpu")[y]).astype(np.float64)
    ref = reference(x.astype(dtype), wv.astype(dtype), {"bias": vals["bias"].astype(dtype)}, conv,
                    [("addition", "bias"), ("relu", None)])
    tol = 1e-10 if dtype == "float64" else 2e-2
    np.testing.assert_allclose(r, ref, rtol=tol, atol=tol)


def test_sum_of_two_convolutions():
    """relu(conv_a(x) + b_a + conv_b(x) + b_b), the downsampling block: the add reads two
    convolutions' chains and joins one of them."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    wa = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    wb = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    ba, bb = rng.standard_normal((2, 16, 1, 1)).astype(np.float32)
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    a = g.convolution(px, g.constant(wa), strides=2, padding=(1, 1, 1, 1)) + g.constant(ba)
    b = g.convolution(px, g.constant(wb), strides=2, padding=(0, 0, 0, 0)) + g.constant(bb)
    y = g.relu(a + b)
    fused = np.asarray(g.run({px: x}, [y], device="cpu")[y])
    unfused = g.run({px: x}, [a, b, y], device="cpu")
    np.testing.assert_array_equal(fused, np.asarray(unfused[y]))
    xt = torch.from_numpy(x).double()
    ref = F.relu(F.conv2d(xt, torch.from_numpy(wa).double(), stride=2, padding=1) + torch.from_numpy(ba).double() +
                 F.conv2d(xt, torch.from_numpy(wb).double(), stride=2) + torch.from_numpy(bb).double()).numpy()
    np.testing.assert_allclose(fused, ref, rtol=2e-5, atol=2e-5)
