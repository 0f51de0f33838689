// CUDA backend internals shared by its files (built only where CMake found a CUDA toolkit).
//
// Loading: the CUDA runtime is linked statically and opens the driver on first use, so the
// module imports on machines without CUDA; NVRTC and cuBLASLt are opened with dlopen the
// first time a program needs them (cuda_api_cuda.cpp). Kernels are generated as CUDA C++ per
// op and dtype at compile time, compiled by NVRTC for the GPU found and cached in memory and
// on disk (keyed by source, GPU architecture and NVRTC version); the few fixed kernels are
// built ahead of time by nvcc (copy_kernels.cu).
#pragma once
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "runtime/backend.h"

namespace mg::cuda {

// Throws GraphRuntimeError naming what failed and CUDA's message.
void check(cudaError_t e, const char* what);

// The one GPU this process uses (device 0, the first visible one) and its stream.
struct Context {
  int device = 0;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  std::string name;
  cudaStream_t stream = nullptr;
};
Context& context();  // initialises on first use; only called once available() said yes

// Makes the backend's GPU current on this thread for a scope, then restores the caller's:
// a process that also drives another GPU (PyTorch, CuPy) may have made that one current,
// and allocations and launches go to the current device.
class DeviceScope {
 public:
  DeviceScope();
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int restore_ = -1;
};

// Device memory from a pool of freed blocks by size class, bounded (cuda_backend_cuda.cpp).
std::shared_ptr<Buffer> device_alloc(size_t nbytes);

// Held while a run is queued (one at a time per process: runs share the stream, and a capture
// must see only its own work) and around whatever would join another thread's capture on that
// blocking stream: synchronous copies and memsets (ordered on the legacy stream), frees (they
// wait for the device), stream waits. Without it, compiling (constant uploads) or dropping an
// executable on one thread failed or crashed another thread's CUDA graph capture. Recursive:
// frees run in destructors, some inside a run.
std::recursive_mutex& run_mutex();
// cudaMemcpy and cudaMemset under run_mutex, with check.
void copy_sync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, const char* what);
void memset_sync(void* dst, int value, size_t nbytes, const char* what);
// cudaFreeHost under run_mutex (for pinned memory's deleters).
void free_pinned(void* p);

// ---- kernels ----

// A prepared step: launches its work on `stream` with the run's buffer pointers (inputs,
// then outputs, then scratch). Must be capturable into a CUDA graph: no host sync, no
// allocation.
using LaunchFn = std::function<void(cudaStream_t stream, const void* const* in, void* const* out)>;

// Milliseconds one launch takes (the best of a few after a warm-up; stops early once clearly
// slower than `best`), the L2 cache overwritten with `flush` (may be null) before each; or
// infinity where it fails. For choosing among library algorithms at compile (conv_cuda.cpp).
float time_launch(const LaunchFn& fn, cudaStream_t s, const void* const* in, void* const* out, float best,
                  const Buffer* flush);

struct KernelCtx {
  const Node& node;
  const std::vector<TensorType>& in;
  const std::vector<TensorType>& out;
  size_t scratch(size_t nbytes) const {
    scratch_bytes.push_back(nbytes);
    return out.size() + scratch_bytes.size() - 1;
  }
  mutable std::vector<size_t> scratch_bytes;
  // Runs on the host once the run's work has completed, in step order (e.g. to raise an
  // error a kernel recorded in pinned memory; launches cannot raise: they may be replayed).
  void after_run(std::function<void()> f) const { checks.push_back(std::move(f)); }
  mutable std::vector<std::function<void()>> checks;
  // Ops registered with register_layout_inputs only: the value of input i is
  // transpose(buffer, in_perm[i]) (empty: the buffer itself), and output 0's value is
  // transpose(its buffer, out_perm) (empty: the buffer itself).
  std::vector<std::vector<int64_t>> in_perm;
  std::vector<int64_t> out_perm;
  // Set by a factory whose launch reads values back and synchronises (control flow): its
  // program then launches its steps directly instead of replaying a CUDA graph.
  mutable bool host_driven = false;
};
using KernelFactory = std::function<LaunchFn(const KernelCtx&)>;
void register_kernel(const std::string& op, KernelFactory factory);
// `op`'s kernel reads `inputs` (and writes output 0 where `output`) in any dim order, as
// KernelCtx::in_perm / out_perm say. A transpose whose every reader is such an input is not
// run, nor is a transpose that is the only reader of such an output (the kernel reads the
// transpose's source, or writes the transpose's result), e.g. cuDNN taking NHWC directly.
void register_layout_inputs(const std::string& op, std::vector<int> inputs, bool output);
KernelFactory registered_kernel(const std::string& op);  // the factory so far (empty if none)

void register_elementwise_kernels();
void register_reduction_kernels();
void register_shape_kernels();
void register_matmul_kernels();
void register_convolution_kernels();
void register_pooling_kernels();
void register_gather_kernels();
void register_sort_kernels();
void register_random_kernels();
void register_creation_kernels();
void register_shape_gradient_kernels();
void register_resize_kernels();
void register_image_kernels();
void register_linalg_kernels();
void register_sparse_kernels();
void register_control_flow_kernels();

// A program compiled for a control-flow region (control_flow_cuda.cpp): launched on the
// stream with device pointers (feeds in feed order, results in target order); it neither
// stages nor synchronises, and replays its own CUDA graph where it has no host-driven step.
class RegionProgram {
 public:
  virtual ~RegionProgram() = default;
  virtual void launch(const void* const* feeds, void* const* results) = 0;
  virtual void after_run() = 0;  // the checks its kernels registered
};
std::unique_ptr<RegionProgram> compile_region_program(const Specialised& sg);

// Whether p is device (or managed) memory.
bool is_device_pointer(const void* p);

// Backend::run_data_dependent on the GPU (dynamic_cuda.cpp).
std::vector<std::shared_ptr<Array>> run_data_dependent(const Node& node, const std::vector<TensorType>& in_types,
                                                       const std::vector<std::shared_ptr<const Array>>& inputs);
void register_complex_kernels();  // after the real kernels it extends
void register_fft_kernels();
// Whether op has a complex64 kernel (or moves bytes); other ops are refused for complex64.
bool complex64_supported(const std::string& op);

// ---- NVRTC ----

// dlopen of a CUDA library: $env names a file, else stem.13, stem.12, stem, then
// $CUDA_HOME, $CUDA_PATH and /usr/local/cuda's lib64/ and lib/. nullptr where none opens.
void* open_cuda_library(const char* env, const std::string& stem);

// f = the symbol `name` of an opened library, cast to f's type; false where the library lacks it.
template <class F>
bool sym(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

// A kernel compiled from generated source; `name` is an extern "C" __global__ function.
struct Kernel {
  void* fn = nullptr;  // a cudaKernel_t, launched with cudaLaunchKernel
};
// Compiles (or finds in the memory or disk cache) `source` with NVRTC `options` added to the
// defaults and returns kernel `name`.
Kernel nvrtc_kernel(const std::string& source, const std::string& name, const std::vector<std::string>& options = {});
void launch(const Kernel& k, int64_t blocks, int threads, size_t smem, cudaStream_t s, void** args);

// The device-side helpers every generated source starts with: storage types, f16/bf16
// conversion (no CUDA headers needed), index arithmetic.
const std::string& prelude();

// CUDA C++ names for a dtype: storage type, compute type, load and store expressions.
std::string storage_type(DType t);
std::string compute_type(DType t);
std::string load_expr(DType t, const std::string& ptr_elem);   // ptr_elem e.g. "a[i]"
std::string store_expr(DType t, const std::string& value);     // value of compute type

// Whether the environment variable `name` is "0": each fast path's kill switch.
bool switched_off(const char* name);
// Whether it is "1": a fast path not on by default.
bool switched_on(const char* name);

// The order a transpose or swap_axes node reads its input in (output dim i is input dim p[i]);
// empty for other ops.
std::vector<int64_t> permutation_of(const Node& n);
// q with q[p[i]] = i.
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& p);
// The strides (in elements) of a value of shape s held in a contiguous buffer whose dim perm[i]
// is the value's dim i (KernelCtx::in_perm); contiguous strides where perm is empty.
std::vector<int64_t> buffer_strides(const Shape& s, const std::vector<int64_t>& perm);

// Strides of up to kMaxRank dims, passed by value to generated kernels.
constexpr int kMaxRank = 8;
struct IndexSpace {
  int64_t n = 0;
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[4][kMaxRank] = {};  // per operand, in elements (0 on broadcast dims)
};
// The space of `out` with each input's broadcast strides; collapses contiguous dims.
IndexSpace broadcast_space(const Shape& out, const std::vector<Shape>& ins);

// Copies a strided view: dst[dst_off + sum i_d * dst_st_d] = src[src_off + sum i_d * src_st_d]
// over `shape` (copy_kernels.cu); elements of `itemsize` bytes.
struct StridedCopy {
  int64_t n = 0;
  int32_t rank = 0;
  int32_t itemsize = 4;
  int64_t shape[kMaxRank] = {};
  int64_t src_stride[kMaxRank] = {}, dst_stride[kMaxRank] = {};
  int64_t src_offset = 0, dst_offset = 0;
};
// The copy of `shape` from strides ss (offset so) into strides ds (offset doff), elements of es
// bytes, with size-1 dims dropped and neighbours contiguous in both buffers merged, as the
// kernels want them (shape_cuda.cpp): every copy is planned through it, at compile time.
StridedCopy make_copy(size_t es, const Shape& shape, const std::vector<int64_t>& ss, const std::vector<int64_t>& ds, int64_t so,
                      int64_t doff);
void strided_copy(const StridedCopy& c, const void* src, void* dst, cudaStream_t s);
// Fills n elements of itemsize bytes with the pattern in `value`.
void fill_bytes(void* dst, int64_t n, int32_t itemsize, uint64_t value, cudaStream_t s);

// Up to kBatchCopies contiguous copies in one launch, between device memory and pinned (mapped)
// host memory in any direction: a run's variable updates land on the host and in their read
// buffers in one kernel instead of a memcpy each, every memcpy an operation of its own with a
// gap of microseconds after it (copy_kernels.cu).
constexpr int kBatchCopies = 16;
struct CopyBatch {
  const void* src[kBatchCopies] = {};
  void* dst[kBatchCopies] = {};
  int64_t nbytes[kBatchCopies] = {};
  int n = 0;
};
void batch_copy(const CopyBatch& b, cudaStream_t s);

}  // namespace mg::cuda
