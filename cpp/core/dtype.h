// Element types of the IR and their host representations.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

namespace mg {

enum class DType : uint8_t {
  Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64,
  Float16, BFloat16, Float32, Float64,
  Complex64, Complex128,  // (real, imaginary) pairs of float32 / float64, as numpy and std::complex
};
constexpr int kNumDTypes = 15;

size_t dtype_size(DType t);
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(const std::string& name);
inline bool is_floating(DType t) { return t >= DType::Float16 && t <= DType::Float64; }  // real floats
inline bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }
inline bool is_inexact(DType t) { return is_floating(t) || is_complex(t); }  // what gradients flow through
// float32 for complex64, float64 for complex128; other dtypes unchanged.
inline DType complex_part_dtype(DType t) {
  return t == DType::Complex64 ? DType::Float32 : t == DType::Complex128 ? DType::Float64 : t;
}
inline bool is_integer(DType t) { return t >= DType::Int8 && t <= DType::UInt64; }
inline bool is_signed_integer(DType t) { return t >= DType::Int8 && t <= DType::Int64; }
inline bool is_unsigned_integer(DType t) { return t >= DType::UInt8 && t <= DType::UInt64; }
inline bool is_bool(DType t) { return t == DType::Bool; }

// IEEE half and bfloat16 are stored as raw bits; arithmetic goes through float.
struct half_t { uint16_t bits; };
struct bfloat16_t { uint16_t bits; };

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even, overflow to inf, NaN kept
inline float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}

// Calls f(T{}) with the host type for t; f16/bf16 map to half_t/bfloat16_t. Complex dtypes
// are not dispatched here (ops refuse them unless OpDef::complex says otherwise, and those
// ops' kernels handle them first).
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Complex64: case DType::Complex128:
      throw std::logic_error(std::string("internal error: no kernel for ") + dtype_name(t));
    case DType::Bool: return f(bool{});
    case DType::Int8: return f(int8_t{});
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::UInt8: return f(uint8_t{});
    case DType::UInt16: return f(uint16_t{});
    case DType::UInt32: return f(uint32_t{});
    case DType::UInt64: return f(uint64_t{});
    case DType::Float16: return f(half_t{});
    case DType::BFloat16: return f(bfloat16_t{});
    case DType::Float32: return f(float{});
    case DType::Float64: default: return f(double{});
  }
}

// Reads element i of a buffer of dtype t as double / writes a double into it (complex: the
// real part; the imaginary part is written as 0).
double load_as_double(const void* p, DType t, int64_t i);
void store_from_double(void* p, DType t, int64_t i, double v);

}  // namespace mg
