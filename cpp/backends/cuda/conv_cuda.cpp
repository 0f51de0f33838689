// CUDA convolution primitives (convolution, convolution_data_gradient,
// convolution_weights_gradient) in the canonical layout (N, C, *spatial), weights
// (O, C/groups, *kernel).
//
// cuDNN's convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter), opened
// with dlopen on first use and declared here from its documentation, runs 1-3 spatial dims with
// symmetric padding in float32 (no TF32), float16 and bfloat16 (float accumulation). Its
// algorithm is picked by cuDNN's heuristics at compile time and its workspace comes from the
// program's memory plan, so the calls are captured in the CUDA graph like any launch. Every
// other case (asymmetric padding, more spatial dims, zero-size tensors, no cuDNN, or cuDNN
// refusing the descriptors) runs generated direct kernels: one thread per output element
// (forward, data gradient) or one block per weight (weights gradient), float accumulation.
// MPSGRAPH_CUDNN names the library file; MPSGRAPH_CUDNN=0 turns cuDNN off.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
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
  kNCHW = 0,                             // cudnnTensorFormat_t
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

template <class F>
bool sym(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

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

// One prepared cuDNN call: descriptors owned for the program's life.
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

// The cuDNN call for this geometry, or nullptr where cuDNN cannot take it.
std::shared_ptr<DnnConv> prepare_dnn(Kind kind, const Geom& g, const Ints& pads, DType dt) {
  Dnn* d = dnn();
  if (!d || g.k < 1 || g.k > 3) return nullptr;
  if (g.N == 0 || g.Cg == 0 || g.Og == 0 || g.P == 0 || g.in_plane == 0) return nullptr;
  const int64_t lim = int64_t(1) << 31;
  if (g.N * g.C * g.in_plane >= lim || g.N * g.O * g.P >= lim) return nullptr;
  std::vector<int> in, out, ker, pad, st, dil;
  if (g.k == 1) {  // 1-d as 2-d with a unit leading spatial dim
    in.push_back(1), out.push_back(1), ker.push_back(1), pad.push_back(0), st.push_back(1), dil.push_back(1);
  }
  for (int i = 0; i < g.k; ++i) {
    if (pads[size_t(2 * i)] != pads[size_t(2 * i + 1)] || pads[size_t(2 * i)] < 0) return nullptr;
    // cuDNN derives the output dims from the source's: they must agree (data gradients with
    // output_padding or explicit source dims may not)
    const int64_t e = g.dil[i] * (g.ker[i] - 1) + 1, L = g.in[i] + 2 * g.pb[i];
    if (L < e || (L - e) / g.st[i] + 1 != g.out[i]) return nullptr;
    in.push_back(int(g.in[i])), out.push_back(int(g.out[i])), ker.push_back(int(g.ker[i]));
    pad.push_back(int(g.pb[i])), st.push_back(int(g.st[i])), dil.push_back(int(g.dil[i]));
  }
  const int nd = int(in.size()) + 2;
  auto tensor = [&](Desc& desc, int64_t c, const std::vector<int>& sp) {
    std::vector<int> dims{int(g.N), int(c)};
    std::vector<int> strides(static_cast<size_t>(nd));
    dims.insert(dims.end(), sp.begin(), sp.end());
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; --i) {
      strides[size_t(i)] = int(s);
      s *= dims[size_t(i)];
    }
    return d->tensor_create(&desc) == 0 && d->tensor_set(desc, dnn_type(dt), nd, dims.data(), strides.data()) == 0;
  };
  auto r = std::make_shared<DnnConv>();
  std::vector<int> wdims{int(g.O), int(g.Cg)};
  wdims.insert(wdims.end(), ker.begin(), ker.end());
  const bool f32 = dt == DType::Float32;
  if (!tensor(r->x, g.C, in) || !tensor(r->y, g.O, out) || d->filter_create(&r->w) != 0 ||
      d->filter_set(r->w, dnn_type(dt), kNCHW, nd, wdims.data()) != 0 || d->conv_create(&r->conv) != 0 ||
      d->conv_set(r->conv, nd - 2, pad.data(), st.data(), dil.data(), kCrossCorrelation, kFloat) != 0 ||
      d->conv_groups(r->conv, int(g.G)) != 0 || d->conv_math(r->conv, f32 ? kFmaMath : kTensorOpMath) != 0)
    return nullptr;
  const int ki = int(kind);
  Desc a = kind == Kind::Data ? r->w : r->x, b = kind == Kind::Forward ? r->w : r->y,
       c = kind == Kind::Forward ? r->y : kind == Kind::Data ? r->x : r->w;
  Perf perf[16];
  int found = 0;
  if (d->algos[ki](d->handle, a, b, r->conv, c, 16, &found, perf) != 0) return nullptr;
  const size_t ws_cap = size_t(1) << 30;
  for (int i = 0; i < found; ++i) {
    const Perf& p = perf[i];
    if (p.status != 0 || p.memory > ws_cap) continue;
    if (f32 && p.math_type != kFmaMath && p.math_type != kDefaultMath) continue;  // no TF32
    if (d->conv_math(r->conv, f32 ? kFmaMath : p.math_type) != 0) continue;
    size_t ws = 0;
    if (d->workspace[ki](d->handle, a, b, r->conv, c, p.algo, &ws) != 0 || ws > ws_cap) continue;
    r->algo = p.algo;
    r->ws = ws;
    return r;
  }
  return nullptr;
}

LaunchFn dnn_launch(Kind kind, std::shared_ptr<DnnConv> r, size_t ws_slot, const std::string& op) {
  return [kind, r, ws_slot, op](cudaStream_t s, const void* const* in, void* const* out) {
    Dnn* d = dnn();
    const float one = 1.f, zero = 0.f;
    void* ws = r->ws ? out[ws_slot] : nullptr;
    Status st = d->set_stream(d->handle, s);
    if (st == 0) switch (kind) {
        case Kind::Forward:
          st = d->run[0](d->handle, &one, r->x, in[0], r->w, in[1], r->conv, r->algo, ws, r->ws, &zero, r->y, out[0]);
          break;
        case Kind::Data:
          st = d->run[1](d->handle, &one, r->w, in[1], r->y, in[0], r->conv, r->algo, ws, r->ws, &zero, r->x, out[0]);
          break;
        case Kind::Weights:
          st = d->run[2](d->handle, &one, r->x, in[1], r->y, in[0], r->conv, r->algo, ws, r->ws, &zero, r->w, out[0]);
          break;
      }
    if (st != 0) raise(ErrorKind::Runtime, op, "", "cuDNN convolution failed (status " + std::to_string(st) + ")");
  };
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

LaunchFn direct_launch(Kind kind, const Geom& g, DType dt) {
  Kernel kern = nvrtc_kernel(direct_source(kind, dt), "k");
  const int64_t total = kind == Kind::Forward ? g.N * g.O * g.P : kind == Kind::Data ? g.N * g.C * g.in_plane : g.O * g.Cg * g.ksz;
  const bool per_block = kind == Kind::Weights;
  return [kern, g, total, per_block](cudaStream_t s, const void* const* in, void* const* out) {
    if (total == 0) return;
    Geom geom = g;
    const void* a = in[0];
    const void* b = in[1];
    void* o = out[0];
    void* args[] = {&geom, &a, &b, &o};
    const int64_t blocks = per_block ? total : (total + 255) / 256;
    launch(kern, std::min<int64_t>(blocks, int64_t(1) << 20), 256, 0, s, args);
  };
}

KernelFactory factory(Kind kind) {
  return [kind](const KernelCtx& c) -> LaunchFn {
    const std::string& op = c.node.op->name;
    const Shape *src, *w, *dy;
    switch (kind) {
      case Kind::Forward: src = &c.in[0].shape; w = &c.in[1].shape; dy = &c.out[0].shape; break;
      case Kind::Data: dy = &c.in[0].shape; w = &c.in[1].shape; src = &c.out[0].shape; break;
      default: dy = &c.in[0].shape; src = &c.in[1].shape; w = &c.out[0].shape; break;
    }
    const DType dt = c.out[0].dtype;
    if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16)
      raise(ErrorKind::Type, op, c.node.name, std::string("expects a floating-point dtype, got ") + dtype_name(dt));
    const ops::ConvolutionAttrs& a = typed_attrs<ops::ConvolutionAttrs>(c.node);
    const size_t k = src->size() - 2;
    if (a.strides.size() != k || a.dilation_rates.size() != k || a.padding.size() != 2 * k || w->size() != k + 2 ||
        dy->size() != k + 2 || a.groups < 1)
      raise(ErrorKind::Runtime, op, c.node.name, "convolution attributes were not resolved for these shapes");
    if (k > size_t(kMaxSpatial))
      raise(ErrorKind::NotImplemented, op, c.node.name, "more than 6 spatial dims are not supported on cuda");
    Geom g;
    g.k = int32_t(k);
    g.N = (*src)[0];
    g.C = (*src)[1];
    g.O = (*w)[0];
    g.G = a.groups;
    g.Cg = g.C / g.G;
    g.Og = g.O / g.G;
    for (size_t i = 0; i < k; ++i) {
      g.in[i] = (*src)[2 + i];
      g.out[i] = (*dy)[2 + i];
      g.ker[i] = (*w)[2 + i];
      g.st[i] = a.strides[i];
      g.dil[i] = a.dilation_rates[i];
      g.pb[i] = a.padding[2 * i];
      g.in_plane *= g.in[i];
      g.P *= g.out[i];
      g.ksz *= g.ker[i];
    }
    if (auto r = prepare_dnn(kind, g, a.padding, dt)) {
      const size_t ws_slot = r->ws ? c.scratch(r->ws) : 0;
      return dnn_launch(kind, r, ws_slot, op);
    }
    return direct_launch(kind, g, dt);
  };
}

}  // namespace

void register_convolution_kernels() {
  register_kernel("convolution", factory(Kind::Forward));
  register_kernel("convolution_data_gradient", factory(Kind::Data));
  register_kernel("convolution_weights_gradient", factory(Kind::Weights));
}

}  // namespace mg::cuda
