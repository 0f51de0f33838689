// FFT family: fast_fourier_transform, real_to_hermitean_fft, hermitean_to_real_fft, as
// MPSGraph's Fourier transform ops (MPSGraphFFTDescriptor: inverse, scalingMode,
// roundToOddHermitean).
//
// Gradients follow PyTorch's convention for complex tensors (see complex.cpp): for the linear
// map y = c F x the gradient is c conj(F)^T dy, the transform with the other sign.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/array.h"
#include "core/ops/common.h"
#include "core/ops/fft_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;

enum class FftKind { Complex, RealToHermitean, HermiteanToReal };

const char* const kScalingNames[] = {"none", "size", "unitary"};

FftScaling parse_scaling(const InferCtx& c) {
  const std::string& s = c.s("scaling_mode");
  for (int i = 0; i < 3; ++i)
    if (s == kScalingNames[i]) return FftScaling(i);
  c.fail(ErrorKind::Value, "scaling_mode must be 'none', 'size' or 'unitary', got '" + s + "'");
}

FftAttrs decode_fft(const Attrs& a) {
  FftAttrs r;
  r.axes = get_attr<Ints>(a, "axes");  // infer resolved them
  r.inverse = get_attr<bool>(a, "inverse");
  const std::string& s = get_attr<std::string>(a, "scaling_mode");
  r.scaling = s == "size" ? FftScaling::Size : s == "unitary" ? FftScaling::Unitary : FftScaling::None;
  if (has_attr(a, "round_to_odd_hermitean")) r.round_to_odd_hermitean = get_attr<bool>(a, "round_to_odd_hermitean");
  return r;
}

DType complex_for(const InferCtx& c, DType t) {
  if (t == DType::Float32 || t == DType::Complex64) return DType::Complex64;
  if (t == DType::Float64 || t == DType::Complex128) return DType::Complex128;
  c.fail(ErrorKind::Type, "takes float32/float64 or complex64/complex128 tensors, got " + type_str(c.in[0]) +
                              (t == DType::Float16 || t == DType::BFloat16
                                   ? "; complex32 is not supported: cast to float32 first"
                                   : ""));
}

std::vector<TensorType> infer_fft(InferCtx& c, FftKind kind) {
  const TensorType& x = c.in[0];
  const int64_t rank = int64_t(x.shape.size());
  Ints axes;
  if (c.has("axes")) axes = c.axes(c.ints("axes"), rank);
  else
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  if (axes.empty()) c.fail(ErrorKind::Value, "needs at least one axis to transform, got " + type_str(x));
  c.attrs["axes"] = axes;
  parse_scaling(c);
  for (int64_t a : axes)
    if (x.shape[size_t(a)] == 0)
      c.fail(ErrorKind::Value, "cannot transform axis " + std::to_string(a) + " of size 0 in " + type_str(x));
  DType out = complex_for(c, x.dtype);
  if (kind == FftKind::RealToHermitean && is_complex(x.dtype))
    c.fail(ErrorKind::Type, "takes a real tensor, got " + type_str(x) + "; use fast_fourier_transform for complex input");
  if (kind == FftKind::HermiteanToReal) {
    if (!is_complex(x.dtype))
      c.fail(ErrorKind::Type, "takes a complex tensor (the half spectrum), got " + type_str(x));
    out = complex_part_dtype(x.dtype);
  }
  Shape s = x.shape;
  int64_t& last = s[size_t(axes.back())];
  if (kind == FftKind::RealToHermitean && last > 0) last = last / 2 + 1;
  if (kind == FftKind::HermiteanToReal && last > 0) {
    last = 2 * (last - 1) + (c.b("round_to_odd_hermitean") ? 1 : 0);
    if (last == 0)
      c.fail(ErrorKind::Value, "a half spectrum of 1 point gives 0 output points (" + type_str(x) +
                                   "); set round_to_odd_hermitean for a 1-point signal");
  }
  return std::vector<TensorType>{{out, s}};
}

// The transform `op` of x over a's axes with the opposite sign and the same scaling.
ValueRef flipped_fft(Graph& g, const char* op, ValueRef x, const FftAttrs& a, bool odd = false) {
  Attrs at{{"axes", a.axes}, {"inverse", !a.inverse}, {"scaling_mode", std::string(kScalingNames[int(a.scaling)])}};
  if (std::string(op) == "hermitean_to_real_fft") at["round_to_odd_hermitean"] = odd;
  return call(g, op, {x}, std::move(at));
}

// A constant of dtype t holding w(k) along `axis` of a rank-`rank` tensor (size 1 elsewhere).
template <class W>
ValueRef along_axis(Graph& g, DType t, int64_t rank, int64_t axis, int64_t n, W w) {
  Shape s(size_t(rank), 1);
  s[size_t(axis)] = n;
  auto arr = Array::empty(t, s);
  for (int64_t k = 0; k < n; ++k) store_from_double(arr->data(), t, k, w(k));
  return g.constant(arr);
}

int64_t known_length(const GradCtx& c, const TensorType& t, int64_t axis) {
  int64_t n = t.shape[size_t(axis)];
  if (n < 0)
    raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name,
          "the gradient needs the length of axis " + std::to_string(axis) +
              " to be known when it is built, got " + type_str(t));
  return n;
}

std::vector<ValueRef> grad_fft(GradCtx& c) {
  const FftAttrs& a = typed_attrs<FftAttrs>(c.node);
  ValueRef dx = flipped_fft(c.g, "fast_fourier_transform", c.dy[0], a);
  if (!is_complex(c.g.type(c.x(0)).dtype)) dx = call(c.g, "real_part", {dx});
  return std::vector<ValueRef>{dx};
}

// y = first n/2+1 bins of c F x (x real): dx = Re(c conj(F) zero-padded dy), which is the
// Hermitean-to-real transform of dy with the bins it counts twice halved.
std::vector<ValueRef> grad_real_to_hermitean(GradCtx& c) {
  const FftAttrs& a = typed_attrs<FftAttrs>(c.node);
  const TensorType& xt = c.g.type(c.x(0));
  const int64_t axis = a.axes.back(), n = known_length(c, xt, axis), m = n / 2 + 1;
  ValueRef w = along_axis(c.g, c.g.type(c.dy[0]).dtype, int64_t(xt.shape.size()), axis, m,
                          [n](int64_t k) { return k == 0 || 2 * k == n ? 1.0 : 0.5; });
  return std::vector<ValueRef>{
      flipped_fft(c.g, "hermitean_to_real_fft", bin(c.g, "multiplication", c.dy[0], w), a, n % 2 == 1)};
}

// x = c Re(sum_k w_k h_k e^{...}) with w_k = 2 for the bins that stand for two: dh = w * rfft(dx).
std::vector<ValueRef> grad_hermitean_to_real(GradCtx& c) {
  const FftAttrs& a = typed_attrs<FftAttrs>(c.node);
  const TensorType& ht = c.g.type(c.x(0));
  const int64_t axis = a.axes.back(), m = known_length(c, ht, axis);
  const int64_t n = 2 * (m - 1) + (a.round_to_odd_hermitean ? 1 : 0);
  ValueRef w = along_axis(c.g, ht.dtype, int64_t(ht.shape.size()), axis, m,
                          [n](int64_t k) { return k == 0 || 2 * k == n ? 1.0 : 2.0; });
  return std::vector<ValueRef>{bin(c.g, "multiplication", flipped_fft(c.g, "real_to_hermitean_fft", c.dy[0], a), w)};
}

std::vector<AttrSpec> fft_attrs(bool odd) {
  std::vector<AttrSpec> r = {
      optional_attr("axes", AttrKind::Axes, "axes to transform (all when omitted; negative count from the end)"),
      attr("inverse", AttrKind::Bool, false, "use exp(+i 2pi k n / N) (the inverse transform's sign)"),
      attr("scaling_mode", AttrKind::String, std::string("none"),
           "'none', 'size' (1/N) or 'unitary' (1/sqrt(N)), N the product of the transformed signal lengths")};
  if (odd)
    r.push_back(attr("round_to_odd_hermitean", AttrKind::Bool, false,
                     "the real output has 2(m-1)+1 points along the last axis instead of 2(m-1)"));
  return r;
}

}  // namespace

void register_fft_ops() {
  auto op = [](const char* name, FftKind kind, GradFn grad, const char* doc) {
    register_op({.name = name,
                 .doc = doc,
                 .inputs = {{"x"}},
                 .attrs = fft_attrs(kind == FftKind::HermiteanToReal),
                 .decode = attr_decoder(decode_fft),
                 .infer = [kind](InferCtx& c) { return infer_fft(c, kind); },
                 .grad = std::move(grad),
                 .family = "fft",
                 .complex = true});
  };
  op("fast_fourier_transform", FftKind::Complex, grad_fft,
     "The discrete Fourier transform over `axes`: sum_n x[n] exp(-+ i 2pi k n / N), with '+' when inverse. A real "
     "input is taken as complex. numpy.fft.fftn(x, axes=axes) is the default; ifftn is inverse=True, "
     "scaling_mode='size'. complex64 (from float32) or complex128 (CPU).");
  op("real_to_hermitean_fft", FftKind::RealToHermitean, grad_real_to_hermitean,
     "The Fourier transform of a real tensor over `axes`, keeping the n//2+1 unique frequencies of the last of them "
     "(the highest axis): numpy.fft.rfftn(x, axes=axes). inverse and scaling_mode as in fast_fourier_transform.");
  op("hermitean_to_real_fft", FftKind::HermiteanToReal, grad_hermitean_to_real,
     "The real signal whose half spectrum (m frequencies along the last of `axes`) is x: 2(m-1) points there, "
     "2(m-1)+1 with round_to_odd_hermitean. numpy.fft.irfftn(x, s, axes) is inverse=True, scaling_mode='size'. "
     "The imaginary parts of the zero (and, for an even length, the Nyquist) frequency are ignored, as numpy does.");
}

}  // namespace mg::ops
