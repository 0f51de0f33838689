// The graph IR: append-only SSA nodes in creation (= topological) order.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <stdexcept>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/array.h"
#include "core/attrs.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/typed_attrs.h"

namespace mg {

struct OpDef;
class Graph;
struct Region;

struct TensorType {
  DType dtype = DType::Float32;
  Shape shape;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
};
std::string type_str(const TensorType& t);  // "float32(2, 3)"
// Bytes of a tensor of type t (its shape known).
inline size_t nbytes_of(const TensorType& t) { return size_t(num_elements(t.shape)) * dtype_size(t.dtype); }

struct ValueRef {
  int32_t node = -1;
  int32_t index = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const ValueRef& o) const { return node == o.node && index == o.index; }
  bool operator!=(const ValueRef& o) const { return !(*this == o); }
  bool operator<(const ValueRef& o) const { return node < o.node || (node == o.node && index < o.index); }
};

struct Node {
  int32_t id = -1;
  const OpDef* op = nullptr;
  std::string name;
  std::vector<ValueRef> inputs;   // the inputs given (absent optional ones left out)
  Attrs attrs;
  std::shared_ptr<const void> decoded;  // attrs decoded by the op's AttrDecoder (typed_attrs<S>)
  std::vector<TensorType> outputs;
  std::vector<char> absent;       // per schema input: an optional input not given (empty: none)
  // The graph-level op this node implements: itself, or the composite whose decomposition
  // made it at specialisation (profiles and pictures name what the user wrote).
  const OpDef* origin_op = nullptr;
  std::string origin_name;
  // Control flow: the sub-graphs this node runs (if: then/else; while: before/after).
  std::vector<std::shared_ptr<const Region>> regions;
  int32_t region = -1;  // the open region it was built in while building (-1: top level)
};

// Node s (op, name, attributes, types, origin) reading `inputs` instead: for passes that build
// a graph from another's nodes (Graph::append takes it).
Node copy_with_inputs(const Node& s, std::vector<ValueRef> inputs);

// A control-flow region: a sub-graph built once from a Python callable. Its feeds are its
// arguments followed by the values it captured from the enclosing scopes; the node that
// owns it lists those captured values among its inputs.
struct Region {
  std::shared_ptr<Graph> body;
  std::vector<int32_t> feeds;            // body placeholders: arguments, then captures
  size_t num_args = 0;
  std::vector<ValueRef> results;         // in body
  std::vector<ValueRef> captures;        // in the graph that built it
  // Variables assigned inside the region: the value each ends with is results[k] for the
  // k-th entry (control-flow ops turn these into outputs assigned after the op).
  std::vector<int64_t> assigned_variables;
  bool stateful = false;  // holds a stateful op (random numbers), in it or a nested region
  std::vector<TensorType> arg_types() const;
  std::vector<TensorType> capture_types() const;
  std::vector<TensorType> result_types() const;
};

// A node's inputs in schema order, with an invalid ref where an optional one is absent.
std::vector<ValueRef> schema_inputs(const Node& n);

// Variable state shared by a graph and the executables compiled from it. Reads in one
// run see the value from before the run: an assign replaces the Array, it never writes
// into the one readers hold.
struct VariableSlot {
  std::string name;
  TensorType type;
  std::shared_ptr<Array> value;
};
struct VariableStore {
  std::mutex mu;
  // Held for a whole run by executables that assign variables, so that concurrent runs
  // that read and assign the same variable are serialised and no update is lost.
  std::mutex run_mu;
  std::vector<VariableSlot> slots;
  std::shared_ptr<Array> get(int64_t id) {
    std::lock_guard<std::mutex> l(mu);
    return slots.at(size_t(id)).value;
  }
  void set(int64_t id, std::shared_ptr<Array> v) {
    std::lock_guard<std::mutex> l(mu);
    slots.at(size_t(id)).value = std::move(v);
  }
};

class Graph {
 public:
  Graph();
  uint64_t uid() const { return uid_; }

  // Builds a node: fills attribute defaults, checks the schema, infers output types.
  // Throws GraphError naming op, node and shapes; on error the graph is unchanged.
  std::vector<ValueRef> add(const std::string& op, const std::vector<ValueRef>& inputs, Attrs attrs = {},
                            const std::string& name = "",
                            std::vector<std::shared_ptr<const Region>> regions = {});
  ValueRef add1(const std::string& op, const std::vector<ValueRef>& inputs, Attrs attrs = {},
                const std::string& name = "");

  size_t size() const { return nodes_.size(); }
  const Node& node(int32_t id) const { return nodes_.at(size_t(id)); }
  const TensorType& type(ValueRef v) const { return nodes_.at(size_t(v.node)).outputs.at(size_t(v.index)); }
  void check_ref(ValueRef v, const std::string& op) const;

  // Convenience for constants and variables (payload copied into owned memory unless given).
  ValueRef constant(std::shared_ptr<const Array> value, const std::string& name = "");
  ValueRef scalar(double v, DType dtype);
  int64_t add_variable(std::shared_ptr<Array> initial, const std::string& name);
  std::shared_ptr<VariableStore> variables() const { return vars_; }

  // Control-flow regions. Nodes added between begin_region and end_region form the region's
  // body; tensors they use from outside become its captures. Regions nest. A tensor made
  // inside a closed region is invisible outside it (add refuses it, naming both).
  std::vector<ValueRef> begin_region(const std::vector<TensorType>& arg_types, const std::string& what);
  std::shared_ptr<Region> end_region(const std::vector<ValueRef>& results);
  void abandon_region();  // the callable raised: drop the region (its nodes stay unreachable)
  bool in_region() const { return !open_.empty(); }

  // Building (add, regions, gradients) takes this exclusively and compiling takes it shared,
  // so a graph can be built on one thread while another compiles or runs it: the bindings
  // lock it around every mutation, the runtime around every specialisation.
  std::shared_mutex& build_mutex() const { return build_mu_; }

  // Appends an already-checked node (used by passes building specialised graphs).
  int32_t append(Node n);

  // Composites for which this returns true are expanded into their decomposition as they
  // are added (specialisation sets it from the backend); by default every composite stays.
  using ExpandPredicate = std::function<bool(const Node&)>;
  void set_expand(ExpandPredicate p) { expand_ = std::move(p); }
  // Told when a composite's expansion is complete: its decomposition made the nodes
  // [first, end) of this graph and its outputs are `outputs`. Composites nested in a
  // decomposition are told before the one holding them (pictures group nodes by it).
  using ExpandObserver = std::function<void(const Node& composite, int32_t first, int32_t end,
                                            const std::vector<ValueRef>& outputs)>;
  void set_expand_observer(ExpandObserver o) { expanded_ = std::move(o); }

 private:
  std::vector<ValueRef> expand_node(const Node& n, const std::vector<ValueRef>& inputs);
  void check_visible(ValueRef v, const std::string& op, const std::string& node) const;
  struct OpenRegion {
    int32_t id;
    int32_t first;  // first node of the region
    std::vector<ValueRef> args;
    std::string what;  // "the then block of if_then_else", for messages
  };
  std::vector<OpenRegion> open_;
  std::vector<std::string> region_what_;  // per region id ever opened
  std::vector<char> region_open_;
  ExpandPredicate expand_;
  ExpandObserver expanded_;
  uint64_t uid_;
  std::deque<Node> nodes_;  // deque: references stay valid while rules append nodes
  std::unordered_map<std::string, int> name_counts_;
  std::shared_ptr<VariableStore> vars_;
  mutable std::shared_mutex build_mu_;
};

}  // namespace mg

namespace mg {
// By-name attribute access, for the ops that have no typed attributes yet (typed_attrs.h).
template <class T>
const T& node_attr(const Node& n, const std::string& name) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end() || !std::holds_alternative<T>(it->second))
    throw std::logic_error("node '" + n.name + "' lacks attribute '" + name + "' of the expected kind");
  return std::get<T>(it->second);
}
inline bool node_has_attr(const Node& n, const std::string& name) { return n.attrs.count(name) > 0; }
}  // namespace mg
