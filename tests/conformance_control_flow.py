"""Conformance rows of the control-flow ops (if_then_else, while_loop, for_loop): graphs whose
regions hold ordinary ops, against the same computation in numpy, with finite-difference
gradient checks (tests/test_control_flow.py has the gradient-vs-PyTorch and error checks)."""
import numpy as np

from conformance import FLOATS, SINTS, Case, Grad, dom, row


def _if_build(g, x, y):
    return g.if_then_else(g.reduction_sum(x, keep_dims=False) > 0, lambda: x * y + x, lambda: x - y)


def _if_ref(x, y):
    return x * y + x if x.sum() > 0 else x - y


row("if_then_else", _if_build, _if_ref, FLOATS + SINTS[2:], [
    Case(((3, 4), (3, 4)), label="then or else by the drawn sign"),
    Case(values=([1.0, 2.0, 3.0], [0.5, -1.0, 2.0]), label="then"),
    Case(values=([-1.0, -2.0, 1.0], [0.5, -1.0, 2.0]), label="else"),
    Case(((2, 3), (3,)), label="broadcast inside a branch"),
    Case(((), ()), label="rank-0"),
    Case(((0, 3), (0, 3)), label="zero-size: else"),
], doms=dom(lo=-2, hi=2, ilo=-5, ihi=5), covers=("if_then_else",),
    tol={"float16": (4e-3, 2e-3), "bfloat16": (3e-2, 2e-2)},  # two roundings in the then branch
    grad=Grad(cases=(0, 1, 2, 3), second_order=(1, 2), unknown_dims=(0,)))


def _nested_if_build(g, x):
    s = g.reduction_sum(x, keep_dims=False)
    return g.if_then_else(s > 0, lambda: g.if_then_else(s > 1, lambda: x * 3.0, lambda: x * x),
                          lambda: g.exponent(x))


def _nested_if_ref(x):
    s = x.sum()
    return (x * 3 if s > 1 else x * x) if s > 0 else np.exp(x)


row("if_then_else_nested", _nested_if_build, _nested_if_ref, ("float32", "float64"), [
    Case(values=([1.0, 2.0],)), Case(values=([0.25, 0.5],)), Case(values=([-1.0, 0.5],))],
    covers=("if_then_else",), grad=Grad(cases=(0, 1, 2), second_order=True))


def _for_build(g, x, w, n):
    return g.for_loop(n, [x], lambda i, v: [g.tanh(v * w) + g.cast(i, x.dtype) * 0.1])[0]


def _for_ref(x, w, n):
    v = x
    for i in range(n):
        v = np.tanh(v * w) + i * 0.1
    return v


row("for_loop", _for_build, _for_ref, ("float32", "float64"), [
    Case(((3, 4), (4,)), {"n": 3}), Case(((5,), (5,)), {"n": 0}, label="no trips"),
    Case(((2, 2), ()), {"n": 7}), Case(((0, 2), (2,)), {"n": 2}, label="zero-size"),
    Case(((), ()), {"n": 1}, label="rank-0")],
    covers=("for_loop",), grad=Grad(cases=(0, 1, 2), unknown_dims=(0,)))


def _while_build(g, x, c):
    # doubles-ish until the norm passes 10: the trip count depends on the values
    return g.while_loop([x], lambda v: g.reduction_sum(v * v, keep_dims=False) < 100.0,
                        lambda v: [v * c + 0.25])[0]


def _while_ref(x, c):
    v = x
    while (v * v).sum() < 100:
        v = v * c + 0.25
    return v


row("while_loop", _while_build, _while_ref, ("float32", "float64"), [
    Case(((3,), ()), doms=(dom(lo=0.5, hi=1.0), dom(lo=1.5, hi=1.9))),
    Case(values=([20.0, 1.0], 2.0), label="no trips"),
    Case(((2, 2), (2,)), doms=(dom(lo=0.5, hi=1.5), dom(lo=1.6, hi=2.0)))],
    covers=("while_loop",), grad=Grad(cases=(0, 1, 2), unknown_dims=(0,)))
