// Lowerings of the shape family and of the autodiff helpers sum_to_like / broadcast_like.
// Ops whose result is fully determined by the declared output shape (reshape, flatten,
// expand_dims, squeeze, broadcast, tile) read no attribute at all; the others read their
// typed attributes (core/ops/shape_attrs.h) and check the result against the declared shape.
#include <algorithm>

#include "backends/metal/metal_internal.h"
#include "core/ops/shape_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

NSArray<NSNumber*>* ns_ints(const std::vector<int64_t>& v) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:v.size()];
  for (int64_t x : v) [a addObject:@(x)];
  return a;
}

int64_t norm_axis(LowerCtx& c, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) c.fail(ErrorKind::Value, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

int64_t axis_attr(LowerCtx& c, int64_t rank) { return norm_axis(c, typed_attrs<ops::AxisAttrs>(c.node).axis, rank); }

// The per-dim resolution of a strided slice, exactly as the CPU kernels resolve it
// (core/ops/shape_ops.h), with squeezed dims taking their one element.
std::vector<ops::SliceDim> slice_dims(LowerCtx& c, const Shape& xs) {
  const ops::StridedSliceAttrs& a = typed_attrs<ops::StridedSliceAttrs>(c.node);
  const std::vector<int64_t>& starts = a.starts;
  const std::vector<int64_t>& ends = a.ends;
  const std::vector<int64_t>& strides = a.strides;
  const uint64_t start_mask = uint64_t(a.start_mask);
  const uint64_t end_mask = uint64_t(a.end_mask);
  const uint64_t squeeze_mask = uint64_t(a.squeeze_mask);
  if (starts.size() != xs.size() || ends.size() != xs.size() || strides.size() != xs.size())
    c.fail(ErrorKind::Value, "starts, ends and strides need one entry per dim");
  std::vector<ops::SliceDim> dims;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t n = xs[i];
    if ((squeeze_mask >> i) & 1u) {
      int64_t idx = starts[i] < 0 ? starts[i] + n : starts[i];
      if (idx < 0 || idx >= n) c.fail(ErrorKind::Index, "index " + std::to_string(starts[i]) + " is out of range");
      dims.push_back({idx, 1, 1});
    } else {
      if (strides[i] == 0) c.fail(ErrorKind::Value, "stride of dim " + std::to_string(i) + " is 0");
      dims.push_back(ops::resolve_slice_dim(n, starts[i], ends[i], strides[i], (start_mask >> i) & 1u, (end_mask >> i) & 1u));
    }
  }
  return dims;
}

// A strided slice with every step made positive: axes walked backwards are reversed first
// (reverseTensor:axes:name:), then sliceTensor:starts:ends:strides:name: takes the elements.
struct PositiveSlice {
  std::vector<int64_t> reversed, starts, ends, strides;
  Shape counts;  // the slice's shape before squeezing
};
PositiveSlice positive_slice(const Shape& xs, const std::vector<ops::SliceDim>& dims) {
  PositiveSlice p;
  for (size_t i = 0; i < xs.size(); ++i) {
    ops::SliceDim d = dims[i];
    if (d.step < 0) {
      p.reversed.push_back(int64_t(i));
      d.start = xs[i] - 1 - d.start;
      d.step = -d.step;
    }
    p.starts.push_back(d.start);
    p.ends.push_back(d.start + (d.count - 1) * d.step + 1);
    p.strides.push_back(d.step);
    p.counts.push_back(d.count);
  }
  return p;
}

T sum_axes(LowerCtx& c, T x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  return [c.g reductionSumWithTensor:x axes:ns_ints(axes) name:nil];
}

std::vector<T> reshape_to_output(LowerCtx& c) { return {c.reshape(c.in[0], c.out().shape)}; }

// ---- pad modes (numpy's names; the CPU kernel's ops::pad_source) ----

using PadKind = ops::PadMode;

// numpy's single-reflection limits (reflect: < n; symmetric, wrap: <= n; edge: n >= 1)
void check_pad_limit(LowerCtx& c, PadKind m, int64_t n, int64_t l, int64_t r, size_t d) {
  const int64_t lim = m == PadKind::Reflect ? n - 1 : m == PadKind::Edge ? (n > 0 ? l + r : 0) : n;
  if (l > lim || r > lim)
    c.fail(ErrorKind::Value, "padding " + std::to_string(l) + ", " + std::to_string(r) + " of dim " + std::to_string(d) +
                                 " (size " + std::to_string(n) + ") is beyond what its mode allows");
}

T reverse_axis(LowerCtx& c, T x, size_t d) { return [c.g reverseTensor:x axes:@[ @(d) ] name:nil]; }

// The `cnt` padded elements before (left) or after dim d of x (shape xs), in output order.
T pad_border(LowerCtx& c, T x, const Shape& xs, size_t d, PadKind m, bool left, int64_t cnt) {
  const int64_t n = xs[d], ax = int64_t(d);
  switch (m) {
    case PadKind::Reflect:  // left: x[cnt..1], right: x[n-2..n-1-cnt]
      return reverse_axis(c, c.slice_axis(x, xs, ax, left ? 1 : n - 1 - cnt, 1, cnt), d);
    case PadKind::Symmetric:  // left: x[cnt-1..0], right: x[n-1..n-cnt]
      return reverse_axis(c, c.slice_axis(x, xs, ax, left ? 0 : n - cnt, 1, cnt), d);
    case PadKind::Wrap:  // left: x[n-cnt..n-1], right: x[0..cnt-1]
      return c.slice_axis(x, xs, ax, left ? n - cnt : 0, 1, cnt);
    case PadKind::Edge: {
      Shape bs = xs;
      bs[d] = cnt;
      return c.broadcast(c.slice_axis(x, xs, ax, left ? 0 : n - 1, 1, 1), bs);
    }
    case PadKind::Constant: break;
  }
  c.fail(ErrorKind::Runtime, "internal: pad_border of constant padding");
}

// The gradient of one border (b: its cnt elements along dim d, other dims as in `cur`) as a
// tensor of the interior's extent n along d.
T fold_border(LowerCtx& c, T b, const Shape& cur, size_t d, PadKind m, bool left, int64_t cnt, int64_t n) {
  Shape bs = cur;
  bs[d] = cnt;
  const int64_t ax = int64_t(d);
  switch (m) {
    case PadKind::Reflect:  // sources 1..cnt (left) or n-1-cnt..n-2 (right)
      return c.pad_axis(reverse_axis(c, b, d), bs, ax, left ? 1 : n - 1 - cnt, left ? n - 1 - cnt : 1);
    case PadKind::Symmetric:  // sources 0..cnt-1 or n-cnt..n-1
      return c.pad_axis(reverse_axis(c, b, d), bs, ax, left ? 0 : n - cnt, left ? n - cnt : 0);
    case PadKind::Wrap:  // sources n-cnt..n-1 or 0..cnt-1, in order
      return c.pad_axis(b, bs, ax, left ? n - cnt : 0, left ? 0 : n - cnt);
    case PadKind::Edge: {  // all onto element 0 or n-1
      Shape one = bs;
      one[d] = 1;
      T s = c.reshape([c.g reductionSumWithTensor:b axes:@[ @(d) ] name:nil], one);
      return c.pad_axis(s, one, ax, left ? 0 : n - 1, left ? n - 1 : 0);
    }
    case PadKind::Constant: break;
  }
  c.fail(ErrorKind::Runtime, "internal: fold_border of constant padding");
}

// ---- space_to_depth_2d / depth_to_space_2d ----

struct SpaceDepth {
  Shape space6;              // the space tensor as (n, h, i, w, j, c) (NHWC) or (n, c, h, i, w, j) (NCHW)
  std::vector<int64_t> perm;  // space6 -> the depth tensor's six dims in its row-major order
};

// `space` is the space tensor's shape (the source of space_to_depth, the result of depth_to_space).
SpaceDepth space_depth(LowerCtx& c, const Shape& space) {
  const ops::SpaceDepthAttrs& a = typed_attrs<ops::SpaceDepthAttrs>(c.node);
  const int64_t b = a.block_size;
  const bool pixel = a.use_pixel_shuffle_order, nchw = a.nchw;
  if (space.size() != 4 || b < 1) c.fail(ErrorKind::Value, "needs a rank-4 NHWC or NCHW tensor and a positive block_size");
  const int64_t N = space[0], C = nchw ? space[1] : space[3], H = nchw ? space[2] : space[1], W = nchw ? space[3] : space[2];
  if (H % b != 0 || W % b != 0) c.fail(ErrorKind::Value, "height and width must be multiples of block_size");
  SpaceDepth r;
  if (nchw) {
    r.space6 = {N, C, H / b, b, W / b, b};  // n c h i w j
    r.perm = pixel ? std::vector<int64_t>{0, 1, 3, 5, 2, 4}   // n c i j h w
                   : std::vector<int64_t>{0, 3, 5, 1, 2, 4};  // n i j c h w
  } else {
    r.space6 = {N, H / b, b, W / b, b, C};  // n h i w j c
    r.perm = pixel ? std::vector<int64_t>{0, 1, 3, 5, 2, 4}   // n h w c i j
                   : std::vector<int64_t>{0, 1, 3, 2, 4, 5};  // n h w i j c
  }
  return r;
}

}  // namespace

void register_shape_lowerings() {
  // ---- pure reshapes: the declared output shape says everything ----
  for (const char* name : {"reshape", "flatten", "flatten_2d", "expand_dims", "squeeze", "reshape_like"})
    register_lowering(name, reshape_to_output);
  for (const char* name : {"broadcast_to", "broadcast_like"})
    register_lowering(name, [](LowerCtx& c) { return std::vector<T>{c.broadcast(c.in[0], c.out().shape)}; });

  register_lowering("transpose", [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    const int64_t r = int64_t(xs.size());
    std::vector<int64_t> perm = typed_attrs<ops::TransposeAttrs>(c.node).permutation;  // full: inference made it so
    if (int64_t(perm.size()) != r) c.fail(ErrorKind::Value, "permutation of the wrong length");
    std::vector<int64_t> seen(size_t(r), 0);
    Shape os;
    for (auto& p : perm) {
      p = norm_axis(c, p, r);
      if (seen[size_t(p)]++) c.fail(ErrorKind::Value, "permutation repeats an axis");
      os.push_back(xs[size_t(p)]);
    }
    if (os != c.out().shape) c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile the permutation with the output shape");
    if (r < 2) return std::vector<T>{c.in[0]};
    return std::vector<T>{[c.g transposeTensor:c.in[0] permutation:ns_ints(perm) name:nil]};  // macOS 13.0
  });

  register_lowering("swap_axes", [](LowerCtx& c) {
    const ops::SwapAxesAttrs& sa = typed_attrs<ops::SwapAxesAttrs>(c.node);
    const int64_t r = int64_t(c.in_types[0].shape.size());
    const int64_t a = norm_axis(c, sa.axis1, r);
    const int64_t b = norm_axis(c, sa.axis2, r);
    if (a == b) return std::vector<T>{c.in[0]};
    return std::vector<T>{[c.g transposeTensor:c.in[0] dimension:NSUInteger(a) withDimension:NSUInteger(b) name:nil]};
  });

  // sum_to_like: sum x down to like's shape (the gradient of broadcasting).
  register_lowering("sum_to_like", [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    const Shape& ls = c.out().shape;
    const size_t lead = xs.size() - ls.size();
    std::vector<int64_t> axes;
    for (size_t i = 0; i < xs.size(); ++i)
      if (i < lead || (ls[i - lead] == 1 && xs[i] != 1)) axes.push_back(int64_t(i));
    return std::vector<T>{sum_axes(c, c.in[0], axes)};
  });

  // slice: MPSGraph's own sliceTensor:dimension:start:length:name: (start may count from the end).
  register_lowering("slice", [](LowerCtx& c) {
    const ops::SliceAttrs& a = typed_attrs<ops::SliceAttrs>(c.node);
    const Shape& xs = c.in_types[0].shape;
    const int64_t d = norm_axis(c, a.axis, int64_t(xs.size()));
    int64_t start = a.start;
    const int64_t length = a.length;
    if (start < 0) start += xs[size_t(d)];
    if (start < 0 || length < 0 || start + length > xs[size_t(d)]) c.fail(ErrorKind::Index, "slice out of range");
    return std::vector<T>{[c.g sliceTensor:c.in[0] dimension:NSUInteger(d) start:start length:length name:nil]};
  });

  register_lowering("strided_slice", [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    if (xs.empty()) return std::vector<T>{c.in[0]};
    PositiveSlice p = positive_slice(xs, slice_dims(c, xs));
    T x = c.in[0];
    if (!p.reversed.empty()) x = [c.g reverseTensor:x axes:ns_ints(p.reversed) name:nil];
    x = [c.g sliceTensor:x starts:ns_ints(p.starts) ends:ns_ints(p.ends) strides:ns_ints(p.strides) name:nil];
    return std::vector<T>{x};  // conform drops the squeezed dims
  });

  // slice_gradient: dy scattered into zeros of like's shape, by MPSGraph's
  // sliceGradientTensor:fwdInShapeTensor:starts:ends:strides:name: on the same positive-step slice.
  register_lowering("slice_gradient", [](LowerCtx& c) {
    const Shape& ls = c.in_types[1].shape;
    if (ls.empty()) return std::vector<T>{c.in[0]};
    PositiveSlice p = positive_slice(ls, slice_dims(c, ls));
    T dy = c.reshape(c.in[0], p.counts);
    T g = [c.g sliceGradientTensor:dy
                  fwdInShapeTensor:[c.g shapeOfTensor:c.in[1] name:nil]
                            starts:ns_ints(p.starts)
                              ends:ns_ints(p.ends)
                           strides:ns_ints(p.strides)
                              name:nil];
    if (!p.reversed.empty()) g = [c.g reverseTensor:g axes:ns_ints(p.reversed) name:nil];
    return std::vector<T>{g};
  });

  register_lowering("concat", [](LowerCtx& c) {
    const int64_t r = int64_t(c.out().shape.size());
    if (r == 0) c.fail(ErrorKind::Value, "cannot concatenate rank-0 tensors");
    const int64_t axis = axis_attr(c, r);
    Shape expect = c.in_types[0].shape;
    expect[size_t(axis)] = 0;
    NSMutableArray<MPSGraphTensor*>* parts = [NSMutableArray array];
    for (size_t i = 0; i < c.in.size(); ++i) {
      expect[size_t(axis)] += c.in_types[i].shape[size_t(axis)];
      [parts addObject:c.in[i]];
    }
    if (expect != c.out().shape) c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile the axis with the output shape");
    if (c.in.size() == 1) return std::vector<T>{c.in[0]};
    return std::vector<T>{[c.g concatTensors:parts dimension:axis name:nil]};
  });

  register_lowering("stack", [](LowerCtx& c) {
    const Shape& os = c.out().shape;
    const int64_t axis = axis_attr(c, int64_t(os.size()));
    Shape piece = os;
    piece[size_t(axis)] = 1;
    NSMutableArray<MPSGraphTensor*>* parts = [NSMutableArray array];
    for (size_t i = 0; i < c.in.size(); ++i) {
      Shape want = os;
      want.erase(want.begin() + axis);
      if (c.in_types[i].shape != want || int64_t(c.in.size()) != os[size_t(axis)])
        c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile the axis with the output shape");
      [parts addObject:c.reshape(c.in[i], piece)];
    }
    if (c.in.size() == 1) return std::vector<T>{parts[0]};
    return std::vector<T>{[c.g concatTensors:parts dimension:axis name:nil]};
  });

  // split / split_like: the pieces' lengths are the declared output shapes along the axis.
  auto split = [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    const int64_t r = int64_t(xs.size());
    if (r == 0) c.fail(ErrorKind::Value, "cannot split a rank-0 tensor");
    const int64_t axis = axis_attr(c, r);
    std::vector<T> outs;
    int64_t start = 0;
    for (size_t k = 0; k < c.out_types.size(); ++k) {
      const Shape& os = c.out(k).shape;
      Shape want = xs;
      want[size_t(axis)] = os.size() == xs.size() ? os[size_t(axis)] : -1;
      if (os != want) c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile the axis with the output shapes");
      if (os[size_t(axis)] == 0) outs.push_back(nil);  // an empty piece never reaches MPSGraph
      else outs.push_back([c.g sliceTensor:c.in[0] dimension:NSUInteger(axis) start:start length:os[size_t(axis)] name:nil]);
      start += os[size_t(axis)];
    }
    if (start != xs[size_t(axis)]) c.fail(ErrorKind::NotImplemented, "the split's pieces do not cover the input");
    return outs;
  };
  register_lowering("split", split);
  register_lowering("split_like", split);

  // pad: constant mode is padTensor:withPaddingMode:Constant; reflect, symmetric, edge and wrap
  // are composed dim by dim from slices, reverseTensor:axes:, a broadcast (edge) and
  // concatTensors:dimension: (numpy's single-reflection rules, the CPU kernel's pad_source),
  // rather than MPSGraph's Reflect / Symmetric / ClampToEdge / Periodic modes, whose limits and
  // corner handling are not documented. Dim by dim is exact: the modes are separable.
  register_lowering("pad", [](LowerCtx& c) {
    const ops::PadAttrs& pa = typed_attrs<ops::PadAttrs>(c.node);
    const Shape& xs = c.in_types[0].shape;
    if (xs.empty()) return std::vector<T>{c.in[0]};
    const std::vector<int64_t>& lo = pa.left_padding;
    const std::vector<int64_t>& hi = pa.right_padding;
    if (lo.size() != xs.size() || hi.size() != xs.size()) c.fail(ErrorKind::Value, "one padding amount per dim is needed");
    for (size_t i = 0; i < xs.size(); ++i)
      if (lo[i] < 0 || hi[i] < 0) c.fail(ErrorKind::NotImplemented, "negative padding is not implemented on the metal backend");
    const PadKind m = pa.mode;
    if (m == PadKind::Constant) {
      const double value = pa.constant_value;
      return std::vector<T>{[c.g padTensor:c.in[0] withPaddingMode:MPSGraphPaddingModeConstant leftPadding:ns_ints(lo)
                                 rightPadding:ns_ints(hi) constantValue:value name:nil]};
    }
    T x = c.in[0];
    Shape cur = xs;
    for (size_t d = 0; d < xs.size(); ++d) {
      const int64_t n = cur[d], l = lo[d], r = hi[d];
      if (l == 0 && r == 0) continue;
      check_pad_limit(c, m, n, l, r, d);
      NSMutableArray<MPSGraphTensor*>* parts = [NSMutableArray array];
      if (l > 0) [parts addObject:pad_border(c, x, cur, d, m, true, l)];
      [parts addObject:x];
      if (r > 0) [parts addObject:pad_border(c, x, cur, d, m, false, r)];
      x = [c.g concatTensors:parts dimension:NSInteger(d) name:nil];
      cur[d] = n + l + r;
    }
    return std::vector<T>{x};
  });

  // pad_gradient(dy, like): the transpose of pad. Constant mode keeps the interior; the other
  // modes add each border (reversed for the mirrors, summed for edge) onto the interior
  // elements it was copied from, dim by dim as the CPU kernel folds them (in float32 for
  // float16 / bfloat16, whose CPU kernel sums in float).
  register_lowering("pad_gradient", [](LowerCtx& c) {
    const ops::PadAttrs& pa = typed_attrs<ops::PadAttrs>(c.node);
    const Shape& ds = c.in_types[0].shape;
    const Shape& xs = c.out().shape;
    const DType t = c.out().dtype;
    if (ds.empty()) return std::vector<T>{c.in[0]};
    const std::vector<int64_t>& lo = pa.left_padding;
    const std::vector<int64_t>& hi = pa.right_padding;
    if (lo.size() != ds.size() || hi.size() != ds.size() || xs.size() != ds.size())
      c.fail(ErrorKind::Value, "one padding amount per dim is needed");
    for (size_t i = 0; i < ds.size(); ++i)
      if (lo[i] < 0 || hi[i] < 0 || ds[i] != xs[i] + lo[i] + hi[i])
        c.fail(ErrorKind::Value, "dy is not like padded by left_padding and right_padding");
    if (t == DType::Bool) c.fail(ErrorKind::Type, "pad_gradient of bool tensors");
    const PadKind m = pa.mode;
    const bool f32 = t == DType::Float16 || t == DType::BFloat16;
    T g = f32 ? c.raw_cast(c.in[0], DType::Float32) : c.in[0];
    Shape cur = ds;
    for (size_t d = 0; d < ds.size(); ++d) {
      const int64_t n = xs[d], l = lo[d], r = hi[d];
      if (l == 0 && r == 0) continue;
      Shape ins = cur;
      ins[d] = n;
      T acc = c.slice_axis(g, cur, int64_t(d), l, 1, n);
      if (m != PadKind::Constant) {
        check_pad_limit(c, m, n, l, r, d);
        if (l > 0) acc = c.add(acc, fold_border(c, c.slice_axis(g, cur, int64_t(d), 0, 1, l), cur, d, m, true, l, n));
        if (r > 0) acc = c.add(acc, fold_border(c, c.slice_axis(g, cur, int64_t(d), l + n, 1, r), cur, d, m, false, r, n));
      }
      g = acc;
      cur = ins;
    }
    return std::vector<T>{f32 ? c.raw_cast(g, t) : g};
  });

  // band_part: select(band mask, x, 0); the mask from coordinateAlongAxis (12.3) over the
  // matrix dims: keep (i, j) when i - j <= num_lower and j - i <= num_upper (negative: no bound).
  register_lowering("band_part", [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    if (xs.size() < 2) c.fail(ErrorKind::Value, "band_part needs rank >= 2");
    const int64_t rows = xs[xs.size() - 2], cols = xs.back();
    const ops::BandPartAttrs& a = typed_attrs<ops::BandPartAttrs>(c.node);
    const int64_t lower = a.num_lower, upper = a.num_upper;
    const bool bound_lo = lower >= 0 && lower < rows, bound_hi = upper >= 0 && upper < cols;
    if (!bound_lo && !bound_hi) return std::vector<T>{c.in[0]};
    MPSShape* ms = @[ @(rows), @(cols) ];
    T i = c.raw_cast([c.g coordinateAlongAxis:0 withShape:ms name:nil], DType::Int32);
    T j = c.raw_cast([c.g coordinateAlongAxis:1 withShape:ms name:nil], DType::Int32);
    T diff = c.sub(i, j);  // |diff| < 2**31: dims are below 2**31
    T keep = nil;
    if (bound_lo) keep = c.le(diff, c.k_int(lower, DType::Int32));
    if (bound_hi) {
      T k2 = c.ge(diff, c.k_int(-upper, DType::Int32));
      keep = keep == nil ? k2 : c.land(keep, k2);
    }
    const DType t = c.in_dtype(0);
    return std::vector<T>{c.sel(keep, c.in[0], c.k_int(0, t))};
  });

  // one_hot: (indices expanded at axis) == coordinate along axis, then select(on, off). An
  // index outside [0, depth) matches nothing and gives off_value, as the CPU kernel (whatever
  // MPSGraph's oneHot does with negative indices, and with on/off values its double arguments
  // cannot carry exactly for 64-bit integers).
  register_lowering("one_hot", [](LowerCtx& c) {
    const ops::OneHotAttrs& a = typed_attrs<ops::OneHotAttrs>(c.node);
    const Shape& is = c.in_types[0].shape;
    const Shape& os = c.out().shape;
    const int64_t depth = a.depth;
    const int64_t axis = a.axis;  // of the result, normalised by inference
    if (axis < 0 || axis > int64_t(is.size()) || os.size() != is.size() + 1 || os[size_t(axis)] != depth)
      c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile one_hot's axis with its output shape");
    const DType it = c.in_dtype(0);
    const bool wide = it == DType::Int32 || it == DType::Int64 || it == DType::UInt32 || it == DType::UInt64;
    const DType ct = wide ? it : DType::Int32;  // narrow indices compare exactly as int32
    Shape e = is;
    e.insert(e.begin() + axis, 1);
    T idx = c.reshape(c.raw_cast(c.in[0], ct), e);
    Shape ds(os.size(), 1);
    ds[size_t(axis)] = depth;
    T pos = c.raw_cast([c.g coordinateAlongAxis:NSInteger(axis) withShape:mps_shape(ds) name:nil], ct);
    const DType ot = c.out().dtype;
    T on = c.k(a.on_value, ot), off = c.k(a.off_value, ot);
    return std::vector<T>{c.broadcast(c.sel(c.eq(idx, pos), on, off), os)};
  });

  // space_to_depth_2d / depth_to_space_2d: reshape to six dims, transpose, reshape (the CPU's
  // space_depth_view order, both block orders), rather than MPSGraph's spaceToDepth2DTensor /
  // depthToSpace2DTensor, whose usePixelShuffleOrder layout is not documented per layout.
  register_lowering("space_to_depth_2d", [](LowerCtx& c) {
    SpaceDepth sd = space_depth(c, c.in_types[0].shape);
    T x = c.reshape(c.in[0], sd.space6);
    x = [c.g transposeTensor:x permutation:ns_ints(sd.perm) name:nil];
    return std::vector<T>{c.reshape(x, c.out().shape)};
  });
  register_lowering("depth_to_space_2d", [](LowerCtx& c) {
    SpaceDepth sd = space_depth(c, c.out().shape);
    Shape depth6;
    std::vector<int64_t> inv(6);
    for (size_t k = 0; k < 6; ++k) {
      depth6.push_back(sd.space6[size_t(sd.perm[k])]);
      inv[size_t(sd.perm[k])] = int64_t(k);
    }
    T x = c.reshape(c.in[0], depth6);
    x = [c.g transposeTensor:x permutation:ns_ints(inv) name:nil];
    return std::vector<T>{c.reshape(x, c.out().shape)};
  });

  // tile: the multiplier follows from the shapes (numpy: reps or shape get leading 1s).
  register_lowering("tile", [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    const Shape& os = c.out().shape;
    if (os.size() < xs.size()) c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile tile's output shape");
    Shape xp(os.size() - xs.size(), 1);
    xp.insert(xp.end(), xs.begin(), xs.end());
    std::vector<int64_t> mult;
    for (size_t i = 0; i < os.size(); ++i) {
      if (xp[i] == 0 || os[i] % xp[i] != 0) c.fail(ErrorKind::NotImplemented, "the metal lowering cannot reconcile tile's output shape");
      mult.push_back(os[i] / xp[i]);
    }
    if (os.empty()) return std::vector<T>{c.in[0]};
    return std::vector<T>{[c.g tileTensor:c.reshape(c.in[0], xp) withMultiplier:ns_ints(mult) name:nil]};
  });

  // tile_gradient: dy seen as (m0, l0, m1, l1, ...) summed over the m axes (exact composition;
  // MPSGraph's tileGradient op would do the same).
  register_lowering("tile_gradient", [](LowerCtx& c) {
    const Shape& ds = c.in_types[0].shape;
    const Shape& ls = c.out().shape;
    if (ds.size() != ls.size()) c.fail(ErrorKind::Value, "dy and like differ in rank");
    Shape inter;
    std::vector<int64_t> axes;
    for (size_t i = 0; i < ds.size(); ++i) {
      if (ls[i] == 0 || ds[i] % ls[i] != 0) c.fail(ErrorKind::Value, "dy is not a tiling of like");
      const int64_t m = ds[i] / ls[i];
      if (m != 1) {
        axes.push_back(int64_t(inter.size()));
        inter.push_back(m);
      }
      inter.push_back(ls[i]);
    }
    if (inter.size() > kMaxRank)
      c.fail(ErrorKind::NotImplemented, "tile_gradient over more than 8 tiled dims is not implemented on the metal backend");
    return std::vector<T>{sum_axes(c, c.reshape(c.in[0], inter), axes)};
  });

  register_lowering("reverse", [](LowerCtx& c) {
    const int64_t r = int64_t(c.in_types[0].shape.size());
    std::vector<int64_t> axes = typed_attrs<ops::ReverseAttrs>(c.node).axes;  // all dims when none were given
    for (auto& a : axes) a = norm_axis(c, a, r);
    if (axes.empty() || r == 0) return std::vector<T>{c.in[0]};
    return std::vector<T>{[c.g reverseTensor:c.in[0] axes:ns_ints(axes) name:nil]};
  });

  // shape_of is normally folded during specialisation; when not, its value is known here.
  register_lowering("shape_of", [](LowerCtx& c) {
    const Shape& xs = c.in_types[0].shape;
    const DType t = c.out().dtype;
    std::vector<uint64_t> buf(std::max<size_t>(xs.size(), 1));
    for (size_t i = 0; i < xs.size(); ++i) store_from_double(buf.data(), t, int64_t(i), double(xs[i]));
    if (xs.empty()) return std::vector<T>{c.fill(0, c.out())};
    return std::vector<T>{c.constant_bytes(buf.data(), xs.size() * dtype_size(t), c.out().shape, t)};
  });
}

}  // namespace mg::metal
