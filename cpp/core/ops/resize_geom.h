// Layouts of the resize family, shared by inference (core/ops/resize.cpp) and the kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace mg::ops {

// Rank and H axis of a resize data layout (W follows H); rank 0 for an unknown layout.
struct ResizeLayout {
  int rank = 0;
  int h = 0;
};

inline ResizeLayout resize_layout(const std::string& l) {
  if (l == "NHWC") return {4, 1};
  if (l == "NCHW") return {4, 2};
  if (l == "HWC") return {3, 0};
  if (l == "CHW") return {3, 1};
  if (l == "HW") return {2, 0};
  return {};
}

struct ResizeAxis {
  std::vector<int64_t> i0, i1;
  std::vector<double> w1;
};

inline int64_t resize_floor_div(int64_t p, int64_t q) {  // q > 0
  int64_t d = p / q;
  return (p % q != 0 && p < 0) ? d - 1 : d;
}

// Source index for output index d: the coordinate p / q rounded by `mode`, in exact integer
// arithmetic so every backend picks the same neighbour at ties.
inline int64_t resize_nearest_index(int64_t d, int64_t n, int64_t m, bool align, bool center, const std::string& mode) {
  int64_t p, q;
  if (align) {
    p = m > 1 ? d * (n - 1) : 0;
    q = m > 1 ? m - 1 : 1;
  } else if (center) {
    p = (2 * d + 1) * n - m;
    q = 2 * m;
  } else {
    p = d * n;
    q = m;
  }
  const int64_t fl = resize_floor_div(p, q), r2 = 2 * (p - fl * q);
  int64_t i = fl;
  if (mode == "floor") i = fl;
  else if (mode == "ceil") i = r2 ? fl + 1 : fl;
  else if (mode == "round_prefer_ceil") i = r2 >= q ? fl + 1 : fl;
  else if (mode == "round_prefer_floor") i = r2 > q ? fl + 1 : fl;
  else if (mode == "round_to_even") i = r2 > q ? fl + 1 : r2 < q ? fl : (fl % 2 == 0 ? fl : fl + 1);
  else if (mode == "round_to_odd") i = r2 > q ? fl + 1 : r2 < q ? fl : (fl % 2 != 0 ? fl : fl + 1);
  return std::min(std::max<int64_t>(i, 0), n - 1);
}

// Per output index along one axis: the source neighbours and the weight of i1 (bilinear;
// i0 gets 1 - w1), or the one nearest source index.
inline ResizeAxis resize_axis(int64_t n, int64_t m, bool bilinear, bool align, bool center, const std::string& rounding) {
  ResizeAxis a;
  for (int64_t d = 0; d < m; ++d) {
    if (!bilinear) {
      a.i0.push_back(resize_nearest_index(d, n, m, align, center, rounding));
      continue;
    }
    double src;
    if (align) src = m > 1 ? double(d) * double(n - 1) / double(m - 1) : 0.0;
    else if (center) src = std::max((double(d) + 0.5) * double(n) / double(m) - 0.5, 0.0);
    else src = double(d) * double(n) / double(m);
    int64_t i0 = std::min(int64_t(src), n - 1);
    double w = std::min(std::max(src - double(i0), 0.0), 1.0);
    a.i0.push_back(i0);
    a.i1.push_back(i0 < n - 1 ? i0 + 1 : i0);
    a.w1.push_back(w);
  }
  return a;
}

// A resize seen as (outer, H, W, inner) -> (outer, OH, OW, inner) for every layout, with both
// axes' plans (left empty where the source is empty): resize_plan in resize_attrs.h.
struct ResizeView {
  int64_t outer = 1, H = 0, W = 0, inner = 1, OH = 0, OW = 0;
  ResizeAxis y, x;
};

}  // namespace mg::ops
