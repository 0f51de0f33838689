"""Conformance rows of the linear-algebra family (matrix_inverse, solve, cholesky, triangular_solve,
determinant, log_determinant), imported by conformance.py (the rows join conformance.ROWS: every
device, static and None dims, gradient checks).

References are numpy.linalg in float64 on the rounded inputs (scipy-free: the triangular solve and
the triangle-reading Cholesky take the triangle with np.tril / np.triu first). Inputs are drawn well
conditioned (diagonally dominant, symmetric positive definite, triangular with a strong diagonal),
so float32 and the half types agree with float64 to a few ulps; the singular and not-positive-definite
cases give NaN / 0 / -inf as documented. Gradients by finite differences in float64, to second order.
"""
import numpy as np

from conformance import FLOATS, Case, Grad, _CallDom, np_dtype, row

LINALG_TOL = {"float16": (4e-3, 2e-3), "bfloat16": (3e-2, 2e-2), "float32": (2e-5, 2e-6), "float64": (1e-10, 1e-12)}


def _dominant(rng, shape, dtype):
    """Random matrices with a diagonal of +-1 and off-diagonal entries below 1/n: well conditioned,
    determinants of order 1 and of either sign."""
    a = rng.uniform(-1, 1, size=shape)
    if len(shape) >= 2 and shape[-1] == shape[-2] and shape[-1] > 0:
        n = shape[-1]
        sign = np.where(rng.random(shape[:-1]) < 0.5, -1.0, 1.0)
        a = a * (1 - np.eye(n)) / (2 * n) + np.eye(n) * sign[..., None]
    return a.astype(np_dtype(dtype))


def _spd(rng, shape, dtype):
    """Symmetric positive-definite matrices (M M^T + n I); the other inputs of a case uniform."""
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return rng.uniform(-1, 1, size=shape).astype(np_dtype(dtype))
    m = rng.uniform(-1, 1, size=shape)
    a = m @ np.swapaxes(m, -1, -2) + np.eye(shape[-1]) * shape[-1]
    return a.astype(np_dtype(dtype))


def _triangularish(rng, shape, dtype):
    """Full random matrices with a diagonal of magnitude >= 1.5: either triangle is well conditioned."""
    a = rng.uniform(-1, 1, size=shape)
    if len(shape) >= 2 and shape[-1] == shape[-2] and shape[-1] > 0:
        d = rng.uniform(1.5, 2.5, size=shape[:-1]) * np.where(rng.random(shape[:-1]) < 0.5, -1, 1)
        a = a * (1 - np.eye(shape[-1])) + d[..., None] * np.eye(shape[-1])
    return a.astype(np_dtype(dtype))


DOMINANT, SPD, TRI = _CallDom(_dominant), _CallDom(_spd), _CallDom(_triangularish)
UNIFORM = _CallDom(lambda rng, shape, dtype: rng.uniform(-1, 1, size=shape).astype(np_dtype(dtype)))


def _f64(x):
    return np.asarray(x, np.float64)


def _inv_ref(x):
    x = _f64(x)
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-2]):
        try:
            out[idx] = np.linalg.inv(x[idx])
        except np.linalg.LinAlgError:  # exactly singular: documented NaN
            out[idx] = np.nan
    return out


def _solve_ref(a, b):
    a, b = _f64(a), _f64(b)
    if b.ndim == 1:
        return _inv_ref(a) @ b if a.shape[-1] else np.zeros(a.shape[:-1])
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + b.shape[-2:])
    for idx in np.ndindex(*batch):
        try:
            out[idx] = np.linalg.solve(a[idx], b[idx])
        except np.linalg.LinAlgError:
            out[idx] = np.nan
    return out


def _cholesky_ref(x, upper=False):
    x = _f64(x)
    # the kernel reads one triangle: symmetrise it from that triangle
    t = np.triu(x) if upper else np.tril(x)
    sym = t + np.swapaxes(t, -1, -2) - t * np.eye(x.shape[-1])
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-2]):
        try:
            low = np.linalg.cholesky(sym[idx])
            out[idx] = low.T if upper else low
        except np.linalg.LinAlgError:
            out[idx] = np.nan
    return out


def _substitute(t, b, upper):
    """Forward / back substitution of T X = B, batched (a zero pivot gives inf / NaN, as IEEE division)."""
    n = t.shape[-1]
    x = np.zeros(b.shape)
    order = range(n - 1, -1, -1) if upper else range(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in order:
            acc = b[..., i, :] - np.einsum("...j,...jk->...k", t[..., i, :], x)
            x[..., i, :] = acc / t[..., i, i][..., None]
    return x


def _triangular_solve_ref(a, b, upper, left=True, unit_diagonal=False):
    a, b = _f64(a), _f64(b)
    t = np.triu(a) if upper else np.tril(a)
    if unit_diagonal:
        t = t * (1 - np.eye(a.shape[-1])) + np.eye(a.shape[-1])
    if not left:  # X A = B  <=>  A^T X^T = B^T
        t, b, upper = np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2), not upper
    batch = np.broadcast_shapes(t.shape[:-2], b.shape[:-2])
    x = _substitute(np.broadcast_to(t, batch + t.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:]), upper)
    return x if left else np.swapaxes(x, -1, -2)


def _det_ref(x):
    return np.linalg.det(_f64(x))


def _slogdet_ref(x):
    s, l = np.linalg.slogdet(_f64(x))
    return s, l


_SQUARE = [Case(((3, 3),)), Case(((1, 1),)), Case(((5, 5),)), Case(((2, 4, 4),)), Case(((2, 3, 2, 2),)),
           Case(((0, 3, 3),), label="zero batch"), Case(((2, 0, 0),), label="empty matrices"),
           Case(((200, 4, 4),), label="parallel batch"), Case(((80, 80),), label="large")]
_SINGULAR = [Case(values=([[1.0, 2.0], [2.0, 4.0]],), label="singular"),
             Case(values=([[[0.0, 0.0], [0.0, 0.0]], [[2.0, 0.0], [0.0, 4.0]]],), label="zero matrix in a batch")]
_GRAD = Grad(cases=(0, 3), second_order=(0,), unknown_dims=(3,), rtol=1e-5, atol=1e-7)

row("matrix_inverse", "matrix_inverse", _inv_ref, FLOATS, _SQUARE + _SINGULAR, doms=DOMINANT, tol=LINALG_TOL,
    grad=_GRAD)
row("alias_inv", "inv", _inv_ref, ("float32",), [Case(((3, 3),))], doms=DOMINANT, tol=LINALG_TOL)

row("determinant", "determinant", _det_ref, FLOATS, _SQUARE + _SINGULAR, doms=DOMINANT, tol=LINALG_TOL, grad=_GRAD)
# log|det| is a sum of n logs, each with its own float32 rounding: the absolute error grows with n
# (the 80 x 80 case's unrolled LU off the CPU reached 2.0e-6)
_LOGDET_TOL = dict(LINALG_TOL, float32=(2e-5, 1e-5))
row("log_determinant", "log_determinant", _slogdet_ref, FLOATS,
    _SQUARE + _SINGULAR + [Case(values=([[0.0, 1.0], [1.0, 0.0]],), label="negative determinant")],
    doms=DOMINANT, tol=_LOGDET_TOL, grad=_GRAD)
row("alias_slogdet", "slogdet", _slogdet_ref, ("float32",), [Case(((3, 3),))], doms=DOMINANT, tol=LINALG_TOL)

row("solve", "solve", _solve_ref, FLOATS, [
    Case(((3, 3), (3, 2))), Case(((3, 3), (3,)), label="vector b"), Case(((2, 4, 4), (2, 4, 3))),
    Case(((2, 1, 3, 3), (4, 3, 1)), label="broadcast batch"), Case(((4, 4), (5, 4, 2)), label="b batched only"),
    Case(((0, 2, 2), (0, 2, 1)), label="zero batch"), Case(((3, 3), (3, 0)), label="no columns"),
    Case(((100, 3, 3), (100, 3, 2)), label="parallel batch"), Case(((60, 60), (60, 5)), label="large"),
    Case(values=([[1.0, 2.0], [2.0, 4.0]], [[1.0], [1.0]]), label="singular")],
    doms=(DOMINANT, UNIFORM), tol=LINALG_TOL,
    grad=Grad(cases=(0, 1, 3), second_order=(0,), unknown_dims=(3,), rtol=1e-5, atol=1e-7))

_CHOL = [Case(((3, 3),)), Case(((3, 3),), {"upper": True}), Case(((1, 1),)), Case(((2, 5, 5),)),
         Case(((2, 5, 5),), {"upper": True}), Case(((0, 4, 4),), label="zero batch"),
         Case(((150, 3, 3),), label="parallel batch"), Case(((70, 70),), label="large")]
row("cholesky", "cholesky", _cholesky_ref, FLOATS, _CHOL + [
    Case(values=([[1.0, 2.0], [2.0, 1.0]],), label="not positive definite"),
    Case(values=([[4.0, 99.0], [2.0, 5.0]],), label="upper triangle ignored"),
    Case(values=([[4.0, 2.0], [99.0, 5.0]],), attrs={"upper": True}, label="lower triangle ignored")],
    doms=SPD, tol=LINALG_TOL, grad=Grad(cases=(0, 1, 3), second_order=(0,), unknown_dims=(3,), rtol=1e-5, atol=1e-7))

_TRI = [Case(((3, 3), (3, 2)), {"upper": False}), Case(((3, 3), (3, 2)), {"upper": True}),
        Case(((4, 4), (4, 3)), {"upper": True, "unit_diagonal": True}),
        Case(((4, 4), (2, 4)), {"upper": False, "left": False}),
        Case(((2, 3, 3), (2, 3, 1)), {"upper": False, "unit_diagonal": True}),
        Case(((2, 1, 3, 3), (5, 2, 3)), {"upper": True, "left": False}, label="broadcast batch"),
        Case(((0, 3, 3), (0, 3, 2)), {"upper": False}, label="zero batch"),
        Case(((3, 3), (3, 0)), {"upper": True}, label="no columns"),
        Case(((120, 3, 3), (120, 3, 2)), {"upper": True}, label="parallel batch"),
        Case(values=([[0.0, 0.0], [1.0, 1.0]], [[1.0], [0.0]]), attrs={"upper": False}, label="zero diagonal")]
row("triangular_solve", "triangular_solve", _triangular_solve_ref, FLOATS, _TRI, doms=(TRI, UNIFORM), tol=LINALG_TOL,
    grad=Grad(cases=(0, 1, 2, 3, 5), second_order=(0, 3), unknown_dims=(5,), rtol=1e-5, atol=1e-7))
