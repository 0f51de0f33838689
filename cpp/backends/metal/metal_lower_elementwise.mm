// Lowerings of the elementwise family (cpp/core/ops/elementwise.cpp). Semantics follow the CPU
// kernels (cpp/backends/cpu/kernels_elementwise.cpp): where MPSGraph's own op differs or is
// undocumented for an edge (integer division by zero, NaN, signed zeros, wrap-around), the op
// is composed from simpler MPSGraph ops whose behaviour is not in doubt.
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/metal/metal_internal.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;
using Unary = std::function<T(LowerCtx&, T x, DType t)>;
using Binary = std::function<T(LowerCtx&, T x, T y, DType t)>;

void unary(const char* name, Unary f) {
  register_lowering(name, [f](LowerCtx& c) { return std::vector<T>{f(c, c.in[0], c.in_dtype(0))}; });
}
void binary(const char* name, Binary f) {
  register_lowering(name, [f](LowerCtx& c) { return std::vector<T>{f(c, c.in[0], c.in[1], c.in_dtype(0))}; });
}

bool is_signed(DType t) { return is_signed_integer(t); }
bool is_unsigned(DType t) { return is_unsigned_integer(t); }

// Runs a float composition in float32 for float16/bfloat16, as the CPU kernels compute them
// in float and round once.
T in_f32(LowerCtx& c, T x, T y, DType t, const std::function<T(T, T)>& f) {
  if (t == DType::Float32) return f(x, y);
  T r = f(c.raw_cast(x, DType::Float32), c.raw_cast(y, DType::Float32));
  return c.raw_cast(r, t);
}

// Any tensor to bool: MPSGraph's predicates are bool already; this covers ops whose result
// dtype the header leaves open (signbit).
T truthy(LowerCtx& c, T x) {
  if (x.dataType == MPSDataTypeBool) return x;
  return [c.g notEqualWithPrimaryTensor:x secondaryTensor:[c.g constantWithScalar:0 dataType:x.dataType] name:nil];
}

T lxor(LowerCtx& c, T a, T b) { return [c.g logicalXORWithPrimaryTensor:a secondaryTensor:b name:nil]; }

// C fmod (sign of x) from MPSGraph's modulo, whatever its sign convention (truncated, floored
// or IEEE remainder): shift by |y| toward x's sign when the signs disagree. Exact only if
// MPSGraph's modulo is: used before macOS 13.2 only (fmod_f32 below).
T fmod_via_modulo(LowerCtx& c, T x, T y) {
  T m = [c.g moduloWithPrimaryTensor:x secondaryTensor:y name:nil];
  T zero = c.k(0, DType::Float32);
  T ay = [c.g absoluteWithTensor:y name:nil];
  T wrong = c.land(c.ne(m, zero), lxor(c, c.lt(m, zero), c.lt(x, zero)));
  T shift = c.sel(c.lt(x, zero), [c.g negativeWithTensor:ay name:nil], ay);
  m = c.sel(wrong, c.add(m, shift), m);
  // fmod(x, +-inf) = x for finite x (a floored modulo gives +-inf, and the shift above NaN)
  T finite_x = [c.g isFiniteWithTensor:x name:nil];
  return c.sel(c.land([c.g isInfiniteWithTensor:y name:nil], finite_x), x, m);
}

// ---- integer compositions (exact, wrap-around, division by zero gives 0) ----

// Integer division without MPSGraph's integer `division`, whose rounding (and accuracy for
// large operands) is not documented. The truncated quotient is built from float32 estimates
// that never overshoot (scaled by 1 - 2**-18, which covers the rounding of the two int->float
// casts and of a division a few ulp off), each followed by an exact integer update of the
// remainder; every estimate removes all but about 2**-17 of what is left, so 3 rounds (5 for
// 64-bit dtypes) leave a quotient off by at most one, which two compare-and-step rounds fix.
// Signed operands are carried as non-positive magnitudes (-|x| always fits, so INT_MIN needs no
// special case and no value wraps); unsigned ones as themselves. The 8/16-bit dtypes run in
// int32. Division by zero gives quotient 0 and remainder 0, as on the CPU. Exact for every
// int32 / int64 / uint32 / uint64 value under these assumptions: castTensor int -> float32
// rounds to some neighbour, float32 division is within a few ulp, and integer products and
// differences that do not overflow are exact.
struct IntDiv {
  T q;       // truncated quotient (C semantics; INT_MIN / -1 wraps), 0 where y == 0
  T r;       // x - q * y (the sign of x), 0 where y == 0
};

IntDiv int_div_rem(LowerCtx& c, T x, T y, DType t) {
  const DType F = DType::Float32;
  const DType w = dtype_size(t) < 4 ? DType::Int32 : t;
  const bool sgn = is_signed(w);
  if (w != t) {
    x = c.raw_cast(x, w);  // exact
    y = c.raw_cast(y, w);
  }
  T zero = c.k_int(0, w), one = c.k_int(1, w);
  IntDiv d;
  T y_zero = c.eq(y, zero);
  T ys = c.sel(y_zero, one, y);
  T x_neg = sgn ? c.lt(x, zero) : nil, y_neg = sgn ? c.lt(ys, zero) : nil;
  // magnitudes: non-positive for signed dtypes, as is for unsigned ones
  T mx = sgn ? c.sel(x_neg, x, c.sub(zero, x)) : x;
  T my = sgn ? c.sel(y_neg, ys, c.sub(zero, ys)) : ys;
  T fy = c.raw_cast(my, F);
  T acc = zero, rem = mx;  // acc: -quotient (signed) or quotient; rem: mx - quotient * my, same sign as mx
  const int rounds = dtype_bits(w) > 32 ? 5 : 3;
  for (int i = 0; i < rounds; ++i) {
    T ratio = c.mul(c.div(c.raw_cast(rem, F), fy), c.k(1.0 - 1.0 / 262144.0, F));  // >= 0, never above the truth
    T step = c.raw_cast([c.g floorWithTensor:ratio name:nil], w);
    acc = sgn ? c.sub(acc, step) : c.add(acc, step);
    rem = c.sub(rem, c.mul(step, my));
  }
  for (int i = 0; i < 2; ++i) {  // the last unit: while |rem| >= |my|
    T more = sgn ? c.le(rem, my) : c.ge(rem, my);
    acc = c.sel(more, sgn ? c.sub(acc, one) : c.add(acc, one), acc);
    rem = c.sel(more, c.sub(rem, my), rem);
  }
  if (sgn) {
    acc = c.sel(lxor(c, x_neg, y_neg), acc, c.sub(zero, acc));  // 0 - INT_MIN wraps: INT_MIN / -1
    rem = c.sel(x_neg, rem, c.sub(zero, rem));
  }
  d.q = c.sel(y_zero, zero, acc);
  d.r = c.sel(y_zero, zero, rem);
  if (w != t) {
    d.q = c.wrap_narrow(d.q, w, t);  // -128 / -1 = 128 wraps to -128 as on the CPU
    d.r = c.raw_cast(d.r, t);        // |r| < |y|: fits
  }
  return d;
}

T int_division(LowerCtx& c, T x, T y, DType t) { return int_div_rem(c, x, y, t).q; }

T int_floor_division(LowerCtx& c, T x, T y, DType t) {
  IntDiv d = int_div_rem(c, x, y, t);
  if (!is_signed(t)) return d.q;
  T zero = c.k_int(0, t);
  T adj = c.land(c.ne(d.r, zero), lxor(c, c.lt(d.r, zero), c.lt(y, zero)));  // y == 0: r == 0, no step
  return c.sel(adj, c.sub(d.q, c.k_int(1, t)), d.q);
}

T int_modulo(LowerCtx& c, T x, T y, DType t) {
  IntDiv d = int_div_rem(c, x, y, t);
  if (!is_signed(t)) return d.r;
  T zero = c.k_int(0, t);
  T adj = c.land(c.ne(d.r, zero), lxor(c, c.lt(d.r, zero), c.lt(y, zero)));
  return c.sel(adj, c.add(d.r, y), d.r);
}

// Exact C fmod of float32 values without MPSGraph's modulo (whose accuracy for large |x / y| is
// not documented; x - trunc(x / y) * y loses every digit there). With |x| = mx 2^(Ex-150) and
// |y| = my 2^(Ey-150) (integer mantissas < 2^24 from the bits, reinterpretCastTensor: 13.2),
// fmod(|x|, |y|) = ((mx 2^d) mod my) 2^(Ey-150), d = Ex - Ey: R = mx mod my exactly in int32
// (int_div_rem), then d bits are shifted in, at most 11 at a time, each step in float32 where
// every operation is exact: T = R 2^s (a power of two), q = rint(T / my) <= 2^11 (a division a
// few ulp off only moves q by one), T - q my_hi - q my_lo with my split at bit 12 (each product
// <= 24 bits, each difference a multiple of a power of two that fits), then one step into
// [0, my). Modelled op for op in numpy float32 against fmod on 600k values (every exponent,
// subnormals, random bit patterns, specials), also with every division perturbed by an ulp:
// bit-exact. Subnormal results assume the GPU keeps subnormals (Metal may flush them).
API_AVAILABLE(macos(13.2))
T fmod_exact(LowerCtx& c, T x, T y) {
  const DType F = DType::Float32, I = DType::Int32;
  auto bits = [&](T v) { return [c.g reinterpretCastTensor:v toType:MPSDataTypeInt32 name:nil]; };
  auto band = [&](T a, int64_t m) { return [c.g bitwiseANDWithPrimaryTensor:a secondaryTensor:c.k_int(m, I) name:nil]; };
  auto shr = [&](T a, int64_t n) { return [c.g bitwiseRightShiftWithPrimaryTensor:a secondaryTensor:c.k_int(n, I) name:nil]; };
  T ax = [c.g absoluteWithTensor:x name:nil], ay = [c.g absoluteWithTensor:y name:nil];
  T bx = bits(ax), by = bits(ay);
  T ex = shr(bx, 23), ey = shr(by, 23);  // biased exponents (0: subnormal)
  T zero = c.k_int(0, I), one = c.k_int(1, I);
  T mx = c.add(band(bx, 0x7FFFFF), c.sel(c.gt(ex, zero), c.k_int(0x800000, I), zero));
  T my = c.add(band(by, 0x7FFFFF), c.sel(c.gt(ey, zero), c.k_int(0x800000, I), zero));
  T Ex = [c.g maximumWithPrimaryTensor:ex secondaryTensor:one name:nil];
  T Ey = [c.g maximumWithPrimaryTensor:ey secondaryTensor:one name:nil];
  T d = c.sub(Ex, Ey);
  my = c.sel(c.eq(my, zero), one, my);  // y == 0 is NaN below
  T R = c.raw_cast(int_div_rem(c, mx, my, I).r, F);
  T myf = c.raw_cast(my, F), my_hi = c.raw_cast(band(my, ~int64_t(0xFFF)), F), my_lo = c.raw_cast(band(my, 0xFFF), F);
  T dd = [c.g maximumWithPrimaryTensor:d secondaryTensor:zero name:nil];
  T steps = c.raw_cast([c.g floorWithTensor:c.div(c.add(c.raw_cast(dd, F), c.k(0.5, F)), c.k(11, F)) name:nil], I);
  T s0 = c.sub(dd, c.mul(steps, c.k_int(11, I)));  // 0..10
  std::vector<double> pow2;
  for (int i = 0; i < 12; ++i) pow2.push_back(double(int64_t(1) << i));
  T p0 = [c.g gatherWithUpdatesTensor:c.constant_vector(pow2, Shape{12}, F) indicesTensor:s0 axis:0 batchDimensions:0 name:nil];
  auto step = [&](T r, T scale, T active) {
    T t = c.mul(r, scale);
    T q = [c.g rintWithTensor:c.div(t, myf) name:nil];
    T r2 = c.sub(c.sub(t, c.mul(q, my_hi)), c.mul(q, my_lo));
    r2 = c.sel(c.lt(r2, c.k(0, F)), c.add(r2, myf), r2);
    r2 = c.sel(c.ge(r2, myf), c.sub(r2, myf), r2);
    return c.sel(active, r2, r);
  };
  R = step(R, p0, c.gt(dd, zero));
  for (int k = 0; k < 23; ++k) R = step(R, c.k(2048, F), c.lt(c.k_int(k, I), steps));  // d <= 253
  // 2^(Ey - 150) from its bits: normal from Ey = 24, subnormal below
  T pn = [c.g bitwiseLeftShiftWithPrimaryTensor:c.sub(Ey, c.k_int(23, I)) secondaryTensor:c.k_int(23, I) name:nil];
  T ps = [c.g bitwiseLeftShiftWithPrimaryTensor:one secondaryTensor:c.sub(Ey, one) name:nil];
  T p = [c.g reinterpretCastTensor:c.sel(c.ge(Ey, c.k_int(24, I)), pn, ps) toType:MPSDataTypeFloat32 name:nil];
  T m = c.sel(c.lt(d, zero), ax, c.mul(R, p));
  m = c.sel(truthy(c, [c.g signbitWithTensor:x name:nil]), [c.g negativeWithTensor:m name:nil], m);
  T finite_x = [c.g isFiniteWithTensor:x name:nil];
  T bad = c.lor(c.lor(c.eq(y, c.k(0, F)), c.lnot(finite_x)), c.isnan(y));
  m = c.sel(bad, c.k(std::numeric_limits<double>::quiet_NaN(), F), m);
  return c.sel(c.land([c.g isInfiniteWithTensor:y name:nil], finite_x), x, m);
}

T fmod_f32(LowerCtx& c, T x, T y) {
  if (@available(macOS 13.2, *)) return fmod_exact(c, x, y);
  return fmod_via_modulo(c, x, y);
}

// x ** y by square-and-multiply over the exponent's bits: exact with wrap-around, as the CPU.
T int_power(LowerCtx& c, T x, T y, DType t) {
  T zero = c.k_int(0, t), one = c.k_int(1, t);
  T e = is_signed(t) ? c.sel(c.lt(y, zero), zero, y) : y;
  T r = one, b = x;
  const int bits = dtype_bits(t) - (is_signed(t) ? 1 : 0);
  for (int i = 0; i < bits; ++i) {
    T shifted = i == 0 ? e : [c.g bitwiseRightShiftWithPrimaryTensor:e secondaryTensor:c.k_int(i, t) name:nil];
    T bit = c.ne([c.g bitwiseANDWithPrimaryTensor:shifted secondaryTensor:one name:nil], zero);
    r = c.sel(bit, c.mul(r, b), r);
    if (i + 1 < bits) b = c.mul(b, b);
  }
  if (is_signed(t)) {  // negative exponents: 1/x**-y truncated
    T odd = c.ne([c.g bitwiseANDWithPrimaryTensor:y secondaryTensor:one name:nil], zero);
    T m1 = c.k_int(-1, t);
    T neg = c.sel(c.eq(x, one), one, c.sel(c.eq(x, m1), c.sel(odd, m1, one), zero));
    r = c.sel(c.lt(y, zero), neg, r);
  }
  return r;
}

// numpy / C pow for floats. MPSGraph's power may follow Metal's pow (undefined for x < 0), so
// the sign, the NaN of a negative base with a fractional exponent, and pow(x, 0) = pow(1, y) = 1
// are made explicit around pow(|x|, y).
T float_power(LowerCtx& c, T x, T y) {
  const DType F = DType::Float32;
  T zero = c.k(0, F), one = c.k(1, F);
  T ax = [c.g absoluteWithTensor:x name:nil];
  T r = [c.g powerWithPrimaryTensor:ax secondaryTensor:y name:nil];
  T y_int = c.eq([c.g floorWithTensor:y name:nil], y);
  T half = c.mul(y, c.k(0.5, F));
  T y_odd = c.land(y_int, c.ne([c.g floorWithTensor:half name:nil], half));
  T x_neg_sign = truthy(c, [c.g signbitWithTensor:x name:nil]);
  r = c.sel(c.land(x_neg_sign, y_odd), [c.g negativeWithTensor:r name:nil], r);
  T nan = c.k(std::numeric_limits<double>::quiet_NaN(), F);
  r = c.sel(c.land(c.land(c.lt(x, zero), c.lnot(y_int)), [c.g isFiniteWithTensor:x name:nil]), nan, r);  // pow(-inf, 0.5) = inf
  r = c.sel(c.land(c.eq(ax, one), [c.g isInfiniteWithTensor:y name:nil]), one, r);
  return c.sel(c.lor(c.eq(x, one), c.eq(y, zero)), one, r);
}

// numpy's npy_divmod rule, as the CPU kernel.
T float_floor_division(LowerCtx& c, T x, T y) {
  const DType F = DType::Float32;
  T zero = c.k(0, F), one = c.k(1, F);
  T fm = fmod_f32(c, x, y);
  T div = c.div(c.sub(x, fm), y);
  T adj = c.land(c.ne(fm, zero), lxor(c, c.lt(y, zero), c.lt(fm, zero)));
  div = c.sel(adj, c.sub(div, one), div);
  T q = c.div(x, y);
  T signed_zero = c.sel(truthy(c, [c.g signbitWithTensor:q name:nil]), c.k(-0.0, F), zero);
  T fl = [c.g floorWithTensor:div name:nil];
  fl = c.sel(c.gt(c.sub(div, fl), c.k(0.5, F)), c.add(fl, one), fl);
  T r = c.sel(c.eq(div, zero), signed_zero, fl);
  return c.sel(c.eq(y, zero), q, r);
}

// x mod y with the sign of y (numpy's mod), from fmod, as the CPU kernel.
T float_modulo(LowerCtx& c, T x, T y) {
  const DType F = DType::Float32;
  T zero = c.k(0, F);
  T fm = fmod_f32(c, x, y);
  T adj = c.land(c.ne(fm, zero), lxor(c, c.lt(y, zero), c.lt(fm, zero)));
  T r = c.sel(adj, c.add(fm, y), fm);
  return c.sel(c.eq(fm, zero), c.sel(c.lt(y, zero), c.k(-0.0, F), zero), r);
}

// Shifts by a negative amount or by at least the bit width are defined as on the CPU.
T shift(LowerCtx& c, T x, T y, DType t, bool left) {
  T zero = c.k_int(0, t);
  T width = c.k_int(dtype_bits(t), t);
  // a negative amount counts as a huge one (numpy)
  T bad = is_signed(t) ? c.lor(c.ge(y, width), c.lt(y, zero)) : c.ge(y, width);
  T ys = c.sel(bad, zero, y);
  T r = left ? [c.g bitwiseLeftShiftWithPrimaryTensor:x secondaryTensor:ys name:nil]
             : [c.g bitwiseRightShiftWithPrimaryTensor:x secondaryTensor:ys name:nil];
  T big_value = zero;
  if (!left && is_signed(t)) big_value = c.sel(c.lt(x, zero), c.k_int(-1, t), zero);  // sign fill
  return c.sel(bad, big_value, r);
}

// log1p and expm1: MPSGraph has neither. Both are composed without relying on exact
// cancellation (a fast-math compiler may rewrite (1 + x) - 1 to x, which would undo Kahan's
// u * log(u) / (u - 1) trick), in float32 (float16 / bfloat16 round once, as on the CPU):
//   log1p: for 1 + x in (sqrt(1/2), sqrt(2)), 2 * atanh(z) with z = x / (2 + x) (|z| < 0.172)
//          as the odd series 2z (1 + z^2/3 + ... + z^12/13) (truncation < 1e-12 relative);
//          elsewhere log(1 + x), whose rounding of 1 + x costs < 3 ulp there (|log1p| > 0.34).
//   expm1: for |x| < ln(2) the Taylor polynomial to x^11 / 11! in Horner form (truncation
//          < 4e-11 relative); elsewhere exp(x) - 1, where |expm1| > 0.5 keeps the
//          subtraction's error within a few ulp.
// Modelled in numpy float32 against float64 references: at most 4 ulp for both.
// Edges: -0 stays -0; NaN propagates; log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(inf) = inf;
// expm1(-inf) = -1, expm1(inf) = inf (both from the library branch).
T log1p_f32(LowerCtx& c, T x) {
  const DType F = DType::Float32;
  T small = c.land(c.gt(x, c.k(-0.29289321881345248, F)), c.lt(x, c.k(0.41421356237309503, F)));
  T z = c.div(x, c.add(x, c.k(2.0, F)));
  T z2 = c.mul(z, z);
  T poly = c.k(1.0 / 13.0, F);
  for (double coef : {1.0 / 11.0, 1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0}) poly = c.add(c.k(coef, F), c.mul(z2, poly));
  T series = c.mul(c.add(z, z), poly);
  T lib = [c.g logarithmWithTensor:c.add(x, c.k(1.0, F)) name:nil];
  return c.sel(small, series, lib);
}

T expm1_f32(LowerCtx& c, T x) {
  const DType F = DType::Float32;
  T small = c.lt([c.g absoluteWithTensor:x name:nil], c.k(0.69314718055994531, F));
  // x * (1 + x/2! + x^2/3! + ... + x^10/11!)
  double inv_fact[11];
  for (int i = 0; i < 11; ++i) inv_fact[i] = i == 0 ? 1.0 : inv_fact[i - 1] / double(i + 1);  // 1 / (i + 1)!
  T poly = c.k(inv_fact[10], F);
  for (int i = 9; i >= 0; --i) poly = c.add(c.k(inv_fact[i], F), c.mul(x, poly));
  T series = c.mul(x, poly);
  T lib = c.sub([c.g exponentWithTensor:x name:nil], c.k(1.0, F));
  return c.sel(small, series, lib);
}

T float32_unary(LowerCtx& c, T x, DType t, T (*f)(LowerCtx&, T)) {
  if (t == DType::Float32) return f(c, x);
  return c.raw_cast(f(c, c.raw_cast(x, DType::Float32)), t);
}

}  // namespace

void register_elementwise_lowerings() {
  // ---------------- unary ----------------
  unary("identity", [](LowerCtx& c, T x, DType) { return [c.g identityWithTensor:x name:nil]; });
  unary("stop_gradient", [](LowerCtx& c, T x, DType) { return [c.g identityWithTensor:x name:nil]; });
  unary("negative", [](LowerCtx& c, T x, DType t) {
    if (is_unsigned(t)) return c.sub(c.k_int(0, t), x);  // wraps
    if (is_signed(t)) return c.sub(c.k_int(0, t), x);
    return [c.g negativeWithTensor:x name:nil];
  });
  unary("absolute", [](LowerCtx& c, T x, DType t) -> T {
    if (is_unsigned(t)) return x;
    if (is_signed(t)) return c.sel(c.lt(x, c.k_int(0, t)), c.sub(c.k_int(0, t), x), x);  // abs(INT_MIN) wraps
    return [c.g absoluteWithTensor:x name:nil];
  });
  unary("sign", [](LowerCtx& c, T x, DType t) -> T {  // -1, 0, 1; keeps +-0 and NaN
    T zero = c.k(0, t);
    if (is_unsigned(t)) return c.sel(c.gt(x, zero), c.k(1, t), zero);
    return c.sel(c.gt(x, zero), c.k(1, t), c.sel(c.lt(x, zero), c.k(-1, t), x));
  });
  unary("floor", [](LowerCtx& c, T x, DType t) { return is_float_dtype(t) ? [c.g floorWithTensor:x name:nil] : x; });
  unary("ceil", [](LowerCtx& c, T x, DType t) { return is_float_dtype(t) ? [c.g ceilWithTensor:x name:nil] : x; });
  // roundWithTensor rounds halves away from zero; rint is half-to-even as numpy.
  unary("round", [](LowerCtx& c, T x, DType t) { return is_float_dtype(t) ? [c.g rintWithTensor:x name:nil] : x; });
  unary("truncate", [](LowerCtx& c, T x, DType t) { return is_float_dtype(t) ? [c.g truncateWithTensor:x name:nil] : x; });
  unary("exponent", [](LowerCtx& c, T x, DType) { return [c.g exponentWithTensor:x name:nil]; });
  unary("exponent_base2", [](LowerCtx& c, T x, DType) { return [c.g exponentBase2WithTensor:x name:nil]; });
  unary("exponent_base10", [](LowerCtx& c, T x, DType) { return [c.g exponentBase10WithTensor:x name:nil]; });
  unary("logarithm", [](LowerCtx& c, T x, DType) { return [c.g logarithmWithTensor:x name:nil]; });
  unary("logarithm_base2", [](LowerCtx& c, T x, DType) { return [c.g logarithmBase2WithTensor:x name:nil]; });
  unary("logarithm_base10", [](LowerCtx& c, T x, DType) { return [c.g logarithmBase10WithTensor:x name:nil]; });
  unary("log1p", [](LowerCtx& c, T x, DType t) { return float32_unary(c, x, t, log1p_f32); });
  unary("expm1", [](LowerCtx& c, T x, DType t) { return float32_unary(c, x, t, expm1_f32); });
  unary("square", [](LowerCtx& c, T x, DType t) { return is_float_dtype(t) ? [c.g squareWithTensor:x name:nil] : c.mul(x, x); });
  unary("square_root", [](LowerCtx& c, T x, DType) { return [c.g squareRootWithTensor:x name:nil]; });
  unary("reverse_square_root", [](LowerCtx& c, T x, DType) -> T {
    if (@available(macOS 15.0, *)) return [c.g reciprocalSquareRootWithTensor:x name:nil];
    return [c.g reverseSquareRootWithTensor:x name:nil];  // deprecated in 15.0, same op
  });
  unary("reciprocal", [](LowerCtx& c, T x, DType) { return [c.g reciprocalWithTensor:x name:nil]; });
  unary("sin", [](LowerCtx& c, T x, DType) { return [c.g sinWithTensor:x name:nil]; });
  unary("cos", [](LowerCtx& c, T x, DType) { return [c.g cosWithTensor:x name:nil]; });
  unary("tan", [](LowerCtx& c, T x, DType) { return [c.g tanWithTensor:x name:nil]; });
  unary("sinh", [](LowerCtx& c, T x, DType) { return [c.g sinhWithTensor:x name:nil]; });
  unary("cosh", [](LowerCtx& c, T x, DType) { return [c.g coshWithTensor:x name:nil]; });
  unary("tanh", [](LowerCtx& c, T x, DType) { return [c.g tanhWithTensor:x name:nil]; });
  unary("asin", [](LowerCtx& c, T x, DType) { return [c.g asinWithTensor:x name:nil]; });
  unary("acos", [](LowerCtx& c, T x, DType) { return [c.g acosWithTensor:x name:nil]; });
  unary("atan", [](LowerCtx& c, T x, DType) { return [c.g atanWithTensor:x name:nil]; });
  unary("asinh", [](LowerCtx& c, T x, DType) { return [c.g asinhWithTensor:x name:nil]; });
  unary("acosh", [](LowerCtx& c, T x, DType) { return [c.g acoshWithTensor:x name:nil]; });
  unary("atanh", [](LowerCtx& c, T x, DType) { return [c.g atanhWithTensor:x name:nil]; });
  unary("erf", [](LowerCtx& c, T x, DType) { return [c.g erfWithTensor:x name:nil]; });
  unary("sigmoid", [](LowerCtx& c, T x, DType) { return [c.g sigmoidWithTensor:x name:nil]; });
  unary("relu", [](LowerCtx& c, T x, DType t) {  // max(x, 0); NaN stays NaN; -0 gives +0
    return c.sel(c.le(x, c.k(0, t)), c.k(0, t), x);
  });
  unary("logical_not", [](LowerCtx& c, T x, DType) { return c.lnot(x); });
  unary("isnan", [](LowerCtx& c, T x, DType t) {
    return is_float_dtype(t) ? c.isnan(x) : c.fill(0, c.out());
  });
  unary("isinf", [](LowerCtx& c, T x, DType t) {
    return is_float_dtype(t) ? [c.g isInfiniteWithTensor:x name:nil] : c.fill(0, c.out());
  });
  unary("isfinite", [](LowerCtx& c, T x, DType t) {
    return is_float_dtype(t) ? [c.g isFiniteWithTensor:x name:nil] : c.fill(1, c.out());
  });
  unary("bitwise_not", [](LowerCtx& c, T x, DType t) {
    return t == DType::Bool ? c.lnot(x) : [c.g bitwiseNOTWithTensor:x name:nil];
  });

  // ---------------- binary (broadcasting is MPSGraph's) ----------------
  binary("addition", [](LowerCtx& c, T x, T y, DType) { return c.add(x, y); });
  binary("subtraction", [](LowerCtx& c, T x, T y, DType) { return c.sub(x, y); });
  binary("multiplication", [](LowerCtx& c, T x, T y, DType) { return c.mul(x, y); });
  binary("division", [](LowerCtx& c, T x, T y, DType t) { return is_float_dtype(t) ? c.div(x, y) : int_division(c, x, y, t); });
  binary("floor_division", [](LowerCtx& c, T x, T y, DType t) {
    if (!is_float_dtype(t)) return int_floor_division(c, x, y, t);
    return in_f32(c, x, y, t, [&](T a, T b) { return float_floor_division(c, a, b); });
  });
  binary("modulo", [](LowerCtx& c, T x, T y, DType t) {
    if (!is_float_dtype(t)) return int_modulo(c, x, y, t);
    return in_f32(c, x, y, t, [&](T a, T b) { return float_modulo(c, a, b); });
  });
  binary("power", [](LowerCtx& c, T x, T y, DType t) {
    if (!is_float_dtype(t)) return int_power(c, x, y, t);
    return in_f32(c, x, y, t, [&](T a, T b) { return float_power(c, a, b); });
  });
  binary("maximum", [](LowerCtx& c, T x, T y, DType t) { return c.max_nan(x, y, t); });
  binary("minimum", [](LowerCtx& c, T x, T y, DType t) { return c.min_nan(x, y, t); });
  binary("atan2", [](LowerCtx& c, T x, T y, DType) { return [c.g atan2WithPrimaryTensor:x secondaryTensor:y name:nil]; });
  // Comparisons of bools compare them as int32 0 / 1: PyTorch never sends bool operands to
  // MPSGraph's comparison ops, so nothing says they are supported.
  auto compare = [](T (LowerCtx::*op)(T, T)) {
    return [op](LowerCtx& c, T x, T y, DType t) {
      if (t == DType::Bool) return (c.*op)(c.raw_cast(x, DType::Int32), c.raw_cast(y, DType::Int32));
      return (c.*op)(x, y);
    };
  };
  binary("equal", compare(&LowerCtx::eq));
  binary("not_equal", compare(&LowerCtx::ne));
  binary("less_than", compare(&LowerCtx::lt));
  binary("less_than_or_equal_to", compare(&LowerCtx::le));
  binary("greater_than", compare(&LowerCtx::gt));
  binary("greater_than_or_equal_to", compare(&LowerCtx::ge));
  binary("logical_and", [](LowerCtx& c, T x, T y, DType) { return c.land(x, y); });
  binary("logical_or", [](LowerCtx& c, T x, T y, DType) { return c.lor(x, y); });
  binary("logical_xor", [](LowerCtx& c, T x, T y, DType) { return lxor(c, x, y); });
  binary("bitwise_and", [](LowerCtx& c, T x, T y, DType t) {
    return t == DType::Bool ? c.land(x, y) : [c.g bitwiseANDWithPrimaryTensor:x secondaryTensor:y name:nil];
  });
  binary("bitwise_or", [](LowerCtx& c, T x, T y, DType t) {
    return t == DType::Bool ? c.lor(x, y) : [c.g bitwiseORWithPrimaryTensor:x secondaryTensor:y name:nil];
  });
  binary("bitwise_xor", [](LowerCtx& c, T x, T y, DType t) {
    return t == DType::Bool ? lxor(c, x, y) : [c.g bitwiseXORWithPrimaryTensor:x secondaryTensor:y name:nil];
  });
  binary("bitwise_left_shift", [](LowerCtx& c, T x, T y, DType t) { return shift(c, x, y, t, true); });
  binary("bitwise_right_shift", [](LowerCtx& c, T x, T y, DType t) { return shift(c, x, y, t, false); });

  // ---------------- ternary and cast ----------------
  register_lowering("select", [](LowerCtx& c) {
    T p = c.in_dtype(0) == DType::Bool ? c.in[0] : c.ne(c.in[0], c.k(0, c.in_dtype(0)));  // nonzero is true
    return std::vector<T>{c.sel(p, c.in[1], c.in[2])};
  });
  register_lowering("clamp", [](LowerCtx& c) {  // min(max(x, lo), hi), NaN-propagating as the CPU
    DType t = c.in_dtype(0);
    return std::vector<T>{c.min_nan(c.max_nan(c.in[0], c.in[1], t), c.in[2], t)};
  });
  register_lowering("cast", [](LowerCtx& c) {
    return std::vector<T>{c.convert(c.in[0], c.in_dtype(0), c.out().dtype)};
  });
}

}  // namespace mg::metal
