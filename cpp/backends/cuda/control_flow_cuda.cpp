// Control flow on the GPU: the shared drivers (runtime/region_loops.h) run on the host, each
// region compiled once into a CUDA program of its own (its memory plan, kernels and CUDA
// graph) launched on the one stream with device pointers. Loop-carried values stay on the
// device in ping-pong buffers; a predicate (and a for loop's bounds) is read back with one
// small copy and a stream synchronisation per iteration. A program holding such a step
// launches its own steps directly (KernelCtx::host_driven).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "runtime/region_loops.h"

namespace mg::cuda {

namespace {

using region_loops::Arrays;

// The kernel being prepared: its regions' checks run after its program's run.
thread_local const KernelCtx* g_ctx = nullptr;

// Region programs launched since the last synchronisation: their checks (e.g. gather's index
// record) are read at every synchronisation, so an error in an early iteration is not lost
// (a for loop, which never synchronises, reports only its last iteration's).
std::vector<RegionProgram*>& pending() {
  static std::vector<RegionProgram*> p;  // runs are serialised (CudaProgram::run)
  return p;
}

// The pending list lives for one top-level control-flow step: cleared on its entry and exit
// (its programs' checks also run after the whole run).
thread_local int g_depth = 0;
struct Depth {
  Depth() {
    if (g_depth++ == 0) pending().clear();
  }
  ~Depth() {
    if (--g_depth == 0) pending().clear();
  }
  Depth(const Depth&) = delete;
  Depth& operator=(const Depth&) = delete;
};

// One pinned scalar for read-backs (runs are serialised).
void* pinned_scalar() {
  static void* p = [] {
    void* q = nullptr;
    check(cudaMallocHost(&q, 8), "allocating pinned memory for a predicate");
    return q;
  }();
  return p;
}

const void* read_back(const void* src, size_t nbytes) {
  cudaStream_t s = context().stream;
  void* h = pinned_scalar();
  check(cudaMemcpyAsync(h, src, nbytes, cudaMemcpyDeviceToHost, s), "reading a control-flow value back");
  check(cudaStreamSynchronize(s), "running a control-flow region");
  auto& p = pending();
  for (size_t i = 0; i < p.size(); ++i) p[i]->after_run();
  p.clear();
  return h;
}

struct Cuda {
  class Runner {
   public:
    Runner(const Region& r, const std::vector<TensorType>& feed_types) {
      Backend& b = backend_for(Device{DeviceKind::CUDA, 0});
      sg_ = region_loops::specialise_region(r, feed_types, [&b](const Node& n) { return b.implements_composite(n); });
      const KernelCtx* outer = g_ctx;
      program_ = std::shared_ptr<RegionProgram>(compile_region_program(sg_));
      g_ctx = outer;
      for (auto& v : sg_.targets) types_.push_back(sg_.graph->type(v));
      std::shared_ptr<RegionProgram> prog = program_;
      if (outer) outer->after_run([prog] { prog->after_run(); });
    }
    const std::vector<TensorType>& result_types() const { return types_; }
    void run(const Arrays& feeds, const Arrays& results) {
      in_.resize(feeds.size());
      out_.resize(results.size());
      for (size_t k = 0; k < feeds.size(); ++k) in_[k] = feeds[k]->data();
      for (size_t k = 0; k < results.size(); ++k) out_[k] = results[k]->data();
      program_->launch(in_.data(), out_.data());
      auto& p = pending();
      if (p.empty() || p.back() != program_.get()) p.push_back(program_.get());
    }

   private:
    Specialised sg_;
    std::shared_ptr<RegionProgram> program_;
    std::vector<TensorType> types_;
    std::vector<const void*> in_;
    std::vector<void*> out_;
  };
  static Arrays owned(const std::vector<TensorType>& types) { return region_loops::make_arrays(types, device_alloc); }
  static void copy(const Arrays& dst, const Arrays& src) {
    for (size_t k = 0; k < dst.size(); ++k)
      if (dst[k]->nbytes())
        check(cudaMemcpyAsync(dst[k]->data(), src[k]->data(), dst[k]->nbytes(), cudaMemcpyDeviceToDevice, context().stream),
              "copying a loop-carried value");
  }
  static bool predicate(const Array& p) { return *static_cast<const bool*>(read_back(p.data(), 1)); }
  static int32_t read_i32(const void* p) { return *static_cast<const int32_t*>(read_back(p, 4)); }
  static void set_index(Array& a, int32_t i) { fill_bytes(a.data(), 1, 4, uint32_t(i), context().stream); }
  static void zero(const Arrays& arrays) {
    for (auto& a : arrays)
      if (a->nbytes()) check(cudaMemsetAsync(a->data(), 0, a->nbytes(), context().stream), "zeroing a gradient");
  }
};

template <region_loops::HostFn (*Make)(const Node&, const std::vector<TensorType>&, const std::vector<TensorType>&)>
LaunchFn make(const KernelCtx& ctx) {
  const KernelCtx* outer = g_ctx;
  g_ctx = &ctx;
  region_loops::HostFn f;
  try {
    f = Make(ctx.node, ctx.in, ctx.out);
  } catch (...) {
    g_ctx = outer;
    throw;
  }
  g_ctx = outer;
  ctx.host_driven = true;
  return [f](cudaStream_t, const void* const* in, void* const* out) {
    Depth d;
    f(in, out);
  };
}

}  // namespace

void register_control_flow_kernels() {
  register_kernel("if_then_else", make<region_loops::make_if<Cuda>>);
  register_kernel("while_loop", make<region_loops::make_while<Cuda>>);
  register_kernel("for_loop", make<region_loops::make_for<Cuda>>);
  register_kernel("while_loop_vjp", make<region_loops::make_while_vjp<Cuda>>);
}

}  // namespace mg::cuda
