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

void simple(const char* name, T (*reduce)(LowerCtx&, T, NSArray<NSNumber*>*, DType)) {
  register_lowering(name, [reduce](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    T x = input_as_output(c);
    if (axes.empty()) return std::vector<T>{x};
    return std::vector<T>{reduce(c, x, ns_axes(axes), c.out().dtype)};
  });
}

T reduce_sum(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) { return [c.g reductionSumWithTensor:x axes:axes name:nil]; }
T reduce_prod(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) {
  return [c.g reductionProductWithTensor:x axes:axes name:nil];
}
T reduce_max(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType t) {
  if (t == DType::Bool) return c.raw_cast([c.g reductionMaximumWithTensor:c.raw_cast(x, DType::Int8) axes:axes name:nil], t);
  if (is_float_dtype(t)) return [c.g reductionMaximumPropagateNaNWithTensor:x axes:axes name:nil];
  return [c.g reductionMaximumWithTensor:x axes:axes name:nil];
}
T reduce_min(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType t) {
  if (t == DType::Bool) return c.raw_cast([c.g reductionMinimumWithTensor:c.raw_cast(x, DType::Int8) axes:axes name:nil], t);
  if (is_float_dtype(t)) return [c.g reductionMinimumPropagateNaNWithTensor:x axes:axes name:nil];
  return [c.g reductionMinimumWithTensor:x axes:axes name:nil];
}
T reduce_mean(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) { return [c.g meanOfTensor:x axes:axes name:nil]; }
T reduce_and(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) {  // macOS 12.2 (below the 13.0 floor)
  return [c.g reductionAndWithTensor:x axes:axes name:nil];
}
T reduce_or(LowerCtx& c, T x, NSArray<NSNumber*>* axes, DType) {
  return [c.g reductionOrWithTensor:x axes:axes name:nil];
}

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
    if (t == DType::Bool) {
      x = c.raw_cast(x, DType::Int8);
      t = DType::Int8;
    }
    return std::vector<T>{arg_extreme(c, x, t, xs, axis, is_max)};
  });
}

}  // namespace

void register_reduction_lowerings() {
  simple("reduction_sum", reduce_sum);
  simple("reduction_product", reduce_prod);
  simple("reduction_maximum", reduce_max);
  simple("reduction_minimum", reduce_min);
  simple("mean", reduce_mean);

  register_lowering("reduction_and", [](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    T x = c.convert(c.in[0], c.in_dtype(0), DType::Bool);
    return std::vector<T>{axes.empty() ? x : reduce_and(c, x, ns_axes(axes), DType::Bool)};
  });
  register_lowering("reduction_or", [](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    T x = c.convert(c.in[0], c.in_dtype(0), DType::Bool);
    return std::vector<T>{axes.empty() ? x : reduce_or(c, x, ns_axes(axes), DType::Bool)};
  });

  // variance: the population variance (ddof 0), as MPSGraph's.
  register_lowering("variance", [](LowerCtx& c) {
    std::vector<int64_t> axes = reduce_axes(c);
    DType t = c.out().dtype;
    T x = input_as_output(c);
    if (axes.empty()) return std::vector<T>{c.mul(x, c.k(0, t))};  // variance of single elements
    T v = [c.g varianceOfTensor:x axes:ns_axes(axes) name:nil];
    return std::vector<T>{v};
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
