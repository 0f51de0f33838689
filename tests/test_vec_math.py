"""Accuracy of the CPU backend's vectorised float32 transcendentals (cpp/backends/cpu/vec_math.h)
against numpy in float64, over a sweep of float32 bit patterns that covers every binade
(subnormals, huge values, both signs) plus the special values, on each ISA path the machine
has (MPSGRAPH_CPU_ISA caps the dispatch; each path runs in its own process)."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import mpsgraph as mg

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# op -> (float64 reference, bound in ulps of the exact value)
BOUNDS = {"exponent": (np.exp, 1.0), "logarithm": (np.log, 1.0), "tanh": (np.tanh, 1.5),
          "sigmoid": (_sigmoid, 2.5), "erf": (_erf, 1.5)}

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 88.72283, 88.7229, -87.33, -87.34,
            -103.2, -103.98, -104.5, 0.625, -0.625, 0.921875, -0.921875, 3.9375, -3.9375, 9.5, 20.0, -20.0, 1.0, -1.0]


def sweep(step=4099):
    bits = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), np.array(SPECIALS, np.float32)])


def ulp_errors(op, x):
    ref_fn, _ = BOUNDS[op]
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float32)
    t = getattr(g, op)(p)
    y = g.run({p: x}, [t], device="cpu")[t]
    with np.errstate(all="ignore"):
        y = np.asarray(y).astype(np.float64)
        r = ref_fn(x.astype(np.float64))
        r32 = r.astype(np.float32).astype(np.float64)  # rounds to +-inf past the float32 range
    nan = np.isnan(r)
    assert np.array_equal(nan, np.isnan(y)), f"{op}: NaN where numpy has none (or the reverse) at {x[nan != np.isnan(y)][:5]}"
    inf = np.isinf(r32) & ~nan
    assert np.array_equal(y[inf], r32[inf]), f"{op}: overflow differs at {x[inf][y[inf] != r32[inf]][:5]}"
    fin = ~nan & ~inf
    _, e = np.frexp(r[fin])
    ulp = np.ldexp(1.0, np.maximum(e - 24, -149))  # ulp of the exact value's binade (subnormal quantum below)
    err = np.abs(y[fin] - r[fin]) / ulp
    return x[fin], err


@pytest.mark.parametrize("op", sorted(BOUNDS))
def test_ulp_bound(op):
    x = sweep()
    xs, err = ulp_errors(op, x)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUNDS[op][1], f"{op}: {err[worst]:.3f} ulp at x={xs[worst]!r}"


def test_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-45], np.float32)
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float32)
    ts = [g.exp(p), g.log(p), g.tanh(p), g.sigmoid(p), g.erf(p)]
    r = g.run({p: x}, ts, device="cpu")
    ex, lg, th, sg, ef = (np.asarray(r[t]) for t in ts)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ex[:5], np.exp(x[:5]))
        np.testing.assert_array_equal(lg[:6], np.log(x[:6]))
    assert np.array_equal(np.signbit(th[:4]), [False, True, False, True]) and th[2] == 1 and th[3] == -1
    np.testing.assert_array_equal(sg[2:4], [1.0, 0.0])
    assert np.array_equal(np.signbit(ef[:2]), [False, True]) and ef[2] == 1 and ef[3] == -1
    assert all(np.isnan(v[4]) for v in (ex, lg, th, sg, ef))
    assert lg[6] == np.float32(np.log(np.float64(x[6])))  # a subnormal input is not flushed


@pytest.mark.parametrize("isa", ["generic", "avx2"])
def test_each_isa_path(isa):
    """The same bounds on the portable loop and the AVX2 loop (each ISA the CPU lacks falls
    back to the next one down, so this passes, less usefully, on any machine)."""
    code = ("import sys; sys.path.insert(0, %r); import test_vec_math as t\n"
            "for op in sorted(t.BOUNDS):\n"
            "    xs, err = t.ulp_errors(op, t.sweep(16411))\n"
            "    assert err.max() <= t.BOUNDS[op][1], (op, err.max())\n") % os.path.dirname(__file__)
    env = dict(os.environ, MPSGRAPH_CPU_ISA=isa)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
