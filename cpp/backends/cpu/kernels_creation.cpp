#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

void register_creation_kernels() {}

}  // namespace mg::cpu
