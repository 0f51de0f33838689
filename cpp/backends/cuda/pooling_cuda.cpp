// CUDA pooling primitives (max_pooling_nd(_return_indices, _gradient, _gather),
// avg/sum_pooling_nd(_gradient)) as generated kernels with the CPU kernels' semantics (see
// core/ops/pooling_geom.h): the k pooled dims trail, padding and output sizes come from
// ops::pool_dims, windows are walked over their taps inside the input in row-major order, the
// first maximum wins and a NaN sticks, an empty window gives -inf (max, index -1) or 0.
//
// Forward ops: one thread per output, from kernels specialised to the geometry. Gradients
// gather instead of scattering (no atomics, the same order as the CPU's scatter): one thread
// per source element visits the outputs whose
// windows hold it in row-major order; the max gradient first stores each window's argmax in
// scratch. float16/bfloat16 compute in float32, the gradients round to the storage type after
// each addition as the CPU's scatter does.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/elementwise_cuda.h"
#include "core/error.h"
#include "core/ops/pooling_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

constexpr int kMaxK = 8;
struct PoolGeom {
  int64_t batch = 0, in_plane = 1, out_plane = 1;
  int32_t k = 0;
  int64_t in[kMaxK] = {}, out[kMaxK] = {}, ker[kMaxK] = {}, st[kMaxK] = {}, dil[kMaxK] = {}, pb[kMaxK] = {}, pa[kMaxK] = {};
};

const char* kPoolDevice = R"(
struct PG { i64 batch, in_plane, out_plane; int k; i64 in[8], out[8], ker[8], st[8], dil[8], pb[8], pa[8]; };
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 cdiv(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
__device__ __forceinline__ i64 fdiv(i64 a, i64 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
// The taps of output q's window inside the input: per dim the first one's offset, their count,
// the offset step, and the count inside the padded input (the include_zero_pad divisor).
struct Win { i64 first[8], n[8], step[8], npad[8]; bool empty; };
__device__ __forceinline__ void make_win(const PG& g, i64 q, Win& w) {
  i64 mul = 1; w.empty = false;
  for (int d = g.k - 1; d >= 0; --d) {
    const i64 o = q % g.out[d]; q /= g.out[d];
    const i64 K = g.ker[d], dl = g.dil[d], n = g.in[d], start = o * g.st[d] - g.pb[d];
    const i64 t0 = start < 0 ? imin(K, cdiv(-start, dl)) : 0;
    const i64 t1 = start < n ? imin(K, cdiv(n - start, dl)) : 0;
    w.first[d] = (start + t0 * dl) * mul; w.n[d] = t1 - t0 > 0 ? t1 - t0 : 0; w.step[d] = dl * mul;
    const i64 np = imin(K, cdiv(n + g.pa[d] - start, dl));
    w.npad[d] = np > 0 ? np : 0;
    if (w.n[d] <= 0) w.empty = true;
    mul *= n;
  }
}
__device__ __forceinline__ double win_div(const PG& g, const Win& w, bool pad) {
  double r = 1;
  for (int d = 0; d < g.k; ++d) r *= (double)(pad ? w.npad[d] : w.n[d]);
  return r;
}
// Runs BODY with `off` at each tap of window w (row-major).
#define FOR_WINDOW(g, w, BODY) { \
  i64 cnt[8], off = 0; \
  for (int d = 0; d < g.k; ++d) { cnt[d] = 0; off += w.first[d]; } \
  if (!w.empty) for (;;) { \
    BODY; \
    int d = g.k - 1; \
    for (; d >= 0; --d) { off += w.step[d]; if (++cnt[d] < w.n[d]) break; off -= w.step[d] * w.n[d]; cnt[d] = 0; } \
    if (d < 0) break; } }
// Runs BODY with `q` at each output (in the plane) whose window holds source position ip,
// in row-major order.
#define FOR_COVERING(g, ip, BODY) { \
  i64 lo[8], hi[8], cur[8], rem = ip; bool none = false; \
  for (int d = g.k - 1; d >= 0; --d) { \
    const i64 pos = rem % g.in[d]; rem /= g.in[d]; \
    const i64 a = pos + g.pb[d]; \
    lo[d] = imax((i64)0, cdiv(a - (g.ker[d] - 1) * g.dil[d], g.st[d])); \
    hi[d] = imin(g.out[d] - 1, fdiv(a, g.st[d])); \
    if (lo[d] > hi[d]) none = true; cur[d] = lo[d]; } \
  if (!none) for (;;) { \
    bool hit = true; i64 q = 0; \
    rem = ip; \
    for (int d = g.k - 1; d >= 0; --d) { const i64 pos = rem % g.in[d]; rem /= g.in[d]; \
      if ((pos + g.pb[d] - cur[d] * g.st[d]) % g.dil[d] != 0) hit = false; } \
    for (int d = 0; d < g.k; ++d) q = q * g.out[d] + cur[d]; \
    if (hit) { BODY; } \
    int d = g.k - 1; \
    for (; d >= 0; --d) { if (++cur[d] <= hi[d]) break; cur[d] = lo[d]; } \
    if (d < 0) break; } }
// The first maximum in window order (a NaN wins); -1 for an empty window.
#define ARGMAX(g, w, X, best, arg) { \
  bool first = true; best = -__int_as_float(0x7f800000); arg = -1; \
  FOR_WINDOW(g, w, { const float v = LD(X[off]); \
    if (first || v > best || v != v) { best = v; arg = off; } first = false; }) }
)";

std::string header(DType dt) {
  std::string h = prelude() + "typedef " + storage_type(dt) + " S;\n#define LD(e) " + load_expr(dt, "(e)") + "\n";
  // the CPU's scatters add in the storage type
  h += dt == DType::Float32 ? "#define ROUND(e) (e)\n" : "#define ROUND(e) " + load_expr(dt, store_expr(dt, "(e)")) + "\n";
  return h + kPoolDevice;
}

const char* kForOutputs =
    "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.batch * g.out_plane; i += (i64)gridDim.x * blockDim.x) {\n"
    "    const i64 b = i / g.out_plane; Win w; make_win(g, i % g.out_plane, w);\n";
const char* kForSources =
    "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.batch * g.in_plane; i += (i64)gridDim.x * blockDim.x) {\n"
    "    const i64 b = i / g.in_plane, ip = i % g.in_plane;\n";

PoolGeom make_geom(const KernelCtx& c, const Shape& src) {
  const ops::PoolSpec& s = typed_attrs<ops::PoolingAttrs>(c.node).window;
  const std::string& op = c.node.op->name;
  PoolGeom g;
  g.k = int32_t(s.k());
  if (g.k < 1 || g.k > kMaxK || src.size() < s.k()) raise(ErrorKind::Runtime, op, c.node.name, "bad pooling plan");
  const size_t lead = src.size() - s.k();
  g.batch = 1;
  for (size_t i = 0; i < lead; ++i) g.batch *= src[i];
  std::vector<int64_t> in(src.begin() + int64_t(lead), src.end());
  std::vector<ops::PoolDim> dims;
  const std::string err = ops::pool_dims(s, in, dims);
  if (!err.empty()) raise(ErrorKind::Value, op, c.node.name, err);
  for (size_t d = 0; d < s.k(); ++d) {
    g.in[d] = in[d];
    g.out[d] = dims[d].out;
    g.ker[d] = s.kernel[d];
    g.st[d] = s.stride[d];
    g.dil[d] = s.dilation[d];
    g.pb[d] = dims[d].before;
    g.pa[d] = dims[d].after;
    g.in_plane *= in[d];
    g.out_plane *= dims[d].out;
  }
  return g;
}

// MPSGRAPH_CUDA_FAST_POOLING=0 keeps the generic forward kernels (the reference the tests
// compare the specialised ones with)
bool fast_pooling() {
  static const bool on = !switched_off("MPSGRAPH_CUDA_FAST_POOLING");
  return on;
}

void check_dtype(const KernelCtx& c, DType dt) {
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16)
    raise(ErrorKind::Type, c.node.op->name, c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(dt));
}

// A kernel `k(PG g, pointers...)` over `n` threads; `ptrs` picks inputs (>= 0) and outputs
// (-1 - index) in order.
LaunchFn launcher(const std::string& src, const PoolGeom& g, int64_t n, std::vector<int> ptrs) {
  Kernel kern = nvrtc_kernel(src, "k");
  return [kern, g, n, ptrs](cudaStream_t s, const void* const* in, void* const* out) {
    if (n == 0) return;
    PoolGeom geom = g;
    const void* p[4] = {};
    void* args[5] = {&geom};
    for (size_t i = 0; i < ptrs.size(); ++i) {
      p[i] = ptrs[i] >= 0 ? in[ptrs[i]] : out[-1 - ptrs[i]];
      args[1 + i] = &p[i];
    }
    launch(kern, std::min<int64_t>((n + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

// 0: sum, 1: average over the taps inside the input, 2: inside the padded input (the enum's order).
int linear_mode(const Node& n) { return static_cast<int>(typed_attrs<ops::PoolingAttrs>(n).divisor); }

// Kernel sources by (dtype, variant): `k(PG g, params)` with the argmax of each output's
// window over `src` in best/arg.
std::string over_outputs(DType dt, const std::string& params, const std::string& src) {
  return header(dt) + "extern \"C\" __global__ void k(PG g, " + params + ") {\n" + kForOutputs +
         "    float best; i64 arg;\n    ARGMAX(g, w, (" + src + " + b * g.in_plane), best, arg);\n";
}
std::string max_forward_src(DType dt, const std::string& it) {  // it: index type, "" without
  return over_outputs(dt, "const S* __restrict__ x, S* __restrict__ y, " + (it.empty() ? "i32" : it) + "* __restrict__ ind", "x") +
         "    y[i] = " + store_expr(dt, "best") + ";\n" + (it.empty() ? "" : "    ind[i] = (" + it + ")arg;\n") + "  }\n}\n";
}
std::string gather_src(DType dt) {
  return over_outputs(dt, "const S* __restrict__ x, const S* __restrict__ s, S* __restrict__ y", "s") +
         "    y[i] = arg < 0 ? " + store_expr(dt, "0.f") + " : x[b * g.in_plane + arg];\n  }\n}\n";
}
std::string argmax_src(DType dt) {
  return over_outputs(dt, "const S* __restrict__ s, i64* __restrict__ args", "s") + "    args[i] = arg;\n  }\n}\n";
}
std::string max_scatter_src(DType dt) {
  return header(dt) + "extern \"C\" __global__ void k(PG g, const S* __restrict__ dy, const i64* __restrict__ args, S* __restrict__ dx) {\n" +
         kForSources +
         "    float acc = 0.f;\n"
         "    FOR_COVERING(g, ip, { const i64 o = b * g.out_plane + q; if (args[o] == ip) acc = ROUND(acc + LD(dy[o])); });\n"
         "    dx[i] = " + store_expr(dt, "acc") + ";\n  }\n}\n";
}
std::string linear_forward_src(DType dt, int mode) {
  std::string src = header(dt) + "extern \"C\" __global__ void k(PG g, const S* __restrict__ x, S* __restrict__ y) {\n" +
                    kForOutputs +
                    "    float acc = 0.f; const S* xb = x + b * g.in_plane;\n"
                    "    FOR_WINDOW(g, w, { acc += LD(xb[off]); });\n";
  if (mode)
    src += std::string("    const double dv = w.empty ? 0.0 : win_div(g, w, ") + (mode == 2 ? "true" : "false") +
           ");\n    acc = dv > 0 ? acc / (float)dv : 0.f;\n";
  return src + "    y[i] = " + store_expr(dt, "acc") + ";\n  }\n}\n";
}
std::string linear_gradient_src(DType dt, int mode) {
  std::string body = "const i64 o = b * g.out_plane + q; float gv = LD(dy[o]);";
  if (mode)
    body += std::string(" Win w; make_win(g, q, w); const double dv = win_div(g, w, ") + (mode == 2 ? "true" : "false") +
            "); if (dv > 0) acc = ROUND(acc + gv / (float)dv);";
  else
    body += " acc = ROUND(acc + gv);";
  return header(dt) + "extern \"C\" __global__ void k(PG g, const S* __restrict__ dy, S* __restrict__ dx) {\n" + kForSources +
         "    float acc = 0.f;\n    FOR_COVERING(g, ip, { " + body + " });\n" + "    dx[i] = " + store_expr(dt, "acc") +
         ";\n  }\n}\n";
}

// Forward pooling with the geometry written into the source as literals: the window loops
// unroll and the index arithmetic divides by constants, where the generic kernels above keep
// per-thread window arrays in local memory (a ResNet-18 max pool took 2.7 ms at batch 256 on an
// H100). The same taps in the same order as make_win/FOR_WINDOW, so the same values. `mode`:
// -1 max, else linear_mode's divisor.
constexpr int64_t kUnrollTaps = 8;  // larger window dims loop (global pooling's would blow up the code)

// With `fn`, the input is not read from memory: each tap computes it (the elementwise group
// before the pool, fused into it; the inputs are fn's, a0...). With `lanes` > 1 a thread computes
// that many neighbours along the last pooled dim (vector_lanes says where that holds), loading
// and storing 16-byte packs: NHWC pools, one channel wide, are bound by their index arithmetic
// and 2-byte accesses otherwise.
std::string fast_forward_src(DType dt, const PoolGeom& g, int mode, const std::string& index_type, const ElementFn* fn = nullptr,
                             const std::vector<TensorType>* fn_inputs = nullptr, int lanes = 1) {
  const bool wide = g.batch * std::max(g.in_plane, g.out_plane) >= (int64_t(1) << 31);
  auto L = [](int64_t v) { return std::to_string(v); };
  const std::string I = wide ? "i64" : "i32", V = L(lanes);
  const bool vec = lanes > 1;
  const int last = g.k - 1;
  std::string src = header(dt) + "typedef " + I + " I;\n";
  if (vec) src += "template <class T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack { T v[N]; };\n";
  if (fn) {
    src += fn->source + "extern \"C\" __global__ void k(";
    for (size_t a = 0; a < fn_inputs->size(); ++a)
      src += "const " + storage_type((*fn_inputs)[a].dtype) + "* __restrict__ a" + L(int64_t(a)) + ", ";
    src += "S* __restrict__ y";
  } else {
    src += "extern \"C\" __global__ void k(const S* __restrict__ x, S* __restrict__ y";
  }
  if (!index_type.empty()) src += ", " + index_type + "* __restrict__ ind";
  src += ") {\n  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)" + L(g.batch * g.out_plane / lanes) +
         "; i += (I)gridDim.x * blockDim.x) {\n    I q = i;\n";
  for (int d = last; d >= 0; --d) {
    if (vec && d == last)
      src += "    const I o" + L(d) + " = (q % " + L(g.out[d] / lanes) + ") * " + V + "; q /= " + L(g.out[d] / lanes) + ";\n";
    else
      src += "    const I o" + L(d) + " = q % " + L(g.out[d]) + "; q /= " + L(g.out[d]) + ";\n";
  }
  src += fn ? "    const I base = q * (I)" + L(g.in_plane) + ";\n" : "    const S* xb = x + q * (I)" + L(g.in_plane) + ";\n";
  for (int d = 0; d < g.k; ++d) src += "    const I s" + L(d) + " = o" + L(d) + " * " + L(g.st[d]) + " - " + L(g.pb[d]) + ";\n";
  if (mode >= 1) {  // the divisor: per dim the taps inside the input (1) or the padded input (2)
    src += "    float div = 1.f;\n";
    for (int d = 0; d < g.k; ++d)
      src += "    { int n = 0; for (int t = 0; t < " + L(g.ker[d]) + "; ++t) { const I p = s" + L(d) + " + t * " + L(g.dil[d]) +
             "; n += " + (mode == 2 ? "p < " + L(g.in[d] + g.pa[d]) : "p >= 0 && p < " + L(g.in[d])) +
             "; } div *= (float)n; }\n";
  }
  if (vec)
    src += mode < 0 ? "    float best[" + V + "]; bool first = true;\n" : "    float acc[" + V + "] = {}; bool any = false;\n";
  else
    src += mode < 0 ? "    float best = -__int_as_float(0x7f800000); I arg = -1; bool first = true;\n"
                    : "    float acc = 0.f; bool any = false;\n";
  std::string off = "p0";
  for (int d = 1; d < g.k; ++d) off = "(" + off + ") * " + L(g.in[d]) + " + p" + L(d);
  for (int d = 0; d < g.k; ++d)
    src += std::string(g.ker[d] <= kUnrollTaps ? "#pragma unroll\n" : "#pragma unroll 1\n") + "    for (int t" + L(d) +
           " = 0; t" + L(d) + " < " + L(g.ker[d]) + "; ++t" + L(d) + ") {\n      const I p" + L(d) + " = s" + L(d) + " + t" +
           L(d) + " * " + L(g.dil[d]) + ";\n      if (p" + L(d) + " < 0 || p" + L(d) + " >= " + L(g.in[d]) + ") continue;\n";
  src += "      const I off = " + off + ";\n";
  if (!vec) {
    src += "      const float v = LD(" + (fn ? fn->call("(base + off)", "0") : std::string("xb[off]")) + ");\n";
    src += mode < 0 ? "      if (first || v > best || v != v) { best = v; arg = off; } first = false;\n"
                    : "      acc += v; any = true;\n";
  } else {
    if (fn) {
      for (int k : fn->direct) {
        const std::string pk = "Pack<" + storage_type((*fn_inputs)[size_t(k)].dtype) + ", " + V + ">";
        src += "      const " + pk + " l" + L(k) + " = *reinterpret_cast<const " + pk + "*>(a" + L(k) + " + base + off);\n";
      }
    } else {
      src += "      const Pack<S, " + V + "> lx = *reinterpret_cast<const Pack<S, " + V + ">*>(xb + off);\n";
    }
    src += "#pragma unroll\n      for (int j = 0; j < " + V + "; ++j) {\n        const float v = LD(" +
           (fn ? fn->call("(base + off)", "j") : std::string("lx.v[j]")) + ");\n";
    src += mode < 0 ? "        if (first || v > best[j] || v != v) best[j] = v;\n" : "        acc[j] += v;\n";
    src += mode < 0 ? "      }\n      first = false;\n" : "      }\n      any = true;\n";
  }
  for (int d = 0; d < g.k; ++d) src += "    }\n";
  if (vec) {
    src += "    Pack<S, " + V + "> r;\n#pragma unroll\n    for (int j = 0; j < " + V + "; ++j) {\n";
    if (mode < 0) src += "      r.v[j] = first ? " + store_expr(dt, "-__int_as_float(0x7f800000)") + " : " + store_expr(dt, "best[j]") + ";\n";
    else if (mode >= 1) src += "      r.v[j] = " + store_expr(dt, "any && div > 0.f ? acc[j] / div : 0.f") + ";\n";
    else src += "      r.v[j] = " + store_expr(dt, "acc[j]") + ";\n";
    src += "    }\n    *reinterpret_cast<Pack<S, " + V + ">*>(y + i * " + V + ") = r;\n";
    return src + "  }\n}\n";
  }
  if (mode < 0) {
    src += "    y[i] = " + store_expr(dt, "best") + ";\n";
    if (!index_type.empty()) src += "    ind[i] = (" + index_type + ")arg;\n";
  } else {
    // an empty window (no tap inside the input) gives 0, as the generic kernel's
    if (mode >= 1) src += "    acc = any && div > 0.f ? acc / div : 0.f;\n";
    src += "    y[i] = " + store_expr(dt, "acc") + ";\n";
  }
  return src + "  }\n}\n";
}

// The lanes of the vector kernel for this pool (1: none): where the last pooled dim is a whole
// dim of packs the windows do not cross (window 1, stride 1, no padding: channels as the
// channels-last plan pools them).
int vector_lanes(const PoolGeom& g, DType dt, bool with_index) {
  const int last = g.k - 1;
  const int lanes = int(16 / dtype_size(dt));
  if (with_index || g.k < 2 || g.ker[last] != 1 || g.st[last] != 1 || g.dil[last] != 1 || g.pb[last] != 0 || g.pa[last] != 0 ||
      g.in[last] != g.out[last] || g.in[last] % lanes != 0)
    return 1;
  return lanes;
}

// Launches the vector kernel where every pointer is 16-byte aligned, else the scalar one.
LaunchFn pick_aligned(Kernel scalar, Kernel vector, int64_t n, int lanes, size_t nin) {
  return [scalar, vector, n, lanes, nin](cudaStream_t s, const void* const* in, void* const* out) {
    if (n == 0) return;
    bool aligned = lanes > 1 && reinterpret_cast<uintptr_t>(out[0]) % 16 == 0;
    for (size_t k = 0; k < nin; ++k) aligned = aligned && reinterpret_cast<uintptr_t>(in[k]) % 16 == 0;
    const void* ptrs[kMaxFusedInputs];
    void* args[kMaxFusedInputs + 1];
    for (size_t k = 0; k < nin; ++k) {
      ptrs[k] = in[k];
      args[k] = &ptrs[k];
    }
    void* y = out[0];
    args[nin] = &y;
    const int64_t threads = aligned ? n / lanes : n;
    launch(aligned ? vector : scalar, std::min<int64_t>((threads + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

LaunchFn fast_forward(const KernelCtx& c, const PoolGeom& g, int mode, const std::string& index_type) {
  const DType dt = c.in[0].dtype;
  Kernel kern = nvrtc_kernel(fast_forward_src(dt, g, mode, index_type), "k");
  const int64_t n = g.batch * g.out_plane;
  const bool with_idx = !index_type.empty();
  const int lanes = vector_lanes(g, dt, with_idx);
  if (lanes > 1) return pick_aligned(kern, nvrtc_kernel(fast_forward_src(dt, g, mode, "", nullptr, nullptr, lanes), "k"), n, lanes, 1);
  return [kern, n, with_idx](cudaStream_t s, const void* const* in, void* const* out) {
    if (n == 0) return;
    const void* x = in[0];
    void* y = out[0];
    void* ind = with_idx ? out[1] : nullptr;
    void* args[3] = {&x, &y, &ind};
    launch(kern, std::min<int64_t>((n + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

bool is_forward_pool(const std::string& op) {
  return op == "max_pooling_nd" || op == "avg_pooling_nd" || op == "sum_pooling_nd";
}

}  // namespace

// Measured on an H100 (ResNet-18 at batch 256, docs/cuda.md): the fused pool pays only in
// float16 and with the vector kernel; computed one element a thread, or in bfloat16 (whose
// per-node rounding is several instructions), the recomputation at overlapping taps cost more
// than the memory pass it saves.
bool pool_takes_prologue(const Node& node, const TensorType& input) {
  if (!fast_pooling() || !is_forward_pool(node.op->name) || input.dtype != DType::Float16) return false;
  const ops::PoolSpec& s = typed_attrs<ops::PoolingAttrs>(node).window;
  const int64_t n_in = num_elements(input.shape);
  if (n_in <= 0 || node.outputs.empty()) return false;
  const std::vector<TensorType> ins{input};
  if (vector_lanes(make_geom(KernelCtx{node, ins, node.outputs}, input.shape), input.dtype, false) <= 1) return false;
  double taps = 1;  // per window
  for (size_t d = 0; d < s.k(); ++d) taps *= double(s.kernel[d]);
  // how often each input element is computed, on average (a global pool's: once)
  return taps * double(num_elements(node.outputs[0].shape)) / double(n_in) <= 4.0;
}

LaunchFn pool_with_prologue(const KernelCtx& c, const Shape& input_shape, const Graph& graph, const std::vector<int32_t>& group) {
  const PoolGeom g = make_geom(c, input_shape);
  const int mode = c.node.op->name == "max_pooling_nd" ? -1 : linear_mode(c.node);
  const size_t nin = c.in.size();
  if (nin > size_t(kMaxFusedInputs)) raise(ErrorKind::Runtime, c.node.op->name, c.node.name, "too many fused inputs");
  std::vector<ValueRef> order;
  // pool_takes_prologue saw packs along the last dim: every operand's innermost collapsed dim
  // holds that dim, so the element function takes the lanes too. The scalar kernel is for
  // buffers that are not 16-byte aligned.
  const ElementFn fn = fused_group_fn(graph, group, order), vfn = fused_group_fn(graph, group, order, vector_lanes(g, fn.out, false));
  // uncontracted, as the group's own kernel is compiled: fusing changes no bit
  const Kernel scalar = nvrtc_kernel(fast_forward_src(fn.out, g, mode, "", &fn, &c.in), "k", {"--fmad=false"});
  const Kernel vector = nvrtc_kernel(fast_forward_src(fn.out, g, mode, "", &vfn, &c.in, vfn.lanes), "k", {"--fmad=false"});
  return pick_aligned(scalar, vector, g.batch * g.out_plane, vfn.lanes, nin);
}

namespace {

LaunchFn max_forward(const KernelCtx& c) {
  const DType dt = c.in[0].dtype;
  check_dtype(c, dt);
  const PoolGeom g = make_geom(c, c.in[0].shape);
  const bool with_idx = c.out.size() > 1;
  if (fast_pooling()) return fast_forward(c, g, -1, with_idx ? storage_type(c.out[1].dtype) : "");
  return launcher(max_forward_src(dt, with_idx ? storage_type(c.out[1].dtype) : ""), g, g.batch * g.out_plane,
                  {0, -1, with_idx ? -2 : -1});
}

LaunchFn max_gather(const KernelCtx& c) {  // (x, source): x at the source window's argmax
  const DType dt = c.in[0].dtype;
  check_dtype(c, dt);
  const PoolGeom g = make_geom(c, c.in[1].shape);
  return launcher(gather_src(dt), g, g.batch * g.out_plane, {0, 1, -1});
}

LaunchFn max_gradient(const KernelCtx& c) {  // (dy, source)
  const DType dt = c.in[0].dtype;
  check_dtype(c, dt);
  const PoolGeom g = make_geom(c, c.in[1].shape);
  const int64_t n_out = g.batch * g.out_plane, n_in = g.batch * g.in_plane;
  if (n_out == 0) {
    const int32_t es = int32_t(dtype_size(dt));
    return [n_in, es](cudaStream_t s, const void* const*, void* const* out) {
      if (n_in) fill_bytes(out[0], n_in, es, 0, s);
    };
  }
  const size_t slot = c.scratch(size_t(n_out) * sizeof(int64_t));
  LaunchFn a = launcher(argmax_src(dt), g, n_out, {1, -1 - int(slot)});
  LaunchFn sc = launcher(max_scatter_src(dt), g, n_in, {0, -1 - int(slot), -1});
  return [a, sc](cudaStream_t s, const void* const* in, void* const* out) {
    a(s, in, out);
    sc(s, in, out);
  };
}

LaunchFn linear_forward(const KernelCtx& c) {
  const DType dt = c.in[0].dtype;
  check_dtype(c, dt);
  const PoolGeom g = make_geom(c, c.in[0].shape);
  if (fast_pooling()) return fast_forward(c, g, linear_mode(c.node), "");
  return launcher(linear_forward_src(dt, linear_mode(c.node)), g, g.batch * g.out_plane, {0, -1});
}

LaunchFn linear_gradient(const KernelCtx& c) {  // (dy, source)
  const DType dt = c.in[0].dtype;
  check_dtype(c, dt);
  const PoolGeom g = make_geom(c, c.in[1].shape);
  return launcher(linear_gradient_src(dt, linear_mode(c.node)), g, g.batch * g.in_plane, {0, -1});
}

}  // namespace

void register_pooling_kernels() {
  register_kernel("max_pooling_nd", max_forward);
  register_kernel("max_pooling_nd_return_indices", max_forward);
  register_kernel("max_pooling_nd_gather", max_gather);
  register_kernel("max_pooling_nd_gradient", max_gradient);
  register_kernel("avg_pooling_nd", linear_forward);
  register_kernel("sum_pooling_nd", linear_forward);
  register_kernel("avg_pooling_nd_gradient", linear_gradient);
  register_kernel("sum_pooling_nd_gradient", linear_gradient);
}

}  // namespace mg::cuda
