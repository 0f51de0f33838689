// CPU kernels for the elementwise family: binary arithmetic (integer division, modulo and
// power that never trap; NaN-propagating maximum and minimum).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/elementwise_kernels.h"

namespace mg::cpu {

namespace {

using namespace elementwise;

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
struct Atan2 { template <class T> T operator()(T x, T y) const { return std::atan2(x, y); } };

}  // namespace

void register_elementwise_binary_kernels() {
  using namespace ops;
  constexpr unsigned F = kFloat, N = kNumeric;
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
}

}  // namespace mg::cpu
