// Host memory with a dtype and a shape: constant payloads, variable state and the bytes
// behind runtime TensorData. Memory is either owned (64-byte aligned, page-aligned when
// large so Metal can wrap it) or borrowed from a producer kept alive by `owner`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/dtype.h"
#include "core/shape.h"

namespace mg {

struct Buffer {
  void* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<void> owner;  // frees or releases the memory when the last user goes

  static std::shared_ptr<Buffer> allocate(size_t nbytes);
  static std::shared_ptr<Buffer> borrow(void* data, size_t nbytes, std::shared_ptr<void> owner);
};

struct Array {
  DType dtype = DType::Float32;
  Shape shape;
  std::shared_ptr<Buffer> buffer;
  void* data() const { return buffer ? buffer->data : nullptr; }
  int64_t size() const { return num_elements(shape); }
  size_t nbytes() const { return size_t(size()) * dtype_size(dtype); }

  static std::shared_ptr<Array> empty(DType dtype, const Shape& shape);
};

}  // namespace mg
