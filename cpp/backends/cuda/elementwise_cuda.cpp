// CUDA elementwise kernels: one generated kernel per (op, dtypes, broadcast layout), compiled by
// NVRTC. The expressions follow the CPU kernels' semantics (integer division and shifts never
// trap, NaN-propagating maximum/minimum, saturating float-to-integer casts).
#include <cstdint>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/registry.h"

namespace mg::cuda {

const std::string& prelude() {
  static const std::string p = R"(
typedef signed char i8; typedef short i16; typedef int i32; typedef long long i64;
typedef unsigned char u8; typedef unsigned short u16; typedef unsigned int u32; typedef unsigned long long u64;
__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float bf2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f2bf(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}
__device__ __forceinline__ bool mg_isnan(float x) { return x != x; }
__device__ __forceinline__ float mg_maxf(float x, float y) { return (x != x || y != y) ? (x != x ? x : y) : (x > y ? x : y); }
__device__ __forceinline__ float mg_minf(float x, float y) { return (x != x || y != y) ? (x != x ? x : y) : (x < y ? x : y); }
__device__ __forceinline__ float mg_floordivf(float x, float y) {
  if (y == 0.f) return x / y;
  float mod = fmodf(x, y);
  float div = (x - mod) / y;
  if (mod != 0.f && ((y < 0.f) != (mod < 0.f))) div -= 1.f;
  if (div == 0.f) return copysignf(0.f, x / y);
  float fl = floorf(div);
  if (div - fl > 0.5f) fl += 1.f;
  return fl;
}
__device__ __forceinline__ float mg_modf(float x, float y) {
  float r = fmodf(x, y);
  if (r != 0.f) { if ((y < 0.f) != (r < 0.f)) r += y; } else r = copysignf(0.f, y);
  return r;
}
template <class T> __device__ __forceinline__ T mg_floordiv_s(T x, T y) {
  if (y == 0) return 0;
  if (y == T(-1)) return T(0ull - (u64)x);
  T q = T(x / y);
  if ((x % y != 0) && ((x < 0) != (y < 0))) q = T(q - 1);
  return q;
}
template <class T> __device__ __forceinline__ T mg_mod_s(T x, T y) {
  if (y == 0 || y == T(-1)) return 0;
  T r = T(x % y);
  if (r != 0 && ((r < 0) != (y < 0))) r = T(r + y);
  return r;
}
template <class T> __device__ __forceinline__ T mg_pow_i(T x, T y, bool is_signed) {
  if (is_signed && y < T(0)) return x == T(1) ? T(1) : x == T(-1) ? ((y & 1) ? T(-1) : T(1)) : T(0);
  u64 r = 1, b = (u64)x, e = (u64)y;
  while (e) { if (e & 1) r *= b; b *= b; e >>= 1; }
  return T(r);
}
struct Space { i64 n; int rank; i64 shape[8]; i64 stride[4][8]; };
)";
  return p;
}

std::string storage_type(DType t) {
  switch (t) {
    case DType::Bool: case DType::UInt8: return "u8";
    case DType::Int8: return "i8";
    case DType::Int16: return "i16";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::UInt16: case DType::Float16: case DType::BFloat16: return "u16";
    case DType::UInt32: return "u32";
    case DType::UInt64: return "u64";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
  }
  return "?";
}

std::string compute_type(DType t) {
  if (t == DType::Bool) return "bool";
  if (t == DType::Float16 || t == DType::BFloat16) return "float";
  return storage_type(t);
}

std::string load_expr(DType t, const std::string& e) {
  if (t == DType::Bool) return "(" + e + " != 0)";
  if (t == DType::Float16) return "h2f(" + e + ")";
  if (t == DType::BFloat16) return "bf2f(" + e + ")";
  return e;
}

std::string store_expr(DType t, const std::string& v) {
  if (t == DType::Bool) return "(u8)((" + v + ") ? 1 : 0)";
  if (t == DType::Float16) return "f2h(" + v + ")";
  if (t == DType::BFloat16) return "f2bf(" + v + ")";
  return "(" + storage_type(t) + ")(" + v + ")";
}

IndexSpace broadcast_space(const Shape& out, const std::vector<Shape>& ins) {
  IndexSpace s;
  s.n = num_elements(out);
  // per output dim, each input's stride (0 where broadcast), then merge dims that are
  // contiguous for every operand
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> st(ins.size());
  const size_t r = out.size();
  std::vector<std::vector<int64_t>> full(ins.size(), std::vector<int64_t>(r, 0));
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& in = ins[k];
    int64_t acc = 1;
    for (size_t d = r; d-- > 0;) {
      const size_t off = r - in.size();
      if (d < off) continue;
      const int64_t dim = in[d - off];
      full[k][d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    if (!shape.empty()) {
      bool merge = true;
      for (size_t k = 0; k < ins.size(); ++k) merge = merge && st[k].back() == full[k][d] * out[d];
      if (merge) {
        shape.back() *= out[d];
        for (size_t k = 0; k < ins.size(); ++k) st[k].back() = full[k][d];
        continue;
      }
    }
    shape.push_back(out[d]);
    for (size_t k = 0; k < ins.size(); ++k) st[k].push_back(full[k][d]);
  }
  if (shape.empty()) {
    shape.push_back(1);
    for (auto& v : st) v.push_back(0);
  }
  if (shape.size() > size_t(kMaxRank)) raise(ErrorKind::NotImplemented, "cuda", "", "more than 8 broadcast dims");
  s.rank = int32_t(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    s.shape[d] = shape[d];
    for (size_t k = 0; k < ins.size(); ++k) s.stride[k][d] = st[k][d];
  }
  return s;
}

namespace {

enum Cls { kF = 0, kS = 1, kU = 2, kB = 3 };
Cls cls_of(DType t) {
  if (t == DType::Bool) return kB;
  if (is_floating(t)) return kF;
  return is_signed_integer(t) ? kS : kU;
}

// Expressions over x (and y) of compute type C, per dtype class (float, signed, unsigned, bool);
// empty: the op does not take that class.
struct OpExpr {
  int arity;
  const char* e[4];
  bool predicate;  // result is bool
};

#define WRAP(op) "C((u64)x " op " (u64)y)"
const std::unordered_map<std::string, OpExpr>& table() {
  static const std::unordered_map<std::string, OpExpr> t = {
      {"identity", {1, {"x", "x", "x", "x"}, false}},
      {"negative", {1, {"-x", "C(0ull - (u64)x)", "C(0ull - (u64)x)", ""}, false}},
      {"absolute", {1, {"fabsf(x)", "(x < 0 ? C(0ull - (u64)x) : x)", "x", ""}, false}},
      {"sign", {1, {"(x > 0.f ? 1.f : x < 0.f ? -1.f : x)", "C(x > 0 ? 1 : x < 0 ? -1 : 0)", "C(x > 0 ? 1 : 0)", ""}, false}},
      {"floor", {1, {"floorf(x)", "x", "x", ""}, false}},
      {"ceil", {1, {"ceilf(x)", "x", "x", ""}, false}},
      {"round", {1, {"rintf(x)", "x", "x", ""}, false}},
      {"truncate", {1, {"truncf(x)", "x", "x", ""}, false}},
      {"exponent", {1, {"expf(x)", "", "", ""}, false}},
      {"exponent_base2", {1, {"exp2f(x)", "", "", ""}, false}},
      {"exponent_base10", {1, {"exp10f(x)", "", "", ""}, false}},
      {"logarithm", {1, {"logf(x)", "", "", ""}, false}},
      {"logarithm_base2", {1, {"log2f(x)", "", "", ""}, false}},
      {"logarithm_base10", {1, {"log10f(x)", "", "", ""}, false}},
      {"log1p", {1, {"log1pf(x)", "", "", ""}, false}},
      {"expm1", {1, {"expm1f(x)", "", "", ""}, false}},
      {"square", {1, {"x * x", "C((u64)x * (u64)x)", "C((u64)x * (u64)x)", ""}, false}},
      {"square_root", {1, {"sqrtf(x)", "", "", ""}, false}},
      {"reverse_square_root", {1, {"1.f / sqrtf(x)", "", "", ""}, false}},
      {"reciprocal", {1, {"1.f / x", "", "", ""}, false}},
      {"sin", {1, {"sinf(x)", "", "", ""}, false}},
      {"cos", {1, {"cosf(x)", "", "", ""}, false}},
      {"tan", {1, {"tanf(x)", "", "", ""}, false}},
      {"sinh", {1, {"sinhf(x)", "", "", ""}, false}},
      {"cosh", {1, {"coshf(x)", "", "", ""}, false}},
      {"tanh", {1, {"tanhf(x)", "", "", ""}, false}},
      {"asin", {1, {"asinf(x)", "", "", ""}, false}},
      {"acos", {1, {"acosf(x)", "", "", ""}, false}},
      {"atan", {1, {"atanf(x)", "", "", ""}, false}},
      {"asinh", {1, {"asinhf(x)", "", "", ""}, false}},
      {"acosh", {1, {"acoshf(x)", "", "", ""}, false}},
      {"atanh", {1, {"atanhf(x)", "", "", ""}, false}},
      {"erf", {1, {"erff(x)", "", "", ""}, false}},
      {"erfinv", {1, {"erfinvf(x)", "", "", ""}, false}},
      {"sigmoid", {1, {"(x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x)))", "", "", ""}, false}},
      {"relu", {1, {"(x > 0.f ? x : (x != x ? x : 0.f))", "(x > 0 ? x : C(0))", "x", ""}, false}},
      {"logical_not", {1, {"", "", "", "!x"}, false}},
      {"bitwise_not", {1, {"", "C(~x)", "C(~x)", "!x"}, false}},
      {"isnan", {1, {"(x != x)", "false", "false", ""}, true}},
      {"isinf", {1, {"(fabsf(x) == __int_as_float(0x7f800000))", "false", "false", ""}, true}},
      {"isfinite", {1, {"(fabsf(x) < __int_as_float(0x7f800000))", "true", "true", ""}, true}},
      {"addition", {2, {"x + y", WRAP("+"), WRAP("+"), ""}, false}},
      {"subtraction", {2, {"x - y", WRAP("-"), WRAP("-"), ""}, false}},
      {"multiplication", {2, {"x * y", WRAP("*"), WRAP("*"), ""}, false}},
      {"division", {2, {"x / y", "(y == 0 ? C(0) : y == C(-1) ? C(0ull - (u64)x) : C(x / y))", "(y == 0 ? C(0) : C(x / y))", ""}, false}},
      {"floor_division", {2, {"mg_floordivf(x, y)", "mg_floordiv_s<C>(x, y)", "(y == 0 ? C(0) : C(x / y))", ""}, false}},
      {"modulo", {2, {"mg_modf(x, y)", "mg_mod_s<C>(x, y)", "(y == 0 ? C(0) : C(x % y))", ""}, false}},
      {"power", {2, {"powf(x, y)", "mg_pow_i<C>(x, y, true)", "mg_pow_i<C>(x, y, false)", ""}, false}},
      {"maximum", {2, {"mg_maxf(x, y)", "(x > y ? x : y)", "(x > y ? x : y)", ""}, false}},
      {"minimum", {2, {"mg_minf(x, y)", "(x < y ? x : y)", "(x < y ? x : y)", ""}, false}},
      {"atan2", {2, {"atan2f(x, y)", "", "", ""}, false}},
      {"equal", {2, {"x == y", "x == y", "x == y", "x == y"}, true}},
      {"not_equal", {2, {"x != y", "x != y", "x != y", "x != y"}, true}},
      {"less_than", {2, {"x < y", "x < y", "x < y", "x < y"}, true}},
      {"less_than_or_equal_to", {2, {"x <= y", "x <= y", "x <= y", "x <= y"}, true}},
      {"greater_than", {2, {"x > y", "x > y", "x > y", "x > y"}, true}},
      {"greater_than_or_equal_to", {2, {"x >= y", "x >= y", "x >= y", "x >= y"}, true}},
      {"logical_and", {2, {"", "", "", "x && y"}, false}},
      {"logical_or", {2, {"", "", "", "x || y"}, false}},
      {"logical_xor", {2, {"", "", "", "x != y"}, false}},
      {"bitwise_and", {2, {"", "C(x & y)", "C(x & y)", "x && y"}, false}},
      {"bitwise_or", {2, {"", "C(x | y)", "C(x | y)", "x || y"}, false}},
      {"bitwise_xor", {2, {"", "C(x ^ y)", "C(x ^ y)", "x != y"}, false}},
      {"bitwise_left_shift",
       {2, {"", "((y < 0 || (u64)y >= sizeof(C) * 8) ? C(0) : C((u64)x << y))", "(((u64)y >= sizeof(C) * 8) ? C(0) : C((u64)x << y))", ""}, false}},
      {"bitwise_right_shift",
       {2, {"", "((y < 0 || (u64)y >= sizeof(C) * 8) ? (x < 0 ? C(-1) : C(0)) : C(x >> y))", "(((u64)y >= sizeof(C) * 8) ? C(0) : C(x >> y))", ""}, false}},
      {"clamp", {3, {"mg_minf(mg_maxf(x, y), z)", "(x > y ? (x < z ? x : z) : (y < z ? y : z))", "(x > y ? (x < z ? x : z) : (y < z ? y : z))", ""}, false}},
  };
  return t;
}
#undef WRAP

// Offsets of each operand for element i of the space: no division where the space is 1-D.
std::string offsets_code(int nops, bool one_dim) {
  std::string c;
  if (one_dim) {
    for (int k = 0; k < nops; ++k) c += "    const i64 o" + std::to_string(k) + " = i * s.stride[" + std::to_string(k) + "][0];\n";
    return c;
  }
  c += "    i64 rem = i";
  for (int k = 0; k < nops; ++k) c += ", o" + std::to_string(k) + " = 0";
  c += ";\n    for (int d = s.rank - 1; d >= 0; --d) {\n      const i64 q = rem / s.shape[d], idx = rem - q * s.shape[d];\n      rem = q;\n";
  for (int k = 0; k < nops; ++k) c += "      o" + std::to_string(k) + " += idx * s.stride[" + std::to_string(k) + "][d];\n";
  c += "    }\n";
  return c;
}

// A kernel reading `ins` (with their dtypes) and writing out = value(x, y, z).
LaunchFn make_map(const std::vector<DType>& in_dt, DType out_dt, DType compute_dt, const std::string& body_expr,
                  const IndexSpace& sp) {
  const bool one_dim = sp.rank == 1;
  std::string src = prelude() + "typedef " + compute_type(compute_dt) + " C;\nextern \"C\" __global__ void k(Space s";
  for (size_t k = 0; k < in_dt.size(); ++k) src += ", const " + storage_type(in_dt[k]) + "* __restrict__ a" + std::to_string(k);
  src += ", " + storage_type(out_dt) + "* __restrict__ out) {\n";
  src += "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += (i64)gridDim.x * blockDim.x) {\n";
  src += offsets_code(int(in_dt.size()), one_dim);
  static const char* names[] = {"x", "y", "z"};
  for (size_t k = 0; k < in_dt.size(); ++k) {
    // x of a cast or select keeps its own compute type; the other operands are C
    src += "    const " + (in_dt[k] == compute_dt || k > 0 ? std::string("C") : compute_type(in_dt[k])) + " " + names[k] + " = " +
           load_expr(in_dt[k], "a" + std::to_string(k) + "[o" + std::to_string(k) + "]") + ";\n";
  }
  src += "    out[i] = " + store_expr(out_dt, body_expr) + ";\n  }\n}\n";
  Kernel kern = nvrtc_kernel(src, "k");
  const size_t nin = in_dt.size();
  return [kern, sp, nin](cudaStream_t st, const void* const* in, void* const* out) {
    if (sp.n == 0) return;
    IndexSpace s = sp;
    const void* ptrs[4] = {};
    void* o = out[0];
    void* args[6] = {&s};
    for (size_t k = 0; k < nin; ++k) {
      ptrs[k] = in[k];
      args[1 + k] = &ptrs[k];
    }
    args[1 + nin] = &o;
    const int64_t blocks = std::min<int64_t>((sp.n + 255) / 256, int64_t(1) << 20);
    launch(kern, blocks, 256, 0, st, args);
  };
}

LaunchFn elementwise_factory(const KernelCtx& c) {
  const std::string& op = c.node.op->name;
  const OpExpr& e = table().at(op);
  const DType dt = c.in[0].dtype;
  const char* expr = e.e[cls_of(dt)];
  if (!*expr)
    raise(ErrorKind::Type, op, c.node.name, std::string("no cuda kernel for ") + dtype_name(dt));
  std::vector<Shape> shapes;
  std::vector<DType> dts;
  for (auto& t : c.in) {
    shapes.push_back(t.shape);
    dts.push_back(t.dtype);
  }
  return make_map(dts, c.out[0].dtype, dt, expr, broadcast_space(c.out[0].shape, shapes));
}

// Saturating float -> integer conversion literal bounds, as the CPU's convert<>.
template <class T>
std::string lit(T v) {
  if constexpr (std::is_signed_v<T>) {
    if (v == std::numeric_limits<T>::min() && sizeof(T) == 8) return "(-9223372036854775807LL - 1)";
    return std::to_string(int64_t(v)) + "LL";
  } else {
    return std::to_string(uint64_t(v)) + "ULL";
  }
}

std::string int_bounds(DType t, std::string& hi) {
  switch (t) {
    case DType::Int8: hi = lit(std::numeric_limits<int8_t>::max()); return lit(std::numeric_limits<int8_t>::min());
    case DType::Int16: hi = lit(std::numeric_limits<int16_t>::max()); return lit(std::numeric_limits<int16_t>::min());
    case DType::Int32: hi = lit(std::numeric_limits<int32_t>::max()); return lit(std::numeric_limits<int32_t>::min());
    case DType::Int64: hi = lit(std::numeric_limits<int64_t>::max()); return lit(std::numeric_limits<int64_t>::min());
    case DType::UInt8: hi = lit(std::numeric_limits<uint8_t>::max()); return "0ULL";
    case DType::UInt16: hi = lit(std::numeric_limits<uint16_t>::max()); return "0ULL";
    case DType::UInt32: hi = lit(std::numeric_limits<uint32_t>::max()); return "0ULL";
    default: hi = lit(std::numeric_limits<uint64_t>::max()); return "0ULL";
  }
}

LaunchFn cast_factory(const KernelCtx& c) {
  const DType from = c.in[0].dtype, to = c.out[0].dtype;
  std::string expr;
  const Cls cf = cls_of(from), ct = cls_of(to);
  const std::string out_c = compute_type(to);
  if (ct == kB) expr = "(x != 0)";
  else if (ct == kF) expr = "(float)(x)";
  else if (cf == kF) {
    std::string hi;
    const std::string lo = int_bounds(to, hi);
    expr = "(x != x ? (" + out_c + ")0 : x <= (float)" + lo + " ? (" + out_c + ")" + lo + " : x >= (float)" + hi + " ? (" + out_c +
           ")" + hi + " : (" + out_c + ")x)";
  } else {
    expr = "(" + out_c + ")(x)";
  }
  return make_map({from}, to, from, expr, broadcast_space(c.out[0].shape, {c.in[0].shape}));
}

LaunchFn select_factory(const KernelCtx& c) {
  // inputs: predicate, true value, false value; x is the predicate in its own compute type
  const DType dt = c.out[0].dtype;
  std::vector<DType> dts = {c.in[0].dtype, c.in[1].dtype, c.in[2].dtype};
  return make_map(dts, dt, dt, "(x ? y : z)", broadcast_space(c.out[0].shape, {c.in[0].shape, c.in[1].shape, c.in[2].shape}));
}

}  // namespace

void register_elementwise_kernels() {
  for (auto& kv : table()) register_kernel(kv.first, elementwise_factory);
  register_kernel("cast", cast_factory);
  register_kernel("select", select_factory);
}

}  // namespace mg::cuda
