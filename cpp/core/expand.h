// An expanded copy of a graph, for pictures and inspection: composites replaced by their
// decompositions (recursively), with a record of which new nodes each composite became.
// Unlike specialisation nothing is fed, pruned, folded or merged: shapes stay as
// declared (unknown dims stay unknown) and every node of the source is kept.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"

namespace mg {

// One composite that was expanded: the node it would have been, and where it went.
struct ExpansionGroup {
  const OpDef* op = nullptr;
  std::string name;                 // its node name; "outer/inner" for one nested in a decomposition
  Attrs attrs;
  std::vector<ValueRef> inputs;     // schema order, in the expanded graph (invalid: absent optional input)
  std::vector<TensorType> types;    // its output types as inferred for the composite
  std::vector<ValueRef> outputs;    // its outputs in the expanded graph
  int32_t first = 0, end = 0;       // the nodes its decomposition made: [first, end)
  int32_t parent = -1;              // the group whose decomposition holds it; -1: none
  int32_t source = -1;              // its node in the source graph (-1 for a nested one)
};

struct Expansion {
  std::shared_ptr<Graph> graph;
  // Per source node: its outputs in the expanded graph and the nodes it became [first, end)
  // (one node for an op that is not expanded; a composite's whole decomposition otherwise).
  std::vector<std::vector<ValueRef>> outputs;
  std::vector<int32_t> first, end;
  std::vector<ExpansionGroup> groups;  // pre-order: a group comes before the ones nested in it
  std::vector<int32_t> kept;           // source composites left folded: their decomposition failed
};

// Expands every composite for which `expand` says yes (all when it is empty). A composite
// whose decomposition cannot be built from the declared types (an unknown dim it needs)
// stays folded and is listed in `kept`.
Expansion expand_composites(const Graph& src, const std::function<bool(const Node&)>& expand = nullptr);

}  // namespace mg
