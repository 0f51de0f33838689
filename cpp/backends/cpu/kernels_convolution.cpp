// CPU kernels for the convolution primitives (convolution, convolution_data_gradient,
// convolution_weights_gradient): im2col + GEMM over any number of spatial dims, grouped.
//
// The factory fixes the geometry: for the innermost spatial dim, the range of output positions
// each kernel tap reads inside the source (the rest is padding); for the outer dims, a table of
// the source row each (outer kernel tap, output row) reads, or -1 in the padding. A run gathers
// column tiles (channels x taps, a block of output rows) with those tables and multiplies them
// by the weights with BLAS; the data gradient multiplies by the transposed weights and scatters
// the columns back (col2im); the weights gradient accumulates dy @ columns^T. 1x1 convolutions
// with unit strides and no padding skip the columns. float16/bfloat16 compute in float32 scratch
// allocated here. Work is split over (image, group) items when there are enough of them,
// otherwise each item's gathers run in parallel and BLAS threads the products.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>

#include "backends/cpu/elementwise_util.h"

#if defined(MG_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#define MG_CBLAS(name) cblas_##name
#else  // the scipy-openblas32 wheel prefixes its symbols
#include <cblas.h>
#define MG_CBLAS(name) scipy_cblas_##name
#endif

namespace mg::cpu {

namespace {

using Ints = std::vector<int64_t>;

// Row-major C = alpha * op(A) @ op(B) + beta * C with op(A) (M, K), op(B) (K, N).
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float beta, float* C, int64_t ldc) {
  MG_CBLAS(sgemm)(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                  1.0f, A, int(lda), B, int(ldb), beta, C, int(ldc));
}
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                 int64_t ldb, double beta, double* C, int64_t ldc) {
  MG_CBLAS(dgemm)(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                  1.0, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

enum class Kind { Forward, Data, Weights };

struct Plan {
  int64_t N = 0, C = 0, O = 0, G = 1, Cg = 0, Og = 0;
  int64_t in_plane = 0;    // source elements per channel
  int64_t P = 0;           // output positions per channel
  int64_t OL = 0, IL = 0;  // innermost output / source extent
  int64_t R = 0;           // output rows (P / OL)
  int64_t KL = 0, Kouter = 0, Ksz = 0, CK = 0;
  int64_t sL = 1;          // innermost stride
  Ints rowtab;             // Kouter * R: source offset of the row read, -1 in the padding
  Ints lo, hi, start;      // per innermost tap: valid output range [lo, hi) and its first source position
  bool direct = false;     // 1x1, unit strides, no padding: the source plane is the column matrix
  int64_t tile_rows = 1;   // output rows per column tile
  int64_t col_elems = 0;   // per scratch slot
  int slots = 1;           // scratch slots (parallel items)
  bool par_items = false;
  int64_t items() const { return N * G; }
};

Plan make_plan(const Node& node, const Shape& src, const Shape& w, const Shape& dy) {
  const auto& strides = node_attr<Ints>(node, "strides");
  const auto& dil = node_attr<Ints>(node, "dilation_rates");
  const auto& pads = node_attr<Ints>(node, "padding");
  const int64_t groups = node_attr<int64_t>(node, "groups");
  const size_t k = src.size() - 2;
  if (strides.size() != k || dil.size() != k || pads.size() != 2 * k || w.size() != k + 2 || dy.size() != k + 2)
    raise(ErrorKind::Runtime, node.op->name, node.name, "convolution attributes were not resolved for these shapes");
  Plan p;
  p.N = src[0];
  p.C = src[1];
  p.O = w[0];
  p.G = groups;
  p.Cg = p.C / groups;
  p.Og = p.O / groups;
  p.in_plane = 1;
  p.P = 1;
  p.Ksz = 1;
  for (size_t i = 0; i < k; ++i) {
    p.in_plane *= src[2 + i];
    p.P *= dy[2 + i];
    p.Ksz *= w[2 + i];
  }
  p.CK = p.Cg * p.Ksz;
  p.OL = dy.back();
  p.IL = src.back();
  p.KL = w.back();
  p.Kouter = p.KL ? p.Ksz / p.KL : 0;
  p.R = p.OL ? p.P / p.OL : 0;
  p.sL = strides.back();
  if (std::max({p.CK, p.P, p.Og, p.in_plane, p.O * p.CK}) > INT_MAX)
    raise(ErrorKind::NotImplemented, node.op->name, node.name, "convolution dims beyond 2**31-1 elements per matrix are not supported");

  p.direct = p.Ksz == 1;
  for (size_t i = 0; i < k; ++i) p.direct = p.direct && strides[i] == 1 && pads[2 * i] == 0 && pads[2 * i + 1] == 0;

  // innermost dim: output j reads source j * s + off, off = tap * dilation - pad_before
  const int64_t dL = dil.back(), pbL = pads[2 * (k - 1)];
  for (int64_t t = 0; t < p.KL; ++t) {
    const int64_t off = t * dL - pbL;
    int64_t lo = off >= 0 ? 0 : (-off + p.sL - 1) / p.sL;
    int64_t hi = p.IL - off <= 0 ? 0 : (p.IL - off + p.sL - 1) / p.sL;
    lo = std::min(lo, p.OL);
    hi = std::max(lo, std::min(hi, p.OL));
    p.lo.push_back(lo);
    p.hi.push_back(hi);
    p.start.push_back(lo * p.sL + off);
  }
  // outer dims: (outer tap, output row) -> source row offset
  p.rowtab.assign(size_t(p.Kouter * p.R), -1);
  for (int64_t kt = 0; kt < p.Kouter; ++kt) {
    for (int64_t r = 0; r < p.R; ++r) {
      int64_t krem = kt, rrem = r, off = 0, stride = p.IL;
      bool ok = true;
      for (size_t i = k - 1; i-- > 0;) {
        const int64_t kk = krem % w[2 + i], o = rrem % dy[2 + i];
        krem /= w[2 + i];
        rrem /= dy[2 + i];
        const int64_t pos = o * strides[i] - pads[2 * i] + kk * dil[i];
        if (pos < 0 || pos >= src[2 + i]) ok = false;
        off += pos * stride;
        stride *= src[2 + i];
      }
      if (ok) p.rowtab[size_t(kt * p.R + r)] = off;
    }
  }

  // work split: (image, group) items over threads when there are enough and each is small
  // enough that BLAS would not thread it well; otherwise one item at a time.
  const int threads = num_threads();
  const double flops = double(p.Og) * double(p.CK) * double(p.P);
  p.par_items = threads > 1 && p.items() >= threads && flops < double(1 << 26);
  p.slots = p.par_items ? int(std::min<int64_t>(threads, p.items())) : 1;
  const int64_t budget = int64_t(1) << 21;  // column elements per slot
  p.tile_rows = p.CK * p.OL > 0 ? std::max<int64_t>(1, std::min<int64_t>(p.R, budget / (p.CK * p.OL))) : 1;
  p.col_elems = p.direct ? 0 : p.CK * p.tile_rows * p.OL;
  return p;
}

// Gathers column rows (c, tap) for channels [c0, c1) and output rows [r0, r1) of one item.
template <class T>
void im2col(const Plan& p, const T* x, T* col, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t pt = (r1 - r0) * p.OL;
  for (int64_t c = c0; c < c1; ++c) {
    const T* xc = x + c * p.in_plane;
    for (int64_t kt = 0; kt < p.Kouter; ++kt) {
      for (int64_t t = 0; t < p.KL; ++t) {
        T* dst = col + (c * p.Ksz + kt * p.KL + t) * pt;
        const int64_t lo = p.lo[size_t(t)], hi = p.hi[size_t(t)], st = p.start[size_t(t)];
        for (int64_t r = r0; r < r1; ++r, dst += p.OL) {
          const int64_t base = p.rowtab[size_t(kt * p.R + r)];
          if (base < 0 || lo >= hi) {
            std::fill(dst, dst + p.OL, T(0));
            continue;
          }
          std::fill(dst, dst + lo, T(0));
          const T* s = xc + base + st;
          if (p.sL == 1) std::memcpy(dst + lo, s, size_t(hi - lo) * sizeof(T));
          else
            for (int64_t j = lo; j < hi; ++j) dst[j] = s[(j - lo) * p.sL];
          std::fill(dst + hi, dst + p.OL, T(0));
        }
      }
    }
  }
}

// Adds column rows back into the source planes (the adjoint of im2col).
template <class T>
void col2im(const Plan& p, const T* col, T* x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t pt = (r1 - r0) * p.OL;
  for (int64_t c = c0; c < c1; ++c) {
    T* xc = x + c * p.in_plane;
    for (int64_t kt = 0; kt < p.Kouter; ++kt) {
      for (int64_t t = 0; t < p.KL; ++t) {
        const T* src = col + (c * p.Ksz + kt * p.KL + t) * pt;
        const int64_t lo = p.lo[size_t(t)], hi = p.hi[size_t(t)], st = p.start[size_t(t)];
        for (int64_t r = r0; r < r1; ++r, src += p.OL) {
          const int64_t base = p.rowtab[size_t(kt * p.R + r)];
          if (base < 0) continue;
          T* d = xc + base + st;
          if (p.sL == 1)
            for (int64_t j = lo; j < hi; ++j) d[j - lo] += src[j];
          else
            for (int64_t j = lo; j < hi; ++j) d[(j - lo) * p.sL] += src[j];
        }
      }
    }
  }
}

// Runs f(c0, c1) over the item's channels: in parallel unless items already are.
template <class F>
void over_channels(const Plan& p, F&& f) {
  if (p.par_items) f(int64_t(0), p.Cg);
  else
    parallel_for(p.Cg, std::max<int64_t>(1, 16384 / std::max<int64_t>(p.Ksz * p.P, 1)),
                 [&](int64_t c0, int64_t c1) { f(c0, c1); });
}

template <class T>
struct Scratch {
  std::vector<std::vector<T>> col;  // per slot
  std::vector<std::vector<T>> acc;  // weights gradient partial sums, slots 1..
};

template <class T>
void item_forward(const Plan& p, int64_t item, const T* x, const T* w, T* y, T* col) {
  const int64_t n = item / p.G, g = item % p.G;
  const T* xg = x + (n * p.C + g * p.Cg) * p.in_plane;
  const T* wg = w + g * p.Og * p.CK;
  T* yg = y + (n * p.O + g * p.Og) * p.P;
  if (p.direct) {
    gemm(false, false, p.Og, p.P, p.Cg, wg, p.CK, xg, p.in_plane, T(0), yg, p.P);
    return;
  }
  for (int64_t r0 = 0; r0 < p.R; r0 += p.tile_rows) {
    const int64_t r1 = std::min(p.R, r0 + p.tile_rows), pt = (r1 - r0) * p.OL;
    over_channels(p, [&](int64_t c0, int64_t c1) { im2col(p, xg, col, r0, r1, c0, c1); });
    gemm(false, false, p.Og, pt, p.CK, wg, p.CK, col, pt, T(0), yg + r0 * p.OL, p.P);
  }
}

template <class T>
void item_data(const Plan& p, int64_t item, const T* dy, const T* w, T* dx, T* col) {
  const int64_t n = item / p.G, g = item % p.G;
  T* dxg = dx + (n * p.C + g * p.Cg) * p.in_plane;
  const T* wg = w + g * p.Og * p.CK;
  const T* dyg = dy + (n * p.O + g * p.Og) * p.P;
  if (p.direct) {
    gemm(true, false, p.Cg, p.P, p.Og, wg, p.CK, dyg, p.P, T(0), dxg, p.in_plane);
    return;
  }
  std::fill(dxg, dxg + p.Cg * p.in_plane, T(0));
  for (int64_t r0 = 0; r0 < p.R; r0 += p.tile_rows) {
    const int64_t r1 = std::min(p.R, r0 + p.tile_rows), pt = (r1 - r0) * p.OL;
    gemm(true, false, p.CK, pt, p.Og, wg, p.CK, dyg + r0 * p.OL, p.P, T(0), col, pt);
    over_channels(p, [&](int64_t c0, int64_t c1) { col2im(p, col, dxg, r0, r1, c0, c1); });
  }
}

template <class T>
void item_weights(const Plan& p, int64_t item, const T* dy, const T* x, T* dw, T* col) {
  const int64_t n = item / p.G, g = item % p.G;
  const T* xg = x + (n * p.C + g * p.Cg) * p.in_plane;
  const T* dyg = dy + (n * p.O + g * p.Og) * p.P;
  T* dwg = dw + g * p.Og * p.CK;
  if (p.direct) {
    gemm(false, true, p.Og, p.Cg, p.P, dyg, p.P, xg, p.in_plane, T(1), dwg, p.CK);
    return;
  }
  for (int64_t r0 = 0; r0 < p.R; r0 += p.tile_rows) {
    const int64_t r1 = std::min(p.R, r0 + p.tile_rows), pt = (r1 - r0) * p.OL;
    over_channels(p, [&](int64_t c0, int64_t c1) { im2col(p, xg, col, r0, r1, c0, c1); });
    gemm(false, true, p.Og, p.CK, pt, dyg + r0 * p.OL, p.P, col, pt, T(1), dwg, p.CK);
  }
}

// in0/in1/out per kind: forward (x, w) -> y; data (dy, w) -> dx; weights (dy, x) -> dw.
template <class T>
void execute(Kind kind, const Plan& p, const T* in0, const T* in1, T* out, int64_t out_elems, Scratch<T>& s) {
  if (out_elems == 0) return;
  const bool empty_work = p.items() == 0 || p.P == 0 || p.CK == 0 || p.Og == 0;
  if (empty_work || kind == Kind::Weights) std::fill(out, out + out_elems, T(0));  // weights: accumulated
  if (empty_work) return;
  auto run_item = [&](int64_t item, int slot) {
    T* col = s.col[size_t(slot)].data();
    switch (kind) {
      case Kind::Forward: item_forward(p, item, in0, in1, out, col); break;
      case Kind::Data: item_data(p, item, in0, in1, out, col); break;
      case Kind::Weights: item_weights(p, item, in0, in1, slot == 0 ? out : s.acc[size_t(slot - 1)].data(), col); break;
    }
  };
  if (!p.par_items) {
    for (int64_t it = 0; it < p.items(); ++it) run_item(it, 0);
    return;
  }
  if (kind == Kind::Weights)
    for (auto& a : s.acc) std::fill(a.begin(), a.end(), T(0));
  parallel_for(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t sl = s0; sl < s1; ++sl)
      for (int64_t it = sl; it < p.items(); it += p.slots) run_item(it, int(sl));
  });
  if (kind == Kind::Weights && !s.acc.empty()) {
    parallel_for(out_elems, 65536, [&](int64_t b, int64_t e) {
      for (auto& a : s.acc)
        for (int64_t i = b; i < e; ++i) out[i] += a[size_t(i)];
    });
  }
}

template <class T>
std::shared_ptr<Scratch<T>> make_scratch(const Plan& p, Kind kind, int64_t out_elems) {
  auto s = std::make_shared<Scratch<T>>();
  s->col.assign(size_t(p.slots), std::vector<T>(size_t(p.col_elems)));
  if (kind == Kind::Weights && p.par_items) s->acc.assign(size_t(p.slots - 1), std::vector<T>(size_t(out_elems)));
  return s;
}

template <class S>  // half_t or bfloat16_t
void to_float(const S* src, float* dst, int64_t n) {
  parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = Num<S>::ld(src[i]);
  });
}
template <class S>
void from_float(const float* src, S* dst, int64_t n) {
  parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = Num<S>::st(src[i]);
  });
}

template <class T>
KernelFn native(Kind kind, const Plan& p, int64_t out_elems) {
  auto s = make_scratch<T>(p, kind, out_elems);
  return [kind, p, s, out_elems](const void* const* in, void* const* out) {
    execute<T>(kind, p, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<T*>(out[0]), out_elems, *s);
  };
}

template <class S>
KernelFn via_float(Kind kind, const Plan& p, int64_t n0, int64_t n1, int64_t out_elems) {
  auto s = make_scratch<float>(p, kind, out_elems);
  auto f0 = std::make_shared<std::vector<float>>(size_t(n0));
  auto f1 = std::make_shared<std::vector<float>>(size_t(n1));
  auto fo = std::make_shared<std::vector<float>>(size_t(out_elems));
  return [kind, p, s, f0, f1, fo, n0, n1, out_elems](const void* const* in, void* const* out) {
    to_float(static_cast<const S*>(in[0]), f0->data(), n0);
    to_float(static_cast<const S*>(in[1]), f1->data(), n1);
    execute<float>(kind, p, f0->data(), f1->data(), fo->data(), out_elems, *s);
    from_float(fo->data(), static_cast<S*>(out[0]), out_elems);
  };
}

KernelFactory factory(Kind kind) {
  return [kind](const KernelCtx& c) -> KernelFn {
    const Shape *src, *w, *dy;
    switch (kind) {
      case Kind::Forward: src = &c.in[0].shape; w = &c.in[1].shape; dy = &c.out[0].shape; break;
      case Kind::Data: dy = &c.in[0].shape; w = &c.in[1].shape; src = &c.out[0].shape; break;
      default: dy = &c.in[0].shape; src = &c.in[1].shape; w = &c.out[0].shape; break;
    }
    Plan p = make_plan(c.node, *src, *w, *dy);
    const int64_t n0 = num_elements(c.in[0].shape), n1 = num_elements(c.in[1].shape), no = num_elements(c.out[0].shape);
    switch (c.out[0].dtype) {
      case DType::Float32: return native<float>(kind, p, no);
      case DType::Float64: return native<double>(kind, p, no);
      case DType::Float16: return via_float<half_t>(kind, p, n0, n1, no);
      case DType::BFloat16: return via_float<bfloat16_t>(kind, p, n0, n1, no);
      default:
        raise(ErrorKind::Type, c.node.op->name, c.node.name,
              std::string("expects a floating-point dtype, got ") + dtype_name(c.out[0].dtype));
    }
  };
}

}  // namespace

void register_convolution_kernels() {
  register_kernel("convolution", factory(Kind::Forward));
  register_kernel("convolution_data_gradient", factory(Kind::Data));
  register_kernel("convolution_weights_gradient", factory(Kind::Weights));
}

}  // namespace mg::cpu
