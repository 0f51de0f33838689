// Lowerings of the reduction family. MPSGraph reductions keep the reduced dims (size 1);
// LowerCtx::conform reshapes every result to the node's declared shape, so keep_dims needs no
// separate handling. The reduced axes come from the node's attributes and are checked against
// the declared output shape, so a schema this file misreads raises instead of computing
// something else.
#include <algorithm>
#include <limits>

#include "backends/metal/metal_internal.h"

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

// Normalised, sorted, unique reduced axes, consistent with the declared output shape.
std::vector<int64_t> reduce_axes(LowerCtx& c) {
  const Shape& xs = c.in_types.at(0).shape;
  const Shape& os = c.out().shape;
  const int64_t rank = int64_t(xs.size());
  bool found = false;
  std::vector<int64_t> given = c.attr_ints({"axes"}, &found);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < rank; ++i) all.push_back(i);
  std::vector<std::vector<int64_t>> candidates;
  if (found) candidates.push_back(given);
  if (!found || given.empty()) candidates.push_back(all);  // None (or an empty list meaning "all")
  for (auto axes : candidates) {
    bool ok = true;
    for (auto& a : axes) {
      if (a < 0) a += rank;
      ok = ok && a >= 0 && a < rank;
    }
    if (!ok) continue;
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    if (reduced_shape(xs, axes, true) == os || reduced_shape(xs, axes, false) == os) return axes;
  }
  c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile the reduction's axes attribute with its output shape " +
                                        shape_str(os) + " from input " + shape_str(xs));
}

// A reduction computed in the output dtype (sum of int32 into int64, mean of ints into float).
T input_as_output(LowerCtx& c) { return c.convert(c.in[0], c.in_dtype(0), c.out().dtype); }

void simple(const char* name, T (*reduce)(LowerCtx&, T, NSArray<NSNumber*>*, DType)) {
  register_lowering(name, [reduce](LowerCtx& c) {
    c.only_attrs({"axes", "keep_dims"});
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
    c.only_attrs({"axis", "keep_dims", "dtype"});
    DType t = c.in_dtype(0);
    Shape xs = c.in_types[0].shape;
    T x = c.in[0];
    if (xs.empty()) return std::vector<T>{c.fill(0, c.out())};
    int64_t axis = 0;
    bool found = false;
    std::vector<int64_t> given = c.attr_ints({"axis", "axes"}, &found);
    if (!found || given.empty()) {  // None: the index into the flattened tensor
      Shape flat{num_elements(xs)};
      x = c.reshape(x, flat);
      xs = flat;
    } else {
      if (given.size() != 1) c.fail(ErrorKind::NotImplemented, "the metal lowering takes one axis");
      axis = given[0] < 0 ? given[0] + int64_t(xs.size()) : given[0];
      if (axis < 0 || axis >= int64_t(xs.size())) c.fail(ErrorKind::Value, "axis out of range");
      Shape keep = reduced_shape(xs, {axis}, true), drop = reduced_shape(xs, {axis}, false);
      if (c.out().shape != keep && c.out().shape != drop)
        c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile the axis with the output shape " +
                                              shape_str(c.out().shape));
    }
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
    c.only_attrs({"axes", "keep_dims"});
    std::vector<int64_t> axes = reduce_axes(c);
    T x = c.convert(c.in[0], c.in_dtype(0), DType::Bool);
    return std::vector<T>{axes.empty() ? x : reduce_and(c, x, ns_axes(axes), DType::Bool)};
  });
  register_lowering("reduction_or", [](LowerCtx& c) {
    c.only_attrs({"axes", "keep_dims"});
    std::vector<int64_t> axes = reduce_axes(c);
    T x = c.convert(c.in[0], c.in_dtype(0), DType::Bool);
    return std::vector<T>{axes.empty() ? x : reduce_or(c, x, ns_axes(axes), DType::Bool)};
  });

  // variance: MPSGraph's is the population variance; ddof rescales it by n / (n - ddof).
  register_lowering("variance", [](LowerCtx& c) {
    c.only_attrs({"axes", "keep_dims", "ddof"});
    std::vector<int64_t> axes = reduce_axes(c);
    DType t = c.out().dtype;
    T x = input_as_output(c);
    const double ddof = c.attr_float({"ddof"}, 0.0);  // the op has none today (population variance)
    if (axes.empty()) return std::vector<T>{c.mul(x, c.k(0, t))};  // variance of single elements
    T v = [c.g varianceOfTensor:x axes:ns_axes(axes) name:nil];
    if (ddof != 0) {
      double n = 1;
      for (int64_t a : axes) n *= double(c.in_types[0].shape[size_t(a)]);
      double scale = n - ddof > 0 ? n / (n - ddof) : std::numeric_limits<double>::infinity();
      v = c.mul(v, c.k(scale, t));
    }
    return std::vector<T>{v};
  });

  // logsumexp = m + log(sum(exp(x - m))), m the (finite) maximum; in float32 for half types.
  register_lowering("logsumexp", [](LowerCtx& c) {
    c.only_attrs({"axes", "keep_dims"});
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
