"""Sparse matrices as MPSGraph has them (sparseTensorWithType:tensors:shape:dataType:).

A 2-D sparse matrix is three tensors, in MPSGraph's order for its storage:

    storage  tensors                                           MPSGraphSparseStorageType
    'coo'    (values, column of each entry, row of each entry)  COO = 0 ("x index, y index")
    'csc'    (values, row of each entry, column starts)         CSC = 1 (cols + 1 starts)
    'csr'    (values, column of each entry, row starts)         CSR = 2 (rows + 1 starts)

Graph.sparse_tensor wraps them in a SparseTensor (its to_dense() is the registry op
sparse_tensor, also Graph.sparse_to_dense); Graph.sparse_matmul multiplies one by a dense
matrix without forming the dense matrix on the CPU. Duplicate entries add up, as in scipy.sparse.
"""
import numbers

from ._graph import Graph, GraphTypeError, GraphValueError, Tensor

_STORAGES = ("coo", "csc", "csr")  # MPSGraphSparseStorageType's order: COO = 0, CSC = 1, CSR = 2
_TRANSPOSED = {"coo": "coo", "csr": "csc", "csc": "csr"}


def _storage(op, storage):
    if isinstance(storage, numbers.Integral) and not isinstance(storage, bool) and 0 <= storage < 3:
        return _STORAGES[int(storage)]
    if isinstance(storage, str) and storage.lower() in _STORAGES:
        return storage.lower()
    raise GraphValueError(f"[{op}] storage must be 'coo', 'csc' or 'csr' (or MPSGraphSparseStorageType 0, 1, 2), "
                          f"not {storage!r}")


class SparseTensor:
    """A 2-D sparse matrix of a Graph: its parts (values, indices0, indices1) in MPSGraph's order
    for `storage`, its dense `shape` (rows, cols) and `dtype` (the values'). `to_dense()` gives the
    dense matrix; `s @ dense` (a Tensor or an array), `array @ s` and Graph.sparse_matmul (either
    side dense) multiply without forming it;
    `s.T` is the transpose, made of the same tensors."""

    __slots__ = ("graph", "storage", "values", "indices0", "indices1", "shape", "dtype", "_dense")
    __array_ufunc__ = None  # numpy arrays defer to __rmatmul__ (array @ sparse)

    def __init__(self, graph, storage, values, indices0, indices1, shape, dense):
        self.graph = graph
        self.storage = storage
        self.values, self.indices0, self.indices1 = values, indices0, indices1
        self.shape = tuple(shape)
        self.dtype = values.dtype
        self._dense = dense

    @property
    def tensors(self):
        """(values, indices0, indices1), MPSGraph's tensors array."""
        return (self.values, self.indices0, self.indices1)

    @property
    def ndim(self):
        return 2

    def to_dense(self):
        """The dense (rows, cols) matrix (the sparse_tensor op)."""
        return self._dense

    @property
    def T(self):
        """The transpose: the same tensors as csr <-> csc, or coo with the two index parts swapped."""
        i0, i1 = (self.indices1, self.indices0) if self.storage == "coo" else (self.indices0, self.indices1)
        return self.graph.sparse_tensor(_TRANSPOSED[self.storage], (self.values, i0, i1), self.shape[::-1])

    def __matmul__(self, other):
        return self.graph.sparse_matmul(self, other)

    def __rmatmul__(self, other):
        return self.graph.sparse_matmul(other, self)

    def __repr__(self):
        return (f"SparseTensor(storage='{self.storage}', shape={self.shape}, dtype={self.dtype.name}, "
                f"nnz={self.values.shape[0]})")


def _as_part(g, op, value, what):
    if isinstance(value, Tensor):
        return g._check_tensor(value, op, what)
    if value is None:
        raise GraphTypeError(f"[{op}] {what} is None")
    return g.constant(value)


def sparse_tensor(self, storage, tensors, shape, dtype=None, *, name=None):
    """A 2-D sparse matrix (a SparseTensor) from MPSGraph's parts and storage type.

    As MPSGraph's sparseTensorWithType:tensors:shape:dataType:, `tensors` = (values, indices0,
    indices1) in MPSGraph's order for `storage`: 'coo' (values, column of each entry, row of each
    entry), 'csr' (values, column of each entry, row starts: rows + 1 of them, 0 to nnz), 'csc'
    (values, row of each entry, column starts); `storage` may also be MPSGraphSparseStorageType's
    value (COO 0, CSC 1, CSR 2). `shape` = (rows, cols); indices
    int32 or int64; `dtype`, if given, must be the values' dtype. Returns a SparseTensor; an index
    out of range raises GraphIndexError when the graph runs."""
    op = "sparse_tensor"
    st = _storage(op, storage)
    if isinstance(tensors, (Tensor, str)) or not hasattr(tensors, "__len__") or len(tensors) != 3:
        raise GraphTypeError(f"[{op}] tensors must be (values, indices0, indices1), got {tensors!r}")
    values, i0, i1 = (_as_part(self, op, t, w) for t, w in zip(tensors, ("values", "indices0", "indices1")))
    kw = {} if dtype is None else {"dtype": dtype}
    dense = self.sparse_to_dense(values, i0, i1, storage=st, shape=shape, name=name, **kw)
    return SparseTensor(self, st, values, i0, i1, dense.shape, dense)


def sparse_matmul(self, a, b, *, name=None):
    """a @ b with a SparseTensor on one side and a dense 2-D tensor (or array) on the other.

    The CPU loops over the stored entries only (never forms the dense matrix); duplicates add up.
    Differentiable with respect to the values and the dense operand."""
    op = "sparse_matmul"
    if isinstance(a, SparseTensor) and isinstance(b, SparseTensor):
        raise GraphTypeError(f"[{op}] needs one dense operand; densify one with to_dense()")
    if isinstance(a, SparseTensor):
        if a.graph is not self:
            raise GraphValueError(f"[{op}] the sparse operand belongs to another graph")
        d = b if isinstance(b, Tensor) else self.constant(b, dtype=a.dtype)
        d = self._check_tensor(d, op, "dense operand")
        return self._add(op, [a.values, a.indices0, a.indices1, d],
                         {"storage": a.storage, "shape": list(a.shape)}, name)[0]
    if isinstance(b, SparseTensor):
        # dense @ sparse = (sparse.T @ dense.T).T, the transpose made of the same tensors
        d = a if isinstance(a, Tensor) else self.constant(a, dtype=b.dtype)
        d = self._check_tensor(d, op, "dense operand")
        if d.ndim != 2:
            raise GraphValueError(f"[{op}] the dense operand must be 2-D, got shape {d.shape}")
        t = sparse_matmul(self, b.T, self.transpose(d))
        return self.transpose(t, name=name)
    raise GraphTypeError(f"[{op}] needs a SparseTensor operand (Graph.sparse_tensor); use matrix_multiplication "
                         f"for dense ones")


sparse_tensor.__qualname__ = "Graph.sparse_tensor"
sparse_matmul.__qualname__ = "Graph.sparse_matmul"
Graph.sparse_tensor = sparse_tensor
Graph.sparse_matmul = sparse_matmul
