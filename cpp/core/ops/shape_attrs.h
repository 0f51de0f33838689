// Typed attributes of the shape family (core/ops/shape.cpp), as kernels and lowerings read
// them: typed_attrs<TransposeAttrs>(node) and so on (core/typed_attrs.h). Inference
// normalised every axis (non-negative) before decoding.
//
// reshape, reshape_like, expand_dims, squeeze, broadcast_to, flatten, flatten_2d and shape_of
// decode nothing: their results are fully determined by the input and output types.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/ops/shape_ops.h"

namespace mg::ops {

// transpose: output dim i is input dim permutation[i] (always a full permutation).
struct TransposeAttrs {
  std::vector<int64_t> permutation;
};

// swap_axes
struct SwapAxesAttrs {
  int64_t axis1 = 0, axis2 = 0;
};

// slice: `length` elements of dim `axis` from `start` (negative counts from the end).
struct SliceAttrs {
  int64_t axis = 0, start = 0, length = 0;
};

// strided_slice and slice_gradient (one entry per input dim; resolve_slice_dim in shape_ops.h).
struct StridedSliceAttrs {
  std::vector<int64_t> starts, ends, strides;
  int64_t start_mask = 0, end_mask = 0, squeeze_mask = 0;  // bit i: dim i
};

// concat, stack, split and split_like: the axis joined or split (for stack, an axis of the
// output). The pieces' sizes are the inputs' (concat) or outputs' (split) types.
struct AxisAttrs {
  int64_t axis = 0;
};

// pad and pad_gradient (constant_value is 0 for pad_gradient).
struct PadAttrs {
  std::vector<int64_t> left_padding, right_padding;
  PadMode mode = PadMode::Constant;
  double constant_value = 0.0;
};

// space_to_depth_2d and depth_to_space_2d (space_depth_view in shape_ops.h).
struct SpaceDepthAttrs {
  int64_t block_size = 1;
  bool nchw = false;                 // data_layout 'NCHW' (else 'NHWC')
  bool use_pixel_shuffle_order = true;
};

// band_part: a negative count keeps that whole triangle.
struct BandPartAttrs {
  int64_t num_lower = -1, num_upper = -1;
};

// one_hot: the new dim of size depth sits at `axis` of the result.
struct OneHotAttrs {
  int64_t depth = 0, axis = 0;
  DType dtype = DType::Float32;
  double on_value = 1.0, off_value = 0.0;
};

// tile and tile_gradient: repetitions per dim.
struct TileAttrs {
  std::vector<int64_t> multiples;
};

// reverse: the dims reversed (all of them when the op was given none), sorted.
struct ReverseAttrs {
  std::vector<int64_t> axes;
};

}  // namespace mg::ops
