// Specialisation: fix every shape from the feeds, prune to the targets, fold constants
// and merge common subexpressions. The result is what backends compile (when complete():
// the outputs of data-dependent nodes stay unknown until they run).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/graph.h"

namespace mg {

// Evaluates one node on constant inputs (a backend implements it; core knows none, and
// the runtime passes one in).
class ConstantEvaluator {
 public:
  virtual ~ConstantEvaluator() = default;
  virtual std::vector<std::shared_ptr<Array>> evaluate(const Node& node,
                                                       const std::vector<std::shared_ptr<const Array>>& inputs) = 0;
};

struct Specialised {
  std::shared_ptr<Graph> graph;          // concrete shapes, topological order (see `data_dependent`)
  std::shared_ptr<VariableStore> vars;   // the source graph's variable state
  // node per feed, in feed order (-1 if unused): the placeholders fed, then the value feeds
  std::vector<int32_t> feeds;
  std::vector<ValueRef> targets;
  std::vector<int32_t> target_ops;
  ConstantEvaluator* evaluator = nullptr;  // the one specialisation used; backends may use it too
  // Data-dependent nodes (OpDef::data_dependent) whose outputs are known only once they run,
  // in graph order. Empty: every shape is concrete and a backend can compile the graph.
  // Otherwise the nodes downstream of these have unknown dims where they depend on them, and
  // the runtime runs the graph in stages (runtime/executable.h).
  std::vector<int32_t> data_dependent;
  bool complete() const { return data_dependent.empty(); }
};

// Values of the source graph given at run time with concrete types, as if computed: the
// node making a fed value is replaced by a placeholder per fed output (its inputs are not
// computed for it), and every output of that node that is needed must be fed. The runtime
// feeds the values an earlier stage computed, and a data-dependent node's results.
struct ValueFeeds {
  std::vector<ValueRef> values;
  std::vector<TensorType> types;
};

struct SpecialiseOptions {
  bool fold_constants = true;
  bool merge_common = true;
  int64_t fold_max_elements = 1 << 16;  // larger results stay computed at run time
};

// Says whether a backend runs a composite node natively; the others are expanded into
// their decompositions at specialisation.
using CompositePredicate = std::function<bool(const Node&)>;

Specialised specialise(const Graph& src, const std::vector<int32_t>& feed_nodes,
                       const std::vector<TensorType>& feed_types, const std::vector<ValueRef>& targets,
                       const std::vector<int32_t>& target_ops, ConstantEvaluator* evaluator,
                       const CompositePredicate& native = nullptr, const SpecialiseOptions& opts = {},
                       const ValueFeeds& value_feeds = {});

// Checks a concrete feed against a placeholder's declared type; throws naming both.
void check_feed(const Node& placeholder, const TensorType& feed);

}  // namespace mg
