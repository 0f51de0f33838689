#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

void register_reduction_kernels() {}

}  // namespace mg::cpu
