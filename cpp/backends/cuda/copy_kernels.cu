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

// Division by a divisor fixed at launch as a multiply-high and a shift (Granlund-Montgomery),
// exact for dividends below 2^31: the 64-bit div/mod per dim cost more than the memory
// traffic of a copy (a 38M-element NCHW->NHWC copy ran at 1/8 of bandwidth).
struct FastDiv {
  uint32_t d = 1, m = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((uint64_t(1) << shift) < d) ++shift;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> shift; }
};

// A copy whose element count and every offset it reaches fit in 31 bits, dims innermost last.
struct Copy32 {
  uint32_t n = 0;
  FastDiv dim[kMaxRank];
  int32_t src_stride[kMaxRank] = {}, dst_stride[kMaxRank] = {};
  int32_t src_offset = 0, dst_offset = 0;
};

template <class T, int R>
__global__ void strided_copy32_kernel(Copy32 c, const T* __restrict__ src, T* __restrict__ dst) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < c.n; i += gridDim.x * blockDim.x) {
    uint32_t rem = i;
    int32_t so = c.src_offset, d = c.dst_offset;
#pragma unroll
    for (int k = R - 1; k > 0; --k) {
      const uint32_t q = c.dim[k].div(rem), idx = rem - q * c.dim[k].d;
      rem = q;
      so += int32_t(idx) * c.src_stride[k];
      d += int32_t(idx) * c.dst_stride[k];
    }
    dst[d + int32_t(rem) * c.dst_stride[0]] = src[so + int32_t(rem) * c.src_stride[0]];
  }
}

// A transpose: dim a is contiguous in the source, dim b in the destination. 32x32 tiles go
// through shared memory so that both the reads and the writes are coalesced; the other dims
// (at most kMaxRank - 2) are batches, one per blockIdx.y step.
struct TileCopy {
  uint32_t len_a = 0, len_b = 0, tiles_a = 0, batches = 0;
  int32_t src_stride_b = 0, dst_stride_a = 0;
  int32_t nb = 0;
  FastDiv batch_dim[kMaxRank];
  int32_t batch_src[kMaxRank] = {}, batch_dst[kMaxRank] = {};
  int32_t src_offset = 0, dst_offset = 0;
};

template <class T>
__global__ void tiled_transpose_kernel(TileCopy c, const T* __restrict__ src, T* __restrict__ dst) {
  __shared__ T tile[32][33];
  const uint32_t ta = blockIdx.x % c.tiles_a, tb = blockIdx.x / c.tiles_a;
  const uint32_t a0 = ta * 32, b0 = tb * 32, tx = threadIdx.x, ty = threadIdx.y;
  for (uint32_t batch = blockIdx.y; batch < c.batches; batch += gridDim.y) {
    uint32_t rem = batch;
    int32_t so = c.src_offset, d = c.dst_offset;
    for (int k = c.nb - 1; k >= 0; --k) {
      const uint32_t q = c.batch_dim[k].div(rem), idx = rem - q * c.batch_dim[k].d;
      rem = q;
      so += int32_t(idx) * c.batch_src[k];
      d += int32_t(idx) * c.batch_dst[k];
    }
#pragma unroll
    for (uint32_t j = 0; j < 32; j += 8) {
      const uint32_t a = a0 + tx, b = b0 + ty + j;
      if (a < c.len_a && b < c.len_b) tile[ty + j][tx] = src[so + int32_t(a) + int32_t(b) * c.src_stride_b];
    }
    __syncthreads();
#pragma unroll
    for (uint32_t j = 0; j < 32; j += 8) {
      const uint32_t b = b0 + tx, a = a0 + ty + j;
      if (a < c.len_a && b < c.len_b) dst[d + int32_t(b) + int32_t(a) * c.dst_stride_a] = tile[tx][ty + j];
    }
    __syncthreads();
  }
}

template <class T>
__global__ void fill_kernel(T* dst, int64_t n, T v) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) dst[i] = v;
}

// Copy blockIdx.y of the batch: 16-byte words where both ends are 16-byte aligned, bytes else.
__global__ void batch_copy_kernel(CopyBatch b) {
  const int k = int(blockIdx.y);
  const char* src = static_cast<const char*>(b.src[k]);
  char* dst = static_cast<char*>(b.dst[k]);
  const int64_t n = b.nbytes[k], step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t words = 0;
  if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) {
    words = n / 16;
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (int64_t i = first; i < words; i += step) d4[i] = s4[i];
  }
  for (int64_t i = words * 16 + first; i < n; i += step) dst[i] = src[i];
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// Whether every offset `offset + sum i_k * stride_k` lies in [0, 2^31).
bool fits31(const StridedCopy& c, bool src) {
  int64_t lo = src ? c.src_offset : c.dst_offset, hi = lo;
  for (int k = 0; k < c.rank; ++k) {
    const int64_t st = src ? c.src_stride[k] : c.dst_stride[k], span = (c.shape[k] - 1) * st;
    (span < 0 ? lo : hi) += span;
  }
  return lo >= 0 && hi < (int64_t(1) << 31);
}

// MPSGRAPH_CUDA_FAST_COPIES=0 keeps the generic kernel for every copy
bool fast_copies() {
  static const bool on = !switched_off("MPSGRAPH_CUDA_FAST_COPIES");
  return on;
}

// Copies planned by make_copy (dims already merged): the tiled transpose, the 32-bit kernel, or
// the generic one.
template <class T>
void launch_copy(const StridedCopy& c, const void* src_v, void* dst_v, cudaStream_t s) {
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  const bool small = c.n < (int64_t(1) << 31) && fits31(c, true) && fits31(c, false);
  if (!small || !fast_copies()) {
    strided_copy_kernel<T><<<grid_for(c.n), 256, 0, s>>>(c, src, dst);
    return;
  }
  int a = -1, b = -1;
  for (int k = 0; k < c.rank; ++k) {
    if (c.src_stride[k] == 1 && a < 0) a = k;
    if (c.dst_stride[k] == 1 && b < 0) b = k;
  }
  if (a >= 0 && b >= 0 && a != b && c.shape[a] >= 16 && c.shape[b] >= 16) {
    TileCopy t;
    t.len_a = uint32_t(c.shape[a]);
    t.len_b = uint32_t(c.shape[b]);
    t.tiles_a = (t.len_a + 31) / 32;
    t.src_stride_b = int32_t(c.src_stride[b]);
    t.dst_stride_a = int32_t(c.dst_stride[a]);
    t.src_offset = int32_t(c.src_offset);
    t.dst_offset = int32_t(c.dst_offset);
    t.batches = 1;
    for (int k = 0; k < c.rank; ++k) {
      if (k == a || k == b) continue;
      t.batch_dim[t.nb] = FastDiv(uint32_t(c.shape[k]));
      t.batch_src[t.nb] = int32_t(c.src_stride[k]);
      t.batch_dst[t.nb] = int32_t(c.dst_stride[k]);
      ++t.nb;
      t.batches *= uint32_t(c.shape[k]);
    }
    const uint32_t tiles = t.tiles_a * ((t.len_b + 31) / 32);
    const uint32_t per_tile = t.batches < 65535 ? t.batches : 65535;
    tiled_transpose_kernel<T><<<dim3(tiles, per_tile), dim3(32, 8), 0, s>>>(t, src, dst);
    return;
  }
  Copy32 k32;
  k32.n = uint32_t(c.n);
  k32.src_offset = int32_t(c.src_offset);
  k32.dst_offset = int32_t(c.dst_offset);
  for (int k = 0; k < c.rank; ++k) {
    k32.dim[k] = FastDiv(uint32_t(c.shape[k]));
    k32.src_stride[k] = int32_t(c.src_stride[k]);
    k32.dst_stride[k] = int32_t(c.dst_stride[k]);
  }
  const unsigned g = grid_for(c.n);
  switch (c.rank) {
    case 1: strided_copy32_kernel<T, 1><<<g, 256, 0, s>>>(k32, src, dst); break;
    case 2: strided_copy32_kernel<T, 2><<<g, 256, 0, s>>>(k32, src, dst); break;
    case 3: strided_copy32_kernel<T, 3><<<g, 256, 0, s>>>(k32, src, dst); break;
    case 4: strided_copy32_kernel<T, 4><<<g, 256, 0, s>>>(k32, src, dst); break;
    case 5: strided_copy32_kernel<T, 5><<<g, 256, 0, s>>>(k32, src, dst); break;
    case 6: strided_copy32_kernel<T, 6><<<g, 256, 0, s>>>(k32, src, dst); break;
    case 7: strided_copy32_kernel<T, 7><<<g, 256, 0, s>>>(k32, src, dst); break;
    default: strided_copy32_kernel<T, 8><<<g, 256, 0, s>>>(k32, src, dst); break;
  }
}

}  // namespace

void strided_copy(const StridedCopy& c, const void* src, void* dst, cudaStream_t s) {
  if (c.n <= 0) return;
  switch (c.itemsize) {
    case 1: launch_copy<uint8_t>(c, src, dst, s); break;
    case 2: launch_copy<uint16_t>(c, src, dst, s); break;
    case 4: launch_copy<uint32_t>(c, src, dst, s); break;
    default: launch_copy<uint64_t>(c, src, dst, s); break;
  }
  check(cudaGetLastError(), "strided copy launch");
}

void batch_copy(const CopyBatch& b, cudaStream_t s) {
  if (b.n <= 0) return;
  int64_t most = 0;
  for (int k = 0; k < b.n; ++k) most = most > b.nbytes[k] ? most : b.nbytes[k];
  const int64_t blocks = (most / 16 + 255) / 256;
  const dim3 grid(unsigned(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks), unsigned(b.n));
  batch_copy_kernel<<<grid, 256, 0, s>>>(b);
  check(cudaGetLastError(), "batch copy launch");
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
