// CUDA kernels of the sort and cumulative families (core/ops/sort.cpp) and of one_hot and
// band_part, generated per dtype and compiled by NVRTC. Semantics as the CPU's kernels_sort.cpp:
//
// * Sorting works on lines (the elements along the axis at one outer/inner position). Each
//   element becomes an order-preserving unsigned key (NaN above everything, -0.0 equal to 0.0,
//   complemented for descending) with its position as the tie-break, so an ascending sort of
//   the keys is the stable order: keys of up to 32 bits are packed with the position into one
//   uint64, 64-bit keys are (key, position) pairs. Lines are padded to a power of two with
//   keys above every element and sorted by a bitonic network: in shared memory, one block per
//   line, up to 2048 elements; beyond that one launch per network stage over global scratch.
//   top_k / bottom_k keep the first k of the sorted line.
// * Scans: sums and products accumulate floats in double and integers in uint64 (wrapping like
//   the dtype), min/max propagate NaN. Many lines: one thread per line walking the axis; few
//   lines: one block per line, each thread scanning a chunk after a scan of the chunk totals
//   (floating sums then associate differently from the CPU's serial order, in double).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/shape_attrs.h"
#include "core/ops/sort_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
};

Lines lines_of(const Shape& s, int64_t axis) {
  const size_t a = size_t(axis);
  Lines l{1, s[a], 1};
  for (size_t d = 0; d < a; ++d) l.outer *= s[d];
  for (size_t d = a + 1; d < s.size(); ++d) l.inner *= s[d];
  return l;
}

int64_t grid(int64_t n) { return std::min<int64_t>((n + 255) / 256, int64_t(1) << 20); }

// ---------------- sort, arg_sort, top_k, bottom_k ----------------

struct SortGeo {
  int64_t outer, n, inner, k, P;  // P: the padded line length (a power of two)
};

const char* kSortDevice = R"(
struct SG { i64 outer, n, inner, k, P; };
__device__ __forceinline__ i64 mg_elem(const SG& g, i64 line, i64 j) {
  const i64 o = line / g.inner, i = line - o * g.inner;
  return (o * g.n + j) * g.inner + i;
}
__device__ __forceinline__ E mg_make(const SG& g, const S* x, i64 line, i64 j) {
  if (j >= g.n) return mg_pad();
  return mg_key(LOADX, (u32)j);
}
__device__ __forceinline__ void mg_cas(E* a, i64 x, i64 partner, i64 k) {
  const E u = a[x], v = a[partner];
  const bool asc = (x & k) == 0;
  if (asc ? mg_less(v, u) : mg_less(u, v)) { a[x] = v; a[partner] = u; }
}
__device__ __forceinline__ void mg_emit(const SG& g, const S* x, S* vals, i32* idx, i64 line, i64 j, E e) {
  const u32 at = mg_pos(e);
  const i64 ob = (line / g.inner * g.k + j) * g.inner + line % g.inner;
  if (vals) vals[ob] = x[mg_elem(g, line, at)];
  if (idx) idx[ob] = (i32)at;
}
// small lines: the whole network in shared memory, one block per line, P / 2 threads
extern "C" __global__ void sort_shared(SG g, const S* __restrict__ x, S* vals, i32* idx) {
  extern __shared__ unsigned char mg_smem[];
  E* a = (E*)mg_smem;
  const i64 lines = g.outer * g.inner;
  for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
    for (i64 j = threadIdx.x; j < g.P; j += blockDim.x) a[j] = mg_make(g, x, line, j);
    __syncthreads();
    for (i64 k = 2; k <= g.P; k <<= 1)
      for (i64 j = k >> 1; j > 0; j >>= 1) {
        for (i64 t = threadIdx.x; t < g.P / 2; t += blockDim.x) {
          const i64 xi = (t / j) * 2 * j + t % j;
          mg_cas(a, xi, xi + j, k);
        }
        __syncthreads();
      }
    for (i64 j = threadIdx.x; j < g.k; j += blockDim.x) mg_emit(g, x, vals, idx, line, j, a[j]);
    __syncthreads();
  }
}
// long lines: keys in global scratch, one launch per stage (k, j), then the outputs
extern "C" __global__ void sort_init(SG g, const S* __restrict__ x, E* a) {
  const i64 n = g.outer * g.inner * g.P;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x)
    a[t] = mg_make(g, x, t / g.P, t % g.P);
}
extern "C" __global__ void sort_stage(SG g, E* a, i64 k, i64 j) {
  const i64 half = g.P / 2, n = g.outer * g.inner * half;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
    const i64 line = t / half, u = t - line * half;
    const i64 xi = (u / j) * 2 * j + u % j;
    mg_cas(a + line * g.P, xi, xi + j, k);
  }
}
extern "C" __global__ void sort_emit(SG g, const S* __restrict__ x, S* vals, i32* idx, const E* a) {
  const i64 n = g.outer * g.inner * g.k;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
    const i64 line = t / g.k, j = t % g.k;
    mg_emit(g, x, vals, idx, line, j, a[line * g.P + j]);
  }
}
)";

// The key type E and mg_key / mg_pad / mg_less / mg_pos for dtype t.
std::string key_code(DType t, bool desc) {
  const bool wide = dtype_size(t) == 8;
  std::string c;
  std::string key;  // the order-preserving unsigned key of compute value v
  if (is_floating(t)) {
    key = "  if (v != v) return mg_pack(0xffffffffu, pos);\n  if (v == 0.f) v = 0.f;\n"
          "  const u32 b = __float_as_uint(v);\n  return mg_pack((b & 0x80000000u) ? ~b : (b | 0x80000000u), pos);\n";
  } else if (wide) {
    key = std::string("  return mg_pack(") + (is_signed_integer(t) ? "(u64)v ^ 0x8000000000000000ull" : "(u64)v") + ", pos);\n";
  } else {
    key = std::string("  return mg_pack(") + (is_signed_integer(t) ? "(u32)(i32)v ^ 0x80000000u" : "(u32)v") + ", pos);\n";
  }
  if (wide) {
    c += "struct E { u64 k; u32 p; };\n";
    c += std::string("__device__ __forceinline__ E mg_pack(u64 k, u32 p) { return E{") + (desc ? "~k" : "k") + ", p}; }\n";
    c += "__device__ __forceinline__ E mg_pad() { return E{~0ull, 0xffffffffu}; }\n";
    c += "__device__ __forceinline__ bool mg_less(E a, E b) { return a.k < b.k || (a.k == b.k && a.p < b.p); }\n";
    c += "__device__ __forceinline__ u32 mg_pos(E e) { return e.p; }\n";
  } else {
    c += "typedef u64 E;\n";
    c += std::string("__device__ __forceinline__ E mg_pack(u32 k, u32 p) { return ((u64)(") + (desc ? "~k" : "k") +
         ") << 32) | p; }\n";
    c += "__device__ __forceinline__ E mg_pad() { return ~0ull; }\n";
    c += "__device__ __forceinline__ bool mg_less(E a, E b) { return a < b; }\n";
    c += "__device__ __forceinline__ u32 mg_pos(E e) { return (u32)e; }\n";
  }
  c += "__device__ __forceinline__ E mg_key(C v, u32 pos) {\n" + key + "}\n";
  return c;
}

std::string sort_source(DType t, bool desc) {
  return prelude() + "typedef " + storage_type(t) + " S;\ntypedef " + compute_type(t) + " C;\n" + key_code(t, desc) +
         "#define LOADX " + load_expr(t, "x[mg_elem(g, line, j)]") + "\n" + kSortDevice;
}

constexpr int64_t kSharedMax = 2048;

LaunchFn make_sort(const KernelCtx& c, int64_t axis, bool desc, int64_t k, int values, int indices) {
  const DType t = c.in[0].dtype;
  const Lines l = lines_of(c.in[0].shape, axis);
  if (l.n > int64_t(INT32_MAX)) raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "sorting lines of 2^31 or more elements");
  int64_t P = 1;
  while (P < l.n) P <<= 1;
  const SortGeo geo{l.outer, l.n, l.inner, k, P};
  const std::string src = sort_source(t, desc);
  const bool shared = P <= kSharedMax;
  const size_t esz = dtype_size(t) == 8 ? 16 : 8;
  Kernel ks, kinit, kstage, kemit;
  size_t slot = 0;
  if (shared) {
    ks = nvrtc_kernel(src, "sort_shared");
  } else {
    kinit = nvrtc_kernel(src, "sort_init");
    kstage = nvrtc_kernel(src, "sort_stage");
    kemit = nvrtc_kernel(src, "sort_emit");
    slot = c.scratch(size_t(l.outer * l.inner * P) * esz);
  }
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    const int64_t lines = geo.outer * geo.inner;
    if (lines == 0 || geo.n == 0 || geo.k == 0) return;
    SortGeo g = geo;
    const void* x = in[0];
    void* vals = values >= 0 ? out[values] : nullptr;
    void* idx = indices >= 0 ? out[indices] : nullptr;
    if (shared) {
      void* args[] = {&g, &x, &vals, &idx};
      launch(ks, std::min<int64_t>(lines, int64_t(1) << 20), int(std::max<int64_t>(32, g.P / 2)), size_t(g.P) * esz, s, args);
      return;
    }
    void* a = out[slot];
    void* iargs[] = {&g, &x, &a};
    launch(kinit, grid(lines * g.P), 256, 0, s, iargs);
    for (int64_t kk = 2; kk <= g.P; kk <<= 1)
      for (int64_t j = kk >> 1; j > 0; j >>= 1) {
        void* sargs[] = {&g, &a, &kk, &j};
        launch(kstage, grid(lines * g.P / 2), 256, 0, s, sargs);
      }
    void* eargs[] = {&g, &x, &vals, &idx, &a};
    launch(kemit, grid(lines * g.k), 256, 0, s, eargs);
  };
}

// ---------------- cumulative scans ----------------

const char* kScanDevice = R"(
struct L { i64 outer, n, inner; int exclusive, reverse; };
__device__ __forceinline__ i64 mg_at(const L& l, i64 line, i64 s) {
  const i64 o = line / l.inner, i = line - o * l.inner;
  return (o * l.n + (l.reverse ? l.n - 1 - s : s)) * l.inner + i;
}
// many lines: one thread per line (consecutive threads on consecutive inner positions)
extern "C" __global__ void scan_lines(L l, const S* __restrict__ x, S* __restrict__ y) {
  const i64 lines = l.outer * l.inner;
  for (i64 line = blockIdx.x * (i64)blockDim.x + threadIdx.x; line < lines; line += (i64)gridDim.x * blockDim.x) {
    A acc = mg_identity();
    for (i64 s = 0; s < l.n; ++s) {
      const i64 at = mg_at(l, line, s);
      const A v = mg_load(x[at]);
      if (l.exclusive) { y[at] = mg_store(acc); acc = mg_add(acc, v); }
      else { acc = mg_add(acc, v); y[at] = mg_store(acc); }
    }
  }
}
// few lines: one block per line; each thread scans a contiguous chunk after the block has
// scanned the chunks' totals
extern "C" __global__ void scan_block(L l, const S* __restrict__ x, S* __restrict__ y) {
  __shared__ A tot[256];
  const i64 lines = l.outer * l.inner;
  const i64 chunk = (l.n + blockDim.x - 1) / blockDim.x;
  for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
    const i64 b = threadIdx.x * chunk, e = min(l.n, b + chunk);
    A acc = mg_identity();
    for (i64 s = b; s < e; ++s) acc = mg_add(acc, mg_load(x[mg_at(l, line, s)]));
    tot[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      A run = mg_identity();
      for (unsigned t = 0; t < blockDim.x; ++t) { const A v = tot[t]; tot[t] = run; run = mg_add(run, v); }
    }
    __syncthreads();
    acc = tot[threadIdx.x];
    for (i64 s = b; s < e; ++s) {
      const i64 at = mg_at(l, line, s);
      const A v = mg_load(x[at]);
      if (l.exclusive) { y[at] = mg_store(acc); acc = mg_add(acc, v); }
      else { acc = mg_add(acc, v); y[at] = mg_store(acc); }
    }
    __syncthreads();
  }
}
)";

enum ScanOp { kSum, kProd, kMin, kMax };

std::string scan_source(DType t, ScanOp op) {
  const bool fl = is_floating(t);
  std::string c = prelude() + "typedef " + storage_type(t) + " S;\ntypedef " + compute_type(t) + " C;\n";
  if (op == kSum || op == kProd) {
    c += std::string("typedef ") + (fl ? "double" : "u64") + " A;\n";
    c += std::string("__device__ __forceinline__ A mg_identity() { return A(") + (op == kSum ? "0" : "1") + "); }\n";
    c += std::string("__device__ __forceinline__ A mg_add(A a, A v) { return a ") + (op == kSum ? "+" : "*") + " v; }\n";
    c += "__device__ __forceinline__ A mg_load(S s) { return (A)" + load_expr(t, "s") + "; }\n";
    c += "__device__ __forceinline__ S mg_store(A a) { return " + store_expr(t, fl ? "(float)a" : "(C)a") + "; }\n";
  } else {
    const bool mx = op == kMax;
    c += "typedef C A;\n";
    std::string id;
    if (fl) {
      id = mx ? "-__int_as_float(0x7f800000)" : "__int_as_float(0x7f800000)";
    } else {
      const size_t bits = dtype_size(t) * 8;
      if (is_signed_integer(t)) id = mx ? "C(1ull << " + std::to_string(bits - 1) + ")" : "C((1ull << " + std::to_string(bits - 1) + ") - 1)";
      else id = mx ? "C(0)" : "C(~0ull)";
    }
    c += "__device__ __forceinline__ A mg_identity() { return " + id + "; }\n";
    c += std::string("__device__ __forceinline__ A mg_add(A a, A v) { return ") + (fl ? "(v != v || " : "(") +
         (mx ? "v > a" : "v < a") + ") ? v : a; }\n";
    c += "__device__ __forceinline__ A mg_load(S s) { return " + load_expr(t, "s") + "; }\n";
    c += "__device__ __forceinline__ S mg_store(A a) { return " + store_expr(t, "a") + "; }\n";
  }
  return c + kScanDevice;
}

struct ScanGeo {
  int64_t outer, n, inner;
  int32_t exclusive, reverse;
};

KernelFactory scan_factory(const char* name, ScanOp op) {
  return [name, op](const KernelCtx& c) -> LaunchFn {
    const DType t = c.in[0].dtype;
    if (t == DType::Bool) raise(ErrorKind::Type, name, c.node.name, "no cuda kernel for dtype bool");
    const auto& a = typed_attrs<ops::CumulativeAttrs>(c.node);
    const Lines l = lines_of(c.in[0].shape, a.axis);
    const ScanGeo geo{l.outer, l.n, l.inner, a.exclusive ? 1 : 0, a.reverse ? 1 : 0};
    const int64_t lines = l.outer * l.inner;
    const bool per_thread = lines >= 8192 || l.n <= 64;
    const Kernel k = nvrtc_kernel(scan_source(t, op), per_thread ? "scan_lines" : "scan_block");
    return [=](cudaStream_t s, const void* const* in, void* const* out) {
      if (lines == 0 || geo.n == 0) return;
      ScanGeo g = geo;
      const void* x = in[0];
      void* y = out[0];
      void* args[] = {&g, &x, &y};
      if (per_thread) launch(k, grid(lines), 256, 0, s, args);
      else launch(k, std::min<int64_t>(lines, int64_t(1) << 20), 256, 0, s, args);
    };
  };
}

// ---------------- one_hot, band_part ----------------

const char* kOneHot = R"(
extern "C" __global__ void one_hot(i64 n, i64 depth, i64 inner, const I* __restrict__ idx, S* __restrict__ y, S on, S off) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
    const i64 i = t % inner, od = t / inner, d = od % depth, o = od / depth;
    const I v = idx[o * inner + i];
    y[t] = (!(IS_SIGNED && (i64)v < 0) && (u64)v == (u64)d) ? on : off;
  }
}
)";

std::string one_hot_source(DType it, DType ot) {
  return prelude() + "typedef " + storage_type(it) + " I;\ntypedef " + storage_type(ot) + " S;\n#define IS_SIGNED " +
         (is_signed_integer(it) ? "1" : "0") + "\n" + kOneHot;
}

LaunchFn one_hot_factory(const KernelCtx& c) {
  const auto& a = typed_attrs<ops::OneHotAttrs>(c.node);
  const DType it = c.in[0].dtype, ot = c.out[0].dtype;
  if (!is_integer(it)) raise(ErrorKind::Type, "one_hot", c.node.name, std::string("no cuda kernel for indices of ") + dtype_name(it));
  int64_t inner = 1;
  for (size_t k = size_t(a.axis); k < c.in[0].shape.size(); ++k) inner *= c.in[0].shape[k];
  const int64_t n = num_elements(c.out[0].shape), depth = a.depth;
  std::array<unsigned char, 8> on{}, off{};
  store_from_double(on.data(), ot, 0, a.on_value);
  store_from_double(off.data(), ot, 0, a.off_value);
  const Kernel k = nvrtc_kernel(one_hot_source(it, ot), "one_hot");
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    if (n == 0) return;
    int64_t nn = n, dd = depth, ii = inner;
    const void* x = in[0];
    void* y = out[0];
    std::array<unsigned char, 8> onv = on, offv = off;  // passed by value: S-sized parameters
    void* args[] = {&nn, &dd, &ii, &x, &y, onv.data(), offv.data()};
    launch(k, grid(n), 256, 0, s, args);
  };
}

const char* kBandPart = R"(
extern "C" __global__ void band_part(i64 n, i64 rows, i64 cols, i64 lower, i64 upper, const E* __restrict__ x, E* __restrict__ y) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
    const i64 j = t % cols, i = (t / cols) % rows;
    const bool keep = (lower < 0 || i - j <= lower) && (upper < 0 || j - i <= upper);
    y[t] = keep ? x[t] : E(0);
  }
}
)";

LaunchFn band_part_factory(const KernelCtx& c) {
  const auto& a = typed_attrs<ops::BandPartAttrs>(c.node);
  const Shape& xs = c.in[0].shape;
  const int64_t rows = xs[xs.size() - 2], cols = xs.back(), n = num_elements(xs);
  const size_t es = dtype_size(c.in[0].dtype);
  const std::string E = es == 1 ? "u8" : es == 2 ? "u16" : es == 4 ? "u32" : "u64";
  const Kernel k = nvrtc_kernel(prelude() + "typedef " + E + " E;\n" + kBandPart, "band_part");
  const int64_t lower = a.num_lower, upper = a.num_upper;
  return [=](cudaStream_t s, const void* const* in, void* const* out) {
    if (n == 0) return;
    int64_t nn = n, r = rows, cc = cols, lo = lower, up = upper;
    const void* x = in[0];
    void* y = out[0];
    void* args[] = {&nn, &r, &cc, &lo, &up, &x, &y};
    launch(k, grid(n), 256, 0, s, args);
  };
}

}  // namespace

void register_sort_kernels() {
  register_kernel("sort", [](const KernelCtx& c) {
    const auto& a = typed_attrs<ops::SortAttrs>(c.node);
    return make_sort(c, a.axis, a.descending, c.in[0].shape[size_t(a.axis)], 0, -1);
  });
  register_kernel("arg_sort", [](const KernelCtx& c) {
    const auto& a = typed_attrs<ops::SortAttrs>(c.node);
    return make_sort(c, a.axis, a.descending, c.in[0].shape[size_t(a.axis)], -1, 0);
  });
  register_kernel("top_k", [](const KernelCtx& c) {
    const auto& a = typed_attrs<ops::TopKAttrs>(c.node);
    return make_sort(c, a.axis, true, a.k, 0, 1);
  });
  register_kernel("bottom_k", [](const KernelCtx& c) {
    const auto& a = typed_attrs<ops::TopKAttrs>(c.node);
    return make_sort(c, a.axis, false, a.k, 0, 1);
  });
  register_kernel("cumulative_sum", scan_factory("cumulative_sum", kSum));
  register_kernel("cumulative_product", scan_factory("cumulative_product", kProd));
  register_kernel("cumulative_minimum", scan_factory("cumulative_minimum", kMin));
  register_kernel("cumulative_maximum", scan_factory("cumulative_maximum", kMax));
  register_kernel("one_hot", one_hot_factory);
  register_kernel("band_part", band_part_factory);
}

}  // namespace mg::cuda
