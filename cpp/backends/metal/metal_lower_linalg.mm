// Lowerings of the linear-algebra family (core/ops/linalg.cpp).
//
// matrix_inverse is MPSGraph's inverseOfTensor: (macOS 13), in float32 for bfloat16 (float16 and
// float32 as they are); solve is inverse(a) @ b, which is less accurate than the CPU's LU solve
// for ill-conditioned a. MPSGraph has no LU, Cholesky or triangular solve: cholesky,
// triangular_solve, determinant and log_determinant run as their core decompositions (unrolled
// column loops of matmuls, slices and elementwise ops, up to 128 x 128; larger ones raise
// NotImplemented naming the op and n); docs/metal.md lists them.
#include "backends/metal/metal_internal.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

T inverse(LowerCtx& c, T x, DType t) {
  if (@available(macOS 13.0, *)) {
    const DType ct = t == DType::BFloat16 ? DType::Float32 : t;
    T inv = [c.g inverseOfTensor:c.convert(x, t, ct) name:nil];
    return c.convert(inv, ct, t);
  }
  c.needs_macos("13.0", "matrix_inverse (MPSGraph's inverseOfTensor:)");
}

}  // namespace

void register_linalg_lowerings() {
  register_lowering("matrix_inverse", [](LowerCtx& c) { return std::vector<T>{inverse(c, c.in[0], c.in_dtype(0))}; });
  register_lowering("solve", [](LowerCtx& c) {
    const Shape& bs = c.in_types[1].shape;
    T inv = inverse(c, c.in[0], c.in_dtype(0));
    T b = bs.size() == 1 ? c.reshape(c.in[1], {bs[0], 1}) : c.in[1];
    T x = [c.g matrixMultiplicationWithPrimaryTensor:inv secondaryTensor:b name:nil];
    return std::vector<T>{bs.size() == 1 ? c.reshape(x, c.out().shape) : x};
  });
}

}  // namespace mg::metal
