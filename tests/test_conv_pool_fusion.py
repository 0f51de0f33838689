"""A float32 NCHW convolution whose chain (bias, activation, ...) ends in a 2x2 max pool at stride
2 runs as one step on the CPU, with the pooled value as its output (conv_epilogue.h): Winograd
units and packed im2col/1x1 units pool each block of output rows while it is in cache; the other
kernels write the whole output to scratch and pool it after. Checked bit for bit against the
same graph compiled with MPSGRAPH_CPU_CONV_POOL=0 (the pool its own step), against PyTorch in
float64, and through the profiler (the pool no longer runs as a kernel)."""
import numpy as np
import pytest
from fusion_helpers import apply_chain, fusion, reference_chain, threads

import mpsgraph as mg

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (N, C, H, W), (O, C/groups, kh, kw), pad, groups, weights constant: Winograd units (C >= 32),
# Winograd split over channels (one 14x14 image), packed im2col units (3 source channels),
# packed 1x1 units, depthwise, weights fed at run time (BLAS, pooled after), odd widths
# of whole row pairs, a single tile row
CONVS = {
    "winograd": ((2, 32, 16, 16), (64, 32, 3, 3), 1, 1, True),
    "winograd_channels": ((1, 64, 14, 14), (32, 64, 3, 3), 1, 1, True),
    "im2col_units": ((4, 3, 32, 32), (16, 3, 3, 3), 1, 1, True),
    "direct_1x1": ((2, 16, 20, 20), (32, 16, 1, 1), 0, 1, True),
    "depthwise": ((2, 8, 12, 12), (8, 1, 3, 3), 1, 8, True),
    "fed_weights": ((2, 32, 16, 16), (64, 32, 3, 3), 1, 1, False),
    "odd_pooled_width": ((3, 32, 10, 14), (16, 32, 3, 3), 1, 1, True),
    "one_row_pair": ((2, 3, 2, 40), (8, 3, 3, 3), 1, 1, True),
}

CHAINS = {
    "none": [],
    "bias_relu": [("addition", "bias"), ("relu", None)],
    "bias_relu6": [("addition", "bias"), ("clamp", (0.0, 6.0))],
    "scale_bias_sigmoid": [("multiplication", "scale"), ("addition", "bias"), ("sigmoid", None)],
}


def case(name, seed=0, special=False):
    xs, ws, pad, groups, const = CONVS[name]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.2).astype(np.float32)
    o = ws[0]
    vals = {"bias": rng.standard_normal((o, 1, 1)).astype(np.float32),
            "scale": rng.standard_normal((o, 1, 1)).astype(np.float32)}
    if special:  # a NaN and an infinity, far apart, through the convolution and the pool
        x[0, 0, 1, 2] = np.nan
        x[-1, -1, -2, -3] = np.inf
    return x, w, vals, pad, groups, const


def build(x, w, vals, pad, groups, const, chain, pool_kw=None):
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    pw = g.constant(w) if const else g.placeholder(w.shape, mg.float32)
    operands = {k: g.constant(v) for k, v in vals.items()}
    y = g.convolution(px, pw, strides=1, padding=(pad, pad, pad, pad), groups=groups)
    y = apply_chain(g, y, operands, chain)
    kw = dict(kernel_sizes=[2, 2], strides=[2, 2], data_layout="NCHW")
    kw.update(pool_kw or {})
    y = g.max_pooling_2d(y, **kw)
    feeds = {px: x} if const else {px: x, pw: w}
    return g.compile(feeds, [y], device="cpu"), list(feeds.values())


def run(x, w, vals, pad, groups, const, chain, fused, pool_kw=None, profile=False):
    with fusion(fused, "MPSGRAPH_CPU_CONV_POOL"):
        exe, feeds = build(x, w, vals, pad, groups, const, chain, pool_kw)
    args = [mg.TensorData(f) for f in feeds]
    if profile:
        with mg.profiler.profile() as prof:
            r = exe.run(args)
        return np.asarray(r[0]), prof
    return np.asarray(exe.run(args)[0])


def reference(x, w, vals, pad, groups, chain):
    y = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=pad, groups=groups).numpy()
    y = reference_chain(y, vals, chain)
    return F.max_pool2d(torch.from_numpy(y), 2, 2).numpy()


@pytest.mark.parametrize("name", list(CONVS))
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("n_threads", [1, 2])
def test_pooled_step_same_bits_as_its_own_pool_and_torch(name, chain, n_threads):
    x, w, vals, pad, groups, const = case(name)
    with threads(n_threads):
        fused = run(x, w, vals, pad, groups, const, CHAINS[chain], True)
        alone = run(x, w, vals, pad, groups, const, CHAINS[chain], False)
    np.testing.assert_array_equal(fused, alone)
    np.testing.assert_allclose(fused, reference(x, w, vals, pad, groups, CHAINS[chain]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["winograd", "winograd_channels", "im2col_units", "fed_weights"])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_non_finite_source_as_its_own_pool(name, n_threads):
    """NaN and infinities: Winograd reruns such a source on the generic path, which pools too."""
    x, w, vals, pad, groups, const = case(name, seed=1, special=True)
    with threads(n_threads):
        fused = run(x, w, vals, pad, groups, const, CHAINS["bias_relu"], True)
        alone = run(x, w, vals, pad, groups, const, CHAINS["bias_relu"], False)
    assert np.isnan(alone).any() and np.isinf(alone).any()
    np.testing.assert_array_equal(fused, alone)


@pytest.mark.parametrize("name", ["winograd", "im2col_units", "depthwise"])
def test_pool_runs_inside_the_convolution_step(name):
    x, w, vals, pad, groups, const = case(name)
    _, prof = run(x, w, vals, pad, groups, const, CHAINS["bias_relu"], True, profile=True)
    assert set(prof.kernels) == {"convolution"}
    _, prof = run(x, w, vals, pad, groups, const, CHAINS["bias_relu"], False, profile=True)
    assert "max_pooling_nd" in prof.kernels


# pools that stay their own step: padded, 3x3, stride 1, an odd output (the last row and column
# dropped), ceil mode over an odd output
OTHER_POOLS = {
    "padded": ((2, 32, 16, 16), dict(padding=[1, 0, 1, 0])),
    "window3": ((2, 32, 16, 16), dict(kernel_sizes=[3, 3])),
    "stride1": ((2, 32, 16, 16), dict(strides=[1, 1])),
    "odd_output": ((2, 32, 15, 17), {}),
    "ceil_odd": ((2, 32, 15, 17), dict(ceil_mode=True)),
}


@pytest.mark.parametrize("pool", list(OTHER_POOLS))
def test_other_pools_stay_apart_and_right(pool):
    xs, kw = OTHER_POOLS[pool]
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal((16, xs[1], 3, 3)) * 0.2).astype(np.float32)
    vals = {"bias": rng.standard_normal((16, 1, 1)).astype(np.float32)}
    chain = CHAINS["bias_relu"]
    got, prof = run(x, w, vals, 1, 1, True, chain, True, pool_kw=kw, profile=True)
    assert "max_pooling_nd" in prof.kernels
    y = reference_chain(F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1).numpy(),
                        vals, chain)
    full = dict(kernel_sizes=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], ceil_mode=False)
    full.update(kw)
    p = full["padding"]
    yt = F.pad(torch.from_numpy(y), (p[2], p[3], p[0], p[1]), value=-np.inf)
    ref = F.max_pool2d(yt, full["kernel_sizes"], full["strides"], ceil_mode=full["ceil_mode"]).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_full_size_operand_keeps_the_pool_apart():
    """A residual add (an operand of the convolution's whole shape) joins the epilogue; the pool
    after it then runs as its own step."""
    x, w, vals, pad, groups, const = case("winograd")
    res = np.random.default_rng(3).standard_normal((2, 64, 16, 16)).astype(np.float32)
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    y = g.relu(g.convolution(px, g.constant(w), strides=1, padding=(1, 1, 1, 1)) + g.constant(res))
    exe = g.compile({px: x}, [g.max_pooling_2d(y, kernel_sizes=[2, 2], strides=[2, 2], data_layout="NCHW")],
                    device="cpu")
    with mg.profiler.profile() as prof:
        got = np.asarray(exe.run([mg.TensorData(x)])[0])
    assert "max_pooling_nd" in prof.kernels
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1).numpy() + res
    np.testing.assert_allclose(got, F.max_pool2d(torch.from_numpy(np.maximum(ref, 0)), 2, 2).numpy(),
                               rtol=1e-4, atol=1e-4)
