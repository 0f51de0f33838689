// CPU kernels for the elementwise family: cast between every pair of dtypes.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/elementwise_kernels.h"

namespace mg::cpu {

namespace {

using namespace elementwise;

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

void register_elementwise_cast_kernels() {
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
