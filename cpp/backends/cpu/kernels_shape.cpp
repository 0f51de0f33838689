#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

void register_shape_kernels() {}

}  // namespace mg::cpu
