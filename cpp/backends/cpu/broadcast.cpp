#include <array>
#include <cstdint>
#include <vector>

#include "backends/cpu/elementwise_util.h"

namespace mg::cpu {

BroadcastPlan make_broadcast_plan(const Shape& out, const std::vector<Shape>& in) {
  BroadcastPlan p;
  p.nin = int(in.size());
  size_t r = out.size();
  std::vector<int64_t> shape(out.begin(), out.end());
  std::vector<std::array<int64_t, 3>> strides(r, {0, 0, 0});
  for (size_t k = 0; k < in.size(); ++k) {
    const Shape& s = in[k];
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
      size_t d = r - s.size() + i;
      strides[d][k] = s[i] == 1 && out[d] != 1 ? 0 : acc;
      acc *= s[i];
    }
  }
  // drop size-1 dims, then merge dims that are contiguous for every input
  std::vector<int64_t> cs;
  std::vector<std::array<int64_t, 3>> cst;
  for (size_t d = 0; d < r; ++d) {
    if (shape[d] == 1) continue;
    if (!cs.empty()) {
      bool merge = true;
      for (size_t k = 0; k < in.size(); ++k) merge = merge && cst.back()[k] == strides[d][k] * shape[d];
      if (merge) {
        cs.back() *= shape[d];
        cst.back() = strides[d];
        continue;
      }
    }
    cs.push_back(shape[d]);
    cst.push_back(strides[d]);
  }
  if (cs.empty()) {
    cs.push_back(1);
    cst.push_back({0, 0, 0});
  }
  p.shape = cs;
  p.strides = cst;
  p.total = num_elements(out);
  return p;
}

}  // namespace mg::cpu
