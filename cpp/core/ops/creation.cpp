#include "core/ops/common.h"

namespace mg::ops {

void register_creation_ops() {}

}  // namespace mg::ops
