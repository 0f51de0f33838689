"""Compiler core: composite ops kept until specialisation, gradients through them,
profiles per graph-level op, views that alias in the memory plan, kernel scratch in the
plan, and the executable cache's keys. References are numpy and finite differences."""
import numpy as np
import pytest

import mpsgraph as mg


def _softmax(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_composite_node_stays_in_the_graph():
    g = mg.Graph()
    x = g.placeholder((None, 5), mg.float32, name="x")
    y = g.softmax(x)
    assert y.operation.op_type == "softmax"
    assert y.name == "softmax_0"
    n = g.num_nodes
    g.log_softmax(x)
    assert g.num_nodes == n + 1  # one node, not its decomposition
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(g.run({x: a}, [y])[y].numpy(), _softmax(a), rtol=1e-6, atol=1e-7)


def test_composite_with_absent_optional_inputs_runs_and_differentiates():
    g = mg.Graph()
    x = g.placeholder((2, 3, 4), mg.float64, name="x")
    gamma = g.placeholder((4,), mg.float64, name="gamma")
    y1 = g.layer_normalization(x, axes=[-1])  # gamma and beta absent
    y2 = g.layer_normalization(x, gamma, axes=[-1])  # beta absent
    loss = g.reduction_sum(g.square(y2) * g.sin(y1), axes=None)
    dx, dgamma = g.gradients(loss, [x, gamma]).values()
    rng = np.random.default_rng(1)
    a, gm = rng.standard_normal((2, 3, 4)), rng.standard_normal(4)

    def ln(v):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)

    def f(v, gv):
        return float(np.sum((ln(v) * gv) ** 2 * np.sin(ln(v))))

    out = g.run({x: a, gamma: gm}, [loss, dx, dgamma])
    assert out[loss].numpy() == pytest.approx(f(a, gm), rel=1e-9)
    eps = 1e-6
    num_dx = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = eps
        num_dx[i] = (f(a + d, gm) - f(a - d, gm)) / (2 * eps)
    num_dg = np.array([(f(a, gm + eps * e) - f(a, gm - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(out[dx].numpy(), num_dx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out[dgamma].numpy(), num_dg, rtol=1e-5, atol=1e-7)


def test_composite_gradient_counts_dependent_inputs_once():
    # Regression: a composite whose inputs depend on each other (labels = f(x)) is
    # differentiated with its inputs as leaves; the path through f is counted once.
    g = mg.Graph()
    x = g.placeholder((6,), mg.float64, name="x")
    loss = g.mean_squared_error(x, g.sin(x), reduction="sum")
    (dx,) = g.gradients(loss, [x]).values()
    a = np.linspace(-2, 2, 6)
    expect = 2 * (a - np.sin(a)) * (1 - np.cos(a))
    np.testing.assert_allclose(g.run({x: a}, [dx])[dx].numpy(), expect, rtol=1e-12)


def test_second_order_through_a_composite():
    g = mg.Graph()
    x = g.placeholder((4,), mg.float64, name="x")
    y = g.reduction_sum(g.softplus(x), axes=None)
    (dx,) = g.gradients(y, [x]).values()
    (ddx,) = g.gradients(g.reduction_sum(dx, axes=None), [x]).values()
    a = np.array([-3.0, -0.5, 0.2, 4.0])
    s = 1 / (1 + np.exp(-a))
    out = g.run({x: a}, [dx, ddx])
    np.testing.assert_allclose(out[dx].numpy(), s, rtol=1e-12)
    np.testing.assert_allclose(out[ddx].numpy(), s * (1 - s), rtol=1e-10)


def test_dropout_gradient_uses_the_forward_mask():
    g = mg.Graph()
    x = g.placeholder((64, 32), mg.float32, name="x")
    y = g.dropout(x, rate=0.25, seed=7)
    (dx,) = g.gradients(g.reduction_sum(y * 3.0, axes=None), [x]).values()
    a = np.random.default_rng(2).uniform(1, 2, (64, 32)).astype(np.float32)
    exe = g.compile({x: mg.ShapedType((64, 32), mg.float32)}, [y, dx])
    for _ in range(3):  # fresh masks per run, the gradient's always the forward's
        yv, dv = (t.numpy() for t in exe.run([a]))
        kept = yv != 0
        assert 0.6 < kept.mean() < 0.9
        np.testing.assert_allclose(dv, np.where(kept, 3.0 / 0.75, 0.0), rtol=1e-6)


def test_profile_names_graph_level_ops_and_kernels():
    g = mg.Graph()
    x = g.placeholder((8, 16), mg.float32, name="x")
    y = g.softmax(g.relu(x))
    exe = g.compile({x: mg.ShapedType((8, 16), mg.float32)}, [y])
    a = np.ones((8, 16), np.float32)
    with mg.profiler.profile() as prof:
        exe.run([a])
    assert "softmax" in prof.ops and "relu" in prof.ops
    assert "exponent" not in prof.ops
    assert "exponent" in prof.kernels and "softmax" not in prof.kernels
    assert "softmax" in prof.table() and "exponent" in prof.table(kernels=True)


def test_profile_per_step_names_the_layer_and_its_shapes():
    """Two convolutions of different shapes are one op and one kernel, but two steps: the
    per-step profile tells them apart by node and operand types."""
    g = mg.Graph()
    x = g.placeholder((1, 3, 16, 16), mg.float32, name="x")
    w1 = g.constant(np.ones((8, 3, 3, 3), np.float32))
    w2 = g.constant(np.ones((4, 8, 1, 1), np.float32))
    kw = dict(data_layout="NCHW", weights_layout="OIHW")
    h = g.convolution_2d(x, w1, padding=[1, 1, 1, 1], name="conv_a", **kw)
    y = g.convolution_2d(h, w2, name="conv_b", **kw)
    exe = g.compile({x: mg.ShapedType((1, 3, 16, 16), mg.float32)}, [y], device="cpu")
    a = np.ones((1, 3, 16, 16), np.float32)
    with mg.profiler.profile() as prof:
        for _ in range(3):
            exe.run([a])
    convs = {k: v for k, v in prof.steps.items() if ": convolution" in k}
    assert len(convs) == 2, prof.steps
    assert any(k.startswith("conv_a") and "float32(1, 3, 16, 16)" in k and k.endswith("-> float32(1, 8, 16, 16)")
               for k in convs), convs
    assert any(k.startswith("conv_b") and k.endswith("-> float32(1, 4, 16, 16)") for k in convs), convs
    assert all(calls == 3 for _, calls in prof.steps.values()), prof.steps
    # every timed step is in the per-kernel totals too
    assert abs(sum(s for s, _ in prof.steps.values()) - sum(s for s, _ in prof.kernels.values())) < 1e-9
    assert "conv_a" in prof.table(steps=True)


def _plan(exe):
    return {e["node"]: e for e in exe.memory_plan()}


def test_reshape_and_friends_alias_their_input():
    g = mg.Graph()
    x = g.placeholder((4, 6), mg.float32, name="x")
    h = g.exponent(x)
    r = g.reshape(h, (3, 8), name="r")
    s = g.stop_gradient(g.expand_dims(r, axes=[0], name="e"), name="s")
    y = g.reduction_sum(s, axes=[2], name="y")
    exe = g.compile({x: mg.ShapedType((4, 6), mg.float32)}, [y])
    plan = _plan(exe)
    for name in ("r", "e", "s"):
        assert plan[name]["storage"] == "view"
        assert plan[name]["alias_of"] == h.name
        assert plan[name]["buffer"] == plan[h.name]["buffer"]
    a = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(exe.run([a])[0].numpy(), np.exp(a).reshape(1, 3, 8).sum(2, keepdims=True), rtol=1e-6)


def test_a_view_that_is_a_result_is_written_to_the_result():
    g = mg.Graph()
    x = g.placeholder((2, 3), mg.float32, name="x")
    r = g.reshape(x * 2.0, (6,), name="r")
    exe = g.compile({x: mg.ShapedType((2, 3), mg.float32)}, [r])
    assert _plan(exe)["r"]["storage"] == "output"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = exe.run([a])[0]
    second = exe.run([a + 1])[0]  # a held result is never overwritten
    np.testing.assert_array_equal(first.numpy(), (a * 2).ravel())
    np.testing.assert_array_equal(second.numpy(), ((a + 1) * 2).ravel())


def test_a_view_of_a_feed_reads_the_feed():
    g = mg.Graph()
    x = g.placeholder((2, 3), mg.float32, name="x")
    y = g.reduction_sum(g.reshape(x, (3, 2), name="r"), axes=[1])
    exe = g.compile({x: mg.ShapedType((2, 3), mg.float32)}, [y])
    assert _plan(exe)["r"]["alias_of"] == "x"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(exe.run([a])[0].numpy().ravel(), a.reshape(3, 2).sum(1))


def test_kernel_scratch_is_planned_and_reused():
    g = mg.Graph()
    x = g.placeholder((64, 64), mg.float16, name="x")
    h = g.matrix_multiplication(x, x, name="mm1")  # float16 matmul computes in float32 scratch
    y = g.matrix_multiplication(h, x, name="mm2")
    exe = g.compile({x: mg.ShapedType((64, 64), mg.float16)}, [y])
    plan = exe.memory_plan()
    scratch = [e for e in plan if e["storage"] == "scratch"]
    assert {e["node"] for e in scratch} == {"mm1", "mm2"}
    assert all(e["nbytes"] == 64 * 64 * 4 for e in scratch)
    # mm2's scratch reuses buffers mm1's released: fewer buffers than scratch entries
    assert len({e["buffer"] for e in scratch}) < len(scratch)
    a = (np.random.default_rng(4).standard_normal((64, 64)) * 0.1).astype(np.float16)
    ref = (a.astype(np.float32) @ a.astype(np.float32)).astype(np.float16).astype(np.float32) @ a.astype(np.float32)
    np.testing.assert_allclose(exe.run([a])[0].numpy().astype(np.float32), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_variance_and_logsumexp_with_planned_scratch(dtype):
    g = mg.Graph()
    x = g.placeholder((3, 5000), getattr(mg, dtype), name="x")
    v = g.variance(x, axes=[1])
    l = g.logsumexp(x, axes=[0])
    a = np.random.default_rng(5).standard_normal((3, 5000)).astype(dtype)
    out = g.run({x: a}, [v, l])
    a64 = a.astype(np.float64)
    tol = 2e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(out[v].numpy().astype(np.float64), a64.var(1, keepdims=True), rtol=tol)
    ref = np.log(np.exp(a64).sum(0, keepdims=True))
    np.testing.assert_allclose(out[l].numpy().astype(np.float64), ref, rtol=tol, atol=tol)


def test_graph_run_cache_hits_on_the_same_signature_and_misses_on_a_new_one():
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float32, name="x")
    y = g.relu(x)
    g.clear_cache()
    a = np.ones((2, 3), np.float32)
    for _ in range(3):
        g.run({x: a}, [y])
    info = g.cache_info()
    assert (info.hits, info.misses, info.size) == (2, 1, 1)
    g.run({x: np.ones((4, 3), np.float32)}, [y])
    g.run({x: a}, [y])
    info = g.cache_info()
    assert (info.hits, info.misses, info.size) == (3, 2, 2)


def test_backends_register_themselves():
    names = [str(d) for d in mg.devices()]
    assert "cpu" in names
    if "cuda:0" not in names:  # the stub registered for CUDA says why
        g = mg.Graph()
        x = g.placeholder((1,), mg.float32)
        with pytest.raises(mg.GraphError, match="cuda"):
            g.run({x: np.ones(1, np.float32)}, [x + 1.0], device="cuda:0")


def test_random_ops_without_a_seed_draw_independent_streams():
    # Regression: with the old default seed 0, two dropout layers of one shape drew the
    # same mask in every run.
    g = mg.Graph()
    x = g.placeholder((64, 64), mg.float32, name="x")
    a, b = g.dropout(x, rate=0.5), g.dropout(x, rate=0.5)
    u, v = g.random_uniform((1000,)), g.random_uniform((1000,))
    out = g.run({x: np.ones((64, 64), np.float32)}, [a, b, u, v])
    same_mask = (out[a].numpy() == out[b].numpy()).mean()
    assert 0.35 < same_mask < 0.65  # independent masks agree about half the time
    assert not np.array_equal(out[u].numpy(), out[v].numpy())
    # a graph built the same way repeats its numbers
    g2 = mg.Graph()
    u2 = g2.random_uniform((1000,))
    np.testing.assert_array_equal(g2.run({}, [u2])[u2].numpy(), out[u].numpy())
