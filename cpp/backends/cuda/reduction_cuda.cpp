// CUDA reductions: one generated source per (op, dtype) holding a kernel per layout. The
// input's dims are collapsed into kept and reduced groups and the layout picks the kernel:
// rows (the reduced group innermost) by a warp per row or, for long rows and whole tensors,
// blocks over chunks of a row; columns (a kept group innermost) by threads along the kept
// axis; anything else by a block per output. Split reductions write per-block partials to
// scratch and a second kernel combines them in a fixed order, so float results do not change
// from run to run. Semantics follow the CPU kernels: integer sums and products wrap,
// maximum/minimum propagate NaN, arg reductions take the first index of the extreme value
// (the first NaN if any), float16/bfloat16 accumulate in float32.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/elementwise_cuda.h"
#include "core/error.h"
#include "core/registry.h"
#include "core/ops/reduction_attrs.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

// An op is one combinable state A: r_init() (the identity), r_add(acc, x, j) (j: the element's
// index along the reduced dims), r_comb(a, b) and the final value from (A, count). variance
// (Welford/Chan) and logsumexp (running max with a rescaled sum) are single-pass states too, so
// every layout can split its reduced elements over threads, warps and blocks alike.
struct Op {
  std::string types;  // extra device declarations (state structs)
  std::string A, init, add, combine, emit;  // add sees acc, x, j; combine a, b; emit m, n
};

// The kernels, one source per (op, dtype): the layout picks the kernel at compile time.
//   k_row:    rows of `len` contiguous elements, one warp per row (short rows);
//   k_rowb:   rows split into `split` chunks, one block per chunk (long rows, whole tensor);
//   k_col:    (outer, len, inner) -> (outer, inner): 32 kept columns x 8 reduced rows per block,
//             coalesced along the kept axis, the reduced axis split over `split` blocks;
//   k_finish: one warp per output combines its `split` partials in order (deterministic);
//   k_gen:    any other layout, one block per output through the index arithmetic.
const char* kRedKernels = R"(
template <class T> __device__ __forceinline__ T mg_shfl(T v, int m) {
  constexpr int W = (sizeof(T) + 3) / 4;
  union U { T t; unsigned w[W]; } u;
  for (int k = 0; k < W; ++k) u.w[k] = 0u;
  u.t = v;
  for (int k = 0; k < W; ++k) u.w[k] = __shfl_xor_sync(0xffffffffu, u.w[k], m);
  return u.t;
}
__device__ __forceinline__ i64 mg_min64(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ A warp_all(A v) {
  for (int m = 16; m > 0; m >>= 1) v = r_comb(v, mg_shfl(v, m));
  return v;
}
// valid in thread 0; every thread of the block calls it
__device__ __forceinline__ A block_all(A v) {
  __shared__ A sh[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_all(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) v = warp_all(lane < nw ? sh[lane] : r_init());
  return v;
}
static_assert(sizeof(A) <= 16, "partial slots are 16 bytes");
extern "C" __global__ void k_row(i64 rows, i64 len, SRC_PARAMS, OS* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  for (i64 o = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); o < rows; o += warps) {
    const i64 base = o * len;
    A acc = r_init();
#pragma unroll 4
    for (i64 j = lane; j < len; j += 32) acc = r_add(acc, R_AT(base + j), j);
    acc = warp_all(acc);
    if (lane == 0) r_store(out, o, acc, len);
  }
}
extern "C" __global__ void k_rowb(i64 rows, i64 len, i64 split, i64 chunk, SRC_PARAMS, OS* __restrict__ out,
                                  A* __restrict__ part) {
  for (i64 b = blockIdx.x; b < rows * split; b += gridDim.x) {
    const i64 o = b / split, s = b - o * split;
    const i64 j1 = mg_min64(len, (s + 1) * chunk);
    const i64 base = o * len;
    A acc = r_init();
#pragma unroll 4
    for (i64 j = s * chunk + threadIdx.x; j < j1; j += blockDim.x) acc = r_add(acc, R_AT(base + j), j);
    acc = block_all(acc);
    if (threadIdx.x == 0) {
      if (split == 1) r_store(out, o, acc, len);
      else part[b] = acc;
    }
  }
}
extern "C" __global__ void k_col(i64 outer, i64 len, i64 inner, i64 split, i64 chunk, SRC_PARAMS,
                                 OS* __restrict__ out, A* __restrict__ part) {
  __shared__ A sh[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;  // 256 threads
  const i64 tiles = (inner + 31) / 32, nb = outer * tiles * split;
  for (i64 b = blockIdx.x; b < nb; b += gridDim.x) {
    const i64 t = b / split, s = b - t * split;
    const i64 o = t / tiles, i = (t - o * tiles) * 32 + tx;
    const i64 r1 = mg_min64(len, (s + 1) * chunk);
    A acc = r_init();
    if (i < inner) {
      const i64 base = o * len * inner + i;
#pragma unroll 4
      for (i64 r = s * chunk + ty; r < r1; r += 8) acc = r_add(acc, R_AT(base + r * inner), r);
    }
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && i < inner) {
      for (int y = 1; y < 8; ++y) acc = r_comb(acc, sh[y][tx]);
      const i64 q = o * inner + i;
      if (split == 1) r_store(out, q, acc, len);
      else part[q * split + s] = acc;
    }
    __syncthreads();
  }
}
extern "C" __global__ void k_finish(i64 n_out, i64 split, i64 len, const A* __restrict__ part, OS* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  for (i64 o = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); o < n_out; o += warps) {
    A acc = r_init();
    for (i64 s = lane; s < split; s += 32) acc = r_comb(acc, part[o * split + s]);
    acc = warp_all(acc);
    if (lane == 0) r_store(out, o, acc, len);
  }
}
struct Red { i64 n_out, n_red; int orank, rrank; i64 oshape[8], ostride[8], rshape[8], rstride[8]; };
__device__ __forceinline__ i64 mg_off(i64 j, int rank, const i64* shape, const i64* stride) {
  i64 o = 0;
  for (int d = rank - 1; d >= 0; --d) { const i64 q = j / shape[d]; o += (j - q * shape[d]) * stride[d]; j = q; }
  return o;
}
extern "C" __global__ void k_gen(Red r, SRC_PARAMS, OS* __restrict__ out) {
  for (i64 o = blockIdx.x; o < r.n_out; o += gridDim.x) {
    const i64 base = mg_off(o, r.orank, r.oshape, r.ostride);
    A acc = r_init();
    for (i64 j = threadIdx.x; j < r.n_red; j += blockDim.x)
      acc = r_add(acc, R_AT(base + mg_off(j, r.rrank, r.rshape, r.rstride)), j);
    acc = block_all(acc);
    if (threadIdx.x == 0) r_store(out, o, acc, r.n_red);
  }
}
)";

struct RedSpace {  // k_gen's parameters (its struct Red)
  int64_t n_out = 0, n_red = 0;
  int32_t orank = 0, rrank = 0;
  int64_t oshape[kMaxRank] = {}, ostride[kMaxRank] = {}, rshape[kMaxRank] = {}, rstride[kMaxRank] = {};
};

// A reduction's source read as the value of an elementwise group (ElementFn) computed at each
// element instead of from memory: the group's outside inputs are the kernel's source
// parameters, in fused_group_fn's order.
struct Prologue {
  const ElementFn* fn = nullptr;
  const std::vector<TensorType>* inputs = nullptr;
  bool wide = false;  // 2^31 elements or more: the element function's index is 64-bit
};

std::string reduction_source(const Op& op, DType dt, DType odt, const Prologue& pro = {}) {
  std::string s = prelude() + "typedef " + compute_type(dt) + " C;\ntypedef " + storage_type(dt) + " IS;\ntypedef " +
                  storage_type(odt) + " OS;\n" + op.types + "typedef " + op.A + " A;\n";
  s += "__device__ __forceinline__ A r_init() { return " + op.init + "; }\n";
  s += "__device__ __forceinline__ A r_add(A acc, C x, i64 j) { return " + op.add + "; }\n";
  s += "__device__ __forceinline__ A r_comb(A a, A b) { return " + op.combine + "; }\n";
  s += "__device__ __forceinline__ void r_store(OS* p, i64 k, A m, i64 n) { p[k] = " + store_expr(odt, op.emit) + "; }\n";
  if (!pro.fn) {
    s += "__device__ __forceinline__ C r_load(const IS* p, i64 k) { return " + load_expr(dt, "p[k]") + "; }\n";
    s += "#define SRC_PARAMS const IS* __restrict__ in\n#define R_AT(k) r_load(in, (k))\n";
  } else {
    s += std::string(pro.wide ? "typedef i64 I;\n" : "typedef i32 I;\n") + pro.fn->source + "#define SRC_PARAMS ";
    for (size_t a = 0; a < pro.inputs->size(); ++a)
      s += std::string(a ? ", " : "") + "const " + storage_type((*pro.inputs)[a].dtype) + "* __restrict__ a" +
           std::to_string(a);
    s += "\n#define R_AT(k) (" + load_expr(dt, "(" + pro.fn->call("(k)", "0") + ")") + ")\n";
  }
  return s + kRedKernels;
}

// The input's dims without size-1 dims, adjacent dims of the same kind merged (row-major, so
// merged dims stay contiguous): alternating kept and reduced groups.
struct Group {
  int64_t size;
  bool reduced;
};

// A launch's arguments: `lead` scalars, then the source (one buffer, or a prologue's `nin`
// inputs), then `tail` pointers; the pointers copied into `ptrs`, which the array refers to.
struct Args {
  void* v[kMaxFusedInputs + 8];
  const void* ptrs[kMaxFusedInputs];
  int n = 0;
  Args(std::initializer_list<void*> lead, const void* const* in, size_t nin) {
    for (void* a : lead) v[n++] = a;
    for (size_t k = 0; k < nin; ++k) {
      ptrs[k] = in[k];
      v[n++] = &ptrs[k];
    }
  }
  void** add(std::initializer_list<void*> tail) {
    for (void* a : tail) v[n++] = a;
    return v;
  }
};

LaunchFn make_reduction(const KernelCtx& c, const std::vector<int64_t>& axes, const Op& op, const Prologue& pro = {}) {
  const Shape& in = c.in[0].shape;
  const DType dt = c.in[0].dtype, odt = c.out[0].dtype;
  std::vector<char> red(in.size(), 0);
  for (auto a : axes) red[size_t(a)] = 1;
  int64_t n_out = 1, n_red = 1;
  std::vector<Group> gs;
  for (size_t d = 0; d < in.size(); ++d) {
    (red[d] ? n_red : n_out) *= in[d];
    if (in[d] == 1) continue;
    if (!gs.empty() && gs.back().reduced == bool(red[d])) gs.back().size *= in[d];
    else gs.push_back({in[d], bool(red[d])});
  }
  Kernel kern;
  const std::string src = reduction_source(op, dt, odt, pro);
  const size_t nin = pro.fn ? pro.inputs->size() : 1;
  // a prologue's group is compiled uncontracted, as its own kernel is: fusing changes no bit
  // (the ops that take one add, compare or multiply per element, so the flag changes none of theirs)
  const std::vector<std::string> opts = pro.fn ? std::vector<std::string>{"--fmad=false"} : std::vector<std::string>{};
  const std::string& name = c.node.op->name;
  if (n_out == 0) return [](cudaStream_t, const void* const*, void* const*) {};
  const int64_t target = int64_t(std::max(context().sm_count, 1)) * 4;  // blocks for a few waves
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto grid = [](int64_t blocks) { return std::min<int64_t>(blocks, int64_t(1) << 20); };
  // the kept (outer, inner) around one reduced group, or a row (inner 1): k_row / k_rowb / k_col
  int64_t outer = 1, len = 1, inner = 1;
  bool simple = true;
  if (n_red == 0) {
    outer = n_out, len = 0;  // every output is the initial value's
  } else if (gs.empty()) {
  } else if (gs.size() == 1) {
    (gs[0].reduced ? len : inner) = gs[0].size;
  } else if (gs.size() == 2) {
    if (gs[1].reduced) outer = gs[0].size, len = gs[1].size;
    else len = gs[0].size, inner = gs[1].size;
  } else if (gs.size() == 3 && gs[1].reduced) {
    outer = gs[0].size, len = gs[1].size, inner = gs[2].size;
  } else {
    simple = false;
  }
  const Kernel fin = nvrtc_kernel(src, "k_finish", opts);
  // partials of a split reduction: 16-byte slots (the source asserts sizeof(A) <= 16)
  auto finish = [fin](cudaStream_t s, int64_t n, int64_t split, int64_t l, void* part, void* o) {
    void* args[] = {&n, &split, &l, &part, &o};
    launch(fin, std::min<int64_t>((n + 7) / 8, int64_t(1) << 20), 256, 0, s, args);
  };
  if (simple && inner == 1 && len <= 1024) {
    kern = nvrtc_kernel(src, "k_row", opts);
    return [kern, outer, len, grid, nin](cudaStream_t s, const void* const* in, void* const* out) {
      int64_t rows = outer, l = len;
      void* o = out[0];
      Args a({&rows, &l}, in, nin);
      launch(kern, grid((rows + 7) / 8), 256, 0, s, a.add({&o}));
    };
  }
  if (simple && inner == 1) {
    // each block reads at least 8K elements; long rows of few outputs split over blocks
    int64_t split = std::min(ceil_div(len, 8192), std::max<int64_t>(1, target / outer));
    const int64_t chunk = ceil_div(len, split);
    split = ceil_div(len, chunk);
    const size_t part = split > 1 ? c.scratch(size_t(outer * split) * 16) : 0;
    kern = nvrtc_kernel(src, "k_rowb", opts);
    return [kern, outer, len, split, chunk, part, finish, grid, nin](cudaStream_t s, const void* const* in,
                                                                    void* const* out) {
      int64_t rows = outer, l = len, sp = split, ch = chunk;
      void* o = out[0];
      void* p = sp > 1 ? out[part] : nullptr;
      Args a({&rows, &l, &sp, &ch}, in, nin);
      launch(kern, grid(rows * sp), 256, 0, s, a.add({&o, &p}));
      if (sp > 1) finish(s, rows, sp, l, p, o);
    };
  }
  if (simple) {
    // each block covers 32 kept columns and at least 128 reduced rows
    const int64_t tiles = outer * ceil_div(inner, 32);
    int64_t split = std::min(ceil_div(len, 128), std::max<int64_t>(1, target / tiles));
    const int64_t chunk = ceil_div(len, split);
    split = ceil_div(len, chunk);
    const size_t part = split > 1 ? c.scratch(size_t(n_out * split) * 16) : 0;
    kern = nvrtc_kernel(src, "k_col", opts);
    return [kern, outer, len, inner, split, chunk, tiles, n_out, part, finish, grid, nin](
               cudaStream_t s, const void* const* in, void* const* out) {
      int64_t ou = outer, l = len, inn = inner, sp = split, ch = chunk;
      void* o = out[0];
      void* p = sp > 1 ? out[part] : nullptr;
      Args a({&ou, &l, &inn, &sp, &ch}, in, nin);
      launch(kern, grid(tiles * sp), 256, 0, s, a.add({&o, &p}));
      if (sp > 1) finish(s, n_out, sp, l, p, o);
    };
  }
  RedSpace rs;
  rs.n_out = n_out;
  rs.n_red = n_red;
  const auto st = contiguous_strides(in);
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    const bool r = red[d];
    int32_t& rank = r ? rs.rrank : rs.orank;
    if (rank == kMaxRank) raise(ErrorKind::NotImplemented, name, c.node.name, "more than 8 reduced or kept dims on cuda");
    (r ? rs.rshape : rs.oshape)[rank] = in[d];
    (r ? rs.rstride : rs.ostride)[rank++] = st[d];
  }
  kern = nvrtc_kernel(src, "k_gen", opts);
  return [kern, rs, grid, nin](cudaStream_t s, const void* const* in, void* const* out) {
    RedSpace r = rs;
    void* o = out[0];
    Args a({&r}, in, nin);
    launch(kern, grid(rs.n_out), 256, 0, s, a.add({&o}));
  };
}

std::string sum_acc(DType t) { return is_floating(t) ? "float" : "u64"; }

// Welford's running (count, mean, sum of squared deviations), merged by Chan's rule.
const char* kWelford = R"(
struct Wf { float n, m, q; };
__device__ __forceinline__ Wf wf_add(Wf a, float x) {
  const float n = a.n + 1.f, d = x - a.m, m = a.m + d / n;
  return Wf{n, m, a.q + d * (x - m)};
}
__device__ __forceinline__ Wf wf_comb(Wf a, Wf b) {
  if (a.n == 0.f) return b;
  if (b.n == 0.f) return a;
  const float n = a.n + b.n, d = b.m - a.m;
  return Wf{n, a.m + d * (b.n / n), a.q + b.q + d * d * (a.n * (b.n / n))};
}
)";

// logsumexp's running (max, sum of exp(x - max)); a non-finite max is the result itself.
const char* kLse = R"(
struct Ls { float m, s; };
__device__ __forceinline__ Ls ls_comb(Ls a, Ls b) {
  const float m = mg_maxf(a.m, b.m);
  if (!(fabsf(m) < __int_as_float(0x7f800000))) return Ls{m, 0.f};
  return Ls{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ Ls ls_add(Ls a, float x) {
  if (x <= a.m && fabsf(a.m) < __int_as_float(0x7f800000)) return Ls{a.m, a.s + expf(x - a.m)};
  return ls_comb(a, Ls{x, 1.f});
}
)";

LaunchFn reduce_impl(const KernelCtx& c, const Prologue& pro) {
  const std::string& op = c.node.op->name;
  const DType dt = c.in[0].dtype;
  const auto& axes = typed_attrs<ops::ReductionAttrs>(c.node).axes;
  const bool fl = is_floating(dt), boolean = dt == DType::Bool;
  auto no_kernel = [&]() -> LaunchFn {
    raise(ErrorKind::Type, op, c.node.name, std::string("no cuda kernel for ") + dtype_name(dt));
  };
  if (op == "reduction_sum" || op == "reduction_product") {
    if (boolean) return no_kernel();
    const bool prod = op == "reduction_product";
    const std::string A = sum_acc(dt);
    const std::string x = fl ? "x" : "(u64)x";
    Op p{"", A, prod ? A + "(1)" : A + "(0)", prod ? "acc * " + x : "acc + " + x, prod ? "a * b" : "a + b", fl ? "m" : "C(m)"};
    return make_reduction(c, axes, p, pro);
  }
  if (op == "reduction_maximum" || op == "reduction_minimum") {
    const bool mx = op == "reduction_maximum";
    for (auto a : axes)
      if (c.in[0].shape[size_t(a)] == 0 && num_elements(c.out[0].shape) > 0)
        raise(ErrorKind::Value, op, c.node.name, "zero-size reduction has no identity");
    if (boolean) {
      Op p{"", "bool", mx ? "false" : "true", mx ? "acc || x" : "acc && x", mx ? "a || b" : "a && b", "m"};
      return make_reduction(c, axes, p, pro);
    }
    std::string init;
    if (fl) init = mx ? "-__int_as_float(0x7f800000)" : "__int_as_float(0x7f800000)";
    else {
      const bool sgn = is_signed_integer(dt);
      const size_t bits = dtype_size(dt) * 8;
      if (mx) init = sgn ? "C(1ull << " + std::to_string(bits - 1) + ")" : "C(0)";
      else init = sgn ? "C((1ull << " + std::to_string(bits - 1) + ") - 1)" : "C(~0ull)";
    }
    const std::string f = fl ? (mx ? "mg_maxf" : "mg_minf") : "";
    Op p{"", "C", init, fl ? f + "(acc, x)" : (mx ? "(x > acc ? x : acc)" : "(x < acc ? x : acc)"),
         fl ? f + "(a, b)" : (mx ? "(b > a ? b : a)" : "(b < a ? b : a)"), "m"};
    return make_reduction(c, axes, p, pro);
  }
  if (op == "reduction_and" || op == "reduction_or") {
    const bool a = op == "reduction_and";
    const std::string nz = fl ? "(x != 0.f)" : "(x != 0)";
    Op p{"", "bool", a ? "true" : "false", a ? "acc && " + nz : "acc || " + nz, a ? "a && b" : "a || b", "m"};
    return make_reduction(c, axes, p, pro);
  }
  if (!fl) return no_kernel();
  if (op == "mean") return make_reduction(c, axes, Op{"", "float", "0.f", "acc + x", "a + b", "m / (float)n"}, pro);
  if (op == "variance")
    return make_reduction(c, axes, Op{kWelford, "Wf", "Wf{0.f, 0.f, 0.f}", "wf_add(acc, x)", "wf_comb(a, b)", "m.q / (float)n"});
  if (op == "logsumexp")
    return make_reduction(c, axes,
                          Op{kLse, "Ls", "Ls{-__int_as_float(0x7f800000), 0.f}", "ls_add(acc, x)", "ls_comb(a, b)",
                             "(fabsf(m.m) < __int_as_float(0x7f800000) ? m.m + logf(m.s) : m.m)"});
  return no_kernel();
}

LaunchFn arg_factory(const KernelCtx& c) {
  const std::string& op = c.node.op->name;
  const DType dt = c.in[0].dtype;
  if (dt == DType::Bool) raise(ErrorKind::Type, op, c.node.name, "no cuda kernel for bool");
  const auto& at = typed_attrs<ops::ArgReductionAttrs>(c.node);
  if (c.in[0].shape[size_t(at.axis)] == 0 && num_elements(c.out[0].shape) > 0)
    raise(ErrorKind::Value, op, c.node.name, "zero-size reduction has no identity");
  const bool mx = op == "reduction_arg_maximum";
  // order-independent: the extreme value, the first NaN if any, the lowest index on ties
  const std::string types = std::string("struct AV { C v; i64 i; };\n") +
                            "__device__ __forceinline__ AV comb(AV a, AV b) {\n"
                            "  if (b.i < 0) return a; if (a.i < 0) return b;\n"
                            "  const bool an = a.v != a.v, bn = b.v != b.v;\n"
                            "  if (an || bn) { if (an && bn) return a.i < b.i ? a : b; return an ? a : b; }\n" +
                            "  if (" + (mx ? "b.v > a.v" : "b.v < a.v") + ") return b;\n" +
                            "  if (b.v == a.v && b.i < a.i) return b;\n  return a;\n}\n";
  return make_reduction(c, {at.axis}, Op{types, "AV", "AV{C(0), -1}", "comb(acc, AV{x, j})", "comb(a, b)", "(m.i < 0 ? 0 : m.i)"});
}

// sum_to_like: x summed over the dims it was broadcast along to reach its input's shape
// (output element order is the kept dims' order, as for any reduction).
LaunchFn sum_to_like_impl(const KernelCtx& c, const Prologue& pro) {
  const DType dt = c.in[0].dtype;
  if (dt == DType::Bool) raise(ErrorKind::Type, "sum_to_like", c.node.name, "bool is not summable");
  const Shape& xs = c.in[0].shape;
  const Shape& os = c.out[0].shape;
  std::vector<int64_t> axes;
  const size_t lead = xs.size() - os.size();
  for (size_t d = 0; d < xs.size(); ++d)
    if (d < lead || (os[d - lead] == 1 && xs[d] != 1)) axes.push_back(int64_t(d));
  const bool fl = is_floating(dt);
  const std::string A = sum_acc(dt);
  const Op sum{"", A, A + "(0)", fl ? "acc + x" : "acc + (u64)x", "a + b", fl ? "m" : "C(m)"};
  return make_reduction(c, axes, sum, pro);
}

LaunchFn reduce_factory(const KernelCtx& c) { return reduce_impl(c, {}); }
LaunchFn sum_to_like_factory(const KernelCtx& c) { return sum_to_like_impl(c, {}); }

}  // namespace

// Ops whose per-element step is one add, compare or multiply: compiled uncontracted for the
// prologue, their own arithmetic gives the same bits (variance's and logsumexp's would not).
// MPSGRAPH_CUDA_REDUCTION_PROLOGUES=0: none (the group runs as its own kernel).
bool reduction_takes_prologue(const Node& n) {
  static const char* ops[] = {"reduction_sum", "reduction_product", "reduction_maximum", "reduction_minimum",
                              "reduction_and", "reduction_or",      "mean",              "sum_to_like"};
  if (switched_off("MPSGRAPH_CUDA_REDUCTION_PROLOGUES")) return false;
  return std::any_of(std::begin(ops), std::end(ops), [&](const char* o) { return n.op->name == o; });
}

LaunchFn reduction_with_prologue(const KernelCtx& c, const TensorType& input, const Graph& g,
                                 const std::vector<int32_t>& group) {
  std::vector<ValueRef> order;
  const ElementFn fn = fused_group_fn(g, group, order);
  if (fn.out != input.dtype || c.in.size() > size_t(kMaxFusedInputs))
    raise(ErrorKind::Runtime, c.node.op->name, c.node.name, "bad reduction prologue");
  std::vector<TensorType> rin{input};
  if (c.node.inputs.size() > 1) rin.push_back(g.type(c.node.inputs[1]));  // sum_to_like's shape operand
  const KernelCtx rc{c.node, rin, c.out};
  const Prologue pro{&fn, &c.in, num_elements(input.shape) >= (int64_t(1) << 31)};
  LaunchFn f = c.node.op->name == "sum_to_like" ? sum_to_like_impl(rc, pro) : reduce_impl(rc, pro);
  for (size_t b : rc.scratch_bytes) c.scratch(b);  // numbered as the step's own
  return f;
}

void register_reduction_kernels() {
  register_kernel("sum_to_like", sum_to_like_factory);
  for (const char* op : {"reduction_sum", "reduction_product", "reduction_maximum", "reduction_minimum", "reduction_and",
                         "reduction_or", "mean", "variance", "logsumexp"})
    register_kernel(op, reduce_factory);
  register_kernel("reduction_arg_maximum", arg_factory);
  register_kernel("reduction_arg_minimum", arg_factory);
}

}  // namespace mg::cuda
