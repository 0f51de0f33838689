// random_uniform_like on the metal backend: the CPU kernel's Philox-4x32-10 stream
// (cpp/backends/cpu/kernels_random.cpp), computed inside the MPSGraph with uint32 arithmetic.
//
// Element i of run r under seed s is a pure function of (s, r, i): Philox block i / 4 with the
// counter (block, 0, r low, r high) and the key (s low, s high), lane i % 4, and
// u = (word >> 8) * 2**-24. The run number r is the program's run counter (a uint32 [2]
// placeholder fed at every run, see metal_program.mm), so each run of an executable draws fresh
// numbers and the same seed gives the same sequence of runs in every new executable -- the
// same numbers as the CPU backend, bit for bit (integer arithmetic only; the final
// conversions are exact for float32, and rounded once for float16 / bfloat16 as on the CPU).
// MPSGraph's own random ops (randomUniformTensorWithShape:stateTensor:name:) are not used:
// their stream is not Philox-compatible with the CPU's, and their state would have to
// round-trip through the program after every run.
//
// The 32 x 32 -> 64-bit products Philox needs are built from 16-bit halves in uint32 (no
// partial product overflows), so nothing depends on 64-bit integer support (macOS 13.3).
#include "backends/metal/metal_internal.h"
#include "core/ops/random_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

struct Philox {
  LowerCtx& c;
  T u32(uint32_t v) { return c.k_int(int64_t(v), DType::UInt32); }
  T band(T a, uint32_t m) { return [c.g bitwiseANDWithPrimaryTensor:a secondaryTensor:u32(m) name:nil]; }
  T shr(T a, uint32_t n) { return [c.g bitwiseRightShiftWithPrimaryTensor:a secondaryTensor:u32(n) name:nil]; }
  T shl(T a, uint32_t n) { return [c.g bitwiseLeftShiftWithPrimaryTensor:a secondaryTensor:u32(n) name:nil]; }
  T bxor(T a, T b) { return [c.g bitwiseXORWithPrimaryTensor:a secondaryTensor:b name:nil]; }
  T bor(T a, T b) { return [c.g bitwiseORWithPrimaryTensor:a secondaryTensor:b name:nil]; }

  // (high, low) words of the 64-bit product a * m, from 16-bit halves: every partial product
  // and partial sum stays below 2**32.
  void mulhilo(T a, uint32_t m, T __strong& hi, T __strong& lo) {
    T a0 = band(a, 0xFFFFu), a1 = shr(a, 16);
    T m0 = u32(m & 0xFFFFu), m1 = u32(m >> 16);
    T t00 = c.mul(a0, m0), t01 = c.mul(a0, m1), t10 = c.mul(a1, m0), t11 = c.mul(a1, m1);
    T mid = c.add(c.add(shr(t00, 16), band(t01, 0xFFFFu)), band(t10, 0xFFFFu));  // < 3 * 2**16
    hi = c.add(c.add(c.add(t11, shr(t01, 16)), shr(t10, 16)), shr(mid, 16));
    lo = bor(shl(mid, 16), band(t00, 0xFFFFu));
  }
};

}  // namespace

void register_random_lowerings() {
  register_lowering("random_uniform_like", [](LowerCtx& c) {
    const TensorType& ot = c.out();
    if (!is_float_dtype(ot.dtype)) c.fail(ErrorKind::Type, "dtype must be floating");
    const int64_t n = num_elements(ot.shape);
    const int64_t nblocks = (n + 3) / 4;
    const uint64_t seed = uint64_t(typed_attrs<ops::RandomUniformAttrs>(c.node).seed);
    Philox p{c};

    T counter = c.run_counter();  // uint32 [2]: runs so far (low, high)
    T run_lo = [c.g sliceTensor:counter dimension:0 start:0 length:1 name:nil];
    T run_hi = [c.g sliceTensor:counter dimension:0 start:1 length:1 name:nil];
    T block = c.raw_cast([c.g coordinateAlongAxis:0 withShape:@[ @(nblocks) ] name:nil], DType::UInt32);  // 12.3

    // Philox-4x32-10, as Philox::block on the CPU: ctr = (block, 0, run low, run high)
    T ctr[4] = {block, p.u32(0), run_lo, run_hi};
    uint32_t key0 = uint32_t(seed), key1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      T hi0, lo0, hi1, lo1;
      p.mulhilo(ctr[0], 0xD2511F53u, hi0, lo0);
      p.mulhilo(ctr[2], 0xCD9E8D57u, hi1, lo1);
      T n0 = p.bxor(p.bxor(hi1, ctr[1]), p.u32(key0));
      T n2 = p.bxor(p.bxor(hi0, ctr[3]), p.u32(key1));
      ctr[0] = n0;
      ctr[1] = lo1;
      ctr[2] = n2;
      ctr[3] = lo0;
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    // element 4 * block + j is lane j: interleave the four lanes, drop the tail
    NSMutableArray<MPSGraphTensor*>* lanes = [NSMutableArray array];
    for (int j = 0; j < 4; ++j) [lanes addObject:c.reshape(c.broadcast(ctr[j], Shape{nblocks}), Shape{nblocks, 1})];
    T words = c.reshape([c.g concatTensors:lanes dimension:1 name:nil], Shape{nblocks * 4});
    if (nblocks * 4 != n) words = [c.g sliceTensor:words dimension:0 start:0 length:n name:nil];
    // u = (word >> 8) * 2**-24: exact in float32
    T u = c.mul(c.raw_cast(p.shr(words, 8), DType::Float32), c.k(1.0 / 16777216.0, DType::Float32));
    if (ot.dtype != DType::Float32) {
      // rounding to half / bfloat16 may reach 1.0: keep [0, 1) with the CPU's replacement value
      T v = c.raw_cast(u, ot.dtype);
      const double below_one = ot.dtype == DType::BFloat16 ? 0.99609375 : 0.99951171875;
      u = c.sel(c.ge(v, c.k(1.0, ot.dtype)), c.k(below_one, ot.dtype), v);
    }
    return std::vector<T>{c.reshape(u, ot.shape)};
  });
}

}  // namespace mg::metal
