// Data-dependent ops: their kernels allocate the outputs when they run (cpu_backend.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/registry.h"

namespace mg::cpu {

namespace {

constexpr int64_t kChunk = 1 << 16;

// Non-zero test on the bits: `mask` drops a float's sign, so -0.0 is zero and NaN is not.
template <class U>
void count_non_zero(const void* x, int64_t n, U mask, std::vector<int64_t>& counts) {
  const U* p = static_cast<const U*>(x);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  counts.assign(size_t(chunks), 0);
  parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      int64_t k = 0;
      for (int64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) k += (p[i] & mask) != 0;
      counts[size_t(c)] = k;
    }
  });
}

template <class U>
void write_indices(const void* x, int64_t n, U mask, const Shape& shape, const std::vector<int64_t>& first,
                   int32_t* out) {
  const U* p = static_cast<const U*>(x);
  const size_t rank = shape.size();
  parallel_for(int64_t(first.size()), 1, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(rank);
    for (int64_t c = b; c < e; ++c) {
      int64_t i = c * kChunk, rest = i;
      for (size_t d = rank; d-- > 0;) {  // the chunk's first index, then counted up
        idx[d] = rest % shape[d];
        rest /= shape[d];
      }
      int32_t* o = out + first[size_t(c)] * int64_t(rank);
      for (int64_t end = std::min(n, i + kChunk); i < end; ++i) {
        if ((p[i] & mask) != 0) {
          for (size_t d = 0; d < rank; ++d) *o++ = int32_t(idx[d]);
        }
        for (size_t d = rank; d-- > 0;) {
          if (++idx[d] < shape[d]) break;
          idx[d] = 0;
        }
      }
    }
  });
}

template <class U>
std::shared_ptr<Array> non_zero_indices(const Array& x, U mask) {
  const int64_t n = x.size();
  std::vector<int64_t> counts;
  count_non_zero<U>(x.data(), n, mask, counts);
  std::vector<int64_t> first(counts.size());
  int64_t total = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    first[c] = total;
    total += counts[c];
  }
  auto out = Array::empty(DType::Int32, {total, int64_t(x.shape.size())});
  if (total > 0 && !x.shape.empty()) write_indices<U>(x.data(), n, mask, x.shape, first, static_cast<int32_t*>(out->data()));
  return out;
}

DynamicKernelFn make_non_zero_indices(const Node& node, const std::vector<TensorType>& in) {
  for (auto d : in[0].shape)
    if (d > std::numeric_limits<int32_t>::max())
      raise(ErrorKind::Value, node.op->name, node.name, "dim " + std::to_string(d) + " of " + type_str(in[0]) +
                                                            " does not fit the int32 indices");
  const DType t = in[0].dtype;
  const bool flt = is_floating(t);
  switch (dtype_size(t)) {
    case 1:
      return [](const std::vector<std::shared_ptr<const Array>>& x) {
        return std::vector<std::shared_ptr<Array>>{non_zero_indices<uint8_t>(*x[0], 0xff)};
      };
    case 2: {
      const uint16_t mask = flt ? 0x7fff : 0xffff;
      return [mask](const std::vector<std::shared_ptr<const Array>>& x) {
        return std::vector<std::shared_ptr<Array>>{non_zero_indices<uint16_t>(*x[0], mask)};
      };
    }
    case 4: {
      const uint32_t mask = flt ? 0x7fffffffu : 0xffffffffu;
      return [mask](const std::vector<std::shared_ptr<const Array>>& x) {
        return std::vector<std::shared_ptr<Array>>{non_zero_indices<uint32_t>(*x[0], mask)};
      };
    }
    default: {
      const uint64_t mask = flt ? 0x7fffffffffffffffull : ~0ull;
      return [mask](const std::vector<std::shared_ptr<const Array>>& x) {
        return std::vector<std::shared_ptr<Array>>{non_zero_indices<uint64_t>(*x[0], mask)};
      };
    }
  }
}

}  // namespace

void register_dynamic_kernels() { register_dynamic_kernel("non_zero_indices", make_non_zero_indices); }

}  // namespace mg::cpu
