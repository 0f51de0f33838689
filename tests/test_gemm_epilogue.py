"""Matrix product epilogues on the CPU: a float32 matrix product whose only reader is a chain of
elementwise ops (bias add over columns, per-row scale, residual add, ReLU, sigmoid, tanh,
clamp, maximum/minimum) runs as one step, the chain applied to each block of the output right
after BLAS wrote it; transposes of the last two dims feeding the product are read through
BLAS's transpose flags. Checked bit for bit against the same graph with fusion off
(MPSGRAPH_CPU_FUSION=0), against numpy in float64, and through the profiler (the chain's ops no
longer run as kernels)."""
import numpy as np
import pytest
from fusion_helpers import apply_chain, fusion, reference_chain

import mpsgraph as mg


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


# each step: (op, operand); operand "bias" (N,), "row" (M, 1), "res" (M, N) full, a float scalar,
# None for unary; "first" puts the operand first
CHAINS = {
    "bias": [("addition", "bias")],
    "bias_relu": [("addition", "bias"), ("relu", None)],
    "bias_sigmoid": [("addition", "bias"), ("sigmoid", None)],
    "bias_tanh": [("addition", "bias"), ("tanh", None)],
    "bias_clamp": [("addition", "bias"), ("clamp", (0.0, 6.0))],
    "row_scale_res_relu": [("multiplication", "row"), ("addition", "res"), ("relu", None)],
    "first_operands": [("subtraction", "bias", "first"), ("maximum", 0.25, "first"), ("minimum", "res", "first")],
}

# x shape, w shape, transpose x / w (given as the transposed array, read through g.transpose)
PRODUCTS = [((8, 16), (16, 12), False, False), ((300, 64), (64, 200), False, False),
            ((40, 64), (64, 600), False, False), ((300, 64), (200, 64), False, True),
            ((64, 300), (64, 200), True, False), ((3, 50, 32), (32, 70), False, False),
            ((3, 50, 32), (3, 32, 70), False, False), ((2, 3, 20, 16), (24, 16), False, True),
            # one row (BLAS gemv): a classifier at batch 1, each transpose, a batch of one-row products
            ((1, 1280), (1000, 1280), False, True), ((1, 64), (64, 200), False, False),
            ((64, 1), (64, 300), True, False), ((3, 1, 32), (3, 32, 70), False, False)]


def run(chain, xs, ws, tx, tw, rng, fuse, profile=False, special=False):
    m, n = xs[-1] if tx else xs[-2], ws[-2] if tw else ws[-1]
    batch = np.broadcast_shapes(xs[:-2], ws[:-2])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    vals = {"bias": rng.standard_normal((n,)).astype(np.float32),
            "row": rng.standard_normal((m, 1)).astype(np.float32),
            "res": rng.standard_normal(batch + (m, n)).astype(np.float32)}
    if special:
        x.flat[::41] = np.nan
        x.flat[5::37] = np.inf
        vals["bias"][::3] = -0.0
    with fusion(fuse):
        g = mg.Graph()
        px, pw = g.placeholder(xs, mg.float32), g.placeholder(ws, mg.float32)
        ops = {k: g.placeholder(v.shape, mg.float32) for k, v in vals.items()}
        a = g.transpose(px, list(range(len(xs) - 2)) + [len(xs) - 1, len(xs) - 2]) if tx else px
        b = g.transpose(pw, list(range(len(ws) - 2)) + [len(ws) - 1, len(ws) - 2]) if tw else pw
        y = apply_chain(g, g.matmul(a, b), ops, chain)
        feeds = {px: x, pw: w, **{ops[k]: v for k, v in vals.items()}}
        if profile:
            with mg.profiler.profile() as prof:
                r = g.run(feeds, [y], device="cpu")
        else:
            r, prof = g.run(feeds, [y], device="cpu"), None
    xa = np.swapaxes(x, -1, -2) if tx else x
    wa = np.swapaxes(w, -1, -2) if tw else w
    with np.errstate(invalid="ignore"):
        ref = reference_chain(np.matmul(xa.astype(np.float64), wa.astype(np.float64)), vals, chain)
    return np.asarray(r[y]), ref, prof


@pytest.mark.parametrize("prod", PRODUCTS, ids=lambda p: "x".join(map(str, p[0])) + "@" + "x".join(map(str, p[1]))
                         + ("_tx" if p[2] else "") + ("_tw" if p[3] else ""))
@pytest.mark.parametrize("chain", list(CHAINS))
def test_epilogue_bitwise_and_numpy(prod, chain):
    fused, ref, _ = run(CHAINS[chain], *prod, np.random.default_rng(1), True)
    plain, _, _ = run(CHAINS[chain], *prod, np.random.default_rng(1), False)
    np.testing.assert_array_equal(fused, plain)
    np.testing.assert_allclose(fused, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("chain", ["bias_relu", "bias_clamp", "first_operands"])
def test_nan_inf_and_signed_zero_as_unfused(chain):
    fused, _, _ = run(CHAINS[chain], (50, 40), (40, 30), False, False, np.random.default_rng(2), True, special=True)
    plain, _, _ = run(CHAINS[chain], (50, 40), (40, 30), False, False, np.random.default_rng(2), False, special=True)
    assert np.isnan(plain).any()
    np.testing.assert_array_equal(fused, plain)
    real = ~np.isnan(plain)
    np.testing.assert_array_equal(np.signbit(fused[real]), np.signbit(plain[real]))


def test_epilogue_runs_inside_the_product_step():
    _, _, prof = run(CHAINS["row_scale_res_relu"], (64, 32), (48, 32), False, True, np.random.default_rng(3), True,
                     profile=True)
    assert set(prof.kernels) == {"matrix_multiplication"}
    _, _, prof = run(CHAINS["row_scale_res_relu"], (64, 32), (48, 32), False, True, np.random.default_rng(3), False,
                     profile=True)
    assert "matrix_multiplication" in prof.kernels and len(prof.kernels) > 1  # the chain ran on its own


def test_chain_stops_at_a_second_reader_and_other_dtypes_stay_unfused():
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((20, 8)).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32)
    g = mg.Graph()
    px, pw = g.placeholder(x.shape, mg.float32), g.placeholder(w.shape, mg.float32)
    y = g.matmul(px, pw)
    silu = y * g.sigmoid(y)  # reads the product twice
    h = g.matmul(g.cast(px, mg.float16), g.cast(pw, mg.float16))
    hr = g.relu(h + 1.0)
    r = g.run({px: x, pw: w}, [silu, hr], device="cpu")
    ref = x.astype(np.float64) @ w
    np.testing.assert_allclose(np.asarray(r[silu]), ref * sigmoid(ref), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(r[hr]).astype(np.float64), np.maximum(ref + 1, 0), rtol=2e-2, atol=3e-2)


def test_training_step_matches_unfused():
    """An MLP step (bias + ReLU epilogues forward, transposed gradient products backward, the
    bias gradients' sums) gives the same bits with fusion on and off."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 20)).astype(np.float32)
    t = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 32)]
    params = [(rng.normal(0, 0.3, (20, 16)).astype(np.float32), np.zeros(16, np.float32)),
              (rng.normal(0, 0.3, (16, 5)).astype(np.float32), np.zeros(5, np.float32))]

    def train(fuse):
        with fusion(fuse):
            g = mg.Graph()
            px, pt = g.placeholder(x.shape, mg.float32), g.placeholder(t.shape, mg.float32)
            vs, h = [], px
            for k, (w0, b0) in enumerate(params):
                w, b = g.variable(w0.copy()), g.variable(b0.copy())
                vs += [w, b]
                h = h @ w + b
                if k == 0:
                    h = g.relu(h)
            loss = g.softmax_cross_entropy(h, pt, reduction="mean")
            updates = mg.optimizers.SGD(lr=0.1).minimize(g, loss, vs)
            exe = g.compile({px: (x.shape, mg.float32), pt: (t.shape, mg.float32)}, [loss],
                            target_operations=updates, device="cpu")
            losses = [float(exe.run([x, t])[0].numpy()) for _ in range(5)]
            return losses, [v.value.numpy().copy() for v in vs]

    lf, vf = train(True)
    lu, vu = train(False)
    assert lf == lu
    for a, b in zip(vf, vu):
        np.testing.assert_array_equal(a, b)
    assert lf[-1] < lf[0]
