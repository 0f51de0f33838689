// The graph IR: append-only SSA nodes in creation (= topological) order.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
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

namespace mg {

struct OpDef;

struct TensorType {
  DType dtype = DType::Float32;
  Shape shape;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
};
std::string type_str(const TensorType& t);  // "float32(2, 3)"

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
  std::vector<ValueRef> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
};

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
                            const std::string& name = "");
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

  // Appends an already-checked node (used by passes building specialised graphs).
  int32_t append(Node n);

 private:
  uint64_t uid_;
  std::deque<Node> nodes_;  // deque: references stay valid while rules append nodes
  std::unordered_map<std::string, int> name_counts_;
  std::shared_ptr<VariableStore> vars_;
};

}  // namespace mg

namespace mg {
// Typed attribute access for kernels and lowerings (inference filled every default).
template <class T>
const T& node_attr(const Node& n, const std::string& name) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end() || !std::holds_alternative<T>(it->second))
    throw std::logic_error("node '" + n.name + "' lacks attribute '" + name + "' of the expected kind");
  return std::get<T>(it->second);
}
inline bool node_has_attr(const Node& n, const std::string& name) { return n.attrs.count(name) > 0; }
}  // namespace mg
