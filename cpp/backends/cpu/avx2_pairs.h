// AVX2 stride-2 rows (depthwise stride 2, Winograd's input transform, 2x2 pools, im2col stems):
// the even or the odd floats of 16 in the lane order one shuffle leaves (0 1 4 5 2 3 6 7), and
// the store that puts such lanes back in order with one permute.
#pragma once
#include "backends/cpu/isa_target.h"

#if MG_CPU_X86
#include <immintrin.h>

namespace mg::cpu {

// a0 a2 b0 b2 | a4 a6 b4 b6 (even) or a1 a3 b1 b3 | a5 a7 b5 b7
MG_TARGET_AVX2 inline __m256 evens_or_odds(__m256 a, __m256 b, bool even) {
  return even ? _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)) : _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}

// p[0, 2, ..., 14] or p[1, 3, ..., 15], in evens_or_odds' lane order
MG_TARGET_AVX2 inline __m256 load_evens_or_odds(const float* p, bool even) {
  return evens_or_odds(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), even);
}

// v, whose lanes are in evens_or_odds' order, in order.
MG_TARGET_AVX2 inline __m256 in_order(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
}

// Stores v, whose lanes are in evens_or_odds' order, in order.
MG_TARGET_AVX2 inline void store_in_order(float* p, __m256 v) { _mm256_storeu_ps(p, in_order(v)); }

}  // namespace mg::cpu
#endif
