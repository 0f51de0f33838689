// Typed attributes of the quantization family (core/ops/quantization.cpp), as lowerings read
// them: typed_attrs<QuantAttrs>(node) (core/typed_attrs.h).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace mg::ops {

// quantize / dequantize / fake_quantize: the result (or quantized) dtype and the axis of
// per-axis scale and zero point (-1: per tensor); inference has normalised the axis.
struct QuantAttrs {
  DType dtype = DType::Int8;
  int64_t axis = -1;
};

}  // namespace mg::ops
