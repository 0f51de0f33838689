// Reduction family: sum, product, maximum, minimum, mean, variance, and, or, logsumexp,
// arg maximum / arg minimum. MPSGraph keeps the reduced axes by default (keep_dims=True);
// the numpy-named sugar (sum, mean, ...) drops them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/reduction_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;

// ---- typed attributes (reduction_attrs.h) ----

ReductionAttrs decode_reduction_attrs(const Attrs& a) {
  return {get_attr<Ints>(a, "axes"), get_attr<bool>(a, "keep_dims")};  // infer resolved the axes
}

ArgReductionAttrs decode_arg_reduction_attrs(const Attrs& a) {
  return {get_attr<int64_t>(a, "axis"), get_attr<bool>(a, "keep_dims"), get_attr<DType>(a, "dtype")};
}

// Normalised axes of a reduction node (infer stored them back, sorted and non-negative).
const Ints& node_axes(const Node& n) { return typed_attrs<ReductionAttrs>(n).axes; }

// Output shape of reducing `s` over sorted `axes`.
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keep) {
  Shape r;
  size_t k = 0;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) {
    bool red = k < axes.size() && axes[k] == d;
    if (red) {
      ++k;
      if (keep) r.push_back(1);
    } else {
      r.push_back(s[size_t(d)]);
    }
  }
  return r;
}

std::string axes_str(const std::vector<int64_t>& axes) {
  std::string r = "(";
  for (size_t i = 0; i < axes.size(); ++i) r += (i ? ", " : "") + std::to_string(axes[i]);
  if (axes.size() == 1) r += ",";
  return r + ")";
}

// Resolves the optional `axes` attribute (absent = all axes), stores it back normalised.
std::vector<int64_t> resolve_axes(InferCtx& c) {
  int64_t rank = int64_t(c.in[0].shape.size());
  std::vector<int64_t> axes;
  if (c.has("axes")) {
    axes = c.axes(c.ints("axes"), rank);
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  c.attrs["axes"] = axes;
  return axes;
}

void check_nonempty(InferCtx& c, const std::vector<int64_t>& axes) {
  for (auto a : axes)
    if (c.in[0].shape[size_t(a)] == 0)
      c.fail(ErrorKind::Value, "zero-size reduction has no identity: input " + type_str(c.in[0]) + " reduced over axes " +
                                   axes_str(axes));
}

// ---- gradient helpers ----

// dy (or y) of a reduction with the reduced axes restored as size-1 dims.
ValueRef restore_axes(GradCtx& c, ValueRef v, const std::vector<int64_t>& axes) {
  bool keep = typed_attrs<ReductionAttrs>(c.node).keep_dims;
  if (keep || axes.empty()) return v;
  return call(c.g, "expand_dims", {v}, {{"axes", axes}});
}

// Number of reduced elements as a tensor of x's dtype, broadcastable against x (keep dims).
ValueRef reduced_count(GradCtx& c, const std::vector<int64_t>& axes) {
  ValueRef x = c.x(0);
  const Shape& s = c.g.type(x).shape;
  bool known = true;
  double n = 1;
  for (auto a : axes) {
    if (s[size_t(a)] < 0) known = false;
    else n *= double(s[size_t(a)]);
  }
  if (known) return scalar_like(c.g, n, x);
  return call(c.g, "reduction_sum", {ones_like(c.g, x)}, {{"axes", axes}, {"keep_dims", true}});
}

std::vector<ValueRef> grad_sum(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  auto axes = node_axes(c.node);
  return {broadcast_like(c.g, restore_axes(c, c.dy[0], axes), c.x(0))};
}

std::vector<ValueRef> grad_mean(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  auto axes = node_axes(c.node);
  ValueRef d = restore_axes(c, c.dy[0], axes);
  d = call(c.g, "division", {d, reduced_count(c, axes)});
  return {broadcast_like(c.g, d, c.x(0))};
}

// Zero-safe: d prod / d x_i = product of the others. With z zeros among the reduced
// elements: z == 0 -> p / x_i; z == 1 -> (x_i == 0 ? product of the nonzero : 0); z > 1 -> 0.
std::vector<ValueRef> grad_product(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  auto axes = node_axes(c.node);
  ValueRef x = c.x(0);
  DType dt = g.type(x).dtype;
  ValueRef zero = scalar_like(g, 0.0, x), one = scalar_like(g, 1.0, x);
  ValueRef is_zero = call(g, "equal", {x, zero});
  ValueRef x_safe = call(g, "select", {is_zero, one, x});
  Attrs keep{{"axes", axes}, {"keep_dims", true}};
  ValueRef p_nz = call(g, "reduction_product", {x_safe}, keep);
  ValueRef zcount = call(g, "reduction_sum", {call(g, "cast", {is_zero}, {{"dtype", dt}})}, keep);
  ValueRef none_zero = call(g, "equal", {zcount, zero});
  ValueRef one_zero = call(g, "equal", {zcount, one});
  ValueRef others_nz = call(g, "division", {p_nz, x_safe});  // product of the others when x_i != 0
  ValueRef when_nonzero = call(g, "select", {none_zero, others_nz, zero});
  ValueRef when_zero = call(g, "select", {one_zero, p_nz, zero});
  ValueRef local = call(g, "select", {is_zero, when_zero, when_nonzero});
  ValueRef d = restore_axes(c, c.dy[0], axes);
  return {call(g, "multiplication", {broadcast_like(g, d, x), local})};
}

// dy goes to the positions equal to the extremum, split evenly between ties (as TF/JAX).
std::vector<ValueRef> grad_extremum(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  auto axes = node_axes(c.node);
  ValueRef x = c.x(0);
  DType dt = g.type(x).dtype;
  ValueRef y = restore_axes(c, c.y(0), axes);
  ValueRef mask = call(g, "cast", {call(g, "equal", {x, y})}, {{"dtype", dt}});
  ValueRef count = call(g, "reduction_sum", {mask}, {{"axes", axes}, {"keep_dims", true}});
  ValueRef d = call(g, "division", {restore_axes(c, c.dy[0], axes), count});
  return {call(g, "multiplication", {mask, d})};
}

// var = mean((x - m)^2)  ->  dx = dy * 2 (x - m) / N
std::vector<ValueRef> grad_variance(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  auto axes = node_axes(c.node);
  ValueRef x = c.x(0);
  ValueRef m = call(g, "mean", {x}, {{"axes", axes}, {"keep_dims", true}});
  ValueRef centred = call(g, "subtraction", {x, m});
  ValueRef d = restore_axes(c, c.dy[0], axes);
  d = call(g, "division", {call(g, "multiplication", {d, scalar_like(g, 2.0, x)}), reduced_count(c, axes)});
  return {call(g, "multiplication", {centred, d})};
}

// d logsumexp / dx = exp(x - logsumexp)
std::vector<ValueRef> grad_logsumexp(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  auto axes = node_axes(c.node);
  ValueRef x = c.x(0);
  ValueRef y = restore_axes(c, c.y(0), axes);
  ValueRef sm = call(g, "exponent", {call(g, "subtraction", {x, y})});
  return {call(g, "multiplication", {sm, restore_axes(c, c.dy[0], axes)})};
}

struct ReductionSpec {
  const char* name;
  unsigned accepts;
  bool to_bool;
  bool needs_nonempty;
  std::vector<std::string> aliases;
  GradFn grad;
  const char* doc;
};

// The reductions over `axes`: dtype class `cls`, bool result when to_bool, an error for a
// zero-size reduced axis when nonempty (maximum and minimum have no identity).
std::vector<TensorType> infer_reduction(InferCtx& c, unsigned cls, bool to_bool, bool nonempty) {
  require_class(c, 0, cls);
  auto axes = resolve_axes(c);
  if (nonempty) check_nonempty(c, axes);
  return std::vector<TensorType>{
      {to_bool ? DType::Bool : c.in[0].dtype, reduced_shape(c.in[0].shape, axes, c.b("keep_dims"))}};
}

std::vector<TensorType> infer_arg_reduction(InferCtx& c) {
  require_class(c, 0, kNumeric);
  DType dt = c.dtype("dtype");
  if (dt != DType::Int32 && dt != DType::Int64)
    c.fail(ErrorKind::Type, std::string("dtype must be int32 or int64, got ") + dtype_name(dt));
  int64_t rank = int64_t(c.in[0].shape.size());
  if (rank == 0) c.fail(ErrorKind::Index, "needs an input of rank >= 1, got " + type_str(c.in[0]));
  int64_t axis = c.axis(c.i("axis"), rank);
  c.attrs["axis"] = axis;
  std::vector<int64_t> axes{axis};
  check_nonempty(c, axes);
  return std::vector<TensorType>{{dt, reduced_shape(c.in[0].shape, axes, c.b("keep_dims"))}};
}

// The batch axis kept: each sample reduced alone.
bool per_sample_reduction(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched) {
  if (!per_sample_first_input(n, in, batched)) return false;
  const ReductionAttrs& a = typed_attrs<ReductionAttrs>(n);
  return std::find(a.axes.begin(), a.axes.end(), int64_t(0)) == a.axes.end();
}

void reduction(const ReductionSpec& s) {
  unsigned cls = s.accepts;
  bool to_bool = s.to_bool, nonempty = s.needs_nonempty;
  OpDef d{.name = s.name,
          .doc = std::string(s.doc) +
                 " Reduces over `axes` (all axes when omitted; negative axes count from the end); keep_dims keeps the "
                 "reduced axes as size 1, as MPSGraph does by default.",
          .inputs = {{"x"}},
          .attrs = {optional_attr("axes", AttrKind::Axes, "axes to reduce; all when omitted"),
                    attr("keep_dims", AttrKind::Bool, true, "keep reduced axes as size-1 dims")},
          .decode = attr_decoder(decode_reduction_attrs),
          .infer = [cls, to_bool, nonempty](InferCtx& c) { return infer_reduction(c, cls, to_bool, nonempty); },
          .grad = s.grad,
          .aliases = s.aliases,
          .family = "reduction",
          .per_sample = per_sample_reduction};
  if (!s.grad) d.differentiable = Differentiable::No;
  register_op(std::move(d));
}

void arg_reduction(const char* name, std::vector<std::string> aliases, const char* doc) {
  register_op({.name = name,
               .doc = doc,
               .inputs = {{"x"}},
               .attrs = {attr("axis", AttrKind::Int, AttrNone{}, "the axis to reduce"),
                         attr("keep_dims", AttrKind::Bool, true, "keep the reduced axis as a size-1 dim"),
                         attr("dtype", AttrKind::DType, DType::Int32, "index dtype: int32 or int64")},
               .decode = attr_decoder(decode_arg_reduction_attrs),
               .infer = infer_arg_reduction,
               .differentiable = Differentiable::No,
               .aliases = std::move(aliases),
               .family = "reduction"});
}

}  // namespace

void register_reduction_ops() {
  const unsigned N = kNumeric, F = kFloat, A = kAny;
  const std::vector<ReductionSpec> specs = {
      {"reduction_sum", N, false, false, {}, grad_sum, "Sum of the elements. Integers wrap around in their dtype."},
      {"reduction_product", N, false, false, {}, grad_product,
       "Product of the elements. Integers wrap around in their dtype."},
      {"reduction_maximum", A, false, true, {}, grad_extremum,
       "Maximum of the elements; NaN propagates (bool: any). Reducing a zero-size axis is an error."},
      {"reduction_minimum", A, false, true, {}, grad_extremum,
       "Minimum of the elements; NaN propagates (bool: all). Reducing a zero-size axis is an error."},
      {"mean", F, false, false, {}, grad_mean, "Arithmetic mean (floating-point inputs; empty gives nan)."},
      {"variance", F, false, false, {}, grad_variance,
       "Population variance (ddof=0, as numpy's var) of floating-point inputs."},
      {"reduction_and", A, true, false, {}, nullptr, "True where all elements are nonzero (empty gives True)."},
      {"reduction_or", A, true, false, {}, nullptr, "True where any element is nonzero (empty gives False)."},
      {"logsumexp", F, false, false, {}, grad_logsumexp,
       "log(sum(exp(x))) computed stably as max + log(sum(exp(x - max))); all -inf (or empty) gives -inf."},
  };
  for (auto& s : specs) reduction(s);
  arg_reduction("reduction_arg_maximum", {"reduction_argmax"},
                "Index of the maximum along `axis` (the first one on ties; a NaN counts as the maximum, the first "
                "NaN wins, as numpy). Reducing a zero-size axis is an error.");
  arg_reduction("reduction_arg_minimum", {"reduction_argmin"},
                "Index of the minimum along `axis` (the first one on ties; a NaN counts as the minimum, the first "
                "NaN wins, as numpy). Reducing a zero-size axis is an error.");
}

}  // namespace mg::ops
