// Typed attributes of the resize family (core/ops/resize.cpp): resize and resize_gradient, as
// kernels and lowerings read them with typed_attrs<ResizeAttrs>(node) (core/typed_attrs.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/resize_geom.h"

namespace mg::ops {

struct ResizeAttrs {
  std::vector<int64_t> size;  // output (height, width)
  bool bilinear = true;       // mode 'bilinear' (else 'nearest')
  bool center_result = true, align_corners = false;
  ResizeLayout layout;        // data_layout: where H and W are
  std::string nearest_rounding_mode = "round_prefer_ceil";  // resize_nearest_index in resize_geom.h
};

// The kernels' view of a resize from `src` to `dst` (the CPU's and CUDA's): bad layouts are a
// runtime error, sizes beyond the nearest rounding's exact integer arithmetic not implemented.
inline ResizeView resize_plan(const ResizeAttrs& a, const std::vector<int64_t>& src, const std::vector<int64_t>& dst,
                              const std::string& node) {
  ResizeView v;
  const ResizeLayout lay = a.layout;
  if (!lay.rank || int(src.size()) != lay.rank || dst.size() != src.size())
    raise(ErrorKind::Runtime, "resize", node, "bad resize plan");
  const size_t h = size_t(lay.h);
  for (size_t i = 0; i < h; ++i) v.outer *= src[i];
  for (size_t i = h + 2; i < src.size(); ++i) v.inner *= src[i];
  v.H = src[h];
  v.W = src[h + 1];
  v.OH = dst[h];
  v.OW = dst[h + 1];
  const int64_t lim = int64_t(1) << 60;
  if (v.H > 0 && v.W > 0 && ((2 * v.OH + 1) > lim / v.H || (2 * v.OW + 1) > lim / v.W))
    raise(ErrorKind::NotImplemented, "resize", node, "sizes too large for exact index arithmetic");
  if (v.H > 0 && v.W > 0) {
    v.y = resize_axis(v.H, v.OH, a.bilinear, a.align_corners, a.center_result, a.nearest_rounding_mode);
    v.x = resize_axis(v.W, v.OW, a.bilinear, a.align_corners, a.center_result, a.nearest_rounding_mode);
  }
  return v;
}

}  // namespace mg::ops
