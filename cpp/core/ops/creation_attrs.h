// Typed attributes of the creation family (core/ops/creation.cpp) and of full_like
// (core/ops/autodiff_ops.cpp), as kernels and lowerings read them: typed_attrs<FillAttrs>(node)
// and so on (core/typed_attrs.h). zeros and ones decode nothing.
#pragma once
#include <cstdint>

namespace mg::ops {

// full, full_like: the fill value (converted to the output dtype by the backend).
struct FillAttrs {
  double value = 0.0;
};

// arange: start + i * step for i in [0, ceil((stop - start) / step)); inference turned
// arange(n) into start 0, stop n.
struct ArangeAttrs {
  double start = 0.0, stop = 0.0, step = 1.0;
};

// eye: ones on diagonal k of an (n, m) matrix (m = n when it was not given).
struct EyeAttrs {
  int64_t n = 0, m = 0, k = 0;
};

}  // namespace mg::ops
