// Gather family: gather, gather_nd, gather_along_axis and their transposes, the scatters,
// each in MPSGraph's two forms: onto zeros of a static `shape` (scatterWithUpdatesTensor:...
// shape:...) and onto a `data` input (scatterWithDataTensor:...).
//
// Addressing (r = rank of the data / result, B = batch_dims):
//   gather / scatter (axis):   out = data[:axis] + indices[B:] + data[axis+1:]; the first B dims
//                              of data and indices are shared (tf.gather's batch_dims).
//   gather_nd / scatter_nd:    indices[..., K] holds K-tuples into data[B:B+K];
//                              out = indices[:-1] + data[B+K:] (tf.gather_nd).
//   along_axis:                indices has data's rank and shape except at axis; out = indices'
//                              shape (numpy take_along_axis / put_along_axis, without broadcasting).
// Indices are integer tensors; a negative index counts from the end (-1 is the last), as in
// MPSGraph. An index out of range is a run-time GraphIndexError on the CPU naming the op and the
// index; MPSGraph does not check them (docs/metal.md).
// Scatter modes (MPSGraphScatterMode): the result starts as data (zeros for the shape forms) and
// every update is combined into it, in row-major order of the updates: 'add', 'sub', 'mul',
// 'div', 'min', 'max' accumulate all of them; with 'set' the last one wins.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/gather_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;
using Types = std::vector<TensorType>;

const char* kModes[] = {"add", "sub", "mul", "div", "min", "max", "set"};

bool dim_ok(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }
bool shape_ok(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!dim_ok(a[i], b[i])) return false;
  return true;
}

ScatterMode parse_mode(const std::string& m) {
  for (int i = 0; i < 7; ++i)
    if (m == kModes[i]) return ScatterMode(i);
  return ScatterMode::Add;
}

// ---- typed attributes (gather_attrs.h) ----

GatherAttrs decode_common(const Attrs& a, IndexKind kind) {
  GatherAttrs r;
  r.kind = kind;
  if (has_attr(a, "axis")) r.axis = get_attr<int64_t>(a, "axis");
  if (has_attr(a, "batch_dims")) r.batch_dims = get_attr<int64_t>(a, "batch_dims");
  if (has_attr(a, "mode")) r.mode = parse_mode(get_attr<std::string>(a, "mode"));
  r.with_data = !has_attr(a, "shape");
  return r;
}
GatherAttrs decode_axis(const Attrs& a) { return decode_common(a, IndexKind::Axis); }
GatherAttrs decode_nd(const Attrs& a) { return decode_common(a, IndexKind::ND); }
GatherAttrs decode_along(const Attrs& a) { return decode_common(a, IndexKind::AlongAxis); }
AttrDecoder decoder(IndexKind k) {
  return attr_decoder(k == IndexKind::Axis ? decode_axis : k == IndexKind::ND ? decode_nd : decode_along);
}

// ---- shapes ----

// Checks indices (input `ii`) against data of shape `data` (`what` names it in messages) for
// `kind`, normalises axis / batch_dims in the attributes, and returns the gathered shape.
Shape gathered_shape(InferCtx& c, IndexKind kind, const Shape& data, size_t ii, const std::string& what) {
  require_class(c, ii, kInt);
  const TensorType& it = c.in[ii];
  const Shape& I = it.shape;
  const int64_t r = int64_t(data.size()), ri = int64_t(I.size());
  const std::string dstr = what + " " + shape_str(data);
  if (kind != IndexKind::ND) {
    if (r == 0) c.fail(ErrorKind::Index, "needs " + what + " of rank >= 1, got a scalar");
    auto ax = normalize_axis(c.i("axis"), r);
    if (!ax) c.fail(ErrorKind::Index, "axis " + std::to_string(c.i("axis")) + " is out of range for rank-" +
                                          std::to_string(r) + " " + dstr);
    c.attrs["axis"] = *ax;
    if (kind == IndexKind::AlongAxis) {
      if (ri != r)
        c.fail(ErrorKind::Value, "indices " + type_str(it) + " must have the rank of " + dstr);
      for (int64_t d = 0; d < r; ++d)
        if (d != *ax && !dim_ok(I[size_t(d)], data[size_t(d)]))
          c.fail(ErrorKind::Value, "indices " + type_str(it) + " must match " + dstr + " except at axis " +
                                       std::to_string(*ax) + " (dim " + std::to_string(d) + " differs)");
      return I;
    }
  }
  const int64_t bd = c.i("batch_dims");
  if (bd < 0 || bd > ri || (kind == IndexKind::Axis && bd > c.i("axis")) || (kind == IndexKind::ND && bd >= ri) ||
      bd > r)
    c.fail(ErrorKind::Value, "batch_dims " + std::to_string(bd) + " must be in [0, " +
                                 (kind == IndexKind::Axis ? "min(axis, rank of indices)" : "rank of indices - 1") +
                                 "] for indices " + type_str(it) + " and " + dstr);
  for (int64_t d = 0; d < bd; ++d)
    if (!dim_ok(I[size_t(d)], data[size_t(d)]))
      c.fail(ErrorKind::Value, "the first " + std::to_string(bd) + " (batch) dims of indices " + type_str(it) +
                                   " and " + dstr + " must match");
  Shape out;
  if (kind == IndexKind::Axis) {
    const int64_t ax = c.i("axis");
    out.assign(data.begin(), data.begin() + ax);
    out.insert(out.end(), I.begin() + bd, I.end());
    out.insert(out.end(), data.begin() + ax + 1, data.end());
    return out;
  }
  const int64_t k = I.back();
  if (k < 0) c.fail(ErrorKind::Value, "needs the last dim of indices " + type_str(it) + " (the tuple size) known");
  if (k > r - bd)
    c.fail(ErrorKind::Value, "indices " + type_str(it) + " hold " + std::to_string(k) + "-tuples but " + dstr +
                                 " has only " + std::to_string(r - bd) + " dims after the " + std::to_string(bd) +
                                 " batch dims");
  out.assign(I.begin(), I.end() - 1);
  out.insert(out.end(), data.begin() + bd + k, data.end());
  return out;
}

Types infer_gather_kind(InferCtx& c, IndexKind kind) {
  return Types{{c.in[0].dtype, gathered_shape(c, kind, c.in[0].shape, 1, "updates")}};
}
Types infer_gather(InferCtx& c) { return infer_gather_kind(c, IndexKind::Axis); }
Types infer_gather_nd(InferCtx& c) { return infer_gather_kind(c, IndexKind::ND); }
Types infer_gather_along(InferCtx& c) { return infer_gather_kind(c, IndexKind::AlongAxis); }

// Scatter: inputs (updates, indices) onto zeros of `shape`, or (data, updates, indices).
Types infer_scatter_kind(InferCtx& c, IndexKind kind, bool with_data) {
  const size_t u = with_data ? 1 : 0, ii = u + 1;
  const std::string& m = c.s("mode");
  bool known = false;
  for (auto k : kModes) known |= m == k;
  if (!known)
    c.fail(ErrorKind::Value, "mode must be 'set', 'add', 'sub', 'mul', 'div', 'min' or 'max', not '" + m + "'");
  if (is_bool(c.in[u].dtype) && m != "set")
    c.fail(ErrorKind::Type, "mode '" + m + "' needs numeric updates, got " + type_str(c.in[u]) + " (bool takes 'set')");
  Shape result;
  if (with_data) {
    c.same_dtype(0, 1);
    result = c.in[0].shape;
  } else {
    result = c.ints("shape");
    for (auto d : result)
      if (d < 0) c.fail(ErrorKind::Value, "needs a static shape with non-negative dims, got " + shape_str(result));
  }
  Shape want = gathered_shape(c, kind, result, ii, "result");
  if (!shape_ok(c.in[u].shape, want))
    c.fail(ErrorKind::Value, "updates " + type_str(c.in[u]) + " do not match the shape " + shape_str(want) +
                                 " that indices " + type_str(c.in[ii]) + " address in the result " +
                                 shape_str(result));
  return Types{{c.in[u].dtype, result}};
}
Types infer_scatter(InferCtx& c) { return infer_scatter_kind(c, IndexKind::Axis, false); }
Types infer_scatter_data(InferCtx& c) { return infer_scatter_kind(c, IndexKind::Axis, true); }
Types infer_scatter_nd(InferCtx& c) { return infer_scatter_kind(c, IndexKind::ND, false); }
Types infer_scatter_nd_data(InferCtx& c) { return infer_scatter_kind(c, IndexKind::ND, true); }
Types infer_scatter_along(InferCtx& c) { return infer_scatter_kind(c, IndexKind::AlongAxis, false); }
Types infer_scatter_along_data(InferCtx& c) { return infer_scatter_kind(c, IndexKind::AlongAxis, true); }

// ---- gradients ----

const char* gather_op(IndexKind k) {
  return k == IndexKind::Axis ? "gather" : k == IndexKind::ND ? "gather_nd" : "gather_along_axis";
}
const char* scatter_data_op(IndexKind k) {
  return k == IndexKind::Axis ? "scatter_with_data" : k == IndexKind::ND ? "scatter_nd_with_data"
                                                                          : "scatter_along_axis_with_data";
}

// The addressing attributes of a node of the family, for the ops its gradient builds.
Attrs index_attrs(const GatherAttrs& a) {
  Attrs r;
  if (a.kind != IndexKind::ND) r["axis"] = a.axis;
  if (a.kind != IndexKind::AlongAxis) r["batch_dims"] = a.batch_dims;
  return r;
}

ValueRef gather_like(Graph& g, const GatherAttrs& a, ValueRef x, ValueRef idx) {
  return call(g, gather_op(a.kind), {x, idx}, index_attrs(a));
}
ValueRef scatter_onto(Graph& g, const GatherAttrs& a, ValueRef data, ValueRef upd, ValueRef idx, const char* mode) {
  Attrs at = index_attrs(a);
  at["mode"] = std::string(mode);
  return call(g, scatter_data_op(a.kind), {data, upd, idx}, at);
}

// gather -> scatter-add of dy into zeros of the updates' shape
std::vector<ValueRef> grad_gather(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}};
  const GatherAttrs& a = typed_attrs<GatherAttrs>(c.node);
  return {scatter_onto(c.g, a, zeros_like(c.g, c.x(0)), c.dy[0], c.x(1), "add"), ValueRef{}};
}

// 1 where update j is the one 'set' keeps (the last in row-major order to reach its position).
// Ordinals need the updates' shape when the gradient is built.
ValueRef set_winners(GradCtx& c, const GatherAttrs& a, ValueRef data, ValueRef upd, ValueRef idx) {
  Graph& g = c.g;
  const TensorType& ut = g.type(upd);
  if (!shape_known(ut.shape))
    raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name,
          "the gradient of mode 'set' w.r.t. updates needs the updates' shape known when the gradient is built, "
          "got " + type_str(ut));
  const int64_t n = num_elements(ut.shape);
  if (n >= (int64_t(1) << 31) - 1)
    raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "too many updates for the 'set' gradient");
  ValueRef ord = call(g, "arange", {}, {{"start", 1.0}, {"stop", double(n + 1)}, {"dtype", DType::Int32}});
  ord = call(g, "reshape", {ord}, {{"shape", ut.shape}});
  ValueRef base = call(g, "cast", {zeros_like(g, data)}, {{"dtype", DType::Int32}});
  ValueRef last = scatter_onto(g, a, base, ord, idx, "max");
  return call(g, "cast", {call(g, "equal", {gather_like(g, a, last, idx), ord})}, {{"dtype", ut.dtype}});
}

// For 'mul': per update, the product of the other updates at its position, zero-safe as
// reduction_product's gradient: with z zeros there, z == 0: P / u_j; z == 1: the product of the
// nonzero ones for the zero update, 0 for the others; z > 1: 0.
ValueRef others_product(GradCtx& c, const GatherAttrs& a, ValueRef upd, ValueRef idx) {
  Graph& g = c.g;
  ValueRef y = c.y(0);
  const DType dt = g.type(upd).dtype;
  ValueRef zero = scalar_like(g, 0.0, upd), one = scalar_like(g, 1.0, upd);
  ValueRef is_zero = call(g, "equal", {upd, zero});
  ValueRef safe = call(g, "select", {is_zero, one, upd});
  ValueRef p_nz = gather_like(g, a, scatter_onto(g, a, ones_like(g, y), safe, idx, "mul"), idx);
  ValueRef zeros = call(g, "cast", {is_zero}, {{"dtype", dt}});
  ValueRef count = gather_like(g, a, scatter_onto(g, a, zeros_like(g, y), zeros, idx, "add"), idx);
  ValueRef when_nonzero = call(g, "select", {call(g, "equal", {count, zero}), call(g, "division", {p_nz, safe}), zero});
  ValueRef when_zero = call(g, "select", {call(g, "equal", {count, one}), p_nz, zero});
  return call(g, "select", {is_zero, when_zero, when_nonzero});
}

// Shared by both forms: `data` is the data input, or invalid for the shape forms (zeros).
std::vector<ValueRef> scatter_grads(GradCtx& c, ValueRef data, ValueRef upd, ValueRef idx) {
  Graph& g = c.g;
  const GatherAttrs& a = typed_attrs<GatherAttrs>(c.node);
  ValueRef dy = c.dy[0], y = c.y(0);
  ValueRef d_data, d_upd;
  switch (a.mode) {
    case ScatterMode::Add:
    case ScatterMode::Sub:
      d_data = dy;
      d_upd = gather_like(g, a, dy, idx);
      if (a.mode == ScatterMode::Sub) d_upd = call(g, "negative", {d_upd});
      break;
    case ScatterMode::Set: {
      ValueRef hit = scatter_onto(g, a, zeros_like(g, y), ones_like(g, upd), idx, "set");
      d_data = call(g, "multiplication", {dy, call(g, "subtraction", {scalar_like(g, 1.0, y), hit})});
      d_upd = call(g, "multiplication",
                   {gather_like(g, a, dy, idx), set_winners(c, a, data.valid() ? data : y, upd, idx)});
      break;
    }
    case ScatterMode::Min:
    case ScatterMode::Max: {
      // dy goes to every operand equal to the result, split evenly between ties (as reductions do)
      DType dt = g.type(y).dtype;
      ValueRef base = data.valid() ? data : zeros_like(g, y);
      ValueRef eq_d = call(g, "cast", {call(g, "equal", {base, y})}, {{"dtype", dt}});
      ValueRef eq_u = call(g, "cast", {call(g, "equal", {upd, gather_like(g, a, y, idx)})}, {{"dtype", dt}});
      ValueRef count = call(g, "addition", {eq_d, scatter_onto(g, a, zeros_like(g, y), eq_u, idx, "add")});
      count = call(g, "maximum", {count, scalar_like(g, 1.0, y)});
      ValueRef share = call(g, "division", {dy, count});
      d_data = call(g, "multiplication", {share, eq_d});
      d_upd = call(g, "multiplication", {gather_like(g, a, share, idx), eq_u});
      break;
    }
    case ScatterMode::Mul: {
      // y = data * P, P the product of the updates at each position (1 where none lands)
      ValueRef base = data.valid() ? data : zeros_like(g, y);
      d_data = call(g, "multiplication", {dy, scatter_onto(g, a, ones_like(g, y), upd, idx, "mul")});
      d_upd = call(g, "multiplication",
                   {gather_like(g, a, call(g, "multiplication", {dy, base}), idx), others_product(c, a, upd, idx)});
      break;
    }
    case ScatterMode::Div: {
      // y = data / P: d data = dy / P, d u_j = -dy * y / u_j
      d_data = call(g, "multiplication", {dy, scatter_onto(g, a, ones_like(g, y), upd, idx, "div")});
      ValueRef dyy = gather_like(g, a, call(g, "multiplication", {dy, y}), idx);
      d_upd = call(g, "negative", {call(g, "division", {dyy, upd})});
      break;
    }
  }
  if (data.valid()) return {d_data, d_upd, ValueRef{}};
  return {d_upd, ValueRef{}};
}

std::vector<ValueRef> grad_scatter(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}};
  return scatter_grads(c, ValueRef{}, c.x(0), c.x(1));
}
std::vector<ValueRef> grad_scatter_data(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}, ValueRef{}};
  return scatter_grads(c, c.x(0), c.x(1), c.x(2));
}

// ---- registration ----

InputSpec index_input() { return {"indices", false, false, InputRole::Index}; }

AttrSpec mode_attr() {
  return attr("mode", AttrKind::String, std::string("add"),
              "MPSGraphScatterMode: 'add' (MPSGraph's default; repeated indices sum), 'sub', 'mul', 'div', 'min', "
              "'max' (all updates accumulate) or 'set' (the last update in row-major order wins)");
}
AttrSpec shape_attr() {
  return attr("shape", AttrKind::Shape, AttrNone{}, "static shape of the result (zeros before the scatter)");
}
AttrSpec axis_attr(bool required) {
  return required ? attr("axis", AttrKind::Int, AttrNone{}, "the axis indexed (negative counts from the end)")
                  : attr("axis", AttrKind::Int, int64_t(0), "the axis indexed (negative counts from the end)");
}
AttrSpec batch_attr() {
  return attr("batch_dims", AttrKind::Int, int64_t(0), "leading dims shared by the data and the indices");
}

const char* kIndexDoc =
    " Indices: int32 or int64 (unsigned too); a negative index counts from the end (-1 is the last), as "
    "MPSGraph; an index out of range raises GraphIndexError when the CPU runs the graph (MPSGraph does not "
    "check: see docs/metal.md).";
const char* kModeDoc =
    " The result starts as data (zeros for the shape forms) and each update is combined into it by mode, in "
    "row-major order of the updates: repeated indices accumulate under 'add', 'sub', 'mul', 'div', 'min', 'max'; "
    "under 'set' the last one wins. Gradients w.r.t. data and updates in every mode ('set': only the update "
    "kept, which needs the updates' shape known when the gradient is built; 'min' / 'max': ties split dy "
    "evenly; 'mul': zero-safe).";

}  // namespace

void register_gather_ops() {
  auto doc = [](const char* s, bool scatter) { return std::string(s) + kIndexDoc + (scatter ? kModeDoc : ""); };
  struct Gather {
    const char* name;
    IndexKind kind;
    InferFn infer;
    std::vector<AttrSpec> attrs;
    const char* doc;
  };
  const Gather gathers[] = {
      {"gather", IndexKind::Axis, infer_gather, {axis_attr(false), batch_attr()},
       "Slices of updates along axis at indices (MPSGraph's gatherWithUpdatesTensor:indicesTensor:axis:"
       "batchDimensions:; numpy take / tf.gather with batch_dims). Result shape: updates[:axis] + "
       "indices[batch_dims:] + updates[axis+1:]. Any dtype. Gradient: scatter_with_data(zeros, dy, indices, "
       "mode='add')."},
      {"gather_nd", IndexKind::ND, infer_gather_nd, {batch_attr()},
       "Slices of updates at the K-tuples in indices' last dim (MPSGraph's gatherNDWithUpdatesTensor:"
       "indicesTensor:batchDimensions:; tf.gather_nd). Result shape: indices[:-1] + updates[batch_dims+K:]; K "
       "must be known when the graph is built. Any dtype. Gradient: scatter_nd_with_data 'add'."},
      {"gather_along_axis", IndexKind::AlongAxis, infer_gather_along, {axis_attr(true)},
       "Elements of updates at indices along axis (MPSGraph's gatherAlongAxis:withUpdatesTensor:indicesTensor:, "
       "macOS 12.3; numpy take_along_axis without broadcasting): indices has updates' rank and shape except at "
       "axis; the result has indices' shape. Any dtype. Gradient: scatter_along_axis_with_data 'add'."},
  };
  for (const Gather& f : gathers)
    register_op({.name = f.name,
                 .doc = doc(f.doc, false),
                 .inputs = {{"updates"}, index_input()},
                 .attrs = f.attrs,
                 .decode = decoder(f.kind),
                 .infer = f.infer,
                 .grad = grad_gather,
                 .family = "gather"});

  struct Form {
    const char* name;
    IndexKind kind;
    bool with_data;
    InferFn infer;
    const char* doc;
  };
  const Form forms[] = {
      {"scatter", IndexKind::Axis, false, infer_scatter,
       "Scatters the slices of updates along axis of a zero result of `shape` at indices, the transpose of gather "
       "(MPSGraph's scatterWithUpdatesTensor:indicesTensor:shape:axis:mode:, which takes rank-1 indices and no "
       "batch_dims; here indices may have any rank). updates' shape: shape[:axis] + indices[batch_dims:] + "
       "shape[axis+1:]."},
      {"scatter_with_data", IndexKind::Axis, true, infer_scatter_data,
       "scatter onto a copy of data instead of zeros (MPSGraph's scatterWithDataTensor:updatesTensor:"
       "indicesTensor:axis:mode:); the result has data's shape and dtype."},
      {"scatter_nd", IndexKind::ND, false, infer_scatter_nd,
       "Scatters the slices of updates into a zero result of `shape` at the K-tuples in indices' last dim, the "
       "transpose of gather_nd (MPSGraph's scatterNDWithUpdatesTensor:indicesTensor:shape:batchDimensions:mode:; "
       "tf.scatter_nd). updates' shape: indices[:-1] + shape[batch_dims+K:]."},
      {"scatter_nd_with_data", IndexKind::ND, true, infer_scatter_nd_data,
       "scatter_nd onto a copy of data instead of zeros (MPSGraph's scatterNDWithDataTensor:updatesTensor:"
       "indicesTensor:batchDimensions:mode:; tf.tensor_scatter_nd_update / _add / _max ...)."},
      {"scatter_along_axis", IndexKind::AlongAxis, false, infer_scatter_along,
       "Scatters each element of updates to its index along axis of a zero result of `shape`, the transpose of "
       "gather_along_axis (MPSGraph's scatterAlongAxis:withUpdatesTensor:indicesTensor:shape:mode:, macOS 12.3). "
       "updates and indices have one shape: the result's except at axis."},
      {"scatter_along_axis_with_data", IndexKind::AlongAxis, true, infer_scatter_along_data,
       "scatter_along_axis onto a copy of data instead of zeros (MPSGraph's scatterAlongAxis:withDataTensor:"
       "updatesTensor:indicesTensor:mode:; numpy put_along_axis for 'set', torch scatter_reduce with "
       "include_self=True)."},
  };
  for (const Form& f : forms) {
    std::vector<AttrSpec> attrs;
    if (!f.with_data) attrs.push_back(shape_attr());
    if (f.kind != IndexKind::ND) attrs.push_back(axis_attr(f.kind == IndexKind::AlongAxis));
    if (f.kind != IndexKind::AlongAxis) attrs.push_back(batch_attr());
    attrs.push_back(mode_attr());
    std::vector<InputSpec> inputs;
    if (f.with_data) inputs.push_back({"data"});
    inputs.push_back({"updates"});
    inputs.push_back(index_input());
    register_op({.name = f.name,
                 .doc = doc(f.doc, true),
                 .inputs = std::move(inputs),
                 .attrs = std::move(attrs),
                 .decode = decoder(f.kind),
                 .infer = f.infer,
                 .grad = f.with_data ? GradFn(grad_scatter_data) : GradFn(grad_scatter),
                 .family = "gather"});
  }
}

}  // namespace mg::ops
