#include "core/autodiff.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "core/ops/common.h"

namespace mg {

namespace {

// Reverse accumulation from seeded gradients over nodes [first, last of ys]; nodes before
// `first` are leaves (a composite's decomposition is differentiated with its inputs as
// leaves, so paths between those inputs are not counted twice).
std::map<ValueRef, ValueRef> backward(Graph& g, const std::vector<ValueRef>& ys, const std::vector<ValueRef>& dys,
                                      const std::vector<ValueRef>& xs, int32_t first) {
  int32_t last = -1;
  for (auto& y : ys) last = std::max(last, y.node);
  const size_t n = size_t(last) + 1;

  // nodes that depend on some x (through float values) and that some y depends on
  std::vector<char> from_x(n, 0), to_y(n, 0);
  for (auto& x : xs)
    if (x.node <= last) from_x[size_t(x.node)] = 1;
  for (size_t id = size_t(first); id < n; ++id) {
    if (from_x[id]) continue;
    for (auto& v : g.node(int32_t(id)).inputs)
      if (from_x[size_t(v.node)] && is_inexact(g.type(v).dtype)) from_x[id] = 1;
  }
  for (auto& y : ys) to_y[size_t(y.node)] = 1;
  for (size_t id = n; id-- > size_t(first);) {
    if (!to_y[id]) continue;
    for (auto& v : g.node(int32_t(id)).inputs) to_y[size_t(v.node)] = 1;
  }

  std::map<ValueRef, ValueRef> grad;
  auto accumulate = [&](ValueRef v, ValueRef d) {
    auto it = grad.find(v);
    if (it == grad.end()) grad[v] = d;
    else it->second = g.add1("addition", {it->second, d});
  };
  for (size_t k = 0; k < ys.size(); ++k)
    if (dys[k].valid() && is_inexact(g.type(ys[k]).dtype)) accumulate(ys[k], dys[k]);

  for (size_t id = n; id-- > size_t(first);) {
    if (!from_x[id] || !to_y[id]) continue;
    const Node node = g.node(int32_t(id));  // copy: rules append nodes
    bool any = false;
    for (size_t k = 0; k < node.outputs.size(); ++k) any = any || grad.count({int32_t(id), int32_t(k)});
    if (!any || node.inputs.empty()) continue;
    bool float_input = false;
    for (auto& v : node.inputs) float_input = float_input || (is_inexact(g.type(v).dtype) && from_x[size_t(v.node)]);
    if (!float_input) continue;
    if (node.op->differentiable == Differentiable::No)
      raise(ErrorKind::Value, node.op->name, node.name,
            "is not differentiable, but the gradient of " + g.node(last).name + " flows through it; use stop_gradient");
    if (!node.op->grad && !node.op->composite())
      raise(ErrorKind::NotImplemented, node.op->name, node.name, "has no gradient rule yet");
    std::vector<ValueRef> dys_node;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      auto it = grad.find({int32_t(id), int32_t(k)});
      dys_node.push_back(it != grad.end() ? it->second : ops::zeros_like(g, {int32_t(id), int32_t(k)}));
    }
    std::vector<ValueRef> dxs;
    if (node.op->grad) {
      GradCtx ctx{g, node, dys_node};
      for (auto& in : node.inputs) ctx.wanted.push_back(is_inexact(g.type(in).dtype) && from_x[size_t(in.node)]);
      dxs = node.op->grad(ctx);
    } else {
      // a composite without a rule of its own: differentiate its decomposition
      const int32_t made = int32_t(g.size());
      std::vector<ValueRef> outs = node.op->decompose(g, node, schema_inputs(node));
      auto inner = backward(g, outs, dys_node, node.inputs, made);
      // the map holds each value's whole gradient: an input given twice gets it once
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        auto it = inner.find(node.inputs[i]);
        const bool repeat = std::find(node.inputs.begin(), node.inputs.begin() + long(i), node.inputs[i]) !=
                            node.inputs.begin() + long(i);
        dxs.push_back(it != inner.end() && !repeat ? it->second : ValueRef{});
      }
    }
    if (dxs.size() != node.inputs.size())
      raise(ErrorKind::Runtime, node.op->name, node.name, "gradient rule returned the wrong number of gradients");
    for (size_t i = 0; i < dxs.size(); ++i) {
      ValueRef in = node.inputs[i];
      if (!dxs[i].valid() || !is_inexact(g.type(in).dtype) || !from_x[size_t(in.node)]) continue;
      const TensorType& it = g.type(in);
      const TensorType& gt = g.type(dxs[i]);
      if (gt.dtype != it.dtype || gt.shape.size() != it.shape.size())
        raise(ErrorKind::Runtime, node.op->name, node.name,
              "gradient rule gave " + type_str(gt) + " for input " + type_str(it));
      accumulate(in, dxs[i]);
    }
  }
  return grad;
}

}  // namespace

std::vector<ValueRef> vjp(Graph& g, const std::vector<ValueRef>& ys, const std::vector<ValueRef>& dys,
                          const std::vector<ValueRef>& xs, int32_t first) {
  auto grad = backward(g, ys, dys, xs, first);
  std::vector<ValueRef> out;
  for (auto& x : xs) {
    auto it = grad.find(x);
    out.push_back(it != grad.end() ? it->second : ValueRef{});
  }
  return out;
}

std::vector<ValueRef> gradients(Graph& g, ValueRef y, const std::vector<ValueRef>& xs, ValueRef dy) {
  g.check_ref(y, "gradients");
  for (auto& x : xs) g.check_ref(x, "gradients");
  const TensorType yt = g.type(y);
  if (!is_inexact(yt.dtype))
    raise(ErrorKind::Type, "gradients", g.node(y.node).name, "cannot differentiate the non-float tensor " + type_str(yt));
  if (dy.valid()) {
    g.check_ref(dy, "gradients");
    const TensorType dt = g.type(dy);
    if (dt.dtype != yt.dtype || !broadcast_shapes(dt.shape, yt.shape) || dt.shape.size() != yt.shape.size())
      raise(ErrorKind::Value, "gradients", g.node(y.node).name,
            "dy of type " + type_str(dt) + " does not match y of type " + type_str(yt));
  }
  auto grad = backward(g, {y}, {dy.valid() ? ops::broadcast_like(g, dy, y) : ops::ones_like(g, y)}, xs, 0);
  std::vector<ValueRef> out;
  for (auto& x : xs) {
    auto it = grad.find(x);
    out.push_back(it != grad.end() ? it->second : ops::zeros_like(g, x));
  }
  return out;
}

}  // namespace mg
