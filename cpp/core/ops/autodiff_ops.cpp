// Ops that gradient rules are made of: undoing broadcasting, filling, stopping gradients.
// Each has its own gradient rule, so gradients of gradients work.
#include <cstdint>
#include <vector>

#include "core/ops/common.h"

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

void register_autodiff_ops() {
  register_op({.name = "sum_to_like",
               .doc = "Sums x down to the shape of `like` (which must broadcast to x's shape): the gradient of "
                      "broadcasting. Shapes may be known only at run time.",
               .inputs = {{"x"}, {"like"}},
               .infer = [](InferCtx& c) {
                 const Shape& xs = c.in[0].shape;
                 const Shape& ls = c.in[1].shape;
                 bool ok = ls.size() <= xs.size();
                 for (size_t i = 0; ok && i < ls.size(); ++i) {
                   int64_t l = ls[i], x = xs[xs.size() - ls.size() + i];
                   ok = l == 1 || l == x || l < 0 || x < 0;
                 }
                 if (!ok) c.fail(ErrorKind::Value, "shape " + shape_str(ls) + " does not broadcast to " + shape_str(xs));
                 require_class(c, 0, kNumeric);
                 return std::vector<TensorType>{{c.in[0].dtype, ls}};
               },
               .grad = [](GradCtx& c) {
                 return std::vector<ValueRef>{broadcast_like(c.g, c.dy[0], c.x(0)), ValueRef{}};
               },
               .python_method = true,
               .family = "autodiff"});
  register_op({.name = "broadcast_like",
               .doc = "Broadcasts x to the broadcast shape of x and `like` (numpy rules), known at run time.",
               .inputs = {{"x"}, {"like"}},
               .infer = [](InferCtx& c) { return std::vector<TensorType>{{c.in[0].dtype, c.broadcast({0, 1})}}; },
               .grad = [](GradCtx& c) { return std::vector<ValueRef>{sum_to_like(c.g, c.dy[0], c.x(0)), ValueRef{}}; },
               .family = "autodiff"});
  register_op({.name = "full_like",
               .doc = "A tensor of `like`'s shape filled with value, of `like`'s dtype unless dtype is given.",
               .inputs = {{"like"}},
               .attrs = {attr("value", AttrKind::Float), optional_attr("dtype", AttrKind::DType)},
               .infer = [](InferCtx& c) {
                 DType d = c.has("dtype") ? c.dtype("dtype") : c.in[0].dtype;
                 return std::vector<TensorType>{{d, c.in[0].shape}};
               },
               .grad = [](GradCtx&) { return std::vector<ValueRef>{ValueRef{}}; },
               .family = "autodiff"});
  register_op({.name = "stop_gradient",
               .doc = "Identity in the forward pass; no gradient flows through it.",
               .inputs = {{"x"}},
               .infer = [](InferCtx& c) { return std::vector<TensorType>{c.in[0]}; },
               .grad = [](GradCtx&) { return std::vector<ValueRef>{ValueRef{}}; },
               .family = "autodiff"});
}

}  // namespace mg::ops
