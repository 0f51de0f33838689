// Typed attributes of the FFT family (core/ops/fft.cpp), as kernels and lowerings read them:
// typed_attrs<FftAttrs>(node) (core/typed_attrs.h).
#pragma once
#include <cstdint>
#include <vector>

namespace mg::ops {

// MPSGraphFFTScalingMode: the result is multiplied by 1, 1/V or 1/sqrt(V), where V is the
// product of the real signal's lengths along the transformed axes.
enum class FftScaling : int { None = 0, Size = 1, Unitary = 2 };

// fast_fourier_transform, real_to_hermitean_fft, hermitean_to_real_fft.
struct FftAttrs {
  std::vector<int64_t> axes;  // sorted, non-negative; the last one is the halved axis of the real transforms
  bool inverse = false;       // exp(+i...) instead of exp(-i...)
  FftScaling scaling = FftScaling::None;
  bool round_to_odd_hermitean = false;  // hermitean_to_real_fft: output length 2(m-1)+1 instead of 2(m-1)
};

}  // namespace mg::ops
