// cuDNN's graph API: descriptors built from a ConvGraph, finalized into a plan (see the header).
#include "backends/cuda/cudnn_graph_cuda.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"

namespace mg::cuda::dnn_graph {

namespace {

// ---- declared from cuDNN's documentation (cudnn_graph.h, cuDNN 8.x and 9.x) ----
using Status = int;
using Desc = void*;

enum DescType : int {  // cudnnBackendDescriptorType_t
  kPointwiseDesc = 0, kConvolutionDesc = 1, kEngineDesc = 2, kEngineCfgDesc = 3, kEngineHeurDesc = 4,
  kExecutionPlanDesc = 5, kOpConvForwardDesc = 10, kOpPointwiseDesc = 13, kOpGraphDesc = 15,
  kVariantPackDesc = 16, kTensorDesc = 17,
};
enum AttrType : int {  // cudnnBackendAttributeType_t
  kHandleT = 0, kDataTypeT = 1, kBooleanT = 2, kInt64T = 3, kFloatT = 4, kVoidPtrT = 6, kConvModeT = 7,
  kHeurModeT = 8, kNumericalNoteT = 11, kPointwiseModeT = 14, kDescriptorT = 15,
};
enum Attr : int {  // cudnnBackendAttributeName_t
  kPointwiseMode = 0, kPointwiseMathPrec = 1, kReluLowerClip = 3, kReluUpperClip = 4,
  kConvCompType = 100, kConvMode = 101, kConvDilations = 102, kConvStrides = 103, kConvPostPad = 104,
  kConvPrePad = 105, kConvSpatialDims = 106,
  kHeurMode = 200, kHeurGraph = 201, kHeurResults = 202,
  kCfgEngine = 300,
  kPlanHandle = 400, kPlanConfig = 401, kPlanWorkspace = 402,
  kConvFwdAlpha = 700, kConvFwdBeta = 701, kConvFwdDesc = 702, kConvFwdW = 703, kConvFwdX = 704, kConvFwdY = 705,
  kPwDesc = 750, kPwX = 751, kPwB = 752, kPwY = 753,
  kGraphHandle = 800, kGraphOps = 801,
  kTensorAlignment = 900, kTensorDataType = 901, kTensorDims = 902, kTensorStrides = 903, kTensorUid = 906,
  kTensorVirtual = 907,
  kPackUids = 1000, kPackPointers = 1001, kPackWorkspace = 1003,
  kEngineNotes = 1303,
};
constexpr int kCrossCorrelation = 1;                    // cudnnConvolutionMode_t
constexpr int kHeurModeA = 3, kHeurModeFallback = 2;    // cudnnBackendHeurMode_t
constexpr int kNoteReducedPrecision = 2, kNoteNondeterministic = 4;  // cudnnBackendNumericalNote_t

struct Api {
  void* handle = nullptr;
  Status (*create)(int, Desc*) = nullptr;
  Status (*destroy)(Desc) = nullptr;
  Status (*finalize)(Desc) = nullptr;
  Status (*set)(Desc, int, int, int64_t, const void*) = nullptr;
  Status (*get)(Desc, int, int, int64_t, int64_t*, void*) = nullptr;
  Status (*execute)(void*, Desc, Desc) = nullptr;
  Status (*set_stream)(void*, cudaStream_t) = nullptr;
  void (*last_error)(char*, size_t) = nullptr;  // cuDNN 9 only
};

const Api* api() {
  static const Api* a = []() -> const Api* {
    void* lib = cudnn_library();
    if (!lib) return nullptr;
    auto* r = new Api;
    r->handle = cudnn_handle();
    const bool ok = r->handle && sym(lib, "cudnnBackendCreateDescriptor", r->create) &&
                    sym(lib, "cudnnBackendDestroyDescriptor", r->destroy) &&
                    sym(lib, "cudnnBackendFinalize", r->finalize) && sym(lib, "cudnnBackendSetAttribute", r->set) &&
                    sym(lib, "cudnnBackendGetAttribute", r->get) && sym(lib, "cudnnBackendExecute", r->execute) &&
                    sym(lib, "cudnnSetStream", r->set_stream);
    if (!ok) {
      delete r;
      return nullptr;
    }
    sym(lib, "cudnnGetLastErrorString", r->last_error);
    return r;
  }();
  return a;
}

std::string last_error(Status st) {
  std::string s = "status " + std::to_string(st);
  if (const Api* a = api(); a && a->last_error) {
    char buf[512] = {};
    a->last_error(buf, sizeof buf);
    if (buf[0]) s += ": " + std::string(buf);
  }
  return s;
}

// Descriptors are kept alive for the plan's life: cuDNN's documentation leaves open whether a
// finalized descriptor still refers to the ones it was built from.
struct Owned {
  std::vector<Desc> all;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (const Api* a = api())
      for (auto it = all.rbegin(); it != all.rend(); ++it) a->destroy(*it);
  }
  Desc make(int type) {
    Desc d = nullptr;
    if (api()->create(type, &d) != 0) return nullptr;
    all.push_back(d);
    return d;
  }
};

// Failure of one step of building a graph, with where it happened.
struct Refused {
  std::string why;
};

void check(Status st, const char* what) {
  if (st != 0) throw Refused{std::string(what) + " (" + last_error(st) + ")"};
}

template <class T>
void set(Desc d, int attr, int type, const std::vector<T>& v, const char* what) {
  check(api()->set(d, attr, type, int64_t(v.size()), v.data()), what);
}

template <class T>
void set1(Desc d, int attr, int type, const T& v, const char* what) {
  check(api()->set(d, attr, type, 1, &v), what);
}

}  // namespace

struct FusedPlan {
  Owned owned;
  Desc plan = nullptr;
  std::vector<int64_t> uids;  // the non-virtual tensors, in ConvGraph order
  int64_t workspace = 0;
};

size_t workspace_bytes(const FusedPlan& p) { return size_t(p.workspace); }

namespace {

Desc tensor(Owned& o, const Tensor& t) {
  Desc d = o.make(kTensorDesc);
  if (!d) throw Refused{"tensor descriptor"};
  set1(d, kTensorDataType, kDataTypeT, t.dtype, "tensor data type");
  set(d, kTensorDims, kInt64T, t.dims, "tensor dims");
  set(d, kTensorStrides, kInt64T, t.strides, "tensor strides");
  set1(d, kTensorUid, kInt64T, t.uid, "tensor uid");
  set1(d, kTensorAlignment, kInt64T, int64_t(16), "tensor alignment");
  set1(d, kTensorVirtual, kBooleanT, bool(t.is_virtual), "tensor virtual");
  check(api()->finalize(d), "tensor finalize");
  return d;
}

// The numerical notes of a configuration's engine.
std::vector<int> notes_of(Owned& o, Desc cfg) {
  Desc engine = o.make(kEngineDesc);
  int64_t n = 0;
  if (!engine || api()->get(cfg, kCfgEngine, kDescriptorT, 1, &n, &engine) != 0 || n != 1) return {-1};
  int notes[32] = {};
  if (api()->get(engine, kEngineNotes, kNumericalNoteT, 32, &n, notes) != 0) return {-1};
  return std::vector<int>(notes, notes + std::min<int64_t>(n, 32));
}

Desc operation_graph(Owned& o, const ConvGraph& g) {
  const Api* a = api();
  std::vector<Desc> tensors;
  auto find = [&](int64_t uid) {
    for (size_t i = 0; i < g.tensors.size(); ++i)
      if (g.tensors[i].uid == uid) return tensors[i];
    throw Refused{"unknown tensor uid " + std::to_string(uid)};
  };
  for (const Tensor& t : g.tensors) tensors.push_back(tensor(o, t));

  Desc conv = o.make(kConvolutionDesc);
  if (!conv) throw Refused{"convolution descriptor"};
  set1(conv, kConvSpatialDims, kInt64T, int64_t(g.strides.size()), "spatial dims");
  set1(conv, kConvCompType, kDataTypeT, int(kFloat), "compute type");
  set1(conv, kConvMode, kConvModeT, kCrossCorrelation, "convolution mode");
  set(conv, kConvPrePad, kInt64T, g.pre_pad, "pre-padding");
  set(conv, kConvPostPad, kInt64T, g.post_pad, "post-padding");
  set(conv, kConvDilations, kInt64T, g.dilations, "dilations");
  set(conv, kConvStrides, kInt64T, g.strides, "strides");
  check(a->finalize(conv), "convolution finalize");

  std::vector<Desc> ops;
  Desc fwd = o.make(kOpConvForwardDesc);
  if (!fwd) throw Refused{"convolution operation"};
  const float one = 1.f, zero = 0.f;
  set1(fwd, kConvFwdX, kDescriptorT, find(g.x), "conv x");
  set1(fwd, kConvFwdW, kDescriptorT, find(g.w), "conv w");
  set1(fwd, kConvFwdY, kDescriptorT, find(g.conv_out), "conv y");
  set1(fwd, kConvFwdDesc, kDescriptorT, conv, "conv desc");
  set1(fwd, kConvFwdAlpha, kFloatT, one, "conv alpha");
  set1(fwd, kConvFwdBeta, kFloatT, zero, "conv beta");
  check(a->finalize(fwd), "convolution operation finalize");
  ops.push_back(fwd);

  for (const Pointwise& p : g.pointwise) {
    Desc pw = o.make(kPointwiseDesc);
    if (!pw) throw Refused{"pointwise descriptor"};
    set1(pw, kPointwiseMode, kPointwiseModeT, p.mode, "pointwise mode");
    set1(pw, kPointwiseMathPrec, kDataTypeT, int(kFloat), "pointwise precision");
    if (p.clip) {
      set1(pw, kReluLowerClip, kFloatT, float(p.lower_clip), "relu lower clip");
      set1(pw, kReluUpperClip, kFloatT, float(p.upper_clip), "relu upper clip");
    }
    check(a->finalize(pw), "pointwise finalize");
    Desc op = o.make(kOpPointwiseDesc);
    if (!op) throw Refused{"pointwise operation"};
    set1(op, kPwDesc, kDescriptorT, pw, "pointwise desc");
    set1(op, kPwX, kDescriptorT, find(p.x), "pointwise x");
    if (p.b >= 0) set1(op, kPwB, kDescriptorT, find(p.b), "pointwise b");
    set1(op, kPwY, kDescriptorT, find(p.y), "pointwise y");
    check(a->finalize(op), "pointwise operation finalize");
    ops.push_back(op);
  }

  Desc graph = o.make(kOpGraphDesc);
  if (!graph) throw Refused{"operation graph"};
  set(graph, kGraphOps, kDescriptorT, ops, "graph ops");
  set1(graph, kGraphHandle, kHandleT, a->handle, "graph handle");
  check(a->finalize(graph), "operation graph finalize");
  return graph;
}

// The engine configurations cuDNN's heuristics (mode `mode`) rank for the graph, best first.
std::vector<Desc> configurations(Owned& o, Desc graph, int mode) {
  const Api* a = api();
  Desc heur = o.make(kEngineHeurDesc);
  if (!heur) return {};
  set1(heur, kHeurGraph, kDescriptorT, graph, "heuristics graph");
  set1(heur, kHeurMode, kHeurModeT, mode, "heuristics mode");
  if (a->finalize(heur) != 0) return {};
  int64_t n = 0;
  if (a->get(heur, kHeurResults, kDescriptorT, 0, &n, nullptr) != 0 || n <= 0) return {};
  std::vector<Desc> cfgs;
  for (int64_t i = 0; i < std::min<int64_t>(n, 16); ++i) cfgs.push_back(o.make(kEngineCfgDesc));
  if (std::count(cfgs.begin(), cfgs.end(), nullptr)) return {};
  int64_t got = 0;
  if (a->get(heur, kHeurResults, kDescriptorT, int64_t(cfgs.size()), &got, cfgs.data()) != 0) return {};
  cfgs.resize(size_t(std::min<int64_t>(got, int64_t(cfgs.size()))));
  return cfgs;
}

std::shared_ptr<FusedPlan> build_uncached(const ConvGraph& g) {
  const Api* a = api();
  const bool verbose = std::getenv("MPSGRAPH_CUDNN_VERBOSE") != nullptr;
  if (!a) {
    if (verbose) std::fprintf(stderr, "[cudnn fusion] refused: this cuDNN has no graph API\n");
    return nullptr;
  }
  std::string why;
  auto p = std::make_shared<FusedPlan>();
  try {
    const Desc graph = operation_graph(p->owned, g);
    std::string tried;
    for (int mode : {kHeurModeA, kHeurModeFallback}) {
      for (Desc cfg : configurations(p->owned, graph, mode)) {
        const std::vector<int> notes = notes_of(p->owned, cfg);
        if (std::find(notes.begin(), notes.end(), kNoteReducedPrecision) != notes.end() ||
            std::find(notes.begin(), notes.end(), kNoteNondeterministic) != notes.end() ||
            std::find(notes.begin(), notes.end(), -1) != notes.end()) {
          tried += " [notes]";
          continue;
        }
        Desc plan = p->owned.make(kExecutionPlanDesc);
        if (!plan) continue;
        Status st = a->set(plan, kPlanHandle, kHandleT, 1, &a->handle);
        if (st == 0) st = a->set(plan, kPlanConfig, kDescriptorT, 1, &cfg);
        if (st == 0) st = a->finalize(plan);
        if (st != 0) {
          tried += " [" + last_error(st) + "]";
          continue;
        }
        int64_t ws = 0, n = 0;
        if (a->get(plan, kPlanWorkspace, kInt64T, 1, &n, &ws) != 0 || ws < 0 || ws > (int64_t(1) << 30)) continue;
        p->plan = plan;
        p->workspace = ws;
        for (const Tensor& t : g.tensors)
          if (!t.is_virtual) p->uids.push_back(t.uid);
        if (verbose) std::fprintf(stderr, "[cudnn fusion] plan with %lld bytes of workspace\n", (long long)ws);
        return p;
      }
    }
    why = "no engine takes the graph" + tried;
  } catch (const Refused& r) {
    why = r.why;
  }
  if (verbose) std::fprintf(stderr, "[cudnn fusion] refused: %s\n", why.c_str());
  return nullptr;
}

std::string key_of(const ConvGraph& g) {
  std::string k;
  auto add = [&k](int64_t v) { k += std::to_string(v) + ','; };
  auto list = [&](const std::vector<int64_t>& v) {
    for (int64_t x : v) add(x);
    k += ';';
  };
  for (const Tensor& t : g.tensors) {
    add(t.uid), add(t.dtype), add(t.is_virtual);
    list(t.dims), list(t.strides);
  }
  add(g.x), add(g.w), add(g.conv_out);
  list(g.pre_pad), list(g.post_pad), list(g.strides), list(g.dilations);
  for (const Pointwise& p : g.pointwise) {
    add(p.mode), add(p.x), add(p.b), add(p.y), add(p.clip);
    char clips[64];  // exact: a plan's clips are compiled into its kernel
    std::snprintf(clips, sizeof clips, "%a,%a;", p.lower_clip, p.upper_clip);
    k += clips;
  }
  return k;
}

}  // namespace

// Plans are kept for the process (one device is used): finalizing a runtime-compiled engine's
// plan compiles its kernel, and every executable with the same layer reuses it.
std::shared_ptr<FusedPlan> build(const ConvGraph& g) {
  static std::mutex mu;
  // never destroyed: its descriptors would outlive the CUDA context at exit
  static auto* cache = new std::map<std::string, std::shared_ptr<FusedPlan>>;
  const std::string key = key_of(g);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, build_uncached(g)).first;
  return it->second;
}

void run(const FusedPlan& p, cudaStream_t s, void* const* ptrs, void* workspace, const std::string& op) {
  const Api* a = api();
  Owned o;
  Desc pack = o.make(kVariantPackDesc);
  Status st = pack ? a->set_stream(a->handle, s) : -1;
  if (st == 0) st = a->set(pack, kPackUids, kInt64T, int64_t(p.uids.size()), p.uids.data());
  if (st == 0) st = a->set(pack, kPackPointers, kVoidPtrT, int64_t(p.uids.size()), ptrs);
  if (st == 0) st = a->set(pack, kPackWorkspace, kVoidPtrT, 1, &workspace);
  if (st == 0) st = a->finalize(pack);
  if (st == 0) st = a->execute(a->handle, p.plan, pack);
  if (st != 0) raise(ErrorKind::Runtime, op, "", "cuDNN fused convolution failed (" + last_error(st) + ")");
}

}  // namespace mg::cuda::dnn_graph
