// matrix_multiplication: numpy matmul semantics (1-D operands promoted, batch dims broadcast).
// The op has no attributes (transposes are transpose nodes of their own).
// Floats use matrixMultiplicationWithPrimaryTensor:secondaryTensor:name:, split along K when
// K >= 32767 (silently wrong on M1/M2 GPUs, pytorch/pytorch#195163). Integers are composed
// exactly (multiply + reduce-sum, wrapping like the CPU kernel) instead of going through float.
#include <algorithm>
#include <utility>

#include "backends/metal/metal_internal.h"
#include "core/shape.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

}  // namespace

void register_matmul_lowerings() {
  register_lowering("matrix_multiplication", [](LowerCtx& c) {
    const DType t = c.in_dtype(0);
    if (t == DType::Bool) c.fail(ErrorKind::NotImplemented, "bool matrix_multiplication is not implemented on the metal backend");
    T a = c.in[0], b = c.in[1];
    Shape as = c.in_types[0].shape, bs = c.in_types[1].shape;
    if (as.empty() || bs.empty()) c.fail(ErrorKind::Value, "matrix_multiplication needs operands of rank >= 1");
    if (as.size() == 1) {
      as = {1, as[0]};
      a = c.reshape(a, as);
    }
    if (bs.size() == 1) {
      bs = {bs[0], 1};
      b = c.reshape(b, bs);
    }
    const int64_t K = as.back();
    if (bs[bs.size() - 2] != K)
      c.fail(ErrorKind::Value, "inner dimensions differ: " + shape_str(as) + " @ " + shape_str(bs));

    if (!is_float_dtype(t)) {
      Shape ae = as, be = bs;
      ae.push_back(1);                    // (..., M, K, 1)
      be.insert(be.end() - 2, 1);         // (..., 1, K, N)
      auto prod = broadcast_shapes(ae, be);
      if (!prod) c.fail(ErrorKind::Value, "batch dimensions do not broadcast: " + shape_str(as) + " @ " + shape_str(bs));
      const bool narrow = dtype_size(t) < 4 || t == DType::UInt32;  // computed in int32 (below)
      const uint64_t bytes = uint64_t(num_elements(*prod)) * (narrow ? 4 : dtype_size(t));
      if (bytes > kMaxTensorBytes || prod->size() > kMaxRank)
        c.fail(ErrorKind::NotImplemented, "integer matrix_multiplication of " + shape_str(as) + " @ " + shape_str(bs) +
                                              " is too large for the metal backend's exact integer path; cast to float32");
      // The products and their sum in int32 for the narrow dtypes (as PyTorch casts before
      // MPSGraph's reductions): the low bits of a wrapped sum do not depend on the width it
      // wraps in, so narrowing back gives the CPU's wrapped result.
      auto widen = [&](T v) { return t == DType::UInt32 ? c.uint32_bits_to_int32(v) : c.raw_cast(v, DType::Int32); };
      T a2 = c.reshape(a, ae), b2 = c.reshape(b, be);
      if (narrow) {
        a2 = widen(a2);
        b2 = widen(b2);
      }
      T s = [c.g reductionSumWithTensor:c.mul(a2, b2) axis:NSInteger(prod->size() - 2) name:nil];
      if (!narrow) return std::vector<T>{s};
      return std::vector<T>{t == DType::UInt32 ? c.int32_bits_to_uint32(s) : c.wrap_narrow(s, DType::Int32, t)};
    }

    if (K < kMatmulMaxK) return std::vector<T>{[c.g matrixMultiplicationWithPrimaryTensor:a secondaryTensor:b name:nil]};
    T acc = nil;
    for (int64_t k0 = 0; k0 < K; k0 += kMatmulSplitK) {
      const int64_t len = std::min<int64_t>(kMatmulSplitK, K - k0);
      T ak = [c.g sliceTensor:a dimension:NSUInteger(as.size() - 1) start:k0 length:len name:nil];
      T bk = [c.g sliceTensor:b dimension:NSUInteger(bs.size() - 2) start:k0 length:len name:nil];
      T part = [c.g matrixMultiplicationWithPrimaryTensor:ak secondaryTensor:bk name:nil];
      acc = acc ? c.add(acc, part) : part;
    }
    return std::vector<T>{acc};
  });
}

}  // namespace mg::metal
