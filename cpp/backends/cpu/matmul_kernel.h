// The matrix product kernel with operands given transposed (kernels_matmul.cpp), for the
// program, which folds transposes of the last two dims into the BLAS call's flags.
#pragma once
#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

// matrix_multiplication whose operand x (y) is given as the transpose of its last two dims.
// Floating-point dtypes only.
KernelFn make_matmul_kernel(const KernelCtx& c, bool transpose_x, bool transpose_y);

}  // namespace mg::cpu
