// The CUDA backend: device discovery, the pooled device allocator, and programs.
//
// A program is planned once per specialisation: one prepared launch per node, constants
// uploaded, intermediates in arena buffers reused by liveness (as the CPU plan), feeds and
// host-side results through fixed device buffers and pinned staging. A run copies host inputs
// in, replays the steps as one CUDA graph (captured on first use for the buffer addresses it
// sees; a few address sets are kept, and a program whose addresses keep changing stops
// capturing and launches directly), lands assigns, and synchronises once.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/channels_last.h"
#include "backends/cuda/elementwise_cuda.h"
#include "backends/cuda/epilogue_cuda.h"
#include "backends/cuda/kernel_table.h"
#include "core/array.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops/shape_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"
#include "runtime/async_program.h"

namespace mg::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clears a sticky-free error so later calls can proceed
    raise(ErrorKind::Runtime, "cuda", "", std::string(what) + ": " + cudaGetErrorString(e));
  }
}

namespace {

struct Probe {
  bool ok = false;
  std::string reason;
};

const Probe& probe() {
  static Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      r.reason = std::string("no usable CUDA driver or GPU (") + cudaGetErrorString(e) + ")";
      cudaGetLastError();
    } else if (n == 0) {
      r.reason = "no CUDA GPU is present";
    } else {
      r.ok = true;
    }
    return r;
  }();
  return p;
}

// ---- pooled device allocator ----
// Freed blocks are kept by rounded size and reused; the pool keeps at most kPoolLimit bytes
// of free blocks (the rest are freed). Leaked on purpose: buffers may outlive static
// destruction order.
constexpr size_t kPoolLimit = size_t(4) << 30;

size_t round_size(size_t n) {
  if (n <= 512) return 512;
  if (n <= (size_t(1) << 20)) return (n + 511) / 512 * 512;
  size_t p = 1;
  while (p < n) p <<= 1;
  const size_t step = p / 8;  // 8 classes per power of two: at most 12.5% slack
  return (n + step - 1) / step * step;
}

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  size_t free_bytes = 0;
};
Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

// Returns a block to the pool; also how on_device() recognises this allocator's buffers.
struct PoolReturn {
  size_t sz;
  void operator()(void* q) const {
    Pool& pl = pool();
    {
      std::lock_guard<std::mutex> l(pl.mu);
      if (pl.free_bytes + sz <= kPoolLimit) {
        pl.free[sz].push_back(q);
        pl.free_bytes += sz;
        return;
      }
    }
    DeviceScope on_gpu;  // past the pool's bound: freed, after pl.mu (run_mutex comes first)
    std::lock_guard<std::recursive_mutex> r(run_mutex());
    cudaFree(q);
  }
};

}  // namespace

std::recursive_mutex& run_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

void copy_sync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, const char* what) {
  if (!nbytes) return;
  std::lock_guard<std::recursive_mutex> l(run_mutex());
  check(cudaMemcpy(dst, src, nbytes, kind), what);
}

void memset_sync(void* dst, int value, size_t nbytes, const char* what) {
  if (!nbytes) return;
  std::lock_guard<std::recursive_mutex> l(run_mutex());
  check(cudaMemset(dst, value, nbytes), what);
}

void free_pinned(void* p) {
  std::lock_guard<std::recursive_mutex> l(run_mutex());
  cudaFreeHost(p);
}

std::shared_ptr<Buffer> device_alloc(size_t nbytes) {
  DeviceScope on_gpu;
  const size_t sz = round_size(nbytes);
  Pool& p = pool();
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> l(p.mu);
    auto it = p.free.find(sz);
    if (it != p.free.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      p.free_bytes -= sz;
    }
  }
  if (!ptr) {
    cudaError_t e = cudaMalloc(&ptr, sz);
    if (e != cudaSuccess) {  // give the cached blocks back and try once more
      cudaGetLastError();
      std::lock_guard<std::recursive_mutex> r(run_mutex());
      std::lock_guard<std::mutex> l(p.mu);
      cudaDeviceSynchronize();
      for (auto& kv : p.free)
        for (void* q : kv.second) cudaFree(q);
      p.free.clear();
      p.free_bytes = 0;
      check(cudaMalloc(&ptr, sz), ("allocating " + std::to_string(nbytes) + " bytes on the GPU").c_str());
    }
  }
  return Buffer::borrow(ptr, nbytes, std::shared_ptr<void>(ptr, PoolReturn{sz}));
}

Context& context() {
  static Context c = [] {
    if (!probe().ok) raise(ErrorKind::Runtime, "device", "", "cuda:0 is not available: " + probe().reason);
    Context r;
    check(cudaSetDevice(0), "selecting cuda:0");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "reading the GPU's properties");
    r.sm_major = prop.major;
    r.sm_minor = prop.minor;
    r.sm_count = prop.multiProcessorCount;
    r.name = prop.name;
    // a blocking stream: ordered after the legacy default stream, which DLPack producers
    // are asked to synchronise with (stream=1)
    check(cudaStreamCreate(&r.stream), "creating a stream");
    return r;
  }();
  return c;
}

DeviceScope::DeviceScope() {
  const int want = context().device;
  int cur = 0;
  if (cudaGetDevice(&cur) != cudaSuccess) {
    cudaGetLastError();
    cur = -1;
  }
  if (cur == want) return;
  check(cudaSetDevice(want), "selecting cuda:0");
  restore_ = cur;
}

DeviceScope::~DeviceScope() {
  if (restore_ >= 0 && cudaSetDevice(restore_) != cudaSuccess) cudaGetLastError();
}

bool switched_off(const char* name) {
  const char* env = std::getenv(name);
  return env && std::string(env) == "0";
}

bool switched_on(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "1";
}

std::vector<int64_t> permutation_of(const Node& n) {
  if (n.op->name == "transpose") return typed_attrs<ops::TransposeAttrs>(n).permutation;
  if (n.op->name != "swap_axes") return {};
  std::vector<int64_t> p(n.outputs[0].shape.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = int64_t(i);
  const ops::SwapAxesAttrs& a = typed_attrs<ops::SwapAxesAttrs>(n);
  std::swap(p[size_t(a.axis1)], p[size_t(a.axis2)]);
  return p;
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& p) {
  std::vector<int64_t> r(p.size(), 0);
  for (size_t i = 0; i < p.size(); ++i) r[size_t(p[i])] = int64_t(i);
  return r;
}

std::vector<int64_t> buffer_strides(const Shape& s, const std::vector<int64_t>& perm) {
  if (perm.empty()) return contiguous_strides(s);
  Shape b(s.size());
  for (size_t i = 0; i < s.size(); ++i) b[size_t(perm[i])] = s[i];
  const std::vector<int64_t> bs = contiguous_strides(b);
  std::vector<int64_t> r;
  for (auto p : perm) r.push_back(bs[size_t(p)]);
  return r;
}

bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

namespace {

std::unordered_map<std::string, KernelFactory>& kernels() {
  static std::unordered_map<std::string, KernelFactory> k;
  return k;
}

const KernelFactory* find_kernel(const std::string& op) {
  static bool done = [] {
    register_elementwise_kernels();
    register_reduction_kernels();
    register_shape_kernels();
    register_matmul_kernels();
    register_convolution_kernels();
    register_pooling_kernels();
    register_gather_kernels();
    register_sort_kernels();
    register_random_kernels();
    register_creation_kernels();
    register_shape_gradient_kernels();
    register_resize_kernels();
    register_image_kernels();
    register_linalg_kernels();
    register_sparse_kernels();
    register_control_flow_kernels();
    register_complex_kernels();
    register_fft_kernels();
    return true;
  }();
  (void)done;
  auto it = kernels().find(op);
  return it == kernels().end() ? nullptr : &it->second;
}

struct LayoutOp {
  std::vector<int> inputs;
  bool output = false;
};
std::unordered_map<std::string, LayoutOp>& layout_ops() {
  static std::unordered_map<std::string, LayoutOp> m;
  return m;
}
const LayoutOp* layout_op(const std::string& op) {
  find_kernel(op);  // registers the families
  auto it = layout_ops().find(op);
  return it == layout_ops().end() ? nullptr : &it->second;
}

// Elementwise groups (or lone elementwise nodes) whose result only one consumer reads, as its
// first input, run inside that consumer's kernel where `takes(consumer, source type)`, computed
// where the kernel reads them: the group's result never goes to memory. Groups with a node
// already claimed (`taken`, or an earlier call's `in_prologue`) stay where they are; the ones
// taken here are added to `prologue_of` (per consumer, the nodes it computes) and marked in
// `in_prologue`.
void take_prologues(const Graph& g, const std::vector<ValueRef>& targets, const FusionPlan& fusion,
                    const std::function<bool(const Node&, const TensorType&)>& takes, const std::vector<char>& taken,
                    std::map<int32_t, std::vector<int32_t>>& prologue_of, std::vector<char>& in_prologue) {
  std::map<ValueRef, int> readers;
  for (size_t id = 0; id < g.size(); ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) ++readers[v];
  for (const ValueRef& t : targets) readers[t] += 2;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    if (n.inputs.empty() || taken[id]) continue;
    const ValueRef src = n.inputs[0];
    if (src.index != 0 || readers[src] != 1 || !takes(n, g.type(src))) continue;
    const int32_t p = src.node;
    std::vector<int32_t> members;
    const int32_t grp = fusion.group_of[size_t(p)];
    if (grp >= 0 && fusion.groups[size_t(grp)].back() == p) members = fusion.groups[size_t(grp)];
    else if (grp < 0 && cuda_fusible(g, p)) members = {p};
    else continue;
    const auto claimed = [&](int32_t m) { return taken[size_t(m)] != 0 || in_prologue[size_t(m)] != 0; };
    if (std::any_of(members.begin(), members.end(), claimed)) continue;
    for (int32_t m : members) in_prologue[size_t(m)] = 1;
    prologue_of[int32_t(id)] = std::move(members);
  }
}

// Forward pools compute their input group at each window tap (pool_takes_prologue), before the
// convolution epilogues are planned; nodes a matmul epilogue claimed (`unfused`) stay out.
// MPSGRAPH_CUDA_POOL_PROLOGUES=0 turns this off.
std::map<int32_t, std::vector<int32_t>> pool_prologues(const Graph& g, const std::vector<ValueRef>& targets, const FusionPlan& fusion,
                                                       const std::vector<char>& unfused, std::vector<char>& in_prologue) {
  std::map<int32_t, std::vector<int32_t>> r;
  in_prologue.assign(g.size(), 0);
  static const bool off = switched_off("MPSGRAPH_CUDA_POOL_PROLOGUES");
  if (!off) take_prologues(g, targets, fusion, pool_takes_prologue, unfused, r, in_prologue);
  return r;
}

// v's value where it is a one-element constant (a clamp's bound), else NaN.
double one_element_constant(const Graph& g, ValueRef v) {
  const Node& src = g.node(v.node);
  if (src.op->name != "constant" || num_elements(g.type(v).shape) != 1) return std::numeric_limits<double>::quiet_NaN();
  return load_as_double(node_attr<std::shared_ptr<const Array>>(src, "value")->data(), g.type(v).dtype, 0);
}

// Elementwise groups (or lone elementwise nodes) that are the only reader of a convolution's
// channels-last result (the transpose it writes, `written_by`) run in the convolution's output
// pass: the result never goes to memory (cuDNN's fused operation graphs for dense convolutions,
// the generated depthwise kernel for depthwise ones). Per group root, the fused
// step and the values it reads; `in_epilogue` marks the convolution, its transpose and the
// group's other nodes. MPSGRAPH_CUDA_CONV_EPILOGUES=0 turns this off.
struct ConvEpilogue {
  LaunchFn fn;
  std::vector<ValueRef> inputs;
  std::vector<size_t> scratch_bytes;  // numbered after the group's one output, as a step's
};
std::map<int32_t, ConvEpilogue> conv_epilogues(const Graph& g, const std::vector<ValueRef>& targets, const FusionPlan& fusion,
                                               const std::vector<char>& skip, const std::vector<char>& absorbed,
                                               const std::vector<int32_t>& written_by, std::vector<char>& in_epilogue) {
  std::map<int32_t, ConvEpilogue> r;
  in_epilogue.assign(g.size(), 0);
  static const bool off = switched_off("MPSGRAPH_CUDA_CONV_EPILOGUES");
  if (off) return r;
  std::map<ValueRef, std::vector<int32_t>> readers;
  for (size_t id = 0; id < g.size(); ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) readers[v].push_back(int32_t(id));
  for (const ValueRef& t : targets) readers[t].push_back(-1);
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& d = g.node(int32_t(id));
    const int32_t t = written_by[id];
    if (d.op->name != "convolution" || t < 0 || d.inputs.size() != 2 || skip[id]) continue;
    const ValueRef tv{t, 0};
    const auto& rs = readers[tv];
    if (rs.size() != 1 || rs[0] < 0 || skip[size_t(rs[0])]) continue;
    std::vector<int32_t> members;
    const int32_t grp = fusion.group_of[size_t(rs[0])];
    if (grp >= 0) members = fusion.groups[size_t(grp)];
    else if (cuda_fusible(g, rs[0])) members = {rs[0]};
    else continue;
    const Node& root = g.node(members.back());
    if (root.outputs.size() != 1 || root.outputs[0].shape != g.type(tv).shape) continue;
    // a group reading two convolutions' results (a residual block's downsampling shortcut) is
    // computed after one of them only: the other's result must reach memory
    const auto claimed = [&](int32_t m) { return in_epilogue[size_t(m)] != 0; };
    if (r.count(members.back()) || std::any_of(members.begin(), members.end(), claimed)) continue;
    std::vector<TensorType> conv_in;
    KernelCtx dctx{d, conv_in, d.outputs};
    for (const ValueRef& v : d.inputs) {
      conv_in.push_back(g.type(v));
      const Node& src = g.node(v.node);
      dctx.in_perm.push_back(absorbed[size_t(v.node)] == 1 ? permutation_of(src) : std::vector<int64_t>{});
    }
    dctx.out_perm = inverse_permutation(permutation_of(g.node(t)));
    std::vector<ValueRef> order;
    std::vector<TensorType> fn_in;
    const std::vector<EwNode> ew = fused_group_nodes(g, members, order, fn_in);
    const auto at = std::find(order.begin(), order.end(), tv);
    if (at == order.end()) continue;
    const int conv_arg = int(at - order.begin());
    std::vector<double> constant;
    for (const ValueRef& v : order) constant.push_back(one_element_constant(g, v));
    LaunchFn f = conv_with_pointwise(dctx, ew, fn_in, constant, conv_arg);
    if (!f) {
      const ElementFn fn = element_fn(ew, fn_in, root.outputs[0].shape, int(16 / dtype_size(d.outputs[0].dtype)));
      if (std::find(fn.direct.begin(), fn.direct.end(), conv_arg) == fn.direct.end()) continue;
      f = depthwise_with_epilogue(dctx, fn, fn_in, conv_arg);
    }
    if (!f) continue;
    ConvEpilogue e{std::move(f), d.inputs, dctx.scratch_bytes};
    for (size_t k = 0; k < order.size(); ++k)
      if (int(k) != conv_arg) e.inputs.push_back(order[k]);
    in_epilogue[id] = in_epilogue[size_t(t)] = 1;
    for (size_t m = 0; m + 1 < members.size(); ++m) in_epilogue[size_t(members[m])] = 1;
    r[members.back()] = std::move(e);
  }
  return r;
}

// Transposes (and swap_axes) that layout-taking kernels absorb (register_layout_inputs): per node, 1 where
// its readers take the permuted source, 2 where it is the only reader of the output its
// producer writes permuted.
std::vector<char> absorbed_transposes(const Specialised& sg) {
  const Graph& g = *sg.graph;
  // swap_axes nodes (the gradients' transposes) too once matrix products take transposed
  // operands (matmul_cuda.cpp registers them unless MPSGRAPH_CUDA_MATMUL_TRANSPOSES=0)
  const bool absorb_swaps = layout_op("matrix_multiplication") != nullptr;
  std::map<ValueRef, std::vector<std::pair<int32_t, int>>> readers;
  for (size_t id = 0; id < g.size(); ++id)
    for (size_t i = 0; i < g.node(int32_t(id)).inputs.size(); ++i) readers[g.node(int32_t(id)).inputs[i]].push_back({int32_t(id), int(i)});
  for (auto& t : sg.targets) readers[t].push_back({-1, -1});
  std::vector<char> r(g.size(), 0);
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    if (n.op->name != "transpose" && !(n.op->name == "swap_axes" && absorb_swaps)) continue;
    const auto& rs = readers[{int32_t(id), 0}];
    bool all = !rs.empty();
    for (auto& [reader, input] : rs) {
      const LayoutOp* l = reader < 0 ? nullptr : layout_op(g.node(reader).op->name);
      all = all && l && std::find(l->inputs.begin(), l->inputs.end(), input) != l->inputs.end();
    }
    if (all) {
      r[id] = 1;
      continue;
    }
    const ValueRef src = n.inputs[0];
    const LayoutOp* l = layout_op(g.node(src.node).op->name);
    if (l && l->output && src.index == 0 && readers[src].size() == 1 && r[size_t(src.node)] == 0) r[id] = 2;
  }
  return r;
}

// Which convolutions keep NHWC activations between them (core/channels_last.h): cuDNN's
// tensor-core kernels are channels-last and convert NCHW inside each call. By default (and
// with MPSGRAPH_CUDA_CHANNELS_LAST=1) the float16/bfloat16 convolutions of inference graphs (no
// convolution gradients); `all` every convolution (checks), 0 none. ResNet-18 and MobileNetV2
// in float16 at batch 256 run 1.5x and 1.35x faster so on an H100 (docs/cuda.md).
constexpr bool kChannelsLastByDefault = true;

std::function<bool(const Node&)> channels_last_policy(const Graph& g) {
  const char* e = std::getenv("MPSGRAPH_CUDA_CHANNELS_LAST");
  const std::string mode = e ? e : (kChannelsLastByDefault ? "1" : "0");
  if (mode == "all") return [](const Node&) { return true; };
  if (mode != "1") return [](const Node&) { return false; };
  for (size_t id = 0; id < g.size(); ++id) {
    const std::string& op = g.node(int32_t(id)).op->name;
    if (op == "convolution_data_gradient" || op == "convolution_weights_gradient") return [](const Node&) { return false; };
  }
  return [](const Node& n) { return n.outputs[0].dtype == DType::Float16 || n.outputs[0].dtype == DType::BFloat16; };
}

// An array in GPU memory: this backend's own buffers are known without asking the driver
// (a run checks every feed and result).
bool on_device(const Array& a) {
  if (a.buffer && a.buffer->owner && std::get_deleter<PoolReturn>(a.buffer->owner)) return true;
  return is_device_pointer(a.data());
}

enum class SlotKind { Feed, Const, Var, Arena, Output };

struct Slot {
  SlotKind kind = SlotKind::Arena;
  int64_t index = 0;
  size_t nbytes = 0;
  TensorType type;
  std::string node, op;
  bool scratch = false;
  std::shared_ptr<Buffer> own;  // Const, Var and Output (host results) buffers
};

struct Step {
  LaunchFn fn;
  std::vector<int> in, out;
  std::vector<const void*> in_ptr;
  std::vector<void*> out_ptr;
};

struct PinnedDeleter {
  void operator()(void* p) const { free_pinned(p); }
};

// Host inputs' copies to the GPU run here, so that the next run's copies overlap this run's
// compute (ordered against it by events).
cudaStream_t copy_stream() {
  static cudaStream_t s = [] {
    cudaStream_t r = nullptr;
    check(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking), "creating a copy stream");
    return r;
  }();
  return s;
}

using Event = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;
Event new_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event");
  return Event(e, [](cudaEvent_t q) { cudaEventDestroy(q); });
}

class CudaProgram final : public Program, public AsyncProgram {
 public:
  explicit CudaProgram(const Specialised& sg) : vars_(sg.vars) {
    Context& ctx = context();
    stream_ = ctx.stream;
    const Graph& g = *sg.graph;
    std::map<ValueRef, int> slot_of;
    std::vector<char> target_taken(sg.targets.size(), 0);
    auto new_slot = [&](Slot s) {
      slots_.push_back(std::move(s));
      return int(slots_.size() - 1);
    };
    auto untaken_target = [&](ValueRef v) {
      for (size_t t = 0; t < sg.targets.size(); ++t)
        if (sg.targets[t] == v && !target_taken[t]) return int(t);
      return -1;
    };
    auto nbytes_of = [](const TensorType& t) { return size_t(num_elements(t.shape)) * dtype_size(t.dtype); };
    // refuse float64 and complex before anything is compiled: no silent fallback
    for (size_t id = 0; id < g.size(); ++id) {
      const Node& n = g.node(int32_t(id));
      for (auto& t : n.outputs) {
        if (t.dtype == DType::Float64 || t.dtype == DType::Complex128)
          raise(ErrorKind::Type, n.op->name, n.name,
                std::string(dtype_name(t.dtype)) + " is not supported on the cuda backend (it runs on the cpu only)");
      }
      bool cx = false;
      for (auto& t : n.outputs) cx = cx || t.dtype == DType::Complex64;
      for (auto& v : n.inputs) cx = cx || g.type(v).dtype == DType::Complex64;
      if (cx && !n.op->view && !complex64_supported(n.op->name))
        raise(ErrorKind::NotImplemented, n.op->name, n.name, "has no complex64 kernel on the cuda backend yet (it runs on the cpu)");
    }
    const EpiloguePlan epi = plan_epilogues(g, sg.targets);  // claims its nodes before the fusion groups
    std::vector<char> unfused = epi.absorbed;
    for (auto& entry : epi.fused) unfused[size_t(entry.first)] = 1;
    const FusionPlan fusion = plan_cuda_fusion(g, sg.targets, unfused);
    const std::vector<char> absorbed = absorbed_transposes(sg);
    std::map<ValueRef, std::vector<int64_t>> perm_of;  // values read through an absorbed transpose
    std::vector<int32_t> written_by(g.size(), -1);     // producer -> the absorbed transpose it writes for
    for (size_t id = 0; id < g.size(); ++id)
      if (absorbed[id] == 2) written_by[size_t(g.node(int32_t(id)).inputs[0].node)] = int32_t(id);
    std::vector<char> in_prologue;
    std::map<int32_t, std::vector<int32_t>> prologue_of = pool_prologues(g, sg.targets, fusion, unfused, in_prologue);
    std::vector<char> skip_epilogue = unfused, in_epilogue;
    for (size_t id = 0; id < g.size(); ++id) skip_epilogue[id] = skip_epilogue[id] || in_prologue[id];
    const std::map<int32_t, ConvEpilogue> epilogue_of = conv_epilogues(g, sg.targets, fusion, skip_epilogue, absorbed, written_by, in_epilogue);
    std::vector<char> taken = skip_epilogue;  // a convolution's epilogue marks its group's root only by its key
    for (size_t id = 0; id < g.size(); ++id) taken[id] = taken[id] || in_epilogue[id];
    for (const auto& e : epilogue_of) taken[size_t(e.first)] = 1;
    // reductions compute the groups they alone read (softmax's exp before its sum;
    // MPSGRAPH_CUDA_REDUCTION_PROLOGUES=0: not)
    take_prologues(g, sg.targets, fusion, [](const Node& n, const TensorType&) { return reduction_takes_prologue(n); },
                   taken, prologue_of, in_prologue);
    for (size_t id = 0; id < g.size(); ++id) {
      const Node& n = g.node(int32_t(id));
      const std::string& op = n.op->name;
      if (in_epilogue[id]) continue;
      if (absorbed[id]) {
        slot_of[{int32_t(id), 0}] = slot_of.at(n.inputs[0]);
        if (absorbed[id] == 1) perm_of[{int32_t(id), 0}] = permutation_of(n);
        views_.push_back({n.name, op, slot_of.at(n.inputs[0])});
        continue;
      }
      if (epi.absorbed[id] || in_prologue[id]) continue;
      const int32_t group = fusion.group_of[id];
      if (group >= 0 && fusion.groups[size_t(group)].back() != int32_t(id)) continue;  // runs in its group's step
      if (n.op->view && untaken_target({int32_t(id), 0}) < 0) {
        slot_of[{int32_t(id), 0}] = slot_of.at(n.inputs[0]);
        views_.push_back({n.name, op, slot_of.at(n.inputs[0])});
        continue;
      }
      if (op == "placeholder") {
        auto it = std::find(sg.feeds.begin(), sg.feeds.end(), int32_t(id));
        Slot s{SlotKind::Feed, it - sg.feeds.begin(), nbytes_of(n.outputs[0]), n.outputs[0], n.name, op};
        slot_of[{int32_t(id), 0}] = new_slot(std::move(s));
        continue;
      }
      if (op == "constant") {
        auto value = node_attr<std::shared_ptr<const Array>>(n, "value");
        Slot s{SlotKind::Const, 0, value->nbytes(), n.outputs[0], n.name, op};
        s.own = device_alloc(value->nbytes());
        copy_sync(s.own->data, value->data(), value->nbytes(), cudaMemcpyHostToDevice, "uploading a constant");
        slot_of[{int32_t(id), 0}] = new_slot(std::move(s));
        continue;
      }
      if (op == "read_variable") {
        Slot s{SlotKind::Var, node_attr<int64_t>(n, "variable"), nbytes_of(n.outputs[0]), n.outputs[0], n.name, op};
        s.own = device_alloc(s.nbytes);
        slot_of[{int32_t(id), 0}] = new_slot(std::move(s));
        continue;
      }
      if (op == "assign_variable") {
        assigns_.push_back({node_attr<int64_t>(n, "variable"), slot_of.at(n.inputs[0]), g.type(n.inputs[0]), -1});
        continue;
      }
      const auto fused = epi.fused.find(int32_t(id));
      const KernelFactory* f = fused != epi.fused.end() ? &fused->second.factory : find_kernel(op);
      // an epilogue's or a group's inputs replace its root's
      std::vector<ValueRef> inputs = fused != epi.fused.end() ? fused->second.inputs : n.inputs;
      const auto prologue = prologue_of.find(int32_t(id));
      if (prologue != prologue_of.end()) inputs = fused_group_inputs(g, prologue->second);
      const auto conv_epilogue = epilogue_of.find(int32_t(id));
      if (conv_epilogue != epilogue_of.end()) inputs = conv_epilogue->second.inputs;
      if (!f)
        raise(ErrorKind::NotImplemented, op, n.name,
              "has no kernel on the cuda backend yet (it runs on the cpu: device='cpu')");
      std::vector<TensorType> in;
      for (auto& v : inputs) in.push_back(g.type(v));
      KernelCtx kctx{n, in, n.outputs};
      // per input of the step (a fused epilogue's GEMM reads the matmul's operands)
      for (auto& v : inputs) kctx.in_perm.push_back(perm_of.count(v) ? perm_of.at(v) : std::vector<int64_t>{});
      const int32_t wb = written_by[id];
      if (wb >= 0) {  // the transpose's inverse: value dim i is result dim inv[i]
        kctx.out_perm = inverse_permutation(permutation_of(g.node(wb)));
      }
      Step st;
      st.fn = conv_epilogue != epilogue_of.end() ? conv_epilogue->second.fn
              : group >= 0                     ? make_fused_group(g, fusion.groups[size_t(group)], inputs)
              : prologue == prologue_of.end() ? (*f)(kctx)
              : reduction_takes_prologue(n)
                  ? reduction_with_prologue(kctx, g.type(n.inputs[0]), g, prologue->second)
                  : pool_with_prologue(kctx, g.type(n.inputs[0]).shape, g, prologue->second);
      if (conv_epilogue != epilogue_of.end()) kctx.scratch_bytes = conv_epilogue->second.scratch_bytes;
      for (auto& chk : kctx.checks) checks_->push_back(std::move(chk));
      direct_ = direct_ || kctx.host_driven;
      for (auto& v : inputs) st.in.push_back(slot_of.at(v));
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        ValueRef v{int32_t(id), int32_t(k)};
        const ValueRef stored = k == 0 && wb >= 0 ? ValueRef{wb, 0} : v;  // an absorbed transpose's result
        const int out_index = untaken_target(stored);
        if (out_index >= 0) target_taken[size_t(out_index)] = 1;
        Slot s{out_index >= 0 ? SlotKind::Output : SlotKind::Arena, out_index >= 0 ? out_index : -1,
               nbytes_of(n.outputs[k]), g.type(stored), n.name, op};
        const int si = new_slot(std::move(s));
        slot_of[v] = si;
        st.out.push_back(si);
      }
      for (size_t nb : kctx.scratch_bytes) {
        Slot sc{SlotKind::Arena, -1, nb, {}, n.name, op};
        sc.scratch = true;
        st.out.push_back(new_slot(std::move(sc)));
      }
      st.in_ptr.resize(st.in.size());
      st.out_ptr.resize(st.out.size());
      steps_.push_back(std::move(st));
    }
    for (size_t t = 0; t < sg.targets.size(); ++t)
      if (!target_taken[t]) copies_.push_back({slot_of.at(sg.targets[t]), int(t), nbytes_of(g.type(sg.targets[t]))});
    // the assigned value lands in the variable's read buffer of this program too (if it has
    // one), so the next run needs no upload
    for (auto& a : assigns_)
      for (size_t s = 0; s < slots_.size(); ++s)
        if (slots_[s].kind == SlotKind::Var && slots_[s].index == a.var) a.read_slot = int(s);
    plan_memory();
    ptr_.resize(slots_.size());
    uploaded_.resize(slots_.size());
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].own) ptr_[s] = slots_[s].own->data;
      if (slots_[s].kind == SlotKind::Arena) ptr_[s] = arena_[size_t(slots_[s].index)]->data;
    }
  }

  ~CudaProgram() override {
    DeviceScope on_gpu;
    // A started run may still use the buffers and graphs. The stream is every program's: under
    // run_mutex, so that the wait never meets another thread's capture on it (the driver
    // crashed, or the capture failed, where a run_async future dropped the last reference to
    // an executable on its waiter thread while the caller's thread captured another's graph).
    std::lock_guard<std::recursive_mutex> l(run_mutex());
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
    for (auto& gr : graphs_) cudaGraphExecDestroy(gr.exec);
  }

  void run(const std::vector<std::shared_ptr<Array>>& inputs, const std::vector<std::shared_ptr<Array>>& outputs) override {
    start(inputs, outputs).wait();
  }

  // Queues the copies in, the steps and the copies out; the returned wait waits for the run's
  // event, runs the kernels' checks and lands the assigns.
  StartedRun start(const std::vector<std::shared_ptr<Array>>& inputs,
                   const std::vector<std::shared_ptr<Array>>& outputs) override {
    DeviceScope on_gpu;
    std::unique_lock<std::recursive_mutex> l(run_mutex());
    const int parity = int(runs_++ & 1);
    staged_.clear();
    std::vector<const void*> key;  // the outside addresses the steps see
    std::vector<std::shared_ptr<Array>> var_values;
    std::vector<std::pair<void*, size_t>> host_out;  // (host pointer, slot) copied back after the run
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot& sl = slots_[s];
      if (sl.kind == SlotKind::Feed) {
        const Array& a = *inputs[size_t(sl.index)];
        if (sl.nbytes == 0 || on_device(a)) {
          ptr_[s] = a.data();
          key.push_back(a.data());
        } else {
          stage_in(s, a.data(), sl.nbytes, parity);
          key.push_back(ptr_[s]);
        }
      } else if (sl.kind == SlotKind::Var) {
        auto v = vars_->get(sl.index);
        if (v->dtype != sl.type.dtype || v->shape != sl.type.shape)
          raise(ErrorKind::Value, "read_variable", sl.node, "variable now holds " + type_str({v->dtype, v->shape}) +
                                                                 " but the executable was compiled for " + type_str(sl.type));
        if (uploaded_[s] != v && sl.nbytes) {
          check(cudaMemcpyAsync(sl.own->data, v->data(), sl.nbytes, cudaMemcpyHostToDevice, stream_), "uploading a variable");
          uploaded_[s] = v;
        }
        var_values.push_back(std::move(v));
      } else if (sl.kind == SlotKind::Output) {
        const Array& a = *outputs[size_t(sl.index)];
        if (sl.nbytes == 0 || on_device(a)) {
          ptr_[s] = a.data();
          key.push_back(a.data());
        } else {
          if (!sl.own) sl.own = device_alloc(sl.nbytes);
          ptr_[s] = sl.own->data;
          host_out.emplace_back(a.data(), s);
        }
      }
    }
    std::vector<void*> copy_dst;
    for (auto& c : copies_) {  // targets that are views or feeds: nullptr for a host destination
      void* d = outputs[size_t(c.out)]->data();
      copy_dst.push_back(on_device(*outputs[size_t(c.out)]) ? d : nullptr);
      key.push_back(d);
    }
    for (auto* sg : staged_) check(cudaStreamWaitEvent(stream_, sg->copied.get(), 0), "ordering a run after its inputs' copies");
    launch_steps(key, copy_dst);
    for (size_t i = 0; i < copies_.size(); ++i) {
      const Copy& c = copies_[i];
      if (c.nbytes && !copy_dst[i])
        check(cudaMemcpyAsync(outputs[size_t(c.out)]->data(), ptr_[size_t(c.slot)], c.nbytes, cudaMemcpyDeviceToHost, stream_),
              "copying a result to the host");
    }
    for (auto& h : host_out)
      if (slots_[h.second].nbytes)
        check(cudaMemcpyAsync(h.first, ptr_[h.second], slots_[h.second].nbytes, cudaMemcpyDeviceToHost, stream_),
              "copying a result to the host");
    // after the last reader of the staged inputs (a target may be a feed copied out above)
    for (auto* sg : staged_) check(cudaEventRecord(sg->consumed.get(), stream_), "recording an event");
    std::vector<std::shared_ptr<Array>> landed;
    // the landings' copies, in order: each assign's new value to its host array, then to the
    // variable's read buffer
    struct Landing {
      const void* src;
      void* dst;
      size_t nbytes;
    };
    std::vector<Landing> moves;
    bool batchable = batch_landings_;
    for (size_t i = 0; i < assigns_.size(); ++i) {
      const AssignStep& a = assigns_[i];
      auto v = landing_array(i);
      if (v->nbytes()) {
        batchable = batchable && pinned(i, v);  // a kernel cannot write a pageable fallback array
        moves.push_back({ptr_[size_t(a.slot)], v->data(), v->nbytes()});
        if (a.read_slot >= 0 && a.read_slot != a.slot)
          moves.push_back({ptr_[size_t(a.slot)], ptr_[size_t(a.read_slot)], v->nbytes()});
      }
      landed.push_back(v);
    }
    // one kernel runs them all at once: not where one writes what another reads (an assign of
    // one variable's value to another, updated in the same run), which memcpys in order keep right
    auto overlap = [](const void* a, size_t an, const void* b, size_t bn) {
      const char *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
      return x < y + bn && y < x + an;
    };
    for (size_t i = 0; batchable && i < moves.size(); ++i)
      for (size_t j = 0; batchable && j < moves.size(); ++j)
        batchable = i == j || !overlap(moves[i].dst, moves[i].nbytes, moves[j].src, moves[j].nbytes);
    if (batchable) {
      for (size_t k = 0; k < moves.size(); k += kBatchCopies) {
        CopyBatch batch;
        for (size_t m = k; m < std::min(moves.size(), k + kBatchCopies); ++m, ++batch.n) {
          batch.src[batch.n] = moves[m].src;
          batch.dst[batch.n] = moves[m].dst;
          batch.nbytes[batch.n] = int64_t(moves[m].nbytes);
        }
        batch_copy(batch, stream_);
      }
    } else {
      for (const Landing& m : moves)
        check(cudaMemcpyAsync(m.dst, m.src, m.nbytes, cudaMemcpyDefault, stream_), "landing an assign");
    }
    Event done = new_event();
    check(cudaEventRecord(done.get(), stream_), "recording an event");
    auto checks = checks_;
    // an error other than "not ready" counts as finished: wait then raises it
    auto finished = [done](bool block) {
      return (block ? cudaEventSynchronize(done.get()) : cudaEventQuery(done.get())) != cudaErrorNotReady;
    };
    if (assigns_.empty())
      return {[done, checks] {
                check(cudaEventSynchronize(done.get()), "running a cuda program");
                for (auto& chk : *checks) chk();
              },
              finished};
    // a program that assigns is waited for at once (Executable::start), while it lives
    return {[this, done, checks, landed = std::move(landed)] {
      check(cudaEventSynchronize(done.get()), "running a cuda program");
      for (auto& chk : *checks) chk();  // a recorded error stops the run before its assigns land
      for (size_t i = 0; i < assigns_.size(); ++i) {  // assigns land when the run completes
        vars_->set(assigns_[i].var, landed[i]);
        if (assigns_[i].read_slot >= 0) uploaded_[size_t(assigns_[i].read_slot)] = landed[i];
      }
    },
            finished};
  }

  // A region's run (RegionProgram): every feed and result is a device pointer; nothing is
  // staged and nothing waits.
  void launch_region(const void* const* in, void* const* out) {
    region_key_.clear();
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot& sl = slots_[s];
      if (sl.kind == SlotKind::Feed)
        ptr_[s] = const_cast<void*>(in[size_t(sl.index)]);
      else if (sl.kind == SlotKind::Output)
        ptr_[s] = out[size_t(sl.index)];
      else
        continue;
      region_key_.push_back(ptr_[s]);
    }
    region_copy_dst_.clear();
    for (auto& c : copies_) {
      region_copy_dst_.push_back(out[size_t(c.out)]);
      region_key_.push_back(out[size_t(c.out)]);
    }
    launch_steps(region_key_, region_copy_dst_);
  }
  void run_checks() {
    for (auto& chk : *checks_) chk();
  }
  // Regions read variables through captured values and assign through their results.
  bool stateless() const {
    for (auto& sl : slots_)
      if (sl.kind == SlotKind::Var) return false;
    return assigns_.empty();
  }

  std::vector<PlanEntry> memory_plan() const override {
    static const char* kinds[] = {"feed", "constant", "variable", "arena", "output"};
    std::vector<PlanEntry> r;
    for (auto& sl : slots_) {
      PlanEntry e{sl.node, sl.op, sl.scratch ? "scratch" : kinds[int(sl.kind)], -1, sl.nbytes, ""};
      if (sl.kind == SlotKind::Arena || sl.kind == SlotKind::Feed || sl.kind == SlotKind::Output) e.buffer = sl.index;
      r.push_back(std::move(e));
    }
    for (auto& v : views_) {
      const Slot& sl = slots_[size_t(v.slot)];
      PlanEntry e{v.node, v.op, "view", -1, sl.nbytes, sl.node};
      if (sl.kind == SlotKind::Arena) e.buffer = sl.index;
      r.push_back(std::move(e));
    }
    return r;
  }

 private:
  // Host input -> pinned staging -> a device buffer, on the copy stream. Two sets alternate
  // between runs: a run's copies wait only for the compute of the run two before it (which
  // read that set), so they overlap the previous run's compute.
  void stage_in(size_t s, const void* host, size_t nbytes, int parity) {
    Staging& sg = staging_[s][size_t(parity)];
    if (!sg.dev) {
      sg.dev = device_alloc(nbytes);
      void* p = nullptr;
      check(cudaMallocHost(&p, nbytes), "allocating pinned staging memory");
      sg.pin.reset(p);
      sg.copied = new_event();
      sg.consumed = new_event();
    }
    check(cudaEventSynchronize(sg.copied.get()), "copying an input to the GPU");  // the pinned buffer is free again
    std::memcpy(sg.pin.get(), host, nbytes);
    cudaStream_t cs = copy_stream();
    check(cudaStreamWaitEvent(cs, sg.consumed.get(), 0), "ordering an input's copy");
    check(cudaMemcpyAsync(sg.dev->data, sg.pin.get(), nbytes, cudaMemcpyHostToDevice, cs), "copying an input to the GPU");
    check(cudaEventRecord(sg.copied.get(), cs), "recording an event");
    ptr_[s] = sg.dev->data;
    staged_.push_back(&sg);
  }

  void enqueue(const std::vector<void*>& copy_dst) {
    for (auto& st : steps_) {
      for (size_t i = 0; i < st.in.size(); ++i) st.in_ptr[i] = ptr_[size_t(st.in[i])];
      for (size_t i = 0; i < st.out.size(); ++i) st.out_ptr[i] = ptr_[size_t(st.out[i])];
      st.fn(stream_, st.in_ptr.data(), st.out_ptr.data());
    }
    for (size_t i = 0; i < copies_.size(); ++i) {
      const Copy& c = copies_[i];
      if (c.nbytes && copy_dst[i])
        check(cudaMemcpyAsync(copy_dst[i], ptr_[size_t(c.slot)], c.nbytes, cudaMemcpyDeviceToDevice, stream_), "copying a result");
    }
  }

  void launch_steps(const std::vector<const void*>& key, const std::vector<void*>& copy_dst) {
    static const bool no_graphs = switched_off("MPSGRAPH_CUDA_GRAPHS");
    if (no_graphs || direct_ || capture_failures_ >= kMaxCaptureMisses || steps_.empty()) {
      enqueue(copy_dst);
      return;
    }
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
      if (it->key == key) {
        check(cudaGraphLaunch(it->exec, stream_), "launching a cuda graph");
        if (it != graphs_.begin()) graphs_.splice(graphs_.begin(), graphs_, it);
        return;
      }
    // capture this run's launches once for these addresses
    ++captures_;
    if (captures_ > kMaxGraphs + kMaxCaptureMisses) {  // addresses keep changing: stop capturing
      capture_failures_ = kMaxCaptureMisses;
      enqueue(copy_dst);
      return;
    }
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "starting a cuda graph capture");
    try {
      enqueue(copy_dst);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "ending a cuda graph capture");
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      cudaGetLastError();
      ++capture_failures_;
      enqueue(copy_dst);
      return;
    }
    graphs_.push_front({key, exec});
    if (graphs_.size() > size_t(kMaxGraphs)) {
      cudaGraphExecDestroy(graphs_.back().exec);
      graphs_.pop_back();
    }
    check(cudaGraphLaunch(exec, stream_), "launching a cuda graph");
  }

  // Arena buffers are reused once their last reader has run (best fit by size).
  void plan_memory() {
    std::vector<int> last(slots_.size(), -1);
    for (size_t i = 0; i < steps_.size(); ++i)
      for (int s : steps_[i].in) last[size_t(s)] = int(i);
    for (auto& c : copies_) last[size_t(c.slot)] = int(steps_.size());
    for (auto& a : assigns_) last[size_t(a.slot)] = int(steps_.size());
    std::multimap<size_t, int> free_list;
    std::vector<size_t> capacity;
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (int s : steps_[i].out) {
        Slot& sl = slots_[size_t(s)];
        if (sl.kind != SlotKind::Arena) continue;
        auto it = free_list.lower_bound(sl.nbytes);
        if (it != free_list.end() && it->first <= 4 * sl.nbytes + 4096) {
          sl.index = it->second;
          free_list.erase(it);
        } else {
          sl.index = int64_t(capacity.size());
          capacity.push_back(sl.nbytes);
        }
      }
      auto release = [&](int s) {
        Slot& sl = slots_[size_t(s)];
        if (sl.kind == SlotKind::Arena && last[size_t(s)] <= int(i)) {
          free_list.emplace(capacity[size_t(sl.index)], int(sl.index));
          last[size_t(s)] = int(steps_.size()) + 1;
        }
      };
      for (int s : steps_[i].in) release(s);
      for (int s : steps_[i].out) release(s);
    }
    for (size_t c : capacity) arena_.push_back(device_alloc(c));
  }

  static constexpr int kMaxGraphs = 4, kMaxCaptureMisses = 4;
  struct Copy {
    int slot, out;
    size_t nbytes;
  };
  struct View {
    std::string node, op;
    int slot;
  };
  // The host array an assign lands in: pinned, so the copy is a DMA the stream orders rather
  // than a synchronous staged copy of pageable memory. One is reused once nothing but this
  // list holds it (the variable store and readers keep theirs: an assign never writes into an
  // array someone holds); at most kLandingArrays each, then pageable arrays.
  std::shared_ptr<Array> landing_array(size_t i) {
    static constexpr size_t kLandingArrays = 4;
    const AssignStep& a = assigns_[i];
    if (landing_.size() < assigns_.size()) landing_.resize(assigns_.size());
    auto& list = landing_[i];
    for (auto& arr : list) {
      const bool in_read_buffer = a.read_slot >= 0 && uploaded_[size_t(a.read_slot)] == arr;
      if (!in_read_buffer && arr.use_count() == 1) return arr;
    }
    const size_t nbytes = size_t(num_elements(a.type.shape)) * dtype_size(a.type.dtype);
    void* p = nullptr;
    if (nbytes == 0 || list.size() >= kLandingArrays || cudaMallocHost(&p, nbytes) != cudaSuccess) {
      cudaGetLastError();
      return Array::empty(a.type.dtype, a.type.shape);
    }
    auto arr = std::make_shared<Array>();
    arr->dtype = a.type.dtype;
    arr->shape = a.type.shape;
    arr->buffer = Buffer::borrow(p, nbytes, std::shared_ptr<void>(p, free_pinned));
    list.push_back(arr);
    return arr;
  }

  // Whether v is one of assign i's pinned landing arrays (a kernel can write it).
  bool pinned(size_t i, const std::shared_ptr<Array>& v) const {
    return i < landing_.size() && std::find(landing_[i].begin(), landing_[i].end(), v) != landing_[i].end();
  }

  struct AssignStep {
    int64_t var;
    int slot;
    TensorType type;
    int read_slot;
  };
  struct CachedGraph {
    std::vector<const void*> key;
    cudaGraphExec_t exec;
  };
  std::shared_ptr<VariableStore> vars_;
  cudaStream_t stream_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<Step> steps_;
  std::shared_ptr<std::vector<std::function<void()>>> checks_ = std::make_shared<std::vector<std::function<void()>>>();
  std::vector<Copy> copies_;
  std::vector<View> views_;
  std::vector<AssignStep> assigns_;
  std::vector<std::shared_ptr<Buffer>> arena_;
  std::vector<void*> ptr_;
  std::vector<std::shared_ptr<Array>> uploaded_;  // per Var slot: the host value its buffer holds
  std::vector<std::vector<std::shared_ptr<Array>>> landing_;  // per assign: pinned host arrays it lands in
  // The landings' copies in one kernel (batch_copy) rather than two memcpys each: a training
  // step of six variables spent 50 of its 150 us in those memcpys and the gaps between them;
  // batched, the step ran 108 us (H100, batch 128). MPSGRAPH_CUDA_BATCH_LANDINGS=0: memcpys.
  const bool batch_landings_ = !switched_off("MPSGRAPH_CUDA_BATCH_LANDINGS");
  struct Staging {
    std::shared_ptr<Buffer> dev;
    std::unique_ptr<void, PinnedDeleter> pin;
    Event copied, consumed;  // on the copy stream / after the run's steps
  };
  std::unordered_map<size_t, std::array<Staging, 2>> staging_;
  std::vector<Staging*> staged_;  // this run's
  uint64_t runs_ = 0;
  std::list<CachedGraph> graphs_;
  int captures_ = 0, capture_failures_ = 0;
  bool direct_ = false;  // a step is host-driven: launch directly, never capture
  std::vector<const void*> region_key_;
  std::vector<void*> region_copy_dst_;
};

class CudaRegionProgram final : public RegionProgram {
 public:
  explicit CudaRegionProgram(const Specialised& sg) : program_(sg) {
    if (!program_.stateless())
      raise(ErrorKind::NotImplemented, "cuda", "", "a control-flow region that reads or assigns a variable itself");
  }
  void launch(const void* const* feeds, void* const* results) override { program_.launch_region(feeds, results); }
  void after_run() override { program_.run_checks(); }

 private:
  CudaProgram program_;
};

class CudaBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  bool available() const override { return probe().ok; }
  std::string unavailable_reason() const override { return probe().reason; }
  std::unique_ptr<Program> compile(const Specialised& sg) override {
    DeviceScope on_gpu;
    return std::make_unique<CudaProgram>(plan_channels_last(sg, channels_last_policy(*sg.graph), true));
  }
  std::shared_ptr<Array> allocate(DType dtype, const Shape& shape) override {
    auto a = std::make_shared<Array>();
    a->dtype = dtype;
    a->shape = shape;
    a->buffer = device_alloc(a->nbytes());
    return a;
  }
  std::shared_ptr<Array> to_host(const std::shared_ptr<Array>& a) override {
    if (!a->data() || !on_device(*a)) return a;
    DeviceScope on_gpu;
    auto h = Array::empty(a->dtype, a->shape);
    copy_sync(h->data(), a->data(), h->nbytes(), cudaMemcpyDeviceToHost, "copying to the host");
    return h;
  }
  std::vector<std::shared_ptr<Array>> run_data_dependent(const Node& node, const std::vector<TensorType>& in_types,
                                                         const std::vector<std::shared_ptr<const Array>>& inputs) override {
    DeviceScope on_gpu;
    std::lock_guard<std::recursive_mutex> l(run_mutex());  // its launches must not join another thread's capture
    return cuda::run_data_dependent(node, in_types, inputs);
  }
  std::shared_ptr<Array> from_host(const std::shared_ptr<Array>& a) override {
    if (a->data() && on_device(*a)) return a;
    DeviceScope on_gpu;
    auto d = allocate(a->dtype, a->shape);
    copy_sync(d->data(), a->data(), d->nbytes(), cudaMemcpyHostToDevice, "copying to the GPU");
    return d;
  }
  uintptr_t stream_handle() override { return reinterpret_cast<uintptr_t>(context().stream); }
  // An event recorded on our stream, waited for on the consumer's: the consumer's later work
  // runs after ours without the host waiting (DLPack's producer side).
  void order_before(uintptr_t consumer) override {
    cudaStream_t ours = context().stream;
    cudaStream_t theirs = consumer == 1   ? cudaStreamLegacy
                          : consumer == 2 ? cudaStreamPerThread
                                          : reinterpret_cast<cudaStream_t>(consumer);
    if (theirs == ours) return;
    DeviceScope on_gpu;
    std::lock_guard<std::recursive_mutex> l(run_mutex());  // the record must not join another thread's capture
    Event e = new_event();
    check(cudaEventRecord(e.get(), ours), "recording an event for a DLPack consumer");
    check(cudaStreamWaitEvent(theirs, e.get(), 0), "ordering the consumer's stream after mpsgraph's work");
  }
  std::string describe() const override {
    if (!probe().ok) return "";
    const Context& c = context();
    return c.name + " (sm_" + std::to_string(c.sm_major) + std::to_string(c.sm_minor) + ", " + std::to_string(c.sm_count) + " SMs)";
  }
};

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }
const RegisterBackend registered(DeviceKind::CUDA, make_cuda_backend);

}  // namespace

void register_kernel(const std::string& op, KernelFactory factory) { kernels()[op] = std::move(factory); }
void register_layout_inputs(const std::string& op, std::vector<int> inputs, bool output) {
  layout_ops()[op] = {std::move(inputs), output};
}

std::unique_ptr<RegionProgram> compile_region_program(const Specialised& sg) {
  return std::make_unique<CudaRegionProgram>(sg);
}

KernelFactory registered_kernel(const std::string& op) {
  auto it = kernels().find(op);
  return it == kernels().end() ? KernelFactory() : it->second;
}

std::vector<std::string> kernel_ops() {
  (void)find_kernel("");  // fills the table on first use
  std::vector<std::string> names;
  for (auto& entry : kernels()) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace mg::cuda
