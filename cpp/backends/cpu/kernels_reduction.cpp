// CPU kernels for the reduction family.
//
// One engine serves every reduction. The factory collapses the input's dims into a "kept"
// space and a "reduced" space (adjacent dims of one kind merged, size-1 dims dropped) and
// precomputes offset tables for all but the innermost dim of each space. A run then either
// reduces contiguous runs per output (the innermost input dim is reduced; vectorised lanes)
// or accumulates blocks of whole input rows into a row of accumulators (the innermost input
// dim is kept). When the outputs alone cannot keep the threads busy, the reduction range is
// split over threads and the partial results combined in order. Each op is a small policy (init / add / combine / emit),
// instantiated only for the dtypes it accepts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <stdexcept>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/isa_target.h"
#include "backends/cpu/reduce_walk.h"
#include "core/ops/reduction_attrs.h"

#if MG_CPU_X86
#include <immintrin.h>
#endif

namespace mg::cpu {

namespace {

struct ReducePlan {
  int64_t num_out = 0, num_red = 0;
  std::vector<int64_t> kept_off;  // outer kept offsets; output o = t * k_len + j
  int64_t k_len = 1, k_stride = 0;
  std::vector<int64_t> red_off;  // outer reduced offsets; reduce index r = s * r_len + i
  int64_t r_len = 1, r_stride = 0;
  bool inner_kept = false;  // innermost input dim is kept (k_stride == 1): row accumulation
  int chunks = 1;           // > 1: the reduce range is split over threads
};

struct Dim {
  int64_t len, stride;
};

// Outputs accumulated together when the inner dim is kept: whole input rows where they fit
// (long sequential reads are several times faster than strided blocks).
constexpr int64_t kBlock = 4096;

std::vector<int64_t> offsets_of(const std::vector<Dim>& dims) {  // all dims but the last
  std::vector<int64_t> off{0};
  for (size_t d = 0; d + 1 < dims.size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(off.size() * size_t(dims[d].len));
    for (int64_t o : off)
      for (int64_t i = 0; i < dims[d].len; ++i) next.push_back(o + i * dims[d].stride);
    off.swap(next);
  }
  return off;
}

ReducePlan make_plan(const Shape& shape, const std::vector<int64_t>& axes) {
  ReducePlan p;
  std::vector<char> red(shape.size(), 0);
  for (auto a : axes) red[size_t(a)] = 1;
  auto strides = contiguous_strides(shape);
  p.num_out = 1;
  p.num_red = 1;
  std::vector<Dim> kept, reduced;
  int last_kind = -1;  // kind of the previous (non size-1) dim
  for (size_t d = 0; d < shape.size(); ++d) {
    (red[d] ? p.num_red : p.num_out) *= shape[d];
    if (shape[d] == 1) continue;
    auto& list = red[d] ? reduced : kept;
    if (last_kind == red[d] && !list.empty() && list.back().stride == shape[d] * strides[d]) {
      list.back().len *= shape[d];
      list.back().stride = strides[d];
    } else {
      list.push_back({shape[d], strides[d]});
    }
    last_kind = red[d];
  }
  if (p.num_out == 0 || p.num_red == 0) return p;
  if (!kept.empty()) {
    p.k_len = kept.back().len;
    p.k_stride = kept.back().stride;
  }
  if (!reduced.empty()) {
    p.r_len = reduced.back().len;
    p.r_stride = reduced.back().stride;
  }
  p.kept_off = offsets_of(kept);
  p.red_off = offsets_of(reduced);
  p.inner_kept = !kept.empty() && p.k_stride == 1;
  // Split the reduce range over threads when the outputs alone cannot keep them busy:
  // few outputs, or (inner dim kept) few row blocks. Partials cost chunks * num_out accumulators.
  const int64_t threads = num_threads();
  const int64_t work = p.num_out * p.num_red;
  if (!p.inner_kept) {
    if (p.num_out < threads && p.num_red >= 32768 && work >= 65536)
      p.chunks = int(std::min<int64_t>(threads, p.num_red / 16384));
  } else {
    int64_t units = int64_t(p.kept_off.size()) * ((p.k_len + kBlock - 1) / kBlock);
    if (units < threads && work >= 65536 && p.num_red >= 2 && p.num_out * threads * 16 <= (int64_t(32) << 20))
      p.chunks = int(std::min<int64_t>(threads, std::max<int64_t>(1, work / 32768)));
    p.chunks = int(std::min<int64_t>(p.chunks, p.num_red));
  }
  return p;
}

// Reduces a contiguous run q[0..n) (reduce indices r0..) into a, with eight independent
// lanes so that the loop vectorises; lanes are combined at the end (ties resolve by index).
template <class P, class S>
inline void lanes(const P& pol, typename P::Acc& a, const S* q, int64_t n, int64_t r0, int64_t o) {
  constexpr int L = 8;
  if (n < 2 * L) {
    for (int64_t i = 0; i < n; ++i) pol.add(a, q[i], r0 + i, o);
    return;
  }
  typename P::Acc b[L];
  for (int l = 0; l < L; ++l) b[l] = pol.init();
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) pol.add(b[l], q[i + l], r0 + i + l, o);
  for (; i < n; ++i) pol.add(b[i % L], q[i], r0 + i, o);
  for (int w = L / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) pol.combine(b[l], b[l + w]);
  pol.combine(a, b[0]);
}

// A float run's sum in double as lanes() adds it (n >= 16): the same eight lanes (two vectors
// of four), the tail in the first lanes, the same combining order, so the same bits. The tail's
// missing lanes add +0.0, which leaves a lane as it is: a lane starts at +0.0 and never becomes
// -0.0 (x + -x is +0.0).
#if MG_CPU_X86
MG_TARGET_AVX2 inline void add8(__m256d& lo, __m256d& hi, __m256 v) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

MG_TARGET_AVX2 double lanes_sum_avx2(const float* q, int64_t n) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) add8(lo, hi, _mm256_loadu_ps(q + i));
  if (i < n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    add8(lo, hi, _mm256_maskload_ps(q + i, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - i)), lane)));
  }
  const __m256d s4 = _mm256_add_pd(lo, hi);  // b[l] + b[l + 4]
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

// Means of rows of n >= 16 floats that follow each other (global average pooling): four rows
// a pass, each summed exactly as lanes_sum_avx2 sums it (the same lanes, tail and combining
// order) and emitted as MeanP does (0.0 + sum, / n, rounded to float), so the same bits. Four
// rows' sums combine in two vector steps and one division where one row took a call, a
// horizontal sum and its own division.
MG_TARGET_AVX2 void mean_rows_avx2(const float* x, int64_t rows, int64_t n, float* out) {
  const int64_t nv = n / 8 * 8;
  const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - nv)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256d dn = _mm256_set1_pd(double(n));
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* q = x + r * n;
    __m256d lo[4], hi[4];
    for (int k = 0; k < 4; ++k) lo[k] = hi[k] = _mm256_setzero_pd();
    // add8's lanes, each half loaded into its conversion (no 8-wide load and extract: fewer
    // instructions, so more of the four rows' chains of adds in flight; 1.18-1.27x)
    for (int64_t i = 0; i < nv; i += 8)
      for (int k = 0; k < 4; ++k) {
        lo[k] = _mm256_add_pd(lo[k], _mm256_cvtps_pd(_mm_loadu_ps(q + k * n + i)));
        hi[k] = _mm256_add_pd(hi[k], _mm256_cvtps_pd(_mm_loadu_ps(q + k * n + i + 4)));
      }
    if (nv < n)
      for (int k = 0; k < 4; ++k) add8(lo[k], hi[k], _mm256_maskload_ps(q + k * n + nv, tail));
    __m256d s[4];
    for (int k = 0; k < 4; ++k) s[k] = _mm256_add_pd(lo[k], hi[k]);  // b[l] + b[l + 4]
    // [s0_0 + s0_2, s0_1 + s0_3, s1_0 + s1_2, s1_1 + s1_3], and rows 2 and 3 the same way
    const __m256d t01 =
        _mm256_add_pd(_mm256_permute2f128_pd(s[0], s[1], 0x20), _mm256_permute2f128_pd(s[0], s[1], 0x31));
    const __m256d t23 =
        _mm256_add_pd(_mm256_permute2f128_pd(s[2], s[3], 0x20), _mm256_permute2f128_pd(s[2], s[3], 0x31));
    // hadd gives rows 0, 2, 1, 3; put them in order
    const __m256d sum = _mm256_permute4x64_pd(_mm256_hadd_pd(t01, t23), 0xd8);
    const __m256d m = _mm256_div_pd(_mm256_add_pd(_mm256_setzero_pd(), sum), dn);
    _mm_storeu_ps(out + r, _mm256_cvtpd_ps(m));
  }
  for (; r < rows; ++r) out[r] = float((0.0 + lanes_sum_avx2(x + r * n, n)) / double(n));
}
#endif

// lanes_sum_avx2 where this CPU runs it (MPSGRAPH_CPU_MEAN_LANES=0: the compiled lanes loop);
// null otherwise.
using LanesSumFn = double (*)(const float*, int64_t);
LanesSumFn lanes_sum_fn() {
#if MG_CPU_X86
  if (best_isa() != Isa::Generic && !switched_off("MPSGRAPH_CPU_MEAN_LANES")) return lanes_sum_avx2;
#endif
  return nullptr;
}

// Output o reduces the contiguous run x[o * num_red, (o + 1) * num_red) of 16 or more, in one
// pass (the inner dims reduced, the outer kept: a global mean). MPSGRAPH_CPU_MEAN_ROWS=0 (read
// at compile) keeps run_plan's loop over the rows.
bool rows_in_order(const ReducePlan& p) {
  if (p.num_out <= 0 || p.num_red < 16 || p.chunks > 1 || p.inner_kept) return false;
  if (p.red_off.size() != 1 || p.r_stride != 1 || p.r_len != p.num_red) return false;
  if (p.k_len > 1 && p.k_stride != p.num_red) return false;
  for (size_t t = 0; t < p.kept_off.size(); ++t)
    if (p.kept_off[t] != int64_t(t) * p.k_len * p.num_red) return false;
  return true;
}

// Accumulates reduce indices [rb, re) into acc[0..nb) for the outputs whose input base
// offsets are base + j (nb > 1 needs the inner dim kept, stride 1).
// Not inlined: run_plan calls it from three places, and one vectorised copy per policy keeps
// the build fast (a call per output row costs nothing next to the row's work).
#if defined(_MSC_VER)
#define MG_NOINLINE __declspec(noinline)
#else
#define MG_NOINLINE __attribute__((noinline))
#endif
template <class S, class P>
MG_NOINLINE void accumulate(const P& pol, const ReducePlan& p, const S* x, int64_t base, int64_t o0, int64_t nb,
                            int64_t rb, int64_t re, typename P::Acc* acc) {
  int64_t s = rb / p.r_len, i = rb % p.r_len, r = rb;
  while (r < re) {
    int64_t iend = std::min(p.r_len, i + (re - r));
    const S* q = x + base + p.red_off[size_t(s)];
    if (nb == 1) {
      if (p.r_stride == 1) pol.run(acc[0], q + i, iend - i, r, o0);
      else
        for (int64_t ii = i; ii < iend; ++ii) pol.add(acc[0], q[ii * p.r_stride], r + ii - i, o0);
    } else {
      for (int64_t ii = i; ii < iend; ++ii) {
        const S* qq = q + ii * p.r_stride;
        int64_t ri = r + ii - i;
        for (int64_t j = 0; j < nb; ++j) pol.add(acc[j], qq[j], ri, o0 + j);
      }
    }
    r += iend - i;
    i = 0;
    ++s;
  }
}

// Policies without a better contiguous-run loop use the lanes above.
#define MG_DEFAULT_RUN                                                               \
  template <class A, class SS>                                                       \
  void run(A& a, const SS* q, int64_t n, int64_t r0, int64_t o) const {              \
    lanes(*this, a, q, n, r0, o);                                                    \
  }

// ---------------- policies ----------------
// add(acc, stored value, reduce index, output index); emit(output index, acc).

template <class S>
inline double ldd(S v) {
  return double(Num<S>::ld(v));
}

template <class S, class O>
inline void store_f(O* out, int64_t o, double v) {
  if constexpr (std::is_same_v<O, double>) out[o] = v;
  else out[o] = Num<O>::st(typename Num<O>::C(v));
}

// sum / product: floats in double, integers in uint64 (wraps like the dtype).
template <class S, bool Prod>
struct SumP {
  MG_DEFAULT_RUN
  static constexpr bool F = is_float_storage<S>;
  using Acc = std::conditional_t<F, double, uint64_t>;
  S* out;
  Acc init() const { return Prod ? Acc(1) : Acc(0); }
  static Acc load(S v) {
    if constexpr (F) return ldd(v);
    else return uint64_t(v);
  }
  void add(Acc& a, S v, int64_t, int64_t) const {
    if constexpr (Prod) a *= load(v);
    else a += load(v);
  }
  void combine(Acc& a, const Acc& b) const {
    if constexpr (Prod) a *= b;
    else a += b;
  }
  void emit(int64_t o, Acc a) const {
    if constexpr (F) store_f<S, S>(out, o, a);
    else out[o] = S(a);
  }
};

// maximum / minimum with numpy's NaN propagation; O is S, or double for logsumexp's first pass.
template <class S, bool Max, class O = S>
struct ExtP {
  using C = typename Num<S>::C;
  static constexpr bool F = is_float_storage<S>;
  using Acc = C;
  O* out;
  // A contiguous run: sixteen lanes of plain selects (which vectorise) and a NaN flag per lane;
  // the first NaN of the run is looked up only when one was seen.
  void run(Acc& a, const S* q, int64_t n, int64_t r0, int64_t o) const {
    constexpr int L = 16;
    if (n < 2 * L) {
      for (int64_t i = 0; i < n; ++i) add(a, q[i], r0 + i, o);
      return;
    }
    using Flag = std::conditional_t<sizeof(C) == 8, int64_t, int32_t>;
    C b[L];
    Flag nn[L];
    for (int l = 0; l < L; ++l) {
      b[l] = init();
      nn[l] = 0;
    }
    int64_t i = 0;
    for (; i + L <= n; i += L)
      for (int l = 0; l < L; ++l) {
        C v = Num<S>::ld(q[i + l]);
        b[l] = (Max ? (v > b[l]) : (v < b[l])) ? v : b[l];
        if constexpr (F) nn[l] |= Flag(v != v);
      }
    Flag any = 0;
    for (int l = 0; l < L; ++l) {
      combine(a, b[l]);
      any |= nn[l];
    }
    for (; i < n; ++i) add(a, q[i], r0 + i, o);
    if constexpr (F)
      if (any)
        for (int64_t k = 0; k < n; ++k) {
          C v = Num<S>::ld(q[k]);
          if (v != v) {
            combine(a, v);
            break;
          }
        }
  }
  Acc init() const {
    if constexpr (F) return Max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else return Max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  void add(Acc& a, S sv, int64_t, int64_t) const { combine(a, Num<S>::ld(sv)); }
  void combine(Acc& a, const Acc& v) const {
    bool take = Max ? (v > a) : (v < a);
    if constexpr (F) take = take | (v != v);  // NaN propagates (a NaN already held stays)
    a = take ? v : a;
  }
  void emit(int64_t o, Acc a) const {
    if constexpr (std::is_same_v<O, double>) out[o] = double(a);
    else out[o] = Num<S>::st(a);
  }
};

template <class S>
struct MeanP {  // also the first pass of variance (O = double)
  using Acc = double;
  void* out;
  bool to_double;
  double n;
  LanesSumFn lanes_sum = nullptr;  // float runs of 16 or more, else lanes()
  template <class SS>
  void run(Acc& a, const SS* q, int64_t n, int64_t r0, int64_t o) const {
    if constexpr (std::is_same_v<SS, float>)
      if (lanes_sum && n >= 16) return void(a += lanes_sum(q, n));
    lanes(*this, a, q, n, r0, o);
  }
  Acc init() const { return 0.0; }
  void add(Acc& a, S v, int64_t, int64_t) const { a += ldd(v); }
  void combine(Acc& a, const Acc& b) const { a += b; }
  void emit(int64_t o, Acc a) const {
    double m = a / n;
    if (to_double) static_cast<double*>(out)[o] = m;
    else store_f<S, S>(static_cast<S*>(out), o, m);
  }
};

template <class S>
struct VarP {  // second pass: sum of squared deviations from the per-output mean
  MG_DEFAULT_RUN
  using Acc = double;
  S* out;
  const double* mean;
  double n;
  Acc init() const { return 0.0; }
  void add(Acc& a, S v, int64_t, int64_t o) const {
    double d = ldd(v) - mean[o];
    a += d * d;
  }
  void combine(Acc& a, const Acc& b) const { a += b; }
  void emit(int64_t o, Acc a) const { store_f<S, S>(out, o, a / n); }
};

template <class S>
struct LseP {  // second pass: max + log(sum(exp(x - max))), S float or double
  MG_DEFAULT_RUN
  using Acc = double;
  S* out;
  const S* mx;
  Acc init() const { return 0.0; }
  void add(Acc& a, S v, int64_t, int64_t o) const { a += double(std::exp(v - mx[o])); }
  void combine(Acc& a, const Acc& b) const { a += b; }
  void emit(int64_t o, Acc a) const {
    double m = double(mx[o]);
    out[o] = S(std::isfinite(m) ? m + std::log(a) : m);  // -inf, +inf and NaN stay
  }
};

template <class S, bool And>
struct LogicP {
  MG_DEFAULT_RUN
  using Acc = uint8_t;  // not bool: partial results live in a std::vector
  bool* out;
  Acc init() const { return And; }
  void add(Acc& a, S v, int64_t, int64_t) const {
    bool nz;
    if constexpr (std::is_same_v<S, half_t> || std::is_same_v<S, bfloat16_t>) nz = (v.bits & 0x7fff) != 0;
    else nz = v != S(0);
    if constexpr (And) a = a && nz;
    else a = a || nz;
  }
  void combine(Acc& a, const Acc& b) const {
    if constexpr (And) a = a && b;
    else a = a || b;
  }
  void emit(int64_t o, Acc a) const { out[o] = a != 0; }
};

template <class S, bool Max>
struct ArgP {
  using C = typename Num<S>::C;
  static constexpr bool F = is_float_storage<S>;
  struct Acc {
    C v;
    int64_t i;  // -1: nothing better than the initial value seen (emits 0, the first index)
  };
  void* out;
  bool out64;
  Acc init() const {
    if constexpr (F) return {Max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity(), -1};
    else return {Max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max(), -1};
  }
  // indices arrive in increasing order: a strictly better value (or a first NaN) wins
  void add(Acc& a, S sv, int64_t r, int64_t) const {
    C v = Num<S>::ld(sv);
    bool take = Max ? (v > a.v) : (v < a.v);
    if constexpr (F) take = take || (v != v && a.v == a.v);
    if (take) a = {v, r};
  }
  static bool isnan_(C v) {
    if constexpr (F) return std::isnan(v);
    else return false;
  }
  // b holds indices after or before a's; the better value wins, ties go to the first index
  void combine(Acc& a, const Acc& b) const {
    if (b.i < 0) return;
    if (a.i < 0) {
      a = b;
      return;
    }
    bool an = isnan_(a.v), bn = isnan_(b.v);
    if (an || bn) {
      if (bn && (!an || b.i < a.i)) a = b;
      return;
    }
    if (Max ? (b.v > a.v) : (b.v < a.v)) a = b;
    else if (b.v == a.v && b.i < a.i) a = b;
  }
  // a contiguous run: find its extremum (vectorised), then the first index holding it
  void run(Acc& a, const S* q, int64_t n, int64_t r0, int64_t) const {
    ExtP<S, Max, C> ext{nullptr};
    C m = ext.init();
    ext.run(m, q, n, 0, 0);
    if (!isnan_(m) && m == init().v) return;  // nothing better than the initial value: i stays -1
    int64_t k = 0;
    if (isnan_(m)) {
      while (!isnan_(Num<S>::ld(q[k]))) ++k;
    } else {
      while (Num<S>::ld(q[k]) != m) ++k;
    }
    combine(a, Acc{m, r0 + k});
  }
  void emit(int64_t o, Acc a) const {
    int64_t i = a.i < 0 ? 0 : a.i;
    if (out64) static_cast<int64_t*>(out)[o] = i;
    else static_cast<int32_t*>(out)[o] = int32_t(i);
  }
};

template <class S, class P>
void run_plan(const P& pol, const ReducePlan& p, const S* x, typename P::Acc* partial) {
  using Acc = typename P::Acc;
  if (p.num_out == 0) return;
  if (p.num_red == 0) {
    for (int64_t o = 0; o < p.num_out; ++o) pol.emit(o, pol.init());
    return;
  }
  auto base_of = [&](int64_t o) { return p.kept_off[size_t(o / p.k_len)] + (o % p.k_len) * p.k_stride; };
  const int64_t nblk = (p.k_len + kBlock - 1) / kBlock;
  const int64_t outer = int64_t(p.kept_off.size());
  // Reduce indices [rb, re) of every output into out[o] (inner dim kept: blocks of rows).
  auto reduce_range = [&](int64_t rb, int64_t re, int64_t ub, int64_t ue, Acc* out) {
    Acc acc[kBlock];
    for (int64_t u = ub; u < ue; ++u) {
      int64_t t = u / nblk, jb = (u % nblk) * kBlock;
      int64_t nb = std::min(kBlock, p.k_len - jb);
      for (int64_t j = 0; j < nb; ++j) acc[j] = pol.init();
      int64_t o0 = t * p.k_len + jb;
      accumulate(pol, p, x, p.kept_off[size_t(t)] + jb, o0, nb, rb, re, acc);
      for (int64_t j = 0; j < nb; ++j) out[o0 + j] = acc[j];
    }
  };
  if (p.chunks > 1) {  // split the reduce range, combine the partials in order
    const int64_t per = (p.num_red + p.chunks - 1) / p.chunks;
    parallel_for(p.chunks, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        int64_t rb = std::min(p.num_red, c * per), re = std::min(p.num_red, rb + per);
        Acc* part = partial + c * p.num_out;
        if (p.inner_kept) {
          reduce_range(rb, re, 0, outer * nblk, part);
        } else {
          for (int64_t o = 0; o < p.num_out; ++o) {
            Acc a = pol.init();
            if (rb < re) accumulate(pol, p, x, base_of(o), o, 1, rb, re, &a);
            part[o] = a;
          }
        }
      }
    });
    parallel_for(p.num_out, 16384, [&](int64_t ob, int64_t oe) {
      for (int64_t o = ob; o < oe; ++o) {
        Acc a = partial[o];
        for (int c = 1; c < p.chunks; ++c) pol.combine(a, partial[c * p.num_out + o]);
        pol.emit(o, a);
      }
    });
    return;
  }
  if (!p.inner_kept) {
    int64_t grain = std::max<int64_t>(1, 32768 / p.num_red);
    parallel_for(p.num_out, grain, [&](int64_t ob, int64_t oe) {
      for (int64_t o = ob; o < oe; ++o) {
        Acc a = pol.init();
        accumulate(pol, p, x, base_of(o), o, 1, 0, p.num_red, &a);
        pol.emit(o, a);
      }
    });
    return;
  }
  int64_t grain = std::max<int64_t>(1, 32768 / (p.num_red * std::min(kBlock, p.k_len)));
  parallel_for(outer * nblk, grain, [&](int64_t ub, int64_t ue) {
    Acc acc[kBlock];
    for (int64_t u = ub; u < ue; ++u) {
      int64_t t = u / nblk, jb = (u % nblk) * kBlock;
      int64_t nb = std::min(kBlock, p.k_len - jb);
      for (int64_t j = 0; j < nb; ++j) acc[j] = pol.init();
      int64_t o0 = t * p.k_len + jb;
      accumulate(pol, p, x, p.kept_off[size_t(t)] + jb, o0, nb, 0, p.num_red, acc);
      for (int64_t j = 0; j < nb; ++j) pol.emit(o0 + j, acc[j]);
    }
  });
}

// ---------------- registration ----------------

struct Prepared {
  ReducePlan plan;
  DType in, out;
  const Node* node;
};

// The plan over the reduced axes the node's typed attributes hold (sorted, non-negative).
Prepared prepare(const KernelCtx& c, const std::vector<int64_t>& axes) {
  return {make_plan(c.in[0].shape, axes), c.in[0].dtype, c.out[0].dtype, &c.node};
}
Prepared prepare(const KernelCtx& c) { return prepare(c, typed_attrs<ops::ReductionAttrs>(c.node).axes); }

[[noreturn]] void no_kernel(const KernelCtx& c) {
  raise(ErrorKind::Type, c.node.op->name, c.node.name, std::string("no cpu kernel for ") + dtype_name(c.in[0].dtype));
}

// Builds a KernelFn running policy P (made by make(out_ptr)) over the plan.
template <class S, class Make>
KernelFn simple_kernel(const KernelCtx& c, const ReducePlan& plan, Make make) {
  using P = decltype(make(nullptr));
  using Acc = typename P::Acc;
  const size_t partial = c.scratch((plan.chunks > 1 ? size_t(plan.chunks * plan.num_out) : 0) * sizeof(Acc));
  return [plan, make, partial](const void* const* in, void* const* out) {
    P pol = make(out[0]);
    run_plan(pol, plan, static_cast<const S*>(in[0]), static_cast<Acc*>(out[partial]));
  };
}

// Integers map to the unsigned type of their width (bool to uint8); floats stay.
template <class S, bool = std::is_integral_v<S>>
struct UnsignedOfT {
  using type = S;
};
template <class S>
struct UnsignedOfT<S, true> {
  using type = std::conditional_t<sizeof(S) == 1, uint8_t,
                                  std::conditional_t<sizeof(S) == 2, uint16_t,
                                                     std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>>;
};
template <class S>
using UnsignedOf = typename UnsignedOfT<S>::type;

// Calls make(tag) for the input's storage type. float16 and bfloat16 inputs are converted
// to a float32 scratch copy per run and reduced by the float32 kernel (fewer template
// instantiations; the accumulation is in float32 or float64 anyway); where the output has
// the input's dtype it is produced in float32 scratch and converted back.
template <class Make>
KernelFn dispatch_reduce(const KernelCtx& c, const Prepared& pr, Make make) {
  return dispatch_dtype(pr.in, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, half_t> || std::is_same_v<S, bfloat16_t>) {
      KernelFn f = make(float{});
      int64_t n_in = num_elements(c.in[0].shape), n_out = num_elements(c.out[0].shape);
      bool conv_out = pr.out == pr.in;
      const size_t xin = c.scratch(size_t(n_in) * sizeof(float));
      const size_t xout = c.scratch(conv_out ? size_t(n_out) * sizeof(float) : 0);
      const size_t nptr = c.out.size() + c.scratch_bytes.size();  // f's scratch comes after out[0] too
      if (nptr > 8) throw std::logic_error("dispatch_reduce: too many scratch buffers");
      return [f, xin, xout, n_in, n_out, conv_out, nptr](const void* const* in, void* const* out) {
        const S* x = static_cast<const S*>(in[0]);
        float* xf = static_cast<float*>(out[xin]);
        parallel_for(n_in, 65536, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) xf[i] = Num<S>::ld(x[i]);
        });
        const void* fin[1] = {xf};
        void* fout[8];
        for (size_t k = 0; k < nptr; ++k) fout[k] = out[k];
        if (conv_out) fout[0] = out[xout];
        f(fin, fout);
        if (conv_out) {
          S* o = static_cast<S*>(out[0]);
          const float* of = static_cast<const float*>(out[xout]);
          for (int64_t i = 0; i < n_out; ++i) o[i] = Num<S>::st(of[i]);
        }
      };
    } else {
      return make(S{});
    }
  });
}

template <bool Prod>
KernelFn sum_kernel(const KernelCtx& c) {
  auto pr = prepare(c);
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S0 = decltype(tag);
    if constexpr (std::is_same_v<S0, bool>) no_kernel(c);
    else {
      using S = UnsignedOf<S0>;  // wrapping sums and products agree for signed and unsigned
      return simple_kernel<S>(c, pr.plan, [](void* o) { return SumP<S, Prod>{static_cast<S*>(o)}; });
    }
  });
}

template <bool Max>
KernelFn ext_kernel(const KernelCtx& c) {
  auto pr = prepare(c);
  if (pr.plan.num_red == 0 && pr.plan.num_out > 0)
    raise(ErrorKind::Value, c.node.op->name, c.node.name, "zero-size reduction has no identity");
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S0 = decltype(tag);
    using S = std::conditional_t<std::is_same_v<S0, bool>, uint8_t, S0>;  // bool: 0/1 bytes
    return simple_kernel<S>(c, pr.plan, [](void* o) { return ExtP<S, Max>{static_cast<S*>(o)}; });
  });
}

template <bool And>
KernelFn logic_kernel(const KernelCtx& c) {
  auto pr = prepare(c);
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S0 = decltype(tag);
    // bool and integers: a nonzero test on the unsigned type of the same width
    using S = UnsignedOf<S0>;
    return simple_kernel<S>(c, pr.plan, [](void* o) { return LogicP<S, And>{static_cast<bool*>(o)}; });
  });
}

template <bool Max>
KernelFn arg_kernel(const KernelCtx& c) {
  auto pr = prepare(c, {typed_attrs<ops::ArgReductionAttrs>(c.node).axis});
  if (pr.plan.num_red == 0 && pr.plan.num_out > 0)
    raise(ErrorKind::Value, c.node.op->name, c.node.name, "zero-size reduction has no identity");
  bool out64 = pr.out == DType::Int64;
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, bool>) no_kernel(c);
    else return simple_kernel<S>(c, pr.plan, [out64](void* o) { return ArgP<S, Max>{o, out64}; });
  });
}

KernelFn mean_kernel(const KernelCtx& c) {
  auto pr = prepare(c);
  double n = double(pr.plan.num_red);
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    if constexpr (!std::is_floating_point_v<S>) no_kernel(c);
    else {
      const LanesSumFn f = lanes_sum_fn();
#if MG_CPU_X86
      if constexpr (std::is_same_v<S, float>)
        if (f && rows_in_order(pr.plan) && !switched_off("MPSGRAPH_CPU_MEAN_ROWS")) {
          const int64_t rows = pr.plan.num_out, len = pr.plan.num_red;
          const int64_t grain = std::max<int64_t>(1, 32768 / len);  // run_plan's
          return [rows, len, grain](const void* const* in, void* const* out) {
            const float* x = static_cast<const float*>(in[0]);
            float* y = static_cast<float*>(out[0]);
            parallel_for(rows, grain, [&](int64_t b, int64_t e) { mean_rows_avx2(x + b * len, e - b, len, y + b); });
          };
        }
#endif
      return simple_kernel<S>(c, pr.plan, [n, f](void* o) { return MeanP<S>{o, false, n, f}; });
    }
  });
}

KernelFn variance_kernel(const KernelCtx& c) {
  auto pr = prepare(c);
  double n = double(pr.plan.num_red);
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    if constexpr (!std::is_floating_point_v<S>) no_kernel(c);
    else {
      const ReducePlan plan = pr.plan;
      size_t np = plan.chunks > 1 ? size_t(plan.chunks * plan.num_out) : 0;
      const size_t mean = c.scratch(size_t(std::max<int64_t>(plan.num_out, 0)) * sizeof(double));
      const size_t partial = c.scratch(np * sizeof(double));
      const LanesSumFn f = lanes_sum_fn();
      return [plan, n, mean, partial, f](const void* const* in, void* const* out) {
        const S* x = static_cast<const S*>(in[0]);
        double* m = static_cast<double*>(out[mean]);
        double* p = static_cast<double*>(out[partial]);
        run_plan(MeanP<S>{m, true, n, f}, plan, x, p);
        run_plan(VarP<S>{static_cast<S*>(out[0]), m, n}, plan, x, p);
      };
    }
  });
}

KernelFn logsumexp_kernel(const KernelCtx& c) {
  auto pr = prepare(c);
  return dispatch_reduce(c, pr, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    if constexpr (!std::is_floating_point_v<S>) no_kernel(c);
    else {
      // pass 1 is reduction_maximum's own loop (the max is exact in S); pass 2 sums exp(x - max)
      const ReducePlan plan = pr.plan;
      size_t np = plan.chunks > 1 ? size_t(plan.chunks * plan.num_out) : 0;
      const size_t mx = c.scratch(size_t(std::max<int64_t>(plan.num_out, 0)) * sizeof(S));
      const size_t pmax = c.scratch(np * sizeof(S));
      const size_t psum = c.scratch(np * sizeof(double));
      return [plan, mx, pmax, psum](const void* const* in, void* const* out) {
        const S* x = static_cast<const S*>(in[0]);
        S* m = static_cast<S*>(out[mx]);
        run_plan(ExtP<S, true>{m}, plan, x, static_cast<S*>(out[pmax]));
        run_plan(LseP<S>{static_cast<S*>(out[0]), m}, plan, x, static_cast<double*>(out[psum]));
      };
    }
  });
}

}  // namespace

ReduceWalk reduce_walk(const Shape& shape, const std::vector<int64_t>& axes) {
  const ReducePlan p = make_plan(shape, axes);
  ReduceWalk w;
  w.num_out = p.num_out;
  w.num_red = p.num_red;
  w.inner_kept = p.inner_kept;
  w.chunks = p.chunks;
  w.simple = p.num_out > 0 && p.num_red > 0 && p.kept_off.size() == 1 && p.red_off.size() == 1 &&
             (p.inner_kept ? p.r_stride != 1 : p.r_stride == 1);
  return w;
}

void register_reduction_kernels() {
  register_kernel("reduction_sum", sum_kernel<false>);
  register_kernel("reduction_product", sum_kernel<true>);
  register_kernel("reduction_maximum", ext_kernel<true>);
  register_kernel("reduction_minimum", ext_kernel<false>);
  register_kernel("reduction_and", logic_kernel<true>);
  register_kernel("reduction_or", logic_kernel<false>);
  register_kernel("reduction_arg_maximum", arg_kernel<true>);
  register_kernel("reduction_arg_minimum", arg_kernel<false>);
  register_kernel("mean", mean_kernel);
  register_kernel("variance", variance_kernel);
  register_kernel("logsumexp", logsumexp_kernel);
}

}  // namespace mg::cpu
