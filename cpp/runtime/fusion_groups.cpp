#include "runtime/fusion_groups.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mg {

FusionPlan plan_fusion_groups(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip,
                              const FusionRules& rules) {
  const size_t n = g.size();
  FusionPlan p;
  p.group_of.assign(n, -1);
  std::vector<int64_t> uses(n, 0);
  for (size_t id = 0; id < n; ++id)
    for (const ValueRef& v : g.node(int32_t(id)).inputs) ++uses[size_t(v.node)];
  for (const ValueRef& v : targets) uses[size_t(v.node)] += 2;  // a target is never an intermediate
  std::vector<std::vector<int32_t>> groups;
  for (size_t id = 0; id < n; ++id) {
    const Node& nd = g.node(int32_t(id));
    if (skip[id] || !rules.fusible(nd)) continue;
    const Shape& shape = nd.outputs[0].shape;
    std::vector<int32_t> members{int32_t(id)};
    std::vector<int> absorbed;
    for (size_t k = 0; k < nd.inputs.size(); ++k) {
      const ValueRef& v = nd.inputs[k];
      if (rules.reads && !rules.reads(nd, k)) continue;
      const int gi = p.group_of[size_t(v.node)];
      if (gi < 0 || uses[size_t(v.node)] != 1 || g.type(v).shape != shape) continue;
      if (std::find(absorbed.begin(), absorbed.end(), gi) != absorbed.end()) continue;
      std::vector<int32_t> merged = members;
      merged.insert(merged.end(), groups[size_t(gi)].begin(), groups[size_t(gi)].end());
      if (!rules.fits(merged)) continue;
      absorbed.push_back(gi);
      members = std::move(merged);
    }
    std::sort(members.begin(), members.end());
    const int gid = int(groups.size());
    for (int gi : absorbed) groups[size_t(gi)].clear();
    for (int32_t m : members) p.group_of[size_t(m)] = gid;
    groups.push_back(std::move(members));
  }
  // keep groups of two or more; renumber
  std::fill(p.group_of.begin(), p.group_of.end(), -1);
  for (auto& gr : groups) {
    if (gr.size() < 2) continue;
    for (int32_t m : gr) p.group_of[size_t(m)] = int32_t(p.groups.size());
    p.groups.push_back(std::move(gr));
  }
  return p;
}

}  // namespace mg
