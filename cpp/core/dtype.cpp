#include "core/dtype.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace mg {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: case DType::Int8: case DType::UInt8: return 1;
    case DType::Int16: case DType::UInt16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::UInt32: case DType::Float32: return 4;
    case DType::Complex128: return 16;
    default: return 8;
  }
}

static const char* kNames[kNumDTypes] = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                         "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
                                         "complex64", "complex128"};

const char* dtype_name(DType t) { return kNames[int(t)]; }

std::optional<DType> dtype_from_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kNames[i]) return DType(i);
  if (name == "half") return DType::Float16;
  if (name == "float") return DType::Float32;
  if (name == "double") return DType::Float64;
  return std::nullopt;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {
    float f = std::ldexp(float(man), -24);
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t float_to_half(float f) {
  uint32_t u = float_to_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00);            // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);           // overflow (>= 65520) -> inf
  if (a < 0x38800000u) {                                          // subnormal or zero
    float af = bits_to_float(a);
    // scale into the subnormal grid; nearbyint rounds half to even
    return uint16_t(sign | uint16_t(std::nearbyint(af * 16777216.0f)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round to nearest even at bit 13
  return uint16_t(sign | uint16_t((r - 0x38000000u) >> 13));
}

double load_as_double(const void* p, DType t, int64_t i) {
  if (t == DType::Complex64) return static_cast<const float*>(p)[2 * i];
  if (t == DType::Complex128) return static_cast<const double*>(p)[2 * i];
  return dispatch_dtype(t, [&](auto tag) -> double {
    using T = decltype(tag);
    const T* q = static_cast<const T*>(p);
    if constexpr (std::is_same_v<T, half_t>) return half_to_float(q[i].bits);
    else if constexpr (std::is_same_v<T, bfloat16_t>) return bf16_to_float(q[i].bits);
    else return double(q[i]);
  });
}

void store_from_double(void* p, DType t, int64_t i, double v) {
  if (t == DType::Complex64) {
    float* q = static_cast<float*>(p) + 2 * i;
    q[0] = float(v), q[1] = 0;
    return;
  }
  if (t == DType::Complex128) {
    double* q = static_cast<double*>(p) + 2 * i;
    q[0] = v, q[1] = 0;
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    T* q = static_cast<T*>(p);
    if constexpr (std::is_same_v<T, half_t>) q[i].bits = float_to_half(float(v));
    else if constexpr (std::is_same_v<T, bfloat16_t>) q[i].bits = float_to_bf16(float(v));
    else if constexpr (std::is_same_v<T, bool>) q[i] = v != 0;
    else if constexpr (std::is_floating_point_v<T>) q[i] = T(v);
    else {
      // saturating conversion, NaN -> 0: never undefined behaviour
      if (std::isnan(v)) q[i] = 0;
      else if (v <= double(std::numeric_limits<T>::min())) q[i] = std::numeric_limits<T>::min();
      else if (v >= double(std::numeric_limits<T>::max())) q[i] = std::numeric_limits<T>::max();
      else q[i] = T(v);
    }
  });
}

}  // namespace mg
