// Scaled dot-product attention: a composite (matmul, softmax, matmul) whose node backends may
// run natively: the CPU with a blocked online-softmax kernel, Metal with MPSGraph's SDPA.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/array.h"
#include "core/autodiff.h"
#include "core/ops/attention_attrs.h"
#include "core/ops/common.h"

namespace mg::ops {

namespace {

AttentionAttrs decode_attention(const Attrs& a) {
  AttentionAttrs r;
  r.has_scale = has_attr(a, "scale");
  if (r.has_scale) r.scale = get_attr<double>(a, "scale");
  r.causal = get_attr<bool>(a, "causal");
  if (has_attr(a, "mask_gradient")) r.mask_gradient = get_attr<bool>(a, "mask_gradient");
  return r;
}

bool dims_differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

// q (..., Hq, L, D), k (..., Hkv, S, D), v (..., Hkv, S, Dv) -> (..., Hq, L, Dv); Hkv divides Hq.
std::vector<TensorType> infer_attention(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 1);
  c.same_dtype(0, 2);
  const Shape &q = c.in[0].shape, &k = c.in[1].shape, &v = c.in[2].shape;
  size_t r = q.size();
  auto shapes = [&] { return " (query " + shape_str(q) + ", key " + shape_str(k) + ", value " + shape_str(v) + ")"; };
  if (r < 2 || k.size() != r || v.size() != r)
    c.fail(ErrorKind::Value, "query, key and value must have one rank >= 2" + shapes());
  for (size_t i = 0; i + 3 < r; ++i)
    if (dims_differ(q[i], k[i]) || dims_differ(q[i], v[i]) || dims_differ(k[i], v[i]))
      c.fail(ErrorKind::Value, "batch dim " + std::to_string(i) + " differs" + shapes());
  if (dims_differ(q[r - 1], k[r - 1]))
    c.fail(ErrorKind::Value, "query and key must have one head size (last dim)" + shapes());
  if (dims_differ(k[r - 2], v[r - 2]))
    c.fail(ErrorKind::Value, "key and value must have one sequence length (dim -2)" + shapes());
  Shape out = q;
  out[r - 1] = v[r - 1];
  if (r >= 3) {
    int64_t hq = q[r - 3], hk = k[r - 3];
    if (dims_differ(hk, v[r - 3])) c.fail(ErrorKind::Value, "key and value must have one head count (dim -3)" + shapes());
    if (hq >= 0 && hk >= 0 && (hk == 0 ? hq != 0 : hq % hk != 0))
      c.fail(ErrorKind::Value, "key/value heads " + std::to_string(hk) + " must divide query heads " +
                                   std::to_string(hq) + shapes());
  }
  if (c.present(3)) {
    const TensorType& m = c.in[3];
    if (m.dtype != DType::Bool && m.dtype != c.in[0].dtype)
      c.fail(ErrorKind::Type, std::string("mask must be bool (True attends) or an additive mask of the query's dtype ") +
                                  dtype_name(c.in[0].dtype) + ", got " + type_str(m));
    Shape scores = q;
    scores[r - 1] = k[r - 2];
    bool ok = m.shape.size() <= r;
    for (size_t i = 0; ok && i < m.shape.size(); ++i) {
      int64_t md = m.shape[m.shape.size() - 1 - i], sd = scores[r - 1 - i];
      ok = md < 0 || md == 1 || sd < 0 || md == sd;
    }
    if (!ok) c.fail(ErrorKind::Value, "mask " + shape_str(m.shape) + " does not broadcast to the scores " + shape_str(scores));
  }
  if (c.has("scale") && !std::isfinite(c.f("scale"))) c.fail(ErrorKind::Value, "scale must be finite");
  return std::vector<TensorType>{{c.in[0].dtype, out}};
}

// The int32 vector [0, .., 0, 1, .., 1, ...]: query head h reads key/value head h / group.
ValueRef head_index(Graph& g, int64_t hq, int64_t group) {
  auto a = Array::empty(DType::Int32, {hq});
  auto* p = static_cast<int32_t*>(a->data());
  for (int64_t h = 0; h < hq; ++h) p[h] = int32_t(h / group);
  return g.constant(a);
}

// The same index when a head count is known only at run time: floor(h / (Hq / Hk)) over a
// cumulative count of x's heads (x sliced to its first element along every other dim).
ValueRef heads_of(Graph& g, ValueRef x, int64_t r) {
  for (int64_t ax = 0; ax < r; ++ax)
    if (ax != r - 3) x = call(g, "slice", {x}, {{"axis", ax}, {"start", int64_t(0)}, {"length", int64_t(1)}});
  return ones_like(g, call(g, "reshape", {x}, {{"shape", std::vector<int64_t>{-1}}}));
}
ValueRef head_index_at_run(Graph& g, ValueRef q, ValueRef key, int64_t r) {
  ValueRef ones_q = heads_of(g, q, r), ones_k = heads_of(g, key, r);
  ValueRef pos = call(g, "cumulative_sum", {ones_q}, {{"axis", int64_t(0)}, {"exclusive", true}});
  ValueRef group = bin(g, "division", call(g, "reduction_sum", {ones_q}, {{"axes", std::vector<int64_t>{0}}}),
                       call(g, "reduction_sum", {ones_k}, {{"axes", std::vector<int64_t>{0}}}));
  return call(g, "cast", {un(g, "floor", bin(g, "division", pos, group))}, {{"dtype", DType::Int32}});
}

// softmax(q k^T * scale + mask) v, with key/value heads repeated for grouped queries.
std::vector<ValueRef> expand_attention(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  AttentionAttrs at = decode_attention(a);
  // float16/bfloat16 in float32 with one rounding at the end, as the CPU kernel and MPSGraph's
  // SDPA: rounding the scores and the softmax to 8 bits lost whole outputs to cancellation
  const DType dt = g.type(in[0]).dtype;
  const bool widen = dt == DType::Float16 || dt == DType::BFloat16;
  auto wide = [&](ValueRef x) {
    return widen && g.type(x).dtype == dt ? call(g, "cast", {x}, {{"dtype", DType::Float32}}) : x;
  };
  ValueRef q = wide(in[0]), key = wide(in[1]), v = wide(in[2]);
  const Shape& qs = g.type(q).shape;
  const Shape& ks = g.type(key).shape;
  int64_t r = int64_t(qs.size());
  if (r >= 3) {
    int64_t hq = qs[size_t(r - 3)], hk = ks[size_t(r - 3)];
    ValueRef idx = hq >= 0 && hk >= 0 ? (hq != hk ? head_index(g, hq, hq / hk) : ValueRef{}) : head_index_at_run(g, q, key, r);
    if (idx.valid()) {
      key = call(g, "gather", {key, idx}, {{"axis", r - 3}});
      v = call(g, "gather", {v, idx}, {{"axis", r - 3}});
    }
  }
  ValueRef scale;
  const int64_t d = qs[size_t(r - 1)];
  if (at.has_scale || d >= 0) {
    scale = k(g, at.has_scale ? at.scale : d > 0 ? 1.0 / std::sqrt(double(d)) : 1.0, q);
  } else {  // head size known only at run time: 1/sqrt of the query's last dim, in the graph
    ValueRef dim = call(g, "slice", {call(g, "shape_of", {q})}, {{"axis", int64_t(0)}, {"start", r - 1}, {"length", int64_t(1)}});
    scale = call(g, "reverse_square_root", {call(g, "cast", {dim}, {{"dtype", g.type(q).dtype}})});
  }
  ValueRef kt = call(g, "swap_axes", {key}, {{"axis1", r - 2}, {"axis2", r - 1}});
  ValueRef s = bin(g, "multiplication", bin(g, "matrix_multiplication", q, kt), scale);
  ValueRef neg_inf = k(g, -INFINITY, q);
  if (in.size() > 3 && in[3].valid()) {
    if (g.type(in[3]).dtype == DType::Bool) s = call(g, "select", {in[3], s, neg_inf});
    else s = bin(g, "addition", s, wide(in[3]));
  }
  if (at.causal) {
    ValueRef lower = call(g, "band_part", {ones_like(g, s)}, {{"num_lower", int64_t(-1)}, {"num_upper", int64_t(0)}});
    s = call(g, "select", {bin(g, "not_equal", lower, k(g, 0, q)), s, neg_inf});
  }
  // no keys: the product with the empty value matrix gives zeros; softmax over nothing has no max
  ValueRef p = ks[size_t(r - 2)] == 0 ? s : call(g, "softmax", {s}, {{"axis", int64_t(-1)}});
  ValueRef out = bin(g, "matrix_multiplication", p, v);
  return std::vector<ValueRef>{widen ? call(g, "cast", {out}, {{"dtype", dt}}) : out};
}


// Gradient inputs: query, key, value, output, output gradient, mask?; the mask is last so that
// the five always-present inputs keep their positions.
constexpr size_t kGradMask = 5;

// (dq, dk, dv) of the inputs' types, and the mask's gradient when asked for (a float mask).
std::vector<TensorType> infer_attention_gradient(InferCtx& c) {
  std::vector<TensorType> fwd_in{c.in[0], c.in[1], c.in[2]};
  std::vector<char> absent{0, 0, 0, 0};
  if (c.present(kGradMask)) fwd_in.push_back(c.in[kGradMask]);
  else absent[3] = 1;
  Attrs fwd_attrs = c.attrs;
  fwd_attrs.erase("mask_gradient");
  InferCtx fc(c.op, c.node, fwd_in, fwd_attrs);
  fc.absent = absent;
  TensorType out = infer_attention(fc)[0];
  auto differs = [&](const Shape& s) {
    if (s.size() != out.shape.size()) return true;
    for (size_t d = 0; d < s.size(); ++d)
      if (dims_differ(s[d], out.shape[d])) return true;
    return false;
  };
  for (size_t i = 3; i <= 4; ++i)
    if (c.in[i].dtype != out.dtype || differs(c.in[i].shape))
      c.fail(ErrorKind::Value, std::string(i == 3 ? "output" : "output gradient") + " " + type_str(c.in[i]) +
                                   " does not match the attention's output " + type_str(out));
  std::vector<TensorType> r{c.in[0], c.in[1], c.in[2]};
  if (c.b("mask_gradient")) {
    if (!c.present(kGradMask) || c.in[kGradMask].dtype == DType::Bool)
      c.fail(ErrorKind::Value, "mask_gradient needs a float (additive) mask");
    r.push_back(c.in[kGradMask]);
  }
  return r;
}

// The vector-Jacobian product of the forward decomposition: recomputes the L x S scores; the
// reference the CPU kernel is tested against, and what second order differentiates.
std::vector<ValueRef> expand_attention_gradient(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  Attrs fa = a;
  fa.erase("mask_gradient");
  std::vector<ValueRef> fwd_in{in[0], in[1], in[2]};
  const bool has_mask = in.size() > kGradMask && in[kGradMask].valid();
  if (has_mask) fwd_in.push_back(in[kGradMask]);
  const int32_t first = int32_t(g.size());
  std::vector<ValueRef> outs = expand_attention(g, fwd_in, fa);
  std::vector<ValueRef> wrt{in[0], in[1], in[2]};
  const bool dmask = get_attr<bool>(a, "mask_gradient");
  if (dmask) wrt.push_back(in[kGradMask]);
  std::vector<ValueRef> d = vjp(g, outs, {in[4]}, wrt, first);
  for (size_t i = 0; i < d.size(); ++i)
    if (!d[i].valid()) d[i] = zeros_like(g, wrt[i]);
  return d;
}

// One gradient node: the CPU runs it blocked (never the L x S scores); elsewhere it expands.
std::vector<ValueRef> grad_attention(GradCtx& c) {
  const bool float_mask = c.node.inputs.size() > 3 && c.g.type(c.x(3)).dtype != DType::Bool;
  const bool dmask = float_mask && c.wants(3);
  Attrs a = c.node.attrs;
  a["mask_gradient"] = dmask;
  std::vector<ValueRef> in{c.x(0), c.x(1), c.x(2), c.y(0), c.dy[0]};
  in.push_back(c.node.inputs.size() > 3 ? c.x(3) : ValueRef{});
  std::vector<ValueRef> d = c.g.add("scaled_dot_product_attention_gradient", in, a);
  std::vector<ValueRef> r{d[0], d[1], d[2]};
  if (c.node.inputs.size() > 3) r.push_back(dmask ? d[3] : ValueRef{});
  return r;
}

std::vector<AttrSpec> attention_attrs(bool gradient) {
  std::vector<AttrSpec> r{optional_attr("scale", AttrKind::Float, "scores multiplier; default 1/sqrt(head size)"),
                          attr("causal", AttrKind::Bool, false, "mask keys after the query's position")};
  if (gradient) r.push_back(attr("mask_gradient", AttrKind::Bool, false, "also return the (float) mask's gradient"));
  return r;
}

}  // namespace

void register_attention_ops() {
  register_op({.name = "scaled_dot_product_attention",
               .doc = "softmax(query @ key^T * scale + mask) @ value over the last two dims (MPSGraph's "
                      "scaledDotProductAttentionWithQueryTensor:keyTensor:valueTensor:maskTensor:scale:, macOS 15; "
                      "PyTorch's scaled_dot_product_attention). query (..., Hq, L, D), key (..., Hkv, S, D), value "
                      "(..., Hkv, S, Dv) -> (..., Hq, L, Dv); grouped-query heads: Hkv divides Hq and query head h "
                      "reads key/value head h // (Hq / Hkv). mask broadcasts to the scores (..., Hq, L, S): bool "
                      "(True attends, as PyTorch) or additive of the query's dtype (-inf masks). causal: query i "
                      "attends keys j <= i (PyTorch's is_causal; combines with a mask). scale defaults to "
                      "1/sqrt(D). A query that attends no key gives NaN, as softmax over only -inf does. The CPU "
                      "kernel is blocked with an online softmax and never holds the L x S scores; the gradient is one "
                      "scaled_dot_product_attention_gradient node.",
               .inputs = {{"query"}, {"key"}, {"value"}, {"mask", false, true}},
               .attrs = attention_attrs(false),
               .decode = attr_decoder(decode_attention),
               .infer = infer_attention,
               .grad = grad_attention,
               .family = "attention",
               .expand = expand_attention});
  register_op({.name = "scaled_dot_product_attention_gradient",
               .doc = "Gradients of scaled_dot_product_attention(query, key, value, mask, scale, causal) given its "
                      "output and the output's gradient: (d query, d key, d value), and d mask when mask_gradient "
                      "(a float mask; summed over the dims it broadcasts along). Key/value gradients are summed over "
                      "the query heads of their group. The CPU kernel recomputes the probabilities block by block "
                      "from each row's log-sum-exp (FlashAttention-2's backward) and never holds the L x S scores; "
                      "the decomposition (and so second order) is the forward decomposition's gradient.",
               .inputs = {{"query"}, {"key"}, {"value"}, {"output"}, {"output_gradient"}, {"mask", false, true}},
               .attrs = attention_attrs(true),
               .decode = attr_decoder(decode_attention),
               .infer = infer_attention_gradient,
               .multi_output = true,
               .family = "attention",
               .expand = expand_attention_gradient});
}

}  // namespace mg::ops
