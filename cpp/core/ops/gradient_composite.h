// Gradient composites: `<op>_gradient` nodes that a forward composite's gradient rule emits, so
// that a backend can claim the gradient as one op (MPSGraph's gradient selectors). Their
// decomposition is the gradient of the forward op's decomposition, so a backend that expands
// them computes exactly what it computed before they existed, and their own gradient (second
// order) is that of that decomposition.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/autodiff.h"
#include "core/ops/common.h"

namespace mg::ops {

// The gradient of forward op `fwd`'s decomposition at `dys` w.r.t. `xs` (schema-order inputs
// `in`); zeros where no path leads from an x.
inline std::vector<ValueRef> decomposition_vjp(Graph& g, const OpDef& fwd, const std::vector<ValueRef>& in,
                                               const Attrs& attrs, const std::vector<ValueRef>& dys,
                                               const std::vector<ValueRef>& xs) {
  const int32_t made = int32_t(g.size());
  std::vector<ValueRef> outs = fwd.expand(g, in, attrs);
  std::vector<ValueRef> d = vjp(g, outs, dys, xs, made);
  for (size_t i = 0; i < d.size(); ++i)
    if (!d[i].valid()) d[i] = zeros_like(g, xs[i]);
  return d;
}

// Registers `<fwd>_gradient` for forward op `f` (not a Graph method: gradient rules make it).
// Inputs: the incoming gradient of f's single output, then f's inputs (same names, optional
// ones optional); attributes: f's. Outputs: the gradients of the inputs listed in `wrt` that
// are present, in that order. (Called before f is registered: the registry cannot be queried
// while it is being filled.)
inline void register_gradient_composite(const OpDef& f, std::vector<size_t> wrt) {
  const std::string fwd = f.name;
  std::vector<InputSpec> inputs{{"incoming_gradient"}};
  inputs.insert(inputs.end(), f.inputs.begin(), f.inputs.end());
  auto infer = [fwd, wrt](InferCtx& c) {
    const OpDef& f = get_op(fwd);
    std::vector<TensorType> fin(c.in.begin() + 1, c.in.end());
    InferCtx fc(f, c.node, fin, c.attrs);  // normalises the attributes as fwd does
    if (!c.absent.empty()) fc.absent.assign(c.absent.begin() + 1, c.absent.end());
    std::vector<TensorType> outs = f.infer(fc);
    const TensorType& dy = c.in[0];
    if (dy.dtype != outs.at(0).dtype || dy.shape.size() != outs[0].shape.size() ||
        !broadcast_shapes(dy.shape, outs[0].shape))
      c.fail(ErrorKind::Value, "incoming_gradient " + type_str(dy) + " does not match the " + fwd + " result " +
                                   type_str(outs[0]));
    std::vector<TensorType> r;
    for (size_t i : wrt)
      if (fc.present(i)) r.push_back(fin.at(i));
    return r;
  };
  auto expand = [fwd, wrt](Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
    std::vector<ValueRef> fin(in.begin() + 1, in.end()), xs;
    for (size_t i : wrt)
      if (fin.at(i).valid()) xs.push_back(fin[i]);
    return decomposition_vjp(g, get_op(fwd), fin, a, {in[0]}, xs);
  };
  register_op({.name = fwd + "_gradient",
               .doc = "The gradient of " + fwd + " w.r.t. the inputs it is differentiated against (made by its "
                      "gradient rule; a backend may run it as one op).",
               .inputs = std::move(inputs),
               .attrs = f.attrs,
               .infer = infer,
               .python_method = false,
               .multi_output = true,
               .family = f.family,
               .expand = expand});
}

// The gradient rule of `fwd` (one output): one `<fwd>_gradient` node for the wanted inputs in
// `wrt`, and the decomposition's gradient for any other wanted input. An input given twice
// takes the decomposition's path (its gradient is the sum over its slots).
inline GradFn gradient_via_composite(const std::string& fwd, std::vector<size_t> wrt) {
  return [fwd, wrt](GradCtx& c) {
    const std::vector<ValueRef> in = schema_inputs(c.node);
    std::vector<int> slot(in.size(), -1);  // schema index -> node input index
    for (size_t s = 0, k = 0; s < in.size(); ++s)
      if (in[s].valid()) slot[s] = int(k++);
    std::vector<ValueRef> dx(c.node.inputs.size());
    std::vector<ValueRef> sorted = c.node.inputs;
    std::sort(sorted.begin(), sorted.end());
    const bool repeated = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
    bool any = false;
    for (size_t i : wrt) any = any || (slot[i] >= 0 && c.wants(size_t(slot[i])));
    if (any && !repeated) {
      std::vector<ValueRef> gin{c.dy.at(0)};
      gin.insert(gin.end(), in.begin(), in.end());
      std::vector<ValueRef> outs = c.g.add(fwd + "_gradient", gin, c.node.attrs);
      size_t j = 0;
      for (size_t i : wrt)
        if (slot[i] >= 0) dx[size_t(slot[i])] = outs.at(j++);
    }
    std::vector<ValueRef> xs;
    for (size_t k = 0; k < dx.size(); ++k)
      if (!dx[k].valid() && c.wants(k) && std::find(xs.begin(), xs.end(), c.node.inputs[k]) == xs.end())
        xs.push_back(c.node.inputs[k]);
    if (!xs.empty()) {
      std::vector<ValueRef> d = decomposition_vjp(c.g, *c.node.op, in, c.node.attrs, c.dy, xs);
      for (size_t k = 0; k < dx.size(); ++k) {
        if (dx[k].valid()) continue;
        auto it = std::find(xs.begin(), xs.end(), c.node.inputs[k]);
        // each distinct value's whole gradient once, at its first slot
        if (it != xs.end() && std::find(c.node.inputs.begin(), c.node.inputs.begin() + long(k), c.node.inputs[k]) ==
                                  c.node.inputs.begin() + long(k))
          dx[k] = d[size_t(it - xs.begin())];
      }
    }
    return dx;
  };
}

// Registers composite `def`, with the gradient rule above and its gradient composite.
inline void register_op_with_gradient_composite(OpDef def, std::vector<size_t> wrt) {
  def.grad = gradient_via_composite(def.name, wrt);
  register_gradient_composite(def, wrt);
  register_op(std::move(def));
}

}  // namespace mg::ops
