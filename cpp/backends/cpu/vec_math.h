// Vectorised float32 transcendental functions over arrays, with runtime ISA dispatch.
//
// Each function is a branch-free polynomial (Cephes-style range reduction; erf and the
// constants of its two pieces fitted for this file) that compilers vectorise. The loops are
// compiled once per ISA (x86: AVX-512, AVX2+FMA, and the baseline; elsewhere the baseline,
// which is NEON on arm64) and the best one the CPU supports is picked at first use. The
// environment variable MPSGRAPH_CPU_ISA=generic|avx2|avx512 caps the choice (tests use it
// to check every path on one machine).
//
// Accuracy: the distance to the exact value, in units of the float32 ulp at that value, over
// float32 inputs incl. subnormals, +-inf and NaN (tests/test_vec_math.py, on every ISA path):
// exp <= 1, log <= 1, tanh <= 1.5, sigmoid <= 2.5, erf <= 1.5 (a correctly rounded function
// would be 0.5). Special values follow C99/IEEE: exp(-inf) = 0,
// log(0) = -inf, log(x < 0) = NaN, NaN in gives NaN out; subnormal results are produced
// (not flushed).
#pragma once
#include <cstdint>

namespace mg::cpu::vmath {

enum class Fn { Exp, Log, Tanh, Sigmoid, Erf };

// y[i] = fn(x[i]) for i in [0, n); x and y must not overlap.
using ArrayFn = void (*)(const float* x, float* y, int64_t n);
ArrayFn array_fn(Fn fn);

// The ISA the dispatched loops run on: "avx512", "avx2" or "generic".
const char* isa();

}  // namespace mg::cpu::vmath
