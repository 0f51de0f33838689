#include "core/array.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mg {

namespace {

#if defined(__linux__)
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kMapAtLeast = size_t(4) << 20;

// Large buffers come straight from mmap, 2 MiB aligned and marked for transparent huge pages:
// every first touch of a 4 KiB page faults (microseconds each, as much as the math of an
// elementwise pass), a huge page faults once per 2 MiB. munmap returns the memory to the OS
// as soon as the buffer dies (malloc's heap may keep it). nullptr when mmap fails.
void* map_huge(size_t rounded) {
  const size_t len = rounded + kHugePage;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t a = (base + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  const size_t head = size_t(a - base), tail = len - head - rounded;
  if (head) munmap(p, head);
  if (tail) munmap(reinterpret_cast<void*>(a + rounded), tail);
  madvise(reinterpret_cast<void*>(a), rounded, MADV_HUGEPAGE);  // advice only: ignored where THP is off
  return reinterpret_cast<void*>(a);
}
#endif

}  // namespace

std::shared_ptr<Buffer> Buffer::allocate(size_t nbytes) {
#if defined(__linux__)
  if (nbytes >= kMapAtLeast) {
    const size_t rounded = (nbytes + kHugePage - 1) / kHugePage * kHugePage;
    if (void* p = map_huge(rounded)) {
      auto b = std::make_shared<Buffer>();
      b->data = p;
      b->nbytes = nbytes;
      b->owner = std::shared_ptr<void>(p, [rounded](void* q) { munmap(q, rounded); });
      return b;
    }
  }
#endif
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
