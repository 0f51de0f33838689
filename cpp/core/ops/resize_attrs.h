// Typed attributes of the resize family (core/ops/resize.cpp): resize and resize_gradient, as
// kernels and lowerings read them with typed_attrs<ResizeAttrs>(node) (core/typed_attrs.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/resize_geom.h"

namespace mg::ops {

struct ResizeAttrs {
  std::vector<int64_t> size;  // output (height, width)
  bool bilinear = true;       // mode 'bilinear' (else 'nearest')
  bool center_result = true, align_corners = false;
  ResizeLayout layout;        // data_layout: where H and W are
  std::string nearest_rounding_mode = "round_prefer_ceil";  // resize_nearest_index in resize_geom.h
};

}  // namespace mg::ops
