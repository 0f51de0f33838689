#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

void register_matmul_kernels() {}

}  // namespace mg::cpu
