"""Conformance rows of the NN families: activations, softmax and losses, normalisation,
convolution, pooling, resize, optimizer updates and random numbers (imported by conformance.py;
the rows join conformance.ROWS, so tests/test_conformance.py runs them on every device, with
static and None placeholder dims, and their gradient checks).

References are independent of mpsgraph: numpy formulas (brute-force pooling windows, resize
weights from exact fractions, the optimizers' documented update rules) and PyTorch
(torch.nn.functional, torch.optim; TorchRef rows also check every gradient against
torch.autograd). Random numbers have no value reference: their rows check the distribution of
fixed-seed draws (support, moments, Kolmogorov-Smirnov bounds; `stat_check`).
"""
import functools
import itertools
import math
from fractions import Fraction

import numpy as np

from conformance import (ALL, FLOATS, HALF, Case, D, Dom, Grad, TorchRef, _CallDom, _COMPOSITE_TOL, _INF, _NAN,
                         _axes, _erf, dom, np_dtype, round_to_half, row, torch_module)


def _F():
    return torch_module().nn.functional


class _Distinct(Dom):
    """Values without ties, at least 0.37 apart (max pooling, max/min kinks)."""

    def draw(self, rng, shape, dtype):
        n = int(np.prod(shape))
        return (rng.permutation(n).reshape(shape) * 0.37 - n * 0.15).astype(np_dtype(dtype))


class _Away(Dom):
    """Values in [-3, 3] at least 0.15 away from 0 (kinks of leaky_relu, elu, softsign...)."""

    def draw(self, rng, shape, dtype):
        x = rng.uniform(-3, 3, shape)
        return np.where(np.abs(x) < 0.15, np.where(x < 0, -0.15, 0.15) + x, x).astype(np_dtype(dtype))


DISTINCT = _Distinct()
AWAY = _Away()
NORMAL = _CallDom(lambda rng, shape, dtype: rng.standard_normal(shape).astype(np_dtype(dtype)))
POS = dom(lo=0.2, hi=2.0)
# composites and accumulations: halves round at every step
NN_TOL = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2), "float32": (2e-5, 2e-5), "float64": (1e-11, 1e-12)}


def _dirichlet(rng, shape, dtype):
    """Probability rows (labels of softmax_cross_entropy) along the last axis."""
    if 0 in shape:
        return np.zeros(shape, np_dtype(dtype))
    return rng.dirichlet(np.ones(shape[-1]), shape[:-1]).astype(np_dtype(dtype))


PROBS = _CallDom(_dirichlet)


# ----------------------------------------------------------------------------------------
# activations (composites)

_SELU_A, _SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def _reduce(v, reduction):
    return {"none": v, "sum": np.sum(v), "mean": np.mean(v)}[reduction]


_ACT_CASES = [Case(((2, 3),)), Case(((),)), Case(((0, 4),)), Case(((40, 50),))]
_ACT_SPECIAL = [Case(values=([_NAN, _INF, -_INF, 0.0, -0.0, 30.0, -30.0, 1e-3],), dtypes=FLOATS, label="special")]


def activation(name, ref, cases=None, grad=None, **kw):
    """grad: the Grad spec (default: finite differences of the first case); False: none (aliases)."""
    cases = list(cases if cases is not None else _ACT_CASES)
    return row(name, name, ref, FLOATS, cases, tol=kw.pop("tol", _COMPOSITE_TOL), doms=kw.pop("doms", dom(lo=-5, hi=5)),
               grad=None if grad is False else grad or Grad(), **kw)


activation("elu", lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(x)),
           _ACT_CASES + [Case(((3, 4),), {"alpha": 0.3})] + _ACT_SPECIAL, grad=Grad(doms=AWAY))
activation("selu", lambda x: _SELU_S * np.where(x > 0, x, _SELU_A * np.expm1(x)), _ACT_CASES + _ACT_SPECIAL,
           grad=Grad(doms=AWAY))
activation("gelu", lambda x, approximate="none": x * 0.5 * (1 + _erf(x / np.sqrt(2.0))) if approximate == "none" else
           0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
           _ACT_CASES + [Case(((3, 4),), {"approximate": "tanh"}, label="tanh")], grad=Grad(cases=(0, "tanh")))
activation("hard_sigmoid", lambda x, alpha=1 / 6, beta=0.5: np.clip(alpha * x + beta, 0, 1),
           _ACT_CASES + [Case(((3, 4),), {"alpha": 0.2, "beta": 0.4})] + _ACT_SPECIAL,
           grad=Grad(doms=dom(lo=-2.5, hi=2.5)))
activation("hard_swish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1), doms=dom(lo=-8, hi=8),
           grad=Grad(doms=dom(lo=-2.5, hi=2.5)))
activation("leaky_relu", lambda x, alpha=0.01: np.where(x >= 0, x, alpha * x),
           _ACT_CASES + [Case(((3, 4),), {"alpha": 0.2}, label="alpha")] + _ACT_SPECIAL,
           grad=Grad(cases=("alpha",), doms=AWAY))
activation("log_sigmoid", lambda x: -np.logaddexp(0, -x), _ACT_CASES + _ACT_SPECIAL, doms=dom(lo=-20, hi=20),
           grad=Grad(doms=NORMAL))
activation("mish", lambda x: x * np.tanh(np.logaddexp(0, x)))
activation("silu", lambda x: x / (1 + np.exp(-x)))
activation("swish", lambda x: x / (1 + np.exp(-x)), [Case(((2, 3),))], grad=False)
activation("softplus", lambda x, beta=1.0: np.logaddexp(0, beta * x) / beta,
           _ACT_CASES + [Case(((3, 4),), {"beta": 2.0}, label="beta")] + _ACT_SPECIAL, doms=dom(lo=-20, hi=20),
           grad=Grad(cases=("beta",), doms=NORMAL))
activation("softsign", lambda x: x / (1 + np.abs(x)), _ACT_CASES + _ACT_SPECIAL, grad=Grad(doms=AWAY))
# Tails: numpy/torch keep full relative precision here (log1p/expm1); the relative error
# must stay within a few ulps of float32/float64 even where the result is tiny.
_TAIL_TOL = {"float32": (1e-5, 0.0), "float64": (1e-10, 0.0)}
row("softplus_tail", "softplus", lambda x: np.logaddexp(0, x), ("float32", "float64"), [Case(((50,),))],
    doms=dom(lo=-30, hi=-10), tol=_TAIL_TOL)
row("log_sigmoid_tail", "log_sigmoid", lambda x: -np.logaddexp(0, -x), ("float32", "float64"), [Case(((50,),))],
    doms=dom(lo=10, hi=30), tol=_TAIL_TOL)
row("mish_tail", "mish", lambda x: x * np.tanh(np.logaddexp(0, x)), ("float32", "float64"), [Case(((50,),))],
    doms=dom(lo=-30, hi=-10), tol=_TAIL_TOL)
row("elu_near_zero", "elu", lambda x: np.expm1(x), ("float32", "float64"), [Case(((50,),))],
    doms=dom(lo=-1e-3, hi=-1e-7), tol=_TAIL_TOL)
row("selu_near_zero", "selu", lambda x: _SELU_S * _SELU_A * np.expm1(x), ("float32", "float64"), [Case(((50,),))],
    doms=dom(lo=-1e-3, hi=-1e-7), tol=_TAIL_TOL)
row("prelu", "prelu", lambda x, a: np.where(x >= 0, x, a * x), FLOATS,
    [Case(((2, 3), (3,))), Case(((2, 3), ())), Case(((4, 3, 2), (3, 1)))], tol=_COMPOSITE_TOL,
    grad=Grad(doms=(AWAY, dom(lo=0.1, hi=0.3))))


# PyTorch's activations: values, and gradients against torch.autograd (float32/float64, every device)
def _torch_act(name, fn, cases=None, doms=None, vjp_tol=None):
    cases = cases if cases is not None else [Case(((3, 7),)), Case(((),)), Case(((0, 2),)), Case(((40, 50),))]
    return row(name + "_vs_torch", name, TorchRef(fn), FLOATS, cases, tol=NN_TOL, doms=doms or dom(lo=-5, hi=5),
               grad=Grad(cases=(), vjp_tol=vjp_tol or {}))


_torch_act("elu", lambda x, alpha=1.0: _F().elu(x, alpha), [Case(((3, 7),)), Case(((4, 5),), {"alpha": 0.3})],
           doms=AWAY)
_torch_act("selu", lambda x: _F().selu(x), doms=AWAY)
_torch_act("gelu", lambda x, approximate="none": _F().gelu(x, approximate=approximate),
           [Case(((3, 7),)), Case(((4, 5),), {"approximate": "tanh"})])
# torch: alpha 1/6, beta 1/2; its backward multiplies by the float32 constant 1.0f / 6 even in
# float64 (2.98e-8 relative), which the float64 gradient tolerance allows for
_torch_act("hard_sigmoid", lambda x: _F().hardsigmoid(x), doms=dom(lo=-2.9, hi=2.9), vjp_tol={"float64": (1e-7, 1e-12)})
_torch_act("hard_swish", lambda x: _F().hardswish(x), doms=dom(lo=-2.9, hi=2.9))
_torch_act("leaky_relu", lambda x, alpha=0.01: _F().leaky_relu(x, alpha),
           [Case(((3, 7),)), Case(((4, 5),), {"alpha": 0.2})], doms=AWAY)
_torch_act("log_sigmoid", lambda x: _F().logsigmoid(x))
_torch_act("mish", lambda x: _F().mish(x))
_torch_act("silu", lambda x: _F().silu(x))
# torch's softplus is linear above beta * x > 20 (threshold): the domain stays below
_torch_act("softplus", lambda x, beta=1.0: _F().softplus(x, beta), [Case(((3, 7),)), Case(((4, 5),), {"beta": 2.0})])
_torch_act("softsign", lambda x: _F().softsign(x), doms=AWAY)


# ----------------------------------------------------------------------------------------
# softmax and losses

_LOSS_TOL = dict(_COMPOSITE_TOL, float16=(1e-2, 1e-2), bfloat16=(5e-2, 5e-2))
for _sm, _ref in [("softmax", lambda x, axis=-1: np.exp(_log_softmax(x, axis))), ("log_softmax", _log_softmax)]:
    row(_sm, _sm, _ref, FLOATS, [Case(((2, 5),)), Case(((3, 4),), {"axis": 0}), Case(((2, 3, 4),), {"axis": 1}),
                                 Case(((0, 3),)), Case(((5,),)), Case(values=([[1000.0, 1000.0, -1000.0]],), label="stable")],
        tol=_COMPOSITE_TOL, doms=dom(lo=-5, hi=5), grad=Grad(cases=(0, 1), second_order=True))
row("mean_squared_error", "mean_squared_error", lambda p, l, reduction="mean": _reduce((p - l) ** 2, reduction), FLOATS,
    [Case(((4, 5), (4, 5))), Case(((4, 5), (4, 5)), {"reduction": "sum"}), Case(((4, 5), (4, 5)), {"reduction": "none"})],
    tol=_LOSS_TOL, grad=Grad(cases=(0, 2)))
row("sigmoid_cross_entropy", "sigmoid_cross_entropy",
    lambda x, z, reduction="mean": _reduce(np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x))), reduction), FLOATS,
    [Case(((4, 5), (4, 5))), Case(((4, 5), (4, 5)), {"reduction": "sum"}), Case(((4, 5), (4, 5)), {"reduction": "none"})],
    doms=(dom(lo=-6, hi=6), dom(lo=0, hi=1)), tol=_LOSS_TOL, grad=Grad(cases=(1,)))


def _sce_ref(x, labels, axis=-1, reduction="mean"):
    per = -np.sum(labels * _log_softmax(x, axis), axis=axis, keepdims=True)
    return per if reduction == "none" else _reduce(per, reduction)


row("softmax_cross_entropy", "softmax_cross_entropy", _sce_ref, FLOATS,
    [Case(((4, 5), (4, 5))), Case(((4, 5), (4, 5)), {"reduction": "sum"}), Case(((4, 5), (4, 5)), {"reduction": "none"}),
     Case(((3, 4), (3, 4)), {"axis": 0, "reduction": "none"})],
    doms=(dom(lo=-4, hi=4), dom(lo=0, hi=1)), tol=_LOSS_TOL,
    grad=Grad(cases=(2,), second_order=True, doms=(NORMAL, PROBS)))


def _t_ce(x, p, axis=-1, reduction="mean"):
    """PyTorch's cross_entropy with probability targets; mpsgraph keeps the reduced axis for 'none'."""
    ax = axis % x.ndim
    xm, pm = x.movedim(ax, 1), p.movedim(ax, 1)  # torch's class dim is 1
    out = _F().cross_entropy(xm, pm, reduction=reduction)
    return out.unsqueeze(ax) if reduction == "none" else out


_LOSS_CASES = [Case(((5, 4), (5, 4))), Case(((5, 4), (5, 4)), {"reduction": "sum"}),
               Case(((5, 4), (5, 4)), {"reduction": "none"})]
row("softmax_cross_entropy_vs_torch", "softmax_cross_entropy", TorchRef(_t_ce), FLOATS,
    _LOSS_CASES + [Case(((4, 6), (4, 6)), {"axis": 0, "reduction": "none"}), Case(((0, 3), (0, 3)), {"reduction": "sum"})],
    doms=(NORMAL, PROBS), tol=_LOSS_TOL, grad=Grad(cases=()))
row("sigmoid_cross_entropy_vs_torch", "sigmoid_cross_entropy",
    TorchRef(lambda x, z, reduction="mean": _F().binary_cross_entropy_with_logits(x, z, reduction=reduction)), FLOATS,
    _LOSS_CASES, doms=(NORMAL, dom(lo=0, hi=1)), tol=_LOSS_TOL, grad=Grad(cases=()))
row("mean_squared_error_vs_torch", "mean_squared_error",
    TorchRef(lambda p, l, reduction="mean": _F().mse_loss(p, l, reduction=reduction)), FLOATS, _LOSS_CASES,
    doms=NORMAL, tol=_LOSS_TOL, grad=Grad(cases=()))
for _sm in ("softmax", "log_softmax"):
    row(_sm + "_vs_torch", _sm, TorchRef(lambda x, axis=-1, _f=_sm: getattr(_F(), _f)(x, dim=axis)), FLOATS,
        [Case(((2, 5),)), Case(((3, 4),), {"axis": 0}), Case(((2, 3, 4),), {"axis": 1}), Case(((0, 3),))],
        doms=dom(lo=-5, hi=5), tol=_COMPOSITE_TOL, grad=Grad(cases=()))


# ----------------------------------------------------------------------------------------
# normalisation (composites; population variance)

_NORM_TOL = {"float16": (2e-2, 2e-2), "bfloat16": (8e-2, 8e-2), "float32": (1e-4, 1e-5), "float64": (1e-10, 1e-12)}


def _moments(x, axes):
    return np.mean(x, axis=axes, keepdims=True), np.var(x, axis=axes, keepdims=True)


def _layer_norm(x, gamma, beta, axes=(-1,), epsilon=1e-5):
    m, v = _moments(x, _axes(axes))
    return (x - m) / np.sqrt(v + epsilon) * gamma + beta


def _batch_norm(x, gamma, beta, rm, rv, training=True, epsilon=1e-5, channel_axis=-1):
    ca = channel_axis % x.ndim
    bshape = [1] * x.ndim
    bshape[ca] = x.shape[ca]
    gamma, beta, rm, rv = (a.reshape(bshape) for a in (gamma, beta, rm, rv))
    if training:
        rm, rv = _moments(x, tuple(i for i in range(x.ndim) if i != ca))
    return (x - rm) / np.sqrt(rv + epsilon) * gamma + beta


def _group_norm(x, gamma, beta, num_groups, epsilon=1e-5, data_layout="NHWC"):
    if data_layout == "NCHW":
        return np.moveaxis(_group_norm(np.moveaxis(x, 1, -1), gamma, beta, num_groups, epsilon), -1, 1)
    c = x.shape[-1]
    xs = x.reshape(x.shape[:-1] + (num_groups, c // num_groups))
    axes = tuple(range(1, xs.ndim - 2)) + (xs.ndim - 1,)
    m, v = _moments(xs, axes)
    return ((xs - m) / np.sqrt(v + epsilon)).reshape(x.shape) * gamma + beta


def _instance_norm(x, gamma, beta, epsilon=1e-5, data_layout="NHWC"):
    if data_layout == "NCHW":
        return np.moveaxis(_instance_norm(np.moveaxis(x, 1, -1), gamma, beta, epsilon), -1, 1)
    m, v = _moments(x, tuple(range(1, x.ndim - 1)))
    return (x - m) / np.sqrt(v + epsilon) * gamma + beta


def _lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0, data_layout="NCHW"):
    ca = 1 if data_layout.startswith("NC") else x.ndim - 1  # NCHW, NCL, ...: channels second
    sq = np.moveaxis(x * x, ca, 0)
    c = sq.shape[0]
    pad = np.concatenate([np.zeros((size // 2,) + sq.shape[1:]), sq, np.zeros(((size - 1) // 2,) + sq.shape[1:])])
    acc = np.stack([pad[i:i + size].sum(axis=0) for i in range(c)])
    return x / np.moveaxis((bias + alpha / size * acc) ** beta, 0, ca)


def _normalization(x, mean, variance, gamma, beta, epsilon=1e-5):
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


row("layer_normalization", "layer_normalization", _layer_norm, FLOATS,
    [Case(((4, 6), (6,), (6,))), Case(((2, 3, 4), (3, 4), (3, 4)), {"axes": (1, 2)}),
     Case(((2, 3, 4), (4,), ()), {"epsilon": 1e-3}), Case(((0, 5), (5,), (5,)))], tol=_NORM_TOL,
    grad=Grad(cases=(0,), second_order=True))
row("batch_normalization", "batch_normalization", _batch_norm, FLOATS,
    [Case(((4, 5, 3), (3,), (3,), (3,), (3,))), Case(((3, 2, 4), (2,), (2,), (2,), (2,)), {"channel_axis": 1}),
     Case(((6, 3), (3,), (3,), (3,), (3,)), {"training": False}),
     Case(((2, 3, 2, 2), (3,), (3,), (3,), (3,)), {"training": False, "channel_axis": 1, "epsilon": 1e-3})],
    doms=(D, D, D, D, POS), tol=_NORM_TOL, grad=Grad(cases=(1, 2), second_order=(1,)))
# the affine parameters are optional (None: gamma 1, beta 0)
row("batch_normalization_without_affine", lambda g, x, m, v, **a: g.batch_normalization(x, None, None, m, v, **a),
    lambda x, m, v, **a: _batch_norm(x, np.ones_like(m), np.zeros_like(m), m, v, **a), FLOATS,
    [Case(((3, 2), (2,), (2,)), {"training": False}), Case(((4, 3), (3,), (3,)), {"training": True})],
    doms=(D, D, POS), tol=_NORM_TOL, grad=Grad(cases=(0,)))
row("group_normalization", "group_normalization", _group_norm, FLOATS,
    [Case(((2, 3, 3, 4), (4,), (4,)), {"num_groups": 2}), Case(((2, 5, 1, 6), (6,), (6,)), {"num_groups": 3}),
     Case(((2, 4, 3, 3), (4,), (4,)), {"num_groups": 4, "data_layout": "NCHW"}),
     Case(((1, 2, 2, 4), (4,), (4,)), {"num_groups": 1}), Case(((2, 2, 2, 4), (4,), (4,)), {"num_groups": 2}, label="fd")],
    tol=_NORM_TOL, none_variant=False, grad=Grad(cases=("fd",)))
# documented: group norm needs static channel and spatial dims; the batch may be None
row("group_normalization_none_batch", lambda g, x, gm, bt, **a: g.group_normalization(
    g.reshape(x, (-1, 3, 3, 4)), gm, bt, **a), _group_norm, ("float32",),
    [Case(((2, 3, 3, 4), (4,), (4,)), {"num_groups": 2})], tol=_NORM_TOL)
row("instance_normalization", "instance_normalization", _instance_norm, FLOATS,
    [Case(((2, 3, 3, 4), (4,), (4,))), Case(((2, 2, 3, 2), (2,), (2,)), {"data_layout": "NCHW"})], tol=_NORM_TOL,
    grad=Grad(cases=(1,)))
row("local_response_normalization", "local_response_normalization", _lrn, FLOATS,
    [Case(((2, 7, 3, 3),)), Case(((2, 4, 3, 1),), {"size": 3, "alpha": 0.5, "beta": 0.5, "bias": 2.0}),
     Case(((1, 3, 3, 6),), {"size": 4, "alpha": 0.3, "data_layout": "NHWC"}),
     Case(((2, 4, 3),), {"size": 3, "alpha": 0.5, "data_layout": "NCL"}, label="NCL")], tol=_NORM_TOL,
    none_variant=False,  # documented: the channel dim must be known
    grad=Grad(cases=("NCL",)))
row("moments", "moments", lambda x, axes=None: _moments(x, _axes(axes)), FLOATS,
    [Case(((4, 3),), {"axes": 0}), Case(((2, 3, 4),), {"axes": (0, 2)}), Case(((5,),), {"axes": -1})], tol=_NORM_TOL,
    grad=Grad())
row("normalization", "normalization", _normalization, FLOATS,
    [Case(((4, 3), (3,), (3,), (3,), (3,))), Case(((2, 3), (), (), (), ()), {"epsilon": 0.1})],
    doms=(D, D, POS, D, D), tol=_NORM_TOL, grad=Grad())


def _t_bn(x, gamma, beta, rm, rv, training=True, epsilon=1e-5, channel_axis=-1):
    xm = x.movedim(channel_axis % x.ndim, 1)
    y = _F().batch_norm(xm, None if training else rm, None if training else rv, gamma, beta, training=training,
                        eps=epsilon)
    return y.movedim(1, channel_axis % x.ndim)


def _t_gn(x, gamma, beta, num_groups, epsilon=1e-5, data_layout="NHWC"):
    xm = x if data_layout == "NCHW" else x.movedim(-1, 1)
    y = _F().group_norm(xm, num_groups, gamma, beta, eps=epsilon)
    return y if data_layout == "NCHW" else y.movedim(1, -1)


def _t_in(x, gamma, beta, epsilon=1e-5, data_layout="NHWC"):
    xm = x if data_layout == "NCHW" else x.movedim(-1, 1)
    y = _F().instance_norm(xm, weight=gamma, bias=beta, eps=epsilon)
    return y if data_layout == "NCHW" else y.movedim(1, -1)


row("layer_normalization_vs_torch", "layer_normalization",
    TorchRef(lambda x, gm, bt, axes=(-1,), epsilon=1e-5: _F().layer_norm(x, tuple(gm.shape), gm, bt, eps=epsilon)),
    FLOATS, [Case(((4, 6), (6,), (6,))), Case(((2, 3, 4), (3, 4), (3, 4)), {"axes": (1, 2), "epsilon": 1e-3})],
    tol=_NORM_TOL, grad=Grad(cases=()))
row("batch_normalization_vs_torch", "batch_normalization", TorchRef(_t_bn), FLOATS,
    [Case(((4, 5, 3), (3,), (3,), (3,), (3,))), Case(((4, 3, 5), (3,), (3,), (3,), (3,)), {"channel_axis": 1}),
     Case(((6, 3), (3,), (3,), (3,), (3,)), {"training": False, "epsilon": 1e-3})],
    doms=(D, D, D, D, POS), tol=_NORM_TOL,
    grad=Grad(cases=(), wrt=(0, 1, 2)))  # torch does not differentiate the running statistics
row("group_normalization_vs_torch", "group_normalization", TorchRef(_t_gn), FLOATS,
    [Case(((2, 3, 3, 4), (4,), (4,)), {"num_groups": 2}),
     Case(((2, 6, 3, 2), (6,), (6,)), {"num_groups": 3, "data_layout": "NCHW"})],
    tol=_NORM_TOL, none_variant=False, grad=Grad(cases=()))
row("instance_normalization_vs_torch", "instance_normalization", TorchRef(_t_in), FLOATS,
    [Case(((2, 3, 3, 4), (4,), (4,))), Case(((2, 4, 3, 3), (4,), (4,)), {"data_layout": "NCHW"})],
    tol=_NORM_TOL, grad=Grad(cases=()))
row("local_response_normalization_vs_torch", "local_response_normalization",
    TorchRef(lambda x, size=5, alpha=1e-4, beta=0.75, bias=1.0: _F().local_response_norm(x, size, alpha, beta, bias)),
    FLOATS, [Case(((2, 7, 3, 3),)), Case(((2, 4, 3, 1),), {"size": 3, "alpha": 0.5, "beta": 0.5, "bias": 2.0})],
    tol=_NORM_TOL, none_variant=False, grad=Grad(cases=()))


# ----------------------------------------------------------------------------------------
# convolution: PyTorch references (F.conv1d/2d/3d on an explicitly padded input,
# F.conv_transpose2d, autograd for the gradient primitives); every row also checks its
# gradients against torch.autograd, and finite differences on its small cases

_CONV_TOL = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2), "float32": (2e-5, 2e-5), "float64": (1e-11, 1e-11)}


def _ints(v, k, default):
    """An ints attribute: omitted -> default per dim; one value -> every dim."""
    if v is None or (isinstance(v, (tuple, list)) and len(v) == 0):
        return (default,) * k
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    return v * k if len(v) == 1 else v


def _pads(v, k):
    """Explicit padding: (before, after) per dim in dim order; one value: everywhere; k values
    (k > 1): symmetric per dim; omitted: none."""
    v = () if v is None else tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(v) == 0:
        return (0,) * (2 * k)
    if len(v) == 1:
        return v * (2 * k)
    if len(v) == k:
        return tuple(x for p in v for x in (p, p))
    return v


def same_pads(in_sp, k_sp, strides, dil, lower=False):
    """TensorFlow SAME (odd padding after) or ONNX SAME_LOWER (odd padding before), flat."""
    pads = []
    for n, k, s, d in zip(in_sp, k_sp, strides, dil):
        out = -(-n // s)
        total = max((out - 1) * s + d * (k - 1) + 1 - n, 0)
        small = total // 2
        pads += [total - small, small] if lower else [small, total - small]
    return tuple(pads)


def _conv_geometry(in_sp, k_sp, strides, dilation_rates, padding, padding_style):
    k = len(in_sp)
    s, d = _ints(strides, k, 1), _ints(dilation_rates, k, 1)
    if padding_style == "valid":
        p = (0,) * (2 * k)
    elif padding_style in ("same", "same_lower"):
        p = same_pads(in_sp, k_sp, s, d, padding_style == "same_lower")
    else:
        p = _pads(padding, k)
    return s, d, p


def _torch_pad_arg(pads):
    """Flat (before, after) per dim -> F.pad's last-dim-first order."""
    k = len(pads) // 2
    return [p for i in reversed(range(k)) for p in (pads[2 * i], pads[2 * i + 1])]


def _t_conv(x, w, strides=(), dilation_rates=(), padding=(), padding_style="explicit", groups=1):
    """Channels-first N-d convolution: x (N, C, *sp), w (O, C/groups, *k)."""
    torch = torch_module()
    k = x.ndim - 2
    s, d, p = _conv_geometry(tuple(x.shape[2:]), tuple(w.shape[2:]), strides, dilation_rates, padding, padding_style)
    out_sp = [(n + p[2 * i] + p[2 * i + 1] - d[i] * (w.shape[2 + i] - 1) - 1) // s[i] + 1
              for i, n in enumerate(x.shape[2:])]
    if x.shape[1] == 0 or w.shape[0] == 0:  # torch has no empty channel dims: zeros (nothing to sum)
        return torch.zeros((x.shape[0], w.shape[0], *out_sp), dtype=x.dtype) + 0 * (x.sum() + w.sum())
    conv = {1: _F().conv1d, 2: _F().conv2d, 3: _F().conv3d}[k]
    return conv(_F().pad(x, _torch_pad_arg(p)), w, stride=s, dilation=d, groups=groups)


def _t_conv_data_gradient(dy, w, like, source_spatial_shape=None, **kw):
    """The adjoint of _t_conv in its source (differentiable in dy and w: create_graph)."""
    torch = torch_module()
    shape = tuple(like.shape) if source_spatial_shape is None else \
        (dy.shape[0], w.shape[1] * kw.get("groups", 1), *source_spatial_shape)
    x = torch.zeros(shape, dtype=dy.dtype, requires_grad=True)
    return torch.autograd.grad(_t_conv(x, w, **kw), x, dy, create_graph=True)[0]


def _t_conv_weights_gradient(dy, x, like, kernel_spatial_shape=None, **kw):
    torch = torch_module()
    shape = tuple(like.shape) if kernel_spatial_shape is None else \
        (dy.shape[1], x.shape[1] // kw.get("groups", 1), *kernel_spatial_shape)
    w = torch.zeros(shape, dtype=dy.dtype, requires_grad=True)
    return torch.autograd.grad(_t_conv(x, w, **kw), w, dy, create_graph=True)[0]


# (source, weights, attrs): channels-first primitive
_PRIMITIVE = [
    ((2, 3, 7, 8), (4, 3, 3, 2), dict(strides=(2, 1), dilation_rates=(1, 2), padding=(1, 0, 2, 1))),
    ((1, 4, 5, 5), (6, 2, 3, 3), dict(padding=(1, 1, 1, 1), groups=2)),
    ((3, 6, 9, 7), (6, 1, 3, 3), dict(strides=(2, 2), padding=(0, 2, 1, 1), groups=6)),  # depthwise
    ((2, 2, 6, 6), (3, 2, 1, 1), {}),  # 1x1 direct
    ((2, 2, 6, 6), (3, 2, 1, 1), dict(strides=(2, 3))),  # 1x1 strided
    ((2, 2, 6, 6), (3, 2, 1, 1), dict(padding=(1, 0, 0, 2))),  # 1x1 padded
    ((2, 3, 10, 11), (2, 3, 4, 5), dict(strides=(3, 2), dilation_rates=(2, 1), padding=(3, 3, 0, 4))),
    ((1, 2, 3, 3), (2, 2, 5, 5), dict(padding=(1, 1, 1, 1))),  # kernel hangs over both sides
    ((1, 2, 4, 4), (2, 2, 2, 2), dict(strides=(5, 5))),  # stride larger than the input
    ((2, 3, 9), (4, 3, 3), dict(strides=(2,), dilation_rates=(2,), padding=(1, 2))),  # 1-D
    ((2, 4, 5, 6, 7), (4, 2, 2, 3, 2), dict(strides=(1, 2, 1), dilation_rates=(2, 1, 1), padding=(1, 0, 0, 1, 1, 1),
                                            groups=2)),  # 3-D grouped
    ((2, 3, 7, 8), (4, 3, 3, 2), dict(strides=(2, 1), dilation_rates=(1, 2), padding_style="valid")),
    ((2, 3, 7, 8), (4, 3, 3, 2), dict(strides=(2, 1), dilation_rates=(1, 2), padding_style="same")),
    ((2, 3, 7, 8), (4, 3, 3, 2), dict(strides=(2, 1), dilation_rates=(1, 2), padding_style="same_lower")),
    ((1, 2, 6, 5), (3, 2, 4, 4), dict(strides=(3, 2), padding_style="same")),
    ((1, 2, 6, 5), (3, 2, 4, 4), dict(strides=(3, 2), padding_style="same_lower")),
    ((1, 2, 5, 6, 4), (2, 2, 3, 2, 3), dict(strides=(2, 2, 1), dilation_rates=(1, 2, 1), padding_style="same")),
    ((1, 2, 5, 6, 4), (2, 2, 3, 2, 3), dict(strides=(2, 2, 1), dilation_rates=(1, 2, 1), padding_style="same_lower")),
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), dict(strides=(1, 2, 1), padding=1)),  # one padding value: everywhere
    ((2, 2, 6), (3, 2, 2), dict(padding=(2, 1), dilation_rates=2)),  # one dilation value: every dim
]
_CONV_CASES = [Case((xs, ws), a) for xs, ws, a in _PRIMITIVE] + [
    Case(((0, 2, 4, 4), (3, 2, 3, 3)), {"padding": 1}, label="empty batch"),
    Case(((2, 0, 4, 4), (3, 0, 3, 3)), label="no input channels: zeros"),
    Case(((2, 2, 4, 4), (0, 2, 3, 3)), label="no output channels"),
    Case(((1, 1, 0, 3), (2, 1, 1, 1)), {"padding": (1, 1, 0, 0)}, label="input read only through padding"),
    # finite-difference cases (also forward cases)
    Case(((2, 2, 5, 6), (3, 2, 2, 2)), dict(strides=(2, 1), dilation_rates=(1, 2), padding=(1, 0, 2, 1)), label="fd"),
    Case(((1, 4, 5, 4), (4, 2, 3, 2)), dict(strides=2, padding_style="same", groups=2), label="fd grouped same"),
    Case(((2, 2, 6), (3, 2, 2)), dict(padding=(2, 1), dilation_rates=2), label="fd 1-d"),
    Case(((1, 2, 3, 4, 3), (2, 2, 2, 2, 2)), dict(strides=(1, 2, 1), padding=1), label="fd 3-d"),
]
row("convolution", "convolution", TorchRef(_t_conv), FLOATS, _CONV_CASES, doms=NORMAL, tol=_CONV_TOL,
    grad=Grad(cases=("fd", "fd grouped same", "fd 1-d", "fd 3-d"), second_order=("fd", "fd grouped same")))
# larger: tiles of columns (split inside an output row), the ways the CPU splits the work;
# float32 sums of up to 576 products
row("convolution_large", "convolution", TorchRef(_t_conv), ("float32", "float64"), [
    Case(((1, 64, 64, 64), (32, 64, 3, 3)), {"padding": 1}, dtypes=("float32",), label="BLAS-threaded tiles"),
    Case(((4, 8, 12, 12), (8, 4, 3, 3)), {"padding": 1, "groups": 2}, dtypes=("float32",), label="(image, group) units"),
    Case(((3, 16, 40, 40), (16, 4, 3, 3)), {"padding": 1, "groups": 4}, dtypes=("float32",)),
    Case(((1, 4, 64, 64), (4, 4, 3, 3)), {"padding": 1}, dtypes=("float32",), label="tiles of one image"),
    Case(((2, 4, 64, 64), (4, 4, 3, 3)), {"padding": 1}, dtypes=("float32",), label="whole images as units"),
    Case(((2, 16, 64, 64), (16, 16, 1, 1)), dtypes=("float32",), label="1x1 direct, tiled"),
    Case(((1, 96, 20, 20), (96, 96, 1, 1)), dtypes=("float32",), label="1x1 direct, one threaded product"),
    Case(((2, 4, 150, 140), (4, 4, 3, 3)), dict(strides=(2, 3), dilation_rates=(2, 1), padding=(2, 1, 0, 3)),
         label="large strided dilated")],
    doms=NORMAL, tol={"float32": (1e-4, 1e-3), "float64": (1e-11, 1e-11)},
    grad=Grad(cases=(), vjp_tol={"float32": (1e-4, 2e-3)}),
    none_variant=False)  # the kernels see static shapes either way; unknown dims: the row above


def _grad_primitive_cases(kind):
    """(incoming gradient, weights or source, like) for each forward case of _PRIMITIVE."""
    out = []
    for xs, ws, a in _PRIMITIVE[:11] + [_PRIMITIVE[12], _PRIMITIVE[13]]:  # explicit, same, same_lower
        s, d, p = _conv_geometry(xs[2:], ws[2:], a.get("strides"), a.get("dilation_rates"), a.get("padding"),
                                 a.get("padding_style", "explicit"))
        ys = (xs[0], ws[0]) + tuple((n + p[2 * i] + p[2 * i + 1] - d[i] * (ws[2 + i] - 1) - 1) // s[i] + 1
                                    for i, n in enumerate(xs[2:]))
        out.append(Case((ys, ws, xs) if kind == "data" else (ys, xs, ws), a))
    return out


_DATA_GRAD_CASES = _grad_primitive_cases("data") + [
    Case(((2, 3, 3, 4), (3, 2, 2, 2), (2, 2, 5, 4)), dict(strides=(2, 1), padding=(1, 1, 0, 1)), label="fd"),
    Case(((1, 3, 2, 3), (3, 2, 2, 2), (1, 2, 4, 4)), dict(strides=(2, 1)), label="fd small"),
    Case(((1, 3, 2, 3), (3, 2, 2, 2), (1, 2, 1, 1)), dict(strides=(2, 1), source_spatial_shape=(4, 4)),
         label="source_spatial_shape"),
    Case(((0, 3, 2, 3), (3, 2, 2, 2), (0, 2, 4, 4)), dict(strides=(2, 1)), label="empty batch"),
]
row("convolution_data_gradient", "convolution_data_gradient", TorchRef(_t_conv_data_gradient), FLOATS,
    _DATA_GRAD_CASES, doms=NORMAL, tol=_CONV_TOL,
    grad=Grad(cases=("fd", "fd small"), second_order=True, wrt=(0, 1)))  # like gives only a shape
_WEIGHTS_GRAD_CASES = _grad_primitive_cases("weights") + [
    Case(((1, 4, 3, 2), (1, 2, 5, 4), (4, 1, 2, 3)), dict(strides=2, groups=2, padding_style="same"), label="fd"),
    Case(((1, 3, 2, 3), (1, 2, 4, 4), (3, 2, 2, 2)), dict(strides=(2, 1)), label="fd small"),
    Case(((1, 3, 2, 3), (1, 2, 4, 4), (1, 1, 1, 1)), dict(strides=(2, 1), kernel_spatial_shape=(2, 2)),
         label="kernel_spatial_shape"),
    Case(((0, 3, 2, 3), (0, 2, 4, 4), (3, 2, 2, 2)), dict(strides=(2, 1)), label="empty batch: zeros"),
]
row("convolution_weights_gradient", "convolution_weights_gradient", TorchRef(_t_conv_weights_gradient), FLOATS,
    _WEIGHTS_GRAD_CASES, doms=NORMAL, tol=_CONV_TOL,
    grad=Grad(cases=("fd", "fd small"), second_order=True, wrt=(0, 1)))


# ---- MPSGraph-named front ends: layouts around the primitive ----

def _to_cf(x, layout):
    """NHWC / NDHWC -> channels first."""
    return x.movedim(-1, 1) if layout in ("NHWC", "NDHWC") else x


def _from_cf(y, layout):
    return y.movedim(1, -1) if layout in ("NHWC", "NDHWC") else y


def _w_to_oi(w, layout):
    """HWIO / DHWIO -> OIHW / OIDHW."""
    if layout in ("HWIO", "DHWIO"):
        k = w.ndim - 2
        return w.permute(k + 1, k, *range(k))
    return w


def _w_from_oi(w, layout):
    if layout in ("HWIO", "DHWIO"):
        k = w.ndim - 2
        return w.permute(*range(2, k + 2), 1, 0)
    return w


def _t_conv_nd_front(default_layouts):
    def ref(x, w, strides=None, dilation_rates=None, padding_style="explicit", padding=None, groups=1,
            data_layout=default_layouts[0], weights_layout=default_layouts[1]):
        y = _t_conv(_to_cf(x, data_layout), _w_to_oi(w, weights_layout), strides, dilation_rates,
                    padding if padding is not None else 0, padding_style, groups)
        return _from_cf(y, data_layout)
    return ref


def _nhwc_shape(shape, layout):
    return (shape[0],) + tuple(shape[2:]) + (shape[1],) if layout in ("NHWC", "NDHWC") else tuple(shape)


def _hwio_shape(shape, layout):
    return tuple(shape[2:]) + (shape[1], shape[0]) if layout in ("HWIO", "DHWIO") else tuple(shape)


_C2D = []
for (_xs, _ws, _a) in [((2, 4, 9, 8), (6, 2, 3, 2), dict(strides=(2, 1), dilation_rates=(1, 2), padding=(1, 0, 2, 1),
                                                          groups=2)),
                       ((1, 3, 5, 7), (4, 3, 3, 3), dict(strides=(1, 2), dilation_rates=(2, 1), padding=(2, 2, 0, 1)))]:
    for _style in ("explicit", "valid", "same"):
        for _dl in ("NHWC", "NCHW"):
            for _wl in ("HWIO", "OIHW"):
                _C2D.append(Case((_nhwc_shape(_xs, _dl), _hwio_shape(_ws, _wl)),
                                 dict(_a, padding_style=_style, data_layout=_dl, weights_layout=_wl)))
_C2D += [
    Case(((2, 6, 5, 3), (3, 3, 3, 4)), label="defaults: NHWC, HWIO, valid"),
    Case(((2, 8, 8, 4), (3, 3, 4, 6)), {"strides": (2, 2), "padding_style": "same"}, label="same, stride 2"),
    Case(((1, 4, 3, 2), (2, 2, 2, 3)), {"strides": (2, 2), "padding_style": "same"}, label="fd same"),
    Case(((0, 5, 5, 2), (3, 3, 2, 4)), {"padding_style": "same"}, label="empty batch"),
]
row("convolution_2d", "convolution_2d", TorchRef(_t_conv_nd_front(("NHWC", "HWIO"))), FLOATS, _C2D, doms=NORMAL,
    tol=_CONV_TOL, grad=Grad(cases=("fd same",), unknown_dims=True, second_order=True))
_C3D = []
for _dl, _wl in [("NDHWC", "DHWIO"), ("NCDHW", "OIDHW"), ("NDHWC", "OIDHW")]:
    for _style in ("explicit", "valid", "same"):
        _C3D.append(Case((_nhwc_shape((2, 4, 6, 5, 7), _dl), _hwio_shape((6, 2, 3, 2, 3), _wl)),
                         dict(strides=(2, 1, 2), dilation_rates=(1, 2, 1), padding=(1, 0, 0, 1, 2, 1), groups=2,
                              padding_style=_style, data_layout=_dl, weights_layout=_wl)))
_C3D += [Case(((1, 5, 4, 6, 2), (2, 3, 2, 2, 3)), {"strides": (1, 2, 1), "padding_style": "same"}, label="defaults, same"),
         Case(((1, 3, 2, 3, 2), (2, 1, 2, 2, 2)), {"padding": (0, 1, 1, 0, 0, 1)}, label="fd")]
row("convolution_3d", "convolution_3d", TorchRef(_t_conv_nd_front(("NDHWC", "DHWIO"))), FLOATS, _C3D, doms=NORMAL,
    tol=_CONV_TOL, grad=Grad(cases=("fd",)))


def _t_depthwise(x, w, strides=None, dilation_rates=None, padding_style="explicit", padding=None, data_layout="NHWC",
                 weights_layout="HWIO"):
    """TensorFlow's depthwise filter (kh, kw, C, M) (or (M, C, kh, kw)): output channel c * M + m =
    PyTorch's grouped convolution with groups = C and weight (C * M, 1, kh, kw)."""
    wt = w if weights_layout == "HWIO" else w.permute(2, 3, 1, 0)  # -> (kh, kw, C, M)
    kh, kw_, c, m = wt.shape
    wc = wt.permute(2, 3, 0, 1).reshape(c * m, 1, kh, kw_)
    y = _t_conv(_to_cf(x, data_layout), wc, strides, dilation_rates, padding if padding is not None else 0,
                padding_style, groups=c)
    return _from_cf(y, data_layout)


_DW = []
for _m in (1, 2):
    for _wl in ("HWIO", "OIHW"):
        for _dl in ("NHWC", "NCHW"):
            for _style in ("explicit", "same"):
                _DW.append(Case((_nhwc_shape((2, 3, 7, 6), _dl), (3, 2, 3, _m) if _wl == "HWIO" else (_m, 3, 3, 2)),
                                dict(strides=(2, 1), dilation_rates=(1, 2), padding=(1, 1, 0, 2), padding_style=_style,
                                     data_layout=_dl, weights_layout=_wl)))
_DW += [Case(((2, 6, 6, 4), (3, 3, 4, 2)), {"padding_style": "same"}, label="defaults, same"),
        Case(((1, 4, 3, 2), (2, 2, 2, 2)), {"padding_style": "same"}, label="fd")]
row("depthwise_convolution_2d", "depthwise_convolution_2d", TorchRef(_t_depthwise), FLOATS, _DW, doms=NORMAL,
    tol=_CONV_TOL, grad=Grad(cases=("fd",), second_order=True),
    none_variant=False)  # documented: the channel count must be known when the graph is built


def _t_conv_transpose_2d(x, w, output_shape=None, strides=(1, 1), dilation_rates=(1, 1), padding_style="explicit",
                         padding=(0, 0, 0, 0), groups=1, data_layout="NHWC", weights_layout="HWIO"):
    """PyTorch's conv_transpose2d (weights = the forward convolution's OIHW = (C_in, C_out/groups,
    kh, kw)). The result size S is output_shape's, or the smallest (in * stride for 'same'); the
    padding is the forward convolution's for a source of size S; the result is the unpadded
    transposed convolution read from `before` on (zeros past its end: rows the forward
    convolution never reads)."""
    torch = torch_module()
    xc, wc = _to_cf(x, data_layout), _w_to_oi(w, weights_layout)
    s, d = _ints(strides, 2, 1), _ints(dilation_rates, 2, 1)
    k = wc.shape[2:]
    full = _F().conv_transpose2d(xc, wc, stride=s, dilation=d, groups=groups)
    if output_shape is not None:
        S = tuple(output_shape)[-3:-1] if data_layout == "NHWC" and len(output_shape) == 4 else tuple(output_shape)[-2:]
    elif padding_style == "same":
        S = tuple(n * st for n, st in zip(xc.shape[2:], s))
    else:
        p0 = (0,) * 4 if padding_style == "valid" else _pads(padding, 2)
        S = tuple(full.shape[2 + i] - p0[2 * i] - p0[2 * i + 1] for i in range(2))
    _, _, p = _conv_geometry(S, k, s, d, padding, padding_style)
    out = torch.zeros(full.shape[:2] + tuple(S), dtype=x.dtype)
    h = min(S[0], full.shape[2] - p[0])
    w_ = min(S[1], full.shape[3] - p[2])
    out = out + _F().pad(full[:, :, p[0]:p[0] + h, p[2]:p[2] + w_], (0, S[1] - w_, 0, S[0] - h))
    return _from_cf(out, data_layout)


_CT = []
for (_xs, _ws, _s, _d, _p, _op, _g) in [((2, 4, 5, 6), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), (0, 0), 1),
                                        ((2, 4, 5, 6), (4, 3, 3, 3), (2, 3), (1, 1), (1, 0), (1, 2), 1),
                                        ((1, 6, 4, 4), (6, 2, 3, 2), (3, 2), (2, 1), (2, 1), (2, 1), 3),
                                        ((1, 2, 3, 3), (2, 5, 2, 2), (1, 1), (1, 1), (0, 0), (0, 0), 1),
                                        ((2, 3, 4, 5), (3, 2, 1, 1), (2, 2), (1, 1), (0, 0), (1, 0), 1)]:
    _S = tuple((n - 1) * st - 2 * pp + dd * (kk - 1) + op + 1
               for n, st, pp, dd, kk, op in zip(_xs[2:], _s, _p, _d, _ws[2:], _op))  # PyTorch's output size
    for _dl, _wl in [("NCHW", "OIHW"), ("NHWC", "HWIO")]:
        _a = dict(strides=_s, dilation_rates=_d, padding=(_p[0], _p[0], _p[1], _p[1]), groups=_g, data_layout=_dl,
                  weights_layout=_wl)
        _full = _nhwc_shape((_xs[0], _ws[1] * _g) + _S, _dl)
        _CT.append(Case((_nhwc_shape(_xs, _dl), _hwio_shape(_ws, _wl)), dict(_a, output_shape=_full)))
        _CT.append(Case((_nhwc_shape(_xs, _dl), _hwio_shape(_ws, _wl)), dict(_a, output_shape=_S), label="spatial"))
        if _op == (0, 0):  # the smallest result (PyTorch's default)
            _CT.append(Case((_nhwc_shape(_xs, _dl), _hwio_shape(_ws, _wl)), _a, label="no output_shape"))
_CT += [Case(((1, 5, 4, 3), (3, 3, 2, 3)), {"strides": (2, 3), "padding_style": style}, label=style)
        for style in ("same", "valid")]
_CT += [Case(((1, 3, 2, 2), (2, 2, 3, 2)), {"strides": (2, 2), "padding": (1, 1, 0, 1)}, label="fd")]
row("convolution_transpose_2d", "convolution_transpose_2d", TorchRef(_t_conv_transpose_2d), FLOATS, _CT, doms=NORMAL,
    tol=_CONV_TOL, grad=Grad(cases=("fd",), second_order=True))


def _t_conv_2d_data_gradient(dy, w, output_shape, data_layout="NHWC", weights_layout="HWIO", **kw):
    torch = torch_module()
    x = torch.zeros(tuple(output_shape), dtype=dy.dtype, requires_grad=True)
    y = _t_conv_nd_front(("NHWC", "HWIO"))(x, w, data_layout=data_layout, weights_layout=weights_layout, **kw)
    return torch.autograd.grad(y, x, dy, create_graph=True)[0]


def _t_conv_2d_weights_gradient(dy, x, output_shape, data_layout="NHWC", weights_layout="HWIO", **kw):
    torch = torch_module()
    w = torch.zeros(tuple(output_shape), dtype=dy.dtype, requires_grad=True)
    y = _t_conv_nd_front(("NHWC", "HWIO"))(x, w, data_layout=data_layout, weights_layout=weights_layout, **kw)
    return torch.autograd.grad(y, w, dy, create_graph=True)[0]


_FRONT_GRAD = dict(strides=(2, 1), dilation_rates=(1, 2), padding=(1, 0, 1, 1), groups=2)
row("convolution_2d_data_gradient", "convolution_2d_data_gradient", TorchRef(_t_conv_2d_data_gradient), FLOATS,
    [Case(((2, 3, 6, 6), (3, 2, 2, 6)), dict(_FRONT_GRAD, output_shape=(2, 7, 6, 4))),
     Case(((2, 3, 7, 6), (3, 4, 3, 3)), dict(output_shape=(2, 4, 7, 6), padding=(1, 1, 1, 1), data_layout="NCHW",
                                              weights_layout="OIHW")),
     Case(((1, 2, 2, 3), (2, 2, 2, 3)), dict(output_shape=(1, 4, 3, 2), strides=(2, 1)), label="fd")],
    doms=NORMAL, tol=_CONV_TOL, grad=Grad(cases=("fd",)))
row("convolution_2d_weights_gradient", "convolution_2d_weights_gradient", TorchRef(_t_conv_2d_weights_gradient),
    FLOATS,
    [Case(((2, 3, 6, 6), (2, 7, 6, 4)), dict(_FRONT_GRAD, output_shape=(3, 2, 2, 6))),
     Case(((2, 3, 7, 6), (2, 4, 7, 6)), dict(output_shape=(3, 4, 3, 3), padding=(1, 1, 1, 1), data_layout="NCHW",
                                              weights_layout="OIHW")),
     Case(((1, 2, 2, 3), (1, 4, 3, 2)), dict(output_shape=(2, 2, 2, 3), strides=(2, 1)), label="fd")],
    doms=NORMAL, tol=_CONV_TOL, grad=Grad(cases=("fd",)))


# ----------------------------------------------------------------------------------------
# pooling: a numpy reference that visits every window tap (channels first, trailing k dims
# pooled), PyTorch's max_pool2d / avg_pool2d where it has the op; gradient primitives as the
# adjoints of the same taps

def pool_geometry(sp, kernel, strides, dil, pads, ceil, style):
    """Per pooled dim: (output size, padding before, padding after)."""
    geo = []
    for i, n in enumerate(sp):
        k, s, d = kernel[i], strides[i], dil[i]
        ext = (k - 1) * d + 1
        if style in ("same", "same_lower"):
            o = -(-n // s)
            tot = max((o - 1) * s + ext - n, 0)
            b = tot // 2 if style == "same" else tot - tot // 2
            geo.append((o, b, tot - b))
            continue
        pb, pa = (0, 0) if style == "valid" else (pads[2 * i], pads[2 * i + 1])
        L = n + pb + pa
        if ceil:
            o = -(-(L - ext) // s) + 1
            if (o - 1) * s >= n + pb:  # the last window must start inside the input or the padding before it
                o -= 1
        else:
            o = (L - ext) // s + 1
        geo.append((o, pb, pa))
    return geo


def _pool_attrs(k, kernel_sizes, strides=None, dilation_rates=None, padding=None, padding_style="explicit",
                ceil_mode=False, **_):
    """The documented attribute sugar: one value -> every dim; padding one value -> everywhere,
    one per dim -> symmetric."""
    kern = _ints(kernel_sizes, k, 1)
    s = _ints(strides, k, 1)
    d = _ints(dilation_rates, k, 1)
    if padding is None:
        p = (0,) * (2 * k)
    else:
        p = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,)
        p = p * (2 * k) if len(p) == 1 else tuple(v for x in p for v in (x, x)) if len(p) == k else p
    return kern, s, d, p, padding_style, ceil_mode


def pool_taps(sp, kern, s, d, p, ceil, style):
    """The pooled shape and, per kernel tap in row-major tap order: the flat input index of each
    output's tap, whether it lies in the input, and whether it lies in the input or its padding."""
    geo = pool_geometry(sp, kern, s, d, p, ceil, style)
    oshape = tuple(g[0] for g in geo)
    grids = np.meshgrid(*[np.arange(o) for o in oshape], indexing="ij")
    taps = []
    for t in itertools.product(*[range(kk) for kk in kern]):
        pos = [grids[i] * s[i] - geo[i][1] + t[i] * d[i] for i in range(len(sp))]
        inside = np.ones(oshape, bool)
        in_pad = np.ones(oshape, bool)
        for i, n in enumerate(sp):
            inside &= (pos[i] >= 0) & (pos[i] < n)
            in_pad &= pos[i] < n + geo[i][2]
        flat = np.ravel_multi_index([np.clip(q, 0, max(n - 1, 0)) for q, n in zip(pos, sp)], sp) if all(sp) else \
            np.zeros(oshape, np.int64)
        taps.append((flat, inside, in_pad))
    return oshape, taps


def np_pool(x, k, mode, include_zero_pad=False, **attrs):
    """mode max | sum | avg | l2 over the trailing k dims of x; max also returns the flat index of
    the first maximum (a NaN wins; -1 for windows of padding only)."""
    kern, s, d, p, style, ceil = _pool_attrs(k, **attrs)
    lead, sp = x.shape[:-k], x.shape[-k:]
    oshape, taps = pool_taps(sp, kern, s, d, p, ceil, style)
    B = int(np.prod(lead))
    xf = x.reshape((B, int(np.prod(sp))))
    if mode == "max":
        best = np.full((B,) + oshape, -np.inf)
        idx = np.full((B,) + oshape, -1, np.int64)
        for flat, inside, _ in taps:
            v = xf[:, flat] if xf.size else np.zeros((B,) + oshape)
            take = inside & ((idx == -1) | (v > best) | (np.isnan(v) & ~np.isnan(best)))
            best = np.where(take, v, best)
            idx = np.where(take, flat, idx)
        return best.reshape(lead + oshape), idx.reshape(lead + oshape)
    acc = np.zeros((B,) + oshape)
    cnt = np.zeros(oshape)
    for flat, inside, in_pad in taps:
        v = xf[:, flat] if xf.size else np.zeros((B,) + oshape)
        acc += np.where(inside, v * v if mode == "l2" else v, 0.0)
        cnt += in_pad if include_zero_pad else inside
    if mode == "avg":
        acc = np.where(cnt > 0, acc / np.where(cnt > 0, cnt, 1), 0.0)
    elif mode == "l2":
        acc = np.sqrt(acc)
    return acc.reshape(lead + oshape)


def np_pool_adjoint(dy, like_shape, k, mode, include_zero_pad=False, source=None, **attrs):
    """The gradient primitives: dy spread back onto like_shape (sum / avg windows, or the argmax
    of source for max)."""
    kern, s, d, p, style, ceil = _pool_attrs(k, **attrs)
    sp = like_shape[-k:]
    oshape, taps = pool_taps(sp, kern, s, d, p, ceil, style)
    n = int(np.prod(sp))
    dyf = dy.reshape((int(np.prod(like_shape[:-k])),) + oshape)
    out = np.zeros((dyf.shape[0], n))
    rows = np.arange(dyf.shape[0])[:, None]
    if mode == "max":
        _, idx = np_pool(source, k, "max", **attrs)
        idx = idx.reshape(dyf.shape[0], -1)
        ok = idx >= 0
        np.add.at(out, (np.broadcast_to(rows, idx.shape)[ok], idx[ok]), dyf.reshape(dyf.shape[0], -1)[ok])
        return out.reshape(like_shape)
    cnt = np.zeros(oshape)
    for _, inside, in_pad in taps:
        cnt += in_pad if include_zero_pad else inside
    w = (dyf / np.where(cnt > 0, cnt, 1) if mode == "avg" else dyf).reshape(dyf.shape[0], -1)
    for flat, inside, _ in taps:
        m = inside.reshape(-1)
        np.add.at(out.T, flat.reshape(-1)[m], w[:, m].T)  # out.T is a view: adds into out
    return out.reshape(like_shape)


def _cl(x, layout):
    """NHWC -> NCHW for the channels-first reference (and back: _lc)."""
    return np.moveaxis(x, -1, 1) if layout == "NHWC" else x


def _lc(y, layout):
    return np.moveaxis(y, 1, -1) if layout == "NHWC" else y


def _pool2d_ref(mode, indices=False):
    def ref(x, data_layout="NHWC", indices_dtype=None, include_zero_pad=False, **attrs):
        r = np_pool(_cl(x, data_layout), 2, mode, include_zero_pad=include_zero_pad, **attrs)
        if mode == "max":
            return (_lc(r[0], data_layout), _lc(r[1], data_layout)) if indices else _lc(r[0], data_layout)
        return _lc(r, data_layout)
    return ref


def _pool_nd_ref(mode, k=None, indices=False):
    """k=None: the N-d primitives (len(kernel_sizes) trailing dims); k=4: the 4-D ops (all dims)."""
    def ref(x, indices_dtype=None, include_zero_pad=False, **attrs):
        kk = k or len(_ints(attrs["kernel_sizes"], 1, 1))
        r = np_pool(x, kk, mode, include_zero_pad=include_zero_pad, **attrs)
        return (r if indices else r[0]) if mode == "max" else r
    return ref


_POOL_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-6), "float64": (1e-12, 1e-13)}
# (kernel, stride, dilation, padding (t, b, l, r), ceil_mode): PyTorch-expressible (symmetric pads <= k/2)
_CASES_2D = [((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), False), ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), False),
             ((3, 2), (2, 1), (1, 1), (1, 1, 0, 0), True), ((3, 3), (2, 2), (2, 1), (1, 1, 1, 1), True),
             ((2, 3), (3, 2), (1, 2), (0, 0, 1, 1), False), ((1, 1), (2, 2), (1, 1), (0, 0, 0, 0), True)]


def _a2d(c, layout, **more):
    k, s, d, p, ceil = c
    return dict(kernel_sizes=k, strides=s, dilation_rates=d, padding=p, ceil_mode=ceil, data_layout=layout, **more)


def _x2d(layout, n=2, c=3, h=7, w=6):
    return (n, h, w, c) if layout == "NHWC" else (n, c, h, w)


def _t_pool2d(kind, indices=False):
    """PyTorch's max_pool2d / avg_pool2d / L2 (sqrt of a sum pool of squares) in either layout."""
    def ref(x, kernel_sizes, strides, dilation_rates=(1, 1), padding=(0, 0, 0, 0), ceil_mode=False,
            data_layout="NHWC", include_zero_pad=False, indices_dtype=None):
        F = _F()
        xc = x.movedim(-1, 1) if data_layout == "NHWC" else x
        kw = dict(kernel_size=kernel_sizes, stride=strides, padding=(padding[0], padding[2]), ceil_mode=ceil_mode)
        if kind == "max":
            r = F.max_pool2d(xc, dilation=dilation_rates, return_indices=indices, **kw)
        elif kind == "avg":
            r = F.avg_pool2d(xc, count_include_pad=include_zero_pad, **kw)
        else:
            r = F.avg_pool2d(xc * xc, count_include_pad=True, divisor_override=1, **kw).sqrt()
        back = (lambda t: t.movedim(1, -1)) if data_layout == "NHWC" else (lambda t: t)
        return tuple(back(t) for t in r) if indices else back(r)
    return ref


_LAYOUTS = ("NHWC", "NCHW")
row("max_pooling_2d_vs_torch", "max_pooling_2d", TorchRef(_t_pool2d("max")), FLOATS,
    [Case((_x2d(l),), _a2d(c, l)) for c in _CASES_2D for l in _LAYOUTS], doms=DISTINCT, tol=_POOL_TOL,
    grad=Grad(cases=()))
row("max_pooling_2d_return_indices_vs_torch", "max_pooling_2d_return_indices", TorchRef(_t_pool2d("max", True)),
    FLOATS, [Case((_x2d(l),), _a2d(c, l)) for c in _CASES_2D for l in _LAYOUTS], doms=DISTINCT, tol=_POOL_TOL,
    out_dtype=lambda d: (d, "int32"), grad=Grad(cases=()))
row("max_pooling_2d_return_indices_int64", "max_pooling_2d_return_indices", TorchRef(_t_pool2d("max", True)),
    FLOATS, [Case((_x2d(l),), _a2d(_CASES_2D[3], l, indices_dtype="int64")) for l in _LAYOUTS], doms=DISTINCT,
    tol=_POOL_TOL, out_dtype=lambda d: (d, "int64"))
# ties take the first maximum, a NaN wins (one per window: PyTorch keeps the last of several)
row("max_pooling_2d_ties_and_nan_vs_torch", "max_pooling_2d_return_indices", TorchRef(_t_pool2d("max", True)),
    FLOATS, [Case(values=([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, _NAN, 5.0], [0.0, 0.0, -_INF, -_INF],
                             [7.0, 7.0, -_INF, -_INF]]]],),
                  attrs=dict(kernel_sizes=2, strides=2, data_layout="NCHW"))],
    out_dtype=lambda d: (d, "int32"))
row("avg_pooling_2d_vs_torch", "avg_pooling_2d", TorchRef(_t_pool2d("avg")), FLOATS,
    [Case((_x2d(l),), _a2d(c, l, include_zero_pad=inc)) for c in _CASES_2D if c[2] == (1, 1) for l in _LAYOUTS
     for inc in (False, True)], doms=NORMAL, tol=_POOL_TOL, grad=Grad(cases=()))
row("l2_norm_pooling_2d_vs_torch", "l2_norm_pooling_2d", TorchRef(_t_pool2d("l2")), FLOATS,
    [Case((_x2d(l),), _a2d(c, l)) for c in _CASES_2D if c[2] == (1, 1) for l in _LAYOUTS], doms=NORMAL,
    tol=_POOL_TOL, grad=Grad(cases=()))
row("l2_norm_pooling_2d_vs_torch_lp_pool", "l2_norm_pooling_2d",
    TorchRef(lambda x, kernel_sizes, strides, data_layout: _F().lp_pool2d(x, 2, kernel_sizes, strides)), FLOATS,
    [Case(((2, 3, 7, 6),), dict(kernel_sizes=(2, 3), strides=(2, 1), data_layout="NCHW"))], doms=NORMAL,
    tol=_POOL_TOL)

# padding styles, dilation with averages, attribute sugar, windows of padding only: numpy reference
_STYLE_ATTRS = dict(kernel_sizes=(3, 2), strides=(2, 3), dilation_rates=(1, 2), padding=(2, 0, 1, 3))
_KW2 = dict(kernel_sizes=(3, 2), strides=(2, 1), dilation_rates=(1, 2), padding=(1, 1, 0, 1), ceil_mode=True)


def _pool2d_cases(extra=()):
    cases = [Case(((2, 7, 8, 3),), dict(_STYLE_ATTRS, padding_style=st), label=st)
             for st in ("valid", "same", "same_lower", "explicit")]
    cases += [Case(((1, 5, 5, 2),), _KW2, label="fd NHWC"), Case(((1, 2, 5, 5),), dict(_KW2, data_layout="NCHW"),
                                                                     label="fd NCHW"),
              Case(((2, 5, 4, 2),), dict(kernel_sizes=(3, 2), strides=(2, 1), padding_style="same"), label="fd same"),
              Case(((1, 6, 6, 2),), dict(kernel_sizes=3, strides=2, padding=1), label="one value each"),
              Case(((1, 6, 6, 2),), dict(kernel_sizes=(3, 3), strides=(2, 2), padding=(1, 2)), label="symmetric pads"),
              Case(values=(np.arange(4.0).reshape(1, 1, 2, 2),),
                   attrs=dict(kernel_sizes=(1, 1), strides=(2, 2), padding=(1, 1, 1, 1), data_layout="NCHW"),
                   label="windows of padding only"),
              Case(((0, 5, 5, 2),), dict(kernel_sizes=2, strides=2), label="empty batch")]
    return cases + list(extra)


_L2_DOM = _CallDom(lambda rng, shape, dtype: (DISTINCT.draw(rng, shape, "float64") + 0.5).astype(np_dtype(dtype)))
row("max_pooling_2d", "max_pooling_2d", _pool2d_ref("max"), FLOATS, _pool2d_cases(), doms=DISTINCT, tol=_POOL_TOL,
    grad=Grad(cases=("fd NHWC", "fd NCHW", "fd same"), second_order=("fd NHWC", "fd NCHW"),
              unknown_dims=("fd same", "fd NHWC")))
row("max_pooling_2d_return_indices", "max_pooling_2d_return_indices", _pool2d_ref("max", True), FLOATS,
    _pool2d_cases(), doms=DISTINCT, tol=_POOL_TOL, out_dtype=lambda d: (d, "int32"), grad=Grad(cases=("fd NCHW",)))
row("avg_pooling_2d", "avg_pooling_2d", _pool2d_ref("avg"), FLOATS,
    _pool2d_cases([Case(((2, 7, 8, 3),), dict(_STYLE_ATTRS, padding_style=st, include_zero_pad=True),
                        label=st + " include_zero_pad") for st in ("valid", "same", "explicit")]
                  + [Case(((1, 5, 4, 2),), dict(_KW2, include_zero_pad=True), label="fd include_zero_pad")]),
    doms=NORMAL, tol=_POOL_TOL,
    grad=Grad(cases=("fd NHWC", "fd NCHW", "fd same", "fd include_zero_pad"),
              second_order=("fd NHWC", "fd NCHW", "fd include_zero_pad"), unknown_dims=("fd same", "fd NHWC")))
row("l2_norm_pooling_2d", "l2_norm_pooling_2d", _pool2d_ref("l2"), FLOATS, _pool2d_cases(), doms=NORMAL,
    tol=_POOL_TOL, grad=Grad(cases=("fd NHWC", "fd NCHW", "fd same"), second_order=("fd NHWC", "fd NCHW"),
                             unknown_dims=("fd same", "fd NHWC"), doms=_L2_DOM))

# 4-D: pooled over all four dims; indices flat over the whole input (GlobalFlatten4D)
_KW4 = dict(kernel_sizes=(2, 1, 3, 2), strides=(1, 2, 2, 3), dilation_rates=(1, 1, 1, 2), padding=(0, 1, 0, 0, 1, 1, 2, 0))


def _pool4d_cases(extra=()):
    return [Case(((3, 4, 5, 6),), dict(_KW4, ceil_mode=c), label=f"ceil {c}") for c in (False, True)] + [
        Case(((2, 3, 4, 5),), dict(kernel_sizes=(1, 2, 2, 2)), label="default unit strides"),
        Case(((2, 3, 3, 2),), dict(kernel_sizes=(1, 2, 2, 1), strides=(1, 1, 2, 1)), label="fd"),
        Case(((2, 3, 3, 2),), dict(kernel_sizes=(2, 1, 2, 1), padding_style="same"), label="same")] + list(extra)


row("max_pooling_4d", "max_pooling_4d", _pool_nd_ref("max", 4), FLOATS, _pool4d_cases(), doms=DISTINCT,
    tol=_POOL_TOL, grad=Grad(cases=("fd",)))
row("max_pooling_4d_return_indices", "max_pooling_4d_return_indices", _pool_nd_ref("max", 4, True), FLOATS,
    _pool4d_cases(), doms=DISTINCT, tol=_POOL_TOL, out_dtype=lambda d: (d, "int32"), grad=Grad(cases=("same",)))
row("avg_pooling_4d", "avg_pooling_4d", _pool_nd_ref("avg", 4), FLOATS,
    _pool4d_cases([Case(((3, 4, 5, 6),), dict(_KW4, ceil_mode=c, include_zero_pad=True), label=f"zero pad, ceil {c}")
                   for c in (False, True)]
                  + [Case(((2, 2, 3, 2),), dict(kernel_sizes=(1, 2, 2, 2), padding=(0, 0, 1, 0, 0, 1, 0, 0),
                                                include_zero_pad=True), label="fd zero pad")]),
    doms=NORMAL, tol=_POOL_TOL, grad=Grad(cases=("fd zero pad",)))
row("l2_norm_pooling_4d", "l2_norm_pooling_4d", _pool_nd_ref("l2", 4), FLOATS, _pool4d_cases(), doms=NORMAL,
    tol=_POOL_TOL, grad=Grad(cases=("fd",), doms=_L2_DOM))

# the N-d primitives: trailing len(kernel_sizes) dims, leading dims batch-like
_KWN = {1: dict(kernel_sizes=(2,), strides=(2,), padding=(1, 0)),
        2: dict(kernel_sizes=(2, 3), strides=(2, 1), dilation_rates=(1, 1), padding=(1, 0, 0, 2)),
        3: dict(kernel_sizes=(2, 3, 2), strides=(2, 1, 3), dilation_rates=(1, 1, 2), padding=(1, 0, 0, 2, 1, 1))}


def _pool_nd_cases(extra=()):
    return [Case(((2, 3, 5, 4, 6)[:2 + k],), _KWN[k], label=f"{k}-d") for k in (1, 2, 3)] + [
        Case(((2, 3, 5),), dict(kernel_sizes=(3,), strides=(2,), padding=(1, 1), ceil_mode=True), label="ceil"),
        Case(((2, 5, 5),), dict(kernel_sizes=(2, 3), strides=(2, 1), padding_style="same_lower"), label="same_lower"),
        Case(((4, 6),), dict(kernel_sizes=(3, 2)), label="strides omitted"),
        Case(((2, 3, 4),), dict(kernel_sizes=(2, 2), strides=(1, 2), padding=(1, 0, 0, 1)), label="fd"),
        Case(values=(np.arange(4.0).reshape(1, 2, 2),),
             attrs=dict(kernel_sizes=(1, 1), strides=(2, 2), padding=(1, 1, 1, 1)), label="windows of padding only"),
        Case(((2, 0, 3),), dict(kernel_sizes=(2,), strides=(1,)), label="empty")] + list(extra)


row("max_pooling_nd", "max_pooling_nd", _pool_nd_ref("max"), FLOATS, _pool_nd_cases(), doms=DISTINCT, tol=_POOL_TOL,
    grad=Grad(cases=("fd",), second_order=True))
row("max_pooling_nd_return_indices", "max_pooling_nd_return_indices", _pool_nd_ref("max", None, True), FLOATS,
    _pool_nd_cases([Case(((2, 5),), dict(kernel_sizes=(3,), strides=(2,), padding=(1, 1), indices_dtype="int32"),
                         label="fd 1-d")]),
    doms=DISTINCT, tol=_POOL_TOL, out_dtype=lambda d: (d, "int32"), grad=Grad(cases=("fd 1-d",)))
row("sum_pooling_nd", "sum_pooling_nd", _pool_nd_ref("sum"), FLOATS,
    _pool_nd_cases([Case(((2, 3, 3),), dict(kernel_sizes=(2, 2), strides=(2, 1), padding_style="same"), label="fd same")]),
    doms=NORMAL, tol=dict(_POOL_TOL, bfloat16=(2e-2, 3e-2)), grad=Grad(cases=("fd same",)))
row("avg_pooling_nd", "avg_pooling_nd", _pool_nd_ref("avg"), FLOATS,
    _pool_nd_cases([Case(((2, 3, 5),), dict(kernel_sizes=(2, 3), strides=(2, 1), dilation_rates=(1, 2), padding=1,
                                            ceil_mode=True), label="fd dilated ceil")]
                   + [Case(((2, 3, 5, 4, 6)[:2 + k],), dict(_KWN[k], include_zero_pad=True), label=f"{k}-d zero pad")
                      for k in (1, 2, 3)]),
    doms=NORMAL, tol=_POOL_TOL, grad=Grad(cases=("fd dilated ceil",), second_order=True))
row("l2_norm_pooling_nd", "l2_norm_pooling_nd", _pool_nd_ref("l2"), FLOATS,
    _pool_nd_cases([Case(((2, 3, 3),), dict(kernel_sizes=(2, 2), strides=(1, 1), padding=(0, 1, 1, 0)), label="fd l2"),
                    Case(values=(np.zeros((1, 4, 4)),), attrs=dict(kernel_sizes=(2, 2), strides=(2, 2)),
                         label="zero windows")]),
    doms=NORMAL, tol=_POOL_TOL, grad=Grad(cases=("fd l2",), second_order=True, doms=_L2_DOM))


# gradient primitives (source gives the shape; for max also the argmax)
def _pooled(shape, **attrs):
    k = len(attrs["kernel_sizes"])
    kern, s, d, p, style, ceil = _pool_attrs(k, **attrs)
    return tuple(shape[:-k]) + tuple(g[0] for g in pool_geometry(shape[-k:], kern, s, d, p, ceil, style))


_PG_CASES = [((2, 3, 4), dict(kernel_sizes=(2, 2), strides=(1, 2))),
             ((2, 5, 5), dict(kernel_sizes=(2, 3), strides=(2, 1), padding=(1, 0, 1, 1))),
             ((2, 5), dict(kernel_sizes=(2,), strides=(2,))),
             ((2, 4, 3), dict(kernel_sizes=(2, 2), strides=(1, 1), padding=1)),
             ((2, 3, 5, 4, 6), _KWN[3]),
             ((2, 7, 6), dict(kernel_sizes=(3, 2), strides=(2, 2), dilation_rates=(1, 2), padding_style="same",
                              ceil_mode=True)),
             ((2, 3, 5), dict(kernel_sizes=(3,), strides=(2,), padding=(1, 1), ceil_mode=True))]
row("max_pooling_nd_gradient", "max_pooling_nd_gradient",
    lambda dy, src, **a: np_pool_adjoint(dy, src.shape, len(a["kernel_sizes"]), "max", source=src, **a), FLOATS,
    [Case((_pooled(sh, **a), sh), a, label="fd" if i == 0 else "") for i, (sh, a) in enumerate(_PG_CASES)],
    doms=(NORMAL, DISTINCT), tol=_POOL_TOL, grad=Grad(cases=("fd",), second_order=True))
def _max_gather_ref(x, src, **a):
    """x read at the argmax of each window of src; 0 for windows of padding only."""
    k = len(a["kernel_sizes"])
    _, idx = np_pool(src, k, "max", **a)
    B = int(np.prod(x.shape[:-k]))
    flat = np.maximum(idx, 0).reshape(B, -1)
    got = np.take_along_axis(x.reshape(B, -1), flat, axis=1) if x.size else np.zeros(flat.shape)
    return np.where(idx >= 0, got.reshape(idx.shape), 0.0)


row("max_pooling_nd_gather", "max_pooling_nd_gather", _max_gather_ref, FLOATS,
    [Case((sh, sh), a, label="fd" if i == 0 else "") for i, (sh, a) in enumerate(_PG_CASES)]
    + [Case(values=(np.arange(4.0).reshape(1, 2, 2) + 1, np.arange(4.0).reshape(1, 2, 2)),
            attrs=dict(kernel_sizes=(1, 1), strides=(2, 2), padding=(1, 1, 1, 1)), label="windows of padding only")],
    doms=(NORMAL, DISTINCT), tol=_POOL_TOL, grad=Grad(cases=("fd",), second_order=True))
row("avg_pooling_nd_gradient", "avg_pooling_nd_gradient",
    lambda dy, src, include_zero_pad=False, **a: np_pool_adjoint(dy, src.shape, len(a["kernel_sizes"]), "avg",
                                                                 include_zero_pad=include_zero_pad, **a), FLOATS,
    [Case((_pooled(sh, **a), sh), a) for sh, a in _PG_CASES]
    + [Case((_pooled(sh, **a), sh), dict(a, include_zero_pad=True), label="fd" if i == 3 else "zero pad")
       for i, (sh, a) in enumerate(_PG_CASES)],
    doms=NORMAL, tol=_POOL_TOL, grad=Grad(cases=("fd",), second_order=True, wrt=(0,)))
row("sum_pooling_nd_gradient", "sum_pooling_nd_gradient",
    lambda dy, src, **a: np_pool_adjoint(dy, src.shape, len(a["kernel_sizes"]), "sum", **a), FLOATS,
    [Case((_pooled(sh, **a), sh), a, label="fd" if i == 2 else "") for i, (sh, a) in enumerate(_PG_CASES)],
    doms=NORMAL, tol=dict(_POOL_TOL, bfloat16=(2e-2, 3e-2)), grad=Grad(cases=("fd",), second_order=True, wrt=(0,)))

# global pooling keeps the pooled dims (size 1)
for _gp, _fn in [("global_average_pooling_2d", np.mean), ("global_max_pooling_2d", np.max)]:
    row(_gp, _gp, lambda x, data_layout="NHWC", _f=_fn: _f(x, axis=(1, 2) if data_layout == "NHWC" else (2, 3),
                                                            keepdims=True), FLOATS,
        [Case(((2, 5, 4, 3),)), Case(((2, 5, 4, 3),), {"data_layout": "NCHW"}),
         Case(((2, 3, 2, 2),), label="fd"), Case(((0, 2, 2, 3),), label="empty batch")],
        doms=DISTINCT if "max" in _gp else NORMAL, tol=_POOL_TOL, grad=Grad(cases=("fd",)))


# ----------------------------------------------------------------------------------------
# resize: weights from exact fractions for every coordinate and rounding mode (the op is
# linear: resize = A_h x A_w^T per image, resize_gradient the transpose), PyTorch's
# F.interpolate where it has the mode

def _src_coord(d, n, m, align, center):
    if align:
        return Fraction(d * (n - 1), m - 1) if m > 1 else Fraction(0)
    if center:
        return (Fraction(2 * d + 1, 2) * n) / m - Fraction(1, 2)
    return Fraction(d * n, m)


def _round_frac(v, mode):
    fl = math.floor(v)
    half = Fraction(1, 2)
    if mode == "floor":
        return fl
    if mode == "ceil":
        return math.ceil(v)
    if v - fl != half:
        return fl + (1 if v - fl > half else 0)
    return {"round_prefer_ceil": fl + 1, "round_prefer_floor": fl, "round_to_even": fl if fl % 2 == 0 else fl + 1,
            "round_to_odd": fl if fl % 2 else fl + 1}[mode]


@functools.lru_cache(maxsize=None)
def resize_matrix(n, m, mode, align, center, rounding):
    """(m, n): output index d reads the input with these weights."""
    A = np.zeros((m, n))
    for d in range(m):
        s = _src_coord(d, n, m, align, center)
        if mode == "nearest":
            A[d, min(max(_round_frac(s, rounding), 0), n - 1)] = 1
        else:
            s = min(max(s, Fraction(0)), Fraction(n - 1))
            i0 = math.floor(s)
            w = float(s - i0)
            A[d, i0] += 1 - w
            A[d, min(i0 + 1, n - 1)] += w
    return A


_HW_AXES = {"NHWC": (1, 2), "NCHW": (2, 3), "HWC": (0, 1), "CHW": (1, 2), "HW": (0, 1)}


def _resize_mats(shape, size, mode, center_result, align_corners, data_layout, nearest_rounding_mode):
    h, w = _HW_AXES[data_layout]
    key = (mode, bool(align_corners), bool(center_result), nearest_rounding_mode)
    return h, w, resize_matrix(shape[h], size[0], *key), resize_matrix(shape[w], size[1], *key)


def np_resize(x, size, mode="bilinear", center_result=True, align_corners=False, data_layout="NHWC",
              nearest_rounding_mode="round_prefer_ceil"):
    h, w, Ah, Aw = _resize_mats(x.shape, size, mode, center_result, align_corners, data_layout, nearest_rounding_mode)
    y = np.einsum("ah,bw,hw...->ab...", Ah, Aw, np.moveaxis(x, (h, w), (0, 1)))
    return np.moveaxis(y, (0, 1), (h, w))


def np_resize_gradient(dy, like, size, mode="bilinear", center_result=True, align_corners=False, data_layout="NHWC",
                       nearest_rounding_mode="round_prefer_ceil"):
    """The transpose: dy spread back onto like's shape."""
    h, w, Ah, Aw = _resize_mats(like.shape, size, mode, center_result, align_corners, data_layout,
                                nearest_rounding_mode)
    y = np.einsum("ah,bw,ab...->hw...", Ah, Aw, np.moveaxis(dy, (h, w), (0, 1)))
    return np.moveaxis(y, (0, 1), (h, w))


_SIZES = [((5, 4), (9, 7)), ((6, 7), (3, 4)), ((4, 4), (4, 4)), ((3, 5), (1, 1)), ((1, 1), (3, 2)), ((7, 3), (2, 8))]
_TIES = [((4, 2), (8, 6)), ((2, 4), (8, 8))]  # exact ties of the nearest source coordinate
_RESIZE_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-6),
               "float64": (1e-12, 1e-13)}
_FD_RESIZE = [("bilinear", True, False), ("bilinear", False, True), ("bilinear", False, False),
              ("nearest", True, False)]


def _resize_cases():
    cases = [Case(((1, 4, 3, 2),), dict(size=(5, 2), mode=m, center_result=c, align_corners=a), label=f"fd {m} {c} {a}")
             for m, c, a in _FD_RESIZE]
    cases += [Case(((2,) + i + (3,),), dict(size=o, center_result=c, align_corners=a)) for i, o in _SIZES
              for c in (False, True) for a in (False, True)]
    cases += [Case(((1,) + i + (2,),), dict(size=o, mode="nearest", center_result=c, align_corners=a,
                                            nearest_rounding_mode=r))
              for r in ("round_prefer_ceil", "round_prefer_floor", "ceil", "floor", "round_to_even", "round_to_odd")
              for c, a in ((False, False), (True, False), (False, True)) for i, o in _TIES + _SIZES[:2]]
    cases += [Case((sh,), dict(size=(7, 2), data_layout=lay), label=lay)
              for lay, sh in (("HWC", (5, 4, 3)), ("CHW", (3, 5, 4)), ("HW", (5, 4)), ("NCHW", (2, 3, 5, 4)))]
    cases += [Case(values=(np.arange(4.0).reshape(1, 1, 4, 1) ** 2,), attrs=dict(size=(1, 8), center_result=False),
                   label="TF1 asymmetric: d * in / out"),
              Case(((0, 3, 3, 2),), dict(size=(5, 5)), label="empty batch"),
              Case(((2, 3, 4, 2),), dict(size=(5, 3), mode="nearest"), label="fd nearest default")]
    return cases


row("resize", "resize", np_resize, FLOATS, _resize_cases(), doms=NORMAL, tol=_RESIZE_TOL,
    grad=Grad(cases=tuple(f"fd {m} {c} {a}" for m, c, a in _FD_RESIZE) + ("fd nearest default",),
              second_order=tuple(f"fd {m} {c} {a}" for m, c, a in _FD_RESIZE),
              unknown_dims=("fd bilinear True False", "fd nearest default")))
row("resize_gradient", "resize_gradient", np_resize_gradient, FLOATS,
    [Case(((1, 5, 2, 2), (1, 4, 3, 2)), dict(size=(5, 2), mode=m, center_result=c, align_corners=a),
          label=f"fd {m} {c} {a}") for m, c, a in _FD_RESIZE]
    + [Case(((2, 3, 5, 3), (2, 3, 4, 4)), dict(size=(5, 3), mode="nearest", data_layout="NCHW",
                                               nearest_rounding_mode=r)) for r in ("floor", "round_to_odd")]
    + [Case(((1, 2, 5, 2), (1, 2, 3, 4)), dict(size=(5, 2), align_corners=True, data_layout="NCHW")),
       Case(((2, 5, 3, 2), (2, 3, 4, 2)), dict(size=(5, 3)), label="fd default"),
       Case(((9, 7), (5, 4)), dict(size=(9, 7), data_layout="HW")),
       Case(((0, 5, 5, 2), (0, 3, 3, 2)), dict(size=(5, 5)), label="empty batch")],
    doms=NORMAL, tol=_RESIZE_TOL,
    grad=Grad(cases=tuple(f"fd {m} {c} {a}" for m, c, a in _FD_RESIZE) + ("fd default",), wrt=(0,),
              second_order=tuple(f"fd {m} {c} {a}" for m, c, a in _FD_RESIZE), unknown_dims=("fd default",)))


def _t_resize(x, size, mode="bilinear", center_result=True, align_corners=False, data_layout="NHWC",
              nearest_rounding_mode="round_prefer_ceil"):
    """F.interpolate: bilinear (align_corners True, or False = half-pixel centres), 'nearest-exact'
    (= centres, round_prefer_ceil) and legacy 'nearest' (= no centres, floor)."""
    xc = x.movedim(-1, 1) if data_layout == "NHWC" else x
    if mode == "bilinear":
        assert align_corners or center_result, "F.interpolate has no bilinear without centres or corners"
        y = _F().interpolate(xc, size=tuple(size), mode="bilinear", align_corners=bool(align_corners))
    elif center_result and not align_corners and nearest_rounding_mode == "round_prefer_ceil":
        y = _F().interpolate(xc, size=tuple(size), mode="nearest-exact")
    else:
        assert not center_result and not align_corners and nearest_rounding_mode == "floor", "no such torch mode"
        y = _F().interpolate(xc, size=tuple(size), mode="nearest")
    return y.movedim(1, -1) if data_layout == "NHWC" else y


row("resize_bilinear_vs_torch", "resize", TorchRef(_t_resize), FLOATS,
    [Case((((2, 3) + i) if lay == "NCHW" else ((2,) + i + (3,)),), dict(size=o, align_corners=a, data_layout=lay))
     for i, o in _SIZES for a in (False, True) for lay in _LAYOUTS], doms=NORMAL, tol=_RESIZE_TOL, grad=Grad(cases=()))
row("resize_nearest_vs_torch", "resize", TorchRef(_t_resize), FLOATS,
    [Case(((2, 3) + i,), dict(size=o, mode="nearest", data_layout="NCHW", **kw))
     for i, o in _SIZES + [((3, 9), (9, 3)), ((10, 10), (4, 6))]
     for kw in (dict(center_result=False, nearest_rounding_mode="floor"), dict(center_result=True))],
    doms=NORMAL, tol=_RESIZE_TOL, grad=Grad(cases=()))


# ----------------------------------------------------------------------------------------
# optimizer update ops: the documented update rules in numpy, and PyTorch's optimizers (one
# step from a given state)

_OPT_TOL = {"float16": (1e-2, 2e-3), "bfloat16": (5e-2, 2e-2), "float32": (1e-5, 1e-6), "float64": (1e-12, 1e-13)}
_LR = dom(lo=0.01, hi=0.5)


def _sgd_ref(lr, values, gradient):
    return values - lr * gradient


def _momentum_ref(lr, values, velocity, gradient, momentum=0.9, nesterov=False):
    v = momentum * velocity + gradient
    step = gradient + momentum * v if nesterov else v
    return values - lr * step, v


def _adam_ref(lr, b1, b2, eps, b1p, b2p, values, m, v, vmax=None, gradient=None, weight_decay=0.0):
    """MPSGraph's (TensorFlow's) Adam: lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t); AMSGrad with
    maximum_velocity; AdamW first scales the values by 1 - lr * weight_decay."""
    if gradient is None:
        vmax, gradient = None, vmax
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    m2 = b1 * m + (1 - b1) * gradient
    v2 = b2 * v + (1 - b2) * gradient * gradient
    w = values * (1 - lr * weight_decay)
    if vmax is None:
        return w - lr_t * m2 / (np.sqrt(v2) + eps), m2, v2
    vmax2 = np.maximum(vmax, v2)
    return w - lr_t * m2 / (np.sqrt(vmax2) + eps), m2, v2, vmax2


_VEC = [((), (2, 3), (2, 3)), ((), (5,), (5,)), ((), (), ()), ((), (0, 3), (0, 3))]
row("stochastic_gradient_descent", "stochastic_gradient_descent", _sgd_ref, FLOATS, [Case(s) for s in _VEC],
    doms=(_LR, D, D), tol=_OPT_TOL, grad=Grad())
row("momentum", "momentum", _momentum_ref, FLOATS,
    [Case(((),) + (s[1],) * 3, a) for s in _VEC for a in ({}, {"momentum": 0.8, "nesterov": True})]
    + [Case(((), (2, 3), (2, 3), (2, 3)), {"momentum": 0.5}, label="fd")],
    doms=(_LR, D, D, D), tol=_OPT_TOL, grad=Grad(cases=("fd", 1)))
_ADAM_DOMS = (dom(lo=0.001, hi=0.1), dom(lo=0.8, hi=0.95), dom(lo=0.9, hi=0.999), dom(lo=1e-4, hi=1e-3),
              dom(lo=0.1, hi=0.9), dom(lo=0.1, hi=0.99), D, D, dom(lo=0, hi=2), dom(lo=0, hi=2), D)


def _adam_cases(amsgrad, attrs=({},)):
    n = 5 if amsgrad else 4
    return [Case(((),) * 6 + (s,) * n, a) for s in ((2, 3), (4,), (), (0, 2)) for a in attrs]


for _amsgrad in (False, True):
    _doms = _ADAM_DOMS if _amsgrad else _ADAM_DOMS[:9] + _ADAM_DOMS[10:]
    _sfx = "_amsgrad" if _amsgrad else ""
    # gradient is keyword-only after the optional maximum_velocity
    row("adam" + _sfx, lambda g, *ts, **a: g.adam(*ts[:-1], gradient=ts[-1], **a), _adam_ref, FLOATS,
        _adam_cases(_amsgrad), doms=_doms, tol=_OPT_TOL, out_dtype=lambda d, n=4 if _amsgrad else 3: (d,) * n,
        grad=Grad(), covers=("adam",))
    row("adamw" + _sfx, lambda g, *ts, **a: g.adamw(*ts[:-1], gradient=ts[-1], **a),
        lambda *x, weight_decay=0.01: _adam_ref(*x, weight_decay=weight_decay), FLOATS,
        _adam_cases(_amsgrad, ({}, {"weight_decay": 0.1})), doms=_doms, tol=_OPT_TOL,
        out_dtype=lambda d, n=4 if _amsgrad else 3: (d,) * n, grad=Grad(), covers=("adamw",))


def _torch_step(opt_cls, values, gradient, state, **kw):
    p = values.detach().clone().requires_grad_(True)
    opt = opt_cls([p], foreach=False, **kw)
    opt.state[p].update({k: v.detach().clone() for k, v in state.items()})
    p.grad = gradient.detach().clone()
    opt.step()
    return p.detach(), opt.state[p]


def _t_momentum(values, velocity, gradient, lr, momentum=0.9, nesterov=False):
    torch = torch_module()
    p, st = _torch_step(torch.optim.SGD, values, gradient, {"momentum_buffer": velocity}, lr=lr, momentum=momentum,
                        nesterov=nesterov)
    return p, st["momentum_buffer"]


def _t_adam(values, m, v, vmax=None, gradient=None, lr=0.01, b1=0.9, b2=0.999, eps=1e-8, t=1, weight_decay=None):
    """torch.optim.Adam / AdamW one step at step t. torch adds eps to sqrt(v) / sqrt(1 - beta2^t),
    MPSGraph to sqrt(v): the same update with torch's eps = eps / sqrt(1 - beta2^t)."""
    torch = torch_module()
    if gradient is None:
        vmax, gradient = None, vmax
    state = {"step": torch.tensor(float(t - 1)), "exp_avg": m, "exp_avg_sq": v}
    if vmax is not None:
        state["max_exp_avg_sq"] = vmax
    kw = dict(lr=lr, betas=(b1, b2), eps=eps / math.sqrt(1 - b2 ** t), amsgrad=vmax is not None)
    cls = torch.optim.Adam if weight_decay is None else torch.optim.AdamW
    if weight_decay is not None:
        kw["weight_decay"] = weight_decay
    p, st = _torch_step(cls, values, gradient, state, **kw)
    return (p, st["exp_avg"], st["exp_avg_sq"]) + ((st["max_exp_avg_sq"],) if vmax is not None else ())


# the scalars are Python floats here (they take the values' dtype)
row("momentum_vs_torch", lambda g, v, vel, gr, lr, **a: g.momentum(lr, v, vel, gr, **a), TorchRef(_t_momentum), FLOATS,
    [Case(((2, 3),) * 3, dict(lr=0.1)), Case(((5,),) * 3, dict(lr=0.03, momentum=0.8, nesterov=True))],
    tol=_OPT_TOL, out_dtype=lambda d: (d, d), covers=("momentum",))
_ADAM_T = dict(lr=0.05, b1=0.85, b2=0.99, eps=1e-6, t=3)
for _amsgrad in (False, True):
    _n = 5 if _amsgrad else 4
    _pos = (D, D, dom(lo=0, hi=2)) + ((dom(lo=1, hi=3),) if _amsgrad else ()) + (D,)
    for _op, _extra in (("adam", {}), ("adamw", {"weight_decay": 0.1})):
        row(f"{_op}{'_amsgrad' if _amsgrad else ''}_vs_torch",
            lambda g, *ts, lr, b1, b2, eps, t, _o=_op, **a: getattr(g, _o)(
                lr, b1, b2, eps, b1 ** t, b2 ** t, *ts[:-1], gradient=ts[-1], **a),
            TorchRef(_t_adam if _op == "adam" else lambda *x, weight_decay, **a: _t_adam(*x, weight_decay=weight_decay,
                                                                                          **a)),
            FLOATS, [Case(((2, 3),) * (_n), dict(_ADAM_T, **_extra)), Case(((4,),) * _n, dict(_ADAM_T, t=1, **_extra))],
            doms=_pos, tol=_OPT_TOL, out_dtype=lambda d, n=_n - 1: (d,) * n, covers=(_op,))


# ----------------------------------------------------------------------------------------
# random numbers: no value reference; fixed-seed draws must have the documented support and
# distribution (Kolmogorov-Smirnov distance to the CDF, moments, correlation of neighbours)
# within bounds a correct generator exceeds with probability ~1e-4. The harness also checks
# that a seed reproduces its draws and that a second run draws fresh numbers.

def _norm_cdf(x):
    return 0.5 * (1 + _erf(np.asarray(x, np.float64) / math.sqrt(2)))


_EPS = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # relative rounding of a draw


def ks_check(x, cdf):
    """(sup |ECDF - CDF|, the Kolmogorov-Smirnov bound that a correct sample of this size
    exceeds with probability ~1e-4)."""
    x = np.sort(np.asarray(x, np.float64).ravel())
    n = x.size
    F = cdf(x)
    d = max(np.max(np.arange(1, n + 1) / n - F), np.max(F - np.arange(n) / n))
    bound = math.sqrt(-math.log(1e-4 / 2) / (2 * n))
    return d, bound


def _assert_ks(x, cdf, pdf_max, dtype, what, steps=1.0):
    """The KS bound, plus how far rounding the draws to their dtype can move the CDF (pdf_max *
    the largest rounding step, times `steps`)."""
    d, bound = ks_check(x, cdf)
    bound += steps * pdf_max * _EPS.get(dtype, 0.0) * float(np.max(np.abs(x))) if x.size else 0.0
    assert d <= bound, f"{what}: Kolmogorov-Smirnov distance {d:.4g} > {bound:.4g} (n={np.size(x)})"


def _assert_moments(x, mean, var, dtype, what, kurt=3.0):
    """Sample mean and variance within 4.5 standard errors (plus rounding to the dtype)."""
    x = np.asarray(x, np.float64).ravel()
    n = x.size
    q = _EPS.get(dtype, 0.0) * float(np.max(np.abs(x)))
    se_m = math.sqrt(var / n)
    assert abs(x.mean() - mean) <= 4.5 * se_m + q, f"{what}: mean {x.mean():.5g}, expected {mean:.5g} +- {4.5 * se_m:.3g}"
    se_v = var * math.sqrt((kurt - 1) / n)
    assert abs(x.var() - var) <= 4.5 * se_v + 2 * q * math.sqrt(var), \
        f"{what}: variance {x.var():.5g}, expected {var:.5g} +- {4.5 * se_v:.3g}"


def _assert_uncorrelated(x, what):
    """Neighbours in memory order (and the first against the second half) uncorrelated."""
    x = np.asarray(x, np.float64).ravel()
    n = x.size
    if n < 100:
        return
    for a, b, name in ((x[:-1], x[1:], "neighbours"), (x[:n // 2], x[n // 2:2 * (n // 2)], "halves")):
        r = np.corrcoef(a, b)[0, 1]
        assert abs(r) <= 4.5 / math.sqrt(a.size), f"{what}: correlation of {name} {r:.4f}"


def _stat_uniform(outs, ins, attrs, dtype):
    x = outs[0].astype(np.float64)
    lo, hi = attrs.get("minimum", 0.0), attrs.get("maximum", 1.0)
    assert x.size == 0 or (x.min() >= lo and x.max() < hi), f"draws outside [{lo}, {hi}): {x.min()}, {x.max()}"
    if x.size >= 1000:
        # draws that round up to maximum are kept just below it: the top value can hold a
        # whole rounding step (two half-steps) of extra mass
        _assert_ks(x, lambda t: np.clip((t - lo) / (hi - lo), 0, 1), 1 / (hi - lo), dtype, "uniform", steps=2.0)
        _assert_moments(x, (lo + hi) / 2, (hi - lo) ** 2 / 12, dtype, "uniform", kurt=1.8)
        _assert_uncorrelated(x, "uniform")


def _stat_normal(outs, ins, attrs, dtype):
    x = outs[0].astype(np.float64)
    mu, sd = attrs.get("mean", 0.0), attrs.get("standard_deviation", 1.0)
    assert np.all(np.isfinite(x)), "non-finite draws"
    if x.size >= 1000:
        _assert_ks(x, lambda t: _norm_cdf((t - mu) / sd), 1 / (sd * math.sqrt(2 * math.pi)), dtype, "normal")
        _assert_moments(x, mu, sd * sd, dtype, "normal")
        _assert_uncorrelated(x, "normal")


def _stat_truncated_normal(outs, ins, attrs, dtype):
    """Truncated to mean +- 2 standard deviations."""
    x = outs[0].astype(np.float64)
    mu, sd = attrs.get("mean", 0.0), attrs.get("standard_deviation", 1.0)
    assert x.size == 0 or (x.min() >= mu - 2 * sd and x.max() <= mu + 2 * sd), \
        f"draws outside mean +- 2 sd: {x.min()}, {x.max()}"
    if x.size >= 1000:
        z = _norm_cdf(2.0) - _norm_cdf(-2.0)
        cdf = lambda t: np.clip((_norm_cdf((t - mu) / sd) - _norm_cdf(-2.0)) / z, 0, 1)  # noqa: E731
        _assert_ks(x, cdf, 1 / (sd * math.sqrt(2 * math.pi) * z), dtype, "truncated normal")
        # variance of the standard normal truncated to [-2, 2]: 1 - 4 phi(2) / Z
        var = 1 - 2 * 2 * math.exp(-2) / math.sqrt(2 * math.pi) / z
        _assert_moments(x, mu, var * sd * sd, dtype, "truncated normal", kurt=2.4)
        _assert_uncorrelated(x, "truncated normal")


def _stat_bernoulli(outs, ins, attrs, dtype):
    x = outs[0].astype(np.float64)
    p = attrs.get("probability", 0.5)
    assert np.isin(x, (0.0, 1.0)).all(), f"values other than 0 and 1: {np.unique(x)[:5]}"
    if p in (0.0, 1.0):
        assert (x == p).all(), f"probability {p}: not all {p}"
    elif x.size >= 1000:
        se = math.sqrt(p * (1 - p) / x.size)
        assert abs(x.mean() - p) <= 4.5 * se, f"frequency of ones {x.mean():.4f}, expected {p} +- {4.5 * se:.4f}"
        _assert_uncorrelated(x, "bernoulli")


def _stat_dropout(outs, ins, attrs, dtype):
    """Each element is 0 with probability rate, else x / (1 - rate) (rounded to the dtype)."""
    y, x = outs[0].astype(np.float64), ins[0]
    rate = attrs.get("rate", 0.5)
    kept = y != 0
    want = x / (1 - rate)
    if dtype in HALF:
        want = round_to_half(want, dtype).astype(np.float64)
    rtol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6}.get(dtype, 1e-14)
    np.testing.assert_allclose(y[kept], want[kept], rtol=rtol, err_msg="kept elements are x / (1 - rate)")
    if x.size >= 1000:
        se = math.sqrt(rate * (1 - rate) / x.size)
        assert abs((~kept).mean() - rate) <= 4.5 * se, f"dropped fraction {(~kept).mean():.4f}, expected {rate}"
        _assert_uncorrelated(kept, "dropout mask")


_N = (20000,)
_RANDOM_FLOAT_CASES = [Case((), {"shape": _N, "seed": 3}), Case((), {"shape": (100, 200), "seed": 7}),
                       Case((), {"shape": (0, 5), "seed": 1}), Case((), {"shape": (), "seed": 2})]
row("random_uniform", "random_uniform", None, FLOATS,
    _RANDOM_FLOAT_CASES + [Case((), {"shape": _N, "seed": 11, "minimum": -2.0, "maximum": 3.0})],
    dtype_attr="dtype", stat_check=_stat_uniform)
# Regression: in float16/bfloat16 a scaled draw just below maximum rounded up to maximum itself
# (175 of 21000 float16 draws in [10, 10.5) were 10.5); the range is [minimum, maximum).
row("random_uniform_stays_below_maximum", "random_uniform", None, FLOATS,
    [Case((), {"shape": (300, 70), "seed": -4, "minimum": 10.0, "maximum": 10.5})],
    dtype_attr="dtype", stat_check=_stat_uniform)
row("random_normal", "random_normal", None, FLOATS,
    _RANDOM_FLOAT_CASES + [Case((), {"shape": _N, "seed": 5, "mean": 1.0, "standard_deviation": 2.0}),
                           Case((), {"shape": (200, 100), "seed": 9, "mean": -3.0, "standard_deviation": 0.1})],
    dtype_attr="dtype", stat_check=_stat_normal)
row("random_truncated_normal", "random_truncated_normal", None, FLOATS,
    _RANDOM_FLOAT_CASES + [Case((), {"shape": _N, "seed": 5, "mean": 1.0, "standard_deviation": 2.0})],
    dtype_attr="dtype", stat_check=_stat_truncated_normal)
row("random_bernoulli", "random_bernoulli", None, ALL,
    [Case((), {"shape": _N, "seed": 1}), Case((), {"shape": (100, 300), "seed": 4, "probability": 0.2}),
     Case((), {"shape": (50,), "seed": 4, "probability": 0.0}), Case((), {"shape": (50,), "seed": 4, "probability": 1.0}),
     Case((), {"shape": (0,), "seed": 1})],
    dtype_attr="dtype", stat_check=_stat_bernoulli)
row("random_uniform_like", "random_uniform_like", None, FLOATS,
    [Case((_N,), {"seed": 3}), Case(((80, 250),), {"seed": -9}), Case(((0, 3),), {"seed": 1})],
    stat_check=_stat_uniform)
row("random_normal_like", "random_normal_like", None, FLOATS,
    [Case((_N,), {"seed": 3}), Case(((80, 250),), {"seed": 8, "mean": 2.0, "standard_deviation": 0.5}),
     Case(((0, 3),), {"seed": 1})],
    stat_check=_stat_normal)
row("dropout", "dropout", None, FLOATS,
    [Case((_N,), {"rate": 0.3, "seed": 3}), Case(((100, 200),), {"rate": 0.5, "seed": 2}),
     Case(((40, 500),), {"rate": 0.9, "seed": -1}), Case(((0, 3),), {"rate": 0.5})],
    doms=dom(lo=0.5, hi=2.0), stat_check=_stat_dropout)
row("dropout_rate_zero_is_identity", "dropout", lambda x, rate, seed: x, FLOATS,
    [Case(((3, 4),), {"rate": 0.0, "seed": 1})], exact=True)


def _two_seeds(g, seed_a, seed_b, dtype):
    return g.random_uniform((20000,), seed=seed_a, dtype=dtype), g.random_uniform((20000,), seed=seed_b, dtype=dtype)


def _stat_independent(outs, ins, attrs, dtype):
    a, b = (o.astype(np.float64) for o in outs)
    assert not np.array_equal(a, b), "different seeds drew the same numbers"
    r = np.corrcoef(a, b)[0, 1]
    assert abs(r) <= 4.5 / math.sqrt(a.size), f"draws of different seeds correlated: {r:.4f}"


row("random_seeds_are_independent", _two_seeds, None, FLOATS,
    [Case((), {"seed_a": 1, "seed_b": 2}), Case((), {"seed_a": 0, "seed_b": -1}),
     Case((), {"seed_a": 7, "seed_b": 7 + 2 ** 32})], dtype_attr="dtype", stat_check=_stat_independent,
    covers=("random_uniform",))
