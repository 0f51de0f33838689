// CPU kernels of the sort and cumulative families (core/ops/sort.cpp).
//
// Sorting works on lines: the elements along the axis at one (outer, inner) position. Each
// thread copies a line's keys with their positions into its own slot of scratch memory and
// sorts them with the position as the tie-break, which is a stable order without
// std::stable_sort's temporary allocation (top_k / bottom_k sort only the first k). Keys of up
// to 32 bits are packed with the position into one uint64. Scans walk
// the axis with a block of up to 256 accumulators of the inner dims at a time (contiguous
// loads that vectorise).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/sort_attrs.h"

namespace mg::cpu {

namespace {

// The iteration space of one axis: outer x n x inner, row-major.
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
};

Lines lines_of(const Shape& s, int64_t axis) {
  Lines l;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) {
    if (d < axis) l.outer *= s[size_t(d)];
    else if (d == axis) l.n = s[size_t(d)];
    else l.inner *= s[size_t(d)];
  }
  return l;
}

// ---------------- sort, arg_sort, top_k, bottom_k ----------------

template <class S>
struct Keyed {
  typename Num<S>::C key;
  int32_t pos;
};

// NaN above everything (floats); a strict weak order on keys.
template <class C>
inline bool key_less(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return false;
    if (b != b) return true;
  }
  return a < b;
}

template <class S, bool Desc>
inline bool before(const Keyed<S>& p, const Keyed<S>& q) {
  if (Desc ? key_less(q.key, p.key) : key_less(p.key, q.key)) return true;
  if (Desc ? key_less(p.key, q.key) : key_less(q.key, p.key)) return false;
  return p.pos < q.pos;
}

// Keys wider than 32 bits: (key, position) pairs, the position breaking ties.
template <class S, bool Desc>
struct PairOrder {
  using E = Keyed<S>;
  static E make(S v, int32_t pos) { return {Num<S>::ld(v), pos}; }
  static bool less(const E& a, const E& b) { return before<S, Desc>(a, b); }
  static int32_t pos(const E& e) { return e.pos; }
};

// Keys of at most 32 bits: an order-preserving uint32 (NaN on top, -0.0 equal to 0.0,
// complemented for descending) above the position in one uint64, so a plain integer sort gives
// the stable order (and runs several times faster than the pairs).
template <class S, bool Desc>
struct PackedOrder {
  using E = uint64_t;
  static E make(S v, int32_t pos) {
    using C = typename Num<S>::C;
    C c = Num<S>::ld(v);
    uint32_t u;
    if constexpr (std::is_same_v<C, float>) {
      if (c != c) {
        u = 0xFFFFFFFFu;
      } else {
        if (c == 0) c = 0;  // -0.0 ties with 0.0
        uint32_t b;
        std::memcpy(&b, &c, 4);
        u = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
      }
    } else if constexpr (std::is_signed_v<C>) {
      u = uint32_t(int32_t(c)) ^ 0x80000000u;
    } else {
      u = uint32_t(c);
    }
    if (Desc) u = ~u;
    return (uint64_t(u) << 32) | uint32_t(pos);
  }
  static bool less(E a, E b) { return a < b; }
  static int32_t pos(E e) { return int32_t(uint32_t(e)); }
};

template <class S, bool Desc>
using OrderOf = std::conditional_t<sizeof(typename Num<S>::C) <= 4, PackedOrder<S, Desc>, PairOrder<S, Desc>>;

struct SortPlan {
  Lines l;
  int64_t k = 0;             // elements kept per line (n for sort / arg_sort)
  int values = -1;           // output index of the values, or -1
  int indices = -1;          // output index of the int32 indices, or -1
  int64_t slots = 0;         // lines sorted at once (one scratch slot each)
  size_t scratch = 0;        // index of the scratch buffer in `out`
};

template <class S, bool Desc>
KernelFn sort_lines(SortPlan p) {
  return [p](const void* const* in, void* const* out) {
    const Lines& l = p.l;
    const int64_t lines = l.outer * l.inner;
    if (lines == 0 || l.n == 0 || p.k == 0) return;
    const S* x = static_cast<const S*>(in[0]);
    S* vals = p.values >= 0 ? static_cast<S*>(out[p.values]) : nullptr;
    int32_t* idx = p.indices >= 0 ? static_cast<int32_t*>(out[p.indices]) : nullptr;
    using O = OrderOf<S, Desc>;
    using E = typename O::E;
    E* scratch = static_cast<E*>(out[p.scratch]);
    parallel_for(p.slots, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        E* buf = scratch + t * l.n;
        for (int64_t line = t * lines / p.slots, end = (t + 1) * lines / p.slots; line < end; ++line) {
          const int64_t o = line / l.inner, i = line % l.inner;
          const S* xl = x + o * l.n * l.inner + i;
          for (int64_t j = 0; j < l.n; ++j) buf[j] = O::make(xl[j * l.inner], int32_t(j));
          auto cmp = [](const E& u, const E& v) { return O::less(u, v); };
          if (p.k < l.n) std::partial_sort(buf, buf + p.k, buf + l.n, cmp);
          else std::sort(buf, buf + l.n, cmp);
          const int64_t ob = o * p.k * l.inner + i;
          for (int64_t j = 0; j < p.k; ++j) {
            const int32_t at = O::pos(buf[j]);
            if (vals) vals[ob + j * l.inner] = xl[int64_t(at) * l.inner];  // the exact element
            if (idx) idx[ob + j * l.inner] = at;
          }
        }
      }
    });
  };
}

KernelFn make_sort(const KernelCtx& c, int64_t axis, bool desc, int64_t k, int values, int indices) {
  SortPlan p;
  p.l = lines_of(c.in[0].shape, axis);
  p.k = k;
  p.values = values;
  p.indices = indices;
  p.slots = std::min<int64_t>(num_threads(), p.l.outer * p.l.inner);
  return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    p.scratch = c.scratch(size_t(std::max<int64_t>(p.slots, 0) * p.l.n) *
                          std::max(sizeof(typename OrderOf<S, true>::E), sizeof(typename OrderOf<S, false>::E)));
    return desc ? sort_lines<S, true>(p) : sort_lines<S, false>(p);
  });
}

// ---------------- cumulative scans ----------------

enum ScanOp { kSum, kProd, kMin, kMax };

template <class S, int Op>
struct ScanPolicy {
  static constexpr bool F = is_float_storage<S>;
  using C = typename Num<S>::C;
  // sums and products: floats in double, integers in uint64 (wraps like the dtype)
  using Acc = std::conditional_t<Op == kSum || Op == kProd, std::conditional_t<F, double, uint64_t>, C>;
  static Acc identity() {
    if constexpr (Op == kSum) return Acc(0);
    else if constexpr (Op == kProd) return Acc(1);
    else if constexpr (F) return Op == kMin ? std::numeric_limits<C>::infinity() : -std::numeric_limits<C>::infinity();
    else return Op == kMin ? std::numeric_limits<C>::max() : std::numeric_limits<C>::lowest();
  }
  static Acc load(S v) {
    if constexpr (Op == kSum || Op == kProd) {
      if constexpr (F) return double(Num<S>::ld(v));
      else return uint64_t(v);
    } else {
      return Num<S>::ld(v);
    }
  }
  static void add(Acc& a, Acc v) {
    if constexpr (Op == kSum) a += v;
    else if constexpr (Op == kProd) a *= v;
    else if constexpr (F) {  // NaN propagates
      if (v != v || (Op == kMax ? v > a : v < a)) a = v;
    } else {
      a = (Op == kMax ? v > a : v < a) ? v : a;
    }
  }
  static S store(Acc a) {
    if constexpr (F) return Num<S>::st(C(a));
    else return S(a);
  }
};

template <class S, int Op>
KernelFn scan_kernel(Lines l, bool exclusive, bool reverse) {
  return [l, exclusive, reverse](const void* const* in, void* const* out) {
    using P = ScanPolicy<S, Op>;
    constexpr int64_t B = 256;
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    const int64_t nb = (l.inner + B - 1) / B, tasks = l.outer * nb;
    if (tasks == 0 || l.n == 0) return;
    parallel_for(tasks, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, l.n * std::min(l.inner, B))),
                 [&](int64_t tb, int64_t te) {
                   typename P::Acc acc[B];
                   for (int64_t t = tb; t < te; ++t) {
                     const int64_t o = t / nb, jb = (t % nb) * B, len = std::min(B, l.inner - jb);
                     for (int64_t j = 0; j < len; ++j) acc[j] = P::identity();
                     for (int64_t s = 0; s < l.n; ++s) {
                       const int64_t off = (o * l.n + (reverse ? l.n - 1 - s : s)) * l.inner + jb;
                       const S* xr = x + off;
                       S* yr = y + off;
                       if (exclusive) {
                         for (int64_t j = 0; j < len; ++j) {
                           yr[j] = P::store(acc[j]);
                           P::add(acc[j], P::load(xr[j]));
                         }
                       } else {
                         for (int64_t j = 0; j < len; ++j) {
                           P::add(acc[j], P::load(xr[j]));
                           yr[j] = P::store(acc[j]);
                         }
                       }
                     }
                   }
                 });
  };
}

template <int Op>
KernelFactory scan_factory(const char* name) {
  return [name](const KernelCtx& c) -> KernelFn {
    const ops::CumulativeAttrs& a = typed_attrs<ops::CumulativeAttrs>(c.node);
    Lines l = lines_of(c.in[0].shape, a.axis);
    return dispatch_dtype(c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) {
        raise(ErrorKind::Type, name, c.node.name, "no CPU kernel for dtype bool");
      } else {
        return scan_kernel<S, Op>(l, a.exclusive, a.reverse);
      }
    });
  };
}

}  // namespace

void register_sort_kernels() {
  register_kernel("sort", [](const KernelCtx& c) {
    const ops::SortAttrs& a = typed_attrs<ops::SortAttrs>(c.node);
    return make_sort(c, a.axis, a.descending, c.in[0].shape[size_t(a.axis)], 0, -1);
  });
  register_kernel("arg_sort", [](const KernelCtx& c) {
    const ops::SortAttrs& a = typed_attrs<ops::SortAttrs>(c.node);
    return make_sort(c, a.axis, a.descending, c.in[0].shape[size_t(a.axis)], -1, 0);
  });
  register_kernel("top_k", [](const KernelCtx& c) {
    const ops::TopKAttrs& a = typed_attrs<ops::TopKAttrs>(c.node);
    return make_sort(c, a.axis, true, a.k, 0, 1);
  });
  register_kernel("bottom_k", [](const KernelCtx& c) {
    const ops::TopKAttrs& a = typed_attrs<ops::TopKAttrs>(c.node);
    return make_sort(c, a.axis, false, a.k, 0, 1);
  });
  register_kernel("cumulative_sum", scan_factory<kSum>("cumulative_sum"));
  register_kernel("cumulative_product", scan_factory<kProd>("cumulative_product"));
  register_kernel("cumulative_minimum", scan_factory<kMin>("cumulative_minimum"));
  register_kernel("cumulative_maximum", scan_factory<kMax>("cumulative_maximum"));
}

}  // namespace mg::cpu
