// Lowerings of the pooling primitives (cpp/core/ops/pooling.cpp, geometry in pooling_geom.h):
// max_pooling_nd, max_pooling_nd_return_indices, max_pooling_nd_gather, max_pooling_nd_gradient,
// avg_pooling_nd, sum_pooling_nd and the avg / sum gradients (their transposed scatters).
//
// All of them are compositions. Only the avg_pooling_2d / _4d front ends and their gradient
// composites, without padding, ceil_mode or dilation, are MPSGraph's avgPooling2D/4D (and
// Gradient) ops, and the max_pooling_2d / _4d front ends (values only) maxPooling2D / 4D with
// a NaN fix-up where no window is padding only (register_pooling_lowerings below). MPSGraph's
// other max pooling ops (ReturnIndices / Gradient forms) are not used, because the CPU
// kernels' conventions are not documented for them: which NaN wins and whether NaN propagates
// at all (frameworks differ: TensorFlow's CPU max pool drops NaN), which index a tie returns,
// what a window that sees only padding gives (-inf and index -1 here), how ceilMode sizes the
// last window, and what includeZeroPadToAverage counts past the padded input. The compositions use only slices,
// constant pads, comparisons, selects, additions and one scatter-add, whose semantics are not
// in doubt, and every window's geometry (output sizes, padding, valid taps, divisors) comes from
// ops::pool_dims, the function the CPU kernels use.
//
// The source is viewed as (B, n_0, ..., n_{k-1}), B the product of the leading dims. Pooling
// over a box of taps is separable, so the dims are reduced one at a time, last to first. For
// dim d and tap t the outputs o whose tap reads inside the input form a range [oa, ob) (fixed
// at compile time): the tap's values are one strided slice of that range, padded back to the
// output extent with zeros that static masks keep out.
//  * max: a scan over the taps in increasing order with take = v > best | isnan(v) (restricted
//    to the tap's valid outputs, and forced at each output's first valid tap): the CPU's rule,
//    the first maximum in row-major window order, a NaN winning over numbers and the last NaN
//    over earlier ones. Reducing the last dim first keeps this exact across dims, because an
//    earlier dim is more significant in the row-major order: the candidates of each scan arrive
//    in increasing flat index. The index (or the x being gathered) is carried through the same
//    selects. Windows with no valid tap give -inf, index -1, gather 0.
//  * max gradient: the indices above, then scatterAlongAxis (Add) of dy into zeros (B, plane).
//  * sum: the taps' padded slices added; avg divides by the CPU's divisor (taps inside the
//    input, or with include_zero_pad inside the padded input), 0 where it is 0.
//  * sum / avg gradients: the transpose, one sliceGradient per tap.
// float16 / bfloat16 sums and scatters run in float32 (the CPU accumulates in float).
#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "backends/metal/metal_internal.h"
#include "core/ops/pooling_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;
using Ints = std::vector<int64_t>;

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

NSArray<NSNumber*>* ns_ints(const Ints& v) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:v.size()];
  for (int64_t x : v) [a addObject:@(x)];
  return a;
}

// One tap of one pooled dim: outputs [oa, ob) read x at oa * stride + off, ... (step stride).
struct Tap {
  int64_t t, oa, ob, start;
};

struct Dim {
  int64_t n, out, K, stride, dil, before, after;
  std::vector<Tap> taps;       // taps with at least one valid output, in increasing t
  Ints first;                  // per output: its first valid tap, or -1
  Ints ntaps, npad;            // per output: taps inside the input / inside the padded input
};

struct Pool {
  size_t k = 0;
  int64_t B = 1;
  Shape view, out_view;  // (B, n...) and (B, out...)
  std::vector<Dim> dims;
};

Pool make_pool(LowerCtx& c, const Shape& src) {
  const ops::PoolSpec& s = typed_attrs<ops::PoolingAttrs>(c.node).window;
  Pool p;
  p.k = s.k();
  if (p.k < 1 || src.size() < p.k || s.stride.size() != p.k || s.dilation.size() != p.k || s.padding.size() != 2 * p.k)
    c.fail(ErrorKind::NotImplemented, "the metal lowering needs the pooling attributes normalised per pooled dim");
  const size_t lead = src.size() - p.k;
  for (size_t i = 0; i < lead; ++i) p.B *= src[i];
  Ints in(src.begin() + int64_t(lead), src.end());
  std::vector<ops::PoolDim> pd;
  std::string err = ops::pool_dims(s, in, pd);
  if (!err.empty()) c.fail(ErrorKind::Value, err);
  p.view = {p.B};
  p.out_view = {p.B};
  for (size_t d = 0; d < p.k; ++d) {
    Dim D;
    D.n = in[d];
    D.out = pd[d].out;
    D.K = s.kernel[d];
    D.stride = s.stride[d];
    D.dil = s.dilation[d];
    D.before = pd[d].before;
    D.after = pd[d].after;
    D.first.assign(size_t(D.out), -1);
    D.ntaps.assign(size_t(D.out), 0);
    D.npad.assign(size_t(D.out), 0);
    for (int64_t t = 0; t < D.K; ++t) {
      const int64_t off = t * D.dil - D.before;  // x position of output o: o * stride + off
      int64_t oa = off >= 0 ? 0 : ceil_div(-off, D.stride);
      int64_t ob = D.n - 1 - off < 0 ? 0 : floor_div(D.n - 1 - off, D.stride) + 1;
      oa = std::min(oa, D.out);
      ob = std::min(ob, D.out);
      if (ob <= oa) continue;
      D.taps.push_back({t, oa, ob, oa * D.stride + off});
      for (int64_t o = oa; o < ob; ++o) {
        if (D.first[size_t(o)] < 0) D.first[size_t(o)] = t;
        ++D.ntaps[size_t(o)];
      }
    }
    for (int64_t o = 0; o < D.out; ++o) {  // the CPU plan's padded-tap count
      const int64_t start = o * D.stride - D.before;
      D.npad[size_t(o)] = std::max<int64_t>(0, std::min(D.K, ceil_div(D.n + D.after - start, D.dil)));
    }
    p.view.push_back(D.n);
    p.out_view.push_back(D.out);
    p.dims.push_back(std::move(D));
  }
  return p;
}

// Shape [1, ..., m at axis, ..., 1] of the view's rank.
Shape axis_shape(size_t rank, size_t axis, int64_t m) {
  Shape s(rank, 1);
  s[axis] = m;
  return s;
}

// The tap's values: x (shape xs) sliced along `axis` at the tap's valid outputs and padded
// with zeros to the output extent.
T tap_slice(LowerCtx& c, T x, const Shape& xs, size_t axis, const Dim& D, const Tap& tp) {
  T v = c.slice_axis(x, xs, int64_t(axis), tp.start, D.stride, tp.ob - tp.oa);
  Shape vs = xs;
  vs[axis] = tp.ob - tp.oa;
  return c.pad_axis(v, vs, int64_t(axis), tp.oa, D.out - tp.ob);
}

// Bool mask over the outputs of dim d (shape axis_shape), or nil when it is all true.
T out_mask(LowerCtx& c, const Pool& p, size_t d, const std::function<bool(int64_t)>& f) {
  const Dim& D = p.dims[d];
  std::vector<bool> m(size_t(D.out));
  bool all = true;
  for (int64_t o = 0; o < D.out; ++o) all = (m[size_t(o)] = f(o)) && all;
  if (all) return nil;
  return c.constant_bools(m, axis_shape(p.k + 1, d + 1, D.out));
}

T and_masks(LowerCtx& c, T a, T b) { return a == nil ? b : b == nil ? a : c.land(a, b); }

// Windows with at least one valid tap (nil: all of them).
T window_mask(LowerCtx& c, const Pool& p) {
  T m = nil;
  for (size_t d = 0; d < p.k; ++d)
    m = and_masks(c, m, out_mask(c, p, d, [&](int64_t o) { return p.dims[d].ntaps[size_t(o)] > 0; }));
  return m;
}

bool has_empty_dim(const Pool& p) {
  for (auto& D : p.dims)
    if (D.taps.empty()) return true;
  return false;
}

// The max scan (see the file comment). v: source values in the view; carry: nil, the flat
// index or the x to gather, of the view's shape too; both come back in the output view's
// shape, valid where window_mask is. Requires !has_empty_dim(p).
void max_scan(LowerCtx& c, const Pool& p, T __strong& v, T __strong& carry) {
  Shape cur = p.view;
  for (size_t d = p.k; d-- > 0;) {
    const Dim& D = p.dims[d];
    const size_t axis = d + 1;
    T best = nil, best_c = nil;
    for (const Tap& tp : D.taps) {
      T tv = tap_slice(c, v, cur, axis, D, tp);
      T tc = carry == nil ? nil : tap_slice(c, carry, cur, axis, D, tp);
      if (best == nil) {  // the first tap with valid outputs is the first valid tap of each of them
        best = tv;
        best_c = tc;
        continue;
      }
      // the CPU's rule: a later tap wins when strictly greater or NaN
      T take = c.lor(c.gt(tv, best), c.isnan(tv));
      T valid = out_mask(c, p, d, [&](int64_t o) { return o >= tp.oa && o < tp.ob; });
      if (valid != nil) take = c.land(take, valid);
      bool any_first = false;
      for (int64_t o = 0; o < D.out; ++o) any_first = any_first || D.first[size_t(o)] == tp.t;
      if (any_first) {  // outputs whose first valid tap this is take it whatever best holds
        T first = out_mask(c, p, d, [&](int64_t o) { return D.first[size_t(o)] == tp.t; });
        take = first == nil ? c.constant_bools({true}, Shape{1}) : c.lor(take, first);
      }
      best = c.sel(take, tv, best);
      if (tc != nil) best_c = c.sel(take, tc, best_c);
    }
    v = best;
    carry = best_c;
    cur[axis] = D.out;
  }
}

// The flat row-major index of each element in its (batch) plane, int32, broadcast to the view.
T plane_index(LowerCtx& c, const Pool& p) {
  Shape one = p.view;
  one[0] = 1;
  MPSShape* ms = mps_shape(one);
  T idx = nil;
  int64_t stride = 1;
  for (size_t d = p.k; d-- > 0;) {
    T coord = c.raw_cast([c.g coordinateAlongAxis:NSInteger(d + 1) withShape:ms name:nil], DType::Int32);  // 12.3
    if (stride != 1) coord = c.mul(coord, c.k_int(stride, DType::Int32));
    idx = idx == nil ? coord : c.add(idx, coord);
    stride *= p.dims[d].n;
  }
  return c.broadcast(idx, p.view);
}

// The divisor of avg_pooling_nd per output (shape [1, out...]), as the CPU's product of per-dim
// tap counts, float32.
T divisor(LowerCtx& c, const Pool& p, bool include_pad) {
  T div = nil;
  for (size_t d = 0; d < p.k; ++d) {
    const Dim& D = p.dims[d];
    std::vector<double> v;
    for (int64_t o = 0; o < D.out; ++o) v.push_back(double((include_pad ? D.npad : D.ntaps)[size_t(o)]));
    T t = c.constant_vector(v, axis_shape(p.k + 1, d + 1, D.out), DType::Float32);
    div = div == nil ? t : c.mul(div, t);
  }
  return div;
}

// Sum over each window (float32 in, float32 out, output view shape).
T window_sum(LowerCtx& c, const Pool& p, T x) {
  if (has_empty_dim(p)) return c.fill(0, TensorType{DType::Float32, p.out_view});
  Shape cur = p.view;
  for (size_t d = p.k; d-- > 0;) {
    const Dim& D = p.dims[d];
    const size_t axis = d + 1;
    T acc = nil;
    for (const Tap& tp : D.taps) {
      T tv = tap_slice(c, x, cur, axis, D, tp);
      acc = acc == nil ? tv : c.add(acc, tv);
    }
    x = acc;
    cur[axis] = D.out;
  }
  return x;
}

// The transpose of window_sum: g (float32, output view shape) spread over the window taps.
T window_sum_transpose(LowerCtx& c, const Pool& p, T g) {
  if (has_empty_dim(p)) return c.fill(0, TensorType{DType::Float32, p.view});
  Shape cur = p.out_view;
  for (size_t d = 0; d < p.k; ++d) {
    const Dim& D = p.dims[d];
    const size_t axis = d + 1;
    Shape to = cur;
    to[axis] = D.n;
    T shape = c.constant_ints(Ints(to.begin(), to.end()), Shape{int64_t(to.size())}, DType::Int32);
    T acc = nil;
    for (const Tap& tp : D.taps) {
      const int64_t cnt = tp.ob - tp.oa;
      T gv = c.slice_axis(g, cur, int64_t(axis), tp.oa, 1, cnt);
      Ints starts(to.size(), 0), ends(to.begin(), to.end()), strides(to.size(), 1);
      starts[axis] = tp.start;
      ends[axis] = tp.start + (cnt - 1) * D.stride + 1;
      strides[axis] = D.stride;
      T placed = [c.g sliceGradientTensor:gv
                         fwdInShapeTensor:shape
                                   starts:ns_ints(starts)
                                     ends:ns_ints(ends)
                                  strides:ns_ints(strides)
                                     name:nil];
      acc = acc == nil ? placed : c.add(acc, placed);
    }
    g = acc;
    cur = to;
  }
  return g;
}

// avg (mode 1 / 2) or sum (mode 0) pooling of x (float32, view shape).
T linear_pool(LowerCtx& c, const Pool& p, T x, int mode) {
  T s = window_sum(c, p, x);
  if (mode == 0) return s;
  T div = divisor(c, p, mode == 2);
  T zero = c.k(0, DType::Float32);
  return c.sel(c.gt(div, zero), c.div(s, div), zero);
}

T linear_pool_gradient(LowerCtx& c, const Pool& p, T dy, int mode) {
  if (mode != 0) {
    T div = divisor(c, p, mode == 2);
    T zero = c.k(0, DType::Float32);
    dy = c.sel(c.gt(div, zero), c.div(dy, div), zero);
  }
  return window_sum_transpose(c, p, dy);
}

// 0: sum, 1: average over the taps inside the input, 2: inside the padded input.
int linear_mode(LowerCtx& c) {
  switch (typed_attrs<ops::PoolingAttrs>(c.node).divisor) {
    case ops::PoolDivisor::None: return 0;
    case ops::PoolDivisor::ValidTaps: return 1;
    case ops::PoolDivisor::PaddedTaps: return 2;
  }
  return 0;
}

T to_f32(LowerCtx& c, T x) { return c.raw_cast(x, DType::Float32); }

}  // namespace

// avg_pooling_2d (a composite) as MPSGraph's avgPooling2D where nothing MPSGraph leaves
// undocumented matters: no padding (so neither the padded taps nor includeZeroPadToAverage
// count), no ceil_mode (every window lies inside the input), no dilation. Then every window
// averages kernel_h * kernel_w values, and NaN propagates through any sum. The front end's
// attributes are normalised by its inference (full-length lists), read by name here as the
// decomposition reads them.
// avg_pooling_4d likewise as avgPooling4D (its k = 4 dims are the source's own).
bool plain_avg_pooling(const Node& n, size_t k) {
  const TensorType& y = n.outputs.at(0);
  if (!is_floating(y.dtype) || y.dtype == DType::Float64 || y.shape.size() != 4) return false;
  if (node_attr<bool>(n, "ceil_mode") || node_attr<Ints>(n, "kernel_sizes").size() != k ||
      node_attr<Ints>(n, "strides").size() != k)
    return false;
  for (int64_t d : node_attr<Ints>(n, "dilation_rates"))
    if (d != 1) return false;
  const std::string& style = node_attr<std::string>(n, "padding_style");
  if (style == "valid") return true;
  if (style != "explicit") return false;
  for (int64_t p : node_attr<Ints>(n, "padding"))
    if (p != 0) return false;
  return true;
}

namespace {

// The descriptors of a plain (unpadded, undilated) avg_pooling_2d / _4d node or its gradient.
MPSGraphPooling4DOpDescriptor* plain_descriptor_4d(const Node& n) {
  return [MPSGraphPooling4DOpDescriptor descriptorWithKernelSizes:ns_ints(node_attr<Ints>(n, "kernel_sizes"))
                                                          strides:ns_ints(node_attr<Ints>(n, "strides"))
                                                    dilationRates:ns_ints(Ints(4, 1))
                                                    paddingValues:ns_ints(Ints(8, 0))
                                                     paddingStyle:MPSGraphPaddingStyleExplicit];
}
MPSGraphPooling2DOpDescriptor* plain_descriptor_2d(const Node& n) {
  const Ints& k = node_attr<Ints>(n, "kernel_sizes");
  const Ints& st = node_attr<Ints>(n, "strides");
  const bool nhwc = node_attr<std::string>(n, "data_layout") == "NHWC";
  return [MPSGraphPooling2DOpDescriptor descriptorWithKernelWidth:NSUInteger(k[1])
                                                     kernelHeight:NSUInteger(k[0])
                                                        strideInX:NSUInteger(st[1])
                                                        strideInY:NSUInteger(st[0])
                                                  dilationRateInX:1
                                                  dilationRateInY:1
                                                      paddingLeft:0
                                                     paddingRight:0
                                                       paddingTop:0
                                                    paddingBottom:0
                                                     paddingStyle:MPSGraphPaddingStyleExplicit
                                                       dataLayout:nhwc ? MPSGraphTensorNamedDataLayoutNHWC
                                                                       : MPSGraphTensorNamedDataLayoutNCHW];
}

// max_pooling_2d / _4d as MPSGraph's maxPooling2D / 4D (PyTorch's MPS max_pool forwards), values
// only: the return-indices forms and the gradients stay composed, as they depend on which tap
// a tie picks. What MPSGraph leaves undocumented is kept out of the result:
//  * NaN: a second pooling of isnan(x) as 0 / 1 marks the windows holding a NaN, which are
//    NaN (the CPU's rule: a NaN in the window wins);
//  * windows of padding only (-inf on the CPU): claimed only when no window is one, for
//    every source size the node's output shape allows (the claim sees no input shape);
//  * ceil_mode: claimed only where it does not change the output size, and then not passed;
//  * ties between +0 and -0 may give either sign (the CPU: the first in the window).
// As PyTorch: 2-D through the Pooling2D descriptor (named sides, asymmetric padding allowed),
// 4-D through the Pooling4D one with symmetric padding only, the only form PyTorch passes to
// its paddingValues (whose order of befores and afters is otherwise not pinned down).
// Its pooled axes and the window as a PoolSpec, from the front end's normalised attributes.
struct MaxWindow {
  ops::PoolSpec s;
  std::vector<size_t> axes;
};

MaxWindow max_window(const Node& n, size_t k) {
  MaxWindow w;
  w.s.kernel = node_attr<Ints>(n, "kernel_sizes");
  w.s.stride = node_attr<Ints>(n, "strides");
  w.s.dilation = node_attr<Ints>(n, "dilation_rates");
  w.s.padding = node_attr<Ints>(n, "padding");
  w.s.style = node_attr<std::string>(n, "padding_style");
  w.s.ceil_mode = node_attr<bool>(n, "ceil_mode");
  if (k == 4) w.axes = {0, 1, 2, 3};
  else if (node_attr<std::string>(n, "data_layout") == "NHWC") w.axes = {1, 2};
  else w.axes = {2, 3};
  return w;
}

// Dim d of the window alone.
ops::PoolSpec one_dim(const ops::PoolSpec& s, size_t d) {
  ops::PoolSpec r = s;
  r.kernel = {s.kernel[d]};
  r.stride = {s.stride[d]};
  r.dilation = {s.dilation[d]};
  r.padding = {s.padding[2 * d], s.padding[2 * d + 1]};
  return r;
}

// Whether, for every source size n that gives `out` windows along dim d, each window reads
// the input at least once, ceil_mode (if set) gives the same `out` as floor and, if
// `symmetric`, the padding before equals the padding after.
bool windows_see_input(const ops::PoolSpec& s, size_t d, int64_t out, bool symmetric) {
  const ops::PoolSpec one = one_dim(s, d);
  const int64_t K = one.kernel[0], st = one.stride[0], dl = one.dilation[0];
  const int64_t ext = (K - 1) * dl + 1, pad = one.padding[0] + one.padding[1];
  // for every style (ceil_mode included) the sizes n giving `out` windows lie in [lo, hi]
  const int64_t lo = std::max<int64_t>(0, (out - 2) * st - pad), hi = out * st + ext;
  if ((hi - lo + 1) * out > (int64_t(1) << 22)) return false;  // not worth deciding
  ops::PoolSpec floor_spec = one;
  floor_spec.ceil_mode = false;
  for (int64_t n = lo; n <= hi; ++n) {
    std::vector<ops::PoolDim> pd, fd;
    if (!ops::pool_dims(one, {n}, pd).empty() || pd[0].out != out) continue;
    if (one.ceil_mode && (!ops::pool_dims(floor_spec, {n}, fd).empty() || fd[0].out != out)) return false;
    if (symmetric && pd[0].before != pd[0].after) return false;
    for (int64_t o = 0; o < out; ++o) {
      const int64_t start = o * st - pd[0].before;  // tap t reads start + t * dl
      const int64_t t = start >= 0 ? 0 : ceil_div(-start, dl);
      if (t >= K || start + t * dl >= n) return false;
    }
  }
  return true;
}

bool native_max_pooling(const Node& n, size_t k) {
  const TensorType& y = n.outputs.at(0);
  if (!is_floating(y.dtype) || y.dtype == DType::Float64 || y.shape.size() != 4) return false;
  for (int64_t e : y.shape)
    if (e <= 0) return false;
  const MaxWindow w = max_window(n, k);
  if (w.s.kernel.size() != k || w.s.stride.size() != k || w.s.dilation.size() != k || w.s.padding.size() != 2 * k)
    return false;
  for (size_t d = 0; d < k; ++d)
    if (!windows_see_input(w.s, d, y.shape[w.axes[d]], k == 4)) return false;
  return true;
}

// Input i in float32 (the CPU sums in float32), failing for a zero-size one next to a
// non-empty result.
T pooling_f32(LowerCtx& c, size_t i) {
  if (!c.in[i]) c.fail(ErrorKind::NotImplemented, "a zero-size input with a non-empty result is not implemented here");
  return c.in_dtype(i) == DType::Float32 ? c.in[i] : c.raw_cast(c.in[i], DType::Float32);
}

}  // namespace

void register_pooling_lowerings() {
  register_composite_lowering(
      "avg_pooling_4d", [](const Node& n) { return plain_avg_pooling(n, 4); },
      [](LowerCtx& c) {
        T y = [c.g avgPooling4DWithSourceTensor:pooling_f32(c, 0) descriptor:plain_descriptor_4d(c.node) name:nil];
        return std::vector<T>{c.raw_cast(y, c.out().dtype)};
      });
  register_composite_lowering("avg_pooling_2d", [](const Node& n) { return plain_avg_pooling(n, 2); }, [](LowerCtx& c) {
    T y = [c.g avgPooling2DWithSourceTensor:pooling_f32(c, 0) descriptor:plain_descriptor_2d(c.node) name:nil];
    return std::vector<T>{c.raw_cast(y, c.out().dtype)};
  });
  // their gradients (incoming_gradient, source), claimed in the same cases: each window's
  // incoming gradient divided by kernel size spread over its taps, as PyTorch's MPS avg_pool
  // backward asks MPSGraph for
  for (size_t k : {size_t(2), size_t(4)})
    register_composite_lowering(
        k == 2 ? "avg_pooling_2d_gradient" : "avg_pooling_4d_gradient",
        [k](const Node& n) { return plain_avg_pooling(n, k); },
        [k](LowerCtx& c) {
          T dy = pooling_f32(c, 0), x = pooling_f32(c, 1);
          T dx = k == 2 ? [c.g avgPooling2DGradientWithGradientTensor:dy
                                                         sourceTensor:x
                                                           descriptor:plain_descriptor_2d(c.node)
                                                                 name:nil]
                        : [c.g avgPooling4DGradientWithGradientTensor:dy
                                                         sourceTensor:x
                                                           descriptor:plain_descriptor_4d(c.node)
                                                                 name:nil];
          return std::vector<T>{c.raw_cast(dx, c.out().dtype)};
        });

  for (size_t k : {size_t(2), size_t(4)})
    register_composite_lowering(
        k == 2 ? "max_pooling_2d" : "max_pooling_4d", [k](const Node& n) { return native_max_pooling(n, k); },
        [k](LowerCtx& c) {
          const MaxWindow w = max_window(c.node, k);
          const Shape& src = c.in_types[0].shape;
          Ints in;
          for (size_t a : w.axes) in.push_back(src[a]);
          std::vector<ops::PoolDim> pd;
          std::string err = ops::pool_dims(w.s, in, pd);
          if (!err.empty()) c.fail(ErrorKind::Value, err);
          Ints kernel(4, 1), strides(4, 1), dilation(4, 1), padding(8, 0);
          for (size_t d = 0; d < k; ++d) {
            const size_t a = w.axes[d];
            kernel[a] = w.s.kernel[d];
            strides[a] = w.s.stride[d];
            dilation[a] = w.s.dilation[d];
            padding[2 * a] = pd[d].before;
            padding[2 * a + 1] = pd[d].after;
          }
          auto pool = [&](T x) -> T {
            if (k == 4)
              return [c.g maxPooling4DWithSourceTensor:x
                                            descriptor:[MPSGraphPooling4DOpDescriptor
                                                           descriptorWithKernelSizes:ns_ints(kernel)
                                                                             strides:ns_ints(strides)
                                                                       dilationRates:ns_ints(dilation)
                                                                       paddingValues:ns_ints(padding)
                                                                        paddingStyle:MPSGraphPaddingStyleExplicit]
                                                  name:nil];
            const size_t h = w.axes[0], wd = w.axes[1];
            MPSGraphPooling2DOpDescriptor* desc = [MPSGraphPooling2DOpDescriptor
                descriptorWithKernelWidth:NSUInteger(kernel[wd])
                             kernelHeight:NSUInteger(kernel[h])
                                strideInX:NSUInteger(strides[wd])
                                strideInY:NSUInteger(strides[h])
                          dilationRateInX:NSUInteger(dilation[wd])
                          dilationRateInY:NSUInteger(dilation[h])
                              paddingLeft:NSUInteger(padding[2 * wd])
                             paddingRight:NSUInteger(padding[2 * wd + 1])
                               paddingTop:NSUInteger(padding[2 * h])
                            paddingBottom:NSUInteger(padding[2 * h + 1])
                             paddingStyle:MPSGraphPaddingStyleExplicit
                               dataLayout:h == 1 ? MPSGraphTensorNamedDataLayoutNHWC : MPSGraphTensorNamedDataLayoutNCHW];
            return [c.g maxPooling2DWithSourceTensor:x descriptor:desc name:nil];
          };
          T x = pooling_f32(c, 0);
          T y = pool(x);
          T has_nan = pool(c.raw_cast(c.isnan(x), DType::Float32));
          y = c.sel(c.gt(has_nan, c.k(0, DType::Float32)), c.k(NAN, DType::Float32), y);
          return std::vector<T>{c.raw_cast(y, c.out().dtype)};
        });

  // max_pooling_nd / max_pooling_nd_return_indices (source)
  auto max_forward = [](bool with_indices) {
    return [with_indices](LowerCtx& c) {
      const Shape& src = c.in_types[0].shape;
      Pool p = make_pool(c, src);
      const DType t = c.in_dtype(0);
      if (has_empty_dim(p)) {  // every window is padding only
        std::vector<T> r{c.fill(-HUGE_VAL, TensorType{t, p.out_view})};
        if (with_indices) r.push_back(c.fill(-1, TensorType{DType::Int32, p.out_view}));
        return r;
      }
      T v = c.reshape(c.in[0], p.view);
      T idx = with_indices ? plane_index(c, p) : nil;
      max_scan(c, p, v, idx);
      T mask = window_mask(c, p);
      if (mask != nil) {
        v = c.sel(mask, v, c.k(-HUGE_VAL, t));
        if (idx != nil) idx = c.sel(mask, idx, c.k_int(-1, DType::Int32));
      }
      std::vector<T> r{v};
      if (with_indices) r.push_back(idx);
      return r;
    };
  };
  register_lowering("max_pooling_nd", max_forward(false));
  register_lowering("max_pooling_nd_return_indices", max_forward(true));

  // max_pooling_nd_gather(x, source): x read at each window's argmax in source
  register_lowering("max_pooling_nd_gather", [](LowerCtx& c) {
    Pool p = make_pool(c, c.in_types[1].shape);
    const DType t = c.in_dtype(0);
    if (has_empty_dim(p)) return std::vector<T>{c.fill(0, TensorType{t, p.out_view})};
    T v = c.reshape(c.in[1], p.view);
    T x = c.reshape(c.in[0], p.view);
    max_scan(c, p, v, x);
    T mask = window_mask(c, p);
    if (mask != nil) x = c.sel(mask, x, c.k(0, t));
    return std::vector<T>{x};
  });

  // max_pooling_nd_gradient(dy, source): dy added at each window's argmax in source
  register_lowering("max_pooling_nd_gradient", [](LowerCtx& c) {
    const Shape& src = c.in_types[1].shape;
    Pool p = make_pool(c, src);
    const DType t = c.in_dtype(0);
    if (has_empty_dim(p)) return std::vector<T>{c.fill(0, c.out())};
    T v = c.reshape(c.in[1], p.view);
    T idx = plane_index(c, p);
    max_scan(c, p, v, idx);
    int64_t in_plane = 1, out_plane = 1;
    for (auto& D : p.dims) {
      in_plane *= D.n;
      out_plane *= D.out;
    }
    T dy = to_f32(c, c.reshape(c.in[0], p.out_view));
    T mask = window_mask(c, p);
    if (mask != nil) {  // windows of padding only route nothing
      dy = c.sel(mask, dy, c.k(0, DType::Float32));
      idx = c.sel(mask, idx, c.k_int(0, DType::Int32));
    }
    dy = c.reshape(c.broadcast(dy, p.out_view), Shape{p.B, out_plane});
    idx = c.reshape(c.broadcast(idx, p.out_view), Shape{p.B, out_plane});
    T zeros = c.fill(0, TensorType{DType::Float32, Shape{p.B, in_plane}});
    T dx = [c.g scatterAlongAxis:1 withDataTensor:zeros updatesTensor:dy indicesTensor:idx mode:MPSGraphScatterModeAdd
                            name:nil];  // 12.3
    return std::vector<T>{c.raw_cast(dx, t)};
  });

  // avg_pooling_nd / sum_pooling_nd (source)
  for (const char* name : {"avg_pooling_nd", "sum_pooling_nd"})
    register_lowering(name, [](LowerCtx& c) {
      Pool p = make_pool(c, c.in_types[0].shape);
      T x = to_f32(c, c.reshape(c.in[0], p.view));
      return std::vector<T>{c.raw_cast(linear_pool(c, p, x, linear_mode(c)), c.in_dtype(0))};
    });

  // avg_pooling_nd_gradient / sum_pooling_nd_gradient (dy, source): source gives the shape only
  for (const char* name : {"avg_pooling_nd_gradient", "sum_pooling_nd_gradient"})
    register_lowering(name, [](LowerCtx& c) {
      Pool p = make_pool(c, c.in_types[1].shape);
      T dy = to_f32(c, c.reshape(c.in[0], p.out_view));
      return std::vector<T>{c.raw_cast(linear_pool_gradient(c, p, dy, linear_mode(c)), c.in_dtype(0))};
    });
}

}  // namespace mg::metal
