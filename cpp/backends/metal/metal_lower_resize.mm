// Lowerings of resize and resize_gradient (cpp/core/ops/resize.cpp, layouts in resize_geom.h).
//
// Both are compositions with indices and weights fixed at compile time, computed exactly as the
// CPU kernel's plan (cpp/backends/cpu/kernels_resize.cpp): nearest rounds the source
// coordinate in exact rational arithmetic with nearest_rounding_mode, bilinear clamps the
// coordinate and blends two neighbours. MPSGraph's resize ops (resizeTensor:size:mode:...,
// resizeNearestWithTensor:...nearestRoundingMode:..., resizeBilinearWithTensor:... and their
// gradients) compute the coordinate in floating point, so exact ties (center_result at a
// half-way point, e.g. 2x downsampling with round_prefer_ceil) may round either way, and their
// clamping of negative half-pixel coordinates is not documented; PyTorch's MPS backend moved to
// the scaleOffset variants after such mismatches. The composition cannot differ from the CPU:
//   resize:   x seen as (outer, H, W, inner); along W then along H: nearest is one gather with
//             the index table (gatherWithUpdatesTensor:indicesTensor:axis:batchDimensions:);
//             bilinear gathers both neighbours and blends w0 * a + w1 * b with the CPU's float
//             weights, W first and then H, the CPU kernel's order of operations.
//   gradient: the transpose, along H then W: the weighted dy scattered into zeros with
//             scatterWithDataTensor:updatesTensor:indicesTensor:axis:mode: (Add), which sums
//             repeated indices.
// float16 / bfloat16 run in float32 and round once, as the CPU kernel computes in float.
#include <algorithm>

#include "backends/metal/metal_internal.h"
#include "core/ops/resize_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

// One axis of the CPU plan, with float weights for the graph.
struct Axis {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

// The CPU's plan (core/ops/resize_geom.h) with the CPU kernel's float weights:
// C(w1), C(1) - w1 with C = float.
Axis make_axis(int64_t n, int64_t m, bool bilinear, bool align, bool center, const std::string& rounding) {
  ops::ResizeAxis r = ops::resize_axis(n, m, bilinear, align, center, rounding);
  Axis a;
  a.i0 = r.i0;
  a.i1 = r.i1;
  for (double w : r.w1) {
    const float w1 = float(w);
    a.w1.push_back(w1);
    a.w0.push_back(1.0f - w1);
  }
  return a;
}

struct Plan {
  Shape view;  // (outer, H, W, inner)
  int64_t OH = 0, OW = 0;
  bool bilinear = true;
  Axis y, x;
};

Plan make_plan(LowerCtx& c, const Shape& src, const Shape& dst) {
  const ops::ResizeAttrs& a = typed_attrs<ops::ResizeAttrs>(c.node);
  const ops::ResizeLayout lay = a.layout;
  if (!lay.rank || int(src.size()) != lay.rank || dst.size() != src.size())
    c.fail(ErrorKind::Value, "bad resize layout for the shapes " + shape_str(src) + " -> " + shape_str(dst));
  const size_t h = size_t(lay.h);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < h; ++i) outer *= src[i];
  for (size_t i = h + 2; i < src.size(); ++i) inner *= src[i];
  Plan p;
  p.view = {outer, src[h], src[h + 1], inner};
  p.OH = dst[h];
  p.OW = dst[h + 1];
  const int64_t lim = int64_t(1) << 60;
  if (src[h] > 0 && src[h + 1] > 0 && ((2 * p.OH + 1) > lim / src[h] || (2 * p.OW + 1) > lim / src[h + 1]))
    c.fail(ErrorKind::NotImplemented, "sizes too large for exact index arithmetic");
  p.bilinear = a.bilinear;
  const bool align = a.align_corners, center = a.center_result;
  const std::string& rounding = a.nearest_rounding_mode;
  p.y = make_axis(src[h], p.OH, p.bilinear, align, center, rounding);
  p.x = make_axis(src[h + 1], p.OW, p.bilinear, align, center, rounding);
  return p;
}

T index_table(LowerCtx& c, const std::vector<int64_t>& idx) {
  return c.constant_ints(idx, Shape{int64_t(idx.size())}, DType::Int32);
}

// A weight vector shaped to broadcast along `axis` of the 4-d view.
T weights(LowerCtx& c, const std::vector<float>& w, size_t axis) {
  std::vector<double> v(w.begin(), w.end());
  Shape s{1, 1, 1, 1};
  s[axis] = int64_t(w.size());
  return c.constant_vector(v, s, DType::Float32);
}

T gather(LowerCtx& c, T x, const std::vector<int64_t>& idx, size_t axis) {
  return [c.g gatherWithUpdatesTensor:x indicesTensor:index_table(c, idx) axis:NSUInteger(axis) batchDimensions:0 name:nil];
}

T scatter_add(LowerCtx& c, T updates, const std::vector<int64_t>& idx, size_t axis, const Shape& to) {
  T zeros = c.fill(0, TensorType{DType::Float32, to});
  return [c.g scatterWithDataTensor:zeros
                      updatesTensor:updates
                      indicesTensor:index_table(c, idx)
                               axis:NSInteger(axis)
                               mode:MPSGraphScatterModeAdd
                               name:nil];
}

// resize along one axis of the view (float32).
T resample(LowerCtx& c, T x, const Plan& p, const Axis& a, size_t axis) {
  if (!p.bilinear) return gather(c, x, a.i0, axis);
  T lo = gather(c, x, a.i0, axis), hi = gather(c, x, a.i1, axis);
  return c.add(c.mul(weights(c, a.w0, axis), lo), c.mul(weights(c, a.w1, axis), hi));
}

// its transpose: g (axis of the output size) back to `to` (axis of the input size)
T resample_transpose(LowerCtx& c, T g, const Plan& p, const Axis& a, size_t axis, const Shape& to) {
  if (!p.bilinear) return scatter_add(c, g, a.i0, axis, to);
  return c.add(scatter_add(c, c.mul(weights(c, a.w0, axis), g), a.i0, axis, to),
               scatter_add(c, c.mul(weights(c, a.w1, axis), g), a.i1, axis, to));
}

}  // namespace

void register_resize_lowerings() {
  register_lowering("resize", [](LowerCtx& c) {
    Plan p = make_plan(c, c.in_types[0].shape, c.out().shape);
    T x = c.reshape(c.in[0], p.view);
    if (p.bilinear) x = c.raw_cast(x, DType::Float32);  // nearest only moves elements
    x = resample(c, x, p, p.x, 2);  // W first, as the CPU blends within a row first
    x = resample(c, x, p, p.y, 1);
    return std::vector<T>{c.raw_cast(x, c.out().dtype)};
  });

  register_lowering("resize_gradient", [](LowerCtx& c) {
    Plan p = make_plan(c, c.in_types[1].shape, c.in_types[0].shape);
    T g = c.raw_cast(c.reshape(c.in[0], Shape{p.view[0], p.OH, p.OW, p.view[3]}), DType::Float32);
    g = resample_transpose(c, g, p, p.y, 1, Shape{p.view[0], p.view[1], p.OW, p.view[3]});
    g = resample_transpose(c, g, p, p.x, 2, p.view);
    return std::vector<T>{c.raw_cast(g, c.out().dtype)};
  });
}

}  // namespace mg::metal
