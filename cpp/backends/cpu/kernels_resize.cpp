// CPU kernels for resize and resize_gradient (conventions in core/ops/resize.cpp).
//
// The tensor is viewed as (outer, H, W, inner) for every layout. The factory precomputes, per
// output row and column, the source indices and the bilinear weight (nearest: one index,
// rounded in exact integer arithmetic). resize runs in parallel over output rows;
// resize_gradient scatters in parallel over the outer planes, which never overlap.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/resize_attrs.h"

namespace mg::cpu {

namespace {

struct ResizePlan : ops::ResizeView {
  bool bilinear = true;
};

ResizePlan make_plan(const KernelCtx& c, const Shape& src, const Shape& dst) {
  const ops::ResizeAttrs& a = typed_attrs<ops::ResizeAttrs>(c.node);
  ResizePlan p;
  static_cast<ops::ResizeView&>(p) = ops::resize_plan(a, src, dst, c.node.name);
  p.bilinear = a.bilinear;
  return p;
}

template <class S>
KernelFn resize_forward(std::shared_ptr<const ResizePlan> pp) {
  return [pp](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const ResizePlan& p = *pp;
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    const int64_t rows = p.outer * p.OH, ci = p.inner;
    if (rows == 0 || p.OW == 0 || ci == 0 || p.H == 0 || p.W == 0) return;
    parallel_for(rows, std::max<int64_t>(1, 16384 / (p.OW * ci)), [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        const int64_t o = r / p.OH, oh = r % p.OH;
        const S* xo = x + o * p.H * p.W * ci;
        S* yr = y + r * p.OW * ci;
        if (!p.bilinear) {
          const S* xrow = xo + p.y.i0[size_t(oh)] * p.W * ci;
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            const S* xs = xrow + p.x.i0[size_t(ow)] * ci;
            for (int64_t k = 0; k < ci; ++k) yr[ow * ci + k] = xs[k];
          }
          continue;
        }
        const S* r0 = xo + p.y.i0[size_t(oh)] * p.W * ci;
        const S* r1 = xo + p.y.i1[size_t(oh)] * p.W * ci;
        const C h1 = C(p.y.w1[size_t(oh)]), h0 = C(1) - h1;
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const int64_t c0 = p.x.i0[size_t(ow)] * ci, c1 = p.x.i1[size_t(ow)] * ci;
          const C w1 = C(p.x.w1[size_t(ow)]), w0 = C(1) - w1;
          for (int64_t k = 0; k < ci; ++k) {
            C v = h0 * (w0 * Num<S>::ld(r0[c0 + k]) + w1 * Num<S>::ld(r0[c1 + k])) +
                  h1 * (w0 * Num<S>::ld(r1[c0 + k]) + w1 * Num<S>::ld(r1[c1 + k]));
            yr[ow * ci + k] = Num<S>::st(v);
          }
        }
      }
    });
  };
}

template <class S>
KernelFn resize_backward(std::shared_ptr<const ResizePlan> pp) {
  return [pp](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const ResizePlan& p = *pp;
    const S* dy = static_cast<const S*>(in[0]);
    S* dx = static_cast<S*>(out[0]);
    const int64_t ci = p.inner, plane = p.H * p.W * ci, oplane = p.OH * p.OW * ci;
    const int64_t total = p.outer * plane;
    for (int64_t i = 0; i < total; ++i) dx[i] = Num<S>::st(C(0));
    if (total == 0 || oplane == 0) return;
    auto add = [](S& t, C v) { t = Num<S>::st(Num<S>::ld(t) + v); };
    parallel_for(p.outer, std::max<int64_t>(1, 16384 / oplane), [&](int64_t ob, int64_t oe) {
      for (int64_t o = ob; o < oe; ++o) {
        S* xo = dx + o * plane;
        const S* g = dy + o * oplane;
        for (int64_t oh = 0; oh < p.OH; ++oh) {
          if (!p.bilinear) {
            S* xrow = xo + p.y.i0[size_t(oh)] * p.W * ci;
            for (int64_t ow = 0; ow < p.OW; ++ow) {
              S* xs = xrow + p.x.i0[size_t(ow)] * ci;
              const S* gs = g + (oh * p.OW + ow) * ci;
              for (int64_t k = 0; k < ci; ++k) add(xs[k], Num<S>::ld(gs[k]));
            }
            continue;
          }
          S* r0 = xo + p.y.i0[size_t(oh)] * p.W * ci;
          S* r1 = xo + p.y.i1[size_t(oh)] * p.W * ci;
          const C h1 = C(p.y.w1[size_t(oh)]), h0 = C(1) - h1;
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            const int64_t c0 = p.x.i0[size_t(ow)] * ci, c1 = p.x.i1[size_t(ow)] * ci;
            const C w1 = C(p.x.w1[size_t(ow)]), w0 = C(1) - w1;
            const S* gs = g + (oh * p.OW + ow) * ci;
            for (int64_t k = 0; k < ci; ++k) {
              const C v = Num<S>::ld(gs[k]);
              add(r0[c0 + k], h0 * w0 * v);
              add(r0[c1 + k], h0 * w1 * v);
              add(r1[c0 + k], h1 * w0 * v);
              add(r1[c1 + k], h1 * w1 * v);
            }
          }
        }
      }
    });
  };
}

}  // namespace

void register_resize_kernels() {
  register_kernel("resize", [](const KernelCtx& c) -> KernelFn {
    auto plan = std::make_shared<const ResizePlan>(make_plan(c, c.in[0].shape, c.out[0].shape));
    return dispatch_float(c, "resize", c.in[0].dtype, [&](auto tag) { return resize_forward<decltype(tag)>(plan); });
  });
  register_kernel("resize_gradient", [](const KernelCtx& c) -> KernelFn {
    auto plan = std::make_shared<const ResizePlan>(make_plan(c, c.in[1].shape, c.in[0].shape));
    return dispatch_float(c, "resize", c.in[0].dtype, [&](auto tag) { return resize_backward<decltype(tag)>(plan); });
  });
}

}  // namespace mg::cpu
