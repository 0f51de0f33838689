#include "core/ops/common.h"

namespace mg::ops {

void register_shape_ops() {}

}  // namespace mg::ops
