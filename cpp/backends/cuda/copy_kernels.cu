// The fixed kernels, built ahead of time by nvcc: strided copies (transpose, slice, concat,
// broadcast, reverse, tile, pad...) and fills. Elements are moved as raw bytes of their size.
#include <cstdint>

#include "backends/cuda/cuda_internal.h"

namespace mg::cuda {
namespace {

template <class T>
__global__ void strided_copy_kernel(StridedCopy c, const T* __restrict__ src, T* __restrict__ dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, so = c.src_offset, d = c.dst_offset;
    for (int k = c.rank - 1; k >= 0; --k) {
      const int64_t q = rem / c.shape[k], idx = rem - q * c.shape[k];
      rem = q;
      so += idx * c.src_stride[k];
      d += idx * c.dst_stride[k];
    }
    dst[d] = src[so];
  }
}

template <class T>
__global__ void fill_kernel(T* dst, int64_t n, T v) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) dst[i] = v;
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

}  // namespace

void strided_copy(const StridedCopy& c, const void* src, void* dst, cudaStream_t s) {
  if (c.n <= 0) return;
  const unsigned g = grid_for(c.n);
  switch (c.itemsize) {
    case 1: strided_copy_kernel<uint8_t><<<g, 256, 0, s>>>(c, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst)); break;
    case 2: strided_copy_kernel<uint16_t><<<g, 256, 0, s>>>(c, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst)); break;
    case 4: strided_copy_kernel<uint32_t><<<g, 256, 0, s>>>(c, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst)); break;
    default: strided_copy_kernel<uint64_t><<<g, 256, 0, s>>>(c, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst)); break;
  }
  check(cudaGetLastError(), "strided copy launch");
}

void fill_bytes(void* dst, int64_t n, int32_t itemsize, uint64_t value, cudaStream_t s) {
  if (n <= 0) return;
  const unsigned g = grid_for(n);
  switch (itemsize) {
    case 1: fill_kernel<uint8_t><<<g, 256, 0, s>>>(static_cast<uint8_t*>(dst), n, uint8_t(value)); break;
    case 2: fill_kernel<uint16_t><<<g, 256, 0, s>>>(static_cast<uint16_t*>(dst), n, uint16_t(value)); break;
    case 4: fill_kernel<uint32_t><<<g, 256, 0, s>>>(static_cast<uint32_t*>(dst), n, uint32_t(value)); break;
    default: fill_kernel<uint64_t><<<g, 256, 0, s>>>(static_cast<uint64_t*>(dst), n, value); break;
  }
  check(cudaGetLastError(), "fill launch");
}

}  // namespace mg::cuda
