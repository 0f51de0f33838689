// Typed attributes of the reduction family (core/ops/reduction.cpp), as kernels and lowerings
// read them: typed_attrs<ReductionAttrs>(node) and so on (core/typed_attrs.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace mg::ops {

// reduction_sum, reduction_product, reduction_maximum, reduction_minimum, reduction_and,
// reduction_or, mean, variance, logsumexp.
struct ReductionAttrs {
  std::vector<int64_t> axes;  // sorted, unique, non-negative; all axes when the op was given none
  bool keep_dims = true;      // reduced axes stay as size-1 dims
};

// reduction_arg_maximum, reduction_arg_minimum.
struct ArgReductionAttrs {
  int64_t axis = 0;  // non-negative
  bool keep_dims = true;
  DType dtype = DType::Int32;  // of the indices: int32 or int64
};

}  // namespace mg::ops
