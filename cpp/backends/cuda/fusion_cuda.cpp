// Fused elementwise groups on CUDA: the shared grouping rule (runtime/fusion_groups.h) over the
// ops that have a generated-kernel expression, one NVRTC kernel per group (make_elementwise),
// so a chain of elementwise ops is one pass over memory and one launch.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/elementwise_cuda.h"
#include "core/dtype.h"
#include "core/registry.h"
#include "core/shape.h"

namespace mg::cuda {

namespace {

constexpr size_t kMaxNodes = 128;     // per group: the 100-op dispatch chain is one kernel
constexpr size_t kMaxBroadcast = 16;  // operands read through broadcast strides (kernel parameters)

bool fusion_enabled() {
  return !switched_off("MPSGRAPH_CUDA_FUSION");
}

// broadcast_like(x, like) in a group is x read through broadcast strides: `like` gives only
// the shape, which the group has already. Its gradients (softmax cross-entropy's) had run as
// strided copies of their own. MPSGRAPH_CUDA_FUSE_BROADCASTS=0 leaves them out of groups.
bool fuse_broadcasts() { return !switched_off("MPSGRAPH_CUDA_FUSE_BROADCASTS"); }
bool shape_only(const Node& n, size_t k) { return k == 1 && n.op->name == "broadcast_like"; }

// The operands a node reads as values, and the op its kernel expression comes from.
std::vector<ValueRef> value_inputs(const Node& n) {
  std::vector<ValueRef> r;
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (!shape_only(n, k)) r.push_back(n.inputs[k]);
  return r;
}
std::string expr_op(const Node& n) { return n.op->name == "broadcast_like" ? "identity" : n.op->name; }

std::vector<DType> value_dtypes(const Graph& g, const Node& n) {
  std::vector<DType> r;
  for (const ValueRef& v : value_inputs(n)) r.push_back(g.type(v).dtype);
  return r;
}

bool fusible(const Graph& g, const Node& n) {
  if (n.op->view || n.outputs.size() != 1 || !n.regions.empty() || n.inputs.empty()) return false;
  if (num_elements(n.outputs[0].shape) <= 0) return false;
  if (n.op->name == "broadcast_like" && !fuse_broadcasts()) return false;
  for (const ValueRef& v : n.inputs)
    if (is_complex(g.type(v).dtype) || g.type(v).dtype == DType::Float64) return false;
  return !node_expr(expr_op(n), value_dtypes(g, n), n.outputs[0].dtype).expr.empty();
}

// The values a group reads from outside, in first-use order of `members`.
std::vector<ValueRef> outside_inputs(const Graph& g, const std::vector<int32_t>& members) {
  std::vector<ValueRef> r;
  for (int32_t id : members)
    for (const ValueRef& v : value_inputs(g.node(id)))
      if (std::find(members.begin(), members.end(), v.node) == members.end() && std::find(r.begin(), r.end(), v) == r.end())
        r.push_back(v);
  return r;
}

bool fits(const Graph& g, const std::vector<int32_t>& members) {
  if (members.size() > kMaxNodes) return false;
  const std::vector<ValueRef> ins = outside_inputs(g, members);
  const int64_t n = num_elements(g.node(members.front()).outputs[0].shape);
  const size_t broadcast = size_t(std::count_if(ins.begin(), ins.end(), [&](const ValueRef& v) {
    const int64_t m = num_elements(g.type(v).shape);
    return m != 1 && m != n;
  }));
  return ins.size() <= size_t(kMaxFusedInputs) && broadcast <= kMaxBroadcast;
}

}  // namespace

FusionPlan plan_cuda_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip) {
  if (!fusion_enabled()) return FusionPlan{std::vector<int32_t>(g.size(), -1), {}};
  FusionRules rules;
  rules.fusible = [&g](const Node& n) { return fusible(g, n); };
  rules.fits = [&g](const std::vector<int32_t>& members) { return fits(g, members); };
  rules.reads = [](const Node& n, size_t k) { return !shape_only(n, k); };
  return plan_fusion_groups(g, targets, skip, rules);
}

namespace {

std::vector<EwNode> group_nodes(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs,
                                std::vector<TensorType>& types) {
  inputs = outside_inputs(g, nodes);
  std::map<int32_t, int> index_of;  // member node -> its position in the kernel
  std::vector<EwNode> ew;
  for (int32_t id : nodes) {
    const Node& nd = g.node(id);
    EwNode e{expr_op(nd), {}, value_dtypes(g, nd), nd.outputs[0].dtype};
    for (const ValueRef& v : value_inputs(nd)) {
      auto it = index_of.find(v.node);
      e.arg.push_back(it != index_of.end() ? it->second : -int(std::find(inputs.begin(), inputs.end(), v) - inputs.begin()) - 1);
    }
    index_of[id] = int(ew.size());
    ew.push_back(std::move(e));
  }
  types.clear();
  for (const ValueRef& v : inputs) types.push_back(g.type(v));
  return ew;
}

}  // namespace

LaunchFn make_fused_group(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs) {
  std::vector<TensorType> types;
  const std::vector<EwNode> ew = group_nodes(g, nodes, inputs, types);
  return make_elementwise(ew, types, g.node(nodes.back()).outputs[0].shape);
}

ElementFn fused_group_fn(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs, int lanes) {
  std::vector<TensorType> types;
  const std::vector<EwNode> ew = group_nodes(g, nodes, inputs, types);
  return element_fn(ew, types, g.node(nodes.back()).outputs[0].shape, lanes);
}

std::vector<EwNode> fused_group_nodes(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs,
                                      std::vector<TensorType>& types) {
  return group_nodes(g, nodes, inputs, types);
}

std::vector<ValueRef> fused_group_inputs(const Graph& g, const std::vector<int32_t>& nodes) { return outside_inputs(g, nodes); }

bool cuda_fusible(const Graph& g, int32_t id) { return fusion_enabled() && fusible(g, g.node(id)) && fits(g, {id}); }

}  // namespace mg::cuda
