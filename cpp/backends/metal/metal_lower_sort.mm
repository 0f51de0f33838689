// Lowerings of the sort family (sort, arg_sort, top_k, bottom_k) and of the cumulative family.
//
// MPSGraph sorts Int32, Float16 and Float32 (and Int64 from macOS 13.3; PyTorch's
// castToIHFTypes): other dtypes sort through an order-preserving key (bfloat16 as float32;
// bool and 8/16-bit integers as int32; uint32 as int64; uint64 as int64 with the sign bit
// flipped) and come back exactly. top_k / bottom_k use the axis forms of macOS 14; on 13, top_k
// swaps the axis to the end for topKWithSourceTensor:k: and bottom_k takes the first k of an
// ascending argSort. The order of equal keys and the place of NaN are MPSGraph's (the CPU
// kernels are stable with NaN above +inf; Apple documents neither).
//
// Scans run in float32 for half types and in int32 for 8/16-bit integers (wrapping back into
// the dtype as the CPU does), uint32 sums and products in int32 bits, uint32 extremes in int64,
// uint64 in int64 (extremes with the sign bit flipped). The first output of an exclusive scan
// is set to the identity explicitly (0, 1, +inf / the dtype's largest, -inf / its lowest),
// and NaN propagates through minimum / maximum as on the CPU, whatever MPSGraph does there.
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "backends/metal/metal_internal.h"
#include "core/ops/sort_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

// ---- sort keys ----

DType key_dtype(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::Float32:
    case DType::Int32:
    case DType::Int64: return t;
    case DType::BFloat16: return DType::Float32;
    case DType::UInt32:
    case DType::UInt64: return DType::Int64;
    default: return DType::Int32;  // bool, 8/16-bit integers
  }
}

T flip_sign_bit(LowerCtx& c, T w) {
  return [c.g bitwiseXORWithPrimaryTensor:w secondaryTensor:c.k_int(std::numeric_limits<int64_t>::min(), DType::Int64)
                                     name:nil];
}

T to_key(LowerCtx& c, T x, DType t) {
  if (t == DType::UInt64) return flip_sign_bit(c, c.convert(x, DType::UInt64, DType::Int64));
  return c.convert(x, t, key_dtype(t));
}

T from_key(LowerCtx& c, T k, DType t) {
  if (t == DType::UInt64) return c.convert(flip_sign_bit(c, k), DType::Int64, DType::UInt64);
  return c.convert(k, key_dtype(t), t);
}

std::vector<T> lower_sort(LowerCtx& c, bool indices) {
  const ops::SortAttrs& a = typed_attrs<ops::SortAttrs>(c.node);
  DType t = c.in_dtype(0);
  T key = to_key(c, c.in[0], t);
  BOOL desc = a.descending ? YES : NO;
  if (indices) return {c.raw_cast([c.g argSortWithTensor:key axis:a.axis descending:desc name:nil], DType::Int32)};
  return {from_key(c, [c.g sortWithTensor:key axis:a.axis descending:desc name:nil], t)};
}

std::vector<T> lower_k(LowerCtx& c, bool top) {
  const ops::TopKAttrs& a = typed_attrs<ops::TopKAttrs>(c.node);
  DType t = c.in_dtype(0);
  const Shape& xs = c.in_types[0].shape;
  T key = to_key(c, c.in[0], t);
  T vals = nil, idx = nil;
  if (@available(macOS 14.0, *)) {
    NSArray<T>* r = top ? [c.g topKWithSourceTensor:key axis:a.axis k:NSUInteger(a.k) name:nil]
                        : [c.g bottomKWithSourceTensor:key axis:a.axis k:NSUInteger(a.k) name:nil];
    vals = r[0];
    idx = r[1];
  } else if (top) {  // topKWithSourceTensor:k: works on the last axis
    const NSUInteger last = NSUInteger(xs.size() - 1), ax = NSUInteger(a.axis);
    T src = ax == last ? key : [c.g transposeTensor:key dimension:ax withDimension:last name:nil];
    NSArray<T>* r = [c.g topKWithSourceTensor:src k:NSUInteger(a.k) name:nil];
    vals = ax == last ? r[0] : [c.g transposeTensor:r[0] dimension:ax withDimension:last name:nil];
    idx = ax == last ? r[1] : [c.g transposeTensor:r[1] dimension:ax withDimension:last name:nil];
  } else {  // the first k of an ascending argSort
    idx = c.slice_axis([c.g argSortWithTensor:key axis:a.axis descending:NO name:nil], xs, a.axis, 0, 1, a.k);
    vals = [c.g gatherAlongAxis:a.axis withUpdatesTensor:key indicesTensor:idx name:nil];
  }
  return {from_key(c, vals, t), c.raw_cast(idx, DType::Int32)};
}

// ---- scans ----

enum Scan { kSum, kProd, kMin, kMax };

DType scan_dtype(DType t, Scan op) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return DType::Float32;
    case DType::Float32:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt64: return t == DType::UInt64 ? DType::Int64 : t;
    case DType::UInt32: return (op == kSum || op == kProd) ? DType::Int32 : DType::Int64;
    default: return DType::Int32;  // 8/16-bit integers
  }
}

T scan(LowerCtx& c, Scan op, T x, int64_t axis, BOOL exclusive, BOOL reverse) {
  switch (op) {
    case kSum: return [c.g cumulativeSumWithTensor:x axis:axis exclusive:exclusive reverse:reverse name:nil];
    case kProd: return [c.g cumulativeProductWithTensor:x axis:axis exclusive:exclusive reverse:reverse name:nil];
    case kMin: return [c.g cumulativeMinimumWithTensor:x axis:axis exclusive:exclusive reverse:reverse name:nil];
    case kMax: break;
  }
  return [c.g cumulativeMaximumWithTensor:x axis:axis exclusive:exclusive reverse:reverse name:nil];
}

T identity(LowerCtx& c, Scan op, DType t) {
  if (is_float_dtype(t)) return c.k(op == kSum ? 0.0 : op == kProd ? 1.0 : op == kMin ? INFINITY : -INFINITY, t);
  if (op == kSum || op == kProd) return c.k_int(op == kSum ? 0 : 1, t);
  return c.k_limit(t, op == kMin);
}

void cumulative(const char* name, Scan op) {
  register_lowering(name, [op](LowerCtx& c) {
    const ops::CumulativeAttrs& a = typed_attrs<ops::CumulativeAttrs>(c.node);
    const DType t = c.in_dtype(0), ct = scan_dtype(t, op);
    const Shape& xs = c.in_types[0].shape;
    const bool extreme = op == kMin || op == kMax;
    const bool flip = t == DType::UInt64 && extreme;  // uint64 order as int64 order
    T x = c.convert(c.in[0], t, ct);
    if (flip) x = flip_sign_bit(c, x);
    BOOL excl = a.exclusive ? YES : NO, rev = a.reverse ? YES : NO;
    T y = scan(c, op, x, a.axis, excl, rev);
    if (flip) y = flip_sign_bit(c, y);
    y = c.convert(y, ct, t);
    if (extreme && is_float_dtype(t)) {  // NaN propagates
      T seen = scan(c, kMax, c.raw_cast(c.isnan(c.in[0]), DType::Int32), a.axis, excl, rev);
      y = c.sel(c.gt(seen, c.k_int(0, DType::Int32)), c.k(NAN, t), y);
    }
    if (a.exclusive) {  // the scan's first output is the identity
      T pos = c.raw_cast([c.g coordinateAlongAxis:a.axis withShape:mps_shape(xs) name:nil], DType::Int32);
      T first = c.eq(pos, c.k_int(a.reverse ? xs[size_t(a.axis)] - 1 : 0, DType::Int32));
      y = c.sel(first, identity(c, op, t), y);
    }
    return std::vector<T>{y};
  });
}

}  // namespace

void register_sort_lowerings() {
  register_lowering("sort", [](LowerCtx& c) { return lower_sort(c, false); });
  register_lowering("arg_sort", [](LowerCtx& c) { return lower_sort(c, true); });
  register_lowering("top_k", [](LowerCtx& c) { return lower_k(c, true); });
  register_lowering("bottom_k", [](LowerCtx& c) { return lower_k(c, false); });

  cumulative("cumulative_sum", kSum);
  cumulative("cumulative_product", kProd);
  cumulative("cumulative_minimum", kMin);
  cumulative("cumulative_maximum", kMax);
}

}  // namespace mg::metal
