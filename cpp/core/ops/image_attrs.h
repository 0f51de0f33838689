// Typed attributes of the image family (core/ops/image.cpp), as kernels and lowerings read them:
// typed_attrs<ImToColAttrs>(node) (core/typed_attrs.h).
#pragma once
#include <cstdint>
#include <vector>

namespace mg::ops {

// im_to_col and col_to_im: a 2-D window over the H and W dims of an NCHW image.
struct ImToColAttrs {
  std::vector<int64_t> kernel, stride, dilation;  // (height, width)
  std::vector<int64_t> padding;                   // (top, bottom, left, right), zeros
  std::vector<int64_t> image;                     // col_to_im: output (height, width); empty for im_to_col
};

// sample_grid (torch's grid_sample).
enum class GridPadding { Zeros, Border, Reflection };
struct SampleGridAttrs {
  bool nearest = false;  // else bilinear
  GridPadding padding = GridPadding::Zeros;
  bool align_corners = false;
};

// stencil: a 4-D window over the last 4 dims of x.
enum class StencilReduction { Sum, Product, Min, Max };
enum class StencilBoundary { Constant, Zero, ClampToEdge, Reflect, Symmetric, Periodic, AntiPeriodic };
struct StencilAttrs {
  StencilReduction reduction = StencilReduction::Sum;
  StencilBoundary boundary = StencilBoundary::Zero;
  double padding_constant = 0.0;
  std::vector<int64_t> strides, dilation_rates, offsets;  // 4 each
  std::vector<int64_t> padding;                            // resolved: (before, after) per window dim, 8 values
};

// non_maximum_suppression.
struct NmsAttrs {
  double iou_threshold = 0.5;
  double score_threshold = 0.0;
  bool per_class = false;
  int coordinate_mode = 0;  // MPSGraphNonMaximumSuppressionCoordinateMode: corners / centres, height / width first
};

}  // namespace mg::ops
