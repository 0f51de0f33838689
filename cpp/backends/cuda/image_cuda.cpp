// CUDA kernels of the image family with the CPU kernels' semantics (backends/cpu/kernels_image.cpp):
// * hamming_distance: one thread per result element, popcount of the XOR in the input's unsigned
//   width; broadcast batches through offset tables uploaded at compile time.
// * stencil: one thread per result element, taps in row-major order, computed in double (as on
//   the CPU), the same boundary reads (sign flips for anti_periodic), NaN sticking in min/max.
// * non_maximum_suppression: one block per batch item. Threads score the boxes (the best class,
//   the first on ties, NaN scores drop the box), the candidates above the threshold are ordered
//   by a stable rank (score descending, then index), then the greedy pass runs in that order with
//   the threads suppressing the later candidates of each kept box in parallel. Boxes and IoU in
//   double; the result is the kept indices, then -1.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/batch_offsets.h"
#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/image_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

void check_float(const KernelCtx& c, DType dt) {
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16)
    raise(ErrorKind::Type, c.node.op->name, c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(dt));
}

std::string header(DType dt) {
  return prelude() + "typedef " + storage_type(dt) + " S;\n#define LD(e) ((double)" + load_expr(dt, "(e)") + ")\n";
}

std::shared_ptr<Buffer> upload(const std::vector<int64_t>& v) {
  std::shared_ptr<Buffer> b = device_alloc(std::max<size_t>(1, v.size()) * sizeof(int64_t));
  copy_sync(b->data, v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice, "uploading a table");
  return b;
}

int64_t blocks_for(int64_t n) { return std::min<int64_t>((n + 255) / 256, int64_t(1) << 20); }

// ---- hamming_distance ----

struct HamGeom {
  int64_t total = 0, m = 0, n = 0, k = 0;
};

std::string hamming_src(DType in, DType out) {
  std::string u = storage_type(in);
  if (u[0] == 'i') u[0] = 'u';
  return prelude() + "typedef " + storage_type(in) + " S; typedef " + u + " U; typedef " + storage_type(out) + " R;\n" + R"(
struct HG { i64 total, m, n, k; };
extern "C" __global__ void k(HG g, const S* __restrict__ x, const S* __restrict__ y, const i64* __restrict__ xo,
                             const i64* __restrict__ yo, R* __restrict__ o) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.total; i += (i64)gridDim.x * blockDim.x) {
    const i64 j = i % g.n, r = i / g.n, b = r / g.m, row = r % g.m;
    const S* xr = x + xo[b] + row * g.k;
    const S* yr = y + yo[b] + j * g.k;
    u64 bits = 0;
    for (i64 t = 0; t < g.k; ++t) bits += (u64)__popcll((u64)(U)((U)xr[t] ^ (U)yr[t]));
    o[i] = (R)bits;
  }
}
)";
}

LaunchFn hamming(const KernelCtx& c) {
  const Shape &xs = c.in[0].shape, &ys = c.in[1].shape, &os = c.out[0].shape;
  const DType dt = c.in[0].dtype;
  if (!is_integer(dt))
    raise(ErrorKind::Type, "hamming_distance", c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(dt));
  HamGeom g;
  g.m = xs[xs.size() - 2];
  g.n = ys[ys.size() - 2];
  g.k = xs.back();
  g.total = num_elements(os);
  const Shape ob(os.begin(), os.end() - 2);
  std::shared_ptr<Buffer> xo = upload(cpu::batch_offsets(Shape(xs.begin(), xs.end() - 2), ob, g.m * g.k));
  std::shared_ptr<Buffer> yo = upload(cpu::batch_offsets(Shape(ys.begin(), ys.end() - 2), ob, g.n * g.k));
  Kernel kern = nvrtc_kernel(hamming_src(dt, c.out[0].dtype), "k");
  return [kern, g, xo, yo](cudaStream_t s, const void* const* in, void* const* out) {
    if (g.total == 0) return;
    HamGeom geom = g;
    const void *x = in[0], *y = in[1], *px = xo->data, *py = yo->data;
    void* o = out[0];
    void* args[] = {&geom, &x, &y, &px, &py, &o};
    launch(kern, blocks_for(g.total), 256, 0, s, args);
  };
}

// ---- stencil ----

struct StencilGeom {
  int64_t total = 0, out_items = 0, in_items = 0, taps = 0;
  int64_t n[4] = {}, k[4] = {}, o[4] = {}, in_stride[4] = {}, start[4] = {}, stride[4] = {}, dil[4] = {};
  double fill = 0;
  int32_t reduction = 0, boundary = 0;
};

const char* kStencilSrc = R"(
struct SG { i64 total, out_items, in_items, taps; i64 n[4], k[4], o[4], in_stride[4], start[4], stride[4], dil[4];
            double fill; int reduction, boundary; };
__device__ __forceinline__ i64 floor_mod(i64 a, i64 m) { return ((a % m) + m) % m; }
// StencilBoundary: Constant, Zero, ClampToEdge, Reflect, Symmetric, Periodic, AntiPeriodic; -1: the constant
__device__ __forceinline__ i64 boundary_read(i64 p, i64 n, int b, double& sign) {
  if (p >= 0 && p < n) return p;
  switch (b) {
    case 2: return p < 0 ? 0 : n - 1;
    case 3: { if (n == 1) return 0; const i64 q = floor_mod(p, 2 * (n - 1)); return q < n ? q : 2 * (n - 1) - q; }
    case 4: { const i64 q = floor_mod(p, 2 * n); return q < n ? q : 2 * n - 1 - q; }
    case 5: return floor_mod(p, n);
    case 6: { const i64 q = floor_mod(p, n); if (((p - q) / n) % 2 != 0) sign = -sign; return q; }
    default: return -1;
  }
}
extern "C" __global__ void k(SG g, const S* __restrict__ x, const S* __restrict__ w, S* __restrict__ y) {
  const double inf = __longlong_as_double(0x7ff0000000000000ll);
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < g.total; e += (i64)gridDim.x * blockDim.x) {
    const S* xb = x + (e / g.out_items) * g.in_items;
    i64 rem = e % g.out_items, pos[4];
    for (int d = 3; d >= 0; --d) { pos[d] = rem % g.o[d]; rem /= g.o[d]; }
    double acc = g.reduction == 1 ? 1.0 : g.reduction == 2 ? inf : g.reduction == 3 ? -inf : 0.0;
    for (i64 t = 0; t < g.taps; ++t) {
      i64 tr = t, at = 0;
      double sign = 1.0;
      bool outside = false;
      for (int d = 3; d >= 0; --d) {
        const i64 kd = tr % g.k[d];
        tr /= g.k[d];
        const i64 p = boundary_read(pos[d] * g.stride[d] + kd * g.dil[d] + g.start[d], g.n[d], g.boundary, sign);
        outside = outside || p < 0;
        at += p * g.in_stride[d];
      }
      const double v = __dmul_rn(outside ? g.fill : sign * LD(xb[at]), LD(w[t]));  // no contraction: the CPU's rounding
      switch (g.reduction) {
        case 0: acc = __dadd_rn(acc, v); break;
        case 1: acc = __dmul_rn(acc, v); break;
        case 2: acc = (v < acc || v != v) ? v : acc; break;
        case 3: acc = (v > acc || v != v) ? v : acc; break;
      }
      if (acc != acc && (g.reduction == 2 || g.reduction == 3)) break;
    }
    y[e] = ST((CT)acc);
  }
}
)";

LaunchFn stencil(const KernelCtx& c) {
  const DType dt = c.in[0].dtype;
  check_float(c, dt);
  const ops::StencilAttrs a = typed_attrs<ops::StencilAttrs>(c.node);
  const Shape &xs = c.in[0].shape, &ws = c.in[1].shape, &os = c.out[0].shape;
  const size_t r = xs.size();
  StencilGeom g;
  int64_t batch = 1;
  for (size_t d = 0; d + 4 < r; ++d) batch *= xs[d];
  for (size_t d = 0; d < 4; ++d) {
    g.n[d] = xs[r - 4 + d];
    g.k[d] = ws[d];
    g.o[d] = os[r - 4 + d];
    g.start[d] = a.offsets[d] - a.padding[2 * d];
    g.stride[d] = a.strides[d];
    g.dil[d] = a.dilation_rates[d];
  }
  g.in_stride[3] = 1;
  for (size_t d = 3; d-- > 0;) g.in_stride[d] = g.in_stride[d + 1] * g.n[d + 1];
  g.in_items = g.n[0] * g.in_stride[0];
  g.out_items = g.o[0] * g.o[1] * g.o[2] * g.o[3];
  g.taps = g.k[0] * g.k[1] * g.k[2] * g.k[3];
  g.total = batch * g.out_items;
  g.fill = a.boundary == ops::StencilBoundary::Constant ? a.padding_constant : 0.0;
  g.reduction = int32_t(a.reduction);
  g.boundary = int32_t(a.boundary);
  const std::string src = header(dt) + "typedef " + compute_type(dt) + " CT;\n#define ST(e) " + store_expr(dt, "(e)") + "\n" + kStencilSrc;
  Kernel kern = nvrtc_kernel(src, "k");
  return [kern, g](cudaStream_t s, const void* const* in, void* const* out) {
    if (g.total == 0) return;
    StencilGeom geom = g;
    const void *x = in[0], *w = in[1];
    void* y = out[0];
    void* args[] = {&geom, &x, &w, &y};
    launch(kern, blocks_for(g.total), 256, 0, s, args);
  };
}

// ---- non_maximum_suppression ----

struct NmsGeom {
  int64_t nb = 0, nk = 0;
  double iou_threshold = 0, score_threshold = 0;
  int32_t per_class = 0, mode = 0;
};

const char* kNmsSrc = R"(
struct NG { i64 nb, nk; double iou_threshold, score_threshold; int per_class, mode; };
struct Box { double y0, x0, y1, x1; };
// std::min / std::max (the first argument on NaN) and uncontracted arithmetic, as on the CPU
__device__ __forceinline__ double mn(double a, double b) { return b < a ? b : a; }
__device__ __forceinline__ double mx(double a, double b) { return a < b ? b : a; }
__device__ __forceinline__ double area(const Box& b) { return __dmul_rn(b.y1 - b.y0, b.x1 - b.x0); }
__device__ __forceinline__ Box box_of(double a, double b, double c, double d, int mode) {
  if (mode == 1 || mode == 3) { double t = a; a = b; b = t; t = c; c = d; d = t; }  // width first
  Box r;
  if (mode >= 2) { r.y0 = a - c / 2; r.x0 = b - d / 2; r.y1 = a + c / 2; r.x1 = b + d / 2; return r; }
  r.y0 = mn(a, c); r.x0 = mn(b, d); r.y1 = mx(a, c); r.x1 = mx(b, d);
  return r;
}
__device__ __forceinline__ double iou(const Box& p, const Box& q) {
  const double h = mn(p.y1, q.y1) - mx(p.y0, q.y0), w = mn(p.x1, q.x1) - mx(p.x0, q.x0);
  if (!(h > 0 && w > 0)) return 0.0;
  const double inter = __dmul_rn(h, w), uni = __dsub_rn(__dadd_rn(area(p), area(q)), inter);
  return uni > 0 ? inter / uni : 0.0;
}
// scratch per batch item: boxes, scores, classes, the candidate order, candidate/dead flags
extern "C" __global__ void k(NG g, const S* __restrict__ boxes, const S* __restrict__ scores, i32* __restrict__ o,
                             unsigned char* __restrict__ scratch, i64 slot) {
  const i64 b = blockIdx.x, nb = g.nb;
  unsigned char* base = scratch + b * slot;
  Box* bx = (Box*)base;
  double* sc = (double*)(bx + nb);
  i64* cls = (i64*)(sc + nb);
  i64* order = cls + nb;
  unsigned char* cand = (unsigned char*)(order + nb);
  unsigned char* dead = cand + nb;
  __shared__ i64 m;
  if (threadIdx.x == 0) m = 0;
  __syncthreads();
  for (i64 i = threadIdx.x; i < nb; i += blockDim.x) {
    const S* sv = scores + (b * nb + i) * g.nk;
    double best = -__longlong_as_double(0x7ff0000000000000ll);
    i64 arg = 0;
    bool nan = g.nk == 0;
    for (i64 k = 0; k < g.nk; ++k) {
      const double v = LD(sv[k]);
      nan = nan || v != v;
      if (v > best) { best = v; arg = k; }
    }
    const S* bv = boxes + (b * nb + i) * 4;
    bx[i] = box_of(LD(bv[0]), LD(bv[1]), LD(bv[2]), LD(bv[3]), g.mode);
    sc[i] = best;
    cls[i] = arg;
    dead[i] = 0;
    cand[i] = !nan && best > g.score_threshold;
    if (cand[i]) atomicAdd((unsigned long long*)&m, 1ull);
  }
  __syncthreads();
  // stable order: score descending, then index
  for (i64 i = threadIdx.x; i < nb; i += blockDim.x) {
    if (!cand[i]) continue;
    i64 rank = 0;
    for (i64 j = 0; j < nb; ++j) rank += cand[j] && (sc[j] > sc[i] || (sc[j] == sc[i] && j < i));
    order[rank] = i;
  }
  __syncthreads();
  i32* ob = o + b * nb;
  i64 kept = 0;
  for (i64 r = 0; r < m; ++r) {
    const i64 i = order[r];
    if (dead[i]) continue;  // the same for every thread: dead[i] was settled before the last barrier
    if (threadIdx.x == 0) ob[kept] = (i32)i;
    ++kept;
    for (i64 t = r + 1 + threadIdx.x; t < m; t += blockDim.x) {
      const i64 j = order[t];
      if (!dead[j] && (!g.per_class || cls[j] == cls[i]) && iou(bx[i], bx[j]) > g.iou_threshold) dead[j] = 1;
    }
    __syncthreads();
  }
  for (i64 r = kept + threadIdx.x; r < nb; r += blockDim.x) ob[r] = -1;
}
)";

LaunchFn nms(const KernelCtx& c) {
  const DType dt = c.in[0].dtype;
  check_float(c, dt);
  const ops::NmsAttrs a = typed_attrs<ops::NmsAttrs>(c.node);
  const Shape& ss = c.in[1].shape;
  const int64_t n = ss[0];
  NmsGeom g;
  g.nb = ss[1];
  g.nk = ss[2];
  g.iou_threshold = a.iou_threshold;
  g.score_threshold = a.score_threshold;
  g.per_class = a.per_class;
  g.mode = a.coordinate_mode;
  const int64_t slot = (g.nb * (4 * 8 + 8 + 8 + 8 + 2) + 63) / 64 * 64;
  const size_t scratch = c.scratch(size_t(std::max<int64_t>(1, slot * n)));
  Kernel kern = nvrtc_kernel(header(dt) + kNmsSrc, "k");
  return [kern, g, n, slot, scratch](cudaStream_t s, const void* const* in, void* const* out) {
    if (n == 0 || g.nb == 0) return;
    NmsGeom geom = g;
    int64_t sl = slot;
    const void *bx = in[0], *sc = in[1];
    void *o = out[0], *scr = out[scratch];
    void* args[] = {&geom, &bx, &sc, &o, &scr, &sl};
    launch(kern, n, 256, 0, s, args);
  };
}

}  // namespace

void register_image_kernels() {
  register_kernel("hamming_distance", hamming);
  register_kernel("stencil", stencil);
  register_kernel("non_maximum_suppression", nms);
}

}  // namespace mg::cuda
