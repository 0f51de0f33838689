// Typed attributes of the sparse family (core/ops/sparse.cpp), as kernels and lowerings read
// them with typed_attrs<SparseAttrs>(node).
//
// A sparse matrix of shape (rows, cols) is (values, indices0, indices1) in MPSGraph's order
// (sparseTensorWithType:tensors:shape:dataType:, tensors [sparseVals, indexTensor0, indexTensor1]):
//   coo  indices0 = x (column) of each entry, indices1 = y (row) of each entry
//   csc  indices0 = row of each entry,        indices1 = column starts (cols + 1)
//   csr  indices0 = column of each entry,     indices1 = row starts (rows + 1)
#pragma once
#include <cstdint>

namespace mg::ops {

enum class SparseStorage { COO = 0, CSC = 1, CSR = 2 };  // MPSGraphSparseStorageType's values

struct SparseAttrs {
  SparseStorage storage = SparseStorage::COO;
  int64_t rows = 0, cols = 0;  // the dense shape
};

// The transpose (cols, rows) of a matrix has the same three arrays under this storage:
// csr <-> csc, and coo with indices0 and indices1 swapped.
inline SparseStorage transposed_storage(SparseStorage s) {
  return s == SparseStorage::CSR ? SparseStorage::CSC : s == SparseStorage::CSC ? SparseStorage::CSR : s;
}

}  // namespace mg::ops
