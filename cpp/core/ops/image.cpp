// Image and detection ops: sample_grid (PyTorch's grid_sample, MPSGraph's sampleGrid...),
// im_to_col / col_to_im (F.unfold / F.fold, MPSGraph's imToCol / colToIm), and
// hamming_distance (MPSGraph's HammingDistanceWithPrimaryTensor:).
//
// sample_grid is a composite of elementwise ops and gather_along_axis: the corner weights and
// reflections are ordinary ops, so its gradients with respect to x and to the grid (and second
// order) come from the decomposition, with PyTorch's conventions (floor and round have no
// gradient, clamping stops it outside the range). im_to_col and col_to_im are linear and each
// is the other's gradient; both are composites (pad and strided slices) so that every backend
// runs them, the CPU through its kernels.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/image_attrs.h"
#include "core/ops/shape_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;

// ---- hamming_distance ----

// (..., M, K) and (..., N, K) -> (..., M, N): popcount(x ^ y) summed over K, batch dims broadcast.
std::vector<TensorType> infer_hamming_distance(InferCtx& c) {
  require_class(c, 0, kInt);
  c.same_dtype(0, 1);
  const Shape &xs = c.in[0].shape, &ys = c.in[1].shape;
  if (xs.size() < 2 || ys.size() < 2)
    c.fail(ErrorKind::Value, "expects two batches of vectors (rank >= 2: (..., M, K) and (..., N, K)), got " +
                                 shape_str(xs) + " and " + shape_str(ys));
  if (xs.back() >= 0 && ys.back() >= 0 && xs.back() != ys.back())
    c.fail(ErrorKind::Value, "vector lengths differ: " + shape_str(xs) + " and " + shape_str(ys));
  auto b = broadcast_shapes(Shape(xs.begin(), xs.end() - 2), Shape(ys.begin(), ys.end() - 2));
  if (!b) c.fail(ErrorKind::Value, "batch dimensions do not broadcast: " + shape_str(xs) + " and " + shape_str(ys));
  DType t = c.dtype("dtype");
  if (t != DType::UInt32 && t != DType::UInt16)
    c.fail(ErrorKind::Type, std::string("dtype must be uint32 or uint16, got ") + dtype_name(t));
  Shape out = *b;
  out.push_back(xs[xs.size() - 2]);
  out.push_back(ys[ys.size() - 2]);
  return {{t, out}};
}

// ---- im_to_col / col_to_im ----

ImToColAttrs decode_im_to_col(const Attrs& a) {
  ImToColAttrs r;
  r.kernel = get_attr<Ints>(a, "kernel_sizes");
  r.stride = get_attr<Ints>(a, "strides");
  r.dilation = get_attr<Ints>(a, "dilation_rates");
  r.padding = get_attr<Ints>(a, "padding");
  if (has_attr(a, "output_size")) r.image = get_attr<Ints>(a, "output_size");
  return r;
}

// Checks the window attributes; returns the number of blocks along H and W for an image (h, w)
// (-1 where unknown).
std::pair<int64_t, int64_t> blocks(InferCtx& c, int64_t h, int64_t w) {
  const char* names[] = {"kernel_sizes", "strides", "dilation_rates"};
  for (const char* n : names) {
    const Ints& v = c.ints(n);
    if (v.size() != 2 || v[0] < 1 || v[1] < 1)
      c.fail(ErrorKind::Value, std::string(n) + " needs 2 positive values (height, width), got " +
                                   std::to_string(v.size()) + " values");
  }
  const Ints& p = c.ints("padding");
  if (p.size() != 4 || p[0] < 0 || p[1] < 0 || p[2] < 0 || p[3] < 0)
    c.fail(ErrorKind::Value, "padding needs 4 non-negative values (top, bottom, left, right)");
  const Ints &k = c.ints("kernel_sizes"), &s = c.ints("strides"), &d = c.ints("dilation_rates");
  auto count = [&](int64_t n, int i) -> int64_t {
    if (n < 0) return -1;
    int64_t span = d[size_t(i)] * (k[size_t(i)] - 1) + 1, padded = n + p[size_t(2 * i)] + p[size_t(2 * i + 1)];
    if (padded < span)
      c.fail(ErrorKind::Value, "the window (" + std::to_string(span) + " with dilation) is larger than the padded " +
                                   (i == 0 ? "height " : "width ") + std::to_string(padded));
    return (padded - span) / s[size_t(i)] + 1;
  };
  return {count(h, 0), count(w, 1)};
}

int64_t mul_known(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a * b; }

std::vector<TensorType> infer_im_to_col(InferCtx& c) {
  require_class(c, 0, kNumeric);
  const Shape& xs = c.in[0].shape;
  if (xs.size() != 4) c.fail(ErrorKind::Value, "expects an NCHW image batch (rank 4), got " + type_str(c.in[0]));
  auto [bh, bw] = blocks(c, xs[2], xs[3]);
  const Ints& k = c.ints("kernel_sizes");
  return {{c.in[0].dtype, {xs[0], mul_known(xs[1], k[0] * k[1]), mul_known(bh, bw)}}};
}

std::vector<TensorType> infer_col_to_im(InferCtx& c) {
  require_class(c, 0, kNumeric);
  const Shape& xs = c.in[0].shape;
  if (xs.size() != 3)
    c.fail(ErrorKind::Value, "expects columns (N, C * kernel height * kernel width, blocks) of rank 3, got " +
                                 type_str(c.in[0]));
  const Ints& size = c.ints("output_size");
  if (size.size() != 2 || size[0] < 1 || size[1] < 1)
    c.fail(ErrorKind::Value, "output_size needs 2 positive values (height, width)");
  auto [bh, bw] = blocks(c, size[0], size[1]);
  const Ints& k = c.ints("kernel_sizes");
  const int64_t kk = k[0] * k[1];
  if (xs[1] >= 0 && xs[1] % kk != 0)
    c.fail(ErrorKind::Value, "dim 1 of " + type_str(c.in[0]) + " is not a multiple of the kernel's " +
                                 std::to_string(kk) + " elements");
  if (xs[2] >= 0 && xs[2] != bh * bw)
    c.fail(ErrorKind::Value, "dim 2 of " + type_str(c.in[0]) + " must be the number of blocks, " +
                                 std::to_string(bh * bw) + " (" + std::to_string(bh) + " x " + std::to_string(bw) +
                                 ") for output_size (" + std::to_string(size[0]) + ", " + std::to_string(size[1]) + ")");
  return {{c.in[0].dtype, {xs[0], xs[1] < 0 ? -1 : xs[1] / kk, size[0], size[1]}}};
}

Attrs window_attrs(const ImToColAttrs& a) {
  return {{"kernel_sizes", a.kernel}, {"strides", a.stride}, {"dilation_rates", a.dilation}, {"padding", a.padding}};
}

// col_to_im onto the shape of `like` (known at run time).
std::vector<TensorType> infer_im_to_col_gradient(InferCtx& c) {
  require_class(c, 0, kNumeric);
  const Shape &ds = c.in[0].shape, &ls = c.in[1].shape;
  if (ds.size() != 3 || ls.size() != 4)
    c.fail(ErrorKind::Value, "expects columns (N, C * kh * kw, L) and an NCHW 'like', got " + type_str(c.in[0]) +
                                 " and " + type_str(c.in[1]));
  auto [bh, bw] = blocks(c, ls[2], ls[3]);
  const Ints& k = c.ints("kernel_sizes");
  const int64_t rows = mul_known(ls[1], k[0] * k[1]), l = mul_known(bh, bw);
  if ((ds[1] >= 0 && rows >= 0 && ds[1] != rows) || (ds[2] >= 0 && l >= 0 && ds[2] != l))
    c.fail(ErrorKind::Value, "columns " + shape_str(ds) + " do not fit an image " + shape_str(ls));
  return {{c.in[0].dtype, ls}};
}

std::vector<ValueRef> grad_im_to_col(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  return {call(c.g, "im_to_col_gradient", {c.dy[0], c.x(0)}, window_attrs(typed_attrs<ImToColAttrs>(c.node)))};
}

std::vector<ValueRef> grad_col_to_im(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}};
  std::vector<ValueRef> r{call(c.g, "im_to_col", {c.dy[0]}, window_attrs(typed_attrs<ImToColAttrs>(c.node)))};
  r.resize(c.node.inputs.size());  // im_to_col_gradient's `like` has none
  return r;
}

// The decompositions use pad, strided_slice, slice_gradient, stack, reshape and addition only,
// which every backend runs (MPSGraph's imToCol / colToIm are not used: their column layout is
// undocumented). A tap (i, j) of the window reads the padded image at rows i * dh + s * r: a
// strided slice whose end counts from the end, so it needs no known image size.
Attrs slice_attrs(const StridedSliceAttrs& s) {
  return {{"starts", s.starts}, {"ends", s.ends}, {"strides", s.strides},
          {"start_mask", s.start_mask}, {"end_mask", s.end_mask}, {"squeeze_mask", s.squeeze_mask}};
}

StridedSliceAttrs tap_slice(const ImToColAttrs& a, int64_t i, int64_t j) {
  StridedSliceAttrs s{Ints(4, 0), Ints(4, 0), {1, 1, a.stride[0], a.stride[1]}, 3, 3, 0};
  const int64_t tap[2] = {i, j};
  for (size_t d = 0; d < 2; ++d) {
    s.starts[d + 2] = tap[d] * a.dilation[d];
    s.ends[d + 2] = -a.dilation[d] * (a.kernel[d] - 1 - tap[d]);
    if (s.ends[d + 2] == 0) s.end_mask |= int64_t(1) << (d + 2);
  }
  return s;
}

Attrs padding_attrs(const ImToColAttrs& a) {
  return {{"left_padding", Ints{0, 0, a.padding[0], a.padding[2]}},
          {"right_padding", Ints{0, 0, a.padding[1], a.padding[3]}}};
}

// (N, C, H, W) -> (N, C * kh * kw, L): the taps' slices stacked after the channel dim.
std::vector<ValueRef> expand_im_to_col(Graph& g, const std::vector<ValueRef>& in, const Attrs& attrs) {
  const ImToColAttrs a = decode_im_to_col(attrs);
  ValueRef padded = call(g, "pad", {in[0]}, padding_attrs(a));
  std::vector<ValueRef> taps;
  for (int64_t i = 0; i < a.kernel[0]; ++i)
    for (int64_t j = 0; j < a.kernel[1]; ++j)
      taps.push_back(call(g, "strided_slice", {padded}, slice_attrs(tap_slice(a, i, j))));
  ValueRef stacked = call(g, "stack", taps, {{"axis", int64_t(2)}});  // (N, C, kh * kw, bh, bw)
  const Shape& s = g.type(stacked).shape;
  if (shape_known(s))
    return {call(g, "reshape", {stacked}, {{"shape", Shape{s[0], s[1] * s[2], s[3] * s[4]}}})};
  // unknown dims (a picture before specialisation): reshape onto zeros (N, C * kh * kw, L) made of
  // zeros (N, C, 1) + (1, 1, L), tiled; emptied slices padded by one, so zero-size dims work
  auto one_zero = [&](ValueRef v, Ints dims) {
    StridedSliceAttrs e{Ints(4, 0), Ints(4, 0), Ints(4, 1), 15, 15, 0};
    Ints after(4, 0);
    for (int64_t d : dims) {
      e.start_mask &= ~(int64_t(1) << d), e.end_mask &= ~(int64_t(1) << d);
      after[size_t(d)] = 1;
    }
    return call(g, "pad", {call(g, "strided_slice", {v}, slice_attrs(e))},
                {{"left_padding", Ints(4, 0)}, {"right_padding", after}});
  };
  ValueRef nc = call(g, "squeeze", {one_zero(padded, {2, 3})}, {{"axes", Ints{3}}});  // (N, C, 1)
  ValueRef l = call(g, "reshape", {one_zero(taps[0], {0, 1})}, {{"shape", Shape{1, 1, -1}}});  // (1, 1, L)
  ValueRef like = call(g, "tile", {bin(g, "addition", nc, l)}, {{"multiples", Ints{1, a.kernel[0] * a.kernel[1], 1}}});
  return {call(g, "reshape_like", {stacked, like})};
}

// The adjoint: each tap's rows of `cols` placed back into the zero padded image `zero` by
// slice_gradient and summed, then the padding cropped.
ValueRef fold_columns(Graph& g, ValueRef cols, ValueRef zero, const ImToColAttrs& a) {
  const int64_t kk = a.kernel[0] * a.kernel[1];
  ValueRef blocks_like = call(g, "strided_slice", {zero}, slice_attrs(tap_slice(a, 0, 0)));  // (N, C, bh, bw)
  ValueRef sum;
  for (int64_t i = 0; i < a.kernel[0]; ++i)
    for (int64_t j = 0; j < a.kernel[1]; ++j) {
      StridedSliceAttrs rows{{0, i * a.kernel[1] + j, 0}, {0, 0, 0}, {1, kk, 1}, 5, 7, 0};  // rows c * kk + tap
      ValueRef tap = call(g, "reshape_like", {call(g, "strided_slice", {cols}, slice_attrs(rows)), blocks_like});
      tap = call(g, "slice_gradient", {tap, zero}, slice_attrs(tap_slice(a, i, j)));
      sum = sum.valid() ? bin(g, "addition", sum, tap) : tap;
    }
  StridedSliceAttrs crop{{0, 0, a.padding[0], a.padding[2]}, {0, 0, -a.padding[1], -a.padding[3]}, {1, 1, 1, 1}, 3,
                         3 | (a.padding[1] == 0 ? 4 : 0) | (a.padding[3] == 0 ? 8 : 0), 0};
  return call(g, "strided_slice", {sum}, slice_attrs(crop));
}

// float16 / bfloat16 columns are summed in float32 (as the CPU kernel sums in double): one rounding.
DType sum_dtype(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t; }
ValueRef cast_to(Graph& g, ValueRef v, DType t) {
  return g.type(v).dtype == t ? v : call(g, "cast", {v}, {{"dtype", t}});
}

std::vector<ValueRef> expand_col_to_im(Graph& g, const std::vector<ValueRef>& in, const Attrs& attrs) {
  const ImToColAttrs a = decode_im_to_col(attrs);
  const int64_t kk = a.kernel[0] * a.kernel[1];
  const DType dt = g.type(in[0]).dtype;
  ValueRef cols = cast_to(g, in[0], sum_dtype(dt));
  // a zero (N, C, 1, 1) from the first column of tap 0, padded up to the padded image
  StridedSliceAttrs first{{0, 0, 0}, {0, 0, 1}, {1, kk, 1}, 3, 3, 0};
  ValueRef z = zeros_like(g, call(g, "strided_slice", {cols}, slice_attrs(first)));
  z = call(g, "expand_dims", {z}, {{"axes", Ints{3}}});
  const int64_t hp = a.image[0] + a.padding[0] + a.padding[1], wp = a.image[1] + a.padding[2] + a.padding[3];
  z = call(g, "pad", {z}, {{"left_padding", Ints{0, 0, 0, 0}}, {"right_padding", Ints{0, 0, hp - 1, wp - 1}}});
  return {cast_to(g, fold_columns(g, cols, z, a), dt)};
}

std::vector<ValueRef> expand_im_to_col_gradient(Graph& g, const std::vector<ValueRef>& in, const Attrs& attrs) {
  const ImToColAttrs a = decode_im_to_col(attrs);
  const DType dt = g.type(in[0]).dtype, ct = sum_dtype(dt);
  ValueRef zero = call(g, "full_like", {in[1]}, {{"value", 0.0}, {"dtype", ct}});
  return {cast_to(g, fold_columns(g, cast_to(g, in[0], ct), call(g, "pad", {zero}, padding_attrs(a)), a), dt)};
}

// ---- sample_grid ----

SampleGridAttrs decode_sample_grid(const Attrs& a) {
  const std::string& p = get_attr<std::string>(a, "padding_mode");
  return {get_attr<std::string>(a, "mode") == "nearest",
          p == "border" ? GridPadding::Border : p == "reflection" ? GridPadding::Reflection : GridPadding::Zeros,
          get_attr<bool>(a, "align_corners")};
}

std::vector<TensorType> infer_sample_grid(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 1);
  const Shape &xs = c.in[0].shape, &gs = c.in[1].shape;
  if (xs.size() != 4) c.fail(ErrorKind::Value, "expects an NCHW image batch x (rank 4), got " + type_str(c.in[0]));
  if (gs.size() != 4 || (gs[3] >= 0 && gs[3] != 2))
    c.fail(ErrorKind::Value, "expects a grid (N, H_out, W_out, 2) of (x, y) coordinates, got " + type_str(c.in[1]));
  if (xs[0] >= 0 && gs[0] >= 0 && xs[0] != gs[0])
    c.fail(ErrorKind::Value, "batch sizes differ: x " + shape_str(xs) + ", grid " + shape_str(gs));
  const std::string& m = c.s("mode");
  if (m != "bilinear" && m != "nearest") c.fail(ErrorKind::Value, "mode must be 'bilinear' or 'nearest', not '" + m + "'");
  const std::string& p = c.s("padding_mode");
  if (p != "zeros" && p != "border" && p != "reflection")
    c.fail(ErrorKind::Value, "padding_mode must be 'zeros', 'border' or 'reflection', not '" + p + "'");
  return {{c.in[0].dtype, {xs[0] >= 0 ? xs[0] : gs[0], xs[1], gs[1], gs[2]}}};
}

// The decomposition works with unknown dims too (a composite's gradient is built from it when
// the graph is built): image sizes come from shape_of, indices go through gather_nd with one batch
// dim, and nothing is reshaped.

// torch's reflect_coordinates: v reflected into [lo, hi] (lo == hi gives lo); lo and hi are
// tensors of shape (1,).
ValueRef reflect(Graph& g, ValueRef v, ValueRef lo, ValueRef hi) {
  ValueRef span = bin(g, "subtraction", hi, lo);
  ValueRef ok = call(g, "greater_than", {span, k(g, 0.0, span)});
  span = call(g, "select", {ok, span, k(g, 1.0, span)});  // no 0 / 0 on either branch
  ValueRef a = un(g, "absolute", bin(g, "subtraction", v, lo));
  ValueRef flips = un(g, "floor", bin(g, "division", a, span));
  ValueRef extra = bin(g, "subtraction", a, bin(g, "multiplication", flips, span));
  ValueRef half = un(g, "floor", bin(g, "multiplication", flips, k(g, 0.5, v)));
  ValueRef even = call(g, "equal", {bin(g, "multiplication", half, k(g, 2.0, v)), flips});
  ValueRef r = call(g, "select", {even, bin(g, "addition", extra, lo),
                                  bin(g, "subtraction", bin(g, "addition", span, lo), extra)});
  return call(g, "select", {ok, r, zeros_like(g, r)});
}

// Source pixel coordinate along a dim of n pixels (a (1,) tensor) for normalised grid values v.
ValueRef source_coordinate(Graph& g, ValueRef v, ValueRef n, const std::string& padding, bool align) {
  ValueRef one = k(g, 1.0, v), half = k(g, 0.5, v);
  ValueRef last = bin(g, "subtraction", n, one);
  ValueRef vp1 = bin(g, "addition", v, one);
  ValueRef s = align ? bin(g, "multiplication", bin(g, "multiplication", vp1, last), half)
                     : bin(g, "multiplication", bin(g, "subtraction", bin(g, "multiplication", vp1, n), one), half);
  auto clip = [&](ValueRef u) { return call(g, "clamp", {u, k(g, 0.0, u), last}); };
  if (padding == "border") return clip(s);
  if (padding == "reflection")
    return clip(align ? reflect(g, s, zeros_like(g, n), last)
                      : reflect(g, s, k(g, -0.5, n), bin(g, "subtraction", n, half)));
  return s;
}

struct GridCtx {
  Graph& g;
  ValueRef nhwc;  // x as (N, H, W, C)
  ValueRef h, w;  // (1,) sizes in the compute dtype
};

// The pixels at integer coordinates (xi, yi) ((N, Ho, Wo) each, as floats), weighted by wgt and
// zero outside the image: (N, Ho, Wo, C).
ValueRef corner(const GridCtx& t, ValueRef xi, ValueRef yi, ValueRef wgt) {
  Graph& g = t.g;
  auto inside = [&](ValueRef v, ValueRef size) {
    return call(g, "logical_and", {call(g, "greater_than_or_equal_to", {v, k(g, 0.0, v)}),
                                   call(g, "less_than_or_equal_to", {v, bin(g, "subtraction", size, k(g, 1.0, v))})});
  };
  ValueRef valid = call(g, "logical_and", {inside(xi, t.w), inside(yi, t.h)});
  auto index = [&](ValueRef v, ValueRef size) {
    ValueRef c = call(g, "clamp", {v, k(g, 0.0, v), bin(g, "subtraction", size, k(g, 1.0, v))});
    return call(g, "cast", {c}, {{"dtype", DType::Int32}});
  };
  ValueRef idx = call(g, "stack", {index(yi, t.h), index(xi, t.w)}, {{"axis", int64_t(-1)}});
  ValueRef px = call(g, "gather_nd", {t.nhwc, idx}, {{"batch_dims", int64_t(1)}});
  ValueRef wv = call(g, "select", {valid, wgt, zeros_like(g, wgt)});
  return bin(g, "multiplication", px, call(g, "expand_dims", {wv}, {{"axes", Ints{-1}}}));
}

std::vector<ValueRef> expand_sample_grid(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  const std::string& mode = get_attr<std::string>(a, "mode");
  const std::string& padding = get_attr<std::string>(a, "padding_mode");
  const bool align = get_attr<bool>(a, "align_corners");
  // float16 / bfloat16 compute in float32 (coordinates and weights lose too much in half)
  const DType dt = g.type(in[0]).dtype, ct = dt == DType::Float64 ? dt : DType::Float32;
  auto to = [&](ValueRef v, DType t) { return g.type(v).dtype == t ? v : call(g, "cast", {v}, {{"dtype", t}}); };
  ValueRef x = to(in[0], ct), grid = to(in[1], ct);
  ValueRef shape = call(g, "shape_of", {x});
  auto size = [&](int64_t d) {
    return to(call(g, "slice", {shape}, {{"axis", int64_t(0)}, {"start", d}, {"length", int64_t(1)}}), ct);
  };
  GridCtx t{g, call(g, "transpose", {x}, {{"permutation", Ints{0, 2, 3, 1}}}), size(2), size(3)};
  auto component = [&](int64_t i) {
    ValueRef s = call(g, "slice", {grid}, {{"axis", int64_t(3)}, {"start", i}, {"length", int64_t(1)}});
    return call(g, "squeeze", {s}, {{"axes", Ints{3}}});
  };
  ValueRef ix = source_coordinate(g, component(0), t.w, padding, align);
  ValueRef iy = source_coordinate(g, component(1), t.h, padding, align);
  ValueRef out;
  if (mode == "nearest") {
    out = corner(t, un(g, "round", ix), un(g, "round", iy), ones_like(g, ix));
  } else {
    ValueRef x0 = un(g, "floor", ix), y0 = un(g, "floor", iy);
    ValueRef x1 = bin(g, "addition", x0, k(g, 1.0, x0)), y1 = bin(g, "addition", y0, k(g, 1.0, y0));
    ValueRef wx1 = bin(g, "subtraction", ix, x0), wy1 = bin(g, "subtraction", iy, y0);
    ValueRef wx0 = bin(g, "subtraction", k(g, 1.0, wx1), wx1), wy0 = bin(g, "subtraction", k(g, 1.0, wy1), wy1);
    auto mul = [&](ValueRef p, ValueRef q) { return bin(g, "multiplication", p, q); };
    out = corner(t, x0, y0, mul(wx0, wy0));
    out = bin(g, "addition", out, corner(t, x1, y0, mul(wx1, wy0)));
    out = bin(g, "addition", out, corner(t, x0, y1, mul(wx0, wy1)));
    out = bin(g, "addition", out, corner(t, x1, y1, mul(wx1, wy1)));
  }
  return {to(call(g, "transpose", {out}, {{"permutation", Ints{0, 3, 1, 2}}}), dt)};
}

// ---- stencil ----

const char* const kReductions[] = {"sum", "product", "min", "max"};
const char* const kBoundaries[] = {"constant", "zero", "clamp_to_edge", "reflect", "symmetric", "periodic",
                                   "anti_periodic"};

template <size_t N>
int index_of(const char* const (&names)[N], const std::string& s) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return int(i);
  return -1;
}

StencilAttrs decode_stencil(const Attrs& a) {
  StencilAttrs r;
  r.reduction = StencilReduction(index_of(kReductions, get_attr<std::string>(a, "reduction_mode")));
  r.boundary = StencilBoundary(index_of(kBoundaries, get_attr<std::string>(a, "boundary_mode")));
  r.padding_constant = get_attr<double>(a, "padding_constant");
  r.strides = get_attr<Ints>(a, "strides");
  r.dilation_rates = get_attr<Ints>(a, "dilation_rates");
  r.offsets = get_attr<std::string>(a, "padding_style") == "explicit_offset" ? get_attr<Ints>(a, "offsets")
                                                                             : Ints(4, 0);
  r.padding = get_attr<Ints>(a, "padding");
  return r;
}

// Resolves padding_style into explicit padding (stored back into `padding`) and returns the
// output shape.
std::vector<TensorType> infer_stencil(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 1);
  const Shape &xs = c.in[0].shape, &ws = c.in[1].shape;
  if (xs.size() < 4) c.fail(ErrorKind::Value, "expects x of rank >= 4 (the window covers its last 4 dims), got " +
                                                  type_str(c.in[0]));
  if (ws.size() != 4) c.fail(ErrorKind::Value, "expects 4-D weights, got " + type_str(c.in[1]));
  for (const char* n : {"strides", "dilation_rates", "offsets"}) {
    const Ints& v = c.ints(n);
    if (v.size() != 4) c.fail(ErrorKind::Value, std::string(n) + " needs 4 values, got " + std::to_string(v.size()));
    for (int64_t e : v)
      if (std::string(n) != "offsets" && e < 1) c.fail(ErrorKind::Value, std::string(n) + " must be positive");
  }
  if (index_of(kReductions, c.s("reduction_mode")) < 0)
    c.fail(ErrorKind::Value, "reduction_mode must be 'sum', 'product', 'min' or 'max', not '" + c.s("reduction_mode") +
                                 "'");
  if (index_of(kBoundaries, c.s("boundary_mode")) < 0)
    c.fail(ErrorKind::Value, "boundary_mode must be 'constant', 'zero', 'clamp_to_edge', 'reflect', 'symmetric', "
                             "'periodic' or 'anti_periodic', not '" + c.s("boundary_mode") + "'");
  const std::string& style = c.s("padding_style");
  if (style != "explicit" && style != "valid" && style != "same" && style != "explicit_offset")
    c.fail(ErrorKind::Value, "padding_style must be 'explicit', 'valid', 'same' or 'explicit_offset', not '" + style +
                                 "'");
  Ints pad = c.ints("padding");
  if (pad.size() != 8) c.fail(ErrorKind::Value, "padding needs 8 values ((before, after) per window dim)");
  for (int64_t p : pad)
    if (p < 0) c.fail(ErrorKind::Value, "padding must be non-negative");
  const Ints &st = c.ints("strides"), &dl = c.ints("dilation_rates");
  Shape out(xs.begin(), xs.end());
  bool resolved = true;
  for (size_t d = 0; d < 4; ++d) {
    const size_t ax = xs.size() - 4 + d;
    const int64_t n = xs[ax], k = ws[d];
    if (n < 0 || k < 0) {
      out[ax] = -1;
      resolved = resolved && style != "same";
      continue;
    }
    const int64_t span = dl[d] * (k - 1) + 1;
    if (style == "valid") pad[2 * d] = pad[2 * d + 1] = 0;
    if (style == "same") {  // TF_SAME: the extra padding goes after
      const int64_t o = (n + st[d] - 1) / st[d], total = std::max<int64_t>((o - 1) * st[d] + span - n, 0);
      pad[2 * d] = total / 2;
      pad[2 * d + 1] = total - total / 2;
    }
    const int64_t padded = n + pad[2 * d] + pad[2 * d + 1];
    if (padded < span)
      c.fail(ErrorKind::Value, "the window (" + std::to_string(span) + " with dilation) is larger than the padded dim " +
                                   std::to_string(ax) + " (" + std::to_string(padded) + ") of " + type_str(c.in[0]));
    out[ax] = (padded - span) / st[d] + 1;
  }
  if (resolved) c.attrs["padding"] = pad;
  return {{c.in[0].dtype, out}};
}

// ---- non_maximum_suppression ----

const char* const kCoordinateModes[] = {"corners_height_first", "corners_width_first", "centers_height_first",
                                        "centers_width_first"};

NmsAttrs decode_nms(const Attrs& a) {
  NmsAttrs r;
  r.iou_threshold = get_attr<double>(a, "iou_threshold");
  r.score_threshold = get_attr<double>(a, "score_threshold");
  r.per_class = get_attr<bool>(a, "per_class_suppression");
  const std::string& m = get_attr<std::string>(a, "coordinate_mode");
  for (int i = 0; i < 4; ++i)
    if (m == kCoordinateModes[i]) r.coordinate_mode = i;
  return r;
}

std::vector<TensorType> infer_nms(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 1);
  const Shape &bs = c.in[0].shape, &ss = c.in[1].shape;
  if (bs.size() != 3 || (bs[2] >= 0 && bs[2] != 4))
    c.fail(ErrorKind::Value, "expects boxes (N, B, 4), got " + type_str(c.in[0]));
  if (ss.size() != 3)
    c.fail(ErrorKind::Value, "expects scores (N, B, K) (one per class), got " + type_str(c.in[1]));
  for (size_t d = 0; d < 2; ++d)
    if (bs[d] >= 0 && ss[d] >= 0 && bs[d] != ss[d])
      c.fail(ErrorKind::Value, "boxes " + shape_str(bs) + " and scores " + shape_str(ss) + " differ in (N, B)");
  const double iou = c.f("iou_threshold");
  if (!(iou >= 0 && iou <= 1)) c.fail(ErrorKind::Value, "iou_threshold must be in [0, 1], got " + std::to_string(iou));
  const std::string& m = c.s("coordinate_mode");
  bool known = false;
  for (const char* k : kCoordinateModes) known = known || m == k;
  if (!known)
    c.fail(ErrorKind::Value, "coordinate_mode must be 'corners_height_first', 'corners_width_first', "
                             "'centers_height_first' or 'centers_width_first', not '" + m + "'");
  return {{DType::Int32, {bs[0] >= 0 ? bs[0] : ss[0], bs[1] >= 0 ? bs[1] : ss[1]}}};
}

std::vector<AttrSpec> window_specs() {
  return {attr("kernel_sizes", AttrKind::Ints, AttrNone{}, "window (height, width)"),
          attr("strides", AttrKind::Ints, Ints{1, 1}, "step (height, width)"),
          attr("dilation_rates", AttrKind::Ints, Ints{1, 1}, "dilation (height, width)"),
          attr("padding", AttrKind::Ints, Ints{0, 0, 0, 0}, "zero padding (top, bottom, left, right)")};
}

}  // namespace

void register_image_ops() {
  register_op({.name = "hamming_distance",
               .doc = "Bitwise Hamming distances between two sets of integer vectors (MPSGraph's HammingDistance"
                      "WithPrimaryTensor:secondaryTensor:resultDataType:): x (..., M, K) and y (..., N, K) give "
                      "(..., M, N), the number of differing bits of x[..., m, :] and y[..., n, :]; batch dims "
                      "broadcast. The result dtype is uint32 or uint16.",
               .inputs = {{"x"}, {"y"}},
               .attrs = {attr("dtype", AttrKind::DType, DType::UInt32, "uint32 or uint16")},
               .infer = infer_hamming_distance,
               .differentiable = Differentiable::No,
               .family = "image"});
  std::vector<AttrSpec> fold = window_specs();
  fold.insert(fold.begin(), attr("output_size", AttrKind::Ints, AttrNone{}, "image (height, width)"));
  register_op({.name = "im_to_col",
               .doc = "Sliding windows of an NCHW image batch as columns (MPSGraph's imToCol, torch's F.unfold): "
                      "(N, C, H, W) -> (N, C * kh * kw, L), row c * kh * kw + i * kw + j holding pixel (i, j) of "
                      "each window of channel c, the L = blocks_h * blocks_w windows in row-major order. Padding "
                      "is zeros.",
               .inputs = {{"x"}},
               .attrs = window_specs(),
               .decode = attr_decoder(decode_im_to_col),
               .infer = infer_im_to_col,
               .grad = grad_im_to_col,
               .aliases = {"unfold"},
               .family = "image",
               .expand = expand_im_to_col});
  register_op({.name = "col_to_im",
               .doc = "The adjoint of im_to_col (MPSGraph's colToIm, torch's F.fold): columns (N, C * kh * kw, L) "
                      "summed back into an NCHW image of output_size; overlapping windows add up and padding is "
                      "dropped.",
               .inputs = {{"x"}},
               .attrs = fold,
               .decode = attr_decoder(decode_im_to_col),
               .infer = infer_col_to_im,
               .grad = grad_col_to_im,
               .aliases = {"fold"},
               .family = "image",
               .expand = expand_col_to_im});
  register_op({.name = "im_to_col_gradient",
               .doc = "col_to_im onto the image shape of `like` (the gradient of im_to_col, usable with unknown "
                      "dims).",
               .inputs = {{"dy"}, {"like", false, false, InputRole::ShapeOnly}},
               .attrs = window_specs(),
               .decode = attr_decoder(decode_im_to_col),
               .infer = infer_im_to_col_gradient,
               .grad = grad_col_to_im,
               .family = "image",
               .expand = expand_im_to_col_gradient});
  register_op({.name = "sample_grid",
               .doc = "Samples an NCHW image batch at normalised grid coordinates (torch's F.grid_sample, MPSGraph's "
                      "sampleGrid...): grid (N, H_out, W_out, 2) holds (x, y) in [-1, 1], -1 and 1 being the centres "
                      "(align_corners) or the outer edges of the corner pixels; the result is (N, C, H_out, W_out). "
                      "mode 'bilinear' or 'nearest' (halves round to even, as torch); padding_mode 'zeros', "
                      "'border' (clamp to the edge) or 'reflection'. Differentiable with respect to x and the grid "
                      "(nearest: x only).",
               .inputs = {{"x"}, {"grid"}},
               .attrs = {attr("mode", AttrKind::String, std::string("bilinear"), "'bilinear' or 'nearest'"),
                         attr("padding_mode", AttrKind::String, std::string("zeros"),
                              "'zeros', 'border' or 'reflection'"),
                         attr("align_corners", AttrKind::Bool, false,
                              "-1 and 1 are the centres of the corner pixels (else their outer edges)")},
               .decode = attr_decoder(decode_sample_grid),
               .infer = infer_sample_grid,
               .aliases = {"grid_sample"},
               .family = "image",
               .expand = expand_sample_grid});
  register_op({.name = "stencil",
               .doc = "A weighted reduction over a 4-D window sliding on the last 4 dims of x (MPSGraph's "
                      "stencilWithSourceTensor:weightsTensor:descriptor:): out[..., i] = reduce over k of "
                      "x[..., i * strides + k * dilation_rates - padding_before + offsets] * weights[k], with "
                      "reduction_mode 'sum', 'product', 'min' or 'max'. Reads outside x follow boundary_mode: "
                      "'zero', 'constant' (padding_constant), 'clamp_to_edge', 'reflect' (numpy's reflect), "
                      "'symmetric', 'periodic' or 'anti_periodic' (periodic, negated in odd periods). padding_style "
                      "'explicit' uses `padding` ((before, after) per window dim), 'valid' none, 'same' TF's SAME "
                      "(the extra element after); offsets shift the window's reads for 'explicit_offset' and are "
                      "ignored otherwise. Not differentiable.",
               .inputs = {{"x"}, {"weights"}},
               .attrs = {attr("reduction_mode", AttrKind::String, std::string("sum"), "'sum', 'product', 'min' or 'max'"),
                         attr("strides", AttrKind::Ints, Ints{1, 1, 1, 1}, "window step per dim"),
                         attr("dilation_rates", AttrKind::Ints, Ints{1, 1, 1, 1}, "window dilation per dim"),
                         attr("padding", AttrKind::Ints, Ints(8, 0), "(before, after) per window dim"),
                         attr("padding_style", AttrKind::String, std::string("explicit"),
                              "'explicit', 'valid', 'same' or 'explicit_offset'"),
                         attr("offsets", AttrKind::Ints, Ints{0, 0, 0, 0}, "read offsets ('explicit_offset' only)"),
                         attr("boundary_mode", AttrKind::String, std::string("zero"), "how reads outside x are made"),
                         attr("padding_constant", AttrKind::Float, 0.0, "the value read outside x for 'constant'")},
               .decode = attr_decoder(decode_stencil),
               .infer = infer_stencil,
               .differentiable = Differentiable::No,
               .family = "image"});
  register_op({.name = "non_maximum_suppression",
               .doc = "Greedy non-maximum suppression per batch item (MPSGraph's nonMaximumSuppressionWithBoxesTensor:"
                      "scoresTensor:...): boxes (N, B, 4), scores (N, B, K) with one score per class; a box's score "
                      "is its largest and its class the first class reaching it. Boxes scoring at most "
                      "score_threshold (or NaN) are dropped; the rest, by descending score (ties: lower index "
                      "first), are kept unless a kept box (of the same class, with per_class_suppression) overlaps "
                      "them with IoU > iou_threshold. Returns int32 (N, B): the kept box indices in that order, "
                      "padded with -1 (a fixed size, so it composes with gather). coordinate_mode: "
                      "'corners_height_first' (y1, x1, y2, x2; either corner first), 'corners_width_first' "
                      "(x1, y1, x2, y2), 'centers_height_first' (yc, xc, h, w), 'centers_width_first' "
                      "(xc, yc, w, h). Not differentiable.",
               .inputs = {{"boxes"}, {"scores"}},
               .attrs = {attr("iou_threshold", AttrKind::Float, 0.5, "suppress overlaps above this IoU, in [0, 1]"),
                         attr("score_threshold", AttrKind::Float, -std::numeric_limits<double>::infinity(),
                              "drop boxes scoring at most this"),
                         attr("per_class_suppression", AttrKind::Bool, false,
                              "a box suppresses only boxes of its own class"),
                         attr("coordinate_mode", AttrKind::String, std::string("corners_height_first"),
                              "the box encoding (see above)")},
               .decode = attr_decoder(decode_nms),
               .infer = infer_nms,
               .differentiable = Differentiable::No,
               .aliases = {"nms"},
               .family = "image"});
}

}  // namespace mg::ops
