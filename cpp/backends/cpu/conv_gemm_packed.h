// The GEMM of forward convolutions whose weights are graph constants: the weights are packed
// once, at compile, into panels and each run multiplies them by the columns (or, for 1x1
// convolutions, the source planes) without repacking. BLAS packs both operands on every call:
// inside a network the weights arrive from L3 or memory, and the copy of them it makes costs as
// much as the product for the small-plane layers. Two layouts:
//  * Planes: panels of 8 (AVX-512) or 6 (AVX2) output channels (k-major), the micro-kernel
//    vectorised along the columns; for products of many columns.
//  * Channels: panels of 16 output channels, channels innermost, the micro-kernel vectorised
//    along the output channels and 6 columns wide (AVX-512: two panels at a time), the depth in
//    L1-sized blocks; for small planes (7x7) and deep products of few columns, where the planes
//    layout would waste lanes on column tails (MPSGRAPH_CPU_PACKED_CHANNELS=0, read at compile,
//    keeps BLAS there).
// x86 with AVX2 or AVX-512 only; elsewhere (or MPSGRAPH_CPU_PACKED=0, read at compile)
// make_packed_weights returns null and the convolution keeps BLAS.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace mg::cpu {

struct PackedWeights;

enum class PackedLayout { Planes, Channels };

// Row-major weights (M, K), rows ldw apart; null where the packed path does not apply.
std::shared_ptr<const PackedWeights> make_packed_weights(const float* w, int64_t M, int64_t K, int64_t ldw,
                                                         PackedLayout layout = PackedLayout::Planes);

// `count` such matrices, the g-th at w + g * w_stride, packed into one allocation (a Buffer:
// huge pages from 4 MiB, so Winograd's 16 products of 1 MiB each stream from memory as one);
// empty where the packed path does not apply.
std::vector<std::shared_ptr<const PackedWeights>> make_packed_weights_group(const float* w, int64_t count,
                                                                           int64_t w_stride, int64_t M, int64_t K,
                                                                           int64_t ldw, PackedLayout layout);

// An epilogue folded into the store, computed as the epilogue ops compute it: row i gets
// v + bias[i * bias_stride] (with a bias), then v <= lo ? lo : v, then v >= hi ? hi : v (with
// clamp; lo and hi not NaN), then element (i, j) v + res[i * ldr + j] (with res: a residual
// laid out as C).
struct PackedStore {
  const float* bias = nullptr;
  int64_t bias_stride = 0;
  bool clamp = false;
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  const float* res = nullptr;
  int64_t ldr = 0;
  // the AVX2 kernels clamp with max and min (the same values: a sum from +0 is never -0, so
  // only a -0 bound would differ; the caller leaves it off for those)
  bool minmax = false;
  // the AVX2 planes kernel's full blocks stored past the caches where C's rows are 32-byte
  // aligned (outputs larger than L3, which the next layer reads from memory anyway: no reads
  // for ownership); packed_gemm fences them before it returns
  bool stream = false;
  // B is gathered columns (im2col) rather than rows read where they lie: the AVX-512 planes
  // kernel does not prefetch them (just written, they are in L2: ResNet-18's stem ran 1.05-1.1x
  // faster without, the network about 1.05x at batch 1 on a Xeon)
  bool gathered = false;
};

// C (M, N), rows ldc apart, = the packed weights (M, K) @ B (K, N), rows ldb apart, then the
// store's epilogue (null: none). Each element's sum runs over k in order in one float32
// accumulator (one fused multiply-add per k). Splits over the pool when called outside it and
// the product is large.
void packed_gemm(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc,
                 const PackedStore* store = nullptr);

// Y (rows, M), rows ldy apart, = X (rows, K), rows ldx apart, @ the packed weights (M, K)
// transposed, then the store's epilogue on Y's columns (a bias per column; no residual): a
// matrix product of few rows by constant weights (a classifier), which BLAS would repack on
// every call. Channels layout only. Each element's sum runs over k in order in one float32
// accumulator. Splits over the pool when called outside it.
void packed_gemm_xwt(const PackedWeights& a, const float* X, int64_t ldx, int64_t rows, float* Y, int64_t ldy,
                     const PackedStore* store = nullptr);

// Whether the channels layout runs the AVX-512 kernel of two panels at a time (an AVX-512 CPU,
// MPSGRAPH_CPU_PACKED_CHANNELS512 not 0; read at compile): layout choices that depend on it ask here.
bool packed_channels_wide();

// Rows [r0, r1) of that product (C's row 0 is the product's), on the calling thread (r0 a
// multiple of packed_panel_rows), with store's epilogue if given: threads that split a
// convolution's output channels among them.
int64_t packed_panel_rows(const PackedWeights& a);
bool packed_planes(const PackedWeights& a);  // the planes layout (else channels)
// C (M, N), rows ldc apart, = the packed weights' columns [k0, k1) @ B's rows [k0, k1) (B points
// at row 0), plain sums in order over k (no epilogue), on the calling thread: threads that split
// a product's depth among them, each over the channels its own core wrote. Only where
// packed_depth_parts() (weights packed now in planes get the AVX-512 kernel with depth blocks);
// elsewhere C is left as it was.
bool packed_depth_parts();
void packed_gemm_depth(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc,
                       int64_t k0, int64_t k1);

void packed_gemm_rows(const PackedWeights& a, const float* B, int64_t ldb, int64_t N, float* C, int64_t ldc,
                      int64_t r0, int64_t r1, const PackedStore* store = nullptr);

}  // namespace mg::cpu
