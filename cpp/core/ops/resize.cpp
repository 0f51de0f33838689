// Resize family: resize (nearest / bilinear, MPSGraph's resizeTensor:size:mode:centerResult:
// alignCorners:layout: and resizeNearest...nearestRoundingMode:) and resize_gradient, its
// transpose. Both are linear in their tensor input and each is the other's gradient.
//
// Source coordinate of output index d along a dim of input size n and output size m:
//   align_corners                 d * (n - 1) / (m - 1)   (0 when m == 1); center_result ignored
//   center_result (half-pixel)    (d + 0.5) * n / m - 0.5
//   neither (TF1 "asymmetric")    d * n / m
// Bilinear clamps the coordinate into [0, n - 1] and blends the two neighbours (PyTorch's
// weights). Nearest rounds the coordinate with nearest_rounding_mode (exact rational
// arithmetic, no float ties), then clamps.
// PyTorch's F.interpolate correspondences:
//   bilinear, align_corners=True       -> mode='bilinear', align_corners=True
//   bilinear, align_corners=False      -> mode='bilinear', center_result=True, align_corners=False
//   mode='nearest-exact'               -> mode='nearest', center_result=True (round_prefer_ceil)
//   mode='nearest' (legacy, floor)     -> mode='nearest', center_result=False, nearest_rounding_mode='floor'
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/resize_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;

const char* kRoundingModes[] = {"round_prefer_ceil", "round_prefer_floor", "ceil", "floor", "round_to_even",
                                "round_to_odd"};

std::vector<AttrSpec> resize_attrs() {
  return {attr("size", AttrKind::Ints, AttrNone{}, "output (height, width)"),
          attr("mode", AttrKind::String, std::string("bilinear"), "'nearest' or 'bilinear'"),
          attr("center_result", AttrKind::Bool, true,
               "half-pixel centres: source = (d + 0.5) * in / out - 0.5 (TF2, OpenCV, PyTorch align_corners=False)"),
          attr("align_corners", AttrKind::Bool, false,
               "corner pixels align: source = d * (in - 1) / (out - 1); center_result is then ignored"),
          attr("data_layout", AttrKind::String, std::string("NHWC"), "'NHWC', 'NCHW', 'HWC', 'CHW' or 'HW'"),
          attr("nearest_rounding_mode", AttrKind::String, std::string("round_prefer_ceil"),
               "rounding of the source coordinate for mode 'nearest': 'round_prefer_ceil' (MPSGraph's default), "
               "'round_prefer_floor', 'ceil', 'floor', 'round_to_even' or 'round_to_odd'")};
}

// Checks the attributes and source; returns the resized shape.
Shape resized_shape(InferCtx& c, const TensorType& src, const char* what) {
  const std::string& l = c.s("data_layout");
  ResizeLayout lay = resize_layout(l);
  if (!lay.rank) c.fail(ErrorKind::Value, "data_layout must be 'NHWC', 'NCHW', 'HWC', 'CHW' or 'HW', not '" + l + "'");
  if (int(src.shape.size()) != lay.rank)
    c.fail(ErrorKind::Value, "expects a rank-" + std::to_string(lay.rank) + " " + l + " " + what + ", got " +
                                 type_str(src));
  const Ints& size = c.ints("size");
  if (size.size() != 2) c.fail(ErrorKind::Value, "size needs 2 values (height, width), got " + std::to_string(size.size()));
  for (auto v : size)
    if (v < 1 || v > (int64_t(1) << 31))
      c.fail(ErrorKind::Value, "size (" + std::to_string(size[0]) + ", " + std::to_string(size[1]) +
                                   ") must be positive (and at most 2**31)");
  const std::string& m = c.s("mode");
  if (m != "nearest" && m != "bilinear") c.fail(ErrorKind::Value, "mode must be 'nearest' or 'bilinear', not '" + m + "'");
  const std::string& r = c.s("nearest_rounding_mode");
  bool known = false;
  for (auto k : kRoundingModes) known |= r == k;
  if (!known)
    c.fail(ErrorKind::Value, "nearest_rounding_mode must be 'round_prefer_ceil', 'round_prefer_floor', 'ceil', "
                             "'floor', 'round_to_even' or 'round_to_odd', not '" + r + "'");
  Shape out = src.shape;
  size_t h = size_t(lay.h);
  if (out[h] == 0 || out[h + 1] == 0)
    c.fail(ErrorKind::Value, "cannot resize an empty image: " + std::string(what) + " " + type_str(src));
  out[h] = size[0];
  out[h + 1] = size[1];
  return out;
}

ResizeAttrs decode_resize(const Attrs& a) {
  ResizeAttrs r;
  r.size = get_attr<Ints>(a, "size");
  r.bilinear = get_attr<std::string>(a, "mode") == "bilinear";
  r.center_result = get_attr<bool>(a, "center_result");
  r.align_corners = get_attr<bool>(a, "align_corners");
  r.layout = resize_layout(get_attr<std::string>(a, "data_layout"));
  r.nearest_rounding_mode = get_attr<std::string>(a, "nearest_rounding_mode");
  return r;
}

bool compatible(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}


// ---- resize ----

std::vector<TensorType> infer_resize(InferCtx& c) {
  require_class(c, 0, kFloat);
  return std::vector<TensorType>{{c.in[0].dtype, resized_shape(c, c.in[0], "source")}};
}

std::vector<ValueRef> grad_resize(GradCtx& c) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}};
  return std::vector<ValueRef>{call(c.g, "resize_gradient", {c.dy[0], c.x(0)}, c.node.attrs)};
}

// ---- resize_gradient ----

std::vector<TensorType> infer_resize_gradient(InferCtx& c) {
  require_class(c, 1, kFloat);
  c.same_dtype(0, 1);
  Shape fwd = resized_shape(c, c.in[1], "source");
  if (!compatible(c.in[0].shape, fwd))
    c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " does not match the resized shape " +
                                 shape_str(fwd) + " of source " + type_str(c.in[1]));
  return std::vector<TensorType>{c.in[1]};
}

std::vector<ValueRef> grad_resize_gradient(GradCtx& c) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}, ValueRef{}};
  return std::vector<ValueRef>{call(c.g, "resize", {c.dy[0]}, c.node.attrs), ValueRef{}};
}

}  // namespace

void register_resize_ops() {
  register_op({.name = "resize",
               .doc = "Resamples the images of source (H and W of data_layout) to size (MPSGraph's "
                      "resizeTensor:size:mode:centerResult:alignCorners:layout:, and resizeNearest with "
                      "nearest_rounding_mode). Source coordinate of output index d (input size n, output m): "
                      "align_corners: d * (n-1) / (m-1); center_result: (d + 0.5) * n / m - 0.5; neither: d * n / m. "
                      "PyTorch's F.interpolate: bilinear align_corners=True is align_corners=True; bilinear "
                      "align_corners=False is center_result=True; 'nearest-exact' is mode='nearest', "
                      "center_result=True; 'nearest' (legacy) is mode='nearest', center_result=False, "
                      "nearest_rounding_mode='floor'. Float dtypes.",
               .inputs = {{"source"}},
               .attrs = resize_attrs(),
               .decode = attr_decoder(decode_resize),
               .infer = infer_resize,
               .grad = grad_resize,
               .family = "resize"});
  register_op({.name = "resize_gradient",
               .doc = "Gradient of resize (same attributes): dy spread back onto source's shape with the "
                      "transposed weights (MPSGraph's resizeWithGradientTensor:input:...). source gives only the "
                      "shape. Linear: its gradient w.r.t. dy is resize.",
               .inputs = {{"dy"}, {"source", false, false, InputRole::ShapeOnly}},
               .attrs = resize_attrs(),
               .decode = attr_decoder(decode_resize),
               .infer = infer_resize_gradient,
               .grad = grad_resize_gradient,
               .family = "resize"});
}

}  // namespace mg::ops
