#include "core/graph.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>
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
                                 const std::string& name, std::vector<std::shared_ptr<const Region>> regions) {
  const OpDef& op = get_op(opname);
  if (!open_.empty() && op.name == "placeholder")
    raise(ErrorKind::Value, op.name, name, "placeholders are fed from outside: make them before " + open_.back().what);
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
    check_visible(inputs[i], op.name, name);
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
  if (!op.complex)
    for (size_t i = 0; i < in.size(); ++i)
      if (!absent[i] && is_complex(in[i].dtype))
        raise(ErrorKind::Type, op.name, node_name,
              "does not take complex tensors, got " + type_str(in[i]) +
                  (op.inputs.empty() ? std::string() : " for '" + op.input_spec(i).name + "'") +
                  " (real, imag, absolute or cast give real tensors)");
  InferCtx ctx(op, node_name, in, attrs);
  ctx.absent = absent;
  ctx.regions = &regions;
  std::vector<TensorType> outs = op.infer(ctx);
  if (!op.complex)
    for (auto& t : outs)
      if (is_complex(t.dtype)) raise(ErrorKind::Type, op.name, node_name, "cannot make complex tensors (" + type_str(t) + ")");
  for (auto& t : outs) check_shape(t.shape, dtype_size(t.dtype), true, op.name, node_name);
  Node n;
  n.op = &op;
  n.name = node_name;
  n.attrs = std::move(attrs);
  n.outputs = std::move(outs);
  decode_attrs(n);  // after inference normalised the attributes
  n.origin_op = &op;
  n.origin_name = node_name;
  n.regions = std::move(regions);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!absent[i]) n.inputs.push_back(inputs[i]);
  if (std::find(absent.begin(), absent.end(), 1) != absent.end()) n.absent = std::move(absent);
  name_counts_[op.name]++;
  if (op.composite() && expand_ && expand_(n)) return expand_node(n, inputs);
  int32_t id = append(std::move(n));
  std::vector<ValueRef> r;
  for (size_t i = 0; i < nodes_[size_t(id)].outputs.size(); ++i) r.push_back({id, int32_t(i)});
  return r;
}

std::vector<ValueRef> Graph::expand_node(const Node& n, const std::vector<ValueRef>& inputs) {
  const OpDef& op = *n.op;
  const int32_t first_new = int32_t(nodes_.size());
  std::vector<ValueRef> r = op.decompose(*this, n, inputs);
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

Node copy_with_inputs(const Node& s, std::vector<ValueRef> inputs) {
  Node d;
  d.op = s.op;
  d.name = s.name;
  d.attrs = s.attrs;
  d.absent = s.absent;
  d.origin_op = s.origin_op;
  d.origin_name = s.origin_name;
  d.inputs = std::move(inputs);
  d.outputs = s.outputs;
  d.decoded = s.decoded;
  return d;
}

int32_t Graph::append(Node n) {
  n.id = int32_t(nodes_.size());
  // variable reads see the value from before the run wherever they are written: they
  // belong to the top level, and regions capture them
  if (!open_.empty() && n.op->name != "read_variable") n.region = open_.back().id;
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

void Graph::check_visible(ValueRef v, const std::string& op, const std::string& node) const {
  int32_t r = nodes_[size_t(v.node)].region;
  if (r < 0 || region_open_[size_t(r)]) return;
  raise(ErrorKind::Value, op, node,
        "input '" + nodes_[size_t(v.node)].name + "' of type " + type_str(type(v)) + " was made inside " +
            region_what_[size_t(r)] + ", which is closed; return it from that region to use it here");
}

std::vector<TensorType> Region::arg_types() const {
  std::vector<TensorType> r;
  for (size_t i = 0; i < num_args; ++i) r.push_back(body->node(feeds[i]).outputs[0]);
  return r;
}
std::vector<TensorType> Region::capture_types() const {
  std::vector<TensorType> r;
  for (size_t i = num_args; i < feeds.size(); ++i) r.push_back(body->node(feeds[i]).outputs[0]);
  return r;
}
std::vector<TensorType> Region::result_types() const {
  std::vector<TensorType> r;
  for (auto& v : results) r.push_back(body->type(v));
  return r;
}

std::vector<ValueRef> Graph::begin_region(const std::vector<TensorType>& arg_types, const std::string& what) {
  OpenRegion r;
  r.id = int32_t(region_what_.size());
  region_what_.push_back(what);
  region_open_.push_back(1);
  r.what = what;
  r.first = int32_t(nodes_.size());
  open_.push_back(r);
  std::vector<ValueRef> args;
  for (size_t i = 0; i < arg_types.size(); ++i)
    args.push_back(add1("region_argument", {}, {{"shape", arg_types[i].shape}, {"dtype", arg_types[i].dtype}},
                        "arg" + std::to_string(i)));
  open_.back().args = args;
  return args;
}

void Graph::abandon_region() {
  if (open_.empty()) return;
  region_open_[size_t(open_.back().id)] = 0;
  open_.pop_back();
}

std::shared_ptr<Region> Graph::end_region(const std::vector<ValueRef>& results) {
  if (open_.empty()) raise(ErrorKind::Runtime, "end_region", "", "no region is open");
  const OpenRegion scope = open_.back();
  for (auto& v : results) {
    check_ref(v, "region");
    check_visible(v, "region", scope.what);
  }
  open_.pop_back();
  region_open_[size_t(scope.id)] = 0;

  auto reg = std::make_shared<Region>();
  reg->body = std::make_shared<Graph>();
  Graph& body = *reg->body;
  std::unordered_map<int32_t, std::vector<ValueRef>> map;  // outer node -> body values
  std::map<ValueRef, ValueRef> captured;                   // outer value -> body placeholder
  auto feed = [&](const TensorType& t, const std::string& name) {
    ValueRef p = body.add1("placeholder", {}, {{"shape", t.shape}, {"dtype", t.dtype}}, name);
    reg->feeds.push_back(p.node);
    return p;
  };
  for (auto& a : scope.args) map[a.node] = {feed(type(a), nodes_[size_t(a.node)].name)};
  reg->num_args = scope.args.size();
  auto lookup = [&](ValueRef v) -> ValueRef {
    auto it = map.find(v.node);
    if (it != map.end()) return it->second.at(size_t(v.index));
    auto c = captured.find(v);
    if (c != captured.end()) return c->second;
    ValueRef p = feed(type(v), "capture_" + nodes_[size_t(v.node)].name);
    captured[v] = p;
    reg->captures.push_back(v);
    return p;
  };
  std::map<int64_t, ValueRef> assigned;  // the last assign of each variable wins
  for (size_t id = size_t(scope.first); id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (n.region != scope.id || map.count(int32_t(id))) continue;
    std::vector<ValueRef> ins = schema_inputs(n);
    for (auto& v : ins)
      if (v.valid()) v = lookup(v);
    if (n.op->name == "assign_variable") {
      assigned[node_attr<int64_t>(n, "variable")] = ins.at(0);
      continue;
    }
    std::vector<ValueRef> outs = body.add(n.op->name, ins, n.attrs, n.name, n.regions);
    map[int32_t(id)] = outs;
    reg->stateful = reg->stateful || n.op->stateful;
    for (auto& r : n.regions) reg->stateful = reg->stateful || r->stateful;
  }
  for (auto& v : results) reg->results.push_back(lookup(v));
  for (auto& [var, v] : assigned) {
    reg->assigned_variables.push_back(var);
    reg->results.push_back(v);
  }
  return reg;
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
