// Convolution and matrix product epilogues (see conv_epilogue.h). Each op computes exactly as its own kernel does
// (one float32 rounding per op, the same NaN rules), so fusing never changes a result.
#include "backends/cpu/conv_epilogue.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/elementwise_kernels.h"
#include "backends/cpu/fused_elementwise.h"
#include "backends/cpu/vec_math.h"
#include "core/ops/pooling_attrs.h"
#include "core/ops/pooling_geom.h"
#include "core/shape.h"
#include "core/typed_attrs.h"

namespace mg::cpu {

namespace {

using Kind = EpilogueOp::Kind;
using Arg = EpilogueOp::Arg;

constexpr int64_t kChunk = 512;

// The other operand's role against the output shape, or None when it is none of them:
// against a convolution's (N, O, P...) a channel is dim 1; against a matrix product's
// (..., M, N) a channel is a row (dim -2) and Inner a column (dim -1).
Arg classify(const TensorType& t, const Shape& out, bool matmul) {
  if (t.dtype != DType::Float32) return Arg::None;
  if (num_elements(t.shape) == 1) return Arg::Scalar;
  if (t.shape == out) return Arg::Full;
  if (t.shape.size() > out.size()) return Arg::None;
  Shape s(out.size() - t.shape.size(), 1);
  s.insert(s.end(), t.shape.begin(), t.shape.end());
  auto only = [&](size_t d) {
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != (i == d ? out[d] : 1)) return false;
    return true;
  };
  if (!matmul) return only(1) ? Arg::Channel : Arg::None;
  if (only(out.size() - 1)) return Arg::Inner;
  return only(out.size() - 2) ? Arg::Channel : Arg::None;
}

bool binary_kind(const std::string& op, Kind& k) {
  if (op == "addition") k = Kind::Add;
  else if (op == "subtraction") k = Kind::Sub;
  else if (op == "multiplication") k = Kind::Mul;
  else if (op == "maximum") k = Kind::Max;
  else if (op == "minimum") k = Kind::Min;
  else return false;
  return true;
}

bool unary_kind(const std::string& op, Kind& k) {
  if (op == "relu") k = Kind::Relu;
  else if (op == "sigmoid") k = Kind::Sigmoid;
  else if (op == "tanh") k = Kind::Tanh;
  else return false;
  return true;
}

// The epilogue op node r applies to the chain value `cur`; operands (in r's input order) go to
// `operands`. False when r cannot join the chain.
bool describe(const Graph& g, const Node& r, ValueRef cur, const Shape& out, bool matmul, EpilogueOp& op,
              std::vector<ValueRef>& operands) {
  if (r.outputs.size() != 1 || !r.regions.empty() || r.outputs[0].dtype != DType::Float32 ||
      r.outputs[0].shape != out)
    return false;
  const std::string& name = r.op->name;
  if (unary_kind(name, op.kind)) return r.inputs.size() == 1 && r.inputs[0] == cur;
  if (name == "clamp") {
    if (r.inputs.size() != 3 || r.inputs[0] != cur) return false;
    if (classify(g.type(r.inputs[1]), out, matmul) != Arg::Scalar ||
        classify(g.type(r.inputs[2]), out, matmul) != Arg::Scalar)
      return false;
    op.kind = Kind::Clamp;
    op.arg = Arg::Scalar;
    operands = {r.inputs[1], r.inputs[2]};
    return true;
  }
  if (!binary_kind(name, op.kind) || r.inputs.size() != 2) return false;
  op.other_first = r.inputs[1] == cur;
  const ValueRef other = r.inputs[op.other_first ? 0 : 1];
  if (other == cur || (r.inputs[0] != cur && r.inputs[1] != cur)) return false;
  op.arg = classify(g.type(other), out, matmul);
  operands = {other};
  return op.arg != Arg::None;
}

inline float relu(float x) { return x <= 0.0f ? 0.0f : x; }  // NaN stays (as the relu kernel)

template <class F>
inline void binary(float* r, int64_t m, bool other_first, const float* full, float s, F f) {
  if (full) {
    if (other_first)
      for (int64_t j = 0; j < m; ++j) r[j] = f(full[j], r[j]);
    else
      for (int64_t j = 0; j < m; ++j) r[j] = f(r[j], full[j]);
  } else if (other_first) {
    for (int64_t j = 0; j < m; ++j) r[j] = f(s, r[j]);
  } else {
    for (int64_t j = 0; j < m; ++j) r[j] = f(r[j], s);
  }
}

// maximum / minimum against a value s that is not NaN, branch-free (a NaN x stays, as in Max/Min)
inline void max_scalar(float* r, int64_t m, bool s_first, float s) {
  if (s_first)
    for (int64_t j = 0; j < m; ++j) r[j] = r[j] < s ? s : r[j];
  else
    for (int64_t j = 0; j < m; ++j) r[j] = r[j] <= s ? s : r[j];
}
inline void min_scalar(float* r, int64_t m, bool s_first, float s) {
  if (s_first)
    for (int64_t j = 0; j < m; ++j) r[j] = s < r[j] ? s : r[j];
  else
    for (int64_t j = 0; j < m; ++j) r[j] = r[j] >= s ? s : r[j];
}

void max_min(float* r, int64_t m, bool is_max, bool other_first, const float* full, float s) {
  if (!full && !std::isnan(s)) return is_max ? max_scalar(r, m, other_first, s) : min_scalar(r, m, other_first, s);
  if (is_max) binary(r, m, other_first, full, s, elementwise::Max());
  else binary(r, m, other_first, full, s, elementwise::Min());
}

// r holds m values of channel o from flat index `at`, position p within the row.
void run_op(const EpilogueOp& op, float* r, int64_t m, const float* const* in, int64_t o, int64_t at, int64_t p) {
  const float* full = op.arg == Arg::Full ? in[op.input] + at : op.arg == Arg::Inner ? in[op.input] + p : nullptr;
  const float s = op.arg == Arg::Scalar ? in[op.input][0] : op.arg == Arg::Channel ? in[op.input][o] : 0.0f;
  switch (op.kind) {
    case Kind::Add: return binary(r, m, op.other_first, full, s, [](float x, float y) { return x + y; });
    case Kind::Sub: return binary(r, m, op.other_first, full, s, [](float x, float y) { return x - y; });
    case Kind::Mul: return binary(r, m, op.other_first, full, s, [](float x, float y) { return x * y; });
    case Kind::Max: return max_min(r, m, true, op.other_first, full, s);
    case Kind::Min: return max_min(r, m, false, op.other_first, full, s);
    case Kind::Clamp:  // as the clamp kernel: maximum with lo, then minimum with hi
      max_min(r, m, true, false, nullptr, in[op.input][0]);
      return max_min(r, m, false, false, nullptr, in[op.input + 1][0]);
    case Kind::Relu:
      for (int64_t j = 0; j < m; ++j) r[j] = relu(r[j]);
      return;
    case Kind::Sigmoid: case Kind::Tanh: {
      float tmp[kChunk];  // the vector functions do not work in place
      std::memcpy(tmp, r, size_t(m) * sizeof(float));
      vmath::array_fn(op.kind == Kind::Sigmoid ? vmath::Fn::Sigmoid : vmath::Fn::Tanh)(tmp, r, m);
      return;
    }
  }
}

}  // namespace

void ConvEpilogue::apply(float* y, const float* const* in, int64_t n, int64_t o0, int64_t o1, int64_t p0,
                         int64_t p1, size_t from) const {
  const int64_t len = p1 - p0;
  if (from >= ops.size() || len <= 0 || o1 <= o0) return;
  parallel_for(o1 - o0, std::max<int64_t>(1, 32768 / len), [&](int64_t a, int64_t b) {
    for (int64_t o = o0 + a; o < o0 + b; ++o) {
      const int64_t row = (n * O + o) * P + p0;
      for (int64_t j = 0; j < len; j += kChunk) {
        const int64_t m = std::min(kChunk, len - j);
        for (size_t k = from; k < ops.size(); ++k) run_op(ops[k], y + row + j, m, in, o, row + j, p0 + j);
      }
    }
  });
}

void ConvEpilogue::apply_block(float* b, int64_t plane, const float* const* in, int64_t o0, int64_t o1, int64_t len,
                               size_t from) const {
  for (int64_t o = o0; o < o1; ++o)
    for (int64_t j = 0; j < len; j += kChunk) {
      const int64_t m = std::min(kChunk, len - j);
      for (size_t k = from; k < ops.size(); ++k) run_op(ops[k], b + o * plane + j, m, in, o, 0, 0);
    }
}

void ConvEpilogue::pool_block(const float* b, int64_t plane, float* y, int64_t n, int64_t o0, int64_t o1, int64_t k0,
                              int64_t k1) const {
  const int64_t PH = OH / 2, PW = OW / 2;
  for (int64_t o = o0; o < o1; ++o)
    for (int64_t k = k0; k < k1; ++k) {
      const float* r = b + o * plane + 2 * (k - k0) * OW;
      pairs(r, r + OW, y + ((n * O + o) * PH + k) * PW, PW);
    }
}

KernelFn pool_after(KernelFn f, const ConvEpilogue& e, size_t n_out) {
  return [f = std::move(f), e, n_out](const void* const* in, void* const* out) {
    constexpr size_t kFew = 16;  // outputs and scratch held on the stack (no allocation per run)
    std::array<void*, kFew> few{};
    std::vector<void*> many(n_out > kFew ? n_out : 0);
    void** o = n_out > kFew ? many.data() : few.data();
    std::copy(out, out + n_out, o);
    o[0] = out[e.full];
    f(in, o);
    const float* full = static_cast<const float*>(o[0]);
    parallel_for(e.N * e.O, std::max<int64_t>(1, 65536 / e.P), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const int64_t n = i / e.O, c = i % e.O;
        e.pool_block(full + n * e.O * e.P, e.P, static_cast<float*>(out[0]), n, c, c + 1, 0, e.OH / 2);
      }
    });
  };
}

// A float32 matrix product of two matrices (or stacks of them) whose epilogue may be fused.
bool matmul_with_epilogue(const Node& n) {
  return n.op->name == "matrix_multiplication" && cpu_fusion_enabled() && n.inputs.size() == 2 &&
         n.outputs.size() == 1 && n.outputs[0].dtype == DType::Float32 && n.outputs[0].shape.size() >= 2 &&
         num_elements(n.outputs[0].shape) > 0;
}

// r is a 2x2 max pool at stride 2, unpadded, over the NCHW float32 value cur of shape out
// (even sizes), so that it may end cur's convolution chain.
bool pools_in_pairs(const Node& r, ValueRef cur, const Shape& out) {
  if (r.op->name != "max_pooling_nd" || r.inputs.size() != 1 || r.inputs[0] != cur || r.outputs.size() != 1 ||
      !r.regions.empty() || out.size() != 4 || out[2] % 2 != 0 || out[3] % 2 != 0 || out[2] <= 0 || out[3] <= 0)
    return false;
  const ops::PoolSpec& w = typed_attrs<ops::PoolingAttrs>(r).window;
  const std::vector<int64_t> two{2, 2}, one{1, 1};
  std::vector<ops::PoolDim> dims;
  if (w.kernel != two || w.stride != two || w.dilation != one || !ops::pool_dims(w, {out[2], out[3]}, dims).empty())
    return false;
  for (const ops::PoolDim& d : dims)
    if (d.before != 0 || d.out * 2 != d.in) return false;
  return r.outputs[0].dtype == DType::Float32 && r.outputs[0].shape == Shape{out[0], out[1], out[2] / 2, out[3] / 2};
}

EpiloguePlan plan_conv_epilogues(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip) {
  const size_t n = g.size();
  std::vector<int64_t> uses(n, 0);
  std::vector<int32_t> reader(n, -1);
  for (size_t id = 0; id < n; ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) {
      ++uses[size_t(v.node)];
      reader[size_t(v.node)] = int32_t(id);
    }
  for (const ValueRef& v : targets) uses[size_t(v.node)] += 2;  // a target is never an intermediate
  EpiloguePlan p;
  p.chain_of.assign(n, -1);
  const bool pool_tails = !switched_off("MPSGRAPH_CPU_CONV_POOL");  // (read at compile: tests compare)
  for (size_t id = 0; id < n; ++id) {
    const Node& head = g.node(int32_t(id));
    const bool conv = head.op->name == "convolution" && head.outputs.size() == 1 &&
                      head.outputs[0].dtype == DType::Float32 && head.outputs[0].shape.size() >= 3;
    const bool matmul = matmul_with_epilogue(head) && g.type(head.inputs[0]).shape.size() >= 2 &&
                        g.type(head.inputs[1]).shape.size() >= 2;
    if (skip[id] || (!conv && !matmul)) continue;
    const Shape& out = head.outputs[0].shape;
    std::vector<int32_t> chain{int32_t(id)};
    bool full_operands = false;
    for (int32_t cur = int32_t(id); uses[size_t(cur)] == 1;) {
      const int32_t r = reader[size_t(cur)];
      EpilogueOp op;
      std::vector<ValueRef> operands;
      // an add of two products' outputs joins the first one's chain only
      if (skip[size_t(r)] || p.chain_of[size_t(r)] >= 0 || !describe(g, g.node(r), {cur, 0}, out, matmul, op, operands))
        break;
      full_operands = full_operands || op.arg == Arg::Full;
      chain.push_back(r);
      cur = r;
    }
    const int32_t last = chain.back();
    if (conv && pool_tails && !full_operands && uses[size_t(last)] == 1) {
      const int32_t r = reader[size_t(last)];
      if (!skip[size_t(r)] && p.chain_of[size_t(r)] < 0 && pools_in_pairs(g.node(r), {last, 0}, out))
        chain.push_back(r);
    }
    if (chain.size() < 2) continue;
    for (int32_t m : chain) p.chain_of[size_t(m)] = int32_t(p.chains.size());
    p.chains.push_back(std::move(chain));
  }
  return p;
}

KernelFn make_conv_epilogue_kernel(const Graph& g, const std::vector<int32_t>& chain, std::vector<ValueRef>& inputs,
                                   std::vector<size_t>& scratch_bytes, const std::array<bool, 2>& transposed,
                                   const std::function<std::shared_ptr<const Array>(ValueRef)>& constant_of) {
  const Node& head = g.node(chain[0]);
  const bool matmul = head.op->name == "matrix_multiplication";
  const Shape& out = head.outputs[0].shape;
  inputs = head.inputs;
  ConvEpilogue e;
  if (matmul) {
    for (size_t k = 0; k < 2; ++k)
      if (transposed[k]) inputs[k] = g.node(inputs[k].node).inputs[0];  // the transpose's source
    e.O = out[out.size() - 2];
    e.P = out.back();
  } else {
    e.O = out[1];
    e.P = 1;
    for (size_t i = 2; i < out.size(); ++i) e.P *= out[i];
  }
  for (size_t k = 1; k < chain.size(); ++k) {
    if (g.node(chain[k]).op->name == "max_pooling_nd") {  // (the plan took it: pools_in_pairs)
      e.pool = true;
      e.N = out[0], e.OH = out[2], e.OW = out[3];
      e.pairs = pool_pairs_fn();
      break;
    }
    EpilogueOp op;
    std::vector<ValueRef> operands;
    describe(g, g.node(chain[k]), {chain[k - 1], 0}, out, matmul, op, operands);
    op.input = int(inputs.size()) - 2;
    inputs.insert(inputs.end(), operands.begin(), operands.end());
    e.ops.push_back(op);
  }
  std::vector<TensorType> in;
  for (const ValueRef& v : inputs) in.push_back(g.type(v));
  KernelCtx c{head, in, head.outputs};
  for (const ValueRef& v : inputs) c.constants.push_back(constant_of(v));
  if (e.pool) e.full = c.scratch(size_t(num_elements(out)) * sizeof(float));
  KernelFn fn = matmul ? make_matmul_kernel(c, transposed[0], transposed[1], e) : make_convolution_kernel(c, e);
  scratch_bytes = c.scratch_bytes;
  return fn;
}

}  // namespace mg::cpu
