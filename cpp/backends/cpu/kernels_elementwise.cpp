// CPU kernels for the elementwise family. One functor per op; loops are instantiated
// only for the dtype classes the op accepts.
#include <cmath>
#include <cstring>
#include <memory>

#include "backends/cpu/elementwise_util.h"

namespace mg::cpu {

namespace {

template <class T>
using U64 = uint64_t;

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
struct Negative {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(0) - uint64_t(x));
    else return -x;
  }
};
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

// ---------- binary functors ----------
struct Add {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(x) + uint64_t(y));
    else return x + y;
  }
};
struct Sub {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(x) - uint64_t(y));
    else return x - y;
  }
};
struct Mul {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(x) * uint64_t(y));
    else return x * y;
  }
};
struct Div {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<T>)
        if (y == T(-1)) return Negative()(x);  // min / -1 wraps instead of trapping
      return T(x / y);
    } else return x / y;
  }
};
struct FloorDiv {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (y == T(-1)) return Negative()(x);
        T q = T(x / y);
        if ((x % y != 0) && ((x < 0) != (y < 0))) q = T(q - 1);
        return q;
      } else return T(x / y);
    } else {
      // numpy's npy_divmod, so that x == floor_div * y + mod holds as in numpy
      if (y == 0) return x / y;
      T mod = std::fmod(x, y);
      T div = (x - mod) / y;
      if (mod != 0 && ((y < 0) != (mod < 0))) div -= T(1);
      if (div == 0) return std::copysign(T(0), x / y);
      T fl = std::floor(div);
      if (div - fl > T(0.5)) fl += T(1);
      return fl;
    }
  }
};
struct Mod {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (y == T(-1)) return 0;
        T r = T(x % y);
        if (r != 0 && ((r < 0) != (y < 0))) r = T(r + y);
        return r;
      } else return T(x % y);
    } else {
      T r = std::fmod(x, y);
      if (r != 0) {
        if ((y < 0) != (r < 0)) r += y;
      } else r = std::copysign(T(0), y);
      return r;
    }
  }
};
struct Pow {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (y < 0) return x == 1 ? T(1) : x == T(-1) ? ((y & 1) ? T(-1) : T(1)) : T(0);
      }
      uint64_t r = 1, b = uint64_t(x);
      uint64_t e = uint64_t(y);
      while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
      }
      return T(r);
    } else return std::pow(x, y);
  }
};
struct Max {
  template <class T> T operator()(T x, T y) const {
    if constexpr (!std::is_integral_v<T>)
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) ? x : y;
    return x > y ? x : y;
  }
};
struct Min {
  template <class T> T operator()(T x, T y) const {
    if constexpr (!std::is_integral_v<T>)
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) ? x : y;
    return x < y ? x : y;
  }
};
struct Atan2 { template <class T> T operator()(T x, T y) const { return std::atan2(x, y); } };
struct Eq { template <class T> bool operator()(T x, T y) const { return x == y; } };
struct Ne { template <class T> bool operator()(T x, T y) const { return x != y; } };
struct Lt { template <class T> bool operator()(T x, T y) const { return x < y; } };
struct Le { template <class T> bool operator()(T x, T y) const { return x <= y; } };
struct Gt { template <class T> bool operator()(T x, T y) const { return x > y; } };
struct Ge { template <class T> bool operator()(T x, T y) const { return x >= y; } };
struct LAnd { template <class T> T operator()(T x, T y) const { return x && y; } };
struct LOr { template <class T> T operator()(T x, T y) const { return x || y; } };
struct LXor { template <class T> T operator()(T x, T y) const { return x != y; } };
struct BAnd { template <class T> T operator()(T x, T y) const { return T(x & y); } };
struct BOr { template <class T> T operator()(T x, T y) const { return T(x | y); } };
struct BXor { template <class T> T operator()(T x, T y) const { return T(x ^ y); } };
struct Shl {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_signed_v<T>) if (y < 0) return 0;
    if (uint64_t(y) >= sizeof(T) * 8) return 0;
    return T(uint64_t(x) << uint64_t(y));
  }
};
struct Shr {
  template <class T> T operator()(T x, T y) const {
    if constexpr (std::is_signed_v<T>) {
      if (y < 0) return 0;
      if (uint64_t(y) >= sizeof(T) * 8) return x < 0 ? T(-1) : T(0);
    } else if (uint64_t(y) >= sizeof(T) * 8) return 0;
    return T(x >> y);
  }
};

// ---------- loops ----------

template <class S, class R, class F>
KernelFn unary_loop(int64_t n) {
  return [n](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    R* o = static_cast<R*>(out[0]);
    parallel_for(n, 32768, [&](int64_t b, int64_t e) {
      F f;
      for (int64_t i = b; i < e; ++i) o[i] = Num<R>::st(f(Num<S>::ld(x[i])));
    });
  };
}

template <class S, class R, class F>
KernelFn binary_loop(const BroadcastPlan& plan) {
  return [plan](const void* const* in, void* const* out) {
    const S* a = static_cast<const S*>(in[0]);
    const S* b = static_cast<const S*>(in[1]);
    R* o = static_cast<R*>(out[0]);
    auto st = plan.inner_strides();
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      F f;
      const S* pa = a + off[0];
      const S* pb = b + off[1];
      R* po = o + oo;
      if (st[0] == 1 && st[1] == 1)
        for (int64_t i = 0; i < n; ++i) po[i] = Num<R>::st(f(Num<S>::ld(pa[i]), Num<S>::ld(pb[i])));
      else if (st[0] == 0 && st[1] == 1) {
        auto va = Num<S>::ld(pa[0]);
        for (int64_t i = 0; i < n; ++i) po[i] = Num<R>::st(f(va, Num<S>::ld(pb[i])));
      } else if (st[0] == 1 && st[1] == 0) {
        auto vb = Num<S>::ld(pb[0]);
        for (int64_t i = 0; i < n; ++i) po[i] = Num<R>::st(f(Num<S>::ld(pa[i]), vb));
      } else
        for (int64_t i = 0; i < n; ++i) po[i] = Num<R>::st(f(Num<S>::ld(pa[i * st[0]]), Num<S>::ld(pb[i * st[1]])));
    });
  };
}

// Storage type of the result: bool for predicates, else the input's storage type.
template <class S, class F>
using result_storage = std::conditional_t<std::is_same_v<decltype(F()(typename Num<S>::C{})), bool>, bool, S>;
template <class S, class F>
using result_storage2 =
    std::conditional_t<std::is_same_v<decltype(F()(typename Num<S>::C{}, typename Num<S>::C{})), bool>, bool, S>;

template <class F, unsigned CLS>
void reg_unary(const char* name) {
  register_kernel(name, [name](const KernelCtx& c) -> KernelFn {
    int64_t n = num_elements(c.out[0].shape);
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr ((class_of<S>() & CLS) != 0) return unary_loop<S, result_storage<S, F>, F>(n);
      else raise(ErrorKind::Type, name, c.node.name, std::string("no cpu kernel for ") + dtype_name(c.in[0].dtype));
    });
  });
}

template <class F, unsigned CLS>
void reg_binary(const char* name) {
  register_kernel(name, [name](const KernelCtx& c) -> KernelFn {
    auto plan = make_broadcast_plan(c.out[0].shape, {c.in[0].shape, c.in[1].shape});
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr ((class_of<S>() & CLS) != 0) return binary_loop<S, result_storage2<S, F>, F>(plan);
      else raise(ErrorKind::Type, name, c.node.name, std::string("no cpu kernel for ") + dtype_name(c.in[0].dtype));
    });
  });
}

template <class S>
KernelFn select_loop(const BroadcastPlan& plan, DType pred_dtype, int64_t pred_n) {
  // predicate converted to bool first, so one loop serves every predicate dtype
  auto scratch = std::make_shared<std::vector<uint8_t>>(size_t(pred_n));
  return [plan, pred_dtype, pred_n, scratch](const void* const* in, void* const* out) {
    uint8_t* pb = scratch->data();
    dispatch_dtype(pred_dtype, [&](auto tag) {
      using P = decltype(tag);
      const P* p = static_cast<const P*>(in[0]);
      for (int64_t i = 0; i < pred_n; ++i) pb[i] = Num<P>::ld(p[i]) != typename Num<P>::C(0);
    });
    const S* a = static_cast<const S*>(in[1]);
    const S* b = static_cast<const S*>(in[2]);
    S* o = static_cast<S*>(out[0]);
    auto st = plan.inner_strides();
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        o[oo + i] = pb[off[0] + i * st[0]] ? a[off[1] + i * st[1]] : b[off[2] + i * st[2]];
    });
  };
}

template <class S>
KernelFn clamp_loop(const BroadcastPlan& plan) {
  return [plan](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    const S* lo = static_cast<const S*>(in[1]);
    const S* hi = static_cast<const S*>(in[2]);
    S* o = static_cast<S*>(out[0]);
    auto st = plan.inner_strides();
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        auto v = Max()(Num<S>::ld(x[off[0] + i * st[0]]), Num<S>::ld(lo[off[1] + i * st[1]]));
        o[oo + i] = Num<S>::st(Min()(v, Num<S>::ld(hi[off[2] + i * st[2]])));
      }
    });
  };
}

// double -> float rounded to odd: a later float -> half/bfloat16 rounding is then the
// correctly rounded double -> half/bfloat16 (float keeps more than 2 extra bits).
inline float to_float_round_odd(double d) {
  float f = float(d);
  if (std::isnan(d) || std::isinf(f) || double(f) == d) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate toward zero
  uint32_t u = float_to_bits(f) | 1u;
  return bits_to_float(u);
}

template <class S, class R>
KernelFn cast_loop(int64_t n) {
  return [n](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    R* o = static_cast<R*>(out[0]);
    parallel_for(n, 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        auto v = Num<S>::ld(x[i]);
        // half/bfloat16 go through float; bool and integers convert directly
        if constexpr (std::is_same_v<S, double> && (std::is_same_v<R, half_t> || std::is_same_v<R, bfloat16_t>))
          o[i] = Num<R>::st(to_float_round_odd(v));
        else
          o[i] = Num<R>::st(convert<typename Num<R>::C>(v));
      }
    });
  };
}

}  // namespace

void register_elementwise_kernels() {
  using namespace ops;
  constexpr unsigned F = kFloat, N = kNumeric, A = kAny, I = kInt, IB = kInt | kBool, B = kBool;
  reg_unary<Identity, A>("identity");
  reg_unary<Negative, N>("negative");
  reg_unary<Absolute, N>("absolute");
  reg_unary<Sign, N>("sign");
  reg_unary<Floor, N>("floor");
  reg_unary<Ceil, N>("ceil");
  reg_unary<Round, N>("round");
  reg_unary<Trunc, N>("truncate");
  reg_unary<Exp, F>("exponent");
  reg_unary<Exp2, F>("exponent_base2");
  reg_unary<Exp10, F>("exponent_base10");
  reg_unary<Log, F>("logarithm");
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
  reg_unary<Tanh, F>("tanh");
  reg_unary<Asin, F>("asin");
  reg_unary<Acos, F>("acos");
  reg_unary<Atan, F>("atan");
  reg_unary<Asinh, F>("asinh");
  reg_unary<Acosh, F>("acosh");
  reg_unary<Atanh, F>("atanh");
  reg_unary<Erf, F>("erf");
  reg_unary<Sigmoid, F>("sigmoid");
  reg_unary<Relu, N>("relu");
  reg_unary<LogicalNot, B>("logical_not");
  reg_unary<IsNan, N>("isnan");
  reg_unary<IsInf, N>("isinf");
  reg_unary<IsFinite, N>("isfinite");
  reg_unary<BitwiseNot, IB>("bitwise_not");

  reg_binary<Add, N>("addition");
  reg_binary<Sub, N>("subtraction");
  reg_binary<Mul, N>("multiplication");
  reg_binary<Div, N>("division");
  reg_binary<FloorDiv, N>("floor_division");
  reg_binary<Mod, N>("modulo");
  reg_binary<Pow, N>("power");
  reg_binary<Max, N>("maximum");
  reg_binary<Min, N>("minimum");
  reg_binary<Atan2, F>("atan2");
  reg_binary<Eq, A>("equal");
  reg_binary<Ne, A>("not_equal");
  reg_binary<Lt, A>("less_than");
  reg_binary<Le, A>("less_than_or_equal_to");
  reg_binary<Gt, A>("greater_than");
  reg_binary<Ge, A>("greater_than_or_equal_to");
  reg_binary<LAnd, B>("logical_and");
  reg_binary<LOr, B>("logical_or");
  reg_binary<LXor, B>("logical_xor");
  reg_binary<BAnd, IB>("bitwise_and");
  reg_binary<BOr, IB>("bitwise_or");
  reg_binary<BXor, IB>("bitwise_xor");
  reg_binary<Shl, I>("bitwise_left_shift");
  reg_binary<Shr, I>("bitwise_right_shift");

  register_kernel("select", [](const KernelCtx& c) -> KernelFn {
    auto plan = make_broadcast_plan(c.out[0].shape, {c.in[0].shape, c.in[1].shape, c.in[2].shape});
    int64_t pn = num_elements(c.in[0].shape);
    return dispatch_dtype(c.out[0].dtype, [&](auto tag) -> KernelFn {
      return select_loop<decltype(tag)>(plan, c.in[0].dtype, pn);
    });
  });
  register_kernel("clamp", [](const KernelCtx& c) -> KernelFn {
    auto plan = make_broadcast_plan(c.out[0].shape, {c.in[0].shape, c.in[1].shape, c.in[2].shape});
    return dispatch_dtype(c.out[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (!std::is_same_v<S, bool>) return clamp_loop<S>(plan);
      else raise(ErrorKind::Type, "clamp", c.node.name, "no cpu kernel for bool");
    });
  });
  register_kernel("cast", [](const KernelCtx& c) -> KernelFn {
    int64_t n = num_elements(c.out[0].shape);
    return dispatch_dtype(c.in[0].dtype, [&](auto s) -> KernelFn {
      return dispatch_dtype(c.out[0].dtype, [&](auto r) -> KernelFn {
        return cast_loop<decltype(s), decltype(r)>(n);
      });
    });
  });
}

}  // namespace mg::cpu
