// cuDNN's graph API (the "backend" descriptors of cudnn_graph.h), declared from its
// documentation and opened from the library the convolutions use: an operation graph of one
// forward convolution followed by pointwise operations on its result, finalized into an
// execution plan that one of cuDNN's fusion engines runs as a single kernel (the engines that
// compile their kernels at run time do so once, when the plan is finalized).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"

namespace mg::cuda {

// The cuDNN library and handle the convolutions opened (conv_cuda.cpp); nullptr where cuDNN is
// absent or turned off.
void* cudnn_library();
void* cudnn_handle();

namespace dnn_graph {

enum DataType : int { kFloat = 0, kHalf = 2, kBFloat16 = 9 };  // cudnnDataType_t

enum PointwiseMode : int {  // cudnnPointwiseMode_t
  kAdd = 0, kMul = 1, kMin = 2, kMax = 3, kDiv = 6, kSub = 9, kNeg = 16, kReluFwd = 100,
};

// A tensor of the graph, dims and strides in cuDNN's order (N, C, *spatial); a virtual tensor
// lives inside the fused kernel only. Uids are the caller's, unique within the graph.
struct Tensor {
  int64_t uid = 0;
  int dtype = kFloat;
  std::vector<int64_t> dims, strides;
  bool is_virtual = false;
};

struct Pointwise {
  int mode = kAdd;
  int64_t x = 0, b = -1, y = 0;  // uids; b = -1 for unary modes
  bool clip = false;             // kReluFwd: clamp to [lower_clip, upper_clip]
  double lower_clip = 0, upper_clip = 0;
};

// y = pointwise ops over conv(x, w), float accumulation.
struct ConvGraph {
  std::vector<Tensor> tensors;
  int64_t x = 0, w = 0, conv_out = 0;
  std::vector<int64_t> pre_pad, post_pad, strides, dilations;
  std::vector<Pointwise> pointwise;
};

struct FusedPlan;

// The plan of cuDNN's first engine configuration (by its heuristics) that takes the graph and
// computes in float without reduced-precision or nondeterministic notes; nullptr where the
// library has no graph API or no engine takes the graph (MPSGRAPH_CUDNN_VERBOSE=1 prints why).
std::shared_ptr<FusedPlan> build(const ConvGraph& g);

// Bytes of workspace run() needs.
size_t workspace_bytes(const FusedPlan& p);

// Runs the plan on stream s: ptrs[i] is the buffer of the i-th non-virtual tensor of the graph,
// in ConvGraph::tensors' order. Capturable into a CUDA graph. Raises naming `op` on failure.
void run(const FusedPlan& p, cudaStream_t s, void* const* ptrs, void* workspace, const std::string& op);

}  // namespace dnn_graph
}  // namespace mg::cuda
