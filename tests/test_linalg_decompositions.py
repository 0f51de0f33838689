"""The decompositions of cholesky, triangular_solve, determinant and log_determinant (what Metal and
CUDA run: the CPU keeps its LAPACK kernels), run on the CPU through conftest.cpu_decompositions and
checked against numpy.linalg: batched and broadcast, n = 0 and 1, singular, near-singular and not
positive definite inputs, the size limit, and the gradient rules by finite differences on top of
the decomposed ops."""
import numpy as np
import pytest

import mpsgraph as mg
from conftest import cpu_decompositions
from gradcheck import check_op_gradient

DT = {np.float64: mg.float64, np.float32: mg.float32}


def _run(op, *arrays, unknown=False, **attrs):
    with cpu_decompositions():
        g = mg.Graph()
        phs = [g.placeholder(tuple(None for _ in a.shape) if unknown else a.shape, DT[a.dtype.type]) for a in arrays]
        out = getattr(g, op)(*phs, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        res = g.run(dict(zip(phs, arrays)), list(outs))
        return [np.asarray(res[o]) for o in outs]


def _spd(rng, shape):
    m = rng.standard_normal(shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


def _tri_ref(a, b, upper, left, unit):
    t = np.triu(a) if upper else np.tril(a)
    if unit:
        n = a.shape[-1]
        t = t * (1 - np.eye(n)) + np.eye(n)
    if left:
        return np.linalg.solve(t, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("unknown", [False, True])
def test_cholesky(n, dtype, unknown):
    rng = np.random.default_rng(n)
    a = _spd(rng, (3, 2, n, n))
    a[..., 0:1, 1:] += 5.0  # the strict upper triangle is never read by the lower factor
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    lower = _run("cholesky", a.astype(dtype), unknown=unknown)[0]
    np.testing.assert_allclose(lower, np.linalg.cholesky(np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)), **tol)
    up = _run("cholesky", np.swapaxes(a, -1, -2).astype(dtype), upper=True, unknown=unknown)[0]
    np.testing.assert_allclose(up, np.swapaxes(lower, -1, -2), **tol)


def test_cholesky_not_positive_definite_is_nan_per_matrix():
    a = np.stack([np.eye(3), np.diag([1.0, -1.0, 1.0]), np.zeros((3, 3)), np.full((3, 3), 1.0)])
    out = _run("cholesky", a)[0]
    np.testing.assert_array_equal(out[0], np.eye(3))
    for i in (1, 2, 3):  # negative pivot, zero pivot, semi-definite: all NaN, as the CPU kernel
        assert np.isnan(out[i]).all()


@pytest.mark.parametrize("n", [0, 1, 3, 12])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_triangular_solve(n, upper, left, unit):
    rng = np.random.default_rng(n)
    a = rng.uniform(-1, 1, (2, 1, n, n)) + np.eye(n) * 3
    b = rng.standard_normal((4, n, 5) if left else (4, 5, n))  # batch (2, 1) against (4,): (2, 4)
    out = _run("triangular_solve", a, b, upper=upper, left=left, unit_diagonal=unit)[0]
    ref = _tri_ref(a, b, upper, left, unit)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)


def test_triangular_solve_zero_diagonal_gives_inf():
    a = np.array([[0.0, 0.0], [1.0, 1.0]])
    out = _run("triangular_solve", a, np.array([[1.0], [1.0]]), upper=False)[0]
    np.testing.assert_array_equal(out, [[np.inf], [-np.inf]])  # 1/0, then (1 - 1 * inf) / 1


def _dets(rng, n):
    a = rng.standard_normal((3, 2, n, n))
    if n >= 2:
        a[0, 0, 1] = 0.0  # a zero row
        a[0, 1] = 0.0  # all zero
        a[1, 0, :, 0] = 0.0  # zero first column: the pivot search finds nothing
        a[1, 1, -1] = a[1, 1, 0] + 1e-9  # near-singular: digits lost as the condition number says
        a[2, 0] = np.eye(n)[::-1]  # a permutation: sign from the row swaps alone
    return a


@pytest.mark.parametrize("n", [0, 1, 2, 3, 8, 20])
@pytest.mark.parametrize("unknown", [False, True])
def test_determinant_and_log_determinant(n, unknown):
    rng = np.random.default_rng(n)
    a = _dets(rng, n)
    det = _run("determinant", a, unknown=unknown)[0]
    sign, logabs = _run("log_determinant", a, unknown=unknown)
    ref_sign, ref_log = np.linalg.slogdet(a)
    ref_det = np.linalg.det(a)
    near = np.zeros(det.shape, bool)
    near[1, 1] = n >= 2  # digits lost as the condition number says
    np.testing.assert_allclose(det[~near], ref_det[~near], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(det[near], ref_det[near], rtol=1e-5)
    np.testing.assert_array_equal(sign, ref_sign)
    finite = np.isfinite(ref_log)
    np.testing.assert_array_equal(logabs[~finite], ref_log[~finite])
    np.testing.assert_allclose(logabs[finite], ref_log[finite], rtol=0, atol=1e-5)


def test_determinant_float32_and_pivoting():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 10, 10))
    a[:, 0, 0] = 1e-9  # without row exchanges the first pivot would wreck float32
    det = _run("determinant", a.astype(np.float32))[0]
    np.testing.assert_allclose(det, np.linalg.det(a.astype(np.float32).astype(np.float64)), rtol=2e-4)


def test_singular_gives_zero_and_minus_inf():
    a = np.array([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], np.zeros((3, 3))])
    assert (_run("determinant", a)[0] == 0).all()
    sign, logabs = _run("log_determinant", a)
    np.testing.assert_array_equal(sign, [0.0, 0.0])
    np.testing.assert_array_equal(logabs, [-np.inf, -np.inf])


def test_size_limit_names_op_backends_and_n():
    a = np.random.default_rng(0).standard_normal((128, 128)) / 12 + np.eye(128)
    np.testing.assert_allclose(_run("determinant", a)[0], np.linalg.det(a), rtol=1e-8)
    for op, args in [("cholesky", (np.eye(129),)), ("determinant", (np.eye(129),)), ("log_determinant", (np.eye(129),)),
                     ("triangular_solve", (np.eye(129), np.ones((129, 1))))]:
        kw = {"upper": False} if op == "triangular_solve" else {}
        with pytest.raises(mg.GraphNotImplementedError, match=rf"\[{op}\] a 129x129 matrix .*128.*Metal, CUDA"):
            _run(op, *args, **kw)


def _gradcheck(build, arrays, **kw):
    with cpu_decompositions():
        check_op_gradient(build, arrays, rtol=1e-5, atol=1e-7, **kw)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_gradient(upper):
    a = _spd(np.random.default_rng(1), (2, 4, 4))
    _gradcheck(lambda g, x: g.cholesky(x, upper=upper), [a])


@pytest.mark.parametrize("upper,left,unit", [(False, True, False), (True, False, False), (True, True, True)])
def test_triangular_solve_gradient(upper, left, unit):
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (2, 4, 4)) + np.eye(4) * 3
    b = rng.standard_normal((4, 3) if left else (3, 4))
    _gradcheck(lambda g, x, y: g.triangular_solve(x, y, upper=upper, left=left, unit_diagonal=unit), [a, b],
               second_order=True)


def test_determinant_gradients():
    a = np.random.default_rng(3).standard_normal((2, 4, 4)) + np.eye(4) * 2
    _gradcheck(lambda g, x: g.determinant(x), [a], second_order=True)
    _gradcheck(lambda g, x: g.log_determinant(x)[1], [a], second_order=True)


def test_unknown_sizes_stay_folded_until_specialisation():
    g = mg.Graph()
    x = g.placeholder((None, None, None), mg.float64)
    y = g.determinant(x)
    assert "left folded" in g.format(expand_composites=True)
    a = np.random.default_rng(7).standard_normal((2, 5, 5))
    with cpu_decompositions():
        np.testing.assert_allclose(np.asarray(g.run({x: a}, [y])[y]), np.linalg.det(a), rtol=1e-10)
