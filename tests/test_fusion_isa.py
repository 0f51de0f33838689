"""The CPU's fused tile loops on each ISA path (MPSGRAPH_CPU_ISA=generic|avx2|avx512 caps the
dispatch; each path runs in its own process). On every path a fused group equals the same graph
with fusion off bit for bit, and the arithmetic chains equal numpy's float32 bits. Across paths
every chain without a transcendental gives the same bits (the wider loops must not contract a
multiply and an add into an FMA); exp, tanh, sigmoid and erf come from vec_math, whose wider
paths use FMA, so those chains are compared within a path only. A path the CPU lacks falls back
to the next one down (the test then passes, less usefully)."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ISAS = ["generic", "avx2", "avx512"]

# Each case: (its inputs' shapes and dtypes, the graph, exact: same bits on every ISA path,
# specials: NaN, inf and -0 among the inputs; off where a NaN in every row would hide the sums).
# Runs in the child process; the results of each ISA are written to an .npz for the parent.
CHILD = r"""
import sys
import ml_dtypes
import numpy as np
sys.path.insert(0, sys.argv[2])
from fusion_helpers import fusion
import mpsgraph as mg

BF16 = np.dtype(ml_dtypes.bfloat16)
MG_DT = {np.dtype("float32"): mg.float32, np.dtype("float16"): mg.float16, BF16: mg.bfloat16}
F32, F16 = np.dtype("float32"), np.dtype("float16")
R, C = 300, 1031  # several tiles per row, an odd tail, rows split over threads


CASES = {
    "affine_relu": ([((R, C), F32), ((C,), F32), ((R, 1), F32)],
                    lambda g, x, s, b: g.relu(x * s + b) * x - b, True, True),
    "min_max_clamp_select": ([((R, C), F32), ((R, C), F32), ((C,), F32)],
                             lambda g, x, y, lo: g.select(g.greater_than(x, y), g.division(x, y),
                                                          g.square_root(g.absolute(y)))
                             + g.clamp(g.maximum(x, lo) - g.minimum(y, lo), lo, g.absolute(y)), True, True),
    "reciprocal_square_negate": ([((R, C), F32)],
                                 lambda g, x: g.negative(g.reciprocal(g.square(x) + 1.0)) * 3.0, True, True),
    "half_chain": ([((R, C), F16), ((C,), F16)], lambda g, x, b: g.relu(x * x + b) - x * 0.5, True, True),
    "bfloat16_chain": ([((R, C), BF16), ((R, 1), BF16)], lambda g, x, b: g.relu(x * b - x) + b, True, True),
    "compare_to_bool": ([((R, C), F32), ((C,), F32)],
                        lambda g, x, b: g.less_than(g.cast(g.greater_than_or_equal_to(x, b), mg.float32) * x, b),
                        True, True),
    "sum_squared_error": ([((R, C), F32), ((R, C), F32)],
                          lambda g, x, y: g.reduction_sum(g.square(x * 1.5 + 0.25 - y), axes=[1]), True, False),
    "mean_leading": ([((R, C), F32), ((C,), F32)],
                     lambda g, x, b: g.mean(g.relu(x - b) * 0.5, axes=[0]), True, True),
    "max_with_nan": ([((R, C), F32)], lambda g, x: g.reduction_maximum(x * -2.0 + 1.0, axes=[1]), True, True),
    "min_leading_half": ([((R, C), F16)], lambda g, x: g.reduction_minimum(x * x - x, axes=[0]), True, True),
    "product_rows": ([((R, C), F32)], lambda g, x: g.reduction_product(x * 0.01 + 1.0, axes=[1]), True, False),
    "bias_gradient": ([((R, C), F32), ((C,), F32)],
                      lambda g, x, like: g.sum_to_like(g.relu(x) * 0.5 - x, like), True, False),
    "sigmoid_tanh": ([((R, C), F32), ((C,), F32)],
                     lambda g, x, b: g.sigmoid(x * 1.5 + b) * g.tanh(x) - g.exp(x * -0.5), False, True),
    "erf_sum": ([((R, C), F32)], lambda g, x: g.reduction_sum(g.erf(x) * x, axes=[1]), False, False),
}


def inputs(specs, seed, specials):
    rng = np.random.default_rng(seed)
    arrs = []
    for shape, dt in specs:
        a = (rng.standard_normal(shape) * 2).astype(np.float32)
        if specials and a.size > 100:
            a.flat[::97] = np.nan
            a.flat[5::89] = -0.0
            a.flat[7::101] = np.inf
        arrs.append(a.astype(dt))
    return arrs


def run(build, arrays, fuse):
    with fusion(fuse):
        g = mg.Graph()
        ps = [g.placeholder(a.shape, MG_DT[a.dtype]) for a in arrays]
        out = build(g, *ps)
        exe = g.compile({p: (a.shape, MG_DT[a.dtype]) for p, a in zip(ps, arrays)}, [out], device="cpu")
        return exe.run(list(arrays))[0].numpy().copy()


def bits(a):  # NaNs made one: which of two NaNs an add returns is the compiler's choice
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    a = np.where(np.isnan(a.astype(np.float32)), np.array(np.nan, a.dtype), a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


res = {}
with np.errstate(all="ignore"):
    for i, (name, (specs, build, _, specials)) in enumerate(CASES.items()):
        arrays = inputs(specs, i, specials)
        fused, plain = run(build, arrays, True), run(build, arrays, False)
        assert fused.dtype == plain.dtype and fused.shape == plain.shape, name
        assert np.array_equal(bits(fused), bits(plain)), name + ": fused and unfused differ"
        res[name] = fused.astype(np.float32) if fused.dtype == BF16 else fused  # exact; npz has no bfloat16
        res[name + ".in"] = np.stack([np.broadcast_to(a.astype(np.float32), specs[0][0]) for a in arrays])
np.savez(sys.argv[1], isa=mg._core._cpu_isa(), exact=[n for n, c in CASES.items() if c[2]], **res)
"""


def _bits(a):
    """As the child's bits(): NaNs made one (which of two NaNs an add returns is the compiler's)."""
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    a = np.where(np.isnan(a.astype(np.float32)), np.array(np.nan, a.dtype), a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def _cpu_has(isa):
    if isa == "generic":
        return True
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    need = {"avx2": ["avx2", "fma"], "avx512": ["avx512f", "avx512dq", "avx512vl", "avx512bw"]}[isa]
    return all(f" {f}" in flags for f in need)


@pytest.fixture(scope="module")
def per_isa(tmp_path_factory):
    """{isa asked: the child's results}; the child asserts fused == unfused on its path."""
    out = {}
    for isa in ISAS:
        path = tmp_path_factory.mktemp(isa) / "r.npz"
        env = dict(os.environ, MPSGRAPH_CPU_ISA=isa)
        r = subprocess.run([sys.executable, "-c", CHILD, str(path), os.path.dirname(__file__)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{isa}: {r.stderr[-3000:]}"
        out[isa] = dict(np.load(path))
    return out


@pytest.mark.parametrize("isa", ISAS)
def test_path_taken(per_isa, isa):
    """The cap picks the path asked for whenever the CPU has it (Linux reports the flags)."""
    got = str(per_isa[isa]["isa"])
    if _cpu_has(isa) or not os.path.exists("/proc/cpuinfo"):
        assert got == isa or not os.path.exists("/proc/cpuinfo")
    else:
        assert ISAS.index(got) < ISAS.index(isa)


def test_same_bits_on_every_isa_path(per_isa):
    base = per_isa["generic"]
    exact = [str(n) for n in base["exact"]]
    assert len(exact) >= 10
    for isa in ISAS[1:]:
        for name in exact:
            a, b = base[name], per_isa[isa][name]
            assert a.dtype == b.dtype and a.shape == b.shape, (isa, name)
            assert np.array_equal(_bits(a), _bits(b)), f"{name}: {isa} differs from generic"


@pytest.mark.parametrize("isa", ISAS)
def test_arithmetic_chains_equal_numpy_float32(per_isa, isa):
    """The float32 chains of exactly rounded ops, recomputed in numpy with the same order."""
    r = per_isa[isa]
    with np.errstate(all="ignore"):
        x, s, b = r["affine_relu.in"]
        relu = lambda v: np.where(v > 0, v, np.where(np.isnan(v), v, np.float32(0)))  # noqa: E731
        np.testing.assert_array_equal(r["affine_relu"], relu(x * s + b) * x - b)
        x, y, lo = r["min_max_clamp_select.in"]
        chosen = np.where(x > y, x / y, np.sqrt(np.abs(y)))
        clamped = np.minimum(np.maximum(np.maximum(x, lo) - np.minimum(y, lo), lo), np.abs(y))
        np.testing.assert_array_equal(r["min_max_clamp_select"], chosen + clamped)
        x, = r["reciprocal_square_negate.in"]
        np.testing.assert_array_equal(r["reciprocal_square_negate"],
                                      -(np.float32(1) / (x * x + np.float32(1))) * np.float32(3))
        x, y = r["sum_squared_error.in"]
        ref = np.sum(np.square(x * np.float32(1.5) + np.float32(0.25) - y).astype(np.float64), axis=1, keepdims=True)
        np.testing.assert_allclose(r["sum_squared_error"], ref.astype(np.float32), rtol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
def test_transcendental_chains_near_float64(per_isa, isa):
    """The chains compared within a path only: each near its float64 value."""
    r = per_isa[isa]
    with np.errstate(all="ignore"):
        x, b = (v.astype(np.float64) for v in r["sigmoid_tanh.in"])
        ref = 1 / (1 + np.exp(-(x * 1.5 + b))) * np.tanh(x) - np.exp(x * -0.5)
        np.testing.assert_allclose(r["sigmoid_tanh"], ref, rtol=2e-5, atol=2e-6)
        x, = r["erf_sum.in"].astype(np.float64)
        ref = np.sum(np.vectorize(math.erf)(x) * x, axis=1, keepdims=True)
        np.testing.assert_allclose(r["erf_sum"], ref, rtol=2e-5)
