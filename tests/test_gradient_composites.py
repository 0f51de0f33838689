"""Gradient composites: the gradient rules of softmax, softmax_cross_entropy, the batch / layer /
instance / group normalisations and avg_pooling_2d / _4d emit one `<op>_gradient` node (which
a backend may run as MPSGraph's gradient selector), whose decomposition is the gradient of the
forward decomposition. Values are checked against numpy formulas here; finite differences to
second order and torch.autograd are the conformance rows' Grad checks."""
import numpy as np
import pytest

import mpsgraph as mg

GRADIENT_COMPOSITES = {
    "softmax_gradient", "softmax_cross_entropy_gradient", "batch_normalization_gradient",
    "layer_normalization_gradient", "instance_normalization_gradient", "group_normalization_gradient",
    "avg_pooling_2d_gradient", "avg_pooling_4d_gradient"}


def _ops(g):
    return [n["op"] for n in g._g.nodes()]


def _run(g, feeds, outs):
    r = g.run(feeds, outs)
    return [np.asarray(r[t].numpy(), np.float64) for t in outs]


def _graph_of(*arrays):
    """A float64 graph with one placeholder per array."""
    g = mg.Graph()
    return (g, *(g.placeholder(t.shape, mg.float64) for t in arrays))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_schemas_list_them_as_composites_that_are_not_graph_methods():
    schemas = {s["name"]: s for s in mg.op_schemas()}
    for name in GRADIENT_COMPOSITES:
        assert schemas[name]["composite"], name
        assert not schemas[name]["python_method"], name
        assert not hasattr(mg.Graph, name), name


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_gradient_node_and_value(axis):
    rng = np.random.default_rng(0)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    g, a, d = _graph_of(x, dy)
    y = g.softmax(a, axis=axis)
    gx = g.gradients(y, [a], dy=d)[a]
    assert _ops(g).count("softmax_gradient") == 1
    s = _softmax(x, axis)
    want = s * (dy - np.sum(dy * s, axis=axis, keepdims=True))
    np.testing.assert_allclose(_run(g, {a: x, d: dy}, [gx])[0], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_gradients_wrt_source_and_labels(reduction):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 5))
    lab = rng.dirichlet(np.ones(5), (2, 3))
    g = mg.Graph()
    a, l = g.placeholder(x.shape, mg.float64), g.placeholder(lab.shape, mg.float64)
    loss = g.softmax_cross_entropy(a, l, reduction=reduction)
    total = g.reduction_sum(loss * loss, keep_dims=False)  # a non-constant incoming gradient
    grads = g.gradients(total, [a, l])
    assert _ops(g).count("softmax_cross_entropy_gradient") == 1
    ls = x - x.max(-1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
    per = -np.sum(lab * ls, -1, keepdims=True)
    n = per.size
    dl = 2 * per if reduction == "none" else 2 * (per.sum() if reduction == "sum" else per.mean()) * np.ones_like(per)
    if reduction == "mean":
        dl = dl / n
    want_x = dl * (np.exp(ls) * lab.sum(-1, keepdims=True) - lab)
    want_l = -dl * ls
    got_x, got_l = _run(g, {a: x, l: lab}, [grads[a], grads[l]])
    np.testing.assert_allclose(got_x, want_x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_l, want_l, rtol=1e-10, atol=1e-12)


def test_an_input_given_twice_takes_the_decomposition_path():
    """softmax_cross_entropy(x, x): d/dx of -sum(x * log_softmax(x)) = -log_softmax(x) - x + softmax(x) sum(x)."""
    x = np.random.default_rng(2).normal(size=(3, 4))
    g = mg.Graph()
    a = g.placeholder(x.shape, mg.float64)
    gx = g.gradients(g.softmax_cross_entropy(a, a, reduction="sum"), [a])[a]
    assert "softmax_cross_entropy_gradient" not in _ops(g)
    ls = x - x.max(-1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
    want = -ls - x + np.exp(ls) * x.sum(-1, keepdims=True)
    np.testing.assert_allclose(_run(g, {a: x}, [gx])[0], want, rtol=1e-10, atol=1e-12)


def _bn_grads(x, gamma, dy, axes, eps):
    """dx, dgamma-per-statistics-group, dbeta-per-group of (x - mean) / sqrt(var + eps) * gamma."""
    n = np.prod([x.shape[i] for i in axes])
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    r = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * r
    dgy = dy * gamma
    dx = r * (dgy - dgy.sum(axis=axes, keepdims=True) / n - xhat * (dgy * xhat).sum(axis=axes, keepdims=True) / n)
    return dx, dy * xhat, dy


def test_batch_normalization_gradients_and_zero_for_running_statistics():
    rng = np.random.default_rng(3)
    x, dy = rng.normal(size=(4, 3, 2, 5)), rng.normal(size=(4, 3, 2, 5))
    gamma, beta = rng.uniform(0.5, 1.5, 3), rng.normal(size=3)
    rm, rv = rng.normal(size=3), rng.uniform(0.5, 2, 3)
    g = mg.Graph()
    a, ga, be, m, v, d = (g.placeholder(t.shape, mg.float64) for t in (x, gamma, beta, rm, rv, dy))
    y = g.batch_normalization(a, ga, be, m, v, channel_axis=1, epsilon=1e-3)
    grads = g.gradients(y, [a, ga, be, m, v], dy=d)
    assert _ops(g).count("batch_normalization_gradient") == 1
    got = _run(g, {a: x, ga: gamma, be: beta, m: rm, v: rv, d: dy}, [grads[t] for t in (a, ga, be, m, v)])
    dx, dgam, dbet = _bn_grads(x, gamma.reshape(1, 3, 1, 1), dy, (0, 2, 3), 1e-3)
    np.testing.assert_allclose(got[0], dx, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got[1], dgam.sum(axis=(0, 2, 3)), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got[2], dbet.sum(axis=(0, 2, 3)), rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(got[3], 0)  # training: the running statistics are not used
    np.testing.assert_array_equal(got[4], 0)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_instance_normalization_gradients(layout):
    rng = np.random.default_rng(4)
    shape = (2, 3, 4, 5) if layout == "NHWC" else (2, 5, 3, 4)
    ca = 3 if layout == "NHWC" else 1
    x, dy = rng.normal(size=shape), rng.normal(size=shape)
    gamma, beta = rng.uniform(0.5, 1.5, 5), rng.normal(size=5)
    g = mg.Graph()
    a, ga, be, d = (g.placeholder(t.shape, mg.float64) for t in (x, gamma, beta, dy))
    grads = g.gradients(g.instance_normalization(a, ga, be, data_layout=layout), [a, ga, be], dy=d)
    assert _ops(g).count("instance_normalization_gradient") == 1
    got = _run(g, {a: x, ga: gamma, be: beta, d: dy}, [grads[t] for t in (a, ga, be)])
    bshape = [1] * 4
    bshape[ca] = 5
    spatial = tuple(i for i in range(1, 4) if i != ca)
    dx, dgam, dbet = _bn_grads(x, gamma.reshape(bshape), dy, spatial, 1e-5)
    other = tuple(i for i in range(4) if i != ca)
    np.testing.assert_allclose(got[0], dx, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got[1], dgam.sum(axis=other), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got[2], dbet.sum(axis=other), rtol=1e-9, atol=1e-10)


def test_normalization_gradients_without_gamma_and_beta_return_only_dx():
    rng = np.random.default_rng(5)
    x, dy = rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
    g, a, d = _graph_of(x, dy)
    gx = g.gradients(g.layer_normalization(a), [a], dy=d)[a]
    node = next(n for n in g._g.nodes() if n["op"] == "layer_normalization_gradient")
    assert len(node["outputs"]) == 1
    dx, _, _ = _bn_grads(x, 1.0, dy, (1,), 1e-5)
    np.testing.assert_allclose(_run(g, {a: x, d: dy}, [gx])[0], dx, rtol=1e-9, atol=1e-10)


def test_group_normalization_and_avg_pooling_emit_their_gradient_nodes():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 4, 4, 6))
    g = mg.Graph()
    a = g.placeholder(x.shape, mg.float64)
    loss = g.reduction_sum(g.group_normalization(a, num_groups=3) ** 2.0, keep_dims=False) + g.reduction_sum(
        g.avg_pooling_2d(a, kernel_sizes=[2, 2], strides=[2, 2]) ** 2.0, keep_dims=False) + g.reduction_sum(
        g.avg_pooling_4d(a, kernel_sizes=[1, 2, 2, 3], strides=[1, 2, 2, 3]) ** 2.0, keep_dims=False)
    gx = g.gradients(loss, [a])[a]
    ops = _ops(g)
    for name in ("group_normalization_gradient", "avg_pooling_2d_gradient", "avg_pooling_4d_gradient"):
        assert ops.count(name) == 1, name
    # group normalisation of x gives y with sum(y**2) = count per group (up to epsilon); the
    # pooled terms: d/dx sum(avg**2) = 2 * avg spread back / window size
    p2 = x.reshape(2, 2, 2, 2, 2, 6).mean(axis=(2, 4))
    d2 = np.repeat(np.repeat(2 * p2 / 4, 2, axis=1), 2, axis=2)
    p4 = x.reshape(2, 2, 2, 2, 2, 2, 3).mean(axis=(2, 4, 6))
    d4 = np.repeat(np.repeat(np.repeat(2 * p4 / 12, 2, axis=1), 2, axis=2), 3, axis=3)
    xg = x.reshape(2, 16, 3, 2)
    mean, var = xg.mean(axis=(1, 3), keepdims=True), xg.var(axis=(1, 3), keepdims=True)
    r = 1 / np.sqrt(var + 1e-5)
    xhat = (xg - mean) * r
    dy = 2 * xhat
    n = 32
    dgn = r * (dy - dy.sum(axis=(1, 3), keepdims=True) / n - xhat * (dy * xhat).sum(axis=(1, 3), keepdims=True) / n)
    want = dgn.reshape(x.shape) + d2 + d4
    np.testing.assert_allclose(_run(g, {a: x}, [gx])[0], want, rtol=1e-8, atol=1e-9)


def test_second_order_through_a_gradient_composite():
    """d/dx of sum(softmax_gradient(dy=c, x)**2) against central finite differences."""
    rng = np.random.default_rng(7)
    x, c = rng.normal(size=(2, 5)), rng.normal(size=(2, 5))
    g, a, d = _graph_of(x, c)
    gx = g.gradients(g.softmax(a), [a], dy=d)[a]
    h = g.reduction_sum(gx * gx, keep_dims=False)
    ggx = g.gradients(h, [a])[a]
    got = _run(g, {a: x, d: c}, [ggx])[0]

    def f(v):
        s = _softmax(v)
        return np.sum((s * (c - np.sum(c * s, -1, keepdims=True))) ** 2)
    eps = 1e-6
    want = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        want[i] = (f(x + e) - f(x - e)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_unknown_dims_pass_through_the_gradient_composites():
    x = np.random.default_rng(8).normal(size=(3, 4))
    g = mg.Graph()
    a = g.placeholder((None, None), mg.float64)
    gx = g.gradients(g.reduction_sum(g.softmax(a) ** 2.0, keep_dims=False), [a])[a]
    s = _softmax(x)
    dy = 2 * s
    want = s * (dy - np.sum(dy * s, -1, keepdims=True))
    np.testing.assert_allclose(_run(g, {a: x}, [gx])[0], want, rtol=1e-12, atol=1e-12)


def test_softmax_cross_entropy_gradient_of_a_broadcast_source():
    """x (1, 5) against labels (3, 5): x's gradient sums the per-row gradients."""
    rng = np.random.default_rng(9)
    x, lab = rng.normal(size=(1, 5)), rng.dirichlet(np.ones(5), 3)
    g, a, l = _graph_of(x, lab)
    gx = g.gradients(g.softmax_cross_entropy(a, l, reduction="sum"), [a])[a]
    assert _ops(g).count("softmax_cross_entropy_gradient") == 1
    want = np.sum(_softmax(x) * lab.sum(-1, keepdims=True) - lab, axis=0, keepdims=True)
    np.testing.assert_allclose(_run(g, {a: x, l: lab}, [gx])[0], want, rtol=1e-12, atol=1e-12)
