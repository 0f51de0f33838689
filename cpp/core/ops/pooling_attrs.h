// Typed attributes of the pooling primitives (core/ops/pooling.cpp): max_pooling_nd,
// max_pooling_nd_return_indices, max_pooling_nd_gradient, max_pooling_nd_gather,
// avg_pooling_nd(_gradient) and sum_pooling_nd(_gradient), as kernels and lowerings read them
// with typed_attrs<PoolingAttrs>(node) (core/typed_attrs.h). The front ends (max_pooling_2d,
// global pooling, ...) and l2_norm_pooling_nd are composites that backends never see.
#pragma once
#include "core/dtype.h"
#include "core/ops/pooling_geom.h"

namespace mg::ops {

// What a linear pooling divides each window's sum by.
enum class PoolDivisor {
  None,        // sum_pooling_nd(_gradient) (and the max family, which does not divide)
  ValidTaps,   // avg_pooling_nd(_gradient): the taps inside the input
  PaddedTaps,  // avg with include_zero_pad: the taps inside the padded input
};

struct PoolingAttrs {
  PoolSpec window;  // every list full length (inference normalised them)
  PoolDivisor divisor = PoolDivisor::None;
  DType indices_dtype = DType::Int32;  // max_pooling_nd_return_indices
};

}  // namespace mg::ops
