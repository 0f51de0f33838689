#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/executable.h"

#include "core/registry.h"

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
  if (feeds_.size() != feed_types_.size()) raise(ErrorKind::Value, "compile", "", "one type is needed per feed");
  for (size_t i = 0; i < feeds_.size(); ++i) {
    if (feeds_[i] < 0 || size_t(feeds_[i]) >= graph_->size())
      raise(ErrorKind::Value, "compile", "", "feed refers to no node of this graph");
    const Node& ph = graph_->node(feeds_[i]);
    if (ph.op->name != "placeholder")
      raise(ErrorKind::Value, "compile", ph.name, "only placeholders can be fed, not a '" + ph.op->name + "' tensor");
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
  c->sg = specialise(*graph_, feeds_, types, targets_, target_ops_, &host_constant_evaluator(),
                     [be](const Node& n) { return be->implements_composite(n); });
  c->program = backend_->compile(c->sg);
  for (auto& t : c->sg.targets) c->out_types.push_back(c->sg.graph->type(t));
  c->pool.resize(c->out_types.size());
  compiled_.emplace_front(std::move(c));
  if (compiled_.size() > kMaxSpecialisations) compiled_.pop_back();
  return *compiled_.front();
}

std::vector<PlanEntry> Executable::memory_plan() const {
  std::lock_guard<std::mutex> l(mu_);
  if (compiled_.empty()) return {};
  return compiled_.front()->program->memory_plan();
}

std::shared_ptr<Array> Executable::take_output(Compiled& c, size_t k) {
  // A pooled buffer is reused only when nobody outside the pool holds it or its memory.
  for (auto& a : c.pool[k])
    if (a.use_count() == 1 && a->buffer.use_count() == 1) return a;
  auto a = backend_->allocate(c.out_types[k].dtype, c.out_types[k].shape);
  if (c.pool[k].size() < 4) c.pool[k].push_back(a);
  return a;
}

std::vector<std::shared_ptr<Array>> Executable::run(const std::vector<std::shared_ptr<Array>>& inputs,
                                                    const std::vector<std::shared_ptr<Array>>* out) {
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
  std::lock_guard<std::mutex> l(mu_);
  Compiled& c = compiled_for(types);
  std::vector<std::shared_ptr<Array>> outputs;
  if (out) {
    if (out->size() != c.out_types.size())
      raise(ErrorKind::Value, "run", "", "out= needs " + std::to_string(c.out_types.size()) + " buffers, got " +
                                             std::to_string(out->size()));
    for (size_t k = 0; k < out->size(); ++k) {
      const auto& a = (*out)[k];
      if (a->dtype != c.out_types[k].dtype || a->shape != c.out_types[k].shape)
        raise(ErrorKind::Value, "run", graph_->node(targets_[k].node).name,
              "out buffer " + std::to_string(k) + " is " + type_str({a->dtype, a->shape}) + " but the target is " +
                  type_str(c.out_types[k]));
    }
    outputs = *out;
  } else {
    for (size_t k = 0; k < c.out_types.size(); ++k) outputs.push_back(take_output(c, k));
  }
  c.program->run(inputs, outputs);
  return outputs;
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
