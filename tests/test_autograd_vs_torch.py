"""Gradients of random compositions of ops against PyTorch autograd, first and second
order, with known and unknown (None) dims."""
import numpy as np
import pytest
import torch

import mpsgraph as mg

# (mpsgraph builder, torch function, domain guard applied to the input first)
UNARY = [
    (lambda g, x: g.tanh(x), torch.tanh),
    (lambda g, x: g.sin(x), torch.sin),
    (lambda g, x: g.exp(x * 0.3), lambda t: torch.exp(t * 0.3)),
    (lambda g, x: g.sigmoid(x), torch.sigmoid),
    (lambda g, x: g.square(x), torch.square),
    (lambda g, x: g.log(g.square(x) + 1.0), lambda t: torch.log(t * t + 1.0)),
    (lambda g, x: g.sqrt(g.square(x) + 0.5), lambda t: torch.sqrt(t * t + 0.5)),
    (lambda g, x: g.softplus(x), torch.nn.functional.softplus),
    (lambda g, x: g.gelu(x), torch.nn.functional.gelu),
    (lambda g, x: g.softmax(x, axis=-1), lambda t: torch.softmax(t, -1)),
    (lambda g, x: g.log_softmax(x, axis=0), lambda t: torch.log_softmax(t, 0)),
    (lambda g, x: g.reduction_sum(x, axes=-1) * x, lambda t: t.sum(-1, keepdim=True) * t),
    (lambda g, x: g.mean(x, axes=0) - x, lambda t: t.mean(0, keepdim=True) - t),
    (lambda g, x: x * g.variance(x, axes=-1), lambda t: t * t.var(-1, unbiased=False, keepdim=True)),
    (lambda g, x: g.logsumexp(x, axes=-1) + x, lambda t: torch.logsumexp(t, -1, keepdim=True) + t),
]
BINARY = [
    (lambda g, a, b: a + b, lambda a, b: a + b),
    (lambda g, a, b: a * b, lambda a, b: a * b),
    (lambda g, a, b: a - b * 0.5, lambda a, b: a - b * 0.5),
    (lambda g, a, b: a / (g.square(b) + 1.0), lambda a, b: a / (b * b + 1.0)),
    (lambda g, a, b: g.maximum(a, b), torch.maximum),
    (lambda g, a, b: g.atan2(a, b), torch.atan2),
    (lambda g, a, b: a @ g.transpose(b), lambda a, b: a @ b.T),
    (lambda g, a, b: g.power(g.square(a) + 0.5, b * 0.5), lambda a, b: torch.pow(a * a + 0.5, b * 0.5)),
]


def random_program(rng, depth):
    """A random expression over two (4, 4) inputs: returns (mg builder, torch builder)."""
    if depth == 0:
        i = int(rng.integers(0, 2))
        return (lambda g, xs: xs[i]), (lambda ts: ts[i])
    if rng.random() < 0.5:
        f, tf = UNARY[int(rng.integers(0, len(UNARY)))]
        a, ta = random_program(rng, depth - 1)
        return (lambda g, xs: f(g, a(g, xs))), (lambda ts: tf(ta(ts)))
    f, tf = BINARY[int(rng.integers(0, len(BINARY)))]
    a, ta = random_program(rng, depth - 1)
    b, tb = random_program(rng, depth - 1)
    return (lambda g, xs: f(g, a(g, xs), b(g, xs))), (lambda ts: tf(ta(ts), tb(ts)))


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("unknown", [False, True])
def test_random_composition_matches_torch(seed, unknown):
    rng = np.random.default_rng(seed)
    build, tbuild = random_program(rng, depth=3)
    xs_np = [rng.standard_normal((4, 4)), rng.standard_normal((4, 4))]
    g = mg.Graph()
    shape = (None, None) if unknown else (4, 4)
    xs = [g.placeholder(shape, mg.float64, name=f"x{i}") for i in range(2)]
    y = build(g, xs)
    w_np = rng.standard_normal((4, 4))
    loss = g.reduction_sum(y * g.constant(w_np), keep_dims=False)
    grads = g.gradients(loss, xs)
    # second order: gradient of <v, d loss / d x0>
    v_np = rng.standard_normal((4, 4))
    s = g.reduction_sum(grads[xs[0]] * g.constant(v_np), keep_dims=False)
    hv = g.gradients(s, xs)
    out = g.run(dict(zip(xs, xs_np)), [loss, grads[xs[0]], grads[xs[1]], hv[xs[0]], hv[xs[1]]])

    ts = [torch.tensor(a, requires_grad=True) for a in xs_np]
    tloss = (tbuild(ts) * torch.tensor(w_np)).sum()
    tg = torch.autograd.grad(tloss, ts, create_graph=True, allow_unused=True)
    tg = [torch.zeros(4, 4, dtype=torch.float64) if t is None else t for t in tg]
    ts_ = (tg[0] * torch.tensor(v_np)).sum()
    th = torch.autograd.grad(ts_, ts, allow_unused=True) if ts_.requires_grad else (None, None)
    th = [np.zeros((4, 4)) if t is None else t.detach().numpy() for t in th]

    np.testing.assert_allclose(out[loss].numpy(), tloss.item(), rtol=1e-9, atol=1e-9)
    for k, x in enumerate(xs):
        np.testing.assert_allclose(out[grads[x]].numpy(), tg[k].detach().numpy(), rtol=1e-8, atol=1e-9,
                                   err_msg=f"first order d/dx{k}")
        np.testing.assert_allclose(out[hv[x]].numpy(), th[k], rtol=1e-7, atol=1e-8, err_msg=f"second order d/dx{k}")
