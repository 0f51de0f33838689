"""Optimizers (mg.optimizers, several steps on a convex problem) and variables against
independent references (numpy formulas and PyTorch's optimizers), and training end to end.
The update ops themselves (stochastic_gradient_descent, momentum, adam, adamw) and the losses
are rows of the conformance table (tests/conformance_nn.py)."""
import numpy as np
import pytest
import torch

import mpsgraph as mg

RNG = np.random.default_rng(7)


def quad_problem(g, w0):
    """loss = sum((w - target)^2 * scale): a convex problem with a known gradient."""
    w = g.variable(w0.copy(), name="w")
    target = RNG.standard_normal(w0.shape)
    scale = RNG.uniform(0.5, 2.0, w0.shape)
    loss = g.reduction_sum(g.square(w - g.constant(target)) * g.constant(scale), keep_dims=False)
    return w, loss, lambda wv: 2 * (wv - target) * scale


def run_steps(g, loss, ops, n):
    exe = g.compile({}, [loss], target_operations=ops)
    for _ in range(n):
        exe.run([])


def test_sgd_matches_numpy():
    g = mg.Graph()
    w0 = RNG.standard_normal((3, 2))
    w, loss, grad = quad_problem(g, w0)
    ops = mg.optimizers.SGD(lr=0.05).minimize(g, loss, [w])
    ref = w0.copy()
    for _ in range(5):
        ref = ref - 0.05 * grad(ref)
    run_steps(g, loss, ops, 5)
    np.testing.assert_allclose(w.value.numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_matches_torch(nesterov):
    g = mg.Graph()
    w0 = RNG.standard_normal((4,))
    w, loss, grad = quad_problem(g, w0)
    ops = mg.optimizers.Momentum(lr=0.03, momentum=0.8, nesterov=nesterov).minimize(g, loss, [w])
    run_steps(g, loss, ops, 6)
    tw = torch.tensor(w0.copy(), requires_grad=True)
    opt = torch.optim.SGD([tw], lr=0.03, momentum=0.8, nesterov=nesterov)
    for _ in range(6):
        opt.zero_grad()
        tw.grad = torch.tensor(grad(tw.detach().numpy()))
        opt.step()
    np.testing.assert_allclose(w.value.numpy(), tw.detach().numpy(), rtol=1e-12)


def adam_reference(w, grad, steps, lr, b1, b2, eps, amsgrad=False, wd=0.0):
    """MPSGraph's (and TensorFlow's) Adam: lr_t = lr sqrt(1-b2^t) / (1-b1^t)."""
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    vmax = np.zeros_like(w)
    for t in range(1, steps + 1):
        gr = grad(w)
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        m = b1 * m + (1 - b1) * gr
        v = b2 * v + (1 - b2) * gr * gr
        vmax = np.maximum(vmax, v)
        w = w - lr * wd * w
        w = w - lr_t * m / (np.sqrt(vmax if amsgrad else v) + eps)
    return w


@pytest.mark.parametrize("amsgrad", [False, True])
def test_adam_matches_reference(amsgrad):
    g = mg.Graph()
    w0 = RNG.standard_normal((2, 3))
    w, loss, grad = quad_problem(g, w0)
    ops = mg.optimizers.Adam(lr=0.1, beta1=0.85, beta2=0.99, epsilon=1e-6, amsgrad=amsgrad).minimize(g, loss, [w])
    run_steps(g, loss, ops, 7)
    ref = adam_reference(w0.copy(), grad, 7, 0.1, 0.85, 0.99, 1e-6, amsgrad)
    np.testing.assert_allclose(w.value.numpy(), ref, rtol=1e-10)


def test_adamw_matches_reference():
    g = mg.Graph()
    w0 = RNG.standard_normal((5,))
    w, loss, grad = quad_problem(g, w0)
    ops = mg.optimizers.AdamW(lr=0.05, weight_decay=0.1).minimize(g, loss, [w])
    run_steps(g, loss, ops, 4)
    ref = adam_reference(w0.copy(), grad, 4, 0.05, 0.9, 0.999, 1e-8, wd=0.1)
    np.testing.assert_allclose(w.value.numpy(), ref, rtol=1e-10)


def test_reads_see_the_value_from_before_the_run():
    g = mg.Graph()
    v = g.variable(np.array([1.0, 2.0]))
    doubled = v * 2.0
    op = g.assign(v, v + 10.0)
    out = g.run({}, [doubled, g.read(v)], target_operations=[op])
    np.testing.assert_allclose(out[doubled].numpy(), [2.0, 4.0])
    np.testing.assert_allclose(v.value.numpy(), [11.0, 12.0])
    out = g.run({}, [doubled])
    np.testing.assert_allclose(out[doubled].numpy(), [22.0, 24.0])


def test_variable_value_is_not_a_copy_and_set_variable():
    g = mg.Graph()
    v = g.variable(np.zeros(3, np.float32))
    a = v.value.numpy()
    b = g.variable_data(v).numpy()
    assert np.shares_memory(a, b)
    g.set_variable(v, np.array([1, 2, 3], np.float32))
    out = g.run({}, [v + 1.0])
    np.testing.assert_allclose(list(out.values())[0].numpy(), [2, 3, 4])
    with pytest.raises(mg.GraphValueError, match=r"set_variable.*float32\(4,\)"):
        g.set_variable(v, np.zeros(4, np.float32))


def test_mlp_trains_on_digits_to_95_percent():
    pytest.importorskip("sklearn")
    from mpsgraph.__main__ import train_mlp
    acc = train_mlp("cpu", epochs=12, batch=64, lr=3e-3, quiet=True)
    assert acc >= 0.95
