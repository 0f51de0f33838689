// CPU backend internals shared by the kernel files.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "runtime/backend.h"

namespace mg::cpu {

// A prepared kernel: every shape and dtype was fixed at compile time.
using KernelFn = std::function<void(const void* const* in, void* const* out)>;

struct KernelCtx {
  const Node& node;
  const std::vector<TensorType>& in;
  const std::vector<TensorType>& out;
  // Scratch space a kernel needs while it runs: part of the memory plan (reused by later
  // steps), 64-byte aligned, passed to the kernel after its outputs. Returns its index in `out`.
  size_t scratch(size_t nbytes) const {
    scratch_bytes.push_back(nbytes);
    return out.size() + scratch_bytes.size() - 1;
  }
  mutable std::vector<size_t> scratch_bytes;
  // Per input, its value when it is a graph constant (null otherwise): lets a kernel prepare
  // it once at compile (weights transformed or packed). Empty when the caller knows none.
  std::vector<std::shared_ptr<const Array>> constants;
  const Array* constant(size_t i) const { return i < constants.size() ? constants[i].get() : nullptr; }
};
using KernelFactory = std::function<KernelFn(const KernelCtx&)>;

void register_kernel(const std::string& op, KernelFactory factory);
// The factory registered so far for op (empty if none): lets a later family extend a kernel.
KernelFactory registered_kernel(const std::string& op);

// Data-dependent ops (OpDef::data_dependent) run between stages: the prepared function
// allocates its outputs when it runs, since only then are their shapes known. The factory
// sees the node and its (concrete) input types.
using DynamicKernelFn =
    std::function<std::vector<std::shared_ptr<Array>>(const std::vector<std::shared_ptr<const Array>>& inputs)>;
using DynamicKernelFactory = std::function<DynamicKernelFn(const Node& node, const std::vector<TensorType>& in)>;
void register_dynamic_kernel(const std::string& op, DynamicKernelFactory factory);

// Splits [0, n) into chunks of at least `grain` over the pool; runs inline when small.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
// A kill switch: the environment variable `name` is "0" (read where a kernel is compiled).
bool switched_off(const char* name);
int num_threads();

// Family registration (one per kernel file).
void register_elementwise_kernels();
void register_reduction_kernels();
void register_matmul_kernels();
void register_shape_kernels();
void register_creation_kernels();
void register_autodiff_kernels();
void register_pooling_kernels();
void register_resize_kernels();
void register_convolution_kernels();
void register_random_kernels();
void register_control_flow_kernels();
void register_sparse_kernels();
void register_dynamic_kernels();
void register_gather_kernels();
void register_sort_kernels();
void register_complex_kernels();  // after the families whose kernels it extends to complex dtypes
void register_fft_kernels();
void register_attention_kernels();

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace mg::cpu
