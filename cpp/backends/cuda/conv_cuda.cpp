// CUDA convolution primitives (convolution, convolution_data_gradient,
// convolution_weights_gradient) in the canonical layout (N, C, *spatial), weights
// (O, C/groups, *kernel).
//
// cuDNN's convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter), opened
// with dlopen on first use and declared here from its documentation, runs 1-3 spatial dims with
// symmetric padding in float32 (FMA math: no TF32 unless MPSGRAPH_TF32=1), float16 and bfloat16
// (tensor-op math, float accumulation). At compile time each geometry's plan is chosen once per
// process by timing every usable algorithm in both packed layouts (channels-first and
// channels-last, the copies a layout needs included) on buffers allocated for the search;
// MPSGRAPH_CUDNN_SEARCH=0 keeps cuDNN's heuristic choice in the source's layout. Data tensors
// are read and written in their buffers' layout where it is packed (an NHWC graph's transposes
// are absorbed: register_layout_inputs), otherwise through scratch copies. The workspace comes
// from the program's memory plan, so the calls are captured in the CUDA graph like any launch.
// Every other case (asymmetric padding, more spatial dims, zero-size tensors, no cuDNN, or
// cuDNN refusing the descriptors) runs generated direct kernels: one thread per output element
// (forward, data gradient) or one block per weight (weights gradient), float accumulation.
// MPSGRAPH_CUDNN names the library file; MPSGRAPH_CUDNN=0 turns cuDNN off. 2-D depthwise
// convolutions on channels-last buffers run their own generated kernel (see depthwise_lanes).
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cudnn_graph_cuda.h"
#include "backends/cuda/elementwise_cuda.h"
#include "core/error.h"
#include "core/ops/convolution_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

enum class Kind { Forward, Data, Weights };

// ---- cuDNN, declared from its documentation (cudnn_graph.h / cudnn_cnn.h, cuDNN 8 and 9) ----

using Status = int;
using Handle = void*;
using Desc = void*;
struct Perf {  // cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};
enum : int {
  kFloat = 0, kHalf = 2, kBFloat16 = 9,  // cudnnDataType_t
  kNCHW = 0, kNHWC = 1,                  // cudnnTensorFormat_t
  kCrossCorrelation = 1,                 // cudnnConvolutionMode_t
  kDefaultMath = 0, kTensorOpMath = 1, kFmaMath = 3,  // cudnnMathType_t
};

struct Dnn {
  void* lib = nullptr;
  Handle handle = nullptr;
  Status (*create)(Handle*) = nullptr;
  Status (*set_stream)(Handle, cudaStream_t) = nullptr;
  Status (*tensor_create)(Desc*) = nullptr;
  Status (*tensor_set)(Desc, int, int, const int*, const int*) = nullptr;
  Status (*tensor_destroy)(Desc) = nullptr;
  Status (*filter_create)(Desc*) = nullptr;
  Status (*filter_set)(Desc, int, int, int, const int*) = nullptr;
  Status (*filter_destroy)(Desc) = nullptr;
  Status (*conv_create)(Desc*) = nullptr;
  Status (*conv_set)(Desc, int, const int*, const int*, const int*, int, int) = nullptr;
  Status (*conv_groups)(Desc, int) = nullptr;
  Status (*conv_math)(Desc, int) = nullptr;
  Status (*conv_destroy)(Desc) = nullptr;
  // (handle, a, b, conv, c, requested, returned, perf): fwd (x, w, y), data (w, dy, dx), filter (x, dy, dw)
  Status (*algos[3])(Handle, Desc, Desc, Desc, Desc, int, int*, Perf*) = {};
  Status (*workspace[3])(Handle, Desc, Desc, Desc, Desc, int, size_t*) = {};
  // (handle, alpha, aDesc, a, bDesc, b, conv, algo, ws, ws_size, beta, cDesc, c)
  Status (*run[3])(Handle, const void*, Desc, const void*, Desc, const void*, Desc, int, void*, size_t, const void*, Desc,
                   void*) = {};
};

// nullptr where cuDNN is absent, turned off or unusable (the direct kernels run instead).
Dnn* dnn() {
  static Dnn* d = []() -> Dnn* {
    const char* env = std::getenv("MPSGRAPH_CUDNN");
    if (env && std::string(env) == "0") return nullptr;
    void* lib = nullptr;
    std::vector<std::string> names;
    if (env && *env) names.push_back(env);
    names.insert(names.end(), {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"});
    for (auto& n : names)
      if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!lib) lib = open_cuda_library("MPSGRAPH_CUDNN", "libcudnn.so");
    if (!lib) return nullptr;
    auto* r = new Dnn;
    r->lib = lib;
    bool ok = sym(lib, "cudnnCreate", r->create) && sym(lib, "cudnnSetStream", r->set_stream) &&
              sym(lib, "cudnnCreateTensorDescriptor", r->tensor_create) &&
              sym(lib, "cudnnSetTensorNdDescriptor", r->tensor_set) &&
              sym(lib, "cudnnDestroyTensorDescriptor", r->tensor_destroy) &&
              sym(lib, "cudnnCreateFilterDescriptor", r->filter_create) &&
              sym(lib, "cudnnSetFilterNdDescriptor", r->filter_set) &&
              sym(lib, "cudnnDestroyFilterDescriptor", r->filter_destroy) &&
              sym(lib, "cudnnCreateConvolutionDescriptor", r->conv_create) &&
              sym(lib, "cudnnSetConvolutionNdDescriptor", r->conv_set) &&
              sym(lib, "cudnnSetConvolutionGroupCount", r->conv_groups) &&
              sym(lib, "cudnnSetConvolutionMathType", r->conv_math) &&
              sym(lib, "cudnnDestroyConvolutionDescriptor", r->conv_destroy) &&
              sym(lib, "cudnnGetConvolutionForwardAlgorithm_v7", r->algos[0]) &&
              sym(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", r->algos[1]) &&
              sym(lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", r->algos[2]) &&
              sym(lib, "cudnnGetConvolutionForwardWorkspaceSize", r->workspace[0]) &&
              sym(lib, "cudnnGetConvolutionBackwardDataWorkspaceSize", r->workspace[1]) &&
              sym(lib, "cudnnGetConvolutionBackwardFilterWorkspaceSize", r->workspace[2]) &&
              sym(lib, "cudnnConvolutionForward", r->run[0]) && sym(lib, "cudnnConvolutionBackwardData", r->run[1]) &&
              sym(lib, "cudnnConvolutionBackwardFilter", r->run[2]);
    context();  // the device is current before cuDNN starts
    if (!ok || r->create(&r->handle) != 0) {
      delete r;
      return nullptr;
    }
    return r;
  }();
  return d;
}

using Ints = std::vector<int64_t>;

// The geometry every kernel reads; spatial dims in order.
constexpr int kMaxSpatial = 6;
struct Geom {
  int64_t N = 0, C = 0, O = 0, G = 1, Cg = 0, Og = 0, P = 1, in_plane = 1, ksz = 1;
  int32_t k = 0;
  int64_t in[kMaxSpatial] = {}, out[kMaxSpatial] = {}, ker[kMaxSpatial] = {}, st[kMaxSpatial] = {}, dil[kMaxSpatial] = {},
          pb[kMaxSpatial] = {};
};

// ---- layouts ----
// Each tensor a call reads or writes is a value (N, C, *spatial), weights (O, C/groups,
// *kernel); its buffer may hold it permuted (KernelCtx::in_perm / out_perm: an NHWC graph's
// transposes absorbed). A plan runs on packed channels-first or channels-last tensors: a
// buffer that is not packed so is copied into (or out of) scratch by the step.
enum class Layout { First, Last };
enum Role { X = 0, W = 1, Y = 2 };  // source, weights, result of the forward convolution

Ints packed(const Shape& s, Layout l) {
  if (l == Layout::First) return contiguous_strides(s);
  Ints st(s.size());
  int64_t m = s[1];
  st[1] = 1;
  for (size_t i = s.size(); i-- > 2;) {
    st[i] = m;
    m *= s[i];
  }
  st[0] = m;
  return st;
}

// Strides of the value's dims in a buffer holding it as value = transpose(buffer, perm).
bool same_strides(const Shape& s, const Ints& a, const Ints& b) {
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && a[i] != b[i]) return false;
  return true;
}

struct Operand {
  Shape shape;
  Ints buf;           // the value's strides in its buffer
  int pos = -1;       // input index; -1: the output
  bool copy = false;  // staged through scratch, packed in the plan's layout
  StridedCopy cp;
  size_t slot = 0;    // the scratch buffer when copied
};

// What a step is built from: the op's geometry and where its three tensors are.
struct Setup {
  Kind kind = Kind::Forward;
  Geom g;
  Ints pads;
  DType dt = DType::Float32;
  std::array<Operand, 3> ops;
  std::string op;
};

// How a step runs: cuDNN with an algorithm and math type, or the direct kernels.
struct Plan {
  bool dnn = false;
  Layout layout = Layout::First;
  int algo = 0, math = kDefaultMath;
};

bool tf32_allowed() {
  static const bool on = std::getenv("MPSGRAPH_TF32") && std::string(std::getenv("MPSGRAPH_TF32")) == "1";
  return on;
}

// ---- cuDNN calls ----

// Descriptors owned for the program's life.
struct DnnConv {
  Desc x = nullptr, w = nullptr, y = nullptr, conv = nullptr;
  int algo = 0;
  size_t ws = 0;
  ~DnnConv() {
    Dnn* d = dnn();
    if (x) d->tensor_destroy(x);
    if (y) d->tensor_destroy(y);
    if (w) d->filter_destroy(w);
    if (conv) d->conv_destroy(conv);
  }
};

int dnn_type(DType t) { return t == DType::Float16 ? kHalf : t == DType::BFloat16 ? kBFloat16 : kFloat; }
constexpr size_t kWorkspaceCap = size_t(1) << 30;

// Whether cuDNN can take this geometry at all.
bool dnn_takes(const Setup& su) {
  const Geom& g = su.g;
  if (!dnn() || g.k < 1 || g.k > 3) return false;
  if (g.N == 0 || g.Cg == 0 || g.Og == 0 || g.P == 0 || g.in_plane == 0) return false;
  const int64_t lim = int64_t(1) << 31;
  if (g.N * g.C * g.in_plane >= lim || g.N * g.O * g.P >= lim) return false;
  for (int i = 0; i < g.k; ++i) {
    if (su.pads[size_t(2 * i)] != su.pads[size_t(2 * i + 1)] || su.pads[size_t(2 * i)] < 0) return false;
    // cuDNN derives the output dims from the source's: they must agree (data gradients with
    // output_padding or explicit source dims may not)
    const int64_t e = g.dil[i] * (g.ker[i] - 1) + 1, L = g.in[i] + 2 * g.pb[i];
    if (L < e || (L - e) / g.st[i] + 1 != g.out[i]) return false;
  }
  return true;
}

// Descriptors for packed tensors in layout l (1-d as 2-d with a unit leading spatial dim).
std::shared_ptr<DnnConv> dnn_descriptors(const Setup& su, Layout l) {
  Dnn* d = dnn();
  const Geom& g = su.g;
  const bool one = g.k == 1;
  auto dims_of = [&](const Shape& s, Ints st, std::vector<int>& dims, std::vector<int>& strides) {
    Shape sh = s;
    if (one) {
      sh.insert(sh.begin() + 2, 1);
      st.insert(st.begin() + 2, st[2] * s[2]);
    }
    for (size_t i = 0; i < sh.size(); ++i) dims.push_back(int(sh[i])), strides.push_back(int(st[i]));
  };
  auto tensor = [&](Desc& desc, const Shape& s) {
    std::vector<int> dims, strides;
    dims_of(s, packed(s, l), dims, strides);
    return d->tensor_create(&desc) == 0 &&
           d->tensor_set(desc, dnn_type(su.dt), int(dims.size()), dims.data(), strides.data()) == 0;
  };
  std::vector<int> wdims, unused, pad, st, dil;
  dims_of(su.ops[W].shape, contiguous_strides(su.ops[W].shape), wdims, unused);
  if (one) pad.push_back(0), st.push_back(1), dil.push_back(1);
  for (int i = 0; i < g.k; ++i) pad.push_back(int(g.pb[i])), st.push_back(int(g.st[i])), dil.push_back(int(g.dil[i]));
  auto r = std::make_shared<DnnConv>();
  if (!tensor(r->x, su.ops[X].shape) || !tensor(r->y, su.ops[Y].shape) || d->filter_create(&r->w) != 0 ||
      d->filter_set(r->w, dnn_type(su.dt), l == Layout::Last ? kNHWC : kNCHW, int(wdims.size()), wdims.data()) != 0 ||
      d->conv_create(&r->conv) != 0 ||
      d->conv_set(r->conv, int(pad.size()), pad.data(), st.data(), dil.data(), kCrossCorrelation, kFloat) != 0 ||
      d->conv_groups(r->conv, int(g.G)) != 0)
    return nullptr;
  return r;
}

// (a, b, c) of cuDNN's calls: forward (x, w, y), data (w, dy, dx), filter (x, dy, dw).
std::array<Desc, 3> call_descs(Kind kind, const DnnConv& r) {
  if (kind == Kind::Forward) return {r.x, r.w, r.y};
  if (kind == Kind::Data) return {r.w, r.y, r.x};
  return {r.x, r.y, r.w};
}

// cuDNN's usable (algorithm, math type) pairs, best first by its heuristics.
std::vector<Perf> dnn_candidates(const Setup& su, DnnConv& r) {
  Dnn* d = dnn();
  const bool f32 = su.dt == DType::Float32, tf32 = f32 && tf32_allowed();
  if (d->conv_math(r.conv, f32 && !tf32 ? kFmaMath : kTensorOpMath) != 0) return {};
  const auto c = call_descs(su.kind, r);
  Perf perf[16];
  int found = 0;
  if (d->algos[int(su.kind)](d->handle, c[0], c[1], r.conv, c[2], 16, &found, perf) != 0) return {};
  std::vector<Perf> out;
  for (int i = 0; i < found; ++i) {
    Perf p = perf[i];
    if (p.status != 0 || p.memory > kWorkspaceCap) continue;
    if (f32 && !tf32 && p.math_type != kFmaMath && p.math_type != kDefaultMath) continue;  // no TF32
    if (f32 && !tf32) p.math_type = kFmaMath;
    out.push_back(p);
  }
  return out;
}

// Sets the plan's algorithm and math type on r; false where cuDNN refuses them.
bool dnn_choose(const Setup& su, DnnConv& r, const Plan& plan) {
  Dnn* d = dnn();
  const auto c = call_descs(su.kind, r);
  size_t ws = 0;
  if (d->conv_math(r.conv, plan.math) != 0 ||
      d->workspace[int(su.kind)](d->handle, c[0], c[1], r.conv, c[2], plan.algo, &ws) != 0 || ws > kWorkspaceCap)
    return false;
  r.algo = plan.algo;
  r.ws = ws;
  return true;
}

void dnn_run(Kind kind, const DnnConv& r, cudaStream_t s, void* const* p, void* ws, const std::string& op) {
  Dnn* d = dnn();
  const float one = 1.f, zero = 0.f;
  Status st = d->set_stream(d->handle, s);
  if (st == 0) switch (kind) {
      case Kind::Forward:
        st = d->run[0](d->handle, &one, r.x, p[X], r.w, p[W], r.conv, r.algo, ws, r.ws, &zero, r.y, p[Y]);
        break;
      case Kind::Data:
        st = d->run[1](d->handle, &one, r.w, p[W], r.y, p[Y], r.conv, r.algo, ws, r.ws, &zero, r.x, p[X]);
        break;
      case Kind::Weights:
        st = d->run[2](d->handle, &one, r.x, p[X], r.y, p[Y], r.conv, r.algo, ws, r.ws, &zero, r.w, p[W]);
        break;
    }
  if (st != 0) raise(ErrorKind::Runtime, op, "", "cuDNN convolution failed (status " + std::to_string(st) + ")");
}

// ---- direct kernels ----

const char* kConvDevice = R"(
struct G { i64 N, C, O, G, Cg, Og, P, in_plane, ksz; int k; i64 in[6], out[6], ker[6], st[6], dil[6], pb[6]; };
// source offset (in a channel plane) read by tap kt at output position p; -1 in the padding
__device__ __forceinline__ i64 src_off(const G& g, i64 p, i64 kt) {
  i64 off = 0, mul = 1;
  for (int d = g.k - 1; d >= 0; --d) {
    const i64 o = p % g.out[d], t = kt % g.ker[d];
    p /= g.out[d]; kt /= g.ker[d];
    const i64 pos = o * g.st[d] - g.pb[d] + t * g.dil[d];
    if (pos < 0 || pos >= g.in[d]) return -1;
    off += pos * mul; mul *= g.in[d];
  }
  return off;
}
)";

std::string direct_source(Kind kind, DType dt) {
  const std::string S = storage_type(dt);
  auto ld = [&](const std::string& e) { return load_expr(dt, e); };
  std::string src = prelude() + kConvDevice;
  // k(G g, const S* a, const S* b, S* out), a grid-stride loop of i over `total`
  auto head = [&](const char* a, const char* b, const char* out, const char* total) {
    return "extern \"C\" __global__ void k(G g, const " + S + "* __restrict__ " + a + ", const " + S + "* __restrict__ " +
           b + ", " + S + "* __restrict__ " + out + ") {\n  const i64 total = " + total + ";\n" +
           "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {\n";
  };
  switch (kind) {
    case Kind::Forward:
      src += head("x", "w", "y", "g.N * g.O * g.P") +
             "    const i64 p = i % g.P, no = i / g.P, o = no % g.O, n = no / g.O, grp = o / g.Og;\n"
             "    const " + S + "* xb = x + (n * g.C + grp * g.Cg) * g.in_plane;\n"
             "    const " + S + "* wb = w + o * g.Cg * g.ksz;\n"
             "    float acc = 0.f;\n"
             "    for (i64 kt = 0; kt < g.ksz; ++kt) {\n"
             "      const i64 off = src_off(g, p, kt);\n"
             "      if (off < 0) continue;\n"
             "      for (i64 c = 0; c < g.Cg; ++c) acc += " + ld("xb[c * g.in_plane + off]") + " * " +
             ld("wb[c * g.ksz + kt]") + ";\n"
             "    }\n"
             "    y[i] = " + store_expr(dt, "acc") + ";\n  }\n}\n";
      break;
    case Kind::Data:
      src += head("dy", "w", "dx", "g.N * g.C * g.in_plane") +
             "    const i64 ip = i % g.in_plane, nc = i / g.in_plane, c = nc % g.C, n = nc / g.C, grp = c / g.Cg, cl = c % g.Cg;\n"
             "    float acc = 0.f;\n"
             "    for (i64 kt = 0; kt < g.ksz; ++kt) {\n"
             "      i64 q = ip, kr = kt, p = 0, mul = 1; bool ok = true;\n"
             "      for (int d = g.k - 1; d >= 0 && ok; --d) {\n"
             "        const i64 pos = q % g.in[d], t = kr % g.ker[d];\n"
             "        q /= g.in[d]; kr /= g.ker[d];\n"
             "        const i64 num = pos + g.pb[d] - t * g.dil[d];\n"
             "        if (num < 0 || num % g.st[d] != 0 || num / g.st[d] >= g.out[d]) ok = false;\n"
             "        else { p += num / g.st[d] * mul; mul *= g.out[d]; }\n"
             "      }\n"
             "      if (!ok) continue;\n"
             "      for (i64 ol = 0; ol < g.Og; ++ol) {\n"
             "        const i64 o = grp * g.Og + ol;\n"
             "        acc += " + ld("dy[(n * g.O + o) * g.P + p]") + " * " + ld("w[(o * g.Cg + cl) * g.ksz + kt]") + ";\n"
             "      }\n"
             "    }\n"
             "    dx[i] = " + store_expr(dt, "acc") + ";\n  }\n}\n";
      break;
    case Kind::Weights:
      src += "extern \"C\" __global__ void k(G g, const " + S + "* __restrict__ dy, const " + S + "* __restrict__ x, " + S +
             "* __restrict__ dw) {\n"
             "  __shared__ float sh[256];\n"
             "  const i64 total = g.O * g.Cg * g.ksz, work = g.N * g.P;\n"
             "  for (i64 wi = blockIdx.x; wi < total; wi += gridDim.x) {\n"
             "    const i64 kt = wi % g.ksz, oc = wi / g.ksz, cl = oc % g.Cg, o = oc / g.Cg, grp = o / g.Og;\n"
             "    float acc = 0.f;\n"
             "    for (i64 j = threadIdx.x; j < work; j += blockDim.x) {\n"
             "      const i64 n = j / g.P, p = j % g.P, off = src_off(g, p, kt);\n"
             "      if (off >= 0) acc += " + ld("dy[(n * g.O + o) * g.P + p]") + " * " +
             ld("x[(n * g.C + grp * g.Cg + cl) * g.in_plane + off]") + ";\n"
             "    }\n"
             "    sh[threadIdx.x] = acc; __syncthreads();\n"
             "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
             "      if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];\n"
             "      __syncthreads();\n"
             "    }\n"
             "    if (threadIdx.x == 0) dw[wi] = " + store_expr(dt, "sh[0]") + ";\n"
             "    __syncthreads();\n  }\n}\n";
      break;
  }
  return src;
}

// The direct kernel's arguments (a, b, result) by role: forward (x, w, y), data (dy, w, dx),
// weights (dy, x, dw).
std::array<Role, 3> direct_roles(Kind kind) {
  if (kind == Kind::Forward) return {X, W, Y};
  if (kind == Kind::Data) return {Y, W, X};
  return {Y, X, W};
}

void direct_run(const Kernel& kern, Kind kind, const Geom& g, cudaStream_t s, void* const* p) {
  const int64_t total = kind == Kind::Forward ? g.N * g.O * g.P : kind == Kind::Data ? g.N * g.C * g.in_plane : g.O * g.Cg * g.ksz;
  if (total == 0) return;
  Geom geom = g;
  const auto r = direct_roles(kind);
  const void* a = p[r[0]];
  const void* b = p[r[1]];
  void* o = p[r[2]];
  void* args[] = {&geom, &a, &b, &o};
  const int64_t blocks = kind == Kind::Weights ? total : (total + 255) / 256;
  launch(kern, std::min<int64_t>(blocks, int64_t(1) << 20), 256, 0, s, args);
}

// The step for `plan`, or nullptr where cuDNN refuses it; scratch(n) gives a scratch buffer's
// index among the launch's outputs.
LaunchFn build(const Setup& su, const Plan& plan, const std::function<size_t(size_t)>& scratch) {
  std::array<Operand, 3> o = su.ops;
  for (auto& x : o) {
    const Ints want = packed(x.shape, plan.layout);
    if (num_elements(x.shape) == 0 || same_strides(x.shape, x.buf, want)) continue;
    x.copy = true;
    const size_t es = dtype_size(su.dt);
    x.cp = x.pos >= 0 ? make_copy(es, x.shape, x.buf, want, 0, 0) : make_copy(es, x.shape, want, x.buf, 0, 0);
  }
  std::shared_ptr<DnnConv> r;
  Kernel kern;
  if (plan.dnn) {
    r = dnn_descriptors(su, plan.layout);
    if (!r || !dnn_choose(su, *r, plan)) return nullptr;
  } else {
    kern = nvrtc_kernel(direct_source(su.kind, su.dt), "k");
  }
  for (auto& x : o)
    if (x.copy) x.slot = scratch(size_t(num_elements(x.shape)) * dtype_size(su.dt));
  const size_t ws_slot = r && r->ws ? scratch(r->ws) : 0;
  const Kind kind = su.kind;
  const Geom g = su.g;
  const std::string op = su.op;
  return [o, r, kern, ws_slot, kind, g, op](cudaStream_t s, const void* const* in, void* const* out) {
    void* p[3];
    for (int i = 0; i < 3; ++i) {
      const Operand& x = o[size_t(i)];
      p[i] = x.copy ? out[x.slot] : x.pos >= 0 ? const_cast<void*>(in[x.pos]) : out[0];
      if (x.copy && x.pos >= 0) strided_copy(x.cp, in[x.pos], p[i], s);
    }
    if (r) dnn_run(kind, *r, s, p, r->ws ? out[ws_slot] : nullptr, op);
    else direct_run(kern, kind, g, s, p);
    for (auto& x : o)
      if (x.copy && x.pos < 0) strided_copy(x.cp, p[&x - o.data()], out[0], s);
  };
}

// ---- the plan: cuDNN's heuristic choice, or the fastest candidate by timing ----

// The heuristic plan: the source buffer's layout where it is packed channels-last, cuDNN's
// first usable algorithm.
Plan heuristic_plan(const Setup& su) {
  const Operand& x = su.ops[X];
  Plan p;
  p.layout = same_strides(x.shape, x.buf, packed(x.shape, Layout::Last)) &&
                     !same_strides(x.shape, x.buf, packed(x.shape, Layout::First))
                 ? Layout::Last
                 : Layout::First;
  auto r = dnn_descriptors(su, p.layout);
  if (!r) return p;
  for (const Perf& c : dnn_candidates(su, *r)) {
    Plan q = p;
    q.dnn = true, q.algo = c.algo, q.math = c.math_type;
    if (dnn_choose(su, *r, q)) return q;
  }
  return p;
}

}  // namespace

float time_launch(const LaunchFn& fn, cudaStream_t s, const void* const* in, void* const* out, float best, const Buffer* flush) {
  cudaEvent_t a = nullptr, b = nullptr;
  float t = std::numeric_limits<float>::infinity();
  if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
    cudaGetLastError();
    if (a) cudaEventDestroy(a);
    return t;
  }
  try {
    fn(s, in, out);  // warm-up: cuDNN loads its kernels on first use
    // up to three timings; a candidate already twice the best is not timed again
    for (int i = 0; i < 3 && (i == 0 || !(t > 2 * best)); ++i) {
      if (flush) cudaMemsetAsync(flush->data, i, flush->nbytes, s);
      cudaEventRecord(a, s);
      fn(s, in, out);
      cudaEventRecord(b, s);
      float ms = 0;
      if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        t = std::numeric_limits<float>::infinity();
        break;
      }
      t = std::min(t, ms);
    }
  } catch (const std::exception&) {
    t = std::numeric_limits<float>::infinity();
  }
  if (cudaStreamSynchronize(s) != cudaSuccess) t = std::numeric_limits<float>::infinity();
  cudaGetLastError();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t;
}

namespace {

// Times every usable cuDNN algorithm in both layouts (copies into and out of scratch
// included) on buffers allocated for the search only; the heuristic plan where none runs.
// Each timing starts with the L2 cache overwritten: timed warm, the copies a layout needs
// ran on tensors the cache still held, which in a network they do not (MobileNetV2's 1x1
// convolutions at 14x14 went channels-first at batch 256, and their 27 transposes took
// 0.73 ms of 7.4 on an H100). A layout that needs copies must still be clearly faster than
// the buffers' own.
constexpr float kCopyLayoutMargin = 0.8f;
std::string plan_key(const Setup& su);

Plan searched_plan(const Setup& su) {
  static cudaStream_t s = [] {
    cudaStream_t r = nullptr;
    check(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking), "creating a stream");
    return r;
  }();
  std::array<std::shared_ptr<Buffer>, 3> bufs;
  const void* in[2] = {};
  std::vector<void*> out(1);
  for (auto& x : su.ops) {
    auto& b = bufs[size_t(&x - su.ops.data())];
    const size_t nb = size_t(num_elements(x.shape)) * dtype_size(su.dt);
    b = device_alloc(nb);
    check(cudaMemsetAsync(b->data, 0, nb, s), "clearing a search buffer");
    if (x.pos >= 0) in[x.pos] = b->data;
    else out[0] = b->data;
  }
  // twice the L2 cache, rewritten before each timing
  static const std::shared_ptr<Buffer> flush = []() -> std::shared_ptr<Buffer> {
    int dev = 0, l2 = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess || l2 <= 0) {
      cudaGetLastError();
      return nullptr;
    }
    return device_alloc(size_t(l2) * 2);
  }();
  Plan best = heuristic_plan(su), best_copying = best;
  float best_ms = std::numeric_limits<float>::infinity(), copying_ms = best_ms;
  const bool verbose = std::getenv("MPSGRAPH_CUDNN_VERBOSE") != nullptr;
  for (Layout l : {Layout::First, Layout::Last}) {
    bool copies = false;
    for (auto& x : su.ops) copies = copies || (num_elements(x.shape) > 0 && !same_strides(x.shape, x.buf, packed(x.shape, l)));
    auto r = dnn_descriptors(su, l);
    if (verbose) std::fprintf(stderr, "[cudnn search] %s layout %s: descriptors %s\n", plan_key(su).c_str(), l == Layout::First ? "first" : "last", r ? "ok" : "refused");
    if (!r) continue;
    for (const Perf& c : dnn_candidates(su, *r)) {
      Plan p{true, l, c.algo, c.math_type};
      std::vector<size_t> sizes;
      LaunchFn fn = build(su, p, [&](size_t n) {
        sizes.push_back(n);
        return sizes.size();
      });
      if (!fn) {
        if (verbose) std::fprintf(stderr, "[cudnn search]   algo %d math %d: refused\n", int(c.algo), int(c.math_type));
        continue;
      }
      std::vector<std::shared_ptr<Buffer>> scratch;
      out.resize(1);
      for (size_t n : sizes) scratch.push_back(device_alloc(n)), out.push_back(scratch.back()->data);
      float& cur = copies ? copying_ms : best_ms;
      const float ms = time_launch(fn, s, in, out.data(), std::min(best_ms, copying_ms), flush.get());
      if (verbose) std::fprintf(stderr, "[cudnn search]   algo %d math %d%s: %.4f ms\n", int(c.algo), int(c.math_type), copies ? " (copies)" : "", double(ms));
      if (ms < cur) cur = ms, (copies ? best_copying : best) = p;
    }
  }
  return copying_ms < kCopyLayoutMargin * best_ms ? best_copying : best;
}

std::string plan_key(const Setup& su) {
  const Geom& g = su.g;
  std::string k = dtype_name(su.dt);
  auto add = [&k](int64_t v) {
    k += ',';
    k += std::to_string(v);
  };
  for (int64_t v : {int64_t(su.kind), int64_t(tf32_allowed()), g.N, g.C, g.O, g.G, int64_t(g.k)}) add(v);
  for (int i = 0; i < g.k; ++i)
    for (int64_t v : {g.in[i], g.out[i], g.ker[i], g.st[i], g.dil[i], g.pb[i]}) add(v);
  for (auto& x : su.ops)
    for (int64_t v : x.buf) add(v);
  return k;
}

// Timed once per (geometry, dtype, buffer layouts) in the process (one device is used);
// MPSGRAPH_CUDNN_SEARCH=0 keeps cuDNN's heuristic choice.
Plan choose_plan(const Setup& su) {
  if (!dnn_takes(su)) return Plan{};
  if (switched_off("MPSGRAPH_CUDNN_SEARCH")) return heuristic_plan(su);
  static std::mutex mu;
  static std::map<std::string, Plan> cache;
  const std::string key = plan_key(su);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache[key] = searched_plan(su);
}

// The step's geometry and buffers from its context.
Setup setup_of(Kind kind, const KernelCtx& c) {
  const std::string& op = c.node.op->name;
  const DType dt = c.out[0].dtype;
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16)
    raise(ErrorKind::Type, op, c.node.name, std::string("expects a floating-point dtype, got ") + dtype_name(dt));
  // where each role is: input index or -1 for the result
  const std::array<int, 3> pos = kind == Kind::Forward ? std::array<int, 3>{0, 1, -1}
                                 : kind == Kind::Data  ? std::array<int, 3>{-1, 1, 0}
                                                       : std::array<int, 3>{1, -1, 0};
  Setup su;
  su.kind = kind;
  su.dt = dt;
  su.op = op;
  for (int r = 0; r < 3; ++r) {
    Operand& x = su.ops[size_t(r)];
    x.pos = pos[size_t(r)];
    x.shape = x.pos >= 0 ? c.in[size_t(x.pos)].shape : c.out[0].shape;
    const Ints none;
    const Ints& perm = x.pos < 0 ? c.out_perm : size_t(x.pos) < c.in_perm.size() ? c.in_perm[size_t(x.pos)] : none;
    x.buf = buffer_strides(x.shape, perm);
  }
  const Shape &src = su.ops[X].shape, &w = su.ops[W].shape, &dy = su.ops[Y].shape;
  const ops::ConvolutionAttrs& a = typed_attrs<ops::ConvolutionAttrs>(c.node);
  const size_t k = src.size() - 2;
  if (a.strides.size() != k || a.dilation_rates.size() != k || a.padding.size() != 2 * k || w.size() != k + 2 ||
      dy.size() != k + 2 || a.groups < 1)
    raise(ErrorKind::Runtime, op, c.node.name, "convolution attributes were not resolved for these shapes");
  if (k > size_t(kMaxSpatial))
    raise(ErrorKind::NotImplemented, op, c.node.name, "more than 6 spatial dims are not supported on cuda");
  Geom& g = su.g;
  g.k = int32_t(k);
  g.N = src[0];
  g.C = src[1];
  g.O = w[0];
  g.G = a.groups;
  g.Cg = g.C / g.G;
  g.Og = g.O / g.G;
  for (size_t i = 0; i < k; ++i) {
    g.in[i] = src[2 + i];
    g.out[i] = dy[2 + i];
    g.ker[i] = w[2 + i];
    g.st[i] = a.strides[i];
    g.dil[i] = a.dilation_rates[i];
    g.pb[i] = a.padding[2 * i];
    g.in_plane *= g.in[i];
    g.P *= g.out[i];
    g.ksz *= g.ker[i];
  }
  su.pads = a.padding;
  return su;
}

// ---- depthwise convolutions on channels-last buffers ----
// A generated kernel for 2-d depthwise convolutions (one channel per group) whose source and
// result are packed channels-last, as the channels-last plan keeps MobileNet's activations:
// each thread takes a 16-byte pack of channels at a few neighbouring outputs of a row, so every
// access is a coalesced vector and a loaded input column serves each output whose window
// holds it. Float accumulation, taps in row-major order. It can compute an elementwise group
// after the convolution in its output pass (depthwise_with_epilogue), the scale/shift/ReLU6
// after each of MobileNetV2's depthwise layers. MPSGRAPH_CUDA_DEPTHWISE=0 leaves these
// convolutions to cuDNN (or the direct kernels).
constexpr int64_t kDwMaxKernel = 7;

// Channels per thread for this step, or 0 where the kernel does not apply.
int depthwise_lanes(const Setup& su) {
  static const bool off = switched_off("MPSGRAPH_CUDA_DEPTHWISE");
  const Geom& g = su.g;
  if (off || su.kind != Kind::Forward || g.k != 2 || g.G != g.C || g.O != g.C || g.N * g.P * g.C == 0) return 0;
  if (su.dt != DType::Float32 && su.dt != DType::Float16 && su.dt != DType::BFloat16) return 0;
  for (int i = 0; i < 2; ++i)
    if (g.ker[i] > kDwMaxKernel || g.ker[i] < 1 || g.st[i] < 1 || g.dil[i] < 1) return 0;
  const int lanes = int(16 / dtype_size(su.dt));
  if (g.C % lanes != 0) return 0;
  for (Role r : {X, Y})
    if (!same_strides(su.ops[r].shape, su.ops[r].buf, packed(su.ops[r].shape, Layout::Last))) return 0;
  return lanes;
}

// Outputs per thread along the row: an input column loaded once serves each of them. Measured
// on MobileNetV2 (H100, float16, batch 256): 2 outputs per thread at stride 1 ran the network
// in 8.0 ms, 4 in 6.5 ms.
int64_t depthwise_row(const Geom& g) { return g.st[1] == 1 ? 4 : 2; }

// The kernel's source: k(x, w, [the epilogue's inputs a<k>, but the convolution's], y). With `fn`
// the group's value is stored, its input `conv_arg` being the convolution's (rounded to the
// storage type, as stored unfused). `aligned`: 16-byte accesses; otherwise the same values
// through element accesses (buffers that are not 16-byte aligned).
std::string depthwise_src(const Setup& su, int lanes, bool aligned, const ElementFn* fn, const std::vector<TensorType>* fn_in,
                          int conv_arg) {
  const Geom& g = su.g;
  auto L = [](int64_t v) { return std::to_string(v); };
  const int64_t C = g.C, H = g.in[0], Wd = g.in[1], OH = g.out[0], OW = g.out[1], KH = g.ker[0], KW = g.ker[1];
  const int64_t R = depthwise_row(g);
  const int64_t OWG = (OW + R - 1) / R, CP = C / lanes, NC = (R - 1) * g.st[1] + (KW - 1) * g.dil[1] + 1;
  const int64_t total = g.N * OH * OWG * CP;
  const bool wide = std::max(g.N * C * g.in_plane, g.N * C * g.P) >= (int64_t(1) << 31);
  const std::string V = L(lanes), S = storage_type(su.dt), OS = fn ? storage_type(fn->out) : S;
  std::string src = prelude() + "typedef " + std::string(wide ? "i64" : "i32") + " I;\ntypedef " + S + " S;\n" +
                    "template <class T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack { T v[N]; };\n"
                    "template <class T, int N> __device__ __forceinline__ Pack<T, N> ld(const T* p) {\n";
  src += aligned ? "  return *reinterpret_cast<const Pack<T, N>*>(p);\n}\n"
                 : "  Pack<T, N> r;\n#pragma unroll\n  for (int j = 0; j < N; ++j) r.v[j] = p[j];\n  return r;\n}\n";
  src += "template <class T, int N> __device__ __forceinline__ void st(T* p, const Pack<T, N>& r) {\n";
  src += aligned ? "  *reinterpret_cast<Pack<T, N>*>(p) = r;\n}\n" : "#pragma unroll\n  for (int j = 0; j < N; ++j) p[j] = r.v[j];\n}\n";
  if (fn) src += fn->source;
  src += "extern \"C\" __global__ void k(const S* __restrict__ x, const float* __restrict__ wt";
  if (fn)
    for (size_t a = 0; a < fn_in->size(); ++a)
      if (int(a) != conv_arg) src += ", const " + storage_type((*fn_in)[a].dtype) + "* __restrict__ a" + L(int64_t(a));
  src += ", " + OS + "* __restrict__ y) {\n";
  src += "  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < (I)" + L(total) + "; t += (I)gridDim.x * blockDim.x) {\n"
         "    I q = t;\n"
         "    const I c0 = (q % " + L(CP) + ") * " + V + "; q /= " + L(CP) + ";\n"
         "    const I ow0 = (q % " + L(OWG) + ") * " + L(R) + "; q /= " + L(OWG) + ";\n"
         "    const I oh = q % " + L(OH) + ", n = q / " + L(OH) + ";\n"
         "    const I iw0 = ow0 * " + L(g.st[1]) + " - " + L(g.pb[1]) + ";\n"
         "    float acc[" + L(R) + "][" + V + "];\n"
         "#pragma unroll\n    for (int r = 0; r < " + L(R) + "; ++r)\n#pragma unroll\n      for (int j = 0; j < " + V +
         "; ++j) acc[r][j] = 0.f;\n"
         "#pragma unroll\n    for (int kh = 0; kh < " + L(KH) + "; ++kh) {\n"
         "      const I ih = oh * " + L(g.st[0]) + " - " + L(g.pb[0]) + " + kh * " + L(g.dil[0]) + ";\n"
         "      if (ih < 0 || ih >= " + L(H) + ") continue;\n"
         "      Pack<float, " + V + "> wk[" + L(KW) + "];  // this row's taps, loaded per row to keep registers for the outputs\n"
         "#pragma unroll\n      for (int kw = 0; kw < " + L(KW) + "; ++kw) wk[kw] = ld<float, " + V + ">(wt + (kh * " + L(KW) +
         " + kw) * " + L(C) + " + c0);\n"
         "      const S* xr = x + ((n * " + L(H) + " + ih) * " + L(Wd) + ") * (I)" + L(C) + " + c0;\n"
         "      Pack<S, " + V + "> xc[" + L(NC) + "]; bool in[" + L(NC) + "];\n"
         "#pragma unroll\n      for (int c = 0; c < " + L(NC) + "; ++c) {\n"
         "        const I iw = iw0 + c;\n"
         "        in[c] = iw >= 0 && iw < " + L(Wd) + ";\n"
         "        if (in[c]) xc[c] = ld<S, " + V + ">(xr + iw * (I)" + L(C) + ");\n      }\n"
         "#pragma unroll\n      for (int r = 0; r < " + L(R) + "; ++r)\n"
         "#pragma unroll\n        for (int kw = 0; kw < " + L(KW) + "; ++kw) {\n"
         "          const int c = r * " + L(g.st[1]) + " + kw * " + L(g.dil[1]) + ";\n"
         "          if (!in[c]) continue;\n"
         "#pragma unroll\n          for (int j = 0; j < " + V + "; ++j)\n"
         "            acc[r][j] = __fmaf_rn(wk[kw].v[j], LD(xc[c].v[j]), acc[r][j]);\n"
         "        }\n    }\n"
         "#pragma unroll\n    for (int r = 0; r < " + L(R) + "; ++r) {\n"
         "      if (ow0 + r >= " + L(OW) + ") break;\n"
         "      const I i0 = ((n * " + L(OH) + " + oh) * " + L(OW) + " + ow0 + r) * (I)" + L(C) + " + c0;\n"
         "      Pack<S, " + V + "> lc;\n"
         "#pragma unroll\n      for (int j = 0; j < " + V + "; ++j) lc.v[j] = " + store_expr(su.dt, "acc[r][j]") + ";\n";
  if (!fn) return src + "      st<S, " + V + ">(y + i0, lc);\n    }\n  }\n}\n";
  for (int k : fn->direct)
    if (k != conv_arg) {
      const std::string T = storage_type((*fn_in)[size_t(k)].dtype);
      src += "      const Pack<" + T + ", " + V + "> l" + L(k) + " = ld<" + T + ", " + V + ">(a" + L(k) + " + i0);\n";
    }
  src += "      const Pack<S, " + V + ">& l" + L(conv_arg) + " = lc;\n"
         "      Pack<" + OS + ", " + V + "> o;\n"
         "#pragma unroll\n      for (int j = 0; j < " + V + "; ++j) o.v[j] = " + fn->call("i0", "j") + ";\n"
         "      st<" + OS + ", " + V + ">(y + i0, o);\n    }\n  }\n}\n";
  return src;
}

// The weights as float in (tap, channel) order, so a thread's taps are vector loads.
std::string depthwise_weights_src(const Setup& su) {
  const Geom& g = su.g;
  const Ints& ws = su.ops[W].buf;
  auto L = [](int64_t v) { return std::to_string(v); };
  const int64_t C = g.C, KW = g.ker[1];
  return prelude() + "typedef " + storage_type(su.dt) + " S;\n"
         "extern \"C\" __global__ void k(const S* __restrict__ w, float* __restrict__ wt) {\n"
         "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < " + L(C * g.ksz) + "; i += (i64)gridDim.x * blockDim.x) {\n"
         "    const i64 c = i % " + L(C) + ", tp = i / " + L(C) + ";\n"
         "    wt[i] = " + load_expr(su.dt, "w[c * " + L(ws[0]) + " + (tp / " + L(KW) + ") * " + L(ws[2]) + " + (tp % " + L(KW) + ") * " + L(ws[3]) + "]") + ";\n"
         "  }\n}\n";
}

// The step: the weights into scratch, then the kernel where every pointer is 16-byte aligned
// (else its element-access twin). Inputs (x, w, the epilogue's other inputs...), output y.
LaunchFn depthwise_launch(const Setup& su, int lanes, const ElementFn* fn, const std::vector<TensorType>* fn_in, int conv_arg,
                          const std::function<size_t(size_t)>& scratch) {
  const std::vector<std::string> opts{"--fmad=false"};  // uncontracted as the unfused group's kernel
  std::string macro = "#define LD(e) " + load_expr(su.dt, "(e)") + "\n";
  const Kernel aligned = nvrtc_kernel(macro + depthwise_src(su, lanes, true, fn, fn_in, conv_arg), "k", opts);
  const Kernel unaligned = nvrtc_kernel(macro + depthwise_src(su, lanes, false, fn, fn_in, conv_arg), "k", opts);
  const Kernel weights = nvrtc_kernel(depthwise_weights_src(su), "k");
  const Geom& g = su.g;
  const int64_t R = depthwise_row(g);
  const int64_t threads = g.N * g.out[0] * ((g.out[1] + R - 1) / R) * (g.C / lanes), nw = g.C * g.ksz;
  const size_t nin = 2 + (fn ? fn_in->size() - 1 : 0);
  const size_t wslot = scratch(size_t(nw) * sizeof(float));
  return [aligned, unaligned, weights, threads, nw, nin, wslot](cudaStream_t s, const void* const* in, void* const* out) {
    const void* w = in[1];
    void* wt = out[wslot];
    void* wargs[] = {&w, &wt};
    launch(weights, (nw + 255) / 256, 256, 0, s, wargs);
    bool al = reinterpret_cast<uintptr_t>(out[0]) % 16 == 0;
    const void* ptrs[kMaxFusedInputs + 2];
    void* args[kMaxFusedInputs + 3];
    for (size_t k = 0; k < nin; ++k) {
      ptrs[k] = k == 1 ? wt : in[k];  // the kernel reads the float weights, not w
      al = al && reinterpret_cast<uintptr_t>(ptrs[k]) % 16 == 0;
      args[k] = &ptrs[k];
    }
    void* y = out[0];
    args[nin] = &y;
    launch(al ? aligned : unaligned, std::min<int64_t>((threads + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

KernelFactory factory(Kind kind) {
  return [kind](const KernelCtx& c) -> LaunchFn {
    Setup su = setup_of(kind, c);
    auto scratch = [&c](size_t n) { return c.scratch(n); };
    if (const int lanes = depthwise_lanes(su)) return depthwise_launch(su, lanes, nullptr, nullptr, -1, scratch);
    const Plan plan = choose_plan(su);
    if (LaunchFn fn = build(su, plan, scratch)) return fn;
    return build(su, Plan{}, scratch);  // cuDNN refused what it chose before: the direct kernels
  };
}

// ---- convolutions with a pointwise epilogue, through cuDNN's graph API ----
// A float16/bfloat16 2-d convolution whose source, weights and result are packed channels-last
// (as the channels-last plan keeps ResNet's activations) and whose result's one reader is an
// elementwise group cuDNN's pointwise operations express (a folded batch norm's scale and
// shift, ReLU, clamp, a residual addition) runs as one cuDNN operation graph: the group's pass
// over memory and its launch disappear. The group's values stay in float inside the fused
// kernel (the unfused steps round the convolution's result to the storage type first). Where a
// buffer is not 16-byte aligned at run time (a user's view), the step runs the convolution and
// the group's kernel unfused. MPSGRAPH_CUDA_CUDNN_FUSION=0 turns this off.

// Tensor uids of the fused graph: the source, weights, the convolution's (virtual) result, the
// group's result, the group's outside input k, and virtual intermediates from kFirstVirtual.
constexpr int64_t kUidX = 1, kUidW = 2, kUidConv = 3, kUidResult = 4, kFirstVirtual = 1000;
int64_t operand_uid(size_t k) { return 10 + int64_t(k); }

// The group's nodes as pointwise operations; false where one has no cuDNN counterpart with
// the generated kernels' semantics. cuDNN's MAX/MIN turn a NaN into the other operand, so
// maximum and minimum are not taken; ReLU keeps a NaN, as the graph's does, and a clamp
// between two constant bounds is ReLU with those clips. `constant[k]`: input k's value where it
// is a one-element constant, else NaN.
bool pointwise_ops(const std::vector<EwNode>& nodes, DType dt, int conv_arg, const std::vector<char>& full,
                   const std::vector<double>& constant, dnn_graph::ConvGraph& cg, std::vector<int64_t>& virtual_uids) {
  using namespace dnn_graph;
  static const std::map<std::string, std::pair<int, int>> modes = {  // op -> (mode, arity)
      {"addition", {kAdd, 2}}, {"subtraction", {kSub, 2}}, {"multiplication", {kMul, 2}}, {"division", {kDiv, 2}},
      {"relu", {kReluFwd, 1}}, {"negative", {kNeg, 1}},    {"clamp", {kReluFwd, 3}},
  };
  std::vector<int64_t> node_uid;
  int64_t next = kFirstVirtual;
  auto uid_of = [&](int a) -> int64_t {
    if (a >= 0) return node_uid[size_t(a)];
    return -a - 1 == conv_arg ? kUidConv : operand_uid(size_t(-a - 1));
  };
  auto constant_of = [&](int a) {
    return a < 0 && -a - 1 != conv_arg ? constant[size_t(-a - 1)] : std::numeric_limits<double>::quiet_NaN();
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const EwNode& e = nodes[i];
    auto it = modes.find(e.op);
    if (it == modes.end() || e.out != dt || int(e.arg.size()) != it->second.second) return false;
    for (DType t : e.in)
      if (t != dt) return false;
    const int64_t y = i + 1 == nodes.size() ? kUidResult : next++;
    Pointwise pw{it->second.first, uid_of(e.arg[0]), e.arg.size() == 2 ? uid_of(e.arg[1]) : -1, y};
    if (e.op == "clamp") {
      const double lo = constant_of(e.arg[1]), hi = constant_of(e.arg[2]);
      if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return false;  // NaN bounds too
      pw.clip = true, pw.lower_clip = lo, pw.upper_clip = hi;
    } else if (pw.b >= 0) {
      // cuDNN broadcasts the second operand only: a broadcast first one swaps where the op commutes
      auto broadcast = [&](int arg) { return arg < 0 && -arg - 1 != conv_arg && !full[size_t(-arg - 1)]; };
      if (broadcast(e.arg[0]) && !broadcast(e.arg[1])) {
        if (e.op == "subtraction" || e.op == "division") return false;
        std::swap(pw.x, pw.b);
      }
    }
    cg.pointwise.push_back(pw);
    if (y != kUidResult) virtual_uids.push_back(y);
    node_uid.push_back(y);
  }
  return true;
}

}  // namespace

LaunchFn conv_with_pointwise(const KernelCtx& conv, const std::vector<EwNode>& nodes, const std::vector<TensorType>& inputs,
                             const std::vector<double>& constant, int conv_arg) {
  using dnn_graph::Tensor;
  static const bool off = switched_off("MPSGRAPH_CUDA_CUDNN_FUSION");
  if (off || conv.node.op->name != "convolution" || !dnn() || nodes.empty()) return nullptr;
  if (inputs.size() + 2 > size_t(kMaxFusedInputs) || conv_arg < 0 || size_t(conv_arg) >= inputs.size()) return nullptr;
  const Setup su = setup_of(Kind::Forward, conv);
  const Geom& g = su.g;
  if ((su.dt != DType::Float16 && su.dt != DType::BFloat16) || g.k != 2 || g.G != 1 || !dnn_takes(su)) return nullptr;
  if (g.C % 8 != 0 || g.O % 8 != 0) return nullptr;  // channel rows of whole 16-byte vectors, as networks have
  for (Role r : {X, Y})
    if (!same_strides(su.ops[r].shape, su.ops[r].buf, packed(su.ops[r].shape, Layout::Last))) return nullptr;
  // weights not held (O, H, W, C) (fed, not constant) are copied so by each run: they are small
  const Ints w_last = packed(su.ops[W].shape, Layout::Last);
  const bool w_copy = !same_strides(su.ops[W].shape, su.ops[W].buf, w_last);
  const Shape& out_shape = inputs[size_t(conv_arg)].shape;  // the group's (the transposed result's)
  if (out_shape.size() != 4 || num_elements(out_shape) != num_elements(su.ops[Y].shape)) return nullptr;
  Ints perm = conv.out_perm;  // conv dim j is dim perm[j] of the group's values
  if (perm.empty()) perm = {0, 1, 2, 3};

  dnn_graph::ConvGraph cg;
  const int dt = dnn_type(su.dt);
  auto conv_order = [&](const Shape& s) {  // a broadcast operand's dims and strides, in conv order
    Shape s4(4 - s.size(), 1);
    s4.insert(s4.end(), s.begin(), s.end());
    const Ints cs = contiguous_strides(s4);
    Tensor t;
    for (int j = 0; j < 4; ++j) {
      t.dims.push_back(s4[size_t(perm[size_t(j)])]);
      t.strides.push_back(cs[size_t(perm[size_t(j)])]);
    }
    return t;
  };
  auto add = [&](int64_t uid, int type, const Shape& dims, const Ints& strides, bool virt) {
    Tensor t;
    t.uid = uid, t.dtype = type, t.dims = dims, t.strides = strides, t.is_virtual = virt;
    cg.tensors.push_back(t);
  };
  std::vector<char> full;
  std::vector<int> in_index;  // the launch's input holding the group's input k (-1: the convolution's result)
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Shape& s = inputs[k].shape;
    full.push_back(s == out_shape);
    in_index.push_back(int(k) == conv_arg ? -1 : 2 + int(k) - (int(k) > conv_arg ? 1 : 0));
    if (int(k) == conv_arg) continue;
    if (inputs[k].dtype != su.dt || s.size() > 4) return nullptr;
    // per-channel operands only (the channel dim is the values' last): the broadcasts networks have
    if (s != out_shape && num_elements(s) != 1 && (s.empty() || s.back() != out_shape.back() || num_elements(s) != s.back()))
      return nullptr;
  }
  std::vector<int64_t> virtual_uids;
  if (!pointwise_ops(nodes, su.dt, conv_arg, full, constant, cg, virtual_uids)) {
    if (std::getenv("MPSGRAPH_CUDNN_VERBOSE")) {
      std::string ops;
      for (const EwNode& e : nodes) ops += " " + e.op;
      std::fprintf(stderr, "[cudnn fusion] %s: group not expressed (%s)\n", conv.node.name.c_str(), ops.c_str());
    }
    return nullptr;
  }
  // the tensors: x, w, the operands the pointwise ops read (a clamp's bounds are attributes),
  // the intermediates, the result; `source[i]`: where the i-th non-virtual one is found at run
  // time (an input index, -1 the result)
  std::vector<int> source{0, 1};
  add(kUidX, dt, su.ops[X].shape, su.ops[X].buf, false);
  add(kUidW, dt, su.ops[W].shape, w_last, false);
  add(kUidConv, dnn_graph::kFloat, su.ops[Y].shape, su.ops[Y].buf, true);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t uid = operand_uid(k);
    const bool read = std::any_of(cg.pointwise.begin(), cg.pointwise.end(),
                                  [uid](const dnn_graph::Pointwise& p) { return p.x == uid || p.b == uid; });
    if (int(k) == conv_arg || !read) continue;
    Tensor t = conv_order(inputs[k].shape);
    t.uid = uid, t.dtype = dt;
    cg.tensors.push_back(t);
    source.push_back(in_index[k]);
  }
  for (int64_t v : virtual_uids) add(v, dnn_graph::kFloat, su.ops[Y].shape, su.ops[Y].buf, true);
  add(kUidResult, dt, su.ops[Y].shape, su.ops[Y].buf, false);
  source.push_back(-1);
  cg.x = kUidX, cg.w = kUidW, cg.conv_out = kUidConv;
  for (int i = 0; i < g.k; ++i) {
    cg.pre_pad.push_back(su.pads[size_t(2 * i)]);
    cg.post_pad.push_back(su.pads[size_t(2 * i + 1)]);
    cg.strides.push_back(g.st[i]);
    cg.dilations.push_back(g.dil[i]);
  }
  std::shared_ptr<dnn_graph::FusedPlan> plan = dnn_graph::build(cg);
  if (!plan) return nullptr;

  // the unfused twin, for buffers cuDNN's 16-byte alignment refuses
  auto scratch = [&conv](size_t n) { return conv.scratch(n); };
  LaunchFn unfused_conv = build(su, heuristic_plan(su), scratch);
  if (!unfused_conv) unfused_conv = build(su, Plan{}, scratch);
  const LaunchFn group = make_elementwise(nodes, inputs, out_shape);
  const size_t es = dtype_size(su.dt);
  const size_t conv_slot = scratch(size_t(num_elements(out_shape)) * es);
  const StridedCopy w_staging = w_copy ? make_copy(es, su.ops[W].shape, su.ops[W].buf, w_last, 0, 0) : StridedCopy{};
  const size_t w_slot = w_copy ? scratch(size_t(num_elements(su.ops[W].shape)) * es) : 0;
  const size_t ws = dnn_graph::workspace_bytes(*plan);
  const size_t ws_slot = ws ? scratch(ws) : 0;
  const size_t n_out = conv.out.size() + conv.scratch_bytes.size();
  const std::string op = su.op;
  return [plan, unfused_conv, group, source, in_index, conv_slot, ws_slot, w_staging, w_slot, n_out, op](
             cudaStream_t s, const void* const* in, void* const* out) {
    void* ptrs[kMaxFusedInputs + 3];
    bool aligned = true;
    for (size_t i = 0; i < source.size(); ++i) {
      ptrs[i] = source[i] < 0 ? out[0] : source[i] == 1 && w_slot ? out[w_slot] : const_cast<void*>(in[source[i]]);
      aligned = aligned && reinterpret_cast<uintptr_t>(ptrs[i]) % 16 == 0;
    }
    if (aligned) {
      if (w_slot) strided_copy(w_staging, in[1], out[w_slot], s);
      return dnn_graph::run(*plan, s, ptrs, ws_slot ? out[ws_slot] : nullptr, op);
    }
    thread_local std::vector<void*> conv_out;  // the step's outputs with the result in scratch
    conv_out.assign(out, out + n_out);
    conv_out[0] = out[conv_slot];
    unfused_conv(s, in, conv_out.data());
    const void* group_in[kMaxFusedInputs];
    for (size_t k = 0; k < in_index.size(); ++k) group_in[k] = in_index[k] < 0 ? out[conv_slot] : in[in_index[k]];
    group(s, group_in, out);
  };
}

LaunchFn depthwise_with_epilogue(const KernelCtx& conv, const ElementFn& fn, const std::vector<TensorType>& fn_inputs, int conv_arg) {
  if (conv.node.op->name != "convolution") return nullptr;
  const Setup su = setup_of(Kind::Forward, conv);
  const int lanes = depthwise_lanes(su);
  if (!lanes || fn.lanes != lanes || fn_inputs.size() + 1 > size_t(kMaxFusedInputs)) return nullptr;
  return depthwise_launch(su, lanes, &fn, &fn_inputs, conv_arg, [&conv](size_t n) { return conv.scratch(n); });
}

void* cudnn_library() { return dnn() ? dnn()->lib : nullptr; }
void* cudnn_handle() { return dnn() ? dnn()->handle : nullptr; }

void register_convolution_kernels() {
  register_kernel("convolution", factory(Kind::Forward));
  register_kernel("convolution_data_gradient", factory(Kind::Data));
  register_kernel("convolution_weights_gradient", factory(Kind::Weights));
  // cuDNN reads and writes the data tensors in any layout (an NHWC graph's transposes are not
  // run); `like` (input 2 of the gradients) is never read
  register_layout_inputs("convolution", {0, 1}, true);
  register_layout_inputs("convolution_data_gradient", {0, 2}, true);
  register_layout_inputs("convolution_weights_gradient", {0, 1, 2}, false);
}

}  // namespace mg::cuda
