// Executables: a pruned, specialised graph compiled for one device, plus the output pool,
// and the bounded LRU cache that Graph.run uses.
//
// A graph holding data-dependent nodes (non_zero_indices: an output dim is known only once
// the node has run) runs in stages. Stage k compiles the known part of the graph that the
// ready data-dependent nodes need, plus the values later stages read (the frontier), runs
// it, runs those nodes (Backend::run_data_dependent), then specialises the rest with their
// results' concrete types, feeding the frontier in as values: nothing before a
// data-dependent node is computed twice in one run (random draws and variable reads
// included), and assigns land once, at the end of the last stage. Each stage is cached by
// the types its data-dependent nodes produced, so a run with the same sizes compiles nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "runtime/async_program.h"
#include "runtime/backend.h"

namespace mg {

class Executable {
 public:
  // feed_types may hold unknown dims; then each concrete signature is specialised on
  // first use and kept (bounded) inside the executable.
  Executable(std::shared_ptr<Graph> graph, std::vector<int32_t> feeds, std::vector<TensorType> feed_types,
             std::vector<ValueRef> targets, std::vector<int32_t> target_ops, Device device);

  // inputs in feed order; `out` (optional) receives results in caller-owned buffers.
  std::vector<std::shared_ptr<Array>> run(const std::vector<std::shared_ptr<Array>>& inputs,
                                          const std::vector<std::shared_ptr<Array>>* out = nullptr);
  // As run, but returns once the device has the work queued (AsyncProgram::start): `started`
  // then completes it. Executables that assign variables run to completion here (its wait is
  // empty), as do programs that cannot start a run without waiting.
  std::vector<std::shared_ptr<Array>> start(const std::vector<std::shared_ptr<Array>>& inputs,
                                            const std::vector<std::shared_ptr<Array>>* out, StartedRun& started);

  const std::vector<int32_t>& feeds() const { return feeds_; }
  const std::vector<TensorType>& feed_types() const { return feed_types_; }
  const std::vector<ValueRef>& targets() const { return targets_; }
  const std::vector<int32_t>& target_ops() const { return target_ops_; }
  const Device& device() const { return device_; }
  // Where each value of the most recently used specialisation lives (empty before one).
  std::vector<PlanEntry> memory_plan() const;
  std::vector<TensorType> target_types() const;  // declared (may hold unknown dims)
  size_t num_specialisations() const;
  // Backend compilations made so far (every stage of a graph with data-dependent nodes counts).
  size_t num_compilations() const;

 private:
  // One stage of a run. A complete graph (no data-dependent node left) is one stage whose
  // `program` computes the targets. Otherwise `prefix` computes what the ready data-dependent
  // nodes need and the frontier (values later stages read), the backend runs those nodes,
  // and the rest of the graph, specialised for their results' types, is the next stage
  // (cached by those types, bounded).
  struct Stage {
    Specialised sg;
    std::vector<size_t> inputs;         // per placeholder of sg that is fed: its index in the stage's values
    std::vector<int32_t> placeholders;  // ... and its node
    // complete
    std::unique_ptr<Program> program;
    std::vector<TensorType> out_types;
    std::vector<std::vector<std::shared_ptr<Array>>> pool;  // per output
    // staged
    std::unique_ptr<Program> prefix;
    std::vector<TensorType> prefix_types;  // its results: the frontier, then the other ready inputs
    std::vector<ValueRef> frontier;        // values of sg computed here and read later
    struct Source {
      int kind = 0;  // 0: a prefix result, 1: a stage value (placeholder), 2: a constant
      size_t index = 0;
      std::shared_ptr<const Array> constant;
    };
    std::vector<int32_t> ready;                      // the data-dependent nodes run after the prefix
    std::vector<std::vector<Source>> ready_inputs;   // per ready node
    std::vector<size_t> last_nbytes;                 // per ready node: its results' size in the last run
    std::list<std::pair<std::vector<TensorType>, std::shared_ptr<Stage>>> next;  // LRU, front = newest
  };
  struct Compiled {
    std::vector<TensorType> feed_types;  // the concrete signature it was specialised for
    std::shared_ptr<Stage> root;
    std::vector<std::shared_ptr<Stage>> last_path;  // the stages of the most recent run (memory_plan)
    bool assigns = false;  // assigns a variable: runs hold the variable store's run_mu
  };
  Compiled& compiled_for(const std::vector<TensorType>& types);
  std::shared_ptr<Stage> make_stage(Specialised sg);
  std::vector<std::shared_ptr<Array>> start_run(const std::vector<std::shared_ptr<Array>>& inputs,
                                                const std::vector<std::shared_ptr<Array>>* out, StartedRun* started);
  Specialised specialise_stage(const Stage& st, const std::vector<ValueRef>& targets, const std::vector<int32_t>& ops,
                               const ValueFeeds& values) const;
  void run_stage(Compiled& c, const std::shared_ptr<Stage>& st, const std::vector<std::shared_ptr<Array>>& values,
                 const std::vector<std::shared_ptr<Array>>* out, std::vector<std::shared_ptr<Array>>& outputs,
                 StartedRun* started);
  std::shared_ptr<Array> take_output(Stage& c, size_t k);
  void check_out_buffers(const std::vector<std::shared_ptr<Array>>& inputs,
                         const std::vector<std::shared_ptr<Array>>& out) const;

  std::shared_ptr<Graph> graph_;
  std::vector<int32_t> feeds_;
  std::vector<TensorType> feed_types_;
  std::vector<ValueRef> targets_;
  std::vector<int32_t> target_ops_;
  Device device_;
  Backend* backend_;
  mutable std::mutex mu_;
  size_t compilations_ = 0;
  std::list<std::unique_ptr<Compiled>> compiled_;  // LRU by feed types, front = newest
};

struct CacheInfo {
  size_t hits = 0, misses = 0, size = 0, capacity = 0;
};

// What Graph.run's cache keys an executable on. Compared field by field; the most
// recent key is checked first, so a repeated Graph.run builds no string and hashes nothing.
struct ExecutableKey {
  Device device;
  std::vector<int32_t> feeds;
  std::vector<TensorType> feed_types;
  std::vector<ValueRef> targets;
  std::vector<int32_t> target_ops;
  bool matches(const Device& d, const std::vector<int32_t>& f, const std::vector<TensorType>& ft,
               const std::vector<ValueRef>& t, const std::vector<int32_t>& ops) const {
    return device == d && feeds == f && feed_types == ft && targets == t && target_ops == ops;
  }
  bool operator==(const ExecutableKey& o) const { return matches(o.device, o.feeds, o.feed_types, o.targets, o.target_ops); }
};
struct ExecutableKeyHash {
  size_t operator()(const ExecutableKey& k) const;
};

// Graph.run's cache: one Executable per (targets, target ops, feeds, feed types, device).
class ExecutableCache {
 public:
  explicit ExecutableCache(size_t capacity = 64) : capacity_(capacity) {}
  std::shared_ptr<Executable> get(const std::shared_ptr<Graph>& graph, const std::vector<int32_t>& feeds,
                                  const std::vector<TensorType>& feed_types, const std::vector<ValueRef>& targets,
                                  const std::vector<int32_t>& target_ops, const Device& device);
  CacheInfo info() const;
  void clear();
  void set_capacity(size_t c);

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  size_t hits_ = 0, misses_ = 0;
  std::list<std::pair<ExecutableKey, std::shared_ptr<Executable>>> lru_;
  std::unordered_map<ExecutableKey, decltype(lru_)::iterator, ExecutableKeyHash> index_;
};

}  // namespace mg
