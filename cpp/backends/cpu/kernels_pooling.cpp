// CPU kernels for the pooling family (see core/ops/pooling.cpp for the conventions).
//
// One plan serves every op: the source is viewed as (batch, spatial...) with the k pooled dims
// trailing. Per pooled dim and output coordinate the factory precomputes the range of window
// taps that fall inside the input (first tap's offset, tap count) and the count of taps inside
// the padded input (the include_zero_pad divisor), so a run only walks valid taps in row-major
// window order. Max (without indices), sum and average pooling stream instead: per output row
// they add whole strided source rows into a tile of accumulators, one innermost tap at a time
// (stream_forward). Forward ops run in parallel over output rows; the scatters (gradients)
// run in parallel over batch planes, which never overlap.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/avx2_pairs.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/isa_target.h"
#include "core/ops/pooling_attrs.h"

#if MG_CPU_X86
#include <immintrin.h>
#endif

namespace mg::cpu {

namespace {

constexpr int kMaxK = 8;

struct PoolPlan {
  int k = 0;
  int64_t batch = 0, in_plane = 1, out_plane = 1, out_last = 1, window = 1;
  std::array<int64_t, kMaxK> out{}, step{};        // output sizes; dilation * spatial stride
  std::vector<std::vector<int64_t>> first, ntaps, npad;  // per dim, per output coordinate
  // innermost dim, per tap t: outputs [tlo, thi) read source tsrc + j * sL (the row streams)
  std::vector<int64_t> tlo, thi, tsrc;
  int64_t sL = 1;
  int64_t in_last = 1;      // innermost source extent
  bool pool_rows = false;   // 2-d float32 max: pool_rows_fn's path (MPSGRAPH_CPU_POOL_ROWS=0: off)
  bool pairs = false;       // pool_rows with 2 taps at stride 2 unpadded: rows of 2 by pool_pairs_fn
  // pool_rows at stride 2 with consecutive taps (ResNet's 3x3 stem pool, padded): rows by pool_s2_fn
  // (its left padding is -tsrc[0], its taps tsrc.size())
  bool s2 = false;
  // s2 rows 16 outputs a vector on AVX-512 CPUs (MPSGRAPH_CPU_POOL_S2_AVX512=0: 8, the AVX2 loop)
  bool s2_avx512 = false;
  int64_t s2_len = 0;  // the padded row's floats
  // pool_rows on one image (leading dims (1, C)): the threads take bands of output rows of
  // every plane, not planes, so the layers after it, which split positions (Winograd's tile
  // rows, 1x1 layers' column tiles), read rows their own core wrote: ResNet-18 at batch 1, its
  // first two 56x56 convolutions 1.05-1.1x in the network, the pool level
  // (MPSGRAPH_CPU_POOL_BANDS=0: planes)
  bool bands = false;
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
  const size_t L = s.k() - 1;
  const int64_t K = s.kernel[L], st = s.stride[L], dl = s.dilation[L], n = in[L], before = dims[L].before;
  p.sL = st;
  p.in_last = n;
  p.pool_rows = p.k == 2 && !switched_off("MPSGRAPH_CPU_POOL_ROWS");
  for (int64_t t = 0; t < K; ++t) {  // output j reads source j * st - before + t * dl when inside [0, n)
    const int64_t off = t * dl - before;
    const int64_t lo = std::min(p.out_last, off >= 0 ? 0 : ceil_div(-off, st));
    const int64_t hi = std::max(lo, std::min(p.out_last, n - off <= 0 ? 0 : ceil_div(n - off, st)));
    p.tlo.push_back(lo);
    p.thi.push_back(hi);
    p.tsrc.push_back(off);
  }
  // MPSGRAPH_CPU_POOL_PAIRS=0 (read here) keeps pool_rows' general row
  p.pairs = p.pool_rows && st == 2 && K == 2 && p.tsrc[0] == 0 && p.tsrc[1] == 1 && p.tlo[0] == 0 && p.tlo[1] == 0 &&
            p.thi[0] == p.out_last && p.thi[1] == p.out_last && !switched_off("MPSGRAPH_CPU_POOL_PAIRS");
  // MPSGRAPH_CPU_POOL_S2=0 (read here) keeps pool_rows' general row
  p.s2 = p.pool_rows && !p.pairs && st == 2 && dl == 1 && K >= 2 && K <= 4 && before >= 0 && before < K &&
         p.out_last > 0 && !switched_off("MPSGRAPH_CPU_POOL_S2");
  // output j's taps at 2j + t (t < K) of the row padded by `before` -infinities in front; whole
  // vectors of 16 outputs read up to 2 * 16 * ceil(OL / 16) + 16 floats
  if (p.s2) p.s2_len = std::max(before + n, 2 * (p.out_last + 15) / 16 * 16 + 16);
  p.s2_avx512 = p.s2 && best_isa() == Isa::Avx512 && !switched_off("MPSGRAPH_CPU_POOL_S2_AVX512");
  p.bands = p.pool_rows && lead == 2 && src[0] == 1 && p.out[0] >= 4 && num_threads() > 1 &&
            !switched_off("MPSGRAPH_CPU_POOL_BANDS");
  return p;
}

// Steps the odometer over the window taps of the outer dims [0, k-1) (n taps each, counters
// cnt, source offset off); false once it wraps around.
inline bool next_outer_tap(const PoolPlan& p, const int64_t* n, int64_t* cnt, int64_t& off) {
  for (int d = p.k - 2; d >= 0; --d) {
    off += p.step[size_t(d)];
    if (++cnt[d] < n[d]) return true;
    off -= p.step[size_t(d)] * n[d];
    cnt[d] = 0;
  }
  return false;
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
    if (!next_outer_tap(p, n, cnt, off)) return;
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

// 2-d float32 max pooling, one output row: the window's n source rows (step apart from x) are
// reduced to one row m with elementwise maxima (contiguous: full vectors), then each innermost
// tap takes its strided maxima from m alone, instead of from every source row. A NaN wins as in
// the streaming loop (so does the first of equal values; a tie of -0 and +0 may pick the other).
// m[0, IL) = the elementwise maxima of the n rows of IL floats step apart from x (a NaN wins,
// so does the first of equal values); contiguous, so it vectorises where it is inlined.
inline void window_rows_max(const float* x, int64_t step, int64_t n, int64_t IL, float* __restrict m) {
  std::memcpy(m, x, size_t(IL) * sizeof(float));
  for (int64_t q = 1; q < n; ++q) {
    const float* __restrict xr = x + q * step;
    for (int64_t i = 0; i < IL; ++i) {
      const float v = xr[i], a = m[i];
      m[i] = (v > a || v != v) ? v : a;
    }
  }
}

template <int SL>
inline void pool_row_body(const PoolPlan& p, const float* x, int64_t step, int64_t n, float* __restrict m,
                          float* __restrict y) {
  const int64_t OL = p.out_last, sl = SL > 0 ? SL : p.sL;
  window_rows_max(x, step, n, p.in_last, m);
  for (int64_t j = 0; j < OL; ++j) y[j] = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < p.tlo.size(); ++t) {
    const float* __restrict src = m + p.tsrc[t];
    for (int64_t j = p.tlo[t]; j < p.thi[t]; ++j) {
      const float v = src[j * sl], a = y[j];
      y[j] = (v > a || v != v) ? v : a;
    }
  }
}

using PoolRowFn = void (*)(const PoolPlan&, const float*, int64_t, int64_t, float*, float*);
template <int SL>
void pool_row_generic(const PoolPlan& p, const float* x, int64_t step, int64_t n, float* m, float* y) {
  pool_row_body<SL>(p, x, step, n, m, y);
}
#if MG_CPU_X86
template <int SL>
MG_TARGET_AVX2 void pool_row_avx2(const PoolPlan& p, const float* x, int64_t step, int64_t n, float* m, float* y) {
  pool_row_body<SL>(p, x, step, n, m, y);
}
#endif
PoolRowFn pool_row_fn(int64_t sL) {
#if MG_CPU_X86
  if (best_isa() != Isa::Generic) return sL == 1 ? pool_row_avx2<1> : sL == 2 ? pool_row_avx2<2> : pool_row_avx2<0>;
#endif
  return sL == 1 ? pool_row_generic<1> : sL == 2 ? pool_row_generic<2> : pool_row_generic<0>;
}

// 2x2 windows at stride 2 along the row (the small CNN's pools): y[j] = the maximum of x0[2j],
// x0[2j + 1], x1[2j], x1[2j + 1] chosen as pool_row_body chooses (the two rows first, then the
// two columns; a NaN wins, so does the first of equal values): the same bits in one pass.
inline float pick_max(float a, float v) { return (v > a || v != v) ? v : a; }
void pool_pairs_generic(const float* x0, const float* x1, float* y, int64_t OL) {
  for (int64_t j = 0; j < OL; ++j)
    y[j] = pick_max(pick_max(x0[2 * j], x1[2 * j]), pick_max(x0[2 * j + 1], x1[2 * j + 1]));
}
#if MG_CPU_X86
MG_TARGET_AVX2 inline __m256 pick_max8(__m256 a, __m256 v) {
  const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, a, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_ps(a, v, take);
}
MG_TARGET_AVX2 void pool_pairs_avx2(const float* x0, const float* x1, float* y, int64_t OL) {
  int64_t j = 0;
  for (; j + 8 <= OL; j += 8) {  // reads up to x[2j + 15] <= x[2 OL - 1]
    const __m256 a = pick_max8(_mm256_loadu_ps(x0 + 2 * j), _mm256_loadu_ps(x1 + 2 * j));
    const __m256 b = pick_max8(_mm256_loadu_ps(x0 + 2 * j + 8), _mm256_loadu_ps(x1 + 2 * j + 8));
    store_in_order(y + j, pick_max8(evens_or_odds(a, b, true), evens_or_odds(a, b, false)));
  }
  pool_pairs_generic(x0 + 2 * j, x1 + 2 * j, y + j, OL - j);
}
#endif
}  // namespace

PoolPairsFn pool_pairs_fn() {  // (conv_epilogue.h: convolutions pool their rows with it too)
#if MG_CPU_X86
  if (best_isa() != Isa::Generic) return pool_pairs_avx2;
#endif
  return pool_pairs_generic;
}

namespace {

// Stride-2 windows of K consecutive taps along a row: m (the window rows' elementwise maxima)
// is written `before` floats into mp, whose other floats are -infinity, so output j's taps are
// mp[2j + t] for every t, edges included (a -infinity tap leaves the maximum as it is, as a
// skipped one does). Taps are chosen in order, as pool_row_body chooses them (a NaN wins, so
// does the first of equal values): the same bits, 8 outputs a vector.
using PoolS2Fn = void (*)(const PoolPlan&, const float*, int64_t, int64_t, float*, float*);
void pool_s2_generic(const PoolPlan& p, const float* x, int64_t step, int64_t n, float* mp, float* y) {
  window_rows_max(x, step, n, p.in_last, mp - p.tsrc[0]);
  for (int64_t j = 0; j < p.out_last; ++j) {
    float a = -std::numeric_limits<float>::infinity();
    for (size_t t = 0; t < p.tsrc.size(); ++t) a = pick_max(a, mp[2 * j + int64_t(t)]);
    y[j] = a;
  }
}
#if MG_CPU_X86
MG_TARGET_AVX2 void pool_s2_avx2(const PoolPlan& p, const float* x, int64_t step, int64_t n, float* mp, float* y) {
  const int64_t IL = p.in_last, OL = p.out_last, K = int64_t(p.tsrc.size());
  // window_rows_max by hand: as the compiler vectorises it, the pool ran 1.2x slower
  float* m = mp - p.tsrc[0];
  int64_t i = 0;
  for (; i + 8 <= IL; i += 8) {
    __m256 a = _mm256_loadu_ps(x + i);
    for (int64_t q = 1; q < n; ++q) a = pick_max8(a, _mm256_loadu_ps(x + q * step + i));
    _mm256_storeu_ps(m + i, a);
  }
  window_rows_max(x + i, step, n, IL - i, m + i);  // the columns left over
  for (int64_t j = 0; j < OL; j += 8) {
    const float* r = mp + 2 * j;
    __m256 a = load_evens_or_odds(r, true);
    for (int64_t t = 1; t < K; ++t) a = pick_max8(a, load_evens_or_odds(r + (t & ~int64_t(1)), (t & 1) == 0));
    if (j + 8 <= OL) {
      store_in_order(y + j, a);
    } else {
      alignas(32) float t8[8];
      store_in_order(t8, a);
      std::memcpy(y + j, t8, size_t(OL - j) * sizeof(float));
    }
  }
}
#endif
#if MG_CPU_X86
MG_TARGET_AVX512 inline __m512 pick_max16(__m512 a, __m512 v) {
  return _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(v, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}
// pool_s2_avx2 with 16 outputs a vector: two-source permutes pick the even and the odd floats of
// 32, already in order; the same choices in the same order, so the same bits.
MG_TARGET_AVX512 void pool_s2_avx512(const PoolPlan& p, const float* x, int64_t step, int64_t n, float* mp,
                                     float* y) {
  const int64_t IL = p.in_last, OL = p.out_last, K = int64_t(p.tsrc.size());
  float* m = mp - p.tsrc[0];
  int64_t i = 0;
  for (; i + 16 <= IL; i += 16) {
    __m512 a = _mm512_loadu_ps(x + i);
    for (int64_t q = 1; q < n; ++q) a = pick_max16(a, _mm512_loadu_ps(x + q * step + i));
    _mm512_storeu_ps(m + i, a);
  }
  window_rows_max(x + i, step, n, IL - i, m + i);  // the columns left over
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t j = 0; j < OL; j += 16) {
    const float* r = mp + 2 * j;  // taps 0 and 1 from r, 2 and 3 from r + 2
    const __m512 lo = _mm512_loadu_ps(r), hi = _mm512_loadu_ps(r + 16);
    __m512 a = pick_max16(_mm512_permutex2var_ps(lo, evens, hi), _mm512_permutex2var_ps(lo, odds, hi));
    if (K > 2) {
      const __m512 lo2 = _mm512_loadu_ps(r + 2), hi2 = _mm512_loadu_ps(r + 18);
      a = pick_max16(a, _mm512_permutex2var_ps(lo2, evens, hi2));
      if (K > 3) a = pick_max16(a, _mm512_permutex2var_ps(lo2, odds, hi2));
    }
    _mm512_mask_storeu_ps(y + j, OL - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (OL - j)) - 1), a);
  }
}
#endif
PoolS2Fn pool_s2_fn(bool avx512) {
#if MG_CPU_X86
  if (avx512) return pool_s2_avx512;
  if (best_isa() != Isa::Generic) return pool_s2_avx2;
#endif
  (void)avx512;
  return pool_s2_generic;
}

template <class S>
void pool_rows(const PoolPlan& p, const S* x, S* y) {
  if constexpr (std::is_same_v<S, float>) {
    const PoolRowFn row = pool_row_fn(p.sL);
    const PoolPairsFn pairs = pool_pairs_fn();
    const int64_t OL = p.out_last, rows_per_batch = p.out[0];
    const int64_t grain =
        std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.in_last) / std::max<int64_t>(1, p.window));
    const PoolS2Fn s2 = pool_s2_fn(p.s2_avx512);
    // a task's scratch row: with s2 the padded row, -infinity around m, written once per task
    auto scratch = [&]() {
      thread_local std::vector<float> m;
      if (p.s2) m.assign(size_t(p.s2_len), -std::numeric_limits<float>::infinity());
      else m.resize(size_t(p.in_last));
      return m.data();
    };
    auto one_row = [&](int64_t b, int64_t o, float* m) {  // output row o of plane b
      const int64_t n = p.ntaps[0][size_t(o)];
      float* yr = y + (b * rows_per_batch + o) * OL;
      if (n <= 0) {
        std::fill(yr, yr + OL, -std::numeric_limits<float>::infinity());
        return;
      }
      const float* xr = x + b * p.in_plane + p.first[0][size_t(o)];
      if (p.pairs && n == 2) pairs(xr, xr + p.step[0], yr, OL);
      else if (p.s2) s2(p, xr, p.step[0], n, m, yr);
      else row(p, xr, p.step[0], n, m, yr);
    };
    const int64_t bands = p.bands ? std::min<int64_t>(num_threads(), rows_per_batch / 2) : 1;
    if (bands > 1) {  // band k: rows [k R / bands, (k + 1) R / bands) of every plane
      parallel_for(bands, 1, [&](int64_t k0, int64_t k1) {
        float* m = scratch();
        for (int64_t k = k0; k < k1; ++k)
          for (int64_t b = 0; b < p.batch; ++b)
            for (int64_t o = k * rows_per_batch / bands; o < (k + 1) * rows_per_batch / bands; ++o) one_row(b, o, m);
      });
      return;
    }
    parallel_for(p.batch * rows_per_batch, grain, [&](int64_t rb, int64_t re) {
      float* m = scratch();
      for (int64_t r = rb; r < re; ++r) one_row(r / rows_per_batch, r % rows_per_batch, m);
    });
  }
}

// Max (MODE -1) or sum/average (MODE = linear_mode) pooling that streams whole source rows:
// per output row, each outer window offset and each innermost tap adds one strided source row
// into a tile of accumulators (vectorised), instead of walking every output's window.
template <class S, int MODE>
KernelFn stream_forward(std::shared_ptr<const PoolPlan> pp) {
  return [pp](const void* const* in, void* const* out) {
    using C = typename Num<S>::C;
    const PoolPlan& p = *pp;
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    if (p.batch == 0 || p.out_plane == 0) return;
    if constexpr (MODE < 0 && std::is_same_v<S, float>)
      if (p.pool_rows && p.in_last > 0) return pool_rows(p, x, y);
    const int64_t OL = p.out_last, rows_per_batch = p.out_plane / OL, K = int64_t(p.tlo.size());
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, OL) / p.window);
    parallel_for(p.batch * rows_per_batch, grain, [&](int64_t rb, int64_t re) {
      constexpr int64_t kTile = 256;
      C acc[kTile];
      int64_t oi[kMaxK], n[kMaxK], cnt[kMaxK];
      for (int64_t r = rb; r < re; ++r) {
        const int64_t b = r / rows_per_batch;
        int64_t rem = r % rows_per_batch, base = 0;
        double outer = 1;  // the outer dims' share of the divisor
        bool empty = false;
        for (int d = p.k - 2; d >= 0; --d) {
          oi[d] = rem % p.out[size_t(d)];
          rem /= p.out[size_t(d)];
          n[d] = p.ntaps[size_t(d)][size_t(oi[d])];
          empty = empty || n[d] <= 0;
          base += p.first[size_t(d)][size_t(oi[d])];
          outer *= double((MODE == 2 ? p.npad : p.ntaps)[size_t(d)][size_t(oi[d])]);
          cnt[d] = 0;
        }
        const S* xb = x + b * p.in_plane;
        for (int64_t j0 = 0; j0 < OL; j0 += kTile) {
          const int64_t j1 = std::min(OL, j0 + kTile);
          for (int64_t j = j0; j < j1; ++j) acc[j - j0] = MODE < 0 ? -std::numeric_limits<C>::infinity() : C(0);
          int64_t off = base;
          for (int d = 0; d < p.k - 1; ++d) cnt[d] = 0;
          while (!empty) {
            for (int64_t t = 0; t < K; ++t) {
              const int64_t lo = std::max(p.tlo[size_t(t)], j0), hi = std::min(p.thi[size_t(t)], j1);
              const S* src = xb + off + p.tsrc[size_t(t)];
              C* a = acc - j0;
              if (p.sL == 1) {
                for (int64_t j = lo; j < hi; ++j) {
                  const C v = Num<S>::ld(src[j]);
                  if constexpr (MODE < 0) a[j] = (v > a[j] || v != v) ? v : a[j];  // a NaN sticks
                  else a[j] += v;
                }
              } else {
                for (int64_t j = lo; j < hi; ++j) {
                  const C v = Num<S>::ld(src[j * p.sL]);
                  if constexpr (MODE < 0) a[j] = (v > a[j] || v != v) ? v : a[j];
                  else a[j] += v;
                }
              }
            }
            if (!next_outer_tap(p, n, cnt, off)) break;
          }
          S* yr = y + r * OL;
          for (int64_t j = j0; j < j1; ++j) {
            C v = acc[j - j0];
            if constexpr (MODE > 0) {
              const double dv = empty ? 0.0 : outer * double((MODE == 2 ? p.npad : p.ntaps)[size_t(p.k - 1)][size_t(j)]);
              v = dv > 0 ? v / C(dv) : C(0);
            }
            yr[j] = Num<S>::st(v);
          }
        }
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
      return dispatch_float(c, "pooling", c.in[0].dtype, [&](auto tag) {
        using S = decltype(tag);
        return with_indices ? max_forward<S>(plan, true, idx) : stream_forward<S, -1>(plan);
      });
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
    return dispatch_float(c, "pooling", c.in[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      return mode == 0 ? stream_forward<S, 0>(plan) : mode == 1 ? stream_forward<S, 1>(plan) : stream_forward<S, 2>(plan);
    });
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
