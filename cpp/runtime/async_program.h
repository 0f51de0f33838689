// A program that can start a run without waiting for it (Executable::start, run_async).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/array.h"
#include "runtime/backend.h"

namespace mg {

// A queued run. `wait` blocks until it completes, then raises its errors and lands its effects
// (empty: the run has completed). `finished(false)` says without blocking whether the device is
// done with it, so that wait would return at once; `finished(true)` first blocks until it is,
// with no other effect (empty: not known before wait).
struct StartedRun {
  std::function<void()> wait;
  std::function<bool(bool block)> finished;
};

class AsyncProgram {
 public:
  virtual ~AsyncProgram() = default;
  // Queues a run; the caller keeps inputs and outputs alive until its wait returns.
  virtual StartedRun start(const std::vector<std::shared_ptr<Array>>& inputs,
                           const std::vector<std::shared_ptr<Array>>& outputs) = 0;
};

}  // namespace mg
