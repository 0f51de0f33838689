// CUDA resize and resize_gradient with the CPU kernels' semantics (backends/cpu/kernels_resize.cpp):
// the tensor is viewed as (outer, H, W, inner); per output row and column the source indices and
// the bilinear weight come from ops::resize_axis on the host and are uploaded once. resize: one
// thread per result element, the CPU's expression in float without contraction (bit for bit).
// resize_gradient: one thread per (outer, inner) line, adding the gradient into its line in the
// CPU's order, rounding to the storage type after each addition as the CPU does (deterministic,
// no atomics; lines never overlap).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/resize_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

struct ResizeGeom {
  int64_t outer = 1, H = 0, W = 0, inner = 1, OH = 0, OW = 0;
  int32_t bilinear = 1;
};

// The tables: y.i0, y.i1, x.i0, x.i1 (int64), then y.w1, x.w1 (double), each OH or OW long.
struct Tables {
  std::shared_ptr<Buffer> buf;
  int64_t yi0 = 0, yi1 = 0, xi0 = 0, xi1 = 0, yw = 0, xw = 0;  // byte offsets
};

const char* kResizeSrc = R"(
struct RG { i64 outer, H, W, inner, OH, OW; int bilinear; };
__device__ __forceinline__ float lerp2(float h0, float h1, float w0, float w1, float a, float b, float c, float d) {
  // h0 * (w0 * a + w1 * b) + h1 * (w0 * c + w1 * d), rounded step by step as on the CPU
  const float top = __fadd_rn(__fmul_rn(w0, a), __fmul_rn(w1, b)), bot = __fadd_rn(__fmul_rn(w0, c), __fmul_rn(w1, d));
  return __fadd_rn(__fmul_rn(h0, top), __fmul_rn(h1, bot));
}
extern "C" __global__ void fwd(RG g, const S* __restrict__ x, S* __restrict__ y, const i64* __restrict__ yi0,
                               const i64* __restrict__ yi1, const i64* __restrict__ xi0, const i64* __restrict__ xi1,
                               const double* __restrict__ yw, const double* __restrict__ xw) {
  const i64 n = g.outer * g.OH * g.OW * g.inner;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    const i64 k = i % g.inner, ow = (i / g.inner) % g.OW, oh = (i / (g.inner * g.OW)) % g.OH, o = i / (g.inner * g.OW * g.OH);
    const S* xo = x + o * g.H * g.W * g.inner + k;
    if (!g.bilinear) { y[i] = xo[(yi0[oh] * g.W + xi0[ow]) * g.inner]; continue; }
    const S* r0 = xo + yi0[oh] * g.W * g.inner;
    const S* r1 = xo + yi1[oh] * g.W * g.inner;
    const i64 c0 = xi0[ow] * g.inner, c1 = xi1[ow] * g.inner;
    const float h1 = (float)yw[oh], h0 = __fsub_rn(1.f, h1), w1 = (float)xw[ow], w0 = __fsub_rn(1.f, w1);
    y[i] = ST(lerp2(h0, h1, w0, w1, LD(r0[c0]), LD(r0[c1]), LD(r1[c0]), LD(r1[c1])));
  }
}
__device__ __forceinline__ void add(S* t, float v) { *t = ST(__fadd_rn(LD(*t), v)); }
extern "C" __global__ void bwd(RG g, const S* __restrict__ dy, S* __restrict__ dx, const i64* __restrict__ yi0,
                               const i64* __restrict__ yi1, const i64* __restrict__ xi0, const i64* __restrict__ xi1,
                               const double* __restrict__ yw, const double* __restrict__ xw) {
  const i64 lines = g.outer * g.inner;
  for (i64 l = (i64)blockIdx.x * blockDim.x + threadIdx.x; l < lines; l += (i64)gridDim.x * blockDim.x) {
    const i64 o = l / g.inner, k = l % g.inner;
    S* xo = dx + o * g.H * g.W * g.inner + k;
    const S* gs = dy + o * g.OH * g.OW * g.inner + k;
    for (i64 p = 0; p < g.H * g.W; ++p) xo[p * g.inner] = ST(0.f);
    for (i64 oh = 0; oh < g.OH; ++oh) {
      const float h1 = (float)yw[oh], h0 = __fsub_rn(1.f, h1);
      S* r0 = xo + yi0[oh] * g.W * g.inner;
      S* r1 = xo + yi1[oh] * g.W * g.inner;
      for (i64 ow = 0; ow < g.OW; ++ow) {
        const float v = LD(gs[(oh * g.OW + ow) * g.inner]);
        const i64 c0 = xi0[ow] * g.inner, c1 = xi1[ow] * g.inner;
        if (!g.bilinear) { add(r0 + c0, v); continue; }
        const float w1 = (float)xw[ow], w0 = __fsub_rn(1.f, w1);
        add(r0 + c0, __fmul_rn(__fmul_rn(h0, w0), v));
        add(r0 + c1, __fmul_rn(__fmul_rn(h0, w1), v));
        add(r1 + c0, __fmul_rn(__fmul_rn(h1, w0), v));
        add(r1 + c1, __fmul_rn(__fmul_rn(h1, w1), v));
      }
    }
  }
}
)";

Tables upload(ops::ResizeAxis& y, ops::ResizeAxis& x, const ResizeGeom& g) {
  for (ops::ResizeAxis* ax : {&y, &x}) {  // nearest leaves i1 / w1 empty
    const size_t n = size_t(ax == &y ? g.OH : g.OW);
    ax->i0.resize(n, 0);
    ax->i1.resize(n, 0);
    ax->w1.resize(n, 0.0);
  }
  std::vector<unsigned char> bytes;
  Tables t;
  auto put = [&](const void* p, size_t n) {
    const int64_t at = int64_t(bytes.size());
    bytes.insert(bytes.end(), static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + n);
    return at;
  };
  t.yi0 = put(y.i0.data(), y.i0.size() * 8);
  t.yi1 = put(y.i1.data(), y.i1.size() * 8);
  t.xi0 = put(x.i0.data(), x.i0.size() * 8);
  t.xi1 = put(x.i1.data(), x.i1.size() * 8);
  t.yw = put(y.w1.data(), y.w1.size() * 8);
  t.xw = put(x.w1.data(), x.w1.size() * 8);
  t.buf = device_alloc(std::max<size_t>(1, bytes.size()));
  copy_sync(t.buf->data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, "uploading resize tables");
  return t;
}

LaunchFn resize_factory(const KernelCtx& c, bool gradient) {
  const DType dt = c.in[0].dtype;
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16)
    raise(ErrorKind::Type, "resize", c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(dt));
  const ops::ResizeAttrs& a = typed_attrs<ops::ResizeAttrs>(c.node);
  // resize_gradient(dy, source): the plan maps source to dy
  ops::ResizeView v = gradient ? ops::resize_plan(a, c.in[1].shape, c.in[0].shape, c.node.name)
                               : ops::resize_plan(a, c.in[0].shape, c.out[0].shape, c.node.name);
  ResizeGeom g;
  g.outer = v.outer;
  g.H = v.H;
  g.W = v.W;
  g.inner = v.inner;
  g.OH = v.OH;
  g.OW = v.OW;
  g.bilinear = a.bilinear;
  const Tables t = upload(v.y, v.x, g);
  const std::string src = prelude() + "typedef " + storage_type(dt) + " S;\n#define LD(e) " + load_expr(dt, "(e)") + "\n#define ST(e) " +
                          store_expr(dt, "(e)") + "\n" + kResizeSrc;
  const Kernel kern = nvrtc_kernel(src, gradient ? "bwd" : "fwd");
  const bool empty_src = g.H == 0 || g.W == 0;
  const int64_t n = gradient ? (empty_src ? 0 : g.outer * g.inner) : (empty_src ? 0 : g.outer * g.OH * g.OW * g.inner);
  const int64_t n_dx = g.outer * g.H * g.W * g.inner;
  const int32_t es = int32_t(dtype_size(dt));
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    if (gradient && (g.OH == 0 || g.OW == 0)) {  // nothing flows back
      if (n_dx) fill_bytes(out[0], n_dx, es, 0, s);
      return;
    }
    if (n == 0) return;
    ResizeGeom geom = g;
    char* base = static_cast<char*>(t.buf->data);
    const void *a = in[0], *p0 = base + t.yi0, *p1 = base + t.yi1, *p2 = base + t.xi0, *p3 = base + t.xi1, *p4 = base + t.yw,
               *p5 = base + t.xw;
    void* b = out[0];
    void* args[] = {&geom, &a, &b, &p0, &p1, &p2, &p3, &p4, &p5};
    launch(kern, std::min<int64_t>((n + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
  };
}

}  // namespace

void register_resize_kernels() {
  register_kernel("resize", [](const KernelCtx& c) { return resize_factory(c, false); });
  register_kernel("resize_gradient", [](const KernelCtx& c) { return resize_factory(c, true); });
}

}  // namespace mg::cuda
