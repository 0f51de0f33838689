#include "backends/cpu/image_split.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "backends/cpu/cpu_backend.h"
#include "core/registry.h"

namespace mg::cpu {

namespace {

// A layer joins the front when an image's activations (what it reads and writes) outweigh its
// weights, are not tiny, and its arithmetic per byte is low enough that keeping them in cache
// pays. Measured on a 2-core AVX-512 Xeon with 2 MiB L2 a core, one image a thread against the
// batch on both: MobileNetV2's layers down to 14x14 (200-600 KiB an image at 14x14) ran
// 1.1-1.75x faster, its 7x7 layers (weights larger than an image's activations) level;
// ResNet-18's stem and pool faster, its 3x3 layers (over 100 flops a byte) level or slower; the
// small CNN's second 3x3 layer (96 flops a byte, 64x64 images) slower.
constexpr double kMinImageBytes = 64 * 1024;
constexpr double kMaxFlopsPerByte = 64;

// Values computed from parameters alone (a variable's weights transposed) are computed again
// by each image's run when no larger than this.
constexpr double kMaxRecomputedBytes = 1 << 20;

enum Kind : char {
  kOutside,  // computed outside the front
  kWhole,    // read whole by every image: constants, variables, unbatched feeds
  kBatched,  // a batched feed
  kFront,    // made by the front
};

bool elementwise(const Node& n) { return n.op->family == "elementwise" || n.op->family == "activation"; }

// Whether node n, with these inputs, is worth running one image at a time.
bool pays_per_image(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched, int64_t N) {
  double act = 0, weights = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    if (batched[k]) act += double(nbytes_of(in[k])) / double(N);
    else weights += double(nbytes_of(in[k]));
  }
  for (auto& t : n.outputs) act += double(nbytes_of(t)) / double(N);
  if (weights > act) return false;
  if (elementwise(n)) return true;  // follows its producer (a convolution keeps its epilogue)
  if (act < kMinImageBytes) return false;
  if (n.op->name == "convolution" && in.size() >= 2 && !in[1].shape.empty() && in[1].shape[0] > 0) {
    const double taps = double(num_elements(in[1].shape)) / double(in[1].shape[0]);  // C/groups * kernel
    const double flops = 2.0 * double(num_elements(n.outputs[0].shape)) / double(N) * taps;
    if (flops > kMaxFlopsPerByte * act) return false;
  }
  return true;
}

std::vector<ValueRef> outputs_of(int32_t id, size_t count) {
  std::vector<ValueRef> r;
  for (size_t k = 0; k < count; ++k) r.push_back({id, int32_t(k)});
  return r;
}

// Marks the front for batch size N (kind: per node); returns how many of its layers are not
// elementwise.
int plan_front(const Graph& g, const std::vector<int>& feed_of, int64_t N, std::vector<Kind>& kind) {
  kind.assign(g.size(), kOutside);
  int heavy = 0;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    const std::string& op = n.op->name;
    if (op == "placeholder") {
      const Shape& s = n.outputs[0].shape;
      if (feed_of[id] >= 0) kind[id] = !s.empty() && s[0] == N ? kBatched : kWhole;
      continue;
    }
    if (op == "constant" || op == "read_variable") {
      kind[id] = kWhole;
      continue;
    }
    if (n.op->stateful || n.outputs.empty()) continue;
    const bool from_parameters = std::all_of(n.inputs.begin(), n.inputs.end(),
                                             [&](ValueRef v) { return kind[size_t(v.node)] == kWhole; });
    if (from_parameters) {  // weights in another layout, say: recomputed by each image's run, so kept small
      double bytes = 0;
      for (auto& t : n.outputs) bytes += double(nbytes_of(t));
      if (!n.inputs.empty() && bytes <= kMaxRecomputedBytes) kind[id] = kWhole;
      continue;
    }
    if (!n.op->per_sample) continue;
    bool ok = true, any = false;
    for (auto& t : n.outputs) ok = ok && !t.shape.empty() && t.shape[0] == N;
    std::vector<TensorType> in;
    std::vector<char> batched;
    for (auto& v : n.inputs) {
      const Kind k = kind[size_t(v.node)];
      ok = ok && k != kOutside;
      batched.push_back(char(k == kBatched || k == kFront));
      any = any || batched.back();
      in.push_back(g.type(v));
    }
    if (!ok || !any || !n.op->per_sample(n, in, batched) || !pays_per_image(n, in, batched, N)) continue;
    kind[id] = kFront;
    heavy += elementwise(n) ? 0 : 1;
  }
  return heavy;
}

}  // namespace

std::optional<ImageSplit> plan_image_split(const Specialised& sg, int threads) {
  if (threads < 1 || !sg.complete() || !sg.target_ops.empty() || switched_off("MPSGRAPH_CPU_IMAGE_SPLIT")) return {};
  const Graph& g = *sg.graph;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    if (!n.regions.empty() || n.op->name == "assign_variable") return {};  // run order matters there
  }
  std::vector<int> feed_of(g.size(), -1);
  std::vector<int64_t> batches;  // dim 0 of each fed placeholder of rank >= 2: the batch is one of them
  for (size_t i = 0; i < sg.feeds.size(); ++i) {
    if (sg.feeds[i] < 0) continue;
    feed_of[size_t(sg.feeds[i])] = int(i);
    const Shape& s = g.type({sg.feeds[i], 0}).shape;
    if (s.size() >= 2 && s[0] >= 2 && std::find(batches.begin(), batches.end(), s[0]) == batches.end())
      batches.push_back(s[0]);
  }
  int64_t N = 0;
  int heavy = 0;
  std::vector<Kind> kind;
  for (int64_t batch : batches) {
    const int64_t rounds = (batch + threads - 1) / threads;
    if (5 * batch < 4 * rounds * threads) continue;  // some threads would idle through the front
    std::vector<Kind> k;
    const int h = plan_front(g, feed_of, batch, k);
    if (h > heavy) {
      N = batch;
      heavy = h;
      kind = std::move(k);
    }
  }
  if (heavy < 2) return {};

  ImageSplit split;
  split.batch = N;
  // the frontier: front values read past the front, or targets
  std::map<ValueRef, size_t> frontier;
  auto add_frontier = [&](ValueRef v) {
    if (kind[size_t(v.node)] != kFront || frontier.count(v)) return;
    frontier.emplace(v, split.frontier_types.size());
    split.frontier_types.push_back(g.type(v));
    split.frontier_target.push_back(-1);
  };
  std::vector<char> rest_live(g.size(), 0);  // nodes the rest computes or feeds
  for (auto& t : sg.targets) rest_live[size_t(t.node)] = kind[size_t(t.node)] != kFront;
  for (size_t id = g.size(); id-- > 0;) {
    if (!rest_live[id] || kind[id] == kFront) continue;
    for (auto& v : g.node(int32_t(id)).inputs) {
      rest_live[size_t(v.node)] = 1;
      add_frontier(v);
    }
  }
  for (size_t t = 0; t < sg.targets.size(); ++t) {
    const ValueRef v = sg.targets[t];
    if (kind[size_t(v.node)] != kFront) {
      split.rest_target.push_back(t);
      continue;
    }
    add_frontier(v);
    const size_t f = frontier.at(v);
    if (split.frontier_target[f] < 0) split.frontier_target[f] = int(t);
    else split.target_copies.push_back({t, f});
  }
  std::vector<ValueRef> frontier_values(frontier.size());
  for (auto& [v, f] : frontier) frontier_values[f] = v;

  // the front: one image's graph, types inferred again from one image's feeds
  std::vector<char> front_live(g.size(), 0);
  for (auto& v : frontier_values) front_live[size_t(v.node)] = 1;
  for (size_t id = g.size(); id-- > 0;)
    if (front_live[id])
      for (auto& v : g.node(int32_t(id)).inputs) front_live[size_t(v.node)] = 1;
  auto front_graph = std::make_shared<Graph>();
  std::vector<std::vector<ValueRef>> map(g.size());
  for (size_t id = 0; id < g.size(); ++id) {
    if (!front_live[id]) continue;
    const Node& n = g.node(int32_t(id));
    if (n.op->name == "placeholder") {
      TensorType t = n.outputs[0];
      if (kind[id] == kBatched) t.shape[0] = 1;
      map[id] = {front_graph->add1("placeholder", {}, {{"shape", t.shape}, {"dtype", t.dtype}}, n.name)};
      split.front.feeds.push_back(map[id][0].node);
      split.front_feed.push_back(size_t(feed_of[id]));
      split.front_feed_batched.push_back(char(kind[id] == kBatched));
      continue;
    }
    std::vector<ValueRef> ins;
    for (auto& v : n.inputs) ins.push_back(map[size_t(v.node)].at(size_t(v.index)));
    Node d = copy_with_inputs(n, ins);
    if (kind[id] == kFront) {
      std::vector<TensorType> in;
      for (auto& v : ins) in.push_back(front_graph->type(v));
      try {
        infer_again(d, in);
      } catch (const GraphError&) {
        return {};  // attributes that name the batch's size: the batch stays whole
      }
      for (size_t k = 0; k < d.outputs.size(); ++k) {  // one image of what the batch gave
        Shape want = n.outputs[k].shape;
        want[0] = 1;
        if (d.outputs[k].shape != want || d.outputs[k].dtype != n.outputs[k].dtype) return {};
      }
    }
    const size_t count = d.outputs.size();
    map[id] = outputs_of(front_graph->append(std::move(d)), count);
  }
  split.front.graph = front_graph;
  split.front.vars = sg.vars;
  split.front.evaluator = sg.evaluator;
  for (auto& v : frontier_values) split.front.targets.push_back(map[size_t(v.node)].at(size_t(v.index)));

  // the rest: the batch's graph as it was, the frontier fed
  auto rest_graph = std::make_shared<Graph>();
  std::vector<std::vector<ValueRef>> rmap(g.size());
  split.rest.feeds.assign(sg.feeds.size(), -1);
  for (size_t id = 0; id < g.size(); ++id) {
    if (!rest_live[id]) continue;
    const Node& n = g.node(int32_t(id));
    if (kind[id] == kFront) {
      rmap[id].resize(n.outputs.size());
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        auto f = frontier.find({int32_t(id), int32_t(k)});
        if (f == frontier.end()) continue;
        const TensorType& t = n.outputs[k];
        rmap[id][k] = rest_graph->add1("placeholder", {}, {{"shape", t.shape}, {"dtype", t.dtype}},
                                       n.outputs.size() == 1 ? n.name : n.name + ":" + std::to_string(k));
        split.rest.feeds.push_back(rmap[id][k].node);
        split.rest_frontier.push_back(f->second);
      }
      continue;
    }
    std::vector<ValueRef> ins;
    for (auto& v : n.inputs) ins.push_back(rmap[size_t(v.node)].at(size_t(v.index)));
    const size_t count = n.outputs.size();
    rmap[id] = outputs_of(rest_graph->append(copy_with_inputs(n, ins)), count);
    if (feed_of[id] >= 0) split.rest.feeds[size_t(feed_of[id])] = rmap[id][0].node;
  }
  split.rest.graph = rest_graph;
  split.rest.vars = sg.vars;
  split.rest.evaluator = sg.evaluator;
  for (size_t t : split.rest_target) {
    const ValueRef v = sg.targets[t];
    split.rest.targets.push_back(rmap[size_t(v.node)].at(size_t(v.index)));
  }
  return split;
}

}  // namespace mg::cpu
