"""The sparse family on cuda:0 (sparse_tensor, sparse_gather, sparse_matmul, sparse_sampled_matmul)
beyond the conformance table: every storage ('coo', 'csr', 'csc'), int32 and int64 indices and
every value dtype the CPU takes, on structures with duplicate entries in scattered order, empty
rows and columns, skewed rows and more rows than one block's threads.

Results are compared bit for bit with the CPU (both add the entries of a result element in
storage order, without multiply-add contraction) and with references densified by numpy (float64
products; integer sums wrap as numpy's in-place adds do). Gradients through every op against
the analytic ones, index errors with the CPU's message, and replays with new index values.
MPSGRAPH_TEST_CUDA_DEVICE=cpu runs the same checks on the CPU (the tests' own logic); without a
GPU the file skips."""
import ml_dtypes
import numpy as np
import pytest

import mpsgraph as mg
from cuda_device import DEVICE, run as _run, skip_without_device

pytestmark = skip_without_device


STORAGES = ("coo", "csr", "csc")
FLOATS = (np.float32, np.float16, ml_dtypes.bfloat16)
INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
IDX = (np.int32, np.int64)


def _structure(storage, rows, cols, nnz, seed, idx=np.int32, skew=False):
    """(i0, i1, entry rows, entry cols) of a random matrix with repeated positions; coo entries
    in scattered order, csr/csc grouped by row/column with each group's entries in scattered order."""
    rng = np.random.default_rng(seed)
    r = rng.integers(0, rows, nnz) if rows else np.zeros(0, np.int64)
    c = rng.integers(0, cols, nnz) if cols else np.zeros(0, np.int64)
    if skew and nnz:
        r[: nnz // 2] = rows // 2  # one long row (and, for csc, long columns are likely too)
    if nnz > 4:  # exact repeats of earlier positions
        k = nnz // 5
        r[-k:], c[-k:] = r[:k], c[:k]
    perm = rng.permutation(nnz)
    r, c = r[perm], c[perm]
    if storage == "coo":
        return c.astype(idx), r.astype(idx), r, c
    key = r if storage == "csr" else c
    order = np.argsort(key, kind="stable")
    r, c = r[order], c[order]
    groups = rows if storage == "csr" else cols
    starts = np.searchsorted(key[order], np.arange(groups + 1)).astype(idx)
    return (c if storage == "csr" else r).astype(idx), starts, r, c


def _values(dt, n, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(int(info.min), -100), min(int(info.max), 100), n, endpoint=True).astype(dt)
    return rng.uniform(-2, 2, n).astype(dt)


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.reshape(-1).view(np.uint8)


def _same_as_cpu(build, *values):
    """The results on DEVICE, checked bit for bit against the CPU's."""
    cpu = _run(build, values, "cpu")
    dev = _run(build, values, DEVICE)
    for a, b in zip(dev, cpu):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(_bits(a), _bits(b))
    return dev


def _dense(values, r, c, shape, acc):
    out = np.zeros(shape, acc)
    np.add.at(out, (r, c), values.astype(acc))
    return out


def _tol(dt):
    return {np.float32: 1e-5, np.float16: 2e-2, ml_dtypes.bfloat16: 6e-2}[dt]


# ---- sparse_tensor (to dense) ----

@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("dt", FLOATS + INTS, ids=lambda d: np.dtype(d).name)
def test_to_dense_every_dtype(storage, idx, dt):
    rows, cols, nnz = 37, 23, 300
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=1, idx=idx)
    v = _values(dt, nnz, 2)
    (dev,) = _same_as_cpu(lambda g, a, b, e: g.sparse_tensor(storage, (a, b, e), (rows, cols)).to_dense(), v, i0, i1)
    if np.dtype(dt).kind in "iu":  # duplicates add up and wrap, as numpy's in-place add of the dtype
        np.testing.assert_array_equal(dev, _dense(v, r, c, (rows, cols), dt))
    else:
        want = _dense(v, r, c, (rows, cols), np.float64)
        np.testing.assert_allclose(dev.astype(np.float64), want, rtol=_tol(dt), atol=_tol(dt) * 4)


def test_to_dense_integer_sums_wrap():
    v = np.array([100, 100, 100, -128], np.int8)
    i0, i1 = np.array([1, 1, 1, 0], np.int32), np.array([0, 0, 0, 1], np.int32)
    (dev,) = _same_as_cpu(lambda g, a, b, e: g.sparse_tensor("coo", (a, b, e), (2, 2)).to_dense(), v, i0, i1)
    np.testing.assert_array_equal(dev, np.array([[0, np.int8(44)], [-128, 0]], np.int8))


@pytest.mark.parametrize("storage", STORAGES)
def test_many_rows_and_skewed_rows(storage):
    """More rows than one block's threads (row starts summed in runs) and one row of half the entries."""
    rows, cols, nnz, n = 3000, 700, 20000, 5
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=3, idx=np.int64, skew=True)
    v = _values(np.float32, nnz, 4)
    d = np.random.default_rng(5).standard_normal((cols, n)).astype(np.float32)

    def build(g, a, b, e, dd):
        s = g.sparse_tensor(storage, (a, b, e), (rows, cols))
        return [s.to_dense(), g.sparse_matmul(s, dd)]

    dense, prod = _same_as_cpu(build, v, i0, i1, d)
    want = _dense(v, r, c, (rows, cols), np.float64)
    np.testing.assert_allclose(dense, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(prod, want @ d.astype(np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", ["no entries", "no rows", "no columns", "no dense columns"])
@pytest.mark.parametrize("storage", STORAGES)
def test_empty_cases(storage, case):
    rows, cols, nnz, n = {"no entries": (4, 3, 0, 2), "no rows": (0, 3, 0, 2), "no columns": (3, 0, 0, 2),
                          "no dense columns": (4, 3, 6, 0)}[case]
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=6)
    v = _values(np.float32, nnz, 7)
    d = np.ones((cols, n), np.float32)

    def build(g, a, b, e, dd):
        s = g.sparse_tensor(storage, (a, b, e), (rows, cols))
        return [s.to_dense(), g.sparse_matmul(s, dd)]

    dense, prod = _same_as_cpu(build, v, i0, i1, d)
    want = _dense(v, r, c, (rows, cols), np.float64)
    np.testing.assert_allclose(dense, want, rtol=1e-6)
    np.testing.assert_allclose(prod, want @ d, rtol=1e-5, atol=1e-6)


# ---- sparse_gather ----

@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("dt", FLOATS + INTS, ids=lambda d: np.dtype(d).name)
def test_gather_every_dtype(storage, idx, dt):
    rows, cols, nnz = 19, 31, 150
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=8, idx=idx)
    x = _values(dt, rows * cols, 9).reshape(rows, cols)
    (dev,) = _same_as_cpu(lambda g, a, b, e: g.sparse_gather(a, b, e, storage=storage, shape=(rows, cols)), x, i0, i1)
    np.testing.assert_array_equal(_bits(dev), _bits(x[r, c]))


# ---- sparse_matmul, dense @ sparse, sparse_sampled_matmul ----

@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
def test_sparse_matmul(storage, idx, dt):
    rows, cols, nnz, n = 45, 38, 400, 33
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=10, idx=idx)
    v = _values(dt, nnz, 11)
    d = _values(dt, cols * n, 12).reshape(cols, n)
    w = _values(dt, 7 * rows, 13).reshape(7, rows)

    def build(g, a, b, e, dd, ww):
        s = g.sparse_tensor(storage, (a, b, e), (rows, cols))
        return [g.sparse_matmul(s, dd), g.sparse_matmul(ww, s)]

    sd, ds = _same_as_cpu(build, v, i0, i1, d, w)
    a = _dense(v, r, c, (rows, cols), np.float64)
    t = _tol(dt) * 10
    np.testing.assert_allclose(sd.astype(np.float64), a @ d.astype(np.float64), rtol=t, atol=t * 5)
    np.testing.assert_allclose(ds.astype(np.float64), w.astype(np.float64) @ a, rtol=t, atol=t * 5)


@pytest.mark.parametrize("n", [19, 20])
@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
def test_csr_product_reads_rows_where_stored(idx, dt, n, monkeypatch):
    """A csr sparse_matmul reads each row's entries where they are stored, without the row view
    (counting sort and per-row sort) that coo and csc need: the same bits as through the row view
    (MPSGRAPH_CUDA_SPMM_CSR=0) and as the CPU, with a long row, empty rows, repeated positions
    and more rows than a block's threads. float32 with 20 dense columns takes the kernel of four
    columns a thread."""
    rows, cols, nnz = 300, 70, 2500
    i0, i1, r, c = _structure("csr", rows, cols, nnz, seed=30, idx=idx, skew=True)
    v = _values(dt, nnz, 31)
    d = _values(dt, cols * n, 32).reshape(cols, n)

    def build(g, a, b, e, dd):
        return g.sparse_matmul(g.sparse_tensor("csr", (a, b, e), (rows, cols)), dd)

    (direct,) = _same_as_cpu(build, v, i0, i1, d)
    monkeypatch.setenv("MPSGRAPH_CUDA_SPMM_CSR", "0")
    (viewed,) = _same_as_cpu(build, v, i0, i1, d)
    np.testing.assert_array_equal(_bits(direct), _bits(viewed))
    t = _tol(dt) * 10
    want = _dense(v, r, c, (rows, cols), np.float64) @ d.astype(np.float64)
    np.testing.assert_allclose(direct.astype(np.float64), want, rtol=t, atol=t * 5)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
def test_sparse_sampled_matmul(storage, idx, dt):
    rows, cols, nnz, n = 29, 41, 250, 17
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=14, idx=idx)
    x = _values(dt, rows * n, 15).reshape(rows, n)
    y = _values(dt, cols * n, 16).reshape(cols, n)
    (dev,) = _same_as_cpu(lambda g, a, b, e, f: g.sparse_sampled_matmul(a, b, e, f, storage=storage,
                                                                         shape=(rows, cols)), x, y, i0, i1)
    want = (x.astype(np.float64) @ y.astype(np.float64).T)[r, c]
    t = _tol(dt) * 10
    np.testing.assert_allclose(dev.astype(np.float64), want, rtol=t, atol=t * 5)


# ---- gradients ----

@pytest.mark.parametrize("storage", STORAGES)
def test_gradients(storage):
    """d/d(values, dense) of sum(w * (A @ d)) and of sum(u * to_dense(A)), and d/dx of
    sum(z * gather(x)): every op of the family runs as a gradient of another."""
    rows, cols, nnz, n = 13, 11, 60, 6
    i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=17)
    rng = np.random.default_rng(18)
    v = rng.standard_normal(nnz).astype(np.float32)
    d = rng.standard_normal((cols, n)).astype(np.float32)
    w = rng.standard_normal((rows, n)).astype(np.float32)
    u = rng.standard_normal((rows, cols)).astype(np.float32)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    z = rng.standard_normal(nnz).astype(np.float32)

    def build(g, a, b, e, dd, ww, uu, xx, zz):
        s = g.sparse_tensor(storage, (a, b, e), (rows, cols))
        l1 = g.reduction_sum(ww * g.sparse_matmul(s, dd), axes=[0, 1])
        l2 = g.reduction_sum(uu * s.to_dense(), axes=[0, 1])
        l3 = g.reduction_sum(zz * g.sparse_gather(xx, b, e, storage=storage, shape=(rows, cols)), axes=[0])
        g1 = g.gradients(l1, [a, dd])
        return [g1[a], g1[dd], g.gradients(l2, a)[a], g.gradients(l3, xx)[xx]]

    dv, dd, dv2, dx = _same_as_cpu(build, v, i0, i1, d, w, u, x, z)
    a = _dense(v, r, c, (rows, cols), np.float64)
    np.testing.assert_allclose(dv, (w.astype(np.float64) @ d.astype(np.float64).T)[r, c], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dd, a.T @ w.astype(np.float64), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dv2, u[r, c])
    np.testing.assert_allclose(dx, _dense(z, r, c, (rows, cols), np.float64), rtol=1e-6, atol=1e-6)


# ---- index errors, replays ----

_BAD = [
    ("coo", [0, 4], [0, 1], r"column index 4 \(indices0\[1\]\) is out of range for shape \(2, 4\)"),
    ("coo", [0, 1], [-1, 1], r"row index -1 \(indices1\[0\]\) is out of range"),
    ("csr", [0, 9], [0, 1, 2], r"column index 9 \(indices0\[1\]\)"),
    ("csr", [0, 1], [1, 1, 2], r"row starts \(indices1\)\[0\] is 1, must be 0"),
    ("csr", [0, 1], [0, 2, 1], r"row starts \(indices1\)\[2\] = 1 is less than row starts \(indices1\)\[1\] = 2"),
    ("csr", [0, 1], [0, 1, 3], r"row starts \(indices1\)\[2\] = 3 must equal the number of stored values 2"),
    ("csc", [2, 0], [0, 1, 2, 2, 2], r"row index 2 \(indices0\[0\]\) is out of range"),
    ("csc", [0, 1], [0, 1, 2, 2, 5], r"column starts \(indices1\)\[4\] = 5"),
    ("coo", [5, 4], [9, 1], r"column index 5 \(indices0\[0\]\)"),  # the CPU checks indices0 first
]


@pytest.mark.parametrize("storage,i0,i1,msg", _BAD)
@pytest.mark.parametrize("idx", IDX)
def test_bad_indices_same_message_as_cpu(storage, i0, i1, msg, idx):
    shape = (2, 4)
    g = mg.Graph()
    v = g.placeholder((2,), mg.float32)
    p0 = g.placeholder((len(i0),), mg.as_dtype(np.dtype(idx).name))
    p1 = g.placeholder((len(i1),), mg.as_dtype(np.dtype(idx).name))
    s = g.sparse_tensor(storage, (v, p0, p1), shape)
    outs = {"sparse_tensor": s.to_dense(), "sparse_matmul": s @ np.ones((4, 3), np.float32),
            "sparse_gather": g.sparse_gather(g.constant(np.ones(shape, np.float32)), p0, p1, storage=storage,
                                             shape=shape),
            "sparse_sampled_matmul": g.sparse_sampled_matmul(np.ones((2, 2), np.float32), np.ones((4, 2), np.float32),
                                                             p0, p1, storage=storage, shape=shape)}
    feeds = {v: np.array([1.0, 2.0], np.float32), p0: np.array(i0, idx), p1: np.array(i1, idx)}
    for op, t in outs.items():
        msgs = []
        for dev in ("cpu", DEVICE):
            with pytest.raises(mg.GraphIndexError, match=rf"\[{op}\] {msg}") as e:
                g.run(feeds, [t], device=dev)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1]


@pytest.mark.parametrize("storage", STORAGES)
def test_executable_replays_with_new_indices(storage):
    """One executable, run with several structures of the same sizes (and once with bad indices)."""
    rows, cols, nnz, n = 24, 17, 90, 4
    g = mg.Graph()
    v = g.placeholder((nnz,), mg.float32)
    p0 = g.placeholder((nnz,), mg.int32)
    p1 = g.placeholder((nnz if storage == "coo" else (rows if storage == "csr" else cols) + 1,), mg.int32)
    d = g.placeholder((cols, n), mg.float32)
    s = g.sparse_tensor(storage, (v, p0, p1), (rows, cols))
    outs = [s.to_dense(), g.sparse_matmul(s, d)]
    exe = g.compile({v: ((nnz,), mg.float32), p0: (p0.shape, mg.int32), p1: (p1.shape, mg.int32),
                     d: ((cols, n), mg.float32)}, outs, device=DEVICE)
    dv = np.random.default_rng(19).standard_normal((cols, n)).astype(np.float32)
    for seed in (20, 21, 22):
        i0, i1, r, c = _structure(storage, rows, cols, nnz, seed=seed)
        vals = _values(np.float32, nnz, seed)
        dense, prod = (np.asarray(t) for t in exe.run([vals, i0, i1, dv]))
        want = _dense(vals, r, c, (rows, cols), np.float64)
        np.testing.assert_allclose(dense, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(prod, want @ dv, rtol=1e-5, atol=1e-5)
        if seed == 21:
            bad = i0.copy()
            bad[3] = 1000
            with pytest.raises(mg.GraphIndexError, match=r"\[sparse_tensor\]|\[sparse_matmul\]"):
                exe.run([vals, bad, i1, dv])
