// Winograd F(2x2, 3x3) for float32 2-d convolutions with 3x3 kernels, unit strides and
// dilations and one group (most of ResNet's work): each 4x4 source tile and each kernel are
// transformed so that a 2x2 output tile costs 16 multiplies per (input, output) channel pair
// instead of 36, as 16 GEMMs (O x C) @ (C x tiles); constant weights are transformed and packed
// (conv_gemm_packed.h) at compile. Units of whole tile rows of one image go
// over the pool, each with its own transformed tiles; the epilogue runs on their output rows.
// Accuracy: the transforms only add, subtract and halve, so the error stays within a small
// multiple of the direct sum's (|error| <= 2e-6 * sum |w| |x| in float32, tested). A tile
// mixes 16 sources into every output, so an infinity or NaN would reach outputs that do not
// read it: a run that meets one (in the source or the weights) reruns on the generic path.
#include "backends/cpu/conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/avx2_pairs.h"
#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/conv_gemm_packed.h"
#include "backends/cpu/isa_target.h"
#include "backends/cpu/unit_shares.h"
#include "core/ops/convolution_attrs.h"
#include "core/typed_attrs.h"

#if MG_CPU_X86
#include <immintrin.h>
#endif

namespace mg::cpu {

namespace {

constexpr int64_t kTilesPerUnit = 512;  // GEMM columns per unit (about)
constexpr int64_t kMinTiles = 400;      // fewer output tiles in all: the generic path is faster
constexpr int64_t kMinTilesPerImage = 36;  // the same with weights transformed at compile
// the same on AVX-512 (the channels kernel of two panels): ResNet-18's 7x7 512-channel layers
// (16 tiles an image) 1.22x alone at batch 8; with the channels split at batch 1 (below) and
// the 16 packed products in one huge-page allocation, the network 1.08x at batch 1 and 1.045x
// at batch 8 (a Xeon)
constexpr int64_t kMinTilesPerImageWide = 16;
// tiles per unit from which the packed planes layout beats the channels one (measured on AVX2:
// the channels one wins on 7x7 tile grids of 256 channels, loses at 64 tiles of 64 channels).
// AVX-512's channels kernel runs two panels at a time: there it also wins at 98 and 196 tiles
// of 128 channels (ResNet-18's 28x28 layers at batch 1 and 8, about 1.2x on a Xeon) and loses
// at 392 tiles of 64 channels (the 56x56 ones, 0.95x).
constexpr int64_t kPackedPlanesTiles = 64, kPackedPlanesTilesWide = 256;

struct Wino {
  int64_t N = 0, C = 0, O = 0, H = 0, W = 0, pt = 0, pl = 0, OH = 0, OW = 0, th = 0, tw = 0;
  int64_t rows = 1, blocks = 1;  // tile rows per unit, units per image
  int slots = 1;
  bool by_channels = false;  // units one at a time, split over source, then output channels
  bool avx2 = false;  // the transforms' AVX2 loops (MPSGRAPH_CPU_WINOGRAD_AVX2=0: the scalar ones)
  // on AVX-512 CPUs, 16 tiles a vector instead of 8 (MPSGRAPH_CPU_WINOGRAD_AVX512=0: the AVX2 loops)
  bool avx512 = false;
  bool own_shares = false;  // each slot claims its own contiguous share of the units first (unit_shares.h)
  bool pool = false;  // the epilogue's 2x2 pool: each unit's output rows go to R, pooled into y from there
  int64_t v_elems = 0, m_elems = 0, r_elems = 0;  // per slot
  size_t u_idx = 0, v_idx = 0, m_idx = 0, r_idx = 0;
};

// B^T d B of a 4x4 source tile d: v[i][j] is plane 4i + j. V is a float or a vector of tiles
// (+ and - per lane): every form makes the same adds and subtracts in the same order, so the
// scalar, AVX2 and AVX-512 transforms give the same bits.
template <class V>
[[gnu::always_inline]] inline void input_tile(const V (&d)[4][4], V (&v)[4][4]) {
  V t[4][4];  // B^T d
  for (int j = 0; j < 4; ++j) {
    t[0][j] = d[0][j] - d[2][j];
    t[1][j] = d[1][j] + d[2][j];
    t[2][j] = d[2][j] - d[1][j];
    t[3][j] = d[1][j] - d[3][j];
  }
  for (int i = 0; i < 4; ++i) {
    v[i][0] = t[i][0] - t[i][2];
    v[i][1] = t[i][1] + t[i][2];
    v[i][2] = t[i][2] - t[i][1];
    v[i][3] = t[i][1] - t[i][3];
  }
}

// A^T m A of a tile's 16 products m (plane 4i + j): y[i][c], output row i, column c; as
// input_tile, the same bits in every form.
template <class V>
[[gnu::always_inline]] inline void output_tile(const V (&m)[16], V (&y)[2][2]) {
  V s[2][4];  // A^T m
  for (int j = 0; j < 4; ++j) {
    s[0][j] = m[j] + m[4 + j] + m[8 + j];
    s[1][j] = m[4 + j] - m[8 + j] - m[12 + j];
  }
  for (int i = 0; i < 2; ++i) {
    y[i][0] = s[i][0] + s[i][1] + s[i][2];
    y[i][1] = s[i][1] - s[i][2] - s[i][3];
  }
}

// U[xi][o][c] = (G g G^T)[xi] for each 3x3 kernel g. False when a weight is not finite.
bool transform_weights(const Wino& q, const float* w, float* U) {
  const int64_t OC = q.O * q.C;
  std::atomic<bool> finite{true};
  parallel_for(OC, 256, [&](int64_t b, int64_t e) {
    float z = 0.0f;  // stays 0 unless an infinity or NaN is multiplied in
    for (int64_t i = b * 9; i < e * 9; ++i) z += w[i] * 0.0f;
    if (!(z == 0.0f)) finite = false;
    for (int64_t i = b; i < e; ++i) {
      const float* g = w + i * 9;
      float t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[j];
        t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (int r = 0; r < 4; ++r) {
        const float a = t[r][0], bb = t[r][1], c = t[r][2];
        U[(r * 4 + 0) * OC + i] = a;
        U[(r * 4 + 1) * OC + i] = 0.5f * (a + bb + c);
        U[(r * 4 + 2) * OC + i] = 0.5f * (a - bb + c);
        U[(r * 4 + 3) * OC + i] = c;
      }
    }
  });
  return finite;
}

// V[xi][c][t] = (B^T d B)[xi] for the tiles of tile rows [ty0, ty1) of one image, channels
// [c0, c1). False when a source value is not finite.
bool transform_input_avx2(const Wino& q, const float* x, float* V, int64_t ty0, int64_t ty1, int64_t c0,
                          int64_t c1);
bool transform_input_avx512(const Wino& q, const float* x, float* V, int64_t ty0, int64_t ty1, int64_t c0,
                            int64_t c1);

bool transform_input(const Wino& q, const float* x, float* V, int64_t ty0, int64_t ty1, int64_t c0, int64_t c1) {
#if MG_CPU_X86
  if (q.avx512) return transform_input_avx512(q, x, V, ty0, ty1, c0, c1);
  if (q.avx2) return transform_input_avx2(q, x, V, ty0, ty1, c0, c1);
#endif
  const int64_t T = (ty1 - ty0) * q.tw, CT = q.C * T;
  float z = 0.0f;
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = x + c * q.H * q.W;
    float* vc = V + c * T;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const int64_t r0 = 2 * ty - q.pt;
      for (int64_t tx = 0; tx < q.tw; ++tx) {
        const int64_t c0 = 2 * tx - q.pl;
        float d[4][4];
        if (r0 >= 0 && r0 + 4 <= q.H && c0 >= 0 && c0 + 4 <= q.W) {
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) d[i][j] = xc[(r0 + i) * q.W + c0 + j];
          for (int i = 0; i < 4; ++i) z += (d[i][0] + d[i][1] + d[i][2] + d[i][3]) * 0.0f;
        } else {
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
              const int64_t r = r0 + i, cc = c0 + j;
              d[i][j] = r >= 0 && r < q.H && cc >= 0 && cc < q.W ? xc[r * q.W + cc] : 0.0f;
              z += d[i][j] * 0.0f;
            }
        }
        float v[4][4];
        input_tile(d, v);
        const int64_t at = (ty - ty0) * q.tw + tx;
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) vc[(i * 4 + j) * CT + at] = v[i][j];
      }
    }
  }
  return z == 0.0f;
}

#if MG_CPU_X86
// The source rows i0 .. 3 of the tile row whose first source row is r0, copied into the
// zero-bordered rows (row width Wp, source column u - pl at u; rows outside the source are
// zeros). Source row r lies in slot r mod 4 (r & 3, negative rows too), so a tile row's first two
// rows are the last two of the tile row before, copied (and checked) once: i0 is 2 after the
// first tile row. Every value copied is multiplied by 0 into vz or z, which stay 0 unless one
// is an infinity or NaN.
MG_TARGET_AVX2 inline void copy_tile_rows(const Wino& q, const float* xc, int64_t r0, int i0, float* rows, int64_t Wp,
                                          int64_t ncopy, __m256& vz, float& z) {
  const __m256 zero = _mm256_setzero_ps();
  for (int i = i0; i < 4; ++i) {
    const int64_t r = r0 + i;
    float* row = rows + (r & 3) * Wp + q.pl;
    if (r < 0 || r >= q.H) {
      std::fill(row, row + ncopy, 0.0f);
      continue;
    }
    const float* src = xc + r * q.W;
    int64_t k = 0;
    for (; k + 8 <= ncopy; k += 8) {
      const __m256 v = _mm256_loadu_ps(src + k);
      vz = _mm256_add_ps(vz, _mm256_mul_ps(v, zero));
      _mm256_storeu_ps(row + k, v);
    }
    for (; k < ncopy; ++k) {
      z += src[k] * 0.0f;
      row[k] = src[k];
    }
  }
}

// True when vz's lanes and z are all 0 (every value copied was finite).
MG_TARGET_AVX2 inline bool all_finite(__m256 vz, float z) {
  alignas(32) float zs[8];
  _mm256_store_ps(zs, vz);
  for (float v : zs) z += v;
  return z == 0.0f;
}
#endif

#if MG_CPU_X86
// transform_input with AVX2: 8 tiles of a tile row at a time from the tile row's 4 source rows
// copied into zero-bordered rows (no edge cases; each source row once per channel), the even
// and odd columns split by shuffles (lanes in the order 0 1 4 5 2 3 6 7, put back by one
// permute per stored vector); the same adds and subtracts per tile as transform_input, so the
// same bits. A last group of fewer than 8 tiles goes through a buffer (storing all 8 would
// write over other channels' tiles).
MG_TARGET_AVX2 bool transform_input_avx2(const Wino& q, const float* x, float* V, int64_t ty0, int64_t ty1, int64_t c0,
                                         int64_t c1) {
  const int64_t T = (ty1 - ty0) * q.tw, CT = q.C * T;
  const int64_t groups = (q.tw + 7) / 8, Wp = 16 * groups + 24;  // bordered row: source column u - pl at u
  thread_local std::vector<float> rows;
  rows.assign(size_t(4 * Wp), 0.0f);
  const int64_t ncopy = std::max<int64_t>(0, std::min(q.W, Wp - q.pl));
  __m256 vz = _mm256_setzero_ps();
  float z = 0.0f;
  alignas(32) float tail[16][8];
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = x + c * q.H * q.W;
    float* vc = V + c * T;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const int64_t r0 = 2 * ty - q.pt;
      copy_tile_rows(q, xc, r0, ty == ty0 ? 0 : 2, rows.data(), Wp, ncopy, vz, z);
      const int64_t at0 = (ty - ty0) * q.tw;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t tx = 8 * g;
        __m256 d[4][4];
        for (int i = 0; i < 4; ++i) {
          const float* row = rows.data() + ((r0 + i) & 3) * Wp + 2 * tx;
          d[i][0] = load_evens_or_odds(row, true);
          d[i][1] = load_evens_or_odds(row, false);
          d[i][2] = load_evens_or_odds(row + 2, true);
          d[i][3] = load_evens_or_odds(row + 2, false);
        }
        __m256 v[4][4];
        input_tile(d, v);
        const bool full = tx + 8 <= q.tw;
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            if (full) store_in_order(vc + (i * 4 + j) * CT + at0 + tx, v[i][j]);
            else store_in_order(tail[i * 4 + j], v[i][j]);
          }
        if (!full)
          for (int xi = 0; xi < 16; ++xi)
            for (int64_t k = 0; k < q.tw - tx; ++k) vc[xi * CT + at0 + tx + k] = tail[xi][k];
      }
    }
  }
  return all_finite(vz, z);
}
#endif

#if MG_CPU_X86
// transform_input_avx2 with 16 tiles a vector (AVX-512): the same bordered rows
// (copy_tile_rows); each tile's columns 2tx .. 2tx + 3 picked in
// order by one two-source permute per column from the 32 floats of its 16 tiles; the same adds
// and subtracts per tile, so the same bits. A last group of fewer than 16 tiles stores under a
// mask.
MG_TARGET_AVX512 bool transform_input_avx512(const Wino& q, const float* x, float* V, int64_t ty0, int64_t ty1,
                                             int64_t c0, int64_t c1) {
  const int64_t T = (ty1 - ty0) * q.tw, CT = q.C * T;
  const int64_t groups = (q.tw + 15) / 16, Wp = 32 * groups + 40;  // bordered row: source column u - pl at u
  thread_local std::vector<float> rows;
  rows.assign(size_t(4 * Wp), 0.0f);
  const int64_t ncopy = std::max<int64_t>(0, std::min(q.W, Wp - q.pl));
  __m256 vz = _mm256_setzero_ps();
  float z = 0.0f;
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = x + c * q.H * q.W;
    float* vc = V + c * T;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const int64_t r0 = 2 * ty - q.pt;
      copy_tile_rows(q, xc, r0, ty == ty0 ? 0 : 2, rows.data(), Wp, ncopy, vz, z);
      const int64_t at0 = (ty - ty0) * q.tw;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t tx = 16 * g;
        const __mmask16 m = q.tw - tx >= 16 ? __mmask16(0xffff) : __mmask16((1u << (q.tw - tx)) - 1);
        __m512 d[4][4];
        for (int i = 0; i < 4; ++i) {
          const float* row = rows.data() + ((r0 + i) & 3) * Wp + 2 * tx;
          const __m512 a = _mm512_loadu_ps(row), b = _mm512_loadu_ps(row + 16);
          const __m512 a2 = _mm512_loadu_ps(row + 2), b2 = _mm512_loadu_ps(row + 18);
          d[i][0] = _mm512_permutex2var_ps(a, evens, b);
          d[i][1] = _mm512_permutex2var_ps(a, odds, b);
          d[i][2] = _mm512_permutex2var_ps(a2, evens, b2);
          d[i][3] = _mm512_permutex2var_ps(a2, odds, b2);
        }
        __m512 v[4][4];
        input_tile(d, v);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(vc + (i * 4 + j) * CT + at0 + tx, m, v[i][j]);
      }
    }
  }
  return all_finite(vz, z);
}

// transform_output_row_avx2 with 16 tiles a vector (AVX-512), the two output columns
// interleaved by two-source permutes; a last group of tiles whose outputs are all inside y
// loads and stores under masks. Returns the first tile of the row left to the scalar loop.
MG_TARGET_AVX512 int64_t transform_output_row_avx512(const Wino& q, const float* m, int64_t OT, float* y_row,
                                                     int64_t ty) {
  const int64_t r = 2 * ty;
  if (r + 2 > q.OH) return 0;
  const int64_t inside = std::min(q.tw, q.OW / 2);  // tiles whose two columns are both in y
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  int64_t tx = 0;
  for (; tx < inside; tx += 16) {
    const int64_t n = std::min<int64_t>(16, inside - tx);
    const __mmask16 lm = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    const __mmask16 m0 = n >= 8 ? __mmask16(0xffff) : __mmask16((1u << (2 * n)) - 1);
    const __mmask16 m1 = n >= 16 ? __mmask16(0xffff) : n > 8 ? __mmask16((1u << (2 * (n - 8))) - 1) : __mmask16(0);
    __m512 mv[16], y2[2][2];
    for (int k = 0; k < 16; ++k) mv[k] = _mm512_maskz_loadu_ps(lm, m + tx + k * OT);
    output_tile(mv, y2);
    for (int i = 0; i < 2; ++i) {  // the even and odd columns interleaved
      float* yr = y_row + i * q.OW + 2 * tx;
      _mm512_mask_storeu_ps(yr, m0, _mm512_permutex2var_ps(y2[i][0], lo_idx, y2[i][1]));
      _mm512_mask_storeu_ps(yr + 16, m1, _mm512_permutex2var_ps(y2[i][0], hi_idx, y2[i][1]));
    }
  }
  return std::min(tx, inside);
}
#endif

#if MG_CPU_X86
// transform_output with AVX2 for groups of 8 tiles whose 2x2 outputs are all inside y: the same
// adds and subtracts, the two output columns interleaved by unpacks; returns the first tile of
// the row left to the scalar loop.
MG_TARGET_AVX2 int64_t transform_output_row_avx2(const Wino& q, const float* m, int64_t OT, float* y_row, int64_t ty) {
  const int64_t r = 2 * ty;
  if (r + 2 > q.OH) return 0;
  int64_t tx = 0;
  for (; tx + 8 <= q.tw && 2 * tx + 16 <= q.OW; tx += 8) {
    const float* mt = m + tx;
    __m256 mv[16], y2[2][2];
    for (int k = 0; k < 16; ++k) mv[k] = _mm256_loadu_ps(mt + k * OT);
    output_tile(mv, y2);
    for (int i = 0; i < 2; ++i) {
      const __m256 e = y2[i][0], o = y2[i][1];
      const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);  // tiles 0 1 4 5, 2 3 6 7
      float* yr = y_row + i * q.OW + 2 * tx;
      _mm256_storeu_ps(yr, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(yr + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
  return tx;
}
#endif

// y tiles of rows [ty0, ty1) from M[xi][o][t] = A^T m A; y_row is output row 2 ty.
int64_t transform_output_row_avx2(const Wino& q, const float* m, int64_t OT, float* y_row, int64_t ty);
int64_t transform_output_row_avx512(const Wino& q, const float* m, int64_t OT, float* y_row, int64_t ty);

// Output rows [2 ty0, 2 ty1) of channels [o0, o1): row r of channel o at y + o * plane + (r - row0) * OW.
void transform_output(const Wino& q, const float* M, float* y, int64_t plane, int64_t row0, int64_t ty0, int64_t ty1,
                      int64_t o0, int64_t o1) {
  const int64_t T = (ty1 - ty0) * q.tw, OT = q.O * T;
  for (int64_t o = o0; o < o1; ++o) {
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      float* y_row = y + o * plane + (2 * ty - row0) * q.OW;
      int64_t tx0 = 0;
#if MG_CPU_X86
      if (q.avx512) tx0 = transform_output_row_avx512(q, M + o * T + (ty - ty0) * q.tw, OT, y_row, ty);
      else if (q.avx2) tx0 = transform_output_row_avx2(q, M + o * T + (ty - ty0) * q.tw, OT, y_row, ty);
#endif
      for (int64_t tx = tx0; tx < q.tw; ++tx) {
        const float* m = M + o * T + (ty - ty0) * q.tw + tx;
        float mv[16], y2[2][2];
        for (int k = 0; k < 16; ++k) mv[k] = m[k * OT];
        output_tile(mv, y2);
        const int64_t r = 2 * ty, c = 2 * tx;
        for (int i = 0; i < 2 && r + i < q.OH; ++i) {
          float* yr = y_row + i * q.OW + c;
          yr[0] = y2[i][0];
          if (c + 1 < q.OW) yr[1] = y2[i][1];
        }
      }
    }
  }
}

// A unit's output rows of channels [o0, o1) from its products M, with the epilogue: written to y,
// or with the pool to the unit's rows R (channel o at R + o * r_plane) and pooled from there
// into y while they are in cache.
void finish_unit(const Wino& q, const float* M, float* y, float* R, int64_t n, int64_t ty0, int64_t ty1, int64_t o0,
                 int64_t o1, const ConvEpilogue* epi, const float* const* epi_in) {
  if (!q.pool) {
    transform_output(q, M, y + n * q.O * q.OH * q.OW, q.OH * q.OW, 0, ty0, ty1, o0, o1);
    if (epi) epi->apply(y, epi_in, n, o0, o1, 2 * ty0 * q.OW, std::min(2 * ty1, q.OH) * q.OW);
    return;
  }
  const int64_t r_plane = 2 * q.rows * q.OW;
  transform_output(q, M, R, r_plane, 2 * ty0, ty0, ty1, o0, o1);
  epi->apply_block(R, r_plane, epi_in, o0, o1, 2 * (ty1 - ty0) * q.OW);
  epi->pool_block(R, r_plane, y, n, o0, o1, ty0, ty1);
}

// False when a source value or weight is not finite (y is then incomplete). `U_const`: the
// weights transformed at compile (constant weights), else they are transformed here.
using PackedU = std::vector<std::shared_ptr<const PackedWeights>>;  // per xi, or empty

bool run(const Wino& q, const float* x, const float* w, const float* U_const, const PackedU& packed, float* y,
         void* const* out, const ConvEpilogue* epi, const float* const* epi_in) {
  const float* U = U_const;
  if (!U) {
    float* Ut = static_cast<float*>(out[q.u_idx]);
    if (!transform_weights(q, w, Ut)) return false;
    U = Ut;
  }
  const int64_t units = q.N * q.blocks;
  std::atomic<bool> finite{true};
  if (q.by_channels) {
    // Too few units to share: per unit, the threads transform the tiles of their share of the
    // source channels, then run the products and output transform of their share of the
    // output channels, whole panels of the packed weights, which each alone reads.
    const int64_t pr = packed_panel_rows(*packed[0]), panels = (q.O + pr - 1) / pr;
    float* V = static_cast<float*>(out[q.v_idx]);
    float* M = static_cast<float*>(out[q.m_idx]);
    float* R = q.pool ? static_cast<float*>(out[q.r_idx]) : nullptr;
    for (int64_t u = 0; u < units; ++u) {
      const int64_t n = u / q.blocks, ty0 = u % q.blocks * q.rows, ty1 = std::min(q.th, ty0 + q.rows);
      const int64_t T = (ty1 - ty0) * q.tw;
      parallel_for(q.C, (q.C + q.slots - 1) / q.slots, [&](int64_t c0, int64_t c1) {
        if (!transform_input(q, x + n * q.C * q.H * q.W, V, ty0, ty1, c0, c1)) finite = false;
      });
      if (!finite) return false;
      parallel_for(q.slots, 1, [&](int64_t s0, int64_t s1) {
        for (int64_t sl = s0; sl < s1; ++sl) {
          const int64_t o0 = std::min(q.O, panels * sl / q.slots * pr);
          const int64_t o1 = std::min(q.O, panels * (sl + 1) / q.slots * pr);
          for (int xi = 0; xi < 16; ++xi)
            packed_gemm_rows(*packed[size_t(xi)], V + xi * q.C * T, T, T, M + xi * q.O * T, T, o0, o1);
          finish_unit(q, M, y, R, n, ty0, ty1, o0, o1, epi, epi_in);
        }
      });
    }
    return true;
  }
  // units are claimed, not dealt: a thread slowed by another process takes fewer
  UnitShares shares(units, q.slots, q.own_shares);
  parallel_for(q.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t sl = s0; sl < s1; ++sl) {
      float* V = static_cast<float*>(out[q.v_idx]) + sl * q.v_elems;
      float* M = static_cast<float*>(out[q.m_idx]) + sl * q.m_elems;
      float* R = q.pool ? static_cast<float*>(out[q.r_idx]) + sl * q.r_elems : nullptr;
      shares.run(sl, [&](int64_t u) {
        if (!finite) return;
        const int64_t n = u / q.blocks, ty0 = u % q.blocks * q.rows, ty1 = std::min(q.th, ty0 + q.rows);
        const int64_t T = (ty1 - ty0) * q.tw;
        if (!transform_input(q, x + n * q.C * q.H * q.W, V, ty0, ty1, 0, q.C)) finite = false;
        if (!finite) return;  // (the remaining units are claimed and skipped)
        for (int xi = 0; xi < 16; ++xi) {
          if (!packed.empty()) {
            packed_gemm(*packed[size_t(xi)], V + xi * q.C * T, T, T, M + xi * q.O * T, T);
            continue;
          }
          gemm_on_pool(false, false, q.O, T, q.C, U + xi * q.O * q.C, q.C, V + xi * q.C * T, T, 0.0f,
                       M + xi * q.O * T, T);
        }
        finish_unit(q, M, y, R, n, ty0, ty1, 0, q.O, epi, epi_in);
      });
    }
  });
  return finite;
}

}  // namespace

KernelFn make_winograd_kernel(const KernelCtx& c, const ConvEpilogue* epilogue, const KernelFactory& generic) {
  // MPSGRAPH_CPU_WINOGRAD=0 keeps the generic path (read at compile: tests and benchmarks compare)
  if (switched_off("MPSGRAPH_CPU_WINOGRAD")) return {};
  const Shape &xs = c.in[0].shape, &ws = c.in[1].shape, &ys = c.out[0].shape;
  if (c.out[0].dtype != DType::Float32 || xs.size() != 4 || ws.size() != 4 || ws[2] != 3 || ws[3] != 3) return {};
  const ops::ConvolutionAttrs& a = typed_attrs<ops::ConvolutionAttrs>(c.node);
  if (a.groups != 1 || a.strides != std::vector<int64_t>{1, 1} || a.dilation_rates != std::vector<int64_t>{1, 1} ||
      a.padding.size() != 4)
    return {};
  Wino q;
  q.N = xs[0], q.C = xs[1], q.H = xs[2], q.W = xs[3], q.O = ws[0], q.OH = ys[2], q.OW = ys[3];
  q.pt = a.padding[0], q.pl = a.padding[2];
#if MG_CPU_X86
  q.avx2 = best_isa() != Isa::Generic && q.pt >= 0 && q.pl >= 0 && !switched_off("MPSGRAPH_CPU_WINOGRAD_AVX2");
  q.avx512 = q.avx2 && best_isa() == Isa::Avx512 && !switched_off("MPSGRAPH_CPU_WINOGRAD_AVX512");
  q.own_shares = !switched_off("MPSGRAPH_CPU_UNIT_SHARES");  // (=0: the units claimed in turn from one counter)
#endif
  // pays where the channel products are deep enough (their depth is C) and there are tiles to
  // share them. With the AVX2 transforms from 32 source channels (Zen 3, 1 thread: 32 and 48
  // channels 1.3-1.8x faster than im2col, the small CNN's 32x32 layer at batch 32 18.4 -> 11.9
  // ms; at 16 channels mixed, 0.88-1.24x); the scalar ones from 64.
  if (q.C < (q.avx2 ? 32 : 64) || q.O < 16 || q.OH < 4 || q.OW < 4 || num_elements(ys) <= 0) return {};
  q.th = (q.OH + 1) / 2, q.tw = (q.OW + 1) / 2;
  // weights that are a graph constant are transformed once, here; others on every run (about
  // as costly as ~100 tiles' savings, so those need more tiles to pay)
  const Array* wconst = c.constant(1);
  if (wconst && (wconst->dtype != DType::Float32 || wconst->size() != num_elements(ws) || !wconst->data()))
    wconst = nullptr;
  const int64_t min_tiles = packed_channels_wide() ? kMinTilesPerImageWide : kMinTilesPerImage;
  if (wconst ? q.th * q.tw < min_tiles : q.N * q.th * q.tw < kMinTiles) return {};
  // Units of equal tile rows, as few as fit kTilesPerUnit (smaller units run their 16 products
  // slower), their count a multiple of the threads where there are few: a unit left over would
  // run on one thread while the others wait (at batch 1, 4 units of 9, 9, 9 and 1 rows over 2
  // threads took 18 rows' time, 2 units of 14 take 14).
  const int threads = num_threads();
  const int64_t max_rows = std::max<int64_t>(1, std::min(q.th, kTilesPerUnit / q.tw));
  int64_t blocks = (q.th + max_rows - 1) / max_rows;
  // Fewer units than threads and tile rows that do not split evenly (batch 1, 14x14: 7 rows,
  // 4 and 3 took 1.13 ms, the channels split 0.79 ms): the source channels are split for the
  // input transform and the output channels for the rest, at the cost of a meeting between
  // and of every thread packing all the tiles for its products (where the rows split evenly,
  // as 28x28's 14, that cost more than it saved: 0.97 against 0.91 ms). Needs packed weights.
  // So are images of fewer tiles than kMinTilesPerImage (7x7 outputs: units of 8 tiles made 16
  // products of 8 columns each; the channels split 1000 -> 750 us alone at batch 1).
  q.by_channels = wconst && threads > 1 && q.N * blocks < threads &&
                  (q.N * q.th % threads != 0 || q.th * q.tw < kMinTilesPerImage);
  while (!q.by_channels && blocks < q.th && q.N * blocks % threads != 0 && q.N * blocks < 4 * threads) ++blocks;
  q.rows = (q.th + blocks - 1) / blocks;
  q.blocks = (q.th + q.rows - 1) / q.rows;
  q.slots = int(q.by_channels ? threads : std::min<int64_t>(threads, q.N * q.blocks));
  std::shared_ptr<std::vector<float>> U;  // the transformed constant weights (16/9 of their size)
  PackedU packed;
  if (wconst) {
    U = std::make_shared<std::vector<float>>(size_t(16 * q.O * q.C));
    if (!transform_weights(q, static_cast<const float*>(wconst->data()), U->data())) return {};  // not finite
    // and packed for the 16 products (BLAS would repack them on every call);
    // MPSGRAPH_CPU_WINOGRAD_PACKED=0 (read here) keeps BLAS
    const bool pack = !switched_off("MPSGRAPH_CPU_WINOGRAD_PACKED");
    const int64_t planes_from = packed_channels_wide() ? kPackedPlanesTilesWide : kPackedPlanesTiles;
    const PackedLayout layout = q.rows * q.tw >= planes_from ? PackedLayout::Planes : PackedLayout::Channels;
    // the 16 in one allocation: huge pages for ResNet-18's 512-channel products of 1 MiB each,
    // which its 7x7 layers stream from memory on every run
    if (pack) packed = make_packed_weights_group(U->data(), 16, q.O * q.C, q.O, q.C, q.C, layout);  // 16 or none
  }
  if (packed.empty() && q.by_channels) {  // back to units of tiles
    q.by_channels = false;
    while (blocks < q.th && q.N * blocks % threads != 0 && q.N * blocks < 4 * threads) ++blocks;
    q.rows = (q.th + blocks - 1) / blocks;
    q.blocks = (q.th + q.rows - 1) / q.rows;
    q.slots = int(std::min<int64_t>(threads, q.N * q.blocks));
  }
  q.v_elems = 16 * q.C * q.rows * q.tw;
  q.m_elems = 16 * q.O * q.rows * q.tw;
  if (!wconst) {
    q.u_idx = c.scratch(size_t(16 * q.O * q.C) * sizeof(float));
  }
  q.v_idx = c.scratch(size_t((q.by_channels ? 1 : q.slots) * q.v_elems) * sizeof(float));
  q.m_idx = c.scratch(size_t((q.by_channels ? 1 : q.slots) * q.m_elems) * sizeof(float));
  q.pool = epilogue && epilogue->pool;
  if (q.pool) {
    q.r_elems = q.O * 2 * q.rows * q.OW;
    q.r_idx = c.scratch(size_t((q.by_channels ? 1 : q.slots) * q.r_elems) * sizeof(float));
  }
  const bool has_epi = epilogue && (!epilogue->ops.empty() || epilogue->pool);
  const ConvEpilogue epi = has_epi ? *epilogue : ConvEpilogue{};
  KernelFn fallback = generic(c);  // its scratch follows ours (and it pools as we do)
  return [q, epi, has_epi, fallback, U, packed](const void* const* in, void* const* out) {
    if (!run(q, static_cast<const float*>(in[0]), static_cast<const float*>(in[1]), U ? U->data() : nullptr, packed,
             static_cast<float*>(out[0]), out, has_epi ? &epi : nullptr, reinterpret_cast<const float* const*>(in + 2)))
      fallback(in, out);
  };
}

}  // namespace mg::cpu
