// The op registry: one entry per op kind owns its schema, inference, gradient and docs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/typed_attrs.h"

namespace mg {

// What a backend may assume about an input's values.
enum class InputRole {
  Data,       // read as values
  ShapeOnly,  // only its type is used (sum_to_like's `like`, gradients' shape sources)
  Index,      // integer positions into another input (gather, one_hot); never a scalar's dtype source
  Predicate,  // a bool mask choosing between values (select); never a scalar's dtype source
};
const char* input_role_name(InputRole r);

struct InputSpec {
  std::string name;
  bool variadic = false;  // takes a list of tensors (concat, stack)
  bool optional = false;  // may be absent; composite ops only (the node records which are)
  InputRole role = InputRole::Data;
};

struct AttrSpec {
  std::string name;
  AttrKind kind;
  AttrValue default_value;  // AttrNone: required, unless `optional`
  bool optional = false;    // may be absent (None in Python)
  std::string doc;
};

class InferCtx {
 public:
  InferCtx(const OpDef& op, const std::string& node, const std::vector<TensorType>& in, Attrs& attrs)
      : op(op), node(node), in(in), attrs(attrs) {}
  const OpDef& op;
  const std::string& node;
  const std::vector<TensorType>& in;
  Attrs& attrs;  // inference may normalise attributes (e.g. negative axes)
  std::vector<char> absent;  // per input: an optional input that was not given
  const std::vector<std::shared_ptr<const Region>>* regions = nullptr;  // control flow: the node's regions
  bool present(size_t i) const { return i >= absent.size() || !absent[i]; }

  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const;
  bool has(const std::string& name) const;
  int64_t i(const std::string& name) const;
  double f(const std::string& name) const;
  bool b(const std::string& name) const;
  const std::string& s(const std::string& name) const;
  const std::vector<int64_t>& ints(const std::string& name) const;
  const std::vector<double>& floats(const std::string& name) const;
  DType dtype(const std::string& name) const;
  const std::shared_ptr<const Array>& tensor(const std::string& name) const;

  // Shared checks that give uniform messages.
  void same_dtype(size_t a, size_t b) const;                    // inputs a and b
  Shape broadcast(const std::vector<size_t>& idx) const;        // broadcast of inputs
  int64_t axis(int64_t axis, int64_t rank) const;              // normalised or error
  std::vector<int64_t> axes(const std::vector<int64_t>& axes, int64_t rank) const;  // sorted unique
};

class GradCtx {
 public:
  Graph& g;
  const Node& node;                 // the forward node
  const std::vector<ValueRef>& dy;  // one per output; invalid ref = zero gradient
  std::vector<char> wanted = {};    // per input: its gradient is needed (empty: all are)
  bool wants(size_t i) const { return wanted.empty() || wanted.at(i); }
  ValueRef x(size_t i) const { return node.inputs.at(i); }
  ValueRef y(size_t i = 0) const { return ValueRef{node.id, int32_t(i)}; }
};

using InferFn = std::function<std::vector<TensorType>(InferCtx&)>;
using GradFn = std::function<std::vector<ValueRef>(GradCtx&)>;  // one per input; invalid = none
// A composite op's decomposition into other ops. The composite node stays in the graph
// until specialisation, where each backend either runs it natively or has it expanded;
// without a gradient rule of its own, its gradient is that of its decomposition.
// `inputs` holds one entry per schema input (an invalid ref for an absent optional one).
using ExpandFn = std::function<std::vector<ValueRef>(Graph&, const std::vector<ValueRef>& inputs, const Attrs& attrs)>;
// A composite whose decomposition needs the node itself (control flow: its regions).
using ExpandNodeFn = std::function<std::vector<ValueRef>(Graph&, const Node&, const std::vector<ValueRef>& inputs)>;
// Value of an op known from input types alone (shape_of); lets specialisation fold it.
using FoldTypesFn = std::function<std::shared_ptr<Array>(const std::vector<TensorType>&, const Attrs&)>;

enum class Differentiable { Unset, Yes, No };

struct OpDef {
  std::string name;          // snake_case MPSGraph name, e.g. "matrix_multiplication"
  std::string doc;
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;
  AttrDecoder decode;        // set: the struct kernels and lowerings read (typed_attrs.h)
  InferFn infer;
  GradFn grad;
  Differentiable differentiable = Differentiable::Unset;
  bool stateful = false;     // never folded or merged (variables, random)
  bool python_method = true; // generated as a Graph method
  bool multi_output = false; // Python returns a tuple even when there is one output (split)
  std::vector<std::string> aliases;  // extra Python names (numpy style)
  std::string family;        // "elementwise", "reduction", ... for docs and tables
  FoldTypesFn fold_types;
  ExpandFn expand;           // set: a composite (see ExpandFn)
  ExpandNodeFn expand_node;  // set: a composite decomposed from the whole node
  bool view = false;         // output 0 is input 0's bytes under another shape: backends may alias it
  // Set: the output dims this node's `infer` leaves unknown (-1) are known only after the node
  // runs (non_zero_indices). Specialisation keeps them unknown; the runtime runs the graph in
  // stages around such nodes (Backend::run_data_dependent) and specialises the rest afterwards.
  std::function<bool(const Node&)> data_dependent;
  // Takes or makes complex tensors. Nodes of other ops with a complex input or output are
  // refused when they are made, so their kernels never see one.
  bool complex = false;
  // Set: index i of every output's axis 0 is computed from index i of the batched inputs' axis
  // 0 alone, the other inputs read whole: the op keeps a batch's samples apart. `batched[k]`
  // says input k carries the batch (dim 0 is the batch size, as in every output); the others
  // hold no sample's data (weights, biases). A backend may run such nodes sample by sample
  // (the CPU runs the front of a batched network one image per thread).
  std::function<bool(const Node&, const std::vector<TensorType>& in, const std::vector<char>& batched)> per_sample;
  bool composite() const { return bool(expand) || bool(expand_node); }
  // The decomposition of node n (of this op) with `inputs` in schema order.
  std::vector<ValueRef> decompose(Graph& g, const Node& n, const std::vector<ValueRef>& inputs) const {
    return expand_node ? expand_node(g, n, inputs) : expand(g, inputs, n.attrs);
  }
  bool is_data_dependent(const Node& n) const { return data_dependent && data_dependent(n); }
  const InputSpec& input_spec(size_t i) const;  // variadic inputs share the last spec
};

// Node n's output types inferred again from its inputs' types `in` (a pass that changed them),
// its attributes normalised and decoded again. Throws as Graph::add does.
void infer_again(Node& n, const std::vector<TensorType>& in);

// per_sample rules shared by op families. Broadcasting ops: batched inputs have the output's
// rank, the others fewer dims or a size-1 dim 0 (never a sample's values). Whole-input ops
// whose input 0 carries the batch and the others are parameters (convolution).
bool per_sample_broadcast(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched);
bool per_sample_first_input(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched);

// Registers a definition. Refuses float-capable ops with neither a gradient rule nor an
// explicit not-differentiable mark.
void register_op(OpDef def);
// Marks an op registered earlier as taking complex tensors (OpDef::complex): for ops whose
// kernels only move bytes (reshape, slice, concat...), listed with the complex family.
void accept_complex(const std::string& name);
const OpDef* find_op(const std::string& name);
const OpDef& get_op(const std::string& name);  // throws for unknown ops
std::vector<const OpDef*> all_ops();

}  // namespace mg
