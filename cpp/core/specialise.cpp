#include "core/specialise.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>

#include "core/registry.h"

namespace mg {

void check_feed(const Node& ph, const TensorType& feed) {
  const TensorType& want = ph.outputs[0];
  bool ok = feed.dtype == want.dtype && feed.shape.size() == want.shape.size();
  for (size_t i = 0; ok && i < want.shape.size(); ++i) ok = want.shape[i] < 0 || want.shape[i] == feed.shape[i];
  if (!ok)
    raise(ErrorKind::Value, "placeholder", ph.name,
          "feed of type " + type_str(feed) + " does not match the placeholder's " + type_str(want));
}

namespace {

struct NodeKey {
  const OpDef* op;
  std::vector<ValueRef> inputs;
  const Attrs* attrs;
};

size_t key_hash(const NodeKey& k) {
  size_t h = std::hash<const void*>()(k.op);
  for (auto& v : k.inputs) h = h * 1000003u + size_t(v.node) * 31u + size_t(v.index);
  for (auto& kv : *k.attrs) h = h * 1000003u + std::hash<std::string>()(kv.first) + attr_hash(kv.second);
  return h;
}

bool attrs_equal(const Attrs& a, const Attrs& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    if (ia->first != ib->first || !attr_equal(ia->second, ib->second)) return false;
  return true;
}

bool all_known(const std::vector<TensorType>& ts) {
  for (auto& t : ts)
    if (!shape_known(t.shape)) return false;
  return true;
}

}  // namespace

namespace {

// Control flow whose regions draw random numbers is neither folded nor merged.
bool has_stateful_region(const Node& n) {
  for (auto& r : n.regions)
    if (r->stateful) return true;
  return false;
}

// Nodes the targets need; a node marked in `stop` (fed as a value) needs none of its inputs.
std::vector<char> live_nodes(const Graph& src, const std::vector<ValueRef>& targets, const std::vector<int32_t>& target_ops,
                             const std::vector<char>* stop = nullptr) {
  const size_t n = src.size();
  std::vector<char> live(n, 0);
  std::vector<int32_t> stack;
  for (auto& t : targets) {
    src.check_ref(t, "run");
    stack.push_back(t.node);
  }
  for (auto id : target_ops) {
    if (id < 0 || size_t(id) >= n) raise(ErrorKind::Value, "run", "", "target operation refers to no node of this graph");
    stack.push_back(id);
  }
  while (!stack.empty()) {
    int32_t id = stack.back();
    stack.pop_back();
    if (live[size_t(id)]) continue;
    live[size_t(id)] = 1;
    if (stop && (*stop)[size_t(id)]) continue;
    for (auto& v : src.node(id).inputs) stack.push_back(v.node);
  }
  // assigns made by control flow run whenever the op that computes their value runs
  for (size_t id = 0; id < n; ++id) {
    const Node& a = src.node(int32_t(id));
    if (!live[id] && a.op->name == "assign_variable" && node_has_attr(a, "follows_input") &&
        node_attr<bool>(a, "follows_input") && live[size_t(a.inputs[0].node)])
      live[id] = 1;
  }
  return live;
}

// Fold, merge and fix shapes over a graph whose composites are already resolved.
Specialised fold_and_merge(const Graph& src, std::shared_ptr<VariableStore> vars, const std::vector<int32_t>& feed_nodes,
                           const std::vector<TensorType>& feed_types, const std::vector<ValueRef>& targets,
                           const std::vector<int32_t>& target_ops, ConstantEvaluator* evaluator,
                           const SpecialiseOptions& opts, const std::vector<const Node*>& origin,
                           bool& folded_data_dependent) {
  const size_t n = src.size();
  std::vector<int> feed_of(n, -1);
  for (size_t i = 0; i < feed_nodes.size(); ++i) {
    if (feed_nodes[i] >= 0) feed_of[size_t(feed_nodes[i])] = int(i);  // -1: pruned
  }

  std::vector<char> live = live_nodes(src, targets, target_ops);

  Specialised out;
  out.graph = std::make_shared<Graph>();
  out.vars = std::move(vars);
  Graph& dst = *out.graph;
  const OpDef& constant_op = get_op("constant");
  std::vector<std::vector<ValueRef>> map(n);
  std::vector<char> is_const;  // per dst node
  std::vector<char> pending;   // per dst node: its value depends on a data-dependent node not yet run
  std::unordered_map<size_t, std::vector<int32_t>> cse;

  auto append = [&](Node node) {
    bool after = node.op->is_data_dependent(node) && !node.outputs.empty() && !all_known(node.outputs);
    for (auto& v : node.inputs) after = after || pending[size_t(v.node)];
    int32_t id = dst.append(std::move(node));
    is_const.push_back(dst.node(id).op == &constant_op);
    pending.push_back(after);
    if (after && dst.node(id).op->is_data_dependent(dst.node(id)) && !all_known(dst.node(id).outputs))
      out.data_dependent.push_back(id);
    return id;
  };
  auto make_constant = [&](std::shared_ptr<const Array> value, const std::string& name) {
    Node c;
    c.op = &constant_op;
    c.name = name;
    c.attrs["value"] = value;
    c.outputs = {{value->dtype, value->shape}};
    c.origin_op = &constant_op;
    c.origin_name = name;
    return append(std::move(c));
  };

  for (size_t id = 0; id < n; ++id) {
    if (!live[id]) continue;
    const Node& s = src.node(int32_t(id));
    Node d;
    d.op = s.op;
    d.name = s.name;
    d.attrs = s.attrs;
    d.absent = s.absent;
    const Node& from = origin[id] ? *origin[id] : s;  // a node re-specialised keeps its composite
    d.origin_op = from.origin_op;
    d.origin_name = from.origin_name;
    d.regions = s.regions;
    for (auto& v : s.inputs) d.inputs.push_back(map[size_t(v.node)][size_t(v.index)]);
    if (s.op->name == "placeholder") {
      if (feed_of[id] < 0) raise(ErrorKind::Value, "run", s.name, "no feed for placeholder of type " + type_str(s.outputs[0]));
      d.outputs = {feed_types[size_t(feed_of[id])]};
      int32_t nid = append(std::move(d));
      out.feeds.resize(feed_nodes.size(), -1);
      out.feeds[size_t(feed_of[id])] = nid;
      map[id] = {{nid, 0}};
      continue;
    }
    std::vector<TensorType> in;
    bool stale = false, after = false;
    for (size_t k = 0; k < d.inputs.size(); ++k) {
      in.push_back(dst.type(d.inputs[k]));
      stale = stale || !(in.back() == src.type(s.inputs[k]));
      after = after || pending[size_t(d.inputs[k].node)];
    }
    // pass 1 inferred (and decoded) every node with the feeds' types; folding and merging
    // replace inputs by values of the same types, so nothing is inferred again here, unless
    // a data-dependent node was folded and made its consumers' types concrete
    d.outputs = s.outputs;
    d.decoded = s.decoded;
    if (stale) infer_again(d, in);
    const bool dd = d.op->is_data_dependent(d) && !all_known(d.outputs);
    if (!after && !dd)
      for (auto& t : d.outputs)
        if (!shape_known(t.shape))
          raise(ErrorKind::Value, s.op->name, s.name, "output shape " + shape_str(t.shape) + " is still unknown after specialisation");

    bool pure = !s.op->stateful && !has_stateful_region(s) && s.op->name != "constant" && !d.outputs.empty();
    if (pure && s.op->fold_types && opts.fold_constants) {
      auto value = s.op->fold_types(in, d.attrs);
      if (value) {
        map[id] = {{make_constant(value, s.name), 0}};
        continue;
      }
    }
    bool all_const = true;
    for (auto& v : d.inputs) all_const = all_const && is_const[size_t(v.node)];
    int64_t out_elems = 0;
    for (auto& t : d.outputs) out_elems += num_elements(t.shape);
    if (dd)  // bounded by its inputs (non_zero_indices: count x rank <= elements x rank)
      for (auto& t : in) out_elems += num_elements(t.shape) * std::max<int64_t>(1, int64_t(t.shape.size()));
    const bool foldable = dd || all_known(d.outputs);
    if (pure && all_const && foldable && evaluator && opts.fold_constants && out_elems <= opts.fold_max_elements) {
      std::vector<std::shared_ptr<const Array>> vals;
      for (auto& v : d.inputs) vals.push_back(std::get<std::shared_ptr<const Array>>(dst.node(v.node).attrs.at("value")));
      auto results = evaluator->evaluate(d, vals);  // empty: cannot evaluate, keep the node
      if (dd && results.size() != d.outputs.size()) results.clear();
      folded_data_dependent = folded_data_dependent || (dd && !results.empty());
      if (!results.empty()) {
        for (size_t k = 0; k < results.size(); ++k) map[id].push_back({make_constant(results[k], s.name), 0});
        continue;
      }
    }
    if (pure && opts.merge_common) {
      NodeKey key{d.op, d.inputs, &d.attrs};
      size_t h = key_hash(key);
      int32_t found = -1;
      for (int32_t cand : cse[h]) {
        const Node& c = dst.node(cand);
        if (c.op == d.op && c.inputs == d.inputs && c.regions == d.regions && attrs_equal(c.attrs, d.attrs))
          found = cand;
      }
      if (found >= 0) {
        for (size_t k = 0; k < d.outputs.size(); ++k) map[id].push_back({found, int32_t(k)});
        continue;
      }
      int32_t nid = append(std::move(d));
      cse[h].push_back(nid);
      for (size_t k = 0; k < dst.node(nid).outputs.size(); ++k) map[id].push_back({nid, int32_t(k)});
      continue;
    }
    int32_t nid = append(std::move(d));
    for (size_t k = 0; k < dst.node(nid).outputs.size(); ++k) map[id].push_back({nid, int32_t(k)});
    if (dst.node(nid).outputs.empty()) map[id].push_back({nid, 0});  // keep the id for target ops
  }
  out.feeds.resize(feed_nodes.size(), -1);
  for (auto& t : targets) out.targets.push_back(map[size_t(t.node)][size_t(t.index)]);
  for (auto id : target_ops) out.target_ops.push_back(map[size_t(id)][0].node);
  return out;
}

}  // namespace

Specialised specialise(const Graph& src, const std::vector<int32_t>& feed_nodes,
                       const std::vector<TensorType>& feed_types, const std::vector<ValueRef>& targets,
                       const std::vector<int32_t>& target_ops, ConstantEvaluator* evaluator,
                       const CompositePredicate& native, const SpecialiseOptions& opts, const ValueFeeds& value_feeds) {
  const size_t n = src.size();
  std::vector<int> feed_of(n, -1);
  for (size_t i = 0; i < feed_nodes.size(); ++i) {
    int32_t id = feed_nodes[i];
    if (id < 0 || size_t(id) >= n) raise(ErrorKind::Value, "run", "", "feed refers to no node of this graph");
    const Node& ph = src.node(id);
    if (ph.op->name != "placeholder")
      raise(ErrorKind::Value, "run", ph.name, "only placeholders can be fed, not a '" + ph.op->name + "' tensor");
    check_feed(ph, feed_types[i]);
    feed_of[size_t(id)] = int(i);
  }
  // value feeds: per node, the value feed of each output (-1: not fed)
  if (value_feeds.values.size() != value_feeds.types.size())
    raise(ErrorKind::Value, "run", "", "one type is needed per value feed");
  std::vector<std::vector<int>> value_of(n);
  std::vector<char> fed(n, 0);
  for (size_t i = 0; i < value_feeds.values.size(); ++i) {
    const ValueRef v = value_feeds.values[i];
    src.check_ref(v, "run");
    const Node& s = src.node(v.node);
    const TensorType& want = src.type(v);
    const TensorType& got = value_feeds.types[i];
    bool ok = got.dtype == want.dtype && got.shape.size() == want.shape.size() && shape_known(got.shape);
    for (size_t d = 0; ok && d < want.shape.size(); ++d) ok = want.shape[d] < 0 || want.shape[d] == got.shape[d];
    if (!ok)
      raise(ErrorKind::Value, s.op->name, s.name,
            "value of type " + type_str(got) + " fed for output " + std::to_string(v.index) + " of type " + type_str(want));
    value_of[size_t(v.node)].resize(s.outputs.size(), -1);
    value_of[size_t(v.node)][size_t(v.index)] = int(i);
    fed[size_t(v.node)] = 1;
  }
  std::vector<char> live = live_nodes(src, targets, target_ops, &fed);

  // Pass 1: the live nodes with the feeds' types, composites the backend does not run
  // natively expanded (recursively) into their decompositions.
  Graph expanded;
  // a composite whose inputs still have data-dependent dims is expanded at a later stage
  expanded.set_expand([&native, &expanded](const Node& c) {
    for (auto& v : c.inputs)
      if (!shape_known(expanded.type(v).shape)) return false;
    return !native || !native(c);
  });
  std::vector<std::vector<ValueRef>> map(n);
  std::vector<int32_t> new_feeds(feed_nodes.size() + value_feeds.values.size(), -1);
  std::vector<TensorType> all_types = feed_types;
  all_types.insert(all_types.end(), value_feeds.types.begin(), value_feeds.types.end());
  std::vector<const Node*> origin;  // per expanded node: the node of an earlier specialisation it stands for
  for (size_t id = 0; id < n; ++id) {
    if (!live[id]) continue;
    const Node& s = src.node(int32_t(id));
    const int32_t before = int32_t(expanded.size());
    if (fed[id]) {  // computed earlier: a placeholder per fed output
      for (size_t k = 0; k < s.outputs.size(); ++k) {
        const int f = k < value_of[id].size() ? value_of[id][k] : -1;
        if (f < 0) {
          map[id].push_back(ValueRef{});
          continue;
        }
        const TensorType& t = value_feeds.types[size_t(f)];
        new_feeds[feed_nodes.size() + size_t(f)] = int32_t(expanded.size());
        map[id].push_back(expanded.add1("placeholder", {}, {{"shape", t.shape}, {"dtype", t.dtype}},
                                        s.outputs.size() == 1 ? s.name : s.name + ":" + std::to_string(k)));
      }
    } else {
      std::vector<ValueRef> ins = schema_inputs(s);
      for (auto& v : ins) {
        if (!v.valid()) continue;
        const ValueRef from = v;
        v = map[size_t(from.node)][size_t(from.index)];
        if (!v.valid())
          raise(ErrorKind::Value, "run", s.name, "input " + src.node(from.node).name + ":" + std::to_string(from.index) +
                                                     " is needed but only other outputs of its node were fed");
      }
      Attrs attrs = s.attrs;
      if (s.op->name == "placeholder" && feed_of[id] >= 0) attrs["shape"] = feed_types[size_t(feed_of[id])].shape;
      map[id] = expanded.add(s.op->name, ins, attrs, s.name, s.regions);
      if (map[id].empty()) map[id].push_back({int32_t(expanded.size()) - 1, 0});  // an operation: keep its id
      if (s.op->name == "placeholder" && feed_of[id] >= 0) new_feeds[size_t(feed_of[id])] = before;
    }
    origin.resize(expanded.size(), nullptr);
    if (!fed[id] && s.origin_op && s.origin_op != s.op)
      for (size_t k = size_t(before); k < expanded.size(); ++k) origin[k] = &s;
  }
  std::vector<ValueRef> new_targets;
  for (auto& t : targets) {
    new_targets.push_back(map[size_t(t.node)][size_t(t.index)]);
    if (!new_targets.back().valid())
      raise(ErrorKind::Value, "run", src.node(t.node).name, "a target is an output of a node whose other outputs were fed");
  }
  std::vector<int32_t> new_target_ops;
  for (auto id : target_ops) {
    auto& m = map[size_t(id)];  // a fed node: the placeholder of one of its fed outputs
    new_target_ops.push_back(std::find_if(m.begin(), m.end(), [](ValueRef v) { return v.valid(); })->node);
  }
  // Pass 2: fold constants, merge common subexpressions (a pruned feed stays -1).
  bool folded_dd = false;
  Specialised out = fold_and_merge(expanded, src.variables(), new_feeds, all_types, new_targets, new_target_ops,
                                   evaluator, opts, origin, folded_dd);
  out.evaluator = evaluator;
  if (folded_dd) {
    // a data-dependent node became a constant: its consumers' types are concrete now, so the
    // composites kept for a later stage can be expanded; specialise the result once more
    std::vector<int32_t> ids;
    std::vector<TensorType> types;
    std::vector<size_t> pos;
    for (size_t i = 0; i < out.feeds.size(); ++i)
      if (out.feeds[i] >= 0) {
        ids.push_back(out.feeds[i]);
        types.push_back(out.graph->type({out.feeds[i], 0}));
        pos.push_back(i);
      }
    Specialised again = specialise(*out.graph, ids, types, out.targets, out.target_ops, evaluator, native, opts);
    again.vars = out.vars;
    std::vector<int32_t> feeds(out.feeds.size(), -1);
    for (size_t j = 0; j < pos.size(); ++j) feeds[pos[j]] = again.feeds[j];
    again.feeds = std::move(feeds);
    return again;
  }
  return out;
}

}  // namespace mg
