"""Control flow (if_then_else, while_loop, for_loop, control_dependency): values against numpy,
gradients against the same computation unrolled by hand, finite differences and PyTorch
autograd, variables inside regions, and the build-time errors."""
import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import numeric_grad

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def run1(g, feeds, t):
    return g.run(feeds, [t])[t].numpy()


# ---------------------------------------------------------------- if_then_else


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_runs_the_taken_branch_with_captured_values(sign):
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32)
    y = g.placeholder((3,), mg.float32)
    pred = g.reduction_sum(x, keep_dims=False) > 0.0
    out = g.if_then_else(pred, lambda: x * y + 1.0, lambda: x - y)
    xv = sign * np.abs(RNG.standard_normal(3)).astype(np.float32)
    yv = RNG.standard_normal(3).astype(np.float32)
    want = xv * yv + 1.0 if xv.sum() > 0 else xv - yv
    np.testing.assert_allclose(run1(g, {x: xv, y: yv}, out), want, rtol=1e-6)


def test_if_returns_several_values_and_nests():
    g = mg.Graph()
    x = g.placeholder((2, 2), mg.float32)
    a = g.placeholder((), mg.bool)
    b = g.placeholder((), mg.bool)

    def then():
        inner = g.if_then_else(b, lambda: (x * 2.0, x + 1.0), lambda: (x * 3.0, x - 1.0))
        return inner[0] + inner[1], g.reduction_sum(x, keep_dims=False)

    out = g.if_then_else(a, then, lambda: (x, g.reduction_maximum(x, keep_dims=False)))
    assert isinstance(out, tuple) and len(out) == 2
    xv = RNG.standard_normal((2, 2)).astype(np.float32)
    for av in (True, False):
        for bv in (True, False):
            r = g.run({x: xv, a: np.array(av), b: np.array(bv)}, list(out))
            if av:
                want0 = (xv * 2 + xv + 1) if bv else (xv * 3 + xv - 1)
                want1 = xv.sum()
            else:
                want0, want1 = xv, xv.max()
            np.testing.assert_allclose(r[out[0]].numpy(), want0, rtol=1e-6)
            np.testing.assert_allclose(r[out[1]].numpy(), want1, rtol=1e-6)


def test_if_gradient_first_and_second_order_against_torch():
    g = mg.Graph()
    x = g.placeholder((4,), mg.float64)
    w = g.placeholder((4,), mg.float64)
    pred = g.reduction_sum(w, keep_dims=False) > 0.0
    out = g.if_then_else(pred, lambda: g.sin(x) * w, lambda: x * x * w)
    loss = g.reduction_sum(out, keep_dims=False)
    gx, gw = g.gradients(loss, [x, w]).values()
    hx = g.gradients(g.reduction_sum(gx, keep_dims=False), [x])[x]
    for sign in (1.0, -1.0):
        xv = RNG.standard_normal(4)
        wv = sign * np.abs(RNG.standard_normal(4))
        r = g.run({x: xv, w: wv}, [gx, gw, hx])
        xt = torch.tensor(xv, requires_grad=True)
        wt = torch.tensor(wv, requires_grad=True)
        lt = ((torch.sin(xt) * wt) if wv.sum() > 0 else (xt * xt * wt)).sum()
        dx, dw = torch.autograd.grad(lt, [xt, wt], create_graph=True)
        (hxt,) = torch.autograd.grad(dx.sum(), [xt])
        np.testing.assert_allclose(r[gx].numpy(), dx.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(r[gw].numpy(), dw.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(r[hx].numpy(), hxt.numpy(), rtol=1e-12)


def test_if_with_unknown_dims_and_compile():
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float32)
    out = g.if_then_else(g.reduction_sum(x, keep_dims=False) > 0.0, lambda: x * 2.0, lambda: -x)
    exe = g.compile({x: ((None, 3), mg.float32)}, [out])
    for n in (1, 4, 4, 7):
        xv = RNG.standard_normal((n, 3)).astype(np.float32)
        want = xv * 2 if xv.sum() > 0 else -xv
        np.testing.assert_allclose(exe.run([xv])[0].numpy(), want, rtol=1e-6)


# ---------------------------------------------------------------- loops


def newton_sqrt(g, a, x0, iters):
    """x <- (x + a / x) / 2, `iters` times, as a for_loop."""
    return g.for_loop(iters, [x0], lambda i, x: [(x + a / x) * 0.5])[0]


def test_for_loop_values_and_index():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32)
    # sum over i in range(2, 11, 3) of i * x, carried with a counter
    acc, cnt = g.for_loop(2, 11, 3, [x * 0.0, g.constant(0, mg.int32)],
                          lambda i, acc, c: [acc + g.cast(i, mg.float32) * x, c + 1])
    xv = RNG.standard_normal(3).astype(np.float32)
    r = g.run({x: xv}, [acc, cnt])
    np.testing.assert_allclose(r[acc].numpy(), sum(i * xv for i in range(2, 11, 3)), rtol=1e-6)
    assert int(r[cnt].numpy()) == len(range(2, 11, 3))


def test_for_loop_with_tensor_bounds_and_zero_trips():
    g = mg.Graph()
    n = g.placeholder((), mg.int32)
    x = g.placeholder((2,), mg.float64)
    (y,) = g.for_loop(n, [x], lambda i, v: [v * 2.0 + 1.0])
    for nv in (0, 1, 5):
        xv = RNG.standard_normal(2)
        want = xv.copy()
        for _ in range(nv):
            want = want * 2 + 1
        np.testing.assert_allclose(run1(g, {n: np.int32(nv), x: xv}, y), want, rtol=1e-12)


def test_while_loop_values_like_mpsgraph_before_after():
    g = mg.Graph()
    x = g.placeholder((), mg.float32)
    limit = g.placeholder((), mg.float32)

    def before(v, k):
        return v < limit, [v, k]

    def after(v, k):
        return [v * 2.0, k + 1]

    v, k = g.while_loop([x, g.constant(0, mg.int32)], before, after)
    r = g.run({x: np.float32(1.5), limit: np.float32(100.0)}, [v, k])
    vv, kk = 1.5, 0
    while vv < 100:
        vv, kk = vv * 2, kk + 1
    assert float(r[v].numpy()) == vv and int(r[k].numpy()) == kk


def test_while_before_block_may_pass_different_values_on():
    # the before block passes on (x, x*x); the after block maps them back to one carried value
    g = mg.Graph()
    x = g.placeholder((), mg.float64)
    a, b = g.while_loop([x], lambda v: (v < 50.0, [v, v * v]), lambda v, sq: [v + sq])
    r = g.run({x: np.float64(1.0)}, [a, b])
    vv = 1.0
    while vv < 50:
        vv = vv + vv * vv
    assert float(r[a].numpy()) == vv and float(r[b].numpy()) == vv * vv


def unrolled_newton(g, a, x0, iters):
    x = x0
    for _ in range(iters):
        x = (x + a / x) * 0.5
    return x


@pytest.mark.parametrize("checkpoint", [False, True])
def test_for_loop_gradient_matches_the_unrolled_graph_and_torch(checkpoint):
    g = mg.Graph()
    a = g.placeholder((3,), mg.float64)
    x0 = g.placeholder((3,), mg.float64)
    w = g.placeholder((3,), mg.float64)  # captured inside the body
    (y,) = g.for_loop(6, [x0], lambda i, x: [(x + a / x) * 0.5 + w * g.sin(x)], checkpoint=checkpoint)
    loss = g.reduction_sum(y * y, keep_dims=False)
    grads = g.gradients(loss, [a, x0, w])
    u = x0
    for _ in range(6):
        u = (u + a / u) * 0.5 + w * g.sin(u)
    uloss = g.reduction_sum(u * u, keep_dims=False)
    ugrads = g.gradients(uloss, [a, x0, w])
    av, xv, wv = RNG.uniform(1, 3, 3), RNG.uniform(1, 2, 3), RNG.uniform(-0.1, 0.1, 3)
    feeds = {a: av, x0: xv, w: wv}
    r = g.run(feeds, list(grads.values()) + list(ugrads.values()))
    at, xt, wt = (torch.tensor(v, requires_grad=True) for v in (av, xv, wv))
    ut = xt
    for _ in range(6):
        ut = (ut + at / ut) * 0.5 + wt * torch.sin(ut)
    tg = torch.autograd.grad((ut * ut).sum(), [at, xt, wt])
    for t, ut_, tt in zip(grads.values(), ugrads.values(), tg):
        np.testing.assert_allclose(r[t].numpy(), r[ut_].numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(r[t].numpy(), tt.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_while_loop_gradient_with_data_dependent_trip_count(checkpoint):
    # x <- x * c + s until x exceeds the limit: trip count depends on the values
    g = mg.Graph()
    x0 = g.placeholder((), mg.float64)
    c = g.placeholder((), mg.float64)
    (y,) = g.while_loop([x0], lambda v: v < 1000.0, lambda v: [v * c + g.sin(v)], checkpoint=checkpoint)
    gx, gc = g.gradients(y, [x0, c]).values()
    for xv, cv in ((1.3, 1.7), (2.0, 3.1), (2000.0, 2.0)):
        r = g.run({x0: np.float64(xv), c: np.float64(cv)}, [y, gx, gc])
        xt = torch.tensor(xv, requires_grad=True, dtype=torch.float64)
        ct = torch.tensor(cv, requires_grad=True, dtype=torch.float64)
        v = xt
        while v.item() < 1000:
            v = v * ct + torch.sin(v)
        np.testing.assert_allclose(float(r[y].numpy()), v.item(), rtol=1e-12)
        tg = torch.autograd.grad(v, [xt, ct], allow_unused=True)
        tg = [0.0 if t is None else t.item() for t in tg]
        np.testing.assert_allclose(float(r[gx].numpy()), tg[0], rtol=1e-10)
        np.testing.assert_allclose(float(r[gc].numpy()), tg[1], rtol=1e-10)


def test_nested_loops_gradient_against_finite_differences():
    g = mg.Graph()
    x = g.placeholder((2,), mg.float64)
    m = g.placeholder((2, 2), mg.float64)

    def outer(i, v):
        (inner,) = g.for_loop(3, [v], lambda j, u: [g.tanh(g.matrix_multiplication(m, g.reshape(u, (2, 1))))
                                                    .reshape((2,)) + u * 0.5])
        return [inner * 0.9]

    (y,) = g.for_loop(4, [x], outer)
    loss = g.reduction_sum(y * g.constant(np.array([1.0, -2.0])), keep_dims=False)
    gx, gm = g.gradients(loss, [x, m]).values()
    xv, mv = RNG.standard_normal(2), RNG.standard_normal((2, 2)) * 0.5
    exe = g.compile({x: ((2,), mg.float64), m: ((2, 2), mg.float64)}, [loss])

    def f(xa, ma):
        return float(exe.run([xa, ma])[0].numpy())

    r = g.run({x: xv, m: mv}, [gx, gm])
    np.testing.assert_allclose(r[gx].numpy(), numeric_grad(f, [xv.copy(), mv.copy()], 0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(r[gm].numpy(), numeric_grad(f, [xv.copy(), mv.copy()], 1), rtol=1e-6, atol=1e-9)


def test_loop_with_unknown_dims_is_specialised_per_shape():
    g = mg.Graph()
    x = g.placeholder((None,), mg.float32)
    (y,) = g.for_loop(3, [x], lambda i, v: [v + g.reduction_sum(v, keep_dims=True)])
    for n in (2, 5):
        xv = RNG.standard_normal(n).astype(np.float32)
        want = xv.copy()
        for _ in range(3):
            want = want + want.sum()
        np.testing.assert_allclose(run1(g, {x: xv}, y), want, rtol=1e-5)


@pytest.mark.parametrize("kind", ["for", "while"])
def test_second_order_through_loops_against_torch(kind):
    """The gradient of a loop's gradient: while_loop_vjp differentiated through its
    decomposition (loops that recompute states), against torch's double backward."""
    g = mg.Graph()
    x0 = g.placeholder((3,), mg.float64)
    c = g.placeholder((3,), mg.float64)

    def body(v):
        return g.sin(v) * c + v * 1.3  # 0.3 v + c sin(v) > 0 for v > 0 and c < 0.9: v grows, the while ends

    if kind == "for":
        (y,) = g.for_loop(4, [x0], lambda i, v: [body(v)])
    else:
        (y,) = g.while_loop([x0], lambda v: g.reduction_sum(v, keep_dims=False) < 20.0, lambda v: [body(v)])
    loss = g.reduction_sum(y * y, keep_dims=False)
    gx, gc = g.gradients(loss, [x0, c]).values()
    s = g.reduction_sum(gx * g.constant(np.array([0.3, -1.0, 0.7])), keep_dims=False)
    hx, hc = g.gradients(s, [x0, c]).values()
    xv, cv = RNG.uniform(0.5, 1.0, 3), RNG.uniform(0.5, 1.0, 3)
    r = g.run({x0: xv, c: cv}, [gx, gc, hx, hc])
    xt, ct = torch.tensor(xv, requires_grad=True), torch.tensor(cv, requires_grad=True)
    v = xt
    steps = 0
    while (steps < 4) if kind == "for" else (v.sum().item() < 20.0):
        v = torch.sin(v) * ct + v * 1.3
        steps += 1
    dx, dc = torch.autograd.grad((v * v).sum(), [xt, ct], create_graph=True)
    hxt, hct = torch.autograd.grad((dx * torch.tensor([0.3, -1.0, 0.7], dtype=torch.float64)).sum(), [xt, ct])
    np.testing.assert_allclose(r[gx].numpy(), dx.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(r[gc].numpy(), dc.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(r[hx].numpy(), hxt.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(r[hc].numpy(), hct.numpy(), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- variables and control dependency


def test_assign_inside_if_lands_after_the_run_only_when_taken():
    g = mg.Graph()
    v = g.variable(np.zeros(2, np.float32))
    p = g.placeholder((), mg.bool)

    def then():
        g.assign(v, v + 5.0)
        return v * 1.0  # reads see the value from before the run

    out = g.if_then_else(p, then, lambda: v * 2.0)
    r = g.run({p: np.array(True)}, [out])
    np.testing.assert_array_equal(r[out].numpy(), [0, 0])
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [5, 5])
    g.run({p: np.array(False)}, [out])
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [5, 5])
    g.run({p: np.array(True)}, [out])
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [10, 10])


def test_assign_inside_a_for_loop_keeps_the_last_value():
    g = mg.Graph()
    v = g.variable(np.float32(1.0))
    x = g.placeholder((), mg.float32)

    def body(i, acc):
        g.assign(v, acc + g.cast(i, mg.float32))
        return [acc * 2.0]

    (acc,) = g.for_loop(4, [x], body)
    g.run({x: np.float32(1.0)}, [acc])
    # the last iteration (i = 3) assigned acc_3 + 3 with acc_3 = 8
    assert float(g.variable_data(v).numpy()) == 11.0


def test_control_dependency_runs_the_operations():
    g = mg.Graph()
    v = g.variable(np.float32(3.0))
    x = g.placeholder((), mg.float32)
    op = g.assign(v, x)
    y = g.control_dependency([op], lambda: x * 2.0)
    z = y + 1.0
    r = g.run({x: np.float32(7.0)}, [z])
    assert float(r[z].numpy()) == 15.0
    assert float(g.variable_data(v).numpy()) == 7.0


# ---------------------------------------------------------------- errors


def test_branches_of_different_dtypes_or_ranks_are_refused():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32)
    p = g.placeholder((), mg.bool)
    with pytest.raises(mg.GraphTypeError, match=r"\[if_then_else\].*float32\(3,\) from then, int32"):
        g.if_then_else(p, lambda: x, lambda: g.cast(x, mg.int32))
    with pytest.raises(mg.GraphValueError, match=r"\[if_then_else\].*differs between the branches"):
        g.if_then_else(p, lambda: x, lambda: g.reshape(x, (3, 1)))
    # the graph stays usable
    out = g.if_then_else(p, lambda: x, lambda: -x)
    np.testing.assert_array_equal(run1(g, {x: np.ones(3, np.float32), p: np.array(False)}, out), -np.ones(3))


@pytest.mark.parametrize("pred", [((2,), "bool"), ((), "float32")])
def test_a_non_scalar_or_non_bool_predicate_is_refused(pred):
    g = mg.Graph()
    p = g.placeholder(pred[0], pred[1])
    with pytest.raises(mg.GraphTypeError, match=r"\[if_then_else\] the predicate must be a bool scalar"):
        g.if_then_else(p, lambda: p, lambda: p)
    x = g.placeholder((), mg.float32)
    with pytest.raises(mg.GraphTypeError, match=r"\[while_loop\] the before block must return a bool scalar"):
        g.while_loop([x], lambda v: v, lambda v: [v])


def test_a_loop_carried_value_that_changes_dtype_or_shape_is_refused():
    g = mg.Graph()
    x = g.placeholder((2,), mg.float32)
    with pytest.raises(mg.GraphTypeError, match=r"\[for_loop\] loop-carried value 0 changes dtype"):
        g.for_loop(3, [x], lambda i, v: [g.cast(v, mg.float16)])
    with pytest.raises(mg.GraphValueError, match=r"\[while_loop\] loop-carried value 0 changes shape"):
        g.while_loop([x], lambda v: g.reduction_sum(v, keep_dims=False) < 3.0, lambda v: [g.concat([v, v], 0)])


def test_regions_cannot_use_tensors_of_other_graphs_or_leak_their_own():
    g, other = mg.Graph(), mg.Graph()
    x = g.placeholder((), mg.float32)
    y = other.placeholder((), mg.float32)
    p = g.placeholder((), mg.bool)
    with pytest.raises(mg.GraphValueError, match="belongs to another graph"):
        g.if_then_else(p, lambda: x + y, lambda: x)
    leaked = []

    def then():
        t = x * 3.0
        leaked.append(t)
        return t

    g.if_then_else(p, then, lambda: x)
    with pytest.raises(mg.GraphValueError, match=r"was made inside the then block .* closed"):
        g.addition(leaked[0], x)
    with pytest.raises(mg.GraphValueError, match="placeholders are fed from outside"):
        g.if_then_else(p, lambda: g.placeholder((), mg.float32), lambda: x)
    out = g.if_then_else(p, lambda: x + 1.0, lambda: x)  # still usable
    assert float(run1(g, {x: np.float32(1.0), p: np.array(True)}, out)) == 2.0


def test_a_block_that_raises_leaves_the_graph_usable():
    g = mg.Graph()
    x = g.placeholder((), mg.float32)

    def bad(i, v):
        raise RuntimeError("user error in the body")

    with pytest.raises(RuntimeError, match="user error"):
        g.for_loop(3, [x], bad)
    (y,) = g.for_loop(3, [x], lambda i, v: [v + 1.0])
    assert float(run1(g, {x: np.float32(0.0)}, y)) == 3.0


def test_loop_with_constant_inputs_and_random_body_draws_fresh_numbers_per_run():
    """Regression: a for_loop whose inputs were all constants was folded at compile time with
    the random numbers of its body, so every run repeated them."""
    g = mg.Graph()
    (acc,) = g.for_loop(2, [g.zeros((3,), mg.float32)], lambda t, a: [a + g.random_uniform((3,), seed=5)])
    exe = g.compile({}, [acc])
    first, second = exe.run([])[0].numpy(), exe.run([])[0].numpy()
    assert not np.array_equal(first, second)
    assert np.all((first >= 0) & (first < 2))


def test_a_data_dependent_op_inside_a_region_is_refused_clearly():
    g = mg.Graph()
    x = g.placeholder((4,), mg.float32)
    count = lambda: g.cast(g.reduction_sum(g.cast(g.non_zero_indices(x), mg.float32), keep_dims=False), mg.int32)
    (c,) = g.for_loop(2, [g.constant(0, mg.int32)], lambda i, c: [c + count()])
    with pytest.raises(mg.GraphNotImplementedError, match=r"\[non_zero_indices\].*inside a control-flow region"):
        g.run({x: np.array([0, 1, 0, 2], np.float32)}, [c])
    y = g.non_zero_indices(x)  # outside a region it runs
    assert g.run({x: np.array([0, 1, 0, 2], np.float32)}, [y])[y].shape == (2, 1)


@pytest.mark.parametrize("wrt", ["w", "w and xs"])
def test_loop_gradient_of_some_captured_values_only(wrt):
    """A captured value nobody differentiates (the input sequence read by index) gets no
    per-iteration accumulator; the gradients asked for are unchanged (against PyTorch)."""
    g = mg.Graph()
    xs = g.placeholder((5, 2, 3), mg.float64)
    w = g.placeholder((3, 3), mg.float64)
    (h,) = g.for_loop(5, [g.zeros((2, 3), mg.float64)], lambda i, h: [g.tanh(h @ w + g.gather(xs, i, axis=0))])
    loss = g.reduction_sum(h * h, keep_dims=False)
    targets = [w] if wrt == "w" else [w, xs]
    grads = g.gradients(loss, targets)
    xv, wv = RNG.standard_normal((5, 2, 3)), RNG.standard_normal((3, 3)) * 0.5
    r = g.run({xs: xv, w: wv}, list(grads.values()))
    xt, wt = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)
    ht = torch.zeros(2, 3, dtype=torch.float64)
    for t in range(5):
        ht = torch.tanh(ht @ wt + xt[t])
    tg = torch.autograd.grad((ht * ht).sum(), [wt, xt])
    np.testing.assert_allclose(r[grads[w]].numpy(), tg[0].numpy(), rtol=1e-10)
    if wrt != "w":
        np.testing.assert_allclose(r[grads[xs]].numpy(), tg[1].numpy(), rtol=1e-10, atol=1e-14)
