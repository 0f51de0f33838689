// CPU kernel for matrix_multiplication: float32/float64 through BLAS gemm, float16/bfloat16
// through float32 scratch buffers, integers by a wrapping loop. Batch offsets (with
// broadcasting) are computed once in the factory. A float32 product may carry an epilogue
// (conv_epilogue.h), applied to each block of the output right after BLAS wrote it. Products
// of a few rows by constant weights use conv_gemm_packed.h's weights packed at compile instead.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/conv_gemm_packed.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/matmul_kernel.h"


namespace mg::cpu {

namespace {

// Row-major C = op(A) @ op(B) with op(A) (M, K), op(B) (K, N), C (M, N), all contiguous
// rows; A is stored (K, M) when ta, B (N, K) when tb (a transpose folded into the call).
template <class T>
inline void gemm(bool ta, bool tb, int M, int N, int K, const T* A, const T* B, T* C) {
  gemm_on_pool(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, T(0), C, N);
}

struct MatmulPlan {
  bool ta = false, tb = false;  // x / y hold the transposes of the matrices multiplied
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> x_off, y_off;  // per output batch, in elements
  int64_t batches() const { return int64_t(x_off.size()); }
  int64_t x_elems = 0, y_elems = 0, out_elems = 0;
};

MatmulPlan make_plan(const Shape& xs0, const Shape& ys0, const Shape& out, bool ta, bool tb) {
  MatmulPlan p;
  p.ta = ta;
  p.tb = tb;
  Shape xs = xs0, ys = ys0;
  if (xs.size() == 1) xs.insert(xs.begin(), 1);
  if (ys.size() == 1) ys.push_back(1);
  p.M = ta ? xs.back() : xs[xs.size() - 2];
  p.K = ta ? xs[xs.size() - 2] : xs.back();
  p.N = tb ? ys[ys.size() - 2] : ys.back();
  p.x_elems = num_elements(xs0);
  p.y_elems = num_elements(ys0);
  p.out_elems = num_elements(out);
  Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
  Shape bo = *broadcast_shapes(bx, by);
  const int64_t xm = p.M * p.K, ym = p.K * p.N;  // elements per matrix
  int64_t nb = num_elements(bo);
  if (num_elements(by) == 1 && bx == bo && !ta) {  // y unbatched: stack x's batches into rows, one gemm
    p.M *= nb;
    p.x_off = {0};
    p.y_off = {0};
    return p;
  }
  size_t r = bo.size();
  // batch strides (in matrices) of x and y aligned to bo, 0 where broadcast
  std::vector<int64_t> sx(r, 0), sy(r, 0);
  int64_t acc = 1;
  for (size_t i = bx.size(); i-- > 0;) {
    sx[r - bx.size() + i] = bx[i] == 1 ? 0 : acc;
    acc *= bx[i];
  }
  acc = 1;
  for (size_t i = by.size(); i-- > 0;) {
    sy[r - by.size() + i] = by[i] == 1 ? 0 : acc;
    acc *= by[i];
  }
  p.x_off.resize(size_t(nb));
  p.y_off.resize(size_t(nb));
  for (int64_t b = 0; b < nb; ++b) {
    int64_t rem = b, ox = 0, oy = 0;
    for (size_t d = r; d-- > 0;) {
      int64_t idx = rem % bo[d];
      rem /= bo[d];
      ox += idx * sx[d];
      oy += idx * sy[d];
    }
    p.x_off[size_t(b)] = ox * xm;
    p.y_off[size_t(b)] = oy * ym;
  }
  return p;
}

// Runs body(b) for each batch; over threads when each product is small.
template <class Body>
void for_batches(const MatmulPlan& p, Body&& body) {
  int64_t nb = p.batches();
  double work = double(p.M) * double(p.N) * double(p.K);
  if (nb > 1 && work < 262144.0) {
    int64_t grain = std::max<int64_t>(1, int64_t(262144.0 / std::max(work, 1.0)));
    parallel_for(nb, grain, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) body(b);
    });
  } else {
    for (int64_t b = 0; b < nb; ++b) body(b);
  }
}

template <class T>  // float or double
void blas_batches(const MatmulPlan& p, const T* x, const T* y, T* o) {
  const int64_t mn = p.M * p.N;
  for_batches(p, [&](int64_t b) {
    gemm(p.ta, p.tb, int(p.M), int(p.N), int(p.K), x + p.x_off[size_t(b)], y + p.y_off[size_t(b)], o + b * mn);
  });
}

// The float32 product with an epilogue: rows are those of one batch's product, or (x's
// batches stacked into one product) of the stack, which the epilogue sees batch by batch.
void blas_batches_epilogue(const MatmulPlan& p, const float* x, const float* y, float* o, const ConvEpilogue& e,
                           const float* const* operands) {
  const int64_t mn = p.M * p.N;
  const bool stacked = p.batches() == 1 && p.M != e.O;
  for_batches(p, [&](int64_t b) {
    auto after = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      if (!stacked) return e.apply(o, operands, b, r0, r1, c0, c1);
      for (int64_t r = r0; r < r1;) {  // stacked rows r0..r1 as (batch, row) runs
        const int64_t n = r / e.O, o0 = r % e.O, o1 = std::min(e.O, o0 + (r1 - r));
        e.apply(o, operands, n, o0, o1, c0, c1);
        r += o1 - o0;
      }
    };
    gemm_on_pool(p.ta, p.tb, p.M, p.N, p.K, x + p.x_off[size_t(b)], p.ta ? p.M : p.K, y + p.y_off[size_t(b)],
                 p.tb ? p.K : p.N, 0.0f, o + b * mn, p.N, after);
  });
}

template <class S>  // half_t or bfloat16_t via float32 scratch
void to_float(const S* src, float* dst, int64_t n) {
  parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = Num<S>::ld(src[i]);
  });
}
template <class S>
void from_float(const float* src, S* dst, int64_t n) {
  parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = Num<S>::st(src[i]);
  });
}

template <class U>  // unsigned integer storage; wrapping products
void int_batches(const MatmulPlan& p, const U* x, const U* y, U* o) {
  using W = std::conditional_t<sizeof(U) <= 4, uint32_t, uint64_t>;  // no promotion to signed int
  const int64_t M = p.M, N = p.N, K = p.K;
  int64_t rows = p.batches() * M;
  int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(N * K, 1));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t b = r / M, m = r % M;
      const U* a = x + p.x_off[size_t(b)] + m * K;
      const U* bb = y + p.y_off[size_t(b)];
      U* c = o + r * N;
      for (int64_t n = 0; n < N; ++n) c[n] = 0;
      for (int64_t k = 0; k < K; ++k) {
        W av = W(a[k]);
        const U* brow = bb + k * N;
        for (int64_t n = 0; n < N; ++n) c[n] = U(W(c[n]) + av * W(brow[n]));
      }
    }
  });
}

template <class S>
struct UnsignedOf {
  using type = std::conditional_t<sizeof(S) == 1, uint8_t,
                                  std::conditional_t<sizeof(S) == 2, uint16_t,
                                                     std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>>;
};

// Products of 2 to 16 rows by constant weights run on the weights packed at compile (a
// classifier: BLAS would repack all of them on every call, for a handful of rows; 1000 x 1280
// weights: 8 rows 1.7x, 2 to 4 rows 2.9-3.8x faster, 16 rows 1.6x); one row stays with BLAS's
// gemv, which does not pack.
constexpr int64_t kPackedMinRows = 2, kPackedMaxRows = 16;

// A float32 product of few rows (x's batches stacked) by a constant matrix: the weights packed
// at compile, a bias along the rows folded into the store, the rest of the epilogue (e, or
// null) applied after; empty where it does not apply (MPSGRAPH_CPU_PACKED_MATMUL=0, read at
// compile: BLAS).
KernelFn packed_matmul(const KernelCtx& c, const MatmulPlan& p, const ConvEpilogue* e) {
  if (c.in[0].dtype != DType::Float32 || p.ta || p.batches() != 1 || p.x_off[0] != 0 || p.y_off[0] != 0 ||
      c.in[1].shape.size() != 2 || p.M < kPackedMinRows || p.M > kPackedMaxRows || p.N < 1 || p.K < 1)
    return {};
  if (c.constants.size() < 2 || !c.constants[1] || switched_off("MPSGRAPH_CPU_PACKED_MATMUL")) return {};
  const float* y = static_cast<const float*>(c.constants[1]->data());
  std::vector<float> yt;  // y (K, N) as the (N, K) rows the packing reads
  if (!p.tb) {
    yt.resize(size_t(p.N * p.K));
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t n = 0; n < p.N; ++n) yt[size_t(n * p.K + k)] = y[k * p.N + n];
    y = yt.data();
  }
  std::shared_ptr<const PackedWeights> w = make_packed_weights(y, p.N, p.K, p.K, PackedLayout::Channels);
  if (!w) return {};
  int bias = -1;
  size_t from = 0;
  if (e && !e->ops.empty() && e->ops[0].kind == EpilogueOp::Kind::Add && e->ops[0].arg == EpilogueOp::Arg::Inner)
    bias = e->ops[0].input, from = 1;
  const bool rest = e && from < e->ops.size();
  const ConvEpilogue epi = e ? *e : ConvEpilogue{};
  return [w, p, bias, from, rest, epi](const void* const* in, void* const* out) {
    const float* x = static_cast<const float*>(in[0]);
    float* o = static_cast<float*>(out[0]);
    const float* const* operands = reinterpret_cast<const float* const*>(in + 2);
    PackedStore st;
    if (bias >= 0) st.bias = operands[bias], st.bias_stride = 1;
    packed_gemm_xwt(*w, x, p.K, p.M, o, p.N, bias >= 0 ? &st : nullptr);
    if (rest)  // x's batches stacked: the epilogue sees them batch by batch
      for (int64_t n = 0; n < p.M / epi.O; ++n) epi.apply(o, operands, n, 0, epi.O, 0, p.N, from);
  };
}

}  // namespace

KernelFn make_matmul_kernel(const KernelCtx& c, bool transpose_x, bool transpose_y) {
  MatmulPlan p = make_plan(c.in[0].shape, c.in[1].shape, c.out[0].shape, transpose_x, transpose_y);
  if (KernelFn f = packed_matmul(c, p, nullptr)) return f;
  DType dt = c.in[0].dtype;
  size_t esize = dtype_size(dt);
  size_t out_bytes = size_t(p.out_elems) * esize;
  if (p.out_elems == 0) return [](const void* const*, void* const*) {};
  if (p.K == 0) return [out_bytes](const void* const*, void* const* out) { std::memset(out[0], 0, out_bytes); };
  if (is_floating(dt) && (p.M > INT_MAX || p.N > INT_MAX || p.K > INT_MAX))
    raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "matrix dims beyond 2**31-1 are not supported");
  return dispatch_dtype(dt, [&](auto tag) -> KernelFn {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
      return [p](const void* const* in, void* const* out) {
        blas_batches<S>(p, static_cast<const S*>(in[0]), static_cast<const S*>(in[1]), static_cast<S*>(out[0]));
      };
    } else if constexpr (std::is_same_v<S, half_t> || std::is_same_v<S, bfloat16_t>) {
      const size_t xs = c.scratch(size_t(p.x_elems) * sizeof(float)), ys = c.scratch(size_t(p.y_elems) * sizeof(float)),
                   os = c.scratch(size_t(p.out_elems) * sizeof(float));
      return [p, xs, ys, os](const void* const* in, void* const* out) {
        float *xf = static_cast<float*>(out[xs]), *yf = static_cast<float*>(out[ys]), *of = static_cast<float*>(out[os]);
        to_float(static_cast<const S*>(in[0]), xf, p.x_elems);
        to_float(static_cast<const S*>(in[1]), yf, p.y_elems);
        blas_batches<float>(p, xf, yf, of);
        from_float(of, static_cast<S*>(out[0]), p.out_elems);
      };
    } else if (p.ta || p.tb) {
      raise(ErrorKind::Runtime, c.node.op->name, c.node.name, "a transposed operand needs a floating-point dtype");
    } else if constexpr (std::is_same_v<S, bool>) {
      raise(ErrorKind::Type, c.node.op->name, c.node.name, "no cpu kernel for bool");
    } else {
      using U = typename UnsignedOf<S>::type;
      return [p](const void* const* in, void* const* out) {
        int_batches<U>(p, static_cast<const U*>(in[0]), static_cast<const U*>(in[1]), static_cast<U*>(out[0]));
      };
    }
  });
}

KernelFn make_matmul_kernel(const KernelCtx& c, bool transpose_x, bool transpose_y, const ConvEpilogue& epilogue) {
  const MatmulPlan p = make_plan(c.in[0].shape, c.in[1].shape, c.out[0].shape, transpose_x, transpose_y);
  if (c.in[0].dtype != DType::Float32 || p.out_elems == 0 || p.K == 0 || p.M > INT_MAX || p.N > INT_MAX ||
      p.K > INT_MAX) {  // the plain product, then the epilogue over the whole output
    KernelFn plain = make_matmul_kernel(c, transpose_x, transpose_y);
    const int64_t batches = p.out_elems / std::max<int64_t>(1, epilogue.O * epilogue.P);
    return [plain, epilogue, batches](const void* const* in, void* const* out) {
      plain(in, out);
      for (int64_t n = 0; n < batches; ++n)
        epilogue.apply(static_cast<float*>(out[0]), reinterpret_cast<const float* const*>(in + 2), n, 0, epilogue.O,
                       0, epilogue.P);
    };
  }
  if (KernelFn f = packed_matmul(c, p, &epilogue)) return f;
  return [p, epilogue](const void* const* in, void* const* out) {
    blas_batches_epilogue(p, static_cast<const float*>(in[0]), static_cast<const float*>(in[1]),
                          static_cast<float*>(out[0]), epilogue, reinterpret_cast<const float* const*>(in + 2));
  };
}

void register_matmul_kernels() {
  register_kernel("matrix_multiplication", [](const KernelCtx& c) { return make_matmul_kernel(c, false, false); });
}

}  // namespace mg::cpu
