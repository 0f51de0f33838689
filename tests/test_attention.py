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
