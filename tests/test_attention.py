"""scaled_dot_product_attention beyond the conformance table (tests/conformance_attention.py): bad
input (clear errors naming the op, the graph left usable), checks repeated at specialisation for
unknown dims, a long sequence against PyTorch, the native CPU kernel (the node is not expanded),
and gradients with unknown dims against torch.autograd."""
import numpy as np
import pytest

import mpsgraph as mg
from test_pad_space_band_one_hot import expect

OP = "[scaled_dot_product_attention]"


def _qkv(g, q=(2, 4, 5, 8), k=(2, 4, 6, 8), v=(2, 4, 6, 8), dtype="float32"):
    return (g.placeholder(q, dtype, name="q"), g.placeholder(k, dtype, name="k"), g.placeholder(v, dtype, name="v"))


@pytest.mark.parametrize("shapes, fragments", [
    (((5,), (6,), (6,)), ("rank >= 2", "query (5,)")),
    (((2, 5, 8), (2, 6, 4), (2, 6, 4)), ("one head size",)),
    (((2, 5, 8), (2, 6, 8), (2, 7, 8)), ("one sequence length",)),
    (((2, 3, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8)), ("key/value heads 2 must divide query heads 3",)),
    (((2, 4, 5, 8), (3, 4, 6, 8), (3, 4, 6, 8)), ("batch dim 0 differs",)),
    (((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8, 1)), ("one rank",)),
])
def test_bad_shapes(shapes, fragments):
    g = mg.Graph()
    q, k, v = _qkv(g, *shapes)
    n = g.num_nodes
    expect(mg.GraphValueError, lambda: g.scaled_dot_product_attention(q, k, v), OP, *fragments)
    assert g.num_nodes == n


def test_bad_mask_and_dtypes():
    g = mg.Graph()
    q, k, v = _qkv(g)
    expect(mg.GraphValueError, lambda: g.scaled_dot_product_attention(q, k, v, mask=g.placeholder((5, 7), "bool")),
           OP, "mask (5, 7) does not broadcast to the scores (2, 4, 5, 6)")
    expect(mg.GraphTypeError, lambda: g.scaled_dot_product_attention(q, k, v, mask=g.placeholder((5, 6), "int32")),
           OP, "mask must be bool")
    expect(mg.GraphTypeError, lambda: g.scaled_dot_product_attention(q, k, v, mask=g.placeholder((5, 6), "float16")),
           OP, "float16(5, 6)")
    qi = g.placeholder((5, 8), "int32")
    expect(mg.GraphTypeError, lambda: g.scaled_dot_product_attention(qi, qi, qi), OP, "floating-point")
    k16 = g.placeholder((2, 4, 6, 8), "float16")
    expect(mg.GraphTypeError, lambda: g.scaled_dot_product_attention(q, k16, v), OP, "float16")
    y = g.scaled_dot_product_attention(q, k, v)  # the graph is still usable
    assert y.shape == (2, 4, 5, 8)


def test_unknown_dims_checked_at_run():
    g = mg.Graph()
    q, k, v = _qkv(g, (None, None, 8), (None, None, 8), (None, None, 3))
    y = g.scaled_dot_product_attention(q, k, v)
    assert y.shape == (None, None, 3)
    with pytest.raises(mg.GraphValueError, match=r"\[scaled_dot_product_attention\].*sequence length"):
        g.run({q: np.zeros((2, 5, 8), np.float32), k: np.zeros((2, 6, 8), np.float32),
               v: np.zeros((2, 7, 3), np.float32)}, [y])


def _np_sdpa(q, k, v, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_long_sequence_float16_against_float64(causal):
    """A sequence long enough for many key blocks, in float16 (float32 accumulation)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 600, 32)).astype(np.float16) for _ in range(3))
    g = mg.Graph()
    ts = _qkv(g, q.shape, k.shape, v.shape, "float16")
    y = g.scaled_dot_product_attention(*ts, causal=causal)
    got = g.run(dict(zip(ts, (q, k, v))), [y])[y].numpy().astype(np.float64)
    want = _np_sdpa(*(a.astype(np.float64) for a in (q, k, v)), causal=causal)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-3)


def test_cpu_runs_the_node_natively():
    """The CPU kernel runs the composite (the profile names the op, not softmax / matmul)."""
    g = mg.Graph()
    ts = _qkv(g)
    y = g.scaled_dot_product_attention(*ts)
    feeds = {t: np.ones(t.shape, np.float32) for t in ts}
    exe = g.compile(feeds, [y])
    with mg.profiler.profile() as prof:
        exe.run([feeds[t] for t in ts])
    table = prof.table()
    assert "scaled_dot_product_attention" in table
    assert "softmax" not in table


def test_gradients_unknown_dims_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in ((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3)))
    m = rng.random((5, 7)) < 0.7
    m[:, 0] = True
    g = mg.Graph()
    ts = [g.placeholder((None,) * 4, "float64") for _ in range(3)]
    mt = g.placeholder((None, None), "bool")
    y = g.scaled_dot_product_attention(*ts, mask=mt, causal=False)
    loss = g.reduction_sum(y * y, axes=[0, 1, 2, 3])
    grads = g.gradients(loss, ts)
    r = g.run({ts[0]: q, ts[1]: k, ts[2]: v, mt: m}, [grads[t] for t in ts])
    got = [r[grads[t]] for t in ts]
    tt = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    yt = torch.nn.functional.scaled_dot_product_attention(*tt, attn_mask=torch.tensor(m))
    (yt * yt).sum().backward()
    for a, b in zip(got, tt):
        np.testing.assert_allclose(a.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---- the gradient node (scaled_dot_product_attention_gradient) ----

def _grad_graph(shapes, dtype, mask=None, mask_shape=None, wrt_mask=False, **attrs):
    g = mg.Graph()
    ts = _qkv(g, *shapes, dtype=dtype)
    m = None
    if mask is not None:
        m = g.placeholder(mask_shape, mask, name="m")
    y = g.scaled_dot_product_attention(*ts, mask=m, **attrs)
    w = g.placeholder(y.shape, dtype, name="w")
    loss = g.reduction_sum(y * w, axes=list(range(len(y.shape))))
    wrt = list(ts) + ([m] if wrt_mask else [])
    grads = g.gradients(loss, wrt)
    return g, list(ts) + ([m] if m is not None else []) + [w], [grads[t] for t in wrt]


_GRAD_SHAPES = [
    (((2, 3, 37, 16), (2, 3, 53, 16), (2, 3, 53, 8)), {}),
    (((2, 3, 37, 16), (2, 3, 53, 16), (2, 3, 53, 16)), {"causal": True}),
    (((1, 6, 70, 8), (1, 2, 130, 8), (1, 2, 130, 8)), {"causal": True, "scale": 0.2}),
    (((3, 65, 8), (3, 64, 8), (3, 64, 4)), {}),
    (((1, 2, 40, 4), (1, 2, 140, 4), (1, 2, 140, 48)), {"causal": True}),  # Dv > D
    (((2, 3, 9, 4), (2, 3, 0, 4), (2, 3, 0, 5)), {}),
    (((2, 3, 0, 4), (2, 3, 6, 4), (2, 3, 6, 5)), {}),
]
_GRAD_MASKS = [
    (None, None, False),
    ("bool", (37, 53), False),
    ("float32", (2, 1, 37, 53), True),   # shared across heads within a batch
    ("float32", (1, 53), True),          # a key-padding mask, shared by every task
    ("float32", (2, 3, 37, 53), True),   # one plane per (batch, head)
]


def _feeds(ins, rng, dtype):
    f = {}
    for t in ins:
        if t.dtype.name == "bool":
            a = rng.random(t.shape) < 0.7
            a[..., 0] = True
        else:
            a = rng.uniform(-2, 2, t.shape).astype(dtype)
        f[t] = a
    return f


def _kernel_and_decomposition(build, dtype):
    from conftest import cpu_decompositions
    g, ins, grads = build()
    feeds = _feeds(ins, np.random.default_rng(3), dtype)
    vals = list(feeds.values())
    kernel = [np.asarray(r, np.float64) for r in g.compile(feeds, grads).run(vals)]
    with cpu_decompositions():
        g2, ins2, grads2 = build()
        dec = [np.asarray(r, np.float64) for r in g2.compile(dict(zip(ins2, vals)), grads2).run(vals)]
    return g, feeds, grads, kernel, dec


@pytest.mark.parametrize("shapes, attrs", _GRAD_SHAPES)
def test_gradient_kernel_matches_its_decomposition(shapes, attrs):
    _, _, _, kernel, dec = _kernel_and_decomposition(lambda: _grad_graph(shapes, "float32", **attrs), np.float32)
    for a, b in zip(kernel, dec):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("mask, mask_shape, wrt_mask", _GRAD_MASKS)
def test_gradient_kernel_masks_match_the_decomposition(mask, mask_shape, wrt_mask):
    shapes = ((2, 3, 37, 16), (2, 3, 53, 16), (2, 3, 53, 8))
    for causal in (False, True):
        _, _, _, kernel, dec = _kernel_and_decomposition(
            lambda: _grad_graph(shapes, "float32", mask, mask_shape, wrt_mask, causal=causal), np.float32)
        assert len(kernel) == 3 + wrt_mask
        for a, b in zip(kernel, dec):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gradient_kernel_halves_compute_in_float32(dtype):
    """float16/bfloat16 inputs: the kernel against the float64 decomposition of the same rounded values."""
    from conftest import cpu_decompositions
    import ml_dtypes
    npd = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    shapes = ((1, 4, 70, 16), (1, 2, 90, 16), (1, 2, 90, 16))
    g, ins, grads = _grad_graph(shapes, dtype, causal=True)
    feeds = _feeds(ins, np.random.default_rng(5), npd)
    got = [np.asarray(r).astype(np.float64) for r in g.compile(feeds, grads).run(list(feeds.values()))]
    with cpu_decompositions():
        g2, ins2, grads2 = _grad_graph(shapes, "float64", causal=True)
        f64 = [np.asarray(v).astype(np.float64) for v in feeds.values()]
        want = [np.asarray(r) for r in g2.compile(dict(zip(ins2, f64)), grads2).run(f64)]
    tol = 2e-2 if dtype == "float16" else 8e-2
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


def test_gradient_is_one_node_run_natively():
    """The forward's gradient is one gradient node, which the CPU runs as its kernel (no softmax)."""
    g, ins, grads = _grad_graph(((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)), "float32")
    feeds = {t: np.ones(t.shape, np.float32) for t in ins}
    exe = g.compile(feeds, grads)
    with mg.profiler.profile() as prof:
        exe.run([feeds[t] for t in ins])
    table = prof.table()
    assert "scaled_dot_product_attention_gradient" in table
    assert "softmax" not in table and "matrix_multiplication" not in table


def test_gradients_against_torch_gqa_masks_causal():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s) for s in ((2, 6, 45, 8), (2, 3, 80, 8), (2, 3, 80, 5)))
    m = rng.uniform(-1, 1, (6, 45, 80))
    w = rng.standard_normal((2, 6, 45, 5))
    g = mg.Graph()
    ts = [g.placeholder(a.shape, "float64") for a in (q, k, v, m)]
    y = g.scaled_dot_product_attention(*ts[:3], mask=ts[3], causal=True, scale=0.4)
    loss = g.reduction_sum(y * g.constant(w), axes=[0, 1, 2, 3])
    grads = g.gradients(loss, ts)
    r = g.run(dict(zip(ts, (q, k, v, m))), [grads[t] for t in ts])
    tt = [torch.tensor(a, requires_grad=True) for a in (q, k, v, m)]
    causal = torch.ones(45, 80, dtype=torch.bool).tril()
    bias = tt[3].masked_fill(~causal, float("-inf"))  # torch refuses is_causal with a mask
    yt = torch.nn.functional.scaled_dot_product_attention(*tt[:3], attn_mask=bias, scale=0.4, enable_gqa=True)
    (yt * torch.tensor(w)).sum().backward()
    for t, b in zip(ts, tt):
        np.testing.assert_allclose(r[grads[t]].numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_gradient_node_bad_input():
    g = mg.Graph()
    q, k, v = _qkv(g)
    y = g.scaled_dot_product_attention(q, k, v)
    expect(mg.GraphValueError, lambda: g.scaled_dot_product_attention_gradient(q, k, v, y, k),
           "[scaled_dot_product_attention_gradient]", "output gradient float32(2, 4, 6, 8) does not match")
    expect(mg.GraphValueError, lambda: g.scaled_dot_product_attention_gradient(q, k, v, y, y, mask_gradient=True),
           "[scaled_dot_product_attention_gradient]", "mask_gradient needs a float (additive) mask")
    bm = g.placeholder((5, 6), "bool")
    expect(mg.GraphValueError,
           lambda: g.scaled_dot_product_attention_gradient(q, k, v, y, y, mask=bm, mask_gradient=True),
           "mask_gradient needs a float")


_LONG_SCRIPT = r"""
import resource, sys, numpy as np, mpsgraph as mg
L, D = 8192, 64
g = mg.Graph()
q, k, v, w = (g.placeholder((1, 1, L, D), "float32") for _ in range(4))
y = g.scaled_dot_product_attention(q, k, v, causal=True)
loss = g.reduction_sum(y * w, axes=[0, 1, 2, 3])
grads = g.gradients(loss, [q, k, v])
rng = np.random.default_rng(0)
feeds = {t: rng.standard_normal((1, 1, L, D), dtype=np.float32) for t in (q, k, v, w)}
exe = g.compile(feeds, [grads[t] for t in (q, k, v)])
plan = exe.memory_plan()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = exe.run(list(feeds.values()))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(max(e["nbytes"] for e in plan), sum(e["nbytes"] for e in plan), (after - before) * 1024,
      float(np.abs(np.asarray(res[0])).sum()))
"""


def test_backward_never_allocates_the_score_matrix():
    """L = S = 8192, D = 64: the scores alone would be 256 MiB (float32), their decomposition's
    gradient several such matrices. The compiled plan and the run's peak memory stay far below."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _LONG_SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    largest, total, grown, dq_sum = r.stdout.splitlines()[-1].split()
    scores = 8192 * 8192 * 4
    assert int(largest) < scores // 32, r.stdout
    assert int(total) < scores // 4, r.stdout
    assert int(grown) < scores // 4, r.stdout
    assert np.isfinite(float(dq_sum)) and float(dq_sum) > 0


@pytest.mark.parametrize("threads", [1, 0])
@pytest.mark.parametrize("mask_shape", [(40, 1), (1, 300), (40, 300)])
def test_gradient_one_head_split_over_keys(threads, mask_shape):
    """Fewer (batch, key/value head) pairs than threads: the kernel splits the keys into ranges
    (each with its own d query part, summed at the end); masks broadcast along the keys are
    accumulated per thread. Same results as the decomposition with one thread or all."""
    shapes = ((1, 1, 40, 16), (1, 1, 300, 16), (1, 1, 300, 8))
    try:
        mg.set_num_threads(threads)
        _, _, _, kernel, dec = _kernel_and_decomposition(
            lambda: _grad_graph(shapes, "float32", "float32", mask_shape, True), np.float32)
    finally:
        mg.set_num_threads(0)
    for a, b in zip(kernel, dec):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
