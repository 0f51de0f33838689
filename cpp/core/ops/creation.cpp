// Creation family: tensors made from attributes alone (no inputs). Shapes must be static;
// these fold into constants at specialisation.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/creation_attrs.h"

namespace mg::ops {

namespace {

Shape static_shape(InferCtx& c) {
  const auto& s = c.ints("shape");
  for (auto d : s)
    if (d < 0)
      c.fail(ErrorKind::Value, "needs a static shape with non-negative dims, got " + shape_str(s) +
                                   (d == kUnknownDim ? " (unknown dims are not allowed here)" : ""));
  return s;
}

// ---- typed attributes (creation_attrs.h) ----

FillAttrs decode_fill(const Attrs& a) { return {get_attr<double>(a, "value")}; }
ArangeAttrs decode_arange(const Attrs& a) {
  return {get_attr<double>(a, "start"), get_attr<double>(a, "stop"), get_attr<double>(a, "step")};
}
EyeAttrs decode_eye(const Attrs& a) { return {get_attr<int64_t>(a, "n"), get_attr<int64_t>(a, "m"), get_attr<int64_t>(a, "k")}; }

std::vector<TensorType> infer_fill(InferCtx& c) { return std::vector<TensorType>{{c.dtype("dtype"), static_shape(c)}}; }

// zeros, ones, full
void fill_op(const char* name, bool with_value, const char* doc) {
  std::vector<AttrSpec> attrs = {attr("shape", AttrKind::Shape, AttrNone{}, "static output shape")};
  if (with_value) attrs.push_back(attr("value", AttrKind::Float, AttrNone{}, "fill value, converted to dtype"));
  attrs.push_back(attr("dtype", AttrKind::DType, DType::Float32, "output dtype"));
  register_op({.name = name,
               .doc = doc,
               .attrs = std::move(attrs),
               .decode = with_value ? attr_decoder(decode_fill) : AttrDecoder{},
               .infer = infer_fill,
               .differentiable = Differentiable::No,
               .family = "creation"});
}


// ---- arange ----

std::vector<TensorType> infer_arange(InferCtx& c) {
  if (!c.has("stop")) {  // arange(n) -> range(0, n): normalise so kernels see start and stop
    double n = c.f("start");
    c.attrs["stop"] = n;
    c.attrs["start"] = 0.0;
  }
  double start = c.f("start"), stop = c.f("stop"), step = c.f("step");
  if (step == 0) c.fail(ErrorKind::Value, "step must be nonzero");
  if (!std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    c.fail(ErrorKind::Value, "start, stop and step must be finite");
  double len = std::ceil((stop - start) / step);
  if (!(len >= 0)) len = 0;
  if (len > 1e15) c.fail(ErrorKind::Value, "range of " + std::to_string(len) + " elements is too large");
  if (c.dtype("dtype") == DType::Bool) c.fail(ErrorKind::Type, "dtype bool is not supported");
  return std::vector<TensorType>{{c.dtype("dtype"), Shape{int64_t(len)}}};
}

// ---- eye ----

std::vector<TensorType> infer_eye(InferCtx& c) {
  int64_t n = c.i("n");
  if (!c.has("m")) c.attrs["m"] = n;
  int64_t m = c.i("m");
  if (n < 0 || m < 0)
    c.fail(ErrorKind::Value, "n and m must be non-negative, got n=" + std::to_string(n) +
                                 ", m=" + std::to_string(m));
  return std::vector<TensorType>{{c.dtype("dtype"), Shape{n, m}}};
}

}  // namespace

void register_creation_ops() {
  fill_op("zeros", false, "A tensor of zeros.");
  fill_op("ones", false, "A tensor of ones.");
  fill_op("full", true,
          "A tensor filled with `value`. Conversion to an integer dtype truncates toward zero and saturates; "
          "NaN becomes 0.");
  register_op(
      {.name = "arange",
       .doc = "Evenly spaced values start + i*step for i in range(ceil((stop - start) / step)), as numpy's arange; "
              "arange(n) alone means range(0, n). Values are computed in float64 and then converted to dtype "
              "(integers truncate toward zero).",
       .attrs = {attr("start", AttrKind::Float, AttrNone{}, "first value (the stop when stop is omitted)"),
                 optional_attr("stop", AttrKind::Float, "end (exclusive); when omitted the range is [0, start)"),
                 attr("step", AttrKind::Float, 1.0, "spacing, nonzero"),
                 attr("dtype", AttrKind::DType, DType::Float32, "output dtype")},
       .decode = attr_decoder(decode_arange),
       .infer = infer_arange,
       .differentiable = Differentiable::No,
       .family = "creation"});
  register_op({.name = "eye",
               .doc = "A 2-D (n, m) tensor with ones on the k-th diagonal and zeros elsewhere, as numpy's eye.",
               .attrs = {attr("n", AttrKind::Int, AttrNone{}, "rows"),
                         optional_attr("m", AttrKind::Int, "columns (default n)"),
                         attr("k", AttrKind::Int, int64_t(0), "diagonal: 0 main, > 0 above, < 0 below"),
                         attr("dtype", AttrKind::DType, DType::Float32, "output dtype")},
               .decode = attr_decoder(decode_eye),
               .infer = infer_eye,
               .differentiable = Differentiable::No,
               .family = "creation"});
}

}  // namespace mg::ops
