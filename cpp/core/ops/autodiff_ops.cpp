// Ops that gradient rules are made of: undoing broadcasting, filling, stopping gradients.
// Each has its own gradient rule, so gradients of gradients work.
#include <cstdint>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/creation_attrs.h"

namespace mg::ops {

ValueRef sum_to_like(Graph& g, ValueRef grad, ValueRef like) {
  const Shape& gs = g.type(grad).shape;
  const Shape& ls = g.type(like).shape;
  if (gs == ls && shape_known(gs)) return grad;
  return call(g, "sum_to_like", {grad, like});
}

ValueRef broadcast_like(Graph& g, ValueRef x, ValueRef like) {
  const Shape& xs = g.type(x).shape;
  const Shape& ls = g.type(like).shape;
  if (xs == ls && shape_known(xs)) return x;
  return call(g, "broadcast_like", {x, like});
}

ValueRef zeros_like(Graph& g, ValueRef like) { return call(g, "full_like", {like}, {{"value", 0.0}}); }
ValueRef ones_like(Graph& g, ValueRef like) { return call(g, "full_like", {like}, {{"value", 1.0}}); }
ValueRef scalar_like(Graph& g, double v, ValueRef like) { return g.scalar(v, g.type(like).dtype); }

namespace {
FillAttrs decode_fill(const Attrs& a) { return {get_attr<double>(a, "value")}; }  // creation_attrs.h

// ---- sum_to_like ----

std::vector<TensorType> infer_sum_to_like(InferCtx& c) {
  const Shape& xs = c.in[0].shape;
  const Shape& ls = c.in[1].shape;
  bool ok = ls.size() <= xs.size();
  for (size_t i = 0; ok && i < ls.size(); ++i) {
    int64_t l = ls[i], x = xs[xs.size() - ls.size() + i];
    ok = l == 1 || l == x || l < 0 || x < 0;
  }
  if (!ok) c.fail(ErrorKind::Value, "shape " + shape_str(ls) + " does not broadcast to " + shape_str(xs));
  require_class(c, 0, kNumeric | kComplex);
  return std::vector<TensorType>{{c.in[0].dtype, ls}};
}

std::vector<ValueRef> grad_sum_to_like(GradCtx& c) {
  return std::vector<ValueRef>{broadcast_like(c.g, c.dy[0], c.x(0)), ValueRef{}};
}

// ---- broadcast_like ----

std::vector<TensorType> infer_broadcast_like(InferCtx& c) {
  return std::vector<TensorType>{{c.in[0].dtype, c.broadcast({0, 1})}};
}

std::vector<ValueRef> grad_broadcast_like(GradCtx& c) {
  return std::vector<ValueRef>{sum_to_like(c.g, c.dy[0], c.x(0)), ValueRef{}};
}

// ---- full_like ----

std::vector<TensorType> infer_full_like(InferCtx& c) {
  DType d = c.has("dtype") ? c.dtype("dtype") : c.in[0].dtype;
  return std::vector<TensorType>{{d, c.in[0].shape}};
}

std::vector<ValueRef> grad_full_like(GradCtx&) {
  return std::vector<ValueRef>{ValueRef{}};
}

// ---- stop_gradient ----

std::vector<TensorType> infer_stop_gradient(InferCtx& c) {
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> grad_stop_gradient(GradCtx&) {
  return std::vector<ValueRef>{ValueRef{}};
}

}  // namespace

void register_autodiff_ops() {
  register_op({.name = "sum_to_like",
               .doc = "Sums x down to the shape of `like` (which must broadcast to x's shape): the gradient of "
                      "broadcasting. Shapes may be known only at run time.",
               .inputs = {{"x"}, {"like", false, false, InputRole::ShapeOnly}},
               .infer = infer_sum_to_like,
               .grad = grad_sum_to_like,
               .python_method = true,
               .family = "autodiff"});
  register_op({.name = "broadcast_like",
               .doc = "Broadcasts x to the broadcast shape of x and `like` (numpy rules), known at run time.",
               .inputs = {{"x"}, {"like", false, false, InputRole::ShapeOnly}},
               .infer = infer_broadcast_like,
               .grad = grad_broadcast_like,
               .family = "autodiff"});
  register_op({.name = "full_like",
               .doc = "A tensor of `like`'s shape filled with value, of `like`'s dtype unless dtype is given.",
               .inputs = {{"like", false, false, InputRole::ShapeOnly}},
               .attrs = {attr("value", AttrKind::Float), optional_attr("dtype", AttrKind::DType)},
               .decode = attr_decoder(decode_fill),
               .infer = infer_full_like,
               .grad = grad_full_like,
               .family = "autodiff"});
  register_op({.name = "stop_gradient",
               .doc = "Identity in the forward pass; no gradient flows through it.",
               .inputs = {{"x"}},
               .infer = infer_stop_gradient,
               .grad = grad_stop_gradient,
               .family = "autodiff",
               .view = true});
}

}  // namespace mg::ops
