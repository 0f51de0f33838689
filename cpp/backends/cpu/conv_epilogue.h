// Convolution and matrix product epilogues on the CPU: a float32 convolution or matrix product
// whose only reader is a chain of elementwise ops (bias add, activation, residual add, ...)
// runs as one step; the chain is applied to each block of output rows right after the GEMM
// that wrote it, while it is in cache. Matrix products' chains follow MPSGRAPH_CPU_FUSION.
// A convolution's chain may end in a 2x2 max pool at stride 2 (the small CNN's conv-ReLU-pool):
// the step's output is then the pooled one, and kernels that can pool each block of rows as
// they write it (Winograd's) never write the whole convolution output (MPSGRAPH_CPU_CONV_POOL=0:
// the pool is its own step).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

struct EpilogueOp {
  enum class Kind : uint8_t { Add, Sub, Mul, Max, Min, Clamp, Relu, Sigmoid, Tanh };
  // the other operand: one value, per channel (a matrix product's row), per element, or per
  // position within the row (a matrix product's column: a bias)
  enum class Arg : uint8_t { None, Scalar, Channel, Full, Inner };
  Kind kind = Kind::Relu;
  Arg arg = Arg::None;
  bool other_first = false;  // the operand is the op's first input (order matters for sub and NaN rules)
  int input = -1;  // the operand among the epilogue's inputs (Clamp: lo, then hi at input + 1)
};

// kernels_pooling.cpp: y[j] = the maximum of x0[2j], x0[2j + 1], x1[2j], x1[2j + 1] for j < OL,
// as the 2-d max pool kernel chooses it (a NaN wins, so does the first of equal values).
using PoolPairsFn = void (*)(const float* x0, const float* x1, float* y, int64_t OL);
PoolPairsFn pool_pairs_fn();

// The chain, over an output of shape (N, O, P...) seen as (N, O, P); a matrix product's
// output (..., M, N) is seen as (batches, M, N).
struct ConvEpilogue {
  std::vector<EpilogueOp> ops;
  int64_t O = 0, P = 0;
  // The trailing 2x2 pool at stride 2 over an NCHW output of even OH x OW (its ops have no
  // full-size operands); `full` is the scratch (an index into the kernel's outputs) of the whole
  // convolution output, for kernels that cannot pool as they go.
  bool pool = false;
  int64_t N = 0, OH = 0, OW = 0;
  size_t full = 0;
  PoolPairsFn pairs = nullptr;  // pool_pairs_fn(), chosen at compile
  // Applies the chain's ops from `from` on to channels [o0, o1), positions [p0, p1) of image n;
  // y is the whole output, in the epilogue's inputs. Splits over the pool when called outside it.
  void apply(float* y, const float* const* in, int64_t n, int64_t o0, int64_t o1, int64_t p0, int64_t p1,
             size_t from = 0) const;
  // The chain's ops from `from` on, on len values of each channel o in [o0, o1) at b + o * plane (a block of
  // output rows held apart from y; the pool's ops have no full-size operands).
  void apply_block(float* b, int64_t plane, const float* const* in, int64_t o0, int64_t o1, int64_t len,
                   size_t from = 0) const;
  // The pool of rows [2 k0, 2 k1) of channels [o0, o1), held at b + o * plane + (r - 2 k0) * OW,
  // into y's pooled rows [k0, k1) of image n (the pool kernel's choices: the same bits).
  void pool_block(const float* b, int64_t plane, float* y, int64_t n, int64_t o0, int64_t o1, int64_t k0,
                  int64_t k1) const;
};

// The convolution kernel f, which writes the whole output with the epilogue's ops, made to
// write it into the epilogue's `full` scratch and pool that into out[0]; n_out: f's outputs
// and scratch.
KernelFn pool_after(KernelFn f, const ConvEpilogue& e, size_t n_out);

struct EpiloguePlan {
  std::vector<int32_t> chain_of;              // per node: its chain, or -1
  std::vector<std::vector<int32_t>> chains;   // the convolution, then its epilogue nodes; the last is the root
};

// Chains of a float32 convolution or matrix product and at least one elementwise op: each op
// is the only reader of the value before it, which is not a target. Nodes marked in `skip`
// are left alone.
EpiloguePlan plan_conv_epilogues(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip);

// The step of one chain; `inputs` receives the convolution's (product's) two inputs, then the
// operands; `scratch_bytes` the step's scratch requests (KernelCtx::scratch, one output).
// `transposed`: the product's operand k is a transpose of its last two dims whose source the
// step reads instead, with BLAS's transpose flag. `constant_of` gives an input's value when it
// is a graph constant (else null).
KernelFn make_conv_epilogue_kernel(const Graph& g, const std::vector<int32_t>& chain, std::vector<ValueRef>& inputs,
                                   std::vector<size_t>& scratch_bytes, const std::array<bool, 2>& transposed,
                                   const std::function<std::shared_ptr<const Array>(ValueRef)>& constant_of);

// kernels_convolution.cpp: the float32 forward convolution with an epilogue, whose operands
// follow the source and the weights among the kernel's inputs.
KernelFn make_convolution_kernel(const KernelCtx& c, const ConvEpilogue& epilogue);

// kernels_matmul.cpp: the float32 matrix product with an epilogue, whose operands follow x and y.
KernelFn make_matmul_kernel(const KernelCtx& c, bool transpose_x, bool transpose_y, const ConvEpilogue& epilogue);

}  // namespace mg::cpu
