// CUDA tile_gradient, pad_gradient and the space/depth moves, with the CPU kernels' semantics
// (backends/cpu/kernels_shape.cpp). space_to_depth_2d / depth_to_space_2d are one strided copy
// over the six dims of ops::space_depth_view. The sums run in float for float dtypes (float16 and
// bfloat16 included) and in wrapping 64-bit integers for integer dtypes, in the CPU's order:
// tile_gradient adds the repeats in row-major order of the multiples (one thread per result
// element); pad_gradient copies dy to scratch, then folds each dim's borders into the interior
// elements they were copied from, dim by dim (one launch per dim; each interior element adds
// its borders in border order), and reads the interior.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/shape_attrs.h"
#include "core/ops/shape_ops.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

using Ints = std::vector<int64_t>;

void check_dtype(const KernelCtx& c, DType dt) {
  if (dt == DType::Bool || dt == DType::Float64)
    raise(ErrorKind::Type, c.node.op->name, c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(dt));
}
void check_rank(const KernelCtx& c, size_t r) {
  if (r > size_t(kMaxRank)) raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "tensors of rank above 8 are not supported on cuda");
}
bool is_float(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

// S (storage), A (accumulator), LD (storage to accumulator), ST (accumulator to storage).
std::string header(DType dt) {
  const std::string a = is_float(dt) ? "float" : "u64";
  return prelude() + "typedef " + storage_type(dt) + " S;\ntypedef " + a + " A;\n#define LD(e) ((A)" + load_expr(dt, "(e)") +
         ")\n#define ST(e) " + store_expr(dt, "(e)") + "\n";
}

void run(const Kernel& k, int64_t n, cudaStream_t s, void** args) {
  if (n > 0) launch(k, std::min<int64_t>((n + 255) / 256, int64_t(1) << 20), 256, 0, s, args);
}

// ---- tile_gradient ----

struct TileGeom {
  int64_t n = 0, reps = 1;
  int32_t r = 0;
  int64_t like[kMaxRank] = {}, mult[kMaxRank] = {}, mstride[kMaxRank] = {}, dstride[kMaxRank] = {};
};

const char* kTileSrc = R"(
struct TG { i64 n, reps; int r; i64 like[8], mult[8], mstride[8], dstride[8]; };
extern "C" __global__ void k(TG g, const S* __restrict__ dy, S* __restrict__ y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += (i64)gridDim.x * blockDim.x) {
    i64 base = 0, rem = i;
    for (int d = g.r - 1; d >= 0; --d) { base += (rem % g.like[d]) * g.dstride[d]; rem /= g.like[d]; }
    i64 midx[8], moff = 0;
    for (int d = 0; d < g.r; ++d) midx[d] = 0;
    A acc = 0;
    for (i64 t = 0; t < g.reps; ++t) {
      acc += LD(dy[base + moff]);
      for (int d = g.r - 1; d >= 0; --d) {  // odometer over the multiples
        moff += g.mstride[d];
        if (++midx[d] < g.mult[d]) break;
        moff -= g.mstride[d] * g.mult[d]; midx[d] = 0;
      }
    }
    y[i] = ST(acc);
  }
}
)";

LaunchFn tile_gradient(const KernelCtx& c) {
  const DType dt = c.out[0].dtype;
  check_dtype(c, dt);
  const Shape& like = c.out[0].shape;
  const Ints& m = typed_attrs<ops::TileAttrs>(c.node).multiples;
  check_rank(c, like.size());
  // dy viewed as (m0, d0, m1, d1, ...)
  Shape inter;
  for (size_t i = 0; i < like.size(); ++i) {
    inter.push_back(m[i]);
    inter.push_back(like[i]);
  }
  const Ints ist = contiguous_strides(inter);
  TileGeom g;
  g.n = num_elements(like);
  g.r = int32_t(like.size());
  for (size_t i = 0; i < like.size(); ++i) {
    g.like[i] = like[i];
    g.mult[i] = m[i];
    g.mstride[i] = ist[2 * i];
    g.dstride[i] = ist[2 * i + 1];
    g.reps *= m[i];
  }
  Kernel kern = nvrtc_kernel(header(dt) + kTileSrc, "k");
  return [kern, g](cudaStream_t s, const void* const* in, void* const* out) {
    TileGeom geom = g;
    const void* x = in[0];
    void* y = out[0];
    void* args[] = {&geom, &x, &y};
    run(kern, geom.n, s, args);
  };
}

// ---- pad_gradient ----

// A box of the padded tensor: per dim `cnt` indices from `base`; `d` is the dim being folded
// (-1: none) with `np` (border, interior) index pairs along it in `pairs`.
struct PadBox {
  int64_t n = 0, np = 0;
  int32_t r = 0, d = -1;
  int64_t cnt[kMaxRank] = {}, st[kMaxRank] = {}, base[kMaxRank] = {};
};

const char* kPadSrc = R"(
struct PB { i64 n, np; int r, d; i64 cnt[8], st[8], base[8]; };
__device__ __forceinline__ i64 box_off(const PB& g, i64 i, i64& at_d) {
  i64 off = 0;
  at_d = 0;
  for (int k = g.r - 1; k >= 0; --k) {
    const i64 p = g.base[k] + i % g.cnt[k]; i /= g.cnt[k];
    off += p * g.st[k];
    if (k == g.d) at_d = p;
  }
  return off;
}
extern "C" __global__ void load(PB g, const S* __restrict__ dy, A* __restrict__ buf) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += (i64)gridDim.x * blockDim.x) buf[i] = LD(dy[i]);
}
// Interior element t of dim d adds the borders copied from it, in border order.
extern "C" __global__ void fold(PB g, const i64* __restrict__ pairs, A* __restrict__ buf) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += (i64)gridDim.x * blockDim.x) {
    i64 t;
    const i64 off = box_off(g, i, t);
    A acc = buf[off];
    for (i64 p = 0; p < g.np; ++p)
      if (pairs[2 * p + 1] == t) acc += buf[off + (pairs[2 * p] - t) * g.st[g.d]];
    buf[off] = acc;
  }
}
extern "C" __global__ void result(PB g, const A* __restrict__ buf, S* __restrict__ y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += (i64)gridDim.x * blockDim.x) {
    i64 t;
    y[i] = ST(buf[box_off(g, i, t)]);
  }
}
)";

LaunchFn pad_gradient(const KernelCtx& c) {
  const DType dt = c.out[0].dtype;
  check_dtype(c, dt);
  const ops::PadAttrs& a = typed_attrs<ops::PadAttrs>(c.node);
  const Ints& l = a.left_padding;
  const Shape& ds = c.in[0].shape;
  const Shape& xs = c.out[0].shape;
  const size_t r = xs.size();
  check_rank(c, r);
  const Ints st = contiguous_strides(ds);
  const int64_t n_dy = num_elements(ds), n_out = num_elements(xs);
  auto box = [&](int32_t d) {  // dims before d (all: d == r) interior only, d interior, after d whole
    PadBox b;
    b.r = int32_t(r);
    b.d = d < int32_t(r) ? d : -1;
    b.n = 1;
    for (size_t k = 0; k < r; ++k) {
      const bool whole = int32_t(k) > d;
      b.cnt[k] = whole ? ds[k] : xs[k];
      b.base[k] = whole ? 0 : l[k];
      b.st[k] = st[k];
      b.n *= b.cnt[k];
    }
    return b;
  };
  // per folded dim: its box and its (border, interior) pairs, absolute indices along the dim
  std::vector<std::pair<PadBox, Ints>> folds;
  if (a.mode != ops::PadMode::Constant && n_out > 0)
    for (size_t d = 0; d < r; ++d) {
      const int64_t n = xs[d];
      Ints pairs;
      for (int64_t j = 0; j < ds[d]; ++j)
        if (j < l[d] || j >= l[d] + n) {
          pairs.push_back(j);
          pairs.push_back(l[d] + ops::pad_source(a.mode, n, j - l[d]));
        }
      if (pairs.empty()) continue;
      PadBox b = box(int32_t(d));
      b.np = int64_t(pairs.size() / 2);
      folds.push_back({b, std::move(pairs)});
    }
  const PadBox whole = box(int32_t(r));
  if (folds.empty()) {  // constant mode or nothing padded: the interior of dy, copied
    int64_t offset = 0;
    for (size_t k = 0; k < r; ++k) offset += l[k] * st[k];
    const StridedCopy cp = make_copy(dtype_size(dt), xs, st, contiguous_strides(xs), offset, 0);
    return [cp](cudaStream_t s, const void* const* in, void* const* out) {
      if (cp.n > 0) strided_copy(cp, in[0], out[0], s);
    };
  }
  const size_t slot = c.scratch(size_t(n_dy) * 8);  // A is 4 or 8 bytes
  const std::string src = header(dt) + kPadSrc;
  const Kernel kload = nvrtc_kernel(src, "load"), kfold = nvrtc_kernel(src, "fold"), kres = nvrtc_kernel(src, "result");
  std::vector<std::pair<PadBox, std::shared_ptr<Buffer>>> steps;
  for (auto& [b, pairs] : folds) {
    std::shared_ptr<Buffer> t = device_alloc(pairs.size() * sizeof(int64_t));
    copy_sync(t->data, pairs.data(), pairs.size() * sizeof(int64_t), cudaMemcpyHostToDevice, "uploading pad_gradient pairs");
    steps.push_back({b, t});
  }
  PadBox all;
  all.n = n_dy;
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    void* buf = out[slot];
    PadBox g = all;
    const void* dy = in[0];
    void* a1[] = {&g, &dy, &buf};
    run(kload, g.n, s, a1);
    for (const auto& [b, t] : steps) {
      PadBox gb = b;
      const void* pairs = t->data;
      void* a2[] = {&gb, &pairs, &buf};
      run(kfold, gb.n, s, a2);
    }
    PadBox gw = whole;
    const void* cbuf = buf;
    void* y = out[0];
    void* a3[] = {&gw, &cbuf, &y};
    run(kres, gw.n, s, a3);
  };
}

// ---- space_to_depth_2d / depth_to_space_2d ----

LaunchFn space_depth(const KernelCtx& c, bool to_depth) {
  const ops::SpaceDepthAttrs& a = typed_attrs<ops::SpaceDepthAttrs>(c.node);
  Shape view(6);
  Ints src(6), dst(6);
  ops::space_depth_copy((to_depth ? c.in[0].shape : c.out[0].shape).data(), a.nchw, a.use_pixel_shuffle_order, a.block_size, to_depth,
                        view.data(), src.data(), dst.data());
  const StridedCopy cp = make_copy(dtype_size(c.in[0].dtype), view, src, dst, 0, 0);
  return [cp](cudaStream_t s, const void* const* in, void* const* out) {
    if (cp.n > 0) strided_copy(cp, in[0], out[0], s);
  };
}

}  // namespace

void register_shape_gradient_kernels() {
  register_kernel("tile_gradient", tile_gradient);
  register_kernel("pad_gradient", pad_gradient);
  register_kernel("space_to_depth_2d", [](const KernelCtx& c) { return space_depth(c, true); });
  register_kernel("depth_to_space_2d", [](const KernelCtx& c) { return space_depth(c, false); });
}

}  // namespace mg::cuda
