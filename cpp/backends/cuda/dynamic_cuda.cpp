// Data-dependent ops on the GPU (Backend::run_data_dependent): they run between the stages of
// a run (runtime/executable.h). non_zero_indices counts the non-zero elements of each block of
// 1024 on the GPU, reads the counts back, sizes the result from their sum, then a second
// kernel writes each block's indices from its offset (a scan inside the block keeps the
// row-major order the CPU gives).
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/registry.h"

namespace mg::cuda {

namespace {

constexpr int kThreads = 256, kPerThread = 4, kBlockElems = kThreads * kPerThread;

struct NzShape {
  int64_t n = 0;
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
};

// U: the unsigned integer of the element's size; an element is non-zero when (bits & mask) != 0
// (the mask drops a float's sign: -0.0 is zero, NaN is not).
const char* kNonZero = R"(
#define THREADS 256
#define PER 4
struct NzShape { i64 n; i32 rank; i64 shape[8]; };
extern "C" __global__ void nz_count(const U* __restrict__ x, NzShape s, U mask, i32* __restrict__ counts) {
  const i64 base = (i64)blockIdx.x * (THREADS * PER);
  int total = 0;
  for (int k = 0; k < PER; ++k) {
    const i64 i = base + k * THREADS + threadIdx.x;
    total += __syncthreads_count(i < s.n && (x[i] & mask) != 0);
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}
extern "C" __global__ void nz_write(const U* __restrict__ x, NzShape s, U mask, const i64* __restrict__ first,
                                    i32* __restrict__ out) {
  __shared__ int warp_sum[THREADS / 32];
  const i64 begin = (i64)blockIdx.x * (THREADS * PER) + threadIdx.x * PER;
  int c = 0;
  for (int j = 0; j < PER; ++j) c += begin + j < s.n && (x[begin + j] & mask) != 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int v = c;  // inclusive scan over the warp, then over the warps' sums
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  if (lane == 31) warp_sum[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = lane < THREADS / 32 ? warp_sum[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < THREADS / 32) warp_sum[lane] = w;
  }
  __syncthreads();
  i64 pos = first[blockIdx.x] + (v - c) + (warp ? warp_sum[warp - 1] : 0);
  for (int j = 0; j < PER; ++j) {
    const i64 i = begin + j;
    if (i < s.n && (x[i] & mask) != 0) {
      i64 rest = i;
      for (int d = s.rank - 1; d >= 0; --d) {
        out[pos * s.rank + d] = (i32)(rest % s.shape[d]);
        rest /= s.shape[d];
      }
      ++pos;
    }
  }
}
)";

std::string non_zero_source(size_t itemsize) {
  const char* u = itemsize == 1 ? "u8" : itemsize == 2 ? "u16" : itemsize == 4 ? "u32" : "u64";
  return prelude() + "typedef " + u + " U;\n" + kNonZero;
}

std::shared_ptr<Array> device_array(DType dtype, const Shape& shape) {
  auto a = std::make_shared<Array>();
  a->dtype = dtype;
  a->shape = shape;
  a->buffer = device_alloc(a->nbytes());
  return a;
}

template <class U>
void launch_nz(const Kernel& k, int64_t blocks, const void* x, const NzShape& s, uint64_t mask, void* p2, void* p3) {
  U m = U(mask);
  NzShape sh = s;
  void* args[] = {&x, &sh, &m, &p2, &p3};
  launch(k, blocks, kThreads, 0, context().stream, args);
}

void launch_nz_sized(size_t itemsize, const Kernel& k, int64_t blocks, const void* x, const NzShape& s, uint64_t mask,
                     void* p2, void* p3) {
  switch (itemsize) {
    case 1: return launch_nz<uint8_t>(k, blocks, x, s, mask, p2, p3);
    case 2: return launch_nz<uint16_t>(k, blocks, x, s, mask, p2, p3);
    case 4: return launch_nz<uint32_t>(k, blocks, x, s, mask, p2, p3);
    default: return launch_nz<uint64_t>(k, blocks, x, s, mask, p2, p3);
  }
}

std::shared_ptr<Array> non_zero_indices(const Node& node, const TensorType& t, const Array& x) {
  const int64_t rank = int64_t(t.shape.size());
  if (t.dtype == DType::Float64 || t.dtype == DType::Complex64 || t.dtype == DType::Complex128)
    raise(ErrorKind::Type, node.op->name, node.name,
          std::string(dtype_name(t.dtype)) + " is not supported on the cuda backend (it runs on the cpu only)");
  if (rank > kMaxRank)
    raise(ErrorKind::NotImplemented, node.op->name, node.name, "inputs of rank above 8 on cuda, got " + type_str(t));
  for (auto d : t.shape)
    if (d > std::numeric_limits<int32_t>::max())
      raise(ErrorKind::Value, node.op->name, node.name, "dim " + std::to_string(d) + " of " + type_str(t) +
                                                            " does not fit the int32 indices");
  const int64_t n = num_elements(t.shape);
  if (n == 0) return device_array(DType::Int32, {0, rank});
  cudaStream_t stream = context().stream;
  const size_t itemsize = dtype_size(t.dtype);
  const void* xd = x.data();
  std::shared_ptr<Buffer> staged;
  if (!is_device_pointer(xd)) {  // a host feed or constant
    staged = device_alloc(x.nbytes());
    check(cudaMemcpyAsync(staged->data, xd, x.nbytes(), cudaMemcpyHostToDevice, stream), "copying an input to the GPU");
    xd = staged->data;
  }
  const uint64_t mask = !is_floating(t.dtype) ? ~0ull : itemsize == 2 ? 0x7fffull : itemsize == 4 ? 0x7fffffffull
                                                                                                   : 0x7fffffffffffffffull;
  NzShape s;
  s.n = n;
  s.rank = int32_t(rank);
  for (int64_t d = 0; d < rank; ++d) s.shape[d] = t.shape[size_t(d)];
  const std::string src = non_zero_source(itemsize);
  const Kernel count = nvrtc_kernel(src, "nz_count"), write = nvrtc_kernel(src, "nz_write");
  const int64_t blocks = (n + kBlockElems - 1) / kBlockElems;
  auto counts_d = device_alloc(size_t(blocks) * sizeof(int32_t));
  launch_nz_sized(itemsize, count, blocks, xd, s, mask, counts_d->data, nullptr);
  std::vector<int32_t> counts(static_cast<size_t>(blocks));
  check(cudaMemcpyAsync(counts.data(), counts_d->data, counts.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
        "reading non-zero counts");
  check(cudaStreamSynchronize(stream), "counting non-zero elements");
  std::vector<int64_t> first(static_cast<size_t>(blocks));
  int64_t total = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    first[b] = total;
    total += counts[b];
  }
  auto out = device_array(DType::Int32, {total, rank});
  if (total > 0 && rank > 0) {
    auto first_d = device_alloc(first.size() * sizeof(int64_t));
    check(cudaMemcpyAsync(first_d->data, first.data(), first.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream),
          "uploading block offsets");
    launch_nz_sized(itemsize, write, blocks, xd, s, mask, first_d->data, out->data());
    check(cudaStreamSynchronize(stream), "writing non-zero indices");  // first lives until here
  }
  return out;
}

}  // namespace

std::vector<std::shared_ptr<Array>> run_data_dependent(const Node& node, const std::vector<TensorType>& in_types,
                                                       const std::vector<std::shared_ptr<const Array>>& inputs) {
  if (node.op->name == "non_zero_indices") return {non_zero_indices(node, in_types[0], *inputs[0])};
  raise(ErrorKind::NotImplemented, node.op->name, node.name,
        "has no kernel on the cuda backend yet (it runs on the cpu: device='cpu')");
}

}  // namespace mg::cuda
