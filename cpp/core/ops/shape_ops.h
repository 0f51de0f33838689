// Shape-family helpers shared by the op definitions (core/ops/shape.cpp) and the backends'
// kernels: how a strided slice resolves against a concrete dim.
#pragma once
#include <cstdint>

namespace mg::ops {

// One dim of a strided slice resolved against a known size n >= 0: the elements taken are
// start, start + step, ... (count of them). A squeezed dim takes one element (count 1).
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// Python slice semantics with clamping (slice.indices). begin/end masks mean "from the
// beginning" / "to the end" (for negative steps: from the last element / to before the first).
// step must not be 0. Never overflows, whatever the inputs.
inline SliceDim resolve_slice_dim(int64_t n, int64_t start, int64_t end, int64_t step, bool start_mask,
                                  bool end_mask) {
  SliceDim r;
  r.step = step;
  auto norm = [n](int64_t v, int64_t lo, int64_t hi) {  // negative counts from the end, then clamp
    if (v < 0) v = v + n;                                // v >= INT64_MIN, n >= 0: no overflow
    return v < lo ? lo : v > hi ? hi : v;
  };
  uint64_t mag;
  int64_t lo, hi;
  if (step > 0) {
    lo = start_mask ? 0 : norm(start, 0, n);
    hi = end_mask ? n : norm(end, 0, n);
    r.start = lo;
    mag = uint64_t(step);
    r.count = hi > lo ? int64_t(1 + uint64_t(hi - lo - 1) / mag) : 0;
  } else {
    hi = start_mask ? n - 1 : norm(start, -1, n - 1);
    lo = end_mask ? -1 : norm(end, -1, n - 1);
    r.start = hi;
    mag = uint64_t(0) - uint64_t(step);
    r.count = hi > lo ? int64_t(1 + uint64_t(hi - lo - 1) / mag) : 0;
  }
  if (r.count <= 1) r.step = 1;  // keeps offset arithmetic small for huge steps
  if (r.count == 0) r.start = 0;
  return r;
}

}  // namespace mg::ops
