"""Optimizers that build their update ops into the graph (MPSGraph's optimizer ops).

    opt = mg.optimizers.Adam(lr=1e-3)
    updates = opt.minimize(g, loss, [w1, b1, w2, b2])     # target operations
    exe = g.compile(feeds, [loss], target_operations=updates)

Each step's reads see the values from before the step; the assigns land when it ends.
"""
import numpy as np

from ._dtypes import to_numpy_dtype
from ._graph import Graph, Tensor, Variable, GraphTypeError


def _scalar(g, value, like):
    """A learning rate or coefficient: a Tensor (e.g. a placeholder for schedules) or a number."""
    if isinstance(value, Tensor):
        return value if value.dtype == like.dtype else g.cast(value, like.dtype)
    return g.constant(float(value), dtype=like.dtype)


class Optimizer:
    def __init__(self, lr):
        self.lr = lr
        self.state = {}  # variable -> dict of state variables

    def minimize(self, graph, loss, variables):
        """Adds d(loss)/d(variables) and the update ops; returns the assign operations."""
        if not isinstance(graph, Graph):
            raise GraphTypeError("[minimize] first argument must be the Graph")
        variables = list(variables)
        for v in variables:
            if not isinstance(v, Variable):
                raise GraphTypeError(f"[minimize] {v!r} is not a Variable (make it with Graph.variable)")
        grads = graph.gradients(loss, variables)
        ops = []
        for v in variables:
            ops.extend(self._update(graph, v, grads[v]))
        return ops

    def _zeros_state(self, g, v, name):
        return g.variable(np.zeros(v.shape, dtype=to_numpy_dtype(v.dtype)), name=f"{v.name}/{name}")

    def _update(self, g, v, grad):  # pragma: no cover - abstract
        raise NotImplementedError


class SGD(Optimizer):
    """values -= lr * gradient."""

    def _update(self, g, v, grad):
        new = g.stochastic_gradient_descent(_scalar(g, self.lr, v), v, grad)
        return [g.assign(v, new)]


class Momentum(Optimizer):
    """SGD with (optionally Nesterov) momentum."""

    def __init__(self, lr, momentum=0.9, nesterov=False):
        super().__init__(lr)
        self.momentum, self.nesterov = momentum, nesterov

    def _update(self, g, v, grad):
        vel = self._zeros_state(g, v, "velocity")
        self.state[v] = {"velocity": vel}
        new_v, new_vel = g.momentum(_scalar(g, self.lr, v), v, vel, grad, momentum=self.momentum,
                                    nesterov=self.nesterov)
        return [g.assign(v, new_v), g.assign(vel, new_vel)]


class Adam(Optimizer):
    """Adam (AMSGrad with amsgrad=True), as MPSGraph's adam op."""

    op = "adam"

    def __init__(self, lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, amsgrad=False):
        super().__init__(lr)
        self.beta1, self.beta2, self.epsilon, self.amsgrad = beta1, beta2, epsilon, amsgrad

    def _extra(self):
        return {}

    def _update(self, g, v, grad):
        dt = to_numpy_dtype(v.dtype)
        m = self._zeros_state(g, v, "momentum")
        vel = self._zeros_state(g, v, "velocity")
        vmax = self._zeros_state(g, v, "maximum_velocity") if self.amsgrad else None
        # beta**t for the step being taken; starts at t = 1
        b1p = g.variable(np.array(self.beta1, dtype=dt), name=f"{v.name}/beta1_power")
        b2p = g.variable(np.array(self.beta2, dtype=dt), name=f"{v.name}/beta2_power")
        self.state[v] = {"momentum": m, "velocity": vel, "maximum_velocity": vmax, "beta1_power": b1p,
                         "beta2_power": b2p}
        b1, b2 = _scalar(g, self.beta1, v), _scalar(g, self.beta2, v)
        outs = getattr(g, self.op)(_scalar(g, self.lr, v), b1, b2, _scalar(g, self.epsilon, v), b1p, b2p, v, m, vel,
                                   vmax, grad, **self._extra())
        ops = [g.assign(v, outs[0]), g.assign(m, outs[1]), g.assign(vel, outs[2]),
               g.assign(b1p, b1p * b1), g.assign(b2p, b2p * b2)]
        if vmax is not None:
            ops.append(g.assign(vmax, outs[3]))
        return ops


class AdamW(Adam):
    """Adam with decoupled weight decay."""

    op = "adamw"

    def __init__(self, lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01, amsgrad=False):
        super().__init__(lr, beta1, beta2, epsilon, amsgrad)
        self.weight_decay = weight_decay

    def _extra(self):
        return {"weight_decay": float(self.weight_decay)}
