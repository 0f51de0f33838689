"""Conformance rows of the sparse family (imported by conformance.py): sparse_tensor (to dense),
sparse_matmul (sparse @ dense and dense @ sparse), sparse_gather and sparse_sampled_matmul, for
every storage ('coo', 'csr', 'csc'), duplicate entries, empty rows and columns, zero stored
entries, int32 and int64 indices, and (the harness) unknown dims.

The references are written by hand with numpy (scipy is not a declared test dependency): the
(row, column) of each stored entry from explicit loops over the starts, np.add.at into zeros for
the dense matrix (duplicates add up, as in scipy.sparse), and float64 products of that matrix.
Gradients by finite differences (float64) with respect to the values and the dense operands.
"""
import numpy as np

from conformance import FLOATS, NUMERIC, Case, Grad, row

# A 3 x 4 coo matrix with a duplicate entry at (2, 3): tensors (values, column, row).
_COO = dict(i0=[1, 3, 3, 0, 2], i1=[0, 2, 2, 0, 1], storage="coo", shape=(3, 4))
# 4 x 5 csr with an empty row (1) and two entries at (2, 1): (values, column, row starts).
_CSR = dict(i0=[0, 3, 1, 1, 4, 2], i1=[0, 2, 2, 5, 6], storage="csr", shape=(4, 5))
# 4 x 3 csc with an empty column (1): (values, row, column starts).
_CSC = dict(i0=[2, 0, 3, 1], i1=[0, 1, 1, 4], storage="csc", shape=(4, 3))
_COO_EMPTY = dict(i0=[], i1=[], storage="coo", shape=(2, 3))
_CSR_EMPTY = dict(i0=[], i1=[0, 0, 0, 0], storage="csr", shape=(3, 2))
_CSC_ZERO_COLS = dict(i0=[], i1=[0], storage="csc", shape=(3, 0))
_STRUCTS = [("coo duplicates", _COO), ("csr empty row", _CSR), ("csc empty column", _CSC),
            ("coo no entries", _COO_EMPTY), ("csr no entries", _CSR_EMPTY), ("csc zero columns", _CSC_ZERO_COLS)]


def _nnz(s):
    return len(s["i0"])


def _vals(n):
    """n stored values: fractions for floats, small positive integers otherwise (sums stay in range)."""
    def make(dt):
        if dt in FLOATS:
            return [(-1) ** k * (0.75 + 0.5 * k) for k in range(n)]
        return [1 + k % 5 for k in range(n)]
    return make


def _mat(r, c, seed):
    def make(dt):
        return np.random.default_rng(seed).uniform(-2, 2, (r, c))
    return make


def _entries(i0, i1, storage, shape):
    """(rows, columns) of the stored entries in storage order, from explicit loops."""
    storage = storage.lower()
    i0 = [int(v) for v in np.asarray(i0).reshape(-1)]
    i1 = [int(v) for v in np.asarray(i1).reshape(-1)]
    if storage == "coo":
        return np.array(i1, np.int64), np.array(i0, np.int64)
    rows, cols = [], []
    for group in range(len(i1) - 1):
        for e in range(i1[group], i1[group + 1]):
            if storage == "csr":
                rows.append(group)
                cols.append(i0[e])
            else:
                rows.append(i0[e])
                cols.append(group)
    return np.array(rows, np.int64), np.array(cols, np.int64)


def _dense_ref(values, i0, i1, storage, shape):
    r, c = _entries(i0, i1, storage, shape)
    acc = np.float64 if values.dtype.kind == "f" else np.int64
    out = np.zeros(shape, acc)
    np.add.at(out, (r, c), values.astype(acc))
    return out


def _idx(g, t):
    """float64 rows carry their indices as float64, cast back to int32 here: the finite-difference
    checks feed every input as float64 (the *_int64_indices rows run float64 with integer indices)."""
    return g.cast(t, "int32") if t.dtype.name in FLOATS else t


def _sparse(g, v, i0, i1, storage, shape):
    return g.sparse_tensor(storage, (v, _idx(g, i0), _idx(g, i1)), shape)


def _to_dense(g, v, i0, i1, storage, shape):
    return _sparse(g, v, i0, i1, storage, shape).to_dense()


def _i32(d):
    return "float64" if d == "float64" else "int32"


def _int32(d):
    return (d, _i32(d), _i32(d))


def _int64(d):
    return (d, "int64", "int64")


def _dense_cases(dtypes=None):
    return [Case(values=(_vals(_nnz(s)), s["i0"], s["i1"]), attrs={"storage": s["storage"], "shape": s["shape"]},
                 label=label, dtypes=dtypes) for label, s in _STRUCTS]


_GRAD3 = ("coo duplicates", "csr empty row", "csc empty column")

row("sparse_to_dense", _to_dense, _dense_ref, NUMERIC, _dense_cases(), input_dtypes=_int32, covers=("sparse_tensor",),
    grad=Grad(wrt=(0,), cases=_GRAD3, second_order=("coo duplicates",), unknown_dims=("csr empty row",)))
row("sparse_to_dense_int64_indices", _to_dense, _dense_ref, ("float32", "float64", "int64", "int8"), _dense_cases(),
    input_dtypes=_int64)
row("sparse_to_dense_method", "sparse_to_dense",
    lambda v, i0, i1, storage, shape, dtype: _dense_ref(v, i0, i1, storage, shape), ("float32", "int32"),
    [Case(values=(_vals(5), _COO["i0"], _COO["i1"]), attrs={"storage": "COO", "shape": (3, 4)}),
     Case(values=(_vals(6), _CSR["i0"], _CSR["i1"]), attrs={"storage": "csr", "shape": (4, 5)})],
    input_dtypes=_int32, dtype_attr="dtype")


# ---- sparse @ dense, dense @ sparse ----

def _spmm_ref(v, i0, i1, d, storage, shape):
    return _dense_ref(v, i0, i1, storage, shape) @ d.astype(np.float64)


def _spmm(g, v, i0, i1, d, storage, shape):
    return g.sparse_matmul(_sparse(g, v, i0, i1, storage, shape), d)


def _dmsp_ref(d, v, i0, i1, storage, shape):
    return d.astype(np.float64) @ _dense_ref(v, i0, i1, storage, shape)


def _dmsp(g, d, v, i0, i1, storage, shape):
    return g.sparse_matmul(d, _sparse(g, v, i0, i1, storage, shape))


def _spmm_cases(n=3):
    return [Case(values=(_vals(_nnz(s)), s["i0"], s["i1"], _mat(s["shape"][1], n, k)),
                 attrs={"storage": s["storage"], "shape": s["shape"]}, label=label)
            for k, (label, s) in enumerate(_STRUCTS)] + [
        Case(values=(_vals(5), _COO["i0"], _COO["i1"], _mat(4, 0, 9)), attrs={"storage": "coo", "shape": (3, 4)},
             label="coo no dense columns"),
        Case(values=(_vals(6), _CSR["i0"], _CSR["i1"], _mat(5, 1, 8)), attrs={"storage": "csr", "shape": (4, 5)},
             label="csr vector")]


def _dmsp_cases():
    return [Case(values=(_mat(2, s["shape"][0], k), _vals(_nnz(s)), s["i0"], s["i1"]),
                 attrs={"storage": s["storage"], "shape": s["shape"]}, label=label)
            for k, (label, s) in enumerate(_STRUCTS)]


_MM_TOL = {"float16": (4e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}

row("sparse_matmul", _spmm, _spmm_ref, FLOATS, _spmm_cases(), input_dtypes=lambda d: (d, _i32(d), _i32(d), d),
    covers=("sparse_matmul",), tol=_MM_TOL,
    grad=Grad(wrt=(0, 3), cases=_GRAD3, second_order=("coo duplicates", "csr empty row"),
              unknown_dims=("csc empty column",)))
row("sparse_matmul_int64_indices", _spmm, _spmm_ref, ("float32", "float64"), _spmm_cases(),
    input_dtypes=lambda d: (d, "int64", "int64", d))
row("dense_sparse_matmul", _dmsp, _dmsp_ref, FLOATS, _dmsp_cases(), input_dtypes=lambda d: (d, d, _i32(d), _i32(d)),
    covers=("sparse_matmul",), tol=_MM_TOL,
    grad=Grad(wrt=(0, 1), cases=_GRAD3, second_order=("csc empty column",)))


# ---- the gradient ops: sparse_gather, sparse_sampled_matmul ----

def _gather_ref(d, i0, i1, storage, shape):
    r, c = _entries(i0, i1, storage, shape)
    return d[r, c]


def _gather(g, d, i0, i1, storage, shape):
    return g.sparse_gather(d, _idx(g, i0), _idx(g, i1), storage=storage, shape=shape)


def _gather_cases():
    def mat(r, c):
        return lambda dt: np.arange(r * c).reshape(r, c) % 7 + 1
    return [Case(values=(mat(*s["shape"]), s["i0"], s["i1"]), attrs={"storage": s["storage"], "shape": s["shape"]},
                 label=label) for label, s in _STRUCTS]


row("sparse_gather", _gather, _gather_ref, NUMERIC, _gather_cases(), input_dtypes=_int32,
    covers=("sparse_gather",), exact=True, grad=Grad(wrt=(0,), cases=_GRAD3, second_order=("csr empty row",)))
row("sparse_gather_int64_indices", _gather, _gather_ref, ("float32", "uint8"), _gather_cases(),
    input_dtypes=lambda d: (d, "int64", "int64"), exact=True)


def _sddmm_ref(x, y, i0, i1, storage, shape):
    r, c = _entries(i0, i1, storage, shape)
    return (x.astype(np.float64) @ y.astype(np.float64).T)[r, c]


def _sddmm(g, x, y, i0, i1, storage, shape):
    return g.sparse_sampled_matmul(x, y, _idx(g, i0), _idx(g, i1), storage=storage, shape=shape)


def _sddmm_cases():
    return [Case(values=(_mat(s["shape"][0], 3, k), _mat(s["shape"][1], 3, k + 20), s["i0"], s["i1"]),
                 attrs={"storage": s["storage"], "shape": s["shape"]}, label=label)
            for k, (label, s) in enumerate(_STRUCTS)]


row("sparse_sampled_matmul", _sddmm, _sddmm_ref, FLOATS, _sddmm_cases(),
    input_dtypes=lambda d: (d, d, _i32(d), _i32(d)), covers=("sparse_sampled_matmul",), tol=_MM_TOL,
    grad=Grad(wrt=(0, 1), cases=_GRAD3, second_order=("coo duplicates",), unknown_dims=("csr empty row",)))
