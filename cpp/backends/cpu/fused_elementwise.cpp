// Fused elementwise groups (see fused_elementwise.h). A group is a small register program:
// each instruction runs one vectorised loop over a float32 tile of kTile elements, reading
// earlier instructions' tiles or the group's inputs. An input of the group's shape in float32
// is read in place; any other input (a scalar, a broadcast operand such as a bias row or a
// per-row scale, a float16/bfloat16/bool array) is loaded into a tile first, converted to
// float32 and read with its broadcast strides. The last instruction writes the output,
// converting at the store. Every op computes exactly as its own kernel does (same functions,
// float16/bfloat16 results rounded after every op, bools as 0/1), so fusing never changes a result.
#include "backends/cpu/fused_elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/isa_target.h"
#include "backends/cpu/reduce_walk.h"
#include "backends/cpu/vec_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops/reduction_attrs.h"
#include "core/registry.h"
#include "core/shape.h"

namespace mg::cpu {

namespace {

constexpr int kMaxInstr = 16;  // per group
constexpr int kMaxBuf = 28;    // tiles on the stack: instructions plus loaded inputs
constexpr int64_t kTile = 512;
constexpr int64_t kLeadBlock = 4096;  // outputs reduced together over leading axes (the kernel's block)

enum class Op : uint8_t {
  Neg, Abs, Square, Sqrt, Recip, Relu, Exp, Log, Tanh, Sigmoid, Erf, Not, Copy,  // unary (Copy: cast, identity)
  Add, Sub, Mul, Div, Max, Min, Eq, Ne, Lt, Le, Gt, Ge,                          // binary
  Select, Clamp                                                                  // ternary
};

// What a register holds: float32 values, float16/bfloat16 values (rounded), or bools as 0/1.
enum class Kind : uint8_t { F32, F16, BF16, Bool, None };

Kind kind_of(DType t) {
  switch (t) {
    case DType::Float32: return Kind::F32;
    case DType::Float16: return Kind::F16;
    case DType::BFloat16: return Kind::BF16;
    case DType::Bool: return Kind::Bool;
    default: return Kind::None;
  }
}

const std::map<std::string, Op>& op_table() {
  static const std::map<std::string, Op> t = {
      {"negative", Op::Neg},       {"absolute", Op::Abs},       {"square", Op::Square},     {"square_root", Op::Sqrt},
      {"reciprocal", Op::Recip},   {"relu", Op::Relu},          {"exponent", Op::Exp},      {"logarithm", Op::Log},
      {"tanh", Op::Tanh},          {"sigmoid", Op::Sigmoid},    {"erf", Op::Erf},           {"logical_not", Op::Not},
      {"cast", Op::Copy},          {"identity", Op::Copy},      {"addition", Op::Add},      {"subtraction", Op::Sub},
      {"multiplication", Op::Mul}, {"division", Op::Div},       {"maximum", Op::Max},       {"minimum", Op::Min},
      {"equal", Op::Eq},           {"not_equal", Op::Ne},       {"less_than", Op::Lt},      {"less_than_or_equal_to", Op::Le},
      {"greater_than", Op::Gt},    {"greater_than_or_equal_to", Op::Ge}, {"select", Op::Select}, {"clamp", Op::Clamp}};
  return t;
}

size_t arity(Op op) { return op >= Op::Select ? 3 : op >= Op::Add ? 2 : 1; }
bool is_compare(Op op) { return op >= Op::Eq && op <= Op::Ge; }
bool is_float(Kind k) { return k == Kind::F32 || k == Kind::F16 || k == Kind::BF16; }

// One output of a float/bool dtype, no empty shape; operands of those dtypes (any shape that
// broadcasts to the output's). Arithmetic on floats only; logical_not on bools; comparisons,
// select and cast across them.
bool fusible(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1 || !n.regions.empty() || num_elements(n.outputs[0].shape) <= 0) return false;
  auto it = op_table().find(n.op->name);
  if (it == op_table().end() || n.inputs.size() != arity(it->second)) return false;
  const Op op = it->second;
  const Kind out = kind_of(n.outputs[0].dtype);
  if (out == Kind::None) return false;
  for (const ValueRef& v : n.inputs)
    if (kind_of(g.type(v).dtype) == Kind::None) return false;
  if (op == Op::Not) return out == Kind::Bool;
  if (is_compare(op) || op == Op::Copy) return true;
  if (op == Op::Select) return is_float(out) || out == Kind::Bool;
  return is_float(out);
}

struct Instr {
  Op op;
  Kind out;
  std::array<int, 3> arg{0, 0, 0};  // operand: >= 0 an earlier instruction, < 0 input -(k + 1)
};

// A group input: read in place (float32 of the group's shape), a scalar (one tile filled once
// per thread), or loaded per tile through its collapsed broadcast dims.
struct InputDesc {
  Kind kind = Kind::F32;
  bool direct = false, scalar = false;
  int buf = -1;                        // its tile, unless direct
  std::vector<int64_t> dims, strides;  // collapsed output dims and this input's strides (0: broadcast)
};

inline float load_one(Kind k, const void* p, int64_t i) {
  switch (k) {
    case Kind::F16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case Kind::BF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case Kind::Bool: return static_cast<const uint8_t*>(p)[i] ? 1.0f : 0.0f;
    default: return static_cast<const float*>(p)[i];
  }
}

void load_run(Kind k, const void* p, int64_t off, float* r, int64_t n) {
  switch (k) {
    case Kind::F32: std::memcpy(r, static_cast<const float*>(p) + off, size_t(n) * sizeof(float)); return;
    case Kind::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(p) + off;
      for (int64_t j = 0; j < n; ++j) r[j] = half_to_float(s[j]);
      return;
    }
    case Kind::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(p) + off;
      for (int64_t j = 0; j < n; ++j) r[j] = bf16_to_float(s[j]);
      return;
    }
    default: {
      const uint8_t* s = static_cast<const uint8_t*>(p) + off;
      for (int64_t j = 0; j < n; ++j) r[j] = s[j] ? 1.0f : 0.0f;
    }
  }
}

// r[0, m) = the input's values at flat output positions [t, t + m).
void load_tile(const InputDesc& d, const void* p, int64_t t, int64_t m, float* r) {
  const size_t rank = d.dims.size();
  const int64_t inner = d.dims.back(), inner_stride = d.strides.back();
  for (int64_t done = 0; done < m;) {
    int64_t rem = t + done, off = 0, pos = 0;
    for (size_t k = rank; k-- > 0;) {
      const int64_t c = rem % d.dims[k];
      rem /= d.dims[k];
      off += c * d.strides[k];
      if (k + 1 == rank) pos = c;
    }
    const int64_t n = std::min(m - done, inner - pos);
    if (inner_stride == 0) std::fill(r + done, r + done + n, load_one(d.kind, p, off));
    else load_run(d.kind, p, off, r + done, n);
    done += n;
  }
}

inline float max_nan(float x, float y) { return (x != x || y != y) ? (x != x ? x : y) : (x > y ? x : y); }
inline float min_nan(float x, float y) { return (x != x || y != y) ? (x != x ? x : y) : (x < y ? x : y); }

// A scalar operand (sa / sb) is read as one value; the loops stay vectorisable.
template <class F>
inline void un(float* r, const float* a, bool sa, int64_t m, F f) {
  if (sa) {
    std::fill(r, r + m, f(a[0]));
    return;
  }
  for (int64_t j = 0; j < m; ++j) r[j] = f(a[j]);
}
template <class F>
inline void bin(float* r, const float* a, bool sa, const float* b, bool sb, int64_t m, F f) {
  if (!sa && !sb) {
    for (int64_t j = 0; j < m; ++j) r[j] = f(a[j], b[j]);
  } else if (sa && !sb) {
    const float va = a[0];
    for (int64_t j = 0; j < m; ++j) r[j] = f(va, b[j]);
  } else if (!sa) {
    const float vb = b[0];
    for (int64_t j = 0; j < m; ++j) r[j] = f(a[j], vb);
  } else {
    std::fill(r, r + m, f(a[0], b[0]));
  }
}

inline void vec_fn(vmath::Fn fn, float* r, const float* a, bool sa, int64_t m) {
  if (sa) {
    float v;
    vmath::array_fn(fn)(a, &v, 1);
    std::fill(r, r + m, v);
  } else {
    vmath::array_fn(fn)(a, r, m);
  }
}

// s[k]: operand k is a scalar (its tile is filled too, so ternary ops read it as a tile).
void run_instr(const Instr& in, float* r, const float* a, const float* b, const float* c, const bool* s, int64_t m) {
  const bool sa = s[0], sb = s[1];
  switch (in.op) {
    case Op::Neg: return un(r, a, sa, m, [](float x) { return -x; });
    case Op::Abs: return un(r, a, sa, m, [](float x) { return std::fabs(x); });
    case Op::Square: return un(r, a, sa, m, [](float x) { return x * x; });
    case Op::Sqrt: return un(r, a, sa, m, [](float x) { return std::sqrt(x); });
    case Op::Recip: return un(r, a, sa, m, [](float x) { return 1.0f / x; });
    case Op::Relu: return un(r, a, sa, m, [](float x) { return x > 0 ? x : (x != x ? x : 0.0f); });
    case Op::Not: return un(r, a, sa, m, [](float x) { return x != 0 ? 0.0f : 1.0f; });
    case Op::Copy:
      if (in.out == Kind::Bool) return un(r, a, sa, m, [](float x) { return x != 0 ? 1.0f : 0.0f; });  // NaN is true
      return un(r, a, sa, m, [](float x) { return x; });
    case Op::Exp: return vec_fn(vmath::Fn::Exp, r, a, sa, m);
    case Op::Log: return vec_fn(vmath::Fn::Log, r, a, sa, m);
    case Op::Tanh: return vec_fn(vmath::Fn::Tanh, r, a, sa, m);
    case Op::Sigmoid: return vec_fn(vmath::Fn::Sigmoid, r, a, sa, m);
    case Op::Erf: return vec_fn(vmath::Fn::Erf, r, a, sa, m);
    case Op::Add: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x + y; });
    case Op::Sub: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x - y; });
    case Op::Mul: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x * y; });
    case Op::Div: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x / y; });
    case Op::Max: return bin(r, a, sa, b, sb, m, max_nan);
    case Op::Min: return bin(r, a, sa, b, sb, m, min_nan);
    case Op::Eq: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x == y ? 1.0f : 0.0f; });
    case Op::Ne: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x != y ? 1.0f : 0.0f; });
    case Op::Lt: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x < y ? 1.0f : 0.0f; });
    case Op::Le: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x <= y ? 1.0f : 0.0f; });
    case Op::Gt: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x > y ? 1.0f : 0.0f; });
    case Op::Ge: return bin(r, a, sa, b, sb, m, [](float x, float y) { return x >= y ? 1.0f : 0.0f; });
    case Op::Select:  // both branches loaded before the choice, so the loop is a blend
      for (int64_t j = 0; j < m; ++j) {
        const float x = b[j], y = c[j];
        r[j] = a[j] != 0 ? x : y;
      }
      return;
    case Op::Clamp:
      for (int64_t j = 0; j < m; ++j) r[j] = min_nan(max_nan(a[j], b[j]), c[j]);
      return;
  }
}

// Rounds a float16/bfloat16 register so the next op sees what the unfused kernel stored.
void round_to(Kind k, float* r, int64_t m) {
  if (k == Kind::F16)
    for (int64_t j = 0; j < m; ++j) r[j] = half_to_float(float_to_half(r[j]));
  else if (k == Kind::BF16)
    for (int64_t j = 0; j < m; ++j) r[j] = bf16_to_float(float_to_bf16(r[j]));
}

void store(Kind k, const float* r, void* o, int64_t t, int64_t m) {
  if (k == Kind::F16) {
    uint16_t* p = static_cast<uint16_t*>(o) + t;
    for (int64_t j = 0; j < m; ++j) p[j] = float_to_half(r[j]);
  } else if (k == Kind::BF16) {
    uint16_t* p = static_cast<uint16_t*>(o) + t;
    for (int64_t j = 0; j < m; ++j) p[j] = float_to_bf16(r[j]);
  } else if (k == Kind::Bool) {
    uint8_t* p = static_cast<uint8_t*>(o) + t;
    for (int64_t j = 0; j < m; ++j) p[j] = r[j] != 0;
  }
}

// Tiles a group of these nodes needs: one per instruction and one per input not read in place.
// An operand read in place: a float32 tensor of the group's shape. Anything else (a scalar, a
// broadcast, another dtype) is loaded into a tile of its own.
bool read_directly(const TensorType& t, const Shape& shape) {
  return num_elements(t.shape) != 1 && t.dtype == DType::Float32 && t.shape == shape;
}

int buffers_needed(const Graph& g, const std::vector<int32_t>& members, const Shape& shape) {
  std::vector<ValueRef> ext;
  for (int32_t id : members)
    for (const ValueRef& v : g.node(id).inputs) {
      if (std::find(members.begin(), members.end(), v.node) != members.end()) continue;
      if (read_directly(g.type(v), shape)) continue;
      if (std::find(ext.begin(), ext.end(), v) == ext.end()) ext.push_back(v);
    }
  return int(members.size() + ext.size());
}

// ---------------- the program of a group ----------------

struct GroupProgram {
  std::vector<Instr> prog;
  std::vector<InputDesc> descs;
  using Tiles = float[kMaxBuf][kTile];

  // The scalar inputs' tiles, filled once per thread.
  void fill_scalars(const void* const* in, Tiles& regs, int64_t fill) const {
    for (size_t k = 0; k < descs.size(); ++k)
      if (descs[k].scalar) std::fill(regs[descs[k].buf], regs[descs[k].buf] + fill, load_one(descs[k].kind, in[k], 0));
  }

  // The root's values at flat positions [t, t + m): written to `dst` when given (float32 root),
  // else left in the root's tile, unrounded.
  void eval(const void* const* in, int64_t t, int64_t m, Tiles& regs, float* dst) const {
    for (size_t k = 0; k < descs.size(); ++k)
      if (!descs[k].direct && !descs[k].scalar) load_tile(descs[k], in[k], t, m, regs[descs[k].buf]);
    auto arg = [&](int r, bool& scalar) -> const float* {
      scalar = false;
      if (r >= 0) return regs[r];
      const size_t k = size_t(-r - 1);
      scalar = descs[k].scalar;
      return descs[k].direct ? static_cast<const float*>(in[k]) + t : regs[descs[k].buf];
    };
    for (size_t i = 0; i < prog.size(); ++i) {
      const Instr& ins = prog[i];
      const size_t ar = arity(ins.op);
      bool sc[3] = {false, false, false};
      const float* pa = arg(ins.arg[0], sc[0]);
      const float* pb = ar > 1 ? arg(ins.arg[1], sc[1]) : nullptr;
      const float* pc = ar > 2 ? arg(ins.arg[2], sc[2]) : nullptr;
      const bool last = i + 1 == prog.size();
      float* r = last && dst ? dst : regs[i];
      run_instr(ins, r, pa, pb, pc, sc, m);
      if (!last) round_to(ins.out, r, m);
    }
  }

  // The root's values as the unfused kernel stores them (float16/bfloat16 rounded), in its tile.
  const float* eval_rounded(const void* const* in, int64_t t, int64_t m, Tiles& regs) const {
    eval(in, t, m, regs, nullptr);
    float* r = regs[prog.size() - 1];
    round_to(prog.back().out, r, m);
    return r;
  }
};

// ---------------- a reduction ending the group ----------------
// The reduction a group ends in adds the root's values in the order its own kernel does
// (kernels_reduction.cpp, sum_to_like in kernels_autodiff.cpp), so the bits are the same.

enum class Red : uint8_t { Sum, Prod, Mean, Max, Min, SumTo };

const std::map<std::string, Red>& red_table() {
  static const std::map<std::string, Red> t = {{"reduction_sum", Red::Sum},     {"reduction_product", Red::Prod},
                                               {"mean", Red::Mean},             {"reduction_maximum", Red::Max},
                                               {"reduction_minimum", Red::Min}, {"sum_to_like", Red::SumTo}};
  return t;
}

// The reduced axes of a reduction node over its input.
std::vector<int64_t> reduced_axes(const Graph& g, const Node& n, Red op) {
  if (op != Red::SumTo) return typed_attrs<ops::ReductionAttrs>(n).axes;
  const Shape& x = g.type(n.inputs[0]).shape;
  const Shape& y = n.outputs[0].shape;
  std::vector<int64_t> axes;
  const size_t lead = x.size() - y.size();
  for (size_t d = 0; d < x.size(); ++d)
    if (d < lead || (y[d - lead] == 1 && x[d] != 1)) axes.push_back(int64_t(d));
  return axes;
}

// A reduction that can end a group: a float32/float16/bfloat16 input (and output of that
// dtype) whose walk is a trailing or leading run.
bool reduction_fits(const Graph& g, const Node& n, ReduceWalk* walk) {
  auto it = red_table().find(n.op->name);
  if (it == red_table().end() || n.inputs.size() != 1 || n.outputs.size() != 1 || !n.regions.empty()) return false;
  const TensorType& x = g.type(n.inputs[0]);
  if (!is_float(kind_of(x.dtype)) || n.outputs[0].dtype != x.dtype || num_elements(x.shape) <= 0) return false;
  if (it->second == Red::SumTo && (x.shape.size() < n.outputs[0].shape.size() || x.shape == n.outputs[0].shape))
    return false;  // the same type passes through without a step
  const ReduceWalk w = reduce_walk(x.shape, reduced_axes(g, n, it->second));
  if (walk) *walk = w;
  return w.simple;
}

// Accumulators: sums and products in double, maximum / minimum in float (as the kernels).
template <bool Prod>
struct SumAcc {
  using Acc = double;
  static Acc init() { return Prod ? 1.0 : 0.0; }
  static void add(Acc& a, float v) { a = Prod ? a * double(v) : a + double(v); }
  static void combine(Acc& a, Acc b) { a = Prod ? a * b : a + b; }
  static void add_row(Acc* a, const float* v, int64_t m) {
    for (int64_t j = 0; j < m; ++j) a[j] = Prod ? a[j] * double(v[j]) : a[j] + double(v[j]);
  }

  // One contiguous run of n values fed in pieces (the kernel's lanes(): eight lanes for
  // n >= 16, value i to lane i % 8, lanes folded in halves; shorter runs add in order).
  struct Run {
    Acc a = init(), b[8];
    bool lanes;
    int64_t i = 0;
    explicit Run(int64_t n) : lanes(n >= 16) {
      for (Acc& x : b) x = init();
    }
    void feed(const float* v, int64_t m) {
      if (!lanes) {
        for (int64_t j = 0; j < m; ++j) add(a, v[j]);
        i += m;
        return;
      }
      int64_t j = 0;
      if ((i & 7) == 0)
        for (; j + 8 <= m; j += 8)
          for (int l = 0; l < 8; ++l) add(b[l], v[j + l]);
      for (; j < m; ++j) add(b[(i + j) & 7], v[j]);
      i += m;
    }
    Acc finish() {
      if (lanes) {
        for (int w = 4; w >= 1; w /= 2)
          for (int l = 0; l < w; ++l) combine(b[l], b[l + w]);
        combine(a, b[0]);
      }
      return a;
    }
  };
};

template <bool Max>
struct ExtAcc {
  using Acc = float;
  static Acc init() { return Max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity(); }
  static void combine(Acc& a, Acc v) {  // a NaN is taken (ExtP::combine)
    const bool take = (Max ? (v > a) : (v < a)) | (v != v);
    a = take ? v : a;
  }
  static void add(Acc& a, float v) { combine(a, v); }
  static void add_row(Acc* a, const float* v, int64_t m) {
    for (int64_t j = 0; j < m; ++j) combine(a[j], v[j]);
  }
  static float lane(float y, float x) { return (Max ? (x > y) : (x < y)) ? x : y; }  // NaN x: y stays

  // One contiguous run (ExtP::run): for n >= 32, sixteen lanes of selects over the first
  // n - n % 16 values, folded into a in lane order; then the rest in order; then, when the
  // lanes saw a NaN, the first NaN once more.
  struct Run {
    Acc a = init(), b[16];
    bool lanes, folded = false, nan = false;
    float first_nan = 0;
    int64_t i = 0, main_end;
    explicit Run(int64_t n) : lanes(n >= 32), main_end(n - n % 16) {
      for (Acc& x : b) x = init();
    }
    void fold() {
      for (const Acc& x : b) combine(a, x);
      folded = true;
    }
    void feed(const float* v, int64_t m) {
      if (!lanes) {
        for (int64_t j = 0; j < m; ++j) combine(a, v[j]);
        i += m;
        return;
      }
      const int64_t in_main = std::max<int64_t>(0, std::min(m, main_end - i));
      int32_t seen = 0;
      int64_t j = 0;
      if ((i & 15) == 0)
        for (; j + 16 <= in_main; j += 16)
          for (int l = 0; l < 16; ++l) {
            b[l] = lane(b[l], v[j + l]);
            seen |= int32_t(v[j + l] != v[j + l]);
          }
      for (; j < in_main; ++j) {
        b[(i + j) & 15] = lane(b[(i + j) & 15], v[j]);
        seen |= int32_t(v[j] != v[j]);
      }
      if (seen && !nan)
        for (j = 0; j < in_main; ++j)
          if (v[j] != v[j]) {
            first_nan = v[j];
            nan = true;
            break;
          }
      for (j = in_main; j < m; ++j) {
        if (!folded) fold();
        combine(a, v[j]);
      }
      i += m;
    }
    Acc finish() {
      if (!lanes) return a;
      if (!folded) fold();
      if (nan) combine(a, first_nan);
      return a;
    }
  };
};

struct ReduceTail {
  Red op = Red::Sum;
  Kind out = Kind::F32;
  ReduceWalk walk;
};

template <class A>
float emit_value(const ReduceTail& tail, typename A::Acc a) {
  if (tail.op == Red::Mean) return float(double(a) / double(tail.walk.num_red));
  return float(a);
}

void store_one(Kind k, void* o, int64_t i, float v) {
  if (k == Kind::F16) static_cast<uint16_t*>(o)[i] = float_to_half(v);
  else if (k == Kind::BF16) static_cast<uint16_t*>(o)[i] = float_to_bf16(v);
  else static_cast<float*>(o)[i] = v;
}

// ---------------- the tile loops, compiled per ISA ----------------
// A job's units(b, e) is all of a thread's tile work: loads, each instruction's loop, the
// rounding, the stores or the reduction's adds. Each entry below inlines the whole of it
// (flatten) under one target, and a kernel calls the widest one the CPU runs (best_isa). The
// file is built with -ffp-contract=off: no variant fuses a multiply and an add, so every ISA
// gives the unfused kernels' bits (each instruction is its own loop now, so nothing would
// contract yet; the flag keeps it so for loops that join instructions).

#if defined(__GNUC__)
#define MG_FLATTEN __attribute__((flatten))
#else
#define MG_FLATTEN
#endif

template <class Job>
MG_FLATTEN void units_generic(const Job& job, int64_t b, int64_t e) {
  job.units(b, e);
}
#if MG_CPU_X86
template <class Job>
MG_TARGET_AVX2 MG_FLATTEN void units_avx2(const Job& job, int64_t b, int64_t e) {
  job.units(b, e);
}
template <class Job>
MG_TARGET_AVX512 MG_FLATTEN void units_avx512(const Job& job, int64_t b, int64_t e) {
  job.units(b, e);
}
#endif

template <class Job>
using UnitsFn = void (*)(const Job&, int64_t, int64_t);

template <class Job>
UnitsFn<Job> units_for_cpu() {
#if MG_CPU_X86
  if (best_isa() == Isa::Avx512) return units_avx512<Job>;
  if (best_isa() == Isa::Avx2) return units_avx2<Job>;
#endif
  return units_generic<Job>;
}

// The group's values at flat positions [b, e), stored to out.
struct ElementwiseJob {
  const GroupProgram& gp;
  const void* const* in;
  void* out;
  void units(int64_t b, int64_t e) const {
    const Kind out_kind = gp.prog.back().out;
    GroupProgram::Tiles regs;
    gp.fill_scalars(in, regs, std::min(kTile, e - b));
    for (int64_t t = b; t < e; t += kTile) {
      const int64_t m = std::min(kTile, e - t);
      gp.eval(in, t, m, regs, out_kind == Kind::F32 ? static_cast<float*>(out) + t : nullptr);
      if (out_kind != Kind::F32) store(out_kind, regs[gp.prog.size() - 1], out, t, m);
    }
  }
};

// What a reduction's units share: a unit is one chunk of one output (trailing walk) or of one
// block of outputs (leading walk).
template <class A>
struct ReduceJob {
  using Acc = typename A::Acc;
  const GroupProgram& gp;
  const ReduceTail& tail;
  bool in_order;
  int chunks;
  int64_t per;
  Acc* part;  // chunk c's value of output o at c * num_out + o, when chunks > 1
  const void* const* in;
  void* out;

  void emit(int64_t o, Acc a) const { store_one(tail.out, out, o, emit_value<A>(tail, a)); }
  void keep(int c, int64_t o, Acc a) const {
    if (chunks > 1) part[c * tail.walk.num_out + o] = a;
    else emit(o, a);
  }
};

// trailing: output o reduces positions o * num_red + [rb, re) as one contiguous run
template <class A>
struct TrailingJob : ReduceJob<A> {
  void units(int64_t ub, int64_t ue) const {
    const ReduceWalk& w = this->tail.walk;
    GroupProgram::Tiles regs;
    this->gp.fill_scalars(this->in, regs, kTile);
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t o = u / this->chunks, c = u % this->chunks;
      const int64_t rb = std::min(w.num_red, c * this->per), re = std::min(w.num_red, rb + this->per);
      typename A::Acc a = A::init();
      if (this->in_order) {
        for (int64_t t = rb; t < re; t += kTile) {
          const int64_t m = std::min(kTile, re - t);
          const float* v = this->gp.eval_rounded(this->in, o * w.num_red + t, m, regs);
          for (int64_t j = 0; j < m; ++j) A::add(a, v[j]);
        }
      } else {
        typename A::Run run(re - rb);
        for (int64_t t = rb; t < re; t += kTile) {
          const int64_t m = std::min(kTile, re - t);
          run.feed(this->gp.eval_rounded(this->in, o * w.num_red + t, m, regs), m);
        }
        a = run.finish();
      }
      this->keep(int(c), o, a);
    }
  }
};

// leading: each output adds reduce index r's value at r * num_out + o, in order of r; blocks
// of outputs as wide as the kernel's, so each r reads whole rows
template <class A>
struct LeadingJob : ReduceJob<A> {
  void units(int64_t ub, int64_t ue) const {
    const ReduceWalk& w = this->tail.walk;
    GroupProgram::Tiles regs;
    this->gp.fill_scalars(this->in, regs, kTile);
    typename A::Acc a[kLeadBlock];
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t blk = u / this->chunks, c = u % this->chunks;
      const int64_t o0 = blk * kLeadBlock, nb = std::min(kLeadBlock, w.num_out - o0);
      const int64_t rb = std::min(w.num_red, c * this->per), re = std::min(w.num_red, rb + this->per);
      std::fill(a, a + nb, A::init());
      for (int64_t r = rb; r < re; ++r)
        for (int64_t j = 0; j < nb; j += kTile) {
          const int64_t m = std::min(kTile, nb - j);
          A::add_row(a + j, this->gp.eval_rounded(this->in, r * w.num_out + o0 + j, m, regs), m);
        }
      for (int64_t j = 0; j < nb; ++j) this->keep(int(c), o0 + j, a[j]);
    }
  }
};

// The group, then the reduction of its root's values into out[0].
template <class A>
KernelFn make_reduce_kernel(const GroupProgram& gp, const ReduceTail& tail) {
  using Acc = typename A::Acc;
  const ReduceWalk w = tail.walk;
  // sum_to_like adds every output's values in order, on one run
  const bool in_order = tail.op == Red::SumTo;
  const int chunks = in_order ? 1 : w.chunks;
  const int64_t per = (w.num_red + chunks - 1) / chunks;
  auto partial = std::make_shared<std::vector<Acc>>(chunks > 1 ? size_t(chunks) * size_t(w.num_out) : 0);
  const UnitsFn<TrailingJob<A>> trailing = units_for_cpu<TrailingJob<A>>();
  const UnitsFn<LeadingJob<A>> leading = units_for_cpu<LeadingJob<A>>();
  return [gp, tail, in_order, chunks, per, partial, trailing, leading](const void* const* in, void* const* out) {
    const ReduceWalk& w = tail.walk;
    const ReduceJob<A> job{gp, tail, in_order, chunks, per, partial->data(), in, out[0]};
    if (!w.inner_kept) {
      const TrailingJob<A> tj{job};
      parallel_for(w.num_out * chunks, std::max<int64_t>(1, 32768 / w.num_red),
                   [&](int64_t ub, int64_t ue) { trailing(tj, ub, ue); });
    } else {
      const LeadingJob<A> lj{job};
      const int64_t nblk = (w.num_out + kLeadBlock - 1) / kLeadBlock;
      parallel_for(nblk * chunks, std::max<int64_t>(1, 32768 / (w.num_red * std::min(kLeadBlock, w.num_out))),
                   [&](int64_t ub, int64_t ue) { leading(lj, ub, ue); });
    }
    if (chunks > 1)  // the parts of each output, combined in order
      for (int64_t o = 0; o < w.num_out; ++o) {
        Acc a = partial->data()[o];
        for (int c = 1; c < chunks; ++c) A::combine(a, partial->data()[c * w.num_out + o]);
        job.emit(o, a);
      }
  };
}

}  // namespace

// Read at each compile; tests compare both.
bool cpu_fusion_enabled() {
  const char* e = std::getenv("MPSGRAPH_CPU_FUSION");
  return !(e && e[0] == '0');
}

FusionPlan plan_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip) {
  if (!cpu_fusion_enabled()) return FusionPlan{std::vector<int32_t>(g.size(), -1), {}};
  FusionRules rules;
  rules.fusible = [&g](const Node& n) { return fusible(g, n); };
  rules.fits = [&g](const std::vector<int32_t>& members) {
    return members.size() <= size_t(kMaxInstr) &&
           buffers_needed(g, members, g.node(members.front()).outputs[0].shape) <= kMaxBuf;
  };
  FusionPlan p = plan_fusion_groups(g, targets, skip, rules);
  // A reduction whose input only it reads, made by a group's root (or a lone fusible node),
  // joins that group as its new root: the values are reduced as they are made.
  std::vector<int64_t> uses(g.size(), 0);
  for (size_t id = 0; id < g.size(); ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) ++uses[size_t(v.node)];
  for (const ValueRef& v : targets) uses[size_t(v.node)] += 2;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    if (skip[id] || p.group_of[id] >= 0 || !reduction_fits(g, n, nullptr)) continue;
    const int32_t src = n.inputs[0].node;
    if (uses[size_t(src)] != 1 || skip[size_t(src)] || !fusible(g, g.node(src))) continue;
    int gid = p.group_of[size_t(src)];
    if (gid >= 0 && p.groups[size_t(gid)].back() != src) continue;
    if (gid < 0) {
      std::vector<int32_t> one{src};
      if (buffers_needed(g, one, g.node(src).outputs[0].shape) > kMaxBuf) continue;
      gid = int(p.groups.size());
      p.groups.push_back(std::move(one));
      p.group_of[size_t(src)] = gid;
    }
    p.groups[size_t(gid)].push_back(int32_t(id));
    p.group_of[id] = gid;
  }
  return p;
}

KernelFn make_fused_kernel(const Graph& g, const std::vector<int32_t>& group, std::vector<ValueRef>& inputs) {
  // a reduction at the end reduces the elementwise root's values
  const Node& last = g.node(group.back());
  ReduceTail tail;
  const bool reduces = red_table().count(last.op->name) > 0;
  const std::vector<int32_t> nodes(group.begin(), group.end() - (reduces ? 1 : 0));
  const Shape& shape = g.node(nodes.back()).outputs[0].shape;
  GroupProgram gp;
  std::vector<Instr>& prog = gp.prog;
  std::vector<InputDesc>& descs = gp.descs;
  std::map<int32_t, int> reg_of;
  inputs.clear();
  const int nprog = int(nodes.size());
  int nbuf = nprog;
  auto operand = [&](const ValueRef& v) {
    auto it = reg_of.find(v.node);
    if (it != reg_of.end()) return it->second;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k] == v) return -int(k) - 1;
    inputs.push_back(v);
    const TensorType& t = g.type(v);
    InputDesc d;
    d.kind = kind_of(t.dtype);
    d.scalar = num_elements(t.shape) == 1;
    d.direct = read_directly(t, shape);
    if (!d.direct) {
      d.buf = nbuf++;
      const BroadcastPlan bp = make_broadcast_plan(shape, {t.shape});
      d.dims = bp.shape;
      for (const auto& s : bp.strides) d.strides.push_back(s[0]);
    }
    descs.push_back(std::move(d));
    return -int(inputs.size());
  };
  for (int32_t id : nodes) {
    const Node& nd = g.node(id);
    Instr in{op_table().at(nd.op->name), kind_of(nd.outputs[0].dtype)};
    for (size_t k = 0; k < nd.inputs.size(); ++k) in.arg[k] = operand(nd.inputs[k]);
    reg_of[id] = int(prog.size());
    prog.push_back(in);
  }
  if (nbuf > kMaxBuf) raise(ErrorKind::Runtime, "fusion", last.name, "fused group needs too many tiles");
  if (reduces) {
    tail.op = red_table().at(last.op->name);
    tail.out = kind_of(last.outputs[0].dtype);
    if (!reduction_fits(g, last, &tail.walk))
      raise(ErrorKind::Runtime, "fusion", last.name, "the reduction cannot end a fused group");
    switch (tail.op) {
      case Red::Max: return make_reduce_kernel<ExtAcc<true>>(gp, tail);
      case Red::Min: return make_reduce_kernel<ExtAcc<false>>(gp, tail);
      case Red::Prod: return make_reduce_kernel<SumAcc<true>>(gp, tail);
      default: return make_reduce_kernel<SumAcc<false>>(gp, tail);
    }
  }
  const int64_t total = num_elements(shape);
  const UnitsFn<ElementwiseJob> units = units_for_cpu<ElementwiseJob>();
  return [gp, total, units](const void* const* in, void* const* out) {
    const ElementwiseJob job{gp, in, out[0]};
    parallel_for(total, 16384, [&](int64_t b, int64_t e) { units(job, b, e); });
  };
}

}  // namespace mg::cpu
