// Typed attributes of the sort and cumulative families (core/ops/sort.cpp), as kernels and
// lowerings read them: typed_attrs<SortAttrs>(node) and so on (core/typed_attrs.h).
#pragma once
#include <cstdint>

namespace mg::ops {

// sort, arg_sort.
struct SortAttrs {
  int64_t axis = 0;  // non-negative
  bool descending = false;
};

// top_k, bottom_k.
struct TopKAttrs {
  int64_t axis = 0;  // non-negative
  int64_t k = 0;     // 0 <= k <= the axis' size
};

// cumulative_sum, cumulative_product, cumulative_minimum, cumulative_maximum.
struct CumulativeAttrs {
  int64_t axis = 0;  // non-negative
  bool exclusive = false;
  bool reverse = false;
};

}  // namespace mg::ops
