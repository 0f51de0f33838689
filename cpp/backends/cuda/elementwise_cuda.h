// Generated elementwise kernels on CUDA: one op's expression comes from one place
// (node_expr), and one generator (make_elementwise) builds the kernel of a single node or of
// a fused group of them (fusion_cuda.cpp), so fusing never changes a result.
#pragma once
#include <cstdint>
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

// Fusion groups of the CUDA backend (MPSGRAPH_CUDA_FUSION=0 at compile time: none); nodes
// marked in `skip` (claimed by matmul epilogues) stay out of groups.
FusionPlan plan_cuda_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip);
// The kernel of one group; `inputs` receives the values it reads, in the kernel's input order.
LaunchFn make_fused_group(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs);

}  // namespace mg::cuda
