// Control flow: if/while/for built from regions (graph.h), and what backends need to run
// a region: its body retyped for concrete feeds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"

namespace mg {

// The op-level builders. Each takes closed regions (Graph::end_region) and adds the control-
// flow node plus, for variables assigned inside a region, the assigns that land after it.
//   then/else: no arguments; results of matching dtypes and ranks.
//   before: arguments = initial's types; results = (bool scalar predicate, passed values...).
//   after: arguments = the passed values' types; results = initial's types (loop-carried).
//   for body: arguments = (int32 index, initial's types...); results = initial's types.
std::vector<ValueRef> build_if(Graph& g, ValueRef predicate, std::shared_ptr<const Region> then_region,
                               std::shared_ptr<const Region> else_region, const std::string& name);
std::vector<ValueRef> build_while(Graph& g, const std::vector<ValueRef>& initial,
                                  std::shared_ptr<const Region> before, std::shared_ptr<const Region> after,
                                  const std::string& name, bool checkpoint);
std::vector<ValueRef> build_for(Graph& g, ValueRef lower, ValueRef upper, ValueRef step,
                                const std::vector<ValueRef>& initial, std::shared_ptr<const Region> body,
                                const std::string& name, bool checkpoint);

// The entries of `items` whose flag, counted from flags[at], is set: the captured values of a
// while_loop_vjp's before and after blocks that get a gradient (attribute wanted_captures).
template <class T>
std::vector<T> wanted_entries(const std::vector<T>& items, const std::vector<int64_t>& flags, size_t at) {
  std::vector<T> r;
  for (size_t k = 0; k < items.size(); ++k)
    if (at + k < flags.size() && flags[at + k]) r.push_back(items[k]);
  return r;
}

// Copies a region's body into `dst` with `feeds` (arguments, then captures) standing for its
// placeholders; returns the values of its results.
std::vector<ValueRef> inline_region(Graph& dst, const Region& r, const std::vector<ValueRef>& feeds);

// The result types of a region whose feeds have the given (possibly more concrete) types.
std::vector<TensorType> region_result_types(const Region& r, const std::vector<TensorType>& feed_types,
                                            const std::string& op, const std::string& node);

}  // namespace mg
