// CPU kernels for the elementwise family: unary math and numeric unary ops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/elementwise_kernels.h"
#include "backends/cpu/vec_math.h"

namespace mg::cpu {

namespace {

using namespace elementwise;

// ---------- unary functors: operator()(C x) on the compute type ----------
#define FLOAT_UNARY(NAME, EXPR) \
  struct NAME {                 \
    template <class T>          \
    T operator()(T x) const {   \
      return EXPR;              \
    }                           \
  };
FLOAT_UNARY(Exp, std::exp(x))
FLOAT_UNARY(Exp2, std::exp2(x))
FLOAT_UNARY(Exp10, std::pow(T(10), x))
FLOAT_UNARY(Log, std::log(x))
FLOAT_UNARY(Log2, std::log2(x))
FLOAT_UNARY(Log1p, std::log1p(x))
FLOAT_UNARY(Expm1, std::expm1(x))
FLOAT_UNARY(Log10, std::log10(x))
FLOAT_UNARY(Sqrt, std::sqrt(x))
FLOAT_UNARY(Rsqrt, T(1) / std::sqrt(x))
FLOAT_UNARY(Reciprocal, T(1) / x)
FLOAT_UNARY(Sin, std::sin(x))
FLOAT_UNARY(Cos, std::cos(x))
FLOAT_UNARY(Tan, std::tan(x))
FLOAT_UNARY(Sinh, std::sinh(x))
FLOAT_UNARY(Cosh, std::cosh(x))
FLOAT_UNARY(Tanh, std::tanh(x))
FLOAT_UNARY(Asin, std::asin(x))
FLOAT_UNARY(Acos, std::acos(x))
FLOAT_UNARY(Atan, std::atan(x))
FLOAT_UNARY(Asinh, std::asinh(x))
FLOAT_UNARY(Acosh, std::acosh(x))
FLOAT_UNARY(Atanh, std::atanh(x))
FLOAT_UNARY(Erf, std::erf(x))
FLOAT_UNARY(Sigmoid, x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)))
#undef FLOAT_UNARY

struct Identity { template <class T> T operator()(T x) const { return x; } };
struct Absolute {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else if constexpr (std::is_integral_v<T>) return x < 0 ? Negative()(x) : x;
    else return std::fabs(x);
  }
};
struct Sign {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > 0 ? T(1) : T(0);
    else return x > 0 ? T(1) : x < 0 ? T(-1) : x;  // keeps +-0 and NaN
  }
};
struct Floor { template <class T> T operator()(T x) const { if constexpr (std::is_integral_v<T>) return x; else return std::floor(x); } };
struct Ceil { template <class T> T operator()(T x) const { if constexpr (std::is_integral_v<T>) return x; else return std::ceil(x); } };
struct Round { template <class T> T operator()(T x) const { if constexpr (std::is_integral_v<T>) return x; else return std::nearbyint(x); } };
struct Trunc { template <class T> T operator()(T x) const { if constexpr (std::is_integral_v<T>) return x; else return std::trunc(x); } };
struct Square {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(x) * uint64_t(x));
    else return x * x;
  }
};
struct Relu {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x > 0 ? x : T(0);
    else return x > 0 ? x : (std::isnan(x) ? x : T(0));
  }
};
struct LogicalNot { template <class T> T operator()(T x) const { return !x; } };
struct BitwiseNot {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return T(~x);
  }
};
struct IsNan { template <class T> bool operator()(T x) const { if constexpr (std::is_integral_v<T>) return false; else return std::isnan(x); } };
struct IsInf { template <class T> bool operator()(T x) const { if constexpr (std::is_integral_v<T>) return false; else return std::isinf(x); } };
struct IsFinite { template <class T> bool operator()(T x) const { if constexpr (std::is_integral_v<T>) return true; else return std::isfinite(x); } };

// float32 through the vectorised array function; float16/bfloat16 through it in float32
// tiles; float64 by the scalar libm functor F.
template <class S>
KernelFn vec_unary_loop(int64_t n, vmath::ArrayFn fn) {
  return [n, fn](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* o = static_cast<S*>(out[0]);
    parallel_for(n, 16384, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<S, float>) {
        fn(x + b, o + b, e - b);
      } else {
        constexpr int64_t kTile = 1024;
        float xf[kTile], yf[kTile];
        for (int64_t t = b; t < e; t += kTile) {
          const int64_t m = std::min(kTile, e - t);
          for (int64_t i = 0; i < m; ++i) xf[i] = Num<S>::ld(x[t + i]);
          fn(xf, yf, m);
          for (int64_t i = 0; i < m; ++i) o[t + i] = Num<S>::st(yf[i]);
        }
      }
    });
  };
}

template <class F>
void reg_vec_unary(const char* name, vmath::Fn fn) {
  register_kernel(name, [name, fn](const KernelCtx& c) -> KernelFn {
    const int64_t n = num_elements(c.out[0].shape);
    return dispatch_float(c, name, c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, double>) return unary_loop<S, S, F>(n);
      else return vec_unary_loop<S>(n, vmath::array_fn(fn));
    });
  });
}

}  // namespace

void register_elementwise_unary_kernels() {
  using namespace ops;
  constexpr unsigned F = kFloat, N = kNumeric, A = kAny, IB = kInt | kBool, B = kBool;
  reg_unary<Identity, A>("identity");
  reg_unary<Negative, N>("negative");
  reg_unary<Absolute, N>("absolute");
  reg_unary<Sign, N>("sign");
  reg_unary<Floor, N>("floor");
  reg_unary<Ceil, N>("ceil");
  reg_unary<Round, N>("round");
  reg_unary<Trunc, N>("truncate");
  reg_vec_unary<Exp>("exponent", vmath::Fn::Exp);
  reg_unary<Exp2, F>("exponent_base2");
  reg_unary<Exp10, F>("exponent_base10");
  reg_vec_unary<Log>("logarithm", vmath::Fn::Log);
  reg_unary<Log2, F>("logarithm_base2");
  reg_unary<Log1p, F>("log1p");
  reg_unary<Expm1, F>("expm1");
  reg_unary<Log10, F>("logarithm_base10");
  reg_unary<Square, N>("square");
  reg_unary<Sqrt, F>("square_root");
  reg_unary<Rsqrt, F>("reverse_square_root");
  reg_unary<Reciprocal, F>("reciprocal");
  reg_unary<Sin, F>("sin");
  reg_unary<Cos, F>("cos");
  reg_unary<Tan, F>("tan");
  reg_unary<Sinh, F>("sinh");
  reg_unary<Cosh, F>("cosh");
  reg_vec_unary<Tanh>("tanh", vmath::Fn::Tanh);
  reg_unary<Asin, F>("asin");
  reg_unary<Acos, F>("acos");
  reg_unary<Atan, F>("atan");
  reg_unary<Asinh, F>("asinh");
  reg_unary<Acosh, F>("acosh");
  reg_unary<Atanh, F>("atanh");
  reg_vec_unary<Erf>("erf", vmath::Fn::Erf);
  reg_vec_unary<Sigmoid>("sigmoid", vmath::Fn::Sigmoid);
  reg_unary<Relu, N>("relu");
  reg_unary<LogicalNot, B>("logical_not");
  reg_unary<IsNan, N>("isnan");
  reg_unary<IsInf, N>("isinf");
  reg_unary<IsFinite, N>("isfinite");
  reg_unary<BitwiseNot, IB>("bitwise_not");
}

}  // namespace mg::cpu
