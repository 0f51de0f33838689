// Lowerings of the gather family (cpp/core/ops/gather.cpp) onto MPSGraph's own ops:
//   gather               gatherWithUpdatesTensor:indicesTensor:axis:batchDimensions:
//   gather_nd            gatherNDWithUpdatesTensor:indicesTensor:batchDimensions:
//   gather_along_axis    gatherAlongAxis:withUpdatesTensor:indicesTensor: (macOS 12.3)
//   scatter_nd*          scatterNDWithDataTensor:updatesTensor:indicesTensor:batchDimensions:mode: (12.0)
//   scatter_along_axis*  scatterAlongAxis:withDataTensor:updatesTensor:indicesTensor:mode: (12.3)
//   scatter*             the along-axis scatter on a (outer, N, S) view, with the indices
//                        broadcast over the slices: MPSGraph's scatterWithDataTensor: takes only
//                        rank-1 indices and no batch dims, ours takes both.
// Every selector is older than the deployment target (13.0): no @available gate.
// The shape forms scatter onto zeros made here, so that every mode starts from the same
// zeros as the CPU. Indices become int32 (int64 for int64 / uint32 / uint64) and negative ones
// are wrapped here (i + n where i < 0), as on the CPU. Out-of-range indices are NOT checked:
// MPSGraph reads or writes nothing defined for them (gatherAlongAxis documents a 0), see
// docs/metal.md. Scatters run in float32 for float16 / bfloat16 (one rounding at the end; the
// CPU rounds after each update) and in int32 / int64 for bool and the narrow integers (sums,
// differences and products wrap to the same bits).
#include "backends/metal/metal_internal.h"
#include "core/ops/gather_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;
using ops::GatherAttrs;
using ops::IndexKind;
using ops::ScatterMode;

int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

DType index_dtype(DType t) {
  return t == DType::Int64 || t == DType::UInt64 || t == DType::UInt32 ? DType::Int64 : DType::Int32;
}

// Input i (indices) as int32 / int64 with negative entries wrapped by `sizes`: one size, or
// one per tuple entry along the last dim (the _nd forms).
T wrapped_indices(LowerCtx& c, size_t i, const std::vector<int64_t>& sizes, bool tuples) {
  const DType from = c.in_dtype(i), dt = index_dtype(from);
  T idx = from == dt ? c.in[i] : c.raw_cast(c.in[i], dt);
  if (is_unsigned_integer(from)) return idx;
  T n = tuples ? c.constant_ints(sizes, Shape{int64_t(sizes.size())}, dt) : c.k_int(sizes.at(0), dt);
  return c.sel(c.lt(idx, c.k_int(0, dt)), c.add(idx, n), idx);
}

MPSGraphScatterMode scatter_mode(ScatterMode m) {
  switch (m) {
    case ScatterMode::Add: return MPSGraphScatterModeAdd;
    case ScatterMode::Sub: return MPSGraphScatterModeSub;
    case ScatterMode::Mul: return MPSGraphScatterModeMul;
    case ScatterMode::Div: return MPSGraphScatterModeDiv;
    case ScatterMode::Min: return MPSGraphScatterModeMin;
    case ScatterMode::Max: return MPSGraphScatterModeMax;
    default: return MPSGraphScatterModeSet;
  }
}

// The dtype a scatter computes in.
DType scatter_dtype(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return DType::Float32;
    case DType::Bool:
    case DType::Int8:
    case DType::UInt8:
    case DType::Int16:
    case DType::UInt16: return DType::Int32;
    case DType::UInt32: return DType::Int64;
    default: return t;
  }
}

std::vector<T> lower_gather(LowerCtx& c) {
  const GatherAttrs& a = typed_attrs<GatherAttrs>(c.node);
  const Shape& D = c.in_types[0].shape;
  const DType dt = c.in_dtype(0);
  T x = dt == DType::Bool ? c.raw_cast(c.in[0], DType::UInt8) : c.in[0];  // a move: bool travels as bytes
  T y;
  switch (a.kind) {
    case IndexKind::Axis:
      y = [c.g gatherWithUpdatesTensor:x
                         indicesTensor:wrapped_indices(c, 1, {D[size_t(a.axis)]}, false)
                                  axis:NSUInteger(a.axis)
                       batchDimensions:NSUInteger(a.batch_dims)
                                  name:nil];
      break;
    case IndexKind::ND: {
      const size_t bd = size_t(a.batch_dims), k = size_t(c.in_types[1].shape.back());
      std::vector<int64_t> sizes(D.begin() + int64_t(bd), D.begin() + int64_t(bd + k));
      y = [c.g gatherNDWithUpdatesTensor:x
                           indicesTensor:wrapped_indices(c, 1, sizes, true)
                         batchDimensions:NSUInteger(bd)
                                    name:nil];
      break;
    }
    case IndexKind::AlongAxis:
      y = [c.g gatherAlongAxis:NSInteger(a.axis)
             withUpdatesTensor:x
                 indicesTensor:wrapped_indices(c, 1, {D[size_t(a.axis)]}, false)
                          name:nil];
      break;
  }
  if (dt == DType::Bool) y = c.raw_cast(y, DType::Bool);
  return {c.conform(y, 0)};
}

std::vector<T> lower_scatter(LowerCtx& c) {
  const GatherAttrs& a = typed_attrs<GatherAttrs>(c.node);
  const size_t u = a.with_data ? 1 : 0, ii = u + 1;
  const TensorType& out = c.out();
  const Shape& R = out.shape;
  const DType dt = out.dtype, ct = scatter_dtype(dt);
  T data = a.with_data ? (dt == ct ? c.in[0] : c.convert(c.in[0], dt, ct)) : c.fill(0, TensorType{ct, R});
  T upd = dt == ct ? c.in[u] : c.convert(c.in[u], dt, ct);
  const MPSGraphScatterMode mode = scatter_mode(a.mode);
  T r;
  switch (a.kind) {
    case IndexKind::ND: {
      const size_t bd = size_t(a.batch_dims), k = size_t(c.in_types[ii].shape.back());
      std::vector<int64_t> sizes(R.begin() + int64_t(bd), R.begin() + int64_t(bd + k));
      r = [c.g scatterNDWithDataTensor:data
                         updatesTensor:upd
                         indicesTensor:wrapped_indices(c, ii, sizes, true)
                       batchDimensions:NSUInteger(bd)
                                  mode:mode
                                  name:nil];
      break;
    }
    case IndexKind::AlongAxis:
      r = [c.g scatterAlongAxis:NSInteger(a.axis)
                 withDataTensor:data
                  updatesTensor:upd
                  indicesTensor:wrapped_indices(c, ii, {R[size_t(a.axis)]}, false)
                           mode:mode
                           name:nil];
      break;
    case IndexKind::Axis: {
      // result (nb * np, N, S), updates (nb * np, Q, S), indices (nb, Q) broadcast to the updates
      const size_t ax = size_t(a.axis), bd = size_t(a.batch_dims);
      const Shape& I = c.in_types[ii].shape;
      const int64_t nb = prod(R, 0, bd), np = prod(R, bd, ax), n = R[ax], s = prod(R, ax + 1, R.size());
      const int64_t q = prod(I, bd, I.size());
      T idx = c.reshape(wrapped_indices(c, ii, {n}, false), Shape{nb, 1, q, 1});
      idx = c.reshape(c.broadcast(idx, Shape{nb, np, q, s}), Shape{nb * np, q, s});
      r = [c.g scatterAlongAxis:1
                 withDataTensor:c.reshape(data, Shape{nb * np, n, s})
                  updatesTensor:c.reshape(upd, Shape{nb * np, q, s})
                  indicesTensor:idx
                           mode:mode
                           name:nil];
      break;
    }
  }
  if (ct != dt) r = c.convert(r, ct, dt);
  return {c.conform(r, 0)};
}

}  // namespace

void register_gather_lowerings() {
  for (const char* op : {"gather", "gather_nd", "gather_along_axis"}) register_lowering(op, lower_gather);
  for (const char* op : {"scatter", "scatter_with_data", "scatter_nd", "scatter_nd_with_data", "scatter_along_axis",
                         "scatter_along_axis_with_data"})
    register_lowering(op, lower_scatter);
}

}  // namespace mg::metal
