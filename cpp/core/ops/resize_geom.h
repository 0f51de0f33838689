// Layouts of the resize family, shared by inference (core/ops/resize.cpp) and the kernels.
#pragma once
#include <string>

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

}  // namespace mg::ops
