// Depthwise 3x3 convolution rows on the CPU (conv_depthwise.cpp): one pass per output row
// reads the three source rows, sums the nine taps and applies a bias and a clamp, compiled per
// ISA (AVX2+FMA, which AVX-512 CPUs run too, and the baseline) and picked at first use
// (isa_target.h).
#pragma once
#include <cstdint>

namespace mg::cpu {

// y[j] = clamp(sum over rows k and taps t of w[3k + t] * rows[k][j * stride + t] + bias, lo, hi)
// for j in [j0, j1), every source read in range. The clamp is max(lo) then min(hi) as the
// clamp kernel's (a NaN sum stays NaN); lo = -inf, hi = +inf and bias = 0 leave the sum.
using Dw3RowFn = void (*)(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1, float bias,
                          float lo, float hi);

// stride 1 or 2; null otherwise. s1_by_hand: AVX2 stride 1 rows end in a vector step by hand
// instead of the compiler's scalar remainder (the same bits). avx512: AVX-512 CPUs run 16-lane
// rows and planes (the same bits; false: the 8-lane ones).
Dw3RowFn dw3_row_fn(int64_t stride, bool s1_by_hand = true, bool avx512 = true);

// A stride-1 plane from its zero-bordered copy b (row width wb, nr + 2 rows, readable 10 floats
// past the last row's start), output rows of ol >= 4: y[r * ol + j] = clamp(sum over kt, t of
// w[3kt + t] * b[(r + kt) * wb + j + t] + bias, lo, hi), the same sums as Dw3RowFn's rows.
// Output rows run in pairs that share their source rows (four rows loaded for two outputs, not
// six), and straight into y (no bordered output rows to copy out); rows shorter than 8 are one
// vector each, written over by the next row past their end. Null where no such path (the
// baseline ISA).
using Dw3PlaneFn = void (*)(const float* b, int64_t wb, const float* w, float* y, int64_t ol, int64_t nr,
                            float bias, float lo, float hi);
Dw3PlaneFn dw3_s1_plane_fn(bool avx512 = true);

// A stride-2 plane from its zero-bordered copy as two phases, its even rows at even and its odd
// rows at odd (row width wb each, nr + 1 even rows, nr odd ones, each readable 17 floats past
// its last row's start), output rows of ol >= 4:
// y[r * ol + j] sums tap row 0 from even row r, tap row 1 from odd row r and tap row 2 from even
// row r + 1, each at columns 2j to 2j + 2; the same sums as Dw3RowFn's stride-2 rows. Output
// rows in pairs (five rows loaded for two outputs, not six), straight into y. Null where no
// such path (the baseline ISA).
using Dw3PhasePlaneFn = void (*)(const float* even, const float* odd, int64_t wb, const float* w, float* y,
                                 int64_t ol, int64_t nr, float bias, float lo, float hi);
Dw3PhasePlaneFn dw3_s2_plane_fn(bool avx512 = true);

// 16 channels' planes at once (AVX-512), for planes of a row or two of vectors, where one
// channel's nine dependent taps per vector leave the multiply-add units idle: the 16 source
// planes (in_plane apart, ih x iw) are transposed into one zero-bordered plane of 16-channel
// pixels, each output pixel's nine taps are nine multiply-adds over 16 channels, and the
// outputs are transposed back (planes op apart, oh x ow). Stride 1 or 2, padding pad_t and
// pad_l before (the rest after); the same sums in the same order as Dw3PlaneFn (stride 1) and
// Dw3PhasePlaneFn (stride 2). w: 16 x 9 taps; bias: 16 values, or one (bias_step 0); scratch:
// at least dw3_block16_scratch floats. Null where no such path.
struct Dw3Block {
  int64_t ih, iw, oh, ow, stride, pad_t, pad_l;
};
using Dw3Block16Fn = void (*)(const Dw3Block& b, const float* x, int64_t in_plane, const float* w, const float* bias,
                              int64_t bias_step, float lo, float hi, float* y, int64_t op, float* scratch);
Dw3Block16Fn dw3_block16_fn();
int64_t dw3_block16_scratch(const Dw3Block& b);

}  // namespace mg::cpu
