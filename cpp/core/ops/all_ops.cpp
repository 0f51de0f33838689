#include <algorithm>
#include <string>

#include "core/ops/common.h"

namespace mg {

namespace ops {

// Families registered here only (declared here rather than in common.h, which every op file includes).
void register_linalg_ops();
void register_quantization_ops();
void register_image_ops();

bool in_class(DType t, unsigned cls) {
  if (is_bool(t)) return cls & kBool;
  if (is_signed_integer(t)) return cls & kSigned;
  if (is_unsigned_integer(t)) return cls & kUnsigned;
  if (is_complex(t)) return cls & kComplex;
  return cls & kFloat;
}

std::string class_name(unsigned cls) {
  if (cls == kFloat) return "a floating-point";
  if (cls == kInt) return "an integer";
  if (cls == (kInt | kBool)) return "an integer or bool";
  if (cls == kBool) return "a bool";
  if (cls == kNumeric) return "a numeric (non-bool)";
  if (cls == (kFloat | kSigned)) return "a signed or floating-point";
  if (cls == kComplex) return "a complex";
  if (cls == (kFloat | kComplex)) return "a floating-point or complex";
  return "a supported";
}

void require_class(const InferCtx& c, size_t input, unsigned cls) {
  DType t = c.in[input].dtype;
  if (!in_class(t, cls)) {
    std::string which = c.op.inputs.empty() ? "input" : c.op.inputs[std::min(input, c.op.inputs.size() - 1)].name;
    c.fail(ErrorKind::Type, "expects " + class_name(cls) + " dtype for '" + which + "', got " + type_str(c.in[input]));
  }
}

}  // namespace ops

void register_all_ops() {
  ops::register_memory_ops();
  ops::register_control_flow_ops();
  ops::register_autodiff_ops();
  ops::register_elementwise_ops();
  ops::register_reduction_ops();
  ops::register_matmul_ops();
  ops::register_shape_ops();
  ops::register_creation_ops();
  ops::register_nn_ops();
  ops::register_pooling_ops();
  ops::register_resize_ops();
  ops::register_convolution_ops();
  ops::register_sparse_ops();
  ops::register_gather_ops();
  ops::register_random_ops();
  ops::register_normalization_ops();
  ops::register_dynamic_ops();
  ops::register_sort_ops();
  ops::register_complex_ops();  // after the families whose ops it marks as taking complex
  ops::register_fft_ops();
  ops::register_attention_ops();
  ops::register_rnn_ops();
  ops::register_linalg_ops();
  ops::register_quantization_ops();
  ops::register_image_ops();
}

}  // namespace mg
