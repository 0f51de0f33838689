// Depthwise 3x3 convolution rows on the CPU (conv_depthwise.cpp): one pass per output row
// reads the three source rows, sums the nine taps and applies a bias and a clamp, compiled per
// ISA (AVX-512, AVX2+FMA, the baseline) and picked at first use (isa_target.h).
#pragma once
#include <cstdint>

namespace mg::cpu {

// y[j] = clamp(sum over rows k and taps t of w[3k + t] * rows[k][j * stride + t] + bias, lo, hi)
// for j in [j0, j1), every source read in range. The clamp is max(lo) then min(hi) as the
// clamp kernel's (a NaN sum stays NaN); lo = -inf, hi = +inf and bias = 0 leave the sum.
using Dw3RowFn = void (*)(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1, float bias,
                          float lo, float hi);

// stride 1 or 2; null otherwise. s1_by_hand: AVX2 stride 1 rows end in a vector step by hand
// instead of the compiler's scalar remainder (the same bits).
Dw3RowFn dw3_row_fn(int64_t stride, bool s1_by_hand = true);

}  // namespace mg::cpu
