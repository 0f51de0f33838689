#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/cpu_threads.h"
#include "backends/cpu/fused_elementwise.h"
#include "backends/cpu/image_split.h"
#include "backends/cpu/matmul_kernel.h"
#include "core/channels_last.h"
#include "core/ops/shape_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"
#include "runtime/profile.h"

#if defined(MG_BLAS_SCIPY_OPENBLAS)
#include <cblas.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

namespace mg::cpu {

// Kernel families registered here only (declared here rather than in cpu_backend.h, which every
// kernel file includes).
void register_linalg_kernels();
void register_image_kernels();

// ---------------- thread pool ----------------

namespace {

// Workers that finish a batch watch for the next one for up to kSpinFor before they sleep on
// the condition variable, and the caller waits for the last task the same way: a parallel
// kernel follows another within microseconds inside a network, and waking a sleeping thread
// (a futex wake; in a VM an interrupt to an idle virtual CPU) took 15 to 40 us each time,
// some 45 times a ResNet-18 run. The spin is bounded, so an idle process does not spin.
constexpr std::chrono::microseconds kSpinFor{100};

inline void cpu_relax() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpinFor has passed; returns done().
template <class F>
bool spin_until(const F& done) {
  const auto until = std::chrono::steady_clock::now() + kSpinFor;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

// One batch at a time. Its tasks are claimed from one atomic word, (generation, next task,
// task count), and counted off in another: neither the caller nor a worker takes a mutex
// unless a thread sleeps. With the batch set up under a mutex, the caller and the worker that
// had just seen it met on that mutex twice per batch, and a contended std::mutex sleeps in the
// kernel: in MobileNetV2 at batch 1 the worker started its task 2.4-4 us after the caller, and
// the caller returned 3-4 us after the last task ended, around 60 steps a run.
class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  // Runs fn(i) for i in [0, tasks) on the workers and the calling thread; returns when done.
  void run(int tasks, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> batch(batch_mu_);  // one batch at a time
    const int count = std::min(tasks, kMaxTasks);
    const uint64_t generation = (claim_.load(std::memory_order_relaxed) >> 32) + 1;
    fn_.store(&fn, std::memory_order_release);
    pending_.store(count, std::memory_order_relaxed);
    // seq_cst: ordered before the load of sleeping_, as a sleeping worker's increment is before
    // its own look at claim_, so one of the two sees the other
    claim_.store(generation << 32 | uint64_t(count), std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
    work();
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> l(mu_);
      caller_waits_.store(true, std::memory_order_seq_cst);
      done_cv_.wait(l, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
      caller_waits_.store(false, std::memory_order_relaxed);
    }
    // tasks past kMaxTasks (never reached: parallel_for's are at most the pool's size) run here
    for (int i = count; i < tasks; ++i) fn(i);
  }

 private:
  static constexpr int kMaxTasks = 0xFFFF;
  static uint64_t next_of(uint64_t claim) { return (claim >> 16) & 0xFFFF; }
  static uint64_t count_of(uint64_t claim) { return claim & 0xFFFF; }

  // Claims and runs tasks until the newest batch has none left.
  void work() {
    uint64_t claim = claim_.load(std::memory_order_acquire);
    for (;;) {
      // fn_ is stored before claim_ is published: this is the batch's, or a newer one's, whose
      // claim_ then differs and the exchange below fails
      const std::function<void(int)>* f = fn_.load(std::memory_order_acquire);
      const uint64_t generation = claim >> 32;
      bool claimed = false;
      while (claim >> 32 == generation && next_of(claim) < count_of(claim))
        if (claim_.compare_exchange_weak(claim, claim + (uint64_t(1) << 16), std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
          claimed = true;
          break;
        }
      if (!claimed) {
        if (claim >> 32 != generation) continue;  // a newer batch: take part in it
        return;
      }
      (*f)(int(next_of(claim)));
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_waits_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> l(mu_);
        done_cv_.notify_all();
      }
      claim = claim_.load(std::memory_order_acquire);
    }
  }
  void loop() {
    uint64_t seen = 0;  // the generation this worker last took part in
    auto fresh = [&] { return claim_.load(std::memory_order_seq_cst) >> 32 != seen || stop_.load(); };
    for (;;) {
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> l(mu_);
        sleeping_.fetch_add(1, std::memory_order_seq_cst);
        cv_.wait(l, fresh);
        sleeping_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop_.load()) return;
      seen = claim_.load(std::memory_order_acquire) >> 32;
      work();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_, batch_mu_;  // mu_: only for sleeping and waking
  std::condition_variable cv_, done_cv_;
  std::atomic<const std::function<void(int)>*> fn_{nullptr};
  alignas(64) std::atomic<uint64_t> claim_{0};  // generation << 32 | next task << 16 | task count
  alignas(64) std::atomic<int> pending_{0};     // tasks of the batch not yet finished
  alignas(64) std::atomic<int> sleeping_{0};
  std::atomic<bool> caller_waits_{false}, stop_{false};
};

// The pool is made on first use and never destroyed: a static one would be joined at exit
// while a thread the interpreter abandoned may still be inside a run (std::terminate, or a
// hang). After fork() only the forking thread exists in the child, and the parent's pool
// (its workers gone, its mutexes perhaps held) is abandoned there; the child makes a new one
// on its first parallel kernel.
std::atomic<ThreadPool*> g_pool{nullptr};

void forget_pool_in_child() { g_pool.store(nullptr); }

ThreadPool& pool() {
  ThreadPool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
#if defined(__unix__) || defined(__APPLE__)
  static const bool at_fork = [] { return pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0; }();
  (void)at_fork;
#endif
  auto* made = new ThreadPool(std::max(1, int(std::thread::hardware_concurrency()) - 1));
  if (g_pool.compare_exchange_strong(p, made, std::memory_order_acq_rel)) return *made;
  delete made;  // another thread made one first
  return *p;
}

thread_local bool t_in_parallel = false;

// Within it the thread runs as a pool task does: parallel_for inline, num_threads() 1, so
// kernels made there plan for one thread.
class SerialScope {
 public:
  SerialScope() : was_(t_in_parallel) { t_in_parallel = true; }
  ~SerialScope() { t_in_parallel = was_; }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool was_;
};

std::atomic<int> g_thread_cap{0};  // 0: the pool's size

// BLAS runs single-threaded: large products are split over the project's pool instead
// (blas_gemm.h), so OpenBLAS's threads, which spin while they wait, never run at all.
void size_blas_threads() {
#if defined(MG_BLAS_SCIPY_OPENBLAS)
  static bool done = [] {
    scipy_openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
#endif
}

// Never destroyed (as the pool): runs abandoned at exit may still look kernels up.
std::unordered_map<std::string, KernelFactory>& kernels() {
  static auto* k = new std::unordered_map<std::string, KernelFactory>();
  return *k;
}

std::unordered_map<std::string, DynamicKernelFactory>& dynamic_kernels() {
  static auto* k = new std::unordered_map<std::string, DynamicKernelFactory>();
  return *k;
}

void ensure_kernels() {
  static bool done = [] {
    size_blas_threads();
    register_elementwise_kernels();
    register_reduction_kernels();
    register_matmul_kernels();
    register_shape_kernels();
    register_creation_kernels();
    register_autodiff_kernels();
    register_pooling_kernels();
    register_resize_kernels();
    register_convolution_kernels();
    register_random_kernels();
    register_control_flow_kernels();
    register_sparse_kernels();
    register_dynamic_kernels();
    register_gather_kernels();
    register_sort_kernels();
    register_complex_kernels();
    register_fft_kernels();
    register_attention_kernels();
    register_linalg_kernels();
    register_image_kernels();
    return true;
  }();
  (void)done;
}

}  // namespace

int num_threads() {
  if (t_in_parallel) return 1;  // within a pool task parallel_for runs inline
  const int cap = g_thread_cap.load(std::memory_order_relaxed);
  return cap > 0 ? std::min(cap, pool().size()) : pool().size();
}

void set_num_threads(int n) {
  size_blas_threads();
  g_thread_cap.store(n > 0 ? std::min(n, pool().size()) : 0);
}

double pool_step_overhead_us(double work_us, int batches) {
  using clock = std::chrono::steady_clock;
  const auto work = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::micro>(work_us));
  const int threads = num_threads();
  std::vector<double> over;
  over.reserve(size_t(std::max(batches, 1)));
  for (int b = 0; b < batches; ++b) {
    const auto t0 = clock::now();
    parallel_for(threads, 1, [&](int64_t, int64_t) {
      const auto until = clock::now() + work;
      while (clock::now() < until) cpu_relax();
    });
    over.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() - work_us);
  }
  if (over.empty()) return 0.0;
  std::nth_element(over.begin(), over.begin() + over.size() / 2, over.end());
  return over[over.size() / 2];
}

bool switched_off(const char* name) {
  const char* env = std::getenv(name);
  return env && std::string(env) == "0";
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = num_threads();
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || t_in_parallel) {
    fn(0, n);
    return;
  }
  int64_t per = (n + chunks - 1) / chunks;
  pool().run(int(chunks), [&](int c) {
    SerialScope task;
    int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

void register_kernel(const std::string& op, KernelFactory factory) { kernels()[op] = std::move(factory); }

KernelFactory registered_kernel(const std::string& op) {
  auto it = kernels().find(op);
  return it == kernels().end() ? KernelFactory{} : it->second;
}

static const KernelFactory* find_kernel(const std::string& op) {
  ensure_kernels();
  auto it = kernels().find(op);
  return it == kernels().end() ? nullptr : &it->second;
}

void register_dynamic_kernel(const std::string& op, DynamicKernelFactory factory) {
  dynamic_kernels()[op] = std::move(factory);
}

static const DynamicKernelFactory* find_dynamic_kernel(const std::string& op) {
  ensure_kernels();
  auto it = dynamic_kernels().find(op);
  return it == dynamic_kernels().end() ? nullptr : &it->second;
}

static std::vector<TensorType> types_of(const std::vector<std::shared_ptr<const Array>>& inputs) {
  std::vector<TensorType> in;
  for (auto& a : inputs) in.push_back({a->dtype, a->shape});
  return in;
}

// ---------------- program ----------------

namespace {

// A transpose that swaps the last two dims and nothing else.
bool swaps_last_two(const Node& n) {
  if (n.op->name != "transpose") return false;
  const std::vector<int64_t>& perm = typed_attrs<ops::TransposeAttrs>(n).permutation;
  const size_t r = perm.size();
  if (r < 2 || perm[r - 2] != int64_t(r - 1) || perm[r - 1] != int64_t(r - 2)) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != int64_t(i)) return false;
  return true;
}

// Matrix products fed by such a transpose read its source with BLAS's transpose flag
// (the gradient GEMMs x^T @ dy and dy @ w^T); a transpose read by nothing else is dropped.
struct TransposeFolds {
  std::map<int32_t, std::array<bool, 2>> matmul;  // node -> operand given transposed
  std::vector<char> dropped;                      // per node
};

TransposeFolds fold_transposes(const Graph& g, const std::vector<ValueRef>& targets) {
  TransposeFolds f;
  std::vector<int64_t> uses(g.size(), 0), folded(g.size(), 0);
  for (size_t id = 0; id < g.size(); ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) ++uses[size_t(v.node)];
  for (const ValueRef& v : targets) uses[size_t(v.node)] += 1;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    if (n.op->name != "matrix_multiplication" || n.inputs.size() != 2 || !is_floating(n.outputs[0].dtype)) continue;
    std::array<bool, 2> t{false, false};
    for (size_t k = 0; k < 2; ++k) {
      const Node& src = g.node(n.inputs[k].node);
      if (g.type(n.inputs[k]).shape.size() >= 2 && swaps_last_two(src)) {
        t[k] = true;
        ++folded[size_t(src.id)];
      }
    }
    if (t[0] || t[1]) f.matmul[int32_t(id)] = t;
  }
  f.dropped.assign(g.size(), 0);
  for (size_t id = 0; id < g.size(); ++id) f.dropped[id] = folded[id] > 0 && folded[id] == uses[id];
  return f;
}

// sum_to_like / broadcast_like whose input already has the output's type (gradients of
// same-shape operands, once shapes are known): the input's bytes, no pass.
bool passes_through(const Graph& g, const Node& n) {
  if (n.op->name != "sum_to_like" && n.op->name != "broadcast_like") return false;
  const TensorType& t = g.type(n.inputs[0]);
  return t.dtype == n.outputs[0].dtype && t.shape == n.outputs[0].shape;
}

enum class SlotKind { Feed, Const, Var, Arena, Output };

struct Slot {
  SlotKind kind = SlotKind::Arena;
  int64_t index = 0;  // feed / variable / output index, or arena buffer
  std::shared_ptr<const Array> constant;
  size_t nbytes = 0;
  TensorType type;  // Var: the type compiled for
  std::string node;  // the node that made it (for memory_plan)
  std::string op;
  bool scratch = false;
};

struct Step {
  KernelFn fn;
  const char* op = "";        // the kernel's op
  const char* graph_op = "";  // the graph-level op it implements (a composite, or op itself)
  std::string label;          // in the per-step profile: node, kernel, operand types
  std::vector<int> in, out;
  std::vector<const void*> in_ptr;
  std::vector<void*> out_ptr;
};

class CpuProgram final : public Program {
 public:
  explicit CpuProgram(const Specialised& sg) : vars_(sg.vars) {
    const Graph& g = *sg.graph;
    std::map<ValueRef, int> slot_of;
    std::vector<char> target_taken(sg.targets.size(), 0);
    auto new_slot = [&](Slot s) {
      slots_.push_back(std::move(s));
      return int(slots_.size() - 1);
    };
    auto untaken_target = [&](ValueRef v) {  // the first target v still has to fill, or -1
      for (size_t t = 0; t < sg.targets.size(); ++t)
        if (sg.targets[t] == v && !target_taken[t]) return int(t);
      return -1;
    };
    const TransposeFolds folds = fold_transposes(g, sg.targets);
    // convolutions take their elementwise epilogues first; the fused groups form from the rest
    const EpiloguePlan epilogues = plan_conv_epilogues(g, sg.targets, folds.dropped);
    std::vector<char> unfused = folds.dropped;
    for (size_t id = 0; id < g.size(); ++id) unfused[id] |= char(epilogues.chain_of[id] >= 0);
    const FusionPlan fusion = plan_fusion(g, sg.targets, unfused);
    // MPSGRAPH_CPU_CONST_WEIGHTS=0: kernels see no constants (read at compile; tests compare both)
    const bool constants_known = !switched_off("MPSGRAPH_CPU_CONST_WEIGHTS");
    for (size_t id = 0; id < g.size(); ++id) {
      const Node& n = g.node(int32_t(id));
      const std::string& op = n.op->name;
      if (folds.dropped[id]) continue;
      const int32_t group = fusion.group_of[id];
      if (group >= 0 && fusion.groups[size_t(group)].back() != int32_t(id)) continue;  // runs in its group's step
      const int32_t chain = epilogues.chain_of[id];
      if (chain >= 0 && epilogues.chains[size_t(chain)].back() != int32_t(id)) continue;  // runs in its chain's step
      if ((n.op->view || passes_through(g, n)) && untaken_target({int32_t(id), 0}) < 0) {  // same bytes: no copy
        slot_of[{int32_t(id), 0}] = slot_of.at(n.inputs[0]);
        views_.push_back({n.name, op, slot_of.at(n.inputs[0])});
        continue;
      }
      if (op == "placeholder") {
        auto it = std::find(sg.feeds.begin(), sg.feeds.end(), int32_t(id));
        slot_of[{int32_t(id), 0}] = new_slot({SlotKind::Feed, it - sg.feeds.begin(), nullptr, 0, {}, n.name, op});
        continue;
      }
      if (op == "constant") {
        slot_of[{int32_t(id), 0}] =
            new_slot({SlotKind::Const, 0, node_attr<std::shared_ptr<const Array>>(n, "value"), 0, {}, n.name, op});
        continue;
      }
      if (op == "read_variable") {
        slot_of[{int32_t(id), 0}] =
            new_slot({SlotKind::Var, node_attr<int64_t>(n, "variable"), nullptr, 0, n.outputs[0], n.name, op});
        continue;
      }
      if (op == "assign_variable") {
        assigns_.push_back({node_attr<int64_t>(n, "variable"), slot_of.at(n.inputs[0]), g.type(n.inputs[0])});
        continue;
      }
      const KernelFactory* f = find_kernel(op);
      if (!f) raise(ErrorKind::NotImplemented, op, n.name, "not implemented on the cpu backend");
      std::vector<ValueRef> inputs = n.inputs;
      KernelFn fused;  // the group's inputs replace the root's
      if (group >= 0) fused = make_fused_kernel(g, fusion.groups[size_t(group)], inputs);
      std::vector<size_t> chain_scratch;
      auto constant_of = [&](ValueRef v) -> std::shared_ptr<const Array> {  // null unless v is a constant's bytes
        if (!constants_known) return nullptr;
        const Slot& sl = slots_[size_t(slot_of.at(v))];
        return sl.kind == SlotKind::Const ? sl.constant : nullptr;
      };
      if (chain >= 0) {  // a matrix product at its head may read transposes' sources
        const std::vector<int32_t>& ch = epilogues.chains[size_t(chain)];
        auto head_fold = folds.matmul.find(ch[0]);
        const std::array<bool, 2> tr = head_fold != folds.matmul.end() ? head_fold->second : std::array<bool, 2>{};
        fused = make_conv_epilogue_kernel(g, ch, inputs, chain_scratch, tr, constant_of);
      }
      auto fold = folds.matmul.find(int32_t(id));
      if (fold != folds.matmul.end())
        for (size_t k = 0; k < 2; ++k)
          if (fold->second[k]) inputs[k] = g.node(inputs[k].node).inputs[0];  // the transpose's source
      std::vector<TensorType> in;
      for (auto& v : inputs) in.push_back(g.type(v));
      Step st;
      st.op = n.op->name.c_str();  // registry entries live as long as the process
      st.graph_op = (n.origin_op ? n.origin_op : n.op)->name.c_str();
      KernelCtx kctx{n, in, n.outputs};
      for (auto& v : inputs) kctx.constants.push_back(constant_of(v));
      if (chain >= 0) {  // profiled as the convolution (product)
        const Node& conv = g.node(epilogues.chains[size_t(chain)][0]);
        st.op = conv.op->name.c_str();
        st.graph_op = (conv.origin_op ? conv.origin_op : conv.op)->name.c_str();
        kctx.scratch_bytes = std::move(chain_scratch);
      }
      // a convolution or product with its epilogue under the product's node, a group under its root's
      st.label = (chain >= 0 ? g.node(epilogues.chains[size_t(chain)][0]).name : n.name) + ": " + st.op +
                 (group >= 0 || chain >= 0 ? " (fused)" : "") + " ";
      for (size_t k = 0; k < in.size(); ++k) st.label += (k ? ", " : "") + type_str(in[k]);
      st.label += " -> " + type_str(n.outputs[0]);
      if (group >= 0 || chain >= 0) st.fn = std::move(fused);
      else if (fold != folds.matmul.end()) st.fn = make_matmul_kernel(kctx, fold->second[0], fold->second[1]);
      else st.fn = (*f)(kctx);
      for (auto& v : inputs) st.in.push_back(slot_of.at(v));
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        ValueRef v{int32_t(id), int32_t(k)};
        const int out_index = untaken_target(v);
        if (out_index >= 0) target_taken[size_t(out_index)] = 1;
        size_t nbytes = size_t(num_elements(n.outputs[k].shape)) * dtype_size(n.outputs[k].dtype);
        int s = out_index >= 0 ? new_slot({SlotKind::Output, out_index, nullptr, nbytes})
                               : new_slot({SlotKind::Arena, -1, nullptr, nbytes});
        slot_of[v] = s;
        slots_[size_t(s)].node = n.name;
        slots_[size_t(s)].op = op;
        st.out.push_back(s);
      }
      for (size_t nbytes : kctx.scratch_bytes) {  // written and read within this step only
        Slot sc{SlotKind::Arena, -1, nullptr, nbytes};
        sc.node = n.name;
        sc.op = op;
        sc.scratch = true;
        st.out.push_back(new_slot(std::move(sc)));
      }
      st.in_ptr.resize(st.in.size());
      st.out_ptr.resize(st.out.size());
      steps_.push_back(std::move(st));
    }
    for (size_t t = 0; t < sg.targets.size(); ++t)
      if (!target_taken[t]) {
        const TensorType& ty = g.type(sg.targets[t]);
        copies_.push_back({slot_of.at(sg.targets[t]), int(t), size_t(num_elements(ty.shape)) * dtype_size(ty.dtype)});
      }
    for (auto& a : assigns_) assign_reads_var_ = assign_reads_var_ || slots_[size_t(a.slot)].kind == SlotKind::Var;
    plan_memory();
    ptr_.resize(slots_.size());
    copy_constants();
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].kind == SlotKind::Const && !const_block_) ptr_[s] = slots_[s].constant->data();
      if (slots_[s].kind == SlotKind::Arena) ptr_[s] = arena_[size_t(slots_[s].index)]->data;
    }
  }

  void run(const std::vector<std::shared_ptr<Array>>& inputs,
           const std::vector<std::shared_ptr<Array>>& outputs) override {
    std::vector<void*> in, out;
    for (auto& a : inputs) in.push_back(a ? a->data() : nullptr);
    for (auto& a : outputs) out.push_back(a->data());
    run(in.data(), out.data());
  }

  // The feeds' and the targets' bytes, in the order of the specialised graph's feeds and targets.
  void run(void* const* inputs, void* const* outputs) {
    std::lock_guard<std::mutex> l(mu_);  // the arena is shared by runs of this program
    std::vector<std::shared_ptr<Array>> held;  // variable values read by this run
    for (size_t s = 0; s < slots_.size(); ++s) {
      const Slot& sl = slots_[s];
      if (sl.kind == SlotKind::Feed) ptr_[s] = inputs[size_t(sl.index)];
      else if (sl.kind == SlotKind::Output) ptr_[s] = outputs[size_t(sl.index)];
      else if (sl.kind == SlotKind::Var) {
        held.push_back(vars_->get(sl.index));  // one read: the value checked is the value used
        const Array& v = *held.back();
        if (v.dtype != sl.type.dtype || v.shape != sl.type.shape)
          raise(ErrorKind::Value, "read_variable", "", "variable now holds " + type_str({v.dtype, v.shape}) +
                                                           " but the executable was compiled for " + type_str(sl.type));
        ptr_[s] = v.data();
      }
    }
    const bool profile = profiling_enabled();
    for (auto& st : steps_) {
      for (size_t i = 0; i < st.in.size(); ++i) st.in_ptr[i] = ptr_[size_t(st.in[i])];
      for (size_t i = 0; i < st.out.size(); ++i) st.out_ptr[i] = ptr_[size_t(st.out[i])];
      if (profile) {
        auto t0 = std::chrono::steady_clock::now();
        st.fn(st.in_ptr.data(), st.out_ptr.data());
        record_profile(st.op, st.graph_op, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), st.label);
      } else {
        st.fn(st.in_ptr.data(), st.out_ptr.data());
      }
    }
    for (auto& c : copies_)
      if (c.nbytes) std::memcpy(outputs[size_t(c.out)], ptr_[size_t(c.slot)], c.nbytes);
    for (auto& a : assigns_) {  // assigns land when the run completes
      if (!assign_reads_var_) {  // the value this program stored last time, if only the store (and this run) hold it: overwrite
        std::lock_guard<std::mutex> l(vars_->mu);
        std::shared_ptr<Array>& cur = vars_->slots.at(size_t(a.var)).value;
        const bool mine = cur && a.last.lock() == cur;
        const long ours = 1 + long(std::count(held.begin(), held.end(), cur));
        if (mine && cur.use_count() == ours && cur->buffer.use_count() == 1) {
          if (cur->nbytes()) std::memcpy(cur->data(), ptr_[size_t(a.slot)], cur->nbytes());
          continue;
        }
      }
      auto v = Array::empty(a.type.dtype, a.type.shape);
      if (v->nbytes()) std::memcpy(v->data(), ptr_[size_t(a.slot)], v->nbytes());
      a.last = v;
      vars_->set(a.var, v);
    }
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
  // The constants (a network's weights) copied into one block, which past a few MiB is mapped
  // in huge pages: each weight tensor read once per run from its own 4 KiB pages costs a TLB
  // miss per page (CNN inference runs 4-7% faster from the block). Bounded: beyond
  // kConstBlockBytes the graph's arrays are read in place (no second copy of large models).
  void copy_constants() {
    constexpr size_t kConstBlockBytes = size_t(256) << 20;
    size_t total = 0;
    for (auto& sl : slots_)
      if (sl.kind == SlotKind::Const) total += (sl.constant->nbytes() + 63) / 64 * 64;
    if (total == 0 || total > kConstBlockBytes) return;
    const_block_ = Buffer::allocate(total);
    size_t off = 0;
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].kind == SlotKind::Const) {
        char* d = static_cast<char*>(const_block_->data) + off;
        if (slots_[s].constant->nbytes()) std::memcpy(d, slots_[s].constant->data(), slots_[s].constant->nbytes());
        ptr_[s] = d;
        off += (slots_[s].constant->nbytes() + 63) / 64 * 64;
      }
  }

  // Arena buffers are reused once their last reader has run; of those that fit, the one
  // released last.
  void plan_memory() {
    std::vector<int> last(slots_.size(), -1);
    for (size_t i = 0; i < steps_.size(); ++i)
      for (int s : steps_[i].in) last[size_t(s)] = int(i);
    for (auto& c : copies_) last[size_t(c.slot)] = int(steps_.size());
    for (auto& a : assigns_) last[size_t(a.slot)] = int(steps_.size());
    std::vector<int> free_list;  // arena buffers, in the order they were released
    std::vector<size_t> capacity;
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (int s : steps_[i].out) {
        Slot& sl = slots_[size_t(s)];
        if (sl.kind != SlotKind::Arena) continue;
        // the buffer released last among those that fit: its bytes were the latest written or
        // read, so they are still in cache (writing into a cold buffer first reads it from memory)
        auto it = free_list.end();
        for (auto f = free_list.begin(); f != free_list.end(); ++f) {
          const size_t cap = capacity[size_t(*f)];
          if (cap < sl.nbytes || cap > 4 * sl.nbytes + 4096) continue;
          it = f;
        }
        if (it != free_list.end()) {
          sl.index = *it;
          free_list.erase(it);
        } else {
          sl.index = int64_t(capacity.size());
          capacity.push_back(sl.nbytes);
        }
      }
      auto release = [&](int s) {
        Slot& sl = slots_[size_t(s)];
        if (sl.kind == SlotKind::Arena && last[size_t(s)] <= int(i)) {
          free_list.push_back(int(sl.index));
          last[size_t(s)] = int(steps_.size()) + 1;  // released once
        }
      };
      for (int s : steps_[i].in) release(s);
      for (int s : steps_[i].out) release(s);  // outputs nobody reads
    }
    // one block for all of them: past a few MiB it is mapped in huge pages (Buffer::allocate),
    // so the activations of a network cost few TLB misses
    std::vector<size_t> offset;
    size_t total = 0;
    for (size_t c : capacity) {
      offset.push_back(total);
      total += (c + 63) / 64 * 64;
    }
    std::shared_ptr<Buffer> block = Buffer::allocate(total);
    for (size_t b = 0; b < capacity.size(); ++b)
      arena_.push_back(Buffer::borrow(static_cast<char*>(block->data) + offset[b], capacity[b], block));
  }

  struct Copy {
    int slot, out;
    size_t nbytes;
  };
  struct View {
    std::string node, op;
    int slot;  // the slot it shares
  };
  std::vector<View> views_;
  struct AssignStep {
    int64_t var;
    int slot;
    TensorType type;
    std::weak_ptr<Array> last;  // the value the previous run stored
  };
  bool assign_reads_var_ = false;  // an assign stores a variable's value as read (a swap): never in place
  std::shared_ptr<VariableStore> vars_;
  std::vector<Slot> slots_;
  std::vector<Step> steps_;
  std::vector<Copy> copies_;
  std::vector<AssignStep> assigns_;
  std::vector<std::shared_ptr<Buffer>> arena_;
  std::shared_ptr<Buffer> const_block_;  // the constants' bytes read at run time (copy_constants), or null
  std::vector<void*> ptr_;
  std::mutex mu_;
};

// A batched graph's front one image at a time, one image per thread, then its rest over the
// batch (image_split.h). The front's program is compiled for one image and one thread, once
// per thread that runs images (each keeps its own arena, and kernels keep state between runs);
// its weights are small by the split's choice.
class SplitProgram final : public Program {
 public:
  SplitProgram(ImageSplit split, int threads) : split_(std::move(split)) {
    {
      SerialScope serial;
      const int64_t instances = std::min<int64_t>(threads, split_.batch);
      for (int64_t t = 0; t < instances; ++t) front_.push_back(std::make_unique<CpuProgram>(split_.front));
    }
    if (!split_.rest_target.empty()) rest_ = std::make_unique<CpuProgram>(split_.rest);
    const Graph& fg = *split_.front.graph;  // one image's types
    for (size_t k = 0; k < split_.front_feed.size(); ++k)
      feed_step_.push_back(split_.front_feed_batched[k] ? nbytes_of(fg.type({split_.front.feeds[k], 0})) : 0);
    for (size_t f = 0; f < split_.frontier_types.size(); ++f) {
      const TensorType& t = split_.frontier_types[f];
      frontier_step_.push_back(nbytes_of(fg.type(split_.front.targets[f])));
      frontier_.push_back(split_.frontier_target[f] < 0 ? Array::empty(t.dtype, t.shape) : nullptr);
    }
  }

  void run(const std::vector<std::shared_ptr<Array>>& inputs,
           const std::vector<std::shared_ptr<Array>>& outputs) override {
    std::lock_guard<std::mutex> l(mu_);  // the frontier's buffers are shared by runs
    const size_t F = frontier_.size();
    std::vector<char*> feed_base, frontier_base(F);
    for (size_t k : split_.front_feed) feed_base.push_back(static_cast<char*>(inputs[k]->data()));
    for (size_t f = 0; f < F; ++f) {
      const int t = split_.frontier_target[f];
      frontier_base[f] = static_cast<char*>(t < 0 ? frontier_[f]->data() : outputs[size_t(t)]->data());
    }
    const int64_t N = split_.batch;
    auto images = [&](int64_t t, std::atomic<int64_t>& next) {  // program t takes the next images
      std::vector<void*> in(feed_base.size()), out(F);
      for (int64_t i = next.fetch_add(1); i < N; i = next.fetch_add(1)) {
        for (size_t k = 0; k < in.size(); ++k) in[k] = feed_base[k] + feed_step_[k] * size_t(i);
        for (size_t f = 0; f < F; ++f) out[f] = frontier_base[f] + frontier_step_[f] * size_t(i);
        front_[size_t(t)]->run(in.data(), out.data());
      }
    };
    std::atomic<int64_t> next{0};
    const int64_t tasks = t_in_parallel ? 1 : std::min<int64_t>(int64_t(front_.size()), num_threads());
    if (tasks <= 1) {
      images(0, next);
    } else {
      std::exception_ptr failed;
      std::mutex failed_mu;
      pool().run(int(tasks), [&](int t) {
        SerialScope task;
        try {
          images(t, next);
        } catch (...) {
          std::lock_guard<std::mutex> fl(failed_mu);
          if (!failed) failed = std::current_exception();
          next.store(N);  // the others stop at their next image
        }
      });
      if (failed) std::rethrow_exception(failed);
    }
    for (auto& [t, f] : split_.target_copies)
      if (outputs[t]->nbytes()) std::memcpy(outputs[t]->data(), frontier_base[f], outputs[t]->nbytes());
    if (!rest_) return;
    std::vector<void*> rest_in, rest_out;
    for (auto& a : inputs) rest_in.push_back(a ? a->data() : nullptr);
    for (size_t f : split_.rest_frontier) rest_in.push_back(frontier_base[f]);
    for (size_t t : split_.rest_target) rest_out.push_back(outputs[t]->data());
    rest_->run(rest_in.data(), rest_out.data());
  }

  std::vector<PlanEntry> memory_plan() const override {
    std::vector<PlanEntry> r = front_[0]->memory_plan();
    for (auto& e : r) e.storage = "image " + e.storage;  // one image's, in each thread's own arena
    if (rest_)
      for (auto& e : rest_->memory_plan()) r.push_back(e);
    return r;
  }

 private:
  ImageSplit split_;
  std::vector<std::unique_ptr<CpuProgram>> front_;
  std::unique_ptr<CpuProgram> rest_;
  std::vector<std::shared_ptr<Array>> frontier_;  // frontier values that are no target
  std::vector<size_t> feed_step_;                 // bytes from one image to the next (0: read whole)
  std::vector<size_t> frontier_step_;
  std::mutex mu_;
};

class CpuEvaluator final : public ConstantEvaluator {
 public:
  std::vector<std::shared_ptr<Array>> evaluate(const Node& node,
                                               const std::vector<std::shared_ptr<const Array>>& inputs) override {
    if (node.op->is_data_dependent(node)) {
      const DynamicKernelFactory* d = find_dynamic_kernel(node.op->name);
      if (!d) return {};
      return (*d)(node, types_of(inputs))(inputs);
    }
    const KernelFactory* f = find_kernel(node.op->name);
    if (!f) return {};
    std::vector<TensorType> in = types_of(inputs);
    KernelCtx kctx{node, in, node.outputs};
    KernelFn fn = (*f)(kctx);
    std::vector<const void*> ip;
    for (auto& a : inputs) ip.push_back(a->data());
    std::vector<std::shared_ptr<Array>> outs;
    std::vector<void*> op;
    for (auto& t : node.outputs) {
      outs.push_back(Array::empty(t.dtype, t.shape));
      op.push_back(outs.back()->data());
    }
    std::vector<std::shared_ptr<Buffer>> scratch;
    for (size_t nbytes : kctx.scratch_bytes) {
      scratch.push_back(Buffer::allocate(nbytes));
      op.push_back(scratch.back()->data);
    }
    fn(ip.data(), op.data());
    return outs;
  }
};

std::atomic<bool> composite_kernels_on{true};

class CpuBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CPU; }
  bool available() const override { return true; }
  std::unique_ptr<Program> compile(const Specialised& sg) override {
    // MPSGRAPH_CPU_CHANNELS_LAST=1: convolutions keep NHWC activations between them (the plan
    // the CUDA backend makes for half-precision networks; on the CPU it checks that plan)
    const char* last = std::getenv("MPSGRAPH_CPU_CHANNELS_LAST");
    if (last && last[0] == '1') return std::make_unique<CpuProgram>(plan_channels_last(sg, [](const Node&) { return true; }));
    // the kernels run NCHW: an NHWC graph keeps its values NCHW between convolutions and pools
    // instead of transposing around each (MPSGRAPH_CPU_CHANNELS_FIRST=0: as built)
    const Specialised planned = switched_off("MPSGRAPH_CPU_CHANNELS_FIRST") ? sg : plan_channels_first(sg);
    const int threads = num_threads();
    if (std::optional<ImageSplit> split = plan_image_split(planned, threads))
      return std::make_unique<SplitProgram>(std::move(*split), threads);
    return std::make_unique<CpuProgram>(planned);
  }
  ConstantEvaluator* constant_evaluator() override { return &evaluator_; }
  // a composite with a kernel of its own runs natively: a loop's gradient (one kernel with a
  // tape; its decomposition recomputes states), attention (blocked, never the L x S scores)
  bool implements_composite(const Node& node) const override {
    return composite_kernels_on.load(std::memory_order_relaxed) && find_kernel(node.op->name) != nullptr;
  }
  std::vector<std::shared_ptr<Array>> run_data_dependent(const Node& node, const std::vector<TensorType>& in_types,
                                                         const std::vector<std::shared_ptr<const Array>>& inputs) override {
    const DynamicKernelFactory* d = find_dynamic_kernel(node.op->name);
    if (!d) return Backend::run_data_dependent(node, in_types, inputs);  // raises naming op and backend
    return (*d)(node, in_types)(inputs);
  }

 private:
  CpuEvaluator evaluator_;
};

const RegisterBackend registered(DeviceKind::CPU, make_cpu_backend);

}  // namespace

void set_composite_kernels(bool on) { composite_kernels_on.store(on); }

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mg::cpu
