// CPU kernels for the elementwise family: the family's registration, and select and clamp.
// The unary, binary, comparison and cast kernels live in kernels_elementwise_*.cpp (see
// elementwise_kernels.h), so their template instantiations compile in parallel.
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/elementwise_kernels.h"

namespace mg::cpu {

namespace {

using namespace elementwise;

// The predicate as bytes 0/1: a bool predicate is read in place, others are converted once.
inline const uint8_t* predicate_bytes(DType pred_dtype, const void* p, uint8_t* scratch, int64_t n) {
  if (pred_dtype == DType::Bool) return static_cast<const uint8_t*>(p);
  dispatch_dtype(pred_dtype, [&](auto tag) {
    using P = decltype(tag);
    const P* pp = static_cast<const P*>(p);
    parallel_for(n, 65536, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) scratch[i] = Num<P>::ld(pp[i]) != typename Num<P>::C(0);
    });
  });
  return scratch;
}

// One contiguous run with a full predicate; SA / SB: 1 for a full branch, 0 for a scalar.
// Both values are loaded before the choice, so the loop vectorises (a blend).
template <class S, int SA, int SB>
void select_run(const uint8_t* pb, const S* a, const S* b, S* o, int64_t n) {
  parallel_for(n, 32768, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const S va = a[i * SA], vb = b[i * SB];
      o[i] = pb[i] ? va : vb;
    }
  });
}

template <class S>
KernelFn select_loop(const BroadcastPlan& plan, DType pred_dtype, size_t scratch, int64_t pred_n) {
  const auto st = plan.inner_strides();
  // the ReLU gradient (select(x > 0, dy, 0)) and its kin: one run, no broadcast walk
  const bool one_run = plan.shape.size() == 1 && st[0] == 1;
  return [plan, pred_dtype, scratch, pred_n, st, one_run](const void* const* in, void* const* out) {
    const uint8_t* pb = predicate_bytes(pred_dtype, in[0], static_cast<uint8_t*>(out[scratch]), pred_n);
    const S* a = static_cast<const S*>(in[1]);
    const S* b = static_cast<const S*>(in[2]);
    S* o = static_cast<S*>(out[0]);
    if (one_run && st[1] == 1 && st[2] == 1) return select_run<S, 1, 1>(pb, a, b, o, plan.total);
    if (one_run && st[1] == 1 && st[2] == 0) return select_run<S, 1, 0>(pb, a, b, o, plan.total);
    if (one_run && st[1] == 0 && st[2] == 1) return select_run<S, 0, 1>(pb, a, b, o, plan.total);
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        o[oo + i] = pb[off[0] + i * st[0]] ? a[off[1] + i * st[1]] : b[off[2] + i * st[2]];
    });
  };
}

template <class S>
KernelFn clamp_loop(const BroadcastPlan& plan) {
  const auto st = plan.inner_strides();
  // ReLU6 and hard sigmoid: x in one run, scalar bounds
  const bool scalar_bounds = plan.shape.size() == 1 && st[0] == 1 && st[1] == 0 && st[2] == 0;
  return [plan, st, scalar_bounds](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    const S* lo = static_cast<const S*>(in[1]);
    const S* hi = static_cast<const S*>(in[2]);
    S* o = static_cast<S*>(out[0]);
    using C = typename Num<S>::C;
    bool fast = scalar_bounds;
    if constexpr (!std::is_integral_v<C>) fast = fast && !std::isnan(Num<S>::ld(lo[0])) && !std::isnan(Num<S>::ld(hi[0]));
    if (fast) {
      const C l = Num<S>::ld(lo[0]), h = Num<S>::ld(hi[0]);
      parallel_for(plan.total, 32768, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          C v = Num<S>::ld(x[i]);
          v = v <= l ? l : v;  // as Max then Min: a NaN x compares false and stays NaN
          o[i] = Num<S>::st(v >= h ? h : v);
        }
      });
      return;
    }
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        auto v = Max()(Num<S>::ld(x[off[0] + i * st[0]]), Num<S>::ld(lo[off[1] + i * st[1]]));
        o[oo + i] = Num<S>::st(Min()(v, Num<S>::ld(hi[off[2] + i * st[2]])));
      }
    });
  };
}

}  // namespace

void register_elementwise_kernels() {
  register_elementwise_unary_kernels();
  register_elementwise_binary_kernels();
  register_elementwise_compare_kernels();
  register_elementwise_cast_kernels();

  register_kernel("select", [](const KernelCtx& c) -> KernelFn {
    auto plan = make_broadcast_plan(c.out[0].shape, {c.in[0].shape, c.in[1].shape, c.in[2].shape});
    const int64_t pn = num_elements(c.in[0].shape);
    const size_t scratch = c.scratch(c.in[0].dtype == DType::Bool ? 0 : size_t(pn));
    return dispatch_dtype(c.out[0].dtype, [&](auto tag) -> KernelFn {
      return select_loop<decltype(tag)>(plan, c.in[0].dtype, scratch, pn);
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
}

}  // namespace mg::cpu
