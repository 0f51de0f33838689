"""Shared by the CPU fusion tests: compiling with fusion on or off, and the elementwise chains
that epilogues (convolution, matrix product) fuse, built in a graph and computed in numpy."""
import contextlib
import os

import numpy as np

import mpsgraph as mg


@contextlib.contextmanager
def fusion(on, var="MPSGRAPH_CPU_FUSION"):
    """The fusion switch `var` for the graphs compiled inside (read at each compile)."""
    old = os.environ.get(var)
    os.environ[var] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[var]
        else:
            os.environ[var] = old


@contextlib.contextmanager
def threads(n):
    """mpsgraph's pool limited to n threads inside the block."""
    before = mg.get_num_threads()
    mg.set_num_threads(n)
    try:
        yield
    finally:
        mg.set_num_threads(before)


# A chain is a list of steps (op, operand[, "first"]): operand a name in `operands`, a float
# scalar, (lo, hi) for clamp, None for unary ops; "first" puts the operand first.
NP_BINARY = {"addition": np.add, "subtraction": np.subtract, "multiplication": np.multiply,
             "maximum": np.maximum, "minimum": np.minimum}


def apply_chain(g, y, operands, chain):
    for step in chain:
        op, arg = step[0], step[1]
        if op in ("relu", "sigmoid", "tanh"):
            y = getattr(g, op)(y)
        elif op == "clamp":
            y = g.clamp(y, g.constant(np.float32(arg[0])), g.constant(np.float32(arg[1])))
        else:
            o = operands[arg] if isinstance(arg, str) else g.constant(np.float32(arg))
            y = getattr(g, op)(o, y) if len(step) > 2 else getattr(g, op)(y, o)
    return y


def reference_chain(y, vals, chain):
    """The chain in float64 over y, operands from `vals`."""
    for step in chain:
        op, arg = step[0], step[1]
        if op == "relu":
            y = np.maximum(y, 0)
        elif op == "sigmoid":
            y = 1 / (1 + np.exp(-y))
        elif op == "tanh":
            y = np.tanh(y)
        elif op == "clamp":
            y = np.clip(y, *arg)
        else:
            o = vals[arg].astype(np.float64) if isinstance(arg, str) else np.float64(arg)
            y = NP_BINARY[op](o, y) if len(step) > 2 else NP_BINARY[op](y, o)
    return y
