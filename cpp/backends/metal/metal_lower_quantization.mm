// Lowerings of the quantization family (core/ops/quantization.cpp). Every op is a composite:
// what is not claimed here runs as its decomposition (elementwise ops, gather).
//
// dequantize is MPSGraph's dequantizeTensor:scaleTensor:zeroPointTensor:dataType:axis: (macOS
// 13.1): result = scale * (x - zero_point), documented for int8 / uint8 x with a zero point of
// x's type and a scale of the result type. It runs in float32 (the decomposition's arithmetic:
// x - zero_point is exact, one rounding at the product) and is cast to the result dtype after.
// Per-tensor parameters are broadcast along the last axis, so only the documented form (1-D,
// x.shape[axis] elements) is used. A zero point of another dtype (float, int32) or an int32 x
// is lowered as the decomposition's arithmetic, which the claim cannot tell apart (it sees the
// node, not its input types).
//
// Not claimed: quantize and fake_quantize (Apple's documentation gives round(x / scale) +
// zero_point in one place and x / scale + zero_point in another, and says nothing of the rounding
// mode, saturation or NaN, where the core's op is round-half-even after adding the zero point,
// clamped, NaN to 0), and dequantize_lut (dequantizeTensor:LUTTensor: requires the index tensor
// to be a graph constant, and its LUT groups are not numpy broadcasting). docs/metal.md.
#include <cstdint>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/quantization_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

bool claim_dequantize(const Node&) {
  if (@available(macOS 13.1, *)) return true;
  return false;  // the decomposition runs anywhere
}

int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<T> lower_dequantize(LowerCtx& c) {
  const ops::QuantAttrs& a = typed_attrs<ops::QuantAttrs>(c.node);
  const DType xt = c.in_dtype(0), zt = c.in_dtype(2), out = c.out().dtype;
  const Shape& xs = c.in_types[0].shape;
  const int64_t rank = int64_t(xs.size());
  const int64_t ns = elements(c.in_types[1].shape), nz = elements(c.in_types[2].shape);
  T scale = c.reshape(c.convert(c.in[1], c.in_dtype(1), DType::Float32), {ns});
  T zero = c.reshape(c.in[2], {nz});
  if ((xt == DType::Int8 || xt == DType::UInt8) && zt == xt) {
    if (@available(macOS 13.1, *)) {
      const int64_t axis = a.axis >= 0 ? a.axis : (rank > 0 ? rank - 1 : 0);  // rank 0 is carried as [1]
      const int64_t n = rank > 0 ? xs[size_t(axis)] : 1;
      T y = [c.g dequantizeTensor:c.in[0]
                      scaleTensor:c.broadcast(scale, {n})
                  zeroPointTensor:c.broadcast(zero, {n})
                         dataType:MPSDataTypeFloat32
                             axis:NSInteger(axis)
                             name:nil];
      return {c.convert(y, DType::Float32, out)};
    }
  }
  // (float32(x) - float32(zero_point)) * scale, the parameters shaped along the axis
  Shape ps = a.axis >= 0 ? Shape(size_t(rank), 1) : Shape{1};
  if (a.axis >= 0) ps[size_t(a.axis)] = -1;
  auto along = [&](T p, int64_t len) {
    Shape s = ps;
    for (auto& d : s) d = d < 0 ? len : d;
    return c.reshape(p, s);
  };
  T d = c.sub(c.convert(c.in[0], xt, DType::Float32), along(c.convert(zero, zt, DType::Float32), nz));
  return {c.convert(c.mul(d, along(scale, ns)), DType::Float32, out)};
}

}  // namespace

void register_quantization_lowerings() { register_composite_lowering("dequantize", claim_dequantize, lower_dequantize); }

}  // namespace mg::metal
