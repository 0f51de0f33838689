// Sparse family kernels (core/ops/sparse.cpp): sparse_tensor (to dense), sparse_gather,
// sparse_matmul and sparse_sampled_matmul, looping over the stored entries only.
//
// Every kernel first checks the index parts (serially, on the calling thread, so that the error
// reaches Python): indices in range, starts beginning at 0, non-decreasing, ending at nnz.
// Work is split by rows (csr), columns (csc) or entries (coo) where each part writes its own
// outputs; sums over entries (duplicates, products) accumulate in Num<S>::C (float for halves,
// in scratch from the memory plan) and integers wrap. sparse_matmul with coo or csc storage
// scatters into output rows, so it splits the output's columns instead.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/sparse_attrs.h"
#include "core/shape.h"

namespace mg::cpu {

namespace {

using ops::SparseAttrs;
using ops::SparseStorage;

constexpr int64_t kWork = 32768;  // multiply-adds per parallel chunk, at least

struct Structure {
  SparseStorage storage;
  int64_t rows, cols, nnz;
  std::string op, node;
  // The groups work is split over: rows (csr), columns (csc) or entries (coo).
  int64_t groups() const {
    return storage == SparseStorage::CSR ? rows : storage == SparseStorage::CSC ? cols : nnz;
  }
};

Structure structure(const KernelCtx& c, size_t i0) {
  const SparseAttrs& a = typed_attrs<SparseAttrs>(c.node);
  return {a.storage, a.rows, a.cols, c.in[i0].shape[0], c.node.op->name, c.node.name};
}

std::string shape_of(const Structure& s) { return shape_str({s.rows, s.cols}); }

template <class I>
void validate(const Structure& s, const I* i0, const I* i1) {
  const bool csc = s.storage == SparseStorage::CSC;
  const int64_t lim0 = csc ? s.rows : s.cols;
  auto bad = [&](const std::string& msg) { raise(ErrorKind::Index, s.op, s.node, msg); };
  auto check = [&](const I* idx, int64_t lim, const char* what, const char* part) {
    for (int64_t e = 0; e < s.nnz; ++e)
      if (idx[e] < 0 || int64_t(idx[e]) >= lim)
        bad(std::string(what) + " index " + std::to_string(int64_t(idx[e])) + " (" + part + "[" + std::to_string(e) +
            "]) is out of range for shape " + shape_of(s));
  };
  check(i0, lim0, csc ? "row" : "column", "indices0");
  if (s.storage == SparseStorage::COO) return check(i1, s.rows, "row", "indices1");
  const int64_t n = csc ? s.cols : s.rows;
  const std::string what = csc ? "column starts (indices1)" : "row starts (indices1)";
  if (i1[0] != 0) bad(what + "[0] is " + std::to_string(int64_t(i1[0])) + ", must be 0");
  for (int64_t k = 1; k <= n; ++k)
    if (i1[k] < i1[k - 1])
      bad(what + "[" + std::to_string(k) + "] = " + std::to_string(int64_t(i1[k])) + " is less than " + what + "[" +
          std::to_string(k - 1) + "] = " + std::to_string(int64_t(i1[k - 1])));
  if (int64_t(i1[n]) != s.nnz)
    bad(what + "[" + std::to_string(n) + "] = " + std::to_string(int64_t(i1[n])) + " must equal the number of stored "
        "values " + std::to_string(s.nnz));
}

// Calls f(e, row, col) for the entries of groups [lo, hi).
template <class I, class F>
void for_entries(const Structure& s, const I* i0, const I* i1, int64_t lo, int64_t hi, F&& f) {
  if (s.storage == SparseStorage::COO) {
    for (int64_t e = lo; e < hi; ++e) f(e, int64_t(i1[e]), int64_t(i0[e]));
  } else if (s.storage == SparseStorage::CSR) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t e = int64_t(i1[r]); e < int64_t(i1[r + 1]); ++e) f(e, r, int64_t(i0[e]));
  } else {
    for (int64_t col = lo; col < hi; ++col)
      for (int64_t e = int64_t(i1[col]); e < int64_t(i1[col + 1]); ++e) f(e, int64_t(i0[e]), col);
  }
}

// Accumulation type: Num<S>::C for floats, the unsigned type of the same width for integers (wraps).
template <class S>
struct Acc {
  using A = typename Num<S>::C;
  static A ld(S v) { return Num<S>::ld(v); }
  static S st(A v) { return Num<S>::st(v); }
};
template <class S>
  requires std::is_integral_v<S>
struct Acc<S> {
  using A = std::make_unsigned_t<S>;
  static A ld(S v) { return A(v); }
  static S st(A v) { return S(v); }
};

// Calls f(I{}) for the index dtype.
template <class F>
KernelFn dispatch_index(DType t, F&& f) {
  if (t == DType::Int64) return f(int64_t{});
  return f(int32_t{});
}

// Whether an accumulation of S needs scratch (halves accumulate in float).
template <class S>
constexpr bool needs_scratch = !std::is_same_v<typename Acc<S>::A, S> && !std::is_integral_v<S>;

// Converts n accumulated values into the output.
template <class S>
void store_all(const typename Acc<S>::A* acc, S* out, int64_t n) {
  parallel_for(n, kWork, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = Acc<S>::st(acc[i]);
  });
}

// ---- sparse_tensor ----

KernelFn sparse_tensor_kernel(const KernelCtx& c) {
  Structure s = structure(c, 1);
  const int64_t total = s.rows * s.cols;
  return dispatch_dtype(c.in[0].dtype, [&](auto vt) -> KernelFn {
    using S = decltype(vt);
    if constexpr (std::is_same_v<S, bool>) {
      raise(ErrorKind::Type, s.op, s.node, "no CPU kernel for bool values");
    } else {
      using A = typename Acc<S>::A;
      const size_t scratch = needs_scratch<S> ? c.scratch(size_t(total) * sizeof(A)) : 0;
      return dispatch_index(c.in[1].dtype, [&](auto it) -> KernelFn {
        using I = decltype(it);
        return [s, total, scratch](const void* const* in, void* const* out) {
          const S* v = static_cast<const S*>(in[0]);
          const I* i0 = static_cast<const I*>(in[1]);
          const I* i1 = static_cast<const I*>(in[2]);
          validate(s, i0, i1);
          S* o = static_cast<S*>(out[0]);
          A* acc = needs_scratch<S> ? static_cast<A*>(out[scratch]) : reinterpret_cast<A*>(o);
          if (total) std::memset(static_cast<void*>(acc), 0, size_t(total) * sizeof(A));
          auto add = [&](int64_t lo, int64_t hi) {
            for_entries(s, i0, i1, lo, hi, [&](int64_t e, int64_t r, int64_t col) {
              acc[r * s.cols + col] += Acc<S>::ld(v[e]);
            });
          };
          // csr rows and csc columns write their own outputs; coo entries may repeat a position
          if (s.storage == SparseStorage::COO) add(0, s.nnz);
          else parallel_for(s.groups(), std::max<int64_t>(1, kWork * s.groups() / std::max<int64_t>(s.nnz, 1)), add);
          if constexpr (needs_scratch<S>) store_all(acc, o, total);
        };
      });
    }
  });
}

// ---- sparse_gather ----

KernelFn sparse_gather_kernel(const KernelCtx& c) {
  Structure s = structure(c, 1);
  const size_t es = dtype_size(c.in[0].dtype);
  return dispatch_index(c.in[1].dtype, [&](auto it) -> KernelFn {
    using I = decltype(it);
    return [s, es](const void* const* in, void* const* out) {
      const char* d = static_cast<const char*>(in[0]);
      const I* i0 = static_cast<const I*>(in[1]);
      const I* i1 = static_cast<const I*>(in[2]);
      validate(s, i0, i1);
      char* o = static_cast<char*>(out[0]);
      parallel_for(s.groups(), std::max<int64_t>(1, kWork * s.groups() / std::max<int64_t>(s.nnz, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for_entries(s, i0, i1, lo, hi, [&](int64_t e, int64_t r, int64_t col) {
                       std::memcpy(o + e * int64_t(es), d + (r * s.cols + col) * int64_t(es), es);
                     });
                   });
    };
  });
}

// ---- sparse_matmul ----

KernelFn sparse_matmul_kernel(const KernelCtx& c) {
  Structure s = structure(c, 1);
  const int64_t n = c.in[3].shape[1];
  return dispatch_float(c, "sparse_matmul", c.in[0].dtype, [&](auto vt) -> KernelFn {
    using S = decltype(vt);
    using A = typename Acc<S>::A;
    const size_t scratch = needs_scratch<S> ? c.scratch(size_t(s.rows * n) * sizeof(A)) : 0;
    return dispatch_index(c.in[1].dtype, [&](auto it) -> KernelFn {
      using I = decltype(it);
      return [s, n, scratch](const void* const* in, void* const* out) {
        const S* v = static_cast<const S*>(in[0]);
        const I* i0 = static_cast<const I*>(in[1]);
        const I* i1 = static_cast<const I*>(in[2]);
        const S* d = static_cast<const S*>(in[3]);
        validate(s, i0, i1);
        S* o = static_cast<S*>(out[0]);
        A* acc = needs_scratch<S> ? static_cast<A*>(out[scratch]) : reinterpret_cast<A*>(o);
        const int64_t total = s.rows * n;
        if (total == 0) return;
        std::fill(acc, acc + total, A(0));
        // acc[r, j0:j1] += v[e] * d[col, j0:j1] for the entries of groups [lo, hi)
        auto run = [&](int64_t lo, int64_t hi, int64_t j0, int64_t j1) {
          for_entries(s, i0, i1, lo, hi, [&](int64_t e, int64_t r, int64_t col) {
            const A a = Acc<S>::ld(v[e]);
            const S* dr = d + col * n;
            A* ar = acc + r * n;
            for (int64_t j = j0; j < j1; ++j) ar[j] += a * Acc<S>::ld(dr[j]);
          });
        };
        const int64_t work = std::max<int64_t>(s.nnz * n, 1);
        if (s.storage == SparseStorage::CSR)
          parallel_for(s.rows, std::max<int64_t>(1, kWork * s.rows / work),
                       [&](int64_t lo, int64_t hi) { run(lo, hi, 0, n); });
        else
          parallel_for(n, std::max<int64_t>(1, kWork * n / work),
                       [&](int64_t j0, int64_t j1) { run(0, s.groups(), j0, j1); });
        if constexpr (needs_scratch<S>) store_all(acc, o, total);
      };
    });
  });
}

// ---- sparse_sampled_matmul ----

KernelFn sparse_sampled_matmul_kernel(const KernelCtx& c) {
  Structure s = structure(c, 2);
  const int64_t n = c.in[0].shape[1];
  return dispatch_float(c, "sparse_sampled_matmul", c.in[0].dtype, [&](auto vt) -> KernelFn {
    using S = decltype(vt);
    using A = typename Acc<S>::A;
    return dispatch_index(c.in[2].dtype, [&](auto it) -> KernelFn {
      using I = decltype(it);
      return [s, n](const void* const* in, void* const* out) {
        const S* x = static_cast<const S*>(in[0]);
        const S* y = static_cast<const S*>(in[1]);
        const I* i0 = static_cast<const I*>(in[2]);
        const I* i1 = static_cast<const I*>(in[3]);
        validate(s, i0, i1);
        S* o = static_cast<S*>(out[0]);
        const int64_t work = std::max<int64_t>(s.nnz * n, 1);
        parallel_for(s.groups(), std::max<int64_t>(1, kWork * s.groups() / work), [&](int64_t lo, int64_t hi) {
          for_entries(s, i0, i1, lo, hi, [&](int64_t e, int64_t r, int64_t col) {
            const S* xr = x + r * n;
            const S* yr = y + col * n;
            A sum = 0;
            for (int64_t j = 0; j < n; ++j) sum += Acc<S>::ld(xr[j]) * Acc<S>::ld(yr[j]);
            o[e] = Acc<S>::st(sum);
          });
        });
      };
    });
  });
}

}  // namespace

void register_sparse_kernels() {
  register_kernel("sparse_tensor", sparse_tensor_kernel);
  register_kernel("sparse_gather", sparse_gather_kernel);
  register_kernel("sparse_matmul", sparse_matmul_kernel);
  register_kernel("sparse_sampled_matmul", sparse_sampled_matmul_kernel);
}

}  // namespace mg::cpu
