// CPU kernel of scaled_dot_product_attention (core/ops/attention.cpp).
//
// Flash-attention style: each task takes a block of query rows of one (batch, head) and walks
// the keys in blocks, keeping per row the running maximum, the running sum of exponentials and
// the unnormalised output (an online softmax), so memory is O(block) and never L x S. Blocks
// are converted to the compute type once (float for half/bfloat16); the key block is stored
// transposed so that the score and the output loops both run over contiguous memory. Each
// thread owns a slice of the scratch space and takes tasks round-robin.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/attention_attrs.h"

namespace mg::cpu {

namespace {

constexpr int64_t kBlockQ = 32, kBlockK = 64;

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

// Scales a row of raw scores q.k (keys j0 .. j0 + nk of query `row` of (batch, head) bh) and
// applies the mask and causality.
template <class S>
void mask_scores(const AttentionPlan& p, const void* mask, int64_t bh, int64_t row, int64_t j0, int64_t nk,
                 typename Num<S>::C* s) {
  using C = typename Num<S>::C;
  const C neg_inf = -std::numeric_limits<C>::infinity(), scale = C(p.scale);
  for (int64_t j = 0; j < nk; ++j) s[j] *= scale;
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

template <class S>
void run_attention(const AttentionPlan& p, const void* const* in, void* const* out) {
  using C = typename Num<S>::C;
  const S* q = static_cast<const S*>(in[0]);
  const S* kk = static_cast<const S*>(in[1]);
  const S* v = static_cast<const S*>(in[2]);
  const void* mask = p.mask ? in[3] : nullptr;
  S* o = static_cast<S*>(out[0]);
  C* scratch = static_cast<C*>(out[p.scratch]);
  const int64_t L = p.L, Sk = p.S, D = p.D, Dv = p.Dv, group = p.hq / p.hk;
  const int64_t qblocks = (L + kBlockQ - 1) / kBlockQ, tasks = p.bh * qblocks;
  const C neg_inf = -std::numeric_limits<C>::infinity();
  parallel_for(p.threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      C* qb = scratch + size_t(t) * p.per_thread;
      C* kb = qb + kBlockQ * D;
      C* vb = kb + kBlockK * D;
      C* sb = vb + kBlockK * Dv;
      C* acc = sb + kBlockQ * kBlockK;
      C* m = acc + kBlockQ * Dv;
      C* l = m + kBlockQ;
      for (int64_t task = t; task < tasks; task += p.threads) {
        const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBlockQ, nq = std::min(kBlockQ, L - i0);
        const int64_t kvh = (bh / p.hq) * p.hk + (bh % p.hq) / group;
        const S* qp = q + (bh * L + i0) * D;
        const S* kp = kk + kvh * Sk * D;
        const S* vp = v + kvh * Sk * Dv;
        for (int64_t x = 0; x < nq * D; ++x) qb[x] = Num<S>::ld(qp[x]);
        std::fill(acc, acc + nq * Dv, C(0));
        std::fill(m, m + nq, neg_inf);
        std::fill(l, l + nq, C(0));
        const int64_t kend = p.causal ? std::min(Sk, i0 + nq) : Sk;
        for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
          const int64_t nk = std::min(kBlockK, kend - j0);
          for (int64_t j = 0; j < nk; ++j)  // transposed (D x block): the score loop runs along keys
            for (int64_t d = 0; d < D; ++d) kb[d * kBlockK + j] = Num<S>::ld(kp[(j0 + j) * D + d]);
          for (int64_t x = 0; x < nk * Dv; ++x) vb[x] = Num<S>::ld(vp[j0 * Dv + x]);
          for (int64_t i = 0; i < nq; ++i) {
            C* s = sb + i * kBlockK;
            const C* qr = qb + i * D;
            const int64_t row = i0 + i;
            std::fill(s, s + nk, C(0));
            for (int64_t d = 0; d < D; ++d) {
              const C qd = qr[d];
              const C* kr = kb + d * kBlockK;
              for (int64_t j = 0; j < nk; ++j) s[j] += qd * kr[j];
            }
            mask_scores<S>(p, mask, bh, row, j0, nk, s);
            C mb = neg_inf;
            for (int64_t j = 0; j < nk; ++j) mb = std::max(mb, s[j]);
            const C mnew = std::max(m[i], mb);
            if (mnew == neg_inf) continue;  // every key so far is masked
            const C alpha = std::exp(m[i] - mnew);
            C* a = acc + i * Dv;
            C li = l[i] * alpha;
            for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
            for (int64_t j = 0; j < nk; ++j) {
              const C e = std::exp(s[j] - mnew);
              li += e;
              const C* vr = vb + j * Dv;
              for (int64_t d = 0; d < Dv; ++d) a[d] += e * vr[d];
            }
            l[i] = li;
            m[i] = mnew;
          }
        }
        S* op = o + (bh * L + i0) * Dv;
        for (int64_t i = 0; i < nq; ++i) {
          // no keys: an empty sum (zeros); keys but all masked: softmax of only -inf (NaN)
          const C inv = Sk == 0 ? C(0) : l[i] > 0 ? C(1) / l[i] : std::numeric_limits<C>::quiet_NaN();
          for (int64_t d = 0; d < Dv; ++d) op[i * Dv + d] = Num<S>::st(Sk == 0 ? C(0) : acc[i * Dv + d] * inv);
        }
      }
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
  p.per_thread = size_t(kBlockQ * p.D + kBlockK * p.D + kBlockK * p.Dv + kBlockQ * kBlockK + kBlockQ * p.Dv + 2 * kBlockQ);
  return dispatch_float(c, "scaled_dot_product_attention", c.in[0].dtype, [&](auto s) -> KernelFn {
    using S = decltype(s);
    p.scratch = c.scratch(p.per_thread * size_t(p.threads) * sizeof(typename Num<S>::C));
    if (tasks == 0 || p.Dv == 0) return [](const void* const*, void* const*) {};
    return [p](const void* const* in, void* const* out) { run_attention<S>(p, in, out); };
  });
}


// The gradient (FlashAttention-2's backward). Pass 1, over (batch, head, query block): each
// row's log-sum-exp of its scores (one pass over the keys, the online softmax without values)
// and delta = rowsum(dout * out). Pass 2, one task per (batch, key/value head): for each key
// block, over the group's query heads and query blocks, recompute P = exp(scores - lse), then
// dV += P^T dO, dP = dO V^T, dS = P (dP - delta), dQ += dS K scale, dK += dS^T Q scale; dK and
// dV of the block are thus summed over the group in one place and dQ stays in the task's own
// float buffer. Memory is O(blocks + group x L x D); the L x S scores never exist.
struct GradScratch {
  size_t lse = 0, task = 0, mask = 0;  // scratch indices: lse + delta (2 bh L), per thread, mask partials
  size_t per_thread = 0;
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
  const int64_t L = p.L, Sk = p.S, D = p.D, Dv = p.Dv, group = p.hq / p.hk;
  const C neg_inf = -std::numeric_limits<C>::infinity();
  const C scale = C(p.scale);

  const int64_t qblocks = (L + kBlockQ - 1) / kBlockQ, rows_tasks = p.bh * qblocks;
  parallel_for(p.threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      C* qb = scratch + size_t(t) * gs.per_thread;
      C* kt = qb + kBlockQ * D;
      C* sb = kt + kBlockK * D;
      for (int64_t task = t; task < rows_tasks; task += p.threads) {
        const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBlockQ, nq = std::min(kBlockQ, L - i0);
        const int64_t kvh = (bh / p.hq) * p.hk + (bh % p.hq) / group;
        for (int64_t x = 0; x < nq * D; ++x) qb[x] = Num<S>::ld(q[(bh * L + i0) * D + x]);
        C* m = lse + bh * L + i0;
        C* l = delta + bh * L + i0;  // the running sums, until delta replaces them
        std::fill(m, m + nq, neg_inf);
        std::fill(l, l + nq, C(0));
        const int64_t kend = p.causal ? std::min(Sk, i0 + nq) : Sk;
        for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
          const int64_t nk = std::min(kBlockK, kend - j0);
          for (int64_t j = 0; j < nk; ++j)
            for (int64_t d = 0; d < D; ++d) kt[d * kBlockK + j] = Num<S>::ld(kk[(kvh * Sk + j0 + j) * D + d]);
          for (int64_t i = 0; i < nq; ++i) {
            C* s = sb + i * kBlockK;
            std::fill(s, s + nk, C(0));
            for (int64_t d = 0; d < D; ++d) {
              const C qd = qb[i * D + d];
              const C* kr = kt + d * kBlockK;
              for (int64_t j = 0; j < nk; ++j) s[j] += qd * kr[j];
            }
            mask_scores<S>(p, mask, bh, i0 + i, j0, nk, s);
            C mb = neg_inf;
            for (int64_t j = 0; j < nk; ++j) mb = std::max(mb, s[j]);
            const C mnew = std::max(m[i], mb);
            if (mnew == neg_inf) continue;
            C li = l[i] * std::exp(m[i] - mnew);
            for (int64_t j = 0; j < nk; ++j) li += std::exp(s[j] - mnew);
            l[i] = li;
            m[i] = mnew;
          }
        }
        for (int64_t i = 0; i < nq; ++i) {
          // a row that attends no key: lse -inf, so P = exp(-inf + inf) is NaN as in the decomposition
          m[i] = l[i] > 0 ? m[i] + std::log(l[i]) : neg_inf;
          C dl = 0;
          const int64_t at = (bh * L + i0 + i) * Dv;
          for (int64_t e = 0; e < Dv; ++e) dl += Num<S>::ld(dout[at + e]) * Num<S>::ld(o[at + e]);
          l[i] = dl;
        }
      }
    }
  });

  const int64_t batches = p.bh / p.hq, kv_tasks = batches * p.hk;
  if (mparts) std::fill(mparts, mparts + size_t(gs.mask_parts) * size_t(p.mask_size), C(0));
  parallel_for(p.threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      C* qb = scratch + size_t(t) * gs.per_thread;
      C* dob = qb + kBlockQ * D;
      C* kb = dob + kBlockQ * Dv;
      C* kt = kb + kBlockK * D;
      C* vt = kt + kBlockK * D;
      C* pb = vt + kBlockK * Dv;
      C* dsb = pb + kBlockQ * kBlockK;
      C* dkb = dsb + kBlockQ * kBlockK;
      C* dvb = dkb + kBlockK * D;
      C* dqb = dvb + kBlockK * Dv;  // group x L x D
      C* mp = mparts ? mparts + (gs.mask_parts > 1 ? size_t(t) * size_t(p.mask_size) : 0) : nullptr;
      for (int64_t task = t; task < kv_tasks; task += p.threads) {
        const int64_t b = task / p.hk, kvh = task;  // kvh: (batch, key/value head) flattened
        const int64_t bh0 = b * p.hq + (task % p.hk) * group;
        std::fill(dqb, dqb + group * L * D, C(0));
        for (int64_t j0 = 0; j0 < Sk; j0 += kBlockK) {
          const int64_t nk = std::min(kBlockK, Sk - j0);
          for (int64_t j = 0; j < nk; ++j) {
            for (int64_t d = 0; d < D; ++d) {
              const C x = Num<S>::ld(kk[(kvh * Sk + j0 + j) * D + d]);
              kb[j * D + d] = x;
              kt[d * kBlockK + j] = x;
            }
            for (int64_t e = 0; e < Dv; ++e) vt[e * kBlockK + j] = Num<S>::ld(v[(kvh * Sk + j0 + j) * Dv + e]);
          }
          std::fill(dkb, dkb + nk * D, C(0));
          std::fill(dvb, dvb + nk * Dv, C(0));
          for (int64_t gi = 0; gi < group; ++gi) {
            const int64_t bh = bh0 + gi;
            // causal: query blocks that end before the key block see none of its keys
            for (int64_t i0 = p.causal ? (j0 / kBlockQ) * kBlockQ : 0; i0 < L; i0 += kBlockQ) {
              const int64_t nq = std::min(kBlockQ, L - i0);
              for (int64_t x = 0; x < nq * D; ++x) qb[x] = Num<S>::ld(q[(bh * L + i0) * D + x]);
              for (int64_t x = 0; x < nq * Dv; ++x) dob[x] = Num<S>::ld(dout[(bh * L + i0) * Dv + x]);
              for (int64_t i = 0; i < nq; ++i) {
                const int64_t row = i0 + i;
                C* pr = pb + i * kBlockK;
                C* dsr = dsb + i * kBlockK;
                std::fill(pr, pr + nk, C(0));
                std::fill(dsr, dsr + nk, C(0));
                for (int64_t d = 0; d < D; ++d) {
                  const C qd = qb[i * D + d];
                  const C* kr = kt + d * kBlockK;
                  for (int64_t j = 0; j < nk; ++j) pr[j] += qd * kr[j];
                }
                mask_scores<S>(p, mask, bh, row, j0, nk, pr);
                const C li = lse[bh * L + row];
                for (int64_t j = 0; j < nk; ++j) pr[j] = std::exp(pr[j] - li);
                for (int64_t e = 0; e < Dv; ++e) {  // dP = dO V^T
                  const C de = dob[i * Dv + e];
                  const C* vr = vt + e * kBlockK;
                  for (int64_t j = 0; j < nk; ++j) dsr[j] += de * vr[j];
                }
                const C di = delta[bh * L + row];
                for (int64_t j = 0; j < nk; ++j) dsr[j] = pr[j] * (dsr[j] - di);
                if (mp) {
                  const int64_t base = p.mask_off[size_t(bh)] + row * p.mask_sl + j0 * p.mask_ss;
                  for (int64_t j = 0; j < nk; ++j) mp[base + j * p.mask_ss] += dsr[j];
                }
                C* dqr = dqb + (gi * L + row) * D;
                for (int64_t j = 0; j < nk; ++j) {
                  const C pj = pr[j], dsj = dsr[j] * scale;
                  const C* kr = kb + j * D;
                  C* dkr = dkb + j * D;
                  C* dvr = dvb + j * Dv;
                  const C* qr = qb + i * D;
                  const C* dor = dob + i * Dv;
                  for (int64_t d = 0; d < D; ++d) dqr[d] += dsj * kr[d];
                  for (int64_t d = 0; d < D; ++d) dkr[d] += dsj * qr[d];
                  for (int64_t e = 0; e < Dv; ++e) dvr[e] += pj * dor[e];
                }
              }
            }
          }
          for (int64_t x = 0; x < nk * D; ++x) dk[(kvh * Sk + j0) * D + x] = Num<S>::st(dkb[x]);
          for (int64_t x = 0; x < nk * Dv; ++x) dv[(kvh * Sk + j0) * Dv + x] = Num<S>::st(dvb[x]);
        }
        for (int64_t x = 0; x < group * L * D; ++x) dq[bh0 * L * D + x] = Num<S>::st(dqb[x]);
      }
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
  const int64_t group = p.hk > 0 ? p.hq / p.hk : 1, kv_tasks = p.hk > 0 ? p.bh / p.hq * p.hk : 0;
  const int64_t tasks = std::max(p.bh * ((p.L + kBlockQ - 1) / kBlockQ), kv_tasks);
  p.threads = int(std::max<int64_t>(1, std::min<int64_t>(num_threads(), tasks)));
  gs.per_thread = size_t(2 * kBlockQ * (p.D + p.Dv) + kBlockK * (3 * p.D + 2 * p.Dv) + 2 * kBlockQ * kBlockK +
                         group * p.L * p.D);
  const bool dmask = c.out.size() > 3;
  gs.mask_parts = dmask ? (p.mask_shared ? p.threads : 1) : 0;
  return dispatch_float(c, "scaled_dot_product_attention_gradient", c.in[0].dtype, [&](auto s) -> KernelFn {
    using S = decltype(s);
    const size_t cs = sizeof(typename Num<S>::C);
    gs.lse = c.scratch(size_t(2 * p.bh * p.L) * cs);
    gs.task = c.scratch(gs.per_thread * size_t(p.threads) * cs);
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
