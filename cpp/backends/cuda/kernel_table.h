// The CUDA backend's kernel table by op name, for the bindings (no CUDA headers needed).
#pragma once
#include <string>
#include <vector>

namespace mg::cuda {

// Ops with a kernel in the cuda backend, sorted; the table is static, so no GPU is needed.
std::vector<std::string> kernel_ops();

}  // namespace mg::cuda
