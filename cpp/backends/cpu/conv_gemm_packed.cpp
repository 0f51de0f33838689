// Packed-weight GEMM of constant-weight convolutions (see conv_gemm_packed.h).
// Planes: a micro-kernel keeps an MR-row by NR-column block of C in registers (8 x 48 with
// AVX-512, 6 x 16 with AVX2): per k it loads NR values of B's row k and broadcasts the panel's
// MR weights of column k, which lie next to each other. Column tails are masked; rows past M are
// zeros in the panel, not stored.
// Channels: a micro-kernel keeps a 16-row by 6-column block of C in registers (12 of AVX2's 16
// registers): per k it loads the panel's 16 weights of column k and broadcasts 6 values of B's
// row k; the block is transposed through the stack on the store (6 columns is a few scalar
// stores per row against 12 K multiply-adds). On AVX-512 a kernel of two panels does the same
// with 16-channel vectors.
#include "backends/cpu/conv_gemm_packed.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa_target.h"
#include "core/array.h"

#if MG_CPU_X86
#include <immintrin.h>
#endif

namespace mg::cpu {

constexpr int64_t kPanelRows = 8, kAvx2Rows = 6;  // planes: rows per panel (AVX-512, AVX2)
constexpr int64_t kChanRows = 16, kChanCols = 6, kChanDepth = 256;

// Channels: column block b of N columns (of ceil(N / 6) blocks), as its first column and width.
// Block b's packed columns lie at b * 6 * K whatever its width (rows of 6 floats, the unused
// ones not written).
struct ChanBlock {
  int64_t j, n;
};
inline ChanBlock chan_block(int64_t N, int64_t b, bool even) {
  if (!even) return {b * kChanCols, std::min(kChanCols, N - b * kChanCols)};
  const int64_t nb = (N + kChanCols - 1) / kChanCols, base = N / nb, extra = N % nb;
  return {b * base + std::min(b, extra), base + (b < extra ? 1 : 0)};
}
// AVX2 planes: depths up to this read B in place (measured on Zen 3: the copy cost more than the
// strided rows at MobileNetV2's 1x1 layers of 16 to 192 source channels, 1.05 to 1.2x; at
// 288 (3x3 im2col of 32 channels) and 576 the copy paid, 1.07 and 1.12x)
constexpr int64_t kReadDepth = 256;
// read in place: B's rows prefetched where they lie this far apart (AVX2 on Zen 3, planes of
// 28x28 and more: 1.27-1.49x; Winograd's rows of 49 to 196 tiles at 28x28 ran 1.2x slower with
// it; AVX-512 on a Xeon: MobileNetV2 1.02x at batch 1, 1.03x at batch 8)
constexpr int64_t kPrefetchRows = 512;
// l1_chunk: B's chunk at depths from kL1MinDepth, in floats (8 KiB: 16 columns from depth 128),
// for weights of at most kL1MaxWeights floats (128 KiB, in L2: every chunk reads all of them)
constexpr int64_t kL1Chunk = 2048, kL1MinDepth = 64, kL1MaxWeights = 32768;
// AVX-512 planes: the depth in blocks of this (evened out: 300 runs as 3 x 100). A 32-column
// block of B over the whole depth (384 deep: some 72 KiB of lines read in place) does not stay
// in L1 while the panels pass over it; 128 rows of it do, and the partial sums go through C
// between blocks, so each output's multiply-adds are the same, in the same order. One thread on
// a Xeon: 1x1 layers of MobileNetV2 at 14x14 (384 and 576 deep) 1.04-1.07x, 28x28 (192) 1.12x,
// 56x56 at batch 2 (144) 1.1x; 64 and 192 rows ran slower than 128
// (MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS=0: the whole depth)
constexpr int64_t kDepthBlock = 128;

struct PackedWeights {
  int64_t M = 0, K = 0;
  bool depth_blocks = false;  // AVX-512 planes: the depth in blocks of kDepthBlock
  int64_t mr = 0, nr = 0;  // the micro-kernel's rows (a panel's) and columns
  Isa isa = Isa::Generic;
  PackedLayout layout = PackedLayout::Planes;
  bool copy_b = true;  // AVX2 planes: B's columns copied into blocks (pack_columns), else read in place
  bool prefetch = false;  // read in place: the kernel prefetches B's rows
  bool copy_inline = false;  // pack_columns_avx2 (MPSGRAPH_CPU_PACKED_COPY=0: a memcpy call per row)
  // AVX2 planes: a last panel of fewer rows computes only those (MPSGRAPH_CPU_PACKED_TAIL_ROWS=0: all 6)
  bool tail_rows = false;
  // planes: column tails of at most half a block (8 with AVX2, 16 with AVX-512) in one vector a row
  // (MPSGRAPH_CPU_PACKED_HALF_TAIL=0: two)
  bool half_tail = false;
  // channels: full blocks stored a row at a time after a transpose in registers
  // (MPSGRAPH_CPU_PACKED_ROW_STORE=0: through the stack, a float at a time)
  bool row_store = false;
  // channels on AVX-512: a kernel of two panels at once (32 rows, a 16-channel vector each) by
  // up to 6 columns, on the same panels and column blocks (MPSGRAPH_CPU_PACKED_CHANNELS512=0: the
  // AVX2 kernel, 16 rows)
  bool wide_channels = false;
  // channels: the columns cut into blocks of as equal widths as 6 allows (49: 4 x 6 + 5 x 5, not
  // 8 x 6 + 1), so no block is a column or two whose few sums wait on each other's latency
  // (MPSGRAPH_CPU_PACKED_EVEN_BLOCKS=0: blocks of 6 and a tail)
  bool even_blocks = false;
  // channels with even_blocks: packed_gemm's tasks each pack B's blocks for themselves
  // (MPSGRAPH_CPU_PACKED_OWN_COPIES=0: the calling thread packs one copy for all)
  bool own_copies = false;
  // AVX-512 channels: while the column blocks pass over one depth block's slice of the panels,
  // the next slice is prefetched into L2, a line per k of each block's share. Deep weights that
  // stream from memory (ResNet-18's deep layers: 9.4 MB each at 7x7) otherwise arrive in a burst
  // at each slice's first block; issued all at once before a block, the prefetches stalled the
  // kernel (the 7x7 layers 1.1x slower). ResNet-18 b1 1.04x, b8 1.06x, MobileNetV2 1.03-1.04x
  // on a Xeon (MPSGRAPH_CPU_PACKED_PREFETCH_A=0: none)
  bool prefetch_a = false;
  // AVX2 planes, M % 6 of 1 to 3 past a full panel: packed_gemm runs the last 6 + M % 6 rows as
  // two panels of about equal height (split_rows, then the rest; 8: 4 + 4, not 6 + 2), as a
  // panel of 1 to 3 rows has too few accumulators to hide the multiply-add's latency
  // (MPSGRAPH_CPU_PACKED_SPLIT_TAIL=0: 6 and the rest). Their two panels follow the others.
  int64_t split_at = 0, split_rows = 0;  // split_rows 0: no split
  // AVX2 planes from depth 64: B's columns in chunks of about 8 KiB (16 columns from depth 128)
  // rather than 256 KiB, so every panel after the first reads the chunk from L1, not L2: the
  // kernel's loads of B were its stalls (MPSGRAPH_CPU_PACKED_L1_CHUNK=0: the 256 KiB chunks).
  // Rows read in place only where they start on a cache line and are not a multiple of 4 lines
  // apart: at 56x56 and 112x112 the K lines fall in a quarter or fewer of L1's sets and evict
  // each other (144 deep: 0.88x); 14x14 rows straddle lines, so a block is twice the lines
  // (192 deep: 0.95x, the 64-deep expansions 0.92x in the network). The stem's 27-deep
  // columns ran 0.95-0.99x with it.
  bool l1_chunk = false;
  // AVX2 planes, B copied (depth above 256) outside l1_chunk: chunks of 128 KiB, not 256, so
  // the chunk and weights of up to some 200 KiB share L2 (MobileNetV2's 384- and 576-deep
  // projections to 96 channels 1.01-1.05x; MPSGRAPH_CPU_PACKED_HALF_CHUNK=0: 256 KiB)
  bool half_chunk = false;
  // ceil(M / mr) panels of K x mr, rows past M zero, in `storage` (a group's packed weights
  // share one): a Buffer, so from 4 MiB in huge pages, since a network's deep layers stream
  // megabytes of them from memory on every run (ResNet-18's 7x7 layers at batch 1, six in a
  // row: 1.06x; the network 1.02-1.03x)
  const float* panels = nullptr;
  std::shared_ptr<Buffer> storage;
};

namespace {

#if MG_CPU_X86
// The store's epilogue (PackedStore's order: bias, clamp, residual) is applied in registers (a
// scalar pass over the block after the store cost more than the product at MobileNetV2's 1x1
// expansions).
// kVecs: the block's 16-column vectors a row (nr / 16 for full blocks; a tail computes only the
// vectors its columns reach, the last one masked).
// resume: the sums start from C's values (a depth block after the first); partial: C gets the
// sums as they are, for the next depth block to resume (no epilogue).
template <bool kFull, int kRows, bool kPrefetch, int kVecs>
MG_TARGET_AVX512 void kernel_avx512(int64_t K, const float* a, const float* B, int64_t ldb, float* C, int64_t ldc,
                                    int64_t rows, int64_t n, const PackedStore* s, int64_t i0, const float* R,
                                    bool resume, bool partial) {
  __mmask16 m[kVecs];
#pragma GCC unroll 3
  for (int v = 0; v < kVecs; ++v) {
    const int64_t left = n - 16 * v;
    m[v] = kFull || left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
  }
  __m512 c[kRows][kVecs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v)
      c[r][v] = resume ? _mm512_maskz_loadu_ps(m[v], C + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += kPanelRows, B += ldb) {
    __m512 b[kVecs];
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v)
      b[v] = kFull ? _mm512_loadu_ps(B + 16 * v) : _mm512_maskz_loadu_ps(m[v], B + 16 * v);
    if (kPrefetch)  // the row's lines two blocks on (as the AVX2 kernel's: B read in place)
#pragma GCC unroll 3
      for (int v = 0; v < kVecs; ++v) _mm_prefetch(reinterpret_cast<const char*>(B + 32 * kVecs + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
#pragma GCC unroll 3
      for (int v = 0; v < kVecs; ++v) c[r][v] = _mm512_fmadd_ps(ar, b[v], c[r][v]);
    }
  }
  if (partial) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < kVecs; ++v) _mm512_mask_storeu_ps(C + r * ldc + 16 * v, m[v], c[r][v]);
    return;
  }
  // tails: the sums through the stack, so that only constant indices reach c and it stays in
  // registers (indexed by the row count below, GCC kept c on the stack, storing all 16 vectors
  // every k: tails ran 2x slower than full blocks)
  alignas(64) float sums[kFull ? 1 : kRows][16 * kVecs];
  if constexpr (!kFull) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < kVecs; ++v) _mm512_store_ps(sums[r] + 16 * v, c[r][v]);
  }
  const bool has_bias = s && s->bias, clamp = s && s->clamp;
  const __m512 lo = _mm512_set1_ps(s ? s->lo : 0.0f), hi = _mm512_set1_ps(s ? s->hi : 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 x[kVecs];
    const __m512 b = has_bias ? _mm512_set1_ps(s->bias[(i0 + r) * s->bias_stride]) : _mm512_setzero_ps();
    const float* Rr = R ? R + r * s->ldr : nullptr;
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v) {
      if constexpr (kFull) {
        x[v] = c[r][v];
      } else {
        x[v] = _mm512_load_ps(sums[r] + 16 * v);
      }
      if (has_bias) x[v] = _mm512_add_ps(x[v], b);
      if (clamp) {  // the comparisons keep a NaN v
        x[v] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x[v], lo, _CMP_LE_OQ), x[v], lo);
        x[v] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x[v], hi, _CMP_GE_OQ), x[v], hi);
      }
      if (Rr)
        x[v] = _mm512_add_ps(x[v], kFull ? _mm512_loadu_ps(Rr + 16 * v) : _mm512_maskz_loadu_ps(m[v], Rr + 16 * v));
      if (kFull) _mm512_storeu_ps(C + r * ldc + 16 * v, x[v]);
      else _mm512_mask_storeu_ps(C + r * ldc + 16 * v, m[v], x[v]);
    }
  }
}

// By the rows of the panel computed (a last panel of fewer rows computes only those), full
// column blocks (with B's rows prefetched two blocks on or not) and tails of 1 to 3 vectors.
using Avx512Kernel = void (*)(int64_t, const float*, const float*, int64_t, float*, int64_t, int64_t, int64_t,
                              const PackedStore*, int64_t, const float*, bool, bool);
using Avx512Kernels = std::array<Avx512Kernel, kPanelRows>;
template <bool kFull, bool kPrefetch, int kVecs, int... R>
constexpr Avx512Kernels avx512_kernels(std::integer_sequence<int, R...>) {
  return {kernel_avx512<kFull, R + 1, kPrefetch, kVecs>...};
}
constexpr auto kAvx512Rows = std::make_integer_sequence<int, int(kPanelRows)>();
// [vectors - 1]: full blocks, full blocks prefetching, tails
constexpr std::array<Avx512Kernels, 3> kAvx512Full = {avx512_kernels<true, false, 1>(kAvx512Rows),
                                                      avx512_kernels<true, false, 2>(kAvx512Rows),
                                                      avx512_kernels<true, false, 3>(kAvx512Rows)};
constexpr std::array<Avx512Kernels, 3> kAvx512FullPrefetch = {avx512_kernels<true, true, 1>(kAvx512Rows),
                                                              avx512_kernels<true, true, 2>(kAvx512Rows),
                                                              avx512_kernels<true, true, 3>(kAvx512Rows)};
constexpr std::array<Avx512Kernels, 3> kAvx512Tail = {avx512_kernels<false, false, 1>(kAvx512Rows),
                                                      avx512_kernels<false, false, 2>(kAvx512Rows),
                                                      avx512_kernels<false, false, 3>(kAvx512Rows)};
// A block of n of nr columns: a full block (prefetching B's rows two blocks on or not), or a
// tail of the vectors its n columns reach (half_tail; else all nr / 16, masked).
const Avx512Kernels& avx512_kernels_for(int64_t n, int64_t nr, bool prefetch, bool half_tail) {
  const size_t vecs = size_t(nr / 16);
  if (n == nr) return prefetch ? kAvx512FullPrefetch[vecs - 1] : kAvx512Full[vecs - 1];
  return kAvx512Tail[half_tail ? size_t((n + 15) / 16) - 1 : vecs - 1];
}

// v + b, then the clamp, per lane in PackedStore's order (the comparisons keep a NaN v). minmax
// (PackedStore::minmax): the clamp as max(lo, v) then min(hi, v), two operations instead of
// four (they return their second operand, v, where it is NaN); they differ from the
// comparisons only where v is a zero of the other sign than an equal bound.
MG_TARGET_AVX2 inline __attribute__((always_inline)) __m256 finish8(__m256 v, __m256 b, bool bias, bool clamp,
                                                                    __m256 lo, __m256 hi, bool minmax = false) {
  if (bias) v = _mm256_add_ps(v, b);
  if (clamp && minmax) return _mm256_min_ps(hi, _mm256_max_ps(lo, v));
  if (clamp) {
    v = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LE_OQ));
    v = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GE_OQ));
  }
  return v;
}

// 6 rows x 16 columns (12 accumulators of 16 registers): per k two loads of B and six
// broadcasts feed 12 multiply-adds (8 x 8 would need 9 loads for 8).
// R: the block's residual (rows s->ldr apart), or null.
// kPrefetch (B read in place): each row's line two blocks on is fetched while this block runs,
// as K rows a page or more apart are more streams than the hardware prefetcher follows.
// kRows: the rows computed (a last panel's rows, fewer than 6, compute only those: the rest of
// the panel is zeros). kHalf: a column tail of at most 8 (n <= 8), one vector per row.
template <bool kFull, bool kPrefetch = false, int kRows = kAvx2Rows, bool kHalf = false>
MG_TARGET_AVX2 void kernel_avx2(int64_t K, const float* a, const float* B, int64_t ldb, float* C, int64_t ldc,
                                int64_t rows, int64_t n, const PackedStore* s, int64_t i0, const float* R) {
  alignas(32) int32_t lanes[16];
  for (int i = 0; i < 16; ++i) lanes[i] = i < n ? -1 : 0;
  const __m256i m0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  const __m256i m1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 8));
  __m256 c0[kRows], c1[kRows];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) c0[r] = c1[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += kAvx2Rows, B += ldb) {
    const __m256 b0 = kFull ? _mm256_loadu_ps(B) : _mm256_maskload_ps(B, m0);
    const __m256 b1 = kHalf ? _mm256_setzero_ps() : kFull ? _mm256_loadu_ps(B + 8) : _mm256_maskload_ps(B + 8, m1);
    if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(B + 32), _MM_HINT_T0);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r);
      c0[r] = _mm256_fmadd_ps(ar, b0, c0[r]);
      if (!kHalf) c1[r] = _mm256_fmadd_ps(ar, b1, c1[r]);
    }
  }
  const bool has_bias = s && s->bias, clamp = s && s->clamp, mm = s && s->minmax;
  const bool stream = kFull && s && s->stream && (reinterpret_cast<uintptr_t>(C) | uintptr_t(ldc * 4)) % 32 == 0;
  const __m256 lo = _mm256_set1_ps(s ? s->lo : 0.0f), hi = _mm256_set1_ps(s ? s->hi : 0.0f);
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    const __m256 b = has_bias ? _mm256_set1_ps(s->bias[(i0 + r) * s->bias_stride]) : _mm256_setzero_ps();
    __m256 v0 = finish8(c0[r], b, has_bias, clamp, lo, hi, mm), v1 = finish8(c1[r], b, has_bias, clamp, lo, hi, mm);
    if (R) {
      const float* Rr = R + r * s->ldr;
      v0 = _mm256_add_ps(v0, kFull ? _mm256_loadu_ps(Rr) : _mm256_maskload_ps(Rr, m0));
      if (!kHalf) v1 = _mm256_add_ps(v1, kFull ? _mm256_loadu_ps(Rr + 8) : _mm256_maskload_ps(Rr + 8, m1));
    }
    if (kFull && stream) {
      _mm256_stream_ps(C + r * ldc, v0);
      _mm256_stream_ps(C + r * ldc + 8, v1);
    } else if (kFull) {  // masked stores are slow on AMD (microcoded): only for the tails
      _mm256_storeu_ps(C + r * ldc, v0);
      _mm256_storeu_ps(C + r * ldc + 8, v1);
    } else {
      _mm256_maskstore_ps(C + r * ldc, m0, v0);
      if (!kHalf) _mm256_maskstore_ps(C + r * ldc + 8, m1, v1);
    }
  }
}

// kernel_avx2 for a panel of `rows` rows (6: a full one), a block of n columns.
template <int kRows>
MG_TARGET_AVX2 void kernel_avx2_rows(bool full, bool prefetch, int64_t K, const float* a, const float* B, int64_t ldb,
                                     float* C, int64_t ldc, int64_t rows, int64_t n, const PackedStore* s, int64_t i0,
                                     const float* R) {
  if (full && prefetch) kernel_avx2<true, true, kRows>(K, a, B, ldb, C, ldc, rows, n, s, i0, R);
  else if (full) kernel_avx2<true, false, kRows>(K, a, B, ldb, C, ldc, rows, n, s, i0, R);
  else kernel_avx2<false, false, kRows>(K, a, B, ldb, C, ldc, rows, n, s, i0, R);
}
using Avx2RowsKernel = void (*)(bool, bool, int64_t, const float*, const float*, int64_t, float*, int64_t, int64_t,
                                int64_t, const PackedStore*, int64_t, const float*);
constexpr Avx2RowsKernel kAvx2RowsKernels[kAvx2Rows] = {kernel_avx2_rows<1>, kernel_avx2_rows<2>, kernel_avx2_rows<3>,
                                                        kernel_avx2_rows<4>, kernel_avx2_rows<5>, kernel_avx2_rows<6>};

// v[0..8) transposed in place: lane l of v[k] becomes lane k of v[l].
MG_TARGET_AVX2 inline void transpose8(__m256* v) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  v[0] = _mm256_permute2f128_ps(s0, s4, 0x20), v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  v[2] = _mm256_permute2f128_ps(s2, s6, 0x20), v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  v[4] = _mm256_permute2f128_ps(s0, s4, 0x31), v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  v[6] = _mm256_permute2f128_ps(s2, s6, 0x31), v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Channels: rows [i0, i0 + rows) of the panel a (kn x 16, one depth block), columns B[0..NC).
// The partial sums of the block's 16 x NC outputs start from acc (unless first) and go back to
// it (unless last: then C gets them, finished): the same fused multiply-adds in the same order.
// by_rows (NC 6): the finished block transposed in registers and stored 6 floats a row (4 + 2),
// not through the stack a float at a time (96 scalar moves against some 600 multiply-adds at
// depth 160: MobileNetV2's 7x7 expansions).
template <int NC>
MG_TARGET_AVX2 void kernel_channels_avx2(int64_t K, const float* a, const float* B, int64_t ldb, float* acc, bool first,
                                         bool last, float* C, int64_t ldc, int64_t rows, const PackedStore* s,
                                         int64_t i0, const float* R, bool by_rows) {
  __m256 c0[NC], c1[NC];
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j) {
    c0[j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + j * kChanRows);
    c1[j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + j * kChanRows + 8);
  }
  for (int64_t k = 0; k < K; ++k, a += kChanRows, B += ldb) {
    const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      const __m256 b = _mm256_broadcast_ss(B + j);
      c0[j] = _mm256_fmadd_ps(a0, b, c0[j]);
      c1[j] = _mm256_fmadd_ps(a1, b, c1[j]);
    }
  }
  if (!last) {
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      _mm256_storeu_ps(acc + j * kChanRows, c0[j]);
      _mm256_storeu_ps(acc + j * kChanRows + 8, c1[j]);
    }
    return;
  }
  // (the accumulators are only read after the loop: written back, GCC keeps them on the stack)
  alignas(32) float t[NC][kChanRows];
  alignas(32) float bias[kChanRows] = {};
  const bool has_bias = s && s->bias, clamp = s && s->clamp, mm = s && s->minmax;
  if (has_bias)  // channels along the lanes: the bias is two vectors
    for (int64_t r = 0; r < rows; ++r) bias[r] = s->bias[(i0 + r) * s->bias_stride];
  const __m256 b0 = _mm256_load_ps(bias), b1 = _mm256_load_ps(bias + 8);
  const __m256 lo = _mm256_set1_ps(s ? s->lo : 0.0f), hi = _mm256_set1_ps(s ? s->hi : 0.0f);
  if constexpr (NC >= kChanCols - 1) {
    if (by_rows) {
      __m256 v[2][8];  // the block's rows 0-7 and 8-15, a column a vector, then a row a vector
#pragma GCC unroll 6
      for (int j = 0; j < NC; ++j) {
        v[0][j] = finish8(c0[j], b0, has_bias, clamp, lo, hi, mm);
        v[1][j] = finish8(c1[j], b1, has_bias, clamp, lo, hi, mm);
      }
      for (int j = NC; j < 8; ++j) v[0][j] = v[1][j] = _mm256_setzero_ps();
      transpose8(v[0]);
      transpose8(v[1]);
#pragma GCC unroll 16
      for (int r = 0; r < kChanRows; ++r) {
        if (r >= rows) break;
        const __m256 u = v[r / 8][r % 8];
        __m128 q0 = _mm256_castps256_ps128(u), q1 = _mm256_extractf128_ps(u, 1);
        float* c = C + r * ldc;
        if (R) {
          const float* rr = R + r * s->ldr;
          q0 = _mm_add_ps(q0, _mm_loadu_ps(rr));
          if (NC == 6) q1 = _mm_add_ps(q1, _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(rr + 4))));
          else q1 = _mm_add_ss(q1, _mm_load_ss(rr + 4));
        }
        _mm_storeu_ps(c, q0);
        if (NC == 6) _mm_storel_pi(reinterpret_cast<__m64*>(c + 4), q1);
        else _mm_store_ss(c + 4, q1);
      }
      return;
    }
  }
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j) {
    _mm256_store_ps(t[j], finish8(c0[j], b0, has_bias, clamp, lo, hi, mm));
    _mm256_store_ps(t[j] + 8, finish8(c1[j], b1, has_bias, clamp, lo, hi, mm));
  }
  if (R) {
    for (int64_t r = 0; r < rows; ++r)
#pragma GCC unroll 6
      for (int j = 0; j < NC; ++j) C[r * ldc + j] = t[j][r] + R[r * s->ldr + j];
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) C[r * ldc + j] = t[j][r];
}

using ChannelsKernel = void (*)(int64_t, const float*, const float*, int64_t, float*, bool, bool, float*, int64_t,
                                int64_t, const PackedStore*, int64_t, const float*, bool);
constexpr ChannelsKernel kChannelsKernels[kChanCols] = {kernel_channels_avx2<1>, kernel_channels_avx2<2>,
                                                        kernel_channels_avx2<3>, kernel_channels_avx2<4>,
                                                        kernel_channels_avx2<5>, kernel_channels_avx2<6>};

// The AVX-512 channels kernel: kPanels panels (16 rows each, a0 and a0 + pstride) by NC columns,
// 2 x 6 accumulators of 16 channels; per k two loads and NC broadcasts feed 2 x NC multiply-adds
// (AVX2's kernel: 12 of half the width). Each element's sum runs over k in order, as there, and
// the store is the same (the epilogue per lane, then rows of NC floats after an 8x8 transpose of
// each 8-row half), so the bits are the AVX2 kernel's. acc: partial sums, 32 floats a column.
template <int NC, int kPanels>
MG_TARGET_AVX512 void kernel_channels_avx512(int64_t K, const float* a0, int64_t pstride, const float* B, float* acc,
                                             bool first, bool last, float* C, int64_t ldc, int64_t rows,
                                             const PackedStore* s, int64_t i0, const float* R, const char* pf,
                                             int64_t pf_second, int64_t npf) {
  __m512 c[kPanels][NC];
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j)
#pragma GCC unroll 2
    for (int h = 0; h < kPanels; ++h) c[h][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + j * 32 + h * 16);
  const float* a1 = a0 + pstride;
  for (int64_t k = 0; k < K; ++k, B += kChanCols) {
    if (k < npf) {  // a line of the next slice (and of its second panel) per k: spread, not a burst
      _mm_prefetch(pf + k * 64, _MM_HINT_T1);
      if (pf_second) _mm_prefetch(pf + pf_second + k * 64, _MM_HINT_T1);
    }
    const __m512 w0 = _mm512_loadu_ps(a0 + k * kChanRows);
    const __m512 w1 = kPanels == 2 ? _mm512_loadu_ps(a1 + k * kChanRows) : w0;
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      const __m512 b = _mm512_set1_ps(B[j]);
      c[0][j] = _mm512_fmadd_ps(w0, b, c[0][j]);
      if (kPanels == 2) c[kPanels - 1][j] = _mm512_fmadd_ps(w1, b, c[kPanels - 1][j]);
    }
  }
  if (!last) {
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j)
#pragma GCC unroll 2
      for (int h = 0; h < kPanels; ++h) _mm512_storeu_ps(acc + j * 32 + h * 16, c[h][j]);
    return;
  }
  alignas(64) float bias[32] = {};
  const bool has_bias = s && s->bias, clamp = s && s->clamp, mm = s && s->minmax;
  if (has_bias)
    for (int64_t r = 0; r < rows; ++r) bias[r] = s->bias[(i0 + r) * s->bias_stride];
  const __m256 lo = _mm256_set1_ps(s ? s->lo : 0.0f), hi = _mm256_set1_ps(s ? s->hi : 0.0f);
  alignas(64) float sums[kPanels][NC][16];  // halves through memory: GCC 12 warns on the cast intrinsics
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j)
#pragma GCC unroll 2
    for (int h = 0; h < kPanels; ++h) _mm512_store_ps(sums[h][j], c[h][j]);
#pragma GCC unroll 4
  for (int q = 0; q < 2 * kPanels; ++q) {  // 8-row quarters
    if (q * 8 >= rows) break;
    __m256 v[8];
    const __m256 b = _mm256_load_ps(bias + q * 8);
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      v[j] = finish8(_mm256_load_ps(sums[q / 2][j] + q % 2 * 8), b, has_bias, clamp, lo, hi, mm);
    }
    for (int j = NC; j < 8; ++j) v[j] = _mm256_setzero_ps();
    transpose8(v);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const int64_t row = q * 8 + r;
      if (row >= rows) break;
      float* out = C + row * ldc;
      const float* rr = R ? R + row * s->ldr : nullptr;
      if (NC >= 4) {
        __m128 q0 = _mm256_castps256_ps128(v[r]);
        if (rr) q0 = _mm_add_ps(q0, _mm_loadu_ps(rr));
        _mm_storeu_ps(out, q0);
      }
      alignas(32) float t[8];
      _mm256_store_ps(t, v[r]);
      for (int j = NC >= 4 ? 4 : 0; j < NC; ++j) out[j] = rr ? t[j] + rr[j] : t[j];
    }
  }
}

using WideChannelsKernel = void (*)(int64_t, const float*, int64_t, const float*, float*, bool, bool, float*, int64_t,
                                    int64_t, const PackedStore*, int64_t, const float*, const char*, int64_t,
                                    int64_t);
constexpr WideChannelsKernel kWideChannelsKernels[2][kChanCols] = {
    {kernel_channels_avx512<1, 1>, kernel_channels_avx512<2, 1>, kernel_channels_avx512<3, 1>,
     kernel_channels_avx512<4, 1>, kernel_channels_avx512<5, 1>, kernel_channels_avx512<6, 1>},
    {kernel_channels_avx512<1, 2>, kernel_channels_avx512<2, 2>, kernel_channels_avx512<3, 2>,
     kernel_channels_avx512<4, 2>, kernel_channels_avx512<5, 2>, kernel_channels_avx512<6, 2>}};
#endif

// B (K, N) as blocks of nr columns, each K x nr contiguous (the last one's missing columns
// not written, and read only under a mask): the micro-kernels read one short row per k
// instead of a line of each source row, K lines that lie a page or more apart.
void pack_columns_generic(const float* B, int64_t ldb, int64_t K, int64_t N, int64_t nr, float* out) {
  for (int64_t j = 0; j < N; j += nr) {
    const size_t bytes = sizeof(float) * size_t(std::min(nr, N - j));
    float* o = out + j * K;
    for (int64_t k = 0; k < K; ++k) std::memcpy(o + k * nr, B + k * ldb + j, bytes);
  }
}

#if MG_CPU_X86
// The same copy with the full blocks' rows (16 or 6 floats) moved inline instead of a memcpy
// call per 64- or 24-byte row.
MG_TARGET_AVX2 void pack_columns_avx2(const float* B, int64_t ldb, int64_t K, int64_t N, int64_t nr, float* out) {
  const int64_t full = nr == 16 || nr == kChanCols ? N / nr * nr : 0;
  for (int64_t j = 0; j < full; j += nr) {
    const float* b = B + j;
    float* o = out + j * K;
    if (nr == 16) {
      for (int64_t k = 0; k < K; ++k, b += ldb, o += 16) {
        _mm256_storeu_ps(o, _mm256_loadu_ps(b));
        _mm256_storeu_ps(o + 8, _mm256_loadu_ps(b + 8));
      }
    } else {  // 6: four floats, then two
      for (int64_t k = 0; k < K; ++k, b += ldb, o += kChanCols) {
        _mm_storeu_ps(o, _mm_loadu_ps(b));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o + 4), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 4)));
      }
    }
  }
  if (full < N) pack_columns_generic(B + full, ldb, K, N - full, nr, out + full * K);
}
#endif

#if MG_CPU_X86
// One channels block of n (4 to 6) columns: four floats, then the rest.
MG_TARGET_AVX2 void pack_block_avx2(const float* b, int64_t ldb, int64_t K, int64_t n, float* o) {
  for (int64_t k = 0; k < K; ++k, b += ldb, o += kChanCols) {
    _mm_storeu_ps(o, _mm_loadu_ps(b));
    if (n == 6) std::memcpy(o + 4, b + 4, 2 * sizeof(float));  // one 8-byte move
    else if (n == 5) o[4] = b[4];
  }
}
#endif

// Channels with even_blocks: B's columns in chan_block's blocks, each K rows of 6 floats. The
// depth runs in chunks whose rows of B stay in L1 while every block takes its piece of them: a
// block at a time over all K rows read B from L2 once per block, and the lines a row shares
// with its neighbours again each time (MobileNetV2's 7x7 960-channel projection at batch 1:
// 1.09x).
void pack_channels_even(const float* B, int64_t ldb, int64_t K, int64_t N, float* out) {
  const int64_t nb = (N + kChanCols - 1) / kChanCols;
  const int64_t kc = std::max<int64_t>(8, 8192 / std::max<int64_t>(ldb, 1));  // 32 KiB of B's rows
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    const int64_t kn = std::min(kc, K - k0);
    for (int64_t b = 0; b < nb; ++b) {
      const ChanBlock c = chan_block(N, b, true);
      const float* s = B + k0 * ldb + c.j;
      float* o = out + b * kChanCols * K + k0 * kChanCols;
#if MG_CPU_X86
      if (c.n >= 4 && best_isa() != Isa::Generic) {
        pack_block_avx2(s, ldb, kn, c.n, o);
        continue;
      }
#endif
      for (int64_t k = 0; k < kn; ++k) std::memcpy(o + k * kChanCols, s + k * ldb, sizeof(float) * size_t(c.n));
    }
  }
}

void pack_columns(const PackedWeights& a, const float* B, int64_t ldb, int64_t K, int64_t N, int64_t nr, float* out) {
  if (a.layout == PackedLayout::Channels && a.even_blocks) return pack_channels_even(B, ldb, K, N, out);
#if MG_CPU_X86
  if (a.copy_inline) return pack_columns_avx2(B, ldb, K, N, nr, out);
#endif
  pack_columns_generic(B, ldb, K, N, nr, out);
}

#if MG_CPU_X86
// AVX-512 planes: C's rows [r0, r1) and columns [c0, c1) over the depth [k0, k1), in blocks of
// about kDepthBlock with the partial sums in C between them (the first block starts from zero);
// the last block stores with s's epilogue (null: the plain sums).
void run_depth_range(const PackedWeights& a, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t c0,
                     int64_t c1, int64_t r0, int64_t r1, int64_t k0, int64_t k1, const PackedStore* s, const float* R,
                     bool prefetch) {
  const int64_t nr = a.nr, K = a.K, depth = k1 - k0;
  const int64_t nkb = (depth + kDepthBlock - 1) / kDepthBlock;
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const int64_t b0 = k0 + kb * depth / nkb, kn = k0 + (kb + 1) * depth / nkb - b0;
    for (int64_t j = c0; j < c1; j += nr) {
      const int64_t n = std::min(nr, c1 - j);
      // the block's first panel prefetches; the later ones find its rows in L1 (576 deep at
      // 28x28 on a Xeon, 48 columns: 1.05-1.1x over every panel prefetching)
      const auto& kernels = avx512_kernels_for(n, nr, prefetch, a.half_tail);
      const auto& later = avx512_kernels_for(n, nr, false, a.half_tail);
      for (int64_t i0 = r0; i0 < r1; i0 += a.mr) {
        const int64_t rows = std::min(a.mr, r1 - i0);
        (i0 == r0 ? kernels : later)[size_t(rows - 1)](kn, a.panels + i0 * K + b0 * a.mr, B + b0 * ldb + j, ldb,
                                                       C + i0 * ldc + j, ldc, rows, n, s, i0,
                                                       R ? R + i0 * s->ldr + j : nullptr, kb > 0, kb + 1 < nkb);
      }
    }
  }
}
#endif

// Columns [j0, j1) of C, in chunks whose slice of B (K x chunk) stays in L2 while every panel
// passes over it; with AVX2 copied into column blocks first where the depth is large (copy_b).
void run_columns(const PackedWeights& a, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t j0, int64_t j1,
                 const PackedStore* s, int64_t r0 = 0, int64_t r1 = -1) {
  if (r1 < 0) r1 = a.M;
  const bool split = a.split_rows > 0 && r0 == 0 && r1 == a.M;  // all rows: the split panels
#if MG_CPU_X86
  const float* R = s ? s->res : nullptr;
  const int64_t nr = a.nr, K = a.K;
  const bool pack = a.isa == Isa::Avx2 && a.copy_b;
  const int64_t row_bytes = ldb * int64_t(sizeof(float));
  const bool l1 = a.isa == Isa::Avx2 && a.l1_chunk && K >= kL1MinDepth && a.M * K <= kL1MaxWeights &&
                  (pack || (row_bytes % 64 == 0 && row_bytes % 256 != 0));
  const int64_t budget = l1 ? kL1Chunk : pack && a.half_chunk ? int64_t(32768) : int64_t(65536);  // floats
  const int64_t chunk = std::max<int64_t>(nr, (budget / std::max<int64_t>(K, 1)) / nr * nr);
  thread_local std::vector<float> packed;  // AVX2: the chunk's columns by pack_columns
  // partial sums go to C between depth blocks: not where C overlaps the residual the store adds
  // (the arena never gives a step's output the buffer of one of its inputs; other callers might)
  const bool res_apart = !R || R >= C + a.M * ldc || C >= R + a.M * s->ldr;
  const bool depth_blocks = a.isa == Isa::Avx512 && a.depth_blocks && K > kDepthBlock && res_apart;
  for (int64_t c0 = j0; c0 < j1; c0 += chunk) {
    const int64_t c1 = std::min(j1, c0 + chunk);
    // gathered (im2col) columns were just written and are in L2: the AVX-512 kernel leaves them
    const bool prefetch = !pack && a.prefetch && ldb >= kPrefetchRows && !(a.isa == Isa::Avx512 && s && s->gathered);
    if (pack) {
      packed.resize(size_t((c1 - c0 + nr - 1) / nr * nr * K));
      pack_columns(a, B + c0, ldb, K, c1 - c0, nr, packed.data());
    }
    if (depth_blocks) {
      run_depth_range(a, B, ldb, C, ldc, c0, c1, r0, r1, 0, K, s, R, prefetch);
      continue;
    }
    for (int64_t i0 = r0, rows = 0; i0 < r1; i0 += rows) {
      const bool tail = split && i0 >= a.split_at;
      rows = tail ? (i0 == a.split_at ? a.split_rows : r1 - i0) : std::min(a.mr, r1 - i0);
      const float* panel = a.panels + (tail ? ((a.M + a.mr - 1) / a.mr + (i0 > a.split_at)) * a.mr : i0) * K;
      float* Ci = C + i0 * ldc;
      for (int64_t j = c0; j < c1; j += nr) {
        const int64_t n = std::min(nr, c1 - j);
        if (a.isa == Isa::Avx512) {
          const float* Rj = R ? R + i0 * s->ldr + j : nullptr;
          const auto& kernels = avx512_kernels_for(n, nr, prefetch, a.half_tail);
          kernels[size_t(rows - 1)](K, panel, B + j, ldb, Ci + j, ldc, rows, n, s, i0, Rj, false, false);
        } else {
          const float* Bj = pack ? packed.data() + (j - c0) * K : B + j;
          const int64_t lb = pack ? nr : ldb;
          const float* Rj = R ? R + i0 * s->ldr + j : nullptr;
          if (n <= 8 && rows == a.mr && a.half_tail)
            kernel_avx2<false, false, kAvx2Rows, true>(K, panel, Bj, lb, Ci + j, ldc, rows, n, s, i0, Rj);
          else if (rows < a.mr && a.tail_rows)
            kAvx2RowsKernels[rows - 1](n == nr, prefetch, K, panel, Bj, lb, Ci + j, ldc, rows, n, s, i0, Rj);
          else if (n == nr && prefetch) kernel_avx2<true, true>(K, panel, Bj, lb, Ci + j, ldc, rows, n, s, i0, Rj);
          else if (n == nr) kernel_avx2<true>(K, panel, Bj, lb, Ci + j, ldc, rows, n, s, i0, Rj);
          else kernel_avx2<false>(K, panel, Bj, lb, Ci + j, ldc, rows, n, s, i0, Rj);
        }
      }
    }
  }
#endif
}

// Channels: panels [q0, q1), every column of B packed by pack_columns. The depth runs in
// blocks whose slice of the panel (16 KiB at most) stays in L1 while every column block passes
// over it: inside a network the weights come from memory once, not once per column block.
// C's first row is row c0 of the product (a task's piece of it), else row 0.
void run_panels(const PackedWeights& a, const float* B, int64_t N, float* C, int64_t ldc, int64_t q0, int64_t q1,
                const PackedStore* s, int64_t r1 = -1, int64_t c0 = 0) {
  if (r1 < 0) r1 = a.M;
#if MG_CPU_X86
  const int64_t K = a.K, blocks = (N + kChanCols - 1) / kChanCols;
  const int64_t acc_cols = a.wide_channels ? 32 : kChanRows;  // floats of a column's partial sums
  thread_local std::vector<float> acc;  // partial sums between depth blocks
  if (K > kChanDepth && acc.size() < size_t(blocks * kChanCols * acc_cols))
    acc.resize(size_t(blocks * kChanCols * acc_cols));
  for (int64_t q = q0, step = 1; q < q1; q += step) {
    step = a.wide_channels && q + 1 < q1 ? 2 : 1;
    const int64_t i0 = q * kChanRows, rows = std::min(kChanRows * step, r1 - i0);
    const float* panel = a.panels + i0 * K;
    float* Ci = C + (i0 - c0) * ldc;
    for (int64_t k0 = 0; k0 < K; k0 += kChanDepth) {
      const int64_t kn = std::min(kChanDepth, K - k0);
      // the slice after this one: the next depth block of these panels, else the next panels' first
      const int64_t next_q = k0 + kn < K ? q : q + step, next_k0 = k0 + kn < K ? k0 + kn : 0;
      const int64_t next_step = a.wide_channels && next_q + 1 < q1 ? 2 : 1;
      const bool ahead = a.prefetch_a && a.wide_channels && next_q < q1;
      const int64_t lines = ahead ? std::min(kChanDepth, K - next_k0) : 0;  // a k's 16 floats: one line a panel
      const char* next = ahead ? reinterpret_cast<const char*>(a.panels + (next_q * K + next_k0) * kChanRows) : nullptr;
      const int64_t second = next_step == 2 ? int64_t(sizeof(float)) * kChanRows * K : 0;
      for (int64_t bl = 0; bl < blocks; ++bl) {
        const int64_t l0 = bl * lines / blocks, npf = (bl + 1) * lines / blocks - l0;
        const ChanBlock cb = chan_block(N, bl, a.even_blocks);
        const int64_t j = cb.j, slot = bl * kChanCols;
        const float* Bk = B + (slot * K + k0 * kChanCols);
        const float* R = s && s->res ? s->res + i0 * s->ldr + j : nullptr;
        if (a.wide_channels)
          kWideChannelsKernels[step - 1][cb.n - 1](kn, panel + k0 * kChanRows, kChanRows * K, Bk,
                                                   acc.data() + slot * acc_cols, k0 == 0, k0 + kn == K, Ci + j, ldc,
                                                   rows, s, i0, R, ahead ? next + l0 * 64 : nullptr, second, npf);
        else
          kChannelsKernels[cb.n - 1](kn, panel + k0 * kChanRows, Bk, kChanCols, acc.data() + slot * acc_cols, k0 == 0,
                                     k0 + kn == K, Ci + j, ldc, rows, s, i0, R, a.row_store);
      }
    }
  }
#endif
}

}  // namespace

std::vector<std::shared_ptr<const PackedWeights>> make_packed_weights_group(const float* w, int64_t count,
                                                                           int64_t w_stride, int64_t M, int64_t K,
                                                                           int64_t ldw, PackedLayout layout) {
  if (switched_off("MPSGRAPH_CPU_PACKED")) return {};
  if (layout == PackedLayout::Channels && switched_off("MPSGRAPH_CPU_PACKED_CHANNELS")) return {};
  const Isa isa = best_isa();
  if (isa == Isa::Generic || M <= 0 || K <= 0 || count <= 0) return {};
  PackedWeights p;
  p.M = M;
  p.K = K;
  p.isa = layout == PackedLayout::Channels ? Isa::Avx2 : isa;
  p.layout = layout;
  // MPSGRAPH_CPU_PACKED_READ_B=0 (read here) copies B's columns at every depth
  p.copy_b = K > kReadDepth || switched_off("MPSGRAPH_CPU_PACKED_READ_B");
  p.prefetch = !switched_off("MPSGRAPH_CPU_PACKED_PREFETCH");
  p.copy_inline = !switched_off("MPSGRAPH_CPU_PACKED_COPY");
  p.tail_rows = !switched_off("MPSGRAPH_CPU_PACKED_TAIL_ROWS");
  p.half_tail = !switched_off("MPSGRAPH_CPU_PACKED_HALF_TAIL");
  p.row_store = !switched_off("MPSGRAPH_CPU_PACKED_ROW_STORE");
  p.wide_channels = layout == PackedLayout::Channels && packed_channels_wide();
  p.even_blocks = !switched_off("MPSGRAPH_CPU_PACKED_EVEN_BLOCKS");
  p.own_copies = !switched_off("MPSGRAPH_CPU_PACKED_OWN_COPIES");
  p.prefetch_a = !switched_off("MPSGRAPH_CPU_PACKED_PREFETCH_A");
  p.l1_chunk = !switched_off("MPSGRAPH_CPU_PACKED_L1_CHUNK");
  p.half_chunk = !switched_off("MPSGRAPH_CPU_PACKED_HALF_CHUNK");
  p.depth_blocks = !switched_off("MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS");
  const int64_t pr = layout == PackedLayout::Channels ? kChanRows : isa == Isa::Avx512 ? kPanelRows : kAvx2Rows;
  p.mr = pr;
  // AVX-512 planes: blocks of 48 columns, three vectors (24 sums in registers, 11 loads for 24
  // multiply-adds against 10 for 16 at 32 columns); each output's sums are the same either way
  // (MPSGRAPH_CPU_PACKED_48=0: 32 columns)
  p.nr = layout == PackedLayout::Channels ? kChanCols
         : isa == Isa::Avx512             ? (switched_off("MPSGRAPH_CPU_PACKED_48") ? 32 : 48)
                                          : 16;
  const int64_t panels = (M + pr - 1) / pr, rem = M % pr;
  if (p.isa == Isa::Avx2 && layout == PackedLayout::Planes && p.tail_rows && M > pr && rem >= 1 && rem <= 3 &&
      !switched_off("MPSGRAPH_CPU_PACKED_SPLIT_TAIL")) {
    p.split_at = M - pr - rem;
    p.split_rows = (pr + rem + 1) / 2;
  }
  const size_t each = size_t((panels + (p.split_rows ? 2 : 0)) * K * pr), bytes = size_t(count) * each * sizeof(float);
  const std::shared_ptr<Buffer> storage = Buffer::allocate(bytes);
  float* all = static_cast<float*>(storage->data);
  std::fill(all, all + size_t(count) * each, 0.0f);
  std::vector<std::shared_ptr<const PackedWeights>> group;
  for (int64_t g = 0; g < count; ++g) {
    float* dst = all + size_t(g) * each;
    const float* src = w + g * w_stride;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) dst[size_t((i / pr * K + k) * pr + i % pr)] = src[i * ldw + k];
    for (int64_t i = p.split_at; p.split_rows && i < M; ++i) {  // the split panels
      const int64_t q = panels + (i >= p.split_at + p.split_rows), r = i - p.split_at - (q - panels) * p.split_rows;
      for (int64_t k = 0; k < K; ++k) dst[size_t((q * K + k) * pr + r)] = src[i * ldw + k];
    }
    auto one = std::make_shared<PackedWeights>(p);
    one->panels = dst;
    one->storage = storage;
    group.push_back(std::move(one));
  }
  return group;
}

std::shared_ptr<const PackedWeights> make_packed_weights(const float* w, int64_t M, int64_t K, int64_t ldw,
                                                         PackedLayout layout) {
  auto group = make_packed_weights_group(w, 1, 0, M, K, ldw, layout);
  return group.empty() ? nullptr : group[0];
}

int64_t packed_panel_rows(const PackedWeights& a) { return a.mr; }
bool packed_planes(const PackedWeights& a) { return a.layout == PackedLayout::Planes; }

bool packed_channels_wide() {
  return best_isa() == Isa::Avx512 && !switched_off("MPSGRAPH_CPU_PACKED_CHANNELS512");
}

bool packed_depth_parts() {
  return best_isa() == Isa::Avx512 && !switched_off("MPSGRAPH_CPU_PACKED") &&
         !switched_off("MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS");
}

void packed_gemm_depth(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc,
                       int64_t k0, int64_t k1) {
#if MG_CPU_X86
  if (N <= 0 || k0 >= k1 || a.layout != PackedLayout::Planes || a.isa != Isa::Avx512 || !a.depth_blocks) return;
  // as run_columns: column chunks whose slice of B stays in L2 while every panel passes over it
  const int64_t chunk = std::max<int64_t>(a.nr, (65536 / (k1 - k0)) / a.nr * a.nr);
  const bool prefetch = a.prefetch && ldb >= kPrefetchRows;
  for (int64_t c0 = 0; c0 < N; c0 += chunk)
    run_depth_range(a, B, ldb, C, ldc, c0, std::min(N, c0 + chunk), 0, a.M, k0, k1, nullptr, nullptr, prefetch);
#endif
}

void packed_gemm_rows(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc,
                      int64_t r0, int64_t r1, const PackedStore* store) {
  r1 = std::min(r1, a.M);
  if (N <= 0 || r0 >= r1) return;
  if (a.layout == PackedLayout::Channels) {
    thread_local std::vector<float> packed;
    packed.resize(size_t(a.K * ((N + kChanCols - 1) / kChanCols) * kChanCols));
    pack_columns(a, B, ldb, a.K, N, kChanCols, packed.data());
    return run_panels(a, packed.data(), N, C, ldc, r0 / kChanRows, (r1 + kChanRows - 1) / kChanRows, store, r1);
  }
  run_columns(a, B, ldb, C, ldc, 0, N, store, r0, r1);
}

void packed_gemm_xwt(const PackedWeights& a, const float* X, int64_t ldx, int64_t rows, float* Y, int64_t ldy,
                     const PackedStore* store) {
  if (rows <= 0 || a.layout != PackedLayout::Channels) return;
  const int64_t K = a.K, blocks = (rows + kChanCols - 1) / kChanCols;
  thread_local std::vector<float> packed;  // X^T as pack_columns lays out columns: X's rows in chan_block's blocks
  packed.resize(size_t(K * blocks * kChanCols));
  for (int64_t b = 0; b < blocks; ++b) {
    const ChanBlock cb = chan_block(rows, b, a.even_blocks);
    for (int64_t j = cb.j; j < cb.j + cb.n; ++j) {
      const float* x = X + j * ldx;
      float* o = packed.data() + b * K * kChanCols + (j - cb.j);
      for (int64_t k = 0; k < K; ++k) o[k * kChanCols] = x[k];
    }
  }
  const float* Bp = packed.data();
  const int64_t panels = (a.M + kChanRows - 1) / kChanRows;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, kChanRows * K * rows));
  parallel_for(panels, grain, [&](int64_t q0, int64_t q1) {
    // the panels' rows of Y^T, in one piece per task, then written transposed into Y
    const int64_t i0 = q0 * kChanRows, i1 = std::min(a.M, q1 * kChanRows);
    thread_local std::vector<float> t;
    t.resize(size_t((i1 - i0) * rows));
    run_panels(a, Bp, rows, t.data(), rows, q0, q1, store, -1, i0);
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t i = i0; i < i1; ++i) Y[j * ldy + i] = t[size_t((i - i0) * rows + j)];
  });
}

void packed_gemm(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc,
                 const PackedStore* store) {
  if (N <= 0) return;
  if (a.layout == PackedLayout::Channels) {
    const int64_t panels = (a.M + kChanRows - 1) / kChanRows;
    const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, kChanRows * a.K * N));
    const int64_t blocks = (N + kChanCols - 1) / kChanCols;
    if (a.even_blocks && a.own_copies) {
      // Every task packs all of B for itself. One copy shared by the tasks had lines written by
      // one core and read by the other, which moved between the cores every call: MobileNetV2's
      // 7x7 projections of depth 960 at batch 1 ran 80 -> 61 us alone, 1.1-1.15x in the network
      // (a copy split over the tasks was 1.1x over the caller's alone).
      parallel_for(panels, grain, [&](int64_t q0, int64_t q1) {
        thread_local std::vector<float> own;
        own.resize(size_t(a.K * blocks * kChanCols));
        pack_channels_even(B, ldb, a.K, N, own.data());
        run_panels(a, own.data(), N, C, ldc, q0, q1, store);
      });
      return;
    }
    thread_local std::vector<float> packed;  // B's column blocks, shared by the tasks of this call
    packed.resize(size_t(a.K * blocks * kChanCols));
    const float* Bp = packed.data();
    pack_columns(a, B, ldb, a.K, N, kChanCols, packed.data());
    parallel_for(panels, grain, [&](int64_t q0, int64_t q1) { run_panels(a, Bp, N, C, ldc, q0, q1, store); });
    return;
  }
  const int64_t blocks = (N + a.nr - 1) / a.nr;
  // about 256 K multiply-adds per task at least
  const int64_t per_block = std::max<int64_t>(1, a.M * a.K * a.nr);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / per_block);
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    run_columns(a, B, ldb, C, ldc, b0 * a.nr, std::min(N, b1 * a.nr), store);
#if MG_CPU_X86
    if (store && store->stream) _mm_sfence();  // the streamed stores, before the pool says done
#endif
  });
}

}  // namespace mg::cpu
