// CPU kernels for the elementwise family: the family's registration, and select and clamp.
// The unary, binary, comparison and cast kernels live in kernels_elementwise_*.cpp (see
// elementwise_kernels.h), so their template instantiations compile in parallel.
#include <array>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "backends/cpu/elementwise_kernels.h"

namespace mg::cpu {

namespace {

using namespace elementwise;

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

}  // namespace

void register_elementwise_kernels() {
  register_elementwise_unary_kernels();
  register_elementwise_binary_kernels();
  register_elementwise_compare_kernels();
  register_elementwise_cast_kernels();

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
}

}  // namespace mg::cpu
