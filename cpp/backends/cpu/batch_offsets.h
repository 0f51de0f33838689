// Offsets of broadcast batches of matrices (or vectors): used by the kernels that loop over the
// leading dims of matrix-shaped operands (kernels_linalg.cpp, kernels_image.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/shape.h"

namespace mg::cpu {

// For each batch of out_batch (row-major), the offset in elements of the matching item of an
// operand whose batch dims are in_batch (numpy broadcasting: aligned right, size-1 dims repeat)
// and whose items hold `item` elements.
inline std::vector<int64_t> batch_offsets(const Shape& in_batch, const Shape& out_batch, int64_t item) {
  const size_t r = out_batch.size();
  std::vector<int64_t> stride(r, 0);
  int64_t acc = item;
  for (size_t i = in_batch.size(); i-- > 0;) {
    stride[r - in_batch.size() + i] = in_batch[i] == 1 ? 0 : acc;
    acc *= in_batch[i];
  }
  std::vector<int64_t> off(size_t(num_elements(out_batch)), 0);
  for (size_t b = 0; b < off.size(); ++b) {
    int64_t rem = int64_t(b);
    for (size_t d = r; d-- > 0;) {
      off[b] += (rem % out_batch[d]) * stride[d];
      rem /= out_batch[d];
    }
  }
  return off;
}

}  // namespace mg::cpu
