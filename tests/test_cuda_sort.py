"""Sort, top_k, cumulative scans, one_hot and band_part on cuda:0 beyond the conformance
table: both sort paths (shared memory up to 2048 elements per line, global stages beyond),
stability and NaN order against numpy's stable sort, 64-bit keys, and both scan paths (one
thread per line, one block per line). Skips without a GPU."""
import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")


def _run(build, *arrays):
    g = mg.Graph()
    phs = [g.placeholder(a.shape, mg.as_dtype(a.dtype)) for a in arrays]
    outs = build(g, *phs)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    r = g.run(dict(zip(phs, arrays)), list(outs), device="cuda")
    return [r[o].numpy() for o in outs]


@pytest.mark.parametrize("n", [1, 5, 2048, 2049, 5000])
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int8, np.int32, np.int64, np.uint64])
def test_arg_sort_stable_with_ties_and_nan(n, dt):
    rng = np.random.default_rng(n)
    x = rng.integers(-4, 5, size=(3, n)).astype(np.float64)
    if np.dtype(dt).kind == "f":
        x[:, ::7] = np.nan
        x[:, 1::11] = -0.0
    if np.dtype(dt).kind == "u":
        x = np.abs(x)
    x = x.astype(dt)
    idx, vals = _run(lambda g, a: [g.arg_sort(a, axis=1), g.sort(a, axis=1)], x)
    # numpy's stable sort puts NaN last and keeps ties (-0.0 == 0.0) in position order
    key = x.astype(np.float64)
    ref = np.argsort(key, axis=1, kind="stable")
    np.testing.assert_array_equal(idx, ref)
    np.testing.assert_array_equal(vals.view(np.uint8), np.take_along_axis(x, ref, 1).view(np.uint8))


@pytest.mark.parametrize("n", [6, 3000])
def test_descending_sort_and_top_k_first_index_on_ties(n):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 6, size=(n, 2)).astype(np.float32)
    x[::5, 0] = np.nan
    idx = _run(lambda g, a: g.arg_sort(a, axis=0, descending=True), x)[0]
    # descending: NaN first, then larger keys; ties in position order
    key = np.where(np.isnan(x), -np.inf, -x)
    ref = np.argsort(key, axis=0, kind="stable")
    np.testing.assert_array_equal(idx, ref)
    k = min(n, 4)
    vals, ti = _run(lambda g, a: g.top_k(a, k, axis=0), x)
    np.testing.assert_array_equal(ti, ref[:k])
    np.testing.assert_array_equal(vals, np.take_along_axis(x, ref[:k], 0))
    bv, bi = _run(lambda g, a: g.bottom_k(a, k, axis=0), x)
    asc = np.argsort(x, axis=0, kind="stable")
    np.testing.assert_array_equal(bi, asc[:k])


@pytest.mark.parametrize("shape,axis", [((100000,), 0), ((3, 70000), 1), ((20000, 3), 0), ((5, 40, 7), 1)])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumulative_paths(shape, axis, exclusive, reverse):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    xi = rng.integers(-3, 4, size=shape).astype(np.int32)
    s, m, si = _run(lambda g, a, b: [g.cumulative_sum(a, axis, exclusive=exclusive, reverse=reverse),
                                     g.cumulative_maximum(a, axis, exclusive=exclusive, reverse=reverse),
                                     g.cumulative_sum(b, axis, exclusive=exclusive, reverse=reverse)], x, xi)

    def scan(v, f, ident):
        v = np.flip(v, axis) if reverse else v
        r = f(v, axis=axis)
        if exclusive:
            r = np.concatenate([np.full_like(np.take(r, [0], axis), ident), np.delete(r, -1, axis)], axis)
        return np.flip(r, axis) if reverse else r

    np.testing.assert_allclose(s, scan(x.astype(np.float64), np.cumsum, 0), rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(m, scan(x, np.maximum.accumulate, -np.inf))
    np.testing.assert_array_equal(si, scan(xi, np.cumsum, 0))


def test_one_hot_and_band_part():
    idx = np.array([[0, 3, -1], [2, 7, 1]], np.int64)
    oh = _run(lambda g, a: g.one_hot(a, 4, axis=1, dtype=mg.float16, on_value=2.0, off_value=-1.0), idx)[0]
    ref = np.full((2, 4, 3), -1.0, np.float16)
    for i in range(2):
        for t in range(3):
            if 0 <= idx[i, t] < 4:
                ref[i, idx[i, t], t] = 2.0
    np.testing.assert_array_equal(oh, ref)
    x = np.arange(2 * 5 * 4, dtype=np.int16).reshape(2, 5, 4) + 1
    for lo, up in [(-1, -1), (0, 0), (1, 2), (-1, 0), (3, -1)]:
        r = _run(lambda g, a: g.band_part(a, lo, up), x)[0]
        i, j = np.indices((5, 4))
        keep = ((lo < 0) | (i - j <= lo)) & ((up < 0) | (j - i <= up))
        np.testing.assert_array_equal(r, np.where(keep, x, 0))
