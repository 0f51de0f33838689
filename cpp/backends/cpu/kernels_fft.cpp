// CPU kernels for the FFT family, on pocketfft (the header-only C++ pocketfft that numpy and
// SciPy use, vendored in third_party/pocketfft). Batches are split over the thread pool along
// the first axis that is not transformed; pocketfft's own threads are off.
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#define POCKETFFT_NO_MULTITHREADING
#define POCKETFFT_CACHE_SIZE 16
#include <pocketfft/pocketfft_hdronly.h>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/fft_attrs.h"

namespace mg::cpu {

namespace {

using pocketfft::shape_t;
using pocketfft::stride_t;

enum class Kind { C2C, R2C, C2R };

stride_t byte_strides(const Shape& s, size_t esize) {
  stride_t st(s.size());
  ptrdiff_t acc = ptrdiff_t(esize);
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= ptrdiff_t(s[i]);
  }
  return st;
}

// What a run needs, fixed at compile time.
struct FftPlan {
  Kind kind;
  shape_t in_shape, out_shape;  // out_shape: the real shape for C2R (pocketfft's convention)
  stride_t in_st, out_st;
  shape_t axes;
  bool forward;
  double scale;
  bool real_in;  // C2C of a real input: widened into the output first
  int64_t split = -1;  // the axis split over threads (-1: none)
};

double scale_of(const ops::FftAttrs& a, const Shape& signal) {
  double v = 1;
  for (int64_t ax : a.axes) v *= double(signal[size_t(ax)]);
  if (a.scaling == ops::FftScaling::Size) return 1 / v;
  if (a.scaling == ops::FftScaling::Unitary) return 1 / std::sqrt(v);
  return 1;
}

template <class T>
void run_chunk(const FftPlan& p, const void* in, void* out, const shape_t& shape) {
  using Z = std::complex<T>;
  const T fct = T(p.scale);
  switch (p.kind) {
    case Kind::C2C:
      pocketfft::c2c(shape, p.real_in ? p.out_st : p.in_st, p.out_st, p.axes, p.forward,
                     p.real_in ? static_cast<const Z*>(out) : static_cast<const Z*>(in), static_cast<Z*>(out), fct);
      break;
    case Kind::R2C:
      pocketfft::r2c(shape, p.in_st, p.out_st, p.axes, p.forward, static_cast<const T*>(in), static_cast<Z*>(out), fct);
      break;
    case Kind::C2R:
      pocketfft::c2r(shape, p.in_st, p.out_st, p.axes, p.forward, static_cast<const Z*>(in), static_cast<T*>(out), fct);
      break;
  }
}

template <class T>
KernelFn fft_kernel(FftPlan p) {
  return [p](const void* const* in, void* const* out) {
    // pocketfft's shape: the real signal's (the input for C2C/R2C, the output for C2R)
    const shape_t& sig = p.kind == Kind::C2R ? p.out_shape : p.in_shape;
    size_t total = 1;
    for (size_t d : sig) total *= d;
    if (total == 0) return;
    if (p.real_in) {
      const T* x = static_cast<const T*>(in[0]);
      std::complex<T>* o = static_cast<std::complex<T>*>(out[0]);
      parallel_for(int64_t(total), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = std::complex<T>(x[i], T(0));
      });
    }
    if (p.split < 0) {
      run_chunk<T>(p, in[0], out[0], sig);
      return;
    }
    const size_t d = size_t(p.split);
    const ptrdiff_t in_step = p.real_in ? p.out_st[d] : p.in_st[d], out_step = p.out_st[d];
    parallel_for(int64_t(sig[d]), 1, [&](int64_t b, int64_t e) {
      shape_t part = sig;
      part[d] = size_t(e - b);
      const char* i0 = static_cast<const char*>(p.real_in ? out[0] : in[0]) + b * in_step;
      char* o0 = static_cast<char*>(out[0]) + b * out_step;
      run_chunk<T>(p, p.real_in ? o0 : i0, o0, part);
    });
  };
}

KernelFn make_fft(const KernelCtx& c, Kind kind) {
  const ops::FftAttrs& a = typed_attrs<ops::FftAttrs>(c.node);
  const TensorType &x = c.in[0], &y = c.out[0];
  FftPlan p;
  p.kind = kind;
  p.in_shape.assign(x.shape.begin(), x.shape.end());
  p.out_shape.assign(y.shape.begin(), y.shape.end());
  p.in_st = byte_strides(x.shape, dtype_size(x.dtype));
  p.out_st = byte_strides(y.shape, dtype_size(y.dtype));
  for (int64_t ax : a.axes) p.axes.push_back(size_t(ax));
  p.forward = !a.inverse;
  p.scale = scale_of(a, kind == Kind::C2R ? y.shape : x.shape);
  p.real_in = kind == Kind::C2C && !is_complex(x.dtype);
  // split the batch along the first axis that is not transformed, when there is work for threads
  int64_t batch = 1, elems = num_elements(y.shape);
  for (size_t d = 0; d < x.shape.size(); ++d) {
    bool transformed = false;
    for (int64_t ax : a.axes) transformed = transformed || ax == int64_t(d);
    if (!transformed && x.shape[d] > 1) {
      p.split = int64_t(d);
      batch = x.shape[d];
      break;
    }
  }
  if (batch < 2 || elems < 32768) p.split = -1;
  const DType part = complex_part_dtype(y.dtype);
  if (part == DType::Float32) return fft_kernel<float>(std::move(p));
  return fft_kernel<double>(std::move(p));
}

}  // namespace

void register_fft_kernels() {
  register_kernel("fast_fourier_transform", [](const KernelCtx& c) { return make_fft(c, Kind::C2C); });
  register_kernel("real_to_hermitean_fft", [](const KernelCtx& c) { return make_fft(c, Kind::R2C); });
  register_kernel("hermitean_to_real_fft", [](const KernelCtx& c) { return make_fft(c, Kind::C2R); });
}

}  // namespace mg::cpu
