// Generated elementwise kernels on CUDA: one op's expression comes from one place
// (node_expr), and one generator (make_elementwise) builds the kernel of a single node or of
// a fused group of them (fusion_cuda.cpp), so fusing never changes a result.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/graph.h"
#include "runtime/fusion_groups.h"

namespace mg::cuda {

// Dims of `out` merged where every operand is contiguous across them, with each operand's
// strides (0 on broadcast dims); at least one dim.
struct Collapsed {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> stride;
};
Collapsed collapse_dims(const Shape& out, const std::vector<Shape>& ins);

// One op's value as a CUDA expression over x, y, z: x of the compute type of in[0], y and z
// of `compute`'s (typedef C). Empty where the op has no kernel for these dtypes.
struct NodeExpr {
  DType compute;
  std::string expr;
};
NodeExpr node_expr(const std::string& op, const std::vector<DType>& in, DType out);

// A node of a generated kernel: operands >= 0 are earlier nodes, < 0 input -(k + 1).
struct EwNode {
  std::string op;
  std::vector<int> arg;
  std::vector<DType> in;
  DType out;
};
constexpr int kMaxFusedInputs = 128;  // kernel parameters stay well under CUDA's 4 KiB

// The kernel computing `nodes` (the last is the result) over `shape` from `inputs`, each of a
// shape that broadcasts to it. float16/bfloat16 values are rounded after every node.
LaunchFn make_elementwise(const std::vector<EwNode>& nodes, const std::vector<TensorType>& inputs, const Shape& shape);

// The value of `nodes` (as make_elementwise computes it) at any index of `shape`, for kernels
// that read a fused group's result where they need it (a pooling window's taps) instead of
// from memory: `source` defines `f` (after prelude() and `typedef ... I;`). With `lanes` > 1
// (where the broadcast operands allow it, else `lanes` is 1) a thread computes `lanes`
// consecutive elements from index i0 (a multiple of lanes): `call(i0, j)` is element i0 + j,
// reading each direct input k from a Pack `l<k>` the caller loaded at i0; with 1 lane
// `call(i, "0")` reads input k at a<k>[i]. Scalar and broadcast inputs come as pointers a<k>.
struct ElementFn {
  std::string source;
  std::function<std::string(const std::string&, const std::string&)> call;
  DType out = DType::Float32;
  int lanes = 1;
  std::vector<int> direct;  // the inputs read at the element's own index
};
ElementFn element_fn(const std::vector<EwNode>& nodes, const std::vector<TensorType>& inputs, const Shape& shape, int lanes = 1);

// Forward pools (max/avg/sum_pooling_nd, pooling_cuda.cpp) that compute their input at each
// window tap with an ElementFn: pool_takes_prologue says whether `pool`'s windows overlap little
// enough (each input element computed 4 times or fewer, on average) and the
// specialised kernels run it; pool_with_prologue's launch reads the group's outside inputs
// (c.in, in fused_group_fn's order) and writes the pool's result. `input_shape` is the pool's input's.
bool pool_takes_prologue(const Node& pool, const TensorType& input);
LaunchFn pool_with_prologue(const KernelCtx& c, const Shape& input_shape, const Graph& g, const std::vector<int32_t>& group);

// Reductions (reduction_cuda.cpp) that read their source as an elementwise group's value,
// computed at each element (ElementFn), so the group's result never goes to memory:
// reduction_takes_prologue says which ops can (none with MPSGRAPH_CUDA_REDUCTION_PROLOGUES=0);
// reduction_with_prologue's launch reads the group's outside inputs (c.in, in fused_group_fn's
// order). `input` is the reduction's source type.
bool reduction_takes_prologue(const Node& reduction);
LaunchFn reduction_with_prologue(const KernelCtx& c, const TensorType& input, const Graph& g,
                                 const std::vector<int32_t>& group);

// A depthwise convolution (its KernelCtx `conv`) that stores `fn`'s value instead of its own:
// fn's input `conv_arg` is the convolution's result, read at the same index (a channels-last
// result whose one reader is fn's group). The launch reads (x, w, fn's other inputs in order)
// and writes the group's result; its scratch is conv.scratch's. Empty where the depthwise kernel does not take the
// convolution (conv_cuda.cpp) or fn does not run in its lanes.
LaunchFn depthwise_with_epilogue(const KernelCtx& conv, const ElementFn& fn, const std::vector<TensorType>& fn_inputs, int conv_arg);

// A float16/bfloat16 convolution (its KernelCtx `conv`, result channels-last) whose result's one
// reader is the elementwise group `nodes` (outside inputs `inputs`, input `conv_arg` being the
// convolution's result; `constant[k]` input k's value where it is a one-element constant, else
// NaN): one cuDNN operation graph (conv_cuda.cpp). The launch reads (x, w, the group's other
// inputs in order) and writes the group's result. Empty where cuDNN's graph API does not take it.
LaunchFn conv_with_pointwise(const KernelCtx& conv, const std::vector<EwNode>& nodes, const std::vector<TensorType>& inputs,
                             const std::vector<double>& constant, int conv_arg);

// Fusion groups of the CUDA backend (MPSGRAPH_CUDA_FUSION=0 at compile time: none); nodes
// marked in `skip` (claimed by matmul epilogues) stay out of groups.
FusionPlan plan_cuda_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip);
// The kernel of one group; `inputs` receives the values it reads, in the kernel's input order.
LaunchFn make_fused_group(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs);
// The same group's nodes as make_elementwise takes them; `inputs` and `types` as above.
std::vector<EwNode> fused_group_nodes(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs,
                                      std::vector<TensorType>& types);
// The same group's value as an ElementFn; `inputs` as above.
ElementFn fused_group_fn(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs, int lanes = 1);
// The values the group reads from outside, in its kernels' input order.
std::vector<ValueRef> fused_group_inputs(const Graph& g, const std::vector<int32_t>& nodes);
// Whether node `id` can be computed by an element function (an elementwise node of a dtype the
// generated kernels take): a lone such node is a group of one.
bool cuda_fusible(const Graph& g, int32_t id);

}  // namespace mg::cuda
