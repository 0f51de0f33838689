// A program that can start a run without waiting for it (Executable::start, run_async).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/array.h"
#include "runtime/backend.h"

namespace mg {

class AsyncProgram {
 public:
  virtual ~AsyncProgram() = default;
  // Queues a run and returns what waits for it to complete (and raises its errors); the
  // caller keeps inputs and outputs alive until then.
  virtual std::function<void()> start(const std::vector<std::shared_ptr<Array>>& inputs,
                                      const std::vector<std::shared_ptr<Array>>& outputs) = 0;
};

}  // namespace mg
