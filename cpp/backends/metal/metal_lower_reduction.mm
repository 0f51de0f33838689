// Lowerings of the reduction family. MPSGraph reductions keep the reduced dims (size 1);
// LowerCtx::conform reshapes every result to the node's declared shape, so keep_dims needs no
// separate handling. The reduced axes come from the node's typed attributes
// (core/ops/reduction_attrs.h) and are checked against the declared output shape.
#include <algorithm>

#include "backends/metal/metal_internal.h"
#include "core/ops/reduction_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;


NSArray<NSNumber*>* ns_axes(const std::vector<int64_t>& axes) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:axes.size()];
  for (int64_t x : axes) [a addObject:@(x)];
  return a;
}

Shape reduced_shape(const Shape& xs, const std::vector<int64_t>& axes, bool keep) {
  Shape r;
  for (int64_t i = 0; i < int64_t(xs.size()); ++i) {
    bool red = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!red) r.push_back(xs[size_t(i)]);
    else if (keep) r.push_back(1);
  }
  return r;
}

// The reduced axes (sorted, unique, non-negative: inference normalised them), checked against
// the declared output shape.
std::vector<int64_t> reduce_axes(LowerCtx& c) {
  const ops::ReductionAttrs& a = typed_attrs<ops::ReductionAttrs>(c.node);
  const Shape& xs = c.in_types.at(0).shape;
  if (reduced_shape(xs, a.axes, a.keep_dims) != c.out().shape)
    c.fail(ErrorKind::Runtime, "internal error: reducing " + shape_str(xs) + " over the node's axes does not give its "
                               "output shape " + shape_str(c.out().shape));
  return a.axes;
}

// A reduction computed in the output dtype (sum of int32 into int64, mean of ints into float).
T input_as_output(LowerCtx& c) { return c.convert(c.in[0], c.in_dtype(0), c.out().dtype); }

// MPSGraph's reductions are only known to work on int32, int64 and float16/32 (PyTorch's
// ReduceOps.mm casts everything else first), and the CPU accumulates float16/bfloat16 in
// float32: so bool and the 8/16-bit integers reduce as int32, uint32 as int32 too (its bits for
// sums and products, which wrap the same; an order-preserving key for maxima and minima) and
// the half types as float32 where they accumulate; narrow_back returns to dtype t.
enum class Acc { Sum, Extreme };
DType wide_dtype(DType t, Acc kind) {
  switch (t) {
    case DType::Bool: case DType::Int8: case DType::Int16: case DType::UInt8: case DType::UInt16: case DType::UInt32:
      return DType::Int32;
    case DType::Float16: case DType::BFloat16:
      return kind == Acc::Sum ? DType::Float32 : t;
    default:
      return t;
  }
}
T uint32_key(LowerCtx& c, T x) {  // x ^ 2**31 as int32 bits: the unsigned order as a signed one
  return c.uint32_bits_to_int32([c.g bitwiseXORWithPrimaryTensor:x secondaryTensor:c.k_int(int64_t(1) << 31, DType::UInt32)
                                                             name:nil]);
}
T widen(LowerCtx& c, T x, DType t, Acc kind) {
  const DType w = wide_dtype(t, kind);
  if (w == t) return x;
  if (t == DType::UInt32) return kind == Acc::Sum ? c.uint32_bits_to_int32(x) : uint32_key(c, x);
  return c.raw_cast(x, w);  // exact: bool as 0/1, narrow integers in range, half types widen
}
T narrow_back(LowerCtx& c, T r, DType t, Acc kind) {
  const DType w = wide_dtype(t, kind);
  if (w == t) return r;
  if (t == DType::UInt32) {
    T u = c.int32_bits_to_uint32(r);
    return kind == Acc::Sum ? u : [c.g bitwiseXORWithPrimaryTensor:u secondaryTensor:c.k_int(int64_t(1) << 31, DType::UInt32)
                                                              name:nil];
  }
  if (t == DType::Bool) return c.ne(r, c.k_int(0, w));
  if (is_float_dtype(t)) return c.raw_cast(r, t);
  return kind == Acc::Sum ? c.wrap_narrow(r, DType::Int32, t) : c.raw_cast(r, t);  // sums wrap; extremes fit
}

void simple(const char* name, Acc kind, T (*reduce)(LowerCtx&, T, NSArray<NSNumber*>*, DType)) {
  register_lowering(name, [reduce, kind](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    const DType t = c.out().dtype;
    T x = input_as_output(c);
    if (axes.empty()) return std::vector<T>{x};
    T r = reduce(c, widen(c, x, t, kind), ns_axes(axes), wide_dtype(t, kind));
    return std::vector<T>{narrow_back(c, r, t, kind)};
  });
}

T reduce_sum(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) { return [c.g reductionSumWithTensor:x axes:axes name:nil]; }
T reduce_prod(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) {
  return [c.g reductionProductWithTensor:x axes:axes name:nil];
}
// x is widened already (int32, int64 or a float dtype).
T reduce_max(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType t) {
  if (is_float_dtype(t)) return [c.g reductionMaximumPropagateNaNWithTensor:x axes:axes name:nil];
  return [c.g reductionMaximumWithTensor:x axes:axes name:nil];
}
T reduce_min(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType t) {
  if (is_float_dtype(t)) return [c.g reductionMinimumPropagateNaNWithTensor:x axes:axes name:nil];
  return [c.g reductionMinimumWithTensor:x axes:axes name:nil];
}
T reduce_mean(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) { return [c.g meanOfTensor:x axes:axes name:nil]; }

// First index of the extreme value along `axis`, NaN counting as the extreme (numpy's
// argmax/argmin), whatever tie rule MPSGraph's own arg-reductions follow.
T arg_extreme(LowerCtx& c, T x, DType t, const Shape& shape, int64_t axis, bool is_max) {
  NSArray<NSNumber*>* ax = @[ @(axis) ];
  T m = is_max ? reduce_max(c, x, ax, t) : reduce_min(c, x, ax, t);
  T hit = c.eq(x, m);
  if (is_float_dtype(t)) hit = c.sel(c.isnan(m), c.isnan(x), hit);
  T idx = [c.g coordinateAlongAxis:axis withShape:mps_shape(shape) name:nil];  // int32
  idx = c.raw_cast(idx, DType::Int32);
  T none = c.k_int(shape.empty() ? 1 : shape[size_t(axis)], DType::Int32);
  return [c.g reductionMinimumWithTensor:c.sel(hit, idx, none) axes:ax name:nil];
}

void arg_reduction(const char* name, bool is_max) {
  register_lowering(name, [is_max](LowerCtx& c) {
    const int64_t axis = typed_attrs<ops::ArgReductionAttrs>(c.node).axis;  // inference normalised it
    DType t = c.in_dtype(0);
    const Shape& xs = c.in_types[0].shape;
    T x = c.in[0];
    if (xs.empty()) return std::vector<T>{c.fill(0, c.out())};
    Shape keep = reduced_shape(xs, {axis}, true), drop = reduced_shape(xs, {axis}, false);
    if (axis >= int64_t(xs.size()) || (c.out().shape != keep && c.out().shape != drop))
      c.fail(ErrorKind::Runtime, "internal error: axis " + std::to_string(axis) + " of " + shape_str(xs) +
                                     " does not give the output shape " + shape_str(c.out().shape));
    x = widen(c, x, t, Acc::Extreme);  // the same keys as the extremes: the order is kept exactly
    return std::vector<T>{arg_extreme(c, x, wide_dtype(t, Acc::Extreme), xs, axis, is_max)};
  });
}

}  // namespace

void register_reduction_lowerings() {
  simple("reduction_sum", Acc::Sum, reduce_sum);
  simple("reduction_product", Acc::Sum, reduce_prod);
  simple("reduction_maximum", Acc::Extreme, reduce_max);
  simple("reduction_minimum", Acc::Extreme, reduce_min);
  simple("mean", Acc::Sum, reduce_mean);

  // all / any: the minimum / maximum of (x != 0) as int32, not reductionAnd/Or on bool (a
  // dtype PyTorch never reduces on MPSGraph).
  auto logical = [](bool all) {
    return [all](LowerCtx& c) {
      std::vector<int64_t> axes = reduce_axes(c);
      T x = c.convert(c.in[0], c.in_dtype(0), DType::Bool);
      if (axes.empty()) return std::vector<T>{x};
      T r = all ? reduce_min(c, c.raw_cast(x, DType::Int32), ns_axes(axes), DType::Int32)
                : reduce_max(c, c.raw_cast(x, DType::Int32), ns_axes(axes), DType::Int32);
      return std::vector<T>{c.ne(r, c.k_int(0, DType::Int32))};
    };
  };
  register_lowering("reduction_and", logical(true));
  register_lowering("reduction_or", logical(false));

  // variance: the population variance (ddof 0), as MPSGraph's; float32 for the half types.
  register_lowering("variance", [](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    DType t = c.out().dtype;
    T x = input_as_output(c);
    if (axes.empty()) return std::vector<T>{c.mul(x, c.k(0, t))};  // variance of single elements
    T v = [c.g varianceOfTensor:widen(c, x, t, Acc::Sum) axes:ns_axes(axes) name:nil];
    return std::vector<T>{narrow_back(c, v, t, Acc::Sum)};
  });

  // logsumexp = m + log(sum(exp(x - m))), m the (finite) maximum; in float32 for half types.
  register_lowering("logsumexp", [](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    DType t = c.out().dtype;
    T x = c.raw_cast(input_as_output(c), DType::Float32);
    if (axes.empty()) return std::vector<T>{c.raw_cast(x, t)};
    NSArray<NSNumber*>* ax = ns_axes(axes);
    T m = [c.g reductionMaximumWithTensor:x axes:ax name:nil];
    T ms = c.sel([c.g isFiniteWithTensor:m name:nil], m, c.k(0, DType::Float32));
    T s = [c.g reductionSumWithTensor:[c.g exponentWithTensor:c.sub(x, ms) name:nil] axes:ax name:nil];
    T r = c.add([c.g logarithmWithTensor:s name:nil], ms);
    // NaN anywhere gives NaN (reductionMaximum may skip NaN; the sum keeps it)
    return std::vector<T>{c.raw_cast(r, t)};
  });

  arg_reduction("reduction_arg_maximum", true);
  arg_reduction("reduction_arg_minimum", false);
}

}  // namespace mg::metal
