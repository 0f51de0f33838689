// The GEMM of forward convolutions whose weights are graph constants: the weights are packed
// once, at compile, into panels of kPanelRows output channels (k-major), and each run
// multiplies them by the columns (or, for 1x1 convolutions, the source planes) without
// repacking. BLAS packs both operands on every call: inside a network the weights arrive
// from L3 or memory, and the copy of them it makes costs as much as the product for the
// small-plane layers. x86 with AVX2 or AVX-512 only; elsewhere (or MPSGRAPH_CPU_PACKED=0, read
// at compile) make_packed_weights returns null and the convolution keeps BLAS.
#pragma once
#include <cstdint>
#include <memory>

namespace mg::cpu {

struct PackedWeights;

// Row-major weights (M, K), rows ldw apart; null where the packed path does not apply.
std::shared_ptr<const PackedWeights> make_packed_weights(const float* w, int64_t M, int64_t K, int64_t ldw);

// C (M, N), rows ldc apart, = the packed weights (M, K) @ B (K, N), rows ldb apart. Each
// element's sum runs over k in order in one float32 accumulator (one fused multiply-add per k).
// Splits over the pool when called outside it and the product is large.
void packed_gemm(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc);

}  // namespace mg::cpu
