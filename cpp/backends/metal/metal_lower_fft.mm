// Lowerings of the FFT family and of complex numbers, onto MPSGraph's own ops (macOS 14:
// MPSGraphFourierTransformOps, realPartOfTensor:, imaginaryPartOfTensor:,
// complexTensorWithRealTensor:imaginaryTensor:, conjugateWithTensor:). complex64 maps to
// MPSDataTypeComplexFloat32; complex128 is refused (metal_lower_common.mm), as float64 is.
// MPSGraph transforms only within the last four dimensions: other axes are refused.
// angle is atan2(imag, real); absolute of a complex tensor is its modulus, computed from the
// parts; casts to and from complex go through the real part.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/fft_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

T real_part(LowerCtx& c, T x) API_AVAILABLE(macos(14.0)) { return [c.g realPartOfTensor:x name:nil]; }
T imag_part(LowerCtx& c, T x) API_AVAILABLE(macos(14.0)) { return [c.g imaginaryPartOfTensor:x name:nil]; }
T make_complex(LowerCtx& c, T re, T im) API_AVAILABLE(macos(14.0)) {
  return [c.g complexTensorWithRealTensor:re imaginaryTensor:im name:nil];
}

enum class Kind { C2C, R2C, C2R };

std::vector<T> lower_fft(LowerCtx& c, Kind kind) {
  const ops::FftAttrs& a = typed_attrs<ops::FftAttrs>(c.node);
  const int64_t rank = int64_t(c.in_types[0].shape.size());
  NSMutableArray<NSNumber*>* axes = [NSMutableArray arrayWithCapacity:a.axes.size()];
  for (int64_t ax : a.axes) {
    if (ax < rank - 4)
      c.fail(ErrorKind::NotImplemented, "MPSGraph transforms only the last four axes; axis " + std::to_string(ax) +
                                            " of rank " + std::to_string(rank) + ": transpose it there first");
    [axes addObject:@(ax)];
  }
  if (@available(macOS 14.0, *)) {
    MPSGraphFFTDescriptor* d = [MPSGraphFFTDescriptor descriptor];
    d.inverse = a.inverse ? YES : NO;
    d.scalingMode = a.scaling == ops::FftScaling::Size      ? MPSGraphFFTScalingModeSize
                    : a.scaling == ops::FftScaling::Unitary ? MPSGraphFFTScalingModeUnitary
                                                            : MPSGraphFFTScalingModeNone;
    d.roundToOddHermitean = a.round_to_odd_hermitean ? YES : NO;
    T x = c.in[0];
    switch (kind) {
      case Kind::C2C:
        if (!is_complex(c.in_dtype(0))) x = make_complex(c, x, c.fill(0, c.in_types[0]));
        return {[c.g fastFourierTransformWithTensor:x axes:axes descriptor:d name:nil]};
      case Kind::R2C: return {[c.g realToHermiteanFFTWithTensor:x axes:axes descriptor:d name:nil]};
      case Kind::C2R: return {[c.g HermiteanToRealFFTWithTensor:x axes:axes descriptor:d name:nil]};
    }
  }
  c.needs_macos("14.0", c.op);
}

// op's lowering so far for real dtypes; complex ones go to f.
void extend(const std::string& op, LowerFn f) {
  const LowerFn* real = find_lowering(op);
  if (!real) throw std::logic_error("no metal lowering to extend to complex: " + op);
  LowerFn before = *real;
  register_lowering(op, [before, f](LowerCtx& c) {
    bool complex = is_complex(c.out().dtype);
    for (auto& t : c.in_types) complex = complex || is_complex(t.dtype);
    return complex ? f(c) : before(c);
  });
}

}  // namespace

void register_fft_lowerings() {
  register_lowering("fast_fourier_transform", [](LowerCtx& c) { return lower_fft(c, Kind::C2C); });
  register_lowering("real_to_hermitean_fft", [](LowerCtx& c) { return lower_fft(c, Kind::R2C); });
  register_lowering("hermitean_to_real_fft", [](LowerCtx& c) { return lower_fft(c, Kind::C2R); });

  register_lowering("real_part", [](LowerCtx& c) -> std::vector<T> {
    if (@available(macOS 14.0, *)) return {real_part(c, c.in[0])};
    c.needs_macos("14.0", c.op);
  });
  register_lowering("imaginary_part", [](LowerCtx& c) -> std::vector<T> {
    if (@available(macOS 14.0, *)) return {imag_part(c, c.in[0])};
    c.needs_macos("14.0", c.op);
  });
  register_lowering("complex", [](LowerCtx& c) -> std::vector<T> {
    const Shape& s = c.out().shape;
    if (@available(macOS 14.0, *)) return {make_complex(c, c.broadcast(c.in[0], s), c.broadcast(c.in[1], s))};
    c.needs_macos("14.0", c.op);
  });
  register_lowering("conjugate", [](LowerCtx& c) -> std::vector<T> {
    if (!is_complex(c.in_dtype(0))) return {[c.g identityWithTensor:c.in[0] name:nil]};
    if (@available(macOS 14.0, *)) return {[c.g conjugateWithTensor:c.in[0] name:nil]};
    c.needs_macos("14.0", c.op);
  });
  register_lowering("angle", [](LowerCtx& c) -> std::vector<T> {
    if (@available(macOS 14.0, *))
      return {[c.g atan2WithPrimaryTensor:imag_part(c, c.in[0]) secondaryTensor:real_part(c, c.in[0]) name:nil]};
    c.needs_macos("14.0", c.op);
  });
  extend("absolute", [](LowerCtx& c) -> std::vector<T> {
    if (@available(macOS 14.0, *)) {
      T re = real_part(c, c.in[0]), im = imag_part(c, c.in[0]);
      return {[c.g squareRootWithTensor:c.add(c.mul(re, re), c.mul(im, im)) name:nil]};
    }
    c.needs_macos("14.0", c.op);
  });
  extend("cast", [](LowerCtx& c) -> std::vector<T> {
    const DType from = c.in_dtype(0), to = c.out().dtype;
    if (is_complex(from) && is_complex(to)) return {c.in[0]};  // only complex64 reaches MPSGraph
    if (@available(macOS 14.0, *)) {
      if (!is_complex(from))
        return {make_complex(c, c.convert(c.in[0], from, DType::Float32),
                             c.fill(0, {DType::Float32, c.in_types[0].shape}))};
      T re = real_part(c, c.in[0]);
      if (to != DType::Bool) return {c.convert(re, DType::Float32, to)};
      return {c.lor(c.ne(re, c.k(0, DType::Float32)), c.ne(imag_part(c, c.in[0]), c.k(0, DType::Float32)))};
    }
    c.needs_macos("14.0", c.op);
  });
}

}  // namespace mg::metal
