// How the reduction kernels (kernels_reduction.cpp) walk a reduction, for the fused groups
// that end in one (fused_elementwise.cpp): they add in the same order, so the bits agree.
#pragma once
#include <cstdint>
#include <vector>

#include "core/shape.h"

namespace mg::cpu {

struct ReduceWalk {
  // The kept dims and the reduced dims each collapse into one run: the reduced run is
  // trailing (each output reduces a contiguous run) or leading (inner_kept: the outputs
  // are contiguous and reduce index r starts at r * num_out).
  bool simple = false;
  bool inner_kept = false;
  int64_t num_out = 0, num_red = 0;
  int chunks = 1;  // > 1: the reduce range is split into this many parts, combined in order
};

// The walk of a reduction over `axes` (sorted, non-negative) of a contiguous `shape`.
ReduceWalk reduce_walk(const Shape& shape, const std::vector<int64_t>& axes);

}  // namespace mg::cpu
