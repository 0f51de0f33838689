// GEMM through BLAS, split over the project's pool. BLAS itself runs single-threaded
// (cpu_backend.cpp sets it up so): its own threads spin while they wait and fight the pool
// and other processes for the cores; a product big enough to share is cut into blocks of
// rows (or columns) instead, one single-threaded BLAS call per block.
#pragma once
#include <algorithm>
#include <cstdint>

#include "backends/cpu/cpu_backend.h"

#if defined(MG_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#define MG_CBLAS(name) cblas_##name
#else  // the scipy-openblas32 wheel prefixes its symbols
#include <cblas.h>
#define MG_CBLAS(name) scipy_cblas_##name
#endif

namespace mg::cpu {

// One row (a classifier at batch 1): gemv streams B once; gemm would copy all of it into its
// packed layout first.
inline void blas_call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 1 && N > 1 && K > 0) {
    // C row = op(B)^T applied to A's row: B stored (N, K) when tb, else (K, N)
    MG_CBLAS(sgemv)(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, int(tb ? N : K), int(tb ? K : N), alpha, B,
                    int(ldb), A, ta ? int(lda) : 1, beta, C, 1);
    return;
  }
  MG_CBLAS(sgemm)(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                  alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}
inline void blas_call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                      const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  MG_CBLAS(dgemm)(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                  alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// Products below this many multiply-adds run on the calling thread.
constexpr int64_t kGemmSplitWork = 262144;

// Row-major C = op(A) @ op(B) + beta * C with op(A) (M, K), op(B) (K, N); A is stored (K, M)
// when ta, B (N, K) when tb. after(r0, r1, c0, c1) runs on each block of C once it is final,
// on the thread that wrote it (an epilogue over the block while it is in cache).
template <class T, class After>
void gemm_on_pool(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
                  T beta, T* C, int64_t ldc, const After& after) {
  const double work = double(M) * double(N) * double(K);
  if (work < double(kGemmSplitWork) || num_threads() < 2 || std::max(M, N) < 32) {
    blas_call(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
    after(int64_t(0), M, int64_t(0), N);
    return;
  }
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t grain = std::max<int64_t>(16, extent / num_threads());
  parallel_for(extent, grain, [&](int64_t b, int64_t e) {
    if (by_rows) {
      blas_call(ta, tb, e - b, N, K, T(1), ta ? A + b : A + b * lda, lda, B, ldb, beta, C + b * ldc, ldc);
      after(b, e, int64_t(0), N);
    } else {
      blas_call(ta, tb, M, e - b, K, T(1), A, lda, tb ? B + b * ldb : B + b, ldb, beta, C + b, ldc);
      after(int64_t(0), M, b, e);
    }
  });
}

template <class T>
void gemm_on_pool(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
                  T beta, T* C, int64_t ldc) {
  gemm_on_pool(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, [](int64_t, int64_t, int64_t, int64_t) {});
}

}  // namespace mg::cpu
