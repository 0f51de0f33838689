// CPU kernels of the image family (core/ops/image.cpp): hamming_distance, im_to_col and
// col_to_im (sample_grid is a composite). col_to_im gathers the columns each pixel receives and
// sums them in double (floats) or wrapping uint64 (integers), so it is deterministic and splits
// over threads without atomics.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/batch_offsets.h"
#include "backends/cpu/elementwise_util.h"
#include "core/ops/image_attrs.h"

namespace mg::cpu {

namespace {

// ---- hamming_distance ----

template <class S, class R>
KernelFn hamming_kernel(const KernelCtx& c) {
  using U = std::make_unsigned_t<S>;
  const Shape &xs = c.in[0].shape, &ys = c.in[1].shape, &os = c.out[0].shape;
  const int64_t m = xs[xs.size() - 2], n = ys[ys.size() - 2], k = xs.back();
  const Shape ob(os.begin(), os.end() - 2);
  const std::vector<int64_t> xo = batch_offsets(Shape(xs.begin(), xs.end() - 2), ob, m * k);
  const std::vector<int64_t> yo = batch_offsets(Shape(ys.begin(), ys.end() - 2), ob, n * k);
  return [=](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    const S* y = static_cast<const S*>(in[1]);
    R* o = static_cast<R*>(out[0]);
    const int64_t rows = int64_t(xo.size()) * m;
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * k)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / m, i = r % m;
        const S* xr = x + xo[size_t(b)] + i * k;
        for (int64_t j = 0; j < n; ++j) {
          const S* yr = y + yo[size_t(b)] + j * k;
          uint64_t bits = 0;
          for (int64_t t = 0; t < k; ++t) bits += uint64_t(std::popcount(U(U(xr[t]) ^ U(yr[t]))));
          o[r * n + j] = R(bits);
        }
      }
    });
  };
}

template <class S>
KernelFn hamming_for(const KernelCtx& c) {
  if (c.out[0].dtype == DType::UInt16) return hamming_kernel<S, uint16_t>(c);
  return hamming_kernel<S, uint32_t>(c);
}

// ---- im_to_col / col_to_im ----

struct Window {
  int64_t n = 0, ch = 0, h = 0, w = 0;  // the image
  int64_t kh = 0, kw = 0, sh = 0, sw = 0, dh = 0, dw = 0, pt = 0, pl = 0;
  int64_t bh = 0, bw = 0;  // blocks
};

Window window_of(const ops::ImToColAttrs& a, const Shape& image) {
  Window v;
  v.n = image[0];
  v.ch = image[1];
  v.h = image[2];
  v.w = image[3];
  v.kh = a.kernel[0];
  v.kw = a.kernel[1];
  v.sh = a.stride[0];
  v.sw = a.stride[1];
  v.dh = a.dilation[0];
  v.dw = a.dilation[1];
  v.pt = a.padding[0];
  v.pl = a.padding[2];
  v.bh = (v.h + a.padding[0] + a.padding[1] - (v.dh * (v.kh - 1) + 1)) / v.sh + 1;
  v.bw = (v.w + a.padding[2] + a.padding[3] - (v.dw * (v.kw - 1) + 1)) / v.sw + 1;
  return v;
}

template <class S>
KernelFn im_to_col_kernel(const Window v) {
  return [v](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* o = static_cast<S*>(out[0]);
    const int64_t rows = v.n * v.ch * v.kh * v.kw, l = v.bh * v.bw;
    parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t j = r % v.kw, i = (r / v.kw) % v.kh, nc = r / (v.kw * v.kh);
        const S* img = x + nc * v.h * v.w;
        S* row = o + r * l;
        for (int64_t by = 0; by < v.bh; ++by) {
          const int64_t yy = by * v.sh - v.pt + i * v.dh;
          for (int64_t bx = 0; bx < v.bw; ++bx) {
            const int64_t xx = bx * v.sw - v.pl + j * v.dw;
            row[by * v.bw + bx] = (yy >= 0 && yy < v.h && xx >= 0 && xx < v.w) ? img[yy * v.w + xx] : S(0);
          }
        }
      }
    });
  };
}

// The block index b along a dim where pixel p is tap t of the window (-1: none).
inline int64_t block_at(int64_t p, int64_t pad, int64_t t, int64_t dil, int64_t stride, int64_t blocks) {
  const int64_t q = p + pad - t * dil;
  if (q < 0 || q % stride != 0) return -1;
  const int64_t b = q / stride;
  return b < blocks ? b : -1;
}

template <class S>
KernelFn col_to_im_kernel(const Window v) {
  using Acc = std::conditional_t<is_float_storage<S>, double, uint64_t>;
  return [v](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* o = static_cast<S*>(out[0]);
    const int64_t l = v.bh * v.bw, pixels = v.h * v.w;
    parallel_for(v.n * v.ch * v.h, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, v.w)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t yy = r % v.h, nc = r / v.h;
        const S* cols = x + nc * v.kh * v.kw * l;
        for (int64_t xx = 0; xx < v.w; ++xx) {
          Acc acc = 0;
          for (int64_t i = 0; i < v.kh; ++i) {
            const int64_t by = block_at(yy, v.pt, i, v.dh, v.sh, v.bh);
            if (by < 0) continue;
            for (int64_t j = 0; j < v.kw; ++j) {
              const int64_t bx = block_at(xx, v.pl, j, v.dw, v.sw, v.bw);
              if (bx < 0) continue;
              const S e = cols[(i * v.kw + j) * l + by * v.bw + bx];
              if constexpr (is_float_storage<S>) acc += double(Num<S>::ld(e));
              else acc += uint64_t(e);
            }
          }
          S* px = o + nc * pixels + yy * v.w + xx;
          if constexpr (is_float_storage<S>) *px = Num<S>::st(typename Num<S>::C(acc));
          else *px = S(acc);
        }
      }
    });
  };
}

// ---- stencil ----

// Where a read at p of a dim of n lands under the boundary mode: the index (or -1 for the
// constant) and the sign (anti_periodic negates odd periods).
struct Read {
  int64_t at;
  double sign;
};

inline int64_t floor_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

Read boundary_read(int64_t p, int64_t n, ops::StencilBoundary b) {
  using B = ops::StencilBoundary;
  if (p >= 0 && p < n) return {p, 1.0};
  switch (b) {
    case B::ClampToEdge: return {std::clamp<int64_t>(p, 0, n - 1), 1.0};
    case B::Reflect: {
      if (n == 1) return {0, 1.0};
      const int64_t q = floor_mod(p, 2 * (n - 1));
      return {q < n ? q : 2 * (n - 1) - q, 1.0};
    }
    case B::Symmetric: {
      const int64_t q = floor_mod(p, 2 * n);
      return {q < n ? q : 2 * n - 1 - q, 1.0};
    }
    case B::Periodic: return {floor_mod(p, n), 1.0};
    case B::AntiPeriodic: {
      const int64_t k = (p - floor_mod(p, n)) / n;
      return {floor_mod(p, n), (k % 2 == 0) ? 1.0 : -1.0};
    }
    default: return {-1, 1.0};  // zero, constant
  }
}

template <class S>
KernelFn stencil_kernel(const KernelCtx& c) {
  using R = ops::StencilReduction;
  const ops::StencilAttrs a = typed_attrs<ops::StencilAttrs>(c.node);
  const Shape &xs = c.in[0].shape, &ws = c.in[1].shape, &os = c.out[0].shape;
  const size_t r = xs.size();
  int64_t batch = 1;
  for (size_t d = 0; d + 4 < r; ++d) batch *= xs[d];
  std::array<int64_t, 4> n{}, k{}, o{}, in_stride{}, start{};
  for (size_t d = 0; d < 4; ++d) {
    n[d] = xs[r - 4 + d];
    k[d] = ws[d];
    o[d] = os[r - 4 + d];
    start[d] = a.offsets[d] - a.padding[2 * d];
  }
  in_stride[3] = 1;
  for (size_t d = 3; d-- > 0;) in_stride[d] = in_stride[d + 1] * n[d + 1];
  const int64_t in_items = n[0] * in_stride[0], out_items = o[0] * o[1] * o[2] * o[3];
  const int64_t taps = k[0] * k[1] * k[2] * k[3];
  const double fill = a.boundary == ops::StencilBoundary::Constant ? a.padding_constant : 0.0;
  return [=](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    const S* w = static_cast<const S*>(in[1]);
    S* y = static_cast<S*>(out[0]);
    parallel_for(batch * out_items, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, taps)), [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        const S* xb = x + (e / out_items) * in_items;
        int64_t rem = e % out_items;
        std::array<int64_t, 4> pos{};
        for (size_t d = 4; d-- > 0;) {
          pos[d] = rem % o[d];
          rem /= o[d];
        }
        double acc = a.reduction == R::Product ? 1.0
                     : a.reduction == R::Min   ? std::numeric_limits<double>::infinity()
                     : a.reduction == R::Max   ? -std::numeric_limits<double>::infinity()
                                               : 0.0;
        for (int64_t t = 0; t < taps; ++t) {
          int64_t tr = t, at = 0;
          double sign = 1.0;
          bool outside = false;
          for (size_t d = 4; d-- > 0;) {
            const int64_t kd = tr % k[d];
            tr /= k[d];
            const Read rd = boundary_read(pos[d] * a.strides[d] + kd * a.dilation_rates[d] + start[d], n[d], a.boundary);
            outside = outside || rd.at < 0;
            at += rd.at * in_stride[d];
            sign *= rd.sign;
          }
          const double v = (outside ? fill : sign * double(Num<S>::ld(xb[at]))) * double(Num<S>::ld(w[t]));
          switch (a.reduction) {
            case R::Sum: acc += v; break;
            case R::Product: acc *= v; break;
            case R::Min: acc = (v < acc || v != v) ? v : acc; break;  // NaN propagates
            case R::Max: acc = (v > acc || v != v) ? v : acc; break;
          }
          if (acc != acc && (a.reduction == R::Min || a.reduction == R::Max)) break;
        }
        y[e] = Num<S>::st(typename Num<S>::C(acc));
      }
    });
  };
}

// ---- non_maximum_suppression ----

struct Box {
  double y0, x0, y1, x1;  // y0 <= y1, x0 <= x1
  double area() const { return (y1 - y0) * (x1 - x0); }
};

Box box_of(const double v[4], int mode) {
  double a = v[0], b = v[1], c = v[2], d = v[3];
  if (mode == 1 || mode == 3) {  // width first
    std::swap(a, b);
    std::swap(c, d);
  }
  if (mode >= 2) return {a - c / 2, b - d / 2, a + c / 2, b + d / 2};  // centre and size
  return {std::min(a, c), std::min(b, d), std::max(a, c), std::max(b, d)};
}

double iou(const Box& p, const Box& q) {
  const double h = std::min(p.y1, q.y1) - std::max(p.y0, q.y0), w = std::min(p.x1, q.x1) - std::max(p.x0, q.x0);
  if (!(h > 0 && w > 0)) return 0.0;
  const double inter = h * w, uni = p.area() + q.area() - inter;
  return uni > 0 ? inter / uni : 0.0;
}

template <class S>
KernelFn nms_kernel(const KernelCtx& c) {
  const ops::NmsAttrs a = typed_attrs<ops::NmsAttrs>(c.node);
  const Shape& ss = c.in[1].shape;
  const int64_t n = ss[0], nb = ss[1], nk = ss[2];
  // per batch item: boxes, scores, classes and the order (B each)
  const size_t slot = (size_t(nb) * (sizeof(Box) + sizeof(double) + 2 * sizeof(int64_t) + 1) + 63) / 64 * 64;
  const int64_t slots = std::min<int64_t>(n, num_threads());
  const size_t scratch = c.scratch(std::max<size_t>(1, slot * size_t(std::max<int64_t>(slots, 1))));
  return [=](const void* const* in, void* const* out) {
    const S* boxes = static_cast<const S*>(in[0]);
    const S* scores = static_cast<const S*>(in[1]);
    int32_t* o = static_cast<int32_t*>(out[0]);
    if (n == 0 || nb == 0) return;
    parallel_for(slots, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        char* base = static_cast<char*>(out[scratch]) + size_t(s) * slot;
        Box* bx = reinterpret_cast<Box*>(base);
        double* sc = reinterpret_cast<double*>(bx + nb);
        int64_t* cls = reinterpret_cast<int64_t*>(sc + nb);
        int64_t* order = cls + nb;
        bool* dead = reinterpret_cast<bool*>(order + nb);
        for (int64_t b = s * n / slots, e = (s + 1) * n / slots; b < e; ++b) {
          int64_t m = 0;  // candidates
          for (int64_t i = 0; i < nb; ++i) {
            const S* sv = scores + (b * nb + i) * nk;
            double best = -std::numeric_limits<double>::infinity();
            int64_t arg = 0;
            bool nan = nk == 0;
            for (int64_t k = 0; k < nk; ++k) {
              const double v = double(Num<S>::ld(sv[k]));
              nan = nan || v != v;
              if (v > best) best = v, arg = k;
            }
            double v[4];
            for (int t = 0; t < 4; ++t) v[t] = double(Num<S>::ld(boxes[(b * nb + i) * 4 + t]));
            bx[i] = box_of(v, a.coordinate_mode);
            sc[i] = best;
            cls[i] = arg;
            dead[i] = false;
            if (!nan && best > a.score_threshold) order[m++] = i;
          }
          std::stable_sort(order, order + m, [&](int64_t p, int64_t q) { return sc[p] > sc[q]; });
          int32_t* ob = o + b * nb;
          int64_t kept = 0;
          for (int64_t r = 0; r < m; ++r) {
            const int64_t i = order[r];
            if (dead[i]) continue;
            ob[kept++] = int32_t(i);
            for (int64_t t = r + 1; t < m; ++t) {
              const int64_t j = order[t];
              if (!dead[j] && (!a.per_class || cls[j] == cls[i]) && iou(bx[i], bx[j]) > a.iou_threshold) dead[j] = true;
            }
          }
          for (int64_t r = kept; r < nb; ++r) ob[r] = -1;
        }
      }
    });
  };
}

}  // namespace

void register_image_kernels() {
  register_kernel("stencil", [](const KernelCtx& c) {
    return dispatch_float(c, "stencil", c.in[0].dtype, [&](auto tag) { return stencil_kernel<decltype(tag)>(c); });
  });
  register_kernel("non_maximum_suppression", [](const KernelCtx& c) {
    return dispatch_float(c, "non_maximum_suppression", c.in[0].dtype,
                          [&](auto tag) { return nms_kernel<decltype(tag)>(c); });
  });
  register_kernel("hamming_distance", [](const KernelCtx& c) -> KernelFn {
    switch (c.in[0].dtype) {
      case DType::Int8: return hamming_for<int8_t>(c);
      case DType::Int16: return hamming_for<int16_t>(c);
      case DType::Int32: return hamming_for<int32_t>(c);
      case DType::Int64: return hamming_for<int64_t>(c);
      case DType::UInt8: return hamming_for<uint8_t>(c);
      case DType::UInt16: return hamming_for<uint16_t>(c);
      case DType::UInt32: return hamming_for<uint32_t>(c);
      default: return hamming_for<uint64_t>(c);
    }
  });
  register_kernel("im_to_col", [](const KernelCtx& c) -> KernelFn {
    const Window v = window_of(typed_attrs<ops::ImToColAttrs>(c.node), c.in[0].shape);
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn { return im_to_col_kernel<decltype(tag)>(v); });
  });
  KernelFactory col_to_im = [](const KernelCtx& c) -> KernelFn {
    const Window v = window_of(typed_attrs<ops::ImToColAttrs>(c.node), c.out[0].shape);
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) return nullptr;  // refused by inference
      else return col_to_im_kernel<S>(v);
    });
  };
  register_kernel("col_to_im", col_to_im);
  register_kernel("im_to_col_gradient", col_to_im);
}

}  // namespace mg::cpu
