// CPU kernels for complex64/complex128: the complex ops (real_part, ..., angle) and the
// complex cases of elementwise, select, cast and the gradient helpers. Ops that act on the
// real and imaginary parts alone run their real kernel on the parts (a complex tensor of
// shape s is a real one of shape s + (2,)); the others have complex loops here, instantiated
// for std::complex<float> and std::complex<double> only.
#include <array>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/elementwise_util.h"

namespace mg::cpu {

namespace {

// Calls f(T{}) with T = float for complex64/float32 and double for complex128/float64.
template <class F>
KernelFn by_precision(const KernelCtx& c, DType t, F&& f) {
  if (t == DType::Complex64 || t == DType::Float32) return f(float{});
  if (t == DType::Complex128 || t == DType::Float64) return f(double{});
  raise(ErrorKind::Type, c.node.op->name, c.node.name, std::string("no cpu kernel for ") + dtype_name(t));
}

bool any_complex(const KernelCtx& c) {
  for (auto& t : c.in)
    if (is_complex(t.dtype)) return true;
  for (auto& t : c.out)
    if (is_complex(t.dtype)) return true;
  return false;
}

// Complex tensors as (real, imaginary) pairs along a new last axis; real ones (predicates)
// get a size-1 last axis so that they broadcast against the pairs.
TensorType pair_view(const TensorType& t) {
  TensorType r{complex_part_dtype(t.dtype), t.shape};
  r.shape.push_back(is_complex(t.dtype) ? 2 : 1);
  return r;
}

// op's kernel so far, for real dtypes; complex ones go to `complex_factory`.
void extend(const std::string& op, KernelFactory complex_factory) {
  KernelFactory real = registered_kernel(op);
  if (!real) throw std::logic_error("no cpu kernel to extend to complex: " + op);
  register_kernel(op, [real, complex_factory](const KernelCtx& c) -> KernelFn {
    return any_complex(c) ? complex_factory(c) : real(c);
  });
}

// Ops linear in each part separately (add, negate, select, sum, broadcast) run their real kernel
// on the parts.
void extend_by_parts(const std::string& op) {
  KernelFactory real = registered_kernel(op);
  extend(op, [real](const KernelCtx& c) -> KernelFn {
    std::vector<TensorType> in, out;
    for (auto& t : c.in) in.push_back(pair_view(t));
    for (auto& t : c.out) out.push_back(pair_view(t));
    KernelCtx rc{c.node, in, out};
    KernelFn f = real(rc);
    for (size_t nbytes : rc.scratch_bytes) c.scratch(nbytes);  // same indices: as many outputs
    return f;
  });
}

template <class A, class R, class F>
KernelFn unary(int64_t n, F f) {
  return [n, f](const void* const* in, void* const* out) {
    const A* x = static_cast<const A*>(in[0]);
    R* o = static_cast<R*>(out[0]);
    parallel_for(n, 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(x[i]);
    });
  };
}

template <class A, class B, class R, class F>
KernelFn binary(const KernelCtx& c, F f) {
  BroadcastPlan plan = make_broadcast_plan(c.out[0].shape, {c.in[0].shape, c.in[1].shape});
  return [plan, f](const void* const* in, void* const* out) {
    const A* a = static_cast<const A*>(in[0]);
    const B* b = static_cast<const B*>(in[1]);
    R* o = static_cast<R*>(out[0]);
    auto st = plan.inner_strides();
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[oo + i] = f(a[off[0] + i * st[0]], b[off[1] + i * st[1]]);
    });
  };
}

// A kernel for a unary op on complex input: make(T{}) gives f(std::complex<T>) -> result.
template <class Make>
KernelFactory complex_unary(Make make) {
  return [make](const KernelCtx& c) -> KernelFn {
    int64_t n = num_elements(c.out[0].shape);
    return by_precision(c, c.in[0].dtype, [&](auto tag) -> KernelFn {
      using T = decltype(tag);
      auto f = make(T{});
      using R = decltype(f(std::complex<T>{}));
      return unary<std::complex<T>, R>(n, f);
    });
  };
}

template <class Make>
void complex_binary(const char* op, Make make) {
  extend(op, [make](const KernelCtx& c) -> KernelFn {
    return by_precision(c, c.in[0].dtype, [&](auto tag) -> KernelFn {
      using T = decltype(tag);
      using Z = std::complex<T>;
      auto f = make(T{});
      return binary<Z, Z, decltype(f(Z{}, Z{}))>(c, f);
    });
  });
}

// cast to, from and between complex dtypes: complex -> real keeps the real part (numpy's
// astype), complex -> bool is "either part nonzero".
KernelFn complex_cast(const KernelCtx& c) {
  const DType from = c.in[0].dtype, to = c.out[0].dtype;
  const int64_t n = num_elements(c.out[0].shape);
  if (is_complex(from) && is_complex(to))
    return by_precision(c, from, [&](auto f) -> KernelFn {
      return by_precision(c, to, [&](auto t) -> KernelFn {
        using F = decltype(f);
        using T = decltype(t);
        return unary<std::complex<F>, std::complex<T>>(n, [](std::complex<F> z) { return std::complex<T>(z); });
      });
    });
  if (is_complex(from))
    return by_precision(c, from, [&](auto f) -> KernelFn {
      using F = decltype(f);
      return dispatch_dtype(to, [&](auto r) -> KernelFn {
        using R = decltype(r);
        return unary<std::complex<F>, R>(n, [](std::complex<F> z) {
          if constexpr (std::is_same_v<R, bool>) return z.real() != F(0) || z.imag() != F(0);
          else return Num<R>::st(convert<typename Num<R>::C>(z.real()));
        });
      });
    });
  return by_precision(c, to, [&](auto t) -> KernelFn {
    using T = decltype(t);
    return dispatch_dtype(from, [&](auto s) -> KernelFn {
      using S = decltype(s);
      return unary<S, std::complex<T>>(n, [](S x) { return std::complex<T>(T(Num<S>::ld(x)), T(0)); });
    });
  });
}

}  // namespace

void register_complex_kernels() {
  for (const char* op : {"identity", "negative", "addition", "subtraction", "select", "sum_to_like", "broadcast_like"})
    extend_by_parts(op);
  extend("cast", complex_cast);

  complex_binary("multiplication", [](auto t) { return [](auto a, auto b) { return a * b; }; });
  complex_binary("division", [](auto t) { return [](auto a, auto b) { return a / b; }; });
  complex_binary("equal", [](auto t) { return [](auto a, auto b) { return a == b; }; });
  complex_binary("not_equal", [](auto t) { return [](auto a, auto b) { return a != b; }; });
  extend("square", complex_unary([](auto t) { return [](auto z) { return z * z; }; }));
  extend("exponent", complex_unary([](auto t) { return [](auto z) { return std::exp(z); }; }));
  extend("reciprocal", complex_unary([](auto t) { return [](auto z) { return decltype(z)(1) / z; }; }));
  extend("absolute", complex_unary([](auto t) { return [](auto z) { return std::abs(z); }; }));

  register_kernel("real_part", complex_unary([](auto t) { return [](auto z) { return z.real(); }; }));
  register_kernel("imaginary_part", complex_unary([](auto t) { return [](auto z) { return z.imag(); }; }));
  register_kernel("angle", complex_unary([](auto t) { return [](auto z) { return std::arg(z); }; }));
  KernelFactory conj = complex_unary([](auto t) { return [](auto z) { return std::conj(z); }; });
  register_kernel("conjugate", [conj](const KernelCtx& c) -> KernelFn {
    if (any_complex(c)) return conj(c);
    size_t nbytes = size_t(num_elements(c.out[0].shape)) * dtype_size(c.out[0].dtype);  // real: a copy
    return [nbytes](const void* const* in, void* const* out) {
      if (nbytes) std::memcpy(out[0], in[0], nbytes);
    };
  });
  register_kernel("complex", [](const KernelCtx& c) -> KernelFn {
    return by_precision(c, c.in[0].dtype, [&](auto tag) -> KernelFn {
      using T = decltype(tag);
      return binary<T, T, std::complex<T>>(c, [](T re, T im) { return std::complex<T>(re, im); });
    });
  });
}

}  // namespace mg::cpu
