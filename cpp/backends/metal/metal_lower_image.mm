// Lowerings of the image family (core/ops/image.cpp). sample_grid is a composite (its
// decomposition's ops are lowered); hamming_distance is MPSGraph's HammingDistanceWithPrimary
// Tensor:secondaryTensor:resultDataType: (macOS 13); stencil is stencilWithSourceTensor:
// weightsTensor:descriptor: (macOS 12) with the padding resolved to explicit values, in float32
// for bfloat16. im_to_col, col_to_im and non_maximum_suppression are not lowered: Apple documents
// neither the column layout of imToCol / colToIm nor the result of its NMS (docs/metal.md).
#include <cstdint>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/image_attrs.h"

namespace mg::metal {

namespace {

NSArray<NSNumber*>* numbers(const std::vector<int64_t>& v) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:v.size()];
  for (int64_t e : v) [a addObject:@(e)];
  return a;
}

MPSGraphReductionMode reduction_mode(ops::StencilReduction r) {
  switch (r) {
    case ops::StencilReduction::Product: return MPSGraphReductionModeProduct;
    case ops::StencilReduction::Min: return MPSGraphReductionModeMin;
    case ops::StencilReduction::Max: return MPSGraphReductionModeMax;
    default: return MPSGraphReductionModeSum;
  }
}

MPSGraphPaddingMode boundary_mode(ops::StencilBoundary b) {
  switch (b) {
    case ops::StencilBoundary::Constant: return MPSGraphPaddingModeConstant;
    case ops::StencilBoundary::ClampToEdge: return MPSGraphPaddingModeClampToEdge;
    case ops::StencilBoundary::Reflect: return MPSGraphPaddingModeReflect;
    case ops::StencilBoundary::Symmetric: return MPSGraphPaddingModeSymmetric;
    case ops::StencilBoundary::Periodic: return MPSGraphPaddingModePeriodic;
    case ops::StencilBoundary::AntiPeriodic: return MPSGraphPaddingModeAntiPeriodic;
    default: return MPSGraphPaddingModeZero;
  }
}

}  // namespace

void register_image_lowerings() {
  register_lowering("hamming_distance", [](LowerCtx& c) {
    if (@available(macOS 13.0, *)) {
      MPSDataType rt = mps_dtype(c.out().dtype, c.op, c.node.name);
      return std::vector<MPSGraphTensor*>{[c.g HammingDistanceWithPrimaryTensor:c.in[0]
                                                                 secondaryTensor:c.in[1]
                                                                  resultDataType:rt
                                                                            name:nil]};
    }
    c.needs_macos("13.0", "hamming_distance (MPSGraph's HammingDistanceWithPrimaryTensor:)");
  });
  register_lowering("stencil", [](LowerCtx& c) {
    const ops::StencilAttrs& a = typed_attrs<ops::StencilAttrs>(c.node);
    const DType t = c.in_dtype(0), ct = t == DType::BFloat16 ? DType::Float32 : t;
    MPSGraphStencilOpDescriptor* d =
        [MPSGraphStencilOpDescriptor descriptorWithReductionMode:reduction_mode(a.reduction)
                                                        offsets:numbers(a.offsets)
                                                        strides:numbers(a.strides)
                                                  dilationRates:numbers(a.dilation_rates)
                                                explicitPadding:numbers(a.padding)
                                                   boundaryMode:boundary_mode(a.boundary)
                                                   paddingStyle:MPSGraphPaddingStyleExplicitOffset
                                                paddingConstant:float(a.padding_constant)];
    MPSGraphTensor* y = [c.g stencilWithSourceTensor:c.convert(c.in[0], t, ct)
                                       weightsTensor:c.convert(c.in[1], t, ct)
                                          descriptor:d
                                                name:nil];
    return std::vector<MPSGraphTensor*>{c.convert(y, ct, t)};
  });
}

}  // namespace mg::metal
