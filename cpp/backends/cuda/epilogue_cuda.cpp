// The epilogue planner (epilogue_cuda.h). A chain is fused when each value in it is read only
// by the next node of the chain (never a target, never read twice), the weight is 2-D (one
// GEMM of all rows), the bias is (N,) or (1, ..., N) of the product's dtype, and the addition
// does not broadcast the product.
#include "backends/cuda/epilogue_cuda.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/registry.h"

namespace mg::cuda {

namespace {

bool is_bias_for(const Shape& b, const Shape& out) {
  if (b.empty() || b.size() > out.size() || b.back() != out.back()) return false;
  for (size_t d = 0; d + 1 < b.size(); ++d)
    if (b[d] != 1) return false;
  return true;
}

}  // namespace

EpiloguePlan plan_epilogues(const Graph& g, const std::vector<ValueRef>& targets) {
  EpiloguePlan plan;
  plan.absorbed.assign(g.size(), 0);
  if (switched_off("MPSGRAPH_CUDA_EPILOGUES")) return plan;
  std::map<ValueRef, int> uses;       // readers, targets counted as readers
  std::map<ValueRef, int32_t> reader;  // the last node reading the value
  for (size_t id = 0; id < g.size(); ++id)
    for (auto& v : g.node(int32_t(id)).inputs) {
      ++uses[v];
      reader[v] = int32_t(id);
    }
  for (auto& t : targets) uses[t] += 2;  // a target is never absorbed
  auto only_reader = [&](ValueRef v) { return uses[v] == 1 ? reader[v] : -1; };
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& a = g.node(int32_t(id));
    if (a.op->name != "addition" || a.inputs.size() != 2 || plan.absorbed[id]) continue;
    for (int k = 0; k < 2; ++k) {
      const ValueRef mv = a.inputs[size_t(k)], bias = a.inputs[size_t(1 - k)];
      const Node& m = g.node(mv.node);
      if (m.op->name != "matrix_multiplication" || m.inputs.size() != 2 || only_reader(mv) != int32_t(id)) continue;
      const TensorType& mt = g.type(mv);
      if (mt.dtype != DType::Float32 && mt.dtype != DType::Float16 && mt.dtype != DType::BFloat16) continue;
      if (g.type(m.inputs[1]).shape.size() != 2 || g.type(bias).dtype != mt.dtype) continue;
      if (!is_bias_for(g.type(bias).shape, mt.shape) || a.outputs[0].shape != mt.shape) continue;
      if (bias == mv) continue;
      int32_t last = int32_t(id);
      bool relu = false;
      const int32_t r = only_reader({int32_t(id), 0});
      if (r >= 0 && g.node(r).op->name == "relu" && g.node(r).inputs.size() == 1) {
        last = r;
        relu = true;
        plan.absorbed[id] = 1;
      }
      plan.absorbed[size_t(mv.node)] = 1;
      plan.fused[last] = FusedStep{{m.inputs[0], m.inputs[1], bias},
                                   [relu](const KernelCtx& c) { return matmul_bias_kernel(c, relu); }};
      break;
    }
  }
  return plan;
}

}  // namespace mg::cuda
