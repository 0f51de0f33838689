// CUDA elementwise kernels: one generated kernel per node or fused group (fusion_cuda.cpp), per
// dtypes and broadcast layout, compiled by NVRTC. The expressions follow the CPU kernels'
// semantics (integer division and shifts never trap, NaN-propagating maximum/minimum,
// saturating float-to-integer casts).
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/elementwise_cuda.h"
#include "core/error.h"
#include "core/registry.h"

namespace mg::cuda {

const std::string& prelude() {
  static const std::string p = R"(
typedef signed char i8; typedef short i16; typedef int i32; typedef long long i64;
typedef unsigned char u8; typedef unsigned short u16; typedef unsigned int u32; typedef unsigned long long u64;
__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
// 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below: one exp of -|x| gives both (no overflow, no cancellation)
__device__ __forceinline__ float sigmoid_f(float x) { const float e = expf(-fabsf(x)); return x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e); }
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

Collapsed collapse_dims(const Shape& out, const std::vector<Shape>& ins) {
  // per output dim, each input's stride (0 where broadcast), then merge dims that are
  // contiguous for every operand
  Collapsed c;
  c.stride.resize(ins.size());
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
    if (!c.shape.empty()) {
      bool merge = true;
      for (size_t k = 0; k < ins.size(); ++k) merge = merge && c.stride[k].back() == full[k][d] * out[d];
      if (merge) {
        c.shape.back() *= out[d];
        for (size_t k = 0; k < ins.size(); ++k) c.stride[k].back() = full[k][d];
        continue;
      }
    }
    c.shape.push_back(out[d]);
    for (size_t k = 0; k < ins.size(); ++k) c.stride[k].push_back(full[k][d]);
  }
  if (c.shape.empty()) {
    c.shape.push_back(1);
    for (auto& v : c.stride) v.push_back(0);
  }
  return c;
}

IndexSpace broadcast_space(const Shape& out, const std::vector<Shape>& ins) {
  IndexSpace s;
  s.n = num_elements(out);
  const Collapsed c = collapse_dims(out, ins);
  if (c.shape.size() > size_t(kMaxRank)) raise(ErrorKind::NotImplemented, "cuda", "", "more than 8 broadcast dims");
  s.rank = int32_t(c.shape.size());
  for (size_t d = 0; d < c.shape.size(); ++d) {
    s.shape[d] = c.shape[d];
    for (size_t k = 0; k < ins.size(); ++k) s.stride[k][d] = c.stride[k][d];
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
      {"sigmoid", {1, {"sigmoid_f(x)", "", "", ""}, false}},
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

std::string cast_expr(DType from, DType to) {
  const Cls cf = cls_of(from), ct = cls_of(to);
  const std::string out_c = compute_type(to);
  if (ct == kB) return "(x != 0)";
  if (ct == kF) return "(float)(x)";
  if (cf == kF) {
    std::string hi;
    const std::string lo = int_bounds(to, hi);
    return "(x != x ? (" + out_c + ")0 : x <= (float)" + lo + " ? (" + out_c + ")" + lo + " : x >= (float)" + hi + " ? (" + out_c +
           ")" + hi + " : (" + out_c + ")x)";
  }
  return "(" + out_c + ")(x)";
}

}  // namespace

NodeExpr node_expr(const std::string& op, const std::vector<DType>& in, DType out) {
  if (in.empty()) return {out, ""};
  if (op == "cast") return {in[0], in.size() == 1 ? cast_expr(in[0], out) : ""};
  if (op == "select") return {out, in.size() == 3 ? "(x ? y : z)" : ""};
  auto it = table().find(op);
  if (it == table().end() || in.size() != size_t(it->second.arity)) return {in[0], ""};
  return {in[0], it->second.e[cls_of(in[0])]};
}

namespace {

enum class Access { Direct, Scalar, Broadcast };

std::string num(int64_t v) { return std::to_string(v); }

// The element function f(p, i, operands...): every node's value at flat index i, each rounded
// to its dtype as its own kernel stores it; returns the root's value in storage form.
//
// Broadcast operands' offsets come from the collapsed dims, written into the source as literals
// (the program is specialised to its shapes), so the divisions compile to multiply-shifts. The
// element is i0 + j: where the innermost dim is a multiple of the vector width, i0 (a vector's
// first element) fixes the outer coordinates and j only steps along the innermost dim, so the
// divisions are shared by the vector's elements once f is inlined.
std::string element_function(const std::vector<EwNode>& nodes, const std::vector<DType>& in_dt,
                             const std::vector<Access>& acc, const std::vector<int>& bslot, const Collapsed& bc,
                             bool rows_hold_vectors) {
  const int nb = int(bc.stride.size()), rank = nb ? int(bc.shape.size()) : 0;
  std::string src = "__device__ __forceinline__ " + storage_type(nodes.back().out) + " f(const I i0, const int j";
  for (size_t k = 0; k < in_dt.size(); ++k) {
    const std::string e = " e" + num(int64_t(k));
    if (acc[k] == Access::Direct) src += ", const " + storage_type(in_dt[k]) + e;
    else if (acc[k] == Access::Scalar) src += ", const " + compute_type(in_dt[k]) + e;
    else src += ", const " + storage_type(in_dt[k]) + "* __restrict__" + e;
  }
  src += ") {\n";
  if (nb > 0) {  // broadcast operands' offsets: the outermost dim needs no division
    src += std::string("  I rem = ") + (rows_hold_vectors ? "i0" : "i0 + j");
    for (int b = 0; b < nb; ++b) src += ", o" + num(b) + " = 0";
    src += ";\n";
    for (int d = rank - 1; d >= 0; --d) {
      const std::string S = "(I)" + num(bc.shape[size_t(d)]);
      if (d > 0) src += "  { const I q = rem / " + S + ", c = rem - q * " + S + "; rem = q;";
      else src += "  { const I c = rem;";
      for (int b = 0; b < nb; ++b)
        if (bc.stride[size_t(b)][size_t(d)] != 0) src += " o" + num(b) + " += c * (I)" + num(bc.stride[size_t(b)][size_t(d)]) + ";";
      src += " }\n";
    }
    if (rows_hold_vectors)
      for (int b = 0; b < nb; ++b)
        if (bc.stride[size_t(b)].back() != 0) src += "  o" + num(b) + " += j * (I)" + num(bc.stride[size_t(b)].back()) + ";\n";
  }
  for (size_t k = 0; k < in_dt.size(); ++k) {
    const std::string K = num(int64_t(k));
    std::string v = "e" + K;
    if (acc[k] == Access::Direct) v = load_expr(in_dt[k], v);
    if (acc[k] == Access::Broadcast) v = load_expr(in_dt[k], v + "[o" + num(bslot[k]) + "]");
    src += "  const " + compute_type(in_dt[k]) + " in" + K + " = " + v + ";\n";
  }
  static const char* names[] = {"x", "y", "z"};
  for (size_t j = 0; j < nodes.size(); ++j) {
    const EwNode& nd = nodes[j];
    const NodeExpr e = node_expr(nd.op, nd.in, nd.out);
    const bool root = j + 1 == nodes.size();
    const std::string J = num(int64_t(j));
    if (!root) src += "  " + compute_type(nd.out) + " v" + J + ";\n";
    src += "  {  // " + nd.op + "\n    typedef " + compute_type(e.compute) + " C;\n";
    for (size_t a = 0; a < nd.arg.size(); ++a) {
      // x of a cast or select keeps its own compute type; the other operands are C
      const std::string t = a == 0 ? compute_type(nd.in[0]) : std::string("C");
      const int r = nd.arg[a];
      src += "    const " + t + " " + names[a] + " = " + (r >= 0 ? "v" + num(r) : "in" + num(-r - 1)) + ";\n";
    }
    if (root) src += "    return " + store_expr(nd.out, e.expr) + ";\n  }\n";
    else src += "    v" + J + " = " + load_expr(nd.out, store_expr(nd.out, e.expr)) + ";\n  }\n";
  }
  return src + "}\n";
}

}  // namespace

ElementFn element_fn(const std::vector<EwNode>& nodes, const std::vector<TensorType>& inputs, const Shape& shape, int lanes) {
  const int64_t n = num_elements(shape);
  std::vector<Access> acc;
  std::vector<int> bslot;
  std::vector<DType> in_dt;
  std::vector<Shape> bshapes;
  for (const TensorType& t : inputs) {
    const int64_t m = num_elements(t.shape);
    const Access a = m == 1 ? Access::Scalar : m == n ? Access::Direct : Access::Broadcast;
    in_dt.push_back(t.dtype);
    acc.push_back(a);
    bslot.push_back(a == Access::Broadcast ? int(bshapes.size()) : -1);
    if (a == Access::Broadcast) bshapes.push_back(t.shape);
  }
  Collapsed bc;
  if (!bshapes.empty()) bc = collapse_dims(shape, bshapes);
  ElementFn r;
  // lanes share the broadcast offsets of their first element where the innermost collapsed dim
  // holds whole vectors
  r.lanes = lanes > 1 && (bshapes.empty() || bc.shape.back() % lanes == 0) ? lanes : 1;
  r.source = element_function(nodes, in_dt, acc, bslot, bc, r.lanes > 1);
  r.out = nodes.back().out;
  for (size_t k = 0; k < acc.size(); ++k)
    if (acc[k] == Access::Direct) r.direct.push_back(int(k));
  const bool vec = r.lanes > 1;
  r.call = [acc, in_dt, vec](const std::string& idx, const std::string& j) {
    std::string c = "f(" + idx + ", " + j;
    for (size_t k = 0; k < in_dt.size(); ++k) {
      const std::string a = "a" + num(int64_t(k));
      if (acc[k] == Access::Direct) c += vec ? ", l" + num(int64_t(k)) + ".v[" + j + "]" : ", " + a + "[" + idx + "]";
      else if (acc[k] == Access::Scalar) c += ", " + load_expr(in_dt[k], a + "[0]");
      else c += ", " + a;
    }
    return c + ")";
  };
  return r;
}

namespace {

// Read per kernel built, not once per process, so one process can time both kernels.
int ew_packs() {
  const char* env = std::getenv("MPSGRAPH_CUDA_EW_PACKS");
  const int v = env ? std::atoi(env) : 4;
  return v == 1 || v == 2 || v == 4 || v == 8 ? v : 4;
}

}  // namespace

LaunchFn make_elementwise(const std::vector<EwNode>& nodes, const std::vector<TensorType>& inputs, const Shape& shape) {
  const int64_t n = num_elements(shape);
  const DType out_dt = nodes.back().out;
  std::vector<Access> acc;
  std::vector<int> bslot;  // per input: its index among the broadcast operands, or -1
  std::vector<DType> in_dt;
  std::vector<Shape> bshapes;
  size_t min_item = dtype_size(out_dt);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t m = num_elements(inputs[k].shape);
    in_dt.push_back(inputs[k].dtype);
    const Access a = m == 1 ? Access::Scalar : m == n ? Access::Direct : Access::Broadcast;
    acc.push_back(a);
    bslot.push_back(a == Access::Broadcast ? int(bshapes.size()) : -1);
    if (a == Access::Broadcast) bshapes.push_back(inputs[k].shape);
    if (a == Access::Direct) min_item = std::min(min_item, dtype_size(inputs[k].dtype));
  }
  // at most 8 packs in flight per thread (registers): an 11-operand sum at 4 packs each took 128
  int packs = ew_packs(), direct = 0;
  for (Access a : acc) direct += a == Access::Direct;
  while (packs > 1 && packs * direct > 8) packs /= 2;
  // 16-byte accesses: V elements per thread, where every direct operand and the output are aligned
  const int V = int(std::min<size_t>(8, std::max<size_t>(1, 16 / min_item)));
  const bool wide = n >= (int64_t(1) << 30);
  const std::vector<int64_t> params{n};
  Collapsed bc;
  if (!bshapes.empty()) bc = collapse_dims(shape, bshapes);
  const bool rows_hold_vectors = bshapes.empty() || bc.shape.back() % V == 0;
  std::string src = prelude() + "typedef " + std::string(wide ? "i64" : "i32") + " I;\n" +
                    "template <class T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack { T v[N]; };\n" +
                    "struct Params { I n; };\n" + element_function(nodes, in_dt, acc, bslot, bc, rows_hold_vectors);
  src += "extern \"C\" __global__ void k(const Params p";
  for (size_t k = 0; k < in_dt.size(); ++k) src += ", const " + storage_type(in_dt[k]) + "* __restrict__ a" + num(int64_t(k));
  const std::string ost = storage_type(out_dt), VS = num(V);
  src += ", " + ost + "* __restrict__ out, const int vec) {\n";
  for (size_t k = 0; k < in_dt.size(); ++k)
    if (acc[k] == Access::Scalar)
      src += "  const " + compute_type(in_dt[k]) + " s" + num(int64_t(k)) + " = " + load_expr(in_dt[k], "a" + num(int64_t(k)) + "[0]") + ";\n";
  src += "  const I tid = (I)(blockIdx.x * blockDim.x + threadIdx.x), nth = (I)(gridDim.x * blockDim.x);\n  I i = tid;\n";
  auto call = [&](const std::string& idx, bool vec) {
    std::string c = "f(" + idx;
    for (size_t k = 0; k < in_dt.size(); ++k) {
      const std::string K = num(int64_t(k));
      if (acc[k] == Access::Direct) c += vec ? ", l" + K + ".v[j]" : ", a" + K + "[i]";
      else if (acc[k] == Access::Scalar) c += ", s" + K;
      else c += ", a" + K;
    }
    return c + ")";
  };
  // U packs per thread, all loaded before any is computed, so each thread keeps U 16-byte
  // loads in flight; the grid covers the packs once (a grid-stride loop of one load at a time
  // left the 16M chain at 85% of copy bandwidth). MPSGRAPH_CUDA_EW_PACKS=1 is that loop.
  auto pack = [&](size_t k) { return "Pack<" + storage_type(in_dt[k]) + ", " + VS + ">"; };
  // the pack at element i0 from the packs l<k> of the direct operands, stored; then the tail's start
  const std::string compute_store = "      Pack<" + ost + ", " + VS + "> r;\n#pragma unroll\n      for (int j = 0; j < " + VS +
                                    "; ++j) r.v[j] = " + call("i0, j", true) + ";\n      *reinterpret_cast<Pack<" + ost + ", " +
                                    VS + ">*>(out + i0) = r;\n    }\n    i = nv * " + VS + " + tid;\n  }\n";
  if (packs > 1) {
    const std::string UN = num(packs), span = num(256 * packs);
    src += "  if (vec) {\n    const I nv = p.n / " + VS + ", c0 = (I)blockIdx.x * " + span + " + (I)threadIdx.x;\n";
    for (size_t k = 0; k < in_dt.size(); ++k)
      if (acc[k] == Access::Direct) {
        const std::string K = num(int64_t(k));
        src += "    " + pack(k) + " packs" + K + "[" + UN + "];\n#pragma unroll\n    for (int u = 0; u < " + UN +
               "; ++u)\n      if (c0 + u * 256 < nv) packs" + K + "[u] = *reinterpret_cast<const " + pack(k) + "*>(a" + K +
               " + (c0 + u * 256) * " + VS + ");\n";
      }
    src += "#pragma unroll\n    for (int u = 0; u < " + UN + "; ++u) {\n      const I i0 = (c0 + u * 256) * " + VS +
           ";\n      if (i0 >= nv * " + VS + ") break;\n";
    for (size_t k = 0; k < in_dt.size(); ++k)
      if (acc[k] == Access::Direct) src += "      const " + pack(k) + "& l" + num(int64_t(k)) + " = packs" + num(int64_t(k)) + "[u];\n";
  } else {
    src += "  if (vec) {\n    const I nv = p.n / " + VS + ";\n    for (I c = tid; c < nv; c += nth) {\n      const I i0 = c * " + VS + ";\n";
    for (size_t k = 0; k < in_dt.size(); ++k)
      if (acc[k] == Access::Direct)
        src += "      const " + pack(k) + " l" + num(int64_t(k)) + " = *reinterpret_cast<const " + pack(k) + "*>(a" +
               num(int64_t(k)) + " + i0);\n";
  }
  src += compute_store;
  src += "  for (; i < p.n; i += nth) out[i] = " + call("i, 0", false) + ";\n}\n";
  // no multiply-add contraction: an op computes the same alone or fused with its neighbours
  const Kernel kern = nvrtc_kernel(src, "k", {"--fmad=false"});
  // the alignment each pointer needs for the vector path (a Pack's)
  std::vector<size_t> align;
  for (size_t k = 0; k < in_dt.size(); ++k)
    align.push_back(acc[k] == Access::Direct ? std::min<size_t>(16, dtype_size(in_dt[k]) * size_t(V)) : 1);
  const size_t out_align = std::min<size_t>(16, dtype_size(out_dt) * size_t(V));
  const int64_t max_blocks = int64_t(context().sm_count) * 8;  // a full GPU of 256-thread blocks, grid-stride beyond
  auto blocks_for = [max_blocks](int64_t work) { return std::max<int64_t>(1, std::min<int64_t>((work + 255) / 256, max_blocks)); };
  const int64_t blocks_vec = packs > 1 ? std::max<int64_t>(1, (n / V + 256 * packs - 1) / (256 * packs)) : blocks_for((n + V - 1) / V),
                blocks_scalar = blocks_for(n);
  std::vector<int32_t> params32(params.begin(), params.end());
  const size_t nin = in_dt.size();
  return [=](cudaStream_t st, const void* const* in, void* const* out) {
    if (n == 0) return;
    bool vec = n >= V && reinterpret_cast<uintptr_t>(out[0]) % out_align == 0;
    for (size_t k = 0; k < nin; ++k) vec = vec && reinterpret_cast<uintptr_t>(in[k]) % align[k] == 0;
    const void* ptrs[kMaxFusedInputs];
    void* args[kMaxFusedInputs + 3];
    args[0] = wide ? const_cast<int64_t*>(params.data()) : static_cast<void*>(const_cast<int32_t*>(params32.data()));
    for (size_t k = 0; k < nin; ++k) {
      ptrs[k] = in[k];
      args[1 + k] = &ptrs[k];
    }
    void* o = out[0];
    int flag = vec ? 1 : 0;
    args[1 + nin] = &o;
    args[2 + nin] = &flag;
    launch(kern, vec ? blocks_vec : blocks_scalar, 256, 0, st, args);
  };
}

namespace {

LaunchFn elementwise_factory(const KernelCtx& c) {
  const std::string& op = c.node.op->name;
  EwNode nd{op, {}, {}, c.out[0].dtype};
  for (size_t k = 0; k < c.in.size(); ++k) {
    nd.arg.push_back(-int(k) - 1);
    nd.in.push_back(c.in[k].dtype);
  }
  if (node_expr(op, nd.in, nd.out).expr.empty())
    raise(ErrorKind::Type, op, c.node.name, std::string("no cuda kernel for ") + dtype_name(nd.in.empty() ? nd.out : nd.in[0]));
  if (c.in.size() > size_t(kMaxFusedInputs)) raise(ErrorKind::NotImplemented, op, c.node.name, "too many operands for a cuda kernel");
  return make_elementwise({nd}, c.in, c.out[0].shape);
}

}  // namespace

void register_elementwise_kernels() {
  for (auto& kv : table()) register_kernel(kv.first, elementwise_factory);
  register_kernel("cast", elementwise_factory);
  register_kernel("select", elementwise_factory);
}

}  // namespace mg::cuda
