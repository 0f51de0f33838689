// Typed attributes of the attention family (core/ops/attention.cpp), as kernels and lowerings
// read them: typed_attrs<AttentionAttrs>(node) (core/typed_attrs.h).
#pragma once

namespace mg::ops {

// scaled_dot_product_attention.
struct AttentionAttrs {
  bool has_scale = false;  // false: 1 / sqrt(head size), known once the query's last dim is
  double scale = 1.0;
  bool causal = false;     // query i attends keys j <= i (top-left aligned, as PyTorch's is_causal)
  bool mask_gradient = false;  // the gradient node also returns the (float) mask's gradient
};

}  // namespace mg::ops
