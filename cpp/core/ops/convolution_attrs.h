// Typed attributes of the convolution primitives (core/ops/convolution.cpp): convolution,
// convolution_data_gradient and convolution_weights_gradient, as kernels and lowerings read
// them with typed_attrs<ConvolutionAttrs>(node) (core/typed_attrs.h). The front ends
// (convolution_2d, ...) are composites that backends never see.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace mg::ops {

enum class PaddingStyle { Explicit, Valid, Same, SameLower };

struct ConvolutionAttrs {
  std::vector<int64_t> strides, dilation_rates;  // one per spatial dim
  // (before, after) per spatial dim. Inference resolves the 'valid' and 'same' styles into it
  // once the source's spatial dims are known, so at specialisation it always holds the padding.
  std::vector<int64_t> padding;
  PaddingStyle padding_style = PaddingStyle::Explicit;
  int64_t groups = 1;
  // convolution_data_gradient only: where the source's spatial dims came from, when not `like`.
  std::optional<std::vector<int64_t>> output_padding, source_spatial_shape;
  // convolution_weights_gradient only: the kernel's spatial dims, when not `like`'s.
  std::optional<std::vector<int64_t>> kernel_spatial_shape;
};

}  // namespace mg::ops
