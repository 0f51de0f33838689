// Lowerings of the shape family and of the autodiff helpers sum_to_like / broadcast_like.
// Ops whose result is fully determined by the declared output shape (reshape, flatten,
// expand_dims, squeeze, broadcast, tile) read no attribute at all; the others read their
// attributes under the usual spellings and check the result against the declared shape.
#include <algorithm>
#include <numeric>

#include "backends/metal/metal_internal.h"
#include "core/ops/shape_ops.h"

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

int64_t axis_attr(LowerCtx& c, int64_t rank, int64_t def) { return norm_axis(c, c.attr_int({"axis"}, def), rank); }

// The per-dim resolution of a strided slice, exactly as the CPU kernels resolve it
// (core/ops/shape_ops.h), with squeezed dims taking their one element.
std::vector<ops::SliceDim> slice_dims(LowerCtx& c, const Shape& xs) {
  const std::vector<int64_t>& starts = node_attr<std::vector<int64_t>>(c.node, "starts");
  const std::vector<int64_t>& ends = node_attr<std::vector<int64_t>>(c.node, "ends");
  const std::vector<int64_t>& strides = node_attr<std::vector<int64_t>>(c.node, "strides");
  const uint64_t start_mask = uint64_t(c.attr_int({"start_mask"}, 0));
  const uint64_t end_mask = uint64_t(c.attr_int({"end_mask"}, 0));
  const uint64_t squeeze_mask = uint64_t(c.attr_int({"squeeze_mask"}, 0));
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

}  // namespace

void register_shape_lowerings() {
  // ---- pure reshapes: the declared output shape says everything ----
  for (const char* name : {"reshape", "flatten", "flatten_2d", "expand_dims", "squeeze", "reshape_like"})
    register_lowering(name, reshape_to_output);
  for (const char* name : {"broadcast_to", "broadcast_like"})
    register_lowering(name, [](LowerCtx& c) { return std::vector<T>{c.broadcast(c.in[0], c.out().shape)}; });

  register_lowering("transpose", [](LowerCtx& c) {
    c.only_attrs({"permutation"});
    const Shape& xs = c.in_types[0].shape;
    const int64_t r = int64_t(xs.size());
    bool found = false;
    std::vector<int64_t> perm = c.attr_ints({"permutation"}, &found);
    if (!found || perm.empty()) {
      perm.resize(size_t(r));
      for (int64_t i = 0; i < r; ++i) perm[size_t(i)] = r - 1 - i;
    }
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
    c.only_attrs({"axis1", "axis2"});
    const int64_t r = int64_t(c.in_types[0].shape.size());
    const int64_t a = norm_axis(c, node_attr<int64_t>(c.node, "axis1"), r);
    const int64_t b = norm_axis(c, node_attr<int64_t>(c.node, "axis2"), r);
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
    c.only_attrs({"dimension", "start", "length"});
    const Shape& xs = c.in_types[0].shape;
    const int64_t d = norm_axis(c, node_attr<int64_t>(c.node, "dimension"), int64_t(xs.size()));
    int64_t start = node_attr<int64_t>(c.node, "start");
    const int64_t length = node_attr<int64_t>(c.node, "length");
    if (start < 0) start += xs[size_t(d)];
    if (start < 0 || length < 0 || start + length > xs[size_t(d)]) c.fail(ErrorKind::Index, "slice out of range");
    return std::vector<T>{[c.g sliceTensor:c.in[0] dimension:NSUInteger(d) start:start length:length name:nil]};
  });

  register_lowering("strided_slice", [](LowerCtx& c) {
    c.only_attrs({"starts", "ends", "strides", "start_mask", "end_mask", "squeeze_mask"});
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
    c.only_attrs({"starts", "ends", "strides", "start_mask", "end_mask", "squeeze_mask"});
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
    c.only_attrs({"axis"});
    const int64_t r = int64_t(c.out().shape.size());
    if (r == 0) c.fail(ErrorKind::Value, "cannot concatenate rank-0 tensors");
    const int64_t axis = axis_attr(c, r, 0);
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
    c.only_attrs({"axis"});
    const Shape& os = c.out().shape;
    const int64_t axis = axis_attr(c, int64_t(os.size()), 0);
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
    c.only_attrs({"axis", "split_sizes", "num_splits"});
    const Shape& xs = c.in_types[0].shape;
    const int64_t r = int64_t(xs.size());
    if (r == 0) c.fail(ErrorKind::Value, "cannot split a rank-0 tensor");
    const int64_t axis = axis_attr(c, r, 0);
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

  register_lowering("pad", [](LowerCtx& c) {
    c.only_attrs({"left_padding", "right_padding", "mode", "constant_value"});
    const Shape& xs = c.in_types[0].shape;
    if (xs.empty()) return std::vector<T>{c.in[0]};
    const std::vector<int64_t>& lo = node_attr<std::vector<int64_t>>(c.node, "left_padding");
    const std::vector<int64_t>& hi = node_attr<std::vector<int64_t>>(c.node, "right_padding");
    if (lo.size() != xs.size() || hi.size() != xs.size()) c.fail(ErrorKind::Value, "one padding amount per dim is needed");
    for (size_t i = 0; i < xs.size(); ++i)
      if (lo[i] < 0 || hi[i] < 0) c.fail(ErrorKind::NotImplemented, "negative padding is not implemented on the metal backend");
    const std::string mode = c.has_attr({"mode"}) ? node_attr<std::string>(c.node, "mode") : "constant";
    MPSGraphPaddingMode pm = MPSGraphPaddingModeConstant;
    if (mode == "reflect") pm = MPSGraphPaddingModeReflect;
    else if (mode == "symmetric") pm = MPSGraphPaddingModeSymmetric;
    else if (mode == "edge" || mode == "clamp_to_edge") pm = MPSGraphPaddingModeClampToEdge;
    else if (mode != "constant") c.fail(ErrorKind::NotImplemented, "padding mode '" + mode + "' is not implemented on the metal backend");
    const double value = c.attr_float({"constant_value"}, 0.0);
    return std::vector<T>{[c.g padTensor:c.in[0] withPaddingMode:pm leftPadding:ns_ints(lo) rightPadding:ns_ints(hi)
                                 constantValue:value name:nil]};
  });

  // tile: the multiplier follows from the shapes (numpy: reps or shape get leading 1s).
  register_lowering("tile", [](LowerCtx& c) {
    c.only_attrs({"multiples"});
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
    c.only_attrs({"multiples"});
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
    c.only_attrs({"axes"});
    const int64_t r = int64_t(c.in_types[0].shape.size());
    bool found = false;
    std::vector<int64_t> axes = c.attr_ints({"axes"}, &found);
    if (!found) {
      axes.resize(size_t(r));
      std::iota(axes.begin(), axes.end(), 0);
    }
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
