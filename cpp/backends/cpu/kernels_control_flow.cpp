// CPU kernels for control flow: the shared drivers (runtime/region_loops.h) over CPU programs
// compiled for each region and host memory.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "runtime/region_loops.h"

namespace mg::cpu {

namespace {

using region_loops::Arrays;

Backend& region_backend() {
  static Backend* b = make_cpu_backend().release();  // never destroyed, as the other backends
  return *b;
}

struct Cpu {
  // A region compiled for concrete feed types.
  class Runner {
   public:
    Runner(const Region& r, const std::vector<TensorType>& feed_types) {
      sg_ = region_loops::specialise_region(r, feed_types,
                                            [](const Node& n) { return region_backend().implements_composite(n); });
      program_ = region_backend().compile(sg_);
      for (auto& v : sg_.targets) types_.push_back(sg_.graph->type(v));
    }
    const std::vector<TensorType>& result_types() const { return types_; }
    void run(const Arrays& feeds, const Arrays& results) { program_->run(feeds, results); }

   private:
    Specialised sg_;
    std::unique_ptr<Program> program_;
    std::vector<TensorType> types_;
  };
  static Arrays owned(const std::vector<TensorType>& types) {
    Arrays r;
    for (auto& t : types) r.push_back(Array::empty(t.dtype, t.shape));
    return r;
  }
  static void copy(const Arrays& dst, const Arrays& src) {
    for (size_t k = 0; k < dst.size(); ++k)
      if (dst[k]->nbytes()) std::memcpy(dst[k]->data(), src[k]->data(), dst[k]->nbytes());
  }
  static bool predicate(const Array& p) { return *static_cast<const bool*>(p.data()); }
  static int32_t read_i32(const void* p) { return *static_cast<const int32_t*>(p); }
  static void set_index(Array& a, int32_t i) { *static_cast<int32_t*>(a.data()) = i; }
  static void zero(const Arrays& arrays) {
    for (auto& a : arrays)
      if (a->nbytes()) std::memset(a->data(), 0, a->nbytes());
  }
};

template <region_loops::HostFn (*Make)(const Node&, const std::vector<TensorType>&, const std::vector<TensorType>&)>
KernelFn make(const KernelCtx& ctx) {
  return Make(ctx.node, ctx.in, ctx.out);
}

}  // namespace

void register_control_flow_kernels() {
  register_kernel("if_then_else", make<region_loops::make_if<Cpu>>);
  register_kernel("while_loop", make<region_loops::make_while<Cpu>>);
  register_kernel("for_loop", make<region_loops::make_for<Cpu>>);
  register_kernel("while_loop_vjp", make<region_loops::make_while_vjp<Cpu>>);
}

}  // namespace mg::cpu
