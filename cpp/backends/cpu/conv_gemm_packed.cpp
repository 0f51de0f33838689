// Packed-weight GEMM of constant-weight convolutions (see conv_gemm_packed.h). A micro-kernel
// keeps an 8-row by NR-column block of C in registers (NR = 32 with AVX-512, 8 with AVX2): per k
// it loads NR values of B's row k and broadcasts the panel's 8 weights of column k, which lie
// next to each other. Column tails are masked; rows past M are zeros in the panel, not stored.
#include "backends/cpu/conv_gemm_packed.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa_target.h"

#if MG_CPU_X86
#include <immintrin.h>
#endif

namespace mg::cpu {

constexpr int64_t kPanelRows = 8;

struct PackedWeights {
  int64_t M = 0, K = 0;
  int64_t nr = 0;  // the micro-kernel's columns
  Isa isa = Isa::Generic;
  std::vector<float> panels;  // ceil(M / 8) panels of K x 8, rows past M zero
};

namespace {

#if MG_CPU_X86
template <bool kFull>
MG_TARGET_AVX512 void kernel_avx512(int64_t K, const float* a, const float* B, int64_t ldb, float* C, int64_t ldc,
                                    int64_t rows, int64_t n) {
  const __mmask16 m0 = kFull || n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  const __mmask16 m1 = kFull || n >= 32 ? __mmask16(0xFFFF) : n <= 16 ? __mmask16(0) : __mmask16((1u << (n - 16)) - 1);
  __m512 c[8][2];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += 8, B += ldb) {
    const __m512 b0 = kFull ? _mm512_loadu_ps(B) : _mm512_maskz_loadu_ps(m0, B);
    const __m512 b1 = kFull ? _mm512_loadu_ps(B + 16) : _mm512_maskz_loadu_ps(m1, B + 16);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      c[r][0] = _mm512_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(ar, b1, c[r][1]);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    _mm512_mask_storeu_ps(C + r * ldc, m0, c[r][0]);
    _mm512_mask_storeu_ps(C + r * ldc + 16, m1, c[r][1]);
  }
}

template <bool kFull>
MG_TARGET_AVX2 void kernel_avx2(int64_t K, const float* a, const float* B, int64_t ldb, float* C, int64_t ldc,
                                int64_t rows, int64_t n) {
  alignas(32) int32_t lanes[8];
  for (int i = 0; i < 8; ++i) lanes[i] = i < n ? -1 : 0;
  const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  __m256 c[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) c[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += 8, B += ldb) {
    const __m256 b = kFull ? _mm256_loadu_ps(B) : _mm256_maskload_ps(B, m);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) c[r] = _mm256_fmadd_ps(_mm256_set1_ps(a[r]), b, c[r]);
  }
  for (int64_t r = 0; r < rows; ++r) _mm256_maskstore_ps(C + r * ldc, m, c[r]);
}
#endif

// Columns [j0, j1) of C, in chunks whose slice of B (K x chunk) stays in L2 while every panel
// passes over it.
void run_columns(const PackedWeights& a, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t j0, int64_t j1) {
#if MG_CPU_X86
  const int64_t nr = a.nr, K = a.K;
  const int64_t chunk = std::max<int64_t>(nr, (int64_t(65536) / std::max<int64_t>(K, 1)) / nr * nr);
  for (int64_t c0 = j0; c0 < j1; c0 += chunk) {
    const int64_t c1 = std::min(j1, c0 + chunk);
    for (int64_t i0 = 0; i0 < a.M; i0 += kPanelRows) {
      const float* panel = a.panels.data() + i0 * K;
      const int64_t rows = std::min(kPanelRows, a.M - i0);
      float* Ci = C + i0 * ldc;
      for (int64_t j = c0; j < c1; j += nr) {
        const int64_t n = std::min(nr, c1 - j);
        if (a.isa == Isa::Avx512) {
          if (n == nr) kernel_avx512<true>(K, panel, B + j, ldb, Ci + j, ldc, rows, n);
          else kernel_avx512<false>(K, panel, B + j, ldb, Ci + j, ldc, rows, n);
        } else {
          if (n == nr) kernel_avx2<true>(K, panel, B + j, ldb, Ci + j, ldc, rows, n);
          else kernel_avx2<false>(K, panel, B + j, ldb, Ci + j, ldc, rows, n);
        }
      }
    }
  }
#endif
}

}  // namespace

std::shared_ptr<const PackedWeights> make_packed_weights(const float* w, int64_t M, int64_t K, int64_t ldw) {
  const char* env = std::getenv("MPSGRAPH_CPU_PACKED");
  if (env && std::string(env) == "0") return nullptr;
  const Isa isa = best_isa();
  if (isa == Isa::Generic || M <= 0 || K <= 0) return nullptr;
  auto p = std::make_shared<PackedWeights>();
  p->M = M;
  p->K = K;
  p->isa = isa;
  p->nr = isa == Isa::Avx512 ? 32 : 8;
  const int64_t panels = (M + kPanelRows - 1) / kPanelRows;
  p->panels.assign(size_t(panels * K * kPanelRows), 0.0f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      p->panels[size_t((i / kPanelRows * K + k) * kPanelRows + i % kPanelRows)] = w[i * ldw + k];
  return p;
}

void packed_gemm(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc) {
  if (N <= 0) return;
  const int64_t blocks = (N + a.nr - 1) / a.nr;
  // about 256 K multiply-adds per task at least
  const int64_t per_block = std::max<int64_t>(1, a.M * a.K * a.nr);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / per_block);
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    run_columns(a, B, ldb, C, ldc, b0 * a.nr, std::min(N, b1 * a.nr));
  });
}

}  // namespace mg::cpu
