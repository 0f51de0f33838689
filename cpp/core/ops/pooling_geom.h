// Window geometry of the pooling family, shared by inference (core/ops/pooling.cpp) and the
// kernels (backends/*/kernels_pooling.cpp) so that both agree on padding and output sizes.
//
// Pooling runs over the trailing k dims of a tensor (k = len(kernel_sizes)); the leading dims
// are batch-like. Per spatial dim: kernel size, stride, dilation and padding (before, after).
// padding_style:
//   "explicit"   the `padding` attribute (2k values: before_0, after_0, before_1, after_1, ...)
//   "valid"      no padding (MPSGraph's TF_VALID)
//   "same"       out = ceil(in / stride), padding split evenly with the odd one after
//                (TF_SAME); `padding` and ceil_mode are ignored
//   "same_lower" as "same" with the odd one before (ONNX_SAME_LOWER)
// Output size (explicit / valid): L = in + before + after, window extent e = (k - 1) * d + 1,
// out = floor((L - e) / s) + 1, or with ceil_mode ceil((L - e) / s) + 1 less one where the last
// window would start past the input and its leading padding (PyTorch's rule).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"

namespace mg::ops {

struct PoolSpec {
  std::vector<int64_t> kernel, stride, dilation, padding;  // padding: 2 per dim
  std::string style = "explicit";
  bool ceil_mode = false;
  size_t k() const { return kernel.size(); }
};

struct PoolDim {
  int64_t in = -1, out = -1, before = -1, after = -1;  // -1: unknown until specialisation
};

// Output sizes and padding for spatial input sizes `in` (entries may be -1). Returns "" or an
// error message (without the op name or shapes; callers add them).
std::string pool_dims(const PoolSpec& s, const std::vector<int64_t>& in, std::vector<PoolDim>& dims);

}  // namespace mg::ops
