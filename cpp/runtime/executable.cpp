#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>

#include "runtime/executable.h"

#include "core/registry.h"
#include "runtime/async_program.h"
#include "runtime/profile.h"

namespace mg {

static constexpr size_t kMaxSpecialisations = 16;

size_t ExecutableKeyHash::operator()(const ExecutableKey& k) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(uint64_t(k.device.kind) * 31 + uint64_t(k.device.index));
  for (auto f : k.feeds) mix(uint64_t(f));
  for (auto& t : k.feed_types) {
    mix(uint64_t(t.dtype));
    for (auto d : t.shape) mix(uint64_t(d));
    mix(0xfeedull);
  }
  for (auto& t : k.targets) mix((uint64_t(uint32_t(t.node)) << 32) | uint32_t(t.index));
  for (auto o : k.target_ops) mix(uint64_t(o) ^ 0x5eedull);
  return size_t(h);
}

Executable::Executable(std::shared_ptr<Graph> graph, std::vector<int32_t> feeds, std::vector<TensorType> feed_types,
                       std::vector<ValueRef> targets, std::vector<int32_t> target_ops, Device device)
    : graph_(std::move(graph)), feeds_(std::move(feeds)), feed_types_(std::move(feed_types)),
      targets_(std::move(targets)), target_ops_(std::move(target_ops)), device_(device),
      backend_(&backend_for(device)) {
  std::shared_lock<std::shared_mutex> guard(graph_->build_mutex());  // no node is added meanwhile
  if (feeds_.size() != feed_types_.size()) raise(ErrorKind::Value, "compile", "", "one type is needed per feed");
  for (size_t i = 0; i < feeds_.size(); ++i) {
    if (feeds_[i] < 0 || size_t(feeds_[i]) >= graph_->size())
      raise(ErrorKind::Value, "compile", "", "feed refers to no node of this graph");
    const Node& ph = graph_->node(feeds_[i]);
    if (ph.op->name != "placeholder")
      raise(ErrorKind::Value, "compile", ph.name, "only placeholders can be fed, not a '" + ph.op->name + "' tensor");
    check_shape(feed_types_[i].shape, dtype_size(feed_types_[i].dtype), true, "placeholder", ph.name);
    // unknown dims in the declared type are allowed; known ones must agree
    const TensorType& want = ph.outputs[0];
    bool ok = want.dtype == feed_types_[i].dtype && want.shape.size() == feed_types_[i].shape.size();
    for (size_t d = 0; ok && d < want.shape.size(); ++d)
      ok = want.shape[d] < 0 || feed_types_[i].shape[d] < 0 || want.shape[d] == feed_types_[i].shape[d];
    if (!ok)
      raise(ErrorKind::Value, "placeholder", ph.name,
            "feed of type " + type_str(feed_types_[i]) + " does not match the placeholder's " + type_str(want));
  }
  for (auto& t : targets_) graph_->check_ref(t, "compile");
  guard.unlock();
  bool all_known = true;
  for (auto& t : feed_types_) all_known = all_known && shape_known(t.shape);
  if (all_known) compiled_for(feed_types_);  // compile now so errors show at compile()
}

std::vector<TensorType> Executable::target_types() const {
  std::vector<TensorType> r;
  for (auto& t : targets_) r.push_back(graph_->type(t));
  return r;
}

size_t Executable::num_specialisations() const {
  std::lock_guard<std::mutex> l(mu_);
  return compiled_.size();
}

size_t Executable::num_compilations() const {
  std::lock_guard<std::mutex> l(mu_);
  return compilations_;
}

Specialised Executable::specialise_stage(const Stage& st, const std::vector<ValueRef>& targets,
                                         const std::vector<int32_t>& ops, const ValueFeeds& values) const {
  std::vector<TensorType> types;
  for (auto ph : st.placeholders) types.push_back(st.sg.graph->type({ph, 0}));
  Backend* be = backend_;
  Specialised r = specialise(*st.sg.graph, st.placeholders, types, targets, ops, &host_constant_evaluator(),
                             [be](const Node& n) { return be->implements_composite(n); }, {}, values);
  r.vars = st.sg.vars;  // the source graph's state, not the stage graph's (empty) one
  return r;
}

std::shared_ptr<Executable::Stage> Executable::make_stage(Specialised sg) {
  auto st = std::make_shared<Stage>();
  st->sg = std::move(sg);
  for (size_t i = 0; i < st->sg.feeds.size(); ++i)
    if (st->sg.feeds[i] >= 0) {
      st->inputs.push_back(i);
      st->placeholders.push_back(st->sg.feeds[i]);
    }
  const Graph& g = *st->sg.graph;
  if (st->sg.complete()) {
    st->program = backend_->compile(st->sg);
    ++compilations_;
    for (auto& t : st->sg.targets) st->out_types.push_back(g.type(t));
    st->pool.resize(st->out_types.size());
    return st;
  }
  // after[id]: the node's value depends on a data-dependent node not yet run
  const size_t n = g.size();
  std::vector<char> after(n, 0), in_prefix(n, 0), ready(n, 0);
  for (auto id : st->sg.data_dependent) after[size_t(id)] = 1;
  for (size_t id = 0; id < n; ++id) {
    const Node& nd = g.node(int32_t(id));
    bool a = after[id];
    for (auto& v : nd.inputs) a = a || after[size_t(v.node)];
    if (after[id] && std::none_of(nd.inputs.begin(), nd.inputs.end(), [&](ValueRef v) { return after[size_t(v.node)]; })) {
      ready[id] = 1;
      st->ready.push_back(int32_t(id));
    }
    after[id] = a;
  }
  std::vector<int32_t> stack;
  for (auto r : st->ready)
    for (auto& v : g.node(r).inputs) stack.push_back(v.node);
  while (!stack.empty()) {
    int32_t id = stack.back();
    stack.pop_back();
    if (in_prefix[size_t(id)]) continue;
    in_prefix[size_t(id)] = 1;
    for (auto& v : g.node(id).inputs) stack.push_back(v.node);
  }
  // the frontier: prefix values read by later stages (placeholders and constants are there anyway)
  std::set<ValueRef> later;
  for (size_t id = 0; id < n; ++id)
    if (!in_prefix[id] && !ready[id])
      for (auto& v : g.node(int32_t(id)).inputs)
        if (in_prefix[size_t(v.node)]) later.insert(v);
  for (auto& t : st->sg.targets)
    if (in_prefix[size_t(t.node)]) later.insert(t);
  for (auto id : st->sg.target_ops)
    for (size_t k = 0; in_prefix[size_t(id)] && k < g.node(id).outputs.size(); ++k) later.insert({id, int32_t(k)});
  auto source_of = [&](ValueRef v) -> Stage::Source {
    const Node& nd = g.node(v.node);
    if (nd.op->name == "placeholder")
      return {1, size_t(std::find(st->placeholders.begin(), st->placeholders.end(), v.node) - st->placeholders.begin()), nullptr};
    if (nd.op->name == "constant") return {2, 0, node_attr<std::shared_ptr<const Array>>(nd, "value")};
    return {0, 0, nullptr};
  };
  std::vector<ValueRef> prefix_targets;
  for (auto& v : later)
    if (source_of(v).kind == 0) st->frontier.push_back(v);
  prefix_targets = st->frontier;
  for (auto r : st->ready) {
    st->ready_inputs.emplace_back();
    for (auto& v : g.node(r).inputs) {
      Stage::Source src = source_of(v);
      if (src.kind == 0) {
        src.index = prefix_targets.size();
        prefix_targets.push_back(v);
      }
      st->ready_inputs.back().push_back(src);
    }
  }
  st->last_nbytes.resize(st->ready.size());
  if (!prefix_targets.empty()) {
    Specialised pre = specialise_stage(*st, prefix_targets, {}, {});
    st->prefix = backend_->compile(pre);
    ++compilations_;
    for (auto& t : pre.targets) st->prefix_types.push_back(pre.graph->type(t));
  }
  return st;
}

Executable::Compiled& Executable::compiled_for(const std::vector<TensorType>& types) {
  // at most kMaxSpecialisations entries, the most recent first: a linear search is cheapest
  for (auto it = compiled_.begin(); it != compiled_.end(); ++it) {
    if ((*it)->feed_types == types) {
      if (it != compiled_.begin()) compiled_.splice(compiled_.begin(), compiled_, it);
      return *compiled_.front();
    }
  }
  auto c = std::make_unique<Compiled>();
  c->feed_types = types;
  Backend* be = backend_;
  {
    std::shared_lock<std::shared_mutex> guard(graph_->build_mutex());
    c->root = make_stage(specialise(*graph_, feeds_, types, targets_, target_ops_, &host_constant_evaluator(),
                                    [be](const Node& n) { return be->implements_composite(n); }));
  }
  const Graph& sg = *c->root->sg.graph;
  for (size_t id = 0; id < sg.size() && !c->assigns; ++id) c->assigns = sg.node(int32_t(id)).op->name == "assign_variable";
  c->last_path = {c->root};
  compiled_.emplace_front(std::move(c));
  if (compiled_.size() > kMaxSpecialisations) compiled_.pop_back();
  return *compiled_.front();
}

std::vector<PlanEntry> Executable::memory_plan() const {
  std::lock_guard<std::mutex> l(mu_);
  if (compiled_.empty()) return {};
  std::vector<PlanEntry> r;
  const auto& path = compiled_.front()->last_path;
  for (size_t k = 0; k < path.size(); ++k) {
    const Stage& st = *path[k];
    auto part = st.program ? st.program->memory_plan() : st.prefix ? st.prefix->memory_plan() : std::vector<PlanEntry>{};
    for (auto& e : part) {
      e.stage = int64_t(k);
      r.push_back(std::move(e));
    }
    for (size_t i = 0; i < st.ready.size(); ++i) {  // allocated by the node when it runs
      const Node& nd = st.sg.graph->node(st.ready[i]);
      PlanEntry e{nd.name, nd.op->name, "data_dependent", -1, st.last_nbytes[i], ""};
      e.stage = int64_t(k);
      r.push_back(std::move(e));
    }
  }
  return r;
}

std::shared_ptr<Array> Executable::take_output(Stage& c, size_t k) {
  // A pooled buffer is reused only when nobody outside the pool holds it or its memory.
  for (auto& a : c.pool[k])
    if (a.use_count() == 1 && a->buffer.use_count() == 1) return a;
  auto a = backend_->allocate(c.out_types[k].dtype, c.out_types[k].shape);
  // Bounded: one buffer per output always (a run-and-drop loop reuses it without page
  // faults), more only while the stage's pool stays under 64 MiB; results beyond that are
  // not pooled, so their memory goes back when the caller drops them.
  constexpr size_t kPoolBytes = size_t(64) << 20;
  size_t pooled = 0;
  for (auto& out : c.pool)
    for (auto& b : out) pooled += b->buffer ? b->buffer->nbytes : 0;
  if (c.pool[k].empty() || (c.pool[k].size() < 4 && pooled + a->nbytes() <= kPoolBytes)) c.pool[k].push_back(a);
  return a;
}

void Executable::run_stage(Compiled& c, const std::shared_ptr<Stage>& stp, const std::vector<std::shared_ptr<Array>>& values,
                           const std::vector<std::shared_ptr<Array>>* out, std::vector<std::shared_ptr<Array>>& outputs,
                           StartedRun* started) {
  Stage& st = *stp;
  c.last_path.push_back(stp);
  if (st.program) {
    if (out) {
      if (out->size() != st.out_types.size())
        raise(ErrorKind::Value, "run", "", "out= needs " + std::to_string(st.out_types.size()) + " buffers, got " +
                                               std::to_string(out->size()));
      for (size_t k = 0; k < out->size(); ++k) {
        const auto& a = (*out)[k];
        if (a->dtype != st.out_types[k].dtype || a->shape != st.out_types[k].shape)
          raise(ErrorKind::Value, "run", graph_->node(targets_[k].node).name,
                "out buffer " + std::to_string(k) + " is " + type_str({a->dtype, a->shape}) + " but the target is " +
                    type_str(st.out_types[k]));
      }
      outputs = *out;
    } else {
      for (size_t k = 0; k < st.out_types.size(); ++k) outputs.push_back(take_output(st, k));
    }
    auto* async = started ? dynamic_cast<AsyncProgram*>(st.program.get()) : nullptr;
    if (async)
      *started = async->start(values, outputs);
    else
      st.program->run(values, outputs);
    return;
  }
  std::vector<std::shared_ptr<Array>> next;  // the next stage's values: placeholders, frontier, results
  for (auto i : st.inputs) next.push_back(values[i]);
  std::vector<std::shared_ptr<Array>> pre;
  for (auto& t : st.prefix_types) pre.push_back(backend_->allocate(t.dtype, t.shape));
  if (st.prefix) st.prefix->run(next, pre);
  next.insert(next.end(), pre.begin(), pre.begin() + std::ptrdiff_t(st.frontier.size()));
  ValueFeeds fed;
  fed.values = st.frontier;
  for (size_t i = 0; i < st.frontier.size(); ++i) fed.types.push_back(st.prefix_types[i]);
  std::vector<TensorType> key;
  const bool profile = profiling_enabled();
  for (size_t r = 0; r < st.ready.size(); ++r) {
    const Node& nd = st.sg.graph->node(st.ready[r]);
    std::vector<std::shared_ptr<const Array>> ins;
    std::vector<TensorType> in_types;
    for (auto& src : st.ready_inputs[r]) {
      ins.push_back(src.kind == 0 ? pre[src.index] : src.kind == 1 ? values[st.inputs[src.index]] : src.constant);
      in_types.push_back({ins.back()->dtype, ins.back()->shape});
    }
    auto t0 = std::chrono::steady_clock::now();
    auto res = backend_->run_data_dependent(nd, in_types, ins);
    if (profile)
      record_profile(nd.op->name.c_str(), (nd.origin_op ? nd.origin_op : nd.op)->name.c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (res.size() != nd.outputs.size())
      raise(ErrorKind::Runtime, nd.op->name, nd.name, "the backend gave " + std::to_string(res.size()) + " results, not " +
                                                          std::to_string(nd.outputs.size()));
    st.last_nbytes[r] = 0;
    for (size_t k = 0; k < res.size(); ++k) {
      const TensorType t{res[k]->dtype, res[k]->shape};
      const TensorType& want = nd.outputs[k];
      bool ok = t.dtype == want.dtype && t.shape.size() == want.shape.size();
      for (size_t d = 0; ok && d < t.shape.size(); ++d) ok = want.shape[d] < 0 || want.shape[d] == t.shape[d];
      if (!ok)
        raise(ErrorKind::Runtime, nd.op->name, nd.name, "the backend gave a result of type " + type_str(t) +
                                                            " where " + type_str(want) + " was inferred");
      st.last_nbytes[r] += res[k]->nbytes();
      fed.values.push_back({nd.id, int32_t(k)});
      fed.types.push_back(t);
      key.push_back(t);
      next.push_back(res[k]);
    }
  }
  auto it = std::find_if(st.next.begin(), st.next.end(), [&](const auto& e) { return e.first == key; });
  if (it == st.next.end()) {
    st.next.emplace_front(key, make_stage(specialise_stage(st, st.sg.targets, st.sg.target_ops, fed)));
    if (st.next.size() > kMaxSpecialisations) st.next.pop_back();
  } else if (it != st.next.begin()) {
    st.next.splice(st.next.begin(), st.next, it);
  }
  run_stage(c, st.next.front().second, next, out, outputs, started);
}

std::vector<std::shared_ptr<Array>> Executable::run(const std::vector<std::shared_ptr<Array>>& inputs,
                                                    const std::vector<std::shared_ptr<Array>>* out) {
  return start_run(inputs, out, nullptr);
}

std::vector<std::shared_ptr<Array>> Executable::start(const std::vector<std::shared_ptr<Array>>& inputs,
                                                      const std::vector<std::shared_ptr<Array>>* out,
                                                      StartedRun& started) {
  started = {};
  return start_run(inputs, out, &started);
}

std::vector<std::shared_ptr<Array>> Executable::start_run(const std::vector<std::shared_ptr<Array>>& inputs,
                                                          const std::vector<std::shared_ptr<Array>>* out,
                                                          StartedRun* started) {
  if (inputs.size() != feeds_.size())
    raise(ErrorKind::Value, "run", "", "expected " + std::to_string(feeds_.size()) + " inputs, got " +
                                           std::to_string(inputs.size()));
  std::vector<TensorType> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorType t{inputs[i]->dtype, inputs[i]->shape};
    const TensorType& declared = feed_types_[i];
    bool ok = t.dtype == declared.dtype && t.shape.size() == declared.shape.size();
    for (size_t d = 0; ok && d < t.shape.size(); ++d) ok = declared.shape[d] < 0 || declared.shape[d] == t.shape[d];
    if (!ok)
      raise(ErrorKind::Value, "placeholder", graph_->node(feeds_[i]).name,
            "input " + std::to_string(i) + " has type " + type_str(t) + " but the executable was compiled for " +
                type_str(declared));
    types.push_back(t);
  }
  if (out) check_out_buffers(inputs, *out);
  std::lock_guard<std::mutex> l(mu_);
  Compiled& c = compiled_for(types);
  std::vector<std::shared_ptr<Array>> outputs;
  std::unique_lock<std::mutex> state;
  if (c.assigns && c.root->sg.vars) state = std::unique_lock<std::mutex>(c.root->sg.vars->run_mu);
  c.last_path.clear();
  // assigns land when the run completes, under the variable lock: such runs finish here
  run_stage(c, c.root, inputs, out, outputs, c.assigns ? nullptr : started);
  return outputs;
}

static bool overlaps(const Array& a, const Array& b) {
  if (!a.nbytes() || !b.nbytes()) return false;
  auto pa = reinterpret_cast<uintptr_t>(a.data()), pb = reinterpret_cast<uintptr_t>(b.data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// out= buffers are written in place while the run reads its inputs and variables: one that
// shares memory with an input, a variable or another out buffer would be read half-written
// (or written twice), so it is refused rather than silently copied.
void Executable::check_out_buffers(const std::vector<std::shared_ptr<Array>>& inputs,
                                   const std::vector<std::shared_ptr<Array>>& out) const {
  auto vars = graph_->variables();
  std::vector<std::shared_ptr<Array>> var_values;
  {
    std::lock_guard<std::mutex> l(vars->mu);
    for (auto& slot : vars->slots) var_values.push_back(slot.value);
  }
  for (size_t k = 0; k < out.size(); ++k) {
    const Array& a = *out[k];
    const std::string what = "out buffer " + std::to_string(k) + " " + type_str({a.dtype, a.shape});
    for (size_t j = 0; j < k; ++j)
      if (overlaps(a, *out[j]))
        raise(ErrorKind::Value, "run", "", what + " shares memory with out buffer " + std::to_string(j) +
                                               " (each result needs a buffer of its own)");
    for (size_t i = 0; i < inputs.size(); ++i)
      if (overlaps(a, *inputs[i]))
        raise(ErrorKind::Value, "run", "", what + " shares memory with input " + std::to_string(i) + " ('" +
                                               graph_->node(feeds_[i]).name + "'); results are written in place, "
                                               "so pass a separate buffer");
    for (size_t v = 0; v < var_values.size(); ++v)
      if (var_values[v] && overlaps(a, *var_values[v]))
        raise(ErrorKind::Value, "run", "", what + " shares memory with variable " + std::to_string(v) +
                                               "; use assign to change a variable");
  }
}

// ---- cache ----

std::shared_ptr<Executable> ExecutableCache::get(const std::shared_ptr<Graph>& graph, const std::vector<int32_t>& feeds,
                                                 const std::vector<TensorType>& feed_types,
                                                 const std::vector<ValueRef>& targets,
                                                 const std::vector<int32_t>& target_ops, const Device& device) {
  {
    std::lock_guard<std::mutex> l(mu_);
    // the same run again: compare in place, copy nothing
    if (!lru_.empty() && lru_.front().first.matches(device, feeds, feed_types, targets, target_ops)) {
      ++hits_;
      return lru_.front().second;
    }
  }
  ExecutableKey key{device, feeds, feed_types, targets, target_ops};
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return lru_.front().second;
    }
    ++misses_;
  }
  auto exe = std::make_shared<Executable>(graph, feeds, feed_types, targets, target_ops, device);
  std::lock_guard<std::mutex> l(mu_);
  if (index_.count(key)) return exe;
  lru_.emplace_front(key, exe);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return exe;
}

CacheInfo ExecutableCache::info() const {
  std::lock_guard<std::mutex> l(mu_);
  return {hits_, misses_, lru_.size(), capacity_};
}

void ExecutableCache::clear() {
  std::lock_guard<std::mutex> l(mu_);
  lru_.clear();
  index_.clear();
  hits_ = misses_ = 0;
}

void ExecutableCache::set_capacity(size_t c) {
  std::lock_guard<std::mutex> l(mu_);
  capacity_ = std::max<size_t>(c, 1);
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

}  // namespace mg
