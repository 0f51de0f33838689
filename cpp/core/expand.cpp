#include "core/expand.h"

#include <cstdint>
#include <exception>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/registry.h"

namespace mg {

namespace {

// One attempt; throws (naming the source node in `failed`) when a decomposition fails.
Expansion expand_once(const Graph& src, const std::function<bool(const Node&)>& expand, const std::set<int32_t>& keep,
                      int32_t& failed) {
  Expansion out;
  out.graph = std::make_shared<Graph>();
  Graph& dst = *out.graph;
  const size_t n = src.size();
  out.outputs.resize(n);
  out.first.assign(n, 0);
  out.end.assign(n, 0);
  std::vector<int32_t> open;  // groups whose decomposition is being built, innermost last
  int32_t current = -1;       // the source node being added
  dst.set_expand([&](const Node& c) {
    if (open.empty() && keep.count(current)) return false;
    if (expand && !expand(c)) return false;
    ExpansionGroup gr;
    gr.op = c.op;
    gr.name = open.empty() ? c.name : out.groups[size_t(open.back())].name + "/" + c.name;
    gr.attrs = c.attrs;
    gr.inputs = schema_inputs(c);
    gr.types = c.outputs;
    gr.first = int32_t(dst.size());
    gr.parent = open.empty() ? -1 : open.back();
    gr.source = open.empty() ? current : -1;
    out.groups.push_back(std::move(gr));
    open.push_back(int32_t(out.groups.size() - 1));
    return true;
  });
  dst.set_expand_observer([&](const Node&, int32_t first, int32_t end, const std::vector<ValueRef>& outputs) {
    ExpansionGroup& gr = out.groups.at(size_t(open.back()));
    gr.end = end;
    gr.outputs = outputs;
    open.pop_back();
  });
  for (size_t id = 0; id < n; ++id) {
    const Node& s = src.node(int32_t(id));
    std::vector<ValueRef> ins = schema_inputs(s);
    for (auto& v : ins)
      if (v.valid()) v = out.outputs[size_t(v.node)].at(size_t(v.index));
    current = int32_t(id);
    out.first[id] = int32_t(dst.size());
    try {
      out.outputs[id] = dst.add(s.op->name, ins, s.attrs, s.name, s.regions);
    } catch (const std::exception&) {
      if (!s.op->composite() || keep.count(current)) throw;  // the source graph itself was fine
      failed = current;
      throw;
    }
    out.end[id] = int32_t(dst.size());
  }
  dst.set_expand(nullptr);
  dst.set_expand_observer(nullptr);
  return out;
}

}  // namespace

Expansion expand_composites(const Graph& src, const std::function<bool(const Node&)>& expand) {
  std::set<int32_t> keep;
  for (;;) {
    int32_t failed = -1;
    try {
      Expansion e = expand_once(src, expand, keep, failed);
      e.kept.assign(keep.begin(), keep.end());
      return e;
    } catch (const std::exception&) {
      // A decomposition that needs what the declared types do not say (a known dim):
      // show that composite folded and build the copy again (the failed attempt left
      // nodes behind in its graph).
      if (failed < 0) throw;
      keep.insert(failed);
    }
  }
}

}  // namespace mg
