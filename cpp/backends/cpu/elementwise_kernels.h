// Loops and registration helpers shared by the CPU elementwise kernel files
// (kernels_elementwise*.cpp: the family is split so its heavy template instantiations
// compile in parallel). One functor per op; loops are instantiated only for the dtype
// classes the op accepts.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"

namespace mg::cpu {

// The parts of register_elementwise_kernels(), one per file.
void register_elementwise_unary_kernels();    // kernels_elementwise_unary.cpp
void register_elementwise_binary_kernels();   // kernels_elementwise_binary.cpp: arithmetic
void register_elementwise_compare_kernels();  // kernels_elementwise_compare.cpp: comparison, logical, bitwise
void register_elementwise_cast_kernels();     // kernels_elementwise_cast.cpp: cast

namespace elementwise {

// ---------- functors used by more than one file ----------
struct Negative {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(0) - uint64_t(x));
    else return -x;
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

}  // namespace elementwise
}  // namespace mg::cpu
