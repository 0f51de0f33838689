// CPU kernels for the creation family. The factory converts the fill value (or, for
// arange, every value) into the output dtype once; a run only copies bytes.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/creation_attrs.h"

namespace mg::cpu {

namespace {

// Fills n elements of size `esize` with the bytes of `elem`.
template <class W>
void fill_words(void* out, int64_t n, const void* elem) {
  W v;
  std::memcpy(&v, elem, sizeof(W));
  W* o = static_cast<W*>(out);
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = v;
  });
}

void fill_bytes(void* out, int64_t n, const uint8_t* elem, size_t esize) {
  switch (esize) {
    case 1: fill_words<uint8_t>(out, n, elem); break;
    case 2: fill_words<uint16_t>(out, n, elem); break;
    case 4: fill_words<uint32_t>(out, n, elem); break;
    default: fill_words<uint64_t>(out, n, elem); break;
  }
}

std::array<uint8_t, 8> element_bytes(DType t, double v) {
  std::array<uint8_t, 8> e{};
  store_from_double(e.data(), t, 0, v);
  return e;
}

KernelFactory fill_factory(bool with_value, double fixed) {
  return [with_value, fixed](const KernelCtx& c) -> KernelFn {
    double v = with_value ? typed_attrs<ops::FillAttrs>(c.node).value : fixed;
    DType t = c.out[0].dtype;
    auto e = element_bytes(t, v);
    size_t esize = dtype_size(t);
    int64_t n = num_elements(c.out[0].shape);
    bool zero = true;
    for (size_t i = 0; i < esize; ++i) zero = zero && e[i] == 0;
    if (zero) {
      size_t bytes = size_t(n) * esize;
      return [bytes](const void* const*, void* const* out) {
        if (bytes) std::memset(out[0], 0, bytes);
      };
    }
    return [e, esize, n](const void* const*, void* const* out) { fill_bytes(out[0], n, e.data(), esize); };
  };
}

KernelFn arange_factory(const KernelCtx& c) {
  const ops::ArangeAttrs& a = typed_attrs<ops::ArangeAttrs>(c.node);
  double start = a.start;
  double step = a.step;
  DType t = c.out[0].dtype;
  int64_t n = num_elements(c.out[0].shape);
  auto values = std::make_shared<std::vector<uint8_t>>(size_t(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) store_from_double(values->data(), t, i, start + double(i) * step);
  return [values](const void* const*, void* const* out) {
    if (!values->empty()) std::memcpy(out[0], values->data(), values->size());
  };
}

KernelFn eye_factory(const KernelCtx& c) {
  int64_t n = c.out[0].shape[0], m = c.out[0].shape[1];
  int64_t k = typed_attrs<ops::EyeAttrs>(c.node).k;
  DType t = c.out[0].dtype;
  size_t esize = dtype_size(t);
  auto one = element_bytes(t, 1.0);
  // diagonal positions (i, i + k) inside the matrix
  int64_t i0 = k >= 0 ? 0 : -k;
  int64_t count = 0;
  if (i0 < n && i0 + k < m) count = std::min(n - i0, m - (i0 + k));
  int64_t first = i0 * m + i0 + k;
  size_t bytes = size_t(n * m) * esize;
  return [one, esize, count, first, m, bytes](const void* const*, void* const* out) {
    if (bytes) std::memset(out[0], 0, bytes);
    uint8_t* o = static_cast<uint8_t*>(out[0]);
    for (int64_t j = 0; j < count; ++j) std::memcpy(o + size_t(first + j * (m + 1)) * esize, one.data(), esize);
  };
}

}  // namespace

void register_creation_kernels() {
  register_kernel("zeros", fill_factory(false, 0.0));
  register_kernel("ones", fill_factory(false, 1.0));
  register_kernel("full", fill_factory(true, 0.0));
  register_kernel("arange", arange_factory);
  register_kernel("eye", eye_factory);
}

}  // namespace mg::cpu
