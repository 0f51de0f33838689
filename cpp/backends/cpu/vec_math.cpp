// Vectorised float32 transcendental functions (see vec_math.h for the accuracy bounds).
// The bodies are branch-free (both sides of every choice are computed and one is selected),
// use only +, *, /, integer bit operations and selects, so each loop below vectorises; they
// are compiled once per ISA and picked at first use.
#include "backends/cpu/vec_math.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/isa_target.h"

#if defined(__aarch64__) || defined(__FMA__)
constexpr bool kBaselineFma = true;  // fused multiply-add is part of the baseline ISA
#else
constexpr bool kBaselineFma = false;
#endif

namespace mg::cpu::vmath {

namespace {

inline float as_float(int32_t i) { return std::bit_cast<float>(i); }
inline int32_t as_int(float f) { return std::bit_cast<int32_t>(f); }
// Written with bit operations and plain comparisons (not std::fabs/fmin/copysign) so that
// every compiler vectorises them.
inline float abs_f(float x) { return as_float(as_int(x) & 0x7fffffff); }
inline float with_sign_of(float v, float x) { return as_float((as_int(v) & 0x7fffffff) | (as_int(x) & INT32_MIN)); }
inline float min_f(float a, float b) { return a < b ? a : b; }  // NaN a gives b
inline float max_f(float a, float b) { return a > b ? a : b; }

// a * b + c; fused where the ISA has it (inlined into the per-ISA loops below).
template <bool FMA>
inline float mad(float a, float b, float c) {
  if constexpr (FMA) return std::fma(a, b, c);
  else return a * b + c;
}

// exp: x = n ln2 + r, |r| <= ln2/2, Cephes' degree-6 polynomial for e^r, then 2^n applied
// as two factors so that subnormal results and overflow come out right.
template <bool FMA>
inline float exp_f(float x) {
  const float xc = max_f(min_f(x, 89.0f), -104.0f);  // a NaN becomes a bound here; restored below
  const float t = mad<FMA>(xc, 1.44269504088896341f, 12582912.0f);  // + 1.5 * 2^23: round to integer
  const float nf = t - 12582912.0f;
  const int32_t n = as_int(t) - 0x4B400000;
  float r = mad<FMA>(nf, -0.693359375f, xc);  // ln2 split: the high part times nf is exact
  r = mad<FMA>(nf, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = mad<FMA>(p, r, 1.3981999507e-3f);
  p = mad<FMA>(p, r, 8.3334519073e-3f);
  p = mad<FMA>(p, r, 4.1665795894e-2f);
  p = mad<FMA>(p, r, 1.6666665459e-1f);
  p = mad<FMA>(p, r, 5.0000001201e-1f);
  const float y = mad<FMA>(p * r, r, r) + 1.0f;
  const int32_t n1 = n >> 1, n2 = n - n1;  // each in [-75, 64]: 2^n1, 2^n2 are normal floats
  const float s = y * as_float((n1 + 127) << 23) * as_float((n2 + 127) << 23);
  return x != x ? x : s;
}

// log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), Cephes' polynomial for log(m).
template <bool FMA>
inline float log_f(float x) {
  const bool sub = x < 1.17549435e-38f;  // subnormal (or <= 0): scale into the normal range
  const float xs = sub ? x * 8388608.0f : x;
  const int32_t bits = as_int(xs);
  int32_t e = ((bits >> 23) & 0xff) - 126 - (sub ? 23 : 0);
  float m = as_float((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  const bool lo = m < 0.707106781186547524f;
  e -= lo ? 1 : 0;
  m = (lo ? m + m : m) - 1.0f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = mad<FMA>(p, m, -1.1514610310e-1f);
  p = mad<FMA>(p, m, 1.1676998740e-1f);
  p = mad<FMA>(p, m, -1.2420140846e-1f);
  p = mad<FMA>(p, m, 1.4249322787e-1f);
  p = mad<FMA>(p, m, -1.6668057665e-1f);
  p = mad<FMA>(p, m, 2.0000714765e-1f);
  p = mad<FMA>(p, m, -2.4999993993e-1f);
  p = mad<FMA>(p, m, 3.3333331174e-1f);
  const float fe = float(e);
  float y = p * m * z;
  y = mad<FMA>(fe, -2.12194440e-4f, y);
  y = mad<FMA>(-0.5f, z, y);
  float r = mad<FMA>(fe, 0.693359375f, m + y);
  r = x == INFINITY ? x : r;
  r = x == 0.0f ? -INFINITY : r;
  return (x < 0.0f || x != x) ? NAN : r;
}

// tanh: an odd polynomial below 0.625 (Cephes), 1 - 2 / (e^{2|x|} + 1) above.
template <bool FMA>
inline float tanh_f(float x) {
  const float a = abs_f(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = mad<FMA>(p, z, 2.06390887954e-2f);
  p = mad<FMA>(p, z, -5.37397155531e-2f);
  p = mad<FMA>(p, z, 1.33314422036e-1f);
  p = mad<FMA>(p, z, -3.33332819422e-1f);
  const float small = with_sign_of(mad<FMA>(p * z, x, x), x);  // keeps tanh(-0) = -0
  const float e = exp_f<FMA>(2.0f * min_f(a, 9.5f));  // tanh(9.5) rounds to 1
  const float big = with_sign_of(1.0f - 2.0f / (e + 1.0f), x);
  return a < 0.625f ? small : (x != x ? x : big);
}

// sigmoid: with e = e^{-|x|}, 1 / (1 + e) for x >= 0 and e / (1 + e) below: one division.
template <bool FMA>
inline float sigmoid_f(float x) {
  const float e = exp_f<FMA>(-abs_f(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);  // NaN: e is NaN
}

// erf: x + x P(x^2) below 0.921875; 1 - e^{Q(|x|)} (Q fits log erfc) up to 3.9375; 1 above.
template <bool FMA>
inline float erf_f(float x) {
  const float a = abs_f(x);
  const float s = x * x;
  float p = 8.029682794585824e-05f;
  p = mad<FMA>(p, s, -0.0008047709707170725f);
  p = mad<FMA>(p, s, 0.005190816707909107f);
  p = mad<FMA>(p, s, -0.02685411088168621f);
  p = mad<FMA>(p, s, 0.11283561587333679f);
  p = mad<FMA>(p, s, -0.3761261999607086f);
  p = mad<FMA>(p, s, 0.12837916612625122f);
  const float small = mad<FMA>(x, p, x);
  const float t = min_f(a, 3.9375f);
  float q = 1.6259747326330398e-06f;
  q = mad<FMA>(q, t, -4.5804354158462957e-05f);
  q = mad<FMA>(q, t, 0.0005943853175267577f);
  q = mad<FMA>(q, t, -0.004746912978589535f);
  q = mad<FMA>(q, t, 0.026381220668554306f);
  q = mad<FMA>(q, t, -0.11000290513038635f);
  q = mad<FMA>(q, t, -0.6319155097007751f);
  q = mad<FMA>(q, t, -1.1301766633987427f);
  q = mad<FMA>(q, t, 0.00030505837639793754f);
  const float big = a >= 3.9375f ? 1.0f : 1.0f - exp_f<FMA>(q);
  return a < 0.921875f ? small : (x != x ? x : with_sign_of(big, x));
}

template <Fn F, bool FMA>
inline float apply(float x) {
  if constexpr (F == Fn::Exp) return exp_f<FMA>(x);
  else if constexpr (F == Fn::Log) return log_f<FMA>(x);
  else if constexpr (F == Fn::Tanh) return tanh_f<FMA>(x);
  else if constexpr (F == Fn::Sigmoid) return sigmoid_f<FMA>(x);
  else return erf_f<FMA>(x);
}

template <Fn F>
void loop_generic(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = apply<F, kBaselineFma>(x[i]);
}

#if MG_CPU_X86
template <Fn F>
MG_TARGET_AVX2 void loop_avx2(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = apply<F, true>(x[i]);
}
template <Fn F>
MG_TARGET_AVX512 void loop_avx512(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = apply<F, true>(x[i]);
}
#endif

struct Table {
  ArrayFn fn[5];
  const char* isa;
};

Table make_table() {
#if MG_CPU_X86
  if (best_isa() == Isa::Avx512)
    return {{loop_avx512<Fn::Exp>, loop_avx512<Fn::Log>, loop_avx512<Fn::Tanh>, loop_avx512<Fn::Sigmoid>,
             loop_avx512<Fn::Erf>},
            "avx512"};
  if (best_isa() == Isa::Avx2)
    return {{loop_avx2<Fn::Exp>, loop_avx2<Fn::Log>, loop_avx2<Fn::Tanh>, loop_avx2<Fn::Sigmoid>, loop_avx2<Fn::Erf>},
            "avx2"};
#endif
  return {{loop_generic<Fn::Exp>, loop_generic<Fn::Log>, loop_generic<Fn::Tanh>, loop_generic<Fn::Sigmoid>,
           loop_generic<Fn::Erf>},
          "generic"};
}

const Table& table() {
  static const Table t = make_table();
  return t;
}

}  // namespace

ArrayFn array_fn(Fn fn) { return table().fn[int(fn)]; }
const char* isa() { return table().isa; }

}  // namespace mg::cpu::vmath

namespace mg::cpu {

namespace {

Isa detect_isa() {
  const char* env = std::getenv("MPSGRAPH_CPU_ISA");
  const bool allow512 = !env || std::strcmp(env, "avx512") == 0;
  const bool allow2 = allow512 || std::strcmp(env, "avx2") == 0;
#if MG_CPU_X86
  __builtin_cpu_init();
  if (allow512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
    return Isa::Avx512;
  if (allow2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#else
  (void)allow2;
#endif
  return Isa::Generic;
}

}  // namespace

Isa best_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

}  // namespace mg::cpu
