// TensorData: an Array on a device. Host-visible buffers on the CPU (and on Metal's
// unified memory) can be viewed from numpy and DLPack without copies.
#pragma once
#include <memory>

#include "core/array.h"
#include "runtime/backend.h"

namespace mg {

struct TensorData {
  std::shared_ptr<Array> array;
  Device device;
  bool copied = false;  // true when making it needed a copy (non-contiguous source)
  bool readonly = false;  // wraps memory its producer marked read-only: never written, never out=
};

}  // namespace mg
