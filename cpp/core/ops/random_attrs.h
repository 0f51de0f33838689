// Typed attributes of the random family's primitive (core/ops/random.cpp), as kernels and
// lowerings read them: typed_attrs<RandomUniformAttrs>(node) (core/typed_attrs.h). The other
// random ops are composites of random_uniform_like that backends never see.
#pragma once
#include <cstdint>

namespace mg::ops {

// random_uniform_like: Philox-4x32-10 keyed by seed (the output dtype is the node's).
struct RandomUniformAttrs {
  int64_t seed = 0;
};

}  // namespace mg::ops
