// Lowering of scaled_dot_product_attention (core/ops/attention.cpp).
//
// Everything is brought to rank 4 (batch dims folded, missing head dims added) and computed in
// float32 for bfloat16 (float16 and float32 as they are). Grouped key/value heads are repeated
// with a gather so each query head has its own. The bool mask becomes an additive 0 / -inf mask
// and causal adds a constant lower-triangular one. From macOS 15 this goes to MPSGraph's own
// scaledDotProductAttentionWithQueryTensor:keyTensor:valueTensor:maskTensor:scale:name:; before,
// it is composed (matmul, softmax, matmul), as the decomposition does.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/attention_attrs.h"
#include "core/shape.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

std::vector<T> lower_attention(LowerCtx& c) {
  const ops::AttentionAttrs& a = typed_attrs<ops::AttentionAttrs>(c.node);
  const Shape &qs = c.in_types[0].shape, &ks = c.in_types[1].shape, &vs = c.in_types[2].shape;
  const size_t r = qs.size();
  const int64_t L = qs[r - 2], D = qs[r - 1], S = ks[r - 2], Dv = vs[r - 1];
  const int64_t hq = r >= 3 ? qs[r - 3] : 1, hk = r >= 3 ? ks[r - 3] : 1;
  int64_t b = 1;
  for (size_t i = 0; i + 3 < r; ++i) b *= qs[i];
  const DType t = c.in_dtype(0), ct = t == DType::BFloat16 ? DType::Float32 : t;
  if (S == 0) return {c.fill(0.0, c.out())};  // an empty sum; k and v are zero-size (nil)
  if (D == 0) c.fail(ErrorKind::NotImplemented, "scaled_dot_product_attention with head size 0 is not implemented on the metal backend");
  T q = c.raw_cast(c.reshape(c.in[0], {b, hq, L, D}), ct);
  T k = c.raw_cast(c.reshape(c.in[1], {b, hk, S, D}), ct);
  T v = c.raw_cast(c.reshape(c.in[2], {b, hk, S, Dv}), ct);
  if (hq != hk) {
    std::vector<int64_t> idx;
    for (int64_t h = 0; h < hq; ++h) idx.push_back(h / (hq / hk));
    T ix = c.constant_ints(idx, {hq}, DType::Int32);
    k = [c.g gatherWithUpdatesTensor:k indicesTensor:ix axis:1 batchDimensions:0 name:nil];
    v = [c.g gatherWithUpdatesTensor:v indicesTensor:ix axis:1 batchDimensions:0 name:nil];
  }
  T mask = nil;
  if (c.in.size() > 3) {
    Shape full = qs;
    full[r - 1] = S;
    T m = c.broadcast(c.in[3], full);
    m = c.reshape(m, {b, hq, L, S});
    mask = c.in_dtype(3) == DType::Bool ? c.sel(m, c.k(0.0, ct), c.k(-INFINITY, ct)) : c.raw_cast(m, ct);
  }
  if (a.causal) {
    std::vector<double> tri(size_t(L * S));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) tri[size_t(i * S + j)] = j <= i ? 0.0 : -INFINITY;
    T cm = c.constant_vector(tri, {1, 1, L, S}, ct);
    mask = mask ? c.add(mask, cm) : cm;
  }
  const double scale = a.has_scale ? a.scale : (D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0);
  T out = nil;
  if (@available(macOS 15.0, *)) {
    out = mask ? [c.g scaledDotProductAttentionWithQueryTensor:q keyTensor:k valueTensor:v maskTensor:mask
                                                          scale:float(scale) name:nil]
               : [c.g scaledDotProductAttentionWithQueryTensor:q keyTensor:k valueTensor:v scale:float(scale) name:nil];
  } else {
    T kt = [c.g transposeTensor:k dimension:2 withDimension:3 name:nil];
    T s = c.mul([c.g matrixMultiplicationWithPrimaryTensor:q secondaryTensor:kt name:nil], c.k(scale, ct));
    if (mask) s = c.add(s, mask);
    T p = [c.g softMaxWithTensor:s axis:3 name:nil];
    out = [c.g matrixMultiplicationWithPrimaryTensor:p secondaryTensor:v name:nil];
  }
  return {c.conform(c.reshape(out, c.out().shape), 0)};
}

}  // namespace

void register_attention_lowerings() { register_composite_lowering("scaled_dot_product_attention", claim_always, lower_attention); }

}  // namespace mg::metal
