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
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/vec_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"
#include "core/shape.h"

namespace mg::cpu {

namespace {

constexpr int kMaxInstr = 16;  // per group
constexpr int kMaxBuf = 28;    // tiles on the stack: instructions plus loaded inputs
constexpr int64_t kTile = 512;

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

// Fusion is on unless MPSGRAPH_CPU_FUSION=0 (read at each compile; tests compare both).
bool fusion_enabled() {
  const char* e = std::getenv("MPSGRAPH_CPU_FUSION");
  return !(e && e[0] == '0');
}

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

}  // namespace

FusionPlan plan_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip) {
  if (!fusion_enabled()) return FusionPlan{std::vector<int32_t>(g.size(), -1), {}};
  FusionRules rules;
  rules.fusible = [&g](const Node& n) { return fusible(g, n); };
  rules.fits = [&g](const std::vector<int32_t>& members) {
    return members.size() <= size_t(kMaxInstr) &&
           buffers_needed(g, members, g.node(members.front()).outputs[0].shape) <= kMaxBuf;
  };
  return plan_fusion_groups(g, targets, skip, rules);
}

KernelFn make_fused_kernel(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs) {
  const Shape& shape = g.node(nodes.back()).outputs[0].shape;
  std::vector<Instr> prog;
  std::vector<InputDesc> descs;
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
  if (nbuf > kMaxBuf) raise(ErrorKind::Runtime, "fusion", g.node(nodes.back()).name, "fused group needs too many tiles");
  const int64_t total = num_elements(shape);
  return [prog, descs, total](const void* const* in, void* const* out) {
    const Kind out_kind = prog.back().out;
    parallel_for(total, 16384, [&](int64_t b, int64_t e) {
      float regs[kMaxBuf][kTile];
      const int64_t fill = std::min(kTile, e - b);
      for (size_t k = 0; k < descs.size(); ++k)
        if (descs[k].scalar) std::fill(regs[descs[k].buf], regs[descs[k].buf] + fill, load_one(descs[k].kind, in[k], 0));
      for (int64_t t = b; t < e; t += kTile) {
        const int64_t m = std::min(kTile, e - t);
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
          float* r = last && out_kind == Kind::F32 ? static_cast<float*>(out[0]) + t : regs[i];
          run_instr(ins, r, pa, pb, pc, sc, m);
          if (!last) round_to(ins.out, r, m);
        }
        if (out_kind != Kind::F32) store(out_kind, regs[prog.size() - 1], out[0], t, m);
      }
    });
  };
}

}  // namespace mg::cpu
