// Lowerings of the sparse family (cpp/core/ops/sparse.cpp, parts per storage in sparse_attrs.h).
//   sparse_tensor  MPSGraph's own op, sparseTensorWithType:tensors:shape:dataType:name: (macOS 12),
//                  the parts passed in MPSGraph's order, which is the op's input order; indices as
//                  int32 (the dense shape is within int32 on Metal).
//   sparse_matmul  MPSGraph has no sparse product: the same densification, then
//                  matrixMultiplicationWithPrimaryTensor:secondaryTensor:name: (split along K when
//                  K >= 32767, as matrix_multiplication is).
// float16 / bfloat16 values densify and multiply in float32 and round once, as the CPU kernels
// accumulate in float. No stored entries or an empty result give zeros without MPSGraph's op.
// Index values are not checked on the GPU (the CPU raises GraphIndexError for bad ones).
// sparse_gather and sparse_sampled_matmul (the gradient ops) have no lowering yet.
#include <algorithm>

#include "backends/metal/metal_internal.h"
#include "core/ops/sparse_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

MPSGraphSparseStorageType storage_type(ops::SparseStorage s) {
  if (s == ops::SparseStorage::CSR) return MPSGraphSparseStorageCSR;
  if (s == ops::SparseStorage::CSC) return MPSGraphSparseStorageCSC;
  return MPSGraphSparseStorageCOO;
}

// The dense (rows, cols) matrix of inputs 0..2 in dtype `t` (values cast to it), or nil when
// there is nothing to store.
T densify(LowerCtx& c, const ops::SparseAttrs& a, DType t) {
  if (c.in_types[0].shape.at(0) == 0 || a.rows == 0 || a.cols == 0) return nil;
  T values = c.in_dtype(0) == t ? c.in[0] : c.raw_cast(c.in[0], t);
  T i0 = c.in[1], i1 = c.in[2];
  if (c.in_dtype(1) != DType::Int32) {
    i0 = c.raw_cast(i0, DType::Int32);
    i1 = c.raw_cast(i1, DType::Int32);
  }
  return [c.g sparseTensorWithType:storage_type(a.storage)
                           tensors:@[ values, i0, i1 ]
                             shape:mps_shape({a.rows, a.cols})
                          dataType:mps_dtype(t, c.op, c.node.name)
                              name:nil];
}

// float16 / bfloat16 compute in float32.
DType compute_dtype(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t; }

}  // namespace

void register_sparse_lowerings() {
  register_lowering("sparse_tensor", [](LowerCtx& c) {
    const auto& a = typed_attrs<ops::SparseAttrs>(c.node);
    if (c.in_dtype(0) == DType::Bool) c.fail(ErrorKind::NotImplemented, "bool sparse_tensor is not implemented");
    T d = densify(c, a, compute_dtype(c.in_dtype(0)));
    return std::vector<T>{d ? c.conform(d, 0) : c.fill(0.0, c.out(0))};
  });

  register_lowering("sparse_matmul", [](LowerCtx& c) {
    const auto& a = typed_attrs<ops::SparseAttrs>(c.node);
    const DType ct = compute_dtype(c.in_dtype(0));
    T s = densify(c, a, ct);
    if (!s || c.out(0).shape.at(1) == 0) return std::vector<T>{c.fill(0.0, c.out(0))};
    T d = c.in_dtype(3) == ct ? c.in[3] : c.raw_cast(c.in[3], ct);
    T acc = nil;
    const int64_t step = a.cols < kMatmulMaxK ? a.cols : kMatmulSplitK;
    for (int64_t k0 = 0; k0 < a.cols; k0 += step) {
      const int64_t len = std::min<int64_t>(step, a.cols - k0);
      T sk = len == a.cols ? s : [c.g sliceTensor:s dimension:1 start:k0 length:len name:nil];
      T dk = len == a.cols ? d : [c.g sliceTensor:d dimension:0 start:k0 length:len name:nil];
      T part = [c.g matrixMultiplicationWithPrimaryTensor:sk secondaryTensor:dk name:nil];
      acc = acc ? c.add(acc, part) : part;
    }
    return std::vector<T>{c.conform(acc, 0)};
  });
}

}  // namespace mg::metal
