// CUDA random_uniform_like: the CPU's Philox-4x32-10 stream (kernels_random.cpp), so a seed
// gives the same uniform numbers bit for bit on the GPU and the CPU: element i of run r is word
// i % 4 of block i / 4 under (seed, r), its top 24 bits scaled to [0, 1); float16 and bfloat16
// round to nearest even and stay below 1. The run counter lives in device memory and a
// one-thread kernel bumps it after each fill, so replays of a captured CUDA graph draw fresh
// numbers; it starts at 0 per executable, as on the CPU. The other random ops expand into
// this one (their float32 math then follows the elementwise kernels).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/random_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

const char* kPhilox = R"(
__device__ __forceinline__ void mg_philox(u64 seed, u64 run, u64 block, u32 out[4]) {
  u32 c[4] = {(u32)block, (u32)(block >> 32), (u32)run, (u32)(run >> 32)};
  u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const u64 p0 = (u64)0xD2511F53u * c[0], p1 = (u64)0xCD9E8D57u * c[2];
    const u32 c0 = (u32)(p1 >> 32) ^ c[1] ^ k0, c2 = (u32)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = c0; c[1] = (u32)p1; c[2] = c2; c[3] = (u32)p0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}
extern "C" __global__ void uniform(i64 n, u64 seed, const u64* run, S* __restrict__ y) {
  const u64 r = *run;
  const i64 blocks = (n + 3) / 4;
  for (i64 b = blockIdx.x * (i64)blockDim.x + threadIdx.x; b < blocks; b += (i64)gridDim.x * blockDim.x) {
    u32 w[4];
    mg_philox(seed, r, (u64)b, w);
    for (int j = 0; j < 4; ++j) {
      const i64 i = b * 4 + j;
      if (i >= n) break;
      const float u = (float)(w[j] >> 8) * (1.0f / 16777216.0f);
      S v = STORE(u);
      if (LOAD(v) >= 1.0f) v = STORE(ONE_BELOW);
      y[i] = v;
    }
  }
}
extern "C" __global__ void bump(u64* run) { *run += 1; }
)";

LaunchFn uniform_factory(const KernelCtx& c) {
  const DType t = c.out[0].dtype;
  if (!is_floating(t)) raise(ErrorKind::Type, "random_uniform_like", c.node.name, "dtype must be floating");
  const std::string below = t == DType::BFloat16 ? "0.99609375f" : t == DType::Float16 ? "0.99951171875f" : "0.99999994f";
  const std::string src = prelude() + "typedef " + storage_type(t) + " S;\n#define STORE(v) " + store_expr(t, "v") +
                          "\n#define LOAD(v) " + load_expr(t, "v") + "\n#define ONE_BELOW " + below + "\n" + kPhilox;
  const Kernel fill = nvrtc_kernel(src, "uniform"), bump = nvrtc_kernel(src, "bump");
  const int64_t n = num_elements(c.out[0].shape);
  const uint64_t seed = uint64_t(typed_attrs<ops::RandomUniformAttrs>(c.node).seed);
  std::shared_ptr<Buffer> run = device_alloc(sizeof(uint64_t));  // this executable's run counter
  memset_sync(run->data, 0, sizeof(uint64_t), "clearing a random run counter");
  return [=](cudaStream_t s, const void* const*, void* const* out) {
    int64_t nn = n;
    uint64_t sd = seed;
    void* r = run->data;
    void* y = out[0];
    if (n > 0) {
      void* args[] = {&nn, &sd, &r, &y};
      launch(fill, std::min<int64_t>((n / 4 + 256) / 256, int64_t(1) << 20), 256, 0, s, args);
    }
    void* bargs[] = {&r};
    launch(bump, 1, 1, 0, s, bargs);
  };
}

}  // namespace

void register_random_kernels() { register_kernel("random_uniform_like", uniform_factory); }

}  // namespace mg::cuda
