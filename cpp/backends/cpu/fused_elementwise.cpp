// Fused elementwise groups (see fused_elementwise.h). A group is a small register program:
// each instruction runs one vectorised loop over a tile of kTile elements, reading the group's
// inputs (full arrays or scalars) or earlier instructions' tiles, and the last one writes the
// output. Every op computes exactly as its own kernel does (same functions, one float32
// rounding per op), so fusing never changes a result.
#include "backends/cpu/fused_elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/vec_math.h"
#include "core/registry.h"
#include "core/shape.h"

namespace mg::cpu {

namespace {

constexpr int kMaxInstr = 16;  // per group: kMaxInstr tiles of scratch on the stack
constexpr int64_t kTile = 512;

enum class Op : uint8_t {
  Neg, Abs, Square, Sqrt, Recip, Relu, Exp, Log, Tanh, Sigmoid, Erf,  // unary
  Add, Sub, Mul, Div, Max, Min                                      // binary
};

const std::map<std::string, Op>& op_table() {
  static const std::map<std::string, Op> t = {
      {"negative", Op::Neg},       {"absolute", Op::Abs},      {"square", Op::Square},  {"square_root", Op::Sqrt},
      {"reciprocal", Op::Recip},   {"relu", Op::Relu},         {"exponent", Op::Exp},   {"logarithm", Op::Log},
      {"tanh", Op::Tanh},          {"sigmoid", Op::Sigmoid},   {"erf", Op::Erf},        {"addition", Op::Add},
      {"subtraction", Op::Sub},    {"multiplication", Op::Mul}, {"division", Op::Div},  {"maximum", Op::Max},
      {"minimum", Op::Min}};
  return t;
}

bool is_binary(Op op) { return op >= Op::Add; }

// float32 output over the node's shape; float32 inputs of that shape or of one element.
bool fusible(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1 || n.outputs[0].dtype != DType::Float32 || !n.regions.empty()) return false;
  auto it = op_table().find(n.op->name);
  if (it == op_table().end() || n.inputs.size() != (is_binary(it->second) ? 2u : 1u)) return false;
  const Shape& s = n.outputs[0].shape;
  if (num_elements(s) <= 0) return false;
  for (const ValueRef& v : n.inputs) {
    const TensorType& t = g.type(v);
    if (t.dtype != DType::Float32 || (t.shape != s && num_elements(t.shape) != 1)) return false;
  }
  return true;
}

struct Instr {
  Op op;
  int a = 0, b = 0;  // operand: >= 0 an earlier instruction, < 0 input -(k + 1)
};

template <class F>
inline void binary(float* r, const float* a, bool sa, const float* b, bool sb, int64_t m, F f) {
  if (!sa && !sb)
    for (int64_t j = 0; j < m; ++j) r[j] = f(a[j], b[j]);
  else if (sa && !sb) {
    const float va = a[0];
    for (int64_t j = 0; j < m; ++j) r[j] = f(va, b[j]);
  } else if (!sa) {
    const float vb = b[0];
    for (int64_t j = 0; j < m; ++j) r[j] = f(a[j], vb);
  } else {
    const float v = f(a[0], b[0]);
    for (int64_t j = 0; j < m; ++j) r[j] = v;
  }
}

template <class F>
inline void unary(float* r, const float* a, bool sa, int64_t m, F f) {
  if (sa) {
    const float v = f(a[0]);
    for (int64_t j = 0; j < m; ++j) r[j] = v;
  } else {
    for (int64_t j = 0; j < m; ++j) r[j] = f(a[j]);
  }
}

inline float max_nan(float x, float y) { return (x != x || y != y) ? (x != x ? x : y) : (x > y ? x : y); }
inline float min_nan(float x, float y) { return (x != x || y != y) ? (x != x ? x : y) : (x < y ? x : y); }

void run_instr(const Instr& in, float* r, const float* a, bool sa, const float* b, bool sb, int64_t m) {
  switch (in.op) {
    case Op::Neg: return unary(r, a, sa, m, [](float x) { return -x; });
    case Op::Abs: return unary(r, a, sa, m, [](float x) { return std::fabs(x); });
    case Op::Square: return unary(r, a, sa, m, [](float x) { return x * x; });
    case Op::Sqrt: return unary(r, a, sa, m, [](float x) { return std::sqrt(x); });
    case Op::Recip: return unary(r, a, sa, m, [](float x) { return 1.0f / x; });
    case Op::Relu: return unary(r, a, sa, m, [](float x) { return x > 0 ? x : (x != x ? x : 0.0f); });
    case Op::Exp: case Op::Log: case Op::Tanh: case Op::Sigmoid: case Op::Erf: {
      const vmath::Fn fn = in.op == Op::Exp ? vmath::Fn::Exp : in.op == Op::Log ? vmath::Fn::Log
                         : in.op == Op::Tanh ? vmath::Fn::Tanh : in.op == Op::Sigmoid ? vmath::Fn::Sigmoid : vmath::Fn::Erf;
      if (sa) {
        float v;
        vmath::array_fn(fn)(a, &v, 1);
        std::fill(r, r + m, v);
      } else {
        vmath::array_fn(fn)(a, r, m);
      }
      return;
    }
    case Op::Add: return binary(r, a, sa, b, sb, m, [](float x, float y) { return x + y; });
    case Op::Sub: return binary(r, a, sa, b, sb, m, [](float x, float y) { return x - y; });
    case Op::Mul: return binary(r, a, sa, b, sb, m, [](float x, float y) { return x * y; });
    case Op::Div: return binary(r, a, sa, b, sb, m, [](float x, float y) { return x / y; });
    case Op::Max: return binary(r, a, sa, b, sb, m, max_nan);
    case Op::Min: return binary(r, a, sa, b, sb, m, min_nan);
  }
}

}  // namespace

FusionPlan plan_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip) {
  const size_t n = g.size();
  std::vector<int64_t> uses(n, 0);
  for (size_t id = 0; id < n; ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) ++uses[size_t(v.node)];
  for (const ValueRef& v : targets) uses[size_t(v.node)] += 2;  // a target is never an intermediate
  FusionPlan p;
  p.group_of.assign(n, -1);
  std::vector<std::vector<int32_t>> groups;
  for (size_t id = 0; id < n; ++id) {
    const Node& nd = g.node(int32_t(id));
    if (skip[id] || !fusible(g, nd)) continue;
    std::vector<int32_t> members{int32_t(id)};
    std::vector<int> absorbed;
    for (const ValueRef& v : nd.inputs) {
      const int gi = p.group_of[size_t(v.node)];
      if (gi < 0 || uses[size_t(v.node)] != 1 || g.type(v).shape != nd.outputs[0].shape) continue;
      if (std::find(absorbed.begin(), absorbed.end(), gi) != absorbed.end()) continue;
      if (members.size() + groups[size_t(gi)].size() > size_t(kMaxInstr)) continue;
      absorbed.push_back(gi);
      members.insert(members.end(), groups[size_t(gi)].begin(), groups[size_t(gi)].end());
    }
    std::sort(members.begin(), members.end());
    const int gid = int(groups.size());
    for (int gi : absorbed) groups[size_t(gi)].clear();
    for (int32_t m : members) p.group_of[size_t(m)] = gid;
    groups.push_back(std::move(members));
  }
  // keep groups of two or more; renumber
  std::fill(p.group_of.begin(), p.group_of.end(), -1);
  for (auto& gr : groups) {
    if (gr.size() < 2) continue;
    for (int32_t m : gr) p.group_of[size_t(m)] = int32_t(p.groups.size());
    p.groups.push_back(std::move(gr));
  }
  return p;
}

KernelFn make_fused_kernel(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs) {
  std::vector<Instr> prog;
  std::vector<char> scalar_in;  // per input: one element
  std::map<int32_t, int> reg_of;
  inputs.clear();
  auto operand = [&](const ValueRef& v) {
    auto it = reg_of.find(v.node);
    if (it != reg_of.end()) return it->second;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k] == v) return -int(k) - 1;
    inputs.push_back(v);
    scalar_in.push_back(num_elements(g.type(v).shape) == 1);
    return -int(inputs.size());
  };
  for (int32_t id : nodes) {
    const Node& nd = g.node(id);
    Instr in{op_table().at(nd.op->name)};
    in.a = operand(nd.inputs[0]);
    if (nd.inputs.size() > 1) in.b = operand(nd.inputs[1]);
    reg_of[id] = int(prog.size());
    prog.push_back(in);
  }
  const int64_t total = num_elements(g.node(nodes.back()).outputs[0].shape);
  return [prog, scalar_in, total](const void* const* in, void* const* out) {
    float* o = static_cast<float*>(out[0]);
    parallel_for(total, 16384, [&](int64_t b, int64_t e) {
      float regs[kMaxInstr][kTile];
      for (int64_t t = b; t < e; t += kTile) {
        const int64_t m = std::min(kTile, e - t);
        auto arg = [&](int r, bool& scalar) -> const float* {
          if (r >= 0) {
            scalar = false;
            return regs[r];
          }
          const size_t k = size_t(-r - 1);
          scalar = scalar_in[k] != 0;
          const float* p = static_cast<const float*>(in[k]);
          return scalar ? p : p + t;
        };
        for (size_t i = 0; i < prog.size(); ++i) {
          bool sa = false, sb = false;
          const float* pa = arg(prog[i].a, sa);
          const float* pb = is_binary(prog[i].op) ? arg(prog[i].b, sb) : nullptr;
          float* r = i + 1 == prog.size() ? o + t : regs[i];
          run_instr(prog[i], r, pa, sa, pb, sb, m);
        }
      }
    });
  };
}

}  // namespace mg::cpu
