// Fusion groups of elementwise nodes, shared by the backends that fuse (the CPU's tiled
// register programs, CUDA's generated kernels): each backend says which nodes it can fuse and
// how large a group may grow; the grouping rule is the same everywhere.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/graph.h"

namespace mg {

struct FusionPlan {
  std::vector<int32_t> group_of;             // per node: its group, or -1
  std::vector<std::vector<int32_t>> groups;  // node ids, ascending; the last is the root
};

struct FusionRules {
  std::function<bool(const Node&)> fusible;                   // one output, whose shape the group takes
  std::function<bool(const std::vector<int32_t>&)> fits;      // a merged group (unsorted) is allowed
  // whether a node's operand k is read as a value (empty: every operand); one read for its
  // shape only (broadcast_like's second) never pulls its producer into the group
  std::function<bool(const Node&, size_t)> reads;
};

// Groups of two or more nodes: a fusible node joins its consumer's group when the consumer is
// fusible, reads it as an operand of the consumer's shape, is its only reader, and it is not a
// target. Nodes marked in `skip` are left alone.
FusionPlan plan_fusion_groups(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip,
                              const FusionRules& rules);

}  // namespace mg
