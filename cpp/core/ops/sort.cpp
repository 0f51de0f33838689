// Sort family (sort, arg_sort, top_k, bottom_k) and cumulative family (cumulative_sum,
// cumulative_product, cumulative_minimum, cumulative_maximum), with MPSGraph's names and
// attributes. Orderings are total and stable: equal keys keep their index order (for
// descending too, as torch.sort(stable=True, descending=True)), NaN sorts above +inf (last
// ascending, first descending), so top_k(x, k) is the first k of a descending sort and
// bottom_k(x, k) the first k of an ascending one.
//
// Gradients scatter dy back along the axis with the public scatter_along_axis_with_data (onto
// zeros_like(x), so unknown dims work); its gradient is gather_along_axis, so second order works.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/sort_attrs.h"

namespace mg::ops {

namespace {

// ---- typed attributes (sort_attrs.h) ----

SortAttrs decode_sort(const Attrs& a) { return {get_attr<int64_t>(a, "axis"), get_attr<bool>(a, "descending")}; }
TopKAttrs decode_top_k(const Attrs& a) { return {get_attr<int64_t>(a, "axis"), get_attr<int64_t>(a, "k")}; }
CumulativeAttrs decode_cumulative(const Attrs& a) {
  return {get_attr<int64_t>(a, "axis"), get_attr<bool>(a, "exclusive"), get_attr<bool>(a, "reverse")};
}

// ---- inference ----

// The normalised axis of input 0 (stored back); rank 0 is refused: there is no axis to sort along.
int64_t sort_axis(InferCtx& c) {
  int64_t rank = int64_t(c.in[0].shape.size());
  if (rank == 0)
    c.fail(ErrorKind::Index, "needs an input of rank >= 1 (there is no axis to work along), got " + type_str(c.in[0]));
  int64_t axis = c.axis(c.i("axis"), rank);
  c.attrs["axis"] = axis;
  int64_t n = c.in[0].shape[size_t(axis)];
  if (n > int64_t(std::numeric_limits<int32_t>::max()))
    c.fail(ErrorKind::Value, "axis " + std::to_string(axis) + " of " + type_str(c.in[0]) +
                                 " is too long for int32 indices");
  return axis;
}

std::vector<TensorType> infer_sort(InferCtx& c) {
  require_class(c, 0, kAny);
  sort_axis(c);
  return {c.in[0]};
}

std::vector<TensorType> infer_arg_sort(InferCtx& c) {
  require_class(c, 0, kAny);
  sort_axis(c);
  return {{DType::Int32, c.in[0].shape}};
}

std::vector<TensorType> infer_top_k(InferCtx& c) {
  require_class(c, 0, kAny);
  int64_t axis = sort_axis(c);
  int64_t k = c.i("k");
  int64_t n = c.in[0].shape[size_t(axis)];
  if (k < 0 || (n >= 0 && k > n))
    c.fail(ErrorKind::Value, "k = " + std::to_string(k) + " is out of range [0, " +
                                 (n >= 0 ? std::to_string(n) : std::string("dim")) + "] for axis " +
                                 std::to_string(axis) + " of " + type_str(c.in[0]));
  Shape s = c.in[0].shape;
  s[size_t(axis)] = k;
  return {{c.in[0].dtype, s}, {DType::Int32, s}};
}

std::vector<TensorType> infer_cumulative(InferCtx& c) {
  require_class(c, 0, kNumeric);
  sort_axis(c);
  return {c.in[0]};
}

// ---- gradients ----

// Zeros of x's shape with upd added along `axis` at idx (every index in [0, x.shape[axis])).
ValueRef scatter_add_along(Graph& g, ValueRef upd, ValueRef idx, ValueRef x, int64_t axis) {
  return call(g, "scatter_along_axis_with_data", {zeros_like(g, x), upd, idx},
              {{"axis", axis}, {"mode", std::string("add")}});
}

// sort(x) = x gathered at arg_sort(x): dx scatters dy back through the same permutation.
std::vector<ValueRef> grad_sort(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  const SortAttrs& a = typed_attrs<SortAttrs>(c.node);
  ValueRef perm = call(c.g, "arg_sort", {c.x(0)}, {{"axis", a.axis}, {"descending", a.descending}});
  return {scatter_add_along(c.g, c.dy[0], perm, c.x(0), a.axis)};
}

// values = x gathered at the returned indices.
std::vector<ValueRef> grad_top_k(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  return {scatter_add_along(c.g, c.dy[0], c.y(1), c.x(0), typed_attrs<TopKAttrs>(c.node).axis)};
}

ValueRef scan(Graph& g, const char* op, ValueRef x, const CumulativeAttrs& a, bool exclusive, bool reverse) {
  return call(g, op, {x}, {{"axis", a.axis}, {"exclusive", exclusive}, {"reverse", reverse}});
}

// dx_k = sum of dy_i over the outputs i that include x_k: the scan of dy the other way.
std::vector<ValueRef> grad_cumulative_sum(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  const CumulativeAttrs& a = typed_attrs<CumulativeAttrs>(c.node);
  return {scan(c.g, "cumulative_sum", c.dy[0], a, a.exclusive, !a.reverse)};
}

// dx_k = sum over outputs i including x_k of dy_i * (product of the other factors of y_i),
// without dividing by zero (in scan order; z is the first zero along the line):
//   k before z: sum_i dy_i y_i / x_k  (the reverse scan of dy*y, divided by x_k != 0);
//   k = z:      (product of x before z) * sum_i dy_i * (product of x after z up to i);
//   k after z:  0 (every y_i including x_k also includes x_z = 0).
// Exact first derivatives with zeros; second derivatives are exact where x has no zero (at an
// exact zero the cross terms between the zero and later elements are left out, as the k > z
// branch is the constant 0).
std::vector<ValueRef> grad_cumulative_product(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  const CumulativeAttrs& a = typed_attrs<CumulativeAttrs>(c.node);
  ValueRef x = c.x(0), y = c.y(0), dy = c.dy[0];
  DType dt = g.type(x).dtype;
  ValueRef zero = scalar_like(g, 0.0, x), one = scalar_like(g, 1.0, x);
  ValueRef is_zero = call(g, "equal", {x, zero});
  ValueRef zeros_so_far = scan(g, "cumulative_sum", call(g, "cast", {is_zero}, {{"dtype", dt}}), a, false, a.reverse);
  ValueRef before = call(g, "equal", {zeros_so_far, zero});
  ValueRef first = call(g, "logical_and", {is_zero, call(g, "equal", {zeros_so_far, one})});
  ValueRef x_safe = call(g, "select", {is_zero, one, x});
  ValueRef dyy = scan(g, "cumulative_sum", call(g, "multiplication", {dy, y}), a, a.exclusive, !a.reverse);
  ValueRef part_before = call(g, "division", {dyy, x_safe});
  ValueRef head = scan(g, "cumulative_product", x, a, true, a.reverse);  // product before k
  ValueRef tail_x = call(g, "select", {call(g, "logical_or", {before, first}), one, x});
  ValueRef tail = scan(g, "cumulative_product", tail_x, a, a.exclusive, a.reverse);  // after z up to i
  ValueRef from_z = call(g, "select", {before, zero, call(g, "multiplication", {dy, tail})});
  ValueRef part_z = call(g, "multiplication", {head, scan(g, "cumulative_sum", from_z, a, a.exclusive, !a.reverse)});
  return {call(g, "select", {before, part_before, call(g, "select", {first, part_z, zero})})};
}

// dy_i goes to the position of the running extremum of y_i: the earliest element in scan order
// among equal extremes (the lowest index forward, the highest with reverse), or the first NaN.
std::vector<ValueRef> grad_cumulative_extremum(GradCtx& c, bool is_max) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  const CumulativeAttrs& a = typed_attrs<CumulativeAttrs>(c.node);
  const char* op = is_max ? "cumulative_maximum" : "cumulative_minimum";
  ValueRef x = c.x(0);
  ValueRef before = scan(g, op, x, a, true, a.reverse);  // extremum of the elements before, in scan order
  ValueRef beats = call(g, is_max ? "greater_than" : "less_than", {x, before});
  ValueRef nan_first = call(g, "logical_and", {call(g, "isnan", {x}), call(g, "logical_not", {call(g, "isnan", {before})})});
  ValueRef ones = call(g, "cast", {ones_like(g, x)}, {{"dtype", DType::Int32}});
  ValueRef pos = scan(g, "cumulative_sum", ones, a, true, false);        // index along the axis
  ValueRef scan_pos = scan(g, "cumulative_sum", ones, a, true, a.reverse);  // 0 where the scan starts
  ValueRef starts = call(g, "equal", {scan_pos, scalar_like(g, 0.0, scan_pos)});
  ValueRef fresh = call(g, "logical_or", {call(g, "logical_or", {beats, nan_first}), starts});
  // The latest fresh extremum in scan order: the largest such index forward, the smallest with
  // reverse.
  double none = a.reverse ? double(std::numeric_limits<int32_t>::max()) : -1.0;
  ValueRef cand = call(g, "select", {fresh, pos, scalar_like(g, none, pos)});
  ValueRef at = scan(g, a.reverse ? "cumulative_minimum" : "cumulative_maximum", cand, a, a.exclusive, a.reverse);
  ValueRef dy = c.dy[0];
  if (a.exclusive) {
    // An exclusive scan's first output depends on nothing, and its `at` is the scan's identity,
    // out of range (scatters check indices): send a zero to index 0 instead.
    at = call(g, "select", {starts, scalar_like(g, 0.0, at), at});
    dy = call(g, "select", {starts, zeros_like(g, dy), dy});
  }
  return {scatter_add_along(g, dy, at, x, a.axis)};
}

// ---- registration ----

const char* const kOrderDoc =
    " The order is stable and total: equal elements keep their index order (descending too, as "
    "torch.sort(stable=True, descending=True)); -0.0 and 0.0 are equal; NaN sorts above +inf (last ascending, "
    "first descending; numpy puts NaN last ascending). Rank-0 inputs are refused.";

AttrSpec axis_attr(int64_t def, const char* doc) { return attr("axis", AttrKind::Int, def, doc); }

void sort_op(const char* name, std::string doc, InferFn infer, GradFn grad, std::vector<std::string> aliases) {
  OpDef d{.name = name,
          .doc = std::move(doc),
          .inputs = {{"x"}},
          .attrs = {axis_attr(-1, "the axis to sort along"), attr("descending", AttrKind::Bool, false, "largest first")},
          .decode = attr_decoder(decode_sort),
          .infer = std::move(infer),
          .grad = std::move(grad),
          .aliases = std::move(aliases),
          .family = "sort"};
  if (!d.grad) d.differentiable = Differentiable::No;
  register_op(std::move(d));
}

void top_k_op(const char* name, const char* doc) {
  register_op({.name = name,
               .doc = doc,
               .inputs = {{"x"}},
               .attrs = {attr("k", AttrKind::Int, AttrNone{}, "number of elements to keep: 0 <= k <= x.shape[axis]"),
                         axis_attr(-1, "the axis to select along")},
               .decode = attr_decoder(decode_top_k),
               .infer = infer_top_k,
               .grad = grad_top_k,
               .multi_output = true,
               .family = "sort"});
}

void cumulative_op(const char* name, GradFn grad, const char* doc) {
  OpDef d{.name = name,
          .doc = std::string(doc) +
                 " Along `axis` (default 0, as TensorFlow's scans; MPSGraph itself takes the axis explicitly); "
                 "`exclusive` leaves out the element itself (the first output is the identity), `reverse` scans "
                 "from the end. Rank-0 inputs are refused.",
          .inputs = {{"x"}},
          .attrs = {axis_attr(0, "the axis to scan along"),
                    attr("exclusive", AttrKind::Bool, false, "leave each element out of its own output"),
                    attr("reverse", AttrKind::Bool, false, "scan from the last element to the first")},
          .decode = attr_decoder(decode_cumulative),
          .infer = infer_cumulative,
          .grad = std::move(grad),
          .family = "cumulative"};
  register_op(std::move(d));
}

}  // namespace

void register_sort_ops() {
  sort_op("sort", std::string("x sorted along `axis` (ascending, or descending).") + kOrderDoc, infer_sort,
          grad_sort, {});
  sort_op("arg_sort", std::string("The int32 indices that sort x along `axis` (as MPSGraph's argSort).") + kOrderDoc,
          infer_arg_sort, nullptr, {"argsort"});
  top_k_op("top_k",
           "The k largest elements along `axis`, largest first, and their int32 indices (values, indices): the first "
           "k of a stable descending sort, so ties keep the lower index first and NaN counts as the largest. The "
           "gradient of values scatters dy back to the indices.");
  top_k_op("bottom_k",
           "The k smallest elements along `axis`, smallest first, and their int32 indices (values, indices): the "
           "first k of a stable ascending sort, so ties keep the lower index first and NaN counts as the largest. "
           "The gradient of values scatters dy back to the indices.");

  cumulative_op("cumulative_sum", grad_cumulative_sum,
                "Running sum (the exclusive identity is 0). Floats accumulate in float64 on the CPU (float32 on "
                "Metal) and round once per output; integers wrap around in their dtype, as numpy.");
  cumulative_op("cumulative_product", grad_cumulative_product,
                "Running product (the exclusive identity is 1). Floats accumulate in float64 on the CPU (float32 on "
                "Metal) and round once per output; integers wrap around in their dtype. The gradient is exact with "
                "zeros in x (no division by x at or after the first zero).");
  cumulative_op("cumulative_minimum", [](GradCtx& c) { return grad_cumulative_extremum(c, false); },
                "Running minimum; NaN propagates (numpy's minimum.accumulate). The exclusive identity is +inf for "
                "floats and the dtype's largest value for integers (MPSGraph's 'largest value of the data type'). "
                "The gradient goes to the running minimum's position, the earliest in scan order on ties.");
  cumulative_op("cumulative_maximum", [](GradCtx& c) { return grad_cumulative_extremum(c, true); },
                "Running maximum; NaN propagates (numpy's maximum.accumulate). The exclusive identity is -inf for "
                "floats and the dtype's lowest value for integers (MPSGraph's 'lowest value of the data type'). "
                "The gradient goes to the running maximum's position, the earliest in scan order on ties.");
}

}  // namespace mg::ops
