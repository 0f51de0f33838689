// Lowerings of the image family (core/ops/image.cpp). sample_grid is a composite (its
// decomposition's ops are lowered); hamming_distance is MPSGraph's HammingDistanceWithPrimary
// Tensor:secondaryTensor:resultDataType: (macOS 13). im_to_col and col_to_im are not lowered:
// Apple documents neither the column layout of imToCol / colToIm nor their availability
// consistently (docs/metal.md).
#include "backends/metal/metal_internal.h"

namespace mg::metal {

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
}

}  // namespace mg::metal
