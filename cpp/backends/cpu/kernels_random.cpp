// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// counter-based, so element i of run r is a pure function of (seed, r, i) and threads
// need no shared state.
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/random_attrs.h"

namespace mg::cpu {

namespace {

struct Philox {
  static void round(uint32_t ctr[4], uint32_t key[2]) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * ctr[0], p1 = uint64_t(0xCD9E8D57u) * ctr[2];
    uint32_t c0 = uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], c2 = uint32_t(p0 >> 32) ^ ctr[3] ^ key[1];
    ctr[0] = c0;
    ctr[1] = uint32_t(p1);
    ctr[2] = c2;
    ctr[3] = uint32_t(p0);
  }
  // 4 random words for block `block` of run `run` under `seed`
  static void block(uint64_t seed, uint64_t run, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {uint32_t(block), uint32_t(block >> 32), uint32_t(run), uint32_t(run >> 32)};
    uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
    for (int r = 0; r < 10; ++r) {
      round(ctr, key);
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    for (int i = 0; i < 4; ++i) out[i] = ctr[i];
  }
};

template <class S>
void fill_uniform(S* o, int64_t n, uint64_t seed, uint64_t run) {
  // float64 takes 53 bits from two words; narrower types 24 bits from one
  constexpr int per_block = std::is_same_v<S, double> ? 2 : 4;
  parallel_for((n + per_block - 1) / per_block, 4096, [&](int64_t b, int64_t e) {
    uint32_t w[4];
    for (int64_t blk = b; blk < e; ++blk) {
      Philox::block(seed, run, uint64_t(blk), w);
      for (int j = 0; j < per_block; ++j) {
        int64_t i = blk * per_block + j;
        if (i >= n) break;
        if constexpr (std::is_same_v<S, double>) {
          uint64_t bits = (uint64_t(w[2 * j]) << 21) ^ (uint64_t(w[2 * j + 1]) >> 11);
          o[i] = double(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
        } else {
          float u = float(w[j] >> 8) * (1.0f / 16777216.0f);
          // rounding to half/bfloat16 may reach 1.0: keep [0, 1)
          S v = Num<S>::st(u);
          if (Num<S>::ld(v) >= 1.0f) v = Num<S>::st(std::is_same_v<S, bfloat16_t> ? 0.99609375f : 0.99951171875f);
          o[i] = v;
        }
      }
    }
  });
}

}  // namespace

void register_random_kernels() {
  register_kernel("random_uniform_like", [](const KernelCtx& c) -> KernelFn {
    int64_t n = num_elements(c.out[0].shape);
    uint64_t seed = uint64_t(typed_attrs<ops::RandomUniformAttrs>(c.node).seed);
    auto runs = std::make_shared<std::atomic<uint64_t>>(0);  // this executable's run counter
    return dispatch_dtype(c.out[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (is_float_storage<S>) {
        return [n, seed, runs](const void* const*, void* const* out) {
          fill_uniform<S>(static_cast<S*>(out[0]), n, seed, runs->fetch_add(1));
        };
      } else {
        raise(ErrorKind::Type, "random_uniform_like", c.node.name, "dtype must be floating");
      }
    });
  });
}

}  // namespace mg::cpu
