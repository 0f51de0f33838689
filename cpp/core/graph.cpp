#include "core/graph.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <variant>

#include "core/registry.h"

namespace mg {

static std::atomic<uint64_t> g_next_uid{1};

std::string type_str(const TensorType& t) { return std::string(dtype_name(t.dtype)) + shape_str(t.shape); }

void raise(ErrorKind kind, const std::string& op, const std::string& node, const std::string& msg) {
  std::string m = "[" + op + "] " + msg;
  if (!node.empty()) m += " (node '" + node + "')";
  throw GraphError(kind, m);
}

Graph::Graph() : uid_(g_next_uid++), vars_(std::make_shared<VariableStore>()) {}

void Graph::check_ref(ValueRef v, const std::string& op) const {
  if (v.node < 0 || size_t(v.node) >= nodes_.size() || v.index < 0 ||
      size_t(v.index) >= nodes_[size_t(v.node)].outputs.size())
    raise(ErrorKind::Value, op, "", "input refers to no tensor of this graph (node " + std::to_string(v.node) + ")");
}

static void check_attr_kind(const OpDef& op, const std::string& node, const AttrSpec& spec, const AttrValue& v) {
  bool ok = false;
  switch (spec.kind) {
    case AttrKind::Int: ok = std::holds_alternative<int64_t>(v); break;
    case AttrKind::Float: ok = std::holds_alternative<double>(v); break;
    case AttrKind::Bool: ok = std::holds_alternative<bool>(v); break;
    case AttrKind::String: ok = std::holds_alternative<std::string>(v); break;
    case AttrKind::Ints: case AttrKind::Shape: case AttrKind::Axes:
      ok = std::holds_alternative<std::vector<int64_t>>(v); break;
    case AttrKind::Floats: ok = std::holds_alternative<std::vector<double>>(v); break;
    case AttrKind::DType: ok = std::holds_alternative<DType>(v); break;
    case AttrKind::Tensor: ok = std::holds_alternative<std::shared_ptr<const Array>>(v); break;
  }
  if (!ok)
    raise(ErrorKind::Type, op.name, node,
          "attribute '" + spec.name + "' must be " + attr_kind_name(spec.kind) + ", got " + attr_repr(v));
}

std::vector<ValueRef> Graph::add(const std::string& opname, const std::vector<ValueRef>& inputs, Attrs attrs,
                                 const std::string& name) {
  const OpDef& op = get_op(opname);
  std::string node_name = name;
  if (node_name.empty()) node_name = op.name + "_" + std::to_string(name_counts_[op.name]);
  std::vector<char> absent(inputs.size(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid() && i < op.inputs.size() && op.inputs[i].optional && op.expand) {
      absent[i] = 1;
      continue;
    }
    if (inputs[i].node == -1 && i < op.inputs.size())
      raise(ErrorKind::Value, op.name, name, "missing input '" + op.inputs[i].name + "'");
    check_ref(inputs[i], op.name);
  }
  bool variadic = !op.inputs.empty() && op.inputs.back().variadic;
  size_t fixed = op.inputs.size() - (variadic ? 1 : 0);
  if (variadic ? inputs.size() < fixed : inputs.size() != fixed)
    raise(ErrorKind::Value, op.name, node_name,
          "expects " + std::to_string(fixed) + (variadic ? " or more" : "") + " inputs, got " +
              std::to_string(inputs.size()));
  for (auto& kv : attrs) {
    bool known = false;
    for (auto& s : op.attrs) known |= s.name == kv.first;
    if (!known) raise(ErrorKind::Value, op.name, node_name, "unknown attribute '" + kv.first + "'");
  }
  for (auto& s : op.attrs) {
    auto it = attrs.find(s.name);
    if (it == attrs.end() || std::holds_alternative<AttrNone>(it->second)) {
      if (!std::holds_alternative<AttrNone>(s.default_value)) attrs[s.name] = s.default_value;
      else if (!s.optional) raise(ErrorKind::Value, op.name, node_name, "missing required attribute '" + s.name + "'");
      else attrs.erase(s.name);
      continue;
    }
    check_attr_kind(op, node_name, s, it->second);
  }
  std::vector<TensorType> in;
  in.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(absent[i] ? TensorType{} : type(inputs[i]));
  InferCtx ctx(op, node_name, in, attrs);
  ctx.absent = absent;
  std::vector<TensorType> outs = op.infer(ctx);
  Node n;
  n.op = &op;
  n.name = node_name;
  n.attrs = std::move(attrs);
  n.outputs = std::move(outs);
  decode_attrs(n);  // after inference normalised the attributes
  n.origin_op = &op;
  n.origin_name = node_name;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!absent[i]) n.inputs.push_back(inputs[i]);
  if (std::find(absent.begin(), absent.end(), 1) != absent.end()) n.absent = std::move(absent);
  name_counts_[op.name]++;
  if (op.expand && expand_ && expand_(n)) return expand_node(n, inputs);
  int32_t id = append(std::move(n));
  std::vector<ValueRef> r;
  for (size_t i = 0; i < nodes_[size_t(id)].outputs.size(); ++i) r.push_back({id, int32_t(i)});
  return r;
}

std::vector<ValueRef> Graph::expand_node(const Node& n, const std::vector<ValueRef>& inputs) {
  const OpDef& op = *n.op;
  const int32_t first_new = int32_t(nodes_.size());
  std::vector<ValueRef> r = op.expand(*this, inputs, n.attrs);
  if (r.size() != n.outputs.size())
    raise(ErrorKind::Runtime, op.name, n.name, "decomposition gave the wrong number of outputs");
  for (size_t k = 0; k < r.size(); ++k) {
    const TensorType& t = type(r[k]);
    if (t.dtype != n.outputs[k].dtype || t.shape.size() != n.outputs[k].shape.size())
      raise(ErrorKind::Runtime, op.name, n.name,
            "decomposition gave " + type_str(t) + " where inference said " + type_str(n.outputs[k]));
  }
  // nested composites were expanded first; the outermost one is what the user wrote
  for (size_t id = size_t(first_new); id < nodes_.size(); ++id) {
    Node& made = nodes_[id];
    made.name = n.name + "/" + made.name;
    made.origin_op = n.origin_op;
    made.origin_name = n.origin_name;
  }
  if (expanded_) expanded_(n, first_new, int32_t(nodes_.size()), r);
  return r;
}

ValueRef Graph::add1(const std::string& op, const std::vector<ValueRef>& inputs, Attrs attrs, const std::string& name) {
  auto r = add(op, inputs, std::move(attrs), name);
  if (r.size() != 1) raise(ErrorKind::Runtime, op, name, "expected a single output");
  return r[0];
}

std::vector<ValueRef> schema_inputs(const Node& n) {
  if (n.absent.empty()) return n.inputs;
  std::vector<ValueRef> r;
  size_t k = 0;
  for (char a : n.absent) r.push_back(a ? ValueRef{} : n.inputs.at(k++));
  for (; k < n.inputs.size(); ++k) r.push_back(n.inputs[k]);
  return r;
}

int32_t Graph::append(Node n) {
  n.id = int32_t(nodes_.size());
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

ValueRef Graph::constant(std::shared_ptr<const Array> value, const std::string& name) {
  return add1("constant", {}, {{"value", value}}, name);
}

ValueRef Graph::scalar(double v, DType dtype) {
  auto a = Array::empty(dtype, {});
  store_from_double(a->data(), dtype, 0, v);
  return constant(a);
}

int64_t Graph::add_variable(std::shared_ptr<Array> initial, const std::string& name) {
  std::lock_guard<std::mutex> l(vars_->mu);
  vars_->slots.push_back({name, {initial->dtype, initial->shape}, initial});
  return int64_t(vars_->slots.size() - 1);
}

}  // namespace mg
