// CPU kernels of scaled_dot_product_attention and its gradient (core/ops/attention.cpp).
//
// Flash-attention style: a task takes a block of query rows of one (batch, head) and walks the
// keys in blocks, keeping per row the running maximum, the running sum of exponentials and the
// unnormalised output (an online softmax), so memory is O(block) and never L x S. Blocks are
// converted to the compute type once (float for half/bfloat16); the products of blocks run
// through single-threaded BLAS and the exponentials through the vectorised exp (vec_math.h).
// Each thread owns a slice of the scratch space and takes tasks round-robin.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/vec_math.h"
#include "core/ops/attention_attrs.h"

namespace mg::cpu {

namespace {

constexpr int64_t kBlockQ = 64, kBlockK = 64;
struct AttentionPlan {
  int64_t bh = 0, hq = 1, hk = 1, L = 0, S = 0, D = 0, Dv = 0;
  double scale = 1.0;
  bool causal = false;
  int mask = 0;                     // 0 none, 1 bool, 2 additive
  std::vector<int64_t> mask_off;    // per (batch, head): offset of its (L, S) mask plane
  int64_t mask_sl = 0, mask_ss = 0; // mask strides along L and S (0 where broadcast)
  int64_t mask_size = 0;            // elements of the mask
  bool mask_shared = false;         // gradient tasks share mask elements
  int threads = 1;
  size_t scratch = 0;               // index of the scratch buffer
  size_t per_thread = 0;            // compute-type elements per thread
};

// Masks a row of scaled scores (keys j0 .. j0 + nk of query `row` of (batch, head) bh).
template <class S>
void mask_scores(const AttentionPlan& p, const void* mask, int64_t bh, int64_t row, int64_t j0, int64_t nk,
                 typename Num<S>::C* s) {
  using C = typename Num<S>::C;
  const C neg_inf = -std::numeric_limits<C>::infinity();
  if (p.mask) {
    const int64_t base = p.mask_off[size_t(bh)] + row * p.mask_sl + j0 * p.mask_ss;
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t mo = base + j * p.mask_ss;
      if (p.mask == 1) {
        if (!static_cast<const bool*>(mask)[mo]) s[j] = neg_inf;
      } else {
        s[j] += Num<S>::ld(static_cast<const S*>(mask)[mo]);
      }
    }
  }
  if (p.causal)
    for (int64_t j = std::max<int64_t>(0, row + 1 - j0); j < nk; ++j) s[j] = neg_inf;
}

// C (M, N) = alpha op(A) op(B) + beta C on the calling thread; empty products are BLAS-safe.
template <class C>
void tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, C alpha, const C* A, int64_t lda, const C* B,
               int64_t ldb, C beta, C* out, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) out[i * ldc + j] = beta == C(0) ? C(0) : beta * out[i * ldc + j];
    return;
  }
  blas_call(ta, tb, M, N, K, alpha, A, std::max<int64_t>(1, lda), B, std::max<int64_t>(1, ldb), beta, out,
            std::max<int64_t>(1, ldc));
}

// s[j] = exp(s[j] - shift) (tmp: n elements of scratch).
template <class C>
void exp_shifted(C* s, C shift, int64_t n, C* tmp) {
  for (int64_t j = 0; j < n; ++j) tmp[j] = s[j] - shift;
  if constexpr (std::is_same_v<C, float>) {
    static const vmath::ArrayFn vexp = vmath::array_fn(vmath::Fn::Exp);
    vexp(tmp, s, n);
  } else {
    for (int64_t j = 0; j < n; ++j) s[j] = std::exp(tmp[j]);
  }
}

// Rows [n0, n0 + n) of a (rows, width) tensor of type S as compute-type values.
template <class S>
void load_rows(const S* x, int64_t n0, int64_t n, int64_t width, typename Num<S>::C* to) {
  const S* from = x + n0 * width;
  for (int64_t e = 0; e < n * width; ++e) to[e] = Num<S>::ld(from[e]);
}

// Per-thread buffers of the online softmax over one block of query rows.
size_t row_block_elements(const AttentionPlan& p) {
  return size_t(kBlockQ * p.D + kBlockK * (p.D + p.Dv) + kBlockQ * kBlockK + kBlockK + kBlockQ * p.Dv + 2 * kBlockQ);
}
template <class C>
struct RowBlock {
  C *qb, *kb, *vb, *sb, *tmp, *acc, *m, *l;
  RowBlock(C* at, const AttentionPlan& p)
      : qb(at), kb(qb + kBlockQ * p.D), vb(kb + kBlockK * p.D), sb(vb + kBlockK * p.Dv), tmp(sb + kBlockQ * kBlockK),
        acc(tmp + kBlockK), m(acc + kBlockQ * p.Dv), l(m + kBlockQ) {}
};

// The online softmax of query rows i0 .. i0 + nq of (batch, head) bh: per row the maximum m and
// the sum of exponentials l relative to it, and with `values` the unnormalised output acc.
template <class S>
void attend_rows(const AttentionPlan& p, const S* q, const S* kk, const S* v, const void* mask, int64_t bh,
                 int64_t i0, int64_t nq, bool values, RowBlock<typename Num<S>::C>& b) {
  using C = typename Num<S>::C;
  const int64_t L = p.L, Sk = p.S, D = p.D, Dv = p.Dv;
  const int64_t kvh = (bh / p.hq) * p.hk + (bh % p.hq) / (p.hq / p.hk);
  const C neg_inf = -std::numeric_limits<C>::infinity();
  load_rows(q, bh * L + i0, nq, D, b.qb);
  std::fill(b.m, b.m + nq, neg_inf);
  std::fill(b.l, b.l + nq, C(0));
  if (values) std::fill(b.acc, b.acc + nq * Dv, C(0));
  const int64_t kend = p.causal ? std::min(Sk, i0 + nq) : Sk;
  for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, kend - j0);
    load_rows(kk, kvh * Sk + j0, nk, D, b.kb);
    tile_gemm(false, true, nq, nk, D, C(p.scale), b.qb, D, b.kb, D, C(0), b.sb, kBlockK);
    if (values) load_rows(v, kvh * Sk + j0, nk, Dv, b.vb);
    for (int64_t i = 0; i < nq; ++i) {
      C* s = b.sb + i * kBlockK;
      mask_scores<S>(p, mask, bh, i0 + i, j0, nk, s);
      C mb = neg_inf;
      for (int64_t j = 0; j < nk; ++j) mb = std::max(mb, s[j]);
      const C mnew = std::max(b.m[i], mb);
      if (mnew == neg_inf) {  // every key so far is masked: nothing to add
        std::fill(s, s + nk, C(0));
        continue;
      }
      const C alpha = std::exp(b.m[i] - mnew);
      exp_shifted(s, mnew, nk, b.tmp);
      C li = b.l[i] * alpha;
      for (int64_t j = 0; j < nk; ++j) li += s[j];
      b.l[i] = li;
      b.m[i] = mnew;
      if (values)
        for (int64_t e = 0; e < Dv; ++e) b.acc[i * Dv + e] *= alpha;
    }
    if (values) tile_gemm(false, false, nq, Dv, nk, C(1), b.sb, kBlockK, b.vb, Dv, C(1), b.acc, Dv);
  }
}

// Runs attend_rows over every (batch x head, query block), spread over p.threads workers each
// with its own RowBlock in `scratch` (`per_thread` elements apart), then `done(b, bh, i0, nq)`.
template <class S, class C, class Done>
void for_each_query_block(const AttentionPlan& p, const S* q, const S* kk, const S* v, const void* mask,
                          bool values, C* scratch, int64_t per_thread, Done done) {
  const int64_t qblocks = (p.L + kBlockQ - 1) / kBlockQ, tasks = p.bh * qblocks;
  parallel_for(p.threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      RowBlock<C> b(scratch + size_t(t) * per_thread, p);
      for (int64_t task = t; task < tasks; task += p.threads) {
        const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBlockQ, nq = std::min(kBlockQ, p.L - i0);
        attend_rows<S>(p, q, kk, v, mask, bh, i0, nq, values, b);
        done(b, bh, i0, nq);
      }
    }
  });
}

template <class S>
void run_attention(const AttentionPlan& p, const void* const* in, void* const* out) {
  using C = typename Num<S>::C;
  const S* q = static_cast<const S*>(in[0]);
  const S* kk = static_cast<const S*>(in[1]);
  const S* v = static_cast<const S*>(in[2]);
  const void* mask = p.mask ? in[3] : nullptr;
  S* o = static_cast<S*>(out[0]);
  C* scratch = static_cast<C*>(out[p.scratch]);
  const int64_t L = p.L, Sk = p.S, Dv = p.Dv;
  for_each_query_block<S>(p, q, kk, v, mask, true, scratch, p.per_thread,
                          [&](const RowBlock<C>& b, int64_t bh, int64_t i0, int64_t nq) {
    S* op = o + (bh * L + i0) * Dv;
    for (int64_t i = 0; i < nq; ++i) {
      // no keys: an empty sum (zeros); keys but all masked: softmax of only -inf (NaN)
      const C inv = Sk == 0 ? C(0) : b.l[i] > 0 ? C(1) / b.l[i] : std::numeric_limits<C>::quiet_NaN();
      for (int64_t d = 0; d < Dv; ++d) op[i * Dv + d] = Num<S>::st(Sk == 0 ? C(0) : b.acc[i * Dv + d] * inv);
    }
  });
}

// The sizes, scale and mask strides shared by the forward and the gradient kernels; the mask
// is input `mask_at` where present.
AttentionPlan plan_attention(const KernelCtx& c, size_t mask_at) {
  const ops::AttentionAttrs& a = typed_attrs<ops::AttentionAttrs>(c.node);
  const Shape &qs = c.in[0].shape, &ks = c.in[1].shape, &vs = c.in[2].shape;
  const size_t r = qs.size();
  AttentionPlan p;
  p.L = qs[r - 2];
  p.D = qs[r - 1];
  p.S = ks[r - 2];
  p.Dv = vs[r - 1];
  p.hq = r >= 3 ? qs[r - 3] : 1;
  p.hk = r >= 3 ? ks[r - 3] : 1;
  p.bh = 1;
  for (size_t i = 0; i + 2 < r; ++i) p.bh *= qs[i];
  p.causal = a.causal;
  p.scale = a.has_scale ? a.scale : (p.D > 0 ? 1.0 / std::sqrt(double(p.D)) : 1.0);
  if (c.in.size() > mask_at) {
    const TensorType& mt = c.in[mask_at];
    p.mask = mt.dtype == DType::Bool ? 1 : 2;
    // strides of the mask broadcast to the scores (..., Hq, L, S), 0 along broadcast dims
    std::vector<int64_t> st(r, 0);
    int64_t stride = 1;
    for (size_t i = 0; i < mt.shape.size(); ++i) {
      size_t md = mt.shape.size() - 1 - i, sd = r - 1 - i;
      if (mt.shape[md] != 1) st[sd] = stride;
      stride *= mt.shape[md];
    }
    p.mask_size = stride;
    p.mask_sl = st[r - 2];
    p.mask_ss = st[r - 1];
    p.mask_off.assign(size_t(p.bh), 0);
    for (int64_t bh = 0; bh < p.bh; ++bh) {
      int64_t rem = bh, off = 0;
      for (size_t d = r - 2; d-- > 0;) {
        off += (rem % qs[d]) * st[d];
        rem /= qs[d];
      }
      p.mask_off[size_t(bh)] = off;
    }
    // gradient tasks are (batch, key/value head): they share mask elements when the mask is
    // broadcast along a batch dim, or along the heads while there are several key/value heads
    for (size_t d = 0; d + 2 < r; ++d)
      if (st[d] == 0 && qs[d] > 1 && (d + 3 != r || p.hk > 1)) p.mask_shared = true;
  }
  return p;
}

KernelFn make_attention(const KernelCtx& c) {
  AttentionPlan p = plan_attention(c, 3);
  const int64_t tasks = p.bh * ((p.L + kBlockQ - 1) / kBlockQ);
  p.threads = int(std::max<int64_t>(1, std::min<int64_t>(num_threads(), tasks)));
  p.per_thread = row_block_elements(p);
  return dispatch_float(c, "scaled_dot_product_attention", c.in[0].dtype, [&](auto s) -> KernelFn {
    using S = decltype(s);
    p.scratch = c.scratch(p.per_thread * size_t(p.threads) * sizeof(typename Num<S>::C));
    if (tasks == 0 || p.Dv == 0) return [](const void* const*, void* const*) {};
    return [p](const void* const* in, void* const* out) { run_attention<S>(p, in, out); };
  });
}


// The gradient (FlashAttention-2's backward). Pass 1, over (batch, head, query block): each
// row's log-sum-exp (the forward's online softmax without the values) and delta = rowsum(dout *
// out). Pass 2, one task per (batch, key/value head, range of key blocks): for each key block,
// over the group's query heads and query blocks, recompute P = exp(scores - lse), then dV +=
// P^T dO, dP = dO V^T, dS = P (dP - delta), dQ += dS K scale, dK += dS^T Q scale; dK and dV of
// the block are thus summed over the group in one place, and each key range accumulates its own
// float dQ, summed at the end (the ranges split the keys only when there are fewer (batch, key/
// value head) pairs than threads). Memory is O(blocks + splits x L x D); never L x S.
struct GradScratch {
  size_t lse = 0, task = 0, dq = 0, mask = 0;  // scratch: lse + delta (2 bh L), per thread, dQ parts, mask parts
  size_t per_thread = 0;
  int64_t splits = 1;  // key ranges per (batch, key/value head)
  int mask_parts = 0;
};

template <class S>
void run_attention_gradient(const AttentionPlan& p, const GradScratch& gs, const void* const* in, void* const* out) {
  using C = typename Num<S>::C;
  const S* q = static_cast<const S*>(in[0]);
  const S* kk = static_cast<const S*>(in[1]);
  const S* v = static_cast<const S*>(in[2]);
  const S* o = static_cast<const S*>(in[3]);
  const S* dout = static_cast<const S*>(in[4]);
  const void* mask = p.mask ? in[5] : nullptr;
  S* dq = static_cast<S*>(out[0]);
  S* dk = static_cast<S*>(out[1]);
  S* dv = static_cast<S*>(out[2]);
  S* dmask = gs.mask_parts ? static_cast<S*>(out[3]) : nullptr;
  C* lse = static_cast<C*>(out[gs.lse]);
  C* delta = lse + p.bh * p.L;
  C* scratch = static_cast<C*>(out[gs.task]);
  C* mparts = gs.mask_parts ? static_cast<C*>(out[gs.mask]) : nullptr;
  C* dqp = static_cast<C*>(out[gs.dq]);
  const int64_t L = p.L, Sk = p.S, D = p.D, Dv = p.Dv, group = p.hq / p.hk;
  const C neg_inf = -std::numeric_limits<C>::infinity();
  const C scale = C(p.scale);

  for_each_query_block<S>(p, q, kk, v, mask, false, scratch, gs.per_thread,
                          [&](const RowBlock<C>& b, int64_t bh, int64_t i0, int64_t nq) {
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t row = bh * L + i0 + i;
      // a row that attends no key: lse -inf, so P = exp(-inf + inf) is NaN as in the decomposition
      lse[row] = b.l[i] > 0 ? b.m[i] + std::log(b.l[i]) : neg_inf;
      C dl = 0;
      for (int64_t e = 0; e < Dv; ++e) dl += Num<S>::ld(dout[row * Dv + e]) * Num<S>::ld(o[row * Dv + e]);
      delta[row] = dl;
    }
  });

  const int64_t kv_tasks = p.bh / p.hq * p.hk, kblocks = (Sk + kBlockK - 1) / kBlockK;
  if (mparts) std::fill(mparts, mparts + size_t(gs.mask_parts) * size_t(p.mask_size), C(0));
  parallel_for(p.threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      C* qb = scratch + size_t(t) * gs.per_thread;
      C* dob = qb + kBlockQ * D;
      C* kb = dob + kBlockQ * Dv;
      C* vb = kb + kBlockK * D;
      C* pb = vb + kBlockK * Dv;
      C* dsb = pb + kBlockQ * kBlockK;
      C* tmp = dsb + kBlockQ * kBlockK;
      C* dkb = tmp + kBlockK;
      C* dvb = dkb + kBlockK * D;
      C* mp = mparts ? mparts + (gs.mask_parts > 1 ? size_t(t) * size_t(p.mask_size) : 0) : nullptr;
      for (int64_t task = t; task < kv_tasks * gs.splits; task += p.threads) {
        const int64_t kvh = task / gs.splits, split = task % gs.splits;  // kvh: (batch, key/value head)
        const int64_t bh0 = (kvh / p.hk) * p.hq + (kvh % p.hk) * group;
        C* dqb = dqp + (split * p.bh + bh0) * L * D;  // the group's query heads, this key range's part
        std::fill(dqb, dqb + group * L * D, C(0));
        const int64_t jend = std::min(Sk, (split + 1) * kblocks / gs.splits * kBlockK);
        for (int64_t j0 = split * kblocks / gs.splits * kBlockK; j0 < jend; j0 += kBlockK) {
          const int64_t nk = std::min(kBlockK, jend - j0);
          load_rows(kk, kvh * Sk + j0, nk, D, kb);
          load_rows(v, kvh * Sk + j0, nk, Dv, vb);
          std::fill(dkb, dkb + nk * D, C(0));
          std::fill(dvb, dvb + nk * Dv, C(0));
          for (int64_t gi = 0; gi < group; ++gi) {
            const int64_t bh = bh0 + gi;
            // causal: query blocks that end before the key block see none of its keys
            for (int64_t i0 = p.causal ? (j0 / kBlockQ) * kBlockQ : 0; i0 < L; i0 += kBlockQ) {
              const int64_t nq = std::min(kBlockQ, L - i0);
              load_rows(q, bh * L + i0, nq, D, qb);
              load_rows(dout, bh * L + i0, nq, Dv, dob);
              tile_gemm(false, true, nq, nk, D, scale, qb, D, kb, D, C(0), pb, kBlockK);      // scores
              tile_gemm(false, true, nq, nk, Dv, C(1), dob, Dv, vb, Dv, C(0), dsb, kBlockK);  // dP = dO V^T
              for (int64_t i = 0; i < nq; ++i) {
                const int64_t row = i0 + i;
                C* pr = pb + i * kBlockK;
                C* dsr = dsb + i * kBlockK;
                mask_scores<S>(p, mask, bh, row, j0, nk, pr);
                exp_shifted(pr, lse[bh * L + row], nk, tmp);
                const C di = delta[bh * L + row];
                for (int64_t j = 0; j < nk; ++j) dsr[j] = pr[j] * (dsr[j] - di);
                if (mp) {
                  const int64_t base = p.mask_off[size_t(bh)] + row * p.mask_sl + j0 * p.mask_ss;
                  for (int64_t j = 0; j < nk; ++j) mp[base + j * p.mask_ss] += dsr[j];
                }
              }
              tile_gemm(true, false, nk, Dv, nq, C(1), pb, kBlockK, dob, Dv, C(1), dvb, Dv);  // dV += P^T dO
              tile_gemm(true, false, nk, D, nq, scale, dsb, kBlockK, qb, D, C(1), dkb, D);    // dK += dS^T Q
              tile_gemm(false, false, nq, D, nk, scale, dsb, kBlockK, kb, D, C(1), dqb + (gi * L + i0) * D, D);
            }
          }
          for (int64_t x = 0; x < nk * D; ++x) dk[(kvh * Sk + j0) * D + x] = Num<S>::st(dkb[x]);
          for (int64_t x = 0; x < nk * Dv; ++x) dv[(kvh * Sk + j0) * Dv + x] = Num<S>::st(dvb[x]);
        }
      }
    }
  });
  const int64_t nq = p.bh * L * D;
  parallel_for(nq, 1 << 14, [&](int64_t x0, int64_t x1) {
    for (int64_t x = x0; x < x1; ++x) {
      C sum = dqp[x];
      for (int64_t split = 1; split < gs.splits; ++split) sum += dqp[split * nq + x];
      dq[x] = Num<S>::st(sum);
    }
  });
  if (dmask)
    for (int64_t x = 0; x < p.mask_size; ++x) {
      C sum = 0;
      for (int part = 0; part < gs.mask_parts; ++part) sum += mparts[size_t(part) * size_t(p.mask_size) + size_t(x)];
      dmask[x] = Num<S>::st(sum);
    }
}

KernelFn make_attention_gradient(const KernelCtx& c) {
  AttentionPlan p = plan_attention(c, 5);
  GradScratch gs;
  const int64_t kv_tasks = p.hk > 0 ? p.bh / p.hq * p.hk : 0;
  const int64_t kblocks = (p.S + kBlockK - 1) / kBlockK;
  if (kv_tasks > 0 && kv_tasks < num_threads())
    gs.splits = std::max<int64_t>(1, std::min(kblocks, (num_threads() + kv_tasks - 1) / kv_tasks));
  const int64_t tasks = std::max(p.bh * ((p.L + kBlockQ - 1) / kBlockQ), kv_tasks * gs.splits);
  p.threads = int(std::max<int64_t>(1, std::min<int64_t>(num_threads(), tasks)));
  gs.per_thread = std::max(row_block_elements(p), size_t(kBlockQ * (p.D + p.Dv) + 2 * kBlockK * (p.D + p.Dv) +
                                                         2 * kBlockQ * kBlockK + kBlockK));
  const bool dmask = c.out.size() > 3;
  // key ranges of one (batch, key/value head) share the elements of a mask broadcast along the keys
  gs.mask_parts = dmask ? (p.mask_shared || gs.splits > 1 ? p.threads : 1) : 0;
  return dispatch_float(c, "scaled_dot_product_attention_gradient", c.in[0].dtype, [&](auto s) -> KernelFn {
    using S = decltype(s);
    const size_t cs = sizeof(typename Num<S>::C);
    gs.lse = c.scratch(size_t(2 * p.bh * p.L) * cs);
    gs.task = c.scratch(gs.per_thread * size_t(p.threads) * cs);
    gs.dq = c.scratch(size_t(gs.splits * p.bh * p.L * p.D) * cs);
    gs.mask = c.scratch(size_t(gs.mask_parts) * size_t(p.mask_size) * cs);
    return [p, gs](const void* const* in, void* const* out) { run_attention_gradient<S>(p, gs, in, out); };
  });
}

}  // namespace

void register_attention_kernels() {
  register_kernel("scaled_dot_product_attention", make_attention);
  register_kernel("scaled_dot_product_attention_gradient", make_attention_gradient);
}

}  // namespace mg::cpu
