// CUDA matrix_inverse and solve: a generated Gaussian elimination with partial pivoting, one
// block per matrix (the CPU runs LAPACK's getrf/getrs). Each block copies its matrix and
// right-hand side (the identity for the inverse) to scratch in float, eliminates column by
// column (pivot: the first largest magnitude; the threads update the trailing rows in parallel),
// then back-substitutes. As on the CPU, an exactly zero pivot (a singular matrix) gives NaN for
// that whole result; broadcast batches of solve through offset tables. float16/bfloat16 compute
// in float; the matrices live in global scratch, so n has no fixed limit.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/batch_offsets.h"
#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/registry.h"

namespace mg::cuda {

namespace {

struct LinGeom {
  int64_t n = 0, k = 0;
  int32_t identity = 0;  // matrix_inverse: the right-hand side is the identity
};

const char* kSolveSrc = R"(
struct LG { i64 n, k; int identity; };
extern "C" __global__ void k(LG g, const S* __restrict__ a, const S* __restrict__ bm, const i64* __restrict__ aoff,
                             const i64* __restrict__ boff, S* __restrict__ x, float* __restrict__ scratch) {
  const i64 n = g.n, k = g.k, bi = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
  float* lu = scratch + bi * (n * n + n * k);
  float* r = lu + n * n;  // row-major n x k
  __shared__ i64 piv;
  __shared__ int singular;
  const S* ab = a + aoff[bi];
  for (i64 i = tid; i < n * n; i += nt) lu[i] = LD(ab[i]);
  for (i64 i = tid; i < n * k; i += nt) r[i] = g.identity ? (i / k == i % k ? 1.f : 0.f) : LD(bm[boff[bi] + i]);
  if (tid == 0) singular = 0;
  __syncthreads();
  for (i64 j = 0; j < n; ++j) {
    if (tid == 0) {
      i64 p = j;
      float best = fabsf(lu[j * n + j]);
      for (i64 i = j + 1; i < n; ++i) {
        const float v = fabsf(lu[i * n + j]);
        if (v > best) { best = v; p = i; }
      }
      piv = p;
      if (best == 0.f) singular = 1;
    }
    __syncthreads();
    if (singular) break;
    const i64 p = piv;
    if (p != j) {
      for (i64 c = j + tid; c < n; c += nt) { const float t = lu[j * n + c]; lu[j * n + c] = lu[p * n + c]; lu[p * n + c] = t; }
      for (i64 c = tid; c < k; c += nt) { const float t = r[j * k + c]; r[j * k + c] = r[p * k + c]; r[p * k + c] = t; }
      __syncthreads();
    }
    const i64 rows = n - j - 1, w = (n - j - 1) + k;  // trailing columns of lu, then r
    const float d = lu[j * n + j];
    for (i64 e = tid; e < rows * w; e += nt) {
      const i64 i = j + 1 + e / w, c = e % w;
      const float f = lu[i * n + j] / d;
      if (c < n - j - 1) lu[i * n + j + 1 + c] -= f * lu[j * n + j + 1 + c];
      else r[i * k + (c - (n - j - 1))] -= f * r[j * k + (c - (n - j - 1))];
    }
    __syncthreads();
  }
  S* xb = x + bi * n * k;
  if (singular) {
    for (i64 i = tid; i < n * k; i += nt) xb[i] = ST(__int_as_float(0x7fc00000));
    return;
  }
  for (i64 i = n - 1; i >= 0; --i) {
    for (i64 c = tid; c < k; c += nt) r[i * k + c] /= lu[i * n + i];
    __syncthreads();
    for (i64 e = tid; e < i * k; e += nt) {
      const i64 t = e / k, c = e % k;
      r[t * k + c] -= lu[t * n + i] * r[i * k + c];
    }
    __syncthreads();
  }
  for (i64 i = tid; i < n * k; i += nt) xb[i] = ST(r[i]);
}
)";

std::shared_ptr<Buffer> upload(const std::vector<int64_t>& v) {
  std::shared_ptr<Buffer> b = device_alloc(std::max<size_t>(1, v.size()) * sizeof(int64_t));
  copy_sync(b->data, v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice, "uploading a table");
  return b;
}

LaunchFn solve_factory(const KernelCtx& c, bool inverse) {
  const DType dt = c.in[0].dtype;
  const std::string& op = c.node.op->name;
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16)
    raise(ErrorKind::Type, op, c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(dt));
  const Shape& as = c.in[0].shape;
  const Shape& os = c.out[0].shape;
  LinGeom g;
  g.n = as.back();
  g.identity = inverse;
  std::vector<int64_t> ao, bo;
  const Shape abatch(as.begin(), as.end() - 2);
  if (inverse) {
    g.k = g.n;
    ao = cpu::batch_offsets(abatch, abatch, g.n * g.n);
  } else {
    const Shape& bs = c.in[1].shape;
    const bool vec = bs.size() == 1;
    g.k = vec ? 1 : bs.back();
    const Shape ob(os.begin(), os.end() - (vec ? 1 : 2));
    ao = cpu::batch_offsets(abatch, ob, g.n * g.n);
    bo = cpu::batch_offsets(vec ? Shape{} : Shape(bs.begin(), bs.end() - 2), ob, g.n * g.k);
  }
  const int64_t count = int64_t(ao.size());
  const size_t slot = c.scratch(std::max<size_t>(1, size_t(count * (g.n * g.n + g.n * g.k)) * sizeof(float)));
  const std::shared_ptr<Buffer> at = upload(ao), bt = upload(bo);
  const std::string src = prelude() + "typedef " + storage_type(dt) + " S;\n#define LD(e) " + load_expr(dt, "(e)") + "\n#define ST(e) " +
                          store_expr(dt, "(e)") + "\n" + kSolveSrc;
  const Kernel kern = nvrtc_kernel(src, "k");
  const int64_t work = count * g.n * g.k;
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    if (work == 0) return;
    LinGeom geom = g;
    const void *a = in[0], *b = inverse ? in[0] : in[1], *pa = at->data, *pb = bt->data;
    void *x = out[0], *scr = out[slot];
    void* args[] = {&geom, &a, &b, &pa, &pb, &x, &scr};
    launch(kern, count, 256, 0, s, args);
  };
}

}  // namespace

void register_linalg_kernels() {
  register_kernel("matrix_inverse", [](const KernelCtx& c) { return solve_factory(c, true); });
  register_kernel("solve", [](const KernelCtx& c) { return solve_factory(c, false); });
}

}  // namespace mg::cuda
