// CPU kernels for the elementwise family: comparison, logical and bitwise binary ops.
#include <cstdint>
#include <type_traits>

#include "backends/cpu/elementwise_kernels.h"

namespace mg::cpu {

namespace {

using namespace elementwise;

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
      // a negative amount counts as a huge one, as numpy: the sign fills the result
      if (y < 0 || uint64_t(y) >= sizeof(T) * 8) return x < 0 ? T(-1) : T(0);
    } else if (uint64_t(y) >= sizeof(T) * 8) return 0;
    return T(x >> y);
  }
};

}  // namespace

void register_elementwise_compare_kernels() {
  using namespace ops;
  constexpr unsigned A = kAny, I = kInt, IB = kInt | kBool, B = kBool;
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
}

}  // namespace mg::cpu
