"""Sparse matrices: the Python API (SparseTensor, transposes, operators) and bad input: shape and
index mismatches raise when the graph is built, naming the op; indices out of range and
malformed starts raise GraphIndexError when it runs (naming the op and the bad index), and the
graph stays usable afterwards. Values are compared with dense numpy products."""
import numpy as np
import pytest

import mpsgraph as mg


def _coo(g, shape=(3, 4), dtype=np.float32):
    v = g.constant(np.array([1.0, 2.0, 3.0], dtype))
    cols = g.constant(np.array([1, 3, 0], np.int32))
    rows = g.constant(np.array([0, 2, 2], np.int32))
    return g.sparse_tensor("coo", (v, cols, rows), shape)


def _dense_coo():
    d = np.zeros((3, 4))
    d[0, 1], d[2, 3], d[2, 0] = 1.0, 2.0, 3.0
    return d


def test_sparse_tensor_object():
    g = mg.Graph()
    s = _coo(g)
    assert isinstance(s, mg.SparseTensor)
    assert s.storage == "coo" and s.shape == (3, 4) and s.dtype == mg.float32 and len(s.tensors) == 3
    assert "nnz=3" in repr(s)
    d = np.arange(8, dtype=np.float32).reshape(4, 2)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b, t = s @ d, w @ s, s.T.to_dense()
    r = g.run({}, [s.to_dense(), a, b, t])
    np.testing.assert_array_equal(r[s.to_dense()].numpy(), _dense_coo())
    np.testing.assert_allclose(r[a].numpy(), _dense_coo() @ d)
    np.testing.assert_allclose(r[b].numpy(), w @ _dense_coo())
    np.testing.assert_array_equal(r[t].numpy(), _dense_coo().T)


@pytest.mark.parametrize("storage", ["csr", "CSR", 2])
def test_storage_spellings(storage):
    """'csr' as a name in any case or as MPSGraphSparseStorageType's value 2."""
    g = mg.Graph()
    s = g.sparse_tensor(storage, ([5.0, 6.0], np.array([2, 0], np.int32), np.array([0, 1, 2], np.int32)), (2, 3))
    assert s.storage == "csr"
    np.testing.assert_array_equal(g.run({}, [s.to_dense()])[s.to_dense()].numpy(), [[0, 0, 5], [6, 0, 0]])


def test_transposes_of_csr_and_csc_share_the_tensors():
    g = mg.Graph()
    s = g.sparse_tensor("csr", ([5.0, 6.0], np.array([2, 0], np.int32), np.array([0, 1, 2], np.int32)), (2, 3))
    t = s.T
    assert t.storage == "csc" and t.shape == (3, 2) and t.values is s.values and t.indices1 is s.indices1
    assert t.T.storage == "csr"
    np.testing.assert_array_equal(g.run({}, [t.to_dense()])[t.to_dense()].numpy(), [[0, 6], [0, 0], [5, 0]])


def test_sparse_matmul_large_against_dense():
    """Enough rows and entries for the parallel split (csr by rows; coo/csc by output columns)."""
    rng = np.random.default_rng(0)
    m, k, n = 300, 200, 150
    dense = np.where(rng.random((m, k)) < 0.05, rng.standard_normal((m, k)), 0.0)
    r, c = np.nonzero(dense)
    starts = np.searchsorted(r, np.arange(m + 1)).astype(np.int64)
    cstarts = np.searchsorted(np.sort(c), np.arange(k + 1)).astype(np.int64)
    order = np.lexsort((r, c))  # column-major order for csc
    d = rng.standard_normal((k, n))
    g = mg.Graph()
    mats = {"csr": g.sparse_tensor("csr", (dense[r, c], c.astype(np.int64), starts), (m, k)),
            "coo": g.sparse_tensor("coo", (dense[r, c], c.astype(np.int32), r.astype(np.int32)), (m, k)),
            "csc": g.sparse_tensor("csc", (dense[r[order], c[order]], r[order], cstarts), (m, k))}
    outs = {key: g.sparse_matmul(s, d) for key, s in mats.items()}
    res = g.run({}, list(outs.values()))
    for key, t in outs.items():
        np.testing.assert_allclose(res[t].numpy(), dense @ d, rtol=1e-10, atol=1e-10, err_msg=key)


# ---- bad input when the graph is built ----

def _raises(exc, *words):
    return pytest.raises(exc, match=".*".join(words))


def test_build_errors_name_the_op():
    g = mg.Graph()
    v = g.constant(np.ones(3, np.float32))
    i3 = g.constant(np.array([0, 1, 2], np.int32))
    i2 = g.constant(np.array([0, 1], np.int32))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "indices0", "2 entries", "3 stored values"):
        g.sparse_tensor("coo", (v, i2, i3), (3, 3))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "indices1", "2 entries"):
        g.sparse_tensor("coo", (v, i3, i2), (3, 3))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "row starts", r"rows \+ 1 = 4", r"\(3, 5\)"):
        g.sparse_tensor("csr", (v, i3, i3), (3, 5))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "column starts", r"cols \+ 1 = 6"):
        g.sparse_tensor("csc", (v, i3, i3), (3, 5))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "storage must be"):
        g.sparse_tensor("bsr", (v, i3, i3), (3, 3))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "shape must be 2-D"):
        g.sparse_tensor("coo", (v, i3, i3), (3, 3, 3))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "known and non-negative"):
        g.sparse_tensor("coo", (v, i3, i3), (None, 3))
    with _raises(mg.GraphTypeError, r"\[sparse_tensor\]", "int32 or int64", "indices0"):
        g.sparse_tensor("coo", (v, g.cast(i3, "float32"), i3), (3, 3))
    with _raises(mg.GraphTypeError, r"\[sparse_tensor\]", "one dtype"):
        g.sparse_tensor("coo", (v, i3, g.cast(i3, "int64")), (3, 3))
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "values", "1-D"):
        g.sparse_tensor("coo", (g.reshape(v, (3, 1)), i3, i3), (3, 3))
    with _raises(mg.GraphTypeError, r"\[sparse_tensor\]", "dtype float16", "cast"):
        g.sparse_tensor("coo", (v, i3, i3), (3, 3), dtype="float16")
    with _raises(mg.GraphTypeError, r"\[sparse_tensor\]", "tensors must be"):
        g.sparse_tensor("coo", (v, i3), (3, 3))


def test_sparse_matmul_build_errors():
    g = mg.Graph()
    s = _coo(g)
    with _raises(mg.GraphValueError, r"\[sparse_matmul\]", "dense", r"\(5, 2\)", "inner dimensions differ"):
        g.sparse_matmul(s, np.ones((5, 2), np.float32))
    with _raises(mg.GraphValueError, r"\[sparse_matmul\]", "2-D"):
        g.sparse_matmul(s, g.constant(np.ones(4, np.float32)))
    with _raises(mg.GraphTypeError, r"\[sparse_matmul\]", "float64"):
        g.sparse_matmul(s, g.constant(np.ones((4, 2), np.float64)))
    with _raises(mg.GraphTypeError, r"\[sparse_matmul\]", "one dense operand"):
        g.sparse_matmul(s, s)
    with _raises(mg.GraphTypeError, r"\[sparse_matmul\]", "SparseTensor"):
        g.sparse_matmul(np.ones((2, 2)), np.ones((2, 2)))
    si = g.sparse_tensor("coo", ([1, 2], np.array([0, 1], np.int32), np.array([0, 1], np.int32)), (2, 2))
    with _raises(mg.GraphTypeError, r"\[sparse_matmul\]", "floating-point"):
        g.sparse_matmul(si, np.ones((2, 2), np.int64))
    with _raises(mg.GraphValueError, r"\[sparse_matmul\]", "2-D"):
        g.sparse_matmul(g.constant(np.ones(3, np.float32)), s)


def test_unknown_nnz_checked_when_specialised():
    """With unknown lengths the build passes; mismatched lengths at run time raise, naming the op."""
    g = mg.Graph()
    v = g.placeholder((None,), mg.float32)
    i0 = g.placeholder((None,), mg.int32)
    i1 = g.placeholder((None,), mg.int32)
    y = g.sparse_tensor("coo", (v, i0, i1), (2, 2)).to_dense()
    with _raises(mg.GraphValueError, r"\[sparse_tensor\]", "3 stored values"):
        g.run({v: np.ones(3, np.float32), i0: np.array([0, 1], np.int32), i1: np.array([0, 1], np.int32)}, [y])
    r = g.run({v: np.ones(2, np.float32), i0: np.array([0, 1], np.int32), i1: np.array([1, 1], np.int32)}, [y])
    np.testing.assert_array_equal(r[y].numpy(), [[0, 0], [1, 1]])


# ---- bad index values when the graph runs ----

_BAD = [
    ("coo", [0, 4], [0, 1], (2, 4), r"column index 4 \(indices0\[1\]\) is out of range for shape \(2, 4\)"),
    ("coo", [0, 1], [-1, 1], (2, 4), r"row index -1 \(indices1\[0\]\) is out of range"),
    ("csr", [0, 9], [0, 1, 2], (2, 4), r"column index 9 \(indices0\[1\]\)"),
    ("csr", [0, 1], [1, 1, 2], (2, 4), r"row starts \(indices1\)\[0\] is 1, must be 0"),
    ("csr", [0, 1], [0, 2, 1], (2, 4), r"row starts \(indices1\)\[2\] = 1 is less than"),
    ("csr", [0, 1], [0, 1, 3], (2, 4), r"row starts \(indices1\)\[2\] = 3 must equal the number of stored values 2"),
    ("csc", [2, 0], [0, 1, 2, 2, 2], (2, 4), r"row index 2 \(indices0\[0\]\) is out of range"),
    ("csc", [0, 1], [0, 1, 2, 2, 5], (2, 4), r"column starts \(indices1\)\[4\] = 5"),
]


@pytest.mark.parametrize("storage,i0,i1,shape,msg", _BAD)
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_bad_indices_raise_at_run_time(storage, i0, i1, shape, msg, idx_dtype):
    g = mg.Graph()
    v = g.placeholder((2,), mg.float64)
    p0 = g.placeholder((len(i0),), mg.as_dtype(np.dtype(idx_dtype).name))
    p1 = g.placeholder((len(i1),), mg.as_dtype(np.dtype(idx_dtype).name))
    s = g.sparse_tensor(storage, (v, p0, p1), shape)
    dense = np.ones((shape[1], 3))
    outs = {"sparse_tensor": s.to_dense(), "sparse_matmul": s @ dense,
            "sparse_gather": g.sparse_gather(g.constant(np.ones(shape)), p0, p1, storage=storage, shape=shape),
            "sparse_sampled_matmul": g.sparse_sampled_matmul(np.ones((shape[0], 2)), np.ones((shape[1], 2)), p0, p1,
                                                             storage=storage, shape=shape)}
    feeds = {v: np.array([1.0, 2.0]), p0: np.array(i0, idx_dtype), p1: np.array(i1, idx_dtype)}
    for op, t in outs.items():
        with pytest.raises(mg.GraphIndexError, match=rf"\[{op}\] {msg}"):
            g.run(feeds, [t])
    # the graph and its compiled executables stay usable with good indices
    good = {"coo": ([0, 1], [0, 1]), "csr": ([0, 1], [0, 1, 2]), "csc": ([0, 1], [0, 1, 2, 2, 2])}[storage]
    if len(good[0]) == len(i0) and len(good[1]) == len(i1):
        feeds = {v: np.array([1.0, 2.0]), p0: np.array(good[0], idx_dtype), p1: np.array(good[1], idx_dtype)}
        r = g.run(feeds, [s.to_dense()])
        assert r[s.to_dense()].numpy().sum() == 3.0
