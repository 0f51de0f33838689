// CUDA matrix multiplication: cuBLASLt for float32/float16/bfloat16 (float accumulation, no
// TF32), batched with strided batches (stride 0 for an operand without batch dims; other
// broadcast batches are expanded into scratch first). Integer dtypes use a generated kernel.
// cuBLASLt is opened with dlopen on first use, like NVRTC (never linked). The bias and
// relu-bias epilogues serve the steps the epilogue planner fuses (epilogue_cuda.h).
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"

namespace mg::cuda {

namespace {

// The part of cuBLASLt's C API used here, declared from its documentation (cublasLt.h).
using Status = int;
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo {
  uint64_t data[8];
};
struct Heuristic {
  Algo algo;
  size_t workspace;
  Status state;
  float waves;
  int reserved[4];
};
enum : int {
  kDescComputeType = 0, kDescScaleType = 1, kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8,
  kOpT = 1,
  kEpilogueDefault = 1, kEpilogueBias = 4, kEpilogueReluBias = 6,
  kLayoutBatchCount = 5, kLayoutBatchStride = 6,
  kPrefMaxWorkspace = 1,
  kCompute32F = 68,
  kR32F = 0, kR16F = 2, kR16BF = 14,
};

struct Lt {
  void* lib = nullptr;
  std::string error;
  Handle handle = nullptr;
  Status (*create)(Handle*) = nullptr;
  Status (*desc_create)(Desc*, int, int) = nullptr;
  Status (*desc_set)(Desc, int, const void*, size_t) = nullptr;
  Status (*desc_destroy)(Desc) = nullptr;
  Status (*layout_create)(Layout*, int, uint64_t, uint64_t, int64_t) = nullptr;
  Status (*layout_set)(Layout, int, const void*, size_t) = nullptr;
  Status (*layout_destroy)(Layout) = nullptr;
  Status (*pref_create)(Pref*) = nullptr;
  Status (*pref_set)(Pref, int, const void*, size_t) = nullptr;
  Status (*pref_destroy)(Pref) = nullptr;
  Status (*heuristic)(Handle, Desc, Layout, Layout, Layout, Layout, Pref, int, Heuristic*, int*) = nullptr;
  Status (*matmul)(Handle, Desc, const void*, const void*, Layout, const void*, Layout, const void*, const void*, Layout, void*,
                   Layout, const Algo*, void*, size_t, cudaStream_t) = nullptr;
  void* workspace = nullptr;
  size_t workspace_size = size_t(32) << 20;
};

Lt& lt() {
  static Lt l = [] {
    Lt r;
    r.lib = open_cuda_library("MPSGRAPH_CUBLASLT", "libcublasLt.so");
    if (!r.lib) {
      r.error = "cuBLASLt (libcublasLt.so) was not found; install cuBLAS or set MPSGRAPH_CUBLASLT to its path";
      return r;
    }
    bool ok = sym(r.lib, "cublasLtCreate", r.create) && sym(r.lib, "cublasLtMatmulDescCreate", r.desc_create) &&
              sym(r.lib, "cublasLtMatmulDescSetAttribute", r.desc_set) && sym(r.lib, "cublasLtMatmulDescDestroy", r.desc_destroy) &&
              sym(r.lib, "cublasLtMatrixLayoutCreate", r.layout_create) &&
              sym(r.lib, "cublasLtMatrixLayoutSetAttribute", r.layout_set) &&
              sym(r.lib, "cublasLtMatrixLayoutDestroy", r.layout_destroy) &&
              sym(r.lib, "cublasLtMatmulPreferenceCreate", r.pref_create) &&
              sym(r.lib, "cublasLtMatmulPreferenceSetAttribute", r.pref_set) &&
              sym(r.lib, "cublasLtMatmulPreferenceDestroy", r.pref_destroy) &&
              sym(r.lib, "cublasLtMatmulAlgoGetHeuristic", r.heuristic) && sym(r.lib, "cublasLtMatmul", r.matmul);
    if (!ok || r.create(&r.handle) != 0) {
      r.error = "cuBLASLt could not be initialised";
      r.lib = nullptr;
      return r;
    }
    check(cudaMalloc(&r.workspace, r.workspace_size), "allocating the cuBLASLt workspace");
    return r;
  }();
  if (!l.lib) raise(ErrorKind::Runtime, "matrix_multiplication", "", l.error);
  return l;
}

void lt_check(Status s, const char* what) {
  if (s != 0) raise(ErrorKind::Runtime, "matrix_multiplication", "", std::string("cuBLASLt ") + what + " failed (status " + std::to_string(s) + ")");
}

// One prepared GEMM: descriptors owned for the program's life.
struct Gemm {
  Desc desc = nullptr;
  Layout a = nullptr, b = nullptr, c = nullptr;
  Algo algo{};
  ~Gemm() {
    Lt& l = lt();
    if (desc) l.desc_destroy(desc);
    for (Layout x : {a, b, c})
      if (x) l.layout_destroy(x);
  }
};

// How many of cuBLASLt's ranked algorithms a small GEMM's compile times (fastest_candidate).
constexpr int kCandidates = 8;
// Multiply-adds up to which the candidates are timed: the heuristic's first choice for the small
// products of a training step splits K and adds a reduction kernel after each GEMM (H100:
// cutlass sgemm 128x64 plus splitKreduce for 128x64x128).
constexpr int64_t kSearchMaxWork = int64_t(1) << 31;

struct GemmKey {
  int dtype, epilogue, transposed;
  int64_t batch, M, N, K, stride_a, stride_b;
  bool operator<(const GemmKey& o) const {
    return std::tie(dtype, epilogue, transposed, batch, M, N, K, stride_a, stride_b) <
           std::tie(o.dtype, o.epilogue, o.transposed, o.batch, o.M, o.N, o.K, o.stride_a, o.stride_b);
  }
};

// The index among `found` candidates (ranked by cuBLASLt) of the one that runs fastest on this
// device, timed once per shape in the process on zeroed buffers; 0 where the product is large or
// there is one candidate. Off unless MPSGRAPH_CUDA_GEMM_SEARCH=1: on an H100 the MLP step ran
// 0.9-1.13x with it, no clear gain.
int fastest_candidate(const Gemm& g, const GemmKey& key, const Heuristic* h, int found, bool bias, size_t es) {
  if (found <= 1 || key.batch * key.M * key.N * key.K > kSearchMaxWork || !switched_on("MPSGRAPH_CUDA_GEMM_SEARCH"))
    return 0;
  static std::mutex mu;
  static std::map<GemmKey, int> chosen;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second < found ? it->second : 0;
  static cudaStream_t s = [] {
    cudaStream_t r = nullptr;
    check(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking), "creating a stream");
    return r;
  }();
  const size_t na = size_t(key.stride_a ? key.batch * key.M * key.K : key.M * key.K) * es,
               nb = size_t(key.stride_b ? key.batch * key.K * key.N : key.K * key.N) * es,
               nc = size_t(key.batch * key.M * key.N) * es, nbias = size_t(key.N) * es;
  std::vector<std::shared_ptr<Buffer>> bufs;
  for (size_t n : {na, nb, nc, nbias}) {
    bufs.push_back(device_alloc(n));
    check(cudaMemsetAsync(bufs.back()->data, 0, n, s), "clearing a search buffer");
  }
  const void* in[3] = {bufs[0]->data, bufs[1]->data, bufs[3]->data};
  void* out[1] = {bufs[2]->data};
  Lt& l = lt();
  int best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; i < found; ++i) {
    if (h[i].state != 0 || h[i].workspace > l.workspace_size) continue;
    const Algo* algo = &h[i].algo;
    LaunchFn fn = [&g, algo, bias](cudaStream_t st, const void* const* x, void* const* y) {
      const float one = 1.f, zero = 0.f;
      const void* bias_ptr = x[2];
      if (bias) lt_check(lt().desc_set(g.desc, kDescBiasPointer, &bias_ptr, sizeof(bias_ptr)), "bias pointer");
      lt_check(lt().matmul(lt().handle, g.desc, &one, x[1], g.a, x[0], g.b, &zero, y[0], g.c, y[0], g.c, algo,
                           lt().workspace, lt().workspace_size, st),
               "matmul");
    };
    const float ms = time_launch(fn, s, in, out, best_ms, nullptr);
    if (ms < best_ms) best_ms = ms, best = i;
  }
  chosen[key] = best;
  return best;
}

int lt_type(DType t) { return t == DType::Float16 ? kR16F : t == DType::BFloat16 ? kR16BF : kR32F; }

// Integer (and other non-cuBLAS) matmul: one thread per output element, wrapping arithmetic.
LaunchFn int_matmul(DType dt, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t sa, int64_t sb) {
  std::string src = prelude() + "typedef " + compute_type(dt) + " C;\n" +
                    "extern \"C\" __global__ void k(i64 batch, i64 M, i64 N, i64 K, i64 sa, i64 sb, const " + storage_type(dt) +
                    "* a, const " + storage_type(dt) + "* b, " + storage_type(dt) + "* out) {\n"
                    "  const i64 total = batch * M * N;\n"
                    "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {\n"
                    "    const i64 n = i % N, m = (i / N) % M, bt = i / (M * N);\n"
                    "    u64 acc = 0;\n"
                    "    for (i64 k = 0; k < K; ++k) acc += (u64)a[bt * sa + m * K + k] * (u64)b[bt * sb + k * N + n];\n"
                    "    out[i] = " + store_expr(dt, "C(acc)") + ";\n  }\n}\n";
  Kernel kern = nvrtc_kernel(src, "k");
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    int64_t b = batch, m = M, n = N, k = K, a_s = sa, b_s = sb;
    const void* x = in[0];
    const void* y = in[1];
    void* o = out[0];
    void* args[] = {&b, &m, &n, &k, &a_s, &b_s, &x, &y, &o};
    const int64_t total = batch * M * N;
    launch(kern, std::min<int64_t>((total + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

// out[i] += bias[i % N], then relu (NaN stays NaN): the epilogue where cuBLASLt has no
// algorithm for it.
LaunchFn bias_kernel(DType dt, int64_t n, int64_t N, bool relu) {
  const std::string v = relu ? "(v > 0.f ? v : (v != v ? v : 0.f))" : "v";
  std::string src = prelude() + "extern \"C\" __global__ void k(i64 n, i64 N, " + storage_type(dt) + "* out, const " +
                    storage_type(dt) + "* bias) {\n"
                    "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {\n"
                    "    const float v = " + load_expr(dt, "out[i]") + " + " + load_expr(dt, "bias[i % N]") + ";\n"
                    "    out[i] = " + store_expr(dt, v) + ";\n  }\n}\n";
  Kernel kern = nvrtc_kernel(src, "k");
  return [kern, n, N](cudaStream_t s, const void* const* in, void* const* out) {
    int64_t nn = n, nc = N;
    void* o = out[0];
    const void* b = in[2];
    void* args[] = {&nn, &nc, &o, &b};
    launch(kern, std::min<int64_t>((n + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

// How operand i's buffer holds its value (KernelCtx::in_perm): as it is, as the value with its
// last two dims swapped (read through cuBLASLt's transpose flag), or otherwise permuted
// (copied into scratch first).
enum class Held { Plain, Swapped, Permuted };
Held held(const KernelCtx& c, size_t i) {
  if (i >= c.in_perm.size() || c.in_perm[i].empty()) return Held::Plain;
  const std::vector<int64_t>& p = c.in_perm[i];
  const size_t r = p.size();
  bool identity = true, swapped = r >= 2;
  for (size_t d = 0; d < r; ++d) {
    identity = identity && p[d] == int64_t(d);
    const int64_t want = d + 2 < r ? int64_t(d) : d + 2 == r ? int64_t(r - 1) : int64_t(r - 2);
    swapped = swapped && p[d] == want;
  }
  return identity ? Held::Plain : swapped ? Held::Swapped : Held::Permuted;
}

// The copy of operand i's value out of its permuted buffer into a contiguous one.
StridedCopy unpermute_copy(const KernelCtx& c, size_t i) {
  const Shape& value = c.in[i].shape;
  return make_copy(dtype_size(c.in[i].dtype), value, buffer_strides(value, c.in_perm[i]), contiguous_strides(value), 0,
                   0);
}

// epilogue: kEpilogueDefault, or kEpilogueBias / kEpilogueReluBias with the bias (N,) as
// input 2 (float dtypes; the epilogue planner only fuses those). An operand read through an
// absorbed transpose (register_layout_inputs) that swaps its last two dims goes to cuBLASLt
// with the transpose flag; the MLP step's weight and data gradients ran a transpose kernel
// each before.
LaunchFn matmul_with(const KernelCtx& c, int epilogue) {
  const DType dt = c.in[0].dtype;
  const bool cublas = dt == DType::Float32 || dt == DType::Float16 || dt == DType::BFloat16;
  Held hx = held(c, 0), hy = held(c, 1);
  // the integer kernel reads contiguous operands only
  if (!cublas && hx == Held::Swapped) hx = Held::Permuted;
  if (!cublas && hy == Held::Swapped) hy = Held::Permuted;
  Shape xs = c.in[0].shape, ys = c.in[1].shape;
  if (xs.size() == 1) xs.insert(xs.begin(), 1);
  if (ys.size() == 1) ys.push_back(1);
  const int64_t M0 = xs[xs.size() - 2], K = xs.back(), N = ys.back();
  Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
  Shape bo = c.out[0].shape;
  bo.resize(std::max(bx.size(), by.size()));
  for (size_t i = 0; i < bo.size(); ++i) {
    const size_t ox = bo.size() - bx.size(), oy = bo.size() - by.size();
    const int64_t dx = i >= ox ? bx[i - ox] : 1, dy = i >= oy ? by[i - oy] : 1;
    bo[i] = std::max(dx, dy);
    if (dx == 0 || dy == 0) bo[i] = 0;
  }
  int64_t batch = num_elements(bo), M = M0;
  const int64_t nbx = num_elements(bx), nby = num_elements(by);
  const int64_t n_out = batch * M * N;
  // operands whose batch dims are neither full nor absent are expanded into scratch: a swapped
  // one is unpermuted first
  const bool ex = nbx != 1 && nbx != batch, ey = nby != 1 && nby != batch;
  if (ex && hx == Held::Swapped) hx = Held::Permuted;
  if (ey && hy == Held::Swapped) hy = Held::Permuted;
  // (..., M, K) @ (K, N): one GEMM of batch * M rows, where x's rows lie one after another
  if (nby == 1 && nbx == batch && batch > 1 && hx != Held::Swapped) {
    M *= batch;
    batch = 1;
  }
  if (n_out == 0) return [](cudaStream_t, const void* const*, void* const*) {};
  if (K == 0) {
    const int32_t es = int32_t(dtype_size(dt));
    LaunchFn post;
    if (epilogue != kEpilogueDefault) post = bias_kernel(dt, n_out, N, epilogue == kEpilogueReluBias);
    return [n_out, es, post](cudaStream_t s, const void* const* in, void* const* out) {
      fill_bytes(out[0], n_out, es, 0, s);
      if (post) post(s, in, out);
    };
  }
  const size_t es = dtype_size(dt);
  size_t px = 0, py = 0, sx = 0, sy = 0;
  StridedCopy ux{}, uy{};
  if (hx == Held::Permuted) ux = unpermute_copy(c, 0), px = c.scratch(size_t(num_elements(c.in[0].shape)) * es);
  if (hy == Held::Permuted) uy = unpermute_copy(c, 1), py = c.scratch(size_t(num_elements(c.in[1].shape)) * es);
  if (ex) sx = c.scratch(size_t(batch * M * K) * es);
  if (ey) sy = c.scratch(size_t(batch * K * N) * es);
  auto expand_copy = [&](const Shape& b, int64_t rows, int64_t cols) {
    Shape full = bo;
    full.push_back(rows);
    full.push_back(cols);
    Shape src(bo.size() - b.size(), 1);
    src.insert(src.end(), b.begin(), b.end());
    src.push_back(rows);
    src.push_back(cols);
    std::vector<int64_t> st = contiguous_strides(src);
    if (full.size() > size_t(kMaxRank)) raise(ErrorKind::NotImplemented, "matrix_multiplication", c.node.name, "too many batch dims on cuda");
    for (size_t i = 0; i < full.size(); ++i)
      if (src[i] == 1) st[i] = 0;
    return make_copy(es, full, st, contiguous_strides(full), 0, 0);
  };
  StridedCopy cx{}, cy{};
  if (ex) cx = expand_copy(bx, M, K);
  if (ey) cy = expand_copy(by, K, N);
  const int64_t stride_a = (ex || nbx == batch) && batch > 1 ? M * K : 0;
  const int64_t stride_b = (ey || nby == batch) && batch > 1 ? K * N : 0;
  const bool tx = hx == Held::Swapped, ty = hy == Held::Swapped;
  LaunchFn gemm;
  if (cublas) {
    Lt& l = lt();
    auto g = std::make_shared<Gemm>();
    const int t = lt_type(dt);
    lt_check(l.desc_create(&g->desc, kCompute32F, kR32F), "descriptor");
    if (epilogue != kEpilogueDefault) lt_check(l.desc_set(g->desc, kDescEpilogue, &epilogue, sizeof(epilogue)), "epilogue");
    // row-major C = A B is column-major C^T = B^T A^T: cuBLAS's A is our y, its B our x; a
    // swapped operand's buffer is, column-major, the other matrix, read transposed
    const int32_t op_t = kOpT;
    if (ty) lt_check(l.desc_set(g->desc, kDescTransA, &op_t, sizeof(op_t)), "transpose flag");
    if (tx) lt_check(l.desc_set(g->desc, kDescTransB, &op_t, sizeof(op_t)), "transpose flag");
    if (ty) lt_check(l.layout_create(&g->a, t, uint64_t(K), uint64_t(N), K), "layout");
    else lt_check(l.layout_create(&g->a, t, uint64_t(N), uint64_t(K), N), "layout");
    if (tx) lt_check(l.layout_create(&g->b, t, uint64_t(M), uint64_t(K), M), "layout");
    else lt_check(l.layout_create(&g->b, t, uint64_t(K), uint64_t(M), K), "layout");
    lt_check(l.layout_create(&g->c, t, uint64_t(N), uint64_t(M), N), "layout");
    if (batch > 1) {
      const int32_t bc = int32_t(batch);
      const int64_t so = M * N;
      for (Layout x : {g->a, g->b, g->c}) lt_check(l.layout_set(x, kLayoutBatchCount, &bc, sizeof(bc)), "batch count");
      lt_check(l.layout_set(g->a, kLayoutBatchStride, &stride_b, sizeof(int64_t)), "batch stride");
      lt_check(l.layout_set(g->b, kLayoutBatchStride, &stride_a, sizeof(int64_t)), "batch stride");
      lt_check(l.layout_set(g->c, kLayoutBatchStride, &so, sizeof(int64_t)), "batch stride");
    }
    Pref pref = nullptr;
    lt_check(l.pref_create(&pref), "preference");
    l.pref_set(pref, kPrefMaxWorkspace, &l.workspace_size, sizeof(size_t));
    Heuristic h[kCandidates]{};
    int found = 0;
    Status st = l.heuristic(l.handle, g->desc, g->a, g->b, g->c, g->c, pref, kCandidates, h, &found);
    bool in_gemm = epilogue != kEpilogueDefault;
    if (in_gemm && (st != 0 || found == 0)) {  // no fused algorithm: plain GEMM, then bias_kernel
      const int plain = kEpilogueDefault;
      lt_check(l.desc_set(g->desc, kDescEpilogue, &plain, sizeof(plain)), "epilogue");
      in_gemm = false;
      st = l.heuristic(l.handle, g->desc, g->a, g->b, g->c, g->c, pref, kCandidates, h, &found);
    }
    l.pref_destroy(pref);
    if (st != 0 || found == 0)
      raise(ErrorKind::NotImplemented, "matrix_multiplication", c.node.name, "cuBLASLt has no algorithm for this GEMM");
    const GemmKey key{int(dt), in_gemm ? epilogue : kEpilogueDefault, int(tx) + 2 * int(ty), batch, M, N, K, stride_a,
                      stride_b};
    g->algo = h[fastest_candidate(*g, key, h, found, in_gemm, es)].algo;
    LaunchFn post;
    if (epilogue != kEpilogueDefault && !in_gemm) post = bias_kernel(dt, n_out, N, epilogue == kEpilogueReluBias);
    gemm = [g, in_gemm, post](cudaStream_t s, const void* const* in, void* const* out) {
      Lt& l = lt();
      const float one = 1.f, zero = 0.f;
      if (in_gemm) {  // the bias buffer's address may change between runs
        const void* bias = in[2];
        lt_check(l.desc_set(g->desc, kDescBiasPointer, &bias, sizeof(bias)), "bias pointer");
      }
      lt_check(l.matmul(l.handle, g->desc, &one, in[1], g->a, in[0], g->b, &zero, out[0], g->c, out[0], g->c, &g->algo,
                        l.workspace, l.workspace_size, s),
               "matmul");
      if (post) post(s, in, out);
    };
  } else if (epilogue != kEpilogueDefault) {
    raise(ErrorKind::Type, "matrix_multiplication", c.node.name, "a bias epilogue needs a float dtype");
  } else if (dt != DType::Bool && dt != DType::Float64) {
    gemm = int_matmul(dt, batch, M, N, K, stride_a, stride_b);
  } else {
    raise(ErrorKind::Type, "matrix_multiplication", c.node.name, std::string("no cuda kernel for ") + dtype_name(dt));
  }
  const bool ux_on = hx == Held::Permuted, uy_on = hy == Held::Permuted;
  if (!ex && !ey && !ux_on && !uy_on) return gemm;
  const bool bias = epilogue != kEpilogueDefault;
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    const void* ins[3] = {in[0], in[1], bias ? in[2] : nullptr};
    if (ux_on) strided_copy(ux, ins[0], out[px], s), ins[0] = out[px];
    if (uy_on) strided_copy(uy, ins[1], out[py], s), ins[1] = out[py];
    if (ex) strided_copy(cx, ins[0], out[sx], s), ins[0] = out[sx];
    if (ey) strided_copy(cy, ins[1], out[sy], s), ins[1] = out[sy];
    gemm(s, ins, out);
  };
}

LaunchFn matmul_factory(const KernelCtx& c) { return matmul_with(c, kEpilogueDefault); }

}  // namespace

LaunchFn matmul_bias_kernel(const KernelCtx& c, bool relu) { return matmul_with(c, relu ? kEpilogueReluBias : kEpilogueBias); }

void register_matmul_kernels() {
  register_kernel("matrix_multiplication", matmul_factory);
  // transposed operands read in place (MPSGRAPH_CUDA_MATMUL_TRANSPOSES=0, read at the first
  // compile: every transpose runs): the MLP training step 1.08x on an H100 at batch 128 and 8192
  if (!switched_off("MPSGRAPH_CUDA_MATMUL_TRANSPOSES")) register_layout_inputs("matrix_multiplication", {0, 1}, false);
}

}  // namespace mg::cuda
