// CPU kernels for the pooling family (see core/ops/pooling.cpp for the conventions).
//
// One plan serves every op: the source is viewed as (batch, spatial...) with the k pooled dims
// trailing. Per pooled dim and output coordinate the factory precomputes the range of window
// taps that fall inside the input (first tap's offset, tap count) and the count of taps inside
// the padded input (the include_zero_pad divisor), so a run only walks valid taps in row-major
// window order. Forward ops run in parallel over output rows; the scatters (gradients) run in
// parallel over batch planes, which never overlap.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/pooling_attrs.h"

namespace mg::cpu {

namespace {

constexpr int kMaxK = 8;

struct PoolPlan {
  int k = 0;
  int64_t batch = 0, in_plane = 1, out_plane = 1, out_last = 1, window = 1;
  std::array<int64_t, kMaxK> out{}, step{};        // output sizes; dilation * spatial stride
  std::vector<std::vector<int64_t>> first, ntaps, npad;  // per dim, per output coordinate
};

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

PoolPlan make_plan(const KernelCtx& c, const Shape& src) {
  const ops::PoolSpec& s = typed_attrs<ops::PoolingAttrs>(c.node).window;
  PoolPlan p;
  p.k = int(s.k());
  if (p.k < 1 || p.k > kMaxK || src.size() < s.k())
    raise(ErrorKind::Runtime, "pooling", c.node.name, "bad pooling plan");
  const size_t lead = src.size() - s.k();
  p.batch = 1;
  for (size_t i = 0; i < lead; ++i) p.batch *= src[i];
  std::vector<int64_t> in(src.begin() + int64_t(lead), src.end());
  std::vector<ops::PoolDim> dims;
  std::string err = ops::pool_dims(s, in, dims);
  if (!err.empty()) raise(ErrorKind::Value, "pooling", c.node.name, err);
  std::vector<int64_t> stride(s.k(), 1);
  for (int d = p.k - 2; d >= 0; --d) stride[size_t(d)] = stride[size_t(d) + 1] * in[size_t(d) + 1];
  p.first.resize(s.k());
  p.ntaps.resize(s.k());
  p.npad.resize(s.k());
  for (size_t d = 0; d < s.k(); ++d) {
    const int64_t K = s.kernel[d], st = s.stride[d], dl = s.dilation[d], n = in[d];
    p.out[d] = dims[d].out;
    p.step[d] = dl * stride[d];
    p.in_plane *= n;
    p.out_plane *= dims[d].out;
    p.window = p.window > (int64_t(1) << 40) / K ? (int64_t(1) << 40) : p.window * K;  // saturating: a grain hint
    for (int64_t o = 0; o < dims[d].out; ++o) {
      const int64_t start = o * st - dims[d].before;
      int64_t t0 = start < 0 ? std::min(K, ceil_div(-start, dl)) : 0;
      int64_t t1 = start < n ? std::min(K, ceil_div(n - start, dl)) : 0;
      p.first[d].push_back((start + t0 * dl) * stride[d]);
      p.ntaps[d].push_back(std::max<int64_t>(0, t1 - t0));
      p.npad[d].push_back(std::max<int64_t>(0, std::min(K, ceil_div(n + dims[d].after - start, dl))));
    }
  }
  p.out_last = p.out[size_t(p.k - 1)];
  return p;
}

// Calls f(offset) for each valid tap of the window at output coordinates oi, row-major.
template <class F>
inline void for_window(const PoolPlan& p, const int64_t* oi, F&& f) {
  const int k = p.k;
  int64_t n[kMaxK], cnt[kMaxK], off = 0;
  for (int d = 0; d < k; ++d) {
    n[d] = p.ntaps[size_t(d)][size_t(oi[d])];
    if (n[d] <= 0) return;
    off += p.first[size_t(d)][size_t(oi[d])];
    cnt[d] = 0;
  }
  const int64_t nl = n[k - 1], sl = p.step[size_t(k - 1)];
  for (;;) {
    int64_t o = off;
    for (int64_t j = 0; j < nl; ++j, o += sl) f(o);
    int d = k - 2;
    for (; d >= 0; --d) {
      off += p.step[size_t(d)];
      if (++cnt[d] < n[d]) break;
      off -= p.step[size_t(d)] * n[d];
      cnt[d] = 0;
    }
    if (d < 0) return;
  }
}

// Tap count of a window (in double: padding-inclusive counts of huge windows overflow int64).
double divisor(const PoolPlan& p, const int64_t* oi, bool include_pad) {
  double r = 1;
  for (int d = 0; d < p.k; ++d) r *= double((include_pad ? p.npad : p.ntaps)[size_t(d)][size_t(oi[d])]);
  return r;
}

// First maximum in window order; a NaN wins (the last one), as PyTorch. -1 for an empty window.
template <class S>
inline int64_t argmax(const PoolPlan& p, const S* x, const int64_t* oi, typename Num<S>::C& best) {
  using C = typename Num<S>::C;
  int64_t arg = -1;
  C b = -std::numeric_limits<C>::infinity();
  bool first = true;
  for_window(p, oi, [&](int64_t off) {  // branch-free select: random data mispredicts
    const C v = Num<S>::ld(x[off]);
    const bool take = first | (v > b) | (v != v);
    first = false;
    b = take ? v : b;
    arg = take ? off : arg;
  });
  best = b;
  return arg;
}

// body(b, oi, out_index) for every output element, in parallel over rows of the last dim.
template <class Body>
void for_outputs(const PoolPlan& p, Body&& body) {
  if (p.batch == 0 || p.out_plane == 0) return;
  const int64_t rows_per_batch = p.out_plane / p.out_last;
  const int64_t rows = p.batch * rows_per_batch;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.out_last) / p.window);
  parallel_for(rows, grain, [&](int64_t rb, int64_t re) {
    int64_t oi[kMaxK];
    for (int64_t r = rb; r < re; ++r) {
      int64_t b = r / rows_per_batch, rem = r % rows_per_batch;
      for (int d = p.k - 2; d >= 0; --d) {
        oi[d] = rem % p.out[size_t(d)];
        rem /= p.out[size_t(d)];
      }
      int64_t o = r * p.out_last;
      for (int64_t j = 0; j < p.out_last; ++j, ++o) {
        oi[p.k - 1] = j;
        body(b, oi, o);
      }
    }
  });
}

// body(b, oi, out_index) for every output of each batch plane, in parallel over planes.
template <class Body>
void for_planes(const PoolPlan& p, Body&& body) {
  if (p.batch == 0 || p.out_plane == 0) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / p.out_plane / p.window);
  parallel_for(p.batch, grain, [&](int64_t bb, int64_t be) {
    int64_t oi[kMaxK];
    for (int64_t b = bb; b < be; ++b) {
      for (int d = 0; d < p.k; ++d) oi[d] = 0;
      for (int64_t j = 0; j < p.out_plane; ++j) {
        body(b, oi, b * p.out_plane + j);
        for (int d = p.k - 1; d >= 0; --d) {  // odometer step
          if (++oi[d] < p.out[size_t(d)]) break;
          oi[d] = 0;
        }
      }
    }
  });
}

template <class S>
KernelFn max_forward(std::shared_ptr<const PoolPlan> pp, bool with_indices, DType idx) {
  return [pp, with_indices, idx](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const PoolPlan& p = *pp;
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    void* ind = with_indices ? out[1] : nullptr;
    for_outputs(p, [&](int64_t b, const int64_t* oi, int64_t o) {
      C best;
      int64_t a = argmax(p, x + b * p.in_plane, oi, best);
      y[o] = Num<S>::st(best);
      if (ind) {
        if (idx == DType::Int32) static_cast<int32_t*>(ind)[o] = int32_t(a);
        else static_cast<int64_t*>(ind)[o] = a;
      }
    });
  };
}

template <class S>
KernelFn max_gather(std::shared_ptr<const PoolPlan> pp) {
  return [pp](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const PoolPlan& p = *pp;
    const S* x = static_cast<const S*>(in[0]);
    const S* src = static_cast<const S*>(in[1]);
    S* y = static_cast<S*>(out[0]);
    for_outputs(p, [&](int64_t b, const int64_t* oi, int64_t o) {
      C best;
      int64_t a = argmax(p, src + b * p.in_plane, oi, best);
      y[o] = a < 0 ? Num<S>::st(C(0)) : x[b * p.in_plane + a];
    });
  };
}

template <class S>
KernelFn max_scatter(std::shared_ptr<const PoolPlan> pp) {
  return [pp](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const PoolPlan& p = *pp;
    const S* dy = static_cast<const S*>(in[0]);
    const S* src = static_cast<const S*>(in[1]);
    S* dx = static_cast<S*>(out[0]);
    const int64_t total = p.batch * p.in_plane;
    for (int64_t i = 0; i < total; ++i) dx[i] = Num<S>::st(C(0));
    for_planes(p, [&](int64_t b, const int64_t* oi, int64_t o) {
      C best;
      int64_t a = argmax(p, src + b * p.in_plane, oi, best);
      if (a >= 0) {
        S& t = dx[b * p.in_plane + a];
        t = Num<S>::st(Num<S>::ld(t) + Num<S>::ld(dy[o]));
      }
    });
  };
}

// mode: 0 sum, 1 average over taps inside the input, 2 average including padding taps
template <class S>
KernelFn linear_forward(std::shared_ptr<const PoolPlan> pp, int mode) {
  return [pp, mode](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const PoolPlan& p = *pp;
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    for_outputs(p, [&](int64_t b, const int64_t* oi, int64_t o) {
      const S* xb = x + b * p.in_plane;
      C acc = C(0);
      for_window(p, oi, [&](int64_t off) { acc += Num<S>::ld(xb[off]); });
      if (mode) {
        double dv = divisor(p, oi, mode == 2);
        acc = dv > 0 ? acc / C(dv) : C(0);
      }
      y[o] = Num<S>::st(acc);
    });
  };
}

template <class S>
KernelFn linear_scatter(std::shared_ptr<const PoolPlan> pp, int mode) {
  return [pp, mode](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const PoolPlan& p = *pp;
    const S* dy = static_cast<const S*>(in[0]);
    S* dx = static_cast<S*>(out[0]);
    const int64_t total = p.batch * p.in_plane;
    for (int64_t i = 0; i < total; ++i) dx[i] = Num<S>::st(C(0));
    for_planes(p, [&](int64_t b, const int64_t* oi, int64_t o) {
      C g = Num<S>::ld(dy[o]);
      if (mode) {
        double dv = divisor(p, oi, mode == 2);
        if (dv <= 0) return;
        g = g / C(dv);
      }
      S* db = dx + b * p.in_plane;
      for_window(p, oi, [&](int64_t off) { db[off] = Num<S>::st(Num<S>::ld(db[off]) + g); });
    });
  };
}

// 0: sum, 1: average over the taps inside the input, 2: inside the padded input.
int linear_mode(const Node& n) {
  switch (typed_attrs<ops::PoolingAttrs>(n).divisor) {
    case ops::PoolDivisor::None: return 0;
    case ops::PoolDivisor::ValidTaps: return 1;
    case ops::PoolDivisor::PaddedTaps: return 2;
  }
  return 0;
}

}  // namespace

void register_pooling_kernels() {
  auto fwd_max = [](bool with_indices) {
    return [with_indices](const KernelCtx& c) -> KernelFn {
      auto plan = std::make_shared<const PoolPlan>(make_plan(c, c.in[0].shape));
      DType idx = with_indices ? c.out[1].dtype : DType::Int32;
      return dispatch_float(c, "pooling", c.in[0].dtype,
                            [&](auto tag) { return max_forward<decltype(tag)>(plan, with_indices, idx); });
    };
  };
  register_kernel("max_pooling_nd", fwd_max(false));
  register_kernel("max_pooling_nd_return_indices", fwd_max(true));
  register_kernel("max_pooling_nd_gather", [](const KernelCtx& c) -> KernelFn {
    auto plan = std::make_shared<const PoolPlan>(make_plan(c, c.in[1].shape));
    return dispatch_float(c, "pooling", c.in[0].dtype, [&](auto tag) { return max_gather<decltype(tag)>(plan); });
  });
  register_kernel("max_pooling_nd_gradient", [](const KernelCtx& c) -> KernelFn {
    auto plan = std::make_shared<const PoolPlan>(make_plan(c, c.in[1].shape));
    return dispatch_float(c, "pooling", c.in[0].dtype, [&](auto tag) { return max_scatter<decltype(tag)>(plan); });
  });
  auto fwd_linear = [](const KernelCtx& c) -> KernelFn {
    auto plan = std::make_shared<const PoolPlan>(make_plan(c, c.in[0].shape));
    int mode = linear_mode(c.node);
    return dispatch_float(c, "pooling", c.in[0].dtype, [&](auto tag) { return linear_forward<decltype(tag)>(plan, mode); });
  };
  auto bwd_linear = [](const KernelCtx& c) -> KernelFn {
    auto plan = std::make_shared<const PoolPlan>(make_plan(c, c.in[1].shape));
    int mode = linear_mode(c.node);
    return dispatch_float(c, "pooling", c.in[0].dtype, [&](auto tag) { return linear_scatter<decltype(tag)>(plan, mode); });
  };
  register_kernel("avg_pooling_nd", fwd_linear);
  register_kernel("sum_pooling_nd", fwd_linear);
  register_kernel("avg_pooling_nd_gradient", bwd_linear);
  register_kernel("sum_pooling_nd_gradient", bwd_linear);
}

}  // namespace mg::cpu
