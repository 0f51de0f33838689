// CPU kernels of the linear-algebra family (core/ops/linalg.cpp) through LAPACK (getrf, getrs,
// potrf) and BLAS (trsm): float64 in double, the other float dtypes in float (float16 and bfloat16
// converted on the way in and out). Each matrix is copied into a per-thread scratch slot, which
// also turns the row-major layout into LAPACK's column-major one where that matters: a row-major
// matrix read column-major is its transpose, so getrf of the copy factors A^T, and
// getrs('N') / getrs('T') solve with A^T / A. Batches of small matrices run over the thread pool;
// big ones leave the threads to OpenBLAS.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/batch_offsets.h"
#include "backends/cpu/elementwise_util.h"
#include "core/ops/linalg_attrs.h"

#if defined(MG_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#define MG_CBLAS(name) cblas_##name
#else  // the scipy-openblas32 wheel prefixes its symbols; Fortran strings pass their length last
#include <cblas.h>
#define MG_CBLAS(name) scipy_cblas_##name
extern "C" {
void scipy_sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void scipy_dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void scipy_sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda, const int* ipiv,
                   float* b, const int* ldb, int* info, size_t trans_len);
void scipy_dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
                   double* b, const int* ldb, int* info, size_t trans_len);
void scipy_spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t uplo_len);
void scipy_dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uplo_len);
}
#endif

namespace mg::cpu {

namespace {

#if defined(MG_BLAS_ACCELERATE)
using lp_int = __LAPACK_int;
void getrf(lp_int n, float* a, lp_int* ipiv, lp_int* info) { sgetrf_(&n, &n, a, &n, ipiv, info); }
void getrf(lp_int n, double* a, lp_int* ipiv, lp_int* info) { dgetrf_(&n, &n, a, &n, ipiv, info); }
void getrs(char t, lp_int n, lp_int k, const float* a, const lp_int* ipiv, float* b, lp_int* info) {
  sgetrs_(&t, &n, &k, a, &n, ipiv, b, &n, info);
}
void getrs(char t, lp_int n, lp_int k, const double* a, const lp_int* ipiv, double* b, lp_int* info) {
  dgetrs_(&t, &n, &k, a, &n, ipiv, b, &n, info);
}
void potrf(char uplo, lp_int n, float* a, lp_int* info) { spotrf_(&uplo, &n, a, &n, info); }
void potrf(char uplo, lp_int n, double* a, lp_int* info) { dpotrf_(&uplo, &n, a, &n, info); }
#else
using lp_int = int;
void getrf(lp_int n, float* a, lp_int* ipiv, lp_int* info) { scipy_sgetrf_(&n, &n, a, &n, ipiv, info); }
void getrf(lp_int n, double* a, lp_int* ipiv, lp_int* info) { scipy_dgetrf_(&n, &n, a, &n, ipiv, info); }
void getrs(char t, lp_int n, lp_int k, const float* a, const lp_int* ipiv, float* b, lp_int* info) {
  scipy_sgetrs_(&t, &n, &k, a, &n, ipiv, b, &n, info, 1);
}
void getrs(char t, lp_int n, lp_int k, const double* a, const lp_int* ipiv, double* b, lp_int* info) {
  scipy_dgetrs_(&t, &n, &k, a, &n, ipiv, b, &n, info, 1);
}
void potrf(char uplo, lp_int n, float* a, lp_int* info) { scipy_spotrf_(&uplo, &n, a, &n, info, 1); }
void potrf(char uplo, lp_int n, double* a, lp_int* info) { scipy_dpotrf_(&uplo, &n, a, &n, info, 1); }
#endif

// Row-major B := op(A)^-1 B (left) or B op(A)^-1 (right), A triangular n x n, B m x k.
void trsm(bool left, bool upper, bool unit, int m, int k, const float* a, float* b) {
  MG_CBLAS(strsm)(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
                  unit ? CblasUnit : CblasNonUnit, m, k, 1.0f, a, left ? m : k, b, k);
}
void trsm(bool left, bool upper, bool unit, int m, int k, const double* a, double* b) {
  MG_CBLAS(dtrsm)(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
                  unit ? CblasUnit : CblasNonUnit, m, k, 1.0, a, left ? m : k, b, k);
}

// ---- batches ----

// Offsets (in elements) of each output batch's matrices in A and B, with numpy broadcasting of
// the batch dims; B's are empty for single-input ops.
struct Batches {
  std::vector<int64_t> a, b;
  int64_t count() const { return int64_t(a.size()); }
};

Shape leading(const Shape& s, size_t drop) { return Shape(s.begin(), s.end() - int64_t(drop)); }

// Runs body(batch, slot) for every batch split over `slots` chunks (slots_for), each with its own
// scratch slot.
template <class Body>
void for_batches(int64_t count, int64_t slots, Body&& body) {
  if (count == 0) return;
  parallel_for(slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t b = s * count / slots, e = (s + 1) * count / slots; b < e; ++b) body(b, s);
  });
}

// Over threads when the matrices are small (n^3 < 2^18); big ones leave the threads to OpenBLAS.
int64_t slots_for(int64_t count, int64_t n) {
  double work = double(n) * double(n) * double(n);
  if (count <= 1 || work >= 262144.0) return std::min<int64_t>(count, 1);
  return std::min<int64_t>(count, num_threads());
}

template <class S>
using Real = std::conditional_t<std::is_same_v<S, double>, double, float>;

// Scratch: `slots` slots of `reals` compute values and `ints` LAPACK integers each.
struct Scratch {
  size_t index = 0, slot_bytes = 0, reals = 0;
  template <class R>
  R* reals_of(void* const* out, int64_t slot) const {
    return reinterpret_cast<R*>(static_cast<char*>(out[index]) + size_t(slot) * slot_bytes);
  }
  template <class R>
  lp_int* ints_of(void* const* out, int64_t slot) const {
    return reinterpret_cast<lp_int*>(reals_of<R>(out, slot) + reals);
  }
};

template <class R>
Scratch make_scratch(const KernelCtx& c, int64_t slots, size_t reals, size_t ints) {
  Scratch s;
  s.reals = reals;
  s.slot_bytes = (reals * sizeof(R) + ints * sizeof(lp_int) + 63) / 64 * 64;
  s.index = c.scratch(std::max<size_t>(1, s.slot_bytes * size_t(std::max<int64_t>(slots, 1))));
  return s;
}

template <class S, class R>
void load(const S* src, R* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = R(Num<S>::ld(src[i]));
}
template <class S, class R>
void store(const R* src, S* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Num<S>::st(typename Num<S>::C(src[i]));
}
template <class S>
void fill_nan(S* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Num<S>::st(std::numeric_limits<typename Num<S>::C>::quiet_NaN());
}

// ---- kernels ----

template <class S>
KernelFn inverse_kernel(const KernelCtx& c) {
  using R = Real<S>;
  const Shape& xs = c.in[0].shape;
  const int64_t n = xs.back(), nn = n * n, count = num_elements(leading(xs, 2));
  const int64_t slots = slots_for(count, n);
  Scratch sc = make_scratch<R>(c, slots, size_t(2 * nn), size_t(n));
  return [=](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    if (nn == 0) return;
    for_batches(count, slots, [&](int64_t b, int64_t s) {
      R* lu = sc.reals_of<R>(out, s);
      R* inv = lu + nn;
      lp_int* piv = sc.ints_of<R>(out, s);
      load(x + b * nn, lu, nn);
      lp_int info = 0;
      getrf(lp_int(n), lu, piv, &info);
      if (info != 0) return fill_nan(y + b * nn, nn);
      std::fill(inv, inv + nn, R(0));
      for (int64_t i = 0; i < n; ++i) inv[i * n + i] = R(1);
      getrs('N', lp_int(n), lp_int(n), lu, piv, inv, &info);  // inv(A^T) column-major = inv(A) row-major
      store(inv, y + b * nn, nn);
    });
  };
}

template <class S>
KernelFn solve_kernel(const KernelCtx& c) {
  using R = Real<S>;
  const Shape &as = c.in[0].shape, &bs = c.in[1].shape, &os = c.out[0].shape;
  const bool vec = bs.size() == 1;
  const int64_t n = as.back(), nn = n * n, k = vec ? 1 : bs.back(), nk = n * k;
  const Shape ob = vec ? leading(os, 1) : leading(os, 2);
  Batches bt{batch_offsets(leading(as, 2), ob, nn), batch_offsets(vec ? Shape{} : leading(bs, 2), ob, nk)};
  const int64_t count = bt.count(), slots = slots_for(count, n);
  Scratch sc = make_scratch<R>(c, slots, size_t(nn + nk), size_t(n));
  return [=](const void* const* in, void* const* out) {
    const S* a = static_cast<const S*>(in[0]);
    const S* bm = static_cast<const S*>(in[1]);
    S* x = static_cast<S*>(out[0]);
    if (nk == 0) return;
    for_batches(count, slots, [&](int64_t b, int64_t s) {
      R* lu = sc.reals_of<R>(out, s);
      R* rhs = lu + nn;  // column-major n x k
      lp_int* piv = sc.ints_of<R>(out, s);
      load(a + bt.a[size_t(b)], lu, nn);
      lp_int info = 0;
      getrf(lp_int(n), lu, piv, &info);
      S* xb = x + b * nk;
      if (info != 0) return fill_nan(xb, nk);
      const S* bb = bm + bt.b[size_t(b)];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j) rhs[j * n + i] = R(Num<S>::ld(bb[i * k + j]));
      getrs('T', lp_int(n), lp_int(k), lu, piv, rhs, &info);  // (A^T)^T X = B
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j) xb[i * k + j] = Num<S>::st(typename Num<S>::C(rhs[j * n + i]));
    });
  };
}

template <class S>
KernelFn cholesky_kernel(const KernelCtx& c) {
  using R = Real<S>;
  const bool upper = typed_attrs<ops::CholeskyAttrs>(c.node).upper;
  const Shape& xs = c.in[0].shape;
  const int64_t n = xs.back(), nn = n * n, count = num_elements(leading(xs, 2));
  const int64_t slots = slots_for(count, n);
  Scratch sc = make_scratch<R>(c, slots, size_t(nn), 0);
  return [=](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    if (nn == 0) return;
    for_batches(count, slots, [&](int64_t b, int64_t s) {
      R* f = sc.reals_of<R>(out, s);
      load(x + b * nn, f, nn);
      lp_int info = 0;
      // column-major 'U' is row-major lower (A = L L^T), 'L' row-major upper (A = U^T U)
      potrf(upper ? 'L' : 'U', lp_int(n), f, &info);
      if (info != 0) return fill_nan(y + b * nn, nn);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (upper ? j < i : j > i) f[i * n + j] = R(0);
      store(f, y + b * nn, nn);
    });
  };
}

template <class S>
KernelFn triangular_solve_kernel(const KernelCtx& c) {
  using R = Real<S>;
  const ops::TriangularSolveAttrs t = typed_attrs<ops::TriangularSolveAttrs>(c.node);
  const Shape &as = c.in[0].shape, &bs = c.in[1].shape, &os = c.out[0].shape;
  const int64_t n = as.back(), nn = n * n;
  const int64_t m = os[os.size() - 2], k = os.back(), mk = m * k;
  const Shape ob = leading(os, 2);
  Batches bt{batch_offsets(leading(as, 2), ob, nn), batch_offsets(leading(bs, 2), ob, mk)};
  const int64_t count = bt.count(), slots = slots_for(count, n);
  Scratch sc = make_scratch<R>(c, slots, size_t(nn + mk), 0);
  return [=](const void* const* in, void* const* out) {
    const S* a = static_cast<const S*>(in[0]);
    const S* bm = static_cast<const S*>(in[1]);
    S* x = static_cast<S*>(out[0]);
    if (mk == 0) return;
    for_batches(count, slots, [&](int64_t b, int64_t s) {
      R* tri = sc.reals_of<R>(out, s);
      R* rhs = tri + nn;
      load(a + bt.a[size_t(b)], tri, nn);
      load(bm + bt.b[size_t(b)], rhs, mk);
      trsm(t.left, t.upper, t.unit_diagonal, int(m), int(k), tri, rhs);
      store(rhs, x + b * mk, mk);
    });
  };
}

// LU of each matrix, then det = sign(permutation) * prod(diag U), accumulated in double.
template <class S>
KernelFn determinant_kernel(const KernelCtx& c, bool log) {
  using R = Real<S>;
  const Shape& xs = c.in[0].shape;
  const int64_t n = xs.back(), nn = n * n, count = num_elements(leading(xs, 2));
  const int64_t slots = slots_for(count, n);
  Scratch sc = make_scratch<R>(c, slots, size_t(nn), size_t(n));
  return [=](const void* const* in, void* const* out) {
    const S* x = static_cast<const S*>(in[0]);
    S* o0 = static_cast<S*>(out[0]);
    S* o1 = log ? static_cast<S*>(out[1]) : nullptr;
    using C = typename Num<S>::C;
    for_batches(count, slots, [&](int64_t b, int64_t s) {
      R* lu = sc.reals_of<R>(out, s);
      lp_int* piv = sc.ints_of<R>(out, s);
      double psign = 1.0, usign = 1.0, prod = 1.0, logabs = 0.0;
      bool zero = false, nan = false;
      if (n > 0) {
        load(x + b * nn, lu, nn);
        lp_int info = 0;
        getrf(lp_int(n), lu, piv, &info);
        for (int64_t i = 0; i < n; ++i) {
          const double u = double(lu[i * n + i]);
          if (piv[i] != lp_int(i + 1)) psign = -psign;
          if (u < 0) usign = -usign;
          zero = zero || u == 0;
          nan = nan || u != u;
          prod *= u;
          logabs += std::log(std::fabs(u));
        }
      }
      if (log) {
        const double sign = nan ? std::numeric_limits<double>::quiet_NaN() : zero ? 0.0 : psign * usign;
        o0[b] = Num<S>::st(C(sign));
        o1[b] = Num<S>::st(C(zero && !nan ? -std::numeric_limits<double>::infinity() : logabs));
      } else {
        o0[b] = Num<S>::st(C(psign * prod));
      }
    });
  };
}

}  // namespace

void register_linalg_kernels() {
  register_kernel("matrix_inverse", [](const KernelCtx& c) {
    return dispatch_float(c, "matrix_inverse", c.in[0].dtype, [&](auto tag) { return inverse_kernel<decltype(tag)>(c); });
  });
  register_kernel("solve", [](const KernelCtx& c) {
    return dispatch_float(c, "solve", c.in[0].dtype, [&](auto tag) { return solve_kernel<decltype(tag)>(c); });
  });
  register_kernel("cholesky", [](const KernelCtx& c) {
    return dispatch_float(c, "cholesky", c.in[0].dtype, [&](auto tag) { return cholesky_kernel<decltype(tag)>(c); });
  });
  register_kernel("triangular_solve", [](const KernelCtx& c) {
    return dispatch_float(c, "triangular_solve", c.in[0].dtype,
                          [&](auto tag) { return triangular_solve_kernel<decltype(tag)>(c); });
  });
  register_kernel("determinant", [](const KernelCtx& c) {
    return dispatch_float(c, "determinant", c.in[0].dtype,
                          [&](auto tag) { return determinant_kernel<decltype(tag)>(c, false); });
  });
  register_kernel("log_determinant", [](const KernelCtx& c) {
    return dispatch_float(c, "log_determinant", c.in[0].dtype,
                          [&](auto tag) { return determinant_kernel<decltype(tag)>(c, true); });
  });
}

}  // namespace mg::cpu
