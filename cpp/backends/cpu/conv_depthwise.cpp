// Depthwise 3x3 rows (see conv_depthwise.h). The loop is plain C++ that compilers vectorise
// (stride 2 as even/odd lane shuffles), instantiated for AVX2 and the baseline, and AVX2 rows
// and planes written by hand (AVX-512 CPUs run those); the caller handles the edge columns
// where a tap falls in the padding.
#include "backends/cpu/conv_depthwise.h"

#include "backends/cpu/avx2_pairs.h"
#include "backends/cpu/isa_target.h"

#include <algorithm>

#if MG_CPU_X86
#include <immintrin.h>
#endif

namespace mg::cpu {

namespace {

template <int S>
inline void row_body(const float* const* rows, const float* w, float* __restrict y, int64_t j0, int64_t j1, float bias,
                     float lo, float hi) {
  const float* __restrict a = rows[0];
  const float* __restrict b = rows[1];
  const float* __restrict c = rows[2];
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t i = j * S;
    float v = w0 * a[i];  // taps in the generic path's order
    v += w1 * a[i + 1];
    v += w2 * a[i + 2];
    v += w3 * b[i];
    v += w4 * b[i + 1];
    v += w5 * b[i + 2];
    v += w6 * c[i];
    v += w7 * c[i + 1];
    v += w8 * c[i + 2];
    v += bias;
    v = v <= lo ? lo : v;
    y[j] = v >= hi ? hi : v;
  }
}

template <int S>
void row_generic(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1, float bias, float lo,
                 float hi) {
  row_body<S>(rows, w, y, j0, j1, bias, lo, hi);
}

#if MG_CPU_X86
template <int S>
MG_TARGET_AVX2 void row_avx2(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1, float bias,
                             float lo, float hi) {
  row_body<S>(rows, w, y, j0, j1, bias, lo, hi);
}

// A row call's weights, bias and bounds in every lane.
struct RowVectors {
  __m256 w[9], bias, lo, hi;
};
MG_TARGET_AVX2 inline RowVectors row_vectors(const float* w, float bias, float lo, float hi) {
  RowVectors k;
  for (int t = 0; t < 9; ++t) k.w[t] = _mm256_set1_ps(w[t]);
  k.bias = _mm256_set1_ps(bias), k.lo = _mm256_set1_ps(lo), k.hi = _mm256_set1_ps(hi);
  return k;
}

// The bias, then the clamp as row_body's compares do it (a NaN passes).
MG_TARGET_AVX2 inline __m256 bias_clamp(__m256 v, const RowVectors& k) {
  v = _mm256_add_ps(v, k.bias);
  v = _mm256_blendv_ps(v, k.lo, _mm256_cmp_ps(v, k.lo, _CMP_LE_OQ));
  return _mm256_blendv_ps(v, k.hi, _mm256_cmp_ps(v, k.hi, _CMP_GE_OQ));
}

// The first n (< 8) lanes of v at p: a plane's last row when rows are shorter than 8.
MG_TARGET_AVX2 inline void store_first(float* p, __m256 v, int64_t n) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int64_t i = 0; i < n; ++i) p[i] = t[i];
}

// Stride 2 by hand (GCC's vectorised stride-2 loop is slower than ONNX Runtime's by 2x): the
// even and odd source columns of 8 outputs come from two loads and one shuffle each, in the
// lane order (0 1 4 5 2 3 6 7) that the shuffles leave; one permute puts the sums in order. The
// taps add in the same order as row_body, as fused multiply-adds.
//
// NR (1 or 2) stride-2 output rows' 8 outputs at column j from source rows src[0 .. 2 NR]:
// output row r reads rows 2r to 2r + 2 (from the phases: even row r, odd row r, even row r + 1),
// so a pair shares one. The third tap's sources (2j + 2) are the odd ones from 2j + 1, so 8
// outputs read up to source 2j + 16, no further than the scalar loop.
// last: the lanes stored of the last of the NR rows (8: all).
template <int NR>
MG_TARGET_AVX2 inline void s2_rows(const float* const* src, const RowVectors& k, float* y, int64_t ol, int64_t j,
                                   int64_t last = 8) {
  __m256 v[NR];
  const int64_t i = 2 * j;
#pragma GCC unroll 5
  for (int s = 0; s < 2 * NR + 1; ++s) {  // source row s
    const float* p = src[s] + i;
    const __m256 x[3] = {load_evens_or_odds(p, true), load_evens_or_odds(p, false), load_evens_or_odds(p + 1, false)};
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const int kt = s - 2 * r;
      if (kt < 0 || kt > 2) continue;
      int t = 0;
      if (kt == 0) v[r] = _mm256_mul_ps(k.w[0], x[0]), t = 1;
      for (; t < 3; ++t) v[r] = _mm256_fmadd_ps(k.w[3 * kt + t], x[t], v[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    if (r == NR - 1 && last < 8) store_first(y + r * ol + j, in_order(bias_clamp(v[r], k)), last);
    else store_in_order(y + r * ol + j, bias_clamp(v[r], k));
  }
}

MG_TARGET_AVX2 void row_avx2_s2(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1, float bias,
                                float lo, float hi) {
  const RowVectors k = row_vectors(w, bias, lo, hi);
  int64_t j = j0;
  // a last group of fewer than 8 is redone as the row's last 8 outputs (the same values)
  for (; j + 8 <= j1; j += 8) s2_rows<1>(rows, k, y, 0, j);
  if (j < j1 && j1 - j0 >= 8) return s2_rows<1>(rows, k, y, 0, j1 - 8);
  row_body<2>(rows, w, y, j, j1, bias, lo, hi);
}

// NR (1 or 2) stride-1 output rows' 8 outputs at column j from source rows src[0 .. NR + 1]:
// row r's taps read rows r to r + 2, so a pair loads four rows, not six. The taps add as GCC
// contracts row_body's: the first tap fused onto the second's product, then the rest in order.
// last: as s2_rows'.
template <int NR>
MG_TARGET_AVX2 inline void s1_rows(const float* const* src, const RowVectors& k, float* y, int64_t ol, int64_t j,
                                   int64_t last = 8) {
  __m256 v[NR];
#pragma GCC unroll 4
  for (int s = 0; s < NR + 2; ++s) {  // source row s
    const __m256 x[3] = {_mm256_loadu_ps(src[s] + j), _mm256_loadu_ps(src[s] + j + 1), _mm256_loadu_ps(src[s] + j + 2)};
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const int kt = s - r;  // the tap row of source row s for output row r
      if (kt < 0 || kt > 2) continue;
      int t = 0;
      if (kt == 0) v[r] = _mm256_fmadd_ps(k.w[0], x[0], _mm256_mul_ps(k.w[1], x[1])), t = 2;
      for (; t < 3; ++t) v[r] = _mm256_fmadd_ps(k.w[3 * kt + t], x[t], v[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    if (r == NR - 1 && last < 8) store_first(y + r * ol + j, bias_clamp(v[r], k), last);
    else _mm256_storeu_ps(y + r * ol + j, bias_clamp(v[r], k));
  }
}

// Stride 1: the compiler's loop over whole vectors, then a last group of fewer than 8 as the
// row's last 8 outputs redone by hand (the same sums) instead of the compiler's scalar
// remainder of up to 7 outputs of 9 taps each: on 7x7 planes (61 outputs a bordered plane) a
// third of the work.
MG_TARGET_AVX2 void row_avx2_s1(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1, float bias,
                                float lo, float hi) {
  const int64_t n = j1 - j0, rest = n % 8;
  if (n < 8 || rest == 0) return row_body<1>(rows, w, y, j0, j1, bias, lo, hi);
  row_body<1>(rows, w, y, j0, j1 - rest, bias, lo, hi);  // the compiler's loop, in whole vectors
  s1_rows<1>(rows, row_vectors(w, bias, lo, hi), y, 0, j1 - 8);
}

using RowsFn = void (*)(const float* const* src, const RowVectors& k, float* y, int64_t ol, int64_t j, int64_t last);

// NR output rows of ol by Rows (s1_rows or s2_rows) from source rows src, 8 outputs a step. A
// row's last group of fewer than 8 is redone as its last 8 outputs (the same values). Rows
// shorter than 8 (4 to 7) are one vector each whose lanes past the row spill into the next
// row's first outputs, which that row's store then overwrites; the plane's last row (last:
// true) stores only its own.
template <RowsFn Rows>
MG_TARGET_AVX2 inline void row_group(const float* const* src, const RowVectors& k, float* y, int64_t ol, bool last) {
  if (ol < 8) return Rows(src, k, y, ol, 0, last ? ol : 8);
  int64_t j = 0;
  for (; j + 8 <= ol; j += 8) Rows(src, k, y, ol, j, 8);
  if (j < ol) Rows(src, k, y, ol, ol - 8, 8);
}

template <int NR>
MG_TARGET_AVX2 inline void s1_row_group(const float* b, int64_t wb, const RowVectors& k, float* y, int64_t ol,
                                        bool last) {
  const float* src[4] = {b, b + wb, b + 2 * wb, b + 3 * wb};
  row_group<s1_rows<NR>>(src, k, y, ol, last);
}

MG_TARGET_AVX2 void plane_avx2_s1(const float* b, int64_t wb, const float* w, float* y, int64_t ol, int64_t nr,
                                  float bias, float lo, float hi) {
  const RowVectors k = row_vectors(w, bias, lo, hi);
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) s1_row_group<2>(b + r * wb, wb, k, y + r * ol, ol, r + 2 == nr);
  if (r < nr) s1_row_group<1>(b + r * wb, wb, k, y + r * ol, ol, true);
}

template <int NR>
MG_TARGET_AVX2 inline void s2_row_group(const float* even, const float* odd, int64_t wb, const RowVectors& k, float* y,
                                        int64_t ol, bool last) {
  const float* src[5] = {even, odd, even + wb, odd + wb, even + 2 * wb};
  row_group<s2_rows<NR>>(src, k, y, ol, last);
}

MG_TARGET_AVX2 void plane_avx2_s2(const float* even, const float* odd, int64_t wb, const float* w, float* y, int64_t ol,
                                  int64_t nr, float bias, float lo, float hi) {
  const RowVectors k = row_vectors(w, bias, lo, hi);
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) s2_row_group<2>(even + r * wb, odd + r * wb, wb, k, y + r * ol, ol, r + 2 == nr);
  if (r < nr) s2_row_group<1>(even + r * wb, odd + r * wb, wb, k, y + r * ol, ol, true);
}
#endif

// ---- 16 channels at once (Dw3Block16Fn) ----

// The bordered plane of 16-channel pixels: its width and height.
inline int64_t block_wb(const Dw3Block& b) { return std::max(b.pad_l + b.iw, b.stride * (b.ow - 1) + 3); }
inline int64_t block_hb(const Dw3Block& b) { return std::max(b.pad_t + b.ih, b.stride * (b.oh - 1) + 3); }

#if MG_CPU_X86
// A call's weights (per tap: one weight, or 16 channels' taps), bias and bounds, 16 lanes.
struct RowVectors512 {
  __m512 w[9], bias, lo, hi;
};
MG_TARGET_AVX512 inline RowVectors512 row_vectors512(const float* w, float bias, float lo, float hi) {
  RowVectors512 k;
  for (int t = 0; t < 9; ++t) k.w[t] = _mm512_set1_ps(w[t]);
  k.bias = _mm512_set1_ps(bias), k.lo = _mm512_set1_ps(lo), k.hi = _mm512_set1_ps(hi);
  return k;
}

// As bias_clamp (a NaN passes).
MG_TARGET_AVX512 inline __m512 bias_clamp512(__m512 v, const RowVectors512& k) {
  v = _mm512_add_ps(v, k.bias);
  v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, k.lo, _CMP_LE_OQ), v, k.lo);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, k.hi, _CMP_GE_OQ), v, k.hi);
}

// The first n (0 to 16) lanes.
MG_TARGET_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Shuffles through their zero-masked forms with every lane kept: GCC 12 warns of the
// unmasked forms' undefined pass-through operand.
constexpr __mmask16 kAll16 = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

// The low or high float pairs of each 128-bit lane of a, then of b.
MG_TARGET_AVX512 inline __m512 pairs_lo(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, _mm512_castps_pd(a), _mm512_castps_pd(b)));
}
MG_TARGET_AVX512 inline __m512 pairs_hi(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, _mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// r[i] (16 rows of 16) transposed in place: r[j][i] = old r[i][j].
MG_TARGET_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll16, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = pairs_lo(t[i], t[i + 2]);
    r[i + 1] = pairs_hi(t[i], t[i + 2]);
    r[i + 2] = pairs_lo(t[i + 1], t[i + 3]);
    r[i + 3] = pairs_hi(t[i + 1], t[i + 3]);
  }
  // r[4g + c] now holds, in 128-bit lane L, column 4L + c of rows 4g .. 4g + 3
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 2; ++k) {
      t[i + 4 * k] = _mm512_maskz_shuffle_f32x4(kAll16, r[i + 8 * k], r[i + 8 * k + 4], _MM_SHUFFLE(2, 0, 2, 0));
      t[i + 4 * k + 8] = _mm512_maskz_shuffle_f32x4(kAll16, r[i + 8 * k], r[i + 8 * k + 4], _MM_SHUFFLE(3, 1, 3, 1));
    }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_maskz_shuffle_f32x4(kAll16, t[i], t[i + 4], _MM_SHUFFLE(2, 0, 2, 0));
    r[i + 8] = _mm512_maskz_shuffle_f32x4(kAll16, t[i], t[i + 4], _MM_SHUFFLE(3, 1, 3, 1));
    r[i + 4] = _mm512_maskz_shuffle_f32x4(kAll16, t[i + 8], t[i + 12], _MM_SHUFFLE(2, 0, 2, 0));
    r[i + 12] = _mm512_maskz_shuffle_f32x4(kAll16, t[i + 8], t[i + 12], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

MG_TARGET_AVX512 void block16_avx512(const Dw3Block& b, const float* x, int64_t in_plane, const float* w,
                                     const float* bias, int64_t bias_step, float lo, float hi, float* y, int64_t op,
                                     float* scratch) {
  const int64_t wb = block_wb(b), hb = block_hb(b), ip = b.ih * b.iw, np = b.oh * b.ow;
  float* X = scratch;           // hb x wb pixels of 16 channels, zero-bordered
  float* Y = X + hb * wb * 16;  // oh x ow output pixels of 16 channels
  // the border: rows above and below the source, columns left and right of it
  const int64_t bottom = b.pad_t + b.ih, right = b.pad_l + b.iw;
  std::fill(X, X + b.pad_t * wb * 16, 0.0f);
  std::fill(X + bottom * wb * 16, X + hb * wb * 16, 0.0f);
  for (int64_t row = b.pad_t; row < bottom; ++row) {
    std::fill(X + row * wb * 16, X + (row * wb + b.pad_l) * 16, 0.0f);
    std::fill(X + (row * wb + right) * 16, X + (row + 1) * wb * 16, 0.0f);
  }
  // in: the planes' pixels 16 at a time (flat, across rows), transposed into X's pixels
  int64_t row = 0, col = 0;  // of pixel p0 + i
  for (int64_t p0 = 0; p0 < ip; p0 += 16) {
    const int64_t n = std::min<int64_t>(16, ip - p0);
    const __mmask16 m = first_lanes(n);
    __m512 r[16];
    for (int c = 0; c < 16; ++c) r[c] = _mm512_maskz_loadu_ps(m, x + c * in_plane + p0);
    transpose16(r);
    for (int64_t i = 0; i < n; ++i) {
      _mm512_storeu_ps(X + ((row + b.pad_t) * wb + col + b.pad_l) * 16, r[i]);
      if (++col == b.iw) col = 0, ++row;
    }
  }
  RowVectors512 k;  // tap t of the 16 channels, their biases
  for (int t = 0; t < 9; ++t) {
    alignas(64) float v[16];
    for (int c = 0; c < 16; ++c) v[c] = w[c * 9 + t];
    k.w[t] = _mm512_load_ps(v);
  }
  alignas(64) float bv[16];
  for (int c = 0; c < 16; ++c) bv[c] = bias[c * bias_step];
  k.bias = _mm512_load_ps(bv), k.lo = _mm512_set1_ps(lo), k.hi = _mm512_set1_ps(hi);
  // Up to 4 output pixels at a time, their sums interleaved: one pixel's nine taps wait on each
  // other. The taps in the order of the rows' kernels: stride 1 as GCC contracts row_body's (the
  // first tap fused onto the second's product), stride 2 a product then multiply-adds.
  const int64_t s = b.stride, oh = b.oh, ow = b.ow, row_floats = wb * 16, step = s * 16;
  const bool s1 = s == 1;
  for (int64_t r = 0; r < oh; ++r) {
    const float* x0 = X + r * s * row_floats;
    float* yr = Y + r * ow * 16;
    for (int64_t j = 0; j < ow; j += 4) {
      const int np4 = int(std::min<int64_t>(4, ow - j));
      __m512 v[4];  // the loops run to 4 and break: bounded by np4 they ran 1.2x slower (7x7 planes)
      for (int q = 0; q < 4; ++q) {
        if (q >= np4) break;
        const float* a = x0 + (j + q) * step;
        v[q] = s1 ? _mm512_fmadd_ps(k.w[0], _mm512_loadu_ps(a), _mm512_mul_ps(k.w[1], _mm512_loadu_ps(a + 16)))
                  : _mm512_fmadd_ps(k.w[1], _mm512_loadu_ps(a + 16), _mm512_mul_ps(k.w[0], _mm512_loadu_ps(a)));
      }
      for (int t = 2; t < 9; ++t) {
        const int64_t off = (t / 3) * row_floats + (t % 3) * 16;
        for (int q = 0; q < 4; ++q) {
          if (q >= np4) break;
          v[q] = _mm512_fmadd_ps(k.w[t], _mm512_loadu_ps(x0 + (j + q) * step + off), v[q]);
        }
      }
      for (int q = 0; q < np4; ++q) _mm512_storeu_ps(yr + (j + q) * 16, bias_clamp512(v[q], k));
    }
  }
  // out: 16 pixels at a time transposed back into the 16 output planes
  for (int64_t p0 = 0; p0 < np; p0 += 16) {
    const int64_t n = std::min<int64_t>(16, np - p0);
    const __mmask16 m = first_lanes(n);
    __m512 r[16];
    for (int64_t i = 0; i < 16; ++i) r[i] = i < n ? _mm512_loadu_ps(Y + (p0 + i) * 16) : _mm512_setzero_ps();
    transpose16(r);
    for (int c = 0; c < 16; ++c) _mm512_mask_storeu_ps(y + c * op + p0, m, r[c]);
  }
}

// ---- AVX-512 rows: 16 outputs a vector, the same taps in the same order as the AVX2 rows ----

// As s1_rows, for n (1 to 16) outputs at column j: the loads and stores masked to the lanes
// they need, so a row's last vector neither reads nor writes past it.
template <int NR>
MG_TARGET_AVX512 inline void s1_rows512(const float* const* src, const RowVectors512& k, float* y, int64_t ol,
                                        int64_t j, int64_t n) {
  const __mmask16 m = first_lanes(n);
  __m512 v[NR];
#pragma GCC unroll 4
  for (int s = 0; s < NR + 2; ++s) {
    const float* p = src[s] + j;
    const __m512 x[3] = {_mm512_maskz_loadu_ps(m, p), _mm512_maskz_loadu_ps(m, p + 1), _mm512_maskz_loadu_ps(m, p + 2)};
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const int kt = s - r;
      if (kt < 0 || kt > 2) continue;
      int t = 0;
      if (kt == 0) v[r] = _mm512_fmadd_ps(k.w[0], x[0], _mm512_mul_ps(k.w[1], x[1])), t = 2;
      for (; t < 3; ++t) v[r] = _mm512_fmadd_ps(k.w[3 * kt + t], x[t], v[r]);
    }
  }
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + r * ol + j, m, bias_clamp512(v[r], k));
}

// As s2_rows, for n (1 to 16) outputs at column j: the even, odd and next-even sources of 16
// outputs by two-source permutes of four loads (the columns 2j to 2j + 2n, no further).
template <int NR>
MG_TARGET_AVX512 inline void s2_rows512(const float* const* src, const RowVectors512& k, float* y, int64_t ol,
                                        int64_t j, int64_t n) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  // a load at offset o reads the lanes l with o + l <= 2n
  const __mmask16 m0 = first_lanes(2 * n + 1), m16 = first_lanes(2 * n - 15), m2 = first_lanes(2 * n - 1),
                  m18 = first_lanes(2 * n - 17);
  __m512 v[NR];
#pragma GCC unroll 5
  for (int s = 0; s < 2 * NR + 1; ++s) {
    const float* p = src[s] + 2 * j;
    const __m512 a = _mm512_maskz_loadu_ps(m0, p), b = _mm512_maskz_loadu_ps(m16, p + 16);
    const __m512 a2 = _mm512_maskz_loadu_ps(m2, p + 2), b2 = _mm512_maskz_loadu_ps(m18, p + 18);
    const __m512 x[3] = {_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b),
                         _mm512_permutex2var_ps(a2, even, b2)};
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const int kt = s - 2 * r;
      if (kt < 0 || kt > 2) continue;
      int t = 0;
      if (kt == 0) v[r] = _mm512_mul_ps(k.w[0], x[0]), t = 1;
      for (; t < 3; ++t) v[r] = _mm512_fmadd_ps(k.w[3 * kt + t], x[t], v[r]);
    }
  }
  const __mmask16 m = first_lanes(n);
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + r * ol + j, m, bias_clamp512(v[r], k));
}

using Rows512Fn = void (*)(const float* const* src, const RowVectors512& k, float* y, int64_t ol, int64_t j,
                           int64_t n);

// NR output rows of ol by Rows, 16 outputs a step, the last step masked.
template <Rows512Fn Rows>
MG_TARGET_AVX512 inline void row_group512(const float* const* src, const RowVectors512& k, float* y, int64_t ol) {
  for (int64_t j = 0; j < ol; j += 16) Rows(src, k, y, ol, j, std::min<int64_t>(16, ol - j));
}

MG_TARGET_AVX512 void row_avx512_s2(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1,
                                    float bias, float lo, float hi) {
  const RowVectors512 k = row_vectors512(w, bias, lo, hi);
  for (int64_t j = j0; j < j1; j += 16) s2_rows512<1>(rows, k, y, 0, j, std::min<int64_t>(16, j1 - j));
}

MG_TARGET_AVX512 void plane_avx512_s1(const float* b, int64_t wb, const float* w, float* y, int64_t ol, int64_t nr,
                                      float bias, float lo, float hi) {
  const RowVectors512 k = row_vectors512(w, bias, lo, hi);
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) {
    const float* src[4] = {b + r * wb, b + (r + 1) * wb, b + (r + 2) * wb, b + (r + 3) * wb};
    row_group512<s1_rows512<2>>(src, k, y + r * ol, ol);
  }
  if (r < nr) {
    const float* src[3] = {b + r * wb, b + (r + 1) * wb, b + (r + 2) * wb};
    row_group512<s1_rows512<1>>(src, k, y + r * ol, ol);
  }
}

MG_TARGET_AVX512 void plane_avx512_s2(const float* even, const float* odd, int64_t wb, const float* w, float* y,
                                      int64_t ol, int64_t nr, float bias, float lo, float hi) {
  const RowVectors512 k = row_vectors512(w, bias, lo, hi);
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) {
    const float* e = even + r * wb;
    const float* o = odd + r * wb;
    const float* src[5] = {e, o, e + wb, o + wb, e + 2 * wb};
    row_group512<s2_rows512<2>>(src, k, y + r * ol, ol);
  }
  if (r < nr) {
    const float* src[3] = {even + r * wb, odd + r * wb, even + (r + 1) * wb};
    row_group512<s2_rows512<1>>(src, k, y + r * ol, ol);
  }
}
#endif

}  // namespace

Dw3RowFn dw3_row_fn(int64_t stride, bool s1_by_hand, bool avx512) {
  if (stride != 1 && stride != 2) return nullptr;
  const bool s1 = stride == 1;
#if MG_CPU_X86
  // AVX-512 CPUs run the hand-written 16-lane planes and stride-2 rows, else the 8-lane ones
  // (the compiler's 16-lane rows had run MobileNetV2's 112x112 and 56x56 layers 1.2x slower
  // than the 8-lane ones; the flat stride-1 rows stay 8-lane)
  if (!s1 && avx512 && best_isa() == Isa::Avx512) return row_avx512_s2;
  if (best_isa() != Isa::Generic) return s1 ? (s1_by_hand ? row_avx2_s1 : row_avx2<1>) : row_avx2_s2;
#else
  (void)s1_by_hand, (void)avx512;
#endif
  return s1 ? row_generic<1> : row_generic<2>;
}

Dw3PlaneFn dw3_s1_plane_fn(bool avx512) {
#if MG_CPU_X86
  if (avx512 && best_isa() == Isa::Avx512) return plane_avx512_s1;
  if (best_isa() != Isa::Generic) return plane_avx2_s1;
#else
  (void)avx512;
#endif
  return nullptr;
}

Dw3PhasePlaneFn dw3_s2_plane_fn(bool avx512) {
#if MG_CPU_X86
  if (avx512 && best_isa() == Isa::Avx512) return plane_avx512_s2;
  if (best_isa() != Isa::Generic) return plane_avx2_s2;
#else
  (void)avx512;
#endif
  return nullptr;
}

Dw3Block16Fn dw3_block16_fn() {
#if MG_CPU_X86
  if (best_isa() == Isa::Avx512) return block16_avx512;
#endif
  return nullptr;
}

int64_t dw3_block16_scratch(const Dw3Block& b) { return (block_hb(b) * block_wb(b) + b.oh * b.ow) * 16; }

}  // namespace mg::cpu
