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
  int threads = 1;
  size_t scratch = 0;               // index of the scratch buffer
  size_t per_thread = 0;            // compute-type elements per thread
};

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
  const C scale = C(p.scale);
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
            C mb = neg_inf;
            for (int64_t j = 0; j < nk; ++j) {
              C sc = s[j] * scale;
              if (p.mask) {
                int64_t mo = p.mask_off[size_t(bh)] + row * p.mask_sl + (j0 + j) * p.mask_ss;
                if (p.mask == 1) {
                  if (!static_cast<const bool*>(mask)[mo]) sc = neg_inf;
                } else {
                  sc += Num<S>::ld(static_cast<const S*>(mask)[mo]);
                }
              }
              if (p.causal && j0 + j > row) sc = neg_inf;
              s[j] = sc;
              mb = std::max(mb, sc);
            }
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

KernelFn make_attention(const KernelCtx& c) {
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
  if (c.in.size() > 3) {
    const TensorType& mt = c.in[3];
    p.mask = mt.dtype == DType::Bool ? 1 : 2;
    // strides of the mask broadcast to the scores (..., Hq, L, S), 0 along broadcast dims
    std::vector<int64_t> st(r, 0);
    int64_t stride = 1;
    for (size_t i = 0; i < mt.shape.size(); ++i) {
      size_t md = mt.shape.size() - 1 - i, sd = r - 1 - i;
      if (mt.shape[md] != 1) st[sd] = stride;
      stride *= mt.shape[md];
    }
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
  }
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

}  // namespace

void register_attention_kernels() { register_kernel("scaled_dot_product_attention", make_attention); }

}  // namespace mg::cpu
