// Quantization, as MPSGraph's quantization ops: affine quantize / dequantize per tensor or per
// axis, dequantize through a lookup table, and fake_quantize (quantize then dequantize, with the
// straight-through gradient quantisation-aware training uses).
//
//   quantize:   q = clamp(round_half_even(x / scale + zero_point), dtype's range) as int8 / uint8
//   dequantize: y = (q - zero_point) * scale
//
// Per tensor (axis None) scale and zero_point hold one element; per axis they are 1-D with
// x.shape[axis] elements (one element broadcasts). All are composites of elementwise ops,
// computed in float32 (float64 for float64 values), so every backend runs the same arithmetic.
//
// Gradients: integer values carry none, so quantize (integer output) has none; dequantize's
// gradient reaches scale and a floating-point zero_point through its decomposition;
// fake_quantize passes dy straight through to x where x quantises inside the range and gives 0
// where it clamps (torch.fake_quantize_per_tensor_affine), and none to scale and zero_point.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/quantization_attrs.h"

namespace mg::ops {

namespace {

bool quantized_dtype(DType t) { return t == DType::Int8 || t == DType::UInt8; }
double qmin(DType t) { return t == DType::Int8 ? -128.0 : 0.0; }
double qmax(DType t) { return t == DType::Int8 ? 127.0 : 255.0; }

// The normalised axis (stored back; -1 for per tensor) after checking scale and zero_point.
int64_t check_params(InferCtx& c, size_t first_param) {
  const Shape& xs = c.in[0].shape;
  int64_t axis = -1;
  if (c.has("axis")) {
    if (xs.empty()) c.fail(ErrorKind::Index, "per-axis quantization needs an input of rank >= 1, got " + type_str(c.in[0]));
    axis = c.axis(c.i("axis"), int64_t(xs.size()));
    c.attrs["axis"] = axis;
  }
  const int64_t n = axis >= 0 ? xs[size_t(axis)] : 1;
  for (size_t i = first_param; i < first_param + 2; ++i) {
    const Shape& s = c.in[i].shape;
    const int64_t len = s.empty() ? 1 : s[0];
    const bool ok = s.size() <= 1 && (len < 0 || len == 1 || (axis >= 0 && (n < 0 || len == n)));
    if (!ok)
      c.fail(ErrorKind::Value, "'" + c.op.inputs[i].name + "' " + type_str(c.in[i]) +
                                   (axis >= 0 ? " must hold 1 or x.shape[" + std::to_string(axis) + "] elements"
                                              : std::string(" must hold one element (per-tensor; pass axis for "
                                                            "per-axis parameters)")) +
                                   " for x " + type_str(c.in[0]));
  }
  require_class(c, first_param, kFloat);
  require_class(c, first_param + 1, kNumeric);
  return axis;
}

std::vector<TensorType> infer_quantize(InferCtx& c) {
  require_class(c, 0, kFloat);
  check_params(c, 1);
  DType t = c.dtype("dtype");
  if (!quantized_dtype(t)) c.fail(ErrorKind::Type, std::string("dtype must be int8 or uint8, got ") + dtype_name(t));
  return {{t, c.in[0].shape}};
}

std::vector<TensorType> infer_dequantize(InferCtx& c) {
  if (!quantized_dtype(c.in[0].dtype) && c.in[0].dtype != DType::Int32)
    c.fail(ErrorKind::Type, "expects an int8, uint8 or int32 'x', got " + type_str(c.in[0]));
  check_params(c, 1);
  DType t = c.dtype("dtype");
  if (!is_floating(t)) c.fail(ErrorKind::Type, std::string("dtype must be a floating-point dtype, got ") + dtype_name(t));
  return {{t, c.in[0].shape}};
}

std::vector<TensorType> infer_fake_quantize(InferCtx& c) {
  require_class(c, 0, kFloat);
  check_params(c, 1);
  DType t = c.dtype("dtype");
  if (!quantized_dtype(t)) c.fail(ErrorKind::Type, std::string("dtype must be int8 or uint8, got ") + dtype_name(t));
  return {c.in[0]};
}

std::vector<TensorType> infer_dequantize_lut(InferCtx& c) {
  if (c.in[0].dtype != DType::UInt8)
    c.fail(ErrorKind::Type, "expects uint8 indices 'x', got " + type_str(c.in[0]));
  require_class(c, 1, kFloat);
  const Shape& ls = c.in[1].shape;
  if (ls.empty() || (ls.back() >= 0 && ls.back() != 256))
    c.fail(ErrorKind::Value, "'lut' must have 256 entries in its last dim (one per uint8 index), got " +
                                 type_str(c.in[1]));
  auto out = broadcast_shapes(c.in[0].shape, Shape(ls.begin(), ls.end() - 1));
  if (!out)
    c.fail(ErrorKind::Value, "the leading dims of 'lut' " + shape_str(ls) + " do not broadcast against x " +
                                 shape_str(c.in[0].shape));
  return {{c.in[1].dtype, *out}};
}

QuantAttrs decode_quant(const Attrs& a) {
  return {get_attr<DType>(a, "dtype"), has_attr(a, "axis") ? get_attr<int64_t>(a, "axis") : int64_t(-1)};
}

// ---- decompositions ----

DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

ValueRef cast(Graph& g, ValueRef v, DType t) {
  return g.type(v).dtype == t ? v : call(g, "cast", {v}, {{"dtype", t}});
}

// scale / zero_point in dtype t, shaped to broadcast against x (rank `rank`) along `axis`.
ValueRef param(Graph& g, ValueRef p, const Attrs& a, size_t rank, DType t) {
  Shape s;
  if (has_attr(a, "axis")) {
    s.assign(rank, 1);
    s[size_t(get_attr<int64_t>(a, "axis"))] = -1;
  }
  return call(g, "reshape", {cast(g, p, t)}, {{"shape", std::vector<int64_t>(s)}});
}

// round(x / scale + zero_point) in the compute dtype, before clamping.
ValueRef scaled(Graph& g, const std::vector<ValueRef>& in, const Attrs& a, DType cd) {
  size_t rank = g.type(in[0]).shape.size();
  ValueRef v = bin(g, "division", cast(g, in[0], cd), param(g, in[1], a, rank, cd));
  return un(g, "round", bin(g, "addition", v, param(g, in[2], a, rank, cd)));
}

ValueRef clamp_to(Graph& g, ValueRef v, DType q) {
  return call(g, "clamp", {v, k(g, qmin(q), v), k(g, qmax(q), v)});
}

ValueRef quantize_values(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  DType q = get_attr<DType>(a, "dtype");
  return cast(g, clamp_to(g, scaled(g, in, a, compute_dtype(g.type(in[0]).dtype)), q), q);
}

ValueRef dequantize_values(Graph& g, const std::vector<ValueRef>& in, const Attrs& a, DType out) {
  DType cd = compute_dtype(out);
  size_t rank = g.type(in[0]).shape.size();
  ValueRef v = bin(g, "subtraction", cast(g, in[0], cd), param(g, in[2], a, rank, cd));
  return cast(g, bin(g, "multiplication", v, param(g, in[1], a, rank, cd)), out);
}

std::vector<ValueRef> expand_quantize(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return {quantize_values(g, in, a)};
}

std::vector<ValueRef> expand_dequantize(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return {dequantize_values(g, in, a, get_attr<DType>(a, "dtype"))};
}

std::vector<ValueRef> expand_fake_quantize(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef q = quantize_values(g, in, a);
  return {dequantize_values(g, {q, in[1], in[2]}, a, g.type(in[0]).dtype)};
}

// lut[..., x[...]]: x as the index of a gather along the lut's last dim, both broadcast to the
// result's dims first (by adding zeros of the broadcast shape, so unknown dims work).
std::vector<ValueRef> expand_dequantize_lut(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  ValueRef idx = call(g, "expand_dims", {cast(g, in[0], DType::Int32)}, {{"axes", std::vector<int64_t>{-1}}});
  ValueRef lut = in[1];
  ValueRef zero = bin(g, "multiplication", cast(g, idx, g.type(lut).dtype), k(g, 0.0, lut));  // (..., 1)
  lut = bin(g, "addition", lut, zero);                                                     // (..., 256)
  ValueRef like = call(g, "slice", {lut}, {{"axis", int64_t(-1)}, {"start", int64_t(0)}, {"length", int64_t(1)}});
  idx = call(g, "broadcast_like", {idx, like});
  ValueRef r = call(g, "gather_along_axis", {lut, idx}, {{"axis", int64_t(-1)}});
  return {call(g, "squeeze", {r}, {{"axes", std::vector<int64_t>{-1}}})};
}

// Straight through inside the range, 0 where quantisation clamps.
std::vector<ValueRef> grad_fake_quantize(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}, ValueRef{}};
  Graph& g = c.g;
  DType q = get_attr<DType>(c.node.attrs, "dtype");
  std::vector<ValueRef> in{c.x(0), c.x(1), c.x(2)};
  ValueRef v = scaled(g, in, c.node.attrs, compute_dtype(g.type(c.x(0)).dtype));
  ValueRef inside = call(g, "logical_and", {call(g, "greater_than_or_equal_to", {v, k(g, qmin(q), v)}),
                                            call(g, "less_than_or_equal_to", {v, k(g, qmax(q), v)})});
  return {call(g, "select", {inside, c.dy[0], zeros_like(g, c.dy[0])}), ValueRef{}, ValueRef{}};
}

std::vector<AttrSpec> quant_attrs(DType def, const char* dtype_doc) {
  return {attr("dtype", AttrKind::DType, def, dtype_doc),
          optional_attr("axis", AttrKind::Int, "the axis of per-axis parameters; None: per tensor")};
}

const std::vector<InputSpec> kQuantInputs = {{"x"}, {"scale"}, {"zero_point"}};
// dequantize's integer x is never the dtype of a Python scalar scale or zero point (the Index role's
// scalar rule), so dequantize(q, 0.1, 3) works.
const std::vector<InputSpec> kDequantInputs = {{"x", false, false, InputRole::Index}, {"scale"}, {"zero_point"}};

}  // namespace

void register_quantization_ops() {
  register_op({.name = "quantize",
               .doc = "Affine quantization to int8 / uint8 (MPSGraph's quantizeTensor:scaleTensor:zeroPointTensor:"
                      "dataType:axis:): round_half_even(x / scale + zero_point), clamped to the dtype's range; NaN "
                      "becomes 0. scale and zero_point hold one element, or with `axis` x.shape[axis] elements. "
                      "The integer result carries no gradient; use fake_quantize for a straight-through one.",
               .inputs = kQuantInputs,
               .attrs = quant_attrs(DType::Int8, "int8 or uint8"),
               .decode = attr_decoder(decode_quant),
               .infer = infer_quantize,
               .differentiable = Differentiable::No,
               .family = "quantization",
               .expand = expand_quantize});
  register_op({.name = "dequantize",
               .doc = "Affine dequantization of int8 / uint8 / int32 values (MPSGraph's dequantizeTensor:scaleTensor:"
                      "zeroPointTensor:dataType:axis:): (x - zero_point) * scale in `dtype`. scale and zero_point "
                      "hold one element, or with `axis` x.shape[axis] elements. Differentiable with respect to "
                      "scale and a floating-point zero_point.",
               .inputs = kDequantInputs,
               .attrs = quant_attrs(DType::Float32, "the floating-point result dtype"),
               .decode = attr_decoder(decode_quant),
               .infer = infer_dequantize,
               .family = "quantization",
               .expand = expand_dequantize});
  register_op({.name = "fake_quantize",
               .doc = "dequantize(quantize(x)) in x's dtype (torch.fake_quantize_per_tensor_affine / "
                      "per_channel_affine): the values x takes after int8 / uint8 quantization. Its gradient is "
                      "straight through: dy where x / scale + zero_point rounds inside the dtype's range, 0 where it "
                      "clamps; scale and zero_point get none.",
               .inputs = kQuantInputs,
               .attrs = quant_attrs(DType::Int8, "int8 or uint8: the range quantized to"),
               .decode = attr_decoder(decode_quant),
               .infer = infer_fake_quantize,
               .grad = grad_fake_quantize,
               .family = "quantization",
               .expand = expand_fake_quantize});
  register_op({.name = "dequantize_lut",
               .doc = "Lookup-table dequantization (MPSGraph's dequantizeTensor:LUTTensor:): result[i...] = "
                      "lut[i'..., x[i...]] for uint8 indices x and a table of 256 entries in lut's last dim, whose "
                      "leading dims broadcast against x's. Differentiable with respect to the table.",
               .inputs = {{"x", false, false, InputRole::Index}, {"lut"}},
               .infer = infer_dequantize_lut,
               .family = "quantization",
               .expand = expand_dequantize_lut});
}

}  // namespace mg::ops
