"""Smoke tests for the reduction, matmul and creation families against numpy (the full
conformance table lives in conformance.py). Covers the kernel paths: reductions over the
inner, outer and non-contiguous axis sets, the split reduction of large inputs, NaN
rules, unknown dims, errors; batched / 1-D / broadcast matmul; the creation ops; and the
gradient rules by finite differences."""
import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import check_op_gradient


def run1(build, arrays, none_dims=False):
    g = mg.Graph()
    phs = [g.placeholder((None,) * a.ndim if none_dims else a.shape, mg.as_dtype(a.dtype)) for a in arrays]
    out = build(g, *phs)
    return np.asarray(g.run(dict(zip(phs, arrays)), [out])[out])


def close(got, want, rtol=1e-5, atol=1e-5):
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


RNG = np.random.default_rng(7)
SHAPES_AXES = [((), None), ((5,), 0), ((3, 4), None), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4, 5), (0, 2)),
               ((2, 3, 4, 5), (1, 3)), ((2, 3, 4, 5), (3, 0)), ((4, 1, 3), 1), ((0, 3), 1), ((0, 3), 0),
               ((70000,), 0), ((3, 40000), 1), ((40000, 3), 0), ((5, 300, 7), (0, 2)), ((600, 300), 0),
               ((2, 50, 4100), 1)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8"])
@pytest.mark.parametrize("shape,axes", SHAPES_AXES)
def test_reductions(dtype, shape, axes):
    dt = np.dtype(dtype)
    x = RNG.standard_normal(shape).astype(dt) if dt.kind == "f" else RNG.integers(0, 50, shape).astype(dt)
    tol = dict(rtol=3e-3, atol=3e-3) if dtype == "float16" else {}
    # float references in float64 (numpy accumulates float16/float32 in their own precision)
    x64 = x.astype(np.float64) if dt.kind == "f" else x
    nonempty = all(shape[a] > 0 for a in (range(len(shape)) if axes is None else np.atleast_1d(axes)))
    for kd in (True, False):
        for none in (False, True):
            def r(op, **kw):
                return run1(lambda g, t: getattr(g, op)(t, axes=axes, keep_dims=kd, **kw), [x], none)
            close(r("reduction_sum"), np.sum(x64, axis=axes, keepdims=kd).astype(dt), **tol)
            close(r("reduction_or"), np.any(x, axis=axes, keepdims=kd))
            close(r("reduction_and"), np.all(x, axis=axes, keepdims=kd))
            if x.size < 1000:
                close(r("reduction_product"), np.prod(x, axis=axes, keepdims=kd, dtype=dt), rtol=1e-2, atol=1e-3)
            if nonempty:
                close(r("reduction_maximum"), np.max(x, axis=axes, keepdims=kd))
                close(r("reduction_minimum"), np.min(x, axis=axes, keepdims=kd))
            if dt.kind == "f":
                with np.errstate(all="ignore"):
                    close(r("mean"), np.mean(x64, axis=axes, keepdims=kd).astype(dt), **tol)
                    close(r("variance"), np.var(x64, axis=axes, keepdims=kd).astype(dt), **tol)
                    lse = np.log(np.sum(np.exp(x64), axis=axes, keepdims=kd)).astype(dt)
                    close(r("logsumexp"), lse, **tol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int64"])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 4, 5), 1), ((3, 4, 5), -1), ((0, 4), 1), ((100000,), 0),
                                        ((2, 60000), 1), ((50000, 3), 0), ((600, 300), 0), ((3, 5000, 7), 1)])
def test_arg_reductions(dtype, shape, axis):
    dt = np.dtype(dtype)
    x = RNG.integers(-3, 4, shape).astype(dt)  # many ties: the first index wins
    for kd in (True, False):
        for none in (False, True):
            close(run1(lambda g, t: g.reduction_arg_maximum(t, axis=axis, keep_dims=kd), [x], none),
                  np.argmax(x, axis=axis, keepdims=kd).astype(np.int32))
            close(run1(lambda g, t: g.reduction_argmin(t, axis=axis, keep_dims=kd, dtype=mg.int64), [x], none),
                  np.argmin(x, axis=axis, keepdims=kd).astype(np.int64))


def test_nan_inf_rules():
    x = np.array([[1, np.nan, 3, np.nan], [np.inf, 1, -np.inf, 2], [-np.inf] * 4, [np.inf, np.inf, 1, 2]], np.float32)
    with np.errstate(all="ignore"):
        for ax in (0, 1):
            close(run1(lambda g, t: g.max(t, axis=ax), [x]), np.max(x, axis=ax))
            close(run1(lambda g, t: g.min(t, axis=ax), [x]), np.min(x, axis=ax))
            close(run1(lambda g, t: g.var(t, axis=ax), [x]), np.var(x, axis=ax))
            close(run1(lambda g, t: g.argmax(t, axis=ax), [x]), np.argmax(x, axis=ax).astype(np.int32))
            close(run1(lambda g, t: g.argmin(t, axis=ax), [x]), np.argmin(x, axis=ax).astype(np.int32))
        lse = run1(lambda g, t: g.logsumexp(t, axes=1, keep_dims=False), [x])
        np.testing.assert_array_equal(lse[1:], [np.inf, -np.inf, np.inf])
        assert np.isnan(lse[0])
    big = np.zeros(200000, np.float32)
    big[[150000, 170000]] = 1
    assert run1(lambda g, t: g.argmax(t), [big]) == 150000
    big[[120000, 190000]] = np.nan
    assert run1(lambda g, t: g.argmax(t), [big]) == 120000
    assert np.isnan(run1(lambda g, t: g.max(t), [big]))


def test_integer_wrap_and_bool():
    x = np.full(1000, 100, np.int8)
    close(run1(lambda g, t: g.sum(t), [x]), np.sum(x, dtype=np.int8))
    x = np.full(70, 3, np.int64)
    close(run1(lambda g, t: g.prod(t), [x]), np.prod(x, dtype=np.int64))
    b = RNG.random((4, 5)) < 0.5
    close(run1(lambda g, t: g.any(t, axis=1), [b]), np.any(b, axis=1))
    close(run1(lambda g, t: g.all(t, axis=0), [b]), np.all(b, axis=0))
    close(run1(lambda g, t: g.all(t), [np.array([-0.0, 1.0], np.float32)]), np.bool_(False))


def test_numpy_sugar():
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    close(run1(lambda g, t: g.sum(t), [x]), np.sum(x))
    close(run1(lambda g, t: g.max(t, axis=1, keepdims=True), [x]), np.max(x, axis=1, keepdims=True))
    close(run1(lambda g, t: g.var(t, axes=(0, 2)), [x]), np.var(x, axis=(0, 2)))
    close(run1(lambda g, t: g.argmax(t), [x]), np.int32(np.argmax(x)))
    close(run1(lambda g, t: g.argmin(t, keepdims=True), [x]), np.argmin(x, keepdims=True).astype(np.int32))
    close(run1(lambda g, t: g.argmax(t, axis=-1), [x]), np.argmax(x, axis=-1).astype(np.int32))
    close(run1(lambda g, t: t.sum(axis=0), [x]), np.sum(x, axis=0))
    # mean and logsumexp are registry ops: MPSGraph's keep_dims=True default
    close(run1(lambda g, t: g.mean(t, axes=1), [x]), np.mean(x, axis=1, keepdims=True))


def _err(fn, *frags):
    with pytest.raises(mg.GraphError) as e:
        fn()
    for f in frags:
        assert f in str(e.value), str(e.value)


def test_errors():
    g = mg.Graph()
    x, xn = g.placeholder((0, 3)), g.placeholder((None, 3))
    _err(lambda: g.reduction_maximum(x, axes=0), "[reduction_maximum] zero-size reduction has no identity")
    _err(lambda: g.argmax(x, axis=0), "zero-size")
    _err(lambda: g.reduction_sum(x, axes=(0, -2)), "repeated")
    _err(lambda: g.mean(g.placeholder((2,), mg.int32)), "floating")
    _err(lambda: g.reduction_arg_maximum(xn, axis=0, dtype=mg.int16), "int32 or int64")
    ym = g.reduction_maximum(xn, axes=0)
    _err(lambda: g.run({xn: np.zeros((0, 3), np.float32)}, [ym]), "zero-size reduction has no identity")
    _err(lambda: g.matmul(g.placeholder((32, 784)), g.placeholder((512, 10)), name="mm"),
         "[matrix_multiplication] inner dimensions differ: (32, 784) @ (512, 10) (node 'mm')")
    _err(lambda: g.matmul(g.placeholder((3, 4)), g.placeholder((4, 2), mg.float64)), "dtypes differ")
    _err(lambda: g.matmul(g.placeholder((3, 4), mg.bool_), g.placeholder((4, 2), mg.bool_)), "numeric")
    _err(lambda: g.matmul(g.placeholder((2, 3, 4)), g.placeholder((3, 4, 2))), "batch")
    a, b = g.placeholder((None, 5)), g.placeholder((None, 2))
    mm = a @ b
    _err(lambda: g.run({a: np.zeros((2, 5), np.float32), b: np.zeros((4, 2), np.float32)}, [mm]), "inner dimensions")
    _err(lambda: g.zeros((None, 2)), "static")
    _err(lambda: g.ones((-3, 2)), "non-negative")
    _err(lambda: g.arange(0, 5, 0), "nonzero")
    _err(lambda: g.eye(-1), "non-negative")


MM_CASES = [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)), ((2, 2, 3), (3, 4)), ((3, 4), (2, 4, 5)),
            ((2, 1, 3, 4), (5, 4, 2)), ((2, 0), (0, 3)), ((0, 3), (3, 2)), ((4, 2, 3), (3,)), ((3,), (4, 3, 2)),
            ((7, 1, 8, 9), (1, 6, 9, 3)), ((65, 130), (130, 33))]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8", "int16"])
@pytest.mark.parametrize("xs,ys", MM_CASES)
def test_matmul(dtype, xs, ys):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a, b = RNG.standard_normal(xs).astype(dt), RNG.standard_normal(ys).astype(dt)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt)
        tol = dict(rtol=1e-2, atol=5e-2) if dtype == "float16" else dict(rtol=1e-4, atol=1e-4)
    else:
        info = np.iinfo(dt)
        a = RNG.integers(info.min, info.max, xs, dtype=dt, endpoint=True)
        b = RNG.integers(info.min, info.max, ys, dtype=dt, endpoint=True)
        want = np.matmul(a.astype(np.uint64), b.astype(np.uint64)).astype(dt)  # wraps
        tol = {}
    for none in (False, True):
        close(run1(lambda g, p, q: g.matrix_multiplication(p, q), [a, b], none), want, **tol)


def test_creation():
    g = mg.Graph()
    cases = {
        "zeros": (g.zeros((2, 3)), np.zeros((2, 3), np.float32)),
        "zeros_empty": (g.zeros((2, 0), mg.int64), np.zeros((2, 0), np.int64)),
        "ones": (g.ones((4,), mg.float16), np.ones(4, np.float16)),
        "ones_rank0": (g.ones(()), np.ones((), np.float32)),
        "full_int": (g.full((2, 2), -7.9, mg.int8), np.full((2, 2), -7, np.int8)),
        "full_bool": (g.full((3,), 2.0, mg.bool_), np.full((3,), True)),
        "full_big": (g.full((300, 400), 0.5, mg.float64), np.full((300, 400), 0.5)),
        "arange_n": (g.arange(5), np.arange(5, dtype=np.float32)),
        "arange_frac": (g.arange(1, 2, 0.1), np.arange(1, 2, 0.1).astype(np.float32)),
        "arange_neg": (g.arange(5, 0, -1.5, mg.float64), np.arange(5, 0, -1.5)),
        "arange_empty": (g.arange(5, 0), np.arange(5, 0, dtype=np.float32)),
        "arange_int": (g.arange(-3, 7, 2, mg.int32), np.arange(-3, 7, 2, dtype=np.int32)),
        "eye": (g.eye(3), np.eye(3, dtype=np.float32)),
        "eye_rect_k": (g.eye(3, 5, 2, mg.int32), np.eye(3, 5, 2, dtype=np.int32)),
        "eye_neg_k": (g.eye(4, 3, -1), np.eye(4, 3, -1, dtype=np.float32)),
        "eye_k_outside": (g.eye(3, 3, 7), np.eye(3, 3, 7, dtype=np.float32)),
        "eye_empty": (g.eye(0), np.eye(0, dtype=np.float32)),
    }
    r = g.run({}, [t for t, _ in cases.values()])
    for name, (t, want) in cases.items():
        close(np.asarray(r[t]), want)


X = np.random.default_rng(3).standard_normal((3, 4, 2))


@pytest.mark.parametrize("op", ["reduction_sum", "mean", "variance", "logsumexp", "reduction_product",
                                "reduction_maximum", "reduction_minimum"])
@pytest.mark.parametrize("axes,kd", [(None, True), (None, False), (1, False), ((0, 2), True), ((-1, 0), False)])
def test_reduction_gradients(op, axes, kd):
    second = op not in ("reduction_maximum", "reduction_minimum")
    for unknown in (False, True):
        check_op_gradient(lambda g, a: getattr(g, op)(a, axes=axes, keep_dims=kd), [X], unknown_dims=unknown,
                          second_order=second)


def test_product_gradient_with_zeros():
    x = np.random.default_rng(4).standard_normal((3, 4))
    x[0, 1] = 0
    x[1, 0] = x[1, 3] = 0
    check_op_gradient(lambda g, a: g.reduction_product(a, axes=1), [x])


def test_max_gradient_splits_ties():
    g = mg.Graph()
    p = g.placeholder((2, 3), mg.float64)
    gr = g.gradients(g.sum(g.max(p, axis=1)), [p])[p]
    got = np.asarray(g.run({p: np.array([[1.0, 3.0, 3.0], [2.0, 1.0, 0.0]])}, [gr])[gr])
    np.testing.assert_allclose(got, [[0, 0.5, 0.5], [1, 0, 0]])


@pytest.mark.parametrize("xs,ys", [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)),
                                   ((2, 2, 3), (3, 4)), ((2, 1, 3, 4), (5, 4, 2)), ((3,), (2, 3, 2))])
def test_matmul_gradients(xs, ys):
    rng = np.random.default_rng(5)
    for unknown in (False, True):
        check_op_gradient(lambda g, a, b: g.matmul(a, b), [rng.standard_normal(xs), rng.standard_normal(ys)],
                          unknown_dims=unknown, second_order=True)
