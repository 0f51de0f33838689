// Broadcast loops and numeric helpers for CPU kernels.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/ops/common.h"

namespace mg::cpu {

// Storage type S computes as Num<S>::C (half and bfloat16 compute in float).
template <class S>
struct Num {
  using C = S;
  static C ld(S v) { return v; }
  static S st(C v) { return v; }
};
template <>
struct Num<half_t> {
  using C = float;
  static float ld(half_t v) { return half_to_float(v.bits); }
  static half_t st(float v) { return {float_to_half(v)}; }
};
template <>
struct Num<bfloat16_t> {
  using C = float;
  static float ld(bfloat16_t v) { return bf16_to_float(v.bits); }
  static bfloat16_t st(float v) { return {float_to_bf16(v)}; }
};

template <class S>
constexpr bool is_float_storage = std::is_floating_point_v<S> || std::is_same_v<S, half_t> || std::is_same_v<S, bfloat16_t>;

template <class S>
constexpr unsigned class_of() {
  if constexpr (std::is_same_v<S, bool>) return ops::kBool;
  else if constexpr (is_float_storage<S>) return ops::kFloat;
  else if constexpr (std::is_signed_v<S>) return ops::kSigned;
  else return ops::kUnsigned;
}

// Saturating, NaN-safe conversion between compute types (never undefined behaviour).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else if constexpr (std::is_floating_point_v<To>) return To(v);
  else if constexpr (std::is_floating_point_v<From>) {
    if (std::isnan(v)) return To(0);
    if (v <= From(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= From(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return To(v);
  } else return To(v);  // integer to integer wraps (two's complement), as numpy
}

// Calls f(S{}) for a floating storage type S; other dtypes are a clear error naming op.
template <class F>
KernelFn dispatch_float(const KernelCtx& c, const char* op, DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(half_t{});
    case DType::BFloat16: return f(bfloat16_t{});
    default: raise(ErrorKind::Type, op, c.node.name, std::string("no CPU kernel for dtype ") + dtype_name(t));
  }
}

// A broadcast iteration space over up to 3 inputs, collapsed to as few dims as possible.
struct BroadcastPlan {
  int nin = 0;
  std::vector<int64_t> shape;                    // collapsed output shape (rank >= 1)
  std::vector<std::array<int64_t, 3>> strides;   // per dim, per input, in elements
  int64_t total = 0;
  int64_t inner() const { return shape.back(); }
  std::array<int64_t, 3> inner_strides() const { return strides.back(); }
};
BroadcastPlan make_broadcast_plan(const Shape& out, const std::vector<Shape>& in);

// Calls row(off_in[3], off_out, n) for each innermost run, split over threads.
template <class Row>
void for_each_run(const BroadcastPlan& p, Row&& row) {
  const int64_t inner = p.inner();
  if (p.total == 0) return;
  if (p.shape.size() == 1) {  // one contiguous (or scalar-broadcast) run: split it
    auto st = p.inner_strides();
    parallel_for(inner, 32768, [&](int64_t b, int64_t e) {
      std::array<int64_t, 3> off{b * st[0], b * st[1], b * st[2]};
      row(off, b, e - b);
    });
    return;
  }
  const int64_t rows = p.total / inner;
  const size_t outer = p.shape.size() - 1;
  parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      std::array<int64_t, 3> off{0, 0, 0};
      int64_t rem = r;
      for (size_t d = outer; d-- > 0;) {
        int64_t idx = rem % p.shape[d];
        rem /= p.shape[d];
        for (int k = 0; k < p.nin; ++k) off[size_t(k)] += idx * p.strides[d][size_t(k)];
      }
      row(off, r * inner, inner);
    }
  });
}

}  // namespace mg::cpu
