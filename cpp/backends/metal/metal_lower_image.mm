// Lowerings of the image family (core/ops/image.cpp). hamming_distance is MPSGraph's
// HammingDistanceWithPrimaryTensor:secondaryTensor:resultDataType: (macOS 13); stencil is
// stencilWithSourceTensor:weightsTensor:descriptor: (macOS 12) with the padding resolved to
// explicit values, in float32 for bfloat16.
//
// sample_grid (a composite) is MPSGraph's sampleGridWithSourceTensor:... (macOS 13.2) in the form
// PyTorch's MPS backend used for F.grid_sample: NCHW, normalised absolute (x, y) coordinates,
// bilinear or nearest with round-to-even, zero padding, either align_corners, float32 / float16.
// Border padding (PyTorch refused it) and reflection (MPSGraph documents neither how often far
// coordinates are reflected nor how bilinear weights meet a reflected border) are not claimed:
// they run as the decomposition, as do bfloat16 and macOS before 13.2.
//
// im_to_col, col_to_im and im_to_col_gradient run as their decompositions (pad and strided
// slices): Apple does not document the column layout of imToCol / colToIm. non_maximum_suppression
// is not lowered: Apple does not document its result either (docs/metal.md).
#include <cstdint>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/image_attrs.h"
#include "core/typed_attrs.h"

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

bool claim_sample_grid(const Node& n) {
  const DType t = n.outputs.at(0).dtype;
  if (t != DType::Float32 && t != DType::Float16) return false;
  if (typed_attrs<ops::SampleGridAttrs>(n).padding != ops::GridPadding::Zeros) return false;
  if (@available(macOS 13.2, *)) return true;
  return false;
}

std::vector<MPSGraphTensor*> lower_sample_grid(LowerCtx& c) {
  // an empty image (H or W of 0) with a non-empty grid: every sample falls in the zero padding
  if (c.in[0] == nil) return {c.fill(0.0, c.out())};
  const ops::SampleGridAttrs& a = typed_attrs<ops::SampleGridAttrs>(c.node);
  if (@available(macOS 13.2, *)) {
    MPSGraphTensor *x = c.in[0], *grid = c.in[1];
    const MPSGraphTensorNamedDataLayout nchw = MPSGraphTensorNamedDataLayoutNCHW;
    if (a.nearest)  // halves round to even, as torch's nearbyint
      return {[c.g sampleGridWithSourceTensor:x coordinateTensor:grid layout:nchw normalizeCoordinates:YES
                          relativeCoordinates:NO alignCorners:a.align_corners paddingMode:MPSGraphPaddingModeZero
                          nearestRoundingMode:MPSGraphResizeNearestRoundingModeRoundToEven constantValue:0.0 name:nil]};
    return {[c.g sampleGridWithSourceTensor:x coordinateTensor:grid layout:nchw normalizeCoordinates:YES
                        relativeCoordinates:NO alignCorners:a.align_corners paddingMode:MPSGraphPaddingModeZero
                               samplingMode:MPSGraphResizeBilinear constantValue:0.0 name:nil]};
  }
  c.needs_macos("13.2", "sample_grid (MPSGraph's sampleGridWithSourceTensor:)");
}

}  // namespace

void register_image_lowerings() {
  register_composite_lowering("sample_grid", claim_sample_grid, lower_sample_grid);
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
