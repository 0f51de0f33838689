// cuBLASLt epilogues: matrix_multiplication + bias addition [+ relu] run as one GEMM whose
// epilogue adds the bias (and applies the relu). Planned once per program, before the other
// per-node decisions: the nodes a fused step absorbs get no step of their own (and no other
// planner may claim them), and the step of the chain's last node runs the fused GEMM.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/graph.h"

namespace mg::cuda {

struct FusedStep {
  std::vector<ValueRef> inputs;  // x, w, bias
  KernelFactory factory;
};

struct EpiloguePlan {
  std::vector<char> absorbed;           // per node: computed inside a later node's fused step
  std::map<int32_t, FusedStep> fused;   // by the chain's last node (the addition or the relu)
};

// Empty plan (nothing absorbed) when MPSGRAPH_CUDA_EPILOGUES=0.
EpiloguePlan plan_epilogues(const Graph& g, const std::vector<ValueRef>& targets);

// x @ w + bias [then relu]: ctx.in = {x, w (2-D), bias (N,) broadcast along rows}.
LaunchFn matmul_bias_kernel(const KernelCtx& c, bool relu);

}  // namespace mg::cuda
