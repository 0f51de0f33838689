#include "core/array.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

namespace mg {

std::shared_ptr<Buffer> Buffer::allocate(size_t nbytes) {
  size_t align = nbytes >= 16384 ? 16384 : 64;  // 16 KiB: Apple silicon's page size
  if (nbytes > size_t(kMaxTensorBytes)) throw std::bad_alloc();  // the rounding below cannot wrap
  size_t rounded = (std::max<size_t>(nbytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  auto b = std::make_shared<Buffer>();
  b->data = p;
  b->nbytes = nbytes;
  b->owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return b;
}

std::shared_ptr<Buffer> Buffer::borrow(void* data, size_t nbytes, std::shared_ptr<void> owner) {
  auto b = std::make_shared<Buffer>();
  b->data = data;
  b->nbytes = nbytes;
  b->owner = std::move(owner);
  return b;
}

std::shared_ptr<Array> Array::empty(DType dtype, const Shape& shape) {
  auto a = std::make_shared<Array>();
  a->dtype = dtype;
  a->shape = shape;
  check_shape(shape, dtype_size(dtype), false, "TensorData");
  a->buffer = Buffer::allocate(a->nbytes());
  return a;
}

}  // namespace mg
