// CPU kernels for the autodiff helper ops.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/creation_attrs.h"

namespace mg::cpu {

namespace {

template <class S>
KernelFn sum_to_loop(const BroadcastPlan& plan, int64_t out_n) {
  using Acc = std::conditional_t<is_float_storage<S>, double, uint64_t>;  // ints wrap like addition
  auto acc = std::make_shared<std::vector<Acc>>(size_t(out_n));
  return [plan, out_n, acc](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* o = static_cast<S*>(out[0]);
    Acc* a = acc->data();
    std::fill(a, a + out_n, Acc(0));
    auto st = plan.inner_strides();
    // serial: different x rows may add into the same output element
    const int64_t inner = plan.inner();
    const int64_t rows = plan.total ? plan.total / inner : 0;
    const size_t outer = plan.shape.size() - 1;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off = 0, rem = r;
      for (size_t d = outer; d-- > 0;) {
        off += (rem % plan.shape[d]) * plan.strides[d][0];
        rem /= plan.shape[d];
      }
      const S* px = x + r * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if constexpr (is_float_storage<S>) a[off + i * st[0]] += double(Num<S>::ld(px[i]));
        else a[off + i * st[0]] += uint64_t(px[i]);
      }
    }
    for (int64_t i = 0; i < out_n; ++i) {
      if constexpr (is_float_storage<S>) o[i] = Num<S>::st(typename Num<S>::C(a[i]));
      else o[i] = S(a[i]);
    }
  };
}

template <class S>
KernelFn broadcast_loop(const BroadcastPlan& plan) {
  return [plan](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* o = static_cast<S*>(out[0]);
    auto st = plan.inner_strides();
    for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t oo, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[oo + i] = x[off[0] + i * st[0]];
    });
  };
}

}  // namespace

void register_autodiff_kernels() {
  register_kernel("sum_to_like", [](const KernelCtx& c) -> KernelFn {
    // iterate over x; the output is x's broadcast source, so its strides are 0 on summed dims
    auto plan = make_broadcast_plan(c.in[0].shape, {c.out[0].shape});
    int64_t out_n = num_elements(c.out[0].shape);
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) raise(ErrorKind::Type, "sum_to_like", c.node.name, "bool is not summable");
      else return sum_to_loop<S>(plan, out_n);
    });
  });
  register_kernel("broadcast_like", [](const KernelCtx& c) -> KernelFn {
    auto plan = make_broadcast_plan(c.out[0].shape, {c.in[0].shape});
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn { return broadcast_loop<decltype(tag)>(plan); });
  });
  register_kernel("full_like", [](const KernelCtx& c) -> KernelFn {
    int64_t n = num_elements(c.out[0].shape);
    DType d = c.out[0].dtype;
    auto one = Array::empty(d, {});
    store_from_double(one->data(), d, 0, typed_attrs<ops::FillAttrs>(c.node).value);
    size_t es = dtype_size(d);
    return [n, one, es](const void* const*, void* const* out) {
      char* o = static_cast<char*>(out[0]);
      for (int64_t i = 0; i < n; ++i) std::memcpy(o + i * int64_t(es), one->data(), es);
    };
  });
  register_kernel("stop_gradient", [](const KernelCtx& c) -> KernelFn {
    size_t nbytes = size_t(num_elements(c.out[0].shape)) * dtype_size(c.out[0].dtype);
    return [nbytes](const void* const* in, void* const* out) {
      if (nbytes) std::memcpy(out[0], in[0], nbytes);
    };
  });
}

}  // namespace mg::cpu
