// Depthwise 3x3 rows (see conv_depthwise.h). The loop is plain C++ that compilers vectorise
// (stride 2 as even/odd lane shuffles), instantiated once per ISA; the caller handles the
// edge columns where a tap falls in the padding.
#include "backends/cpu/conv_depthwise.h"

#include "backends/cpu/isa_target.h"

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
template <int S>
MG_TARGET_AVX512 void row_avx512(const float* const* rows, const float* w, float* y, int64_t j0, int64_t j1,
                                 float bias, float lo, float hi) {
  row_body<S>(rows, w, y, j0, j1, bias, lo, hi);
}
#endif

}  // namespace

Dw3RowFn dw3_row_fn(int64_t stride) {
  if (stride != 1 && stride != 2) return nullptr;
  const bool s1 = stride == 1;
#if MG_CPU_X86
  if (best_isa() == Isa::Avx512) return s1 ? row_avx512<1> : row_avx512<2>;
  if (best_isa() == Isa::Avx2) return s1 ? row_avx2<1> : row_avx2<2>;
#endif
  return s1 ? row_generic<1> : row_generic<2>;
}

}  // namespace mg::cpu
